//! A sum-tree and a min-tree over one leaf array, for prioritized replay: pure
//! arithmetic over a word slice laid out as [`TreeShape`] says (the caller maps the file).
//!
//! Every parent is recomputed from its children (never adjusted by a delta), always
//! summing in the same left-to-right order. The root therefore equals a fresh
//! recomputation bit for bit after any number of updates: floating-point error cannot
//! accumulate. Descents compare IEEE bits as integers (valid for non-negative finite
//! values) so that the compiler keeps them branch-free: a float compare in the
//! descent compiled to a data-dependent branch, which the random draws mispredict.
//!
//! ```text
//! level 0 (top node: K values, the root total is their sum)
//! level 1 ...
//! level D-1 = the leaves (one per ring slot, padded with zeros to whole nodes)
//! ```
#![allow(
    clippy::indexing_slicing,
    reason = "every index is derived from the shape (never from stored values) and \
              checked by the slice; hot loops stay readable"
)]

use crate::format::tree::{Level, TreeShape};

/// How far a stored parent may differ from the recomputation of its children before
/// `check` reports it: relative to the larger of the two. Recomputation is exact in
/// this design, so anything above rounding noise means damage.
pub const CHECK_TOLERANCE: f64 = 1e-9;

/// Where a descent reads the tree's words from: the writer's own mapping as a slice, or
/// a reader's view of words another process keeps changing (`storage::map::SharedWords`,
/// loaded one word at a time, atomically).
pub trait Words {
    /// `f` of the `K` words from `at`, or `None` past the end.
    fn with_node<const K: usize, R>(&self, at: usize, f: impl FnOnce(&[f64; K]) -> R) -> Option<R>;
    /// Hints that the words from `at` are needed soon.
    fn prefetch(&self, at: usize);
}

/// `f` of node `j` of a level whose values start at word `start` and number `len`,
/// read from `w` (`None` past the level's end).
#[inline(always)]
fn node_at<const K: usize, W: Words + ?Sized, R>(
    w: &W,
    (start, len): (usize, usize),
    j: usize,
    f: impl FnOnce(&[f64; K]) -> R,
) -> Option<R> {
    if (j + 1) * K > len {
        return None;
    }
    w.with_node::<K, R>(start + j * K, f)
}

/// A parent that does not match its children, found by [`SumTree::check`].
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Which tree.
    pub tree: &'static str,
    /// Level (0 = top).
    pub level: usize,
    /// Position in the level.
    pub index: usize,
    /// Word offset from the body's start.
    pub word: usize,
    /// Stored value.
    pub stored: f64,
    /// Recomputed value (or what a leaf must be).
    pub expected: String,
}

/// The algorithms of a `K`-ary tree of a given shape.
#[derive(Clone, Debug)]
pub struct SumTree<const K: usize> {
    shape: TreeShape,
}

/// Inclusive prefix sums of a node in log2(K) rounds (Kogge-Stone), so the adds of one
/// node do not wait on each other K-1 times in a row; `p[0]` is 0 and `p[k+1]` is the
/// sum of children `0..=k`. Every sum in the tree is taken in this one order.
#[inline(always)]
fn prefix<const K: usize>(node: &[f64; K]) -> [f64; 9] {
    debug_assert!(K <= 8);
    let mut p = [0.0f64; 9];
    for (d, &v) in p.iter_mut().skip(1).zip(node) {
        *d = v;
    }
    let mut step = 1;
    while step < K {
        for i in (1 + step..=K).rev() {
            p[i] += p[i - step];
        }
        step *= 2;
    }
    p
}

#[inline(always)]
fn node_sum<const K: usize>(node: &[f64; K]) -> f64 {
    prefix(node)[K]
}

#[inline(always)]
fn leaf_min<const K: usize>(node: &[f64; K]) -> f64 {
    let mut m = f64::INFINITY;
    for &v in node {
        // A zero leaf is never drawn, so it bounds no weight: it counts as +inf.
        m = m.min(if v > 0.0 { v } else { f64::INFINITY });
    }
    m
}

