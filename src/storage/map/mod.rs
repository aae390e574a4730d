//! Mapped segment files: the only module that touches mapped bytes through pointers.
//!
//! Bytes another process may change are never borrowed as `&[u8]` across that change:
//! rows are copied out through raw pointers and the slot's stamp is checked before and
//! after the copy (a seqlock: the writer sets the stamp to "being written" first and to
//! the item's index last). Within the writer's own process nothing else writes, so the
//! writer may read back what it just wrote.
#![expect(unsafe_code, reason = "mapped memory is reached through raw pointers")]

mod life;
mod limiter;
mod progress;
mod tree;

pub(crate) use life::LifeMap;
pub(crate) use limiter::LimiterMap;
pub(crate) use progress::{ProgressMap, Stores};
pub(crate) use tree::TreeMap;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering, fence};

use memmap2::MmapRaw;

use crate::error::{Error, Result};
use crate::format::row::{self, ROW_CRC_OFFSET, RowLayout, STAMP_EMPTY};
use crate::format::segment::DATA_OFFSET;
use crate::storage::crc::SpanCrc;
use crate::storage::io::Io;

/// One mapped segment file.
#[derive(Debug)]
pub(crate) struct SegmentMap {
    map: MmapRaw,
    path: PathBuf,
    slots: usize,
    stride: usize,
    writable: bool,
    /// The file has other names (a snapshot links it): it must be copied before any
    /// store (copy-on-write), so the snapshot keeps its bytes.
    shared: bool,
    /// This handle reserved the file's disk (segments are made sparse; the writer
    /// reserves one before its first store there, `Ring::reserve`).
    reserved: bool,
}

// SAFETY: the mapping is plain shared memory owned by this value; all access goes through
// methods that uphold the stamp protocol above, and `&mut self` guards the writing ones.
unsafe impl Send for SegmentMap {}
// SAFETY: as above; shared (`&self`) methods only read, through atomics or raw copies.
unsafe impl Sync for SegmentMap {}

/// What a slot holds, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowCheck {
    /// The stamp.
    pub stamp: u64,
    /// Whether the stored checksum matches the index the stamp names and the payload.
    pub crc_ok: bool,
    /// The stored checksum.
    pub stored_crc: u32,
    /// The checksum of the bytes as they are.
    pub computed_crc: u32,
}

impl SegmentMap {
    /// Wraps a mapping, checking that it is long enough for `slots` rows of `stride`
    /// (at least one: every row access clamps to the last row, which must exist).
    pub(crate) fn new(
        map: MmapRaw,
        path: &Path,
        slots: usize,
        stride: usize,
        writable: bool,
    ) -> Result<Self> {
        let need = slots
            .checked_mul(stride)
            .and_then(|b| b.checked_add(DATA_OFFSET))
            .ok_or_else(|| Error::Corrupt {
                file: path.to_path_buf(),
                offset: 0,
                field: "segment size".into(),
                expected: "a size that fits in memory".into(),
                got: format!("{slots} slots of {stride} bytes"),
            })?;
        if slots == 0 {
            return Err(Error::Corrupt {
                file: path.to_path_buf(),
                offset: 0,
                field: "segment slots".into(),
                expected: "at least 1".into(),
                got: "0".into(),
            });
        }
        if map.len() < need || !stride.is_multiple_of(8) || stride < row::ROW_HEADER_LEN {
            return Err(Error::Truncated {
                file: path.to_path_buf(),
                expected: need as u64,
                got: map.len() as u64,
            });
        }
        Ok(SegmentMap {
            map,
            path: path.to_path_buf(),
            slots,
            stride,
            writable,
            shared: false,
            reserved: false,
        })
    }

    /// Whether this handle reserved the file's disk, so stores cannot fault for space.
    #[inline(always)]
    pub(crate) fn is_reserved(&self) -> bool {
        self.reserved
    }

    /// Records that the file's disk is reserved.
    pub(crate) fn set_reserved(&mut self) {
        self.reserved = true;
    }

    /// The file's length: the header and every row.
    pub(crate) fn file_len(&self) -> u64 {
        (DATA_OFFSET + self.slots * self.stride) as u64
    }

    /// Whether another name links the file, so it must be copied before a store.
    #[inline(always)]
    pub(crate) fn is_shared(&self) -> bool {
        self.shared
    }

    /// Records whether another name links the file.
    pub(crate) fn set_shared(&mut self, shared: bool) {
        self.shared = shared;
    }

    /// The file this maps.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Slots in this segment.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Byte offset of slot `k` in the file.
    pub(crate) fn row_offset(&self, k: usize) -> u64 {
        (DATA_OFFSET + k * self.stride) as u64
    }

