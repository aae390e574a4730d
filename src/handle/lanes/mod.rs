//! Lanes: one buffer made of several rings, each with its own writer, sampled as one.
//!
//! Lane K is an ordinary one-ring buffer in `lane-K/` whose logical indices start at
//! `K << 56` (`format::lanes`), so an index says which lane holds it, and everything a
//! one-ring buffer does (recovery, snapshots, readers, the priority owner, `verify`)
//! holds for each lane unchanged. What this module adds is the view of all lanes as
//! one buffer: rows routed to lanes by id, draws split over the lanes by their sizes
//! (uniform) or their priority mass (prioritized), and updates routed back. Splitting
//! `n` draws by a multinomial over the lanes and drawing within each lane gives exactly
//! the distribution of `n` draws over all items at once. See
//! docs/decisions/04-lanes.md.

mod group;
mod lane;
mod split;
mod state;

pub use group::{BufferGroup, GroupState};
pub use lane::{Lane, PriorityLane};
use split::{split_by_mass, split_uniform};
pub use state::LanesState;

use std::ops::Range;
use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::{Actor, Config, PriorityOwner, Reader, ReplayBuffer, Role, Stats};
use crate::batch::Batch;
use crate::column::{Column, NameCache, match_columns, match_var_columns};
use crate::draw::{
    DrawsRows, GroupIndex, Picked, Rows, UnitValues, VALUE_TRIES, pick_from_groups, put_values_of,
};
use crate::error::foreign::Kind;
use crate::error::{Error, Result};
use crate::format::lanes::{LanesFile, MAX_LANES, first_index, lane_of};
use crate::parts::priorities::{Priority, PrioritySpec, PriorityUpdate, check_update_lengths};
use crate::request::{Pick, Request};
use crate::schema::Schema;
use crate::sink::{Filled, Layout, Own, Sink, check_rows};
use crate::storage::io::{self, Io, IoRef};
use crate::storage::{self, Manifest};

/// A buffer made of lanes (Tianshou's `VectorReplayBuffer`): `L` rings of
/// `capacity / L` items (rounded up), each with its own writer lock, so `L` actor
/// processes add at once, sampled as one buffer. Lane `K`'s logical indices start at
/// `K << 56`; [`Lanes::lane_edges`] gives each lane's live range, and an episode never
/// crosses lanes (each lane keeps its own).
///
/// Who may do what, each from any process:
/// - [`Lanes::open`]: writes every lane (and owns every lane's priorities) in one
///   process, with [`Lanes::add_batch`] routing rows to lanes by id.
/// - [`Lanes::open_lane`]: one lane's writer, an ordinary [`ReplayBuffer`]; a second
///   writer on that lane is `Locked`. [`Lanes::open_lane_actor`] leaves the lane's
///   priorities to the owner.
/// - [`Lanes::open_reader`]: samples all lanes (uniformly, or by priority with the
///   trees the lane writers or the owner keep) and never writes.
/// - [`Lanes::open_owner`]: the learner that samples by priority and updates while
///   actors add to their lanes; a second owner is `Locked`.
///
/// Rows of a sample come grouped by lane, in lane order.
///
/// ```
/// use replaystore::{Column, Config, DType, Lanes, Schema};
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
/// let mut lanes = Lanes::create(dir.path().join("v"), Config::new(schema, 100), 4)?;
/// // One step from each of four environments, and two more from env 2.
/// let idx = lanes.add_batch(&[Column::new("x", &[10u32, 11, 12, 13, 14, 15])], &[0, 1, 2, 3, 2, 2])?;
/// assert_eq!(Lanes::lane_of(idx[4]), 2);
/// assert_eq!(lanes.len(), 6);
/// assert_eq!(lanes.lane_edges()[2].clone().count(), 3);
/// let batch = lanes.sample(32)?;
/// for (&i, &x) in batch.indices().iter().zip(batch.get::<u32>("x")?) {
///     assert_eq!(lanes.get(i)?.get::<u32>("x")?[0], x);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Lanes<L: Lane = ReplayBuffer> {
    dir: PathBuf,
    schema: Schema,
    /// Never empty.
    lanes: Vec<L>,
    /// Rows per lane of the draw in progress.
    counts: Vec<usize>,
    /// What the draw in progress picked, all lanes' in output order.
    picked: Picked,
    /// What one lane picked, before it joins `picked`.
    lane_picked: Picked,
}

impl Lanes<ReplayBuffer> {
    /// The lane writer holding `index`.
    fn lane_for(&self, index: u64) -> Result<&ReplayBuffer> {
        let k = self.lane_index(index)?;
        self.lane(k)
    }

    /// The lane an index belongs to (its top byte), for a `Lanes` opened any way.
    pub fn lane_of(index: u64) -> u64 {
        lane_of(index)
    }

