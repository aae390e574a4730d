//! [`ReplayBuffer`]: the writer's handle on a buffer directory.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::core::{Commits, Draws, Scratch};
use crate::algo::recovery::{self, Recovered, SlotProbe};
use crate::algo::sample::{SampleSpec, draw_uniform};
use crate::algo::windows::End;
use crate::batch::Batch;
use crate::column::{ABSENT, Column, match_columns, match_some_columns};
use crate::error::{Error, Result};
use crate::format::manifest::{Commit, FLAG_CLEAN, Superblock};
use crate::format::progress::{EPOCH_OFF, HEAD_OFF, PID_OFF, SEALED_OFF, TAIL_OFF};
use crate::format::row::{FRAGMENT_END, MAX_CAPACITY, RowLayout, RowTags, fragment_word};
use crate::format::row::{STEP_HEADER_LEN, StepHeader};
use crate::format::schema_doc;
use crate::format::state::State;
use crate::parts::episodes::{EpisodeInfo, Episodes, StepInfo};
use crate::parts::evictions::{Evictions, RecordTo};
use crate::parts::fragments::Fragments;
use crate::parts::priorities::{
    LiveRange, Priorities, Priority, PriorityConfig, PrioritySpec, PrioritySummary, PriorityUpdate,
};
use crate::parts::snapshot::{self, SnapshotInfo};
use crate::parts::tree_role::TreeRole;
use crate::schema::Schema;
use crate::storage::io::{self, Access, Io, IoRef};
use crate::storage::map::{Found, ProgressMap};
use crate::storage::pread::Missed;
use crate::storage::ring::{Live, Ring};
use crate::storage::{self, LANE_DIR, MANIFEST, Manifest};

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

    /// Keeps episodes: rows are added with [`ReplayBuffer::add_reset`] (what
    /// `env.reset()` returned) and [`ReplayBuffer::add_step`] (what `env.step()`
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
    /// drawn whole by [`ReplayBuffer::sample_fragments`]. Every row records its position
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

    fn slots_per_segment(&self, stride: u64) -> Result<u64> {
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

/// A replay buffer open for writing: the one writer of its directory.
///
/// ```
/// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder()
///     .field("obs", DType::F32, &[3])
///     .field("reward", DType::F32, &[])
///     .build()?;
/// let mut buf = ReplayBuffer::create(dir.path().join("buf"), Config::new(schema, 100).seed(1))?;
/// for t in 0..10 {
///     let obs = [t as f32; 3];
///     let reward = 1.0f32;
///     buf.add(&[Column::new("obs", &obs), Column::scalar("reward", &reward)])?;
/// }
/// let batch = buf.sample(4)?;
/// assert_eq!(batch.get::<f32>("obs")?.len(), 12);
/// buf.close()?;
/// let buf = ReplayBuffer::open(dir.path().join("buf"))?;
/// assert_eq!(buf.len(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ReplayBuffer {
    /// The commit slots and locks this handle writes with.
    pub(super) commits: Commits,
    /// The sampling stream commits persist.
    pub(super) draws: Draws,
    pub(super) scratch: Scratch,
    pub(super) dir: PathBuf,
    pub(super) io: IoRef,
    pub(super) superblock: Superblock,
    pub(super) schema: Schema,
    pub(super) ring: Ring,
    pub(super) head: u64,
    pub(super) tail: u64,
    pub(super) head_slot: u64,
    pub(super) tail_slot: u64,
    pub(super) cleared: u64,
    /// Items below this index are sealed (checksummed) and covered by a commit.
    pub(super) flushed_tail: u64,
    /// Reads check sealed rows against their checksums (see `set_read_checks`).
    pub(super) read_checks: bool,
    pub(super) poisoned: Option<String>,
    pub(super) closed: bool,
    pub(super) recovered: Option<Recovered>,
    /// Who keeps the priority tree: this handle, another process, or nobody.
    pub(super) tree: TreeRole,
    /// The episode table (episodic buffers).
    pub(super) episodes: Option<Episodes>,
    /// The fragment table of a fragment buffer, built from the rows when first needed.
    pub(super) fragments: Option<Fragments>,
    /// The progress page readers in other processes follow (the writer's only).
    pub(super) progress: Option<ProgressMap>,
    /// Eviction records since the newest commit (overwriting a committed item needs one).
    pub(super) evictions: Evictions,
}

impl SlotProbe for Ring {
    fn stamp(&self, slot: u64) -> u64 {
        Ring::stamp(self, slot)
    }
    fn crc_ok(&self, slot: u64) -> bool {
        self.check(slot).is_some_and(|c| c.crc_ok)
    }
}

const INLINE_FIELDS: usize = 16;

/// Names a field may not have: what every sample returns beside the fields.
pub(crate) const RESERVED_NAMES: [&str; 2] = ["indices", "weights"];

/// Who opens a buffer, and so how its files are mapped.
pub(super) enum Role {
    /// The one writer, holding the lock: shared writable mappings.
    Writer(File),
    /// The one writer, adding items while another process owns the priorities (see
    /// [`crate::PriorityOwner`]): the tree is neither mapped nor written.
    Actor(File),
    /// A snapshot: private mappings that never change a byte on disk.
    Frozen,
    /// A reader of a buffer a writer may be changing: shared read-only mappings.
    Live,
}

impl ReplayBuffer {
    /// Creates a buffer in `dir` (which must be absent or empty), reserving all its disk
    /// space now, so a full disk is an error here and never a crash later.
    pub fn create(dir: impl AsRef<Path>, config: Config) -> Result<ReplayBuffer> {
        if cfg!(target_endian = "big") {
            return Err(Error::Unsupported("the file format is little-endian"));
        }
        let dir = storage::resolve_root(dir.as_ref());
        let io = config.io.clone().unwrap_or_else(io::os);
        if config.capacity == 0 || config.capacity > MAX_CAPACITY {
            return Err(Error::InvalidConfig {
                field: "capacity",
                problem: format!("{} is not in 1..={MAX_CAPACITY}", config.capacity),
            });
        }
        if let Some(p) = &config.priorities {
            p.check()?;
        }
        let fields = config.schema.fields().iter();
        if let Some(name) = fields
            .map(|f| f.name())
            .find(|n| RESERVED_NAMES.contains(n))
        {
            return Err(Error::InvalidSchema(format!(
                "field {name:?}: every sample returns its own {name:?} beside the fields \
                 (a dict key in Python, which the field would hide or be hidden by): \
                 rename the field"
            )));
        }
        if config.fragments && config.is_episodic() {
            return Err(Error::InvalidConfig {
                field: "fragments",
                problem: "episodic buffers add one row per call: sample episodes or \
                          sequences instead"
                    .into(),
            });
        }
        storage::refuse_network_fs(&*io, &dir)?;
        create_empty_dir(&*io, &dir)?;
        let lock = storage::lock(&*io, &dir)?;
        let layout = RowLayout::with_steps(&config.schema, config.is_episodic())
            .with_fragments(config.fragments);
        let stride = layout.stride as u64;
        let segment_slots = config.slots_per_segment(stride)?;
        let archive = schema_doc::encode(&config.schema);
        let uuid = crate::algo::entropy::uuid();
        let sb = Superblock {
            uuid,
            capacity: config.capacity,
            segment_slots,
            segment_count: Superblock::segments_for(config.capacity, segment_slots),
            row_stride: stride,
            item_bytes: config.schema.item_bytes() as u64,
            schema_len: archive.len() as u64,
            schema_crc: crate::format::crc32(&archive),
            prioritized: config.priorities.is_some(),
            episodic: config.is_episodic(),
            whole_episodes: config.whole_episodes,
            fragments: config.fragments,
        };
        let result = refuse_what_cannot_fit(&dir, &sb).and_then(|()| {
            write_new_buffer(
                &*io,
                &dir,
                &sb,
                &archive,
                config.seed.unwrap_or_else(crate::algo::entropy::seed),
                config.priorities.as_ref(),
                config.first_index,
            )
        });
        if let Err(e) = result {
            remove_new_buffer(&*io, &dir, &sb);
            return Err(e);
        }
        // A buffer that cannot be opened (its mappings refused: ENOMEM) is removed too:
        // it holds nothing yet, and its reserved files would only fill the disk.
        ReplayBuffer::open_as(dir.clone(), io.clone(), Role::Writer(lock), false).inspect_err(
            |_| {
                remove_new_buffer(&*io, &dir, &sb);
            },
        )
    }

    /// Opens an existing buffer for writing. After an unclean shutdown (a killed writer,
    /// a power loss) it recovers every item that is complete and intact first.
    pub fn open(dir: impl AsRef<Path>) -> Result<ReplayBuffer> {
        ReplayBuffer::open_with(dir, io::os())
    }

    /// `open` through a given file-operation seam.
    pub fn open_with(dir: impl AsRef<Path>, io: IoRef) -> Result<ReplayBuffer> {
        if cfg!(target_endian = "big") {
            return Err(Error::Unsupported("the file format is little-endian"));
        }
        let dir = storage::resolve_root(dir.as_ref());
        // Check that this is a buffer before creating a lock file in it.
        Manifest::load(&*io, &dir)?;
        let lock = storage::lock(&*io, &dir)?;
        // A set_state a kill interrupted is finished before anything else is read.
        if snapshot::pending_restore(&*io, &dir)?.is_some() {
            files_changing(&*io, &dir, &Manifest::load(&*io, &dir)?.superblock)?;
        }
        snapshot::finish_restore(&*io, &dir)?;
        snapshot::clean_leftovers(&*io, &dir)?;
        ReplayBuffer::open_as(dir, io, Role::Writer(lock), false)
    }

