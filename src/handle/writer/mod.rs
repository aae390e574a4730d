//! [`ReplayBuffer`]: the writer's handle on a buffer directory. Its state is here; what
//! it does is in `open`, `add`, `draw` and `commit`.

mod add;
mod commit;
mod draw;
mod life;
pub(super) mod open;
mod policy;
mod role;
mod state;

pub use role::{Actor, Frozen, HoldsTree, Role, Writer, Writes};

use std::marker::PhantomData;
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

/// A replay buffer handle: the one writer of its directory (`ReplayBuffer`, which is
/// `ReplayBuffer<Writer>`), an actor adding beside a priority owner
/// (`ReplayBuffer<Actor>`, from [`ReplayBuffer::open_actor`]), or a frozen snapshot
/// (`ReplayBuffer<Frozen>`, from [`ReplayBuffer::open_snapshot`]). The role `R` says
/// what the handle may do: a method it may not call is not there.
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
pub struct ReplayBuffer<R: Role = Writer> {
    /// The rows, the live range and the sampling stream (the read side).
    pub(super) rows: Rows,
    /// The commit slots and locks this handle writes with.
    pub(super) commits: Commits,
    pub(super) scratch: Scratch,
    pub(super) poisoned: Option<String>,
    pub(super) closed: bool,
    pub(super) recovered: Option<Recovered>,
    /// Unnamed checkpoints `get_state` keeps (`None`: all); see
    /// [`ReplayBuffer::set_keep_states`].
    pub(super) keep_states: Option<usize>,
    /// What the buffer keeps beyond its rows (priorities, episodes, fragments, eviction
    /// records), each called at the hooks in `parts::set`.
    pub(super) parts: Parts,
    /// The progress page readers in other processes follow (the writer's only).
    pub(super) progress: Option<ProgressMap>,
    role: PhantomData<R>,
}

/// Unnamed checkpoints a handle keeps unless told otherwise: enough to step back a
/// few checkpoints, and a bound on the disk the copy-on-write of old ones holds.
pub const DEFAULT_KEEP_STATES: usize = 3;

impl<R: Role> ReplayBuffer<R> {
    /// Gathers as for a ring larger than memory, whatever its size (tests).
    #[cfg(test)]
    pub(crate) fn force_page_in(&mut self) {
        self.rows.ring.force_page_in();
    }
}

/// What opening a buffer's files yields, before it becomes a handle: a writer wraps all
/// of it, a reader keeps the rows (and a snapshot's frozen tree).
pub(super) struct Opened {
    pub rows: Rows,
    pub commits: Commits,
    pub recovered: Option<Recovered>,
    pub parts: Parts,
    pub progress: Option<ProgressMap>,
}

impl<R: Role> ReplayBuffer<R> {
    /// The handle over files just opened.
    fn from_opened(o: Opened) -> ReplayBuffer<R> {
        ReplayBuffer {
            rows: o.rows,
            commits: o.commits,
            scratch: Scratch::default(),
            poisoned: None,
            closed: false,
            recovered: o.recovered,
            keep_states: Some(DEFAULT_KEEP_STATES),
            parts: o.parts,
            progress: o.progress,
            role: PhantomData,
        }
    }

    /// The buffer directory.
    pub fn dir(&self) -> &Path {
        &self.rows.dir
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.rows.schema
    }

    /// Items live now (with item states: not counting removed ones).
    pub fn len(&self) -> u64 {
        self.rows.len() - self.removed_live()
    }

    /// Whether no item is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items the ring holds.
    pub fn capacity(&self) -> u64 {
        self.rows.superblock.capacity
    }

    /// The most bytes of variable-length values one `add` or `add_batch` call can hold:
    /// the chunk ring's payload (0 for a schema without such fields). More is refused
    /// with `ValueTooLong`; a binding checks a value against it before copying it.
    ///
    /// ```
    /// use replaystore::{Config, ReplayBuffer, Schema, VarKind};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().variable("t", VarKind::Str, None).build()?;
    /// // 4 chunk rows of 1 KiB (a 16-byte header and 1,008 bytes of payload each).
    /// let buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).heap_bytes(4 * 1024))?;
    /// assert_eq!(buf.value_room(), 4 * 1008);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn value_room(&self) -> u64 {
        self.rows
            .heap
            .as_ref()
            .map_or(0, |h| h.capacity().saturating_mul(h.chunk_bytes()))
    }

    /// The live logical indices, `head..tail`.
    pub fn live(&self) -> Range<u64> {
        self.rows.live()
    }

    /// What opening found after an unclean shutdown, if it was one.
    pub fn recovery(&self) -> Option<Recovered> {
        self.recovered
    }

    /// Counters and sizes. `sampled` counts this handle's draws and those of readers
    /// that may write the progress page, in any process (theirs since the last commit
    /// included).
    pub fn stats(&self) -> Stats {
        let (tree, life) = (self.parts.tree.tree(), self.parts.life.as_ref());
        let mut stats = self.rows.stats_with(self.commits.generation, tree, life);
        if let Some(p) = &self.progress {
            let pending = p.load(crate::format::progress::READER_DRAWS_OFF);
            stats.sampled = stats.sampled.saturating_add(pending);
        }
        stats
    }

    pub(super) fn writable(&self) -> Result<()> {
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
    pub fn is_read_only(&self) -> bool {
        self.commits.lock.is_none()
    }

    /// Records the first failure of a write path; every later write is refused.
    fn poison(&mut self, e: Error) -> Error {
        if self.poisoned.is_none() {
            self.poisoned = Some(e.to_string());
        }
        e
    }

    /// Why this handle has no priorities to draw from or update: another process owns
    /// them (an actor), or the buffer keeps none.
    pub(super) fn no_priorities(&self) -> Error {
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

    fn not_episodic(&self, op: &str) -> Result<()> {
        if self.parts.episodes.is_some() {
            return Err(Error::EpisodeOrder(format!(
                "{op} on an episodic buffer: add rows with add_reset and add_step"
            )));
        }
        Ok(())
    }

    pub(super) fn episodes_ref(&self) -> Result<&Episodes> {
        self.parts
            .episodes
            .as_ref()
            .ok_or_else(|| Error::NotEpisodic {
                dir: self.rows.dir.clone(),
            })
    }
}

impl<R: Role> Drop for ReplayBuffer<R> {
    fn drop(&mut self) {
        if !self.closed && self.poisoned.is_none() && self.commits.lock.is_some() {
            // Errors cannot be returned from drop; the data is in the page cache either
            // way, and the next open recovers it if this commit did not land.
            let _ = self.shutdown();
        }
    }
}
