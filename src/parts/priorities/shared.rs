//! The tree as other processes see it: read-only draws over the live tree
//! (`SharedPriorities`), a checkpoint's copy (`TreeCopy`), and what `inspect` reports.

use std::path::Path;

use rand_chacha::ChaCha8Rng;

use super::*;
use crate::error::{Error, Result};
use crate::format::manifest::Superblock;
use crate::format::tree::{BODY_OFFSET, TreeCounters, TreeHeader};
use crate::storage::io::{Access, Io};
use crate::storage::map::TreeMap;
use crate::storage::{self};

/// A copy of a buffer's priorities, read without the lock (for `info` and `verify`).
#[derive(Debug)]
pub(crate) struct TreeCopy {
    pub path: std::path::PathBuf,
    pub header: TreeHeader,
    pub counters: TreeCounters,
    /// Why the owner word cannot be believed (it or its check word was damaged).
    pub owner_damage: Option<crate::format::Problem>,
    pub tree: Tree,
    pub words: Vec<f64>,
}

impl TreeCopy {
    pub(crate) fn read(io: &dyn Io, dir: &Path, sb: &Superblock) -> Result<TreeCopy> {
        let (map, header, counters) = storage::open_tree(io, dir, sb, Access::Read)?;
        let path = map.path().to_path_buf();
        let shape = header
            .shape()
            .map_err(|p| p.into_error(&path, "priorities header"))?;
        let owner_damage =
            crate::format::tree::check_owner(&map.header(crate::format::tree::HEADER_LEN)).err();
        Ok(TreeCopy {
            words: map.copy_words(),
            tree: Tree::of(shape),
            path,
            header,
            counters,
            owner_damage,
        })
    }

    /// The leaf of `slot`.
    pub(crate) fn leaf(&self, slot: u64) -> f64 {
        let word = self.tree.shape().leaves().sum + slot as usize;
        self.words.get(word).copied().unwrap_or(0.0)
    }

    /// Byte offset of the leaf of `slot` in the file.
    pub(crate) fn leaf_offset(&self, slot: u64) -> u64 {
        (BODY_OFFSET + (self.tree.shape().leaves().sum + slot as usize) * 8) as u64
    }
}

/// What `replaystore info` shows of a buffer's priorities.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorityInfo {
    /// Priority exponent.
    pub alpha: f64,
    /// Added to every priority.
    pub eps: f64,
    /// Children per tree node.
    pub arity: u32,
    /// Root of the sum-tree: sum of `(priority + eps)^alpha` over live items.
    pub total: f64,
    /// Smallest and largest `priority + eps` of a live item (None when no item is live).
    pub min_max: Option<(f64, f64)>,
    /// Live items whose priority is 0 (only with eps 0).
    pub zero: u64,
    /// Largest `priority + eps` seen: what new items get.
    pub max_seen: f64,
    /// Updates applied.
    pub updates: u64,
    /// Updates skipped because their item was gone.
    pub stale_updates: u64,
    /// Log-spaced buckets of live `priority + eps`: (low, high, count), low inclusive.
    pub histogram: Vec<(f64, f64, u64)>,
}

