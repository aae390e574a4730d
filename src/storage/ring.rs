//! Slots over segments: which file and row a ring slot lives in, and the per-slot
//! operations the buffer and recovery need. Head/tail bookkeeping lives in the buffer.

use crate::error::{Error, Result};
use crate::format::row::{EPISODE_OFF, RowLayout, RowTags, STEP_HEADER_LEN, StepHeader};
use crate::storage::crc::SpanCrc;
use crate::storage::io::Io;
use crate::storage::map::{self, RowCheck, RowReader, SegmentMap, SlotMap};
use crate::storage::pread::{Missed, RowFiles};

/// The ring's mapped segments and how slots divide among them.
#[derive(Debug)]
pub(crate) struct Ring {
    segments: Vec<SegmentMap>,
    layout: RowLayout,
    capacity: u64,
    shift: u32,
    mask: u64,
    /// Segments another name links (copy before storing into them).
    shared: usize,
    /// Segments this handle has not reserved on disk yet (reserve before storing).
    unreserved: usize,
    /// Set: gathers copy rows with `pread` from these files instead of the mappings.
    files: Option<RowFiles>,
    /// The checksum routine for the layout's payload span (reads check sealed rows).
    crc: SpanCrc,
    /// The rows take more than half of memory: a gather asks the kernel to read all of
    /// its rows (`MADV_WILLNEED`, or `POSIX_FADV_WILLNEED` when it reads with pread)
    /// before copying any (`storage::larger_than_memory`).
    page_in: bool,
}

/// Where a read finds the live rows, and which of them it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Live {
    /// The oldest live index...
    pub head: u64,
    /// ...and its slot.
    pub head_slot: u64,
    /// Rows of indices below this are checked against their checksums as they are read
    /// (the sealed bound, or 0 where the caller opted out of the checks).
    pub sealed: u64,
}

impl Ring {
    /// A ring over `segments`, each of `segment_slots` slots (the last may hold fewer).
    /// Refuses a slot count that is not a power of two and a layout whose fields reach
    /// past a segment's stride: every row read trusts both (`storage::map`), so no
    /// caller of this public constructor can make a read leave its row.
    pub(crate) fn new(
        segments: Vec<SegmentMap>,
        layout: RowLayout,
        capacity: u64,
        segment_slots: u64,
    ) -> Result<Ring> {
        let invalid = |problem: String| Error::InvalidConfig {
            field: "segment_slots",
            problem,
        };
        if !segment_slots.is_power_of_two() {
            return Err(invalid(format!(
                "{segment_slots} slots a segment: not a power of two"
            )));
        }
        if let Some(seg) = segments.iter().find(|s| s.stride() < layout.payload_end) {
            return Err(Error::Corrupt {
                file: seg.path().to_path_buf(),
                offset: 0,
                field: "segment stride".into(),
                expected: format!(
                    "at least the {} bytes a row's fields span",
                    layout.payload_end
                ),
                got: seg.stride().to_string(),
            });
        }
        Ok(Ring {
            shared: segments.iter().filter(|s| s.is_shared()).count(),
            unreserved: segments.iter().filter(|s| !s.is_reserved()).count(),
            segments,
            capacity,
            shift: segment_slots.trailing_zeros(),
            mask: segment_slots - 1,
            files: None,
            crc: SpanCrc::new(layout.payload_span().len()),
            page_in: super::larger_than_memory(capacity.saturating_mul(layout.stride as u64)),
            layout,
        })
    }

    /// Gathers from now on copy rows with `pread` from `files` (the segments' files);
    /// `None` goes back to the mappings.
    pub(crate) fn read_rows_from(&mut self, files: Option<RowFiles>) {
        self.files = files;
    }

    /// The mapped segments.
    pub(crate) fn segments(&self) -> &[SegmentMap] {
        &self.segments
    }

