//! One builder type per unit of a draw, each with only the options its unit (and the
//! pick chosen so far) takes, so a request that does not fit cannot be written: the
//! compiler refuses it where the run-time check used to. Every builder is a value the
//! compiler removes: a `Request` inside and methods that set its fields. Each converts
//! into a [`Request`] (what `sample` takes); a method after which no option is left
//! returns the `Request` itself.

use super::{Pick, Relabel, Request, Unit};

/// A builder type: a `Request` inside, converted out by `From`.
macro_rules! builder {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[must_use = "a request does nothing until a handle draws it"]
        pub struct $name<'a>(Request<'a>);

        impl<'a> From<$name<'a>> for Request<'a> {
            fn from(b: $name<'a>) -> Request<'a> {
                b.0
            }
        }
    };
}

builder!(
    /// Rows drawn uniformly with replacement, no option chosen yet
    /// ([`Request::rows`]): every option of rows, and every way to pick them, is
    /// still open.
    Rows
);
builder!(
    /// Rows drawn uniformly with an option chosen (distinct, removed, from the newest
    /// items): [`Rows`] less the picks and [`Rows::by_group`].
    Uniform
);
builder!(
    /// Distinct rows stratified by the values of some fields ([`Rows::by_group`]).
    ByGroup
);
builder!(
    /// Rows drawn by priority ([`Rows::prioritized`]).
    PriorityRows
);
builder!(
    /// The oldest live rows first ([`Rows::oldest`]).
    Oldest
);
builder!(
    /// Rows read at given indices ([`Request::at`]).
    At
);
builder!(
    /// Transitions drawn, no shape chosen yet ([`Request::transitions`]).
    Transitions
);
builder!(
    /// Transitions with n-step returns, stacked frames or windows
    /// ([`Transitions::nstep`], [`Transitions::stack`], [`Transitions::window`]): no
    /// relabeling, which draws plain one-step transitions.
    Shaped
);
builder!(
    /// Transitions relabeled with goals reached in hindsight ([`Transitions::relabel`]).
    Relabeled
);
builder!(
    /// Transitions read at given step rows ([`Request::transitions_at`]).
    TransitionsAt
);
builder!(
    /// Sequences of steps of one episode each ([`Request::sequences`]).
    Sequences
);
builder!(
    /// Whole episodes ([`Request::episodes`]).
    Episodes
);
builder!(
    /// Whole episodes drawn uniformly, distinct or removed
    /// ([`Episodes::without_replacement`], [`Episodes::remove`]).
    UniformEpisodes
);
builder!(
    /// Whole fragments, no option chosen yet ([`Request::fragments`]).
    Fragments
);
builder!(
    /// Whole fragments drawn uniformly, distinct or removed
    /// ([`Fragments::without_replacement`], [`Fragments::remove`]).
    UniformFragments
);
builder!(
    /// Distinct whole fragments or episodes until their rows (steps) reach a count
    /// ([`Request::fragments_covering`], [`Request::episodes_covering`]).
    Covering
);
builder!(
    /// Whole groups of items sharing some fields' values ([`Request::groups`]).
    Groups
);

