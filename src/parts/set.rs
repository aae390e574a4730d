//! Every part a handle holds, called in a fixed order at each hook: the writer's core
//! calls `Parts` once per hook and names no part. Adding a part is a field here, its
//! line in `each!` and `Parts::files`, and its constructor in `Parts::open`
//! (docs/ARCHITECTURE.md, "How to add a part"). The rules that join two parts (an
//! episode evicted whole moves the head past rows whose priorities go; a first episode
//! cut by eviction) are here too, not in the core.

use std::fs::File;
use std::path::Path;

use super::episodes::Episodes;
use super::evictions::{Evictions, RecordTo};
use super::fragments::Fragments;
use super::hooks::{Checking, Found, NewRow, Opening, Part, PartFile};
use super::lifecycle::Lifecycle;
use super::priorities::LiveRange;
use super::tree_role::TreeRole;
use crate::error::Result;
use crate::format::manifest::Superblock;
use crate::storage::io::Io;

/// The parts of one handle on one ring.
#[derive(Debug)]
pub(crate) struct Parts {
    /// Who keeps the priority tree: this handle, another process, or nobody.
    pub tree: TreeRole,
    /// The episode table (episodic buffers).
    pub episodes: Option<Episodes>,
    /// The fragment table of a fragment buffer, built from the rows when first needed.
    pub fragments: Option<Fragments>,
    /// Eviction records since the newest commit (overwriting a committed item needs one).
    pub evictions: Evictions,
    /// Each item's state word: removed (and why), uses (buffers with item states).
    pub life: Option<Lifecycle>,
}

/// Runs `$body` with `$p` bound to each part in turn, in the order of the hooks table.
macro_rules! each {
    ($parts:expr, $p:ident => $body:expr) => {{
        {
            let $p = &mut $parts.tree;
            $body;
        }
        {
            let $p = &mut $parts.episodes;
            $body;
        }
        {
            let $p = &mut $parts.fragments;
            $body;
        }
        {
            let $p = &mut $parts.evictions;
            $body;
        }
        {
            let $p = &mut $parts.life;
            $body;
        }
    }};
}

/// Where an eviction record goes, from the core's commit state; `None` for a handle
/// that never commits.
pub(crate) struct Records<'a> {
    pub io: &'a dyn Io,
    pub manifest: Option<&'a File>,
    pub path: &'a Path,
    pub generation: u64,
}

impl Parts {
    /// Opens every part for `at.holder`, after the rows are mapped and before recovery:
    /// a part's bad file refuses the open before anything is repaired. `commit` is the
    /// newest commit's live range.
    pub fn open(at: &Opening<'_>, commit: LiveRange) -> Result<Parts> {
        Ok(Parts {
            tree: TreeRole::open(at)?,
            episodes: Episodes::for_holder(at),
            fragments: None,
            evictions: Evictions::after_commit(commit.head, commit.tail),
            life: Lifecycle::open(at)?,
        })
    }

    /// The files the parts of a buffer with superblock `sb` keep beside its rows.
    pub fn files(sb: &Superblock) -> Vec<PartFile> {
        [
            TreeRole::files,
            Episodes::files,
            Fragments::files,
            Evictions::files,
            Lifecycle::files,
        ]
        .iter()
        .flat_map(|files| files(sb))
        .collect()
    }

    /// Checks every part's files, read-only (`verify`).
    pub fn verify(at: &Checking<'_>, found: &mut Found<'_>) {
        TreeRole::verify(at, found);
        Episodes::verify(at, found);
        Fragments::verify(at, found);
        Evictions::verify(at, found);
        Lifecycle::verify(at, found);
    }

    /// Recovery settled the live range `live`. Then the leaves of removed items are
    /// zeroed: a kill between a removal's word and its leaf (kill point
    /// `remove-before-leaf`) left the leaf, and the item must not be drawn by priority.
    pub fn recovered(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        each!(self, p => p.recovered(at, live)?);
        self.zero_removed_leaves(at, live.head..live.tail)?;
        self.revive_lost_leaves(at, live)
    }

