//! The writer's draws and reads: `sample_into` for every unit (rows through `Rows`,
//! as a reader copies them; transitions, sequences, episodes and fragments through
//! `draw/transitions.rs` and `draw/units.rs`), reads by index, priority updates and
//! the episode table; and the `DrawsRows` / `DrawsUnits` the draws are written against.

use crate::batch::Batch;
use crate::draw::{DrawsRows, DrawsUnits, Rows, UnitArrays, sample_units};
use crate::error::{Error, Result};
use crate::parts::episodes::{EpisodeInfo, Episodes};
use crate::parts::fragments::Fragments;
use crate::parts::priorities::{
    LiveRange, Priorities, Priority, PrioritySpec, PrioritySummary, PriorityUpdate,
};
use crate::request::Request;
use crate::sink::Sink;
use crate::storage::map::Found;

use super::Store;

impl Store {
    /// Sets the priorities of the items at logical `indices` (typically the TD errors of a
    /// sampled batch).
    pub(crate) fn update_priorities<P: Priority>(
        &mut self,
        indices: &[u64],
        priorities: &[P],
    ) -> Result<PriorityUpdate> {
        self.writable()?;
        if self.parts.tree.is_shared() {
            self.private_tree()?;
        }
        let Some(p) = self.parts.tree.tree_mut() else {
            return Err(self.no_priorities());
        };
        let rows = &self.rows;
        let life = self.parts.life.as_ref();
        let removed = |i: u64| life.is_some_and(|l| l.is_removed(i)) || rows.is_cut_head(i);
        let live = (rows.head, rows.head_slot, rows.tail);
        p.update(live, indices, priorities, &removed)
    }
}

impl Store {
    /// The error a call on priorities gets from this actor: `NotPriorityOwner`, naming the
    /// owner's lock file and the process that owns the priorities now, if one runs
    /// (`NotPrioritized` when the buffer keeps none).
    pub(crate) fn not_priority_owner(&self) -> Error {
        self.no_priorities()
    }
}

impl Store {
    /// The current `priority + eps` of each live item in `indices` (recovered from the
    /// stored `(priority + eps)^alpha`; with alpha 0 every item reads 1).
    pub(crate) fn priorities(&self, indices: &[u64]) -> Result<Vec<f64>> {
        let Some(p) = self.parts.tree.tree() else {
            return Err(self.no_priorities());
        };
        p.of_live(self.rows.head, self.rows.tail, indices)
    }
    /// Priority totals and counters, if the buffer keeps priorities.
    pub(crate) fn priority_summary(&mut self) -> Option<PrioritySummary> {
        self.parts.tree.tree_mut().map(Priorities::summary)
    }
}

