//! The serialized [`State`]: what `get_state` hands back to go into a training
//! checkpoint, and what `RESTORE` holds while a `set_state` is under way.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::{Bytes, BytesMut, Problem, checksum, crc32, magic, need};

/// Magic at offset 0.
pub const MAGIC: [u8; 8] = *b"RPLYSTAT";
/// The version this build writes: 2 names the state's origin (folder and schema).
pub const VERSION: u32 = 2;
/// The first version (no origin), still read: states kept in older checkpoints.
pub const VERSION_WITHOUT_ORIGIN: u32 = 1;
/// Offset of the format version (u32).
pub const VERSION_OFF: usize = MAGIC.len();
/// Offset of the name's length in bytes (u32).
pub const NAME_LEN_OFF: usize = VERSION_OFF + 4;
/// Offset of the buffer uuid (16 bytes).
pub const UUID_OFF: usize = NAME_LEN_OFF + 4;
/// Offset of the generation of the snapshot's commit (u64).
pub const GENERATION_OFF: usize = UUID_OFF + 16;
/// Offset of head (u64).
pub const HEAD_OFF: usize = GENERATION_OFF + 8;
/// Offset of tail (u64).
pub const TAIL_OFF: usize = HEAD_OFF + 8;
/// Offset of cleared (u64).
pub const CLEARED_OFF: usize = TAIL_OFF + 8;
/// Offset of sampled (u64).
pub const SAMPLED_OFF: usize = CLEARED_OFF + 8;
/// Offset of the RNG seed (u64).
pub const RNG_SEED_OFF: usize = SAMPLED_OFF + 8;
/// Offset of the RNG word position (u128).
pub const RNG_POS_OFF: usize = RNG_SEED_OFF + 8;
/// Version 1: offset of the name's bytes; its crc32 follows them.
pub const V1_NAME_OFF: usize = RNG_POS_OFF + 16;
/// Offset of the crc32 of the buffer's schema archive (the superblock's), u32.
pub const SCHEMA_CRC_OFF: usize = RNG_POS_OFF + 16;
/// Offset of the origin's length in bytes (u32).
pub const ORIGIN_LEN_OFF: usize = SCHEMA_CRC_OFF + 4;
/// Offset of the name's bytes; the origin's bytes follow them, then their crc32.
pub const NAME_OFF: usize = ORIGIN_LEN_OFF + 4;
/// Longest snapshot name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Longest origin folder, in bytes (Linux's `PATH_MAX`).
pub const MAX_ORIGIN_LEN: usize = 4096;

/// A checkpoint of a buffer: which snapshot holds it and the counters and RNG position
/// it must come back with. Small (about 150 bytes serialized), so it travels inside a
/// training checkpoint next to the model weights.
///
/// ```
/// use replaystore::State;
/// let state = State { name: "step-1000".into(), generation: 7, tail: 1000, ..State::default() };
/// let bytes = state.to_bytes();
/// assert_eq!(State::from_bytes(&bytes)?, state);
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct State {
    /// The snapshot's name (its folder under `snapshots/`).
    pub name: String,
    /// The buffer's uuid: a state only applies to the buffer it came from.
    pub uuid: [u8; 16],
    /// Generation of the commit the snapshot froze.
    pub generation: u64,
    /// Oldest live logical index.
    pub head: u64,
    /// Next logical index to be given.
    pub tail: u64,
    /// Items dropped by `clear`.
    pub cleared: u64,
    /// Items returned by samples.
    pub sampled: u64,
    /// Seed of the sampling RNG.
    pub rng_seed: u64,
    /// Position in the RNG's stream.
    pub rng_word_pos: u128,
    /// The folder of the buffer the snapshot is in (absolute; empty in a version-1
    /// state): a buffer of the same schema and geometry elsewhere brings the snapshot
    /// into its own folder to restore it.
    pub origin: PathBuf,
    /// The crc32 of that buffer's schema archive (0 in a version-1 state): a state of
    /// another schema is refused before the origin is read.
    pub schema_crc: u32,
}

