//! The engine handle a Python `ReplayBuffer` holds, shared with the views it hands out
//! (`Episode`): each view reads through the same lock, and sees the buffer closed once
//! it is.

use std::sync::Arc;

use pyo3::prelude::*;
use replaystore::{Actor, ReplayBuffer, Schema};

use crate::errors::{ClosedError, to_py};
use crate::shared::Shared;

/// The engine handle of one Python buffer, taken by each call in turn; `None` once
/// closed. Cloned into the views that read through it.
pub(crate) type Held = Arc<Shared<Option<Handle>>>;

/// A fresh `Held` of an open handle.
pub(crate) fn held(handle: Handle) -> Held {
    Arc::new(Shared::new(Some(handle)))
}

/// The engine handle behind a Python `ReplayBuffer`: the writer, or an actor opened with
/// `actor=True` (another process owns its priorities, so it has no priority calls).
pub(crate) enum Handle {
    Writer(ReplayBuffer),
    Actor(ReplayBuffer<Actor>),
}

/// Runs `$body` with `$b` bound to the engine handle, whichever role it has.
macro_rules! either {
    ($h:expr, $b:ident => $body:expr) => {
        match $h {
            $crate::held::Handle::Writer($b) => $body,
            $crate::held::Handle::Actor($b) => $body,
        }
    };
}

impl Handle {
    pub(crate) fn schema(&self) -> &Schema {
        either!(self, b => b.schema())
    }

    pub(crate) fn value_room(&self) -> u64 {
        either!(self, b => b.value_room())
    }

    pub(crate) fn dir(&self) -> &std::path::Path {
        either!(self, b => b.dir())
    }

    pub(crate) fn reseed(&mut self, seed: u64) {
        either!(self, b => b.reseed(seed))
    }

    pub(crate) fn len(&self) -> u64 {
        either!(self, b => b.len())
    }

    pub(crate) fn capacity(&self) -> u64 {
        either!(self, b => b.capacity())
    }

    pub(crate) fn stats(&self) -> replaystore::Stats {
        either!(self, b => b.stats())
    }

    pub(crate) fn item_states(
        &self,
        indices: &[u64],
    ) -> replaystore::Result<Vec<replaystore::ItemState>> {
        either!(self, b => b.item_states(indices))
    }

    pub(crate) fn remove(&mut self, indices: &[u64]) -> replaystore::Result<u64> {
        either!(self, b => b.remove(indices))
    }

    pub(crate) fn remove_stale(
        &mut self,
        field: &str,
        now: i64,
        max: u64,
    ) -> replaystore::Result<u64> {
        either!(self, b => b.remove_stale(field, now, max))
    }

    pub(crate) fn rate_limit_wait(&self) -> Option<std::time::Duration> {
        either!(self, b => b.rate_limit_wait())
    }

    pub(crate) fn set_rate_limit_wait(&mut self, wait: Option<std::time::Duration>) {
        either!(self, b => b.set_rate_limit_wait(wait))
    }

    pub(crate) fn read_checks(&self) -> bool {
        either!(self, b => b.read_checks())
    }

    pub(crate) fn set_read_checks(&mut self, on: bool) {
        either!(self, b => b.set_read_checks(on))
    }

    pub(crate) fn write_behind(&self) -> u64 {
        either!(self, b => b.write_behind())
    }

    pub(crate) fn set_write_behind(&mut self, window_bytes: u64) {
        either!(self, b => b.set_write_behind(window_bytes))
    }

    pub(crate) fn episode(&self, index: u64) -> replaystore::Result<replaystore::EpisodeInfo> {
        either!(self, b => b.episode(index))
    }

    pub(crate) fn episodes(&self) -> replaystore::Result<Vec<replaystore::EpisodeInfo>> {
        either!(self, b => b.episodes())
    }

    pub(crate) fn unfinished_episodes(&self) -> replaystore::Result<Vec<replaystore::EpisodeInfo>> {
        either!(self, b => b.unfinished_episodes())
    }

    pub(crate) fn prev(&self, index: u64) -> replaystore::Result<u64> {
        either!(self, b => b.prev(index))
    }

    pub(crate) fn next(&self, index: u64) -> replaystore::Result<u64> {
        either!(self, b => b.next(index))
    }

    pub(crate) fn snapshots(&self) -> replaystore::Result<Vec<replaystore::SnapshotInfo>> {
        either!(self, b => b.snapshots())
    }

    /// Priority totals, for the writer of a prioritized buffer (an actor's are another
    /// process's).
    pub(crate) fn priority_summary(&mut self) -> Option<replaystore::PrioritySummary> {
        match self {
            Handle::Writer(b) => b.priority_summary(),
            Handle::Actor(_) => None,
        }
    }

    /// The writer, for the calls on priorities an actor does not have; an actor gets
    /// the engine's `NotPriorityOwner` (a `LockedError` naming the owner).
    pub(crate) fn owner(&mut self) -> PyResult<&mut ReplayBuffer> {
        match self {
            Handle::Writer(b) => Ok(b),
            Handle::Actor(a) => Err(to_py(a.not_priority_owner())),
        }
    }
}

pub(crate) use either;

/// The open buffer behind a taken lock.
pub(crate) fn open_buf(held: &mut Option<Handle>) -> PyResult<&mut Handle> {
    held.as_mut()
        .ok_or_else(|| ClosedError::new_err("the buffer is closed"))
}
