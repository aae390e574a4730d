//! How to create a buffer (`Config`) and what a handle reports about it (`Stats`).

use crate::error::{Error, Result};
use crate::parts::priorities::PriorityConfig;
use crate::schema::Schema;
use crate::storage::io::IoRef;

/// Default size of one segment file: small enough that copying the one being written is
/// cheap (checkpoints), large enough that a million-item buffer has few files.
pub const DEFAULT_SEGMENT_BYTES: u64 = 32 << 20;
/// Payload bytes of a chunk row of the chunk ring, unless `Config::chunk_bytes` says.
pub const DEFAULT_CHUNK_BYTES: u64 = 1008;
/// Bytes of chunk ring per item of capacity, unless `Config::heap_bytes` says.
pub const DEFAULT_HEAP_BYTES_PER_ITEM: u64 = 4096;

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
    pub(crate) schema: Schema,
    pub(crate) capacity: u64,
    pub(crate) segment_bytes: u64,
    pub(crate) segment_slots: Option<u64>,
    pub(crate) seed: Option<u64>,
    pub(crate) io: Option<IoRef>,
    pub(crate) priorities: Option<PriorityConfig>,
    pub(crate) episodic: bool,
    pub(crate) whole_episodes: bool,
    pub(crate) fragments: bool,
    pub(crate) first_index: u64,
    pub(crate) heap_bytes: Option<u64>,
    pub(crate) chunk_bytes: u64,
    /// An add may evict items before capacity to make room for its values.
    pub(crate) evict_for_room: bool,
    /// Item states, when kept: `max_use` and the eviction policy.
    pub(crate) lifecycle: Option<LifeSettings>,
}

