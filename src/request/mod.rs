//! What a draw asks for: which units (rows, transitions, sequences, whole episodes,
//! whole fragments, groups), how they are picked (uniformly, by priority, oldest first
//! or at given indices) and how many. One type, [`Request`], is what every draw of
//! every handle reads (`sample` / `sample_into`); it is built through one builder type
//! per unit (`build.rs`), each with only the options its unit takes, so a request that
//! does not fit its unit cannot be written. What a draw returns is `sink::Layout`.
//!
//! Each of these does not compile (the run-time check they replace named the option):
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::rows(8).nstep(3, 0.9); // rows have no n-step returns
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::episodes(2).burn_in(3); // sequences' options are not episodes'
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::episodes(2).prioritized(0.4).remove(); // episodes by priority are not removed
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::transitions(4, &["obs"]).newest(10); // only rows are drawn from the newest items
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::rows(4).prioritized(0.4).without_replacement(); // a draw by priority has replacement
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::rows(2).prioritized(0.5).remove(); // a draw by priority does not remove what it returns
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::transitions(4, &["obs"]).prioritized(0.4).stratified(); // only rows are drawn in strata
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::rows(4).drawn(); // `drawn` marks given indices
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::transitions_at(&[1], &["obs"]).prioritized(0.4); // a read of given steps is not drawn by priority
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::at(&[1]).including_removed().remove(); // a read of removed items removes none
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::rows(1).by_group(&["pid"]).newest(5); // a draw by group is over the whole buffer
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::groups(1, &["env"]).prioritized(1.0); // groups are drawn uniformly
//! ```
//!
//! ```compile_fail,E0599
//! # use replaystore::Request;
//! let _ = Request::fragments(2).prioritized(0.4).remove(); // fragments by priority are not removed
//! ```
//!
//! Relabeling draws one-step transitions, so a shaped transition has no `relabel`:
//!
//! ```compile_fail,E0599
//! # use replaystore::{GoalStrategy, Relabel, Request};
//! let her = Relabel { goal: "g", achieved: "a", strategy: GoalStrategy::Future, fraction: 0.5 };
//! let _ = Request::transitions(4, &["a", "g"]).nstep(3, 0.9).relabel(her);
//! ```
//!
//! while the same request of one step builds:
//!
//! ```
//! # use replaystore::{GoalStrategy, Relabel, Request};
//! let her = Relabel { goal: "g", achieved: "a", strategy: GoalStrategy::Future, fraction: 0.5 };
//! let _: Request = Request::transitions(4, &["a", "g"]).relabel(her).gamma(0.9).into();
//! ```

mod build;
mod group;

pub use build::{
    At, ByGroup, Covering, Episodes, Fragments, Groups, Oldest, PriorityRows, Relabeled, Rows,
    Sequences, Shaped, Transitions, TransitionsAt, Uniform, UniformEpisodes, UniformFragments,
};
pub(crate) use group::GroupDraw;
pub use group::{GroupRequest, Mixed};

use crate::error::{Error, Result};

/// What a draw returns one of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Items (rows), each with every field.
    Rows,
    /// Transitions of an episodic buffer: `obs` from the row before a step, the step's
    /// fields, `next_<obs>` from the row it led to (n steps on), with n-step returns and
    /// frame stacks (see [`Request::transitions`]).
    Transitions,
    /// Sequences of `burn_in + len` steps of one episode each (R2D2).
    Sequences,
    /// Whole episodes (ended, every row stored), their rows concatenated.
    Episodes,
    /// Whole fragments (the rows of one `add` / `add_batch` call each), concatenated.
    Fragments,
    /// Whole groups of items sharing the values of some fields (DI-engine's
    /// `sample(groupby=)`), or windows of them, concatenated (see [`Request::groups`]).
    Groups,
}

/// Where a relabeled transition's new goal comes from (hindsight experience replay):
/// the goal reached at a step of the same episode, or of any episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoalStrategy {
    /// A step from the transition's own on, uniformly, up to the last one stored
    /// (SB3 and Tianshou's default).
    Future,
    /// The last step stored of the transition's episode.
    Final,
    /// Any step stored of the transition's episode, uniformly.
    Episode,
    /// Any live row of the buffer, uniformly (cpprb's `"random"`).
    Random,
}