    /// Opens an existing buffer for adding while another process owns its priorities:
    /// the actor of an Ape-X style setup, whose learner samples by priority and updates
    /// them through [`crate::PriorityOwner`]. The actor never maps or writes the tree;
    /// the owner gives each new item the largest priority seen before its next draw.
    /// Sampling by priority and updating them here are `NotPriorityOwner` errors.
    /// Everything else is as [`ReplayBuffer::open`], including the one-writer lock.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Error, PriorityOwner, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).prioritized(0.6, 1e-6);
    /// ReplayBuffer::create(dir.path().join("b"), config)?.close()?;
    /// let mut actor = ReplayBuffer::open_actor(dir.path().join("b"))?;
    /// let mut learner = PriorityOwner::open(dir.path().join("b"))?; // another process
    /// actor.add(&[Column::scalar("x", &1.0f32)])?;
    /// let batch = learner.sample_prioritized(4, 0.4)?;
    /// learner.update_priorities(batch.indices(), &[2.0f32; 4])?;
    /// assert!(matches!(actor.update_priorities(&[0], &[1.0f32]), Err(Error::NotPriorityOwner { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_actor(dir: impl AsRef<Path>) -> Result<ReplayBuffer> {
        ReplayBuffer::open_actor_with(dir, io::os())
    }

    /// `open_actor` through a given file-operation seam.
    pub fn open_actor_with(dir: impl AsRef<Path>, io: IoRef) -> Result<ReplayBuffer> {
        let dir = storage::resolve_root(dir.as_ref());
        let sb = Manifest::load(&*io, &dir)?.superblock;
        let lock = storage::lock(&*io, &dir)?;
        if snapshot::pending_restore(&*io, &dir)?.is_some() {
            // Finishing a restore replaces the tree: no owner may have it mapped.
            let _owner = sb
                .prioritized
                .then(|| storage::lock_priorities(&*io, &dir))
                .transpose()?;
            files_changing(&*io, &dir, &sb)?;
            snapshot::finish_restore(&*io, &dir)?;
        }
        snapshot::clean_leftovers(&*io, &dir)?;
        ReplayBuffer::open_as(dir, io, Role::Actor(lock), false)
    }

    /// Opens snapshot `name` of the buffer in `dir` read-only: sampling and reads work
    /// (from the snapshot's RNG position), writes are `ReadOnly` errors. Any number of
    /// processes may do this while the writer goes on; nothing here takes a lock or
    /// writes a byte (the files are mapped private).
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &1u8)])?;
    /// buf.get_state_named("first")?;
    /// buf.add(&[Column::scalar("x", &2u8)])?;
    /// let frozen = ReplayBuffer::open_snapshot(dir.path().join("b"), "first")?;
    /// assert_eq!((frozen.len(), buf.len()), (1, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_snapshot(dir: impl AsRef<Path>, name: &str) -> Result<ReplayBuffer> {
        let dir = &storage::resolve_root(dir.as_ref());
        snapshot::valid_name(name)?;
        let snap = snapshot::snapshot_dir(dir, name);
        if !snapshot::exists(&io::OsIo, dir, name)? {
            return Err(Error::NoSuchSnapshot {
                dir: dir.to_path_buf(),
                name: name.to_owned(),
            });
        }
        ReplayBuffer::open_as(snap, io::os(), Role::Frozen, false).map_err(|e| Error::BadSnapshot {
            dir: dir.to_path_buf(),
            name: name.to_owned(),
            source: Box::new(e),
        })
    }

    /// Opens the buffer in `dir` at `state`, as a fresh process resuming from a training
    /// checkpoint does: the same as [`ReplayBuffer::open`] then
    /// [`ReplayBuffer::set_state`], without opening the state it leaves behind.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &1u8)])?;
    /// let state = buf.get_state()?;
    /// buf.add(&[Column::scalar("x", &2u8)])?;
    /// buf.close()?; // the process ends; a new one resumes from the checkpoint
    /// let buf = ReplayBuffer::open_at_state(dir.path().join("b"), &state)?;
    /// assert_eq!(buf.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_at_state(dir: impl AsRef<Path>, state: &State) -> Result<ReplayBuffer> {
        ReplayBuffer::open_at_state_with(dir, state, io::os())
    }

    /// `open_at_state` through a given file-operation seam.
    pub fn open_at_state_with(
        dir: impl AsRef<Path>,
        state: &State,
        io: IoRef,
    ) -> Result<ReplayBuffer> {
        let dir = storage::resolve_root(dir.as_ref());
        let sb = Manifest::load(&*io, &dir)?.superblock;
        let lock = storage::lock(&*io, &dir)?;
        snapshot::finish_restore(&*io, &dir)?;
        snapshot::clean_leftovers(&*io, &dir)?;
        snapshot::check(&*io, &dir, &sb, state)?;
        files_changing(&*io, &dir, &sb)?;
        snapshot::write_intent(&*io, &dir, state)?;
        let replaced = snapshot::restore(&*io, &dir, &sb, &state.name)?;
        release_in_background(replaced);
        ReplayBuffer::open_as(dir, io, Role::Writer(lock), true)
    }

    /// Opens the buffer in `dir` in `role`. `restored`: this process has just put a
    /// snapshot's files in place, whose commit `restore` already marked open (not clean);
    /// they are exactly the snapshot's, so they need no recovery and no marker commit.
    pub(super) fn open_as(
        dir: PathBuf,
        io: IoRef,
        role: Role,
        restored: bool,
    ) -> Result<ReplayBuffer> {
        let (access, lock, actor) = match role {
            Role::Writer(lock) => (Access::Write, Some(lock), false),
            Role::Actor(lock) => (Access::Write, Some(lock), true),
            Role::Frozen => (Access::Frozen, None, false),
            Role::Live => (Access::Read, None, false),
        };
        let live = access == Access::Read;
        if access.writes_file() {
            storage::refuse_network_fs(&*io, &dir)?;
        }
        let m = Manifest::load(&*io, &dir)?;
        // The writer of a prioritized buffer owns its tree, and says so with a lock a
        // PriorityOwner process would need; an actor leaves both to that process.
        let priority_lock = if m.superblock.prioritized && lock.is_some() && !actor {
            Some(storage::lock_priorities(&*io, &dir)?)
        } else {
            None
        };
        let commit = m.newest_commit()?;
        let sb = m.superblock.clone();
        let segments = (0..sb.segment_count)
            .map(|n| storage::open_segment(&*io, &dir, &sb, n, access))
            .collect::<Result<Vec<_>>>()?;
        let mut ring = Ring::new(segments, m.layout.clone(), sb.capacity, sb.segment_slots)?;
        // A live reader descends the tree through its own path (`Reader`), and the rows
        // it would rebuild an episode table from change under it.
        let mut priorities = if sb.prioritized && !live && !actor {
            Some(Priorities::open(&*io, &dir, &sb, access)?)
        } else {
            None
        };
        let (mut head, mut tail) = (commit.head, commit.tail);
        let mut recovered = None;
        // A live reader takes the live range from the progress page instead, and never
        // repairs: the writer owns the files.
        if !commit.is_clean() && !restored && !live {
            let trust_stamps = storage::same_boot(&commit);
            // In another boot, items an eviction record names may hold newer bytes on disk.
            let head_c = match trust_stamps {
                true => commit.head,
                false => m.evicted_below(&commit),
            };
            let r = recovery::recover(&ring, sb.capacity, head_c, commit.tail, trust_stamps);
            for slot in recovery::stale_slots(&ring, sb.capacity, r.tail) {
                ring.clear_stamp(slot);
            }
            // The commit below covers the items rolled forward: seal them first.
            let from = r.head.max(commit.tail);
            if r.tail > from {
                ring.seal(from % sb.capacity, from, r.tail - from);
            }
            // Read-only: the repairs stay in private pages; the files are not changed.
            if access.writes_file() {
                ring.flush_all(&*io).map_err(|(s, e)| {
                    Error::io("msync", storage::segment_path(&dir, s as u64), e)
                })?;
            }
            if let Some(p) = &mut priorities {
                p.repair((r.head % sb.capacity) as usize, (r.tail - r.head) as usize)?;
                if access.writes_file() {
                    p.flush(&*io)?;
                }
            }
            (head, tail) = (r.head, r.tail);
            recovered = Some(r);
        }
        if let Some(p) = &mut priorities {
            // A restored tree was copied while a PriorityOwner may have been writing it
            // (an actor's checkpoint): its parents are recomputed from the leaves. A
            // copy its owner made is sound and is left untouched (and unflushed).
            let live_slots = ((head % sb.capacity) as usize, (tail - head) as usize);
            let repaired = restored && !p.is_sound(live_slots.0, live_slots.1);
            if repaired {
                p.repair(live_slots.0, live_slots.1)?;
            }
            // Items an actor added while another process owned the tree (or none did):
            // their leaves are set now. A tree that says it has seen more than the rows
            // hold lost them to a power cut with the rows.
            if p.caught_up() > tail {
                p.note_caught_up(tail);
            }
            let caught_up_now = p.caught_up() < tail;
            if caught_up_now {
                let is_reset = |i: u64| sb.episodic && ring.step_header(i % sb.capacity).t == 0;
                p.catch_up(tail.saturating_sub(sb.capacity), head, tail, is_reset);
            }
            if priority_lock.is_some() {
                p.set_owner(std::process::id());
            }
            if access.writes_file() && (repaired || caught_up_now) {
                p.flush(&*io)?;
            }
        }
        let progress = if access.writes_file() {
            Some(storage::open_progress(&*io, &dir, &sb, Access::Write)?)
        } else {
            None
        };
        let manifest_path = dir.join(MANIFEST);
        let manifest = if access.writes_file() {
            // Commits are written in place: never into another name of the file.
            storage::sole_name(&*io, &manifest_path)?;
            Some(
                io.open_rw(&manifest_path)
                    .map_err(|e| Error::io("open", &manifest_path, e))?,
            )
        } else {
            None
        };
        let mut rng = ChaCha8Rng::seed_from_u64(commit.rng_seed);
        rng.set_word_pos(commit.rng_word_pos);
        let episodes = if sb.episodic && !live {
            Some(Episodes::from_rows(
                &m.schema,
                &ring,
                sb.capacity,
                head,
                tail,
                &dir,
            )?)
        } else {
            None
        };
        let mut buf = ReplayBuffer {
            commits: Commits {
                path: manifest_path,
                file: manifest,
                lock,
                generation: commit.generation,
                boot_id: storage::boot_id(),
                lane_dirty: false,
            },
            draws: Draws {
                rng,
                seed: commit.rng_seed,
                sampled: commit.sampled,
            },
            scratch: Scratch::default(),
            schema: m.schema,
            ring,
            head,
            tail,
            head_slot: head % sb.capacity,
            tail_slot: tail % sb.capacity,
            cleared: commit.cleared.min(head),
            flushed_tail: tail,
            read_checks: true,
            poisoned: None,
            closed: false,
            recovered,
            tree: match (priorities, actor) {
                (_, true) => TreeRole::Elsewhere,
                (Some(tree), false) => TreeRole::Owned {
                    tree,
                    lock: priority_lock,
                    durable_below: tail,
                },
                (None, false) => TreeRole::Absent,
            },
            progress,
            episodes,
            fragments: None,
            superblock: sb,
            dir,
            io,
            evictions: Evictions::after_commit(commit.head, commit.tail),
        };
        buf.settle_first_episode();
        if buf.commits.lock.is_some() && !restored {
            // Mark the buffer as open for writing: a crash from here on is detected on
            // the next open and recovered.
            buf.commit(0, true)?;
        }
        buf.publish_open();
        Ok(buf)
    }

    /// The buffer directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Items live now.
    pub fn len(&self) -> u64 {
        self.tail - self.head
    }

    /// Whether no item is live.
    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    /// Items the ring holds.
    pub fn capacity(&self) -> u64 {
        self.superblock.capacity
    }

    /// The live logical indices, `head..tail`.
    pub fn live(&self) -> Range<u64> {
        self.head..self.tail
    }

    /// What opening found after an unclean shutdown, if it was one.
    pub fn recovery(&self) -> Option<Recovered> {
        self.recovered
    }

    /// Counters and sizes.
    pub fn stats(&self) -> Stats {
        Stats {
            len: self.len(),
            capacity: self.capacity(),
            head: self.head,
            tail: self.tail,
            added: self.tail,
            evicted: self.head - self.cleared,
            cleared: self.cleared,
            sampled: self.draws.sampled,
            bytes_on_disk: storage::bytes_on_disk(&self.dir, self.superblock.segment_count),
            generation: self.commits.generation,
            priority_updates: self.tree.tree().map_or(0, Priorities::updates),
            stale_updates: self.tree.tree().map_or(0, Priorities::stale_updates),
        }
    }

    pub(super) fn writable(&self) -> Result<()> {
        match &self.poisoned {
            Some(reason) => Err(Error::Poisoned {
                dir: self.dir.clone(),
                reason: reason.clone(),
            }),
            None if self.commits.lock.is_none() => Err(Error::ReadOnly {
                dir: self.dir.clone(),
                op: "writing",
            }),
            None => Ok(()),
        }
    }

    /// Whether this handle is a read-only snapshot.
    pub fn is_read_only(&self) -> bool {
        self.commits.lock.is_none()
    }

    /// Copies each segment that a snapshot links and that the next `count` stores from
    /// `first_slot` would change, so the snapshot keeps its bytes (copy-on-write). Only
    /// live rows are copied. Fails before anything is stored, losing nothing.
    fn ensure_private(&mut self, first_slot: u64, count: u64) -> Result<()> {
        if !self.ring.any_shared() {
            return Ok(());
        }
        // Each copy leaves one shared segment fewer, so this ends.
        while let Some(s) = self.ring.first_shared(first_slot, count) {
            let live = self.ring.rows_of(s, self.head_slot, self.tail - self.head);
            let Some(old) = self.ring.segment(s) else {
                break;
            };
            let seg = storage::copy_segment(
                &*self.io,
                &self.dir,
                &self.superblock,
                s as u64,
                old,
                &live,
            )?;
            self.ring.replace_segment(s, seg);
            self.commits.lane_dirty = true;
            self.publish_files_changed();
        }
        Ok(())
    }

    /// Records the first failure of a write path; every later write is refused.
    fn poison(&mut self, e: Error) -> Error {
        if self.poisoned.is_none() {
            self.poisoned = Some(e.to_string());
        }
        e
    }

    /// Stores one row at the tail, evicting the oldest row when the ring is full (or,
    /// with whole-episode eviction, the oldest row's episode). `reset`: the row begins
    /// an episode, so it ends no transition and gets no priority.
    #[inline(always)]
    fn push_row(
        &mut self,
        fields: &[&[u8]],
        step: Option<&[u8; STEP_HEADER_LEN]>,
        reset: bool,
        fragment_pos: u32,
    ) {
        let cap = self.superblock.capacity;
        if self.tail - self.head == cap {
            if self.superblock.whole_episodes
                || (self.episodes.is_some() && self.tree.tree().is_some())
            {
                self.evict_for_episodes();
            } else {
                self.head += 1;
                self.head_slot += 1;
                if self.head_slot == cap {
                    self.head_slot = 0;
                }
            }
            // Before the slot is overwritten: a reader that finds the slot's stamp
            // changed then finds its index no longer live, and redraws.
            self.publish(HEAD_OFF, self.head);
        }
        // The priority leaf is written while the slot is marked "being written": a kill
        // then never leaves a complete item without its priority, nor an intact older
        // item with the new item's priority.
        let slot = self.tail_slot;
        let next_tail = self.tail + 1;
        let priorities = self.tree.tree_mut();
        if let Some(f) = &mut self.fragments {
            f.on_add(self.tail, fragment_pos);
        }
        let tags = RowTags {
            step,
            fragment: fragment_pos,
        };
        self.ring.write(slot, self.tail, tags, fields, || {
            if let Some(p) = priorities {
                if reset {
                    p.on_add_leaf(slot, 0.0);
                } else {
                    p.on_add(slot);
                }
                p.note_caught_up(next_tail);
            }
            crate::killpoint::hit("before-stamp");
        });
        self.tail += 1;
        self.tail_slot += 1;
        if self.tail_slot == cap {
            self.tail_slot = 0;
        }
        self.publish(TAIL_OFF, self.tail);
    }

    /// Stores a word of the progress page, if this handle has one (the writer's).
    #[inline(always)]
    fn publish(&mut self, off: usize, value: u64) {
        if let Some(p) = &mut self.progress {
            p.store(off, value);
        }
    }

    /// Tells readers that the lane's files were replaced (they remap): the epoch goes
    /// to the next even number. Whatever goes with the new files (a restore's head,
    /// tail and sealed bound) is stored before it, under an odd epoch: a reader that
    /// loads the new epoch then loads those, never the old range over the new files.
    fn publish_files_changed(&mut self) {
        if let Some(p) = &mut self.progress {
            let epoch = (p.load(EPOCH_OFF) | 1).wrapping_add(1);
            p.store(EPOCH_OFF, epoch);
        }
    }

    /// Tells readers that several files are about to be replaced one by one (a
    /// restore): an odd epoch, which readers wait out rather than map a mix.
    fn publish_files_changing(&mut self) {
        if let Some(p) = &mut self.progress {
            mark_changing(p);
        }
    }

    /// What a writer's open publishes: new files possibly (a restore, a recovery),
    /// the live range, what is sealed, and which process writes.
    /// The range goes out while the epoch is odd (readers wait), then the even epoch
    /// releases it with the files: published the other way round, a reader could map
    /// the restored files at the new epoch and still load the old head and tail, and
    /// take the rows those name for damage.
    fn publish_open(&mut self) {
        self.publish_files_changing();
        self.publish(HEAD_OFF, self.head);
        self.publish(TAIL_OFF, self.tail);
        self.publish(SEALED_OFF, self.flushed_tail);
        self.publish(PID_OFF, u64::from(std::process::id()));
        self.publish_files_changed();
    }

    /// After opening: a first episode whose start is evicted (a kill came between a
    /// whole-episode eviction and its commit, or the ring evicts rows one at a time)
    /// is dropped whole with whole-episode eviction, unless it is still being written;
    /// otherwise its first live row loses its priority, as eviction would have done.
    fn settle_first_episode(&mut self) {
        let Some(first) = self
            .episodes
            .as_ref()
            .and_then(|e| e.iter().next())
            .copied()
        else {
            return;
        };
        if first.start >= self.head {
            return;
        }
        let cap = self.superblock.capacity;
        if self.superblock.whole_episodes && first.end.is_some() {
            let passed = first.last() + 1 - self.head;
            if let Some(p) = self.tree.tree_mut() {
                p.zero(self.head_slot, passed);
            }
            self.head += passed;
            self.head_slot = (self.head_slot + passed) % cap;
            if let Some(e) = &mut self.episodes {
                e.evict(self.head);
            }
        } else if let Some(p) = self.tree.tree_mut() {
            p.zero(self.head_slot, 1);
        }
    }

    /// Eviction in an episodic buffer about to overwrite its oldest row, when something
    /// depends on the oldest row's episode (whole episodes, or priorities). With whole
    /// episodes the head moves past the oldest row's episode, unless that episode is the
    /// one being written (longer than the ring: it loses one row). The rows passed over
    /// lose their priorities, and so does a new first row that is a step: its
    /// observation row is gone, so it ends no transition the buffer can return.
    #[cold]
    fn evict_for_episodes(&mut self) {
        let cap = self.superblock.capacity;
        let oldest = self
            .episodes
            .as_ref()
            .and_then(|e| e.of(self.head))
            .copied();
        let to = self.eviction_target();
        let passed = to - self.head;
        // The old head's slot is the one being written. The other rows passed over
        // lose their stamps, so that recovery after a kill finds the head where it is
        // now (it walks back from the tail over intact rows), not at the last commit's
        // with these rows alive again (`ensure_private_for_push` made their segments
        // private first).
        self.publish(HEAD_OFF, to);
        for index in self.head + 1..to {
            self.ring.clear_stamp(index % cap);
        }
        let first_passed = (self.head_slot + 1) % cap;
        self.head = to;
        self.head_slot = (self.head_slot + passed) % cap;
        if let Some(p) = self.tree.tree_mut() {
            // The rows passed over, and the new head if it is a step of a cut episode.
            let cut = oldest.is_some_and(|e| e.last() >= to);
            p.zero(first_passed, passed - 1 + u64::from(cut));
        }
    }

    /// Where the head goes when the ring is full and one more row is stored: past the
    /// oldest row, or with whole-episode eviction past its episode (unless that one is
    /// still being written).
    fn eviction_target(&self) -> u64 {
        let whole = self
            .episodes
            .as_ref()
            .filter(|_| self.superblock.whole_episodes)
            .and_then(|e| e.of(self.head))
            .map(|e| e.last() + 1)
            .filter(|&to| to < self.tail);
        whole.unwrap_or(self.head + 1)
    }

    /// Before storing `rows` more rows: when they will overwrite items the newest
    /// commit covers, an eviction record saying so is made durable first (see
    /// `parts::evictions`).
    #[inline(always)]
    fn guard_evictions(&mut self, rows: u64) -> Result<()> {
        let cap = self.superblock.capacity;
        let mut to = (self.tail + rows).saturating_sub(cap);
        if self.superblock.whole_episodes && self.tail - self.head == cap {
            // The head may jump past the oldest episode.
            to = to.max(self.eviction_target());
        }
        if !self.evictions.needed(to) {
            return Ok(());
        }
        self.write_eviction(to)
    }

    #[cold]
    fn write_eviction(&mut self, to: u64) -> Result<()> {
        let Some(manifest) = &self.commits.file else {
            return Ok(());
        };
        let at = RecordTo {
            io: &*self.io,
            manifest,
            path: &self.commits.path,
            generation: self.commits.generation,
        };
        let (head, cap) = (self.head, self.superblock.capacity);
        match self.evictions.record(to, head, cap, at) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.poison(e)),
        }
    }

    /// Copy-on-write before storing one row: the tail's segment, and with whole-episode
    /// eviction the segments of the rows the head will pass over (their stamps change).
    fn ensure_private_for_push(&mut self) -> Result<()> {
        self.ensure_private(self.tail_slot, 1)?;
        self.guard_evictions(1)?;
        let cap = self.superblock.capacity;
        if self.superblock.whole_episodes && self.tail - self.head == cap {
            let passed = self.eviction_target() - self.head;
            if passed > 1 {
                self.ensure_private((self.head_slot + 1) % cap, passed - 1)?;
            }
        }
        Ok(())
    }

    /// Adds one item and returns its logical index. Every field of the schema must be
    /// given once, with its dtype and shape (or as one flat dimension of the same size).
    /// Once this returns, a kill of the process loses nothing: the bytes are in the
    /// page cache. `flush` makes them survive a power loss too.
    pub fn add(&mut self, columns: &[Column<'_>]) -> Result<u64> {
        self.writable()?;
        self.not_episodic("add")?;
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_columns(
            &self.schema,
            columns,
            false,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|_| self.ensure_private(self.tail_slot, 1))
        .and_then(|()| self.guard_evictions(1));
        let result = checked.map(|_| {
            let index = self.tail;
            let nf = order.len();
            let mut inline: [&[u8]; INLINE_FIELDS] = [&[]; INLINE_FIELDS];
            let mut heap: Vec<&[u8]>;
            let fields: &mut [&[u8]] = match inline.get_mut(..nf) {
                Some(f) => f,
                None => {
                    heap = vec![&[][..]; nf];
                    &mut heap
                }
            };
            for (slot, &pos) in fields.iter_mut().zip(&order) {
                *slot = columns.get(pos).map_or(&[][..], Column::bytes);
            }
            self.push_row(fields, None, false, FRAGMENT_END);
            index
        });
        self.scratch.order = order;
        result
    }

    /// Adds `rows` items given as columns of shape `[rows, field shape...]`, and returns
    /// their logical indices. A batch longer than the capacity keeps its newest rows.
    pub fn add_batch(&mut self, columns: &[Column<'_>]) -> Result<Range<u64>> {
        self.writable()?;
        self.not_episodic("add_batch")?;
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_columns(
            &self.schema,
            columns,
            true,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|rows| {
            self.ensure_private(self.tail_slot, rows as u64)?;
            self.guard_evictions(rows as u64)?;
            Ok(rows)
        });
        let result = checked.map(|rows| {
            let first = self.tail;
            let cap = self.superblock.capacity;
            let rows = rows as u64;
            // Rows that would be evicted by later rows of the same batch are never written.
            let skip = rows.saturating_sub(cap);
            if skip > 0 {
                self.tail += skip;
                self.head = self.head.max(self.tail.saturating_sub(cap));
                self.head_slot = self.head % cap;
                self.tail_slot = self.tail % cap;
            }
            let nf = order.len();
            let sizes: Vec<usize> = self.schema.fields().iter().map(|f| f.bytes()).collect();
            let cols: Vec<&[u8]> = order
                .iter()
                .map(|&p| columns.get(p).map_or(&[][..], Column::bytes))
                .collect();
            let mut fields: Vec<&[u8]> = vec![&[]; nf];
            for r in skip as usize..rows as usize {
                for ((dst, col), &size) in fields.iter_mut().zip(&cols).zip(&sizes) {
                    *dst = col.get(r * size..(r + 1) * size).unwrap_or(&[]);
                }
                self.push_row(&fields, None, false, fragment_word(r as u64, rows));
            }
            first..first + rows
        });
        self.scratch.order = order;
        result
    }

    /// Adds one item with a given priority instead of the largest seen so far (Ape-X
    /// actors compute initial priorities). A bad priority is an error and nothing is
    /// added.
    pub fn add_with_priority<P: Priority>(
        &mut self,
        columns: &[Column<'_>],
        priority: P,
    ) -> Result<u64> {
        self.check_new_priorities(&[priority])?;
        let index = self.add(columns)?;
        self.update_priorities(&[index], &[priority])?;
        Ok(index)
    }

    /// `add_batch` with one priority per row. The priorities and the columns are checked
    /// before anything is added; a batch longer than the capacity keeps its newest rows
    /// and their priorities.
    pub fn add_batch_with_priorities<P: Priority>(
        &mut self,
        columns: &[Column<'_>],
        priorities: &[P],
    ) -> Result<Range<u64>> {
        self.check_new_priorities(priorities)?;
        let mut order = std::mem::take(&mut self.scratch.order);
        let rows = match_columns(
            &self.schema,
            columns,
            true,
            &mut order,
            &mut self.scratch.names,
        );
        self.scratch.order = order;
        let rows = rows?;
        if rows != priorities.len() {
            return Err(Error::CountMismatch {
                what: "add_batch_with_priorities: rows and priorities",
                expected: rows,
                got: priorities.len(),
            });
        }
        let added = self.add_batch(columns)?;
        let from = added.start.max(self.head);
        let indices: Vec<u64> = (from..added.end).collect();
        let skip = (from - added.start) as usize;
        self.update_priorities(&indices, priorities.get(skip..).unwrap_or(&[]))?;
        Ok(added)
    }

    fn check_new_priorities<P: Priority>(&self, priorities: &[P]) -> Result<()> {
        self.writable()?;
        match self.tree.tree() {
            Some(p) => p.check_values(self.tail, priorities),
            None => Err(self.no_priorities()),
        }
    }

    /// Why this handle has no priorities to draw from or update: another process owns
    /// them (an actor), or the buffer keeps none.
    pub(super) fn no_priorities(&self) -> Error {
        if self.tree.is_actor() && self.superblock.prioritized {
            Error::NotPriorityOwner {
                dir: self.dir.clone(),
                lock_file: self.dir.join(storage::PRIORITY_LOCK),
                holder: storage::tree_owner_pid(&*self.io, &self.dir),
            }
        } else {
            Error::NotPrioritized {
                dir: self.dir.clone(),
            }
        }
    }

    fn not_episodic(&self, op: &str) -> Result<()> {
        if self.episodes.is_some() {
            return Err(Error::EpisodeOrder(format!(
                "{op} on an episodic buffer: add rows with add_reset and add_step"
            )));
        }
        Ok(())
    }

    pub(super) fn episodes_ref(&self) -> Result<&Episodes> {
        self.episodes.as_ref().ok_or_else(|| Error::NotEpisodic {
            dir: self.dir.clone(),
        })
    }

    /// Begins an episode with what `env.reset()` returned: the observation fields (any
    /// field left out is stored as zeros). An episode still open is abandoned and
    /// counts as truncated at its last row.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .field("obs", DType::F32, &[2])
    ///     .field("action", DType::I64, &[])
    ///     .field("reward", DType::F32, &[])
    ///     .build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// buf.add_reset(&[Column::new("obs", &[0.0f32, 0.0])])?;
    /// for t in 1..=3 {
    ///     let (obs, action, reward) = ([t as f32, 0.0], 1i64, 1.0f32);
    ///     let cols = [Column::new("obs", &obs), Column::scalar("action", &action),
    ///                 Column::scalar("reward", &reward)];
    ///     let info = buf.add_step(&cols, t == 3, false)?;
    ///     if let Some((ret, steps, start)) = info.ended {
    ///         assert_eq!((ret, steps, start), (3.0, 3, 0));
    ///     }
    /// }
    /// assert_eq!(buf.prev(2)?, 1);
    /// assert_eq!(buf.prev(0)?, 0); // stays put at the episode's start
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_reset(&mut self, columns: &[Column<'_>]) -> Result<StepInfo> {
        self.writable()?;
        self.episodes_ref()?;
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_some_columns(
            &self.schema,
            columns,
            false,
            true,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|_| self.ensure_private_for_push());
        let result = checked.map(|_| {
            let index = self.tail;
            let header = match &mut self.episodes {
                Some(e) => e.begin(index),
                None => StepHeader::default(),
            };
            let sizes: Vec<usize> = self.schema.fields().iter().map(|f| f.bytes()).collect();
            let largest = sizes.iter().copied().max().unwrap_or(0);
            if self.scratch.zeros.len() < largest {
                self.scratch.zeros.resize(largest, 0);
            }
            let zeros = std::mem::take(&mut self.scratch.zeros);
            let fields: Vec<&[u8]> = order
                .iter()
                .zip(&sizes)
                .map(
                    |(&pos, &size)| match columns.get(pos).filter(|_| pos != ABSENT) {
                        Some(c) => c.bytes(),
                        None => zeros.get(..size).unwrap_or(&[]),
                    },
                )
                .collect();
            self.push_row(&fields, Some(&header.encode()), true, 0);
            drop(fields);
            self.scratch.zeros = zeros;
            if let Some(e) = &mut self.episodes {
                e.evict(self.head);
            }
            StepInfo {
                index,
                episode: header.episode,
                t: 0,
                ended: None,
            }
        });
        self.scratch.order = order;
        result
    }

    /// Adds what `env.step()` returned to the open episode: every field of the schema
    /// (the action taken, its reward, the observation it led to), and whether the episode
    /// terminated or was truncated here. Reports the episode's return, steps and start
    /// index when this step ends it (Tianshou's `add` result).
    pub fn add_step(
        &mut self,
        columns: &[Column<'_>],
        terminated: bool,
        truncated: bool,
    ) -> Result<StepInfo> {
        self.writable()?;
        let reward_field = self.episodes_ref()?.reward_field();
        if self.episodes_ref()?.open().is_none() {
            return Err(Error::EpisodeOrder(
                "no episode is open: begin one with add_reset".into(),
            ));
        }
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_columns(
            &self.schema,
            columns,
            false,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|_| self.ensure_private_for_push());
        let result = checked.and_then(|_| {
            let reward = reward_field.map_or(0.0, |(f, dtype)| {
                let pos = order.get(f).copied().unwrap_or(ABSENT);
                dtype.decode_f64(columns.get(pos).map_or(&[][..], Column::bytes))
            });
            let end = if terminated {
                Some(End::Terminated)
            } else if truncated {
                Some(End::Truncated)
            } else {
                None
            };
            let index = self.tail;
            let (header, info) = match &mut self.episodes {
                Some(e) => e.step(index, reward, end)?,
                None => {
                    return Err(Error::NotEpisodic {
                        dir: self.dir.clone(),
                    });
                }
            };
            let fields: Vec<&[u8]> = order
                .iter()
                .map(|&p| columns.get(p).map_or(&[][..], Column::bytes))
                .collect();
            self.push_row(&fields, Some(&header.encode()), false, 0);
            if let Some(e) = &mut self.episodes {
                e.evict(self.head);
            }
            Ok(info)
        });
        self.scratch.order = order;
        result
    }

    /// The episode holding live index `index`.
    pub fn episode(&self, index: u64) -> Result<EpisodeInfo> {
        let e = self.episodes_ref()?;
        if index < self.head || index >= self.tail {
            return Err(Error::Evicted {
                index,
                head: self.head,
                tail: self.tail,
            });
        }
        e.of(index).copied().ok_or_else(|| {
            Error::EpisodeOrder(format!("index {index} belongs to no episode in the table"))
        })
    }

    /// The index before `index` in its episode, or `index` itself at the episode's first
    /// live row (Tianshou's `prev`).
    pub fn prev(&self, index: u64) -> Result<u64> {
        let e = self.episode(index)?;
        Ok(if index > e.start.max(self.head) {
            index - 1
        } else {
            index
        })
    }

    /// The index after `index` in its episode, or `index` itself at the episode's last
    /// row so far (Tianshou's `next`).
    pub fn next(&self, index: u64) -> Result<u64> {
        let e = self.episode(index)?;
        Ok(if index < e.last() { index + 1 } else { index })
    }

    /// The episodes with a live row, oldest first.
    pub fn episodes(&self) -> Result<Vec<EpisodeInfo>> {
        Ok(self.episodes_ref()?.iter().copied().collect())
    }

    /// The episode still being written, if any (at most one: episodes are contiguous).
    pub fn unfinished_episodes(&self) -> Result<Vec<EpisodeInfo>> {
        Ok(self.episodes_ref()?.open().copied().into_iter().collect())
    }

    /// Draws `n` indices uniformly with replacement and gathers their items.
    pub fn sample(&mut self, n: usize) -> Result<Batch> {
        self.sample_with(&SampleSpec::new(n))
    }

    /// Draws as `spec` says and gathers the items into a new batch.
    pub fn sample_with(&mut self, spec: &SampleSpec) -> Result<Batch> {
        let mut batch = Batch::new(&self.schema, 0);
        self.sample_into(spec, &mut batch)?;
        Ok(batch)
    }

    /// Draws as `spec` says and gathers into `out`, reusing its storage.
    pub fn sample_into(&mut self, spec: &SampleSpec, out: &mut Batch) -> Result<()> {
        self.check_batch(out)?;
        out.try_resize(spec.n)?;
        self.draw_indices(spec, out.indices_mut())?;
        out.weights_mut().clear();
        let (indices, mut outs) = out.parts_mut();
        self.ring
            .gather(self.live_rows(), indices, &mut outs)
            .map_err(|m| self.stamp_error(indices, m))
    }

    /// Whether `out` was made for this buffer's schema (a sample refills it in place).
    /// Checks that `outs` has one output per field, each `rows` items long.
    pub(crate) fn check_outputs(&self, rows: usize, outs: &[&mut [u8]]) -> Result<()> {
        if outs.len() != self.schema.len() {
            return Err(Error::InvalidSample(format!(
                "{} outputs for {} fields",
                outs.len(),
                self.schema.len()
            )));
        }
        for (f, out) in self.schema.fields().iter().zip(outs.iter()) {
            let expected = f.bytes() * rows;
            if out.len() != expected {
                return Err(Error::OutputSize {
                    field: f.name().to_owned(),
                    expected,
                    got: out.len(),
                });
            }
        }
        Ok(())
    }

    pub(crate) fn check_batch(&self, out: &Batch) -> Result<()> {
        if out.fits(&self.schema) {
            Ok(())
        } else {
            Err(Error::InvalidSample(
                "the output batch was made for another schema".into(),
            ))
        }
    }

    /// Draws indices as `spec` says into `out`, advancing the RNG, without gathering.
    pub fn draw_indices(&mut self, spec: &SampleSpec, out: &mut Vec<u64>) -> Result<()> {
        draw_uniform(&mut self.draws.rng, spec, self.head, self.tail, out)?;
        self.draws.sampled += out.len() as u64;
        Ok(())
    }

    /// Draws `n` items by priority (independently) and gathers them; the batch carries
    /// importance weights for exponent `beta`.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).prioritized(0.6, 1e-6).seed(3);
    /// let mut buf = ReplayBuffer::create(dir.path().join("per"), config)?;
    /// buf.add_batch(&[Column::new("x", &[0.0f32, 1.0, 2.0, 3.0])])?;
    /// let batch = buf.sample_prioritized(8, 0.4)?;
    /// assert_eq!(batch.weights().len(), 8);
    /// // Item 3 becomes 100x more likely than the others; items sampled earlier may
    /// // have been evicted since, and are skipped and counted.
    /// let done = buf.update_priorities(&[0, 1, 2, 3], &[0.01f32, 0.01, 0.01, 1.0])?;
    /// assert_eq!(done.applied, 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_prioritized(&mut self, n: usize, beta: f64) -> Result<Batch> {
        let mut batch = Batch::new(&self.schema, 0);
        self.sample_prioritized_into(&PrioritySpec::new(n, beta), &mut batch)?;
        Ok(batch)
    }

    /// Draws by priority as `spec` says and gathers into `out`, reusing its storage.
    pub fn sample_prioritized_into(&mut self, spec: &PrioritySpec, out: &mut Batch) -> Result<()> {
        self.check_batch(out)?;
        out.try_resize(spec.n)?;
        let mut weights = std::mem::take(out.weights_mut());
        weights.resize(spec.n, 0.0);
        let drawn = self.draw_prioritized(spec, out.indices_mut(), &mut weights);
        *out.weights_mut() = weights;
        drawn?;
        let (indices, mut outs) = out.parts_mut();
        self.ring
            .gather(self.live_rows(), indices, &mut outs)
            .map_err(|m| self.stamp_error(indices, m))
    }

    /// Draws `indices.len()` live indices by priority into `indices`, with their
    /// importance weights into `weights`, advancing the RNG, without gathering: the
    /// fill-in-place path for bindings (then [`ReplayBuffer::gather_into`]).
    pub fn draw_prioritized(
        &mut self,
        spec: &PrioritySpec,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        let Some(p) = self.tree.tree_mut() else {
            return Err(self.no_priorities());
        };
        let live = LiveRange {
            head: self.head,
            head_slot: self.head_slot,
            tail: self.tail,
        };
        p.draw(&mut self.draws.rng, spec, live, indices, weights)?;
        self.draws.sampled += indices.len() as u64;
        Ok(())
    }

    /// Sets the priorities of the items at logical `indices` (typically the TD errors of
    /// a sampled batch). Items evicted or cleared since they were sampled are skipped and
    /// counted (`stale_updates` in [`Stats`]), never applied to the newer item in their
    /// slot. A priority that is negative, NaN or infinite, an index never added, or
    /// arrays of different lengths are an error, and then nothing is applied.
    /// Survives a kill at once, and a power loss after the next `flush`.
    pub fn update_priorities<P: Priority>(
        &mut self,
        indices: &[u64],
        priorities: &[P],
    ) -> Result<PriorityUpdate> {
        self.writable()?;
        let Some(p) = self.tree.tree_mut() else {
            return Err(self.no_priorities());
        };
        p.update(self.head, self.head_slot, self.tail, indices, priorities)
    }

    /// The current `priority + eps` of each live item in `indices` (recovered from the
    /// stored `(priority + eps)^alpha`; with alpha 0 every item reads 1).
    pub fn priorities(&self, indices: &[u64]) -> Result<Vec<f64>> {
        let Some(p) = self.tree.tree() else {
            return Err(self.no_priorities());
        };
        p.of_live(self.head, self.tail, indices)
    }

    /// Priority totals and counters, if the buffer keeps priorities.
    pub fn priority_summary(&mut self) -> Option<PrioritySummary> {
        self.tree.tree_mut().map(Priorities::summary)
    }

    /// Copies the items at `indices` into per-field outputs (`outs[f]` must be
    /// `indices.len()` times field `f`'s size): the fill-in-place path for bindings.
    pub fn gather_into(&self, indices: &[u64], outs: &mut [&mut [u8]]) -> Result<()> {
        self.check_outputs(indices.len(), outs)?;
        if let Some(&index) = indices.iter().find(|&&i| i < self.head || i >= self.tail) {
            return Err(Error::Evicted {
                index,
                head: self.head,
                tail: self.tail,
            });
        }
        self.ring
            .gather(self.live_rows(), indices, outs)
            .map_err(|m| self.stamp_error(indices, m))
    }

    /// The items at `indices`, as a batch. Every read checks what it copies: each item's
    /// stamp, and the checksum of each item a flush has sealed, so a damaged item is an
    /// error naming its file and offset, never returned.
    pub fn get_many(&self, indices: &[u64]) -> Result<Batch> {
        let mut batch = Batch::new(&self.schema, indices.len());
        let (idx, mut outs) = batch.parts_mut();
        idx.copy_from_slice(indices);
        self.gather_into(indices, &mut outs)?;
        Ok(batch)
    }

    /// The item at a logical index, as a batch of one.
    pub fn get(&self, index: u64) -> Result<Batch> {
        self.get_many(&[index])
    }

    pub(super) fn stamp_error(&self, indices: &[u64], missed: Missed) -> Error {
        match missed {
            Missed::Row(m) => {
                self.row_error(indices.get(m.position).copied().unwrap_or(0), m.found)
            }
            Missed::Read(e) => e,
        }
    }

    /// The error for live `index` whose row held `found` instead.
    pub(crate) fn row_error(&self, index: u64, found: Found) -> Error {
        let slot = index % self.superblock.capacity;
        let (file, offset) = self.ring.place(slot, &self.dir);
        let problem = match found {
            Found::Stamp(stamp) => format!(
                "the slot's stamp is {:#x}, expected {:#x}",
                stamp,
                crate::format::row::stamp_of(index)
            ),
            Found::Checksum { stored, computed } => {
                format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
        };
        Error::BadItem {
            file,
            offset,
            index,
            problem,
        }
    }

    /// Where reads find the live rows, and below which index they check checksums.
    pub(crate) fn live_rows(&self) -> Live {
        Live {
            head: self.head,
            head_slot: self.head_slot,
            sealed: if self.read_checks {
                self.flushed_tail
            } else {
                0
            },
        }
    }

    /// Whether reads check each sealed item against its checksum (the default). Turning
    /// it off saves the checksum's cost on every sample and get (see the closing figures
    /// in ARCHITECTURE), and is unsafe on damaged media: a flipped bit in a row is then
    /// returned as data. Stamps are still checked, so a race with the writer is still
    /// caught. For benchmarks, and for buffers verified since they were last written.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8))?;
    /// assert!(buf.read_checks());
    /// buf.set_read_checks(false);
    /// assert!(!buf.read_checks());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_read_checks(&mut self, on: bool) {
        self.read_checks = on;
    }

    /// Whether reads check sealed items against their checksums.
    pub fn read_checks(&self) -> bool {
        self.read_checks
    }

    /// Makes everything added so far, the counters and the RNG position survive a power
    /// loss: checksums for the items added since the last flush, msync of their rows,
    /// then a durable commit.
    pub fn flush(&mut self) -> Result<()> {
        self.writable()?;
        self.sync_rows()?;
        self.sync_priorities()?;
        self.commit(0, true)
    }

    fn sync_priorities(&mut self) -> Result<()> {
        if let Some(p) = self.tree.tree_mut()
            && let Err(e) = p.flush(&*self.io)
        {
            return Err(self.poison(e));
        }
        self.tree.set_durable_below(self.tail);
        Ok(())
    }

    /// Seals (checksums) the live items added since the last flush and msyncs them.
    fn sync_rows(&mut self) -> Result<()> {
        let cap = self.superblock.capacity;
        let from = self.flushed_tail.max(self.head);
        let written = self.tail.saturating_sub(from);
        if written > 0 {
            let start = from % cap;
            self.ring.seal(start, from, written);
            if let Err((s, e)) = self.ring.flush_slots(&*self.io, start, written) {
                let e = Error::io("msync", storage::segment_path(&self.dir, s as u64), e);
                return Err(self.poison(e));
            }
        }
        self.flushed_tail = self.tail;
        self.publish(SEALED_OFF, self.flushed_tail);
        Ok(())
    }

    /// The commit record of the state in memory, numbered `generation`.
    fn commit_record(&self, generation: u64, flags: u32) -> Commit {
        Commit {
            generation,
            head: self.head,
            tail: self.tail,
            cleared: self.cleared,
            sampled: self.draws.sampled,
            rng_seed: self.draws.seed,
            rng_word_pos: self.draws.rng.get_word_pos(),
            boot_id: self.commits.boot_id,
            flags,
        }
    }

    fn commit(&mut self, flags: u32, durable: bool) -> Result<()> {
        let Some(manifest) = &self.commits.file else {
            return Err(Error::ReadOnly {
                dir: self.dir.clone(),
                op: "commit",
            });
        };
        if self.commits.lane_dirty {
            // Segment copies were renamed into place: the renames must be durable before
            // a commit covers items stored in the copies.
            let lane = self.dir.join(LANE_DIR);
            if let Err(e) = self.io.sync_dir(&lane) {
                let e = Error::io("fsync", lane, e);
                return Err(self.poison(e));
            }
            self.commits.lane_dirty = false;
        }
        let Some(next) = self.commits.generation.checked_add(1) else {
            // Only a crafted MANIFEST gets here (2^64 commits take no real writer):
            // wrapping would make the older slot win at the next open.
            return Err(Error::Corrupt {
                file: self.commits.path.clone(),
                offset: 0,
                field: "commit generation".into(),
                expected: "below 2^64 - 1".into(),
                got: self.commits.generation.to_string(),
            });
        };
        let c = self.commit_record(next, flags);
        match storage::write_commit(&*self.io, manifest, &self.commits.path, &c, durable) {
            Ok(()) => {
                self.commits.generation = c.generation;
                self.evictions.on_commit(c.head, c.tail);
                Ok(())
            }
            Err(e) => Err(self.poison(e)),
        }
    }

    /// Drops every live item; logical indices go on from where they were. Durable.
    pub fn clear(&mut self) -> Result<()> {
        self.writable()?;
        self.cleared += self.tail - self.head;
        self.head = self.tail;
        self.head_slot = self.tail_slot;
        self.publish(HEAD_OFF, self.head);
        if let Some(p) = self.tree.tree_mut() {
            p.clear();
            p.note_caught_up(self.tail);
        }
        if let Some(e) = &mut self.episodes {
            e.clear();
        }
        if let Some(f) = &mut self.fragments {
            f.clear();
        }
        self.sync_priorities()?;
        self.commit(0, true)
    }

    /// Checkpoints the buffer: makes it durable and freezes the state as a new snapshot named
    /// `gen-<generation>` (see [`ReplayBuffer::get_state_named`]).
    pub fn get_state(&mut self) -> Result<State> {
        let name = format!("gen-{:012}", self.commits.generation.wrapping_add(1));
        self.get_state_named(&name)
    }

    /// Checkpoints the buffer as snapshot `name`: makes the items durable and commits,
    /// then links every segment file into `snapshots/<name>/` and copies the manifest
    /// and the priorities (the copy is durable; the live tree is not msynced, so after
    /// a power cut the live buffer's priorities are those of its last
    /// [`ReplayBuffer::flush`], and the snapshot's are these). No item is
    /// copied, so the cost does not grow with the data: the writer copies a segment
    /// only when it is about to store into one a snapshot still links (copy-on-write).
    /// The returned [`State`] is small; put it in the training checkpoint and hand it to
    /// [`ReplayBuffer::set_state`] to come back here. A kill at any point leaves the
    /// snapshot either whole or absent. Snapshots stay until deleted
    /// ([`ReplayBuffer::delete_snapshot`], [`ReplayBuffer::keep_last`]).
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10).seed(1))?;
    /// buf.add(&[Column::scalar("x", &1u8)])?;
    /// let state = buf.get_state_named("step-1")?;
    /// let before = buf.sample(4)?;
    /// buf.add(&[Column::scalar("x", &2u8)])?;
    /// buf.set_state(&state)?;
    /// assert_eq!(buf.len(), 1);
    /// assert_eq!(buf.sample(4)?.indices(), before.indices()); // same RNG position
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_state_named(&mut self, name: &str) -> Result<State> {
        self.writable()?;
        snapshot::valid_name(name)?;
        if snapshot::exists(&*self.io, &self.dir, name)? {
            return Err(Error::SnapshotExists {
                dir: self.dir.clone(),
                name: name.to_owned(),
            });
        }
        // The items must be durable (the snapshot links their files); the live tree need
        // not be: the snapshot gets its own copy, taken from the page cache and synced.
        // Msyncing the live tree too would write every page a priority update touched
        // (a whole 1M-leaf tree after a few thousand PER batches: tens of ms) and
        // make each next update take a write-protect fault.
        self.sync_rows()?;
        if let Some(p) = self.tree.tree_mut() {
            p.settle();
        }
        // The commit covers the items added since the last flush: their leaves must be
        // durable with it (only theirs; the rest of the live tree stays as of that flush).
        if let (Some(p), Some(from)) = (self.tree.tree(), self.tree.durable_below()) {
            let count = self.tail - from;
            if let Err(e) = p.flush_leaves(&*self.io, from % self.superblock.capacity, count) {
                return Err(self.poison(e));
            }
            self.tree.set_durable_below(self.tail);
        }
        self.commit(0, true)?;
        let frozen = self.commit_record(self.commits.generation, FLAG_CLEAN);
        let owned_tree = self.tree.tree().is_some();
        let made = snapshot::create(
            &*self.io,
            &self.dir,
            &self.superblock,
            &frozen,
            name,
            owned_tree,
        );
        match made {
            Ok(()) => self.ring.mark_all_shared(),
            // Some links may exist (in the temporary folder, or published but not yet
            // durable): count them so no store changes a linked file.
            Err(_) => self.ring.refresh_shared(),
        }
        made?;
        Ok(State {
            name: name.to_owned(),
            uuid: self.superblock.uuid,
            generation: frozen.generation,
            head: frozen.head,
            tail: frozen.tail,
            cleared: frozen.cleared,
            sampled: frozen.sampled,
            rng_seed: frozen.rng_seed,
            rng_word_pos: frozen.rng_word_pos,
        })
    }

    /// Returns the buffer to `state`: the same items, priorities, counters and RNG
    /// position as when [`ReplayBuffer::get_state`] made it. Everything added since is
    /// dropped. The snapshot stays, so the same state can be restored again. Costs
    /// a hard link per segment and copies of the manifest and priorities.
    ///
    /// The snapshot is checked first (files present, headers sound, the commit it froze
    /// equal to `state`): a problem is an error naming it and nothing changes. Then an
    /// intent file is written, and a kill after that point is finished by the next open.
    pub fn set_state(&mut self, state: &State) -> Result<()> {
        self.writable()?;
        snapshot::check(&*self.io, &self.dir, &self.superblock, state)?;
        // An actor replaces a tree another process may have mapped: only while no
        // PriorityOwner runs (it would go on writing the replaced file).
        let _owner = (self.tree.is_actor() && self.superblock.prioritized)
            .then(|| storage::lock_priorities(&*self.io, &self.dir))
            .transpose()?;
        self.publish_files_changing();
        let restored = snapshot::write_intent(&*self.io, &self.dir, state)
            .and_then(|()| snapshot::restore(&*self.io, &self.dir, &self.superblock, &state.name));
        let replaced = match restored {
            Ok(files) => files,
            Err(e) => {
                self.closed = true;
                self.poisoned = Some(format!(
                    "set_state({:?}) failed part way ({e}); reopen the buffer to finish it",
                    state.name
                ));
                return Err(e);
            }
        };
        // The live files are (or may be) replaced: this handle's mappings are of the old
        // ones. Close it without a commit and open the restored files.
        self.closed = true;
        let role = match self.commits.lock.take() {
            Some(lock) if self.tree.is_actor() => Role::Actor(lock),
            Some(lock) => Role::Writer(lock),
            None => Role::Frozen,
        };
        // The new handle takes the priority lock again (flock is per open file).
        self.tree.release_lock();
        match ReplayBuffer::open_as(self.dir.clone(), self.io.clone(), role, true) {
            Ok(fresh) => {
                let old = std::mem::replace(self, fresh);
                release_in_background((old, replaced));
                Ok(())
            }
            Err(e) => {
                self.poisoned = Some(format!("reopening after set_state failed: {e}"));
                Err(e)
            }
        }
    }

    /// Lets go of the handle as `kill -9` would: no flush, no commit, nothing written;
    /// the page cache keeps what the calls so far stored, and the next open recovers
    /// from it exactly as after a killed process. For crash tests and fuzzers that run
    /// many crashes inside one process.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &3u8)])?;
    /// buf.abandon();
    /// let buf = ReplayBuffer::open(dir.path().join("b"))?;
    /// assert_eq!(buf.live(), 0..1);
    /// assert!(buf.recovery().is_some()); // opened as after a killed writer
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn abandon(mut self) {
        self.closed = true;
    }

    /// The state that restores snapshot `name`, read from the snapshot itself: for a
    /// run that lost the dict `get_state` returned (a crash before the checkpoint was
    /// saved) and resumes from the newest snapshot instead.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &3u8)])?;
    /// let state = buf.get_state_named("ckpt")?;
    /// assert_eq!(buf.snapshot_state("ckpt")?, state);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot_state(&self, name: &str) -> Result<State> {
        snapshot::valid_name(name)?;
        let snap = snapshot::snapshot_dir(&self.dir, name);
        if !snapshot::exists(&*self.io, &self.dir, name)? {
            return Err(Error::NoSuchSnapshot {
                dir: self.dir.clone(),
                name: name.to_owned(),
            });
        }
        let c = Manifest::load(&*self.io, &snap)
            .and_then(|m| m.newest_commit())
            .map_err(|e| Error::BadSnapshot {
                dir: self.dir.clone(),
                name: name.to_owned(),
                source: Box::new(e),
            })?;
        Ok(State {
            name: name.to_owned(),
            uuid: self.superblock.uuid,
            generation: c.generation,
            head: c.head,
            tail: c.tail,
            cleared: c.cleared,
            sampled: c.sampled,
            rng_seed: c.rng_seed,
            rng_word_pos: c.rng_word_pos,
        })
    }

    /// This buffer's snapshots, oldest first (see [`crate::snapshots`]).
    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        snapshot::snapshots(&self.dir)
    }

    /// Deletes snapshot `name`. Its segments stay as long as the live buffer (or another
    /// snapshot) links them; segments nothing else links are freed. A kill leaves it
    /// either listed and whole or gone. A process that has it open keeps reading its
    /// files, but the writer no longer copies the segments it shared with the live
    /// buffer: reads of items the writer then overwrites fail (`BadItem`), never return
    /// the newer bytes.
    pub fn delete_snapshot(&mut self, name: &str) -> Result<()> {
        self.writable()?;
        snapshot::valid_name(name)?;
        let done = snapshot::delete(&*self.io, &self.dir, name);
        self.ring.refresh_shared();
        done
    }

    /// Deletes all but the `k` newest snapshots (by the generation they froze; damaged
    /// ones count as oldest). Returns the names deleted.
    pub fn keep_last(&mut self, k: usize) -> Result<Vec<String>> {
        self.writable()?;
        let list = self.snapshots()?;
        let doomed: Vec<String> = list
            .iter()
            .take(list.len().saturating_sub(k))
            .map(|s| s.name.clone())
            .collect();
        for name in &doomed {
            let done = snapshot::delete(&*self.io, &self.dir, name);
            if done.is_err() {
                self.ring.refresh_shared();
            }
            done?;
        }
        self.ring.refresh_shared();
        Ok(doomed)
    }

    /// Restarts the sampling RNG from a new seed (stored at the next commit).
    pub fn reseed(&mut self, seed: u64) {
        self.draws.seed = seed;
        self.draws.rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// Flushes and marks the buffer cleanly closed, so the next open needs no recovery.
    /// (A read-only snapshot has nothing to flush.)
    pub fn close(mut self) -> Result<()> {
        if self.commits.lock.is_none() || self.closed {
            // Read-only, or already let go by a set_state that failed part way: its
            // files are the next open's to finish (the restore intent says how), and
            // nothing of this handle is left to commit.
            self.closed = true;
            return Ok(());
        }
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        self.writable()?;
        self.sync_rows()?;
        if self.tree.holds_lock()
            && let Some(p) = self.tree.tree_mut()
        {
            p.set_owner(0);
        }
        self.sync_priorities()?;
        self.commit(FLAG_CLEAN, true)?;
        self.closed = true;
        self.publish(PID_OFF, 0);
        Ok(())
    }
}

impl Drop for ReplayBuffer {
    fn drop(&mut self) {
        if !self.closed && self.poisoned.is_none() && self.commits.lock.is_some() {
            // Errors cannot be returned from drop; the data is in the page cache either
            // way, and the next open recovers it if this commit did not land.
            let _ = self.shutdown();
        }
    }
}

/// Marks the progress page's epoch odd before a writer without a handle yet (an open
/// that restores) replaces files one by one; its open makes the epoch even again.
fn files_changing(io: &dyn io::Io, dir: &Path, sb: &Superblock) -> Result<()> {
    mark_changing(&mut storage::open_progress(io, dir, sb, Access::Write)?);
    Ok(())
}

/// Makes the epoch odd (files being replaced), if it is not already.
fn mark_changing(p: &mut ProgressMap) {
    let epoch = p.load(EPOCH_OFF);
    if epoch.is_multiple_of(2) {
        p.store(EPOCH_OFF, epoch.wrapping_add(1));
    }
}

/// Drops `files` on another thread (in place if no thread can be started). Letting go of
/// the last handle of a segment file that lost its name makes the kernel free its page
/// cache and extents, milliseconds per segment and growing with the data: reclamation,
/// not part of restoring, so it stays off the caller's path.
fn release_in_background<T: Send + 'static>(files: T) {
    let _ = std::thread::Builder::new()
        .name("replaystore-release".into())
        .spawn(move || drop(files));
}