impl State {
    /// The serialized form (see `docs/FORMAT.md`, "State").
    pub fn to_bytes(&self) -> Vec<u8> {
        let name = self.name.as_bytes();
        let name = name.get(..name.len().min(MAX_NAME_LEN)).unwrap_or(&[]);
        let origin = self.origin.as_os_str().as_bytes();
        let origin = origin
            .get(..origin.len().min(MAX_ORIGIN_LEN))
            .unwrap_or(&[]);
        let end = NAME_OFF + name.len() + origin.len();
        let mut out = vec![0u8; end + 4];
        let mut w = BytesMut(&mut out);
        w.put(0, &MAGIC);
        w.u32(VERSION_OFF, VERSION);
        w.u32(NAME_LEN_OFF, name.len() as u32);
        w.put(UUID_OFF, &self.uuid);
        w.u64(GENERATION_OFF, self.generation);
        w.u64(HEAD_OFF, self.head);
        w.u64(TAIL_OFF, self.tail);
        w.u64(CLEARED_OFF, self.cleared);
        w.u64(SAMPLED_OFF, self.sampled);
        w.u64(RNG_SEED_OFF, self.rng_seed);
        w.u128(RNG_POS_OFF, self.rng_word_pos);
        w.u32(SCHEMA_CRC_OFF, self.schema_crc);
        w.u32(ORIGIN_LEN_OFF, origin.len() as u32);
        w.put(NAME_OFF, name);
        w.put(NAME_OFF + name.len(), origin);
        let crc = crc32(out.get(..end).unwrap_or(&[]));
        BytesMut(&mut out).u32(end, crc);
        out
    }

    /// Reads a serialized state, checking magic, version, checksum and name.
    pub fn from_bytes(bytes: &[u8]) -> crate::Result<State> {
        State::decode(bytes).map_err(|p| crate::Error::BadState(p.to_string()))
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<State, Problem> {
        need(bytes, MAGIC.len())?;
        magic(bytes, 0, &MAGIC)?;
        need(bytes, V1_NAME_OFF)?;
        let r = Bytes(bytes);
        let version = r.u32(VERSION_OFF).unwrap_or(0);
        let name_off = match version {
            VERSION => NAME_OFF,
            VERSION_WITHOUT_ORIGIN => V1_NAME_OFF,
            // The crc below is not checked yet: a flipped version bit is named as the
            // version it makes, which is as loud.
            other => {
                return Err(Problem::VersionOf {
                    found: other,
                    supported: VERSION,
                });
            }
        };
        need(bytes, name_off)?;
        let length = |off: usize, max: usize, what: &'static str| {
            let len = r.u32(off).unwrap_or(0) as usize;
            match len <= max {
                true => Ok(len),
                false => Err(Problem::Field {
                    offset: off as u64,
                    name: what,
                    expected: format!("<= {max}"),
                    got: len.to_string(),
                }),
            }
        };
        let len = length(NAME_LEN_OFF, MAX_NAME_LEN, "name length")?;
        let origin_len = match version {
            VERSION => length(ORIGIN_LEN_OFF, MAX_ORIGIN_LEN, "origin length")?,
            _ => 0,
        };
        let end = name_off + len + origin_len;
        need(bytes, end + 4)?;
        checksum(bytes, 0, end, end)?;
        let raw_name = bytes.get(name_off..name_off + len).unwrap_or(&[]);
        let name = std::str::from_utf8(raw_name)
            .ok()
            .filter(|n| check_name(n).is_ok())
            .ok_or_else(|| Problem::Field {
                offset: name_off as u64,
                name: "name",
                expected: "a snapshot name".into(),
                got: String::from_utf8_lossy(raw_name).into_owned(),
            })?;
        let origin = PathBuf::from(std::ffi::OsStr::from_bytes(
            bytes.get(name_off + len..end).unwrap_or(&[]),
        ));
        if !(origin.as_os_str().is_empty() || origin.is_absolute()) {
            return Err(Problem::Field {
                offset: (name_off + len) as u64,
                name: "origin",
                expected: "an absolute folder".into(),
                got: origin.display().to_string(),
            });
        }
        let u = |off| r.u64(off).unwrap_or(0);
        Ok(State {
            name: name.to_owned(),
            uuid: r.array(UUID_OFF).unwrap_or([0; 16]),
            generation: u(GENERATION_OFF),
            head: u(HEAD_OFF),
            tail: u(TAIL_OFF),
            cleared: u(CLEARED_OFF),
            sampled: u(SAMPLED_OFF),
            rng_seed: u(RNG_SEED_OFF),
            rng_word_pos: r.u128(RNG_POS_OFF).unwrap_or(0),
            origin,
            schema_crc: match version {
                VERSION => r.u32(SCHEMA_CRC_OFF).unwrap_or(0),
                _ => 0,
            },
        })
    }
}