#[inline(always)]
fn node_min<const K: usize>(node: &[f64; K]) -> f64 {
    let mut m = f64::INFINITY;
    for &v in node {
        m = m.min(v);
    }
    m
}

/// Recomputes value `j` of `level` (sum and min) from `below`; a padding value (no node
/// below it) is 0 in the sum-tree and +inf in the min-tree.
#[inline(always)]
fn recompute_in<const K: usize>(
    w: &mut [f64],
    (level, below, leaves_below): (Level, Level, bool),
    j: usize,
) {
    if j >= level.len {
        return;
    }
    let sums = nodes::<K>(w, below.sum, below.len);
    let (s, m) = match sums.get(j) {
        None => (0.0, f64::INFINITY),
        Some(children) if leaves_below => (node_sum(children), leaf_min(children)),
        Some(children) => (
            node_sum(children),
            nodes::<K>(w, below.min, below.len)
                .get(j)
                .map_or(f64::INFINITY, node_min),
        ),
    };
    w[level.sum + j] = s;
    w[level.min + j] = m;
}

/// Which child of `node` target `u` falls in, and the sum of the children before it.
/// Only the first K-1 prefix sums are compared, so a target at or past the node's total
/// (rounding) lands in the last child.
#[inline(always)]
fn pick<const K: usize>(node: &[f64; K], u: f64) -> (usize, f64) {
    let ub = u.to_bits();
    let p = prefix(node);
    let mut c = 0usize;
    for q in &p[1..K] {
        c += usize::from(q.to_bits() <= ub);
    }
    let below = p[c];
    if node[c] > 0.0 {
        return (c, below);
    }
    // Rounding carried the target past the node's last non-zero child (or into a
    // zero child): take that child instead. Rare, so a branch is right here.
    match node.iter().rposition(|&v| v > 0.0) {
        Some(last) => (last, node_sum_prefix(node, last)),
        None => (c, below),
    }
}

#[cold]
fn node_sum_prefix<const K: usize>(node: &[f64; K], n: usize) -> f64 {
    prefix(node)[n]
}

fn nodes<const K: usize>(w: &[f64], level: usize, len: usize) -> &[[f64; K]] {
    w.get(level..level + len).unwrap_or(&[]).as_chunks::<K>().0
}

impl<const K: usize> SumTree<K> {
    /// The algorithms for `shape`, whose arity must be `K`.
    pub fn new(shape: TreeShape) -> SumTree<K> {
        assert_eq!(shape.arity, K, "tree arity");
        SumTree { shape }
    }

    /// The shape.
    pub fn shape(&self) -> &TreeShape {
        &self.shape
    }

    fn top(&self) -> Level {
        self.shape
            .levels
            .first()
            .copied()
            .unwrap_or(self.shape.leaves())
    }

    /// Sum of all leaves.
    pub fn total<W: Words + ?Sized>(&self, w: &W) -> f64 {
        let top = self.top();
        node_at::<K, W, f64>(w, (top.sum, K), 0, node_sum).unwrap_or(0.0)
    }

    /// Sum of the leaves before slot `x` (of all of them when `x` is past the last),
    /// from the stored sums along `x`'s path, top down: O(depth * K).
    pub fn prefix_sum<W: Words + ?Sized>(&self, w: &W, x: usize) -> f64 {
        let levels = &self.shape.levels;
        if x >= self.shape.leaves().len {
            return self.total(w);
        }
        let mut s = 0.0;
        // A value of level l covers K^(depth - 1 - l) slots: K^(depth - 1) at the top.
        let mut per = K.pow(u32::try_from(levels.len().saturating_sub(1)).unwrap_or(0));
        for level in levels {
            let (node, c) = (x / per / K, x / per % K);
            if let Some(p) = node_at::<K, W, f64>(w, (level.sum, level.len), node, |n| prefix(n)[c])
            {
                s += p;
            }
            per /= K;
        }
        s
    }

