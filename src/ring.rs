//! Slots over segments: which file and row a ring slot lives in, and the per-slot
//! operations the buffer and recovery need. Head/tail bookkeeping lives in the buffer.

use crate::format::row::RowLayout;
use crate::storage::io::Io;
use crate::storage::map::{self, RowCheck, SegmentMap, SlotMap, StampMismatch};

/// The ring's mapped segments and how slots divide among them.
#[derive(Debug)]
pub struct Ring {
    segments: Vec<SegmentMap>,
    layout: RowLayout,
    capacity: u64,
    shift: u32,
    mask: u64,
}

impl Ring {
    /// A ring over `segments`, each of `segment_slots` slots (the last may hold fewer).
    pub fn new(
        segments: Vec<SegmentMap>,
        layout: RowLayout,
        capacity: u64,
        segment_slots: u64,
    ) -> Ring {
        Ring {
            segments,
            layout,
            capacity,
            shift: segment_slots.trailing_zeros(),
            mask: segment_slots - 1,
        }
    }

    /// The row layout.
    pub fn layout(&self) -> &RowLayout {
        &self.layout
    }

    #[inline(always)]
    fn split(&self, slot: u64) -> (usize, usize) {
        ((slot >> self.shift) as usize, (slot & self.mask) as usize)
    }

    /// The segment and row of a slot, for messages.
    pub fn locate(&self, slot: u64) -> Option<(&SegmentMap, usize)> {
        let (s, k) = self.split(slot);
        self.segments
            .get(s)
            .filter(|seg| k < seg.slots())
            .map(|seg| (seg, k))
    }

    /// Writes item `index` into `slot` (`fields[i]` is field `i`'s bytes), running `between`
    /// before the slot is stamped complete (see `SegmentMap::write_row`).
    #[inline]
    pub fn write(&mut self, slot: u64, index: u64, fields: &[&[u8]], between: impl FnOnce()) {
        let (s, k) = self.split(slot);
        if let Some(seg) = self.segments.get_mut(s) {
            seg.write_row(k, index, &self.layout, fields, between);
        }
    }

    /// Writes the checksums of `count` items from `first_index`, whose slots follow
    /// `first_slot` (wrapping at the capacity).
    pub fn seal(&mut self, first_slot: u64, first_index: u64, count: u64) {
        let mut slot = first_slot;
        for index in first_index..first_index + count {
            let (s, k) = self.split(slot);
            if let Some(seg) = self.segments.get_mut(s) {
                seg.seal_row(k, index, &self.layout);
            }
            slot += 1;
            if slot == self.capacity {
                slot = 0;
            }
        }
    }

    /// Stamp and checksum check of a slot.
    pub fn check(&self, slot: u64) -> Option<RowCheck> {
        self.locate(slot)
            .map(|(seg, k)| seg.check_row(k, &self.layout))
    }

    /// The stamp of a slot (0 when out of range).
    pub fn stamp(&self, slot: u64) -> u64 {
        self.locate(slot).map_or(0, |(seg, k)| seg.load_stamp(k))
    }

    /// Marks a slot never written.
    pub fn clear_stamp(&mut self, slot: u64) {
        let (s, k) = self.split(slot);
        if let Some(seg) = self.segments.get_mut(s) {
            seg.clear_stamp(k);
        }
    }

    /// Gathers `indices` (live, with `head` at `head_slot`) into per-field outputs.
    pub fn gather(
        &self,
        head: u64,
        head_slot: u64,
        indices: &[u64],
        outs: &mut [&mut [u8]],
    ) -> Result<(), StampMismatch> {
        let slots = SlotMap {
            shift: self.shift,
            mask: self.mask,
            capacity: self.capacity,
            base_index: head,
            base_slot: head_slot,
        };
        map::gather(&self.segments, slots, &self.layout, indices, outs)
    }

    /// msync of `count` slots starting at `slot`, wrapping at the capacity.
    pub fn flush_slots(
        &self,
        io: &dyn Io,
        slot: u64,
        count: u64,
    ) -> Result<(), (usize, std::io::Error)> {
        if count >= self.capacity {
            return self.flush_all(io);
        }
        let mut slot = slot;
        let mut left = count;
        while left > 0 {
            let (s, k) = self.split(slot);
            let Some(seg) = self.segments.get(s) else {
                break;
            };
            let n = left.min((seg.slots() - k) as u64);
            seg.flush_rows(io, k, k + n as usize).map_err(|e| (s, e))?;
            left -= n;
            slot = (slot + n) % self.capacity;
        }
        Ok(())
    }

    /// msync of every segment.
    pub fn flush_all(&self, io: &dyn Io) -> Result<(), (usize, std::io::Error)> {
        for (s, seg) in self.segments.iter().enumerate() {
            seg.flush_all(io).map_err(|e| (s, e))?;
        }
        Ok(())
    }
}
