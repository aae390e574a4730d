//! The item state file `items.state` (format version 3, superblock flag bit 4): what
//! each item's life is beyond its row, one atomic word per ring slot after a header
//! page. Pure layouts; the mapping is `storage::map::life`, the rules `parts::lifecycle`.
//!
//! ```text
//! offset  size        what
//! 0       4096        header (below), rest of the page zero
//! 4096    8 * slots   one word per ring slot (below)
//! ```
//! Header:
//! ```text
//! 0   8  magic "RPLYLIFE"
//! 8   4  format version: 2 (words carry a check), 1 (files made before the check)
//! 12  4  reserved, 0
//! 16  16 buffer uuid (as in the manifest)
//! 32  8  capacity: words (= the ring's capacity)
//! 40  8  max_use: an item is removed by the draw that returns it for the max_use-th
//!        time (0: never), at most 65,535
//! 48  8  max_size: items kept live by the eviction policy (0 with FIFO)
//! 56  4  policy: 0 FIFO (the ring's alone), 1 random downsampling past max_size,
//!        2 reservoir of max_size
//! 60  4  reserved, 0
//! 64  8  seed of the policy's random decisions
//! 72  4  rate limit flags: bit 0 the buffer has a rate limiter (below)
//! 76  4  reserved, 0
//! 80  8  min_size_to_sample
//! 88  8  samples_per_insert (f64, finite, > 0)
//! 96  8  min_diff (f64): a draw of n needs inserts x spi - samples - n >= min_diff
//! 104 8  max_diff (f64): an add of n needs (inserts + n) x spi - samples <= max_diff,
//!        once more than min_size_to_sample items are live
//! 112 4  crc32 of bytes 0..112
//! --- atomic words, changed in place, not under the crc ---
//! 128 8  removed_live: removed items still inside the live range (head..tail)
//! 136 8 x 7  removed items counted by cause 1..=7 (see Cause), since create
//! 192 8  samples: items drawn since create, by every handle (the rate limiter's)
//! 200 4  wake: bumped after every add and draw of a rate-limited buffer (a futex word)
//! 204 4  waiting: handles waiting on `wake` now
//! 208 8  renamed: indices a reservoir handed to kept items it renamed past the ring's
//!        lap (items added = tail - lane base - renamed)
//! ```
//! Word of slot `s`, for the item `lap * capacity + s`:
//! ```text
//! bits 0..4   flags: bit 0 removed; bits 1..4 its cause (1..=7)
//! bits 4..8   check (version 2): the XOR of the word's other 15 nibbles; 0 in version 1
//! bits 8..24  uses: draws that returned the item, saturating at 65,535
//! bits 24..64 lap: (index / capacity) mod 2^40
//! ```
//! A word whose lap is not the lap of the item its slot holds describes an item that is
//! gone: it reads as "live, never drawn". So an add writes nothing here, and a word is
//! bound to one item by the same index its row's stamp proves. The check is what lets
//! `verify` see a flipped bit where no rule of the fields can (a use count without
//! `max_use` has no bound): every single flip, and every odd count of flips among bits
//! at the same place of their nibbles. The zero word checks, so unwritten slots do.

use super::{Bytes, BytesMut, Problem, crc32, sealed_version};