    /// Smallest non-zero leaf, or +inf if every leaf is zero.
    pub fn min<W: Words + ?Sized>(&self, w: &W) -> f64 {
        let top = self.top();
        let leaves = self.shape.levels.len() == 1;
        let min = |n: &[f64; K]| if leaves { leaf_min(n) } else { node_min(n) };
        node_at::<K, W, f64>(w, (top.min, K), 0, min).unwrap_or(f64::INFINITY)
    }

    /// The leaf of `slot`.
    pub fn leaf(&self, w: &[f64], slot: usize) -> f64 {
        w.get(self.shape.leaves().sum + slot)
            .copied()
            .unwrap_or(0.0)
    }

    /// Sets one leaf without touching its parents: call [`SumTree::fix_range`] over it
    /// before the next descent. Adds use this and fix whole runs of slots at once.
    #[inline(always)]
    pub fn set_leaf_only(&self, w: &mut [f64], slot: usize, value: f64) {
        if let Some(x) = w.get_mut(self.shape.leaves().sum + slot) {
            *x = value;
        }
    }

    /// Recomputes values `js` of internal level `l` from level `l + 1`.
    fn recompute_range(&self, w: &mut [f64], l: usize, js: std::ops::Range<usize>) {
        if let Some(pair) = self.pair(l) {
            for j in js {
                recompute_in::<K>(w, pair, j);
            }
        }
    }

    /// Internal level `l`, the level below it, and whether that one is the leaves.
    #[inline(always)]
    fn pair(&self, l: usize) -> Option<(Level, Level, bool)> {
        let level = *self.shape.levels.get(l)?;
        let below = *self.shape.levels.get(l + 1)?;
        Some((level, below, l + 2 == self.shape.levels.len()))
    }

    /// Recomputes every parent of the leaves `from..to` (slots), level by level.
    pub fn fix_range(&self, w: &mut [f64], from: usize, to: usize) {
        if from >= to {
            return;
        }
        let (mut lo, mut hi) = (from, to);
        for l in (0..self.shape.levels.len().saturating_sub(1)).rev() {
            lo /= K;
            hi = (hi - 1) / K + 1;
            self.recompute_range(w, l, lo..hi);
        }
    }

    /// Recomputes every internal value from the leaves, padding included (a new file's
    /// min-tree must read +inf, not 0, where no leaf is).
    pub fn rebuild(&self, w: &mut [f64]) {
        for l in (0..self.shape.levels.len().saturating_sub(1)).rev() {
            self.recompute_range(w, l, 0..self.shape.levels[l].len);
        }
    }

    /// Sets leaves `from..to` to `value` and fixes their parents.
    pub fn fill(&self, w: &mut [f64], from: usize, to: usize, value: f64) {
        let leaves = self.shape.leaves();
        let end = to.min(leaves.len);
        if let Some(run) = w.get_mut(leaves.sum + from.min(end)..leaves.sum + end) {
            run.fill(value);
        }
        self.fix_range(w, from, end);
    }

    /// Sets `slots[i]` to `values[i]` and fixes all their parents level by level (each
    /// level once, so the whole batch's loads of one level are independent).
    /// `scratch` is reused between calls.
    pub fn update(&self, w: &mut [f64], slots: &[usize], values: &[f64], scratch: &mut Vec<usize>) {
        let leaves = self.shape.leaves();
        scratch.clear();
        // Every line this level will touch is requested before the first is needed, so
        // the batch's cache misses overlap instead of queueing one after another.
        for &slot in slots {
            Words::prefetch(&*w, leaves.sum + slot);
        }
        for (&slot, &v) in slots.iter().zip(values) {
            if slot < leaves.len {
                w[leaves.sum + slot] = v;
                scratch.push(slot);
            }
        }
        for l in (0..self.shape.levels.len().saturating_sub(1)).rev() {
            let len = self.shape.levels[l].len;
            if len <= scratch.len() {
                // Fewer values in this level than touched paths: recompute all of it.
                self.recompute_range(w, l, 0..len);
                scratch.clear();
                scratch.extend(0..len);
                // The levels above are covered by the same rule (they are smaller).
                continue;
            }
            let Some(pair) = self.pair(l) else { continue };
            let level = pair.0;
            for p in scratch.iter_mut() {
                *p /= K;
                Words::prefetch(&*w, level.sum + *p);
                Words::prefetch(&*w, level.min + *p);
            }
            for &j in scratch.iter() {
                recompute_in::<K>(w, pair, j);
            }
        }
    }