/// Whether `name` can be a snapshot name: 1 to 64 bytes of ASCII letters, digits, `.`,
/// `_` and `-`, not starting with `.` (names starting with `.` are the engine's
/// temporary folders). The same folder name then works on every file system.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err("must have 1 to 64 bytes");
    }
    if name.starts_with('.') {
        return Err("must not start with '.'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("may hold only ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_checksummed_state_with_a_bad_length_version_or_name_is_refused() {
        let ok = State {
            name: "s1".into(),
            ..State::default()
        };
        assert_eq!(State::decode(&ok.to_bytes()), Ok(ok.clone()));
        let reseal = |mut b: Vec<u8>| {
            let end = b.len() - 4;
            let crc = crc32(&b[..end]);
            BytesMut(&mut b).u32(end, crc);
            b
        };
        let mut long = ok.to_bytes();
        BytesMut(&mut long).u32(NAME_LEN_OFF, MAX_NAME_LEN as u32 + 1);
        let got = State::decode(&long);
        assert!(
            matches!(&got, Err(Problem::Field { offset, .. }) if *offset == NAME_LEN_OFF as u64),
            "{got:?}"
        );
        let mut v3 = ok.to_bytes();
        BytesMut(&mut v3).u32(VERSION_OFF, 3);
        assert_eq!(
            State::decode(&reseal(v3)),
            Err(Problem::VersionOf {
                found: 3,
                supported: VERSION
            })
        );
        let mut long_origin = ok.to_bytes();
        BytesMut(&mut long_origin).u32(ORIGIN_LEN_OFF, MAX_ORIGIN_LEN as u32 + 1);
        let got = State::decode(&long_origin);
        assert!(
            matches!(&got, Err(Problem::Field { offset, .. }) if *offset == ORIGIN_LEN_OFF as u64),
            "{got:?}"
        );
        let relative = State {
            origin: "runs/buf".into(),
            ..ok.clone()
        };
        let got = State::decode(&relative.to_bytes());
        assert!(
            matches!(&got, Err(Problem::Field { name: "origin", .. })),
            "{got:?}"
        );
        let unnamed = State {
            name: String::new(),
            ..State::default()
        };
        let got = State::decode(&unnamed.to_bytes());
        assert!(
            matches!(&got, Err(Problem::Field { offset, .. }) if *offset == NAME_OFF as u64),
            "{got:?}"
        );
    }

    fn state() -> State {
        State {
            name: "ckpt-0042".into(),
            uuid: [7; 16],
            generation: 12,
            head: 3,
            tail: 99,
            cleared: 1,
            sampled: 4096,
            rng_seed: 0xdead_beef,
            rng_word_pos: u128::MAX - 5,
            origin: "/runs/7/buffer".into(),
            schema_crc: 0x1234_5678,
        }
    }

    #[test]
    fn round_trips_every_field() {
        let s = state();
        assert_eq!(State::decode(&s.to_bytes()), Ok(s));
    }

    /// Version 1 as it was written (no schema crc, no origin): the states kept in
    /// training checkpoints from before version 2.
    fn version_1_bytes(s: &State) -> Vec<u8> {
        let name = s.name.as_bytes();
        let mut out = vec![0u8; V1_NAME_OFF + name.len() + 4];
        let mut w = BytesMut(&mut out);
        w.put(0, &MAGIC);
        w.u32(VERSION_OFF, VERSION_WITHOUT_ORIGIN);
        w.u32(NAME_LEN_OFF, name.len() as u32);
        w.put(UUID_OFF, &s.uuid);
        w.u64(GENERATION_OFF, s.generation);
        w.u64(HEAD_OFF, s.head);
        w.u64(TAIL_OFF, s.tail);
        w.u64(CLEARED_OFF, s.cleared);
        w.u64(SAMPLED_OFF, s.sampled);
        w.u64(RNG_SEED_OFF, s.rng_seed);
        w.u128(RNG_POS_OFF, s.rng_word_pos);
        w.put(V1_NAME_OFF, name);
        let end = V1_NAME_OFF + name.len();
        let crc = crc32(&out[..end]);
        BytesMut(&mut out).u32(end, crc);
        out
    }

    #[test]
    fn a_version_1_state_reads_with_no_origin() {
        let s = state();
        let got = State::decode(&version_1_bytes(&s)).unwrap();
        assert_eq!(
            got,
            State {
                origin: PathBuf::new(),
                schema_crc: 0,
                ..s
            }
        );
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        for bytes in [state().to_bytes(), version_1_bytes(&state())] {
            for bit in 0..bytes.len() * 8 {
                let mut b = bytes.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    State::decode(&b).is_err(),
                    "flip of bit {bit} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        for bytes in [state().to_bytes(), version_1_bytes(&state())] {
            for len in 0..bytes.len() {
                assert!(State::decode(&bytes[..len]).is_err(), "length {len}");
            }
        }
    }

    #[test]
    fn names_are_portable_folder_names() {
        for ok in ["a", "step-100", "run_3.final", &"x".repeat(64)] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".tmp-a",
            "a/b",
            "..",
            "a b",
            "é",
            &"x".repeat(65),
            "a\0",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
