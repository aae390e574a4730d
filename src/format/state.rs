//! The serialized [`State`]: what `get_state` hands back to go into a training
//! checkpoint, and what `RESTORE` holds while a `set_state` is under way.

use super::{Bytes, BytesMut, Problem, checksum, crc32, magic, need};

/// Magic at offset 0.
pub const MAGIC: [u8; 8] = *b"RPLYSTAT";
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
/// Offset of the name's bytes; its crc32 follows them.
pub const NAME_OFF: usize = RNG_POS_OFF + 16;
/// Longest snapshot name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

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
}

impl State {
    /// The serialized form (see `docs/FORMAT.md`, "State").
    pub fn to_bytes(&self) -> Vec<u8> {
        let name = self.name.as_bytes();
        let len = name.len().min(MAX_NAME_LEN);
        let mut out = vec![0u8; NAME_OFF + len + 4];
        let mut w = BytesMut(&mut out);
        w.put(0, &MAGIC);
        w.u32(VERSION_OFF, super::FORMAT_VERSION);
        w.u32(NAME_LEN_OFF, len as u32);
        w.put(UUID_OFF, &self.uuid);
        w.u64(GENERATION_OFF, self.generation);
        w.u64(HEAD_OFF, self.head);
        w.u64(TAIL_OFF, self.tail);
        w.u64(CLEARED_OFF, self.cleared);
        w.u64(SAMPLED_OFF, self.sampled);
        w.u64(RNG_SEED_OFF, self.rng_seed);
        w.u128(RNG_POS_OFF, self.rng_word_pos);
        w.put(NAME_OFF, name.get(..len).unwrap_or(&[]));
        let crc = crc32(out.get(..NAME_OFF + len).unwrap_or(&[]));
        BytesMut(&mut out).u32(NAME_OFF + len, crc);
        out
    }

    /// Reads a serialized state, checking magic, version, checksum and name.
    pub fn from_bytes(bytes: &[u8]) -> crate::Result<State> {
        State::decode(bytes).map_err(|p| crate::Error::BadState(p.to_string()))
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<State, Problem> {
        need(bytes, MAGIC.len())?;
        magic(bytes, 0, &MAGIC)?;
        need(bytes, NAME_OFF)?;
        let r = Bytes(bytes);
        let len = r.u32(NAME_LEN_OFF).unwrap_or(0) as usize;
        if len > MAX_NAME_LEN {
            return Err(Problem::Field {
                offset: NAME_LEN_OFF as u64,
                name: "name length",
                expected: format!("<= {MAX_NAME_LEN}"),
                got: len.to_string(),
            });
        }
        need(bytes, NAME_OFF + len + 4)?;
        checksum(bytes, 0, NAME_OFF + len, NAME_OFF + len)?;
        let version = r.u32(VERSION_OFF).unwrap_or(0);
        if version != super::FORMAT_VERSION {
            return Err(Problem::Version(version));
        }
        let name = std::str::from_utf8(bytes.get(NAME_OFF..NAME_OFF + len).unwrap_or(&[]))
            .ok()
            .filter(|n| check_name(n).is_ok())
            .ok_or_else(|| Problem::Field {
                offset: NAME_OFF as u64,
                name: "name",
                expected: "a snapshot name".into(),
                got: String::from_utf8_lossy(bytes.get(NAME_OFF..NAME_OFF + len).unwrap_or(&[]))
                    .into_owned(),
            })?;
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
        let mut v2 = ok.to_bytes();
        BytesMut(&mut v2).u32(VERSION_OFF, 2);
        assert_eq!(State::decode(&reseal(v2)), Err(Problem::Version(2)));
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
        }
    }

    #[test]
    fn round_trips_every_field() {
        let s = state();
        assert_eq!(State::decode(&s.to_bytes()), Ok(s));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = state().to_bytes();
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                State::decode(&b).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let bytes = state().to_bytes();
        for len in 0..bytes.len() {
            assert!(State::decode(&bytes[..len]).is_err(), "length {len}");
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
