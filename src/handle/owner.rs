//! The priority owner: one process that samples by priority and updates priorities
//! while writers in other processes add items as actors (`ReplayBuffer::open_actor`).
//!
//! The tree keeps a single writer, as it must (two processes storing into the same
//! words would lose updates). Actors never touch it; the owner catches up before each
//! draw and update: the items added since it last looked (`caught_up` in the tree's
//! header) get the largest priority seen (reset rows zero), and slots emptied since
//! get zero. So "new items enter at the maximum priority" holds from the owner's first
//! call after the add. See docs/ARCHITECTURE.md, "Many processes".

use std::fs::File;
use std::path::Path;

use super::Reader;
use crate::batch::Batch;
use crate::draw::{DrawsRows, Rows};
use crate::error::{Error, Result};
use crate::parts::priorities::{Priorities, Priority, PrioritySummary, PriorityUpdate};
use crate::request::Request;
use crate::sink::Sink;
use crate::storage::io::{self, Access, IoRef};
use crate::storage::{self, Manifest};

/// The one process that owns a prioritized buffer's priorities while actors add: the
/// learner of an Ape-X style setup. It samples by priority, updates priorities, and
/// reads like a [`Reader`] (see [`PriorityOwner::reader`]). A second owner, or a
/// writer opened with [`crate::ReplayBuffer::open`] (which owns the tree itself), is
/// refused with `Locked` naming the holder.
///
/// ```
/// use replaystore::{Column, Config, DType, PriorityOwner, ReplayBuffer, Request, Schema};
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
/// let config = Config::new(schema, 100).prioritized(1.0, 0.0);
/// ReplayBuffer::create(dir.path().join("b"), config)?.close()?;
/// let mut actor = ReplayBuffer::open_actor(dir.path().join("b"))?;
/// let mut learner = PriorityOwner::open(dir.path().join("b"))?; // usually another process
/// actor.add_batch(&[Column::new("x", &[0u32, 1, 2])])?;
/// learner.update_priorities(&[0, 1, 2], &[0.0f32, 0.0, 3.0])?;
/// actor.add_batch(&[Column::new("x", &[3u32])])?; // enters at the largest priority, 3
/// let batch = learner.sample(Request::rows(64).prioritized(0.4))?;
/// assert!(batch.indices().iter().all(|&i| i == 2 || i == 3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PriorityOwner {
    reader: Reader,
    tree: Priorities,
    /// `priorities.lock`, held for the owner's lifetime.
    _lock: File,
    /// The head when the owner last caught up: slots evicted since are zeroed.
    seen_head: u64,
    closed: bool,
}

