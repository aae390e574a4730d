//! Readers: any number of processes sampling one buffer while its writer adds.
//!
//! A reader maps the segment files shared and read-only, so every process reads the one
//! copy in the page cache, and takes the live range from the progress page the writer
//! keeps (`format::progress`). It never writes a row, a priority or a commit and never
//! takes a lock, so it cannot slow, block or damage the writer; the one word it adds to
//! is the page's count of readers' draws (when it may write that file), which `info`
//! and the writer's next commit count. Each row is copied between two loads of its stamp;
//! when a stamp does not name the index drawn, the reader looks again at the progress
//! page: an index the writer has since evicted (or files it has since replaced) means
//! a lost race, and the draw is made again; an index still live means a damaged row,
//! reported as `BadItem`. See docs/ARCHITECTURE.md, "Many processes".

use std::path::Path;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use crate::algo::sample::{SampleSpec, draw_one};
use crate::batch::Batch;
use crate::draw::{DrawsRows, DrawsUnits, Followed, Rows, UnitArrays, sample_rows, sample_units};
use crate::error::{Error, Result};
use crate::format::progress::{EPOCH_OFF, HEAD_OFF, SEALED_OFF, TAIL_OFF};
use crate::parts::config::Stats;
use crate::parts::episodes::Episodes;
use crate::parts::fragments::Fragments;
use crate::parts::heap::Heap;
use crate::parts::hooks::Holder;
use crate::parts::lifecycle::Lifecycle;
use crate::parts::priorities::{Priorities, PrioritySpec, SharedPriorities};
use crate::parts::tree_role::TreeRole;
use crate::request::{Pick, Request, Unit};
use crate::schema::Schema;
use crate::sink::Sink;
use crate::storage::io::{self, Access, IoRef};
use crate::storage::map::{Found, ProgressMap};
use crate::storage::pread::{Missed, RowAccess, RowFiles};
use crate::storage::ring::Ring;
use crate::storage::{self, Manifest};
use crate::store::{open_parts, snapshot_parts};

/// Draws made again after lost races before a call gives up: a writer that overwrites
/// the drawn items this many times in a row is lapping the whole ring during one call.
const RACE_TRIES: usize = 64;
/// Loads of the progress page that may find it between two stores before it counts as
/// damaged.
const REFRESH_TRIES: usize = 1_000;
/// How long a reader waits for a writer replacing several files (a restore) to finish
/// before it maps whatever is there.
const CHANGING_WAIT: Duration = Duration::from_secs(5);

/// A read-only view of a buffer that a writer in another process (or this one) may be
/// adding to: uniform sampling, `get`, `len` and stats, from any number of processes at
/// once. Every call first looks at where the writer is, so a sample draws from the items
/// live when it starts, and never returns a torn or overwritten item.
///
/// ```
/// use replaystore::{Column, Config, DType, Reader, ReplayBuffer, Schema};
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
/// let mut writer = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100))?;
/// let mut reader = Reader::open(dir.path().join("b"))?; // usually another process
/// for x in 0..10u32 {
///     writer.add(&[Column::scalar("x", &x)])?;
/// }
/// let batch = reader.sample(4)?;
/// for (&i, &x) in batch.indices().iter().zip(batch.get::<u32>("x")?) {
///     assert_eq!(i, u64::from(x));
/// }
/// assert_eq!(reader.len(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A reader never writes an item, a row or a priority, and has no method that would
/// (it adds only its count of draws to the progress page): priorities
/// are updated by the writer or a [`crate::PriorityOwner`].
///
/// ```compile_fail
/// # use replaystore::{Config, DType, Reader, ReplayBuffer, Schema};
/// # let dir = tempfile::tempdir()?;
/// # let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
/// # let _writer = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).prioritized(1.0, 0.0))?;
/// let mut reader = Reader::open(dir.path().join("b"))?;
/// reader.update_priorities(&[0], &[1.0f32])?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Reader {
    /// The rows as of the last look at the progress page, and this reader's RNG.
    pub(super) rows: Rows,
    /// How this reader draws by priority.
    tree: ReadTree,
    /// The item states, read-only (buffers with item states): removed items are not
    /// drawn or read.
    life: Option<Lifecycle>,
    /// The writer's progress page; `None` for a snapshot, which never changes.
    progress: Option<ProgressMap>,
    /// The newest commit's generation when the reader opened (`Stats::generation`).
    generation: u64,
    /// The files epoch the mappings were made at.
    epoch: u64,
    /// How rows are copied out (kept across remaps).
    access: RowAccess,
    /// The process that seeded the RNG, when the reader seeded it itself (`None` once a
    /// caller chose a seed, and for a snapshot, which replays its checkpoint's stream).
    /// A fork copies the RNG with the rest of the reader; a copy that finds itself in
    /// another process draws a new seed, or every data-loader worker forked from one
    /// reader would sample the same batches.
    seeded_in: Option<u32>,
    /// The episode and fragment tables of the rows read so far (unit draws).
    followed: Followed,
    /// The arrays a transition or sequence draw fills, kept between draws.
    units: UnitArrays,
    /// This reader's draws already added to the progress page's reader draws.
    tallied: u64,
}

