//! How to create a buffer (`Config`) and what a handle reports about it (`Stats`).

use crate::error::{Error, Result};
use crate::parts::priorities::PriorityConfig;
use crate::schema::Schema;
use crate::storage::io::IoRef;

/// Default size of one segment file: small enough that copying the one being written is
/// cheap (checkpoints), large enough that a million-item buffer has few files.
pub const DEFAULT_SEGMENT_BYTES: u64 = 32 << 20;

/// How to create a buffer.
///
/// ```
/// use replaystore::{Config, DType, Schema};
/// let schema = Schema::builder().field("x", DType::F32, &[4]).build()?;
/// let config = Config::new(schema, 1000).seed(7).segment_slots(256);
/// assert_eq!(config.capacity(), 1000);
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    pub(super) schema: Schema,
    pub(super) capacity: u64,
    pub(super) segment_bytes: u64,
    pub(super) segment_slots: Option<u64>,
    pub(super) seed: Option<u64>,
    pub(super) io: Option<IoRef>,
    pub(super) priorities: Option<PriorityConfig>,
    pub(super) episodic: bool,
    pub(super) whole_episodes: bool,
    pub(super) fragments: bool,
    pub(super) first_index: u64,
}

impl Config {
    /// A buffer of `capacity` items of `schema`.
    pub fn new(schema: Schema, capacity: u64) -> Config {
        Config {
            schema,
            capacity,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_slots: None,
            seed: None,
            io: None,
            priorities: None,
            episodic: false,
            whole_episodes: false,
            fragments: false,
            first_index: 0,
        }
    }

    /// The capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Target bytes per segment file (rounded down to a power-of-two number of slots).
    pub fn segment_bytes(mut self, bytes: u64) -> Config {
        self.segment_bytes = bytes;
        self
    }

    /// Exact slots per segment file (a power of two); overrides `segment_bytes`.
    pub fn segment_slots(mut self, slots: u64) -> Config {
        self.segment_slots = Some(slots);
        self
    }

    /// Seed of the sampling RNG (otherwise random, and stored so it resumes).
    pub fn seed(mut self, seed: u64) -> Config {
        self.seed = Some(seed);
        self
    }

    /// Keeps priorities for prioritized replay: `alpha` is the priority exponent, `eps`
    /// is added to every priority. New items get the largest priority seen so far.
    ///
    /// ```
    /// use replaystore::{Config, DType, Schema};
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 1000).prioritized(0.6, 1e-6);
    /// assert_eq!(config.priorities().map(|p| p.alpha), Some(0.6));
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn prioritized(self, alpha: f64, eps: f64) -> Config {
        self.priority_config(PriorityConfig::new(alpha, eps))
    }

    /// Keeps priorities with these settings (see [`PriorityConfig`]).
    pub fn priority_config(mut self, config: PriorityConfig) -> Config {
        self.priorities = Some(config);
        self
    }

    /// The priority settings, if the buffer keeps priorities.
    pub fn priorities(&self) -> Option<PriorityConfig> {
        self.priorities
    }

    /// Keeps episodes: rows are added with [`crate::ReplayBuffer::add_reset`] (what
    /// `env.reset()` returned) and [`crate::ReplayBuffer::add_step`] (what `env.step()`
    /// returned), each carrying its episode and step, and a scalar field named `reward`
    /// adds up to each episode's return. See `docs/design/episodes.md`.
    ///
    /// ```
    /// use replaystore::{Config, DType, Schema};
    /// let schema = Schema::builder().field("obs", DType::F32, &[4]).build()?;
    /// assert!(Config::new(schema, 1000).episodic().is_episodic());
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn episodic(mut self) -> Config {
        self.episodic = true;
        self
    }

    /// Whether the buffer keeps episodes.
    pub fn is_episodic(&self) -> bool {
        self.episodic || self.whole_episodes
    }

    /// Keeps episodes ([`Config::episodic`]) and evicts them whole (RLlib's
    /// `StorageUnit.EPISODES`): when a new row would overwrite the oldest live row, the
    /// head moves past the whole episode holding it, so every episode stored has all
    /// its rows. An episode longer than the capacity still loses its oldest rows one at
    /// a time while it is written (nothing else is left to evict).
    ///
    /// ```
    /// use replaystore::{Config, DType, Schema};
    /// let schema = Schema::builder().field("obs", DType::F32, &[4]).build()?;
    /// assert!(Config::new(schema, 1000).whole_episodes().is_episodic());
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn whole_episodes(mut self) -> Config {
        self.whole_episodes = true;
        self
    }

    /// Keeps each `add` / `add_batch` call's rows as one fragment (RLlib's
    /// `StorageUnit.FRAGMENTS`: a rollout fragment as an env runner sent it), to be
    /// drawn whole by [`crate::Request::fragments`]. Every row records its position
    /// in its call. Eviction stays row by row, so a fragment whose first rows were
    /// evicted is no longer drawn. Not with episodes, which are units of their own.
    ///
    /// ```
    /// use replaystore::{Config, DType, Schema};
    /// let schema = Schema::builder().field("obs", DType::F32, &[4]).build()?;
    /// assert!(Config::new(schema, 1000).fragments().keeps_fragments());
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn fragments(mut self) -> Config {
        self.fragments = true;
        self
    }

    /// Whether the buffer keeps fragments.
    pub fn keeps_fragments(&self) -> bool {
        self.fragments
    }

    /// The file-operation seam (fault-injection tests); the real file system by default.
    pub fn io(mut self, io: IoRef) -> Config {
        self.io = Some(io);
        self
    }

    pub(super) fn slots_per_segment(&self, stride: u64) -> Result<u64> {
        if let Some(s) = self.segment_slots {
            if !s.is_power_of_two() {
                return Err(Error::InvalidConfig {
                    field: "segment_slots",
                    problem: format!("{s} is not a power of two"),
                });
            }
            return Ok(s.min(self.capacity.next_power_of_two()));
        }
        let fit = (self.segment_bytes / stride).max(1);
        let pow = 1u64 << (63 - fit.leading_zeros());
        Ok(pow.min(self.capacity.next_power_of_two()))
    }
}

/// Counters and sizes of a buffer (RLlib's `stats()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Items live now.
    pub len: u64,
    /// Items the ring holds.
    pub capacity: u64,
    /// Oldest live logical index.
    pub head: u64,
    /// The next logical index to be given.
    pub tail: u64,
    /// Items ever added (logical indices given out).
    pub added: u64,
    /// Items pushed out of the ring by newer ones.
    pub evicted: u64,
    /// Items dropped by `clear`.
    pub cleared: u64,
    /// Items returned by samples.
    pub sampled: u64,
    /// Bytes the buffer's files occupy on disk.
    pub bytes_on_disk: u64,
    /// Sequence number of the newest commit: one more per commit, never reused (a
    /// `set_state` continues past the highest number used).
    pub generation: u64,
    /// Priority updates applied (prioritized buffers).
    pub priority_updates: u64,
    /// Priority updates skipped because their item had been evicted or cleared since
    /// it was sampled (prioritized buffers).
    pub stale_updates: u64,
}
