//! Which entries an episode getter asks for: the indexing of RLlib's
//! `SingleAgentEpisode.get_observations / get_actions / get_rewards` over a chunk of an
//! episode and its lookback buffer, as pure arithmetic on positions. The episode views
//! (issue 6) map the positions to stored items and fill the rest.
//!
//! A [`Window`] is `lookback` entries before the chunk, then the chunk's `len` entries:
//! positions `0 .. lookback + len`, with the chunk's first entry (ts = 0) at position
//! `lookback`. Observations have one entry more than actions and rewards, so a chunk of
//! `t` steps has an observation window of `t + 1` and an action window of `t`.

use crate::error::{Error, Result};

/// Most entries one filled range may produce: a larger one is a caller's mistake, not
/// something to allocate.
pub const MAX_RANGE: u32 = u32::MAX;

/// Entries asked for, in the forms RLlib's getters take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Indices {
    /// The whole chunk, ts = 0 to the end, without the lookback.
    All,
    /// One entry. `0` is ts = 0; a negative index counts from the end (or, with
    /// `neg_index_as_lookback`, back from ts = 0 into the lookback).
    At(i64),
    /// Several entries, each read as [`Indices::At`].
    List(Vec<i64>),
    /// Python's `slice(start, stop, step)` with `step >= 1`; each bound is read as
    /// [`Indices::At`] reads an index, a missing start is ts = 0 and a missing stop is
    /// the end.
    Range {
        /// First index (inclusive).
        start: Option<i64>,
        /// Last index (exclusive).
        stop: Option<i64>,
        /// Stride, at least 1.
        step: i64,
    },
}

impl Indices {
    /// `slice(start, stop)`.
    pub fn range(start: Option<i64>, stop: Option<i64>) -> Indices {
        Indices::Range {
            start,
            stop,
            step: 1,
        }
    }
}

/// What an index resolved to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pos {
    /// The entry at this position of the window (`0 .. lookback + len`).
    At(u64),
    /// Outside the window, where a fill value goes.
    Fill,
}

/// A chunk of `len` entries after `lookback` entries of lookback buffer.
///
/// ```
/// use replaystore::internal::lookback::{Indices, Pos, Window};
/// // RLlib's example: observations [4, 5, 6, 7, 8, 9], of which [4, 5, 6] are lookback.
/// let w = Window { lookback: 3, len: 3 };
/// let mut out = Vec::new();
/// w.resolve(&Indices::At(-1), true, false, &mut out)?;
/// assert_eq!(out, [Pos::At(2)]); // the 6
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Entries before ts = 0.
    pub lookback: u64,
    /// Entries from ts = 0 on.
    pub len: u64,
}

impl Window {
    fn total(self) -> i128 {
        i128::from(self.lookback) + i128::from(self.len)
    }

    /// The position an index names, possibly outside the window: `i >= 0` is ts = i;
    /// a negative `i` counts from the end (which may reach into the lookback, as in
    /// RLlib), or with `neg_index_as_lookback` back from ts = 0.
    fn position(self, i: i64, neg_index_as_lookback: bool) -> i128 {
        let i = i128::from(i);
        if i >= 0 || neg_index_as_lookback {
            i128::from(self.lookback) + i
        } else {
            self.total() + i
        }
    }

    fn pos(self, p: i128) -> Option<Pos> {
        (0..self.total()).contains(&p).then_some(Pos::At(p as u64))
    }

