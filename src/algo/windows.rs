//! Which rows a sample reads around one row of an episode: n-step returns, stacked
//! frames, and sequences with burn-in. Pure arithmetic on logical indices; the samplers
//! (issue 6) gather the rows. See `docs/design/episodes.md` for the row model: row `t`
//! of an episode holds the observation after step `t`, and step row `t >= 1` also
//! holds the action taken at `t - 1` and its reward.

/// How an episode ended, if it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The environment reached a terminal state: nothing follows, no bootstrap.
    Terminated,
    /// Cut short (time limit): the last observation is not terminal, bootstrap from it.
    Truncated,
}

/// The rows of one episode that are stored now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Logical index of the episode's reset row (`t = 0`), stored or evicted.
    pub start: u64,
    /// First stored row (`>= start`; above it when the ring evicted the beginning).
    pub first: u64,
    /// Last stored row.
    pub last: u64,
    /// How the episode ended, when `last` is its final row.
    pub end: Option<End>,
}

/// An n-step transition: the rewards of rows `rewards`, discounted from its first,
/// bootstrapped from the observation of row `bootstrap` with `discount` (0 when the
/// episode terminated there).
#[derive(Clone, Debug, PartialEq)]
pub struct NStep {
    /// Rows whose rewards are summed, `gamma^i` for the `i`-th.
    pub rewards: std::ops::Range<u64>,
    /// The row whose observation is the n-step `next_obs`.
    pub bootstrap: u64,
    /// Factor of the bootstrap value: `gamma^k` for `k` rewards, or 0 after a terminal
    /// state.
    pub discount: f64,
    /// Whether the episode terminated at `bootstrap` (the `done` a learner masks with).
    pub terminated: bool,
}

impl Span {
    /// The `n`-step transition that starts with the step ending at row `j` (so its
    /// observation is row `j - 1`'s), or `None` when `j` cannot end a step: `j` is the
    /// reset row, row `j - 1` is not stored, or `j` is outside the span. It stops early
    /// at the episode's last stored row.
    ///
    /// ```
    /// use replaystore::internal::windows::{End, Span};
    /// // Rows 10 (reset) ..= 14, terminated at 14.
    /// let span = Span { start: 10, first: 10, last: 14, end: Some(End::Terminated) };
    /// let t = span.nstep(13, 3, 0.5).unwrap();
    /// assert_eq!((t.rewards, t.bootstrap, t.discount, t.terminated), (13..15, 14, 0.0, true));
    /// ```
    pub fn nstep(&self, j: u64, n: u64, gamma: f64) -> Option<NStep> {
        if j <= self.first || j > self.last || n == 0 {
            return None;
        }
        let k = n.min(self.last - j + 1);
        let bootstrap = j + k - 1;
        let terminated = bootstrap == self.last && self.end == Some(End::Terminated);
        let discount = if terminated {
            0.0
        } else {
            gamma.powi(i32::try_from(k).unwrap_or(i32::MAX))
        };
        Some(NStep {
            rewards: j..j + k,
            bootstrap,
            discount,
            terminated,
        })
    }

    /// The `k` rows whose observations stack into the one at row `r`, oldest first.
    /// Before the episode's reset row the reset row's frame repeats. `None` when a row
    /// needed was evicted (the stack cannot be rebuilt honestly) or `r` is outside.
    ///
    /// ```
    /// use replaystore::internal::windows::Span;
    /// let span = Span { start: 10, first: 10, last: 20, end: None };
    /// assert_eq!(span.stack(11, 4), Some(vec![10, 10, 10, 11]));
    /// assert_eq!(span.stack(15, 4), Some(vec![12, 13, 14, 15]));
    /// ```
    pub fn stack(&self, r: u64, k: u64) -> Option<Vec<u64>> {
        if !self.stacks(r, k) {
            return None;
        }
        let mut rows = Vec::with_capacity(usize::try_from(k).unwrap_or(0));
        self.push_stack(r, k, &mut rows);
        Some(rows)
    }

    /// Whether the `k` frames up to row `r` can be stacked: `r` is stored, and so is
    /// every frame before it back to the reset row or `k - 1` rows.
    pub fn stacks(&self, r: u64, k: u64) -> bool {
        k > 0
            && r >= self.first
            && r <= self.last
            && (self.first == self.start || r - self.first + 1 >= k)
    }

    /// Appends [`Span::stack`]`(r, k)` to `rows` without allocating, for a row that
    /// [`Span::stacks`].
    pub fn push_stack(&self, r: u64, k: u64, rows: &mut Vec<u64>) {
        // Rows r + 1 - k ..= r, clamped up to the reset row; computed from the top so
        // no index goes below zero.
        for back in (0..k).rev() {
            rows.push(r.saturating_sub(back).max(self.start));
        }
    }