    /// Bytes per row.
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// Pointer to row `k`; `k < slots` is the caller's bound (checked in debug builds).
    #[inline(always)]
    fn row(&self, k: usize) -> *mut u8 {
        debug_assert!(k < self.slots, "slot {k} out of {}", self.slots);
        let k = k.min(self.slots.saturating_sub(1));
        // SAFETY: k < slots (clamped), and `new` checked DATA_OFFSET + slots * stride fits
        // in the mapping, so the offset stays inside it.
        unsafe { self.map.as_mut_ptr().add(DATA_OFFSET + k * self.stride) }
    }

    #[inline(always)]
    fn stamp_atomic(&self, k: usize) -> &AtomicU64 {
        // SAFETY: the row start is 8-aligned (page-aligned mapping, DATA_OFFSET and stride
        // are multiples of 8) and in bounds; every access to a stamp is atomic, in this
        // process and in any other that maps the file.
        unsafe { AtomicU64::from_ptr(self.row(k).cast::<u64>()) }
    }

    /// The stamp of slot `k` (acquire: the row's bytes written before it are visible).
    #[inline(always)]
    pub(crate) fn load_stamp(&self, k: usize) -> u64 {
        self.stamp_atomic(k).load(Ordering::Acquire)
    }

    /// Renames the complete item in slot `k` to `index` (the same slot's next lap): one
    /// release store of its stamp, its bytes left as they are. A reader copying the row
    /// meanwhile sees the stamp change and draws again; a kill leaves one name or the
    /// other, never a torn row. The checksum is the next flush's (it is index-seeded).
    pub(crate) fn restamp(&mut self, k: usize, index: u64) {
        debug_assert!(self.writable && !self.shared, "store into {:?}", self.path);
        self.stamp_atomic(k)
            .store(row::stamp_of(index), Ordering::Release);
    }

    /// Marks slot `k` as never written (recovery drops rows past the recovered tail).
    pub(crate) fn clear_stamp(&mut self, k: usize) {
        debug_assert!(self.writable && !self.shared, "store into {:?}", self.path);
        self.stamp_atomic(k).store(STAMP_EMPTY, Ordering::Release);
    }

    /// Writes item `index` into slot `k`: stamp "being written", fields, stamp. The
    /// checksum is written later, by `seal_row`, when a flush makes the item durable.
    /// Each `fields[i]` is the bytes of field `i`; a length that differs from the layout
    /// is a caller bug, and only the overlap is copied. `between` runs after the slot is
    /// marked "being written" and before it is stamped complete: whatever it stores (the
    /// item's priority leaf) is in place exactly when the item is, whenever a kill lands.
    #[inline]
    pub(crate) fn write_row(
        &mut self,
        k: usize,
        index: u64,
        layout: &RowLayout,
        tags: row::RowTags<'_>,
        fields: &[&[u8]],
        between: impl FnOnce(),
    ) {
        self.stamped(k, index, |row| {
            if layout.fragments {
                // SAFETY: the word at FRAGMENT_POS_OFF is 4-aligned (rows are 8-aligned)
                // and inside row k's header.
                unsafe {
                    row.add(row::FRAGMENT_POS_OFF)
                        .cast::<u32>()
                        .write(tags.fragment.to_le())
                };
            }
            if let Some(step) = tags.step.filter(|_| layout.episodic) {
                // SAFETY: an episodic layout puts the fields after EPISODE_OFF + 16, so
                // the step header lies inside row k; `step` is caller memory.
                unsafe { copy_small(step.as_ptr(), row.add(row::EPISODE_OFF), step.len()) };
            }
            for (&(off, len), src) in layout.fields.iter().zip(fields) {
                debug_assert_eq!(src.len(), len);
                let n = src.len().min(len);
                // SAFETY: off + len <= payload_end <= stride, so the destination lies
                // inside row k; `src` is caller memory, never this mapping (it is not
                // exposed).
                unsafe { copy_small(src.as_ptr(), row.add(off), n) };
            }
            between();
        });
    }