    /// Creates a buffer of `lanes` lanes in `dir` (absent or empty). Each lane holds
    /// `config`'s capacity divided by `lanes`, rounded up, with everything else as
    /// `config` says; a seed in `config` seeds lane `K` with a value derived from it.
    pub fn create(dir: impl AsRef<Path>, config: Config, lanes: usize) -> Result<Lanes> {
        let dir = storage::resolve_root(dir.as_ref());
        let count = u32::try_from(lanes)
            .ok()
            .filter(|l| (1..=MAX_LANES).contains(l))
            .ok_or_else(|| Error::InvalidConfig {
                field: "lanes",
                problem: format!("{lanes} is not in 1..={MAX_LANES}"),
            })?;
        if config.capacity < u64::from(count) {
            return Err(Error::InvalidConfig {
                field: "capacity",
                problem: format!(
                    "{} items for {count} lanes: each lane holds at least one, so the \
                     buffer would hold {count}",
                    config.capacity
                ),
            });
        }
        let io = config.io.clone().unwrap_or_else(io::os);
        crate::store::create_empty_dir(&*io, &dir)?;
        let lane_capacity = config.capacity.div_ceil(u64::from(count));
        let mut made = Vec::with_capacity(lanes);
        for k in 0..count {
            let mut c = config.clone();
            c.capacity = lane_capacity;
            // A chunk ring per lane, the declared bytes shared as the items are.
            c.heap_bytes = config.heap_bytes.map(|b| b.div_ceil(u64::from(count)));
            c.first_index = first_index(k);
            // Distinct streams per lane from one seed (the golden-ratio step of splitmix).
            c.seed = config
                .seed
                .map(|s| s.wrapping_add(u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            match ReplayBuffer::create(storage::lane_dir(&dir, k), c) {
                Ok(b) => made.push(b),
                Err(e) => {
                    remove_new_lanes(&*io, &dir, made);
                    return Err(e);
                }
            }
        }
        let file = LanesFile {
            lanes: count,
            uuid: crate::algo::entropy::uuid(),
            lane_capacity,
        };
        if let Err(e) = storage::write_lanes(&*io, &dir, &file) {
            remove_new_lanes(&*io, &dir, made);
            return Err(e);
        }
        Lanes::of(dir.clone(), made).ok_or(Error::NotABuffer { dir })
    }

    /// Opens every lane of the buffer in `dir` for writing, each recovered as
    /// [`ReplayBuffer::open`] recovers. A buffer of one ring opens as one lane.
    pub fn open(dir: impl AsRef<Path>) -> Result<Lanes> {
        Lanes::open_with(dir, io::os())
    }

    /// `open` through a given file-operation seam.
    pub fn open_with(dir: impl AsRef<Path>, io: IoRef) -> Result<Lanes> {
        let dir = storage::resolve_root(dir.as_ref());
        state::settle_restores(&*io, &lane_dirs(&io, &dir)?)?;
        let mut lanes = open_all(&dir, &io, |d, io| ReplayBuffer::open_with(d, io))?;
        lanes.drop_partial_snapshots()?;
        Ok(lanes)
    }

    /// Opens every lane for reading while their writers go on (see [`Reader`]).
    pub fn open_reader(dir: impl AsRef<Path>) -> Result<Lanes<Reader>> {
        open_all(dir.as_ref(), &io::os(), |d, io| Reader::open_with(d, io))
    }

    /// Takes ownership of every lane's priorities while actors add
    /// ([`Lanes::open_lane_actor`]); see [`PriorityOwner`].
    pub fn open_owner(dir: impl AsRef<Path>) -> Result<Lanes<PriorityOwner>> {
        open_all(dir.as_ref(), &io::os(), |d, io| {
            PriorityOwner::open_with(d, io)
        })
    }

    /// Opens lane `lane` alone for writing: the one writer of that lane, in its own
    /// process. Its indices are the lane's global ones.
    pub fn open_lane(dir: impl AsRef<Path>, lane: usize) -> Result<ReplayBuffer> {
        open_one(dir.as_ref(), lane, |d| ReplayBuffer::open(d))
    }

    /// Opens lane `lane` alone for adding while a [`Lanes::open_owner`] process owns the
    /// priorities (see [`ReplayBuffer::open_actor`]).
    pub fn open_lane_actor(dir: impl AsRef<Path>, lane: usize) -> Result<ReplayBuffer<Actor>> {
        open_one(dir.as_ref(), lane, |d| ReplayBuffer::open_actor(d))
    }

    /// The lane of writer `lane`, to add episodes (`add_reset` / `add_step`) or use any
    /// other one-ring call; its indices are global.
    pub fn lane_mut(&mut self, lane: usize) -> Result<&mut ReplayBuffer> {
        let (dir, count) = (self.dir.clone(), self.lanes.len());
        self.lanes
            .get_mut(lane)
            .ok_or_else(|| no_such_lane(dir, lane as u64, None, count))
    }

    /// Adds one item to lane `lane`; returns its index.
    pub fn add(&mut self, lane: usize, columns: &[Column<'_>]) -> Result<u64> {
        self.lane_mut(lane)?.add(columns)
    }

    /// Adds row `r` of `columns` (each `[rows, field shape...]`; variable-length ones one
    /// value per row, with offsets) to lane `lanes[r]`, and returns the rows' indices in
    /// order. The columns, every value, each lane's share of the values against its
    /// chunk ring's size, and the lane ids are checked before anything is added; each
    /// run of rows for one lane is one `add_batch` of that lane (so a lane that would
    /// have to evict items before capacity for room, without `evict_for_room`, refuses
    /// its run after the runs before it were added).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Lanes, Schema, VarKind};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("r", DType::F32, &[]).variable("obs", VarKind::Str, None).build()?;
    /// let mut lanes = Lanes::create(dir.path().join("v"), Config::new(schema, 100), 2)?;
    /// let (text, offsets) = (b"e2e4d7d5g1f3", [0u64, 4, 8, 12]);
    /// let idx = lanes.add_batch(
    ///     &[Column::new("r", &[1.0f32, 2.0, 3.0]), Column::values("obs", DType::U8, text, &offsets)],
    ///     &[0, 1, 0],
    /// )?;
    /// let got = lanes.get_many(&idx)?;
    /// assert_eq!([got.text("obs", 0)?, got.text("obs", 1)?, got.text("obs", 2)?], ["e2e4", "d7d5", "g1f3"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_batch(&mut self, columns: &[Column<'_>], lanes: &[usize]) -> Result<Vec<u64>> {
        let schema = self.schema();
        let mut order = Vec::new();
        let rows = match_columns(schema, columns, true, &mut order, &mut NameCache::new())?;
        let mut var_order = Vec::new();
        let first = schema.fields().first().map(|f| (rows, f.name()));
        let rows =
            match_var_columns(schema, columns, first, usize::MAX, false, &mut var_order)?.max(rows);
        let var: Vec<&Column<'_>> = var_order.iter().filter_map(|&p| columns.get(p)).collect();
        if lanes.len() != rows {
            return Err(Error::CountMismatch {
                what: "add_batch: lane ids and rows",
                expected: rows,
                got: lanes.len(),
            });
        }
        // (column, bytes per row, field shape) in schema order.
        let fields: Vec<(&Column<'_>, usize, Vec<usize>)> = schema
            .fields()
            .iter()
            .zip(&order)
            .filter_map(|(f, &pos)| Some((columns.get(pos)?, f.bytes(), f.shape().to_vec())))
            .collect();
        if let Some(&bad) = lanes.iter().find(|&&k| k >= self.lanes.len()) {
            return Err(no_such_lane(
                self.dir.clone(),
                bad as u64,
                None,
                self.lanes.len(),
            ));
        }
        for &k in lanes {
            if let Some(b) = self.lanes.get(k) {
                b.store.writable()?;
            }
        }
        // Each lane's values must fit its chunk ring, or no lane adds any.
        if !var.is_empty() {
            let mut bytes = vec![0u64; self.lanes.len()];
            for (r, &k) in lanes.iter().enumerate() {
                let row: u64 = var.iter().map(|c| c.value_of(r).len() as u64).sum();
                if let Some(b) = bytes.get_mut(k) {
                    *b += row;
                }
            }
            for (k, (&need, lane)) in bytes.iter().zip(&self.lanes).enumerate() {
                if need > lane.value_room() {
                    return Err(Error::ValueTooLong {
                        field: format!("(the variable-length values for lane {k})"),
                        row: 0,
                        len: usize::try_from(need).unwrap_or(usize::MAX),
                        max: usize::try_from(lane.value_room()).unwrap_or(usize::MAX),
                    });
                }
            }
        }
        let mut out = Vec::with_capacity(rows);
        let mut r = 0;
        while let Some(&k) = lanes.get(r) {
            let end = lanes
                .iter()
                .skip(r)
                .position(|&x| x != k)
                .map_or(rows, |n| r + n);
            let mut run: Vec<Column<'_>> = fields
                .iter()
                .map(|(c, size, shape)| {
                    let mut dims = vec![end - r];
                    dims.extend_from_slice(shape);
                    let bytes = c.bytes().get(r * size..end * size).unwrap_or(&[]);
                    Column::from_bytes(c.name(), c.dtype(), &dims, bytes)
                })
                .collect();
            // The run's values, with offsets from its first row's.
            let offsets: Vec<Vec<u64>> = (var.iter())
                .map(|c| {
                    let mut at = 0u64;
                    std::iter::once(0)
                        .chain((r..end).map(|i| {
                            at += c.value_of(i).len() as u64;
                            at
                        }))
                        .collect()
                })
                .collect();
            for (c, off) in var.iter().zip(&offsets) {
                let (from, to) = (c.value_start(r), c.value_start(end));
                let bytes = c.bytes().get(from..to).unwrap_or(&[]);
                run.push(Column::values(c.name(), c.dtype(), bytes, off));
            }
            let lane = self.lane_mut(k)?;
            out.extend(lane.add_batch(&run)?);
            r = end;
        }
        Ok(out)
    }

    /// The episode holding `index` (episodic lanes).
    pub fn episode(&self, index: u64) -> Result<crate::EpisodeInfo> {
        self.lane_for(index)?.episode(index)
    }

    /// The step before `index` in its episode (Tianshou's `prev`; see
    /// [`ReplayBuffer::prev`]).
    pub fn prev(&self, index: u64) -> Result<u64> {
        self.lane_for(index)?.prev(index)
    }

    /// The step after `index` in its episode (see [`ReplayBuffer::next`]).
    pub fn next(&self, index: u64) -> Result<u64> {
        self.lane_for(index)?.next(index)
    }

    /// Makes every lane's items (and priorities) survive a power loss.
    pub fn flush(&mut self) -> Result<()> {
        self.lanes.iter_mut().try_for_each(ReplayBuffer::flush)
    }

    /// Empties every lane (indices are never reused).
    pub fn clear(&mut self) -> Result<()> {
        self.lanes.iter_mut().try_for_each(ReplayBuffer::clear)
    }

    /// Removes the live items at `indices` from whichever lanes hold them (see
    /// [`ReplayBuffer::remove`]): every index is checked live first, and then each lane
    /// removes its own. Returns how many were removed now.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Lanes, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut lanes = Lanes::create(dir.path().join("v"), Config::new(schema, 8).item_states(), 2)?;
    /// let idx = lanes.add_batch(&[Column::new("x", &[1u32, 2, 3, 4])], &[0, 1, 0, 1])?;
    /// assert_eq!(lanes.remove(&[idx[1], idx[2]])?, 2);
    /// assert_eq!(lanes.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove(&mut self, indices: &[u64]) -> Result<u64> {
        let mut by_lane: Vec<Vec<u64>> = vec![Vec::new(); self.lanes.len()];
        for &i in indices {
            let k = self.lane_index(i)?;
            self.lane(k)?.rows().check_live(&[i])?;
            if let Some(v) = by_lane.get_mut(k) {
                v.push(i);
            }
        }
        let mut removed = 0;
        for (lane, is) in self.lanes.iter_mut().zip(&by_lane) {
            if !is.is_empty() {
                removed += lane.remove(is)?;
            }
        }
        Ok(removed)
    }

    /// Counters and sizes of each lane.
    pub fn stats(&self) -> Vec<Stats> {
        self.lanes.iter().map(ReplayBuffer::stats).collect()
    }

    /// Closes every lane cleanly; the first error is returned after all are closed.
    pub fn close(self) -> Result<()> {
        close_all(self.lanes, ReplayBuffer::close)
    }
}

impl Lanes<PriorityOwner> {
    /// Makes the priorities of every lane durable (see [`PriorityOwner::flush`]).
    pub fn flush(&mut self) -> Result<()> {
        self.lanes.iter_mut().try_for_each(PriorityOwner::flush)
    }

    /// Gives up ownership of every lane's priorities, flushed.
    pub fn close(self) -> Result<()> {
        close_all(self.lanes, PriorityOwner::close)
    }
}

impl<L: Lane> Lanes<L> {
    /// `None` for no lanes at all.
    fn of(dir: PathBuf, lanes: Vec<L>) -> Option<Lanes<L>> {
        let schema = lanes.first()?.rows().schema.clone();
        let counts = vec![0; lanes.len()];
        Some(Lanes {
            dir,
            schema,
            lanes,
            counts,
            picked: Picked::default(),
            lane_picked: Picked::default(),
        })
    }

    /// One more lane, `lane` (its number the count so far): a group's new member.
    fn push_lane(&mut self, lane: L) {
        self.lanes.push(lane);
        self.counts.push(0);
    }

    /// The buffer directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many lanes.
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    /// Lane `lane` as opened here.
    pub fn lane(&self, lane: usize) -> Result<&L> {
        self.lanes
            .get(lane)
            .ok_or_else(|| no_such_lane(self.dir.clone(), lane as u64, None, self.lanes.len()))
    }

    /// The schema (every lane's).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Items all lanes hold together.
    pub fn capacity(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.rows().superblock.capacity)
            .sum()
    }

    /// Items live in all lanes, as of the last call (or [`Lanes::refresh`]); with
    /// item states, not counting removed ones.
    pub fn len(&self) -> u64 {
        self.lanes.iter().map(DrawsRows::drawable).sum()
    }

    /// Whether no lane holds an item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each lane's live indices, in lane order (Tianshou's `subbuffer_edges`, as index
    /// ranges: lane `K`'s lie in `K << 56 ..`).
    pub fn lane_edges(&self) -> Vec<Range<u64>> {
        self.lanes.iter().map(|l| l.rows().live()).collect()
    }

    /// Looks at where every lane's writer is now (a reader), and catches the priorities
    /// up (the owner). Every sampling and reading call does this first.
    pub fn refresh(&mut self) -> Result<()> {
        self.lanes.iter_mut().try_for_each(Lane::refresh_lane)
    }

    /// Restarts the sampling RNG of every lane from `seed` (reproducible draws).
    pub fn reseed(&mut self, seed: u64) {
        for (k, l) in self.lanes.iter_mut().enumerate() {
            l.reseed_lane(seed.wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        }
    }

    fn lane_index(&self, index: u64) -> Result<usize> {
        let k = lane_of(index);
        usize::try_from(k)
            .ok()
            .filter(|&k| k < self.lanes.len())
            .ok_or_else(|| no_such_lane(self.dir.clone(), k, Some(index), self.lanes.len()))
    }

    /// What each live item at `indices` is (removed and why, uses), from whichever
    /// lane holds it, in the order given. `Evicted` for an index not live;
    /// `NoItemStates` for lanes without item states.
    ///
    /// ```
    /// use replaystore::{Cause, Column, Config, DType, Lanes, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut lanes = Lanes::create(dir.path().join("v"), Config::new(schema, 8).item_states(), 2)?;
    /// let idx = lanes.add_batch(&[Column::new("x", &[1u32, 2])], &[0, 1])?;
    /// lanes.remove(&[idx[1]])?;
    /// let states = lanes.item_states(&idx)?;
    /// assert_eq!((states[0].removed, states[1].removed), (None, Some(Cause::Explicit)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn item_states(&mut self, indices: &[u64]) -> Result<Vec<crate::ItemState>> {
        // One call per lane (a reader lane looks at its writer once), then each state
        // back at its index's position.
        let mut by_lane: Vec<(Vec<usize>, Vec<u64>)> = vec![Default::default(); self.lanes.len()];
        for (p, &i) in indices.iter().enumerate() {
            let k = self.lane_index(i)?;
            if let Some((ps, is)) = by_lane.get_mut(k) {
                ps.push(p);
                is.push(i);
            }
        }
        let mut out = vec![crate::ItemState::default(); indices.len()];
        for (lane, (ps, is)) in self.lanes.iter_mut().zip(&by_lane) {
            if is.is_empty() {
                continue;
            }
            for (&p, s) in ps.iter().zip(lane.lane_item_states(is)?) {
                if let Some(slot) = out.get_mut(p) {
                    *slot = s;
                }
            }
        }
        Ok(out)
    }

    /// Counters and sizes of each lane as this handle sees them now, however the lanes
    /// were opened (a reader's and the owner's `sampled` count their own draws).
    pub fn lane_stats(&mut self) -> Result<Vec<Stats>> {
        self.lanes.iter_mut().map(Lane::lane_stats).collect()
    }

    /// The split's RNG: lane 0's, so a writer's draws resume after a restart.
    fn split_rng(&mut self) -> Option<&mut ChaCha8Rng> {
        self.lanes.first_mut().map(|l| &mut l.rows_mut().draws.rng)
    }

    /// Draws as `request` says over all lanes into a new [`Batch`]: a `usize` is that
    /// many items drawn uniformly from all lanes' live items; [`Request::rows`] with
    /// `prioritized(beta)` draws by all lanes' priorities (importance weights against
    /// the smallest priority of all lanes, stratified over all lanes' mass if asked),
    /// `newest(k)` from the `k` newest items of each lane, without replacement no item
    /// twice across lanes; [`Request::at`] reads the items at given indices (any lanes).
    /// Drawn rows come grouped by lane, in lane order.
    pub fn sample<'r>(&mut self, request: impl Into<Request<'r>>) -> Result<Batch> {
        let mut batch = Batch::default();
        self.sample_into(request, &mut batch)?;
        Ok(batch)
    }

