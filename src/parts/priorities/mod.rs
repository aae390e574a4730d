//! Prioritized replay (Schaul et al., 2015) over the persisted sum-tree in
//! `priorities.tree`: what a draw, an update and an add do to the tree, and the
//! importance weights.
//!
//! A leaf holds `(priority + eps)^alpha`, so drawing needs no `powf`; an item's
//! probability is its leaf over the root total. A new item gets the largest
//! `priority + eps` seen so far (1.0 at start), raised to alpha.

mod shared;
mod spec;
pub(crate) mod verify;

pub use shared::PriorityInfo;
pub(crate) use shared::{SharedPriorities, TreeCopy};
pub(crate) use spec::PrioritySpec;
pub use spec::{Priority, PriorityConfig, PrioritySummary, PriorityUpdate};

use std::path::Path;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::algo::sumtree::{Mismatch, SumTree, Words};
use crate::error::{Error, Result};
use crate::format::manifest::Superblock;
use crate::format::tree::{
    BODY_OFFSET, CAUGHT_UP_OFF, MAX_PRIORITY_OFF, TreeCounters, TreeHeader, TreeShape,
};
use crate::storage::io::{Access, Io};
use crate::storage::map::TreeMap;
use crate::storage::{self};

/// Leaves set by adds whose parents are fixed in one pass: bounds how stale the upper
/// levels get between draws while keeping an add at one store.
const FIX_EVERY: usize = 1024;

/// The tree of the arity the file says.
#[derive(Debug)]
pub(crate) enum Tree {
    Binary(SumTree<2>),
    Octal(SumTree<8>),
}

macro_rules! with_tree {
    ($tree:expr, $t:ident => $body:expr) => {
        match $tree {
            Tree::Binary($t) => $body,
            Tree::Octal($t) => $body,
        }
    };
}

impl Tree {
    pub(crate) fn of(shape: TreeShape) -> Tree {
        if shape.arity == 2 {
            Tree::Binary(SumTree::new(shape))
        } else {
            Tree::Octal(SumTree::new(shape))
        }
    }
    pub(crate) fn total<W: Words + ?Sized>(&self, w: &W) -> f64 {
        with_tree!(self, t => t.total(w))
    }
    pub(crate) fn min<W: Words + ?Sized>(&self, w: &W) -> f64 {
        with_tree!(self, t => t.min(w))
    }
    /// Sum of the leaves of `count` slots from `first` of a ring of `cap` slots
    /// (wrapping): a run of items' mass, two prefix sums however long the run.
    pub(crate) fn run_mass<W: Words + ?Sized>(
        &self,
        w: &W,
        first: u64,
        count: u64,
        cap: u64,
    ) -> f64 {
        let first = (first % cap.max(1)) as usize;
        let cap = cap as usize;
        let end = first + (count as usize).min(cap);
        with_tree!(self, t => {
            if end > cap {
                t.total(w) - t.prefix_sum(w, first) + t.prefix_sum(w, end - cap)
            } else {
                t.prefix_sum(w, end) - t.prefix_sum(w, first)
            }
        })
    }
    pub(crate) fn check(&self, w: &[f64], limit: usize) -> Vec<Mismatch> {
        with_tree!(self, t => t.check(w, limit))
    }
    pub(crate) fn shape(&self) -> &TreeShape {
        with_tree!(self, t => t.shape())
    }
}

/// The writer's priorities: the mapped tree and the scratch space of its batch paths.
#[derive(Debug)]
pub(crate) struct Priorities {
    map: TreeMap,
    tree: Tree,
    header: TreeHeader,
    counters: TreeCounters,
    /// `max_priority^alpha`: the leaf of a new item.
    max_leaf: f64,
    /// Largest leaf allowed, so that the total of a full tree stays finite.
    leaf_limit: f64,
    pending_from: usize,
    pending: usize,
    capacity: usize,
    scratch: Vec<usize>,
    descents: Descents,
}

/// The live rows as a draw sees them: `head` is in `head_slot`, `tail` is next.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveRange {
    pub head: u64,
    pub head_slot: u64,
    pub tail: u64,
}