    /// Writes chunk `index` of the chunk ring into slot `k` with the row protocol: its
    /// one field (`layout.fields[0]`) is `pieces` end to end, then zeros to the field's
    /// end. The pieces are copied straight from the caller's values: no chunk is
    /// assembled on the side first.
    pub(crate) fn write_chunk(
        &mut self,
        k: usize,
        index: u64,
        layout: &RowLayout,
        pieces: &[&[u8]],
        between: impl FnOnce(),
    ) {
        let Some(&(off, len)) = layout.fields.first() else {
            return;
        };
        self.stamped(k, index, |row| {
            let mut at = 0usize;
            for piece in pieces {
                let n = piece.len().min(len - at);
                // SAFETY: at + n <= len, and off + len <= payload_end <= stride, so the
                // destination lies inside row k; `piece` is caller memory.
                unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), row.add(off + at), n) };
                at += n;
            }
            // SAFETY: off + at .. off + len lies inside row k, as above.
            unsafe { std::ptr::write_bytes(row.add(off + at), 0, len - at) };
            between();
        });
    }

    /// The row protocol of slot `k` for `index`: stamp "being written", `body` (given
    /// the row's start), stamp complete.
    #[inline(always)]
    fn stamped(&mut self, k: usize, index: u64, body: impl FnOnce(*mut u8)) {
        debug_assert!(self.writable && !self.shared, "store into {:?}", self.path);
        let row = self.row(k);
        let stamp = self.stamp_atomic(k);
        // Release: what the writer published before (the progress page's head) is
        // visible to a reader that sees this stamp; the fence keeps it before the fields.
        stamp.store(row::writing_stamp(index), Ordering::Release);
        fence(Ordering::Release);
        body(row);
        stamp.store(row::stamp_of(index), Ordering::Release);
    }

    /// Copies `out.len()` bytes of row `k` from offset `off` (clamped to the row). Used
    /// for the step header and single fields; a writer elsewhere may be changing the row,
    /// so callers check the stamp around it where that matters.
    pub(crate) fn read_row_bytes(&self, k: usize, off: usize, out: &mut [u8]) {
        let n = out.len().min(self.stride.saturating_sub(off));
        // SAFETY: off + n <= stride keeps the source inside row k; `out` is a separate
        // allocation of at least n bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.row(k).add(off), out.as_mut_ptr(), n) };
    }

    /// Appends `n` bytes of row `k` from offset `off` (clamped to the row) to `out`,
    /// written once: `read_row_bytes` into zeroed space would write each byte twice.
    pub(crate) fn append_row_bytes(&self, k: usize, off: usize, n: usize, out: &mut Vec<u8>) {
        let n = n.min(self.stride.saturating_sub(off));
        out.reserve(n);
        let len = out.len();
        // SAFETY: off + n <= stride keeps the source inside row k; `reserve` made room
        // for n more bytes after `len` in `out`'s own allocation, which the copy then
        // initializes in full before `set_len` counts them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.row(k).add(off), out.as_mut_ptr().add(len), n);
            out.set_len(len + n);
        }
    }

    /// Computes and stores the checksum of item `index` in slot `k`, whose bytes are
    /// complete (the writer's own earlier `write_row`).
    pub(crate) fn seal_row(&mut self, k: usize, index: u64, layout: &RowLayout) {
        debug_assert!(self.writable && !self.shared, "store into {:?}", self.path);
        let row = self.row(k);
        let span = layout.payload_span();
        // SAFETY: the span lies inside row k, and this process is the only writer (the
        // buffer's lock); readers elsewhere only read, so borrowing it briefly is sound.
        let payload = unsafe { std::slice::from_raw_parts(row.add(span.start), span.len()) };
        let crc = row::item_crc(index, payload);
        // SAFETY: the crc field is 4-aligned and inside row k's header.
        unsafe { row.add(ROW_CRC_OFFSET).cast::<u32>().write(crc.to_le()) };
    }

    /// Reads slot `k`'s stamp and checks its checksum against the index it names.
    pub(crate) fn check_row(&self, k: usize, layout: &RowLayout, crc: &SpanCrc) -> RowCheck {
        let stamp = self.load_stamp(k);
        let index = row::index_of(stamp);
        // SAFETY: `row(k)` is the start of row k of this segment's stride, which the
        // layout's payload span fits (`Ring::new` checked).
        let (computed_crc, stored_crc) = unsafe {
            row_crcs(
                index.unwrap_or(0),
                self.row(k),
                layout.payload_span().start,
                crc,
            )
        };
        RowCheck {
            stamp,
            crc_ok: index.is_some() && stored_crc == computed_crc,
            stored_crc,
            computed_crc: if index.is_some() { computed_crc } else { 0 },
        }
    }

    /// Writes rows `from..to` (clamped to the segment) into `file` at the offsets they
    /// have in this one: a copy-on-write copies the live rows of a shared segment.
    pub(crate) fn copy_rows_to(
        &self,
        io: &dyn Io,
        file: &std::fs::File,
        from: usize,
        to: usize,
    ) -> std::io::Result<()> {
        let to = to.min(self.slots);
        if from >= to {
            return Ok(());
        }
        let start = DATA_OFFSET + from * self.stride;
        let len = (to - from) * self.stride;
        // Only the writer (this process, busy here) stores into a buffer's segments.
        // SAFETY: the range lies inside the rows `new` checked are mapped, and (above) no
        // store changes them while borrowed; readers elsewhere only read.
        let rows = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) };
        io.write_at(file, start as u64, rows)
    }

    /// msync of the rows `from..to` (page-rounded by the mapping).
    pub(crate) fn flush_rows(&self, io: &dyn Io, from: usize, to: usize) -> std::io::Result<()> {
        if from >= to {
            return Ok(());
        }
        let start = DATA_OFFSET + from * self.stride;
        let end = DATA_OFFSET + to.min(self.slots) * self.stride;
        io.flush_map(&self.map, start, end - start)
    }

    /// Starts writeback of rows `from..to` (with `wait`: and waits for it), through the
    /// file's name: a segment keeps no descriptor open, lane sets have thousands.
    pub(crate) fn write_behind(
        &self,
        io: &dyn Io,
        from: usize,
        to: usize,
        wait: bool,
    ) -> std::io::Result<()> {
        if from >= to {
            return Ok(());
        }
        let start = DATA_OFFSET + from * self.stride;
        let end = DATA_OFFSET + to.min(self.slots) * self.stride;
        io.write_behind(&self.path, start as u64, (end - start) as u64, wait)
    }

    /// msync of the whole mapping.
    pub(crate) fn flush_all(&self, io: &dyn Io) -> std::io::Result<()> {
        io.flush_map(&self.map, 0, self.map.len())
    }
}

