//! Samplers of units longer than one transition: sequences of steps with burn-in
//! (R2D2, RLlib's `replay_sequence_length` / `replay_burn_in`) and whole episodes
//! (RLlib's `StorageUnit.EPISODES`). Both read the rows of one episode, never crossing
//! into another. See `docs/design/episodes.md` for the row model.

use std::ops::Range;

use rand::RngExt;

use super::transitions::with_leading;
use super::{ReplayBuffer, Role};
use crate::algo::windows::{End, Span};
use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::parts::episodes::EpisodeInfo;
use crate::parts::fragments::{Fragment, Fragments};
use crate::parts::priorities::PrioritySpec;
use crate::schema::Schema;

/// How to draw sequences.
///
/// ```
/// use replaystore::SequenceSpec;
/// let spec = SequenceSpec::new(16, 80, &["obs"]).burn_in(40);
/// assert_eq!((spec.len, spec.burn_in), (80, 40));
/// ```
#[derive(Clone, Debug)]
pub struct SequenceSpec<'a> {
    /// Sequences to draw (uniformly over their first trained step, with replacement).
    pub n: usize,
    /// Trained steps per sequence.
    pub len: u64,
    /// Steps before the trained part, to warm up a recurrent state.
    pub burn_in: u64,
    /// The observation fields (see [`crate::TransitionSpec::obs_fields`]).
    pub obs_fields: &'a [&'a str],
    /// Draw by priority with importance-sampling exponent `beta` (a prioritized
    /// buffer): a sequence's priority is the leaf of its first trained step's row, as
    /// [`Sequences::indices`] names it (R2D2 sets it from the sequence's TD errors).
    pub beta: Option<f64>,
}

impl<'a> SequenceSpec<'a> {
    /// `n` sequences of `len` steps without burn-in.
    pub fn new(n: usize, len: u64, obs_fields: &'a [&'a str]) -> SequenceSpec<'a> {
        SequenceSpec {
            n,
            len,
            burn_in: 0,
            obs_fields,
            beta: None,
        }
    }

    /// Draws by priority (see [`SequenceSpec::beta`]).
    pub fn prioritized(mut self, beta: f64) -> SequenceSpec<'a> {
        self.beta = Some(beta);
        self
    }

    /// Adds `burn_in` steps before the trained part.
    pub fn burn_in(mut self, burn_in: u64) -> SequenceSpec<'a> {
        self.burn_in = burn_in;
        self
    }
}

/// A batch of sequences. Position `p` of a sequence is one transition, as
/// [`crate::Transitions`] has it: `obs()` from the row before the step, `step()` the
/// step's row, `next_obs()` the row it led to. Every field gains a leading dimension
/// of `burn_in + len` positions; positions before the episode's first step or after its
/// last row are zeros with `mask` false.
#[derive(Clone, Debug)]
pub struct Sequences {
    /// Positions per sequence and the observation mask the batches were shaped for.
    shape: (u64, Vec<bool>),
    /// The buffer schema the batches were made from.
    made_for: Schema,
    indices: Vec<u64>,
    weights: Vec<f32>,
    obs: Batch,
    step: Batch,
    next_obs: Batch,
    mask: Vec<bool>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
}

impl Sequences {
    /// An empty batch for `schema`, to be filled by `sample_sequences_into`.
    pub fn new(schema: &Schema) -> Sequences {
        Sequences {
            shape: (0, Vec::new()),
            made_for: schema.clone(),
            indices: Vec::new(),
            weights: Vec::new(),
            obs: Batch::new(schema, 0),
            step: Batch::new(schema, 0),
            next_obs: Batch::new(schema, 0),
            mask: Vec::new(),
            terminated: Vec::new(),
            truncated: Vec::new(),
        }
    }

    /// The step row of each sequence's first trained position (what its priority keys
    /// on).
    pub fn indices(&self) -> &[u64] {
        &self.indices
    }