/// A draw that ended on a slot holding no live item or on a zero leaf: what a writer
/// reports as damage and a reader (racing the writer) draws again.
#[derive(Clone, Copy, Debug)]
struct Miss {
    position: usize,
    slot: u64,
    leaf: f64,
}

/// The scratch space of descents, kept between draws.
#[derive(Debug, Default)]
struct Descents {
    targets: Vec<f64>,
    slots: Vec<usize>,
    leaves: Vec<f64>,
    misses: Vec<Miss>,
}

/// Checks a draw's request before anything is drawn.
fn check_request(spec: &PrioritySpec, n: usize, weights: usize, live: LiveRange) -> Result<()> {
    if n == 0 || spec.n != n || weights != n {
        return Err(Error::InvalidSample(format!(
            "n is {}, with {n} index slots and {weights} weight slots (all must be equal and >= 1)",
            spec.n
        )));
    }
    if !(spec.beta.is_finite() && spec.beta >= 0.0) {
        return Err(Error::InvalidSample(format!(
            "beta {} is not finite and >= 0",
            spec.beta
        )));
    }
    if live.head == live.tail {
        return Err(Error::Empty);
    }
    Ok(())
}

/// The root total of `w`, which a draw needs finite and above zero.
fn drawable_total<W: Words + ?Sized>(tree: &Tree, w: &W, file: &Path, live: u64) -> Result<f64> {
    let total = tree.total(w);
    if total == 0.0 {
        return Err(Error::ZeroTotalPriority { live });
    }
    if !(total > 0.0 && total.is_finite()) {
        return Err(Error::Corrupt {
            file: file.to_path_buf(),
            offset: (BODY_OFFSET + tree.shape().levels.first().map_or(0, |l| l.sum) * 8) as u64,
            field: "priority tree root".into(),
            expected: "a finite total > 0".into(),
            got: format!("{total}; run `replaystore verify`"),
        });
    }
    Ok(total)
}

impl Descents {
    /// Draws `indices.len()` items by priority over `w` (whose root is `total`),
    /// writing each index and weight; a draw that misses (see [`Miss`]) is left unset
    /// and listed in `self.misses`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the tree, its words, the request and the outputs, passed flat"
    )]
    fn draw<W: Words + ?Sized>(
        &mut self,
        tree: &Tree,
        w: &W,
        total: f64,
        rng: &mut ChaCha8Rng,
        spec: &PrioritySpec,
        live: LiveRange,
        indices: &mut [u64],
        weights: &mut [f32],
    ) {
        let n = indices.len();
        self.targets.clear();
        if spec.stratified {
            let step = total / n as f64;
            self.targets
                .extend((0..n).map(|i| (i as f64 + rng.random::<f64>()) * step));
        } else {
            self.targets
                .extend((0..n).map(|_| rng.random::<f64>() * total));
        }
        self.slots.resize(n, 0);
        self.leaves.resize(n, 0.0);
        self.misses.clear();
        with_tree!(tree, t => t.sample(w, &mut self.targets, &mut self.slots, &mut self.leaves));
        let min = tree.min(w);
        let beta32 = spec.beta as f32;
        let cap = tree.shape().capacity as u64;
        let (head, head_slot) = (live.head, live.head_slot);
        let count = live.tail - head;
        for (position, ((&slot, &leaf), (index, weight))) in self
            .slots
            .iter()
            .zip(&self.leaves)
            .zip(indices.iter_mut().zip(weights.iter_mut()))
            .enumerate()
        {
            let slot = slot as u64;
            let offset = if slot >= head_slot {
                slot - head_slot
            } else {
                slot + cap - head_slot
            };
            if !(leaf > 0.0 && leaf.is_finite()) || offset >= count {
                self.misses.push(Miss {
                    position,
                    slot,
                    leaf,
                });
                continue;
            }
            *index = head + offset;
            // In f32: the weight is returned as f32, and f32 `powf` costs half of f64's
            // (`pow` was a seventh of a W1-per iteration).
            *weight = match spec.beta {
                0.0 => 1.0,
                1.0 => (min / leaf) as f32,
                _ => ((min / leaf) as f32).powf(beta32),
            };
        }
    }
}