/// Copies `len` bytes from `src` to `dst` with inline moves for the small sizes fields
/// usually have (a call into libc's memmove per field per row was most of a W1 sample):
/// two overlapping unaligned moves cover any length between a power of two and twice it.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes; they must not
/// overlap.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    macro_rules! two_moves {
        ($t:ty) => {{
            let n = std::mem::size_of::<$t>();
            // SAFETY: n <= len <= 2n, so both moves stay inside the ranges the caller
            // vouched for; unaligned reads and writes of plain bytes.
            unsafe {
                let head = src.cast::<$t>().read_unaligned();
                let tail = src.add(len - n).cast::<$t>().read_unaligned();
                dst.cast::<$t>().write_unaligned(head);
                dst.add(len - n).cast::<$t>().write_unaligned(tail);
            }
        }};
    }
    // Dispatch on the length's bit width: one jump through a table, where matching
    // ranges compiled to a chain of compares (about 20 instructions per field).
    match len.checked_ilog2() {
        None => {}
        // SAFETY: one byte in each range.
        Some(0) => unsafe { dst.write(src.read()) },
        Some(1) => two_moves!(u16),
        Some(2) => two_moves!(u32),
        Some(3) => two_moves!(u64),
        Some(4) => two_moves!(u128),
        Some(5) => two_moves!([u128; 2]),
        Some(6) => two_moves!([u128; 4]),
        Some(7) => two_moves!([u128; 8]),
        // SAFETY: as the caller vouched.
        Some(_) => unsafe { std::ptr::copy_nonoverlapping(src, dst, len) },
    }
}

/// How many rows ahead the gather prefetches. Alternating criterion runs of W1-sample:
/// 32 rows 13.3/15.5/17.6 µs, 16 rows 14.0/18.3/17.9/17.5 µs, 8 rows 16.3 µs.
const PREFETCH_DISTANCE: usize = 32;
/// Bytes of each row prefetched (the rest of a large row streams in by itself).
const PREFETCH_BYTES: usize = 256;

/// Asks the CPU to bring the cache line at `p` in; any address is fine (a hint never
/// faults).
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is only a hint: it
        // never faults or reads memory architecturally, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Copies `src` into `dst` with the gather's small-field moves (`copy_small`), over
/// the shorter of the two lengths: the safe form, for the bench's floor kernels, which
/// are held to the same means as the engine.
///
/// ```
/// let mut dst = [0u8; 4];
/// replaystore::kernels::copy_field(&[1, 2, 3, 4, 5], &mut dst);
/// assert_eq!(dst, [1, 2, 3, 4]);
/// ```
#[inline(always)]
pub fn copy_field(src: &[u8], dst: &mut [u8]) {
    let len = src.len().min(dst.len());
    // SAFETY: both slices hold at least `len` bytes, and a `&mut` never overlaps a `&`.
    unsafe { copy_small(src.as_ptr(), dst.as_mut_ptr(), len) };
}

/// Asks the CPU to bring in the cache lines of `bytes`' first `PREFETCH_BYTES` (256), as a
/// gather does for a row it copies soon: the safe form, for code outside `storage/`
/// held to the same means (the bench's floor kernels). A hint: it changes no byte.
///
/// ```
/// let row = vec![7u8; 4096];
/// replaystore::kernels::prefetch_bytes(&row);
/// assert!(row.iter().all(|&b| b == 7));
/// ```
#[inline(always)]
pub fn prefetch_bytes(bytes: &[u8]) {
    let start = bytes.as_ptr() as usize;
    let end = start + bytes.len().min(PREFETCH_BYTES);
    let mut line = start & !63;
    while line < end {
        prefetch(line as *const u8);
        line += 64;
    }
}

/// Where logical indices live: `segments[slot >> shift]`, row `slot & mask`, with
/// `slot = base_slot + (index - base_index)` wrapped once at `capacity`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotMap {
    /// log2 of slots per segment.
    pub shift: u32,
    /// Slots per segment minus one.
    pub mask: u64,
    /// Ring capacity.
    pub capacity: u64,
    /// A live index whose slot is known...
    pub base_index: u64,
    /// ...and that slot (`base_index % capacity`).
    pub base_slot: u64,
}

