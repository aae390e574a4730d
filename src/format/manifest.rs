//! The MANIFEST file: an immutable superblock, two alternating commit slots, the schema.
//!
//! ```text
//! offset  size  what
//! 0       4096  superblock (written once at create, never changed)
//! 4096    4096  commit slot A (even generations)
//! 8192    4096  commit slot B (odd generations)
//! 12288   n     schema (rkyv archive, n = superblock.schema_len)
//! ```
//! Each commit slot lives in its own 4 KiB page so a torn write of one can never touch
//! the other; the newer valid slot wins on open.

use super::{
    BASE_VERSION, Bytes, BytesMut, HEAP_VERSION, LIFECYCLE_VERSION, Problem, checksum, crc32,
    magic, need,
};

/// Magic at the start of MANIFEST.
pub const MAGIC: [u8; 8] = *b"RPLYSTOR";

// Superblock fields, chained.
const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const FLAGS_OFF: usize = VERSION_OFF + 4;
const UUID_OFF: usize = FLAGS_OFF + 4;
const CAPACITY_OFF: usize = UUID_OFF + 16;
const SEGMENT_SLOTS_OFF: usize = CAPACITY_OFF + 8;
const SEGMENT_COUNT_OFF: usize = SEGMENT_SLOTS_OFF + 8;
const ROW_STRIDE_OFF: usize = SEGMENT_COUNT_OFF + 8;
const ITEM_BYTES_OFF: usize = ROW_STRIDE_OFF + 8;
const SCHEMA_OFFSET_OFF: usize = ITEM_BYTES_OFF + 8;
const SCHEMA_LEN_OFF: usize = SCHEMA_OFFSET_OFF + 8;
const SCHEMA_CRC_OFF: usize = SCHEMA_LEN_OFF + 8;
const SUPERBLOCK_CRC_OFF: usize = SCHEMA_CRC_OFF + 4;
/// Bytes of a version-1 superblock that carry data (the rest of its page is zero).
pub const SUPERBLOCK_LEN: usize = SUPERBLOCK_CRC_OFF + 4;
// Version 2 (items with variable-length fields): the chunk ring's geometry where
// version 1 has its crc, then the crc.
const HEAP_CAPACITY_OFF: usize = SUPERBLOCK_CRC_OFF;
const HEAP_SEGMENT_SLOTS_OFF: usize = HEAP_CAPACITY_OFF + 8;
const HEAP_SEGMENT_COUNT_OFF: usize = HEAP_SEGMENT_SLOTS_OFF + 8;
const HEAP_STRIDE_OFF: usize = HEAP_SEGMENT_COUNT_OFF + 8;
const SUPERBLOCK_V2_CRC_OFF: usize = HEAP_STRIDE_OFF + 8;
/// Bytes of a version-2 superblock that carry data.
pub const SUPERBLOCK_V2_LEN: usize = SUPERBLOCK_V2_CRC_OFF + 4;
/// Largest stride of a chunk row.
pub const MAX_CHUNK_STRIDE: u64 = 1 << 20;

/// Bytes reserved for the superblock and for each commit slot: one page each.
pub const PAGE: usize = 4096;
/// Offset of commit slot A; slot B follows one page later.
pub const COMMIT_SLOT_OFFSET: [usize; 2] = [PAGE, 2 * PAGE];
/// Offset of the schema archive.
pub const SCHEMA_OFFSET: usize = 3 * PAGE;
/// Largest schema archive accepted on open (a hostile length must not allocate much).
pub const MAX_SCHEMA_LEN: u64 = 1 << 20;

// Commit slot fields, chained.
const C_MAGIC_OFF: usize = 0;
const C_SLOT_OFF: usize = C_MAGIC_OFF + 4;
const C_GENERATION_OFF: usize = C_SLOT_OFF + 4;
const C_HEAD_OFF: usize = C_GENERATION_OFF + 8;
const C_TAIL_OFF: usize = C_HEAD_OFF + 8;
const C_CLEARED_OFF: usize = C_TAIL_OFF + 8;
const C_SAMPLED_OFF: usize = C_CLEARED_OFF + 8;
const C_RNG_SEED_OFF: usize = C_SAMPLED_OFF + 8;
const C_RNG_POS_OFF: usize = C_RNG_SEED_OFF + 8;
const C_BOOT_ID_OFF: usize = C_RNG_POS_OFF + 16;
const C_FLAGS_OFF: usize = C_BOOT_ID_OFF + 16;
const C_CRC_OFF: usize = C_FLAGS_OFF + 4;
/// Bytes of a commit slot that carry data.
pub const COMMIT_LEN: usize = C_CRC_OFF + 4;
/// Magic at the start of each commit slot.
pub const COMMIT_MAGIC: [u8; 4] = *b"CMIT";

/// Commit flag: the writer closed the buffer cleanly, so no recovery scan is needed.
pub const FLAG_CLEAN: u32 = 1;
const KNOWN_FLAGS: u32 = FLAG_CLEAN;