    /// [`Lanes::sample`] into `sink`: each lane gathers its share of the rows straight
    /// into its part of the sink's arrays, with no batch in between.
    ///
    /// ```
    /// use replaystore::{Batch, Column, Config, DType, Lanes, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut lanes = Lanes::create(dir.path().join("v"), Config::new(schema, 100), 2)?;
    /// lanes.add_batch(&[Column::new("x", &[10u32, 11, 12, 13])], &[0, 1, 0, 1])?;
    /// let mut batch = Batch::default();
    /// lanes.sample_into(8, &mut batch)?;
    /// for (&i, &x) in batch.indices().iter().zip(batch.get::<u32>("x")?) {
    ///     assert_eq!(lanes.get(i)?.get::<u32>("x")?[0], x);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_into<'r>(
        &mut self,
        request: impl Into<Request<'r>>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let request = request.into();
        request.check()?;
        request.rows_only(
            "lanes",
            "draw longer units from one lane (Lanes::lane_mut, Lanes::open_lane)",
        )?;
        self.refresh()?;
        let mut picked = std::mem::take(&mut self.picked);
        let mut tries = 0;
        let done = loop {
            let done = self.sample_picked(&request, &mut picked, sink);
            // An item a lane's writer in another process passed while its values were
            // read: a draw picks again (a given index is the caller's to retry).
            tries += 1;
            match done {
                Err(Error::Evicted { .. }) if request.draws() && tries < VALUE_TRIES => {
                    self.refresh()?;
                }
                other => break other,
            }
        };
        self.picked = picked;
        // Each lane's readers' draws go to that lane's progress page.
        self.lanes.iter_mut().for_each(Lane::tally_lane_draws);
        done
    }

    /// `sample_into` with the scratch vectors taken out of `self`.
    fn sample_picked(
        &mut self,
        request: &Request<'_>,
        picked: &mut Picked,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        check_rows(request.n, self.schema.item_bytes())?;
        if !request.group_by.is_empty() {
            let runs = self.pick_by_group(request, picked)?;
            return self.gather_picked(request, &runs, &[], picked, sink);
        }
        // Which lane fills which consecutive rows of the output, and by how much a
        // lane's weights are scaled to be against all lanes' smallest priority.
        let (runs, scales) = match request.pick {
            Pick::Given(indices) => (self.runs_of(indices)?, Vec::new()),
            Pick::Uniform => (self.split_uniform(request)?, Vec::new()),
            Pick::Priority { beta } => self.split_by_mass(request, beta)?,
            Pick::Oldest => {
                return Err(Error::InvalidSample(
                    "lanes have no one order of age: take the oldest of one lane \
                     (lane_mut(k).sample(Request::rows(n).oldest()))"
                        .into(),
                ));
            }
        };
        picked.indices.clear();
        picked.weights.clear();
        let mut lane_picked = std::mem::take(&mut self.lane_picked);
        for &(k, c) in &runs {
            let Some(lane) = self.lanes.get_mut(k) else {
                continue;
            };
            let from = picked.indices.len();
            let one = match request.pick {
                // The lane checks its share of given indices are live.
                Pick::Given(given) => Request::at(given.get(from..from + c).unwrap_or(&[])).into(),
                _ => Request { n: c, ..*request },
            };
            let (i, w) = (&mut lane_picked.indices, &mut lane_picked.weights);
            let done = lane.pick_rows(&one, i, w);
            if let Err(e) = done {
                self.lane_picked = lane_picked;
                return Err(e);
            }
            picked
                .indices
                .extend_from_slice(i.get(..c).ok_or(Error::Empty)?);
            picked.weights.extend_from_slice(w);
        }
        self.lane_picked = lane_picked;
        self.gather_picked(request, &runs, &scales, picked, sink)
    }

    /// Gathers the rows `picked` holds (grouped by lane as `runs` says) into `sink`,
    /// each lane's weights scaled by its entry of `scales` (none: unweighted).
    fn gather_picked(
        &mut self,
        request: &Request<'_>,
        runs: &[Run],
        scales: &[f32],
        picked: &mut Picked,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let n = picked.indices.len();
        let layout = Layout::of(&self.schema, request, n, n)?;
        let mut f = Filled::from_sink(&layout, sink, self.schema.len())?;
        let (indices, weights) = (&mut picked.indices, &mut picked.weights);
        self.gather_runs(runs, request, indices, weights, &mut f.row)?;
        let mut rest = &mut weights[..];
        for ((_, c), &scale) in runs.iter().zip(scales) {
            let (part, more) = std::mem::take(&mut rest).split_at_mut(*c);
            if scale != 1.0 {
                part.iter_mut().for_each(|w| *w *= scale);
            }
            rest = more;
        }
        f.put(Own::Indices, bytemuck::cast_slice(&picked.indices));
        f.put(Own::Weights, bytemuck::cast_slice(&picked.weights));
        drop(f);
        // Variable-length values: one storage per field for the rows of every lane,
        // each value copied from the chunk ring of the lane that holds its row.
        if self.schema.has_var() {
            let which = vec![true; self.schema.var_fields().len()];
            let rows: Vec<Option<u64>> = picked.indices.iter().map(|&i| Some(i)).collect();
            let set = UnitValues {
                prefix: "",
                which: &which,
                rows: &rows,
            };
            let (dir, lanes) = (&self.dir, &self.lanes);
            let ring_of = |i: u64| {
                let k = usize::try_from(lane_of(i)).unwrap_or(usize::MAX);
                (lanes.get(k).map(|l| l.rows()))
                    .ok_or_else(|| no_such_lane(dir.clone(), k as u64, Some(i), lanes.len()))
            };
            put_values_of(&self.schema, &[set], &ring_of, sink)?;
        }
        Ok(())
    }

    /// Picks a draw by group over all lanes (UnstableBaselines' stratified strategies
    /// over a vector buffer): each lane's index of the key, extended to its tail, merged
    /// into one and drawn as one buffer's (`draw/groups.rs`), so every group of all
    /// lanes gets its share; then the picks are grouped by lane for the gather. The
    /// merge costs O(live items) per draw.
    fn pick_by_group(&mut self, request: &Request<'_>, picked: &mut Picked) -> Result<Vec<Run>> {
        let mut merged = GroupIndex::new(&self.schema, request.group_by)?;
        for lane in &mut self.lanes {
            // A draw that removes needs every lane ready to (a reader lane refuses).
            lane.ready_to_draw(request, 0)?;
            let rows = lane.rows_mut();
            let index = rows.group_index(request.group_by)?;
            merged.merge(&index);
            rows.groups = Some(index);
        }
        let live = match self.lanes.as_slice() {
            [one] => Some((one.rows().head, one.rows().tail)),
            _ => None,
        };
        // The split's RNG (lane 0's), taken out while the lanes answer removals.
        let mut rng = match self.split_rng() {
            Some(r) => std::mem::replace(r, ChaCha8Rng::seed_from_u64(0)),
            None => return Err(Error::Empty),
        };
        let lanes = &self.lanes;
        let removed = |i: u64| {
            let k = usize::try_from(lane_of(i)).unwrap_or(usize::MAX);
            lanes.get(k).is_some_and(|l| l.removed(i))
        };
        picked.indices.clear();
        picked.weights.clear();
        let n = request.n;
        let done = pick_from_groups(
            &mut merged,
            n,
            live,
            &removed,
            &mut rng,
            &mut picked.indices,
        );
        if let Some(r) = self.split_rng() {
            *r = rng;
        }
        done?;
        // Stable: each lane's picks keep their order.
        picked.indices.sort_by_key(|&i| lane_of(i));
        let runs = self.runs_of(&picked.indices)?;
        for &(k, c) in &runs {
            if let Some(lane) = self.lanes.get_mut(k) {
                // Each lane's rate limiter counts its share.
                lane.ready_to_draw(request, c as u64)?;
                lane.rows_mut().draws.sampled += c as u64;
            }
        }
        Ok(runs)
    }

    /// The lanes of given `indices`, as runs of consecutive positions in one lane.
    fn runs_of(&self, indices: &[u64]) -> Result<Vec<Run>> {
        let mut runs: Vec<Run> = Vec::new();
        for &i in indices {
            let k = self.lane_index(i)?;
            match runs.last_mut() {
                Some((last, c)) if *last == k => *c += 1,
                _ => runs.push((k, 1)),
            }
        }
        Ok(runs)
    }

    /// How many of a uniform draw each lane gives, in lane order (one lane: all, with
    /// no draw of the split's own).
    fn split_uniform(&mut self, request: &Request<'_>) -> Result<Vec<Run>> {
        if self.lanes.len() == 1 {
            return Ok(vec![(0, request.n)]);
        }
        let sizes: Vec<u64> = (self.lanes.iter())
            .map(|l| {
                let len = l.drawable();
                request.newest.map_or(len, |k| len.min(k))
            })
            .collect();
        let total: u64 = sizes.iter().sum();
        if total == 0 {
            return Err(Error::Empty);
        }
        if !request.replace && request.n as u64 > total {
            return Err(Error::InvalidSample(format!(
                "{} items without replacement from {total} live in all lanes",
                request.n
            )));
        }
        let mut counts = std::mem::take(&mut self.counts);
        if let Some(rng) = self.split_rng() {
            split_uniform(rng, &sizes, request.n, request.replace, &mut counts);
        }
        let runs = counts
            .iter()
            .copied()
            .enumerate()
            .filter(|r| r.1 > 0)
            .collect();
        self.counts = counts;
        Ok(runs)
    }

    /// How many of a draw by priority each lane gives, in lane order, and the factor
    /// each lane's weights are scaled by: the lane weighed against its own smallest
    /// leaf; all lanes' is smaller.
    fn split_by_mass(&mut self, request: &Request<'_>, beta: f64) -> Result<(Vec<Run>, Vec<f32>)> {
        if self.lanes.len() == 1 {
            return Ok((vec![(0, request.n)], vec![1.0]));
        }
        let masses = self
            .lanes
            .iter_mut()
            .map(Lane::priority_mass)
            .collect::<Result<Vec<_>>>()?;
        let totals: Vec<f64> = masses.iter().map(|m| m.0.max(0.0)).collect();
        let total: f64 = totals.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            return match self.len() {
                0 => Err(Error::Empty),
                live => Err(Error::ZeroTotalPriority { live }),
            };
        }
        let min = masses
            .iter()
            .filter(|m| m.0 > 0.0)
            .map(|m| m.1)
            .fold(f64::INFINITY, f64::min);
        let mut counts = std::mem::take(&mut self.counts);
        if let Some(rng) = self.split_rng() {
            let spec = PrioritySpec::of(request, beta);
            split_by_mass(rng, &totals, total, &spec, &mut counts);
        }
        let (runs, scales) = (counts.iter().copied().enumerate())
            .filter(|r| r.1 > 0)
            .map(|(k, c)| {
                let lane_min = masses.get(k).map_or(min, |m| m.1);
                ((k, c), ((min / lane_min) as f32).powf(beta as f32))
            })
            .unzip();
        self.counts = counts;
        Ok((runs, scales))
    }

    /// Has each lane of `runs` gather its rows into its consecutive part of `indices`,
    /// `weights` (empty unless drawn by priority) and `outs`, in order.
    fn gather_runs(
        &mut self,
        runs: &[Run],
        request: &Request<'_>,
        indices: &mut [u64],
        weights: &mut [f32],
        outs: &mut [&mut [u8]],
    ) -> Result<()> {
        let sizes: Vec<usize> = self.schema.fields().iter().map(|f| f.bytes()).collect();
        let mut rest: Vec<&mut [u8]> = outs.iter_mut().map(|o| &mut **o).collect();
        let (mut indices, mut weights) = (indices, weights);
        let mut part: Vec<&mut [u8]> = Vec::with_capacity(rest.len());
        for &(k, c) in runs {
            part.clear();
            for (r, &size) in rest.iter_mut().zip(&sizes) {
                let (head, tail) = std::mem::take(r).split_at_mut(c * size);
                part.push(head);
                *r = tail;
            }
            let (idx, more) = std::mem::take(&mut indices).split_at_mut(c);
            indices = more;
            let w = match weights.is_empty() {
                true => &mut [][..],
                false => {
                    let (w, more) = std::mem::take(&mut weights).split_at_mut(c);
                    weights = more;
                    w
                }
            };
            // Given indices are copied: the lane reads them as its request while it
            // writes its part of the output's indices.
            let given: Vec<u64>;
            let one = match request.pick {
                Pick::Given(_) => {
                    given = idx.to_vec();
                    Request::at(&given).into()
                }
                _ => Request { n: c, ..*request },
            };
            let count = self.lanes.len();
            let lane = (self.lanes.get_mut(k))
                .ok_or_else(|| no_such_lane(self.dir.clone(), k as u64, None, count))?;
            lane.gather_rows(&one, idx, w, &mut part)?;
            // Uses and removals are the lane's (item states).
            lane.drawn(&one, idx)?;
        }
        Ok(())
    }

    /// The items at `indices` (any lanes), in order (`sample(Request::at(indices))`).
    pub fn get_many(&mut self, indices: &[u64]) -> Result<Batch> {
        self.sample(Request::at(indices))
    }

    /// The item at `index`, as a batch of one.
    pub fn get(&mut self, index: u64) -> Result<Batch> {
        self.get_many(&[index])
    }
}

