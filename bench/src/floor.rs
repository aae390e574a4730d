//! The floors `replaystore bench` prints beside its figures: the same work done by the
//! plainest Rust this machine runs, over memory of the same size and row shape, with
//! none of an engine's duties (no files, no checksums, no liveness, no crash safety).
//! A figure at 100% of its floor is as fast as this host copies and sums; the floors
//! are measured in the same run as the figures, so a loaded or slower host moves both.
//!
//! The kernels:
//! - add: items copied into a ring of `capacity` rows (touched once beforehand, so no
//!   first-touch fault is counted), one at a time or in chunks, field by field as a
//!   batch of columns arrives;
//! - sample: `n` rows drawn at random (xorshift), each field copied into its own
//!   reused output array, the indices written beside them;
//! - per: the sample kernel's gather over rows drawn by priority from an 8-ary sum tree
//!   (a stratified descent per row, importance weights from the batch's own largest),
//!   then `n` new priorities written and their sums carried up the tree.

use crate::workloads::xorshift;
use std::time::Instant;

/// A ring of `capacity` rows of `widths` fields (bytes each), laid out as the segment
/// files lay out items: the fields of one item back to back.
pub(crate) struct Arena {
    rows: memmap2::MmapMut,
    widths: Vec<usize>,
    item: usize,
    capacity: usize,
}

impl Arena {
    /// A ring of `capacity` items of `widths`, every page written once.
    pub fn new(widths: &[usize], capacity: usize) -> std::io::Result<Arena> {
        // Rows start on a cache line when that costs at most an eighth more space, the
        // rule the segment files follow (docs/FORMAT.md): a row then spans the fewest
        // lines.
        let packed = widths.iter().sum::<usize>().max(1);
        let aligned = packed.next_multiple_of(64);
        let item = if aligned * 8 <= packed * 9 {
            aligned
        } else {
            packed
        };
        let mut rows = memmap2::MmapMut::map_anon((item * capacity).max(1))?;
        // Huge pages where the kernel has them, as the engine asks for its mappings:
        // random rows then cost no page walk each. A hint; it may be refused.
        let _ = rows.advise(memmap2::Advice::HugePage);
        // Every page touched now, not in the first timed run.
        rows.fill(1);
        Ok(Arena {
            rows,
            widths: widths.to_vec(),
            item,
            capacity,
        })
    }

    /// Items per second adding `total` items in chunks of `chunk` (columns of `chunk`
    /// rows each, copied field by field into consecutive ring rows).
    pub fn add_rate(&mut self, total: usize, chunk: usize) -> f64 {
        let columns: Vec<Vec<u8>> = (self.widths.iter())
            .map(|&w| vec![7u8; w * chunk])
            .collect();
        let t = Instant::now();
        let mut at = 0usize;
        let mut done = 0usize;
        while done < total {
            let n = chunk.min(total - done);
            for r in 0..n {
                let slot = (at + r) % self.capacity;
                let Some(mut row) = self.rows.get_mut(slot * self.item..(slot + 1) * self.item)
                else {
                    continue;
                };
                for (col, &w) in columns.iter().zip(&self.widths) {
                    let (field, rest) = row.split_at_mut(w);
                    if let Some(src) = col.get(r * w..(r + 1) * w) {
                        field.copy_from_slice(src);
                    }
                    row = rest;
                }
            }
            at = (at + n) % self.capacity;
            done += n;
        }
        std::hint::black_box(&self.rows);
        total as f64 / t.elapsed().as_secs_f64()
    }