impl Store {
    /// Draws as `request` says into a new [`Batch`]: a `usize` is that many items drawn
    /// uniformly; a [`Request`] says which units, how they are picked and how many.
    pub(crate) fn sample<'r>(&mut self, request: impl Into<Request<'r>>) -> Result<Batch> {
        let mut batch = Batch::default();
        self.sample_into(request, &mut batch)?;
        Ok(batch)
    }

    /// Draws as `request` says into `sink`: a [`Batch`] to reuse, or the arrays a binding
    /// owns (the Python package's NumPy arrays).
    pub(crate) fn sample_into<'r>(
        &mut self,
        request: impl Into<Request<'r>>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let request = request.into();
        request.check()?;
        sample_units(self, &request, sink)
    }

    /// Draws `indices.len()` live indices by priority into `indices`, with their
    /// importance weights into `weights`, advancing the RNG, without gathering.
    pub(crate) fn draw_prioritized(
        &mut self,
        spec: &PrioritySpec,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        let Some(p) = self.parts.tree.tree_mut() else {
            return Err(self.no_priorities());
        };
        let live = LiveRange {
            head: self.rows.head,
            head_slot: self.rows.head_slot,
            tail: self.rows.tail,
        };
        p.draw(&mut self.rows.draws.rng, spec, live, indices, weights)?;
        self.rows.draws.sampled += indices.len() as u64;
        Ok(())
    }

    /// The items at `indices`, as a batch (as `sample(Request::at(indices))` reads them,
    /// without moving the RNG).
    pub(crate) fn get_many(&self, indices: &[u64]) -> Result<Batch> {
        self.rows.get_many(indices, self.parts.life.as_ref())
    }

    /// The item at a logical index, as a batch of one.
    pub(crate) fn get(&self, index: u64) -> Result<Batch> {
        self.get_many(&[index])
    }

    /// Whether reads check each sealed item against its checksum (the default).
    pub(crate) fn set_read_checks(&mut self, on: bool) {
        self.rows.read_checks = on;
    }
    /// Whether reads check sealed items against their checksums.
    pub(crate) fn read_checks(&self) -> bool {
        self.rows.read_checks
    }
    /// Restarts the sampling RNG from a new seed (stored at the next commit).
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.rows.reseed(seed);
    }
    /// The episode holding live index `index` (`Removed` once removed).
    pub(crate) fn episode(&self, index: u64) -> Result<EpisodeInfo> {
        let found = self.episode_record(index)?;
        crate::draw::check_not_removed(self.parts.life.as_ref(), &[index])?;
        Ok(found)
    }

    /// The episode holding live index `index`, removed or not: what `add_episode`
    /// returns of the episode it added, which the downsampling it ended may remove.
    pub(crate) fn episode_record(&self, index: u64) -> Result<EpisodeInfo> {
        let e = self.episodes_ref()?;
        if index < self.rows.head || index >= self.rows.tail {
            return Err(Error::Evicted {
                index,
                head: self.rows.head,
                tail: self.rows.tail,
            });
        }
        let found = e.of(index).ok_or_else(|| {
            Error::EpisodeOrder(format!("index {index} belongs to no episode in the table"))
        })?;
        Ok(self.with_return(found))
    }

    /// `e` with its return (read from its rows when the table has not kept it: an
    /// episode that had ended when the buffer was opened).
    fn with_return(&self, e: &EpisodeInfo) -> EpisodeInfo {
        let Ok(table) = self.episodes_ref() else {
            return *e;
        };
        let (ring, cap) = (&self.rows.ring, self.rows.superblock.capacity);
        let reward = table.reward_field();
        table.with_return(e, self.rows.head, |i| {
            reward.map_or(0.0, |(f, dtype)| ring.field_f64(i % cap, f, dtype))
        })
    }
    /// The index before `index` in its episode, or `index` itself at the episode's first
    /// live row (Tianshou's `prev`).
    pub(crate) fn prev(&self, index: u64) -> Result<u64> {
        let e = self.episode(index)?;
        Ok(if index > e.start.max(self.rows.head) {
            index - 1
        } else {
            index
        })
    }
    /// The index after `index` in its episode, or `index` itself at the episode's last row
    /// so far (Tianshou's `next`).
    pub(crate) fn next(&self, index: u64) -> Result<u64> {
        let e = self.episode(index)?;
        Ok(if index < e.last() { index + 1 } else { index })
    }
    /// The episodes with a live row, oldest first (with item states, not the removed).
    pub(crate) fn episodes(&self) -> Result<Vec<EpisodeInfo>> {
        let table = self.episodes_ref()?;
        let head = self.rows.head;
        Ok((table.iter())
            .filter(|e| !self.removed(e.start.max(head)))
            .map(|e| self.with_return(e))
            .collect())
    }
    /// The episode still being written, if any (at most one: episodes are contiguous).
    pub(crate) fn unfinished_episodes(&self) -> Result<Vec<EpisodeInfo>> {
        let table = self.episodes_ref()?;
        Ok(table
            .open()
            .map(|e| self.with_return(e))
            .into_iter()
            .collect())
    }
}

