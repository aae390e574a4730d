//! The priorities file `priorities.tree`: a header page, then a sum-tree and a min-tree
//! over one shared leaf array, as little-endian `f64` words.
//!
//! ```text
//! offset  size        what
//! 0       4096        header (below), rest of the page zero
//! 4096    8 * words   tree body (TreeShape): sum levels top-down (the last one is the
//!                     leaves), then the min-tree's internal levels top-down
//! ```
//! Header:
//! ```text
//! 0   8  magic "RPLYPRIO"
//! 8   4  format version
//! 12  4  arity: children per node, 2 or 8
//! 16  16 buffer uuid (as in the manifest)
//! 32  8  capacity: leaves in use (= the ring's capacity)
//! 40  8  alpha (f64): leaf = (priority + eps)^alpha
//! 48  8  eps (f64)
//! 56  4  crc32 of bytes 0..56
//! 60  4  reserved, 0
//! --- written in place by the writer, not covered by the crc, checked for range ---
//! 64  8  max_priority (f64): the largest priority + eps seen, at least 1.0
//! 72  8  stale_updates: priority updates skipped because their item was gone
//! 80  8  updates: priority updates applied
//! 88  8  caught_up: every item below this logical index has had its leaf set by the
//!        tree's owner (new items at max_priority, reset rows 0); items from here on
//!        have not, and the owner sets them before its next draw or update
//! 96  8  owner_pid: the process holding `priorities.lock` (0: none, or unknown)
//! 104 4  owner_check: crc32(owner_pid) ^ crc32(eight zero bytes), so 0 with no owner:
//!        written with owner_pid. A flipped bit in either word is damage, not an owner
//!        (a named owner makes `verify` hold back its judgement of the parents)
//! 108 4  seal: crc32 of the whole body, written only into a snapshot's copy by the
//!        writer that settled the tree it copied; 0 in a live tree (every write of the
//!        counters zeroes it)
//! 112 4  seal check: crc32 of bytes 64..112; a seal holds when this matches and the
//!        body's crc32 is the seal: the copy is byte for byte what its owner settled,
//!        and a restore need not judge its parents
//! ```
//! A snapshot's copy of the tree names no owner when the writer that took it owned the
//! tree (the copy is settled); an actor's checkpoint, copied while a `PriorityOwner` may
//! have been writing, keeps that owner's pid, and is repaired when restored.
//! A level of `n` values is stored as `n` words rounded up to a multiple of the arity
//! (whole nodes; padding is 0) and starts on a 64-byte boundary. Value `j` of level `l`
//! is the sum (min) of values `j*K .. j*K+K` of level `l+1`. The root total is the sum
//! of the top node. In the min-tree a zero leaf counts as +infinity: it can never be
//! drawn, so it bounds no importance weight.

use super::{BASE_VERSION, Bytes, BytesMut, Problem, crc32, preamble};

/// Magic of the priorities file.
pub const MAGIC: [u8; 8] = *b"RPLYPRIO";
/// File name in the buffer directory.
pub const FILE_NAME: &str = "priorities.tree";

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const ARITY_OFF: usize = VERSION_OFF + 4;
/// Offset of the uuid.
pub const UUID_OFF: usize = ARITY_OFF + 4;
/// Offset of the capacity.
pub const CAPACITY_OFF: usize = UUID_OFF + 16;
const ALPHA_OFF: usize = CAPACITY_OFF + 8;
const EPS_OFF: usize = ALPHA_OFF + 8;
const CRC_OFF: usize = EPS_OFF + 8;
const RESERVED_OFF: usize = CRC_OFF + 4;
/// Offset of the mutable `max_priority` field.
pub const MAX_PRIORITY_OFF: usize = RESERVED_OFF + 4;
/// Offset of the mutable `stale_updates` counter.
pub const STALE_UPDATES_OFF: usize = MAX_PRIORITY_OFF + 8;
/// Offset of the mutable `updates` counter.
pub const UPDATES_OFF: usize = STALE_UPDATES_OFF + 8;
/// Offset of the mutable `caught_up` index.
pub const CAUGHT_UP_OFF: usize = UPDATES_OFF + 8;
/// Offset of the mutable `owner_pid` word.
pub const OWNER_PID_OFF: usize = CAUGHT_UP_OFF + 8;
/// Offset of the check word of `owner_pid` (see [`owner_check`]).
pub const OWNER_CHECK_OFF: usize = OWNER_PID_OFF + 8;
/// Offset of the seal: crc32 of the body of a settled snapshot copy.
pub const SEAL_OFF: usize = OWNER_CHECK_OFF + 4;
/// Offset of the seal's check word: crc32 of bytes `MAX_PRIORITY_OFF..SEAL_CHECK_OFF`.
pub const SEAL_CHECK_OFF: usize = SEAL_OFF + 4;
/// Bytes of the header that carry data.
pub const HEADER_LEN: usize = SEAL_CHECK_OFF + 4;
/// Offset of the tree body.
pub const BODY_OFFSET: usize = 4096;
/// Arities this build reads and writes.
pub const ARITIES: [u32; 2] = [2, 8];
/// Words per 64-byte cache line: every level starts on one.
const LINE_WORDS: usize = 8;