/// Magic of the item state file.
pub const MAGIC: [u8; 8] = *b"RPLYLIFE";
/// File name in the buffer directory.
pub const FILE_NAME: &str = "items.state";

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const RESERVED_OFF: usize = VERSION_OFF + 4;
/// Offset of the uuid.
pub const UUID_OFF: usize = RESERVED_OFF + 4;
/// Offset of the capacity.
pub const CAPACITY_OFF: usize = UUID_OFF + 16;
/// Offset of `max_use`.
pub const MAX_USE_OFF: usize = CAPACITY_OFF + 8;
/// Offset of `max_size`.
pub const MAX_SIZE_OFF: usize = MAX_USE_OFF + 8;
/// Offset of the policy.
pub const POLICY_OFF: usize = MAX_SIZE_OFF + 8;
const RESERVED2_OFF: usize = POLICY_OFF + 4;
/// Offset of the policy's seed.
pub const SEED_OFF: usize = RESERVED2_OFF + 4;
const LIMIT_FLAGS_OFF: usize = SEED_OFF + 8;
const RESERVED3_OFF: usize = LIMIT_FLAGS_OFF + 4;
const MIN_SIZE_OFF: usize = RESERVED3_OFF + 4;
const SPI_OFF: usize = MIN_SIZE_OFF + 8;
const MIN_DIFF_OFF: usize = SPI_OFF + 8;
const MAX_DIFF_OFF: usize = MIN_DIFF_OFF + 8;
const CRC_OFF: usize = MAX_DIFF_OFF + 8;
/// Bytes of the header under its crc, crc included.
pub const HEADER_LEN: usize = CRC_OFF + 4;
/// Offset of the atomic `removed_live` word.
pub const REMOVED_LIVE_OFF: usize = 128;
/// Offset of the atomic counter of removals by cause 1 (cause `c` at `+ 8 * (c - 1)`).
pub const REMOVED_BY_OFF: usize = REMOVED_LIVE_OFF + 8;
/// Offset of the atomic count of items drawn (the rate limiter's samples).
pub const SAMPLES_OFF: usize = REMOVED_BY_OFF + 8 * 7;
/// Offset of the 32-bit futex word bumped after each add and draw.
pub const WAKE_OFF: usize = SAMPLES_OFF + 8;
/// Offset of the 32-bit count of handles waiting on the wake word.
pub const WAITING_OFF: usize = WAKE_OFF + 4;
/// Offset of the atomic count of renames (a reservoir's kept items renamed to the tail).
pub const RENAMED_OFF: usize = WAITING_OFF + 4;
/// Offset of the first slot's word.
pub const BODY_OFFSET: usize = 4096;
/// The version of files made now: every word carries its check in bits 4..8.
pub const VERSION: u32 = 2;
/// The version of files made before the check (their words hold 0 in bits 4..8): read
/// and written as they are, so a build from before still opens them.
pub const VERSION_UNCHECKED: u32 = 1;
/// Bits 4..8 of a word: its check (version 2), zero (version 1).
const CHECK_BITS: u64 = 0xF0;
/// The largest `max_use`: uses are counted in 16 bits.
pub const MAX_USES: u64 = 0xFFFF;
/// Laps are kept modulo this.
pub const LAP_MOD: u64 = 1 << 40;

/// Reverb's rate limiter: when a draw or an add may go ahead, from the items added
/// (`inserts`), drawn (`samples`) and live (`size`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// No draw while fewer items than this are live.
    pub min_size_to_sample: u64,
    /// Draws each insert pays for.
    pub samples_per_insert: f64,
    /// A draw of `n` needs `inserts * samples_per_insert - samples - n >= min_diff`.
    pub min_diff: f64,
    /// An add of `n` needs `(inserts + n) * samples_per_insert - samples <= max_diff`,
    /// once the items live after it would be more than `min_size_to_sample`.
    pub max_diff: f64,
}

impl RateLimit {
    /// Reverb's `MinSize(n)`: draws wait for `n` live items, adds never wait.
    pub fn min_size(n: u64) -> RateLimit {
        RateLimit {
            min_size_to_sample: n,
            samples_per_insert: 1.0,
            min_diff: f64::MIN,
            max_diff: f64::MAX,
        }
    }

    /// Reverb's `SampleToInsertRatio(samples_per_insert, min_size_to_sample,
    /// error_buffer)`: draws and adds keep `samples / inserts` within `error_buffer`
    /// draws of `samples_per_insert`, once `min_size_to_sample` items are live.
    pub fn sample_to_insert_ratio(
        samples_per_insert: f64,
        min_size_to_sample: u64,
        error_buffer: f64,
    ) -> RateLimit {
        let offset = samples_per_insert * min_size_to_sample as f64;
        RateLimit {
            min_size_to_sample,
            samples_per_insert,
            min_diff: offset - error_buffer,
            max_diff: offset + error_buffer,
        }
    }

    /// Whether a draw of `n` may go ahead.
    pub fn can_sample(&self, inserts: u64, samples: u64, size: u64, n: u64) -> bool {
        if size < self.min_size_to_sample {
            return false;
        }
        inserts as f64 * self.samples_per_insert - samples as f64 - n as f64 >= self.min_diff
    }

    /// Whether an add of `n` may go ahead.
    pub fn can_insert(&self, inserts: u64, samples: u64, size: u64, n: u64) -> bool {
        if size + n <= self.min_size_to_sample {
            return true;
        }
        (inserts + n) as f64 * self.samples_per_insert - samples as f64 <= self.max_diff
    }