impl Store {
    /// The fragment table: built from the rows' positions (and, with item states, the
    /// removed rows counted from their words) at the first draw after an open, then
    /// kept by the adds and removals; fragments the head passed are forgotten.
    pub(crate) fn fragment_table(&mut self) -> &Fragments {
        let cap = self.rows.superblock.capacity;
        let (head, tail, ring) = (self.rows.head, self.rows.tail, &self.rows.ring);
        let life = self.parts.life.as_ref();
        let table = self.parts.fragments.get_or_insert_with(|| {
            let mut t =
                Fragments::from_positions((head..tail).map(|i| (i, ring.fragment_pos(i % cap))));
            if let Some(life) = life {
                t.count_removed(head, |i| life.is_removed(i));
            }
            t
        });
        table.evict(head);
        table
    }
}

/// The writer's units draw, in every role: its own tables, kept as it adds.
impl DrawsUnits for Store {
    fn episode_table(&self) -> Result<&Episodes> {
        self.episodes_ref()
    }

    fn fragments(&mut self) -> Result<&Fragments> {
        Ok(self.fragment_table())
    }

    fn draw_by_priority(
        &mut self,
        spec: &PrioritySpec,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        self.draw_prioritized(spec, indices, weights)
    }

    fn run_masses(&mut self, runs: &[(u64, u64)], masses: &mut Vec<f64>) -> Result<()> {
        let Some(p) = self.parts.tree.tree_mut() else {
            return Err(self.no_priorities());
        };
        masses.extend(runs.iter().map(|&(first, rows)| p.mass(first, rows)));
        Ok(())
    }

    fn unit_scratch(&mut self) -> &mut UnitArrays {
        &mut self.scratch.units
    }

    fn removed(&self, index: u64) -> bool {
        (self.parts.life.as_ref()).is_some_and(|l| l.is_removed(index))
    }

    fn keeps_states(&self) -> bool {
        self.parts.life.is_some()
    }

    fn unit_lost(&mut self, index: u64, found: Found) -> Result<()> {
        Err(self.rows.row_error(index, found))
    }

    fn pick_groups(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        offsets: &mut Vec<u64>,
    ) -> Result<()> {
        let life = self.parts.life.as_ref();
        self.rows.pick_groups(request, life, indices, offsets)
    }
}

/// The writer's rows draw, in every role (an actor's draw by priority is
/// `NotPriorityOwner`).
impl DrawsRows for Store {
    fn rows(&self) -> &Rows {
        &self.rows
    }

    fn rows_mut(&mut self) -> &mut Rows {
        &mut self.rows
    }

    fn ready_to_draw(&mut self, request: &Request<'_>, n: u64) -> Result<()> {
        if request.remove {
            self.ready_to_remove()?;
        }
        if request.draws() && n > 0 {
            self.admit(true, n)?;
        }
        Ok(())
    }

    fn pick_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        self.ready_to_draw(request, request.n as u64)?;
        let life = self.parts.life.as_ref();
        match (self.rows).pick_unless_priority(request, life, indices, weights)? {
            Some(spec) => self.draw_prioritized(&spec, indices, weights),
            None => Ok(()),
        }
    }

    fn drawn(&mut self, request: &Request<'_>, indices: &[u64]) -> Result<()> {
        self.after_draw(request, indices)
    }

    fn drawable(&self) -> u64 {
        self.len()
    }

    fn gather_rows(
        &mut self,
        _request: &Request<'_>,
        indices: &mut [u64],
        _weights: &mut [f32],
        outs: &mut [&mut [u8]],
    ) -> Result<()> {
        // Picked indices are live: drawn ones by construction, given ones checked by
        // `pick_rows` (the writer's rows change only under `&mut self`).
        let rows = &self.rows;
        (rows.ring.gather(rows.live_rows(), indices, outs))
            .map_err(|m| rows.stamp_error(indices, m))
    }
}