/// What a buffer with item states keeps: the header of its `items.state`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct LifeSettings {
    /// Draws an item serves before it is removed (0: no bound).
    pub max_use: u64,
    /// Items the policy keeps live (0 with FIFO).
    pub max_size: u64,
    /// What happens to items beyond `max_size`.
    pub policy: Option<crate::format::lifecycle::Policy>,
    /// Reverb's rate limiter, if any.
    pub rate_limit: Option<crate::format::lifecycle::RateLimit>,
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
            heap_bytes: None,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            evict_for_room: false,
            lifecycle: None,
        }
    }

    /// The schema of the items.
    pub fn schema(&self) -> &Schema {
        &self.schema
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

    /// Keeps a state word per item (`items.state`): items can be removed before the
    /// ring overwrites them ([`crate::ReplayBuffer::remove`], draws that remove what
    /// they return with [`crate::request::Rows::remove`]) and every draw's uses are counted
    /// ([`crate::ReplayBuffer::item_states`]). Removed items are never drawn or read
    /// again, and `len` counts only the items not removed. Persisted, crash-safe and
    /// part of every snapshot like the rows. In an episodic buffer an item is an
    /// episode: every removal takes the whole episodes of the rows it names, `len`
    /// counts the rows of the episodes kept, and neither [`Config::max_use`], a
    /// reservoir nor a rate limiter may be set (each counts or moves single rows).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).item_states())?;
    /// buf.add_batch(&[Column::new("x", &[1.0f32, 2.0, 3.0])])?;
    /// assert_eq!(buf.remove(&[1])?, 1);
    /// assert_eq!(buf.len(), 2);
    /// assert!(buf.get(1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn item_states(mut self) -> Config {
        self.lifecycle = Some(self.lifecycle.unwrap_or_default());
        self
    }

    /// Keeps item states ([`Config::item_states`]) and removes an item when a draw
    /// returns it for the `n`-th time (DI-engine's `use_time_check`, Reverb's
    /// `max_times_sampled`); `n` is 1..=65,535. Draws by priority and uniform draws
    /// count; reads at given indices do not.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).max_use(2))?;
    /// buf.add(&[Column::scalar("x", &1.0f32)])?;
    /// buf.sample(2)?; // the only item, drawn twice: used up
    /// assert!(buf.is_empty());
    /// assert_eq!(buf.stats().removals.used_up, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_use(mut self, n: u64) -> Config {
        let settings = self.lifecycle.unwrap_or_default();
        self.lifecycle = Some(LifeSettings {
            max_use: n,
            ..settings
        });
        self
    }

    /// Keeps item states and at most `max_size` live items: past it, each add removes
    /// uniformly random live items (the new ones among them) until `max_size` are left,
    /// as UnstableBaselines' buffers downsample (`max_buffer_size`). The decisions come
    /// from a random stream of the buffer's own, a pure function of its seed and the
    /// tail, so a reopened or restored buffer decides as it would have. The ring still
    /// overwrites its oldest item when full: an item lives until it is downsampled or
    /// `capacity` more items were added. In steady state an item survives each add with
    /// probability about `1 - 1/max_size`, so the ring ends early about
    /// `e^(-capacity/max_size)` of them: with a capacity of 8 x `max_size`, 0.03%.
    /// A fragments buffer removes whole fragments; an episodic buffer counts steps
    /// (rows less reset rows) against `max_size` and, after each add that ends an
    /// episode, removes uniformly random ended episodes (that one among them) until at
    /// most `max_size` steps are left: UnstableBaselines' `EpisodeBuffer`.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::I64, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 128).downsample(8))?;
    /// for x in 0..100i64 {
    ///     buf.add(&[Column::scalar("x", &x)])?;
    /// }
    /// assert_eq!(buf.len(), 8);
    /// assert_eq!(buf.stats().removals.downsampled, 92);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn downsample(self, max_size: u64) -> Config {
        self.with_policy(crate::format::lifecycle::Policy::Downsample, max_size)
    }

    /// Keeps item states and Reverb's rate limiter: a draw waits until enough items are
    /// live and the draws so far leave room (`RateLimit::min_size`,
    /// `RateLimit::sample_to_insert_ratio`), an add until the draws have caught up.
    /// Draws and adds of every handle count, a reader's in another process too: a
    /// reader of a rate-limited buffer writes the limiter's counters (and only them).
    /// A call that may not go ahead is `RateLimited` at once, or waits for another
    /// process (a futex on the shared state file, never a spin) when the handle was
    /// given a timeout (`set_rate_limit_wait`).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Error, RateLimit, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).rate_limit(RateLimit::min_size(3));
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// buf.add_batch(&[Column::new("x", &[1.0f32, 2.0])])?;
    /// assert!(matches!(buf.sample(1), Err(Error::RateLimited { .. })));
    /// buf.add(&[Column::scalar("x", &3.0f32)])?;
    /// assert_eq!(buf.sample(4)?.indices().len(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rate_limit(mut self, limit: crate::format::lifecycle::RateLimit) -> Config {
        let settings = self.lifecycle.unwrap_or_default();
        self.lifecycle = Some(LifeSettings {
            rate_limit: Some(limit),
            ..settings
        });
        self
    }

    /// Keeps item states and a reservoir of `max_size` items (RLlib's
    /// `ReservoirReplayBuffer`, Vitter's algorithm R): the `n`-th item added is kept
    /// with probability `max_size / n`, in place of a uniformly random kept item, and
    /// otherwise removed at once (its index is still handed out), so at every moment
    /// each item ever added is kept with the same chance. A kept item the ring reaches
    /// is renamed to the tail (its row stays where it is, under the next index of its
    /// slot) instead of being overwritten, so the ring's age bound never applies. The
    /// decisions come from a stream that is a pure function of the seed and the item's
    /// index: a reopened or restored buffer decides as this one would. `max_size` must
    /// be below the capacity (twice it or more keeps renames rare); items with
    /// variable-length fields are not supported yet.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::I64, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 20).reservoir(8))?;
    /// for x in 0..100i64 {
    ///     buf.add(&[Column::scalar("x", &x)])?;
    /// }
    /// assert_eq!(buf.len(), 8);
    /// assert_eq!(buf.stats().removals.reservoir, 92);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reservoir(self, max_size: u64) -> Config {
        self.with_policy(crate::format::lifecycle::Policy::Reservoir, max_size)
    }

    fn with_policy(mut self, policy: crate::format::lifecycle::Policy, max_size: u64) -> Config {
        let settings = self.lifecycle.unwrap_or_default();
        self.lifecycle = Some(LifeSettings {
            max_size,
            policy: Some(policy),
            ..settings
        });
        self
    }

    /// The file-operation seam (fault-injection tests); the real file system by default.
    pub fn io(mut self, io: IoRef) -> Config {
        self.io = Some(io);
        self
    }

    /// Bytes of the chunk ring that holds the values of variable-length fields (schemas
    /// with `bytes`, `str` or ragged fields): the most the values may take on disk.
    /// Default: 4 KiB per item of capacity. The ring's segment files are reserved on
    /// disk as the writer first reaches each, so a large limit costs only what is
    /// written. An add whose values would need the room of items the ring does not
    /// replace anyway (the buffer is below capacity) is refused with
    /// [`Error::ValueSpaceFull`], nothing stored, unless [`Config::evict_for_room`];
    /// size it for `capacity` times the largest mean bytes of an item's values.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema, VarKind};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().variable("text", VarKind::Str, None).build()?;
    /// let config = Config::new(schema, 1000).heap_bytes(8 << 20);
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// let i = buf.add(&[Column::text("text", "hello")])?;
    /// assert_eq!(buf.get(i)?.text("text", 0)?, "hello");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn heap_bytes(mut self, bytes: u64) -> Config {
        self.heap_bytes = Some(bytes);
        self
    }

    /// Lets an add evict the oldest items early, before the buffer holds `capacity`,
    /// when the chunk ring has no room for its values (a byte budget for the values
    /// rather than an item count). Without it such an add is refused, so no item is
    /// ever dropped before capacity. Kept in the buffer's superblock (a group takes it
    /// from `add_member`'s configuration, not as its template).
    ///
    /// ```
    /// use replaystore::{Column, Config, ReplayBuffer, Schema, VarKind};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().variable("text", VarKind::Str, None).build()?;
    /// // Four chunk rows of 1 KiB: room for the values of four one-chunk adds.
    /// let config = Config::new(schema, 100).heap_bytes(4 * 1024);
    /// let mut refusing = ReplayBuffer::create(dir.path().join("a"), config.clone())?;
    /// let mut evicting = ReplayBuffer::create(dir.path().join("b"), config.evict_for_room())?;
    /// for _ in 0..4 {
    ///     refusing.add(&[Column::text("text", "x")])?;
    ///     evicting.add(&[Column::text("text", "x")])?;
    /// }
    /// let err = refusing.add(&[Column::text("text", "x")]).unwrap_err();
    /// assert!(matches!(err, replaystore::Error::ValueSpaceFull { early: 1, .. }));
    /// assert_eq!(refusing.len(), 4);
    /// evicting.add(&[Column::text("text", "x")])?;
    /// assert_eq!(evicting.len(), 4); // item 0 went to make room
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn evict_for_room(mut self) -> Config {
        self.evict_for_room = true;
        self
    }

    /// Payload bytes of one chunk row of the chunk ring (a multiple of 8; default
    /// 1008, a 1 KiB row). Each `add` / `add_batch` call starts a new chunk, so larger
    /// chunks waste more of the ring on calls that add one small item at a time.
    pub fn chunk_bytes(mut self, bytes: u64) -> Config {
        self.chunk_bytes = bytes;
        self
    }

    /// The chunk ring's geometry for a schema with variable-length fields.
    pub(crate) fn heap_geometry(&self) -> Result<Option<crate::format::manifest::HeapGeometry>> {
        use crate::format::manifest::{HeapGeometry, MAX_CHUNK_STRIDE};
        use crate::format::row::ROW_HEADER_LEN;
        if !self.schema.has_var() {
            return Ok(None);
        }
        let header = ROW_HEADER_LEN as u64;
        let chunk = self.chunk_bytes;
        if chunk == 0 || !chunk.is_multiple_of(8) || chunk + header > MAX_CHUNK_STRIDE {
            return Err(Error::InvalidConfig {
                field: "chunk_bytes",
                problem: format!(
                    "{chunk} is not a multiple of 8 in 8..={}",
                    MAX_CHUNK_STRIDE - header
                ),
            });
        }
        let stride = chunk + header;
        let bytes = self
            .heap_bytes
            .unwrap_or_else(|| self.capacity.saturating_mul(DEFAULT_HEAP_BYTES_PER_ITEM));
        let capacity = bytes / stride;
        if capacity == 0 || capacity > crate::format::row::MAX_CAPACITY {
            return Err(Error::InvalidConfig {
                field: "heap_bytes",
                problem: format!(
                    "{bytes} bytes hold {capacity} chunk rows of {stride} bytes: need 1..={}",
                    crate::format::row::MAX_CAPACITY
                ),
            });
        }
        let fit = (self.segment_bytes / stride).max(1);
        let pow = 1u64 << (63 - fit.leading_zeros());
        let segment_slots = pow.min(capacity.next_power_of_two());
        Ok(Some(HeapGeometry {
            capacity,
            segment_slots,
            segment_count: capacity.div_ceil(segment_slots),
            stride,
        }))
    }

    pub(crate) fn slots_per_segment(&self, stride: u64) -> Result<u64> {
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
    /// Bytes the buffer's files occupy on disk: they take disk as data arrives.
    pub bytes_on_disk: u64,
    /// The most the buffer's files may take on disk, once every segment is written.
    pub bytes_at_most: u64,
    /// Sequence number of the newest commit: one more per commit, never reused (a
    /// `set_state` continues past the highest number used).
    pub generation: u64,
    /// Priority updates applied (prioritized buffers).
    pub priority_updates: u64,
    /// Priority updates skipped because their item had been evicted or cleared since
    /// it was sampled (prioritized buffers).
    pub stale_updates: u64,
    /// Items in the live range that were removed (buffers with item states); `len`
    /// does not count them.
    pub removed: u64,
    /// Removals since the buffer was created, by cause (buffers with item states).
    pub removals: crate::parts::lifecycle::Removals,
    /// Kept items a policy moved to the tail (a reservoir, random downsampling) so
    /// the ring does not end them, since the buffer was created: each under a new
    /// index, its old one gone.
    pub moved: u64,
}