impl SlotMap {
    /// The (segment, row) of a live index: no division on the hot path.
    #[inline(always)]
    pub(crate) fn locate(&self, index: u64) -> (usize, usize) {
        let mut slot = self.base_slot + index.wrapping_sub(self.base_index);
        if slot >= self.capacity {
            slot -= self.capacity;
        }
        ((slot >> self.shift) as usize, (slot & self.mask) as usize)
    }
}

/// What a row read found in place of the item asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The slot's stamp (before or after the copy), which did not name the index: a race
    /// with the writer, or damage.
    Stamp(u64),
    /// The stamp named the index, and stayed, but the sealed row's checksum did not match
    /// its bytes: damage, never a race (a writer stamps "being written" before it
    /// changes a byte, and the stamp was checked after the checksum was computed).
    Checksum {
        /// The checksum in the row.
        stored: u32,
        /// The checksum of the bytes as they are.
        computed: u32,
    },
}

/// A row that did not hold the item asked for, and where in the index list it was.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowMiss {
    /// Position in the index list.
    pub position: usize,
    /// What the row held instead.
    pub found: Found,
}

/// The checksum of item `index` computed over the row at `src`, and the one the row
/// stores; `crc` is the routine for the layout's payload span, which starts at `from`.
/// The bytes are read through the pointer (another process may be changing them: the
/// caller's stamp checks decide whether the result counts).
///
/// # Safety
/// `src` must be the start of a row of the layout, valid for reads of its stride.
#[inline]
unsafe fn row_crcs(index: u64, src: *const u8, from: usize, crc: &SpanCrc) -> (u32, u32) {
    // SAFETY: the payload span ends at payload_end <= stride, and the checksum word is
    // in the row header; both inside the row the caller vouched for.
    unsafe {
        (
            crc.crc_at(row::item_seed(index), src.add(from)),
            u32::from_le(src.add(ROW_CRC_OFFSET).cast::<u32>().read_unaligned()),
        )
    }
}

/// Checks the row at `src` against the checksum it stores for item `index`.
///
/// # Safety
/// As [`row_crcs`].
#[inline]
unsafe fn verify_row(index: u64, src: *const u8, from: usize, crc: &SpanCrc) -> Result<(), Found> {
    // SAFETY: as the caller vouched.
    let (computed, stored) = unsafe { row_crcs(index, src, from, crc) };
    if computed == stored {
        Ok(())
    } else {
        Err(Found::Checksum { stored, computed })
    }
}

/// Copies every field of the rows holding `indices` into `outs` (field-major: `outs[f]`
/// holds field `f` of every row, row after row). Each row's stamp is checked before and
/// after its copy, and a row below `rows.sealed` is checked against its checksum.
/// `indices` must be live for `rows.map` (the ring checks); `outs[f]` must be
/// `indices.len()` times field `f`'s size (the caller checks; a shorter output only makes
/// the copy stop early).
/// Positions before `from` are left as they are (a reader that lost a race to the
/// writer redraws one position and gathers on from there).
// Never inlined: this loop is every sample's cost, and inlined into its callers its
// code moved with theirs (one branch fewer in the writer's gather made W2's checked
// sample 7% slower, criterion w2/sample32). Compiled once, it stays as measured.
#[inline(never)]
pub(crate) fn gather(
    rows: RowReader<'_>,
    indices: &[u64],
    outs: &mut [&mut [u8]],
    from: usize,
) -> Result<(), RowMiss> {
    let todo = indices.get(from..).unwrap_or(&[]);
    if rows.page_in {
        // One read in flight per row, all at once, instead of the copy faulting the
        // rows in one page at a time (the kernel stops reading around faults of a
        // mapping that keeps missing): W4's sample went from 0.6-1.6k rows/s to the
        // figures in ARCHITECTURE ("Larger than memory").
        for &index in todo {
            rows.page_in(index);
        }
    }
    for &index in todo.iter().take(PREFETCH_DISTANCE) {
        rows.prefetch(index, 1);
    }
    for (i, &index) in todo.iter().enumerate() {
        let i = from + i;
        if let Some(&ahead) = indices.get(i + PREFETCH_DISTANCE) {
            rows.prefetch(ahead, 1);
        }
        rows.copy(index, outs, i)
            .map_err(|found| RowMiss { position: i, found })?;
    }
    Ok(())
}

/// Live rows read one at a time, each checked against its stamp: what [`gather`] does
/// for a list, for samplers that choose the next rows from the previous ones (an n-step
/// transition reads its episode's rows up to where it ends).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowReader<'a> {
    /// The ring's segments.
    pub segments: &'a [SegmentMap],
    /// Where live indices are.
    pub map: SlotMap,
    /// The rows' layout.
    pub layout: &'a RowLayout,
    /// Rows of indices below this carry their checksum (sealed by a flush), and each is
    /// checked against it as it is read; 0 checks none.
    pub sealed: u64,
    /// The checksum routine for the layout's payload span.
    pub crc: &'a SpanCrc,
    /// Ask the kernel for every row of a gather before copying the first (rings larger
    /// than memory, where most rows are not in the page cache).
    pub page_in: bool,
}