    /// What is wrong with it, if anything.
    fn problem(&self) -> Option<(usize, &'static str, String)> {
        let spi = self.samples_per_insert;
        if !(spi.is_finite() && spi > 0.0) {
            return Some((SPI_OFF, "samples_per_insert", format!("{spi}")));
        }
        if self.min_diff.is_nan() || self.max_diff.is_nan() || self.min_diff > self.max_diff {
            let got = format!("{}..{}", self.min_diff, self.max_diff);
            return Some((MIN_DIFF_OFF, "min_diff..max_diff", got));
        }
        None
    }
}

/// What happens to items beyond what the buffer keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Policy {
    /// The ring overwrites the oldest item: the buffer keeps the newest `capacity`.
    Fifo = 0,
    /// Past `max_size` live items, uniformly random live items are removed
    /// (UnstableBaselines' downsampling).
    Downsample = 1,
    /// Reservoir sampling (Vitter's algorithm R, RLlib's `ReservoirReplayBuffer`): the
    /// `n`-th item added is kept with probability `max_size / n`, in place of a
    /// uniformly random kept item, so each item ever added is kept with equal chance.
    /// Kept items the ring reaches are renamed to the tail instead of overwritten.
    Reservoir = 2,
}

impl Policy {
    /// The policy a header's word names.
    pub fn of(v: u32) -> Option<Policy> {
        match v {
            0 => Some(Policy::Fifo),
            1 => Some(Policy::Downsample),
            2 => Some(Policy::Reservoir),
            _ => None,
        }
    }
}

/// Why an item was removed: the cause bits of its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Cause {
    /// `remove(indices)`.
    Explicit = 1,
    /// A draw that removes what it returns (`Rows::remove`).
    Sampled = 2,
    /// Its `max_use`-th draw.
    UsedUp = 3,
    /// Older than the staleness bound a draw was given.
    Stale = 4,
    /// Drawn once by a FIFO consume.
    Consumed = 5,
    /// Random downsampling when the buffer was over its size.
    Downsampled = 6,
    /// Not kept by reservoir sampling.
    Reservoir = 7,
}

impl Cause {
    /// Every cause, in the order of their counters.
    pub const ALL: [Cause; 7] = [
        Cause::Explicit,
        Cause::Sampled,
        Cause::UsedUp,
        Cause::Stale,
        Cause::Consumed,
        Cause::Downsampled,
        Cause::Reservoir,
    ];

    /// The cause bits' value `v`, if it names one.
    pub fn of(v: u8) -> Option<Cause> {
        Cause::ALL.get(usize::from(v).checked_sub(1)?).copied()
    }

    /// The offset of its counter in the header.
    pub fn counter_off(self) -> usize {
        REMOVED_BY_OFF + 8 * (self as usize - 1)
    }

    /// Its name, as `stats()` and `info` show it.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Explicit => "explicit",
            Cause::Sampled => "sampled",
            Cause::UsedUp => "used_up",
            Cause::Stale => "stale",
            Cause::Consumed => "consumed",
            Cause::Downsampled => "downsampled",
            Cause::Reservoir => "reservoir",
        }
    }
}

/// One slot's word, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Word(pub u64);

impl Word {
    /// The lap of logical index `index` in a ring of `capacity`, as a word keeps it.
    #[inline(always)]
    pub fn lap_of(index: u64, capacity: u64) -> u64 {
        (index / capacity.max(1)) % LAP_MOD
    }

    /// The word of `index` with `uses` uses, removed for `cause` if given.
    #[inline(always)]
    pub fn new(index: u64, capacity: u64, uses: u64, cause: Option<Cause>) -> Word {
        let flags = cause.map_or(0, |c| 1 | (u64::from(c as u8) << 1));
        Word(flags | (uses.min(MAX_USES) << 8) | (Word::lap_of(index, capacity) << 24))
    }

    /// The check of its other bits: the XOR of its nibbles but the check's own.
    #[inline(always)]
    fn check_of(self) -> u64 {
        let mut x = self.0 & !CHECK_BITS;
        x ^= x >> 32;
        x ^= x >> 16;
        x ^= x >> 8;
        x ^= x >> 4;
        x & 0xF
    }

    /// The same fields, in the form of a file whose words are `checked` (version 2)
    /// or not (version 1): the check in bits 4..8, or zeros there.
    #[inline(always)]
    pub fn in_form(self, checked: bool) -> Word {
        let check = if checked { self.check_of() << 4 } else { 0 };
        Word((self.0 & !CHECK_BITS) | check)
    }

