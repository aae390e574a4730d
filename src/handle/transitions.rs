//! Transitions drawn from an episodic buffer: `(obs, action, reward, next_obs, done)`
//! read from consecutive rows of one episode, with n-step returns. Each observation is
//! stored once (see `docs/design/episodes.md`): `obs` comes from the row before the
//! step, `next_obs` from the row the step (or the n-th step) led to.

use rand::RngExt;

use super::{ReplayBuffer, Role};
use crate::algo::windows::End;
use crate::batch::Batch;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::row::EPISODE_OFF;
use crate::parts::priorities::PrioritySpec;
use crate::schema::Schema;
use crate::storage::map::RowRun;

/// How to draw transitions.
///
/// ```
/// use replaystore::TransitionSpec;
/// let spec = TransitionSpec::new(256, &["obs"]).nstep(3, 0.99);
/// assert_eq!(spec.nstep, 3);
/// ```
#[derive(Clone, Debug)]
pub struct TransitionSpec<'a> {
    /// Transitions to draw (uniformly, with replacement).
    pub n: usize,
    /// The observation fields: read as `obs` from the row before the step and as
    /// `next_obs` from the row it led to. Every other field is read from the step's row.
    pub obs_fields: &'a [&'a str],
    /// Steps per transition: rewards are summed over up to `nstep` steps, cut at the
    /// episode's end (1: plain transitions).
    pub nstep: u64,
    /// Discount of the n-step sum and of the bootstrap.
    pub gamma: f64,
    /// Frames per observation (1: no stacking). With `k > 1` each observation field of
    /// `obs` and `next_obs` holds the `k` newest observations up to its row, oldest
    /// first, shaped `[k, ...]`; before the episode's reset row its first frame repeats
    /// (Tianshou's `stack_num`, DQN's frame stack built at sample time).
    pub stack: u64,
    /// Draw by priority with importance-sampling exponent `beta` (a prioritized
    /// buffer): each transition's priority is the leaf of the row ending its first
    /// step, as [`Transitions::indices`] names it. Reset rows and steps whose
    /// observation row was evicted have none.
    pub beta: Option<f64>,
    /// Whether to return one window of `stack + nstep` frames per transition (see
    /// [`Transitions::frames`]) instead of separate `obs` and `next_obs` stacks. The
    /// two stacks overlap in all but `nstep` frames, so the window copies
    /// `(k + n) / 2k` of the bytes: what a frame-stacking DQN needs, as views.
    pub window: bool,
}

impl<'a> TransitionSpec<'a> {
    /// `n` one-step transitions.
    pub fn new(n: usize, obs_fields: &'a [&'a str]) -> TransitionSpec<'a> {
        TransitionSpec {
            n,
            obs_fields,
            nstep: 1,
            gamma: 1.0,
            stack: 1,
            window: false,
            beta: None,
        }
    }

    /// Draws by priority (see [`TransitionSpec::beta`]).
    pub fn prioritized(mut self, beta: f64) -> TransitionSpec<'a> {
        self.beta = Some(beta);
        self
    }

    /// Stacks the `k` newest observations into each `obs` and `next_obs`.
    pub fn stack(mut self, k: u64) -> TransitionSpec<'a> {
        self.stack = k;
        self
    }

    /// Returns each transition's frames as one window (see [`Transitions::frames`]).
    pub fn window(mut self) -> TransitionSpec<'a> {
        self.window = true;
        self
    }

    /// Sums rewards over `nstep` steps with discount `gamma`.
    pub fn nstep(mut self, nstep: u64, gamma: f64) -> TransitionSpec<'a> {
        self.nstep = nstep;
        self.gamma = gamma;
        self
    }
}