/// The immutable description of a buffer's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Identity of the buffer; every segment header repeats it.
    pub uuid: [u8; 16],
    /// Items the ring holds.
    pub capacity: u64,
    /// Slots per segment file (a power of two).
    pub segment_slots: u64,
    /// Number of segment files.
    pub segment_count: u64,
    /// Bytes per slot (row header + payload + padding, a multiple of 8).
    pub row_stride: u64,
    /// Payload bytes per item.
    pub item_bytes: u64,
    /// Length of the schema archive.
    pub schema_len: u64,
    /// CRC-32 of the schema archive.
    pub schema_crc: u32,
    /// The buffer keeps priorities in `priorities.tree` (superblock flag bit 0).
    pub prioritized: bool,
    /// Rows carry a step header: episode id, step, end flags (superblock flag bit 1).
    pub episodic: bool,
    /// Eviction removes whole episodes: when a row would overwrite the oldest live row,
    /// the head moves past that row's whole episode (superblock flag bit 2; only with
    /// bit 1). RLlib's `StorageUnit.EPISODES`.
    pub whole_episodes: bool,
    /// Rows carry their position in the `add` / `add_batch` call that wrote them, so
    /// the calls' fragments can be sampled whole (superblock flag bit 3; not with bit
    /// 1). RLlib's `StorageUnit.FRAGMENTS`.
    pub fragments: bool,
    /// The chunk ring holding the values of variable-length fields, if items have any
    /// (format version 2, or 3 with bytes 92..124 non-zero).
    pub heap: Option<HeapGeometry>,
    /// Each item has a state word in `items.state`: removed or live, and its uses
    /// (superblock flag bit 4, format version 3).
    pub lifecycle: bool,
    /// When the chunk ring is full, an add evicts the oldest items for room even while
    /// the buffer holds fewer than `capacity` (superblock flag bit 5; only with a chunk
    /// ring). Without it such an add is refused (`ValueSpaceFull`).
    pub evict_for_room: bool,
}

/// Where the chunk ring of a version-2 buffer keeps its rows: `lane-K/heap-N.dat`, in
/// the segment format of the data segments (FORMAT.md, "Chunk ring").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapGeometry {
    /// Chunk rows in the ring.
    pub capacity: u64,
    /// Chunk rows per heap segment (a power of two).
    pub segment_slots: u64,
    /// Number of heap segment files.
    pub segment_count: u64,
    /// Bytes per chunk row: the 16-byte row header, then the chunk's payload.
    pub stride: u64,
}

impl HeapGeometry {
    /// Payload bytes of one chunk.
    pub fn chunk_bytes(&self) -> u64 {
        self.stride
            .saturating_sub(super::row::ROW_HEADER_LEN as u64)
    }
}

/// Superblock flag: the buffer has a `priorities.tree`. Builds that predate it reject
/// the flag, so they never write to such a buffer without keeping its tree.
pub const SB_FLAG_PRIORITIES: u32 = 1;
/// Superblock flag: every row has a step header after its row header (episodes).
/// Builds that predate it reject the flag, so they never misread such rows.
pub const SB_FLAG_EPISODES: u32 = 2;
/// Superblock flag: eviction removes whole episodes. Builds that predate it reject the
/// flag, so they never evict part of an episode from such a buffer.
pub const SB_FLAG_WHOLE_EPISODES: u32 = 4;
/// Superblock flag: rows carry their fragment position (row header bytes 12..16, under
/// the checksum). Builds that predate it reject the flag, so they never leave a stale
/// position in a slot they reuse.
pub const SB_FLAG_FRAGMENTS: u32 = 8;
/// Superblock flag: the buffer has `items.state`, a state word per slot (format version
/// 3, which builds before it refuse, so none of them draws a removed item).
pub const SB_FLAG_LIFECYCLE: u32 = 16;
/// Superblock flag: an add may evict items before capacity to make room in the chunk
/// ring (without it, such an add is refused). Builds that predate it reject the flag;
/// they evicted for room in every buffer.
pub const SB_FLAG_EVICT_FOR_ROOM: u32 = 32;
/// Superblock flag: an episodic buffer with a chunk ring (its step rows hold value
/// slots), set exactly when both are. Builds that predate it reject the flag: their
/// `add_step` wrote no slots, so a row would name the values of the item its slot
/// held a lap before.
pub const SB_FLAG_EPISODE_VALUES: u32 = 64;
/// Superblock flag: an episodic buffer with item states (whole episodes removed), set
/// exactly when both are. Builds that predate it reject the flag: they refused item
/// states in episodic buffers, and their transition and sequence draws would return
/// the rows of removed episodes.
pub const SB_FLAG_EPISODE_STATES: u32 = 128;
const SB_KNOWN_FLAGS: u32 = SB_FLAG_PRIORITIES
    | SB_FLAG_EPISODES
    | SB_FLAG_WHOLE_EPISODES
    | SB_FLAG_FRAGMENTS
    | SB_FLAG_LIFECYCLE
    | SB_FLAG_EVICT_FOR_ROOM
    | SB_FLAG_EPISODE_VALUES
    | SB_FLAG_EPISODE_STATES;

impl Superblock {
    /// Segments needed for `capacity` slots of `segment_slots` each.
    pub fn segments_for(capacity: u64, segment_slots: u64) -> u64 {
        capacity.div_ceil(segment_slots.max(1))
    }