    /// The lap it names.
    #[inline(always)]
    pub fn lap(self) -> u64 {
        self.0 >> 24
    }

    /// Whether it describes `index` (else the item it described is gone).
    #[inline(always)]
    pub fn is_of(self, index: u64, capacity: u64) -> bool {
        self.lap() == Word::lap_of(index, capacity)
    }

    /// Draws that returned its item.
    #[inline(always)]
    pub fn uses(self) -> u64 {
        (self.0 >> 8) & MAX_USES
    }

    /// Whether its item was removed.
    #[inline(always)]
    pub fn removed(self) -> bool {
        self.0 & 1 != 0
    }

    /// Why it was removed (`None` while live, or for cause bits naming no cause).
    pub fn cause(self) -> Option<Cause> {
        self.removed()
            .then(|| Cause::of(((self.0 >> 1) & 7) as u8))
            .flatten()
    }

    /// What is wrong with its uses in a buffer whose items are used up at `max_use`
    /// draws (0: no bound, and then no count of uses is wrong): a live item is removed
    /// by the draw that brings it to `max_use`, so it never holds that many; an item
    /// used up holds exactly that many; one removed otherwise, fewer. `None` when sound.
    pub fn uses_problem(self, max_use: u64) -> Option<String> {
        let uses = self.uses();
        if max_use == 0 {
            return None;
        }
        match (self.removed(), self.cause()) {
            (false, _) if uses >= max_use => {
                Some(format!("{uses} uses on a live item (max_use {max_use})"))
            }
            (true, Some(Cause::UsedUp)) if uses != max_use => {
                Some(format!("used up at {uses} uses (max_use {max_use})"))
            }
            (true, Some(c)) if c != Cause::UsedUp && uses >= max_use => Some(format!(
                "{uses} uses on an item removed as {} (max_use {max_use}: it would have been \
                 used up)",
                c.name()
            )),
            _ => None,
        }
    }

    /// What is wrong with it as the word of a slot whose item has lap `item_lap` (the
    /// lap of the live item in the slot, if one is), in a file whose words are
    /// `checked` (version 2): a check that does not match (version 1: bits 4..8 not
    /// zero), cause bits that do not fit the removed bit, a lap ahead of the item.
    /// `None` when sound.
    pub fn problem(self, item_lap: Option<u64>, checked: bool) -> Option<String> {
        let stored = (self.0 & CHECK_BITS) >> 4;
        match checked {
            true if stored != self.check_of() => {
                return Some(format!(
                    "check bits 4..8 hold {stored:#x}, the word's bits give {:#x} (a flipped bit)",
                    self.check_of()
                ));
            }
            false if stored != 0 => {
                return Some(format!("bits 4..8 set ({stored:#x}) in a version-1 word"));
            }
            _ => {}
        }
        let cause = (self.0 >> 1) & 7;
        match (self.removed(), cause) {
            (true, 0) => return Some("removed with no cause".into()),
            (false, c) if c != 0 => return Some(format!("cause {c} on a live item")),
            _ => {}
        }
        match item_lap {
            // A lap ahead of the live item's names an index not handed out yet. Laps
            // wrap at 2^40; a word more than half the lap space ahead is behind.
            Some(lap) => {
                let ahead = self.lap().wrapping_sub(lap) % LAP_MOD;
                (ahead != 0 && ahead < LAP_MOD / 2)
                    .then(|| format!("lap {} is ahead of its item's lap {lap}", self.lap()))
            }
            None => None,
        }
    }
}

/// The immutable part of the header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LifeHeader {
    /// The buffer's uuid.
    pub uuid: [u8; 16],
    /// Words (the ring's capacity).
    pub capacity: u64,
    /// Draws an item serves before it is removed (0: no bound).
    pub max_use: u64,
    /// Items the policy keeps live (0 with FIFO).
    pub max_size: u64,
    /// What happens to items beyond `max_size`.
    pub policy: Policy,
    /// Seed of the policy's random decisions.
    pub seed: u64,
    /// Reverb's rate limiter, if the buffer has one.
    pub rate_limit: Option<RateLimit>,
    /// Whether every word carries its check (version 2; files made before, version 1,
    /// hold zeros there and are written so).
    pub checked: bool,
}