/// The priorities a reader draws from.
#[derive(Debug)]
enum ReadTree {
    /// The buffer keeps none.
    Absent,
    /// The live tree, which the writer (or the priority owner) keeps changing.
    Shared(SharedPriorities),
    /// A snapshot's private copy, which never changes.
    Frozen(Priorities),
}

impl Reader {
    /// Opens the buffer in `dir` for reading while its writer goes on. The sampling RNG
    /// starts from a fresh random seed (see [`Reader::reseed`]), so readers in several
    /// processes draw different batches.
    pub fn open(dir: impl AsRef<Path>) -> Result<Reader> {
        Reader::open_with(dir, io::os())
    }

    /// `open` through a given file-operation seam.
    pub fn open_with(dir: impl AsRef<Path>, io: IoRef) -> Result<Reader> {
        let dir = storage::resolve_root(dir.as_ref());
        let sb = Manifest::load(&*io, &dir)?.superblock;
        let progress = storage::open_progress(&*io, &dir, &sb, Access::Read)?;
        // Loaded before mapping: files replaced after this are remapped by the first
        // call that sees the epoch move.
        let epoch = wait_steady(&progress, None);
        let opened = open_parts(dir, io, Holder::Live, None, false)?;
        let mut rows = opened.rows;
        rows.reseed(crate::algo::entropy::seed());
        let tree = open_priorities(&rows)?;
        // The count starts at the commit's, which already holds every draw before it.
        let tallied = rows.draws.sampled;
        let mut reader = Reader {
            rows,
            tree,
            life: opened.parts.life,
            progress: Some(progress),
            generation: opened.commits.generation,
            epoch,
            access: RowAccess::Mapped,
            seeded_in: Some(std::process::id()),
            followed: Followed::default(),
            units: UnitArrays::default(),
            tallied,
        };
        reader.refresh()?;
        Ok(reader)
    }

    /// Opens snapshot `name` of the buffer in `dir`: a reader of a state that never
    /// changes, sampling from the snapshot's RNG position (as
    /// [`crate::ReplayBuffer::open_snapshot`]).
    pub fn open_snapshot(dir: impl AsRef<Path>, name: &str) -> Result<Reader> {
        let opened = snapshot_parts(dir.as_ref(), name)?;
        Ok(Reader {
            rows: opened.rows,
            tree: match opened.parts.tree {
                TreeRole::Owned { tree, .. } => ReadTree::Frozen(tree),
                _ => ReadTree::Absent,
            },
            life: opened.parts.life,
            progress: None,
            generation: opened.commits.generation,
            epoch: 0,
            access: RowAccess::Mapped,
            seeded_in: None,
            followed: Followed::default(),
            units: UnitArrays::default(),
            // A snapshot's reader tells no page.
            tallied: 0,
        })
    }

