//! How a draw over lanes is split into per-lane counts, so that the result has the
//! distribution of one draw over all the lanes' items.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::parts::priorities::PrioritySpec;

/// Splits `n` uniform draws over lanes of `sizes` items: with replacement each draw
/// picks a lane with probability size / total; without, with probability remaining /
/// remaining total, so `n` distinct items are equally likely to be any `n`.
pub(super) fn split_uniform(
    rng: &mut ChaCha8Rng,
    sizes: &[u64],
    n: usize,
    replace: bool,
    counts: &mut Vec<usize>,
) {
    counts.clear();
    counts.resize(sizes.len(), 0);
    let mut left = sizes.to_vec();
    let mut total: u64 = sizes.iter().sum();
    for _ in 0..n {
        if total == 0 {
            break;
        }
        let mut u = rng.random_range(0..total);
        for (k, s) in left.iter_mut().enumerate() {
            if u < *s {
                if let Some(c) = counts.get_mut(k) {
                    *c += 1;
                }
                if !replace {
                    *s -= 1;
                    total -= 1;
                }
                break;
            }
            u -= *s;
        }
    }
}

/// Splits `spec.n` draws by priority over lanes of priority mass `totals` (summing to
/// `total`): independent draws, or one in each of `n` equal slices (stratified).
pub(super) fn split_by_mass(
    rng: &mut ChaCha8Rng,
    totals: &[f64],
    total: f64,
    spec: &PrioritySpec,
    counts: &mut Vec<usize>,
) {
    counts.clear();
    counts.resize(totals.len(), 0);
    let n = spec.n;
    for j in 0..n {
        let r: f64 = rng.random();
        let u = if spec.stratified {
            (j as f64 + r) / n as f64 * total
        } else {
            r * total
        };
        // The last lane with mass takes what rounding leaves past the end.
        let mut pick = None;
        let mut acc = 0.0;
        for (k, &t) in totals.iter().enumerate() {
            if t > 0.0 {
                pick = Some(k);
                acc += t;
                if u < acc {
                    break;
                }
            }
        }
        if let Some(c) = pick.and_then(|k| counts.get_mut(k)) {
            *c += 1;
        }
    }
}