impl LifeHeader {
    /// The header page of a new file.
    pub fn encode(&self) -> Vec<u8> {
        let mut page = vec![0u8; BODY_OFFSET];
        let mut w = BytesMut(&mut page);
        w.put(MAGIC_OFF, &MAGIC);
        w.u32(
            VERSION_OFF,
            if self.checked {
                VERSION
            } else {
                VERSION_UNCHECKED
            },
        );
        w.put(UUID_OFF, &self.uuid);
        w.u64(CAPACITY_OFF, self.capacity);
        w.u64(MAX_USE_OFF, self.max_use);
        w.u64(MAX_SIZE_OFF, self.max_size);
        w.u32(POLICY_OFF, self.policy as u32);
        w.u64(SEED_OFF, self.seed);
        if let Some(rl) = self.rate_limit {
            w.u32(LIMIT_FLAGS_OFF, 1);
            w.u64(MIN_SIZE_OFF, rl.min_size_to_sample);
            w.u64(SPI_OFF, rl.samples_per_insert.to_bits());
            w.u64(MIN_DIFF_OFF, rl.min_diff.to_bits());
            w.u64(MAX_DIFF_OFF, rl.max_diff.to_bits());
        }
        let crc = crc32(page.get(..CRC_OFF).unwrap_or(&[]));
        BytesMut(&mut page).u32(CRC_OFF, crc);
        page
    }

