//! Who keeps a buffer's priority tree, as one value instead of a tree, a lock and an
//! "actor" flag that had to agree: this handle (a writer, or a snapshot's private copy),
//! another process (this handle is an actor adding beside a `PriorityOwner`), or nobody.

use std::fs::File;
use std::path::Path;

use super::hooks::{Checking, Found, Holder, NewRow, Opening, Part, PartFile};
use super::priorities::{LiveRange, Priorities};
use crate::error::Result;
use crate::format::manifest::Superblock;
use crate::storage::io::{Access, Io};
use crate::storage::{self};

/// This handle's relation to the priority tree.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per handle, as the Option<Priorities> it replaces: boxing the tree would add a pointer chase to every add"
)]
pub(crate) enum TreeRole {
    /// The buffer keeps no priorities, or this handle reads the tree its own way (a live
    /// reader descends the shared tree through `SharedPriorities`).
    Absent,
    /// This handle maps and writes the tree.
    Owned {
        tree: Priorities,
        /// `priorities.lock`, held by a writer that owns the tree (a snapshot has none).
        lock: Option<File>,
        /// Items below this index have durable leaves (the tree was msynced, or copied
        /// durably, with them): a commit covering later ones msyncs theirs first.
        durable_below: u64,
    },
    /// Another process owns the tree (`open_actor`): items are added without leaves,
    /// which the owner sets when it catches up.
    Elsewhere,
}

impl TreeRole {
    /// The tree as `at.holder` keeps it: mapped writable with `priorities.lock` taken (the
    /// writer), mapped private (a snapshot), or not at all (an actor, whose owner is
    /// another process; a reader, which descends the shared tree its own way).
    pub fn open(at: &Opening<'_>) -> Result<TreeRole> {
        let (io, dir, sb) = (at.io, at.dir, at.sb);
        Ok(match at.holder {
            Holder::Actor => TreeRole::Elsewhere,
            _ if !sb.prioritized => TreeRole::Absent,
            Holder::Live => TreeRole::Absent,
            Holder::Writer => {
                // The writer owns its tree, and says so with the lock a PriorityOwner
                // process would need.
                let lock = storage::lock_priorities(io, dir)?;
                TreeRole::Owned {
                    tree: Priorities::open(io, dir, sb, Access::Write)?,
                    lock: Some(lock),
                    durable_below: 0,
                }
            }
            Holder::Frozen => TreeRole::Owned {
                tree: Priorities::open(io, dir, sb, Access::Frozen)?,
                lock: None,
                durable_below: 0,
            },
        })
    }

    /// The tree, when this handle owns it.
    #[inline(always)]
    pub fn tree(&self) -> Option<&Priorities> {
        match self {
            TreeRole::Owned { tree, .. } => Some(tree),
            _ => None,
        }
    }

    /// The tree, when this handle owns it.
    #[inline(always)]
    pub fn tree_mut(&mut self) -> Option<&mut Priorities> {
        match self {
            TreeRole::Owned { tree, .. } => Some(tree),
            _ => None,
        }
    }

    /// Whether this handle adds while another process owns the tree.
    pub fn is_actor(&self) -> bool {
        matches!(self, TreeRole::Elsewhere)
    }

    /// Whether this handle holds `priorities.lock` (it is the writer owning the tree).
    pub fn holds_lock(&self) -> bool {
        matches!(self, TreeRole::Owned { lock: Some(_), .. })
    }

    /// Lets go of `priorities.lock` (a handle about to reopen takes it again: flock is
    /// per open file).
    pub fn release_lock(&mut self) {
        if let TreeRole::Owned { lock, .. } = self {
            drop(lock.take());
        }
    }

    /// Whether this handle owns a tree that a restore linked (read-only until copied).
    #[inline(always)]
    pub fn is_shared(&self) -> bool {
        matches!(self, TreeRole::Owned { tree, .. } if tree.is_shared())
    }

    /// Gives a linked tree a file of its own before this handle's first store into it,
    /// and names this process its owner there (deferred from the open: the linked file
    /// is the snapshot's, which names none). Returns whether the file was replaced.
    pub fn make_private(&mut self, io: &dyn Io) -> Result<bool> {
        let TreeRole::Owned { tree, lock, .. } = self else {
            return Ok(false);
        };
        if !tree.make_private(io)? {
            return Ok(false);
        }
        if lock.is_some() {
            tree.set_owner(std::process::id());
        }
        Ok(true)
    }

    /// The leaves of every item below `tail` are durable now.
    pub fn set_durable_below(&mut self, tail: u64) {
        if let TreeRole::Owned { durable_below, .. } = self {
            *durable_below = tail;
        }
    }
}

impl Part for TreeRole {
    fn files(sb: &Superblock) -> Vec<PartFile> {
        let check = |io: &dyn Io, dir: &Path, sb: &Superblock| {
            storage::open_tree(io, dir, sb, Access::Read).map(drop)
        };
        match sb.prioritized {
            true => vec![PartFile {
                path: storage::tree_path,
                check,
            }],
            false => Vec::new(),
        }
    }