impl PriorityInfo {
    pub(crate) fn of(copy: &TreeCopy, sb: &Superblock, head: u64, tail: u64) -> PriorityInfo {
        let alpha = copy.header.alpha;
        // Two passes over the leaves instead of a copy of every priority: a buffer of
        // 10^7 items is inspected without 80 MB of scratch.
        let positive = || {
            (head..tail)
                .map(|i| priority_of_leaf(copy.leaf(i % sb.capacity), alpha))
                .filter(|&p| p > 0.0)
        };
        let (mut count, mut min_max) = (0u64, None::<(f64, f64)>);
        for p in positive() {
            count += 1;
            min_max = Some(min_max.map_or((p, p), |(lo, hi)| (lo.min(p), hi.max(p))));
        }
        let histogram = match min_max {
            None => Vec::new(),
            Some((lo, hi)) if lo == hi => vec![(lo, hi, count)],
            Some((lo, hi)) => {
                let (l0, l1) = (lo.ln(), hi.ln());
                let step = (l1 - l0) / HISTOGRAM_BUCKETS as f64;
                let mut counts = [0u64; HISTOGRAM_BUCKETS];
                for p in positive() {
                    let b = (((p.ln() - l0) / step) as usize).min(HISTOGRAM_BUCKETS - 1);
                    if let Some(c) = counts.get_mut(b) {
                        *c += 1;
                    }
                }
                counts
                    .iter()
                    .enumerate()
                    .map(|(b, &c)| {
                        let edge = |k: usize| (l0 + step * k as f64).exp();
                        let high = if b + 1 == HISTOGRAM_BUCKETS {
                            hi
                        } else {
                            edge(b + 1)
                        };
                        (if b == 0 { lo } else { edge(b) }, high, c)
                    })
                    .collect()
            }
        };
        PriorityInfo {
            alpha,
            eps: copy.header.eps,
            arity: copy.header.arity,
            total: copy.tree.total(copy.words.as_slice()),
            min_max,
            zero: (tail - head) - count,
            max_seen: copy.counters.max_priority,
            updates: copy.counters.updates,
            stale_updates: copy.counters.stale_updates,
            histogram,
        }
    }
}

/// Priorities as a reader in another process sees them: `priorities.tree` mapped
/// read-only, its words loaded one at a time while the writer changes them. A descent
/// may meet parents the writer has not fixed yet (at most `FIX_EVERY` adds behind) or
/// a slot it has just emptied: such a draw is simply made again.
#[derive(Debug)]
pub(crate) struct SharedPriorities {
    map: TreeMap,
    tree: Tree,
    descents: Descents,
    capacity: u64,
}

impl SharedPriorities {
    /// Maps `priorities.tree` of the buffer in `dir` for reading.
    pub(crate) fn open(io: &dyn Io, dir: &Path, sb: &Superblock) -> Result<SharedPriorities> {
        let (map, header, _) = storage::open_tree(io, dir, sb, Access::Read)?;
        let shape = header
            .shape()
            .map_err(|p| p.into_error(map.path(), "priorities header"))?;
        Ok(SharedPriorities {
            map,
            tree: Tree::of(shape),
            descents: Descents::default(),
            capacity: sb.capacity,
        })
    }

    /// Sum of the leaves of `count` slots from `first` (wrapping), as the tree reads
    /// now: its upper levels may be some adds behind the leaves, as a draw's are.
    pub(crate) fn run_mass(&self, first: u64, count: u64) -> f64 {
        let w = self.map.shared_words();
        self.tree.run_mass(&w, first, count, self.capacity)
    }

    /// `(total, smallest non-zero leaf)` as the tree reads now.
    pub(crate) fn mass(&self) -> (f64, f64) {
        let w = self.map.shared_words();
        (self.tree.total(&w), self.tree.min(&w))
    }

    /// Draws `indices.len()` live indices by priority with their importance weights,
    /// drawing again those that land where the writer has just changed the tree.
    pub(crate) fn draw(
        &mut self,
        rng: &mut ChaCha8Rng,
        spec: &PrioritySpec,
        live: LiveRange,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()> {
        check_request(spec, indices.len(), weights.len(), live)?;
        let w = self.map.shared_words();
        let total = drawable_total(&self.tree, &w, self.map.path(), live.tail - live.head)?;
        let d = &mut self.descents;
        d.draw(&self.tree, &w, total, rng, spec, live, indices, weights);
        let one = PrioritySpec::new(1, spec.beta);
        for _ in 0..MISS_ROUNDS {
            let Some(miss) = d.misses.pop() else {
                return Ok(());
            };
            let (mut i, mut wt) = ([0u64], [0f32]);
            let mut again = std::mem::take(&mut d.misses);
            d.draw(&self.tree, &w, total, rng, &one, live, &mut i, &mut wt);
            if d.misses.is_empty() {
                if let (Some(x), Some(y)) = (
                    indices.get_mut(miss.position),
                    weights.get_mut(miss.position),
                ) {
                    (*x, *y) = (i[0], wt[0]);
                }
            } else {
                again.push(miss);
            }
            d.misses = again;
        }
        Err(Error::InvalidSample(format!(
            "{} draws by priority kept landing on slots the writer was changing",
            d.misses.len()
        )))
    }
}
