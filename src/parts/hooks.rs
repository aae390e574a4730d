//! The hooks a part answers, in the order the core calls them (docs/ARCHITECTURE.md,
//! "Parts: what each owns"). Each part implements [`Part`] for the hooks that concern
//! it (every hook defaults to doing nothing); [`super::set::Parts`] calls every part at
//! each hook in a fixed order, so the writer's open, add, commit and checkpoint code
//! names no part.

use std::path::Path;

use crate::error::{Finding, Result};
use crate::format::manifest::{Commit, Superblock};
use crate::schema::Schema;
use crate::storage::io::Io;
use crate::storage::ring::Ring;

use super::priorities::LiveRange;

/// Who is opening the buffer, as the parts need to know it: whether their files may be
/// written, and who keeps the priority tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[expect(
    unnameable_types,
    reason = "the sealed trait of ReplayBuffer's roles names it; callers can neither name nor make one"
)]
pub enum Holder {
    /// The one writer, owning every part (the priority tree and its lock included).
    Writer,
    /// The one writer, adding while a `PriorityOwner` process keeps the tree.
    Actor,
    /// A snapshot: private mappings, never a byte written to disk.
    Frozen,
    /// A reader of a buffer another process writes: the parts' read sides only.
    Live,
}

impl Holder {
    /// Whether this holder writes files (its repairs reach the disk).
    pub fn writes(self) -> bool {
        matches!(self, Holder::Writer | Holder::Actor)
    }
}

/// What a part is handed while the buffer opens: the files as mapped, and who holds
/// them. The live range is passed to each hook beside it.
pub(crate) struct Opening<'a> {
    pub io: &'a dyn Io,
    pub dir: &'a Path,
    pub sb: &'a Superblock,
    pub schema: &'a Schema,
    pub ring: &'a Ring,
    pub holder: Holder,
    /// This process has just put a snapshot's files in place (`set_state`): they need
    /// no recovery, but a tree copied beside a running owner may need its parents.
    pub restored: bool,
}

/// The row being stored, as the parts see it between its two stamps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewRow {
    /// Its slot and logical index.
    pub slot: u64,
    pub index: u64,
    /// It begins an episode: it ends no transition, so it gets no priority.
    pub reset: bool,
    /// Its fragment word (position in its call, and whether it is the call's last row).
    pub fragment: u32,
    /// The oldest live index once it is stored.
    pub head: u64,
}

/// A file a part keeps beside the rows, which a checkpoint copies into the snapshot
/// (it changes in place, so a hard link would share later changes) and a restore
/// copies back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartFile {
    /// Its path in a buffer (or snapshot) folder.
    pub path: fn(&Path) -> std::path::PathBuf,
    /// Opens it read-only and checks its header: what a restore requires of the
    /// snapshot's copy before it replaces anything.
    pub check: fn(&dyn Io, &Path, &Superblock) -> Result<()>,
}

/// What `verify` hands each part: one buffer's (or snapshot's) files, read-only, with
/// the live range an open would settle on. Nothing is locked and nothing is written.
pub(crate) struct Checking<'a> {
    pub io: &'a dyn Io,
    pub dir: &'a Path,
    pub sb: &'a Superblock,
    pub schema: &'a Schema,
    pub ring: &'a Ring,
    /// The newest valid commit.
    pub commit: &'a Commit,
    /// The live items, `head..tail`.
    pub head: u64,
    pub tail: u64,
    /// Whether to check every item's share (else headers only).
    pub items: bool,
}

/// Where a part's `verify` puts what it found: damage, and what is worth knowing but
/// is not damage.
pub(crate) struct Found<'a> {
    pub problems: &'a mut Vec<Finding>,
    pub notes: &'a mut Vec<String>,
}

/// What a part does at each point the core calls it. The core calls them in this
/// order over a handle's life: `recovered` and `ready` while opening, `on_row` for each
/// row stored, `on_evicted` when the head jumps past rows, `on_clear`, `before_commit`
/// and `on_commit` around each commit, `before_checkpoint` and `checkpoint_copied`
/// around a snapshot, `on_close`. Opening itself is each part's own constructor, called
/// by `Parts::open` before recovery, so a bad file refuses the open before anything is
/// repaired.
pub(crate) trait Part {
    /// The files the part keeps in a buffer with superblock `sb` (checkpoints copy them).
    fn files(_sb: &Superblock) -> Vec<PartFile>
    where
        Self: Sized,
    {
        Vec::new()
    }