    /// The superblock's bytes (one page).
    pub fn encode(&self) -> Vec<u8> {
        let mut page = vec![0u8; PAGE];
        let mut w = BytesMut(&mut page);
        w.put(MAGIC_OFF, &MAGIC);
        w.u32(VERSION_OFF, self.version());
        let flag = |on: bool, bit: u32| if on { bit } else { 0 };
        w.u32(
            FLAGS_OFF,
            flag(self.prioritized, SB_FLAG_PRIORITIES)
                | flag(self.episodic, SB_FLAG_EPISODES)
                | flag(self.whole_episodes, SB_FLAG_WHOLE_EPISODES)
                | flag(self.fragments, SB_FLAG_FRAGMENTS)
                | flag(self.lifecycle, SB_FLAG_LIFECYCLE)
                | flag(self.evict_for_room, SB_FLAG_EVICT_FOR_ROOM)
                | flag(self.episodic && self.heap.is_some(), SB_FLAG_EPISODE_VALUES)
                | flag(self.episodic && self.lifecycle, SB_FLAG_EPISODE_STATES),
        );
        w.put(UUID_OFF, &self.uuid);
        w.u64(CAPACITY_OFF, self.capacity);
        w.u64(SEGMENT_SLOTS_OFF, self.segment_slots);
        w.u64(SEGMENT_COUNT_OFF, self.segment_count);
        w.u64(ROW_STRIDE_OFF, self.row_stride);
        w.u64(ITEM_BYTES_OFF, self.item_bytes);
        w.u64(SCHEMA_OFFSET_OFF, SCHEMA_OFFSET as u64);
        w.u64(SCHEMA_LEN_OFF, self.schema_len);
        w.u32(SCHEMA_CRC_OFF, self.schema_crc);
        if let Some(h) = self.heap {
            w.u64(HEAP_CAPACITY_OFF, h.capacity);
            w.u64(HEAP_SEGMENT_SLOTS_OFF, h.segment_slots);
            w.u64(HEAP_SEGMENT_COUNT_OFF, h.segment_count);
            w.u64(HEAP_STRIDE_OFF, h.stride);
        }
        // Version 3 has version 2's layout, with zeros for a chunk ring it does not have.
        let crc_off = match self.version() {
            BASE_VERSION => SUPERBLOCK_CRC_OFF,
            _ => SUPERBLOCK_V2_CRC_OFF,
        };
        let crc = crc32(page.get(..crc_off).unwrap_or(&[]));
        BytesMut(&mut page).u32(crc_off, crc);
        page
    }

    /// The MANIFEST's format version: 3 for a buffer with item states, else 2 for items
    /// with variable-length fields, else 1.
    pub fn version(&self) -> u32 {
        if self.lifecycle {
            LIFECYCLE_VERSION
        } else if self.heap.is_some() {
            HEAP_VERSION
        } else {
            BASE_VERSION
        }
    }

    /// The version of the schema archive: 2 (with the variable-length fields) when the
    /// buffer has a chunk ring, else 1.
    pub fn schema_version(&self) -> u32 {
        if self.heap.is_some() {
            HEAP_VERSION
        } else {
            BASE_VERSION
        }
    }