impl<L: PriorityLane> Lanes<L> {
    /// Sets the priorities of the items at `indices` in whichever lanes hold them
    /// (see [`ReplayBuffer::update_priorities`]): every value and index is checked
    /// before any lane changes, and afterwards every lane gives new items the largest
    /// priority seen in any lane. Lanes opened as readers have no such method:
    ///
    /// ```compile_fail
    /// # use replaystore::{Config, DType, Lanes, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// # Lanes::create(dir.path().join("v"), Config::new(schema, 8).prioritized(1.0, 0.0), 2)?;
    /// let mut reader = Lanes::open_reader(dir.path().join("v"))?;
    /// reader.update_priorities(&[0], &[1.0f32])?; // a reader never writes
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn update_priorities<P: Priority>(
        &mut self,
        indices: &[u64],
        priorities: &[P],
    ) -> Result<PriorityUpdate> {
        check_update_lengths(indices, priorities)?;
        self.refresh()?;
        let mut by_lane: Vec<(Vec<u64>, Vec<f64>)> =
            vec![(Vec::new(), Vec::new()); self.lanes.len()];
        for (pos, (&i, p)) in indices.iter().zip(priorities).enumerate() {
            let k = self.lane_index(i)?;
            let p = p.to_f64();
            self.lane(k)?.check_priority(pos, i, p)?;
            if let Some((is, ps)) = by_lane.get_mut(k) {
                is.push(i);
                ps.push(p);
            }
        }
        let mut done = PriorityUpdate::default();
        for (lane, (is, ps)) in self.lanes.iter_mut().zip(&by_lane) {
            if is.is_empty() {
                continue;
            }
            let r = lane.update_lane(is, ps)?;
            done.applied += r.applied;
            done.stale += r.stale;
        }
        let max = self
            .lanes
            .iter()
            .filter_map(PriorityLane::max_priority)
            .fold(f64::NEG_INFINITY, f64::max);
        self.lanes.iter_mut().for_each(|l| l.raise_max(max));
        Ok(done)
    }
}

