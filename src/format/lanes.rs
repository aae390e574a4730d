//! The `LANES` file of a buffer made of lanes: how many lanes, and where their indices
//! start. Written once, last, when the buffer is created; never changed after.
//!
//! ```text
//! offset  size  what
//! 0       8     magic "RPLYLANE"
//! 8       4     format version
//! 12      4     lanes: how many (1..=128); lane K is the one-ring buffer in `lane-K/`
//! 16      16    uuid of the lane set
//! 32      8     capacity of each lane
//! 40      4     crc32 of bytes 0..40
//! ```
//! Lane K's logical indices start at `K << 56` (its first commit has head = tail =
//! `K << 56`), so an index names its lane in its top byte and every per-lane file keeps
//! the one-ring layout unchanged. 2^56 indices per lane is 2,000 years at 10^6 adds/s;
//! 128 lanes keep the stamp's top bit (`row::WRITING_BIT`) clear.

use super::{BASE_VERSION, Bytes, BytesMut, Problem, crc32, preamble};

/// Magic of the `LANES` file.
pub const MAGIC: [u8; 8] = *b"RPLYLANE";
/// File name in the buffer directory.
pub const FILE_NAME: &str = "LANES";
/// Bits of a logical index below the lane number.
pub const LANE_SHIFT: u32 = 56;
/// The most lanes a buffer has.
pub const MAX_LANES: u32 = 128;

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const LANES_OFF: usize = VERSION_OFF + 4;
const UUID_OFF: usize = LANES_OFF + 4;
const CAPACITY_OFF: usize = UUID_OFF + 16;
const CRC_OFF: usize = CAPACITY_OFF + 8;
/// Bytes of the file.
pub const LEN: usize = CRC_OFF + 4;

/// The contents of `LANES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LanesFile {
    /// How many lanes.
    pub lanes: u32,
    /// Uuid of the lane set.
    pub uuid: [u8; 16],
    /// Items each lane holds.
    pub lane_capacity: u64,
}

/// The first logical index of lane `lane`.
///
/// ```
/// use replaystore::internal::format::lanes::{first_index, lane_of};
/// assert_eq!(first_index(0), 0);
/// assert_eq!(lane_of(first_index(3) + 12), 3);
/// ```
pub const fn first_index(lane: u32) -> u64 {
    (lane as u64) << LANE_SHIFT
}

/// The lane an index belongs to.
pub const fn lane_of(index: u64) -> u64 {
    index >> LANE_SHIFT
}

/// The first index of the lane holding `index` (0 for a one-ring buffer): the items a
/// lane was ever handed are `tail - lane_base(tail)`.
pub const fn lane_base(index: u64) -> u64 {
    lane_of(index) << LANE_SHIFT
}

impl LanesFile {
    /// The file's bytes.
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        let mut w = BytesMut(&mut b);
        w.put(MAGIC_OFF, &MAGIC);
        w.u32(VERSION_OFF, BASE_VERSION);
        w.u32(LANES_OFF, self.lanes);
        w.put(UUID_OFF, &self.uuid);
        w.u64(CAPACITY_OFF, self.lane_capacity);
        let crc = crc32(b.get(..CRC_OFF).unwrap_or(&[]));
        BytesMut(&mut b).u32(CRC_OFF, crc);
        b
    }

    /// Decodes and checks the file: magic, length, checksum, version, then ranges.
    pub fn decode(bytes: &[u8]) -> Result<LanesFile, Problem> {
        const { assert!(MAGIC_OFF == 0) };
        preamble(bytes, &MAGIC, LEN, CRC_OFF, VERSION_OFF)?;
        let r = Bytes(bytes);
        let f = LanesFile {
            lanes: r.u32(LANES_OFF).unwrap_or(0),
            uuid: r.array(UUID_OFF).unwrap_or([0; 16]),
            lane_capacity: r.u64(CAPACITY_OFF).unwrap_or(0),
        };
        if f.lanes == 0 || f.lanes > MAX_LANES {
            return Err(Problem::Field {
                offset: LANES_OFF as u64,
                name: "lanes",
                expected: format!("1..={MAX_LANES}"),
                got: f.lanes.to_string(),
            });
        }
        if f.lane_capacity == 0 || f.lane_capacity > super::row::MAX_CAPACITY {
            return Err(Problem::Field {
                offset: CAPACITY_OFF as u64,
                name: "lane capacity",
                expected: format!("1..={}", super::row::MAX_CAPACITY),
                got: f.lane_capacity.to_string(),
            });
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_range_rule_refuses_a_well_checksummed_file_that_breaks_it() {
        let ok = LanesFile {
            lanes: 4,
            uuid: [3; 16],
            lane_capacity: 100,
        };
        assert_eq!(LanesFile::decode(&ok.encode()), Ok(ok.clone()));
        let max_cap = super::super::row::MAX_CAPACITY;
        for (f, off) in [
            (
                LanesFile {
                    lanes: 0,
                    ..ok.clone()
                },
                LANES_OFF,
            ),
            (
                LanesFile {
                    lanes: MAX_LANES + 1,
                    ..ok.clone()
                },
                LANES_OFF,
            ),
            (
                LanesFile {
                    lane_capacity: 0,
                    ..ok.clone()
                },
                CAPACITY_OFF,
            ),
            (
                LanesFile {
                    lane_capacity: max_cap + 1,
                    ..ok.clone()
                },
                CAPACITY_OFF,
            ),
        ] {
            let got = LanesFile::decode(&f.encode());
            assert!(
                matches!(&got, Err(Problem::Field { offset, .. }) if *offset == off as u64),
                "{f:?}: {got:?}"
            );
        }
    }

    fn file() -> LanesFile {
        LanesFile {
            lanes: 4,
            uuid: [9; 16],
            lane_capacity: 1000,
        }
    }

    #[test]
    fn lanes_file_round_trips() {
        assert_eq!(LanesFile::decode(&file().encode()).unwrap(), file());
    }

    #[test]
    fn every_damaged_byte_and_every_truncation_is_caught() {
        let good = file().encode();
        for i in 0..LEN {
            for bit in 0..8 {
                let mut bad = good;
                bad[i] ^= 1 << bit;
                assert!(LanesFile::decode(&bad).is_err(), "byte {i} bit {bit}");
            }
        }
        for len in 0..LEN {
            assert!(LanesFile::decode(&good[..len]).is_err(), "length {len}");
        }
    }

    #[test]
    fn impossible_lane_counts_name_the_field_even_with_a_good_checksum() {
        for lanes in [0, MAX_LANES + 1] {
            let f = LanesFile { lanes, ..file() };
            match LanesFile::decode(&f.encode()) {
                Err(Problem::Field { name, .. }) => assert_eq!(name, "lanes"),
                other => panic!("{lanes}: {other:?}"),
            }
        }
    }
}