impl<'a> RowReader<'a> {
    #[inline(always)]
    fn row(&self, index: u64) -> Option<(&SegmentMap, usize)> {
        let (s, k) = self.map.locate(index);
        self.segments
            .get(s)
            .filter(|seg| k < seg.slots)
            .map(|seg| (seg, k))
    }

    /// Asks the kernel to read `index`'s row into the page cache now (`MADV_WILLNEED`),
    /// without waiting for it.
    pub(crate) fn page_in(&self, index: u64) {
        if let Some((seg, k)) = self.row(index) {
            let offset = DATA_OFFSET + k * seg.stride;
            // A hint: if the kernel refuses it, the copy faults the row in as before.
            let _ = seg
                .map
                .advise_range(memmap2::Advice::WillNeed, offset, seg.stride);
        }
    }

    /// Hints the CPU to fetch the rows of `count` indices from `index` (the first
    /// `PREFETCH_BYTES` of each; the rest of a large row streams in by itself).
    #[inline(always)]
    pub(crate) fn prefetch(&self, index: u64, count: u64) {
        for index in index..index + count {
            if let Some((seg, k)) = self.row(index) {
                let p = seg.row(k) as usize;
                let end = p + seg.stride.min(PREFETCH_BYTES);
                let mut line = p & !63;
                while line < end {
                    prefetch(line as *const u8);
                    line += 64;
                }
            }
        }
    }

    /// Copies the fields of live `index` into position `at` of `outs` (`outs[f]` holds
    /// items of field `f`'s size; an empty output skips its field), checking the row's
    /// stamp before and after, and its checksum if sealed. The one-row form of
    /// [`RowRun`], kept apart because a plain sample is nothing else.
    #[inline(always)]
    pub(crate) fn copy(&self, index: u64, outs: &mut [&mut [u8]], at: usize) -> Result<(), Found> {
        let Some((seg, k)) = self.row(index) else {
            return Err(Found::Stamp(STAMP_EMPTY));
        };
        let want = row::stamp_of(index);
        let stamp = seg.stamp_atomic(k);
        let before = stamp.load(Ordering::Acquire);
        if before != want {
            return Err(Found::Stamp(before));
        }
        let src = seg.row(k);
        for (&(off, len), out) in self.layout.fields.iter().zip(outs.iter_mut()) {
            let Some(dst) = out.get_mut(at * len..(at + 1) * len) else {
                continue;
            };
            // SAFETY: off + len lies inside row k (the layout fits the stride); `dst` is
            // a caller buffer of exactly `len` bytes, disjoint from the mapping.
            unsafe { copy_small(src.add(off), dst.as_mut_ptr(), len) };
        }
        let sound = if index < self.sealed {
            // SAFETY: `src` is row k of a segment of this layout's stride.
            unsafe { verify_row(index, src, self.layout.payload_span().start, self.crc) }
        } else {
            Ok(())
        };
        fence(Ordering::Acquire);
        let after = stamp.load(Ordering::Relaxed);
        if after != want {
            return Err(Found::Stamp(after));
        }
        sound
    }

    /// The `count` consecutive live rows from `first`, read as one (see [`RowRun`]).
    #[inline(always)]
    pub(crate) fn run(&'a self, first: u64, count: u64) -> RowRun<'a> {
        let flat = self.row(first).and_then(|(seg, k)| {
            (k as u64 + count <= seg.slots as u64).then(|| (seg.row(k).cast_const(), seg.stride))
        });
        RowRun {
            rows: self,
            first,
            count,
            flat,
        }
    }
}

/// Consecutive live rows read as one: each row's stamp is checked once before and once
/// after everything read from the run (not around each read), so a sampler that reads
/// several fields of several neighbouring rows (an n-step transition) pays one check
/// per row. Rows are addressed by stride from the first when one segment holds them
/// all, as it nearly always does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowRun<'a> {
    rows: &'a RowReader<'a>,
    first: u64,
    count: u64,
    /// The first row's start and the stride, when one segment holds the whole run.
    flat: Option<(*const u8, usize)>,
}