/// A lane and how many consecutive rows of a draw's output it fills.
type Run = (usize, usize);

/// Closes every lane, returning the first error once all are closed.
fn close_all<L>(lanes: Vec<L>, close: impl Fn(L) -> Result<()>) -> Result<()> {
    lanes.into_iter().map(close).fold(Ok(()), Result::and)
}

fn no_such_lane(dir: PathBuf, lane: u64, index: Option<u64>, lanes: usize) -> Error {
    Error::NoSuchLane {
        dir,
        lane,
        index,
        lanes: lanes as u32,
    }
}

/// The lane folders of `dir` and their count: `lane-K/` after a `LANES` file, or `dir`
/// itself for a buffer of one ring.
fn lane_dirs(io: &IoRef, dir: &Path) -> Result<Vec<PathBuf>> {
    let dirs = if let Some(f) = storage::read_lanes(&**io, dir)? {
        (0..f.lanes).map(|k| storage::lane_dir(dir, k)).collect()
    } else if let Some(doc) = storage::read_group(&**io, dir)? {
        group::member_dirs(dir, &doc)
    } else {
        Manifest::load(&**io, dir)?;
        return Ok(vec![dir.to_path_buf()]);
    };
    for d in &dirs {
        own_lane_dir(io, d)?;
    }
    Ok(dirs)
}