    /// Decodes and checks a header: magic, crc, version, then each field's range.
    pub fn decode(bytes: &[u8]) -> Result<LifeHeader, Problem> {
        let checked = match sealed_version(bytes, &MAGIC, HEADER_LEN, CRC_OFF, VERSION_OFF)? {
            VERSION => true,
            VERSION_UNCHECKED => false,
            found => {
                return Err(Problem::VersionOf {
                    found,
                    supported: VERSION,
                });
            }
        };
        let r = Bytes(bytes);
        let policy = r.u32(POLICY_OFF).unwrap_or(u32::MAX);
        let Some(known) = Policy::of(policy) else {
            return Err(Problem::Field {
                offset: POLICY_OFF as u64,
                name: "policy",
                expected: "0 (FIFO), 1 (downsample) or 2 (reservoir)".into(),
                got: policy.to_string(),
            });
        };
        let h = LifeHeader {
            uuid: r.array(UUID_OFF).unwrap_or([0; 16]),
            capacity: r.u64(CAPACITY_OFF).unwrap_or(0),
            max_use: r.u64(MAX_USE_OFF).unwrap_or(0),
            max_size: r.u64(MAX_SIZE_OFF).unwrap_or(0),
            policy: known,
            seed: r.u64(SEED_OFF).unwrap_or(0),
            rate_limit: None,
            checked,
        };
        let bad = |offset: usize, name: &'static str, expected: String, got: u64| {
            Err(Problem::Field {
                offset: offset as u64,
                name,
                expected,
                got: got.to_string(),
            })
        };
        let flags = r.u32(LIMIT_FLAGS_OFF).unwrap_or(0);
        if flags > 1 {
            return bad(
                LIMIT_FLAGS_OFF,
                "rate limit flags",
                "0 or 1".into(),
                flags.into(),
            );
        }
        let f = |off: usize| f64::from_bits(r.u64(off).unwrap_or(0));
        let h = LifeHeader {
            rate_limit: (flags == 1).then(|| RateLimit {
                min_size_to_sample: r.u64(MIN_SIZE_OFF).unwrap_or(0),
                samples_per_insert: f(SPI_OFF),
                min_diff: f(MIN_DIFF_OFF),
                max_diff: f(MAX_DIFF_OFF),
            }),
            ..h
        };
        if let Some((off, name, got)) = h.rate_limit.and_then(|rl| rl.problem()) {
            return Err(Problem::Field {
                offset: off as u64,
                name,
                expected: "a finite samples_per_insert > 0 and min_diff <= max_diff".into(),
                got,
            });
        }
        if flags == 0 && (MIN_SIZE_OFF..CRC_OFF).any(|b| bytes.get(b) != Some(&0)) {
            return bad(
                MIN_SIZE_OFF,
                "rate limit",
                "zero without a rate limiter".into(),
                1,
            );
        }
        for off in [RESERVED_OFF, RESERVED2_OFF, RESERVED3_OFF] {
            if r.u32(off) != Some(0) {
                let got = r.u32(off).unwrap_or(0).into();
                return bad(off, "reserved", "0".into(), got);
            }
        }
        if h.capacity == 0 || h.capacity > super::row::MAX_CAPACITY {
            let expected = format!("1..={}", super::row::MAX_CAPACITY);
            return bad(CAPACITY_OFF, "capacity", expected, h.capacity);
        }
        if h.max_use > MAX_USES {
            return bad(MAX_USE_OFF, "max_use", format!("0..={MAX_USES}"), h.max_use);
        }
        let sized = h.max_size >= 1 && h.max_size <= h.capacity;
        match (h.policy, h.max_size) {
            (Policy::Fifo, 0) => {}
            (Policy::Fifo, got) => return bad(MAX_SIZE_OFF, "max_size", "0 with FIFO".into(), got),
            (_, got) if !sized => {
                let expected = format!("1..={} (the capacity)", h.capacity);
                return bad(MAX_SIZE_OFF, "max_size", expected, got);
            }
            (Policy::Reservoir, got) if got == h.capacity => {
                let expected = format!("1..{} (below the capacity)", h.capacity);
                return bad(MAX_SIZE_OFF, "max_size", expected, got);
            }
            _ => {}
        }
        Ok(h)
    }

    /// Bytes of the whole file: the header page and one word per slot, in whole pages.
    pub fn file_len(&self) -> u64 {
        (BODY_OFFSET as u64 + self.capacity * 8).next_multiple_of(4096)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> LifeHeader {
        LifeHeader {
            uuid: [7; 16],
            capacity: 1000,
            max_use: 3,
            max_size: 400,
            policy: Policy::Downsample,
            seed: 99,
            rate_limit: Some(RateLimit::sample_to_insert_ratio(4.0, 100, 50.0)),
            checked: true,
        }
    }

    #[test]
    fn the_header_round_trips_and_every_damaged_byte_is_refused() {
        let page = header().encode();
        assert_eq!(LifeHeader::decode(&page), Ok(header()));
        for at in 0..HEADER_LEN {
            let mut bad = page.clone();
            bad[at] ^= 0x10;
            assert!(LifeHeader::decode(&bad).is_err(), "byte {at} flipped");
        }
        assert!(LifeHeader::decode(&page[..HEADER_LEN - 1]).is_err());
        let unchecked = LifeHeader {
            checked: false,
            ..header()
        };
        assert_eq!(LifeHeader::decode(&unchecked.encode()), Ok(unchecked));
    }

    #[test]
    fn a_version_past_this_builds_is_refused_by_name() {
        let mut page = header().encode();
        BytesMut(&mut page).u32(VERSION_OFF, 3);
        let crc = crc32(&page[..CRC_OFF]);
        BytesMut(&mut page).u32(CRC_OFF, crc);
        assert_eq!(
            LifeHeader::decode(&page),
            Err(Problem::VersionOf {
                found: 3,
                supported: VERSION
            })
        );
    }

    #[test]
    fn fields_out_of_range_are_refused_even_with_a_matching_crc() {
        for (capacity, max_use) in [
            (0, 0),
            (super::super::row::MAX_CAPACITY + 1, 0),
            (8, 65_536),
        ] {
            let page = LifeHeader {
                capacity,
                max_use,
                ..header()
            }
            .encode();
            assert!(matches!(
                LifeHeader::decode(&page),
                Err(Problem::Field { .. })
            ));
        }
    }

    #[test]
    fn the_rate_limiter_admits_as_reverbs_does() {
        // SampleToInsertRatio(2, 10, 5): offset 20, diffs 15..25.
        let rl = RateLimit::sample_to_insert_ratio(2.0, 10, 5.0);
        // Below min size: adds go, draws wait.
        assert!(rl.can_insert(0, 0, 0, 10) && !rl.can_sample(9, 0, 9, 1));
        // 10 in, 0 drawn: diff 20; a draw of 5 leaves 15 (ok), of 6 leaves 14 (no).
        assert!(rl.can_sample(10, 0, 10, 5) && !rl.can_sample(10, 0, 10, 6));
        // An add of 2 makes 24 (ok), of 3 makes 26 (no) until something is drawn.
        assert!(rl.can_insert(10, 0, 10, 2) && !rl.can_insert(10, 0, 10, 3));
        assert!(rl.can_insert(10, 1, 10, 3));
        let ms = RateLimit::min_size(4);
        assert!(!ms.can_sample(3, 0, 3, 1) && ms.can_sample(100, 10_000, 4, 1000));
        assert!(ms.can_insert(u64::MAX / 4, 0, 5, 1));
    }

    #[test]
    fn a_word_names_its_item_by_lap_and_reads_back_what_was_stored() {
        let cap = 10;
        let w = Word::new(23, cap, 5, Some(Cause::UsedUp));
        assert!(w.is_of(23, cap) && w.is_of(20, cap) && !w.is_of(13, cap) && !w.is_of(33, cap));
        assert_eq!(
            (w.uses(), w.removed(), w.cause()),
            (5, true, Some(Cause::UsedUp))
        );
        let live = Word::new(23, cap, 70_000, None);
        assert_eq!(
            (live.uses(), live.removed(), live.cause()),
            (MAX_USES, false, None)
        );
        // The word of slot 3 before anything was written: lap 0, live, unused.
        assert!(Word(0).is_of(3, cap) && !Word(0).removed());
        for c in Cause::ALL {
            assert_eq!(Cause::of(c as u8), Some(c));
            assert_eq!(Word::new(5, cap, 0, Some(c)).cause(), Some(c));
        }
    }

    #[test]
    fn a_word_with_impossible_bits_or_a_lap_ahead_is_a_problem() {
        let cap = 10;
        for checked in [true, false] {
            let word = |i, uses, cause| Word::new(i, cap, uses, cause).in_form(checked);
            assert_eq!(word(23, 1, None).problem(Some(2), checked), None);
            assert_eq!(word(13, 1, None).problem(Some(2), checked), None);
            assert!(word(33, 1, None).problem(Some(2), checked).is_some());
            assert!(Word(1).in_form(checked).problem(None, checked).is_some());
            assert!(Word(2).in_form(checked).problem(None, checked).is_some());
            // Laps wrap: the live item at lap 0 after 2^40 laps, a word from the lap
            // before.
            let old = Word((LAP_MOD - 1) << 24).in_form(checked);
            assert_eq!(old.problem(Some(0), checked), None);
            // The unwritten slot's word is sound in both forms.
            assert_eq!(Word(0).problem(Some(0), checked), None);
        }
        assert!(Word(0x10).problem(None, false).is_some());
        assert!(Word(0x20).problem(None, false).is_some());
    }

    #[test]
    fn every_single_flipped_bit_of_a_checked_word_is_a_problem() {
        let cap = 1000;
        let words = [
            Word(0),
            Word::new(7, cap, 0, None),
            Word::new(123_456, cap, 1, None),
            Word::new(5_000, cap, 300, Some(Cause::Stale)),
            Word::new(u64::MAX / 2, cap, MAX_USES, Some(Cause::UsedUp)),
        ];
        for w in words.map(|w| w.in_form(true)) {
            assert_eq!(w.problem(None, true), None, "{w:?}");
            for bit in 0..64 {
                let flipped = Word(w.0 ^ (1 << bit));
                assert!(
                    flipped.problem(None, true).is_some(),
                    "{w:?}: bit {bit} flipped passes"
                );
            }
        }
        // A version-1 word read as version 2 (and a checked one as version 1) is refused
        // unless both forms agree, as for the zero word.
        let plain = Word::new(8, cap, 2, None);
        assert!(plain.problem(None, true).is_some());
        assert!(plain.in_form(true).problem(None, false).is_some());
    }

    #[test]
    fn uses_at_or_past_max_use_are_a_problem_unless_the_item_was_used_up_at_exactly_it() {
        let cap = 10;
        let live = |uses| Word::new(3, cap, uses, None);
        let gone = |uses, cause| Word::new(3, cap, uses, Some(cause));
        assert_eq!(live(2).uses_problem(3), None);
        assert!(live(3).uses_problem(3).is_some());
        assert!(live(0x8000).uses_problem(3).is_some());
        assert_eq!(gone(3, Cause::UsedUp).uses_problem(3), None);
        assert!(gone(2, Cause::UsedUp).uses_problem(3).is_some());
        assert!(gone(7, Cause::UsedUp).uses_problem(3).is_some());
        assert_eq!(gone(1, Cause::Sampled).uses_problem(3), None);
        assert!(gone(4, Cause::Sampled).uses_problem(3).is_some());
        // No bound: any count is sound.
        assert_eq!(live(0xFFFF).uses_problem(0), None);
    }
}