/// The immutable part of the header.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeHeader {
    /// Children per node.
    pub arity: u32,
    /// The buffer's uuid.
    pub uuid: [u8; 16],
    /// Leaves in use.
    pub capacity: u64,
    /// Priority exponent.
    pub alpha: f64,
    /// Added to every priority.
    pub eps: f64,
}

/// The mutable part of the header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeCounters {
    /// Largest priority + eps seen so far (new items get it).
    pub max_priority: f64,
    /// Updates skipped because their item had been evicted or overwritten.
    pub stale_updates: u64,
    /// Updates applied.
    pub updates: u64,
    /// Items below this index have their leaves set by the tree's owner.
    pub caught_up: u64,
    /// The process owning the tree now (0: none or unknown).
    pub owner_pid: u64,
}

impl Default for TreeCounters {
    fn default() -> Self {
        TreeCounters {
            max_priority: 1.0,
            stale_updates: 0,
            updates: 0,
            caught_up: 0,
            owner_pid: 0,
        }
    }
}

impl TreeHeader {
    /// The header page of a new file.
    pub fn encode(&self) -> Vec<u8> {
        let mut page = vec![0u8; BODY_OFFSET];
        let mut w = BytesMut(&mut page);
        w.put(MAGIC_OFF, &MAGIC);
        w.u32(VERSION_OFF, BASE_VERSION);
        w.u32(ARITY_OFF, self.arity);
        w.put(UUID_OFF, &self.uuid);
        w.u64(CAPACITY_OFF, self.capacity);
        w.u64(ALPHA_OFF, self.alpha.to_bits());
        w.u64(EPS_OFF, self.eps.to_bits());
        let crc = crc32(page.get(..CRC_OFF).unwrap_or(&[]));
        BytesMut(&mut page).u32(CRC_OFF, crc);
        encode_counters(&mut page, &TreeCounters::default());
        page
    }

    /// Decodes and checks a header: magic, version, checksum, then each field's range.
    pub fn decode(bytes: &[u8]) -> Result<(TreeHeader, TreeCounters), Problem> {
        const { assert!(MAGIC_OFF == 0) };
        preamble(bytes, &MAGIC, HEADER_LEN, CRC_OFF, VERSION_OFF)?;
        let r = Bytes(bytes);
        let f64_at = |off| f64::from_bits(r.u64(off).unwrap_or(0));
        let h = TreeHeader {
            arity: r.u32(ARITY_OFF).unwrap_or(0),
            uuid: r.array(UUID_OFF).unwrap_or([0; 16]),
            capacity: r.u64(CAPACITY_OFF).unwrap_or(0),
            alpha: f64_at(ALPHA_OFF),
            eps: f64_at(EPS_OFF),
        };
        let bad = |offset: usize, name: &'static str, expected: &str, got: String| {
            Err(Problem::Field {
                offset: offset as u64,
                name,
                expected: expected.to_owned(),
                got,
            })
        };
        if !ARITIES.contains(&h.arity) {
            return bad(ARITY_OFF, "arity", "2 or 8", h.arity.to_string());
        }
        if h.capacity == 0 || h.capacity > super::row::MAX_CAPACITY {
            return bad(CAPACITY_OFF, "capacity", "1..=2^40", h.capacity.to_string());
        }
        if !valid_alpha(h.alpha) {
            return bad(ALPHA_OFF, "alpha", "finite, >= 0", h.alpha.to_string());
        }
        if !valid_eps(h.eps) {
            return bad(EPS_OFF, "eps", "finite, >= 0", h.eps.to_string());
        }
        let c = decode_counters(bytes);
        if !(c.max_priority.is_finite() && c.max_priority >= 1.0) {
            return bad(
                MAX_PRIORITY_OFF,
                "max_priority",
                "finite, >= 1",
                c.max_priority.to_string(),
            );
        }
        Ok((h, c))
    }

    /// The tree body's shape.
    pub fn shape(&self) -> Result<TreeShape, Problem> {
        TreeShape::new(self.capacity, self.arity).ok_or(Problem::Field {
            offset: CAPACITY_OFF as u64,
            name: "capacity",
            expected: "a tree that fits in the address space".into(),
            got: self.capacity.to_string(),
        })
    }
}