    /// Descends for every target in `u` (each in `[0, total)`), level by level with the
    /// next level's node prefetched, writing the leaf slot to `slots` and its value to
    /// `values`. A target that rounding carries past the last non-zero child goes to
    /// that child. A returned value of 0 means the tree is inconsistent (or empty).
    pub fn sample<W: Words + ?Sized>(
        &self,
        w: &W,
        u: &mut [f64],
        slots: &mut [usize],
        values: &mut [f64],
    ) {
        let n = u.len().min(slots.len()).min(values.len());
        let (u, slots, values) = (&mut u[..n], &mut slots[..n], &mut values[..n]);
        slots.fill(0);
        let levels = &self.shape.levels;
        for (l, level) in levels.iter().enumerate() {
            let next = levels.get(l + 1).map_or(usize::MAX, |nl| nl.sum);
            for ((target, slot), value) in u.iter_mut().zip(slots.iter_mut()).zip(values.iter_mut())
            {
                let picked = node_at::<K, W, _>(w, (level.sum, level.len), *slot, |node| {
                    let (c, below) = pick(node, *target);
                    (c, below, node[c])
                });
                let Some((c, below, v)) = picked else {
                    *value = 0.0;
                    continue;
                };
                *target -= below;
                *value = v;
                *slot = *slot * K + c;
                w.prefetch(next.wrapping_add(*slot * K));
            }
        }
    }