impl RowRun<'_> {
    /// The start of the row of `index` (`None` outside the run), and the stride.
    #[inline(always)]
    fn ptr(&self, index: u64) -> Option<(*const u8, usize)> {
        let at = index
            .checked_sub(self.first)
            .filter(|&at| at < self.count)?;
        match self.flat {
            // SAFETY: `run` checked that the segment holds rows k .. k + count, so the
            // row `at < count` after the first lies inside the mapping.
            Some((base, stride)) => Some((unsafe { base.add(at as usize * stride) }, stride)),
            None => self
                .rows
                .row(index)
                .map(|(seg, k)| (seg.row(k).cast_const(), seg.stride)),
        }
    }

    /// Hints the CPU to fetch the run's rows (the first `PREFETCH_BYTES` of each: all
    /// of a small row's lines, one stretch of lines for a run held by one segment).
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        match self.flat {
            Some((base, stride)) if stride <= PREFETCH_BYTES => {
                let start = base as usize;
                let end = start + self.count as usize * stride;
                let mut line = start & !63;
                while line < end {
                    prefetch(line as *const u8);
                    line += 64;
                }
            }
            _ => self.rows.prefetch(self.first, self.count),
        }
    }

    /// Runs `body` between two checks that every row of the run holds its index, and
    /// checks each sealed row of the run against its checksum after `body` read it:
    /// `Err` names the first row that did not hold its item (index, what it held), and
    /// then what `body` read must not be used. A stamp that moved is reported before a
    /// checksum that failed: the writer was there, so the bytes were not damage.
    #[inline(always)]
    pub(crate) fn checked<T>(&self, body: impl FnOnce(&Self) -> T) -> Result<T, (u64, Found)> {
        let stamps = |order| {
            if let Some((base, stride)) = self.flat {
                // One segment holds the run: walk it by stride, no lookup per row.
                for at in 0..self.count {
                    // SAFETY: `run` checked the segment holds rows k .. k + count; row
                    // starts are 8-aligned and every access to a stamp is atomic.
                    let stamp = unsafe {
                        AtomicU64::from_ptr(base.add(at as usize * stride).cast::<u64>().cast_mut())
                    };
                    let found = stamp.load(order);
                    let index = self.first + at;
                    if found != row::stamp_of(index) {
                        return Err((index, found));
                    }
                }
                return Ok(());
            }
            for index in self.first..self.first + self.count {
                let Some((p, _)) = self.ptr(index) else {
                    return Err((index, STAMP_EMPTY));
                };
                // SAFETY: row starts are 8-aligned and inside the mapping (as in
                // `SegmentMap::stamp_atomic`); every access to a stamp is atomic.
                let stamp = unsafe { AtomicU64::from_ptr(p.cast::<u64>().cast_mut()) };
                let found = stamp.load(order);
                if found != row::stamp_of(index) {
                    return Err((index, found));
                }
            }
            Ok(())
        };
        let stamp_found = |(index, stamp)| (index, Found::Stamp(stamp));
        stamps(Ordering::Acquire).map_err(stamp_found)?;
        let value = body(self);
        let sealed =
            self.first..self.first + self.count.min(self.rows.sealed.saturating_sub(self.first));
        let sound = sealed
            .into_iter()
            .try_for_each(|index| match self.ptr(index) {
                Some((p, _)) => {
                    let from = self.rows.layout.payload_span().start;
                    // SAFETY: `ptr` gives the start of a mapped row of the layout's stride.
                    unsafe { verify_row(index, p, from, self.rows.crc) }.map_err(|f| (index, f))
                }
                None => Err((index, Found::Stamp(STAMP_EMPTY))),
            });
        fence(Ordering::Acquire);
        stamps(Ordering::Relaxed).map_err(stamp_found)?;
        sound.map(|()| value)
    }

    /// Copies `fields` (each `(offset, len, output)`: a field of the layout and which of
    /// `outs` takes it) of the row of `index` into position `at` of their outputs.
    /// Nothing is copied for a row outside the run or an output too short.
    #[inline(always)]
    pub(crate) fn copy(
        &self,
        index: u64,
        fields: &[(usize, usize, usize)],
        outs: &mut [&mut [u8]],
        at: usize,
    ) {
        let Some((src, stride)) = self.ptr(index) else {
            return;
        };
        for &(off, len, f) in fields {
            let Some(dst) = outs
                .get_mut(f)
                .and_then(|o| o.get_mut(at * len..(at + 1) * len))
            else {
                continue;
            };
            if off + len <= stride {
                // SAFETY: off + len <= stride keeps the source inside the row; `dst` is a
                // caller buffer of exactly `len` bytes, disjoint from the mapping.
                unsafe { copy_small(src.add(off), dst.as_mut_ptr(), len) };
            }
        }
    }

    /// Calls `f` with the `N` bytes at `off` of each row of `rows` in the run, in order
    /// (rows outside the run are passed over): a column of scalars read down the run by
    /// stride, as an n-step return reads its rewards.
    #[inline(always)]
    pub(crate) fn read_each<const N: usize>(
        &self,
        rows: std::ops::Range<u64>,
        off: usize,
        mut f: impl FnMut([u8; N]),
    ) {
        match self.flat {
            Some((base, stride)) if off + N <= stride => {
                let from = rows.start.saturating_sub(self.first).min(self.count);
                let to = rows.end.saturating_sub(self.first).min(self.count);
                for at in from..to {
                    // SAFETY: at < count rows of the segment `run` checked, and
                    // off + N <= stride keeps the read inside row `at`.
                    f(unsafe {
                        base.add(at as usize * stride + off)
                            .cast::<[u8; N]>()
                            .read_unaligned()
                    });
                }
            }
            _ => {
                let inside = self.first..self.first + self.count;
                for index in rows.filter(|i| inside.contains(i)) {
                    f(self.read_le(index, off));
                }
            }
        }
    }

    /// The `N` bytes at `off` of the row of `index`: one fixed-size load for a header
    /// word or a scalar field (zeros for a row outside the run or bytes past its end).
    #[inline(always)]
    pub(crate) fn read_le<const N: usize>(&self, index: u64, off: usize) -> [u8; N] {
        match self.ptr(index) {
            // SAFETY: off + N <= stride keeps the read inside the row; [u8; N] has no
            // alignment or validity requirement.
            Some((src, stride)) if off + N <= stride => unsafe {
                src.add(off).cast::<[u8; N]>().read_unaligned()
            },
            _ => [0; N],
        }
    }

    /// Copies the bytes at `off` of the row of `index` into `out` (stopping at the row's
    /// end; nothing for a row outside the run).
    #[inline(always)]
    pub(crate) fn read(&self, index: u64, off: usize, out: &mut [u8]) {
        if let Some((src, stride)) = self.ptr(index) {
            let len = out.len().min(stride.saturating_sub(off));
            // SAFETY: off + len <= stride keeps the read inside the row; `out` is a
            // caller buffer of at least len bytes, disjoint from the mapping.
            unsafe { copy_small(src.add(off), out.as_mut_ptr(), len) };
        }
    }
}