    /// Decodes and checks a superblock: magic, version, checksum, then each field's range.
    pub fn decode(bytes: &[u8]) -> Result<Superblock, Problem> {
        need(bytes, MAGIC.len())?;
        magic(bytes, MAGIC_OFF, &MAGIC)?;
        need(bytes, SUPERBLOCK_LEN)?;
        let r = Bytes(bytes);
        let version = r.u32(VERSION_OFF).unwrap_or(0);
        // The version says where the crc is: read before the crc is checked, and a
        // damaged version finds no matching crc where it points.
        let crc_off = match version {
            BASE_VERSION => SUPERBLOCK_CRC_OFF,
            HEAP_VERSION | LIFECYCLE_VERSION => SUPERBLOCK_V2_CRC_OFF,
            _ => {
                checksum(bytes, 0, SUPERBLOCK_CRC_OFF, SUPERBLOCK_CRC_OFF)?;
                return Err(Problem::VersionOf {
                    found: version,
                    supported: LIFECYCLE_VERSION,
                });
            }
        };
        need(bytes, crc_off + 4)?;
        checksum(bytes, 0, crc_off, crc_off)?;
        let field = |off: usize| r.u64(off).unwrap_or(0);
        let sb = Superblock {
            uuid: r.array(UUID_OFF).unwrap_or([0; 16]),
            capacity: field(CAPACITY_OFF),
            segment_slots: field(SEGMENT_SLOTS_OFF),
            segment_count: field(SEGMENT_COUNT_OFF),
            row_stride: field(ROW_STRIDE_OFF),
            item_bytes: field(ITEM_BYTES_OFF),
            schema_len: field(SCHEMA_LEN_OFF),
            schema_crc: r.u32(SCHEMA_CRC_OFF).unwrap_or(0),
            prioritized: false,
            episodic: false,
            whole_episodes: false,
            fragments: false,
            // Version 3 has a chunk ring when its capacity is not zero; a version-3
            // superblock with zero there must have zeros in all four words (below).
            heap: (version == HEAP_VERSION
                || (version == LIFECYCLE_VERSION && field(HEAP_CAPACITY_OFF) != 0))
                .then(|| HeapGeometry {
                    capacity: field(HEAP_CAPACITY_OFF),
                    segment_slots: field(HEAP_SEGMENT_SLOTS_OFF),
                    segment_count: field(HEAP_SEGMENT_COUNT_OFF),
                    stride: field(HEAP_STRIDE_OFF),
                }),
            lifecycle: false,
            evict_for_room: false,
        };
        let bad = |offset: usize, name: &'static str, expected: String, got: u64| {
            Err(Problem::Field {
                offset: offset as u64,
                name,
                expected,
                got: got.to_string(),
            })
        };
        let flags = r.u32(FLAGS_OFF).unwrap_or(0);
        if flags & !SB_KNOWN_FLAGS != 0 {
            return bad(
                FLAGS_OFF,
                "flags",
                format!("only bits {SB_KNOWN_FLAGS:#x}"),
                flags.into(),
            );
        }
        let sb = Superblock {
            prioritized: flags & SB_FLAG_PRIORITIES != 0,
            episodic: flags & SB_FLAG_EPISODES != 0,
            whole_episodes: flags & SB_FLAG_WHOLE_EPISODES != 0,
            fragments: flags & SB_FLAG_FRAGMENTS != 0,
            lifecycle: flags & SB_FLAG_LIFECYCLE != 0,
            evict_for_room: flags & SB_FLAG_EVICT_FOR_ROOM != 0,
            ..sb
        };
        if (flags & SB_FLAG_EPISODE_VALUES != 0) != (sb.episodic && sb.heap.is_some()) {
            return bad(
                FLAGS_OFF,
                "flags",
                "bit 6 (episode values) set exactly with bit 1 and a chunk ring".into(),
                flags.into(),
            );
        }
        if (flags & SB_FLAG_EPISODE_STATES != 0) != (sb.episodic && sb.lifecycle) {
            return bad(
                FLAGS_OFF,
                "flags",
                "bit 7 (episode states) set exactly with bits 1 and 4".into(),
                flags.into(),
            );
        }
        if sb.evict_for_room && sb.heap.is_none() {
            return bad(
                FLAGS_OFF,
                "flags",
                "bit 5 (evict for room) only with a chunk ring".into(),
                flags.into(),
            );
        }
        if sb.lifecycle != (version == LIFECYCLE_VERSION) {
            return bad(
                FLAGS_OFF,
                "flags",
                "bit 4 (item states) set exactly in version 3".into(),
                flags.into(),
            );
        }
        if version == LIFECYCLE_VERSION && sb.heap.is_none() {
            let stray = [
                HEAP_SEGMENT_SLOTS_OFF,
                HEAP_SEGMENT_COUNT_OFF,
                HEAP_STRIDE_OFF,
            ]
            .into_iter()
            .find(|&off| field(off) != 0);
            if let Some(off) = stray {
                let expected = "0 (no chunk ring: its capacity is 0)".into();
                return bad(off, "heap geometry", expected, field(off));
            }
        }
        if sb.whole_episodes && !sb.episodic {
            return bad(
                FLAGS_OFF,
                "flags",
                "bit 2 (whole episodes) only with bit 1 (episodes)".into(),
                flags.into(),
            );
        }
        if sb.fragments && sb.episodic {
            return bad(
                FLAGS_OFF,
                "flags",
                "bit 3 (fragments) not with bit 1 (episodes)".into(),
                flags.into(),
            );
        }
        if sb.capacity == 0 || sb.capacity > super::row::MAX_CAPACITY {
            return bad(
                CAPACITY_OFF,
                "capacity",
                format!("1..={}", super::row::MAX_CAPACITY),
                sb.capacity,
            );
        }
        if !sb.segment_slots.is_power_of_two() {
            return bad(
                SEGMENT_SLOTS_OFF,
                "segment_slots",
                "a power of two".into(),
                sb.segment_slots,
            );
        }
        let segments = Superblock::segments_for(sb.capacity, sb.segment_slots);
        if sb.segment_count != segments {
            return bad(
                SEGMENT_COUNT_OFF,
                "segment_count",
                segments.to_string(),
                sb.segment_count,
            );
        }
        if !sb.row_stride.is_multiple_of(8)
            || sb.row_stride < super::row::header_len(sb.episodic) as u64 + sb.item_bytes
        {
            return bad(
                ROW_STRIDE_OFF,
                "row_stride",
                "a multiple of 8 holding the row header and payload".into(),
                sb.row_stride,
            );
        }
        if sb.row_stride > super::row::MAX_ROW_STRIDE {
            return bad(
                ROW_STRIDE_OFF,
                "row_stride",
                format!("at most {}", super::row::MAX_ROW_STRIDE),
                sb.row_stride,
            );
        }
        let schema_offset = field(SCHEMA_OFFSET_OFF);
        if schema_offset != SCHEMA_OFFSET as u64 {
            return bad(
                SCHEMA_OFFSET_OFF,
                "schema_offset",
                SCHEMA_OFFSET.to_string(),
                schema_offset,
            );
        }
        if sb.schema_len == 0 || sb.schema_len > MAX_SCHEMA_LEN {
            return bad(
                SCHEMA_LEN_OFF,
                "schema_len",
                format!("1..={MAX_SCHEMA_LEN}"),
                sb.schema_len,
            );
        }
        if let Some(h) = sb.heap {
            if h.capacity == 0 || h.capacity > super::row::MAX_CAPACITY {
                return bad(
                    HEAP_CAPACITY_OFF,
                    "heap capacity",
                    format!("1..={}", super::row::MAX_CAPACITY),
                    h.capacity,
                );
            }
            if !h.segment_slots.is_power_of_two() {
                return bad(
                    HEAP_SEGMENT_SLOTS_OFF,
                    "heap segment_slots",
                    "a power of two".into(),
                    h.segment_slots,
                );
            }
            let segments = Superblock::segments_for(h.capacity, h.segment_slots);
            if h.segment_count != segments {
                return bad(
                    HEAP_SEGMENT_COUNT_OFF,
                    "heap segment_count",
                    segments.to_string(),
                    h.segment_count,
                );
            }
            let least = super::row::ROW_HEADER_LEN as u64 + 8;
            if !h.stride.is_multiple_of(8) || h.stride < least || h.stride > MAX_CHUNK_STRIDE {
                return bad(
                    HEAP_STRIDE_OFF,
                    "heap stride",
                    format!("a multiple of 8 in {least}..={MAX_CHUNK_STRIDE}"),
                    h.stride,
                );
            }
        }
        Ok(sb)
    }

    /// Total length of a MANIFEST with this superblock.
    pub fn manifest_len(&self) -> u64 {
        SCHEMA_OFFSET as u64 + self.schema_len
    }
}