/// A batch of transitions. `obs()` holds the observation fields before the step,
/// `step()` every other field of the step's row (the action, its reward, ...), and
/// `next_obs()` the observation fields of the row to bootstrap from. `step()` has the
/// buffer's schema; `obs()` and `next_obs()` too, except that a stacked observation
/// field gains a leading dimension of `k`. Fields a batch does not carry are left zero.
#[derive(Clone, Debug)]
pub struct Transitions {
    /// The frames per observation and the window's extra frames (`nstep`, in window
    /// mode) the obs batches were shaped for.
    shape: (u64, Option<u64>),
    /// Which fields are observations, for the batches as shaped.
    obs_mask: Vec<bool>,
    indices: Vec<u64>,
    obs: Batch,
    step: Batch,
    next_obs: Batch,
    frames: Batch,
    next_offsets: Vec<u32>,
    weights: Vec<f32>,
    returns: Vec<f64>,
    discounts: Vec<f64>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
}

impl Transitions {
    /// An empty batch for `schema`, to be filled by `sample_transitions_into`.
    pub fn new(schema: &Schema) -> Transitions {
        Transitions {
            shape: (1, None),
            obs_mask: Vec::new(),
            indices: Vec::new(),
            obs: Batch::new(schema, 0),
            step: Batch::new(schema, 0),
            next_obs: Batch::new(schema, 0),
            frames: Batch::new(schema, 0),
            next_offsets: Vec::new(),
            weights: Vec::new(),
            returns: Vec::new(),
            discounts: Vec::new(),
            terminated: Vec::new(),
            truncated: Vec::new(),
        }
    }

    /// The logical index of each transition's first step row (what priorities key on).
    pub fn indices(&self) -> &[u64] {
        &self.indices
    }

    /// Observation fields before the step.
    pub fn obs(&self) -> &Batch {
        &self.obs
    }

    /// The step's row: action, one-step reward and every other non-observation field.
    pub fn step(&self) -> &Batch {
        &self.step
    }

    /// Observation fields of the row to bootstrap from (after the last summed step).
    pub fn next_obs(&self) -> &Batch {
        &self.next_obs
    }

    /// Window mode ([`TransitionSpec::window`]): the observation fields of rows
    /// `j - k ..= j - 1 + nstep` of each transition, clamped into its episode, shaped
    /// `[k + nstep, ...]`. `obs` is frames `0..k`; `next_obs` is frames
    /// `next_offsets()[i] .. next_offsets()[i] + k`. Empty otherwise.
    pub fn frames(&self) -> &Batch {
        &self.frames
    }

    /// Window mode: where each transition's `next_obs` begins in its window, the
    /// number of steps it took (`nstep`, fewer where the episode ended first).
    pub fn next_offsets(&self) -> &[u32] {
        &self.next_offsets
    }

    /// Importance weights of a prioritized draw (`(P(i) / P_min)^-beta`, as
    /// [`crate::Batch::weights`]); empty for a uniform one.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Discounted sum of the `reward` field over the steps taken (the one-step reward
    /// when `nstep` is 1; 0 without a `reward` field).
    pub fn returns(&self) -> &[f64] {
        &self.returns
    }

    /// Factor of the bootstrap value: `gamma^k` for `k` steps summed, 0 when the episode
    /// terminated there.
    pub fn discounts(&self) -> &[f64] {
        &self.discounts
    }

    /// Whether the episode terminated at the bootstrap row.
    pub fn terminated(&self) -> &[bool] {
        &self.terminated
    }

    /// Whether the episode was truncated (or abandoned) at the bootstrap row.
    pub fn truncated(&self) -> &[bool] {
        &self.truncated
    }