impl Priorities {
    /// Creates `priorities.tree` for a new buffer.
    pub(crate) fn create(
        io: &dyn Io,
        dir: &Path,
        sb: &Superblock,
        config: &PriorityConfig,
    ) -> Result<()> {
        let header = TreeHeader {
            arity: config.arity,
            uuid: sb.uuid,
            capacity: sb.capacity,
            alpha: config.alpha,
            eps: config.eps,
        };
        let path = storage::tree_path(dir);
        let shape = header
            .shape()
            .map_err(|p| p.into_error(&path, "priorities header"))?;
        let tree = Tree::of(shape);
        storage::create_tree(io, dir, &header, |w| with_tree!(&tree, t => t.rebuild(w)))
    }

    /// Opens the writer's view of `priorities.tree`.
    pub(crate) fn open(
        io: &dyn Io,
        dir: &Path,
        sb: &Superblock,
        access: Access,
    ) -> Result<Priorities> {
        let (map, header, counters) = storage::open_tree(io, dir, sb, access)?;
        map.populate();
        let path = map.path().to_path_buf();
        let shape = header
            .shape()
            .map_err(|p| p.into_error(&path, "priorities header"))?;
        let capacity = shape.capacity;
        let padded = shape.leaves().len as f64;
        Ok(Priorities {
            max_leaf: leaf_of(counters.max_priority, header.alpha),
            leaf_limit: f64::MAX / padded,
            tree: Tree::of(shape),
            map,
            header,
            counters,
            pending_from: 0,
            pending: 0,
            capacity,
            scratch: Vec::new(),
            descents: Descents::default(),
        })
    }

    /// After an unclean shutdown: leaves of slots that hold no live item are zeroed,
    /// live leaves are checked, and every parent is recomputed (a kill can cut an update
    /// between a leaf and the root). `live` is `(first live slot, live count)`.
    pub(crate) fn repair(&mut self, first_slot: usize, live: usize) -> Result<()> {
        let leaves = self.tree.shape().leaves();
        let cap = self.capacity;
        let path = self.map.path().to_path_buf();
        let w = self.map.words_mut();
        let is_live = |slot: usize| (slot + cap - first_slot) % cap.max(1) < live;
        for slot in 0..cap {
            let word = leaves.sum + slot;
            let Some(x) = w.get_mut(word) else { break };
            if !is_live(slot) {
                *x = 0.0;
            } else if !(x.is_finite() && *x >= 0.0) {
                return Err(Error::Corrupt {
                    file: path,
                    offset: (BODY_OFFSET + word * 8) as u64,
                    field: format!("priority leaf of slot {slot}"),
                    expected: "a finite number >= 0".into(),
                    got: x.to_string(),
                });
            }
        }
        with_tree!(&self.tree, t => t.rebuild(w));
        self.pending = 0;
        Ok(())
    }

    /// Whether [`Priorities::repair`] would leave the tree as it is: every dead leaf zero,
    /// every live leaf finite and non-negative, every parent its children's sum and min.
    /// Read-only, so a sound tree (a restored copy its owner made) is neither written
    /// nor dirtied: a repair would store into every page and the flush after it would
    /// write the whole file back (at 1M leaves, ~10 ms of each, against ~2 ms here).
    pub(crate) fn is_sound(&self, first_slot: usize, live: usize) -> bool {
        let leaves = self.tree.shape().leaves();
        let cap = self.capacity;
        let w = self.map.words();
        let dead_leaves_zero = dead_slots(cap, first_slot, live)
            .all(|slot| w.get(leaves.sum + slot).is_some_and(|&x| x == 0.0));
        dead_leaves_zero && with_tree!(&self.tree, t => t.check(w, 1)).is_empty()
    }

    /// crc32 of the body as mapped: the seal of a snapshot's copy of this settled tree.
    pub(crate) fn body_crc(&self) -> u32 {
        crate::format::crc32(bytemuck::cast_slice(self.map.words()))
    }

