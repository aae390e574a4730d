//! What a draw asks for: which units (rows, transitions, sequences, whole episodes,
//! whole fragments), how they are picked (uniformly, by priority, or given indices) and
//! how many. One type for every draw of every handle (`sample` / `sample_into`); what a
//! draw returns is described by `sink::Layout`.

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
/// (see [`Request::relabel`]).
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
    /// Uniformly over the live units (see [`Request::replace`] and [`Request::newest`]).
    Uniform,
    /// By priority, with importance-sampling exponent `beta`: weights are
    /// `(N * P(i))^-beta` over their largest value (see [`Request::stratified`]).
    Priority {
        /// The importance-sampling exponent.
        beta: f64,
    },
    /// These logical indices, in order: a read, the sampling RNG does not move.
    Given(&'a [u64]),
    /// The oldest live items (not removed), oldest first, up to `n`: a queue's order.
    /// With [`Request::remove`] each is returned once (RLlib's `FifoReplayBuffer`).
    Oldest,
}

/// A draw: `n` units of `unit`, picked as `pick` says, with the options of its unit.
/// Build one with [`Request::rows`], [`Request::at`], [`Request::transitions`],
/// [`Request::sequences`], [`Request::episodes`] or [`Request::fragments`], then the
/// options; a plain `usize` is `n` rows drawn uniformly. An option that does not apply
/// to the unit (or a pick the unit cannot take) is an `InvalidSample` error naming it
/// when the draw is made, never ignored.
///
/// ```
/// use replaystore::{Pick, Request, Unit};
/// let per = Request::rows(256).prioritized(0.4).stratified();
/// assert_eq!((per.pick, per.stratified), (Pick::Priority { beta: 0.4 }, true));
/// let dqn = Request::transitions(32, &["obs"]).nstep(3, 0.99).stack(4);
/// assert_eq!((dqn.unit, dqn.nstep, dqn.stack), (Unit::Transitions, 3, 4));
/// assert_eq!(Request::from(64), Request::rows(64));
/// assert!(Request::rows(8).nstep(3, 0.9).check().is_err()); // rows have no n-step
/// assert!(Request::rows(8).prioritized(0.4).without_replacement().check().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request<'a> {
    /// What is drawn.
    pub unit: Unit,
    /// Units to draw.
    pub n: usize,
    /// How they are picked.
    pub pick: Pick<'a>,
    /// Uniform rows: with replacement (the default) or distinct ones.
    pub replace: bool,
    /// Uniform rows: only from the newest `k` items (DI-engine's `sample_range`).
    pub newest: Option<u64>,
    /// Rows by priority: one draw in each of `n` equal slices of the total (Schaul et
    /// al., appendix B.2.1) instead of `n` independent draws.
    pub stratified: bool,
    /// Transitions and sequences: the observation fields, read as `obs` from the row
    /// before each step and as `next_<obs>` from the row it led to; every other field
    /// is read from the step's row.
    pub obs: &'a [&'a str],
    /// Transitions: steps summed into `returns`, cut at the episode's end (1: plain).
    pub nstep: u64,
    /// Transitions: discount of the n-step sum and of the bootstrap.
    pub gamma: f64,
    /// Transitions: frames per observation (1: no stacking). With `k > 1` each
    /// observation is the `k` newest frames up to its row, oldest first, shaped
    /// `[k, ...]`; before the episode's reset row its first frame repeats.
    pub stack: u64,
    /// Transitions: each observation field comes back once, as a window of
    /// `stack + nstep` frames per transition (`obs` is frames `0..stack`, the next
    /// observation frames `next_offsets[i]..next_offsets[i] + stack`), instead of
    /// separate `obs` and `next_<obs>` stacks: `(k + n) / 2k` of the bytes.
    pub window: bool,
    /// Sequences: trained steps per sequence.
    pub len: u64,
    /// Sequences: steps before the trained part, to warm up a recurrent state.
    pub burn_in: u64,
    /// Uniform rows: stratified by the values of these fields (see [`Request::by_group`]);
    /// groups: the fields whose values make a group's key. Empty for none.
    pub group_by: &'a [&'a str],
    /// Groups: each group's window of this many consecutive items (DI-engine's
    /// `unroll_len`), from groups that have that many; 0 for every item of the group.
    pub unroll: u64,
    /// Rows, uniformly, oldest first or given: each item returned is removed in the same
    /// call (sample-and-remove; with [`Pick::Oldest`], a queue's consume), so no later
    /// draw returns it. Needs a buffer with item states ([`crate::Config::item_states`]);
    /// drawn rows are then distinct. Whole fragments drawn uniformly are removed
    /// whole (UnstableBaselines' `EpisodeBuffer.get_batch`).
    pub remove: bool,
    /// Given rows: removed items are read too (an export or an inspection that keeps
    /// them with their state; see [`Request::including_removed`]).
    pub include_removed: bool,
    /// Given rows: they are a draw the caller made with its own RNG, counted in
    /// `Stats::sampled` as the engine's draws are (see [`Request::drawn`]).
    pub drawn: bool,
    /// Fragments, uniformly: instead of `n`, distinct fragments in random order until
    /// their rows add up to at least this many (see [`Request::fragments_covering`]).
    pub covering: Option<u64>,
    /// Transitions: hindsight relabeling of their goals (see [`Request::relabel`]).
    pub relabel: Option<Relabel<'a>>,
}