/// One committed state of the ring: what is live and where the RNG stream stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Commit {
    /// Increases by one with every commit; decides which slot is newer.
    pub generation: u64,
    /// Oldest live logical index.
    pub head: u64,
    /// One past the newest live logical index; the next item gets this index.
    pub tail: u64,
    /// Items dropped by `clear`.
    pub cleared: u64,
    /// Items returned by `sample` so far.
    pub sampled: u64,
    /// Seed of the sampling RNG.
    pub rng_seed: u64,
    /// Position in the RNG's stream (ChaCha word position).
    pub rng_word_pos: u128,
    /// The kernel's boot id when the commit was written: on an unclean open in the same
    /// boot the page cache survived (a killed process), so slot stamps can be trusted.
    pub boot_id: [u8; 16],
    /// `FLAG_CLEAN` when the writer closed cleanly.
    pub flags: u32,
}

impl Commit {
    /// Which slot (0 = A, 1 = B) this commit is written to.
    pub fn slot(&self) -> usize {
        (self.generation % 2) as usize
    }

    /// Whether the writer closed cleanly after this commit.
    pub fn is_clean(&self) -> bool {
        self.flags & FLAG_CLEAN != 0
    }

    /// The slot's bytes.
    pub fn encode(&self) -> [u8; COMMIT_LEN] {
        let mut b = [0u8; COMMIT_LEN];
        let mut w = BytesMut(&mut b);
        w.put(C_MAGIC_OFF, &COMMIT_MAGIC);
        w.u32(C_SLOT_OFF, self.slot() as u32);
        w.u64(C_GENERATION_OFF, self.generation);
        w.u64(C_HEAD_OFF, self.head);
        w.u64(C_TAIL_OFF, self.tail);
        w.u64(C_CLEARED_OFF, self.cleared);
        w.u64(C_SAMPLED_OFF, self.sampled);
        w.u64(C_RNG_SEED_OFF, self.rng_seed);
        w.u128(C_RNG_POS_OFF, self.rng_word_pos);
        w.put(C_BOOT_ID_OFF, &self.boot_id);
        w.u32(C_FLAGS_OFF, self.flags);
        let crc = crc32(b.get(..C_CRC_OFF).unwrap_or(&[]));
        BytesMut(&mut b).u32(C_CRC_OFF, crc);
        b
    }

    /// Decodes and checks the commit slot `slot` (0 or 1), given the buffer's capacity.
    pub fn decode(bytes: &[u8], slot: usize, capacity: u64) -> Result<Commit, Problem> {
        need(bytes, COMMIT_LEN)?;
        magic(bytes, C_MAGIC_OFF, &COMMIT_MAGIC)?;
        checksum(bytes, 0, C_CRC_OFF, C_CRC_OFF)?;
        let r = Bytes(bytes);
        let field = |off: usize| r.u64(off).unwrap_or(0);
        let c = Commit {
            generation: field(C_GENERATION_OFF),
            head: field(C_HEAD_OFF),
            tail: field(C_TAIL_OFF),
            cleared: field(C_CLEARED_OFF),
            sampled: field(C_SAMPLED_OFF),
            rng_seed: field(C_RNG_SEED_OFF),
            rng_word_pos: r.u128(C_RNG_POS_OFF).unwrap_or(0),
            boot_id: r.array(C_BOOT_ID_OFF).unwrap_or([0; 16]),
            flags: r.u32(C_FLAGS_OFF).unwrap_or(0),
        };
        let stored_slot = r.u32(C_SLOT_OFF).unwrap_or(u32::MAX);
        let fail = |off: usize, name: &'static str, expected: String, got: String| {
            Err(Problem::Field {
                offset: off as u64,
                name,
                expected,
                got,
            })
        };
        if stored_slot as usize != slot || c.slot() != slot {
            return fail(
                C_GENERATION_OFF,
                "generation",
                format!("a generation belonging in slot {slot}"),
                format!("generation {} (slot field {stored_slot})", c.generation),
            );
        }
        if c.head > c.tail || c.tail - c.head > capacity {
            return fail(
                C_HEAD_OFF,
                "head/tail",
                format!("head <= tail <= head + {capacity}"),
                format!("head {} tail {}", c.head, c.tail),
            );
        }
        if c.cleared > c.head {
            return fail(
                C_CLEARED_OFF,
                "cleared",
                format!("<= head {}", c.head),
                c.cleared.to_string(),
            );
        }
        if c.flags & !KNOWN_FLAGS != 0 {
            return fail(
                C_FLAGS_OFF,
                "flags",
                format!("only bits {KNOWN_FLAGS:#x}"),
                format!("{:#x}", c.flags),
            );
        }
        Ok(c)
    }
}

/// Offset, within each commit slot's page, of that page's eviction record: a sector
/// away from the commit slot, so a write torn in one sector never reaches both.
pub const EVICT_OFFSET: usize = 2048;
const E_MAGIC_OFF: usize = 0;
const E_RESERVED_OFF: usize = E_MAGIC_OFF + 4;
const E_GENERATION_OFF: usize = E_RESERVED_OFF + 4;
const E_HEAD_OFF: usize = E_GENERATION_OFF + 8;
const E_CRC_OFF: usize = E_HEAD_OFF + 8;
/// Bytes of an eviction record.
pub const EVICT_LEN: usize = E_CRC_OFF + 4;
/// Magic of an eviction record.
pub const EVICT_MAGIC: [u8; 4] = *b"EVCT";