    /// Whether the header's seal holds for the body (`format::tree::seal_holds`): the
    /// file is byte for byte a copy its settled owner made, so its parents are exact.
    pub(crate) fn seal_holds(&self) -> bool {
        let header = self.map.header(crate::format::tree::HEADER_LEN);
        crate::format::tree::seal_holds(&header, self.body_crc())
    }

    /// Whether the file is a snapshot's copy that a restore linked: read-only until
    /// [`Priorities::make_private`].
    pub(crate) fn is_shared(&self) -> bool {
        self.map.is_shared()
    }

    /// Gives a linked tree (`is_shared`) a file of its own before the first store: a
    /// durable copy renamed over the live name (nothing is copied if the snapshot was
    /// deleted meanwhile). Returns whether the file was replaced, so readers in other
    /// processes must map it again. Fails before anything is stored.
    pub(crate) fn make_private(&mut self, io: &dyn Io) -> Result<bool> {
        if !self.map.is_shared() {
            return Ok(false);
        }
        storage::private_tree(io, &mut self.map)?;
        Ok(true)
    }

    /// Fixes pending parents and writes the counters into the mapping, without an
    /// msync: for a copy of the tree taken from the page cache (a snapshot), which is
    /// made durable on its own.
    pub(crate) fn settle(&mut self) {
        self.fix_pending();
        self.write_counters();
    }

    /// Gives the item just stored in `slot` the largest priority seen. Only the leaf is
    /// written; its parents are fixed in runs (before any draw, update or flush).
    #[inline(always)]
    pub(crate) fn on_add(&mut self, slot: u64) {
        self.on_add_leaf(slot, self.max_leaf);
    }

    /// Gives the item just stored in `slot` the leaf `leaf` (0: never drawn, as an
    /// episode's reset row, which ends no transition).
    #[inline(always)]
    pub(crate) fn on_add_leaf(&mut self, slot: u64, leaf: f64) {
        let slot = slot as usize;
        let max_leaf = leaf;
        let w = self.map.words_mut();
        with_tree!(&self.tree, t => t.set_leaf_only(w, slot, max_leaf));
        if self.pending == 0 {
            self.pending_from = slot;
        }
        self.pending += 1;
        if self.pending >= FIX_EVERY {
            self.fix_pending();
        }
    }

    /// Records that items below `tail` have their leaves (the writer that owns the tree
    /// sets each on add); the header word follows at the next fix of parents.
    #[inline(always)]
    pub(crate) fn note_caught_up(&mut self, tail: u64) {
        self.counters.caught_up = tail;
    }

    /// Items below this index have their leaves set (`caught_up` in the header).
    pub(crate) fn caught_up(&self) -> u64 {
        self.counters.caught_up
    }

    /// Names `pid` as the process owning the tree (0: none), in the header.
    pub(crate) fn set_owner(&mut self, pid: u32) {
        self.counters.owner_pid = u64::from(pid);
        self.write_counters();
    }

    /// Sets the leaves of items the tree has not seen: those added by a writer that does
    /// not own the tree (an actor), from `caught_up` to `tail`. New items get the
    /// largest priority seen, reset rows (`is_reset`) zero. Slots of items evicted since
    /// `seen_head` that no new item took are zeroed, so no draw lands on them. Parents
    /// are fixed and the header's `caught_up` moves to `tail`.
    pub(crate) fn catch_up(
        &mut self,
        seen_head: u64,
        head: u64,
        tail: u64,
        mut is_reset: impl FnMut(u64) -> bool,
    ) {
        let cap = self.capacity as u64;
        let oldest_slot_owner = tail.saturating_sub(cap);
        // Evicted, slot not taken again by an item below `tail`.
        let dead_from = seen_head.max(oldest_slot_owner);
        if head > dead_from {
            self.zero(dead_from, head - dead_from);
        }
        let from = self.counters.caught_up.max(oldest_slot_owner).max(head);
        for index in from..tail {
            let slot = index % cap.max(1);
            if is_reset(index) {
                self.on_add_leaf(slot, 0.0);
            } else {
                self.on_add(slot);
            }
        }
        self.fix_pending();
        self.counters.caught_up = tail;
        self.write_counters();
    }

