//! What `Lanes` needs of each lane's handle: `Lane` (refresh, reseed, priority mass,
//! over the rows draw every handle has: `rows::DrawsRows`) for every handle,
//! `PriorityLane` (set priorities) only for those that may. Both sealed (their
//! supertrait cannot be named outside the crate): the handles are the writer, the
//! reader and the priority owner.

use crate::draw::DrawsRows;
use crate::error::Result;
use crate::handle::{PriorityOwner, Reader, ReplayBuffer};
use crate::parts::priorities::PriorityUpdate;
use crate::request::Request;
use crate::sink::Sink;

/// What one lane of [`crate::Lanes`] is opened as: a writer ([`ReplayBuffer`]), a reader
/// ([`Reader`]) or the priority owner ([`PriorityOwner`]). Sealed; its methods are
/// the plumbing `Lanes` calls.
pub trait Lane: DrawsRows {
    /// Looks at where the lane's writer is now (a reader), and catches the priorities
    /// up (the owner).
    #[doc(hidden)]
    fn refresh_lane(&mut self) -> Result<()>;
    /// Restarts the lane's sampling RNG from `seed` (a reader then keeps that stream in
    /// a forked child, as [`Reader::reseed`] says).
    #[doc(hidden)]
    fn reseed_lane(&mut self, seed: u64) {
        self.rows_mut().reseed(seed);
    }
    /// `(total, smallest non-zero leaf)` of the lane's priorities.
    #[doc(hidden)]
    fn priority_mass(&mut self) -> Result<(f64, f64)>;
    /// Whether live item `index` of the lane was removed (item states).
    #[doc(hidden)]
    fn removed(&self, index: u64) -> bool;
    /// The item states of the lane's live `indices`.
    #[doc(hidden)]
    fn lane_item_states(&mut self, indices: &[u64]) -> Result<Vec<crate::ItemState>>;
    /// The lane's counters and sizes as this handle sees them now.
    #[doc(hidden)]
    fn lane_stats(&mut self) -> Result<crate::Stats>;
    /// Draws `request` (any unit the handle draws) from this lane alone, as the
    /// handle's own `sample_into` does: a group's draw from one member.
    #[doc(hidden)]
    fn sample_lane_into(&mut self, request: &Request<'_>, sink: &mut dyn Sink) -> Result<()>;
    /// Tells the lane's progress page the draws counted into the lane's rows since the
    /// last time (a reader's, for `info` and the writer's count); the writer's own
    /// draws reach its commits without this.
    #[doc(hidden)]
    fn tally_lane_draws(&mut self) {}
}

/// A lane handle that may set priorities: a writer that owns its lane's tree, or the
/// priority owner. A reader is not one, so `Lanes<Reader>` has no `update_priorities`.
pub trait PriorityLane: Lane {
    #[doc(hidden)]
    fn check_priority(&self, position: usize, index: u64, p: f64) -> Result<()>;
    #[doc(hidden)]
    fn update_lane(&mut self, indices: &[u64], priorities: &[f64]) -> Result<PriorityUpdate>;
    /// The largest `priority + eps` the lane has seen, if this handle owns its tree.
    #[doc(hidden)]
    fn max_priority(&self) -> Option<f64>;
    #[doc(hidden)]
    fn raise_max(&mut self, q: f64);
}

impl Lane for ReplayBuffer {
    fn sample_lane_into(&mut self, request: &Request<'_>, sink: &mut dyn Sink) -> Result<()> {
        self.sample_into(*request, sink)
    }
    fn refresh_lane(&mut self) -> Result<()> {
        Ok(())
    }
    fn priority_mass(&mut self) -> Result<(f64, f64)> {
        match self.priority_summary() {
            Some(s) => Ok((s.total, s.min_leaf)),
            None => Err(self.store.no_priorities()),
        }
    }
    fn removed(&self, index: u64) -> bool {
        self.store
            .parts
            .life
            .as_ref()
            .is_some_and(|l| l.is_removed(index))
    }
    fn lane_item_states(&mut self, indices: &[u64]) -> Result<Vec<crate::ItemState>> {
        self.item_states(indices)
    }
    fn lane_stats(&mut self) -> Result<crate::Stats> {
        Ok(self.stats())
    }
}

impl PriorityLane for ReplayBuffer {
    fn check_priority(&self, position: usize, index: u64, p: f64) -> Result<()> {
        match self.store.parts.tree.tree() {
            Some(t) => t.check_update_one(position, index, self.store.rows.tail, p),
            None => Err(self.store.no_priorities()),
        }
    }
    fn update_lane(&mut self, indices: &[u64], priorities: &[f64]) -> Result<PriorityUpdate> {
        self.update_priorities(indices, priorities)
    }
    fn max_priority(&self) -> Option<f64> {
        self.store.parts.tree.tree().map(|p| p.max_priority())
    }
    fn raise_max(&mut self, q: f64) {
        if let Some(p) = self.store.parts.tree.tree_mut() {
            p.raise_max(q);
        }
    }
}

impl Lane for Reader {
    fn sample_lane_into(&mut self, request: &Request<'_>, sink: &mut dyn Sink) -> Result<()> {
        self.sample_into(*request, sink)
    }
    fn refresh_lane(&mut self) -> Result<()> {
        self.refresh()
    }
    fn reseed_lane(&mut self, seed: u64) {
        self.reseed(seed);
    }
    fn priority_mass(&mut self) -> Result<(f64, f64)> {
        Reader::priority_mass(self)
    }
    fn removed(&self, index: u64) -> bool {
        self.is_removed(index)
    }
    fn lane_item_states(&mut self, indices: &[u64]) -> Result<Vec<crate::ItemState>> {
        self.item_states(indices)
    }
    fn lane_stats(&mut self) -> Result<crate::Stats> {
        self.stats()
    }
    fn tally_lane_draws(&mut self) {
        self.tally_draws();
    }
}

impl Lane for PriorityOwner {
    fn sample_lane_into(&mut self, request: &Request<'_>, sink: &mut dyn Sink) -> Result<()> {
        self.sample_into(*request, sink)
    }
    fn refresh_lane(&mut self) -> Result<()> {
        self.catch_up()
    }
    fn reseed_lane(&mut self, seed: u64) {
        self.reader().reseed(seed);
    }
    fn priority_mass(&mut self) -> Result<(f64, f64)> {
        let s = self.priority_summary()?;
        Ok((s.total, s.min_leaf))
    }
    fn removed(&self, index: u64) -> bool {
        self.reader_ref().is_removed(index)
    }
    fn lane_item_states(&mut self, indices: &[u64]) -> Result<Vec<crate::ItemState>> {
        self.reader().item_states(indices)
    }
    fn lane_stats(&mut self) -> Result<crate::Stats> {
        self.reader().stats()
    }
    fn tally_lane_draws(&mut self) {
        self.reader().tally_draws();
    }
}

impl PriorityLane for PriorityOwner {
    fn check_priority(&self, position: usize, index: u64, p: f64) -> Result<()> {
        PriorityOwner::check_priority(self, position, index, p)
    }
    fn update_lane(&mut self, indices: &[u64], priorities: &[f64]) -> Result<PriorityUpdate> {
        self.update_priorities(indices, priorities)
    }
    fn max_priority(&self) -> Option<f64> {
        Some(PriorityOwner::max_priority(self))
    }
    fn raise_max(&mut self, q: f64) {
        PriorityOwner::raise_max(self, q);
    }
}