impl<'a> Request<'a> {
    /// `n` items, uniformly with replacement.
    pub fn rows(n: usize) -> Rows<'a> {
        Rows(Request::of(Unit::Rows, n))
    }

    /// The items at `indices`, in order (a read: the RNG does not move).
    pub fn at(indices: &'a [u64]) -> At<'a> {
        At(Request {
            pick: Pick::Given(indices),
            ..Request::of(Unit::Rows, indices.len())
        })
    }

    /// `n` one-step transitions of an episodic buffer, uniformly over the steps of
    /// live episodes; `obs` names the observation fields.
    pub fn transitions(n: usize, obs: &'a [&'a str]) -> Transitions<'a> {
        Transitions(Request {
            obs,
            ..Request::of(Unit::Transitions, n)
        })
    }

    /// The transitions that end at the step rows `indices`, in order, instead of drawn
    /// (a read: the RNG does not move); `obs` names the observation fields. Each index
    /// is a step row whose observation row is stored: what a transition's `indices`
    /// entry names. A row that ends no such step is an `InvalidSample` naming it.
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
    /// let t = buf.sample(Request::transitions_at(&[3, 1], &["obs"]).nstep(2, 0.5))?;
    /// assert_eq!(t.get::<f32>("obs")?, [2.0, 0.0]);
    /// assert_eq!(t.get::<f32>("next_obs")?, [3.0, 2.0]);
    /// assert!(buf.sample(Request::transitions_at(&[0], &["obs"])).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn transitions_at(indices: &'a [u64], obs: &'a [&'a str]) -> TransitionsAt<'a> {
        TransitionsAt(Request {
            obs,
            pick: Pick::Given(indices),
            ..Request::of(Unit::Transitions, indices.len())
        })
    }

    /// `n` sequences of `len` trained steps of one episode each, uniformly over their
    /// first trained step; `obs` names the observation fields.
    pub fn sequences(n: usize, len: u64, obs: &'a [&'a str]) -> Sequences<'a> {
        Sequences(Request {
            obs,
            len,
            ..Request::of(Unit::Sequences, n)
        })
    }

    /// `n` whole episodes (ended, every row stored), uniformly with replacement.
    pub fn episodes(n: usize) -> Episodes<'a> {
        Episodes(Request::of(Unit::Episodes, n))
    }

    /// `n` whole fragments (the rows of one `add` / `add_batch` call each, every row
    /// stored and, with item states, none removed), uniformly with replacement.
    pub fn fragments(n: usize) -> Fragments<'a> {
        Fragments(Request::of(Unit::Fragments, n))
    }

    /// Distinct whole fragments, uniformly in random order, until their rows add up to
    /// at least `rows`: UnstableBaselines' `EpisodeBuffer.get_batch(batch_size)`, which
    /// shuffles its episodes and takes them until it has `batch_size` steps. With
    /// [`Covering::remove`] each is removed as it is returned. `InvalidSample` when all
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
    pub fn fragments_covering(rows: u64) -> Covering<'a> {
        Covering(Request {
            covering: Some(rows),
            replace: false,
            ..Request::of(Unit::Fragments, 0)
        })
    }

    /// Distinct whole episodes, uniformly in random order, until their steps (rows
    /// less the reset row) add up to at least `steps`: UnstableBaselines'
    /// `EpisodeBuffer.get_batch(batch_size)` over an episodic buffer. At least one is
    /// taken, even for 0 steps. With [`Covering::remove`] each is removed as it is
    /// returned (a buffer with item states). `InvalidSample` when all the whole
    /// episodes together have fewer steps.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("obs", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).episodic().item_states();
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// for steps in [3, 4, 5] {
    ///     buf.add_reset(&[Column::scalar("obs", &0.0f32)])?;
    ///     for t in 1..=steps {
    ///         buf.add_step(&[Column::scalar("obs", &(t as f32))], t == steps, false)?;
    ///     }
    /// }
    /// let got = buf.sample(Request::episodes_covering(6).remove())?;
    /// let episodes = got.get::<u64>("episodes")?;
    /// assert_eq!(episodes.len(), 2); // no one episode has 6 steps, any two do
    /// assert_eq!(buf.len(), 15 - got.len() as u64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn episodes_covering(steps: u64) -> Covering<'a> {
        Covering(Request {
            covering: Some(steps),
            replace: false,
            ..Request::of(Unit::Episodes, 0)
        })
    }

    /// `n` groups of the live items that share the values of `fields` (DI-engine's
    /// `sample(n, groupby=field)`), uniformly over the groups, with replacement unless
    /// [`Groups::without_replacement`]: each group's items not removed, in the order
    /// they were added, concatenated, with `offsets` (group `i` is rows
    /// `offsets[i]..offsets[i + 1]`). [`Groups::unroll`] takes a window of each.
    /// [`Groups::remove`] removes what it returns. Each draw reads the keys of the items
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
    pub fn groups(n: usize, fields: &'a [&'a str]) -> Groups<'a> {
        Groups(Request {
            group_by: fields,
            ..Request::of(Unit::Groups, n)
        })
    }
}

impl<'a> Rows<'a> {
    /// Distinct rows (uniform only; `n` must not exceed the items in range).
    pub fn without_replacement(self) -> Uniform<'a> {
        Uniform(self.0).without_replacement()
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
    pub fn remove(self) -> Uniform<'a> {
        Uniform(self.0).remove()
    }

    /// From the newest `k` items only (uniform rows).
    pub fn newest(self, k: u64) -> Uniform<'a> {
        Uniform(self.0).newest(k)
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
    pub fn by_group(mut self, fields: &'a [&'a str]) -> ByGroup<'a> {
        self.0.group_by = fields;
        self.0.replace = false;
        ByGroup(self.0)
    }

    /// Picks by priority with importance-sampling exponent `beta`. A unit longer than
    /// a row weighs as its rows do: a transition or sequence by its first step's row,
    /// an episode or fragment by the mean leaf of its rows (an episode's step rows).
    pub fn prioritized(mut self, beta: f64) -> PriorityRows<'a> {
        self.0.pick = Pick::Priority { beta };
        PriorityRows(self.0)
    }

    /// The oldest live items first (not removed ones), up to `n` of them: fewer when
    /// fewer are live, `Empty` when none is. With [`Oldest::remove`] it consumes them
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
    pub fn oldest(mut self) -> Oldest<'a> {
        self.0.pick = Pick::Oldest;
        Oldest(self.0)
    }
}