fn write_new_buffer(
    io: &dyn io::Io,
    dir: &Path,
    sb: &Superblock,
    archive: &[u8],
    seed: u64,
    priorities: Option<&PriorityConfig>,
    first_index: u64,
) -> Result<()> {
    let lane = dir.join(LANE_DIR);
    io.create_dir_all(&lane)
        .map_err(|e| Error::io("create directory", &lane, e))?;
    for n in 0..sb.segment_count {
        storage::create_segment(io, dir, sb, n)?;
    }
    // The progress page too, durable before MANIFEST is published: a reader that finds
    // MANIFEST always finds the page (even after a power cut), so a sound new buffer is
    // never one whose readers refuse it.
    drop(storage::open_progress(io, dir, sb, Access::Write)?);
    io.sync_dir(&lane)
        .map_err(|e| Error::io("fsync", &lane, e))?;
    if let Some(p) = priorities {
        Priorities::create(io, dir, sb, p)?;
    }
    let first = Commit {
        head: first_index,
        tail: first_index,
        rng_seed: seed,
        flags: FLAG_CLEAN,
        ..Commit::default()
    };
    let bytes = storage::manifest_bytes(sb, archive, &first);
    let tmp = dir.join(storage::MANIFEST_TMP);
    let file = io
        .create_new(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    io.write_at(&file, 0, &bytes)
        .map_err(|e| Error::io("write", &tmp, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &tmp, e))?;
    crate::killpoint::hit("create-before-manifest");
    let path = dir.join(MANIFEST);
    io.rename(&tmp, &path)
        .map_err(|e| Error::io("rename", &path, e))?;
    io.sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))?;
    Ok(())
}