/// Refuses a lane or member folder that is not one: the engine makes them, so a link
/// there (to a buffer elsewhere) is someone else's, and a reader follows it no more than
/// the writer does. A missing one is left for the open to name.
pub(super) fn own_lane_dir(io: &IoRef, d: &Path) -> Result<()> {
    match io.kind(d) {
        Ok(Kind::Dir) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(found) => Err(Error::ForeignFile {
            path: d.to_path_buf(),
            op: "open",
            found: found.describe(),
            expected: Kind::Dir.describe(),
        }),
        Err(e) => Err(Error::io("inspect", d, e)),
    }
}

fn open_all<L: Lane>(
    dir: &Path,
    io: &IoRef,
    open: impl Fn(&Path, IoRef) -> Result<L>,
) -> Result<Lanes<L>> {
    let dir = &storage::resolve_root(dir);
    let dirs = lane_dirs(io, dir)?;
    let mut lanes = Vec::with_capacity(dirs.len());
    for (k, d) in dirs.iter().enumerate() {
        let lane = open(d, io.clone())?;
        check_lane_range(lane.rows(), k)?;
        lanes.push(lane);
    }
    Lanes::of(dir.to_path_buf(), lanes).ok_or_else(|| Error::NotABuffer {
        dir: dir.to_path_buf(),
    })
}

