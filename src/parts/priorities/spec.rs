//! What a caller says about priorities: the config a buffer is created with, a draw's
//! request, the values an update takes, and what updates and summaries report.

use crate::error::{Error, Result};
use crate::format::tree::{valid_alpha, valid_eps};

/// Prioritized replay settings, fixed when the buffer is created.
///
/// ```
/// use replaystore::PriorityConfig;
/// let p = PriorityConfig::new(0.6, 1e-6);
/// assert_eq!(p.alpha, 0.6);
/// assert_eq!(p.arity, 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PriorityConfig {
    /// Priority exponent: 0 is uniform, 1 is fully proportional.
    pub alpha: f64,
    /// Added to every priority, so that no item becomes impossible to draw.
    pub eps: f64,
    /// Children per tree node: 8 (one 64-byte node per level, the default, measured
    /// faster) or 2 (the textbook binary tree, kept for comparison).
    pub arity: u32,
}

impl PriorityConfig {
    /// `alpha` and `eps` with the default 8-ary tree.
    pub fn new(alpha: f64, eps: f64) -> PriorityConfig {
        PriorityConfig {
            alpha,
            eps,
            arity: 8,
        }
    }

    /// Checks the values, naming the first bad one.
    pub(crate) fn check(&self) -> Result<()> {
        let bad = |field, problem: String| Err(Error::InvalidConfig { field, problem });
        if !valid_alpha(self.alpha) {
            return bad("alpha", format!("{} is not finite and >= 0", self.alpha));
        }
        if !valid_eps(self.eps) {
            return bad("eps", format!("{} is not finite and >= 0", self.eps));
        }
        if !crate::format::tree::ARITIES.contains(&self.arity) {
            return bad("arity", format!("{} is not 2 or 8", self.arity));
        }
        Ok(())
    }
}

/// A draw by priority: what `Request` says of one (`n`, `beta`, stratified).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PrioritySpec {
    /// Items to draw (with replacement).
    pub n: usize,
    /// Importance-sampling exponent: weights are `(N * P(i))^-beta / max_j w_j`.
    pub beta: f64,
    /// One draw in each of `n` equal slices of the total (Schaul et al., appendix
    /// B.2.1) instead of `n` independent draws.
    pub stratified: bool,
}

impl PrioritySpec {
    /// `n` independent draws with exponent `beta`.
    pub(crate) fn new(n: usize, beta: f64) -> PrioritySpec {
        PrioritySpec {
            n,
            beta,
            stratified: false,
        }
    }

    /// The draw by priority `request` asks for, with exponent `beta`.
    pub(crate) fn of(request: &crate::request::Request<'_>, beta: f64) -> PrioritySpec {
        PrioritySpec {
            n: request.n,
            beta,
            stratified: request.stratified,
        }
    }
}

/// A priority value as callers hold them (`f32` TD errors from a GPU, or `f64`).
pub trait Priority: Copy {
    /// The value as `f64`.
    fn to_f64(self) -> f64;
}

/// What an `update_priorities` call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PriorityUpdate {
    /// Priorities applied.
    pub applied: u64,
    /// Skipped because the item was evicted or cleared since it was sampled.
    pub stale: u64,
}

/// The state of a buffer's priorities.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrioritySummary {
    /// Priority exponent.
    pub alpha: f64,
    /// Added to every priority.
    pub eps: f64,
    /// Children per tree node.
    pub arity: u32,
    /// Sum of `(priority + eps)^alpha` over the live items.
    pub total: f64,
    /// Smallest non-zero `(priority + eps)^alpha` (+inf if none).
    pub min_leaf: f64,
    /// Largest `priority + eps` seen so far: what a new item gets.
    pub max_priority: f64,
    /// Updates applied since the buffer was created.
    pub updates: u64,
    /// Updates skipped because their item was gone.
    pub stale_updates: u64,
}

impl Priority for f64 {
    fn to_f64(self) -> f64 {
        self
    }
}

impl Priority for f32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}