impl<'a> Request<'a> {
    /// Whether the units are drawn (uniformly or by priority) rather than given: a
    /// draw that meets an item evicted mid-read may pick again.
    pub(crate) fn draws(&self) -> bool {
        !matches!(self.pick, Pick::Given(_))
    }

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

    /// `n` items, uniformly with replacement.
    pub fn rows(n: usize) -> Request<'a> {
        Request::of(Unit::Rows, n)
    }

    /// The items at `indices`, in order (a read: the RNG does not move).
    pub fn at(indices: &'a [u64]) -> Request<'a> {
        Request {
            pick: Pick::Given(indices),
            ..Request::of(Unit::Rows, indices.len())
        }
    }

    /// `n` one-step transitions of an episodic buffer, uniformly over the steps of
    /// live episodes; `obs` names the observation fields.
    pub fn transitions(n: usize, obs: &'a [&'a str]) -> Request<'a> {
        Request {
            obs,
            ..Request::of(Unit::Transitions, n)
        }
    }

    /// Transitions (or rows) read at the step rows `indices`, in order, instead of
    /// drawn (a read: the RNG does not move). For transitions each index is a step
    /// row whose observation row is stored: what a transition's `indices` entry
    /// names. A row that ends no such step is an `InvalidSample` naming it.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .field("obs", DType::F32, &[])
    ///     .field("reward", DType::F32, &[])
    ///     .build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 64).episodic())?;
    /// let obs = [0.0f32, 1.0, 2.0, 3.0];
    /// buf.add_episode(&[Column::new("obs", &obs)], &[Column::new("reward", &[1.0f32; 3])], true, false)?;
    /// // Rows 1..=3 end the episode's steps; row 0 is its reset.
    /// let t = buf.sample(Request::transitions(0, &["obs"]).at_steps(&[3, 1]).nstep(2, 0.5))?;
    /// assert_eq!(t.get::<f32>("obs")?, [2.0, 0.0]);
    /// assert_eq!(t.get::<f32>("next_obs")?, [3.0, 2.0]);
    /// assert!(buf.sample(Request::transitions(0, &["obs"]).at_steps(&[0])).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn at_steps(mut self, indices: &'a [u64]) -> Request<'a> {
        self.pick = Pick::Given(indices);
        self.n = indices.len();
        self
    }

    /// `n` sequences of `len` trained steps of one episode each, uniformly over their
    /// first trained step; `obs` names the observation fields.
    pub fn sequences(n: usize, len: u64, obs: &'a [&'a str]) -> Request<'a> {
        Request {
            obs,
            len,
            ..Request::of(Unit::Sequences, n)
        }
    }

    /// `n` whole episodes (ended, every row stored), uniformly with replacement.
    pub fn episodes(n: usize) -> Request<'a> {
        Request::of(Unit::Episodes, n)
    }

    /// `n` whole fragments (the rows of one `add` / `add_batch` call each, every row
    /// stored and, with item states, none removed), uniformly with replacement.
    pub fn fragments(n: usize) -> Request<'a> {
        Request::of(Unit::Fragments, n)
    }

    /// Distinct whole fragments, uniformly in random order, until their rows add up to
    /// at least `rows`: UnstableBaselines' `EpisodeBuffer.get_batch(batch_size)`, which
    /// shuffles its episodes and takes them until it has `batch_size` steps. With
    /// [`Request::remove`] each is removed as it is returned. `InvalidSample` when all
    /// the whole fragments together have fewer rows.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).fragments().item_states();
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// for len in [3, 4, 5] {
    ///     buf.add_batch(&[Column::new("x", &vec![len as f32; len])])?;
    /// }
    /// let got = buf.sample(Request::fragments_covering(6).remove())?;
    /// let offsets = got.get::<u64>("offsets")?;
    /// assert!(offsets.len() == 3 && got.len() >= 6); // two episodes reach 6 steps
    /// assert_eq!(buf.len(), 12 - got.len() as u64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fragments_covering(rows: u64) -> Request<'a> {
        Request {
            covering: Some(rows),
            replace: false,
            ..Request::of(Unit::Fragments, 0)
        }
    }

    /// `n` groups of the live items that share the values of `fields` (DI-engine's
    /// `sample(n, groupby=field)`), uniformly over the groups, with replacement unless
    /// [`Request::without_replacement`]: each group's items not removed, in the order
    /// they were added, concatenated, with `offsets` (group `i` is rows
    /// `offsets[i]..offsets[i + 1]`). [`Request::unroll`] takes a window of each.
    /// [`Request::remove`] removes what it returns. Each draw reads the keys of the items
    /// added since the last one and looks at every indexed item once: O(live items).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("env", DType::U8, &[]).field("t", DType::U32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100))?;
    /// for t in 0..12u32 {
    ///     buf.add(&[Column::scalar("env", &((t % 3) as u8)), Column::scalar("t", &t)])?;
    /// }
    /// let g = buf.sample(Request::groups(3, &["env"]).without_replacement())?;
    /// let (offsets, env) = (g.get::<u64>("offsets")?, g.get::<u8>("env")?);
    /// assert_eq!(offsets, [0, 4, 8, 12]);
    /// assert!((0..3).all(|k| env[4 * k..4 * k + 4].iter().all(|&e| e == env[4 * k])));
    /// // Two consecutive items of one env each: t and t + 3.
    /// let w = buf.sample(Request::groups(5, &["env"]).unroll(2))?;
    /// let t = w.get::<u32>("t")?;
    /// assert!((0..5).all(|k| t[2 * k + 1] == t[2 * k] + 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn groups(n: usize, fields: &'a [&'a str]) -> Request<'a> {
        Request {
            group_by: fields,
            ..Request::of(Unit::Groups, n)
        }
    }

    /// Groups: a window of `len` consecutive items of each group drawn (in the order
    /// they were added), starting uniformly at random, from the groups with at least
    /// `len` items (DI-engine's `unroll_len`).
    pub fn unroll(mut self, len: u64) -> Request<'a> {
        self.unroll = len;
        self
    }

    /// Picks by priority with importance-sampling exponent `beta`. A unit longer than
    /// a row weighs as its rows do: a transition or sequence by its first step's row,
    /// an episode or fragment by the mean leaf of its rows (an episode's step rows).
    pub fn prioritized(mut self, beta: f64) -> Request<'a> {
        self.pick = Pick::Priority { beta };
        self
    }

    /// By priority, one draw in each of `n` equal slices of the total (rows only).
    pub fn stratified(mut self) -> Request<'a> {
        self.stratified = true;
        self
    }

    /// Distinct rows (uniform only; `n` must not exceed the items in range).
    pub fn without_replacement(mut self) -> Request<'a> {
        self.replace = false;
        self
    }

    /// Distinct rows stratified by the values of `fields` (fixed or variable-length:
    /// an `env_id` text, or `env_id` and `pid`), as UnstableBaselines' `stratified_env`
    /// and `stratified_env_role` strategies draw: up to `n / groups` (at least one)
    /// from every group, then the rest uniformly from the items not drawn. With more
    /// groups than `n`, `n` groups are chosen at random and one item drawn from each
    /// (UnstableBaselines would return one from every group, more than `n`).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("env", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100))?;
    /// let env: Vec<u8> = (0..40).map(|i| if i < 36 { 0 } else { 1 }).collect();
    /// buf.add_batch(&[Column::new("env", &env)])?;
    /// let b = buf.sample(Request::rows(4).by_group(&["env"]))?;
    /// // Two from each env, although env 1 holds a tenth of the items.
    /// assert_eq!(b.get::<u8>("env")?.iter().filter(|&&e| e == 1).count(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn by_group(mut self, fields: &'a [&'a str]) -> Request<'a> {
        self.group_by = fields;
        self.replace = false;
        self
    }

    /// The oldest live items first (not removed ones), up to `n` of them: fewer when
    /// fewer are live, `Empty` when none is. With [`Request::remove`] it consumes them
    /// as a queue does (each item returned once, cause `consumed`).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::I64, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).item_states())?;
    /// buf.add_batch(&[Column::new("x", &(0..5i64).collect::<Vec<_>>())])?;
    /// assert_eq!(buf.sample(Request::rows(3).oldest().remove())?.indices(), [0, 1, 2]);
    /// assert_eq!(buf.sample(Request::rows(3).oldest().remove())?.indices(), [3, 4]);
    /// assert!(buf.sample(Request::rows(3).oldest()).is_err()); // empty
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn oldest(mut self) -> Request<'a> {
        self.pick = Pick::Oldest;
        self
    }

    /// Removes every item the draw returns, in the same call (UnstableBaselines'
    /// `get_batch`, Reverb's `max_times_sampled=1`): the rows are distinct, and no later
    /// draw or read returns them. Uniform, oldest-first or given rows of a buffer with
    /// item states.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::I64, &[]).build()?;
    /// let config = Config::new(schema, 100).item_states().seed(1);
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// buf.add_batch(&[Column::new("x", &(0..10i64).collect::<Vec<_>>())])?;
    /// let popped = buf.sample(Request::rows(4).remove())?;
    /// assert_eq!(buf.len(), 6);
    /// let rest = buf.sample(Request::rows(6).remove())?;
    /// let mut all: Vec<u64> = popped.indices().iter().chain(rest.indices()).copied().collect();
    /// all.sort();
    /// assert_eq!(all, (0..10).collect::<Vec<u64>>());
    /// assert!(buf.sample(1).is_err()); // every item was removed
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove(mut self) -> Request<'a> {
        self.remove = true;
        self.replace = false;
        self
    }

    /// Given rows only: reads removed items as well as live ones (every other read and
    /// draw refuses a removed item with `Removed`). For an export that keeps removed
    /// items with their state, or a look at what a draw removed.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Error, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::I64, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).item_states())?;
    /// buf.add_batch(&[Column::new("x", &[10i64, 11, 12])])?;
    /// buf.remove(&[1])?;
    /// assert!(matches!(buf.sample(Request::at(&[0, 1])), Err(Error::Removed { index: 1, .. })));
    /// let both = buf.sample(Request::at(&[0, 1]).including_removed())?;
    /// assert_eq!(both.get::<i64>("x")?, &[10, 11]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn including_removed(mut self) -> Request<'a> {
        self.include_removed = true;
        self
    }

    /// Given rows are a draw the caller made by its own RNG (an adapter that keeps its
    /// library's sampling): read as given, and counted in `Stats::sampled` (and so in
    /// `replaystore info`) as the engine's own draws are.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::I64, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8))?;
    /// buf.add_batch(&[Column::new("x", &[10i64, 11, 12])])?;
    /// buf.sample(Request::at(&[0, 2]))?;
    /// assert_eq!(buf.stats().sampled, 0, "a read is not a draw");
    /// buf.sample(Request::at(&[0, 2]).drawn())?;
    /// assert_eq!(buf.stats().sampled, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drawn(mut self) -> Request<'a> {
        self.drawn = true;
        self
    }

    /// From the newest `k` items only (uniform rows).
    pub fn newest(mut self, k: u64) -> Request<'a> {
        self.newest = Some(k);
        self
    }

    /// Sums rewards over `nstep` steps with discount `gamma` (transitions).
    pub fn nstep(mut self, nstep: u64, gamma: f64) -> Request<'a> {
        self.nstep = nstep;
        self.gamma = gamma;
        self
    }

    /// Stacks the `k` newest frames into each observation (transitions).
    pub fn stack(mut self, k: u64) -> Request<'a> {
        self.stack = k;
        self
    }

    /// Returns each transition's frames as one window of `stack + nstep` frames per
    /// observation field, with `next_offsets` saying where the next observation starts
    /// in it (transitions).
    pub fn window(mut self) -> Request<'a> {
        self.window = true;
        self
    }

    /// Relabels the goals of the first `round(relabel.fraction * n)` transitions of
    /// the draw with goals reached in hindsight (HER; transitions of one step, without
    /// stacking). Each comes back with its `goal` field (in `obs` and `next_<obs>`)
    /// replaced by the `achieved` field of the row the strategy picks; `relabeled`
    /// says which, and `goal_indices` which row the goal came from (a transition's own
    /// step row when it keeps its goal). Rewards are the caller's to recompute for the
    /// new goals (the Python package calls `compute_reward` once per batch).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, GoalStrategy, Relabel, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .field("achieved", DType::F32, &[])
    ///     .field("desired", DType::F32, &[])
    ///     .build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// let no_goal = -1.0f32;
    /// buf.add_reset(&[Column::scalar("achieved", &0.0f32), Column::scalar("desired", &no_goal)])?;
    /// for t in 1..=10 {
    ///     let reached = t as f32;
    ///     let obs = [Column::scalar("achieved", &reached), Column::scalar("desired", &no_goal)];
    ///     buf.add_step(&obs, t == 10, false)?;
    /// }
    /// let her = Relabel { goal: "desired", achieved: "achieved", strategy: GoalStrategy::Final, fraction: 1.0 };
    /// let b = buf.sample(Request::transitions(8, &["achieved", "desired"]).relabel(her))?;
    /// // Every goal is the one reached at the episode's last step.
    /// assert!(b.get::<f32>("desired")?.iter().all(|&g| g == 10.0));
    /// assert!(b.get::<bool>("relabeled")?.iter().all(|&r| r));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn relabel(mut self, relabel: Relabel<'a>) -> Request<'a> {
        self.relabel = Some(relabel);
        self
    }

    /// Adds `burn_in` steps before the trained part (sequences).
    pub fn burn_in(mut self, burn_in: u64) -> Request<'a> {
        self.burn_in = burn_in;
        self
    }

    /// How the units are picked, as an error message says it.
    fn how(&self) -> &'static str {
        match self.pick {
            Pick::Uniform => "drawn uniformly",
            Pick::Priority { .. } => "drawn by priority",
            Pick::Given(_) => "read at given indices",
            Pick::Oldest => "taken oldest first",
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

    /// The importance-sampling exponent, when drawn by priority.
    pub fn beta(&self) -> Option<f64> {
        match self.pick {
            Pick::Priority { beta } => Some(beta),
            _ => None,
        }
    }

    /// Checks that every option set applies to the unit and pick, naming the first
    /// that does not. Every draw does this first.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidSample(what));
        let unit = self.unit;
        let name = match unit {
            Unit::Rows => "rows",
            Unit::Transitions => "transitions",
            Unit::Sequences => "sequences",
            Unit::Episodes => "episodes",
            Unit::Fragments => "fragments",
            Unit::Groups => "groups",
        };
        let steps = matches!(unit, Unit::Transitions | Unit::Sequences);
        if !steps && !self.obs.is_empty() {
            return bad(format!(
                "observation fields are for transitions and sequences, not {name}"
            ));
        }
        if unit != Unit::Transitions {
            let options = [
                ("nstep", self.nstep != 1 || self.gamma != 1.0),
                ("stack", self.stack != 1),
                ("window", self.window),
            ];
            if let Some((option, _)) = options.iter().find(|o| o.1) {
                return bad(format!("{option} is an option of transitions, not {name}"));
            }
        }
        if let Some(r) = &self.relabel {
            if unit != Unit::Transitions {
                return bad(format!("relabel is an option of transitions, not {name}"));
            }
            if self.nstep != 1 || self.stack != 1 || self.window {
                return bad(
                    "relabel draws transitions of one step without stacking or windows: a \
                     new goal changes every reward of an n-step return"
                        .into(),
                );
            }
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
        if unit != Unit::Sequences && (self.len != 0 || self.burn_in != 0) {
            return bad(format!(
                "len and burn_in are options of sequences, not {name}"
            ));
        }
        let uniform_rows = unit == Unit::Rows && self.pick == Pick::Uniform;
        let given_rows = unit == Unit::Rows && matches!(self.pick, Pick::Given(_));
        let oldest_rows = unit == Unit::Rows && self.pick == Pick::Oldest;
        let uniform_units =
            matches!(unit, Unit::Fragments | Unit::Groups) && self.pick == Pick::Uniform;
        if self.pick == Pick::Oldest && unit != Unit::Rows {
            return bad(format!("oldest() takes rows, not {name}"));
        }
        if self.remove && !(uniform_rows || given_rows || oldest_rows || uniform_units) {
            return bad(format!(
                "a draw that removes what it returns picks rows uniformly, oldest first or \
                 at given indices, or whole fragments or groups uniformly, not {name} {}: \
                 draw them, then remove(indices)",
                self.how()
            ));
        }
        if self.drawn && !given_rows {
            return bad(format!(
                "drawn() marks rows at given indices as the caller's draw, not {name} {}",
                self.how()
            ));
        }
        if self.include_removed && (self.remove || !given_rows) {
            return bad(format!(
                "including_removed reads rows at given indices, not {name} {}, nor with \
                 remove()",
                self.how()
            ));
        }
        let distinct = uniform_rows || uniform_units;
        if !(self.replace || distinct || self.remove && (given_rows || oldest_rows)) {
            return bad(format!(
                "only uniform rows, fragments and groups are drawn without replacement, not \
                 {name} {}",
                self.how()
            ));
        }
        if self.covering.is_some() && !(uniform_units && unit == Unit::Fragments) {
            return bad(format!(
                "fragments_covering draws whole fragments uniformly, not {name} {}",
                self.how()
            ));
        }
        if unit == Unit::Groups {
            if self.group_by.is_empty() || !uniform_units {
                return bad(format!(
                    "groups are drawn uniformly by the values of at least one field, not \
                     {}",
                    self.how()
                ));
            }
        } else if self.unroll != 0 {
            return bad(format!("unroll is an option of groups, not {name}"));
        } else if !self.group_by.is_empty() && (!uniform_rows || self.newest.is_some()) {
            return bad(format!(
                "a draw by group picks uniform rows from the whole buffer, not {name} {}",
                self.how()
            ));
        }
        if self.newest.is_some() && !uniform_rows {
            return bad(format!(
                "newest(k) picks uniform rows, not {name} {}",
                self.how()
            ));
        }
        let priority_rows = unit == Unit::Rows && matches!(self.pick, Pick::Priority { .. });
        if self.stratified && !priority_rows {
            return bad(format!(
                "a stratified draw picks rows by priority, not {name} {}",
                self.how()
            ));
        }
        match self.pick {
            Pick::Priority { beta } if !(beta.is_finite() && beta >= 0.0) => {
                return bad(format!("beta {beta} is not finite and >= 0"));
            }
            Pick::Given(indices) => {
                if !matches!(unit, Unit::Rows | Unit::Transitions) {
                    return bad(format!(
                        "given indices read rows or transitions, not {name}"
                    ));
                }
                if self.relabel.is_some() {
                    return bad(
                        "relabel draws its transitions; it reads none at given steps".into(),
                    );
                }
                if indices.len() != self.n {
                    return bad(format!(
                        "{} indices given for a read of {}",
                        indices.len(),
                        self.n
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// `n` items, uniformly with replacement: `buf.sample(256)`.
impl From<usize> for Request<'_> {
    fn from(n: usize) -> Self {
        Request::rows(n)
    }
}
