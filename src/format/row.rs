//! One slot of a segment: a 16-byte row header, then the item's fields.
//!
//! ```text
//! offset  size  what
//! 0       8     stamp: 0 = never written; index + 1 = holds logical index `index`;
//!               (index + 1) | 1 << 63 = logical index `index` is being written here
//! 8       4     crc32 of the payload span, with the initial value seeded by the logical
//!               index (see `item_crc`); written when the item is sealed by a flush
//! 12      4     fragment buffers (superblock flag bit 3): bits 0..31 the row's position
//!               in the `add` / `add_batch` call that wrote it (0 starts a fragment),
//!               saturating at 2^31 - 1; bit 31 set on the call's last row. The
//!               checksum covers it. Otherwise reserved, 0
//! 16      16    episodic buffers only: the step header (episode id u64, step t u32,
//!               flags u32: bit 0 terminated, bit 1 truncated)
//! 16|32   ...   fields in schema order, each at an offset that is a multiple of its
//!               dtype's size; the payload span (step header and fields) ends where
//!               the last field ends
//! ...     ...   zero padding up to the stride: the next multiple of 64 if that is at
//!               most 9/8 of the next multiple of 8, else the next multiple of 8
//! ```
//! The stamp is written last on add (and set to "being written" first), so a complete
//! stamp means complete bytes in the page cache: after a killed process that is proof
//! enough. The checksum is what proves an item after a power loss, when pages reach the
//! disk in any order; only flushed items are promised to survive one, so it is computed
//! when a flush seals the items added since the previous one, not on every add.

use crate::schema::Schema;

const STAMP_OFF: usize = 0;
const CRC_OFF: usize = STAMP_OFF + 8;
const RESERVED_OFF: usize = CRC_OFF + 4;
/// Offset of a fragment buffer's row position word (the reserved word otherwise).
pub const FRAGMENT_POS_OFF: usize = RESERVED_OFF;
/// Position-word bit: the row is the last of its call (the fragment is complete).
pub const FRAGMENT_END: u32 = 1 << 31;
/// The largest position a position word holds; later rows of a longer call repeat it.
pub const FRAGMENT_MAX_POS: u32 = FRAGMENT_END - 1;

/// What a row stores besides its fields and stamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowTags<'a> {
    /// The encoded step header (episodic layouts only).
    pub step: Option<&'a [u8; STEP_HEADER_LEN]>,
    /// The fragment position word (fragment layouts only).
    pub fragment: u32,
}

/// The position word of row `r` of a call of `rows` rows.
///
/// ```
/// use replaystore::internal::format::row::{fragment_word, FRAGMENT_END};
/// assert_eq!(fragment_word(0, 1), FRAGMENT_END);
/// assert_eq!((fragment_word(0, 3), fragment_word(2, 3)), (0, 2 | FRAGMENT_END));
/// ```
pub fn fragment_word(r: u64, rows: u64) -> u32 {
    let pos = u32::try_from(r).map_or(FRAGMENT_MAX_POS, |p| p.min(FRAGMENT_MAX_POS));
    if r + 1 == rows {
        pos | FRAGMENT_END
    } else {
        pos
    }
}
/// Bytes of the row header (stamp, crc, reserved).
pub const ROW_HEADER_LEN: usize = RESERVED_OFF + 4;
/// Offset of the step header's episode id (episodic buffers).
pub const EPISODE_OFF: usize = ROW_HEADER_LEN;
/// Offset of the step header's step number `t` within its episode.
pub const STEP_OFF: usize = EPISODE_OFF + 8;
/// Offset of the step header's flags.
pub const STEP_FLAGS_OFF: usize = STEP_OFF + 4;
/// Bytes of the step header.
pub const STEP_HEADER_LEN: usize = STEP_FLAGS_OFF + 4 - EPISODE_OFF;
/// Step flag: the episode terminated with this row.
pub const STEP_TERMINATED: u32 = 1;
/// Step flag: the episode was truncated with this row.
pub const STEP_TRUNCATED: u32 = 2;

/// Bytes before the first field: the row header, and the step header if episodic.
pub const fn header_len(episodic: bool) -> usize {
    if episodic {
        ROW_HEADER_LEN + STEP_HEADER_LEN
    } else {
        ROW_HEADER_LEN
    }
}