/// "After commit `generation`, items below `head` may have been overwritten in place":
/// written durably before the writer overwrites an item the newest commit still
/// covers, so that after a power cut recovery never serves an item whose slot (or
/// priority leaf) may hold a newer item's bytes. Only recovery in another boot reads
/// it: in the same boot the stamps tell. See FORMAT.md, "Eviction records".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// The commit it extends.
    pub generation: u64,
    /// Items below this index may be gone.
    pub head: u64,
}

impl Eviction {
    /// The record's bytes.
    pub fn encode(&self) -> [u8; EVICT_LEN] {
        let mut b = [0u8; EVICT_LEN];
        let mut w = BytesMut(&mut b);
        w.put(E_MAGIC_OFF, &EVICT_MAGIC);
        w.u64(E_GENERATION_OFF, self.generation);
        w.u64(E_HEAD_OFF, self.head);
        let crc = crc32(b.get(..E_CRC_OFF).unwrap_or(&[]));
        BytesMut(&mut b).u32(E_CRC_OFF, crc);
        b
    }

    /// The record in `bytes`: `Ok(None)` where none was ever written (all zero, as in
    /// buffers from before records existed), a `Problem` when one is damaged. A damaged
    /// record is one a power cut tore while it was written, which is before any item
    /// it guards was overwritten: recovery may ignore it, `verify` reports it.
    pub fn decode(bytes: &[u8]) -> Result<Option<Eviction>, Problem> {
        need(bytes, EVICT_LEN)?;
        if bytes
            .get(..EVICT_LEN)
            .is_some_and(|b| b.iter().all(|&x| x == 0))
        {
            return Ok(None);
        }
        magic(bytes, E_MAGIC_OFF, &EVICT_MAGIC)?;
        checksum(bytes, 0, E_CRC_OFF, E_CRC_OFF)?;
        let r = Bytes(bytes);
        Ok(Some(Eviction {
            generation: r.u64(E_GENERATION_OFF).unwrap_or(0),
            head: r.u64(E_HEAD_OFF).unwrap_or(0),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bytes` with `value` at `off` and the superblock checksum made right again: a
    /// well-formed superblock that breaks one rule (no bit flip reaches these checks:
    /// the checksum catches it first).
    fn resealed(bytes: &[u8], off: usize, value: u64) -> Vec<u8> {
        let mut b = bytes.to_vec();
        match off {
            VERSION_OFF | FLAGS_OFF => BytesMut(&mut b).u32(off, value as u32),
            _ => BytesMut(&mut b).u64(off, value),
        }
        let crc = crc32(&b[..SUPERBLOCK_CRC_OFF]);
        BytesMut(&mut b).u32(SUPERBLOCK_CRC_OFF, crc);
        b
    }

    #[test]
    fn each_superblock_rule_refuses_a_well_checksummed_superblock_that_breaks_it() {
        let good = sb().encode();
        let max_cap = super::super::row::MAX_CAPACITY;
        let max_stride = super::super::row::MAX_ROW_STRIDE;
        let cases: [(usize, u64); 15] = [
            (FLAGS_OFF, 1 << 7),
            (FLAGS_OFF, u64::from(SB_FLAG_WHOLE_EPISODES)),
            (FLAGS_OFF, u64::from(SB_FLAG_FRAGMENTS | SB_FLAG_EPISODES)),
            (CAPACITY_OFF, 0),
            (CAPACITY_OFF, max_cap + 1),
            (SEGMENT_SLOTS_OFF, 3),
            (SEGMENT_COUNT_OFF, 5),
            (ROW_STRIDE_OFF, 201),
            (ROW_STRIDE_OFF, 16),
            (ROW_STRIDE_OFF, (max_stride + 8) / 8 * 8),
            (SCHEMA_OFFSET_OFF, 4096),
            (SCHEMA_LEN_OFF, 0),
            (SCHEMA_LEN_OFF, MAX_SCHEMA_LEN + 1),
            (CAPACITY_OFF, 1000),
            (VERSION_OFF, 4),
        ];
        for (off, value) in cases {
            let got = Superblock::decode(&resealed(&good, off, value));
            match (off, value) {
                // The control: a legal value, resealed, still decodes.
                (CAPACITY_OFF, 1000) => assert_eq!(got, Ok(sb())),
                (VERSION_OFF, v) => assert_eq!(
                    got,
                    Err(Problem::VersionOf {
                        found: v as u32,
                        supported: LIFECYCLE_VERSION
                    })
                ),
                _ => assert!(
                    matches!(&got, Err(Problem::Field { offset, .. }) if *offset == off as u64),
                    "offset {off} value {value}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn each_commit_rule_refuses_a_well_checksummed_slot_that_breaks_it() {
        let ok = Commit {
            generation: 6,
            head: 10,
            tail: 20,
            cleared: 4,
            ..Commit::default()
        };
        assert_eq!(Commit::decode(&ok.encode(), 0, 100), Ok(ok));
        let refused = |c: Commit, slot: usize, off: usize| {
            let got = Commit::decode(&c.encode(), slot, 100);
            assert!(
                matches!(&got, Err(Problem::Field { offset, .. }) if *offset == off as u64),
                "{c:?} in slot {slot}: {got:?}"
            );
        };
        refused(ok, 1, C_GENERATION_OFF);
        refused(Commit { head: 21, ..ok }, 0, C_HEAD_OFF);
        refused(Commit { tail: 200, ..ok }, 0, C_HEAD_OFF);
        refused(Commit { cleared: 11, ..ok }, 0, C_CLEARED_OFF);
        refused(Commit { flags: 2, ..ok }, 0, C_FLAGS_OFF);
    }

    #[test]
    fn an_eviction_record_round_trips_and_any_flipped_bit_or_cut_is_detected() {
        let e = Eviction {
            generation: 41,
            head: 1_000_003,
        };
        let good = e.encode();
        assert_eq!(Eviction::decode(&good), Ok(Some(e)));
        assert_eq!(Eviction::decode(&[0u8; EVICT_LEN]), Ok(None));
        for byte in 0..EVICT_LEN {
            for bit in 0..8 {
                let mut bad = good;
                bad[byte] ^= 1 << bit;
                assert!(Eviction::decode(&bad).is_err(), "byte {byte} bit {bit}");
            }
        }
        for len in 0..EVICT_LEN {
            assert!(Eviction::decode(&good[..len]).is_err(), "length {len}");
        }
    }

    fn sb() -> Superblock {
        Superblock {
            uuid: [7; 16],
            capacity: 1000,
            segment_slots: 256,
            segment_count: 4,
            row_stride: 200,
            item_bytes: 170,
            schema_len: 100,
            schema_crc: 5,
            prioritized: false,
            episodic: false,
            whole_episodes: false,
            fragments: false,
            heap: None,
            lifecycle: false,
            evict_for_room: false,
        }
    }

    fn heap_sb() -> Superblock {
        Superblock {
            heap: Some(HeapGeometry {
                capacity: 5000,
                segment_slots: 1024,
                segment_count: 5,
                stride: 1024,
            }),
            ..sb()
        }
    }

    /// `resealed` for a version-2 superblock (its crc is at 124).
    fn resealed_v2(bytes: &[u8], off: usize, value: u64) -> Vec<u8> {
        let mut b = bytes.to_vec();
        match off {
            VERSION_OFF | FLAGS_OFF => BytesMut(&mut b).u32(off, value as u32),
            _ => BytesMut(&mut b).u64(off, value),
        }
        let crc = crc32(&b[..SUPERBLOCK_V2_CRC_OFF]);
        BytesMut(&mut b).u32(SUPERBLOCK_V2_CRC_OFF, crc);
        b
    }

    #[test]
    fn a_heap_superblock_is_version_2_round_trips_and_each_heap_rule_refuses() {
        let good = heap_sb().encode();
        assert_eq!(Bytes(&good).u32(VERSION_OFF), Some(HEAP_VERSION));
        assert_eq!(Superblock::decode(&good), Ok(heap_sb()));
        assert_eq!(heap_sb().heap.map(|h| h.chunk_bytes()), Some(1008));
        // Without a heap: version 1, byte for byte what builds before wrote (crc at 92).
        let plain = sb().encode();
        assert_eq!(Bytes(&plain).u32(VERSION_OFF), Some(BASE_VERSION));
        assert!(plain[SUPERBLOCK_LEN..].iter().all(|&b| b == 0));
        let cases: [(usize, u64); 8] = [
            (HEAP_CAPACITY_OFF, 0),
            (HEAP_CAPACITY_OFF, super::super::row::MAX_CAPACITY + 1),
            (HEAP_SEGMENT_SLOTS_OFF, 1000),
            (HEAP_SEGMENT_COUNT_OFF, 4),
            (HEAP_STRIDE_OFF, 1020),
            (HEAP_STRIDE_OFF, 16),
            (HEAP_STRIDE_OFF, MAX_CHUNK_STRIDE + 8),
            (HEAP_CAPACITY_OFF, 4097),
        ];
        for (off, value) in cases {
            let got = Superblock::decode(&resealed_v2(&good, off, value));
            if (off, value) == (HEAP_CAPACITY_OFF, 4097) {
                // The control: a legal value (still five segments), resealed, decodes.
                assert!(got.is_ok(), "{got:?}");
            } else {
                assert!(
                    matches!(&got, Err(Problem::Field { offset, .. }) if *offset == off as u64),
                    "offset {off} value {value}: {got:?}"
                );
            }
        }
        // A version flipped between 1 and 2 finds no crc where it points.
        let mut flipped = good.clone();
        BytesMut(&mut flipped).u32(VERSION_OFF, BASE_VERSION);
        assert!(matches!(
            Superblock::decode(&flipped),
            Err(Problem::Checksum { .. })
        ));
        let mut flipped = plain.clone();
        BytesMut(&mut flipped).u32(VERSION_OFF, HEAP_VERSION);
        assert!(matches!(
            Superblock::decode(&flipped),
            Err(Problem::Checksum { .. })
        ));
    }

    #[test]
    fn a_superblock_with_item_states_is_version_3_with_or_without_a_chunk_ring() {
        for base in [sb(), heap_sb()] {
            let with = Superblock {
                lifecycle: true,
                ..base.clone()
            };
            let page = with.encode();
            assert_eq!(Bytes(&page).u32(VERSION_OFF), Some(LIFECYCLE_VERSION));
            assert_eq!(Superblock::decode(&page), Ok(with.clone()));
            assert_eq!(with.schema_version(), base.schema_version());
            // Version 3 without bit 4, or a version-2 superblock with it, is refused.
            let cleared = resealed_v2(&page, FLAGS_OFF, 0);
            assert!(matches!(
                Superblock::decode(&cleared),
                Err(Problem::Field { .. })
            ));
        }
        // No chunk ring: its four words must all be zero.
        let page = Superblock {
            lifecycle: true,
            ..sb()
        }
        .encode();
        let stray = resealed_v2(&page, HEAP_STRIDE_OFF, 1024);
        assert!(matches!(
            Superblock::decode(&stray),
            Err(Problem::Field { offset, .. }) if offset == HEAP_STRIDE_OFF as u64
        ));
        let v2 = resealed_v2(&heap_sb().encode(), FLAGS_OFF, u64::from(SB_FLAG_LIFECYCLE));
        assert!(matches!(
            Superblock::decode(&v2),
            Err(Problem::Field { .. })
        ));
    }

    #[test]
    fn bit_6_is_set_exactly_for_an_episodic_buffer_with_a_chunk_ring() {
        let episodic = Superblock {
            episodic: true,
            row_stride: heap_sb().row_stride + 16,
            ..heap_sb()
        };
        let page = episodic.encode();
        let flags = Bytes(&page).u32(FLAGS_OFF).unwrap_or(0);
        assert_eq!(flags, SB_FLAG_EPISODES | SB_FLAG_EPISODE_VALUES);
        assert_eq!(Superblock::decode(&page), Ok(episodic));
        assert_eq!(Bytes(&heap_sb().encode()).u32(FLAGS_OFF), Some(0));
        // Bit 6 without bit 1, bit 1 with a chunk ring but without bit 6.
        for (base, flags) in [
            (heap_sb().encode(), SB_FLAG_EPISODE_VALUES),
            (page.clone(), SB_FLAG_EPISODES),
        ] {
            let bad = resealed_v2(&base, FLAGS_OFF, u64::from(flags));
            assert!(
                matches!(
                    Superblock::decode(&bad),
                    Err(Problem::Field { name: "flags", .. })
                ),
                "flags {flags:#x}"
            );
        }
        // Bit 6 in a version-1 superblock (no chunk ring).
        let mut v1 = sb().encode();
        BytesMut(&mut v1).u32(FLAGS_OFF, SB_FLAG_EPISODES | SB_FLAG_EPISODE_VALUES);
        let crc = crc32(&v1[..SUPERBLOCK_CRC_OFF]);
        BytesMut(&mut v1).u32(SUPERBLOCK_CRC_OFF, crc);
        assert!(matches!(
            Superblock::decode(&v1),
            Err(Problem::Field { name: "flags", .. })
        ));
    }

    #[test]
    fn the_flags_round_trip_and_unknown_flags_are_refused() {
        for (prioritized, episodic, whole_episodes, fragments) in [
            (true, false, false, false),
            (false, true, false, false),
            (true, true, false, false),
            (false, true, true, false),
            (true, false, false, true),
        ] {
            // Rows of an episodic buffer hold 16 more bytes (the step header).
            let with = Superblock {
                prioritized,
                episodic,
                whole_episodes,
                fragments,
                row_stride: if episodic { 208 } else { 200 },
                ..sb()
            };
            assert_eq!(Superblock::decode(&with.encode()), Ok(with));
        }
        // An unknown bit, item states outside version 3, whole episodes without
        // episodes, fragments with episodes, episode states without item states.
        for flags in [
            32,
            256,
            SB_FLAG_EPISODE_STATES | SB_FLAG_EPISODES,
            SB_FLAG_LIFECYCLE,
            SB_FLAG_WHOLE_EPISODES,
            SB_FLAG_FRAGMENTS | SB_FLAG_EPISODES,
        ] {
            let mut page = sb().encode();
            BytesMut(&mut page).u32(FLAGS_OFF, flags);
            let crc = crc32(&page[..SUPERBLOCK_CRC_OFF]);
            BytesMut(&mut page).u32(SUPERBLOCK_CRC_OFF, crc);
            assert!(matches!(
                Superblock::decode(&page),
                Err(Problem::Field { name: "flags", .. })
            ));
        }
    }

    #[test]
    fn superblock_round_trips_and_detects_every_flipped_bit() {
        let page = sb().encode();
        assert_eq!(Superblock::decode(&page), Ok(sb()));
        for bit in 0..SUPERBLOCK_LEN * 8 {
            let mut bad = page.clone();
            if let Some(b) = bad.get_mut(bit / 8) {
                *b ^= 1 << (bit % 8);
            }
            assert!(
                Superblock::decode(&bad).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
        for len in 0..SUPERBLOCK_LEN {
            assert!(Superblock::decode(page.get(..len).unwrap_or(&[])).is_err());
        }
    }

    #[test]
    fn commit_round_trips_and_detects_every_flipped_bit() {
        let c = Commit {
            generation: 9,
            head: 10,
            tail: 900,
            cleared: 3,
            sampled: 77,
            rng_seed: 42,
            rng_word_pos: 1 << 70,
            boot_id: [9; 16],
            flags: FLAG_CLEAN,
        };
        let b = c.encode();
        assert_eq!(Commit::decode(&b, 1, 1000), Ok(c));
        assert!(
            Commit::decode(&b, 0, 1000).is_err(),
            "slot A must refuse an odd generation"
        );
        for bit in 0..COMMIT_LEN * 8 {
            let mut bad = b;
            if let Some(x) = bad.get_mut(bit / 8) {
                *x ^= 1 << (bit % 8);
            }
            assert!(
                Commit::decode(&bad, 1, 1000).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
    }
}