    /// Transitions in the batch.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

/// `schema` with a leading dimension of `k` on the fields marked in `stacked` (itself
/// when `k` is 1).
pub(super) fn stacked_schema(schema: &Schema, stacked: &[bool], k: u64) -> Result<Schema> {
    if k == 1 {
        return Ok(schema.clone());
    }
    with_leading(schema, stacked, k)
}

/// `schema` with a leading dimension of `k` on the fields marked in `marked`.
pub(super) fn with_leading(schema: &Schema, marked: &[bool], k: u64) -> Result<Schema> {
    let k = usize::try_from(k)
        .map_err(|_| Error::InvalidSample(format!("{k} positions per item are too many")))?;
    Schema::new(
        schema
            .fields()
            .iter()
            .zip(marked)
            .map(|(f, &s)| {
                let mut shape = f.shape().to_vec();
                if s {
                    shape.insert(0, k);
                }
                (f.name().to_owned(), f.dtype(), shape)
            })
            .collect(),
    )
}

/// Draws per transition before giving up on finding step rows (rows after a reset row).
const TRIES_PER_DRAW: usize = 64;

/// How many transitions ahead their rows are fetched.
const TRANSITIONS_AHEAD: usize = 16;

/// The reward of row `r` (a field of `dtype` at `off`, `len` bytes), as f64: the
/// general path for reward types other than f32, which is read down the run directly.
#[inline(always)]
fn reward_of(run: &RowRun<'_>, r: u64, off: usize, len: usize, dtype: DType) -> f64 {
    let mut b = [0u8; 8];
    run.read(r, off, b.get_mut(..len).unwrap_or(&mut []));
    dtype.decode_f64(&b)
}

/// Position of frame `f` of item `i` among items of `frames` frames each.
#[inline(always)]
fn at(i: usize, frames: u64, f: u64) -> usize {
    i * frames as usize + f as usize
}

impl<R: Role> ReplayBuffer<R> {
    /// Draws `spec.n` transitions uniformly over the steps of live episodes.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema, TransitionSpec};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .field("obs", DType::F32, &[])
    ///     .field("reward", DType::F32, &[])
    ///     .build()?;
    /// let config = Config::new(schema, 100).episodic().seed(1);
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// buf.add_reset(&[Column::scalar("obs", &0.0f32)])?;
    /// for t in 1..=5 {
    ///     let (obs, r) = (t as f32, 1.0f32);
    ///     buf.add_step(&[Column::scalar("obs", &obs), Column::scalar("reward", &r)], t == 5, false)?;
    /// }
    /// let t = buf.sample_transitions(&TransitionSpec::new(8, &["obs"]).nstep(2, 0.5))?;
    /// for i in 0..8 {
    ///     let (o, next) = (t.obs().get::<f32>("obs")?[i], t.next_obs().get::<f32>("obs")?[i]);
    ///     // obs t leads to t + 2, or to the terminal obs 5.
    ///     assert_eq!(next, (o + 2.0).min(5.0));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_transitions(&mut self, spec: &TransitionSpec<'_>) -> Result<Transitions> {
        let mut out = Transitions::new(&self.rows.schema);
        self.sample_transitions_into(spec, &mut out)?;
        Ok(out)
    }