/// Hindsight relabeling of transitions (HER): the first `round(fraction * n)`
/// transitions of a draw get a new goal, the goal reached at a step the strategy picks
/// (see [`Transitions::relabel`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relabel<'a> {
    /// The observation field holding the goal the policy was given (its "desired
    /// goal"); it comes back replaced, in both `obs` and `next_<obs>`.
    pub goal: &'a str,
    /// The observation field holding the goal reached ("achieved goal"): same dtype and
    /// shape as `goal`.
    pub achieved: &'a str,
    /// Where the new goal comes from.
    pub strategy: GoalStrategy,
    /// The fraction of each draw relabeled, in `0..=1`: SB3's `her_ratio`,
    /// `k / (k + 1)` for `n_sampled_goal = k`.
    pub fraction: f64,
}

/// How a draw picks its units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pick<'a> {
    /// Uniformly over the live units (see [`Rows::without_replacement`] and
    /// [`Rows::newest`]).
    Uniform,
    /// By priority, with importance-sampling exponent `beta`: weights are
    /// `(N * P(i))^-beta` over their largest value (see [`PriorityRows::stratified`]).
    Priority {
        /// The importance-sampling exponent.
        beta: f64,
    },
    /// These logical indices, in order: a read, the sampling RNG does not move.
    Given(&'a [u64]),
    /// The oldest live items (not removed), oldest first, up to `n`: a queue's order.
    /// With [`Oldest::remove`] each is returned once (RLlib's `FifoReplayBuffer`).
    Oldest,
}

/// A draw: `n` units of one [`Unit`], picked as a [`Pick`] says, with the options of its
/// unit. Build one with [`Request::rows`], [`Request::at`], [`Request::transitions`],
/// [`Request::transitions_at`], [`Request::sequences`], [`Request::episodes`],
/// [`Request::fragments`], [`Request::fragments_covering`] or [`Request::groups`], then
/// the options its builder has; a plain `usize` is `n` rows drawn uniformly. Every
/// builder converts into a `Request`, which is what `sample(request)` takes. An option
/// its unit does not take is not a method of the builder, so it does not compile; what
/// a draw still refuses is a value (a negative `beta`, a relabel fraction above 1, an
/// unknown field) or what the handle cannot draw.
///
/// ```
/// use replaystore::{Pick, Request, Unit};
/// let per: Request = Request::rows(256).prioritized(0.4).stratified();
/// assert_eq!((per.unit(), per.n(), per.pick()), (Unit::Rows, 256, Pick::Priority { beta: 0.4 }));
/// let dqn: Request = Request::transitions(32, &["obs"]).nstep(3, 0.99).stack(4).into();
/// assert_eq!((dqn.unit(), dqn.beta()), (Unit::Transitions, None));
/// assert_eq!(Request::from(64), Request::rows(64).into());
/// assert!(Request::from(Request::rows(8).prioritized(-1.0)).check().is_err()); // a value
/// ```
///
/// What does not compile, and why, is listed in the [module](self)'s examples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request<'a> {
    /// What is drawn.
    pub(crate) unit: Unit,
    /// Units to draw.
    pub(crate) n: usize,
    /// How they are picked.
    pub(crate) pick: Pick<'a>,
    /// Uniform rows: with replacement (the default) or distinct ones.
    pub(crate) replace: bool,
    /// Uniform rows: only from the newest `k` items (DI-engine's `sample_range`).
    pub(crate) newest: Option<u64>,
    /// Rows by priority: one draw in each of `n` equal slices of the total (Schaul et
    /// al., appendix B.2.1) instead of `n` independent draws.
    pub(crate) stratified: bool,
    /// Transitions and sequences: the observation fields, read as `obs` from the row
    /// before each step and as `next_<obs>` from the row it led to; every other field
    /// is read from the step's row.
    pub(crate) obs: &'a [&'a str],
    /// Transitions: steps summed into `returns`, cut at the episode's end (1: plain).
    pub(crate) nstep: u64,
    /// Transitions: discount of the n-step sum and of the bootstrap.
    pub(crate) gamma: f64,
    /// Transitions: frames per observation (1: no stacking). With `k > 1` each
    /// observation is the `k` newest frames up to its row, oldest first, shaped
    /// `[k, ...]`; before the episode's reset row its first frame repeats.
    pub(crate) stack: u64,
    /// Transitions: each observation field comes back once, as a window of
    /// `stack + nstep` frames per transition (`obs` is frames `0..stack`, the next
    /// observation frames `next_offsets[i]..next_offsets[i] + stack`), instead of
    /// separate `obs` and `next_<obs>` stacks: `(k + n) / 2k` of the bytes.
    pub(crate) window: bool,
    /// Sequences: trained steps per sequence.
    pub(crate) len: u64,
    /// Sequences: steps before the trained part, to warm up a recurrent state.
    pub(crate) burn_in: u64,
    /// Uniform rows: stratified by the values of these fields (see [`Rows::by_group`]);
    /// groups: the fields whose values make a group's key. Empty for none.
    pub(crate) group_by: &'a [&'a str],
    /// Groups: each group's window of this many consecutive items (DI-engine's
    /// `unroll_len`), from groups that have that many; 0 for every item of the group.
    pub(crate) unroll: u64,
    /// Rows, uniformly, oldest first or given: each item returned is removed in the same
    /// call (sample-and-remove; with [`Pick::Oldest`], a queue's consume), so no later
    /// draw returns it. Needs a buffer with item states ([`crate::Config::item_states`]);
    /// drawn rows are then distinct. Whole fragments and episodes drawn uniformly are
    /// removed whole (UnstableBaselines' `EpisodeBuffer.get_batch`).
    pub(crate) remove: bool,
    /// Given rows: removed items are read too (an export or an inspection that keeps
    /// them with their state; see [`At::including_removed`]).
    pub(crate) include_removed: bool,
    /// Given rows: they are a draw the caller made with its own RNG, counted in
    /// `Stats::sampled` as the engine's draws are (see [`At::drawn`]).
    pub(crate) drawn: bool,
    /// Fragments or episodes, uniformly: instead of `n`, distinct units in random order
    /// until their rows (an episode's steps) add up to at least this many (see
    /// [`Request::fragments_covering`], [`Request::episodes_covering`]).
    pub(crate) covering: Option<u64>,
    /// Transitions: hindsight relabeling of their goals (see [`Transitions::relabel`]).
    pub(crate) relabel: Option<Relabel<'a>>,
}

