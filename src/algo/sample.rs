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

/// Draws as [`draw_uniform`] does, never returning an index `is_removed` names;
/// `removed` is how many of the live range are removed. With none, the draw is
/// [`draw_uniform`]'s, index for index. While fewer than half are removed, each index
/// is drawn until it is a live one (at most two tries per index on average); past
/// that, or if the tries run out (a `newest` range that is nearly all removed), the
/// rest are drawn from the list of the range's live indices, made by one pass (O(range)).
/// Either way every live index is equally likely, and the same RNG state and removals
/// give the same draw.
pub(crate) fn draw_uniform_skipping(
    rng: &mut ChaCha8Rng,
    spec: &SampleSpec,
    (head, tail, removed): (u64, u64, u64),
    is_removed: &dyn Fn(u64) -> bool,
    out: &mut Vec<u64>,
) -> Result<()> {
    if removed == 0 {
        return draw_uniform(rng, spec, head, tail, out);
    }
    out.clear();
    if spec.n == 0 {
        return Err(Error::InvalidSample("n must be at least 1".into()));
    }
    let (lo, len) = range(spec, head, tail)?;
    let mut taken = std::collections::HashSet::new();
    let fresh = |i: u64, taken: &std::collections::HashSet<u64>| {
        !is_removed(i) && (spec.replace || !taken.contains(&i))
    };
    if removed.saturating_mul(2) < tail - head {
        let mut tries = 64 + 8 * spec.n;
        while out.len() < spec.n && tries > 0 {
            tries -= 1;
            let i = lo + rng.random_range(0..len);
            if fresh(i, &taken) {
                out.push(i);
                if !spec.replace {
                    taken.insert(i);
                }
            }
        }
        if out.len() == spec.n {
            return Ok(());
        }
    }
    let live: Vec<u64> = (lo..lo + len).filter(|&i| fresh(i, &taken)).collect();
    let want = spec.n - out.len();
    if live.is_empty() && out.is_empty() {
        return Err(Error::Empty);
    }
    if spec.replace {
        let pick = |k: usize| live.get(k).copied().unwrap_or(lo);
        out.extend((0..want).map(|_| pick(rng.random_range(0..live.len()))));
    } else {
        if want > live.len() {
            return Err(Error::InvalidSample(format!(
                "{} items without replacement, but only {} are in range and not removed",
                spec.n,
                live.len() + out.len()
            )));
        }
        out.extend(
            rand::seq::index::sample(rng, live.len(), want)
                .iter()
                .map(|k| live.get(k).copied().unwrap_or(lo)),
        );
    }
    Ok(())
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
