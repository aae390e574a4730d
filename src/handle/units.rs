//! Draws of units longer than one transition: sequences of steps with burn-in (R2D2,
//! RLlib's `replay_sequence_length` / `replay_burn_in`), whole episodes (RLlib's
//! `StorageUnit.EPISODES`) and whole fragments (`StorageUnit.FRAGMENTS`). Sequences and
//! episodes read the rows of one episode, never crossing into another. The arrays are
//! those of `sink::Layout` for each unit, filled in place.

use std::ops::Range;

use rand::RngExt;

use super::core::UnitArrays;
use super::{ReplayBuffer, Role};
use crate::algo::windows::{End, Span};
use crate::error::{Error, Result};
use crate::parts::episodes::EpisodeInfo;
use crate::parts::fragments::{Fragment, Fragments};
use crate::parts::priorities::PrioritySpec;
use crate::request::Request;
use crate::sink::{Own, Sink, check_rows, obs_mask};

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
    /// Draws `request.n` sequences of `burn_in + len` steps of one episode each,
    /// uniformly over their first trained step (or by its priority). A sequence is
    /// drawn only if every burn-in step that exists in its episode is still stored;
    /// positions before the episode's first step or past its last are padding (`mask`
    /// false, zeros in every array).
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("obs", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// buf.add_reset(&[Column::scalar("obs", &0.0f32)])?;
    /// for t in 1..=10 {
    ///     buf.add_step(&[Column::scalar("obs", &(t as f32))], t == 10, false)?;
    /// }
    /// let s = buf.sample(Request::sequences(4, 3, &["obs"]).burn_in(2))?;
    /// let (obs, mask) = (s.get::<f32>("obs")?, s.get::<bool>("mask")?);
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
    pub(super) fn sample_sequences(
        &mut self,
        spec: &Request<'_>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        self.episodes_ref()?;
        if spec.len == 0 {
            return Err(Error::InvalidSample("len must be at least 1".into()));
        }
        obs_mask(&self.rows.schema, spec.obs)?;
        let width = spec
            .burn_in
            .checked_add(spec.len)
            .ok_or_else(|| Error::InvalidSample("burn_in + len is too large".into()))?;
        let positions = usize::try_from(width)
            .map_err(|_| Error::InvalidSample("burn_in + len is too large".into()))?;
        if self.rows.tail - self.rows.head < 2 {
            return Err(Error::Empty);
        }
        check_rows(
            spec.n,
            positions.saturating_mul(self.rows.schema.item_bytes().saturating_add(8)),
        )?;
        let mut out = std::mem::take(&mut self.scratch.units);
        out.clear();
        let mut rows = Vec::with_capacity(spec.n.saturating_mul(positions));
        let done = self
            .pick_sequences(spec, &mut out, &mut rows)
            .and_then(|()| {
                let prev: Vec<u64> = rows.iter().map(|r| r - 1).collect();
                let mut f = self.rows.open_sink(spec, spec.n, spec.n, sink)?;
                for (outs, rows) in [
                    (&mut f.obs, &prev),
                    (&mut f.row, &rows),
                    (&mut f.next, &rows),
                ] {
                    self.rows
                        .ring
                        .gather(self.rows.live_rows(), rows, outs)
                        .map_err(|m| self.rows.stamp_error(rows, m))?;
                    zero_padding(outs, &out.mask);
                }
                f.put(Own::Mask, bytemuck::cast_slice(&out.mask));
                f.put(Own::Terminated, bytemuck::cast_slice(&out.terminated));
                f.put(Own::Truncated, bytemuck::cast_slice(&out.truncated));
                f.put(Own::Indices, bytemuck::cast_slice(&out.indices));
                f.put(Own::Weights, bytemuck::cast_slice(&out.weights));
                Ok(())
            });
        self.scratch.units = out;
        done
    }

    /// Picks `spec.n` sequences into `out` (each sequence's first trained step row,
    /// weight, and per position its mask and end flags), with the rows each position
    /// reads into `rows`.
    fn pick_sequences(
        &mut self,
        spec: &Request<'_>,
        out: &mut UnitArrays,
        rows: &mut Vec<u64>,
    ) -> Result<()> {
        let mut tries = 0usize;
        while out.indices.len() < spec.n {
            tries += 1;
            if tries > TRIES_PER_DRAW * spec.n.max(1) {
                return Err(Error::InvalidSample(format!(
                    "no sequence with its burn-in stored found in {} draws",
                    tries - 1
                )));
            }
            let (j, weight) = match spec.beta() {
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
        if spec.beta().is_none() {
            self.rows.draws.sampled += out.indices.len() as u64;
        }
        Ok(())
    }

    /// Draws `request.n` complete episodes (ended, every row stored), uniformly with
    /// replacement or by the mean priority of their step rows: their rows one episode
    /// after another, `offsets` (episode `i` is rows `offsets[i]..offsets[i + 1]`, its
    /// reset row first, whose step fields are zero), `episodes` (their ids) and, by
    /// priority, one weight per episode: `(P_min / P)^beta`, `P_min` being the
    /// smallest non-zero probability of any whole episode, so the largest is 1.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
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
    /// let eps = buf.sample(Request::episodes(1000).prioritized(1.0))?;
    /// let ids = eps.get::<u64>("episodes")?;
    /// let second = ids.iter().filter(|&&id| id == 1).count();
    /// assert!((850..=950).contains(&second), "{second} of 1000");
    /// // P = 0.9 against the smallest P = 0.1: weight (0.1 / 0.9)^1.
    /// let w = eps.weights()[ids.iter().position(|&id| id == 1).unwrap()];
    /// assert!((w - 1.0 / 9.0).abs() < 1e-6);
    /// let offsets = eps.get::<u64>("offsets")?;
    /// assert!(offsets.windows(2).all(|o| o[1] - o[0] == 5)); // reset row + 4 steps
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub(super) fn sample_episodes(
        &mut self,
        spec: &Request<'_>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let table = self.episodes_ref()?;
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
        check_rows(spec.n, 0)?;
        let (mut picks, mut weights) = (Vec::with_capacity(spec.n), Vec::new());
        self.draw_units(&runs, spec, &mut picks, &mut weights)?;
        let episodes: Vec<EpisodeInfo> = (picks.iter())
            .filter_map(|&i| whole.get(i).copied())
            .collect();
        let ids: Vec<u64> = episodes.iter().map(|e| e.id).collect();
        let runs = episodes.iter().map(|e| e.start..e.last() + 1);
        self.gather_runs(spec, runs, &weights, &ids, sink)
    }

    /// Draws `request.n` whole fragments (RLlib's `StorageUnit.FRAGMENTS`): the rows
    /// of one `add` / `add_batch` call each, uniformly over the fragments with every
    /// row stored (not those whose first rows were evicted, nor a call a kill cut
    /// short), or by the mean priority of their rows. The first draw after opening the
    /// buffer reads every live row's position once to find the fragments; later adds
    /// keep the table.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).fragments())?;
    /// buf.add_batch(&[Column::new("x", &[1.0f32, 2.0, 3.0])])?;
    /// buf.add(&[Column::scalar("x", &4.0f32)])?;
    /// let f = buf.sample(Request::fragments(8))?;
    /// let (offsets, indices) = (f.get::<u64>("offsets")?, f.indices());
    /// for i in 0..8 {
    ///     let rows = &indices[offsets[i] as usize..offsets[i + 1] as usize];
    ///     assert!(rows == [0, 1, 2] || rows == [3]);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub(super) fn sample_fragments(
        &mut self,
        spec: &Request<'_>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        if spec.remove {
            self.ready_to_remove()?;
        }
        let (mut fragments, mut weights) = (Vec::new(), Vec::new());
        self.draw_fragments(spec, &mut fragments, &mut weights)?;
        self.gather_runs(spec, fragments.into_iter(), &weights, &[], sink)
    }

    fn draw_fragments(
        &mut self,
        spec: &Request<'_>,
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
        let head = self.rows.head;
        let table = self.fragment_table();
        let whole: Vec<Range<u64>> = table
            .iter()
            .filter(|f| f.whole(head))
            .map(Fragment::range)
            .collect();
        if whole.is_empty() {
            return Err(Error::InvalidSample(format!(
                "no whole fragment to draw among {} rows (each lost its first rows to \
                 eviction, its last rows to a kill, or a row to a removal)",
                self.rows.tail - head
            )));
        }
        let runs: Vec<(u64, u64)> = whole.iter().map(|r| (r.start, r.end - r.start)).collect();
        let mut picks = Vec::with_capacity(spec.n);
        match spec.covering {
            Some(rows) => self.cover_units(&runs, rows, &mut picks)?,
            None => {
                check_rows(spec.n, 0)?;
                self.draw_units(&runs, spec, &mut picks, weights)?;
            }
        }
        fragments.extend(picks.iter().filter_map(|&i| whole.get(i).cloned()));
        Ok(())
    }

    /// The fragment table: built from the rows' positions (and, with item states, the
    /// removed rows counted from their words) at the first draw after an open, then
    /// kept by the adds and removals; fragments the head passed are forgotten.
    pub(super) fn fragment_table(&mut self) -> &Fragments {
        let cap = self.rows.superblock.capacity;
        let (head, tail, ring) = (self.rows.head, self.rows.tail, &self.rows.ring);
        let life = self.parts.life.as_ref();
        let table = self.parts.fragments.get_or_insert_with(|| {
            let mut t =
                Fragments::from_positions((head..tail).map(|i| (i, ring.fragment_pos(i % cap))));
            if let Some(life) = life {
                t.count_removed(head, |i| life.is_removed(i));
            }
            t
        });
        table.evict(head);
        table
    }

    /// Distinct units of `runs` (first index, rows) in uniformly random order until
    /// their rows reach `rows`, as positions in `runs`: a partial shuffle, stopped as
    /// soon as the rows suffice.
    fn cover_units(
        &mut self,
        runs: &[(u64, u64)],
        rows: u64,
        picks: &mut Vec<usize>,
    ) -> Result<()> {
        let total: u64 = runs.iter().map(|r| r.1).sum();
        if total < rows {
            return Err(Error::InvalidSample(format!(
                "units covering {rows} rows, but the {} whole fragments hold {total}",
                runs.len()
            )));
        }
        let mut order: Vec<usize> = (0..runs.len()).collect();
        let mut got = 0;
        for k in 0..order.len() {
            if got >= rows && k > 0 {
                break;
            }
            let j = self.rows.draws.rng.random_range(k..order.len());
            order.swap(k, j);
            let pick = order.get(k).copied().unwrap_or(0);
            got += runs.get(pick).map_or(0, |r| r.1);
            picks.push(pick);
        }
        Ok(())
    }

    /// Draws `request.n` groups of the items sharing the values of `request.group_by`
    /// (DI-engine's `sample(groupby=, unroll_len=)`; see [`Request::groups`]). Under a
    /// rate limiter each group is one sample, as a Reverb item of several steps is.
    pub(super) fn sample_groups(&mut self, spec: &Request<'_>, sink: &mut dyn Sink) -> Result<()> {
        if spec.remove {
            self.ready_to_remove()?;
        }
        check_rows(spec.n, 0)?;
        self.admit(true, spec.n as u64)?;
        let (mut indices, mut offsets) = (Vec::new(), vec![0u64]);
        let life = self.parts.life.as_ref();
        self.rows
            .pick_groups(spec, life, &mut indices, &mut offsets)?;
        self.gather_units(spec, &indices, &offsets, &[], &[], sink)
    }

    /// Gathers every field of the units whose rows `runs` gives into `sink`, their rows
    /// concatenated, with `offsets`, the units' `weights` and, for episodes, their
    /// `ids`; counts the units as sampled.
    fn gather_runs(
        &mut self,
        spec: &Request<'_>,
        runs: impl Iterator<Item = Range<u64>>,
        weights: &[f32],
        ids: &[u64],
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let mut indices = Vec::new();
        let mut offsets = vec![0u64];
        for run in runs {
            indices.extend(run);
            offsets.push(indices.len() as u64);
            self.rows.draws.sampled += 1;
        }
        self.gather_units(spec, &indices, &offsets, weights, ids, sink)
    }

    /// Gathers the rows `indices` of units ending at `offsets` (after a leading 0) into
    /// `sink`, with the units' `weights` and, for episodes, their `ids`; then, with item
    /// states, counts each row's use or removes the units whole.
    fn gather_units(
        &mut self,
        spec: &Request<'_>,
        indices: &[u64],
        offsets: &[u64],
        weights: &[f32],
        ids: &[u64],
        sink: &mut dyn Sink,
    ) -> Result<()> {
        let units = offsets.len() - 1;
        let mut f = self.rows.open_sink(spec, units, indices.len(), sink)?;
        self.rows.gather_into(indices, &mut f.row)?;
        f.put(Own::Indices, bytemuck::cast_slice(indices));
        f.put(Own::Offsets, bytemuck::cast_slice(offsets));
        f.put(Own::Episodes, bytemuck::cast_slice(ids));
        f.put(Own::Weights, bytemuck::cast_slice(weights));
        drop(f);
        self.rows.put_values(indices, sink)?;
        self.after_draw(spec, indices)
    }

    /// Draws `spec.n` of the units whose rows `runs` gives (first index, rows), as
    /// positions in `runs`: uniformly, or by the mean leaf of their rows with
    /// importance weights. Every unit's mass is computed each call, two prefix sums of
    /// the tree each: O(units * depth), and no state to keep in step with adds,
    /// evictions and priority updates.
    fn draw_units(
        &mut self,
        runs: &[(u64, u64)],
        spec: &Request<'_>,
        picks: &mut Vec<usize>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        let Some(beta) = spec.beta() else {
            if spec.replace {
                let rng = &mut self.rows.draws.rng;
                picks.extend((0..spec.n).map(|_| rng.random_range(0..runs.len())));
                return Ok(());
            }
            if spec.n > runs.len() {
                return Err(Error::InvalidSample(format!(
                    "{} units without replacement, but only {} are whole",
                    spec.n,
                    runs.len()
                )));
            }
            let mut order: Vec<usize> = (0..runs.len()).collect();
            for k in 0..spec.n {
                let j = self.rows.draws.rng.random_range(k..order.len());
                order.swap(k, j);
            }
            picks.extend(order.iter().take(spec.n));
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

/// Zeroes the positions of `outs` (one slice per field, empty for the fields not
/// drawn) whose `mask` is false: padding gathered a stored row to stay in step. Padding
/// comes in runs (before an episode's first step, after its last), each zeroed at once.
fn zero_padding(outs: &mut [&mut [u8]], mask: &[bool]) {
    if mask.iter().all(|&m| m) {
        return;
    }
    for out in outs.iter_mut().filter(|o| !o.is_empty()) {
        let len = out.len() / mask.len();
        let mut p = 0;
        while let Some(start) = mask.iter().skip(p).position(|&m| !m).map(|q| p + q) {
            let run = mask.iter().skip(start).take_while(|&&m| !m).count();
            if let Some(b) = out.get_mut(start * len..(start + run) * len) {
                b.fill(0);
            }
            p = start + run;
        }
    }
}