impl<'a> Request<'a> {
    /// Whether the units are drawn (uniformly or by priority) rather than given: a
    /// draw that meets an item evicted mid-read may pick again.
    pub(crate) fn draws(&self) -> bool {
        !matches!(self.pick, Pick::Given(_))
    }

    /// A request for `n` units of `unit`, uniformly with replacement and no option
    /// set: what every builder starts from.
    fn of(unit: Unit, n: usize) -> Request<'a> {
        Request {
            unit,
            n,
            pick: Pick::Uniform,
            replace: true,
            newest: None,
            stratified: false,
            obs: &[],
            nstep: 1,
            gamma: 1.0,
            stack: 1,
            window: false,
            len: 0,
            burn_in: 0,
            remove: false,
            include_removed: false,
            drawn: false,
            group_by: &[],
            unroll: 0,
            covering: None,
            relabel: None,
        }
    }

    /// What is drawn.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// How many units (given indices: how many are given; [`Request::fragments_covering`]:
    /// 0, as the count is found by the draw).
    pub fn n(&self) -> usize {
        self.n
    }

    /// How the units are picked.
    pub fn pick(&self) -> Pick<'a> {
        self.pick
    }

    /// The importance-sampling exponent, when drawn by priority.
    pub fn beta(&self) -> Option<f64> {
        match self.pick {
            Pick::Priority { beta } => Some(beta),
            _ => None,
        }
    }

    /// `InvalidSample` unless this draws rows: what `who` (a reader, lanes) draws.
    pub(crate) fn rows_only(&self, who: &str, instead: &str) -> Result<()> {
        match self.unit {
            Unit::Rows => Ok(()),
            unit => Err(Error::InvalidSample(format!(
                "{who} draw rows, not {unit:?}: {instead}"
            ))),
        }
    }

    /// Checks the values the builders cannot: a finite, non-negative `beta`; a relabel
    /// fraction in `0..=1` over two different observation fields; at least one field
    /// for a group's key. Every draw does this first. The shape of the request (which
    /// options go with which unit and pick) is the builders' to hold and is not checked
    /// again here.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidSample(what));
        if let Pick::Priority { beta } = self.pick
            && !(beta.is_finite() && beta >= 0.0)
        {
            return bad(format!("beta {beta} is not finite and >= 0"));
        }
        if let Some(r) = &self.relabel {
            if !(0.0..=1.0).contains(&r.fraction) {
                return bad(format!("relabel fraction {} is not in 0..=1", r.fraction));
            }
            for field in [r.goal, r.achieved] {
                if !self.obs.contains(&field) {
                    return bad(format!(
                        "relabel field {field:?} is not one of the observation fields {:?}",
                        self.obs
                    ));
                }
            }
            if r.goal == r.achieved {
                return bad(format!("relabel goal and achieved are both {:?}", r.goal));
            }
        }
        if self.unit == Unit::Groups && self.group_by.is_empty() {
            return bad("groups are drawn by the values of at least one field, not none".into());
        }
        Ok(())
    }
}

/// `n` items, uniformly with replacement: `buf.sample(256)`.
impl From<usize> for Request<'_> {
    fn from(n: usize) -> Self {
        Request::of(Unit::Rows, n)
    }
}