impl PriorityOwner {
    /// Takes ownership of the priorities of the buffer in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<PriorityOwner> {
        PriorityOwner::open_with(dir, io::os())
    }

    /// `open` through a given file-operation seam.
    pub fn open_with(dir: impl AsRef<Path>, io: IoRef) -> Result<PriorityOwner> {
        let dir = storage::resolve_root(dir.as_ref());
        let sb = Manifest::load(&*io, &dir)?.superblock;
        if !sb.prioritized {
            return Err(Error::NotPrioritized { dir });
        }
        let lock = storage::lock_priorities(&*io, &dir)?;
        let mut reader = Reader::open_with(&dir, io.clone())?;
        let mut tree = Priorities::open(&*io, &dir, &sb, Access::Write)?;
        // The owner repairs below, a store: a tree an actor's restore linked is copied.
        tree.make_private(&*io)?;
        reader.refresh()?;
        let (head, tail) = (reader.rows.head, reader.rows.tail);
        let cap = sb.capacity;
        // The previous owner may have been killed between a leaf and its parents, or an
        // actor restored a checkpoint: zero what is not live, recompute every parent.
        tree.repair((head % cap) as usize, (tail - head) as usize)?;
        if tree.caught_up() > tail {
            tree.note_caught_up(tail);
        }
        tree.set_owner(std::process::id());
        let mut owner = PriorityOwner {
            reader,
            tree,
            _lock: lock,
            seen_head: head,
            closed: false,
        };
        owner.catch_up()?;
        Ok(owner)
    }

    /// Gives the items added since the last call their leaves, and zeroes the slots
    /// emptied since; every draw and update does this first.
    pub fn catch_up(&mut self) -> Result<()> {
        self.reader.refresh()?;
        let buf = &self.reader.rows;
        let (head, tail, cap) = (buf.head, buf.tail, buf.superblock.capacity);
        let (ring, episodic) = (&buf.ring, buf.superblock.episodic);
        // A row the actor has lapped since the refresh reads as its newer item; that
        // item is at or past `tail`, so the next catch-up sets its leaf again.
        let is_reset = |i: u64| episodic && ring.step_header(i % cap).t == 0;
        self.tree.catch_up(self.seen_head, head, tail, is_reset);
        self.seen_head = head;
        Ok(())
    }

    /// Draws as `request` says, after catching up (see [`PriorityOwner::catch_up`]):
    /// by priority ([`Rows::prioritized`](crate::request::Rows::prioritized)) from the tree this process keeps, or
    /// uniformly and at given indices as a [`Reader`] draws.
    pub fn sample<'r>(&mut self, request: impl Into<Request<'r>>) -> Result<Batch> {
        let mut batch = Batch::default();
        self.sample_into(request, &mut batch)?;
        Ok(batch)
    }

    /// [`PriorityOwner::sample`] into `sink`, filled in place.
    pub fn sample_into<'r>(
        &mut self,
        request: impl Into<Request<'r>>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        self.catch_up()?;
        self.reader.sample_into(request, sink)
    }

    /// Sets the priorities of live items (as [`crate::ReplayBuffer::update_priorities`]):
    /// items the actors have overwritten since they were drawn are skipped and counted.
    pub fn update_priorities<P: Priority>(
        &mut self,
        indices: &[u64],
        priorities: &[P],
    ) -> Result<PriorityUpdate> {
        self.catch_up()?;
        let buf = &self.reader.rows;
        let live = (buf.head, buf.head_slot, buf.tail);
        let reader = &self.reader;
        self.tree.update(live, indices, priorities, &|i| {
            reader.is_removed(i) || reader.rows.is_cut_head(i)
        })
    }

    /// The current `priority + eps` of each live item in `indices`.
    pub fn priorities(&mut self, indices: &[u64]) -> Result<Vec<f64>> {
        self.catch_up()?;
        let buf = &self.reader.rows;
        self.tree.of_live(buf.head, buf.tail, indices)
    }

    /// Priority totals and counters, caught up.
    pub fn priority_summary(&mut self) -> Result<PrioritySummary> {
        self.catch_up()?;
        Ok(self.tree.summary())
    }

    /// Makes the priorities durable: an msync of the tree (the actors' flushes make
    /// their items durable, not the priorities).
    pub fn flush(&mut self) -> Result<()> {
        self.catch_up()?;
        self.tree.flush(&*self.reader.rows.io)
    }

    /// Checks one priority of an update as `update_priorities` would, applying nothing.
    pub(super) fn check_priority(&self, position: usize, index: u64, p: f64) -> Result<()> {
        let tail = self.reader.rows.tail;
        self.tree.check_update_one(position, index, tail, p)
    }

    /// The largest `priority + eps` seen.
    pub(super) fn max_priority(&self) -> f64 {
        self.tree.max_priority()
    }

    /// Raises the priority new items get to at least `q`.
    pub(super) fn raise_max(&mut self, q: f64) {
        self.tree.raise_max(q);
    }

    /// The reading side: uniform sampling, `get`, `len` and stats, as any reader.
    pub fn reader(&mut self) -> &mut Reader {
        &mut self.reader
    }

    pub(crate) fn reader_ref(&self) -> &Reader {
        &self.reader
    }

    /// Flushes and gives up ownership (another owner, or a writer, may open then).
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        self.tree.set_owner(0);
        self.flush()
    }
}

impl Drop for PriorityOwner {
    fn drop(&mut self) {
        if !self.closed {
            // Parents fixed and the owner named as gone; the page cache keeps both, and
            // a later owner recomputes the parents anyway.
            self.tree.fix_pending();
            self.tree.set_owner(0);
        }
    }
}

/// The owner draws rows as its reader does (its callers catch it up first).
impl DrawsRows for PriorityOwner {
    fn rows(&self) -> &Rows {
        &self.reader.rows
    }

    fn rows_mut(&mut self) -> &mut Rows {
        &mut self.reader.rows
    }

    fn drawable(&self) -> u64 {
        self.reader.len()
    }

    fn value_race(&mut self, index: u64) -> Result<bool> {
        self.reader.value_race(index)
    }

    fn ready_to_draw(&mut self, request: &Request<'_>, n: u64) -> Result<()> {
        self.reader.ready_to_draw(request, n)
    }

    fn pick_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        self.reader.pick_rows(request, indices, weights)
    }

    fn gather_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut [u64],
        weights: &mut [f32],
        outs: &mut [&mut [u8]],
    ) -> Result<()> {
        self.reader.gather_rows(request, indices, weights, outs)
    }
}
