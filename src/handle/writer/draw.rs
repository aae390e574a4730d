//! The writer's draws and reads: `sample` / `sample_into` for every unit, reads by
//! index, priorities (set only by the writer, read by the roles that hold the tree)
//! and the episode getters; `store/draw.rs` and `draw/` do them.

use crate::batch::Batch;
use crate::draw::{DrawsRows, Rows};
use crate::error::{Error, Result};
use crate::parts::episodes::EpisodeInfo;
use crate::parts::priorities::{Priority, PrioritySummary, PriorityUpdate};
use crate::request::Request;
use crate::sink::Sink;

use super::ReplayBuffer;
use super::role::{Actor, HoldsTree, Role, Writer};

impl ReplayBuffer<Writer> {
    /// Sets the priorities of the items at logical `indices` (typically the TD errors of
    /// a sampled batch). Items evicted, cleared or removed since they were sampled are
    /// skipped and counted (`stale_updates` in [`crate::Stats`]), never applied to the newer item in their
    /// slot; so is the first live row of an episodic buffer when the ring has evicted its
    /// observation row (it ends no transition the buffer can return). A priority that is negative, NaN or infinite, an index never added, or
    /// arrays of different lengths are an error, and then nothing is applied.
    /// Survives a kill at once, and a power loss after the next `flush`.
    pub fn update_priorities<P: Priority>(
        &mut self,
        indices: &[u64],
        priorities: &[P],
    ) -> Result<PriorityUpdate> {
        self.store.update_priorities(indices, priorities)
    }
}

impl ReplayBuffer<Actor> {
    /// The error a call on priorities gets from this actor: `NotPriorityOwner`, naming
    /// the owner's lock file and the process that owns the priorities now, if one runs
    /// (`NotPrioritized` when the buffer keeps none). For bindings that hold writers and
    /// actors behind one type.
    ///
    /// ```
    /// use replaystore::{Config, DType, Error, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).prioritized(0.6, 1e-6))?.close()?;
    /// let actor = ReplayBuffer::open_actor(dir.path().join("b"))?;
    /// assert!(matches!(actor.not_priority_owner(), Error::NotPriorityOwner { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn not_priority_owner(&self) -> Error {
        self.store.not_priority_owner()
    }
}

impl<R: HoldsTree> ReplayBuffer<R> {
    /// The current `priority + eps` of each live item in `indices` (recovered from the
    /// stored `(priority + eps)^alpha`; with alpha 0 every item reads 1).
    pub fn priorities(&self, indices: &[u64]) -> Result<Vec<f64>> {
        self.store.priorities(indices)
    }
    /// Priority totals and counters, if the buffer keeps priorities.
    pub fn priority_summary(&mut self) -> Option<PrioritySummary> {
        self.store.priority_summary()
    }
}

impl<R: Role> ReplayBuffer<R> {
    /// Draws as `request` says into a new [`Batch`]: a `usize` is that many items drawn
    /// uniformly; a [`Request`] says which units, how they are picked and how many.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).prioritized(0.6, 1e-6).seed(3);
    /// let mut buf = ReplayBuffer::create(dir.path().join("per"), config)?;
    /// buf.add_batch(&[Column::new("x", &[0.0f32, 1.0, 2.0, 3.0])])?;
    /// let batch = buf.sample(8)?; // uniformly, with replacement
    /// assert_eq!(batch.get::<f32>("x")?.len(), 8);
    /// let batch = buf.sample(Request::rows(8).prioritized(0.4))?;
    /// assert_eq!(batch.weights().len(), 8);
    /// // Item 3 becomes 100x more likely than the others; items sampled earlier may
    /// // have been evicted since, and are skipped and counted.
    /// let done = buf.update_priorities(&[0, 1, 2, 3], &[0.01f32, 0.01, 0.01, 1.0])?;
    /// assert_eq!(done.applied, 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample<'r>(&mut self, request: impl Into<Request<'r>>) -> Result<Batch> {
        self.store.sample(request)
    }
    /// Draws as `request` says into `sink`: a [`Batch`] to reuse, or the arrays a
    /// binding owns (the Python package's NumPy arrays). The sink is asked for its
    /// arrays once the draw knows their sizes, and every byte is written in place.
    ///
    /// A request refused by [`Request`]'s checks moves nothing. A sink that fails, or
    /// hands back arrays of the wrong size, fails the draw after its units are picked:
    /// the sampling RNG has then moved as for a completed draw, so the draws that follow
    /// are not the ones a seeded run without the failure would see.
    pub fn sample_into<'r>(
        &mut self,
        request: impl Into<Request<'r>>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        self.store.sample_into(request, sink)
    }
    /// The items at `indices`, as a batch (as `sample(Request::at(indices))` reads
    /// them, without moving the RNG). Every read checks what it copies: each item's
    /// stamp, and the checksum of each item a flush has sealed, so a damaged item is an
    /// error naming its file and offset, never returned.
    pub fn get_many(&self, indices: &[u64]) -> Result<Batch> {
        self.store.get_many(indices)
    }
    /// The item at a logical index, as a batch of one.
    pub fn get(&self, index: u64) -> Result<Batch> {
        self.store.get(index)
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
        self.store.set_read_checks(on)
    }
    /// Whether reads check sealed items against their checksums.
    pub fn read_checks(&self) -> bool {
        self.store.read_checks()
    }
    /// Restarts the sampling RNG from a new seed (stored at the next commit).
    pub fn reseed(&mut self, seed: u64) {
        self.store.reseed(seed)
    }
    /// The episode holding live index `index`.
    pub fn episode(&self, index: u64) -> Result<EpisodeInfo> {
        self.store.episode(index)
    }
    /// The index before `index` in its episode, or `index` itself at the episode's first
    /// live row (Tianshou's `prev`).
    pub fn prev(&self, index: u64) -> Result<u64> {
        self.store.prev(index)
    }
    /// The index after `index` in its episode, or `index` itself at the episode's last
    /// row so far (Tianshou's `next`).
    pub fn next(&self, index: u64) -> Result<u64> {
        self.store.next(index)
    }
    /// The episodes with a live row, oldest first.
    pub fn episodes(&self) -> Result<Vec<EpisodeInfo>> {
        self.store.episodes()
    }
    /// The episode still being written, if any (at most one: episodes are contiguous).
    pub fn unfinished_episodes(&self) -> Result<Vec<EpisodeInfo>> {
        self.store.unfinished_episodes()
    }
}

/// The writer draws rows as its store does (what `Lanes` draws through).
impl<R: Role> DrawsRows for ReplayBuffer<R> {
    fn rows(&self) -> &Rows {
        self.store.rows()
    }

    fn rows_mut(&mut self) -> &mut Rows {
        self.store.rows_mut()
    }

    fn drawable(&self) -> u64 {
        self.store.drawable()
    }

    fn ready_to_draw(&mut self, request: &Request<'_>, n: u64) -> Result<()> {
        self.store.ready_to_draw(request, n)
    }

    fn drawn(&mut self, request: &Request<'_>, indices: &[u64]) -> Result<()> {
        self.store.drawn(request, indices)
    }

    fn pick_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        self.store.pick_rows(request, indices, weights)
    }

    fn gather_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut [u64],
        weights: &mut [f32],
        outs: &mut [&mut [u8]],
    ) -> Result<()> {
        self.store.gather_rows(request, indices, weights, outs)
    }
}
