//! Which items a uniform sample draws. Drawing is apart from gathering, so a binding can
//! draw indices, allocate its own arrays, and have the buffer fill them.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::request::Request;

/// A uniform draw of rows: what `Request` says of one (`n`, replacement, newest `k`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SampleSpec {
    /// Items to draw.
    pub n: usize,
    /// Draw with replacement (the default) or not.
    pub replace: bool,
    /// Draw only from the newest K items (DI-engine's `sample_range`).
    pub newest: Option<u64>,
}

impl SampleSpec {
    /// The uniform draw `request` asks for.
    pub(crate) fn of(request: &Request<'_>) -> SampleSpec {
        SampleSpec {
            n: request.n,
            replace: request.replace,
            newest: request.newest,
        }
    }
}

/// Draws indices from the live range `[head, tail)` into `out`.
pub(crate) fn draw_uniform(
    rng: &mut ChaCha8Rng,
    spec: &SampleSpec,
    head: u64,
    tail: u64,
    out: &mut Vec<u64>,
) -> Result<()> {
    out.clear();
    if spec.n == 0 {
        return Err(Error::InvalidSample("n must be at least 1".into()));
    }
    let (lo, len) = range(spec, head, tail)?;
    if spec.replace {
        out.extend((0..spec.n).map(|_| lo + rng.random_range(0..len)));
    } else {
        let len =
            usize::try_from(len).map_err(|_| Error::InvalidSample("range too large".into()))?;
        if spec.n > len {
            return Err(Error::InvalidSample(format!(
                "{} items without replacement, but only {len} are in range",
                spec.n
            )));
        }
        out.extend(
            rand::seq::index::sample(rng, len, spec.n)
                .iter()
                .map(|o| lo + o as u64),
        );
    }
    Ok(())
}

/// What a draw needs to know of removed items (item states), from whoever keeps them.
pub(crate) trait Removed {
    /// Whether live index `index` was removed.
    fn is_removed(&self, index: u64) -> bool;
    /// A hint that `indices` are about to be asked about (their words are fetched
    /// together, so the misses overlap).
    fn prefetch(&self, _indices: &[u64]) {}
}

/// The candidates a draw past half removed picks from: a sorted list of indices that
/// holds every live index not removed exactly once, and some that were removed or
/// evicted since it was last compacted. A handle keeps it between draws: new indices
/// are appended as the tail moves, and it is compacted (the dead dropped, O(list)) only
/// when a draw meets more dead entries than it drew, so a draw costs O(1) expected,
/// amortized, at any share removed.
#[derive(Debug, Default)]
pub(crate) struct LiveList {
    /// Candidate indices, ascending.
    indices: Vec<u64>,
    /// Every index below this was considered (appended if it was live then).
    upto: u64,
}

impl LiveList {
    /// Appends the indices from where the list ends to `tail` that `is_removed` does not
    /// name (a list behind `head` starts at `head`).
    fn extend(&mut self, head: u64, tail: u64, removed: &dyn Removed) {
        let from = self.upto.max(head);
        self.indices
            .extend((from..tail).filter(|&i| !removed.is_removed(i)));
        self.upto = self.upto.max(tail);
    }

    /// Drops the entries below `head` and those `removed` names.
    fn compact(&mut self, head: u64, removed: &dyn Removed) {
        self.indices
            .retain(|&i| i >= head && !removed.is_removed(i));
    }

    /// The candidates at or past `lo`.
    fn from(&self, lo: u64) -> &[u64] {
        let at = self.indices.partition_point(|&i| i < lo);
        self.indices.get(at..).unwrap_or(&[])
    }
}