    /// Recomputes the parents of the leaves set by adds since the last fix.
    pub(crate) fn fix_pending(&mut self) {
        if self.pending == 0 {
            return;
        }
        let cap = self.capacity;
        let (from, n) = (self.pending_from, self.pending.min(cap));
        let w = self.map.words_mut();
        with_tree!(&self.tree, t => {
            let end = from + n;
            t.fix_range(w, from, end.min(cap));
            if end > cap {
                t.fix_range(w, 0, end - cap);
            }
        });
        self.pending = 0;
        let caught_up = self.counters.caught_up.to_le_bytes();
        self.map.write_header(CAUGHT_UP_OFF, &caught_up);
    }

    /// Draws `indices.len()` live indices by priority with their importance weights.
    pub(crate) fn draw(
        &mut self,
        rng: &mut ChaCha8Rng,
        spec: &PrioritySpec,
        live: LiveRange,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        check_request(spec, indices.len(), weights.len(), live)?;
        self.fix_pending();
        let w = self.map.words();
        let total = drawable_total(&self.tree, w, self.map.path(), live.tail - live.head)?;
        let d = &mut self.descents;
        d.draw(&self.tree, w, total, rng, spec, live, indices, weights);
        // The writer's own tree is consistent: a miss is damage.
        match d.misses.first().copied() {
            Some(m) => Err(self.inconsistent(m.position, m.slot, m.leaf)),
            None => Ok(()),
        }
    }

    #[cold]
    fn inconsistent(&self, draw: usize, slot: u64, leaf: f64) -> Error {
        let word = self.tree.shape().leaves().sum + slot as usize;
        Error::Corrupt {
            file: self.map.path().to_path_buf(),
            offset: (BODY_OFFSET + word * 8) as u64,
            field: format!("priority tree (draw {draw} reached slot {slot})"),
            expected: "a live slot with a priority > 0".into(),
            got: format!("leaf {leaf}; run `replaystore verify`"),
        }
    }

    /// Checks priorities meant for the items `first_index..` without applying them.
    pub(crate) fn check_values<P: Priority>(
        &self,
        first_index: u64,
        priorities: &[P],
    ) -> Result<()> {
        for (position, p) in priorities.iter().enumerate() {
            self.leaf_for(position, first_index + position as u64, *p)?;
        }
        Ok(())
    }

    /// `(priority + eps, leaf)` for a priority given at `position` for `index`, or the
    /// error naming it: NaN, infinite, negative, or so large that a full tree's total
    /// could overflow.
    #[inline]
    fn leaf_for<P: Priority>(&self, position: usize, index: u64, p: P) -> Result<(f64, f64)> {
        let h = &self.header;
        leaf_value(h.eps, h.alpha, self.leaf_limit, position, index, p)
    }

    /// Checks one priority meant for `index` (given at `position` of an update) without
    /// applying it: the checks `update` makes, for callers that update several trees
    /// and must refuse the whole call before changing any of them.
    pub(crate) fn check_update_one<P: Priority>(
        &self,
        position: usize,
        index: u64,
        tail: u64,
        p: P,
    ) -> Result<()> {
        self.leaf_for(position, index, p)?;
        if index >= tail {
            return Err(Error::NotYetAdded { index, tail });
        }
        Ok(())
    }

    /// Raises the largest priority seen (what new items get) to at least `q`: trees
    /// sampled as one (lanes) give new items the largest priority of them all.
    pub(crate) fn raise_max(&mut self, q: f64) {
        if q > self.counters.max_priority && q.is_finite() {
            self.counters.max_priority = q;
            self.max_leaf = leaf_of(q, self.header.alpha);
            self.write_counters();
        }
    }