/// Makes `dir` (if absent) and checks that it is empty: a buffer is only ever created
/// where it cannot overwrite anything.
pub(crate) fn create_empty_dir(io: &dyn io::Io, dir: &Path) -> Result<()> {
    io.create_dir_all(dir)
        .map_err(|e| Error::io("create directory", dir, e))?;
    let entries = io
        .list_dir(dir)
        .map_err(|e| Error::io("read directory", dir, e))?;
    let Some((name, _)) = entries.first() else {
        return Ok(());
    };
    let has = |n: &str| entries.iter().any(|(e, _)| e == n);
    if !has(MANIFEST) && has(storage::LOCK) {
        // A create killed before it published MANIFEST: its files and no buffer, so
        // neither open (no MANIFEST) nor create (not empty) would take the folder.
        // Its lock says whether that create still runs (then this is `Locked`); if
        // not, the folder is cleared (only if it holds nothing but the engine's own
        // names) and made again.
        let lock = storage::lock(io, dir)?;
        crate::parts::snapshot::remove_tree(io, dir)?;
        drop(lock);
        return io
            .create_dir_all(dir)
            .map_err(|e| Error::io("create directory", dir, e));
    }
    Err(Error::AlreadyExists {
        what: format!("the directory is not empty (it has {name:?})"),
        dir: dir.to_path_buf(),
    })
}