/// The step header of a row of an episodic buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepHeader {
    /// The episode (numbered from 0 in the order they began).
    pub episode: u64,
    /// The row's step in its episode: 0 is the reset row.
    pub t: u32,
    /// `STEP_TERMINATED` / `STEP_TRUNCATED` on an episode's last row, else 0.
    pub flags: u32,
}

impl StepHeader {
    /// The 16 bytes stored at `EPISODE_OFF`.
    pub fn encode(&self) -> [u8; STEP_HEADER_LEN] {
        let mut b = [0u8; STEP_HEADER_LEN];
        let mut w = super::BytesMut(&mut b);
        w.u64(0, self.episode);
        w.u32(STEP_OFF - EPISODE_OFF, self.t);
        w.u32(STEP_FLAGS_OFF - EPISODE_OFF, self.flags);
        b
    }

    /// Reads the 16 bytes stored at `EPISODE_OFF`.
    pub fn decode(b: &[u8; STEP_HEADER_LEN]) -> StepHeader {
        let r = super::Bytes(b);
        StepHeader {
            episode: r.u64(0).unwrap_or(0),
            t: r.u32(STEP_OFF - EPISODE_OFF).unwrap_or(0),
            flags: r.u32(STEP_FLAGS_OFF - EPISODE_OFF).unwrap_or(0),
        }
    }

    /// Whether the episode ended with this row.
    pub fn is_last(&self) -> bool {
        self.flags & (STEP_TERMINATED | STEP_TRUNCATED) != 0
    }
}
/// Offset of the checksum within a row.
pub const ROW_CRC_OFFSET: usize = CRC_OFF;

/// Stamp of a slot never written.
pub const STAMP_EMPTY: u64 = 0;
/// Bit set in the stamp of a slot whose bytes are being replaced. The rest of the stamp
/// still names the index being written, so recovery knows every index before it was
/// handed out, even when the write cut short destroyed the only other evidence.
pub const WRITING_BIT: u64 = 1 << 63;
/// Largest capacity a buffer may have.
pub const MAX_CAPACITY: u64 = 1 << 40;
/// Largest stride of a row.
pub const MAX_ROW_STRIDE: u64 = (crate::schema::MAX_ITEM_BYTES as u64) * 2 + 64;

/// The stamp that marks a slot as holding logical index `index`.
pub const fn stamp_of(index: u64) -> u64 {
    index + 1
}

/// The stamp at the start of a row's bytes as copied out of the file (little-endian, as
/// every word of the format); `STAMP_EMPTY` when fewer than 8 bytes were copied.
pub fn read_stamp(row: &[u8]) -> u64 {
    row.first_chunk::<8>()
        .map_or(STAMP_EMPTY, |b| u64::from_le_bytes(*b))
}

/// The stamp of a slot while logical index `index` is being written into it.
pub const fn writing_stamp(index: u64) -> u64 {
    (index + 1) | WRITING_BIT
}

/// The logical index a complete slot holds, if the stamp says it is complete.
pub const fn index_of(stamp: u64) -> Option<u64> {
    if stamp == STAMP_EMPTY || stamp & WRITING_BIT != 0 {
        None
    } else {
        Some(stamp - 1)
    }
}

/// The logical index being written, if the stamp says a write was under way.
pub const fn writing_index(stamp: u64) -> Option<u64> {
    if stamp & WRITING_BIT != 0 && stamp != WRITING_BIT {
        Some((stamp & !WRITING_BIT) - 1)
    } else {
        None
    }
}

/// Where each field of an item sits inside a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowLayout {
    /// Per field: (offset in the row, bytes), in schema order: the fixed fields, then
    /// the 16 slot bytes of each variable-length field (`format::heap`), which rows are
    /// written and gathered with like fields.
    pub fields: Vec<(usize, usize)>,
    /// How many of `fields` are the schema's fixed fields.
    pub fixed: usize,
    /// Rows carry a step header at `EPISODE_OFF`.
    pub episodic: bool,
    /// Rows carry their fragment position at `FRAGMENT_POS_OFF`.
    pub fragments: bool,
    /// First byte after the last field.
    pub payload_end: usize,
    /// Bytes per row, a multiple of 8.
    pub stride: usize,
}