    /// Appends to `out` the positions `indices` names. An index outside the window (the
    /// chunk plus its lookback) is [`Pos::Fill`] when `fill`, else an error
    /// (`OutOfWindow`) for single indices and lists; a range keeps only its positions
    /// inside the window unless `fill`, as Python slices do. With `step` 1 this is
    /// RLlib's behaviour exactly; with larger steps every stepped position is judged on
    /// its own (RLlib counts fill entries without the step).
    pub fn resolve(
        self,
        indices: &Indices,
        neg_index_as_lookback: bool,
        fill: bool,
        out: &mut Vec<Pos>,
    ) -> Result<()> {
        let one = |i: i64, out: &mut Vec<Pos>| -> Result<()> {
            match self.pos(self.position(i, neg_index_as_lookback)) {
                Some(p) => out.push(p),
                None if fill => out.push(Pos::Fill),
                None => {
                    return Err(Error::OutOfWindow {
                        index: i,
                        lookback: self.lookback,
                        len: self.len,
                    });
                }
            }
            Ok(())
        };
        match indices {
            Indices::All => out.extend((self.lookback..self.lookback + self.len).map(Pos::At)),
            Indices::At(i) => one(*i, out)?,
            Indices::List(list) => {
                for &i in list {
                    one(i, out)?;
                }
            }
            &Indices::Range { start, stop, step } => {
                if step < 1 {
                    return Err(Error::InvalidSample(format!(
                        "slice step {step}: only steps of 1 or more are supported"
                    )));
                }
                let start = start.map_or(i128::from(self.lookback), |s| {
                    self.position(s, neg_index_as_lookback)
                });
                let mut stop =
                    stop.map_or(self.total(), |s| self.position(s, neg_index_as_lookback));
                let step = i128::from(step);
                let mut p = start;
                if fill {
                    let count = (stop - start + step - 1).div_euclid(step);
                    if count > i128::from(MAX_RANGE) {
                        return Err(Error::InvalidSample(format!(
                            "a filled range of {count} entries (at most {MAX_RANGE})"
                        )));
                    }
                } else {
                    // Only positions inside the window can come out: skip the rest.
                    if p < 0 {
                        p += (-p + step - 1).div_euclid(step) * step;
                    }
                    stop = stop.min(self.total());
                }
                while p < stop {
                    match self.pos(p) {
                        Some(at) => out.push(at),
                        None if fill => out.push(Pos::Fill),
                        None => {}
                    }
                    p += step;
                }
            }
        }
        Ok(())
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

    /// The values a getter returns over `data` (lookback first), `None` for a fill.
    fn get(
        data: &[i64],
        lookback: u64,
        indices: Indices,
        neg_index_as_lookback: bool,
        fill: bool,
    ) -> Result<Vec<Option<i64>>> {
        let w = Window {
            lookback,
            len: data.len() as u64 - lookback,
        };
        let mut out = Vec::new();
        w.resolve(&indices, neg_index_as_lookback, fill, &mut out)?;
        Ok(out
            .into_iter()
            .map(|p| match p {
                Pos::At(p) => Some(data[p as usize]),
                Pos::Fill => None,
            })
            .collect())
    }

    #[test]
    fn rllib_documented_lookback_examples() {
        // get_observations(-1, neg_index_as_lookback=True) -> 6
        let data = [4, 5, 6, 7, 8, 9];
        assert_eq!(
            get(&data, 3, Indices::At(-1), true, false).unwrap(),
            [Some(6)]
        );
        // get_observations(slice(-2, 1), neg_index_as_lookback=True) -> [5, 6, 7]
        assert_eq!(
            get(&data, 3, Indices::range(Some(-2), Some(1)), true, false).unwrap(),
            [Some(5), Some(6), Some(7)]
        );
        // Without the option, -1 is the last entry.
        assert_eq!(
            get(&data, 3, Indices::At(-1), false, false).unwrap(),
            [Some(9)]
        );
    }

    #[test]
    fn rllib_documented_fill_example() {
        // [10, 11, 12, 13, 14] with lookback 2: slice(-7, -2), fill=0.0
        // -> [0.0, 0.0, 10, 11, 12]
        let data = [10, 11, 12, 13, 14];
        assert_eq!(
            get(&data, 2, Indices::range(Some(-7), Some(-2)), false, true).unwrap(),
            [None, None, Some(10), Some(11), Some(12)]
        );
        // Without fill the slice is cut at the window, as a Python slice is.
        assert_eq!(
            get(&data, 2, Indices::range(Some(-7), Some(-2)), false, false).unwrap(),
            [Some(10), Some(11), Some(12)]
        );
    }

    #[test]
    fn rllib_documented_slices_of_an_episode() {
        // observations [0..=5], actions [1..=5], no lookback: episode[:1] has
        // observations [0, 1] and actions [1]; episode[-2:] has observations [3, 4, 5]
        // and actions [4, 5] (a chunk of t steps has t + 1 observations).
        let obs = [0, 1, 2, 3, 4, 5];
        let act = [1, 2, 3, 4, 5];
        assert_eq!(
            get(&obs, 0, Indices::range(None, Some(2)), false, false).unwrap(),
            [Some(0), Some(1)]
        );
        assert_eq!(
            get(&act, 0, Indices::range(None, Some(1)), false, false).unwrap(),
            [Some(1)]
        );
        assert_eq!(
            get(&obs, 0, Indices::range(Some(-3), None), false, false).unwrap(),
            [Some(3), Some(4), Some(5)]
        );
        assert_eq!(
            get(&act, 0, Indices::range(Some(-2), None), false, false).unwrap(),
            [Some(4), Some(5)]
        );
    }

    #[test]
    fn all_excludes_the_lookback_and_lists_read_each_index() {
        let data = [4, 5, 6, 7, 8, 9];
        assert_eq!(
            get(&data, 3, Indices::All, false, false).unwrap(),
            [Some(7), Some(8), Some(9)]
        );
        assert_eq!(
            get(&data, 3, Indices::List(vec![0, -1, 2]), false, false).unwrap(),
            [Some(7), Some(9), Some(9)]
        );
        // Counting from the end may reach into the lookback, as in RLlib.
        assert_eq!(
            get(&data, 3, Indices::At(-5), false, false).unwrap(),
            [Some(5)]
        );
    }

    #[test]
    fn outside_the_window_is_a_fill_or_an_error_naming_the_index() {
        let data = [4, 5, 6, 7, 8, 9];
        for (i, lookback_mode) in [(3, false), (-7, false), (-4, true), (3, true)] {
            let e = get(&data, 3, Indices::At(i), lookback_mode, false).unwrap_err();
            assert!(
                matches!(e, Error::OutOfWindow { index, lookback: 3, len: 3 } if index == i),
                "{e}"
            );
            assert_eq!(
                get(&data, 3, Indices::At(i), lookback_mode, true).unwrap(),
                [None]
            );
        }
        assert_eq!(
            get(&data, 3, Indices::range(Some(1), Some(6)), false, true).unwrap(),
            [Some(8), Some(9), None, None, None]
        );
        assert_eq!(
            get(&data, 3, Indices::range(Some(-5), Some(-1)), true, true).unwrap(),
            [None, None, Some(4), Some(5)]
        );
    }

    proptest::proptest! {
        /// A range without fill is the same range with its fills dropped, and a filled
        /// range of step 1 has exactly `stop - start` entries, in order.
        #[test]
        fn fill_only_adds_entries_outside_the_window(
            lookback in 0u64..20,
            len in 0u64..20,
            start in proptest::option::of(-40i64..40),
            stop in proptest::option::of(-40i64..40),
            step in 1i64..5,
            as_lookback: bool,
        ) {
            let w = Window { lookback, len };
            let range = Indices::Range { start, stop, step };
            let (mut filled, mut cut) = (Vec::new(), Vec::new());
            w.resolve(&range, as_lookback, true, &mut filled).unwrap();
            w.resolve(&range, as_lookback, false, &mut cut).unwrap();
            let kept: Vec<Pos> = filled.iter().copied().filter(|p| *p != Pos::Fill).collect();
            proptest::prop_assert_eq!(&kept, &cut);
            let ats: Vec<u64> = cut.iter().map(|p| match p { Pos::At(a) => *a, Pos::Fill => u64::MAX }).collect();
            proptest::prop_assert!(ats.windows(2).all(|x| x[1] == x[0] + step as u64));
            proptest::prop_assert!(ats.iter().all(|&a| a < lookback + len));
            if step == 1 {
                let s = start.map_or(lookback as i64, |s| w.position(s, as_lookback) as i64);
                let e = stop.map_or((lookback + len) as i64, |e| w.position(e, as_lookback) as i64);
                proptest::prop_assert_eq!(filled.len() as i64, (e - s).max(0));
            }
        }
    }

    #[test]
    fn steps_and_empty_ranges() {
        let data = [0, 1, 2, 3, 4, 5, 6];
        let r = |start, stop, step| Indices::Range { start, stop, step };
        assert_eq!(
            get(&data, 1, r(Some(0), None, 2), false, false).unwrap(),
            [Some(1), Some(3), Some(5)]
        );
        assert_eq!(
            get(&data, 1, r(Some(4), Some(2), 1), false, true).unwrap(),
            []
        );
        assert!(matches!(
            get(&data, 1, r(None, None, 0), false, false),
            Err(Error::InvalidSample(_))
        ));
        // Extreme bounds neither overflow nor loop or allocate without end.
        assert_eq!(
            get(
                &data,
                1,
                Indices::range(Some(i64::MIN), Some(i64::MIN + 3)),
                true,
                true
            )
            .unwrap(),
            [None, None, None]
        );
        // Positions 1 + i64::MIN + 3k: the ones in the window are 2 and 5.
        assert_eq!(
            get(&data, 1, r(Some(i64::MIN), Some(i64::MAX), 3), true, false).unwrap(),
            [Some(2), Some(5)]
        );
        assert!(matches!(
            get(&data, 1, Indices::range(Some(i64::MIN), None), true, true),
            Err(Error::InvalidSample(_))
        ));
    }
}
