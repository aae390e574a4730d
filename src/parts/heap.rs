//! The values of variable-length fields: a second ring, of chunk rows, in the lane
//! (`heap-N.dat`, docs/design/heap.md). Each `add` / `add_batch` call packs its values end
//! to end into chunks no earlier call wrote, each chunk written with the row protocol
//! (stamp "being written", payload, stamp complete) before the items that name them, so
//! a killed writer never leaves an item whose value is incomplete; an item's row keeps
//! where each value lies (`format::heap::VarSlot`), under the row's crc.
//!
//! A chunk's stamp names its index in the chunk stream, so a value is read back by
//! copying its pieces and then checking every chunk's stamp: a chunk overwritten since
//! (the ring lapped it) fails, and the value is never served mixed.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::heap::{VarSlot, next_call_start};
use crate::format::manifest::Superblock;
use crate::format::row::{self, RowLayout};
use crate::storage::io::{Access, Io};
use crate::storage::ring::Ring;
use crate::storage::{self, SegmentSet};

/// The chunk ring of one handle, and where the writer's next call puts its values.
#[derive(Debug)]
pub(crate) struct Heap {
    ring: Ring,
    /// Payload bytes of one chunk.
    chunk: u64,
    /// Where the next call's values begin: the start of a chunk no call wrote yet.
    next: u64,
    /// Chunks below this index are sealed (their crcs written).
    sealed: u64,
    /// `next` is known (the writer, a snapshot): a slot is checked against the live
    /// chunks. A reader of a buffer another process writes knows only the ring's size,
    /// and relies on the chunks' stamps.
    bounded: bool,
    /// The segment files.
    set: SegmentSet,
}

/// Why a value could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeapMiss {
    /// Chunk `chunk` holds another chunk (its stamp says so): the ring passed it.
    Stamp { chunk: u64, stamp: u64 },
    /// Chunk `chunk` is sealed and its crc does not match its bytes.
    Checksum {
        chunk: u64,
        stored: u32,
        computed: u32,
    },
}

impl Heap {
    /// Maps the chunk ring of the buffer `sb` describes, if it has one.
    pub(crate) fn open(
        io: &dyn Io,
        dir: &Path,
        sb: &Superblock,
        access: Access,
    ) -> Result<Option<Heap>> {
        let (Some(set), Some(geometry)) = (SegmentSet::heap(sb), sb.heap) else {
            return Ok(None);
        };
        let segments = (0..set.segment_count)
            .map(|n| storage::open_segment(io, dir, &set, n, access))
            .collect::<Result<Vec<_>>>()?;
        let chunk = geometry.chunk_bytes();
        let layout = RowLayout::of_chunks(chunk as usize);
        let ring = Ring::new(segments, layout, set.capacity, set.segment_slots)?;
        Ok(Some(Heap {
            ring,
            chunk,
            next: 0,
            sealed: 0,
            bounded: false,
            set,
        }))
    }

    /// The chunk rows, to mark or replace segments a snapshot links.
    pub(crate) fn ring_mut(&mut self) -> &mut Ring {
        &mut self.ring
    }

    /// Copies each segment that a snapshot links and that the next `count` chunks from
    /// `first` would change, so the snapshot keeps its bytes (copy-on-write); only the
    /// chunks from `live_from` (the oldest a live item names) are copied. Returns
    /// whether a file was replaced. Fails before anything is stored.
    pub(crate) fn make_private(
        &mut self,
        io: &dyn Io,
        dir: &Path,
        sb: &Superblock,
        live_from: u64,
        first: u64,
        count: u64,
    ) -> Result<bool> {
        let Some(set) = SegmentSet::heap(sb) else {
            return Ok(false);
        };
        if !self.ring.any_shared() {
            return Ok(false);
        }
        let cap = self.ring.capacity();
        let live = self.next_chunk().saturating_sub(live_from).min(cap);
        let mut copied = false;
        while let Some(s) = self.ring.first_shared(first % cap, count.min(cap)) {
            let rows = self.ring.rows_of(s, live_from % cap, live);
            let Some(old) = self.ring.segment(s) else {
                break;
            };
            let seg = storage::copy_segment(io, dir, &set, s as u64, old, &rows)?;
            self.ring.replace_segment(s, seg);
            copied = true;
        }
        Ok(copied)
    }