    fn verify(at: &Checking<'_>, found: &mut Found<'_>) {
        if at.sb.prioritized {
            super::priorities::verify::verify(at, found);
        }
    }

    fn recovered(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        if at.holder.writes() {
            self.make_private(at.io)?;
        }
        if let Some(p) = self.tree_mut() {
            p.repair(live.head_slot as usize, (live.tail - live.head) as usize)?;
            if at.holder.writes() {
                p.flush(at.io)?;
            }
        }
        Ok(())
    }

    fn ready(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        let TreeRole::Owned {
            tree: p,
            lock,
            durable_below,
        } = self
        else {
            return Ok(());
        };
        let (sb, ring) = (at.sb, at.ring);
        let (head, tail) = (live.head, live.tail);
        // A restored tree was copied while a PriorityOwner may have been writing it (an
        // actor's checkpoint): its parents are recomputed from the leaves. A copy its
        // owner made is sound and is left untouched (and unflushed).
        let (first, len) = (live.head_slot as usize, (tail - head) as usize);
        // A sealed copy (its owner settled the tree it copied, and not a byte changed
        // since) is sound without the pass: a crc of the body instead of recomputing
        // every parent (~3 ms per million slots).
        let repaired = at.restored && !p.seal_holds() && !p.is_sound(first, len);
        if repaired {
            p.make_private(at.io)?;
            p.repair(first, len)?;
        }
        // Items an actor added while another process owned the tree (or none did):
        // their leaves are set now. A tree that says it has seen more than the rows
        // hold lost them to a power cut with the rows.
        if p.caught_up() > tail {
            p.note_caught_up(tail);
        }
        let caught_up_now = p.caught_up() < tail;
        if caught_up_now {
            p.make_private(at.io)?;
            let is_reset = |i: u64| sb.episodic && ring.step_header(i % sb.capacity).t == 0;
            p.catch_up(tail.saturating_sub(sb.capacity), head, tail, is_reset);
        }
        // A linked tree names its owner when it gets a file of its own (`make_private`).
        if lock.is_some() && !p.is_shared() {
            p.set_owner(std::process::id());
        }
        if at.holder.writes() && (repaired || caught_up_now) {
            p.flush(at.io)?;
        }
        *durable_below = tail;
        Ok(())
    }

    /// The leaf is written while the slot is marked "being written": a kill then never
    /// leaves a complete item without its priority, nor an intact older item with the
    /// new item's priority.
    #[inline(always)]
    fn on_row(&mut self, row: &NewRow) {
        if let Some(p) = self.tree_mut() {
            if row.reset {
                p.on_add_leaf(row.slot, 0.0);
            } else {
                p.on_add(row.slot);
            }
            p.note_caught_up(row.index + 1);
        }
    }

    fn on_evicted(&mut self, first_slot: u64, count: u64) {
        if let Some(p) = self.tree_mut() {
            p.zero(first_slot, count);
        }
    }

    fn on_clear(&mut self, tail: u64) {
        if let Some(p) = self.tree_mut() {
            p.clear();
            p.note_caught_up(tail);
        }
    }

    fn before_commit(&mut self, io: &dyn Io, tail: u64) -> Result<()> {
        if let Some(p) = self.tree_mut() {
            p.flush(io)?;
        }
        self.set_durable_below(tail);
        Ok(())
    }

    /// Only the leaves of items added since the last flush are made durable with the
    /// commit before the copy: the snapshot gets its own copy, taken from the page
    /// cache and synced. Msyncing the live tree too would write every page a priority
    /// update touched (a whole 1M-leaf tree after a few thousand PER batches: tens of
    /// ms) and make each next update take a write-protect fault.
    fn before_checkpoint(&mut self, io: &dyn Io, capacity: u64, tail: u64) -> Result<()> {
        if let TreeRole::Owned {
            tree: p,
            durable_below,
            ..
        } = self
        {
            p.settle();
            let from = *durable_below;
            p.flush_leaves(io, from % capacity, tail - from)?;
            *durable_below = tail;
        }
        Ok(())
    }

    /// The writer settled the tree it owns before the copy: the copy names no owner,
    /// so `verify` judges its parents, and is sealed with the crc of its body (taken from
    /// the live tree: the same bytes, nothing stores into it between the copy and this).
    /// An actor's copy keeps the owner's pid and no seal: it may have been taken
    /// mid-update, and is judged (and repaired if need be) when restored.
    fn checkpoint_copied(&self, io: &dyn Io, snapshot: &Path) -> Result<()> {
        match self.tree() {
            Some(tree) => {
                storage::seal_tree_copy(io, &storage::tree_path(snapshot), tree.body_crc())
            }
            None => Ok(()),
        }
    }

    fn on_close(&mut self) {
        if self.holds_lock()
            && let Some(p) = self.tree_mut()
            && !p.is_shared()
        {
            p.set_owner(0);
        }
    }
}
