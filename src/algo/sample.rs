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