    /// `sample_transitions` into a reused batch.
    pub fn sample_transitions_into(
        &mut self,
        spec: &TransitionSpec<'_>,
        out: &mut Transitions,
    ) -> Result<()> {
        self.episodes_ref()?;
        if spec.nstep == 0 {
            return Err(Error::InvalidSample("nstep must be at least 1".into()));
        }
        if spec.stack == 0 {
            return Err(Error::InvalidSample("stack must be at least 1".into()));
        }
        let is_obs = self.field_mask(spec.obs_fields)?;
        let shape = (spec.stack, spec.window.then_some(spec.nstep));
        if out.shape != shape || out.obs_mask != is_obs || !out.step.fits(&self.rows.schema) {
            // Fresh batches: the fields each leaves out start zero and stay so, since
            // no gather writes them while the shape and the mask stay the same.
            *out = Transitions::new(&self.rows.schema);
            out.shape = shape;
            out.obs_mask.clone_from(&is_obs);
            if spec.window {
                let frames = spec.stack.checked_add(spec.nstep).ok_or_else(|| {
                    Error::InvalidSample("stack + nstep frames are too many".into())
                })?;
                out.frames = Batch::new(&stacked_schema(&self.rows.schema, &is_obs, frames)?, 0);
            } else {
                let stacked = stacked_schema(&self.rows.schema, &is_obs, spec.stack)?;
                out.obs = Batch::new(&stacked, 0);
                out.next_obs = Batch::new(&stacked, 0);
            }
        }
        if self.rows.tail - self.rows.head < 2 {
            return Err(Error::Empty);
        }
        let n = spec.n;
        out.indices.clear();
        out.weights.clear();
        out.returns.clear();
        out.discounts.clear();
        out.terminated.clear();
        out.truncated.clear();
        out.next_offsets.clear();
        out.step.try_resize(n)?;
        let (obs_rows, frame_rows) = if spec.window { (0, n) } else { (n, 0) };
        out.obs.try_resize(obs_rows)?;
        out.next_obs.try_resize(obs_rows)?;
        out.frames.try_resize(frame_rows)?;
        let mut drawn_weights = Vec::new();
        let mut tries = 0usize;
        let mut candidates = Vec::with_capacity(n);
        while out.indices.len() < n {
            let need = n - out.indices.len();
            tries += need;
            if tries > TRIES_PER_DRAW * n.max(1) {
                return Err(Error::InvalidSample(format!(
                    "no step with {} stored frames found in {} draws: the live rows are \
                     (nearly) all reset rows or too early in partly evicted episodes",
                    spec.stack,
                    tries - need
                )));
            }
            candidates.clear();
            if let Some(beta) = spec.beta {
                candidates.resize(need, 0);
                drawn_weights.clear();
                drawn_weights.resize(need, 0.0);
                let p = PrioritySpec::new(need, beta);
                self.draw_prioritized(&p, &mut candidates, &mut drawn_weights)?;
            } else {
                candidates.extend((0..need).map(|_| {
                    self.rows
                        .draws
                        .rng
                        .random_range(self.rows.head + 1..self.rows.tail)
                }));
            }
            self.read_transitions(spec, &is_obs, &candidates, &drawn_weights, out)?;
        }
        if spec.beta.is_none() {
            self.rows.draws.sampled += n as u64;
        }
        for batch in [
            &mut out.step,
            &mut out.obs,
            &mut out.next_obs,
            &mut out.frames,
        ] {
            let (idx, _) = batch.parts_mut();
            if !idx.is_empty() {
                idx.copy_from_slice(&out.indices);
            }
        }
        Ok(())
    }