    /// Copies the rows `indices` names into `outs` (one array per field), as a gather
    /// does: each row prefetched `AHEAD` rows before it is copied, each field moved with
    /// the engine's small-field copy.
    fn gather(&self, indices: &[u64], outs: &mut [Vec<u8>]) {
        for &i in indices.iter().take(AHEAD) {
            self.touch(i as usize);
        }
        for (r, &i) in indices.iter().enumerate() {
            if let Some(&ahead) = indices.get(r + AHEAD) {
                self.touch(ahead as usize);
            }
            let at = i as usize * self.item;
            let Some(mut row) = self.rows.get(at..at + self.item) else {
                continue;
            };
            for (out, &w) in outs.iter_mut().zip(&self.widths) {
                let (field, rest) = row.split_at(w);
                if let Some(dst) = out.get_mut(r * w..(r + 1) * w) {
                    replaystore::kernels::copy_field(field, dst);
                }
                row = rest;
            }
        }
    }

    /// Hints the CPU to fetch row `i` (its first lines), as the engine's gather does.
    fn touch(&self, i: usize) {
        let at = i * self.item;
        if let Some(row) = self.rows.get(at..at + self.item) {
            replaystore::kernels::prefetch_bytes(row);
        }
    }

    fn outputs(&self, n: usize) -> Vec<Vec<u8>> {
        self.widths.iter().map(|&w| vec![0u8; w * n]).collect()
    }

    /// Batches per second drawing `batches` uniform batches of `n` rows.
    pub fn sample_rate(&self, n: usize, batches: usize) -> f64 {
        let mut outs = self.outputs(n);
        let mut indices = vec![0u64; n];
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let t = Instant::now();
        for _ in 0..batches {
            for i in &mut indices {
                *i = below(&mut s, self.capacity);
            }
            self.gather(&indices, &mut outs);
            std::hint::black_box(&outs);
        }
        batches as f64 / t.elapsed().as_secs_f64()
    }

    /// Iterations per second of a prioritized batch of `n` rows (drawn from `tree`,
    /// gathered, weighted with `beta`) followed by `n` new priorities.
    pub fn per_rate(&self, tree: &mut Tree8, n: usize, batches: usize, beta: f64) -> f64 {
        let mut outs = self.outputs(n);
        let mut targets = vec![0f64; n];
        let mut indices = vec![0u64; n];
        let mut weights = vec![0f32; n];
        let mut fresh = vec![0f64; n];
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let t = Instant::now();
        for _ in 0..batches {
            let total = tree.total();
            for (k, u) in targets.iter_mut().enumerate() {
                *u = (k as f64 + unit(&mut s)) / n as f64 * total;
            }
            tree.find_all(&mut targets, &mut indices);
            // `targets` now holds each drawn leaf's priority.
            let mut largest = 0f64;
            for (w, &p) in weights.iter_mut().zip(&targets) {
                let wt = (p / total * self.capacity as f64).powf(-beta);
                largest = largest.max(wt);
                *w = wt as f32;
            }
            for w in &mut weights {
                *w = (f64::from(*w) / largest) as f32;
            }
            self.gather(&indices, &mut outs);
            std::hint::black_box((&outs, &weights));
            for p in &mut fresh {
                *p = unit(&mut s) + 0.01;
            }
            tree.set_all(&indices, &fresh);
        }
        batches as f64 / t.elapsed().as_secs_f64()
    }
}

/// An 8-ary sum tree over `leaves` priorities, stored level by level (root first): a
/// node's children are one cache line of eight f64 sums.
pub(crate) struct Tree8 {
    /// Level `l` holds `8^l` nodes (the last level the leaves, padded).
    levels: Vec<Vec<f64>>,
}

impl Tree8 {
    /// `leaves` priorities, all `p`.
    pub fn new(leaves: usize, p: f64) -> Tree8 {
        let mut width = 1usize;
        let mut levels = vec![vec![0.0; 1]];
        while width < leaves {
            width *= 8;
            levels.push(vec![0.0; width]);
        }
        let mut tree = Tree8 { levels };
        for i in 0..leaves {
            tree.set(i, p);
        }
        tree
    }

    fn total(&self) -> f64 {
        self.levels
            .first()
            .and_then(|l| l.first())
            .copied()
            .unwrap_or(0.0)
    }

