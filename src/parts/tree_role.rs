//! Who keeps a buffer's priority tree, as one value instead of a tree, a lock and an
//! "actor" flag that had to agree: this handle (a writer, or a snapshot's private copy),
//! another process (this handle is an actor adding beside a `PriorityOwner`), or nobody.

use std::fs::File;

use crate::parts::priorities::Priorities;

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

    /// The first item whose leaf may not be durable yet.
    pub fn durable_below(&self) -> Option<u64> {
        match self {
            TreeRole::Owned { durable_below, .. } => Some(*durable_below),
            _ => None,
        }
    }

    /// The leaves of every item below `tail` are durable now.
    pub fn set_durable_below(&mut self, tail: u64) {
        if let TreeRole::Owned { durable_below, .. } = self {
            *durable_below = tail;
        }
    }
}