    /// Reads the transitions of the drawn step rows `candidates` into `out`, after the
    /// ones it holds, passing over rows that end no step with its frames stored (reset
    /// rows, steps too early in a partly evicted episode). One pass per round: each
    /// transition's rows are fetched a few transitions ahead, then its episode is
    /// looked up from the step header, and its frames, step fields and rewards are
    /// copied while in cache, every row checked against its stamp.
    fn read_transitions(
        &self,
        spec: &TransitionSpec<'_>,
        is_obs: &[bool],
        candidates: &[u64],
        drawn_weights: &[f32],
        out: &mut Transitions,
    ) -> Result<()> {
        let (head, tail, k, nstep) = (self.rows.head, self.rows.tail, spec.stack, spec.nstep);
        let rows = self.rows.ring.reader(self.rows.live_rows());
        let table = self.episodes_ref()?;
        let layout = self.rows.ring.layout();
        let reward = table.reward_field().and_then(|(f, dtype)| {
            let &(off, len) = layout.fields.get(f)?;
            Some((off, len.min(8), dtype))
        });
        let fields = |obs: bool| -> Vec<(usize, usize, usize)> {
            (layout.fields.iter().zip(is_obs).enumerate())
                .filter(|&(_, (_, &is))| is == obs)
                .map(|(f, (&(off, len), _))| (off, len, f))
                .collect()
        };
        let (obs_fields, step_fields) = (fields(true), fields(false));
        let (_, mut step_outs) = out.step.parts_mut();
        let (_, mut obs_outs) = out.obs.parts_mut();
        let (_, mut next_outs) = out.next_obs.parts_mut();
        let (_, mut frame_outs) = out.frames.parts_mut();
        // Every row a transition from step row j may read: its first frame to its
        // n-th step, within the live rows. A reset row or the head row can be drawn by
        // priority only if a caller gave it one; it is passed over below.
        let runs: Vec<(u64, RowRun<'_>)> = candidates
            .iter()
            .map(|&j| {
                let j = j.max(head + 1);
                let from = (j - 1).saturating_sub(k - 1).max(head);
                (j, rows.run(from, (j + nstep - 1).min(tail - 1) - from + 1))
            })
            .collect();
        let prefetch = |(_, run): &(u64, RowRun<'_>)| run.prefetch();
        for run in runs.iter().take(TRANSITIONS_AHEAD) {
            prefetch(run);
        }
        for (c, &(j, run)) in runs.iter().enumerate() {
            if let Some(ahead) = runs.get(c + TRANSITIONS_AHEAD) {
                prefetch(ahead);
            }
            let i = out.indices.len();
            // The step header names the episode in O(1); the table decides, so a
            // header read without the stamps' protection can only cost a search.
            let hint = u64::from_le_bytes(run.read_le(j, EPISODE_OFF));
            let e = table.of_hinted(j, hint).ok_or_else(|| {
                Error::EpisodeOrder(format!("index {j} belongs to no episode in the table"))
            })?;
            let span = e.span(head);
            // A step row whose observation row and its frames are stored.
            if j <= span.first || !span.stacks(j - 1, k) {
                continue;
            }
            let t = span.nstep(j, nstep, spec.gamma).ok_or_else(|| {
                Error::EpisodeOrder(format!("index {j} does not end a step of episode {}", e.id))
            })?;
            let g = run.checked(|run| {
                if spec.window {
                    // Rows j - k ..= j - 1 + nstep, clamped into the episode: obs is
                    // the first k, next_obs the k from the steps taken.
                    let frames = k + nstep;
                    for f in 0..frames {
                        let r = (j - 1 + nstep)
                            .saturating_sub(frames - 1 - f)
                            .clamp(span.start, span.last);
                        run.copy(r, &obs_fields, &mut frame_outs, at(i, frames, f));
                    }
                } else if k == 1 {
                    // No stacking: the two rows themselves, without the clamping
                    // arithmetic per frame.
                    run.copy(j - 1, &obs_fields, &mut obs_outs, i);
                    run.copy(t.bootstrap, &obs_fields, &mut next_outs, i);
                } else {
                    // The k newest frames up to each row, the reset row's repeated
                    // before it.
                    for f in 0..k {
                        let r = (j - 1).saturating_sub(k - 1 - f).max(span.start);
                        run.copy(r, &obs_fields, &mut obs_outs, at(i, k, f));
                        let r = t.bootstrap.saturating_sub(k - 1 - f).max(span.start);
                        run.copy(r, &obs_fields, &mut next_outs, at(i, k, f));
                    }
                }
                run.copy(j, &step_fields, &mut step_outs, i);
                let mut g = 0.0;
                if let Some((off, len, dtype)) = reward {
                    let mut w = 1.0;
                    if dtype == DType::F32 {
                        run.read_each(t.rewards.clone(), off, |b: [u8; 4]| {
                            g += w * f64::from(f32::from_le_bytes(b));
                            w *= spec.gamma;
                        });
                    } else {
                        for r in t.rewards.clone() {
                            g += w * reward_of(run, r, off, len, dtype);
                            w *= spec.gamma;
                        }
                    }
                }
                g
            });
            let g = g.map_err(|(index, found)| self.rows.row_error(index, found))?;
            out.indices.push(j);
            if let Some(&w) = drawn_weights.get(c) {
                out.weights.push(w);
            }
            out.returns.push(g);
            out.discounts.push(t.discount);
            out.terminated.push(t.terminated);
            out.truncated
                .push(t.bootstrap == span.last && span.end == Some(End::Truncated));
            if spec.window {
                let steps = t.rewards.end - t.rewards.start;
                out.next_offsets
                    .push(u32::try_from(steps).unwrap_or(u32::MAX));
            }
        }
        Ok(())
    }

    /// Which schema fields `names` are, as a mask in schema order.
    pub(crate) fn field_mask(&self, names: &[&str]) -> Result<Vec<bool>> {
        let mut mask = vec![false; self.rows.schema.len()];
        for name in names {
            let f = self
                .rows
                .schema
                .position(name)
                .ok_or_else(|| Error::UnknownField {
                    field: (*name).to_owned(),
                    known: self.rows.schema.names(),
                })?;
            if let Some(x) = mask.get_mut(f) {
                *x = true;
            }
        }
        Ok(mask)
    }
}