    /// Chooses how samples and `get` copy rows out of the files: through the shared
    /// mappings (the default, at memory speed) or with `pread`, which maps nothing, so
    /// the process's resident memory stays flat however much of the buffer it samples.
    /// The page cache is shared either way; `Pread` is for workers whose RSS is watched
    /// (it costs a system call or two per row; see the `storage::pread` module). Sampling
    /// by episode (steps, sequences) and item checksums still read through the mappings.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Reader, ReplayBuffer, RowAccess, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut writer = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100))?;
    /// for x in 0..10u32 {
    ///     writer.add(&[Column::scalar("x", &x)])?;
    /// }
    /// let mut reader = Reader::open(dir.path().join("b"))?;
    /// reader.set_row_access(RowAccess::Pread)?;
    /// let batch = reader.sample(4)?;
    /// for (&i, &x) in batch.indices().iter().zip(batch.get::<u32>("x")?) {
    ///     assert_eq!(i, u64::from(x));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_row_access(&mut self, rows: RowAccess) -> Result<()> {
        let files = row_files(&self.rows, &self.rows.ring, rows)?;
        self.rows.ring.read_rows_from(files);
        self.access = rows;
        Ok(())
    }

    /// Whether reads check each sealed item against its checksum (the default; see
    /// [`crate::ReplayBuffer::set_read_checks`], and what turning it off risks).
    ///
    /// ```
    /// # use replaystore::{Config, DType, Reader, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// # let _writer = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8))?;
    /// let mut reader = Reader::open(dir.path().join("b"))?;
    /// reader.set_read_checks(false);
    /// assert!(!reader.read_checks());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_read_checks(&mut self, on: bool) {
        self.rows.read_checks = on;
    }

    /// Whether reads check sealed items against their checksums.
    pub fn read_checks(&self) -> bool {
        self.rows.read_checks
    }

    /// How rows are copied out (see [`Reader::set_row_access`]).
    pub fn row_access(&self) -> RowAccess {
        self.access
    }

    /// Looks at where the writer is now: the live range, what is sealed, and whether
    /// files were replaced (then they are mapped again). Every sampling and reading
    /// call does this first; call it before [`Reader::len`] to know the length now.
    pub fn refresh(&mut self) -> Result<()> {
        self.refresh_files().map(drop)
    }

    /// `refresh`, returning whether the files were mapped again.
    fn refresh_files(&mut self) -> Result<bool> {
        if let Some(pid) = self.seeded_in {
            let now = std::process::id();
            if now != pid {
                self.rows.reseed(crate::algo::entropy::seed());
                self.seeded_in = Some(now);
            }
        }
        let Some(p) = &self.progress else {
            return Ok(false);
        };
        let cap = self.rows.superblock.capacity;
        let mut remapped = false;
        let mut last = (0, 0);
        for _ in 0..REFRESH_TRIES {
            let epoch = wait_steady(p, Some(self.epoch));
            if epoch != self.epoch {
                let mut ring = map_ring(&self.rows)?;
                ring.read_rows_from(row_files(&self.rows, &ring, self.access)?);
                self.rows.ring = ring;
                // The chunk ring's files may have been replaced too (copy-on-write
                // after a checkpoint, a restore).
                let rows = &self.rows;
                self.rows.heap = Heap::open(&*rows.io, &rows.dir, &rows.superblock, Access::Read)?;
                self.tree = open_priorities(&self.rows)?;
                if let Some(old) = &self.life {
                    let rows = &self.rows;
                    let sb = &rows.superblock;
                    let mut life = Lifecycle::open_with(&*rows.io, &rows.dir, sb, Access::Read)?;
                    life.map_limiter(&*rows.io, &rows.dir)?;
                    life.wait = old.wait;
                    self.life = Some(life);
                }
                self.epoch = epoch;
                remapped = true;
                // Loads below must pair with the files just mapped: start over.
                continue;
            }
            // Tail first: the writer stores a row's head before its tail, so a tail
            // loaded first is never ahead of the head loaded after it by more than
            // the capacity.
            let tail = p.load(TAIL_OFF);
            let head = p.load(HEAD_OFF);
            let sealed = p.load(SEALED_OFF);
            if p.load(EPOCH_OFF) == epoch && head <= tail && tail - head <= cap {
                let rows = &mut self.rows;
                (rows.head, rows.tail) = (head, tail);
                (rows.head_slot, rows.tail_slot) = (head % cap, tail % cap);
                rows.flushed_tail = sealed.min(tail);
                rows.cleared = rows.cleared.min(head);
                return Ok(remapped);
            }
            last = (head, tail);
            std::thread::yield_now();
        }
        Err(Error::Corrupt {
            file: p.path().to_path_buf(),
            offset: HEAD_OFF as u64,
            field: "progress head and tail".into(),
            expected: format!("head <= tail <= head + {cap}"),
            got: format!(
                "head {}, tail {} after {REFRESH_TRIES} loads",
                last.0, last.1
            ),
        })
    }

    /// After a row's stamp did not name `index`: whether that was a race with the
    /// writer (the index was evicted, or files replaced, or a restore moved the tail
    /// back below it, since the draw), not damage.
    fn lost_race(&mut self, index: u64) -> Result<bool> {
        // The stamp that did not match may have been loaded relaxed: this fence makes
        // what the writer published before storing it visible to the loads below.
        fence(Ordering::Acquire);
        let remapped = self.refresh_files()?;
        Ok(remapped || !self.rows.live().contains(&index))
    }

    /// Runs `op` on the items live now, again after each lost race.
    fn retrying<T>(&mut self, mut op: impl FnMut(&mut Rows) -> Result<T>) -> Result<T> {
        self.refresh_files()?;
        for _ in 0..RACE_TRIES {
            match op(&mut self.rows) {
                Err(Error::BadItem { index, .. }) if self.lost_race(index)? => continue,
                done => return done,
            }
        }
        Err(self.lapped())
    }

    /// The error of a call that lost every race it ran.
    fn lapped(&self) -> Error {
        Error::InvalidSample(format!(
            "the writer overwrote the items drawn {RACE_TRIES} times in a row: it laps \
             the ring ({} items) faster than one call reads",
            self.rows.superblock.capacity
        ))
    }

    /// The buffer directory.
    pub fn dir(&self) -> &Path {
        &self.rows.dir
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.rows.schema
    }

    /// Items the ring holds.
    pub fn capacity(&self) -> u64 {
        self.rows.superblock.capacity
    }

    /// Items live as of the last call (or [`Reader::refresh`]); with item states, not
    /// counting removed ones (as the writer last counted them).
    pub fn len(&self) -> u64 {
        self.rows.len() - self.removed_live()
    }

    /// Whether no item was live as of the last call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What each live item at `indices` is, as the writer left it (see
    /// [`crate::ReplayBuffer::item_states`]).
    pub fn item_states(&mut self, indices: &[u64]) -> Result<Vec<crate::ItemState>> {
        self.refresh()?;
        let Some(life) = &self.life else {
            return Err(Error::NoItemStates {
                dir: self.rows.dir.clone(),
            });
        };
        self.rows.check_live(indices)?;
        Ok(indices.iter().map(|&i| life.state(i)).collect())
    }

    /// Asks the rate limiter (buffers with one) whether a draw of `n` may go ahead,
    /// counting it; while it may not, waits (as `set_rate_limit_wait` says) for the
    /// writer to add, looking at the progress page again each time it wakes.
    fn admit_draw(&mut self, n: u64) -> Result<()> {
        let Some(life) = self.life.take() else {
            return Ok(());
        };
        let done = life.admit(true, n, || {
            self.refresh_files()?;
            let tail = self.rows.tail;
            Ok(crate::parts::lifecycle::Counts {
                inserts: tail - crate::format::lanes::lane_base(tail) - life.renames(),
                size: self.rows.len() - life.removed_live().min(self.rows.len()),
            })
        });
        self.life = Some(life);
        done
    }

    /// How long a draw the rate limiter holds back waits for the writer to add before
    /// it is `RateLimited` (`None`, the default: not at all). A reader of a
    /// rate-limited buffer counts its draws in the limiter's words of `items.state`
    /// (the only bytes such a reader writes), so the writer's adds wait for them.
    pub fn set_rate_limit_wait(&mut self, wait: Option<std::time::Duration>) {
        if let Some(life) = &mut self.life {
            life.wait = wait;
        }
    }

    /// How many live and removed items each group of the key `fields` holds now (see
    /// `Rows::by_group`): `replaystore info --by`.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Reader, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("env", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10).item_states())?;
    /// buf.add_batch(&[Column::new("env", &[0u8, 1, 1, 1])])?;
    /// buf.remove(&[1])?;
    /// let groups = Reader::open(dir.path().join("b"))?.group_counts(&["env"])?;
    /// assert_eq!((groups[1].key[0].as_str(), groups[1].live, groups[1].removed), ("1", 2, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn group_counts(&mut self, fields: &[&str]) -> Result<Vec<crate::GroupCount>> {
        self.refresh()?;
        self.rows.group_counts(fields, self.life.as_ref())
    }

    /// Whether live index `index` was removed (item states), as the words say now.
    pub(super) fn is_removed(&self, index: u64) -> bool {
        self.life.as_ref().is_some_and(|l| l.is_removed(index))
    }

    fn removed_live(&self) -> u64 {
        (self.life.as_ref()).map_or(0, |l| l.removed_live().min(self.rows.len()))
    }

    /// Logical indices live as of the last call.
    pub fn live(&self) -> std::ops::Range<u64> {
        self.rows.live()
    }

    /// Counters and sizes now. `sampled` counts this reader's draws; `generation` and
    /// the priority counters are those of the last commit before the reader opened.
    pub fn stats(&mut self) -> Result<Stats> {
        self.refresh()?;
        let frozen = match &self.tree {
            ReadTree::Frozen(p) => Some(p),
            _ => None,
        };
        Ok(self
            .rows
            .stats_with(self.generation, frozen, self.life.as_ref()))
    }

    /// Restarts this reader's sampling RNG from `seed` (reproducible draws; the writer's
    /// RNG is not touched). A reader seeded this way keeps its stream in a forked child
    /// too: choosing seeds per worker is then the caller's part.
    pub fn reseed(&mut self, seed: u64) {
        self.rows.reseed(seed);
        self.seeded_in = None;
    }

    /// Draws as `request` says from the items live now, into a new [`Batch`]: a
    /// `usize` is that many items drawn uniformly; a [`Request`] picks rows uniformly,
    /// by priority or at given indices, or draws transitions, sequences, episodes,
    /// fragments or groups exactly as the writer draws them (the same units for the
    /// same rows and seed: see [`Reader::sample_into`]).
    ///
    /// A drawn item that the writer overwrites before it is copied is replaced by a
    /// new draw from the items live then; the others stay as copied. Priorities are
    /// read as the writer keeps them, which is at most a thousand adds behind for the
    /// tree's upper levels: a draw that lands on a slot the writer has just emptied is
    /// made again.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Reader, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let config = Config::new(schema, 100).prioritized(1.0, 0.0);
    /// let mut writer = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// writer.add_batch(&[Column::new("x", &[0u32, 1, 2, 3])])?;
    /// writer.update_priorities(&[0, 1, 2, 3], &[0.0f32, 0.0, 0.0, 1.0])?;
    /// let mut reader = Reader::open(dir.path().join("b"))?;
    /// let batch = reader.sample(Request::rows(8).prioritized(0.4))?;
    /// assert!(batch.indices().iter().all(|&i| i == 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample<'r>(&mut self, request: impl Into<Request<'r>>) -> Result<Batch> {
        let mut batch = Batch::default();
        self.sample_into(request, &mut batch)?;
        Ok(batch)
    }

    /// [`Reader::sample`] into `sink`: a [`Batch`] to reuse, or arrays a binding owns,
    /// filled in place (an item drawn again after a lost race is copied over the one
    /// the writer took).
    ///
    /// Units longer than a row come from the writer's own draw code, over the episode
    /// and fragment tables this reader follows: it reads the step header of each new
    /// episode's last row (and each new row's fragment word) since its last draw, so a
    /// first episodic draw costs O(episodes), later ones O(new episodes). A transition
    /// or sequence whose rows the writer overwrites mid-copy is drawn again alone; an
    /// episode, fragment or group draw starts over (asking `sink` for storage again).
    /// Either way a unit never comes back with rows of two items.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Reader, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("obs", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).episodic();
    /// let mut writer = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// let mut reader = Reader::open(dir.path().join("b"))?; // usually another process
    /// writer.add_reset(&[Column::scalar("obs", &0.0f32)])?;
    /// for t in 1..=5 {
    ///     writer.add_step(&[Column::scalar("obs", &(t as f32))], t == 5, false)?;
    /// }
    /// let request = Request::transitions(8, &["obs"]).nstep(2, 0.5);
    /// writer.reseed(7);
    /// reader.reseed(7);
    /// let (w, r) = (writer.sample(request.clone())?, reader.sample(request)?);
    /// assert_eq!(w.indices(), r.indices());
    /// assert_eq!(w.get::<f32>("next_obs")?, r.get::<f32>("next_obs")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// ```
    /// use replaystore::{Batch, Column, Config, DType, Reader, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut writer = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100))?;
    /// writer.add_batch(&[Column::new("x", &[7u32, 8, 9])])?;
    /// let mut reader = Reader::open(dir.path().join("b"))?;
    /// let mut batch = Batch::default();
    /// reader.sample_into(16, &mut batch)?; // reused by every later draw of 16
    /// assert!(batch.get::<u32>("x")?.iter().all(|x| [7, 8, 9].contains(x)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_into<'r>(
        &mut self,
        request: impl Into<Request<'r>>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let request = request.into();
        request.check()?;
        let done = match request.unit {
            Unit::Rows => sample_rows(self, &request, sink),
            _ => self.sample_units_racing(&request, sink),
        };
        self.tally_draws();
        done
    }

    /// Adds the draws this reader has not yet told the progress page to its reader
    /// draws, which `info` and the writer's count include. A reader that may not write
    /// the page (read-only file or mount, a page linked elsewhere) keeps them in its own
    /// `stats()` only; a snapshot's reader has no page.
    pub(in crate::handle) fn tally_draws(&mut self) {
        let sampled = self.rows.draws.sampled;
        let new = sampled.saturating_sub(self.tallied);
        if let Some(p) = &self.progress
            && new > 0
        {
            p.add_reader_draws(new);
        }
        self.tallied = sampled;
    }

    /// Draws the units of `request` (transitions, sequences, episodes, fragments,
    /// groups) from the rows live now, with the writer's code over the tables this
    /// reader follows. A transition or sequence the writer overwrites mid-copy is drawn
    /// again alone (`unit_lost`); any other lost race makes the whole draw start again
    /// from where the writer is then. A unit is never served with rows of two items;
    /// the RNG goes on from where a lost draw left it. A draw that finds too few units
    /// (`Empty`, `InvalidSample`) while the writer's head moved during that look is also
    /// started again: the writer evicted most of what the look had read (a slow look at
    /// a small ring can be left with part of one episode), so what it holds now is
    /// looked at; after `RACE_TRIES` such looks the last one's error is returned.
    fn sample_units_racing(&mut self, request: &Request<'_>, sink: &mut dyn Sink) -> Result<()> {
        let mut too_few = None;
        for _ in 0..RACE_TRIES {
            self.refresh_files()?;
            let head_before = self.rows.head;
            let suspect = self.followed.read_new_rows(&self.rows, self.epoch);
            if !self.head_moved_on() {
                continue;
            }
            let head = self.rows.head;
            (self.followed).settle(&self.rows, head, suspect, self.life.as_ref())?;
            let sampled = self.rows.draws.sampled;
            match sample_units(self, request, sink) {
                Err(Error::BadItem { index, .. } | Error::Evicted { index, .. })
                    if self.lost_race(index)? =>
                {
                    self.rows.draws.sampled = sampled;
                }
                Err(e @ (Error::Empty | Error::InvalidSample(_))) if head > head_before => {
                    self.rows.draws.sampled = sampled;
                    too_few = Some(e);
                }
                done => return done,
            }
        }
        Err(too_few.unwrap_or_else(|| self.lapped()))
    }

    /// Loads the writer's head again and takes it as this reader's (the tail stays as
    /// loaded last): rows read since the last look and now below it may have been torn,
    /// and are evicted. False when that cannot be done: the files were replaced, or the
    /// writer has passed every row this reader knows of; look again from the start.
    fn head_moved_on(&mut self) -> bool {
        let Some(p) = &self.progress else {
            return true;
        };
        // After every row read above: the writer moves its head before it overwrites.
        fence(Ordering::Acquire);
        let head = p.load(HEAD_OFF);
        if p.load(EPOCH_OFF) != self.epoch || head > self.rows.tail {
            return false;
        }
        let rows = &mut self.rows;
        if head > rows.head {
            rows.head = head;
            rows.head_slot = head % rows.superblock.capacity;
            rows.cleared = rows.cleared.min(head);
        }
        true
    }

    /// Draws `indices.len()` live indices by priority with their weights, counting
    /// them, and draws again those the writer has removed meanwhile.
    fn draw_priority(
        &mut self,
        spec: &PrioritySpec,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        let live = self.rows.live_range();
        let rng = &mut self.rows.draws.rng;
        match &mut self.tree {
            // A snapshot: its own priorities, which never change, nor do its rows.
            ReadTree::Frozen(p) => p.draw(rng, spec, live, indices, weights)?,
            ReadTree::Shared(p) => p.draw(rng, spec, live, indices, weights)?,
            ReadTree::Absent => {
                return Err(Error::NotPrioritized {
                    dir: self.rows.dir.clone(),
                });
            }
        }
        self.rows.draws.sampled += indices.len() as u64;
        self.redraw_removed(spec, indices, weights)
    }

    /// `(total, smallest non-zero leaf)` of the priorities as they read now: what a
    /// draw across several buffers splits by (`total`) and weighs against (the
    /// smallest leaf of all). A buffer without priorities is `NotPrioritized`.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Reader, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let config = Config::new(schema, 8).prioritized(1.0, 0.0);
    /// let mut writer = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// writer.add_batch(&[Column::new("x", &[1u32, 2])])?;
    /// writer.update_priorities(&[0, 1], &[2.0f32, 0.5])?;
    /// let mut reader = Reader::open(dir.path().join("b"))?;
    /// assert_eq!(reader.priority_mass()?, (2.5, 0.5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn priority_mass(&mut self) -> Result<(f64, f64)> {
        self.refresh()?;
        match &mut self.tree {
            ReadTree::Shared(p) => Ok(p.mass()),
            // A snapshot reads its own frozen tree.
            ReadTree::Frozen(p) => {
                let s = p.summary();
                Ok((s.total, s.min_leaf))
            }
            ReadTree::Absent => Err(Error::NotPrioritized {
                dir: self.rows.dir.clone(),
            }),
        }
    }

    /// Gathers the drawn rows into `outs`. A drawn item that the writer overwrites before
    /// it is copied, and any later draw the head has passed by then, is drawn again
    /// `how` it was drawn, from the items live then; the rows copied before stay.
    /// `weights` is empty for a uniform draw.
    fn gather_drawn_into(
        &mut self,
        how: Draw<'_>,
        indices: &mut [u64],
        weights: &mut [f32],
        outs: &mut [&mut [u8]],
    ) -> Result<()> {
        let mut from = 0;
        for _ in 0..RACE_TRIES.saturating_add(indices.len()) {
            let rows = &self.rows;
            let lost = match rows.ring.gather_from(rows.live_rows(), indices, outs, from) {
                Ok(()) => return Ok(()),
                // A stamp that moved may be the writer's; a checksum that failed under a
                // steady stamp never is.
                Err(Missed::Row(m)) if matches!(m.found, Found::Stamp(_)) => m,
                Err(missed) => return Err(self.rows.stamp_error(indices, missed)),
            };
            let index = indices.get(lost.position).copied().unwrap_or(0);
            if !self.lost_race(index)? {
                return Err(self.rows.stamp_error(indices, Missed::Row(lost)));
            }
            // Live now, or drawn again: the head may have passed an index, and a restore
            // may have moved the tail back below it.
            let live = self.rows.live();
            for p in lost.position..indices.len() {
                let stale = indices.get(p).is_some_and(|i| !live.contains(i));
                if p == lost.position || stale {
                    self.draw_again(how, indices, weights, p)?;
                }
            }
            from = lost.position;
        }
        Err(self.lapped())
    }

    /// Draws position `p` of `indices` (and `weights`) again, `how` it was drawn.
    fn draw_again(
        &mut self,
        how: Draw<'_>,
        indices: &mut [u64],
        weights: &mut [f32],
        p: usize,
    ) -> Result<()> {
        let live = self.rows.live_range();
        let rows = &mut self.rows;
        // An item removed since (or at) the first draw is drawn again too: the stamp
        // race said nothing of the item's state word.
        let removed = |i: u64| self.life.as_ref().is_some_and(|l| l.is_removed(i));
        let mut tries = 0;
        let (index, weight) = loop {
            tries += 1;
            let (index, weight) = match (how, &mut self.tree) {
                (Draw::Uniform(spec), _) => {
                    let i = draw_one(&mut rows.draws.rng, spec, live.head, live.tail, indices)?;
                    (i, None)
                }
                (Draw::Prioritized(spec), ReadTree::Shared(pr)) => {
                    let (mut i, mut w) = ([0u64], [0f32]);
                    let one = PrioritySpec::new(1, spec.beta);
                    pr.draw(&mut rows.draws.rng, &one, live, &mut i, &mut w)?;
                    (i.first().copied().unwrap_or(0), w.first().copied())
                }
                (Draw::Prioritized(spec), ReadTree::Frozen(pr)) => {
                    let (mut i, mut w) = ([0u64], [0f32]);
                    let one = PrioritySpec::new(1, spec.beta);
                    pr.draw(&mut rows.draws.rng, &one, live, &mut i, &mut w)?;
                    (i.first().copied().unwrap_or(0), w.first().copied())
                }
                (Draw::Prioritized(_), ReadTree::Absent) => {
                    return Err(Error::NotPrioritized {
                        dir: rows.dir.clone(),
                    });
                }
            };
            if !removed(index) {
                break (index, weight);
            }
            if tries > RACE_TRIES {
                return Err(Error::Empty);
            }
        };
        if let Some(x) = indices.get_mut(p) {
            *x = index;
        }
        if let (Some(x), Some(w)) = (weights.get_mut(p), weight) {
            *x = w;
        }
        Ok(())
    }

    /// Draws again, by priority, each of `indices` whose item is removed: the writer
    /// zeroes a removed item's leaf, but this reader's descent may have begun before
    /// (a removal after the word was loaded is ordered after the draw).
    fn redraw_removed(
        &mut self,
        spec: &PrioritySpec,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        if self.life.is_none() {
            return Ok(());
        }
        let how = Draw::Prioritized(spec);
        let removed = |r: &Reader, i: u64| r.life.as_ref().is_some_and(|l| l.is_removed(i));
        for p in 0..indices.len() {
            let mut tries = 0;
            while indices.get(p).is_some_and(|&i| removed(self, i)) {
                tries += 1;
                if tries > RACE_TRIES {
                    return Err(self.lapped());
                }
                self.draw_again(how, indices, weights, p)?;
            }
        }
        Ok(())
    }

    /// Gathers as for a ring larger than memory, whatever its size (tests).
    #[cfg(test)]
    pub(crate) fn force_page_in(&mut self) {
        self.rows.ring.force_page_in();
    }

    /// The items at `indices`, checked as [`crate::ReplayBuffer::get_many`] checks them
    /// (`sample(Request::at(indices))`). An index the writer has evicted is `Evicted`.
    pub fn get_many(&mut self, indices: &[u64]) -> Result<Batch> {
        self.sample(Request::at(indices))
    }

    /// The item at a logical index, as a batch of one.
    pub fn get(&mut self, index: u64) -> Result<Batch> {
        self.get_many(&[index])
    }
}