    /// Importance weights of a prioritized draw, one per sequence; empty for a uniform
    /// one.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Observation fields before each step, `[n, burn_in + len, ...]`.
    pub fn obs(&self) -> &Batch {
        &self.obs
    }

    /// Every other field of each step's row, `[n, burn_in + len, ...]`.
    pub fn step(&self) -> &Batch {
        &self.step
    }

    /// Observation fields after each step, `[n, burn_in + len, ...]`.
    pub fn next_obs(&self) -> &Batch {
        &self.next_obs
    }

    /// Whether each position (`n * (burn_in + len)`, sequence-major) holds a step.
    pub fn mask(&self) -> &[bool] {
        &self.mask
    }

    /// Whether the episode terminated at each position's step.
    pub fn terminated(&self) -> &[bool] {
        &self.terminated
    }

    /// Whether the episode was truncated (or abandoned) at each position's step.
    pub fn truncated(&self) -> &[bool] {
        &self.truncated
    }

    /// Sequences in the batch.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

/// How to draw whole units: episodes ([`ReplayBuffer::sample_episodes_into`]) or
/// fragments ([`ReplayBuffer::sample_fragments_into`]).
///
/// ```
/// use replaystore::UnitSpec;
/// let spec = UnitSpec::new(4).prioritized(0.4);
/// assert_eq!((spec.n, spec.beta), (4, Some(0.4)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UnitSpec {
    /// Units to draw (whole ones only, with replacement).
    pub n: usize,
    /// Draw by priority with importance-sampling exponent `beta` (a prioritized
    /// buffer). A unit's priority is the mean leaf, `(p + eps)^alpha`, of its rows
    /// (an episode's step rows: its reset row ends no transition), so it follows the
    /// per-row priorities `update_priorities` sets (for instance the TD errors of the
    /// steps trained on), a new unit starts at the buffer's max priority, and equal
    /// priorities draw uniformly over units, as `None` does. Weights are
    /// `(P_min / P)^beta`, `P_min` being the smallest non-zero probability of any whole
    /// unit, so the largest possible weight is 1.
    pub beta: Option<f64>,
}

impl UnitSpec {
    /// `n` units, uniformly.
    pub fn new(n: usize) -> UnitSpec {
        UnitSpec { n, beta: None }
    }

    /// Draws by priority (see [`UnitSpec::beta`]).
    pub fn prioritized(mut self, beta: f64) -> UnitSpec {
        self.beta = Some(beta);
        self
    }
}

/// Whole fragments (the rows of one `add` / `add_batch` call each), their rows
/// concatenated: fragment `i` is rows `offsets()[i] .. offsets()[i + 1]` of `rows()`.
#[derive(Clone, Debug)]
pub struct FragmentBatch {
    rows: Batch,
    offsets: Vec<usize>,
    fragments: Vec<Range<u64>>,
    weights: Vec<f32>,
}

impl FragmentBatch {
    /// An empty batch for `schema`.
    pub fn new(schema: &Schema) -> FragmentBatch {
        FragmentBatch {
            rows: Batch::new(schema, 0),
            offsets: vec![0],
            fragments: Vec::new(),
            weights: Vec::new(),
        }
    }

    /// Every row of the fragments, in order; `indices()` are their logical indices.
    pub fn rows(&self) -> &Batch {
        &self.rows
    }

    /// Where each fragment begins in `rows()`, and one past the last (len + 1 entries).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// The logical indices of each fragment, as its `add_batch` returned them.
    pub fn fragments(&self) -> &[Range<u64>] {
        &self.fragments
    }

    /// Importance weights, one per fragment (empty when drawn uniformly).
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Fragments in the batch.
    pub fn len(&self) -> usize {
        self.fragments.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }
}

/// Whole episodes, their rows concatenated: episode `i` is rows
/// `offsets()[i] .. offsets()[i + 1]` of `rows()`, its reset row first (whose step
/// fields are zero), `steps + 1` rows in all.
#[derive(Clone, Debug)]
pub struct EpisodeBatch {
    rows: Batch,
    offsets: Vec<usize>,
    episodes: Vec<EpisodeInfo>,
    weights: Vec<f32>,
}