impl<'a> Uniform<'a> {
    /// Distinct rows (`n` must not exceed the items in range).
    pub fn without_replacement(mut self) -> Uniform<'a> {
        self.0.replace = false;
        self
    }

    /// Removes every item returned, in the same call (see [`Rows::remove`]).
    pub fn remove(mut self) -> Uniform<'a> {
        self.0.remove = true;
        self.0.replace = false;
        self
    }

    /// From the newest `k` items only.
    pub fn newest(mut self, k: u64) -> Uniform<'a> {
        self.0.newest = Some(k);
        self
    }
}

impl<'a> ByGroup<'a> {
    /// Removes every item returned, in the same call (see [`Rows::remove`]).
    pub fn remove(mut self) -> Request<'a> {
        self.0.remove = true;
        self.0
    }
}

impl<'a> PriorityRows<'a> {
    /// One draw in each of `n` equal slices of the total instead of `n` independent
    /// draws (Schaul et al., appendix B.2.1).
    pub fn stratified(mut self) -> Request<'a> {
        self.0.stratified = true;
        self.0
    }
}

impl<'a> Oldest<'a> {
    /// Consumes the items returned, as a queue does: each is returned once (cause
    /// `consumed`). Needs a buffer with item states.
    pub fn remove(mut self) -> Request<'a> {
        self.0.remove = true;
        self.0.replace = false;
        self.0
    }
}

impl<'a> At<'a> {
    /// Removes every item read, in the same call (see [`Rows::remove`]).
    pub fn remove(mut self) -> Request<'a> {
        self.0.remove = true;
        self.0.replace = false;
        self.0
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
        self.0.include_removed = true;
        self.0
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
        self.0.drawn = true;
        self.0
    }
}

impl<'a> Transitions<'a> {
    /// Picks by priority with importance-sampling exponent `beta`, each transition
    /// weighing as its first step's row.
    pub fn prioritized(mut self, beta: f64) -> Transitions<'a> {
        self.0.pick = Pick::Priority { beta };
        self
    }

    /// Sums rewards over `nstep` steps with discount `gamma`, cut at the episode's end
    /// (1: plain).
    pub fn nstep(self, nstep: u64, gamma: f64) -> Shaped<'a> {
        Shaped(self.0).nstep(nstep, gamma)
    }

    /// Stacks the `k` newest frames into each observation (1: no stacking). Each
    /// observation is the `k` newest frames up to its row, oldest first, shaped
    /// `[k, ...]`; before the episode's reset row its first frame repeats.
    pub fn stack(self, k: u64) -> Shaped<'a> {
        Shaped(self.0).stack(k)
    }

    /// Returns each observation field once, as a window of `stack + nstep` frames per
    /// transition, with `next_offsets` saying where the next observation starts in it:
    /// `(k + n) / 2k` of the bytes of separate `obs` and `next_<obs>` stacks.
    pub fn window(self) -> Shaped<'a> {
        Shaped(self.0).window()
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
    pub fn relabel(mut self, relabel: Relabel<'a>) -> Relabeled<'a> {
        self.0.relabel = Some(relabel);
        Relabeled(self.0)
    }
}

impl<'a> Shaped<'a> {
    /// Picks by priority (see [`Transitions::prioritized`]).
    pub fn prioritized(mut self, beta: f64) -> Shaped<'a> {
        self.0.pick = Pick::Priority { beta };
        self
    }

    /// See [`Transitions::nstep`].
    pub fn nstep(mut self, nstep: u64, gamma: f64) -> Shaped<'a> {
        self.0.nstep = nstep;
        self.0.gamma = gamma;
        self
    }

    /// See [`Transitions::stack`].
    pub fn stack(mut self, k: u64) -> Shaped<'a> {
        self.0.stack = k;
        self
    }

    /// See [`Transitions::window`].
    pub fn window(mut self) -> Shaped<'a> {
        self.0.window = true;
        self
    }
}

impl<'a> Relabeled<'a> {
    /// Picks by priority (see [`Transitions::prioritized`]).
    pub fn prioritized(mut self, beta: f64) -> Relabeled<'a> {
        self.0.pick = Pick::Priority { beta };
        self
    }

    /// Discounts each one-step transition's bootstrap by `gamma`: its `discounts`
    /// entry, 0 at an episode's terminal step (n-step returns are not relabeled; see
    /// [`Transitions::relabel`]).
    pub fn gamma(mut self, gamma: f64) -> Relabeled<'a> {
        self.0.gamma = gamma;
        self
    }
}