    /// Slots in the ring.
    pub(crate) fn stride(&self) -> u64 {
        self.layout.stride as u64
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The row layout.
    pub(crate) fn layout(&self) -> &RowLayout {
        &self.layout
    }

    #[inline(always)]
    fn split(&self, slot: u64) -> (usize, usize) {
        ((slot >> self.shift) as usize, (slot & self.mask) as usize)
    }

    /// The file and byte offset of a slot's row, for messages (`fallback` if the slot is
    /// out of range).
    pub(crate) fn place(&self, slot: u64, fallback: &std::path::Path) -> (std::path::PathBuf, u64) {
        self.locate(slot)
            .map_or((fallback.to_path_buf(), 0), |(seg, k)| {
                (seg.path().to_path_buf(), seg.row_offset(k))
            })
    }

    /// The segment and row of a slot, for messages.
    pub(crate) fn locate(&self, slot: u64) -> Option<(&SegmentMap, usize)> {
        let (s, k) = self.split(slot);
        self.segments
            .get(s)
            .filter(|seg| k < seg.slots())
            .map(|seg| (seg, k))
    }

    /// Whether any segment is linked by another name (a snapshot): then stores must
    /// first check [`Ring::shared_segments`].
    #[inline(always)]
    pub(crate) fn any_shared(&self) -> bool {
        self.shared > 0
    }

    /// The first shared segment among those holding `count` slots from `first_slot`
    /// (wrapping at the capacity). O(1) for one slot; allocates nothing.
    pub(crate) fn first_shared(&self, first_slot: u64, count: u64) -> Option<usize> {
        let mut slot = first_slot;
        let mut left = count.min(self.capacity);
        while left > 0 {
            let (s, k) = self.split(slot);
            let seg = self.segments.get(s)?;
            if seg.is_shared() {
                return Some(s);
            }
            let n = left.min((seg.slots() - k) as u64);
            left -= n;
            slot = (slot + n) % self.capacity;
        }
        None
    }

    /// Rows of segment `s` that hold slots of `slots` (a run of `len` slots from
    /// `first`, wrapping at the capacity): at most two row ranges.
    pub(crate) fn rows_of(&self, s: usize, first: u64, len: u64) -> Vec<std::ops::Range<usize>> {
        let Some(seg) = self.segments.get(s) else {
            return Vec::new();
        };
        let start = (s as u64) << self.shift;
        let end = start + seg.slots() as u64;
        let len = len.min(self.capacity);
        let runs = if first + len <= self.capacity {
            [(first, first + len), (0, 0)]
        } else {
            [(first, self.capacity), (0, first + len - self.capacity)]
        };
        runs.iter()
            .map(|&(a, b)| (a.max(start), b.min(end)))
            .filter(|(a, b)| a < b)
            .map(|(a, b)| (a - start) as usize..(b - start) as usize)
            .collect()
    }

    /// The mapping of segment `s`.
    pub(crate) fn segment(&self, s: usize) -> Option<&SegmentMap> {
        self.segments.get(s)
    }

    /// Puts a private copy of segment `s` in place of the shared one.
    pub(crate) fn replace_segment(&mut self, s: usize, seg: SegmentMap) {
        if let Some(old) = self.segments.get_mut(s) {
            self.shared = self.shared - usize::from(old.is_shared()) + usize::from(seg.is_shared());
            self.unreserved =
                self.unreserved - usize::from(!old.is_reserved()) + usize::from(!seg.is_reserved());
            *old = seg;
        }
    }

    /// Whether some segment is not reserved on disk by this handle yet: then stores
    /// must first call [`Ring::reserve`].
    #[inline(always)]
    pub(crate) fn any_unreserved(&self) -> bool {
        self.unreserved > 0
    }

    /// Reserves on disk each segment holding the `count` slots from `first_slot`
    /// (wrapping at the capacity) that this handle has not reserved yet; `with` runs
    /// first for each such segment's slots (first slot, count), for what else takes disk
    /// per slot. Segments are sparse until then, so disk is taken as rows arrive; a full
    /// disk is `DiskFull` here, before anything is stored.
    pub(crate) fn reserve(
        &mut self,
        io: &dyn Io,
        first_slot: u64,
        count: u64,
        mut with: impl FnMut(u64, u64) -> Result<()>,
    ) -> Result<()> {
        let mut slot = first_slot % self.capacity.max(1);
        let mut left = count.min(self.capacity);
        while left > 0 && self.unreserved > 0 {
            let (s, k) = self.split(slot);
            let Some(seg) = self.segments.get_mut(s) else {
                break;
            };
            if !seg.is_reserved() {
                with((s as u64) << self.shift, seg.slots() as u64)?;
                super::reserve_file(io, seg.path(), 0, seg.file_len())?;
                seg.set_reserved();
                self.unreserved -= 1;
            }
            let n = left.min((seg.slots() - k) as u64);
            left -= n;
            slot = (slot + n) % self.capacity;
        }
        Ok(())
    }

    /// Records that every segment is now linked by another name (a snapshot was taken).
    pub(crate) fn mark_all_shared(&mut self) {
        for seg in &mut self.segments {
            seg.set_shared(true);
        }
        self.shared = self.segments.len();
    }

    /// Re-reads each segment's link count (after snapshots were deleted).
    pub(crate) fn refresh_shared(&mut self) {
        use std::os::unix::fs::MetadataExt;
        for seg in &mut self.segments {
            // Not followed: anything but a regular file there (a link planted in place of
            // the segment) counts as shared, so the writer copies rather than stores
            // through a name it did not make.
            let links = crate::storage::regular_file_meta(seg.path()).map_or(2, |m| m.nlink());
            seg.set_shared(links > 1);
        }
        self.shared = self.segments.iter().filter(|s| s.is_shared()).count();
    }

    /// Writes item `index` into `slot` (`fields[i]` is field `i`'s bytes), running `between`
    /// before the slot is stamped complete (see `SegmentMap::write_row`).
    #[inline]
    pub(crate) fn write(
        &mut self,
        slot: u64,
        index: u64,
        tags: RowTags<'_>,
        fields: &[&[u8]],
        between: impl FnOnce(),
    ) {
        let (s, k) = self.split(slot);
        if let Some(seg) = self.segments.get_mut(s) {
            seg.write_row(k, index, &self.layout, tags, fields, between);
        }
    }

    /// Writes chunk `index` into `slot`: its one field is `pieces` end to end, zeros
    /// after (see `SegmentMap::write_chunk`).
    pub(crate) fn write_chunk(
        &mut self,
        slot: u64,
        index: u64,
        pieces: &[&[u8]],
        between: impl FnOnce(),
    ) {
        let (s, k) = self.split(slot);
        if let Some(seg) = self.segments.get_mut(s) {
            seg.write_chunk(k, index, &self.layout, pieces, between);
        }
    }

    /// The step header of a slot (episodic buffers; zeros otherwise).
    pub(crate) fn step_header(&self, slot: u64) -> StepHeader {
        let mut b = [0u8; STEP_HEADER_LEN];
        if self.layout.episodic
            && let Some((seg, k)) = self.locate(slot)
        {
            seg.read_row_bytes(k, EPISODE_OFF, &mut b);
        }
        StepHeader::decode(&b)
    }

    /// The fragment position of a slot (fragment buffers; 0 otherwise).
    pub(crate) fn fragment_pos(&self, slot: u64) -> u32 {
        let mut b = [0u8; 4];
        if self.layout.fragments
            && let Some((seg, k)) = self.locate(slot)
        {
            seg.read_row_bytes(k, crate::format::row::FRAGMENT_POS_OFF, &mut b);
        }
        u32::from_le_bytes(b)
    }

    /// A scalar numeric field `f` (of `dtype`) of a slot, as f64.
    pub(crate) fn field_f64(&self, slot: u64, f: usize, dtype: crate::DType) -> f64 {
        let mut b = [0u8; 8];
        let n = dtype.size().min(8);
        self.read_field(slot, f, b.get_mut(..n).unwrap_or(&mut []));
        dtype.decode_f64(&b)
    }

    /// Copies field `f` of a slot into `out` (which has the field's size).
    pub(crate) fn read_field(&self, slot: u64, f: usize, out: &mut [u8]) {
        if let (Some((seg, k)), Some(&(off, _))) = (self.locate(slot), self.layout.fields.get(f)) {
            seg.read_row_bytes(k, off, out);
        }
    }

    /// Copies `out.len()` bytes of field `f` of a slot, from `at` bytes into the field
    /// (nothing past the field's end).
    pub(crate) fn read_field_at(&self, slot: u64, f: usize, at: usize, out: &mut [u8]) {
        if let (Some((seg, k)), Some(&(off, len))) = (self.locate(slot), self.layout.fields.get(f))
            && at.saturating_add(out.len()) <= len
        {
            seg.read_row_bytes(k, off + at, out);
        }
    }

    /// Appends `n` bytes of field `f` of a slot, from `at` bytes into the field, to
    /// `out` (nothing when they would pass the field's end).
    pub(crate) fn append_field_at(
        &self,
        slot: u64,
        f: usize,
        at: usize,
        n: usize,
        out: &mut Vec<u8>,
    ) {
        if let (Some((seg, k)), Some(&(off, len))) = (self.locate(slot), self.layout.fields.get(f))
            && at.saturating_add(n) <= len
        {
            seg.append_row_bytes(k, off + at, n, out);
        }
    }

    /// Writes the checksums of `count` items from `first_index`, whose slots follow
    /// `first_slot` (wrapping at the capacity).
    pub(crate) fn seal(&mut self, first_slot: u64, first_index: u64, count: u64) {
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
    pub(crate) fn check(&self, slot: u64) -> Option<RowCheck> {
        self.locate(slot)
            .map(|(seg, k)| seg.check_row(k, &self.layout, &self.crc))
    }

    /// The stamp of a slot (0 when out of range).
    pub(crate) fn stamp(&self, slot: u64) -> u64 {
        self.locate(slot).map_or(0, |(seg, k)| seg.load_stamp(k))
    }

    /// Renames the complete item in `slot` to `index`, its bytes as they are (see
    /// `SegmentMap::restamp`).
    pub(crate) fn restamp(&mut self, slot: u64, index: u64) {
        let (s, k) = self.split(slot);
        if let Some(seg) = self.segments.get_mut(s) {
            seg.restamp(k, index);
        }
    }

    /// Marks `slot` as never written.
    pub(crate) fn clear_stamp(&mut self, slot: u64) {
        let (s, k) = self.split(slot);
        if let Some(seg) = self.segments.get_mut(s) {
            seg.clear_stamp(k);
        }
    }

    /// Gathers `indices` (live as `at` says) into per-field outputs.
    pub(crate) fn gather(
        &self,
        at: Live,
        indices: &[u64],
        outs: &mut [&mut [u8]],
    ) -> Result<(), Missed> {
        self.gather_from(at, indices, outs, 0)
    }

    /// `gather` of the positions from `from` on, leaving those before as they are.
    pub(crate) fn gather_from(
        &self,
        at: Live,
        indices: &[u64],
        outs: &mut [&mut [u8]],
        from: usize,
    ) -> Result<(), Missed> {
        match &self.files {
            Some(files) => files.gather(
                self.slot_map(at),
                &self.layout,
                at.sealed,
                indices,
                outs,
                from,
                self.page_in,
            ),
            None => map::gather(self.reader(at), indices, outs, from).map_err(Missed::Row),
        }
    }

    /// Reads live rows one at a time (live as `at` says).
    pub(crate) fn reader(&self, at: Live) -> RowReader<'_> {
        RowReader {
            segments: &self.segments,
            map: self.slot_map(at),
            layout: &self.layout,
            sealed: at.sealed,
            crc: &self.crc,
            page_in: self.page_in,
        }
    }

    fn slot_map(&self, at: Live) -> SlotMap {
        SlotMap {
            shift: self.shift,
            mask: self.mask,
            capacity: self.capacity,
            base_index: at.head,
            base_slot: at.head_slot,
        }
    }

    /// msync of `count` slots starting at `slot`, wrapping at the capacity.
    pub(crate) fn flush_slots(
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

    /// Starts writeback (with `wait`: and waits for it) of `count` slots from `slot`,
    /// wrapping at the capacity; see `behind.rs`.
    pub(crate) fn write_behind(
        &self,
        io: &dyn Io,
        slot: u64,
        count: u64,
        wait: bool,
    ) -> std::io::Result<()> {
        let mut slot = slot;
        let mut left = count.min(self.capacity);
        while left > 0 {
            let (s, k) = self.split(slot);
            let Some(seg) = self.segments.get(s) else {
                break;
            };
            let n = left.min((seg.slots() - k) as u64);
            seg.write_behind(io, k, k + n as usize, wait)?;
            left -= n;
            slot = (slot + n) % self.capacity;
        }
        Ok(())
    }

    /// Gathers as a ring larger than memory does (rows asked for before they are
    /// copied), whatever its size: for tests of that path on rings that fit.
    #[cfg(test)]
    pub(crate) fn force_page_in(&mut self) {
        self.page_in = true;
    }

    /// msync of every segment.
    pub(crate) fn flush_all(&self, io: &dyn Io) -> Result<(), (usize, std::io::Error)> {
        for (s, seg) in self.segments.iter().enumerate() {
            seg.flush_all(io).map_err(|e| (s, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;
    use crate::format::row::RowLayout;
    use crate::storage::map::SegmentMap;
    use crate::{DType, Schema};

    fn segment(stride: usize) -> (tempfile::TempDir, SegmentMap) {
        let (dir, map) = crate::storage::map::tests::mapping((4096 + 4 * stride) as u64);
        let seg = SegmentMap::new(map, &dir.path().join("seg"), 4, stride, false).expect("segment");
        (dir, seg)
    }

    #[test]
    fn a_ring_refuses_fields_past_its_stride_and_slot_counts_that_are_no_power_of_two() {
        let schema = Schema::builder()
            .field("x", DType::F64, &[8])
            .build()
            .expect("schema");
        let layout = RowLayout::of(&schema);
        assert!(layout.payload_end > 64);
        let (_d, small) = segment(64);
        assert!(Ring::new(vec![small], layout.clone(), 4, 4).is_err());
        let (_d, fits) = segment(layout.stride);
        assert!(Ring::new(vec![fits], layout.clone(), 4, 3).is_err());
        let (_d, fits) = segment(layout.stride);
        assert!(Ring::new(vec![fits], layout, 4, 4).is_ok());
    }

    /// The page-in pass of rings larger than memory (`MADV_WILLNEED` of every mapped
    /// row, `POSIX_FADV_WILLNEED` of every pread row, before the copies) changes no
    /// byte a draw returns, mapped or read with pread.
    #[test]
    fn gathers_that_ask_for_their_rows_first_return_the_same_rows() {
        use crate::{Batch, Column, Config, Reader, ReplayBuffer, RowAccess};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b");
        let schema = Schema::builder()
            .field("x", DType::U32, &[3])
            .field("frame", DType::U8, &[5000])
            .build()
            .expect("schema");
        let config = Config::new(schema, 64).segment_slots(16).seed(9);
        let mut buf = ReplayBuffer::create(&path, config).expect("create");
        for i in 0..100u32 {
            let frame = vec![(i % 251) as u8; 5000];
            buf.add(&[
                Column::new("x", &[i, i + 1, i * 7]),
                Column::new("frame", &frame),
            ])
            .expect("add");
        }
        buf.flush().expect("flush");
        let draw = |buf: &mut ReplayBuffer| {
            buf.reseed(5);
            let mut batch = Batch::default();
            buf.sample_into(32, &mut batch).expect("sample");
            (
                batch.indices().to_vec(),
                batch.item_bytes(0),
                batch.item_bytes(31),
            )
        };
        let plain = draw(&mut buf);
        buf.force_page_in();
        assert_eq!(draw(&mut buf), plain);
        for access in [RowAccess::Mapped, RowAccess::Pread] {
            let mut reader = Reader::open(&path).expect("reader");
            reader.set_row_access(access).expect("access");
            let indices: Vec<u64> = plain.0.clone();
            let before = reader.get_many(&indices).expect("get");
            reader.force_page_in();
            let after = reader.get_many(&indices).expect("get");
            for r in 0..indices.len() {
                assert_eq!(
                    before.item_bytes(r),
                    after.item_bytes(r),
                    "{access:?} row {r}"
                );
            }
        }
    }
}