impl EpisodeBatch {
    /// An empty batch for `schema`.
    pub fn new(schema: &Schema) -> EpisodeBatch {
        EpisodeBatch {
            rows: Batch::new(schema, 0),
            offsets: vec![0],
            episodes: Vec::new(),
            weights: Vec::new(),
        }
    }

    /// Every row of the episodes, in order; `indices()` are their logical indices.
    pub fn rows(&self) -> &Batch {
        &self.rows
    }

    /// Where each episode begins in `rows()`, and one past the last (len + 1 entries).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// The episodes, as the table records them.
    pub fn episodes(&self) -> &[EpisodeInfo] {
        &self.episodes
    }

    /// Importance weights, one per episode (empty when drawn uniformly).
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Episodes in the batch.
    pub fn len(&self) -> usize {
        self.episodes.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.episodes.is_empty()
    }
}

/// Draws per unit before giving up.
const TRIES_PER_DRAW: usize = 64;

/// The steps of an episode as a span of step rows: step row `p` is usable when row
/// `p - 1` is stored too (the span is empty when the episode has no such step).
fn step_span(rows: Span) -> Span {
    Span {
        start: rows.start + 1,
        first: rows.first + 1,
        last: rows.last,
        end: rows.end,
    }
}

impl<R: Role> ReplayBuffer<R> {
    /// Gathers the fields marked in `which` of the rows `rows` into `batch`, whose
    /// indices become `indices`. The others are not written: they stay as they were,
    /// zero in a batch that only ever gathered with this `which`. A field of `k`
    /// stacked frames takes `k` consecutive entries of `rows` per item.
    pub(crate) fn gather_some(
        &self,
        indices: &[u64],
        rows: &[u64],
        which: &[bool],
        batch: &mut Batch,
    ) -> Result<()> {
        batch.try_resize(indices.len())?;
        let (idx, mut outs) = batch.parts_mut();
        idx.clear();
        idx.extend_from_slice(indices);
        for (out, &keep) in outs.iter_mut().zip(which) {
            if !keep {
                *out = &mut [];
            }
        }
        self.rows
            .ring
            .gather(self.rows.live_rows(), rows, &mut outs)
            .map_err(|m| self.rows.stamp_error(rows, m))
    }