    /// Sets leaf `i` to `p`, carrying the difference up to the root.
    fn set(&mut self, i: usize, p: f64) {
        let old = self
            .levels
            .last()
            .and_then(|l| l.get(i))
            .copied()
            .unwrap_or(0.0);
        let mut at = i;
        for level in self.levels.iter_mut().rev() {
            if let Some(sum) = level.get_mut(at) {
                *sum += p - old;
            }
            at /= 8;
        }
    }

    /// Sets the leaves `at` to `p`, level by level from the leaves up: the parents of a
    /// level are independent loads the CPU overlaps, not one chain per leaf.
    fn set_all(&mut self, at: &[u64], p: &[f64]) {
        let mut nodes: Vec<usize> = at.iter().map(|&i| i as usize).collect();
        let deltas: Vec<f64> = (nodes.iter().zip(p))
            .map(|(&i, &p)| {
                p - self
                    .levels
                    .last()
                    .and_then(|l| l.get(i))
                    .copied()
                    .unwrap_or(0.0)
            })
            .collect();
        for level in self.levels.iter_mut().rev() {
            for (node, d) in nodes.iter_mut().zip(&deltas) {
                if let Some(sum) = level.get_mut(*node) {
                    *sum += d;
                }
                *node /= 8;
            }
        }
    }

    /// For each target prefix sum in `u`, the leaf whose range holds it (into `at`),
    /// level by level for the whole batch; `u` ends as each leaf's priority.
    fn find_all(&self, u: &mut [f64], at: &mut [u64]) {
        at.fill(0);
        for level in self.levels.iter().skip(1) {
            for (u, node) in u.iter_mut().zip(at.iter_mut()) {
                let first = *node as usize * 8;
                let Some(sums) = level.get(first..).and_then(|l| l.first_chunk::<8>()) else {
                    continue;
                };
                // Branch-free: the child is how many running sums stay at or below `u`.
                let mut before = [0f64; 8];
                let mut acc = 0f64;
                for (b, &x) in before.iter_mut().zip(sums) {
                    *b = acc;
                    acc += x;
                }
                let k = before.iter().skip(1).filter(|&&b| b <= *u).count();
                *u -= before.get(k).copied().unwrap_or(0.0);
                *node = (first + k) as u64;
            }
        }
        if let Some(leaves) = self.levels.last() {
            for (u, &node) in u.iter_mut().zip(at.iter()) {
                *u = leaves.get(node as usize).copied().unwrap_or(0.0);
            }
        }
    }
}

/// Rows ahead of the copy that a gather prefetches (the engine's distance).
const AHEAD: usize = 32;

/// A number below `n` from a xorshift draw (multiply and shift: no division).
fn below(s: &mut u64, n: usize) -> u64 {
    ((u128::from(xorshift(s)) * n as u128) >> 64) as u64
}

/// A uniform draw in [0, 1).
fn unit(s: &mut u64) -> f64 {
    (xorshift(s) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_finds_each_leaf_in_proportion_to_its_priority() {
        let mut t = Tree8::new(100, 0.0);
        t.set(3, 1.0);
        t.set(97, 3.0);
        assert_eq!(t.total(), 4.0);
        let mut u = [0.5, 1.0, 3.99];
        let mut at = [0; 3];
        t.find_all(&mut u, &mut at);
        assert_eq!((at, u), ([3, 97, 97], [1.0, 3.0, 3.0]));
        t.set_all(&[97, 3], &[1.0, 0.5]);
        assert_eq!(t.total(), 1.5);
    }

    #[test]
    fn a_gather_copies_each_field_of_the_rows_named() {
        let mut a = Arena::new(&[2, 1], 4).unwrap();
        for (i, b) in a.rows.iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut outs = a.outputs(2);
        a.gather(&[3, 0], &mut outs);
        assert_eq!(outs, vec![vec![9, 10, 0, 1], vec![11, 2]]);
        assert!(a.add_rate(10, 3) > 0.0 && a.rows[0] == 7);
    }
}