impl Config {
    /// This configuration as a group keeps it for the members created without one of
    /// their own (the seed, file seam and first index are each member's).
    pub(crate) fn to_template(&self) -> crate::format::group::TemplateDoc {
        use crate::format::group::{LifeDoc, TemplateDoc};
        let schema_version = match self.schema.has_var() {
            true => crate::format::HEAP_VERSION,
            false => crate::format::BASE_VERSION,
        };
        TemplateDoc {
            schema: crate::format::schema_doc::encode(&self.schema),
            schema_version,
            capacity: self.capacity,
            segment_bytes: self.segment_bytes,
            segment_slots: self.segment_slots.unwrap_or(0),
            priorities: self.priorities.map(|p| (p.alpha, p.eps, p.arity)),
            episodic: self.episodic,
            whole_episodes: self.whole_episodes,
            fragments: self.fragments,
            heap_bytes: self.heap_bytes.unwrap_or(0),
            chunk_bytes: self.chunk_bytes,
            life: self.lifecycle.map(|l| LifeDoc {
                max_use: l.max_use,
                max_size: l.max_size,
                policy: l.policy.map(|p| p as u32),
                rate_limit: l.rate_limit.map(|r| {
                    (
                        r.min_size_to_sample,
                        r.samples_per_insert,
                        r.min_diff,
                        r.max_diff,
                    )
                }),
            }),
        }
    }