    /// Checks every stored parent against its children (within [`CHECK_TOLERANCE`]),
    /// that leaves are finite and non-negative, and that padding leaves are zero.
    /// Returns at most `limit` findings.
    pub fn check(&self, w: &[f64], limit: usize) -> Vec<Mismatch> {
        let mut out = Vec::new();
        let leaves = self.shape.leaves();
        let depth = self.shape.levels.len();
        for j in 0..leaves.len {
            let v = w.get(leaves.sum + j).copied().unwrap_or(f64::NAN);
            let (ok, expected) = if j < self.shape.capacity {
                (v.is_finite() && v >= 0.0, "finite and >= 0")
            } else {
                (v == 0.0, "0 (padding)")
            };
            if !ok && out.len() < limit {
                out.push(Mismatch {
                    tree: "leaf",
                    level: depth - 1,
                    index: j,
                    word: leaves.sum + j,
                    stored: v,
                    expected: expected.into(),
                });
            }
        }
        for l in 0..depth.saturating_sub(1) {
            let level = self.shape.levels[l];
            let below = self.shape.levels[l + 1];
            let sums = nodes::<K>(w, below.sum, below.len);
            let mins = nodes::<K>(w, below.min, below.len);
            for j in 0..level.len {
                let (s, m) = match (sums.get(j), mins.get(j)) {
                    (Some(c), _) if l + 2 == depth => (node_sum(c), leaf_min(c)),
                    (Some(c), Some(cm)) => (node_sum(c), node_min(cm)),
                    _ => (0.0, f64::INFINITY),
                };
                for (tree, word, expected) in [("sum", level.sum + j, s), ("min", level.min + j, m)]
                {
                    let stored = w.get(word).copied().unwrap_or(f64::NAN);
                    if !close(stored, expected) && out.len() < limit {
                        out.push(Mismatch {
                            tree,
                            level: l,
                            index: j,
                            word,
                            stored,
                            expected: expected.to_string(),
                        });
                    }
                }
            }
        }
        out
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= CHECK_TOLERANCE * a.abs().max(b.abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tree<const K: usize>(cap: usize) -> (SumTree<K>, Vec<f64>) {
        let shape = TreeShape::new(cap as u64, K as u32).unwrap();
        let mut w = vec![0.0; shape.words];
        let t = SumTree::new(shape);
        t.rebuild(&mut w);
        (t, w)
    }

    fn naive_pick(leaves: &[f64], u: f64) -> usize {
        let mut acc = 0.0;
        for (i, &v) in leaves.iter().enumerate() {
            acc += v;
            if u < acc {
                return i;
            }
        }
        leaves.iter().rposition(|&v| v > 0.0).unwrap()
    }

    fn check_against_naive<const K: usize>(leaves: &[f64], targets: &[f64]) {
        let (t, mut w) = tree::<K>(leaves.len());
        let slots: Vec<usize> = (0..leaves.len()).collect();
        let mut scratch = Vec::new();
        t.update(&mut w, &slots, leaves, &mut scratch);
        assert_eq!(t.check(&w, 10), vec![]);
        let total: f64 = leaves.iter().sum();
        assert!((t.total(&w) - total).abs() <= 1e-9 * total);
        let min = leaves
            .iter()
            .copied()
            .filter(|&v| v > 0.0)
            .fold(f64::INFINITY, f64::min);
        assert_eq!(t.min(&w), min);
        let mut u: Vec<f64> = targets.iter().map(|r| r * t.total(&w)).collect();
        let want: Vec<usize> = u.iter().map(|&x| naive_pick(leaves, x)).collect();
        let mut got = vec![0; u.len()];
        let mut vals = vec![0.0; u.len()];
        t.sample(&w, &mut u, &mut got, &mut vals);
        for (i, (&g, &x)) in got.iter().zip(&want).enumerate() {
            assert!(leaves[g] > 0.0, "draw {i} landed on a zero leaf {g}");
            assert_eq!(vals[i], leaves[g]);
            // Summation order differs from the naive prefix, so a target within rounding
            // of a boundary may go either way; integer priorities make it exact.
            if leaves.iter().all(|v| v.fract() == 0.0) {
                assert_eq!(g, x, "draw {i}");
            }
        }
    }

    fn check_prefix<const K: usize>(leaves: &[f64]) {
        let (t, mut w) = tree::<K>(leaves.len());
        let slots: Vec<usize> = (0..leaves.len()).collect();
        t.update(&mut w, &slots, leaves, &mut Vec::new());
        let mut naive = 0.0;
        for x in 0..=leaves.len() + 3 {
            assert_eq!(t.prefix_sum(&w, x), naive, "prefix of {x} (K = {K})");
            naive += leaves.get(x).copied().unwrap_or(0.0);
        }
    }

    proptest! {
        #[test]
        fn descents_match_a_linear_scan_for_integer_priorities(
            leaves in prop::collection::vec(0u32..5, 1..300),
            targets in prop::collection::vec(0.0f64..1.0, 1..64),
        ) {
            prop_assume!(leaves.iter().any(|&v| v > 0));
            let leaves: Vec<f64> = leaves.into_iter().map(f64::from).collect();
            check_against_naive::<2>(&leaves, &targets);
            check_against_naive::<8>(&leaves, &targets);
        }

        /// Range masses (episode priorities) come from prefix sums: exact for integer
        /// leaves, at every slot and past the last.
        #[test]
        fn prefix_sums_match_a_running_sum(leaves in prop::collection::vec(0u32..5, 1..300)) {
            let leaves: Vec<f64> = leaves.into_iter().map(f64::from).collect();
            check_prefix::<2>(&leaves);
            check_prefix::<8>(&leaves);
        }

        #[test]
        fn real_priorities_never_land_on_zero_leaves(
            leaves in prop::collection::vec(prop_oneof![Just(0.0), 1e-300f64..1e300], 1..300),
            targets in prop::collection::vec(0.0f64..1.0, 1..64),
        ) {
            prop_assume!(leaves.iter().any(|&v| v > 0.0));
            prop_assume!(leaves.iter().sum::<f64>().is_finite());
            check_against_naive::<2>(&leaves, &targets);
            check_against_naive::<8>(&leaves, &targets);
        }

        #[test]
        fn updates_in_any_order_leave_the_tree_consistent(
            cap in 1usize..2000,
            ops in prop::collection::vec((0usize..2000, 0.0f64..10.0), 1..400),
            chunk in 1usize..300,
        ) {
            let (t, mut w) = tree::<8>(cap);
            let (b, mut wb) = tree::<2>(cap);
            let mut scratch = Vec::new();
            let mut leaves = vec![0.0; cap];
            for part in ops.chunks(chunk) {
                let slots: Vec<usize> = part.iter().map(|&(s, _)| s % cap).collect();
                let vals: Vec<f64> = part.iter().map(|&(_, v)| v).collect();
                for (&s, &v) in slots.iter().zip(&vals) {
                    leaves[s] = v;
                }
                t.update(&mut w, &slots, &vals, &mut scratch);
                b.update(&mut wb, &slots, &vals, &mut scratch);
            }
            prop_assert_eq!(t.check(&w, 10), vec![]);
            prop_assert_eq!(b.check(&wb, 10), vec![]);
            let mut fresh = w.clone();
            t.rebuild(&mut fresh);
            prop_assert_eq!(t.total(&fresh).to_bits(), t.total(&w).to_bits());
            let naive: f64 = leaves.iter().sum();
            prop_assert!((t.total(&w) - naive).abs() <= 1e-12 * naive.max(1.0));
            prop_assert!((b.total(&wb) - naive).abs() <= 1e-12 * naive.max(1.0));
        }
    }

    #[test]
    fn set_leaf_only_then_fix_range_equals_update() {
        let (t, mut a) = tree::<8>(1000);
        let mut b = a.clone();
        let mut scratch = Vec::new();
        for s in 990..1000 {
            t.set_leaf_only(&mut a, s, s as f64);
        }
        for s in 0..5 {
            t.set_leaf_only(&mut a, s, 1.5);
        }
        t.fix_range(&mut a, 990, 1000);
        t.fix_range(&mut a, 0, 5);
        let slots: Vec<usize> = (990..1000).chain(0..5).collect();
        let vals: Vec<f64> = slots
            .iter()
            .map(|&s| if s < 5 { 1.5 } else { s as f64 })
            .collect();
        t.update(&mut b, &slots, &vals, &mut scratch);
        assert_eq!(a, b);
    }

    #[test]
    fn check_finds_a_damaged_parent_and_a_bad_leaf() {
        let (t, mut w) = tree::<8>(100);
        t.fill(&mut w, 0, 100, 2.0);
        assert_eq!(t.total(&w), 200.0);
        assert_eq!(t.check(&w, 10), vec![]);
        let mid = t.shape().levels[1].sum;
        w[mid] += 1.0;
        let leaf = t.shape().leaves().sum + 7;
        w[leaf] = -1.0;
        let found = t.check(&w, 10);
        assert!(
            found.iter().any(|m| m.tree == "sum" && m.word == mid),
            "{found:?}"
        );
        assert!(
            found.iter().any(|m| m.tree == "leaf" && m.index == 7),
            "{found:?}"
        );
    }

    #[test]
    fn an_all_zero_tree_has_zero_total_and_infinite_min() {
        let (t, w) = tree::<8>(50);
        assert_eq!(t.total(&w), 0.0);
        assert_eq!(t.min(&w), f64::INFINITY);
        assert_eq!(t.check(&w, 10), vec![]);
        let (t, w) = tree::<2>(1);
        assert_eq!(t.total(&w), 0.0);
        assert_eq!(t.min(&w), f64::INFINITY);
    }
}