    /// Sets the priorities of live `indices`; evicted ones, and those `removed` names
    /// (item states: their leaves stay zero), are skipped and counted. Everything is
    /// checked before anything is changed.
    pub(crate) fn update<P: Priority>(
        &mut self,
        (head, head_slot, tail): (u64, u64, u64),
        indices: &[u64],
        priorities: &[P],
        removed: &dyn Fn(u64) -> bool,
    ) -> Result<PriorityUpdate> {
        check_update_lengths(indices, priorities)?;
        let (eps, alpha, limit) = (self.header.eps, self.header.alpha, self.leaf_limit);
        let leaf_for = |position, index, p: P| leaf_value(eps, alpha, limit, position, index, p);
        let (slots, leaves) = (&mut self.descents.slots, &mut self.descents.leaves);
        slots.clear();
        leaves.clear();
        let cap = self.capacity as u64;
        let mut max_q = self.counters.max_priority;
        let mut stale = 0u64;
        for (position, (&index, &p)) in indices.iter().zip(priorities).enumerate() {
            let (q, leaf) = leaf_for(position, index, p)?;
            if index >= tail {
                return Err(Error::NotYetAdded { index, tail });
            }
            if index < head || removed(index) {
                stale += 1;
                continue;
            }
            let mut slot = head_slot + (index - head);
            if slot >= cap {
                slot -= cap;
            }
            slots.push(slot as usize);
            leaves.push(leaf);
            max_q = max_q.max(q);
        }
        self.fix_pending();
        let w = self.map.words_mut();
        let d = &self.descents;
        with_tree!(&self.tree, t => t.update(w, &d.slots, &d.leaves, &mut self.scratch));
        if max_q > self.counters.max_priority {
            self.counters.max_priority = max_q;
            self.max_leaf = leaf_of(max_q, self.header.alpha);
        }
        let applied = self.descents.slots.len() as u64;
        self.counters.updates += applied;
        self.counters.stale_updates += stale;
        self.write_counters();
        Ok(PriorityUpdate { applied, stale })
    }

    fn write_counters(&mut self) {
        // A tree a snapshot links is written only once it has a file of its own
        // (`make_private`, before any store of leaves or parents); until then the counters
        // live in memory (a lane set's raised maximum) and reach the file with the first
        // flush after the copy.
        if self.map.is_shared() {
            return;
        }
        let mut page = [0u8; crate::format::tree::HEADER_LEN];
        crate::format::tree::encode_counters(&mut page, &self.counters);
        if let Some(bytes) = page.get(MAX_PRIORITY_OFF..) {
            self.map.write_header(MAX_PRIORITY_OFF, bytes);
        }
    }

    /// Zeroes the leaves of `count` slots from `first` (wrapping at the capacity): items
    /// that are no longer drawn though their slots are not overwritten yet.
    pub(crate) fn zero(&mut self, first: u64, count: u64) {
        let cap = self.capacity;
        let first = (first % cap.max(1) as u64) as usize;
        let end = first + (count as usize).min(cap);
        let w = self.map.words_mut();
        with_tree!(&self.tree, t => {
            t.fill(w, first, end.min(cap), 0.0);
            if end > cap {
                t.fill(w, 0, end - cap, 0.0);
            }
        });
    }

    /// Sets the leaf of `to` to the leaf of `from` and `from`'s to 0, fixing their
    /// parents: an item moved from one slot to the other keeps its priority.
    pub(crate) fn move_leaf(&mut self, from: u64, to: u64) {
        self.fix_pending();
        let w = self.map.words_mut();
        let leaf = with_tree!(&self.tree, t => t.leaf(w, from as usize));
        let slots = [to as usize, from as usize];
        with_tree!(&self.tree, t => t.update(w, &slots, &[leaf, 0.0], &mut self.scratch));
    }

    /// Whether every live item's leaf is above 0 (`eps > 0`): with `eps` 0, an item
    /// given priority 0 has leaf 0.
    pub(crate) fn leaves_positive(&self) -> bool {
        self.header.eps > 0.0
    }

    /// The leaf of `slot`: `(priority + eps)^alpha`, 0 for a slot no draw may reach.
    pub(crate) fn leaf_of_slot(&self, slot: u64) -> f64 {
        with_tree!(&self.tree, t => t.leaf(self.map.words(), slot as usize))
    }