    /// Draws `spec.n` sequences of `burn_in + len` steps of one episode each, uniformly
    /// over their first trained step. A sequence is drawn only if every burn-in step
    /// that exists in its episode is still stored; positions before the episode's first
    /// step or past its last are padding (`mask` false).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema, SequenceSpec};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("obs", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// buf.add_reset(&[Column::scalar("obs", &0.0f32)])?;
    /// for t in 1..=10 {
    ///     buf.add_step(&[Column::scalar("obs", &(t as f32))], t == 10, false)?;
    /// }
    /// let s = buf.sample_sequences(&SequenceSpec::new(4, 3, &["obs"]).burn_in(2))?;
    /// let (obs, mask) = (s.obs().get::<f32>("obs")?, s.mask());
    /// for i in 0..4 {
    ///     for p in 0..5 {
    ///         // Position p of a sequence starting at step row j is step row j - 2 + p.
    ///         let row = s.indices()[i] as i64 - 2 + p as i64;
    ///         assert_eq!(mask[i * 5 + p], (1..=10).contains(&row));
    ///         if mask[i * 5 + p] {
    ///             assert_eq!(obs[i * 5 + p], (row - 1) as f32);
    ///         }
    ///     }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_sequences(&mut self, spec: &SequenceSpec<'_>) -> Result<Sequences> {
        let mut out = Sequences::new(&self.rows.schema);
        self.sample_sequences_into(spec, &mut out)?;
        Ok(out)
    }

    /// `sample_sequences` into a reused batch.
    pub fn sample_sequences_into(
        &mut self,
        spec: &SequenceSpec<'_>,
        out: &mut Sequences,
    ) -> Result<()> {
        self.episodes_ref()?;
        if spec.len == 0 {
            return Err(Error::InvalidSample("len must be at least 1".into()));
        }
        let is_obs = self.field_mask(spec.obs_fields)?;
        let width = spec
            .burn_in
            .checked_add(spec.len)
            .ok_or_else(|| Error::InvalidSample("burn_in + len is too large".into()))?;
        let positions = usize::try_from(width)
            .map_err(|_| Error::InvalidSample("burn_in + len is too large".into()))?;
        if out.shape.0 != width || out.shape.1 != is_obs || out.made_for != self.rows.schema {
            // Fresh batches: the fields each leaves out start zero and stay so.
            let all = vec![true; self.rows.schema.len()];
            let shaped = with_leading(&self.rows.schema, &all, width)?;
            *out = Sequences::new(&self.rows.schema);
            out.shape = (width, is_obs.clone());
            out.obs = Batch::new(&shaped, 0);
            out.step = Batch::new(&shaped, 0);
            out.next_obs = Batch::new(&shaped, 0);
        }
        if self.rows.tail - self.rows.head < 2 {
            return Err(Error::Empty);
        }
        out.indices.clear();
        out.weights.clear();
        out.mask.clear();
        out.terminated.clear();
        out.truncated.clear();
        crate::batch::check_rows(
            spec.n,
            positions.saturating_mul(self.rows.schema.item_bytes().saturating_add(8)),
        )?;
        let mut rows = Vec::with_capacity(spec.n.saturating_mul(positions));
        let mut tries = 0usize;
        while out.indices.len() < spec.n {
            tries += 1;
            if tries > TRIES_PER_DRAW * spec.n.max(1) {
                return Err(Error::InvalidSample(format!(
                    "no sequence with its burn-in stored found in {} draws",
                    tries - 1
                )));
            }
            let (j, weight) = match spec.beta {
                Some(beta) => {
                    let (mut j, mut w) = ([0u64], [0.0f32]);
                    self.draw_prioritized(&PrioritySpec::new(1, beta), &mut j, &mut w)?;
                    (j[0], Some(w[0]))
                }
                None => (
                    self.rows
                        .draws
                        .rng
                        .random_range(self.rows.head + 1..self.rows.tail),
                    None,
                ),
            };
            let table = self.episodes_ref()?;
            let e = table.of(j).ok_or_else(|| {
                Error::EpisodeOrder(format!("index {j} belongs to no episode in the table"))
            })?;
            let steps = step_span(e.span(self.rows.head));
            if j < steps.first {
                continue;
            }
            let Some(seq) = steps.sequence(j, spec.burn_in, spec.len) else {
                continue;
            };
            out.indices.push(j);
            out.weights.extend(weight);
            for p in seq {
                // Padding gathers the first trained step (stored) and is zeroed below.
                rows.push(p.unwrap_or(j));
                out.mask.push(p.is_some());
                let at_end = p == Some(steps.last);
                out.terminated
                    .push(at_end && steps.end == Some(End::Terminated));
                out.truncated
                    .push(at_end && steps.end == Some(End::Truncated));
            }
        }
        if spec.beta.is_none() {
            self.rows.draws.sampled += out.indices.len() as u64;
        }
        let prev: Vec<u64> = rows.iter().map(|r| r - 1).collect();
        let step_fields: Vec<bool> = is_obs.iter().map(|x| !x).collect();
        for (batch, rows, which) in [
            (&mut out.obs, &prev, &is_obs),
            (&mut out.step, &rows, &step_fields),
            (&mut out.next_obs, &rows, &is_obs),
        ] {
            self.gather_some(&out.indices, rows, which, batch)?;
            zero_padding(batch, &out.mask, which);
        }
        Ok(())
    }

    /// Draws `n` complete episodes (ended, every row stored) uniformly, with
    /// replacement.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("obs", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// for len in [3, 5] {
    ///     buf.add_reset(&[Column::scalar("obs", &0.0f32)])?;
    ///     for t in 1..=len {
    ///         buf.add_step(&[Column::scalar("obs", &(t as f32))], t == len, false)?;
    ///     }
    /// }
    /// let eps = buf.sample_episodes(4)?;
    /// for i in 0..4 {
    ///     let rows = eps.offsets()[i + 1] - eps.offsets()[i];
    ///     assert_eq!(rows as u64, eps.episodes()[i].steps() + 1);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_episodes(&mut self, n: usize) -> Result<EpisodeBatch> {
        let mut out = EpisodeBatch::new(&self.rows.schema);
        self.sample_episodes_into(&UnitSpec::new(n), &mut out)?;
        Ok(out)
    }

    /// Draws `spec.n` complete episodes into a reused batch, uniformly or by priority
    /// ([`UnitSpec::beta`]).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, EpisodeBatch, UnitSpec, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("obs", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).episodic().prioritized(1.0, 0.0);
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// for _ in 0..2 {
    ///     buf.add_reset(&[Column::scalar("obs", &0.0f32)])?;
    ///     for t in 1..=4 {
    ///         buf.add_step(&[Column::scalar("obs", &(t as f32))], t == 4, false)?;
    ///     }
    /// }
    /// // The steps of the second episode (rows 6..=9) get 9 times the priority.
    /// buf.update_priorities(&[1, 2, 3, 4, 6, 7, 8, 9], &[1.0f64, 1., 1., 1., 9., 9., 9., 9.])?;
    /// let mut eps = EpisodeBatch::new(buf.schema());
    /// buf.sample_episodes_into(&UnitSpec::new(1000).prioritized(1.0), &mut eps)?;
    /// let second = eps.episodes().iter().filter(|e| e.id == 1).count();
    /// assert!((850..=950).contains(&second), "{second} of 1000");
    /// // P = 0.9 against the smallest P = 0.1: weight (0.1 / 0.9)^1.
    /// let w = eps.weights()[eps.episodes().iter().position(|e| e.id == 1).unwrap()];
    /// assert!((w - 1.0 / 9.0).abs() < 1e-6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_episodes_into(&mut self, spec: &UnitSpec, out: &mut EpisodeBatch) -> Result<()> {
        let table = self.episodes_ref()?;
        if !out.rows.fits(&self.rows.schema) {
            *out = EpisodeBatch::new(&self.rows.schema);
        }
        out.episodes.clear();
        out.offsets.clear();
        out.offsets.push(0);
        out.weights.clear();
        if table.len() == 0 {
            return Err(Error::Empty);
        }
        let head = self.rows.head;
        let whole: Vec<EpisodeInfo> = table
            .iter()
            .filter(|e| e.end.is_some() && e.start >= head)
            .copied()
            .collect();
        if whole.is_empty() {
            return Err(Error::InvalidSample(format!(
                "no complete episode to draw (of {} episodes, each still open or partly \
                 evicted)",
                table.len()
            )));
        }
        // An episode's priority lives in its step rows.
        let runs: Vec<(u64, u64)> = whole.iter().map(|e| (e.start + 1, e.steps())).collect();
        crate::batch::check_rows(spec.n, 0)?;
        let mut picks = Vec::with_capacity(spec.n);
        self.draw_units(&runs, spec, &mut picks, &mut out.weights)?;
        out.episodes
            .extend(picks.iter().filter_map(|&i| whole.get(i).copied()));
        let runs = out.episodes.iter().map(|e| e.start..e.last() + 1);
        self.gather_runs(runs, &mut out.offsets, &mut out.rows)
    }

    /// Draws `n` whole fragments (RLlib's `StorageUnit.FRAGMENTS`): the rows of one
    /// `add` / `add_batch` call each, uniformly over the fragments with every row
    /// stored (not those whose first rows were evicted, nor a call a kill cut short).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).fragments())?;
    /// buf.add_batch(&[Column::new("x", &[1.0f32, 2.0, 3.0])])?;
    /// buf.add(&[Column::scalar("x", &4.0f32)])?;
    /// let f = buf.sample_fragments(8)?;
    /// for (i, r) in f.fragments().iter().enumerate() {
    ///     assert!(*r == (0..3) || *r == (3..4));
    ///     assert_eq!(f.offsets()[i + 1] - f.offsets()[i], r.end as usize - r.start as usize);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_fragments(&mut self, n: usize) -> Result<FragmentBatch> {
        let mut out = FragmentBatch::new(&self.rows.schema);
        self.sample_fragments_into(&UnitSpec::new(n), &mut out)?;
        Ok(out)
    }

    /// `sample_fragments` into a reused batch, uniformly or by priority
    /// ([`UnitSpec::beta`]). The first call after opening the buffer reads every live
    /// row's position once to find the fragments; later adds keep the table.
    pub fn sample_fragments_into(
        &mut self,
        spec: &UnitSpec,
        out: &mut FragmentBatch,
    ) -> Result<()> {
        if !out.rows.fits(&self.rows.schema) {
            *out = FragmentBatch::new(&self.rows.schema);
        }
        out.offsets.clear();
        out.offsets.push(0);
        self.draw_fragments(spec, &mut out.fragments, &mut out.weights)?;
        let mut indices = Vec::new();
        for f in &out.fragments {
            indices.extend(f.clone());
            out.offsets.push(indices.len());
        }
        let all = vec![true; self.rows.schema.len()];
        self.gather_some(&indices, &indices, &all, &mut out.rows)
    }

    /// Draws `spec.n` whole fragments as [`ReplayBuffer::sample_fragments`] does, without
    /// copying their rows: each fragment's logical indices into `fragments` and, by
    /// priority, its weight into `weights`. The fill-in-place path for bindings: size
    /// the outputs from the ranges, then [`ReplayBuffer::gather_into`] their indices.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema, UnitSpec};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).fragments())?;
    /// buf.add_batch(&[Column::new("x", &[0u32, 1, 2])])?; // one fragment of 3 rows
    /// let (mut fragments, mut weights) = (Vec::new(), Vec::new());
    /// buf.draw_fragments(&UnitSpec::new(2), &mut fragments, &mut weights)?;
    /// assert_eq!(fragments, [0..3, 0..3]);
    /// let indices: Vec<u64> = fragments.iter().cloned().flatten().collect();
    /// let mut x = vec![0u8; 4 * indices.len()];
    /// buf.gather_into(&indices, &mut [&mut x[..]])?;
    /// assert_eq!(x[4..8], 1u32.to_le_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn draw_fragments(
        &mut self,
        spec: &UnitSpec,
        fragments: &mut Vec<Range<u64>>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        if !self.rows.superblock.fragments {
            return Err(Error::InvalidSample(format!(
                "{} does not keep fragments (create it with Config::fragments)",
                self.rows.dir.display()
            )));
        }
        fragments.clear();
        weights.clear();
        if self.rows.tail == self.rows.head {
            return Err(Error::Empty);
        }
        let cap = self.rows.superblock.capacity;
        let (head, tail, ring) = (self.rows.head, self.rows.tail, &self.rows.ring);
        let table = self.parts.fragments.get_or_insert_with(|| {
            Fragments::from_positions((head..tail).map(|i| (i, ring.fragment_pos(i % cap))))
        });
        table.evict(head);
        let whole: Vec<Range<u64>> = table
            .iter()
            .filter(|f| f.start >= head && f.closed)
            .map(Fragment::range)
            .collect();
        if whole.is_empty() {
            return Err(Error::InvalidSample(format!(
                "no whole fragment to draw among {} rows (each lost its first rows to \
                 eviction, or its last rows to a kill)",
                tail - head
            )));
        }
        let runs: Vec<(u64, u64)> = whole.iter().map(|r| (r.start, r.end - r.start)).collect();
        crate::batch::check_rows(spec.n, 0)?;
        let mut picks = Vec::with_capacity(spec.n);
        self.draw_units(&runs, spec, &mut picks, weights)?;
        fragments.extend(picks.iter().filter_map(|&i| whole.get(i).cloned()));
        self.rows.draws.sampled += fragments.len() as u64;
        Ok(())
    }

    /// Gathers every field of the units whose rows `runs` gives, concatenated into
    /// `rows`, pushing where each ends to `offsets`; counts the units as sampled.
    fn gather_runs(
        &mut self,
        runs: impl Iterator<Item = Range<u64>>,
        offsets: &mut Vec<usize>,
        rows: &mut Batch,
    ) -> Result<()> {
        let mut indices = Vec::new();
        for run in runs {
            indices.extend(run);
            offsets.push(indices.len());
            self.rows.draws.sampled += 1;
        }
        let all = vec![true; self.rows.schema.len()];
        self.gather_some(&indices, &indices, &all, rows)
    }

    /// Draws `spec.n` of the units whose rows `runs` gives (first index, rows), as
    /// positions in `runs`: uniformly, or by the mean leaf of their rows with
    /// importance weights. Every unit's mass is computed each call, two prefix sums of
    /// the tree each: O(units * depth), and no state to keep in step with adds,
    /// evictions and priority updates.
    fn draw_units(
        &mut self,
        runs: &[(u64, u64)],
        spec: &UnitSpec,
        picks: &mut Vec<usize>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        let Some(beta) = spec.beta else {
            picks.extend((0..spec.n).map(|_| self.rows.draws.rng.random_range(0..runs.len())));
            return Ok(());
        };
        if !(beta.is_finite() && beta >= 0.0) {
            return Err(Error::InvalidSample(format!(
                "beta {beta} is not finite and >= 0"
            )));
        }
        let cap = self.rows.superblock.capacity;
        let Some(p) = self.parts.tree.tree_mut() else {
            return Err(Error::NotPrioritized {
                dir: self.rows.dir.clone(),
            });
        };
        let mut masses = Vec::with_capacity(runs.len());
        let mut cumulative = Vec::with_capacity(runs.len());
        let mut total = 0.0;
        let mut min = f64::INFINITY;
        for &(first, rows) in runs {
            let mass = p.mass(first % cap, rows) / rows.max(1) as f64;
            total += mass;
            if mass > 0.0 {
                min = min.min(mass);
            }
            masses.push(mass);
            cumulative.push(total);
        }
        if !(total > 0.0 && total.is_finite()) {
            return Err(Error::ZeroTotalPriority {
                live: runs.len() as u64,
            });
        }
        let beta32 = beta as f32;
        while picks.len() < spec.n {
            let u = self.rows.draws.rng.random::<f64>() * total;
            // The first whose running total passes u, so never a zero-mass unit (unless
            // rounding put u at the total: then draw again).
            let i = cumulative.partition_point(|&c| c <= u);
            let Some(&mass) = masses.get(i).filter(|&&m| m > 0.0) else {
                continue;
            };
            picks.push(i);
            weights.push(((min / mass) as f32).powf(beta32));
        }
        Ok(())
    }
}

/// Zeroes the positions of `batch` (fields marked in `which`) whose `mask` is false.
fn zero_padding(batch: &mut Batch, mask: &[bool], which: &[bool]) {
    if mask.iter().all(|&m| m) {
        return;
    }
    let (_, mut outs) = batch.parts_mut();
    for (out, &keep) in outs.iter_mut().zip(which) {
        if !keep || mask.is_empty() {
            continue;
        }
        let len = out.len() / mask.len();
        for (p, _) in mask.iter().enumerate().filter(|(_, m)| !**m) {
            if let Some(b) = out.get_mut(p * len..(p + 1) * len) {
                b.fill(0);
            }
        }
    }
}