    /// The configuration a group's template gives a new member; `file` names the file
    /// it was read from in an error.
    pub(crate) fn from_template(
        t: &crate::format::group::TemplateDoc,
        file: &std::path::Path,
    ) -> Result<Config> {
        use crate::format::lifecycle::{Policy, RateLimit};
        let bad = |field: &str, got: String| Error::Corrupt {
            file: file.to_path_buf(),
            offset: 0,
            field: format!("group template: {field}"),
            expected: "a value this build writes".into(),
            got,
        };
        let schema = crate::format::schema_doc::decode(&t.schema, t.schema_version)
            .map_err(|e| bad("schema", e))?;
        let policy = match t.life.as_ref().and_then(|l| l.policy) {
            None => None,
            Some(p) => Some(Policy::of(p).ok_or_else(|| bad("policy", p.to_string()))?),
        };
        Ok(Config {
            schema,
            capacity: t.capacity,
            segment_bytes: t.segment_bytes,
            segment_slots: (t.segment_slots != 0).then_some(t.segment_slots),
            seed: None,
            io: None,
            priorities: t.priorities.map(|(alpha, eps, arity)| PriorityConfig {
                alpha,
                eps,
                arity,
            }),
            episodic: t.episodic,
            whole_episodes: t.whole_episodes,
            fragments: t.fragments,
            first_index: 0,
            heap_bytes: (t.heap_bytes != 0).then_some(t.heap_bytes),
            chunk_bytes: t.chunk_bytes,
            evict_for_room: false,
            lifecycle: t.life.as_ref().map(|l| LifeSettings {
                max_use: l.max_use,
                max_size: l.max_size,
                policy,
                rate_limit: l.rate_limit.map(|(min, spi, lo, hi)| RateLimit {
                    min_size_to_sample: min,
                    samples_per_insert: spi,
                    min_diff: lo,
                    max_diff: hi,
                }),
            }),
        })
    }
}