// SAFETY: plain shared memory owned by this value, reached only through atomics.
unsafe impl Send for ProgressMap {}
// SAFETY: as above: concurrent access from threads is what atomics are for.
unsafe impl Sync for ProgressMap {}

// SAFETY: the mapping is plain shared memory owned by this value; writing goes through
// `&mut self`, and `priorities.lock` (held by the tree's one owner: the writer, or a
// PriorityOwner beside actors) keeps other processes from writing.
unsafe impl Send for TreeMap {}
// SAFETY: `&self` methods only read.
unsafe impl Sync for TreeMap {}

// The tree's words in memory (a private copy, a test's vector) read as plain slices; the
// impls live here, beside the prefetch hint they use, so that the tree's algorithm
// (`sumtree`) needs nothing of the storage layer.
impl crate::algo::sumtree::Words for [f64] {
    #[inline(always)]
    fn with_node<const K: usize, R>(&self, at: usize, f: impl FnOnce(&[f64; K]) -> R) -> Option<R> {
        let words = self.get(at..at.checked_add(K)?)?;
        words.as_chunks::<K>().0.first().map(f)
    }

    #[inline(always)]
    fn prefetch(&self, at: usize) {
        prefetch(self.as_ptr().wrapping_add(at).cast());
    }
}

impl crate::algo::sumtree::Words for Vec<f64> {
    #[inline(always)]
    fn with_node<const K: usize, R>(&self, at: usize, f: impl FnOnce(&[f64; K]) -> R) -> Option<R> {
        self.as_slice().with_node(at, f)
    }

    #[inline(always)]
    fn prefetch(&self, at: usize) {
        self.as_slice().prefetch(at);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{SegmentMap, copy_small};

    /// A shared mapping of a new file of `len` bytes (kept alive by the returned folder).
    pub(crate) fn mapping(len: u64) -> (tempfile::TempDir, memmap2::MmapRaw) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("seg"))
            .expect("create");
        file.set_len(len).expect("set_len");
        let map = memmap2::MmapRaw::map_raw(&file).expect("map");
        (dir, map)
    }

    #[test]
    fn a_segment_of_no_rows_is_refused_before_any_row_pointer_exists() {
        let path = std::path::Path::new("seg");
        let (_d, map) = mapping(4096);
        assert!(SegmentMap::new(map, path, 0, 64, false).is_err());
        let (_d, map) = mapping(4096 + 64);
        assert!(SegmentMap::new(map, path, 1, 64, false).is_ok());
        // A mapping one row short is refused too.
        let (_d, map) = mapping(4096 + 64);
        assert!(SegmentMap::new(map, path, 2, 64, false).is_err());
    }

    #[test]
    fn copy_small_copies_exactly_len_bytes_for_every_width() {
        let src: Vec<u8> = (0..600u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..=520 {
            for shift in [0usize, 1, 5] {
                let mut dst = vec![0xAAu8; len + 16];
                // SAFETY: src holds shift + len <= 525 bytes; dst holds len + 16 from 8.
                unsafe {
                    copy_small(src.as_ptr().add(shift), dst.as_mut_ptr().add(8), len);
                }
                assert_eq!(&dst[8..8 + len], &src[shift..shift + len], "len {len}");
                assert!(
                    dst[..8].iter().all(|&b| b == 0xAA),
                    "wrote before, len {len}"
                );
                assert!(
                    dst[8 + len..].iter().all(|&b| b == 0xAA),
                    "wrote past, len {len}"
                );
            }
        }
    }
}