    /// A sequence of `burn_in + len` rows whose trained part starts at row `s`: each
    /// position is `Some(row)`, or `None` (zero padding, mask false) before the reset
    /// row or after the last stored row, so a sequence never crosses into another
    /// episode. `None` overall when `s` is outside the span or burn-in rows that exist
    /// were evicted.
    ///
    /// ```
    /// use replaystore::internal::windows::Span;
    /// let span = Span { start: 10, first: 10, last: 13, end: None };
    /// assert_eq!(
    ///     span.sequence(11, 2, 4),
    ///     Some(vec![None, Some(10), Some(11), Some(12), Some(13), None])
    /// );
    /// ```
    pub fn sequence(&self, s: u64, burn_in: u64, len: u64) -> Option<Vec<Option<u64>>> {
        if s < self.first || s > self.last {
            return None;
        }
        let from = i128::from(s) - i128::from(burn_in);
        if from < i128::from(self.first) && self.first > self.start {
            return None;
        }
        let rows = (burn_in + len) as i128;
        Some(
            (from..from + rows)
                .map(|p| {
                    (p >= i128::from(self.start) && p <= i128::from(self.last)).then_some(p as u64)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        reason = "tests fail loudly"
    )]
    use super::*;

    /// A naive reference over a plain list of steps: `episode[t]` for t = 0..=T is
    /// (reward arriving at row t, is it the episode's last row, terminated).
    fn naive_nstep(
        rewards: &[f64],
        last_is_terminal: bool,
        done: bool,
        t: usize,
        n: usize,
        gamma: f64,
    ) -> (f64, usize, f64) {
        // Transition t: obs row t, rewards from rows t+1 ...
        let mut g = 0.0;
        let mut k = 0;
        let mut row = t + 1;
        while k < n && row < rewards.len() {
            g += gamma.powi(k as i32) * rewards[row];
            k += 1;
            if row == rewards.len() - 1 {
                break;
            }
            row += 1;
        }
        let boot = t + k;
        let terminal = done && last_is_terminal && boot == rewards.len() - 1;
        (g, boot, if terminal { 0.0 } else { gamma.powi(k as i32) })
    }

    proptest::proptest! {
        /// Against the naive loop: every transition of a random episode, for
        /// terminated, truncated and unfinished episodes.
        #[test]
        fn nstep_matches_a_naive_loop(
            rewards in proptest::collection::vec(-5.0f64..5.0, 1..40),
            start in 0u64..1000,
            n in 1u64..8,
            gamma in 0.0f64..1.0,
            ending in 0u8..3,
        ) {
            let last = start + rewards.len() as u64 - 1;
            let end = match ending { 0 => Some(End::Terminated), 1 => Some(End::Truncated), _ => None };
            let span = Span { start, first: start, last, end };
            for t in 0..rewards.len() - 1 {
                let j = start + t as u64 + 1;
                let got = span.nstep(j, n, gamma).unwrap();
                let g: f64 = got.rewards.clone().enumerate()
                    .map(|(i, r)| gamma.powi(i as i32) * rewards[(r - start) as usize]).sum();
                let (want_g, want_boot, want_disc) = naive_nstep(
                    &rewards, end == Some(End::Terminated), end.is_some(), t, n as usize, gamma);
                proptest::prop_assert!((g - want_g).abs() < 1e-9);
                proptest::prop_assert_eq!(got.bootstrap, start + want_boot as u64);
                proptest::prop_assert!((got.discount - want_disc).abs() < 1e-12);
                proptest::prop_assert_eq!(got.terminated, want_disc == 0.0 && end == Some(End::Terminated) && got.bootstrap == last);
            }
            // The reset row ends no step.
            proptest::prop_assert!(span.nstep(start, n, gamma).is_none());
        }

        /// Stacks never reach outside the episode and end at the row asked for; a stack
        /// needing evicted rows is refused.
        #[test]
        fn stacks_stay_in_their_episode(
            start in 0u64..100, evicted in 0u64..5, len in 1u64..30, k in 1u64..6, at in 0u64..30,
        ) {
            let first = start + evicted.min(len - 1);
            let span = Span { start, first, last: start + len - 1, end: None };
            let r = first + at % (span.last - first + 1);
            match span.stack(r, k) {
                Some(rows) => {
                    proptest::prop_assert_eq!(rows.len() as u64, k);
                    proptest::prop_assert_eq!(*rows.last().unwrap(), r);
                    proptest::prop_assert!(rows.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1));
                    proptest::prop_assert!(rows.iter().all(|&x| x >= first && x <= r));
                }
                None => proptest::prop_assert!(first > start && r + 1 < first + k),
            }
        }
    }

    #[test]
    fn nstep_cuts_at_the_end_and_bootstraps_only_if_not_terminated() {
        let done = |end| Span {
            start: 0,
            first: 0,
            last: 3,
            end,
        };
        let t = done(Some(End::Terminated)).nstep(2, 5, 0.9).unwrap();
        assert_eq!((t.rewards, t.bootstrap, t.discount), (2..4, 3, 0.0));
        let t = done(Some(End::Truncated)).nstep(2, 5, 0.9).unwrap();
        assert_eq!((t.rewards, t.bootstrap), (2..4, 3));
        assert!((t.discount - 0.81).abs() < 1e-12 && !t.terminated);
        // Not at the end: a full n-step with gamma^n.
        let t = done(Some(End::Terminated)).nstep(1, 2, 0.5).unwrap();
        assert_eq!((t.rewards, t.bootstrap, t.discount), (1..3, 2, 0.25));
        // The first stored row of a partly evicted episode ends no step.
        let span = Span {
            start: 0,
            first: 2,
            last: 5,
            end: None,
        };
        assert!(span.nstep(2, 1, 0.9).is_none() && span.nstep(3, 1, 0.9).is_some());
    }

    #[test]
    fn sequences_pad_at_both_ends_and_refuse_evicted_burn_in() {
        let span = Span {
            start: 5,
            first: 5,
            last: 9,
            end: Some(End::Terminated),
        };
        assert_eq!(
            span.sequence(5, 2, 3),
            Some(vec![None, None, Some(5), Some(6), Some(7)])
        );
        assert_eq!(
            span.sequence(8, 1, 4),
            Some(vec![Some(7), Some(8), Some(9), None, None])
        );
        let evicted = Span { first: 7, ..span };
        assert_eq!(evicted.sequence(8, 2, 1), None);
        assert_eq!(evicted.sequence(8, 1, 1), Some(vec![Some(7), Some(8)]));
        assert_eq!(span.sequence(10, 0, 1), None);
    }
}