/// Whether `alpha` is a usable priority exponent.
pub fn valid_alpha(alpha: f64) -> bool {
    alpha.is_finite() && alpha >= 0.0
}

/// Whether `eps` is a usable priority offset.
pub fn valid_eps(eps: f64) -> bool {
    eps.is_finite() && eps >= 0.0
}

/// Writes the mutable header fields into a header page.
pub fn encode_counters(page: &mut [u8], c: &TreeCounters) {
    let mut w = BytesMut(page);
    w.u64(MAX_PRIORITY_OFF, c.max_priority.to_bits());
    w.u64(STALE_UPDATES_OFF, c.stale_updates);
    w.u64(UPDATES_OFF, c.updates);
    w.u64(CAUGHT_UP_OFF, c.caught_up);
    w.u64(OWNER_PID_OFF, c.owner_pid);
    w.u32(OWNER_CHECK_OFF, owner_check(c.owner_pid));
}

/// The check word stored beside `owner_pid`: its CRC-32, shifted so that no owner (0)
/// checks as 0, which is what every file made before the word existed holds.
///
/// ```
/// use replaystore::internal::format::tree::owner_check;
/// assert_eq!(owner_check(0), 0);
/// assert_ne!(owner_check(1), 0);
/// ```
pub fn owner_check(pid: u64) -> u32 {
    crc32(&pid.to_le_bytes()) ^ crc32(&[0; 8])
}

/// Checks the owner word of a header page against its check word: `Err` when either
/// was damaged (then the owner it names means nothing).
///
/// ```
/// use replaystore::internal::format::tree::{OWNER_PID_OFF, TreeCounters, check_owner, encode_counters};
/// let mut page = vec![0u8; 4096];
/// encode_counters(&mut page, &TreeCounters { owner_pid: 42, ..TreeCounters::default() });
/// assert!(check_owner(&page).is_ok());
/// page[OWNER_PID_OFF] ^= 1;
/// assert!(check_owner(&page).is_err());
/// ```
pub fn check_owner(page: &[u8]) -> Result<(), Problem> {
    let r = Bytes(page);
    let pid = r.u64(OWNER_PID_OFF).unwrap_or(0);
    let stored = r.u32(OWNER_CHECK_OFF).unwrap_or(0);
    if stored == owner_check(pid) {
        Ok(())
    } else {
        Err(Problem::Field {
            offset: OWNER_PID_OFF as u64,
            name: "owner_pid",
            expected: format!("an owner whose check word is {stored:#010x}"),
            got: format!("{pid}, whose check word is {:#010x}", owner_check(pid)),
        })
    }
}

/// Writes the seal of a body whose crc32 is `body_crc` into a header page holding the
/// copy's counters (see [`seal_holds`]).
pub fn encode_seal(page: &mut [u8], body_crc: u32) {
    let mut w = BytesMut(page);
    w.u32(SEAL_OFF, body_crc);
    let check = page.get(MAX_PRIORITY_OFF..SEAL_CHECK_OFF).map_or(0, crc32);
    BytesMut(page).u32(SEAL_CHECK_OFF, check);
}

/// Whether a header page's seal holds for a body whose crc32 is `body_crc`: its check
/// word matches the counters and the seal, and the seal is the body's crc. A header
/// without a seal (all zero there, as every live tree and every file from before the
/// seal) never holds, since the check of zeros is not zero.
///
/// ```
/// use replaystore::internal::format::tree::{TreeCounters, encode_counters, encode_seal, seal_holds, SEAL_OFF};
/// let mut page = vec![0u8; 4096];
/// encode_counters(&mut page, &TreeCounters::default());
/// assert!(!seal_holds(&page, 0));
/// encode_seal(&mut page, 0xdead_beef);
/// assert!(seal_holds(&page, 0xdead_beef));
/// assert!(!seal_holds(&page, 0xdead_beee));
/// page[SEAL_OFF] ^= 1;
/// assert!(!seal_holds(&page, 0xdead_beef ^ 1));
/// // Writing the counters again (a live tree's first change) breaks the seal.
/// encode_seal(&mut page, 7);
/// encode_counters(&mut page, &TreeCounters { updates: 1, ..TreeCounters::default() });
/// assert!(!seal_holds(&page, 7));
/// ```
pub fn seal_holds(page: &[u8], body_crc: u32) -> bool {
    let r = Bytes(page);
    let (Some(seal), Some(check)) = (r.u32(SEAL_OFF), r.u32(SEAL_CHECK_OFF)) else {
        return false;
    };
    page.get(MAX_PRIORITY_OFF..SEAL_CHECK_OFF).map(crc32) == Some(check) && seal == body_crc
}