/// Refuses, before a byte is reserved, a buffer whose files the disk cannot hold (or
/// whose mappings no address space can): `capacity=2**40` is an error at once, not a
/// disk filled by fallocate and then emptied.
fn refuse_what_cannot_fit(dir: &Path, sb: &Superblock) -> Result<()> {
    let rows = sb.capacity.saturating_mul(sb.row_stride);
    let headers = sb
        .segment_count
        .saturating_mul(crate::format::segment::DATA_OFFSET as u64);
    // The tree: at most two f64 words per slot plus its header page.
    let tree = if sb.prioritized {
        sb.capacity.saturating_mul(16).saturating_add(4096)
    } else {
        0
    };
    let bytes = rows.saturating_add(headers).saturating_add(tree);
    // 2^46: the user half of a 47-bit address space, where every segment is mapped.
    if bytes > 1 << 46 {
        return Err(Error::InvalidConfig {
            field: "capacity",
            problem: format!(
                "{} items of {} bytes need {bytes} bytes of mappings, more than a 64-bit \
                 process can map",
                sb.capacity, sb.row_stride
            ),
        });
    }
    let Some(existing) = storage::nearest_existing(dir) else {
        return Ok(());
    };
    match fs2::available_space(existing) {
        Ok(free) if free < bytes => Err(Error::DiskFull {
            path: dir.to_path_buf(),
            bytes,
        }),
        _ => Ok(()),
    }
}

/// Best-effort removal of a buffer whose creation failed (the error is what matters).
/// Segments are made in order, so the first missing one ends the walk: a refused
/// `capacity=2**40` does not try 2^40 / slots names.
fn remove_new_buffer(io: &dyn Io, dir: &Path, sb: &Superblock) {
    // MANIFEST first: a kill during the removal leaves no buffer rather than a MANIFEST
    // over missing segments.
    let _ = io.remove_file(&dir.join(MANIFEST));
    for n in 0..sb.segment_count {
        let gone = io.remove_file(&storage::segment_path(dir, n));
        if gone.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            break;
        }
    }
    let _ = io.remove_file(&storage::progress_path(dir));
    let _ = io.remove_dir(&dir.join(LANE_DIR));
    let _ = io.remove_file(&dir.join(storage::MANIFEST_TMP));
    let _ = io.remove_file(&storage::tree_path(dir));
    let _ = io.remove_file(&dir.join(storage::LOCK));
}