/// Draws as [`draw_uniform`] does, never returning an index `is_removed` names;
/// `removed` is how many of the live range are removed. With none, the draw is
/// [`draw_uniform`]'s, index for index. While fewer than half are removed, each index
/// is drawn until it is a live one (at most two tries per index on average). Past
/// that (or when the tries run out: a `newest` range that is nearly all removed) the
/// draw picks from `list`, the handle's kept candidates, rejecting the dead ones and
/// compacting the list when they outnumber the draw. Every live index is equally likely
/// either way. The same RNG state and removals give the same draw while fewer than half
/// are removed; past that, the draw also depends on when the handle's list was last
/// compacted (a reopened handle may draw other items from the same RNG position).
pub(crate) fn draw_uniform_skipping(
    rng: &mut ChaCha8Rng,
    spec: &SampleSpec,
    (head, tail, removed_live): (u64, u64, u64),
    removed: &dyn Removed,
    list: &mut LiveList,
    out: &mut Vec<u64>,
) -> Result<()> {
    if removed_live == 0 {
        return draw_uniform(rng, spec, head, tail, out);
    }
    out.clear();
    if spec.n == 0 {
        return Err(Error::InvalidSample("n must be at least 1".into()));
    }
    let (lo, len) = range(spec, head, tail)?;
    let mut taken = std::collections::HashSet::new();
    let mut round = Vec::with_capacity(spec.n);
    // Draws the rest of the batch in one round from `pick`, asks for all their words
    // at once, then keeps the live ones (and, without replacement, the new ones).
    // Returns how many it did not keep.
    let mut draw_round = |rng: &mut ChaCha8Rng, out: &mut Vec<u64>, pick: &dyn Fn(u64) -> u64| {
        round.clear();
        round.extend((out.len()..spec.n).map(|_| pick(rng.random::<u64>())));
        removed.prefetch(&round);
        let before = out.len();
        for &i in &round {
            if !removed.is_removed(i) && (spec.replace || taken.insert(i)) {
                out.push(i);
            }
        }
        round.len() - (out.len() - before)
    };
    // Without replacement, a batch of more than half of what is live makes rejection a
    // coupon collector (n ln n tries for all of them): such a draw enumerates instead.
    let most_of_live = !spec.replace
        && (spec.n as u64).saturating_mul(2) > (tail - head).saturating_sub(removed_live);
    if removed_live.saturating_mul(2) < tail - head && !most_of_live {
        let mut misses = 0;
        let uniform = |r: u64| lo + uniform_below(r, len);
        while out.len() < spec.n && misses <= 8 * spec.n + 64 {
            misses += draw_round(rng, out, &uniform);
        }
        if out.len() == spec.n {
            return Ok(());
        }
    }
    list.extend(head, tail, removed);
    for compacted in [false, true] {
        if compacted {
            list.compact(head, removed);
        }
        let candidates = list.from(lo);
        let count = candidates.len() as u64;
        if count == 0 {
            return Err(Error::Empty);
        }
        if !spec.replace && (spec.n as u64).saturating_mul(2) > count {
            // Compacted, the list holds the live candidates only (but for removals made
            // since by another process): taking the rest from them is exact.
            if compacted {
                return take_rest(rng, spec, candidates, removed, out);
            }
            continue;
        }
        let from_list = |r: u64| {
            let k = uniform_below(r, count) as usize;
            candidates.get(k).copied().unwrap_or(lo)
        };
        let mut misses = 0;
        while out.len() < spec.n && misses <= 2 * spec.n + 64 {
            misses += draw_round(rng, out, &from_list);
        }
        if out.len() == spec.n {
            return Ok(());
        }
    }
    // Compacted and still missing: nearly every candidate was removed meanwhile (by
    // another process) or taken. Without replacement the rest is taken by enumeration,
    // which fails only if too few are left; with it, none can be drawn.
    if spec.replace {
        return Err(Error::Empty);
    }
    take_rest(rng, spec, list.from(lo), removed, out)
}

/// Completes a draw without replacement from `candidates`: the rest of the batch as a
/// uniform subset of the candidates neither removed nor already in `out` (which is
/// itself a uniform subset, so the whole is one too). O(candidates), for a batch that
/// asks for most of them, where rejection would retry without end.
fn take_rest(
    rng: &mut ChaCha8Rng,
    spec: &SampleSpec,
    candidates: &[u64],
    removed: &dyn Removed,
    out: &mut Vec<u64>,
) -> Result<()> {
    let taken: std::collections::HashSet<u64> = out.iter().copied().collect();
    removed.prefetch(candidates);
    let free: Vec<u64> = candidates
        .iter()
        .copied()
        .filter(|i| !taken.contains(i) && !removed.is_removed(*i))
        .collect();
    let need = spec.n - out.len();
    if free.len() < need {
        return Err(Error::InvalidSample(format!(
            "{} items without replacement, but only {} are in range and not removed",
            spec.n,
            out.len() + free.len()
        )));
    }
    out.extend(
        rand::seq::index::sample(rng, free.len(), need)
            .iter()
            .filter_map(|k| free.get(k).copied()),
    );
    Ok(())
}

/// A uniform number below `n` (> 0) from 64 random bits (Lemire's multiply-shift: the
/// bias is below n / 2^64, which no draw of a buffer of at most 2^40 items can show).
pub(crate) fn uniform_below(r: u64, n: u64) -> u64 {
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

/// The indices `spec` draws from, `lo .. lo + len`, given the live range.
fn range(spec: &SampleSpec, head: u64, tail: u64) -> Result<(u64, u64)> {
    if spec.newest == Some(0) {
        return Err(Error::InvalidSample("newest must be at least 1".into()));
    }
    let lo = match spec.newest {
        Some(k) => head.max(tail.saturating_sub(k)),
        None => head,
    };
    match tail.saturating_sub(lo) {
        0 => Err(Error::Empty),
        len => Ok((lo, len)),
    }
}

/// Draws one more index as `spec` says from the live range `[head, tail)`: in place of
/// one that was lost (a reader's draw the writer overwrote). Without replacement it
/// avoids `taken`.
pub(crate) fn draw_one(
    rng: &mut ChaCha8Rng,
    spec: &SampleSpec,
    head: u64,
    tail: u64,
    taken: &[u64],
) -> Result<u64> {
    let (lo, len) = range(spec, head, tail)?;
    // Without replacement at most `n - 1` of `len >= n` indices are taken, so a free
    // one is found within a few tries unless nearly all are taken.
    for _ in 0..1_000 {
        let i = lo + rng.random_range(0..len);
        if spec.replace || !taken.contains(&i) {
            return Ok(i);
        }
    }
    Err(Error::InvalidSample(format!(
        "no index left to draw without replacement among {len}"
    )))
}