/// Reads the mutable header fields (unchecked; `TreeHeader::decode` checks them).
pub fn decode_counters(page: &[u8]) -> TreeCounters {
    let r = Bytes(page);
    TreeCounters {
        max_priority: f64::from_bits(r.u64(MAX_PRIORITY_OFF).unwrap_or(0)),
        stale_updates: r.u64(STALE_UPDATES_OFF).unwrap_or(0),
        updates: r.u64(UPDATES_OFF).unwrap_or(0),
        caught_up: r.u64(CAUGHT_UP_OFF).unwrap_or(0),
        owner_pid: r.u64(OWNER_PID_OFF).unwrap_or(0),
    }
}

/// One level of the tree: where its values are, in words from the body's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    /// Values stored (a multiple of the arity).
    pub len: usize,
    /// Offset of the sum-tree's values.
    pub sum: usize,
    /// Offset of the min-tree's values (the leaf level shares the sum-tree's).
    pub min: usize,
}

/// Where every level of a tree of `capacity` leaves and arity `k` lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeShape {
    /// Children per node.
    pub arity: usize,
    /// Leaves in use.
    pub capacity: usize,
    /// Levels from the top node (index 0) down to the leaves (last).
    pub levels: Vec<Level>,
    /// Words in the body.
    pub words: usize,
}

impl TreeShape {
    /// The shape, or `None` if it does not fit in memory.
    pub fn new(capacity: u64, arity: u32) -> Option<TreeShape> {
        let k = arity as usize;
        let capacity = usize::try_from(capacity).ok()?;
        if k < 2 || capacity == 0 {
            return None;
        }
        let mut lens = vec![capacity.checked_next_multiple_of(k)?];
        while let Some(&n) = lens.last().filter(|&&n| n > k) {
            lens.push((n / k).next_multiple_of(k));
        }
        lens.reverse();
        let mut words = 0usize;
        let mut levels: Vec<Level> = lens
            .iter()
            .map(|&len| {
                let sum = words;
                words = (words + len).next_multiple_of(LINE_WORDS);
                Level { len, sum, min: sum }
            })
            .collect();
        let internal = levels.len() - 1;
        for level in levels.iter_mut().take(internal) {
            level.min = words;
            words = words.checked_add(level.len)?.next_multiple_of(LINE_WORDS);
        }
        words.checked_mul(8)?.checked_add(BODY_OFFSET)?;
        Some(TreeShape {
            arity: k,
            capacity,
            levels,
            words,
        })
    }

    /// Length of the file.
    pub fn file_len(&self) -> u64 {
        BODY_OFFSET as u64 + self.words as u64 * 8
    }