/// The epoch of the progress page once it is even: an odd epoch means a writer is
/// replacing files one by one, which is waited out (at most [`CHANGING_WAIT`], in case
/// that writer died part way; its next open evens it). An odd epoch the reader has
/// already waited out and mapped at (`mapped`) is not waited for again.
fn wait_steady(p: &ProgressMap, mapped: Option<u64>) -> u64 {
    let start = Instant::now();
    loop {
        let epoch = p.load(EPOCH_OFF);
        let steady = epoch.is_multiple_of(2) || Some(epoch) == mapped;
        if steady || start.elapsed() > CHANGING_WAIT {
            return epoch;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How a sample drew its rows, so a lost one is drawn again the same way.
#[derive(Clone, Copy)]
enum Draw<'a> {
    Uniform(&'a SampleSpec),
    Prioritized(&'a PrioritySpec),
}

/// The priorities of a prioritized buffer, as its files are named now.
fn open_priorities(rows: &Rows) -> Result<ReadTree> {
    let sb = &rows.superblock;
    Ok(match sb.prioritized {
        true => ReadTree::Shared(SharedPriorities::open(&*rows.io, &rows.dir, sb)?),
        false => ReadTree::Absent,
    })
}

/// The files `access` reads with `pread`, if it does: those `ring` mapped, opened again
/// by name. A file replaced in between (a restore) has other stamps, which the reads
/// catch as a lost race, and then the epoch has moved and everything is opened again.
fn row_files(rows: &Rows, ring: &Ring, access: RowAccess) -> Result<Option<RowFiles>> {
    match access {
        RowAccess::Mapped => Ok(None),
        RowAccess::Pread => RowFiles::open(
            rows.io.clone(),
            ring.segments(),
            rows.superblock.row_stride as usize,
        )
        .map(Some),
    }
}

/// The segment files of `rows` mapped again, as they are named now.
fn map_ring(rows: &Rows) -> Result<Ring> {
    let sb = &rows.superblock;
    let segments = (0..sb.segment_count)
        .map(|n| {
            storage::open_segment(
                &*rows.io,
                &rows.dir,
                &storage::SegmentSet::rows(sb),
                n,
                Access::Read,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ring::new(
        segments,
        rows.ring.layout().clone(),
        sb.capacity,
        sb.segment_slots,
    )
}

/// A reader's rows draw: picked from the items live now, gathered with its race
/// handling.
impl DrawsRows for Reader {
    fn rows(&self) -> &Rows {
        &self.rows
    }

    fn rows_mut(&mut self) -> &mut Rows {
        &mut self.rows
    }

    fn drawable(&self) -> u64 {
        self.len()
    }

    fn value_race(&mut self, index: u64) -> Result<bool> {
        self.lost_race(index)
    }

    fn ready_to_draw(&mut self, request: &Request<'_>, n: u64) -> Result<()> {
        if request.remove {
            return Err(Error::ReadOnly {
                dir: self.rows.dir.clone(),
                op: "removing items (a reader writes nothing: remove through the writer)",
            });
        }
        if request.draws() && n > 0 {
            self.admit_draw(n)?;
        }
        Ok(())
    }

    /// Picks the rows of `request` from those live now into `indices` (and `weights`),
    /// advancing this reader's RNG, without gathering.
    fn pick_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        self.refresh_files()?;
        self.ready_to_draw(request, request.n as u64)?;
        let life = self.life.as_ref();
        let Some(spec) = (self.rows).pick_unless_priority(request, life, indices, weights)? else {
            return Ok(());
        };
        self.draw_priority(&spec, indices, weights)
    }

    /// Gathers the rows `pick_rows` picked for `request` into `outs` (one per field,
    /// `indices.len()` rows each). A picked item the writer overwrites before it is
    /// copied is picked again the same way; a given index it evicted is `Evicted`.
    fn gather_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut [u64],
        weights: &mut [f32],
        outs: &mut [&mut [u8]],
    ) -> Result<()> {
        match request.pick {
            Pick::Uniform => {
                let spec = SampleSpec::of(request);
                self.gather_drawn_into(Draw::Uniform(&spec), indices, &mut [], outs)
            }
            Pick::Priority { beta } => match self.tree {
                ReadTree::Frozen(_) => self.rows.gather_into(indices, outs),
                _ => {
                    let spec = PrioritySpec::of(request, beta);
                    self.gather_drawn_into(Draw::Prioritized(&spec), indices, weights, outs)
                }
            },
            // The oldest items a writer passes mid-copy are gone: `Evicted`, as for a
            // given index (the caller asks again for the oldest now).
            Pick::Given(_) | Pick::Oldest => self.retrying(|rows| rows.gather_into(indices, outs)),
        }
    }
}

/// A reader's units draw: the writer's code, over the tables this reader follows (see
/// `follow`), brought up to date by `sample_units_racing` before each draw.
impl DrawsUnits for Reader {
    fn episode_table(&self) -> Result<&Episodes> {
        self.followed.episodes().ok_or_else(|| Error::NotEpisodic {
            dir: self.rows.dir.clone(),
        })
    }

    fn fragments(&mut self) -> Result<&Fragments> {
        let dir = &self.rows.dir;
        (self.followed.fragments()).ok_or_else(|| {
            Error::InvalidSample(format!(
                "{} does not keep fragments (create it with Config::fragments)",
                dir.display()
            ))
        })
    }

    fn draw_by_priority(
        &mut self,
        spec: &PrioritySpec,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        self.draw_priority(spec, indices, weights)
    }

    fn run_masses(&mut self, runs: &[(u64, u64)], masses: &mut Vec<f64>) -> Result<()> {
        match &mut self.tree {
            ReadTree::Shared(p) => masses.extend(runs.iter().map(|&(i, n)| p.run_mass(i, n))),
            ReadTree::Frozen(p) => masses.extend(runs.iter().map(|&(i, n)| p.mass(i, n))),
            ReadTree::Absent => {
                return Err(Error::NotPrioritized {
                    dir: self.rows.dir.clone(),
                });
            }
        }
        Ok(())
    }

    fn unit_scratch(&mut self) -> &mut UnitArrays {
        &mut self.units
    }

    fn removed(&self, index: u64) -> bool {
        self.is_removed(index)
    }

    fn keeps_states(&self) -> bool {
        self.life.is_some()
    }

    /// A stamp that moved under a row the writer's head has since passed is a lost
    /// race: this reader catches up with the writer (the tables read the rows added
    /// since and forget those the head passed, so the live window stays as wide as the
    /// writer's) and the unit is drawn again; the units copied before stay. Anything
    /// else is an error, which `sample_units_racing` sorts into a race (files replaced,
    /// or the writer passed every row this reader knew) or damage.
    fn unit_lost(&mut self, index: u64, found: Found) -> Result<()> {
        let error = |r: &Reader| Err(r.rows.row_error(index, found));
        if !matches!(found, Found::Stamp(_)) || self.refresh_files()? {
            return error(self);
        }
        if index >= self.rows.head {
            return error(self);
        }
        let suspect = self.followed.read_new_rows(&self.rows, self.epoch);
        if !self.head_moved_on() {
            return error(self);
        }
        let head = self.rows.head;
        (self.followed).settle(&self.rows, head, suspect, self.life.as_ref())
    }

    fn pick_groups(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        offsets: &mut Vec<u64>,
    ) -> Result<()> {
        let life = self.life.as_ref();
        self.rows.pick_groups(request, life, indices, offsets)
    }
}