    /// Checks the part's files in the buffer `at` describes, read-only, as `verify` does
    /// (what an open would refuse, and what it would repair).
    fn verify(_at: &Checking<'_>, _found: &mut Found<'_>)
    where
        Self: Sized,
    {
    }

    /// Recovery after an unclean shutdown settled the live range: repair what the part
    /// keeps for those items (and make the repair durable when the holder writes).
    fn recovered(&mut self, _at: &Opening<'_>, _live: LiveRange) -> Result<()> {
        Ok(())
    }

    /// The live range is final (recovered, restored, or as committed): rebuild what is
    /// derived from the rows, catch up with what other processes added.
    fn ready(&mut self, _at: &Opening<'_>, _live: LiveRange) -> Result<()> {
        Ok(())
    }

    /// A row is being stored; runs between its two stamps, so a kill never leaves a
    /// complete row without the part's share of it. Never fails: anything that can
    /// fail is checked before the row (the column checks, `Parts::before_add`).
    #[inline(always)]
    fn on_row(&mut self, _row: &NewRow) {}

    /// The head jumped past `count` rows from slot `first_slot` (their items are gone);
    /// the row at the new head keeps its place.
    fn on_evicted(&mut self, _first_slot: u64, _count: u64) {}

    /// Every live item was dropped; the next index is `tail`.
    fn on_clear(&mut self, _tail: u64) {}

    /// A commit covering every item below `tail` is about to be written: make the
    /// part's state for them durable first.
    fn before_commit(&mut self, _io: &dyn Io, _tail: u64) -> Result<()> {
        Ok(())
    }

    /// A commit covering `head..tail` was written.
    fn on_commit(&mut self, _head: u64, _tail: u64) {}

    /// A checkpoint of the items below `tail` is about to copy the part's files: settle
    /// them and make durable what the commit before the copy covers.
    fn before_checkpoint(&mut self, _io: &dyn Io, _capacity: u64, _tail: u64) -> Result<()> {
        Ok(())
    }

    /// The checkpoint's copies are in `snapshot` (not yet published): fix up what a
    /// copy must not carry over.
    fn checkpoint_copied(&self, _io: &dyn Io, _snapshot: &Path) -> Result<()> {
        Ok(())
    }

    /// The handle closes cleanly (after this, a last `before_commit` and commit).
    fn on_close(&mut self) {}
}

/// A part a buffer may not keep (or keeps once built) answers the hooks when present.
impl<P: Part> Part for Option<P> {
    fn recovered(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        self.as_mut().map_or(Ok(()), |p| p.recovered(at, live))
    }
    fn ready(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        self.as_mut().map_or(Ok(()), |p| p.ready(at, live))
    }
    #[inline(always)]
    fn on_row(&mut self, row: &NewRow) {
        if let Some(p) = self {
            p.on_row(row);
        }
    }
    fn on_evicted(&mut self, first_slot: u64, count: u64) {
        if let Some(p) = self {
            p.on_evicted(first_slot, count);
        }
    }
    fn on_clear(&mut self, tail: u64) {
        if let Some(p) = self {
            p.on_clear(tail);
        }
    }
    fn before_commit(&mut self, io: &dyn Io, tail: u64) -> Result<()> {
        self.as_mut().map_or(Ok(()), |p| p.before_commit(io, tail))
    }
    fn on_commit(&mut self, head: u64, tail: u64) {
        if let Some(p) = self {
            p.on_commit(head, tail);
        }
    }
    fn before_checkpoint(&mut self, io: &dyn Io, capacity: u64, tail: u64) -> Result<()> {
        self.as_mut()
            .map_or(Ok(()), |p| p.before_checkpoint(io, capacity, tail))
    }
    fn checkpoint_copied(&self, io: &dyn Io, snapshot: &Path) -> Result<()> {
        self.as_ref()
            .map_or(Ok(()), |p| p.checkpoint_copied(io, snapshot))
    }
    fn on_close(&mut self) {
        if let Some(p) = self {
            p.on_close();
        }
    }
}