impl<'a> TransitionsAt<'a> {
    /// See [`Transitions::nstep`].
    pub fn nstep(mut self, nstep: u64, gamma: f64) -> TransitionsAt<'a> {
        self.0.nstep = nstep;
        self.0.gamma = gamma;
        self
    }

    /// See [`Transitions::stack`].
    pub fn stack(mut self, k: u64) -> TransitionsAt<'a> {
        self.0.stack = k;
        self
    }

    /// See [`Transitions::window`].
    pub fn window(mut self) -> TransitionsAt<'a> {
        self.0.window = true;
        self
    }
}

impl<'a> Sequences<'a> {
    /// Adds `burn_in` steps before the trained part, to warm up a recurrent state.
    pub fn burn_in(mut self, burn_in: u64) -> Sequences<'a> {
        self.0.burn_in = burn_in;
        self
    }

    /// Picks by priority, each sequence weighing as its first trained step's row.
    pub fn prioritized(mut self, beta: f64) -> Sequences<'a> {
        self.0.pick = Pick::Priority { beta };
        self
    }
}

impl<'a> Episodes<'a> {
    /// Picks by priority, each episode weighing as the mean leaf of its step rows.
    pub fn prioritized(mut self, beta: f64) -> Request<'a> {
        self.0.pick = Pick::Priority { beta };
        self.0
    }

    /// Distinct episodes (`n` must not exceed the whole episodes stored).
    pub fn without_replacement(self) -> UniformEpisodes<'a> {
        UniformEpisodes(self.0).without_replacement()
    }

    /// Removes every episode returned, whole, in the same call. Needs a buffer with
    /// item states ([`crate::Config::item_states`]).
    pub fn remove(self) -> UniformEpisodes<'a> {
        UniformEpisodes(self.0).remove()
    }
}

impl<'a> UniformEpisodes<'a> {
    /// See [`Episodes::without_replacement`].
    pub fn without_replacement(mut self) -> UniformEpisodes<'a> {
        self.0.replace = false;
        self
    }

    /// See [`Episodes::remove`].
    pub fn remove(mut self) -> UniformEpisodes<'a> {
        self.0.remove = true;
        self.0.replace = false;
        self
    }
}

impl<'a> Fragments<'a> {
    /// Distinct fragments (`n` must not exceed the whole fragments stored).
    pub fn without_replacement(self) -> UniformFragments<'a> {
        UniformFragments(self.0).without_replacement()
    }

    /// Removes every fragment returned, whole, in the same call (UnstableBaselines'
    /// `EpisodeBuffer.get_batch`). Needs a buffer with item states.
    pub fn remove(self) -> UniformFragments<'a> {
        UniformFragments(self.0).remove()
    }

    /// Picks by priority, each fragment weighing as the mean leaf of its rows.
    pub fn prioritized(mut self, beta: f64) -> Request<'a> {
        self.0.pick = Pick::Priority { beta };
        self.0
    }
}

impl<'a> UniformFragments<'a> {
    /// See [`Fragments::without_replacement`].
    pub fn without_replacement(mut self) -> UniformFragments<'a> {
        self.0.replace = false;
        self
    }

    /// See [`Fragments::remove`].
    pub fn remove(mut self) -> UniformFragments<'a> {
        self.0.remove = true;
        self.0.replace = false;
        self
    }
}

impl<'a> Covering<'a> {
    /// Removes each unit as it is returned (see [`Fragments::remove`],
    /// [`Episodes::remove`]).
    pub fn remove(mut self) -> Request<'a> {
        self.0.remove = true;
        self.0
    }
}

impl<'a> Groups<'a> {
    /// Groups: a window of `len` consecutive items of each group drawn (in the order
    /// they were added), starting uniformly at random, from the groups with at least
    /// `len` items (DI-engine's `unroll_len`).
    pub fn unroll(mut self, len: u64) -> Groups<'a> {
        self.0.unroll = len;
        self
    }

    /// Distinct groups (`n` must not exceed the groups there are).
    pub fn without_replacement(mut self) -> Groups<'a> {
        self.0.replace = false;
        self
    }

    /// Removes every item returned, in the same call (DI-engine's
    /// `sample(groupby=, ...)` of a buffer that pops what it returns).
    pub fn remove(mut self) -> Groups<'a> {
        self.0.remove = true;
        self.0.replace = false;
        self
    }
}