    /// Gives `slots` the largest priority seen, as new items get it, and fixes their
    /// parents.
    pub(crate) fn set_max_leaves(&mut self, slots: &[u64]) {
        self.fix_pending();
        let slots: Vec<usize> = slots.iter().map(|&s| s as usize).collect();
        let leaves = vec![self.max_leaf; slots.len()];
        let w = self.map.words_mut();
        with_tree!(&self.tree, t => t.update(w, &slots, &leaves, &mut self.scratch));
    }

    /// Zeroes the leaves of `slots` and fixes their parents: items removed before the
    /// head passed them, never drawn again.
    pub(crate) fn zero_slots(&mut self, slots: &[u64]) {
        if slots.is_empty() {
            return;
        }
        self.fix_pending();
        let slots: Vec<usize> = slots.iter().map(|&s| s as usize).collect();
        let zeros = vec![0.0; slots.len()];
        let w = self.map.words_mut();
        with_tree!(&self.tree, t => t.update(w, &slots, &zeros, &mut self.scratch));
    }

    /// Sum of the leaves of `count` slots from `first` (wrapping at the capacity): the
    /// priority mass of a run of items, O(depth) however long the run.
    pub(crate) fn mass(&mut self, first: u64, count: u64) -> f64 {
        self.fix_pending();
        self.tree
            .run_mass(self.map.words(), first, count, self.capacity as u64)
    }

    /// Zeroes every leaf (the buffer was cleared).
    pub(crate) fn clear(&mut self) {
        let cap = self.capacity;
        let w = self.map.words_mut();
        with_tree!(&self.tree, t => t.fill(w, 0, cap, 0.0));
        self.pending = 0;
    }

    /// Fixes pending parents, writes the counters and msyncs the file.
    pub(crate) fn flush(&mut self, io: &dyn Io) -> Result<()> {
        if self.map.is_shared() {
            // Nothing was stored since the restore linked it, and the snapshot's copy
            // was durable before the snapshot was published.
            return Ok(());
        }
        self.settle();
        self.map
            .flush(io)
            .map_err(|e| Error::io("msync", self.map.path(), e))
    }

    /// Makes durable the leaves of the `count` slots from `first_slot` (wrapping), and
    /// the header: for a commit that covers new items while the rest of the tree stays
    /// as of the last flush. After a power cut, recovery recomputes the parents from the
    /// leaves. The header's `caught_up` must cover the new items too, or recovery would
    /// give them the largest priority again (as of that older header), over the leaves
    /// just made durable.
    pub(crate) fn flush_leaves(&self, io: &dyn Io, first_slot: u64, count: u64) -> Result<()> {
        let cap = self.capacity as u64;
        let leaves = self.tree.shape().leaves().sum;
        let count = count.min(cap);
        let first = first_slot % cap.max(1);
        let head = count.min(cap - first);
        let msync = |from: u64, n: u64| {
            self.map
                .flush_words(io, leaves + from as usize, n as usize)
                .map_err(|e| Error::io("msync", self.map.path(), e))
        };
        msync(first, head)?;
        msync(0, count - head)?;
        self.map
            .flush_header(io)
            .map_err(|e| Error::io("msync", self.map.path(), e))
    }

    /// `priority + eps` of the item in `slot`, as far as the leaf tells (`alpha` 0 keeps
    /// no priorities: every leaf is 1).
    pub(crate) fn priority_of_slot(&self, slot: u64) -> f64 {
        let leaf = with_tree!(&self.tree, t => t.leaf(self.map.words(), slot as usize));
        priority_of_leaf(leaf, self.header.alpha)
    }

    /// `priority + eps` of each of `indices`, which must be live in `head..tail`.
    pub(crate) fn of_live(&self, head: u64, tail: u64, indices: &[u64]) -> Result<Vec<f64>> {
        let cap = self.capacity.max(1) as u64;
        indices
            .iter()
            .map(|&index| {
                if index < head || index >= tail {
                    return Err(Error::Evicted { index, head, tail });
                }
                Ok(self.priority_of_slot(index % cap))
            })
            .collect()
    }