    /// Whether a snapshot links any chunk segment (a store would need a copy first).
    pub(crate) fn any_shared(&self) -> bool {
        self.ring.any_shared()
    }

    /// Reserves on disk each segment the next `count` chunks lie in that this handle
    /// has not reserved yet (segments are sparse until then; again after every open:
    /// reserving a reserved file changes nothing). Fails with nothing stored; a full
    /// disk is `DiskFull`.
    pub(crate) fn reserve(&mut self, io: &dyn Io, count: u64) -> Result<()> {
        self.ring
            .reserve(io, self.next_chunk(), count, |_, _| Ok(()))
    }

    /// Bytes of one chunk row (header and payload): the unit the value space is
    /// counted in.
    pub(crate) fn ring_stride(&self) -> u64 {
        self.set.stride
    }

    /// Payload bytes of one chunk.
    pub(crate) fn chunk_bytes(&self) -> u64 {
        self.chunk
    }

    /// Chunks in the ring.
    pub(crate) fn capacity(&self) -> u64 {
        self.ring.capacity()
    }

    /// The index of the next chunk a call writes.
    pub(crate) fn next_chunk(&self) -> u64 {
        self.next / self.chunk
    }

    /// Sets where the next call's values begin from the newest item's slots (the end of
    /// its last value), or from the stream's start when no item was ever added; chunks
    /// below are taken as sealed (they are covered by the commit the open settled on).
    pub(crate) fn resume_after(&mut self, newest: &[VarSlot]) {
        let end = newest.iter().map(VarSlot::end).max().unwrap_or(0);
        self.next = next_call_start(end, self.chunk);
        self.sealed = self.next_chunk();
        self.bounded = true;
    }

    /// Whether `slot` may name a live value: no longer than `max` (the field's bound, if
    /// it has one) nor the ring, and lying in the chunks the ring holds now (the
    /// `capacity` chunks before the next one a call writes). A slot read from a file is
    /// checked here before anything is allocated for it; the message says what is wrong.
    pub(crate) fn check_slot(
        &self,
        slot: VarSlot,
        max: Option<usize>,
    ) -> std::result::Result<(), String> {
        let ring_bytes = self.capacity().saturating_mul(self.chunk);
        let len = u64::from(slot.len);
        if len > ring_bytes || max.is_some_and(|m| len > m as u64) {
            return Err(format!(
                "a value of {len} bytes (at most {} allowed)",
                max.map_or(ring_bytes, |m| (m as u64).min(ring_bytes))
            ));
        }
        if !self.bounded {
            return Ok(());
        }
        let end = self.next;
        let start = self.next_chunk().saturating_sub(self.capacity()) * self.chunk;
        if slot.pos < start || slot.end() > end {
            return Err(format!(
                "bytes {}..{} of the chunk stream, outside the live {start}..{end}",
                slot.pos,
                slot.end()
            ));
        }
        Ok(())
    }