    /// The leaf level.
    pub fn leaves(&self) -> Level {
        self.levels.last().copied().unwrap_or(Level {
            len: 0,
            sum: 0,
            min: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> TreeHeader {
        TreeHeader {
            arity: 8,
            uuid: [7; 16],
            capacity: 1000,
            alpha: 0.6,
            eps: 1e-6,
        }
    }

    #[test]
    fn each_header_rule_refuses_a_well_checksummed_header_that_breaks_it() {
        // encode() checksums what it is given: each header is well-formed but for one rule.
        let cases = [
            (
                TreeHeader {
                    arity: 4,
                    ..header()
                },
                ARITY_OFF,
            ),
            (
                TreeHeader {
                    capacity: 0,
                    ..header()
                },
                CAPACITY_OFF,
            ),
            (
                TreeHeader {
                    capacity: super::super::row::MAX_CAPACITY + 1,
                    ..header()
                },
                CAPACITY_OFF,
            ),
            (
                TreeHeader {
                    alpha: -0.5,
                    ..header()
                },
                ALPHA_OFF,
            ),
            (
                TreeHeader {
                    alpha: f64::NAN,
                    ..header()
                },
                ALPHA_OFF,
            ),
            (
                TreeHeader {
                    eps: f64::INFINITY,
                    ..header()
                },
                EPS_OFF,
            ),
        ];
        for (h, off) in cases {
            let got = TreeHeader::decode(&h.encode());
            assert!(
                matches!(&got, Err(Problem::Field { offset, .. }) if *offset == off as u64),
                "{h:?}: {got:?}"
            );
        }
    }

    #[test]
    fn header_round_trips_with_default_counters() {
        let page = header().encode();
        let (h, c) = TreeHeader::decode(&page).unwrap();
        assert_eq!(h, header());
        assert_eq!(c, TreeCounters::default());
    }

    #[test]
    fn counters_are_outside_the_checksum_but_range_checked() {
        let mut page = header().encode();
        let c = TreeCounters {
            max_priority: 5.0,
            stale_updates: 3,
            updates: 9,
            caught_up: 1 << 40,
            owner_pid: 4242,
        };
        encode_counters(&mut page, &c);
        assert_eq!(TreeHeader::decode(&page).unwrap().1, c);
        assert_eq!(check_owner(&page), Ok(()));
        // A flipped bit in the owner or its check word is damage.
        for off in [
            OWNER_PID_OFF,
            OWNER_PID_OFF + 7,
            OWNER_CHECK_OFF,
            OWNER_CHECK_OFF + 3,
        ] {
            let mut bad = page.clone();
            bad[off] ^= 0x10;
            assert!(
                matches!(
                    check_owner(&bad),
                    Err(Problem::Field {
                        name: "owner_pid",
                        ..
                    })
                ),
                "byte {off}"
            );
        }
        // A page of a build before the word: no owner, check 0.
        let mut old = page.clone();
        old[OWNER_PID_OFF..OWNER_CHECK_OFF + 4].fill(0);
        assert_eq!(check_owner(&old), Ok(()));
        encode_counters(
            &mut page,
            &TreeCounters {
                max_priority: f64::NAN,
                ..c
            },
        );
        assert!(matches!(
            TreeHeader::decode(&page),
            Err(Problem::Field {
                name: "max_priority",
                ..
            })
        ));
    }

    #[test]
    fn every_damaged_header_byte_is_caught() {
        let page = header().encode();
        for i in 0..CRC_OFF + 4 {
            let mut bad = page.clone();
            bad[i] ^= 0x10;
            assert!(TreeHeader::decode(&bad).is_err(), "byte {i}");
        }
    }

    #[test]
    fn bad_fields_name_themselves_even_with_a_good_checksum() {
        for (arity, alpha, eps, name) in [
            (3, 0.6, 0.0, "arity"),
            (8, -1.0, 0.0, "alpha"),
            (8, f64::INFINITY, 0.0, "alpha"),
            (8, 0.6, f64::NAN, "eps"),
        ] {
            let h = TreeHeader {
                arity,
                alpha,
                eps,
                ..header()
            };
            match TreeHeader::decode(&h.encode()) {
                Err(Problem::Field { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn levels_are_whole_nodes_on_cache_lines_and_do_not_overlap() {
        for k in [2u32, 8] {
            for cap in [1u64, 2, 7, 8, 9, 63, 64, 65, 1000, 1 << 20, 1_000_003] {
                let s = TreeShape::new(cap, k).unwrap();
                let k = k as usize;
                assert_eq!(s.levels[0].len, k, "top node");
                assert!(s.leaves().len >= cap as usize);
                let mut spans = Vec::new();
                for (l, level) in s.levels.iter().enumerate() {
                    assert_eq!(level.len % k, 0);
                    assert_eq!(level.sum % 8, 0);
                    assert_eq!(level.min % 8, 0);
                    if let Some(below) = s.levels.get(l + 1) {
                        assert!(level.len * k >= below.len, "level {l} covers the next");
                        assert!((level.len - k) * k < below.len, "no spare nodes");
                        spans.push((level.min, level.min + level.len));
                    }
                    spans.push((level.sum, level.sum + level.len));
                }
                spans.sort();
                for w in spans.windows(2) {
                    assert!(w[0].1 <= w[1].0, "{cap}/{k}: {w:?}");
                }
                assert!(spans.last().unwrap().1 <= s.words);
            }
        }
    }

    #[test]
    fn an_eight_ary_tree_is_smaller_than_a_binary_one() {
        let b = TreeShape::new(1 << 20, 2).unwrap();
        let o = TreeShape::new(1 << 20, 8).unwrap();
        assert_eq!(o.levels.len(), 7);
        assert_eq!(b.levels.len(), 20);
        assert!(o.words * 2 < b.words, "{} vs {}", o.words, b.words);
    }
}