fn open_one<R: Role>(
    dir: &Path,
    lane: usize,
    open: impl Fn(&Path) -> Result<ReplayBuffer<R>>,
) -> Result<ReplayBuffer<R>> {
    let dir = &storage::resolve_root(dir);
    let dirs = lane_dirs(&io::os(), dir)?;
    state::settle_restores(&*io::os(), &dirs)?;
    let d = dirs
        .get(lane)
        .ok_or_else(|| no_such_lane(dir.to_path_buf(), lane as u64, None, dirs.len()))?;
    let buf = open(d)?;
    check_lane_range(&buf.store.rows, lane)?;
    Ok(buf)
}

/// A lane's live indices must carry its number: lane folders swapped or copied from
/// another buffer would otherwise route updates and gets to the wrong items.
fn check_lane_range(rows: &Rows, lane: usize) -> Result<()> {
    let live = rows.live();
    let k = lane as u64;
    let last = if live.is_empty() {
        live.start
    } else {
        live.end - 1
    };
    if lane_of(live.start) == k && lane_of(last) == k {
        return Ok(());
    }
    Err(Error::Corrupt {
        file: rows.dir.join(storage::MANIFEST),
        offset: 0,
        field: format!("indices of lane {lane}"),
        expected: format!(
            "in {}..{}",
            first_index(lane as u32),
            first_index(lane as u32 + 1)
        ),
        got: format!("{}..{}", live.start, live.end),
    })
}

/// Best-effort removal of the lanes a failed `create` made (the error is what matters).
fn remove_new_lanes(io: &dyn Io, dir: &Path, made: Vec<ReplayBuffer>) {
    let n = made.len();
    drop(made);
    for k in 0..n {
        let _ = crate::parts::snapshot::remove_tree(io, &storage::lane_dir(dir, k as u32));
    }
}