    /// Zeroes the priority leaves of the removed items of `range`, and makes that
    /// durable when the holder writes.
    fn zero_removed_leaves(&mut self, at: &Opening<'_>, range: std::ops::Range<u64>) -> Result<()> {
        let (Some(life), Some(tree)) = (&self.life, self.tree.tree_mut()) else {
            return Ok(());
        };
        let cap = at.sb.capacity;
        let removed: Vec<u64> = range
            .filter(|&i| life.is_removed(i))
            .map(|i| i % cap)
            .collect();
        if !removed.is_empty() {
            tree.zero_slots(&removed);
            if at.holder.writes() {
                tree.flush(at.io)?;
            }
        }
        Ok(())
    }

    /// The live range is final: each part gets ready, then a first episode the head
    /// has cut is settled. Returns the head, which settling may move.
    pub fn ready(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<u64> {
        // The tree's catch-up gives the items it had not seen the largest priority,
        // removed ones too: their leaves are zeroed again after it.
        let caught_up = self.tree.tree().map_or(live.tail, |t| t.caught_up());
        each!(self, p => p.ready(at, live)?);
        self.zero_removed_leaves(at, caught_up.max(live.head)..live.tail)?;
        Ok(self.settle_first_episode(at.sb, live))
    }

    /// After recovery: a kept item that a policy was moving to the tail when the power
    /// went (the old row's stamp not yet on disk, the zeroed leaf of its old slot
    /// already there), or whose removal kept its zeroed leaf but lost its word, is live
    /// with a zero leaf: no draw by priority would reach it. Such a leaf (of a live item
    /// not removed, in a buffer with item states and `eps > 0`, where no live item's
    /// leaf is zero otherwise but an episode's reset row and a step whose observation
    /// row is evicted) gets the largest priority, as an item the tree has not
    /// seen does; made durable when the holder writes. With `eps` 0 a zero leaf may be
    /// a priority of 0, and is left. Only after recovery: a clean open reads no word.
    fn revive_lost_leaves(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        let (Some(life), Some(tree)) = (&self.life, self.tree.tree_mut()) else {
            return Ok(());
        };
        if !tree.leaves_positive() {
            return Ok(());
        }
        let cap = at.sb.capacity;
        // An episode's reset row keeps a zero leaf (its priority lives in its steps),
        // as does the step at the head whose observation row is evicted.
        let keeps_zero =
            |i: u64| at.sb.episodic && (at.ring.step_header(i % cap).t == 0 || i == live.head);
        let lost: Vec<u64> = (live.head..live.tail)
            .filter(|&i| !life.is_removed(i) && tree.leaf_of_slot(i % cap) == 0.0)
            .filter(|&i| !keeps_zero(i))
            .map(|i| i % cap)
            .collect();
        if !lost.is_empty() {
            tree.set_max_leaves(&lost);
            if at.holder.writes() {
                tree.flush(at.io)?;
            }
        }
        Ok(())
    }

    /// After opening: a first episode whose start is evicted (a kill came between a
    /// whole-episode eviction and its commit, or the ring evicts rows one at a time)
    /// is dropped whole with whole-episode eviction, unless it is still being written;
    /// otherwise its first live row loses its priority, as eviction would have done.
    fn settle_first_episode(&mut self, sb: &Superblock, live: LiveRange) -> u64 {
        let Some(first) = self
            .episodes
            .as_ref()
            .and_then(|e| e.iter().next())
            .copied()
        else {
            return live.head;
        };
        if first.start >= live.head {
            return live.head;
        }
        if sb.whole_episodes && first.end.is_some() {
            let passed = first.last() + 1 - live.head;
            self.tree.on_evicted(live.head_slot, passed);
            let head = live.head + passed;
            if let Some(e) = &mut self.episodes {
                e.evict(head);
            }
            head
        } else {
            self.tree.on_evicted(live.head_slot, 1);
            live.head
        }
    }

    /// Whether a full ring evicts by episode (the episode table says where the head
    /// goes and which rows lose their priorities) rather than one row at a time.
    #[inline(always)]
    pub fn evicts_by_episode(&self, sb: &Superblock) -> bool {
        sb.whole_episodes || (self.episodes.is_some() && self.tree.tree().is_some())
    }

    /// Where the head goes when the ring is full and one more row is stored: past the
    /// oldest row, or with whole-episode eviction past its episode (unless that one is
    /// still being written).
    pub fn eviction_target(&self, sb: &Superblock, head: u64, tail: u64) -> u64 {
        let whole = self
            .episodes
            .as_ref()
            .filter(|_| sb.whole_episodes)
            .and_then(|e| e.of(head))
            .map(|e| e.last() + 1)
            .filter(|&to| to < tail);
        whole.unwrap_or(head + 1)
    }

    /// The head of a full ring moves from `head` (in `head_slot`, which the new row
    /// takes) to `to`: the rows passed over lose their priorities, and so does a new
    /// first row that is a step of the oldest episode: its observation row is gone, so
    /// it ends no transition the buffer can return.
    pub fn head_passed(&mut self, capacity: u64, head: u64, head_slot: u64, to: u64) {
        let oldest = self.episodes.as_ref().and_then(|e| e.of(head)).copied();
        let cut = oldest.is_some_and(|e| e.last() >= to);
        let passed = to - head;
        self.tree
            .on_evicted((head_slot + 1) % capacity, passed - 1 + u64::from(cut));
    }

    /// Before storing `rows` more rows on a ring of `capacity` holding `head..tail`:
    /// when they will overwrite items the newest commit covers, an eviction record
    /// saying so is made durable first (see `parts::evictions`).
    #[inline(always)]
    pub fn before_add(
        &mut self,
        sb: &Superblock,
        (head, tail): (u64, u64),
        rows: u64,
        records: Records<'_>,
    ) -> Result<()> {
        let cap = sb.capacity;
        let mut to = (tail + rows).saturating_sub(cap);
        if sb.whole_episodes && tail - head == cap {
            // The head may jump past the oldest episode.
            to = to.max(self.eviction_target(sb, head, tail));
        }
        if !self.evictions.needed(to) {
            return Ok(());
        }
        self.record_eviction(to, head, cap, records)
    }

    /// The head is about to move from `head` to `to` for room in the chunk ring (the
    /// values of a call would overwrite chunks the items below `to` name): an eviction
    /// record first when that passes items the newest commit covers, as for rows.
    pub fn before_head_moves(
        &mut self,
        sb: &Superblock,
        head: u64,
        to: u64,
        records: Records<'_>,
    ) -> Result<()> {
        if !self.evictions.needed(to) {
            return Ok(());
        }
        self.record_eviction(to, head, sb.capacity, records)
    }

    /// The items `head..to` (from `head_slot`) were evicted for
    /// room in the chunk ring: their priorities go, and so does row `to`'s when it is a
    /// step of an episode whose first rows went (its observation row is gone, so it
    /// ends no transition the buffer can return).
    pub fn evicted_for_space(&mut self, head_slot: u64, head: u64, to: u64) {
        let cut = (self.episodes.as_ref())
            .and_then(|e| e.of(to))
            .is_some_and(|e| e.start < to);
        self.tree.on_evicted(head_slot, to - head + u64::from(cut));
    }

    #[cold]
    fn record_eviction(&mut self, to: u64, head: u64, cap: u64, r: Records<'_>) -> Result<()> {
        let Some(manifest) = r.manifest else {
            return Ok(());
        };
        let at = RecordTo {
            io: r.io,
            manifest,
            path: r.path,
            generation: r.generation,
        };
        self.evictions.record(to, head, cap, at)
    }

    /// A row is being stored (between its two stamps).
    #[inline(always)]
    pub fn on_row(&mut self, row: &NewRow) {
        each!(self, p => p.on_row(row));
    }

    /// Every live item was dropped.
    pub fn on_clear(&mut self, tail: u64) {
        each!(self, p => p.on_clear(tail));
    }

    /// Before a commit covering every item below `tail`.
    pub fn before_commit(&mut self, io: &dyn Io, tail: u64) -> Result<()> {
        each!(self, p => p.before_commit(io, tail)?);
        Ok(())
    }

    /// A commit covering `head..tail` was written.
    pub fn on_commit(&mut self, head: u64, tail: u64) {
        each!(self, p => p.on_commit(head, tail));
    }

    /// Before a checkpoint copies the parts' files.
    pub fn before_checkpoint(&mut self, io: &dyn Io, capacity: u64, tail: u64) -> Result<()> {
        each!(self, p => p.before_checkpoint(io, capacity, tail)?);
        Ok(())
    }

    /// The checkpoint's copies are in `snapshot`, not yet published.
    pub fn checkpoint_copied(&mut self, io: &dyn Io, snapshot: &Path) -> Result<()> {
        each!(self, p => p.checkpoint_copied(io, snapshot)?);
        Ok(())
    }

    /// The handle closes cleanly.
    pub fn on_close(&mut self) {
        each!(self, p => p.on_close());
    }
}