    /// Totals and counters.
    pub(crate) fn summary(&mut self) -> PrioritySummary {
        self.fix_pending();
        let w = self.map.words();
        PrioritySummary {
            alpha: self.header.alpha,
            eps: self.header.eps,
            arity: self.header.arity,
            total: self.tree.total(w),
            min_leaf: self.tree.min(w),
            max_priority: self.counters.max_priority,
            updates: self.counters.updates,
            stale_updates: self.counters.stale_updates,
        }
    }

    /// The largest `priority + eps` seen: what a new item gets.
    pub(crate) fn max_priority(&self) -> f64 {
        self.counters.max_priority
    }

    /// Updates skipped because their item was gone.
    pub(crate) fn stale_updates(&self) -> u64 {
        self.counters.stale_updates
    }

    /// Updates applied.
    pub(crate) fn updates(&self) -> u64 {
        self.counters.updates
    }
}

/// `(q, leaf)` for priority `p` given at `position` for `index`: `q = p + eps` and its
/// leaf `q^alpha`, or `InvalidPriority` when `p` is negative, not finite, or its leaf
/// above `limit`.
fn leaf_value<P: Priority>(
    eps: f64,
    alpha: f64,
    limit: f64,
    position: usize,
    index: u64,
    p: P,
) -> Result<(f64, f64)> {
    // `+ 0.0` turns -0.0 into +0.0, which the bit-compared descent needs.
    let value = p.to_f64() + 0.0;
    let q = value + eps;
    let leaf = leaf_of(q, alpha);
    if value >= 0.0 && q.is_finite() && leaf <= limit {
        Ok((q, leaf))
    } else {
        Err(Error::InvalidPriority {
            position,
            index,
            value,
        })
    }
}

/// An update names one priority per index.
pub(crate) fn check_update_lengths<P>(indices: &[u64], priorities: &[P]) -> Result<()> {
    if indices.len() == priorities.len() {
        return Ok(());
    }
    Err(Error::CountMismatch {
        what: "update_priorities: indices and priorities",
        expected: indices.len(),
        got: priorities.len(),
    })
}

/// The slots of a ring of `cap` slots that hold no live item, when the `live` items
/// start at `first_slot`: the `cap - live` slots after them, wrapping once. A range
/// pair, not a scan of the whole ring with a division per slot.
fn dead_slots(cap: usize, first_slot: usize, live: usize) -> impl Iterator<Item = usize> {
    let from = if cap == 0 {
        0
    } else {
        (first_slot + live) % cap
    };
    let end = from + cap.saturating_sub(live);
    (from..end.min(cap)).chain(0..end.saturating_sub(cap))
}

/// `q^alpha`, with the exponents trainers use most taken without `powf`.
#[inline]
pub(crate) fn leaf_of(q: f64, alpha: f64) -> f64 {
    if alpha == 1.0 {
        q
    } else if alpha == 0.5 {
        q.sqrt()
    } else {
        q.powf(alpha)
    }
}

/// `leaf^(1/alpha)`: the `priority + eps` a leaf stands for (the leaf itself if alpha
/// is 0, which keeps no priority).
pub fn priority_of_leaf(leaf: f64, alpha: f64) -> f64 {
    if alpha == 0.0 || alpha == 1.0 {
        leaf
    } else {
        leaf.powf(1.0 / alpha)
    }
}

/// Buckets in `PriorityInfo::histogram`.
const HISTOGRAM_BUCKETS: usize = 8;

/// Rounds of drawing again the draws that missed before a reader gives up.
const MISS_ROUNDS: usize = 64;

#[cfg(test)]
mod tests {
    use super::dead_slots;

    #[test]
    fn dead_slots_are_exactly_those_outside_the_live_run_wrapping_or_not() {
        for cap in 0..12 {
            for first in 0..cap.max(1) {
                for live in 0..=cap {
                    let mut got: Vec<usize> = dead_slots(cap, first, live).collect();
                    got.sort_unstable();
                    let want: Vec<usize> = (0..cap)
                        .filter(|&s| (s + cap - first) % cap >= live)
                        .collect();
                    assert_eq!(got, want, "cap {cap}, first {first}, live {live}");
                }
            }
        }
    }
}