    /// Chunks a call whose values take `bytes` needs.
    pub(crate) fn chunks_for(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.chunk)
    }

    /// Writes `values`, in order, into the chunks from the next one on, and appends
    /// each value's slot to `slots`. The caller has made room (no live item names the
    /// chunks written) and checked that they fit the ring. Each chunk is written straight
    /// from the pieces of the values it holds.
    pub(crate) fn write(&mut self, values: &[&[u8]], slots: &mut Vec<VarSlot>) {
        let start = self.next;
        let mut pos = start;
        for value in values {
            slots.push(VarSlot {
                pos,
                len: value.len() as u32,
            });
            pos += value.len() as u64;
        }
        let chunk = self.chunk as usize;
        let mut pieces: Vec<&[u8]> = Vec::new();
        let (mut fill, mut index) = (0usize, self.next_chunk());
        for value in values {
            let mut rest: &[u8] = value;
            while !rest.is_empty() {
                let (head, tail) = rest.split_at(rest.len().min(chunk - fill));
                pieces.push(head);
                fill += head.len();
                rest = tail;
                if fill == chunk {
                    self.store_chunk(index, &pieces);
                    pieces.clear();
                    (fill, index) = (0, index + 1);
                }
            }
        }
        if fill > 0 {
            self.store_chunk(index, &pieces);
        }
        self.next = next_call_start(pos, self.chunk);
    }

    fn store_chunk(&mut self, index: u64, pieces: &[&[u8]]) {
        let slot = index % self.ring.capacity();
        self.ring.write_chunk(slot, index, pieces, || {
            crate::killpoint::hit("chunk-before-stamp");
        });
    }

    /// Appends `slot`'s value to `out`, then checks each chunk it lies in (see
    /// [`Heap::read_into`]); with `crc`, every chunk's crc too.
    pub(crate) fn read(
        &self,
        slot: VarSlot,
        out: &mut Vec<u8>,
        crc: bool,
    ) -> std::result::Result<(), HeapMiss> {
        self.append(slot, out);
        self.check_values(&[slot], crc).map_err(|(_, miss)| miss)
    }

    /// Copies `slot`'s value into `out` (its length), then checks each chunk it lies
    /// in: its stamp names the chunk, and with `crc` (the item was sealed by a flush)
    /// its crc holds. Checked after the copy, so a chunk rewritten during it fails.
    pub(crate) fn read_into(
        &self,
        slot: VarSlot,
        out: &mut [u8],
        crc: bool,
    ) -> std::result::Result<(), HeapMiss> {
        self.copy(slot, out);
        self.check_values(&[slot], crc).map_err(|(_, miss)| miss)
    }

    /// Appends `slot`'s value to `out`, unchecked as [`Heap::copy`]: exactly
    /// `slot.len` bytes, each written once, straight from the chunks.
    pub(crate) fn append(&self, slot: VarSlot, out: &mut Vec<u8>) {
        let cap = self.ring.capacity();
        let end = out.len() + slot.len as usize;
        for (index, off, n) in slot.pieces(self.chunk) {
            self.ring.append_field_at(index % cap, 0, off, n, out);
        }
        // A piece past its chunk's field appends nothing (pieces fit their chunk, so
        // only a bug would): the value keeps its length, and the checks that must
        // follow say what is wrong.
        out.resize(end, 0);
    }

    /// Copies `slot`'s value into `out` (its length), unchecked: [`Heap::check_values`]
    /// must follow before the bytes are trusted.
    pub(crate) fn copy(&self, slot: VarSlot, out: &mut [u8]) {
        let cap = self.ring.capacity();
        let mut at = 0;
        for (index, off, n) in slot.pieces(self.chunk) {
            if let Some(dst) = out.get_mut(at..at + n) {
                self.ring.read_field_at(index % cap, 0, off, dst);
            }
            at += n;
        }
    }

    /// Checks every chunk the values of `slots` lie in, once each however many of them
    /// share it (one item's values lie end to end, so neighbours share their boundary
    /// chunks): its stamp names it and, with `crc`, its crc holds. Called after the
    /// values were copied, so a chunk rewritten during a copy fails. On a miss, the
    /// position in `slots` of the value it concerns.
    pub(crate) fn check_values(
        &self,
        slots: &[VarSlot],
        crc: bool,
    ) -> std::result::Result<(), (usize, HeapMiss)> {
        let mut done: Option<std::ops::Range<u64>> = None;
        for (k, slot) in slots.iter().enumerate() {
            let chunks = slot.chunks(self.chunk);
            for index in chunks.clone() {
                // Values in slot order ascend through the chunks (a call packs them so),
                // so a chunk already checked is in the span checked so far.
                if done.as_ref().is_some_and(|d| d.contains(&index)) {
                    continue;
                }
                self.check_chunk(index, crc).map_err(|miss| (k, miss))?;
            }
            done = match done {
                Some(d) if d.end >= chunks.start && chunks.end >= d.start => {
                    Some(d.start.min(chunks.start)..d.end.max(chunks.end))
                }
                _ => Some(chunks),
            };
        }
        Ok(())
    }

    /// Whether every chunk `slot`'s value lies in holds that chunk (stamps), and with
    /// `crc` whether their crcs hold too: recovery's test of an item's value.
    pub(crate) fn intact(&self, slot: VarSlot, crc: bool) -> bool {
        slot.chunks(self.chunk)
            .all(|index| self.check_chunk(index, crc).is_ok())
    }

    fn check_chunk(&self, index: u64, crc: bool) -> std::result::Result<(), HeapMiss> {
        let slot = index % self.ring.capacity();
        if !crc {
            let stamp = self.ring.stamp(slot);
            return match stamp == row::stamp_of(index) {
                true => Ok(()),
                false => Err(HeapMiss::Stamp {
                    chunk: index,
                    stamp,
                }),
            };
        }
        let c = self
            .ring
            .check(slot)
            .unwrap_or(crate::storage::map::RowCheck {
                stamp: 0,
                crc_ok: false,
                stored_crc: 0,
                computed_crc: 0,
            });
        if c.stamp != row::stamp_of(index) {
            return Err(HeapMiss::Stamp {
                chunk: index,
                stamp: c.stamp,
            });
        }
        if !c.crc_ok {
            return Err(HeapMiss::Checksum {
                chunk: index,
                stored: c.stored_crc,
                computed: c.computed_crc,
            });
        }
        Ok(())
    }

    /// Seals the chunks written since the last seal (their crcs), for a flush.
    pub(crate) fn seal(&mut self) {
        let (from, to) = (self.sealed, self.next_chunk());
        let cap = self.ring.capacity();
        if to > from {
            let count = (to - from).min(cap);
            let first = to - count;
            self.ring.seal(first % cap, first, count);
        }
        self.sealed = to;
    }

    /// Seals chunks `first..` up to the next one a call writes (recovery: the chunks of
    /// items rolled forward past the commit, which no flush sealed).
    pub(crate) fn seal_from(&mut self, first: u64) {
        self.sealed = first.min(self.next_chunk());
        self.seal();
    }

    /// Writes back every chunk (msync), for recovery.
    pub(crate) fn flush_all(&self, io: &dyn Io, dir: &Path) -> Result<()> {
        self.ring
            .flush_all(io)
            .map_err(|(s, e)| Error::io("msync", storage::heap_segment_path(dir, s as u64), e))
    }

    /// Chunks below this index are sealed.
    pub(crate) fn sealed(&self) -> u64 {
        self.sealed
    }

    /// Writes back the chunks `from..to` (msync), for a flush: before the rows that
    /// name them and the commit that covers those.
    pub(crate) fn flush(&self, io: &dyn Io, dir: &Path, from: u64, to: u64) -> Result<()> {
        let cap = self.ring.capacity();
        let count = to.saturating_sub(from).min(cap);
        if count == 0 {
            return Ok(());
        }
        let first = to - count;
        self.ring
            .flush_slots(io, first % cap, count)
            .map_err(|(s, e)| Error::io("msync", storage::heap_segment_path(dir, s as u64), e))
    }

    /// The error for live item `index` whose value missed.
    pub(crate) fn error(&self, dir: &Path, index: u64, field: &str, miss: HeapMiss) -> Error {
        let cap = self.ring.capacity();
        let (chunk, problem) = match miss {
            HeapMiss::Stamp { chunk, stamp } => (
                chunk,
                format!(
                    "field {field:?}: chunk {chunk} holds {stamp:#x}, expected stamp {:#x}",
                    row::stamp_of(chunk)
                ),
            ),
            HeapMiss::Checksum {
                chunk,
                stored,
                computed,
            } => (
                chunk,
                format!(
                    "field {field:?}: chunk {chunk} checksum mismatch: stored {stored:#010x}, \
                     computed {computed:#010x}"
                ),
            ),
        };
        let (file, offset) = self.ring.place(chunk % cap, dir);
        Error::BadItem {
            file,
            offset,
            index,
            problem,
        }
    }
}