impl RowLayout {
    /// The layout of a schema's rows.
    ///
    /// ```
    /// use replaystore::internal::format::row::RowLayout;
    /// use replaystore::{DType, Schema};
    /// let s = Schema::builder().field("a", DType::U8, &[]).field("b", DType::F32, &[2]).build()?;
    /// let l = RowLayout::of(&s);
    /// assert_eq!(l.fields, vec![(16, 1), (20, 8)]);
    /// assert_eq!(l.stride, 32);
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn of(schema: &Schema) -> RowLayout {
        RowLayout::with_steps(schema, false)
    }

    /// The layout of rows that carry a step header when `episodic`.
    pub fn with_steps(schema: &Schema, episodic: bool) -> RowLayout {
        let mut off = header_len(episodic);
        let mut fields: Vec<(usize, usize)> = schema
            .fields()
            .iter()
            .map(|f| {
                off = off.next_multiple_of(f.dtype().size());
                let at = off;
                off += f.bytes();
                (at, f.bytes())
            })
            .collect();
        let fixed = fields.len();
        for _ in schema.var_fields() {
            off = off.next_multiple_of(8);
            fields.push((off, crate::schema::VAR_SLOT_BYTES));
            off += crate::schema::VAR_SLOT_BYTES;
        }
        // A row that starts on a cache line and spans whole lines costs the fewest line
        // reads when sampled at random (a 184-byte row at any offset spans 3.9 lines on
        // average, at a 192-byte stride exactly 3): align to 64 when it costs at most an
        // eighth more space.
        let packed = off.next_multiple_of(8);
        let aligned = off.next_multiple_of(64);
        let stride = if aligned * 8 <= packed * 9 {
            aligned
        } else {
            packed
        };
        RowLayout {
            fields,
            fixed,
            episodic,
            fragments: false,
            payload_end: off,
            stride,
        }
    }

    /// The layout of a chunk row of the chunk ring: the row header, then one field of
    /// `chunk` payload bytes (`chunk` a multiple of 8, so the stride is header + chunk).
    ///
    /// ```
    /// use replaystore::internal::format::row::RowLayout;
    /// let l = RowLayout::of_chunks(1008);
    /// assert_eq!((l.fields.clone(), l.stride), (vec![(16, 1008)], 1024));
    /// ```
    pub fn of_chunks(chunk: usize) -> RowLayout {
        RowLayout {
            fields: vec![(ROW_HEADER_LEN, chunk)],
            fixed: 1,
            episodic: false,
            fragments: false,
            payload_end: ROW_HEADER_LEN + chunk,
            stride: (ROW_HEADER_LEN + chunk).next_multiple_of(8),
        }
    }

    /// The same layout, with rows that carry their fragment position when `fragments`
    /// (the fields do not move).
    pub fn with_fragments(mut self, fragments: bool) -> RowLayout {
        self.fragments = fragments;
        self
    }

    /// The byte range the checksum covers (after the index): from the fragment
    /// position when rows carry one, else from the end of the row header.
    pub fn payload_span(&self) -> std::ops::Range<usize> {
        let from = if self.fragments {
            FRAGMENT_POS_OFF
        } else {
            ROW_HEADER_LEN
        };
        from..self.payload_end
    }
}

/// The checksum of an item: CRC-32 (IEEE) of its payload span, started from an initial
/// value derived from its logical index (`(index as u32) ^ (index >> 32) as u32`).
/// Binding the index in means a row moved to the wrong slot, or a stale row under a new
/// stamp, fails the check; seeding rather than hashing 8 more bytes keeps the per-add
/// cost to one pass over the payload.
pub fn item_crc(index: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(item_seed(index));
    h.update(payload);
    h.finalize()
}

/// The initial value an item's checksum starts from (see [`item_crc`]).
///
/// ```
/// use replaystore::internal::format::row::item_seed;
/// assert_eq!(item_seed(5), 5);
/// assert_eq!(item_seed(1 << 32 | 5), 4);
/// ```
pub fn item_seed(index: u64) -> u32 {
    (index as u32) ^ ((index >> 32) as u32)
}
