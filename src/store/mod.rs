//! A buffer as its writer holds it, and everything that changes it: opening and
//! recovery (`open`), adds (`add`), commits and checkpoints (`commit`), removals, uses
//! and the rate limiter (`life`), downsampling and the reservoir (`policy`), and the
//! writer's draws (`draw`). It knows no role: the handle wrapping it
//! (`handle::ReplayBuffer<R>`) says by its type which of these a program may call, and
//! passes how its role holds the files (`Holder`) to the calls that reopen them.

mod add;
mod commit;
mod draw;
mod life;
mod open;
mod policy;
mod state;

pub(crate) use open::{create_empty_dir, open_parts, snapshot_parts};

use std::ops::Range;
use std::path::Path;

use crate::algo::recovery::Recovered;
use crate::draw::Rows;
use crate::error::{Error, Result};
use crate::parts::config::Stats;
use crate::parts::episodes::Episodes;
use crate::parts::set::Parts;
use crate::schema::Schema;
use crate::storage::map::ProgressMap;
use crate::storage::{self};
use state::{Commits, Scratch};

/// A buffer's open files and the state beside them, as its writer (or an actor, or a
/// frozen snapshot) holds them.
#[derive(Debug)]
pub(crate) struct Store {
    /// The rows, the live range and the sampling stream (the read side).
    pub rows: Rows,
    /// The commit slots and locks this handle writes with.
    pub commits: Commits,
    pub scratch: Scratch,
    pub poisoned: Option<String>,
    pub closed: bool,
    pub recovered: Option<Recovered>,
    /// Unnamed checkpoints `get_state` keeps (`None`: all).
    pub keep_states: Option<usize>,
    /// What the buffer keeps beyond its rows (priorities, episodes, fragments, eviction
    /// records), each called at the hooks in `parts::set`.
    pub parts: Parts,
    /// The progress page readers in other processes follow (the writer's only).
    pub progress: Option<ProgressMap>,
}

/// Unnamed checkpoints a handle keeps unless told otherwise: enough to step back a
/// few checkpoints, and a bound on the disk the copy-on-write of old ones holds.
pub(crate) const DEFAULT_KEEP_STATES: usize = 3;

impl Store {
    /// Gathers as for a ring larger than memory, whatever its size (tests).
    #[cfg(test)]
    pub(crate) fn force_page_in(&mut self) {
        self.rows.ring.force_page_in();
    }

    /// The state over files just opened.
    fn from_opened(o: Opened) -> Store {
        Store {
            rows: o.rows,
            commits: o.commits,
            scratch: Scratch::default(),
            poisoned: None,
            closed: false,
            recovered: o.recovered,
            keep_states: Some(DEFAULT_KEEP_STATES),
            parts: o.parts,
            progress: o.progress,
        }
    }

    /// The buffer directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.rows.dir
    }

    /// The schema.
    pub(crate) fn schema(&self) -> &Schema {
        &self.rows.schema
    }

    /// Items live now (with item states: not counting removed ones).
    pub(crate) fn len(&self) -> u64 {
        self.rows.len() - self.removed_live()
    }

    /// Whether no item is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items the ring holds.
    pub(crate) fn capacity(&self) -> u64 {
        self.rows.superblock.capacity
    }

    /// The most bytes of variable-length values one `add` or `add_batch` call can hold:
    /// the chunk ring's payload (0 for a schema without such fields). More is refused
    /// with `ValueTooLong`; a binding checks a value against it before copying it.
    pub(crate) fn value_room(&self) -> u64 {
        self.rows
            .heap
            .as_ref()
            .map_or(0, |h| h.capacity().saturating_mul(h.chunk_bytes()))
    }

    /// The live logical indices, `head..tail`.
    pub(crate) fn live(&self) -> Range<u64> {
        self.rows.live()
    }

    /// What opening found after an unclean shutdown, if it was one.
    pub(crate) fn recovery(&self) -> Option<Recovered> {
        self.recovered
    }

    /// Counters and sizes. `sampled` counts this handle's draws and those of readers
    /// that may write the progress page, in any process (theirs since the last commit
    /// included).
    pub(crate) fn stats(&self) -> Stats {
        let (tree, life) = (self.parts.tree.tree(), self.parts.life.as_ref());
        let mut stats = self.rows.stats_with(self.commits.generation, tree, life);
        if let Some(p) = &self.progress {
            let pending = p.load(crate::format::progress::READER_DRAWS_OFF);
            stats.sampled = stats.sampled.saturating_add(pending);
        }
        stats
    }

    pub(crate) fn writable(&self) -> Result<()> {
        match &self.poisoned {
            Some(reason) => Err(Error::Poisoned {
                dir: self.rows.dir.clone(),
                reason: reason.clone(),
            }),
            None if self.commits.lock.is_none() => Err(Error::ReadOnly {
                dir: self.rows.dir.clone(),
                op: "writing",
            }),
            None => Ok(()),
        }
    }

    /// Whether this handle is a read-only snapshot.
    pub(crate) fn is_read_only(&self) -> bool {
        self.commits.lock.is_none()
    }

    /// Records the first failure of a write path; every later write is refused.
    pub(crate) fn poison(&mut self, e: Error) -> Error {
        if self.poisoned.is_none() {
            self.poisoned = Some(e.to_string());
        }
        e
    }

    /// Why this handle has no priorities to draw from or update: another process owns
    /// them (an actor), or the buffer keeps none.
    pub(crate) fn no_priorities(&self) -> Error {
        if self.parts.tree.is_actor() && self.rows.superblock.prioritized {
            Error::NotPriorityOwner {
                dir: self.rows.dir.clone(),
                lock_file: self.rows.dir.join(storage::PRIORITY_LOCK),
                holder: storage::tree_owner_pid(&*self.rows.io, &self.rows.dir),
            }
        } else {
            Error::NotPrioritized {
                dir: self.rows.dir.clone(),
            }
        }
    }

    pub(crate) fn not_episodic(&self, op: &str) -> Result<()> {
        if self.parts.episodes.is_some() {
            return Err(Error::EpisodeOrder(format!(
                "{op} on an episodic buffer: add rows with add_reset and add_step"
            )));
        }
        Ok(())
    }

    pub(crate) fn episodes_ref(&self) -> Result<&Episodes> {
        self.parts
            .episodes
            .as_ref()
            .ok_or_else(|| Error::NotEpisodic {
                dir: self.rows.dir.clone(),
            })
    }
}

/// What opening a buffer's files yields, before it becomes a handle: a writer wraps all
/// of it, a reader keeps the rows (and a snapshot's frozen tree).
pub(crate) struct Opened {
    pub rows: Rows,
    pub commits: Commits,
    pub recovered: Option<Recovered>,
    pub parts: Parts,
    pub progress: Option<ProgressMap>,
}

impl Drop for Store {
    fn drop(&mut self) {
        if !self.closed && self.poisoned.is_none() && self.commits.lock.is_some() {
            // Errors cannot be returned from drop; the data is in the page cache either
            // way, and the next open recovers it if this commit did not land.
            let _ = self.shutdown();
        }
    }
}
