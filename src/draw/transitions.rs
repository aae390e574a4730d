//! Transitions drawn from an episodic buffer: `(obs, action, reward, next_obs, done)`
//! read from consecutive rows of one episode, with n-step returns. Each observation is
//! stored once: `obs` comes from the row before the step, `next_<obs>` from the row the
//! step (or the n-th step) led to. The arrays are those of `sink::Layout` for
//! `Unit::Transitions`, filled in place.

use rand::RngExt;

use super::draws_units::DrawsUnits;
use super::stream::UnitArrays;
use crate::algo::windows::End;
use crate::algo::windows::Span;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::row::EPISODE_OFF;
use crate::parts::priorities::PrioritySpec;
use crate::request::{GoalStrategy, Pick, Relabel, Request};
use crate::sink::{Filled, Own, Sink, obs_mask};
use crate::storage::map::{Found, RowRun};

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

/// Frame `f` of the `k` stacked up to row `r`: the `k` newest rows up to it, the
/// episode's reset row repeated before its start.
#[inline(always)]
fn stacked_frame(r: u64, k: u64, f: u64, span: &Span) -> u64 {
    r.saturating_sub(k - 1 - f).max(span.start)
}

/// Frame `f` of a window of `frames` rows ending `nstep` steps after step row `j`,
/// clamped into the episode.
#[inline(always)]
fn window_frame(j: u64, nstep: u64, frames: u64, f: u64, span: &Span) -> u64 {
    (j - 1 + nstep)
        .saturating_sub(frames - 1 - f)
        .clamp(span.start, span.last)
}

/// Position of frame `f` of item `i` among items of `frames` frames each.
#[inline(always)]
fn at(i: usize, frames: u64, f: u64) -> usize {
    i * frames as usize + f as usize
}

/// Draws `request.n` transitions uniformly over the steps of live episodes, or by
/// the priority of each transition's first step row (reset rows and steps whose
/// observation row was evicted have none).
///
/// ```
/// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
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
/// let t = buf.sample(Request::transitions(8, &["obs"]).nstep(2, 0.5))?;
/// for i in 0..8 {
///     let (o, next) = (t.get::<f32>("obs")?[i], t.get::<f32>("next_obs")?[i]);
///     // obs t leads to t + 2, or to the terminal obs 5.
///     assert_eq!(next, (o + 2.0).min(5.0));
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub(super) fn sample_transitions<H: DrawsUnits + ?Sized>(
    h: &mut H,
    request: &Request<'_>,
    sink: &mut dyn Sink,
) -> Result<()> {
    h.episode_table()?;
    if request.nstep == 0 {
        return Err(Error::InvalidSample("nstep must be at least 1".into()));
    }
    if request.stack == 0 {
        return Err(Error::InvalidSample("stack must be at least 1".into()));
    }
    let is_obs = obs_mask(&h.rows().schema, request.obs)?;
    if let Some(r) = &request.relabel {
        goal_fields(&h.rows().schema, r)?;
    }
    if h.rows().tail - h.rows().head < 2 {
        return Err(Error::Empty);
    }
    let n = request.n;
    let mut out = std::mem::take(h.unit_scratch());
    out.clear();
    let mut f = h.rows().open_sink(request, n, n, sink)?;
    let done = draw_transitions(h, request, &is_obs, &mut f, &mut out);
    if done.is_ok() {
        f.put(Own::Indices, bytemuck::cast_slice(&out.indices));
        f.put(Own::Weights, bytemuck::cast_slice(&out.weights));
        f.put(Own::Returns, bytemuck::cast_slice(&out.returns));
        f.put(Own::Discounts, bytemuck::cast_slice(&out.discounts));
        f.put(Own::Terminated, bytemuck::cast_slice(&out.terminated));
        f.put(Own::Truncated, bytemuck::cast_slice(&out.truncated));
        f.put(Own::NextOffsets, bytemuck::cast_slice(&out.next_offsets));
        f.put(Own::Relabeled, bytemuck::cast_slice(&out.relabeled));
        f.put(Own::GoalIndices, bytemuck::cast_slice(&out.goal_indices));
    }
    drop(f);
    let done = done.and_then(|()| put_transition_values(h.rows(), request, &out, sink));
    *h.unit_scratch() = out;
    done
}

/// The values of the variable-length fields of the transitions in `out`: each
/// observation field's at every observation frame (and, unless drawn as windows, at
/// every frame each transition led to), every other field's at the step row. Frames
/// are the rows the fixed fields were read from.
fn put_transition_values(
    rows: &crate::draw::rows::Rows,
    request: &Request<'_>,
    out: &UnitArrays,
    sink: &mut dyn Sink,
) -> Result<()> {
    if !rows.schema.has_var() {
        return Ok(());
    }
    let some = |v: &[u64]| v.iter().map(|&r| Some(r)).collect::<Vec<_>>();
    let (obs, next, step) = (
        some(&out.obs_rows),
        some(&out.next_rows),
        some(&out.indices),
    );
    let next = (!request.window).then_some(&next[..]);
    rows.put_step_values(request.obs, (&obs, &step, next), sink)
}

/// Picks and reads `request.n` transitions into `f` and `out`.
fn draw_transitions<H: DrawsUnits + ?Sized>(
    h: &mut H,
    request: &Request<'_>,
    is_obs: &[bool],
    f: &mut Filled<'_>,
    out: &mut UnitArrays,
) -> Result<()> {
    let n = request.n;
    let mut tries = 0usize;
    let mut candidates = Vec::with_capacity(n);
    let mut drawn_weights = Vec::new();
    let mut goal_draws = Vec::new();
    while out.indices.len() < n {
        let need = n - out.indices.len();
        tries += need;
        if tries > TRIES_PER_DRAW * n.max(1) {
            return Err(Error::InvalidSample(format!(
                "no step with {} stored frames found in {} draws: the live rows are \
                     (nearly) all reset rows or too early in partly evicted episodes",
                request.stack,
                tries - need
            )));
        }
        candidates.clear();
        if let Pick::Given(given) = request.pick {
            let rest = given.get(out.indices.len()..).unwrap_or(&[]);
            h.rows().check_live(rest)?;
            if let Some(&index) = rest.iter().find(|&&i| h.removed(i)) {
                return Err(Error::Removed {
                    index,
                    cause: "its episode was removed",
                });
            }
            candidates.extend_from_slice(rest);
        } else if let Some(beta) = request.beta() {
            candidates.resize(need, 0);
            drawn_weights.clear();
            drawn_weights.resize(need, 0.0);
            let p = PrioritySpec::new(need, beta);
            h.draw_by_priority(&p, &mut candidates, &mut drawn_weights)?;
        } else {
            // Rows of removed episodes are drawn again without counting as tries.
            candidates.extend((0..need).map_while(|_| h.draw_kept_step()));
        }
        // One number per candidate places its new goal (drawn only when asked, so
        // draws without relabeling keep their stream).
        goal_draws.clear();
        if request.relabel.is_some() {
            let rng = &mut h.rows_mut().draws.rng;
            goal_draws.extend((0..need).map(|_| rng.random::<u64>()));
        }
        let drawn = Drawn {
            candidates: &candidates,
            weights: &drawn_weights,
            goals: &goal_draws,
        };
        let lost = read_transitions(h, request, is_obs, &drawn, f, out)?;
        if let Pick::Given(given) = request.pick {
            // A given row read is one the caller named: one passed over is an error.
            let read = &out.indices[..];
            if let Some((&want, _)) = given.iter().zip(read).find(|(g, r)| g != r) {
                return Err(not_a_step(want));
            }
            if let (None, Some(&skipped)) = (&lost, given.get(read.len())) {
                return Err(not_a_step(skipped));
            }
        }
        if let Some((index, found)) = lost {
            // The candidates after the lost one are drawn again with the rest.
            h.unit_lost(index, found)?;
        }
    }
    if matches!(request.pick, Pick::Given(_)) {
        return Ok(());
    }
    if request.beta().is_none() {
        h.rows_mut().draws.sampled += n as u64;
    }
    Ok(())
}

/// A given index that ends no step with its observation row stored.
fn not_a_step(index: u64) -> Error {
    Error::InvalidSample(format!(
        "index {index} ends no step whose observation row is stored (a reset row, a \
         step too early in a partly evicted episode, or not a row of this buffer)"
    ))
}

/// Reads the transitions of the drawn step rows `candidates` into `out`, after the
/// ones it holds, passing over rows that end no step with its frames stored (reset
/// rows, steps too early in a partly evicted episode). One pass per round: each
/// transition's rows are fetched a few transitions ahead, then its episode is
/// looked up from the step header, and its frames, step fields and rewards are
/// copied while in cache, every row checked against its stamp.
fn read_transitions<H: DrawsUnits + ?Sized>(
    h: &H,
    spec: &Request<'_>,
    is_obs: &[bool],
    drawn: &Drawn<'_>,
    f: &mut Filled<'_>,
    out: &mut UnitArrays,
) -> Result<Option<(u64, Found)>> {
    let (candidates, drawn_weights) = (drawn.candidates, drawn.weights);
    let all = h.rows();
    let (head, tail, k, nstep) = (all.head, all.tail, spec.stack, spec.nstep);
    let rows = all.ring.reader(all.live_rows());
    let table = h.episode_table()?;
    let layout = all.ring.layout();
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
    let values = all.schema.has_var();
    // Relabeling: the achieved goal's bytes in a row, copied to the goal's arrays.
    let relabel = match &spec.relabel {
        Some(r) => {
            let (goal, achieved) = goal_fields(&all.schema, r)?;
            let &(off, len) = layout.fields.get(achieved).unwrap_or(&(0, 0));
            let relabeled = (r.fraction * spec.n as f64).round() as usize;
            Some((r.strategy, [(off, len, goal)], relabeled))
        }
        None => None,
    };
    // In window mode the observation arrays are the windows, and there are no next
    // observations.
    let (step_outs, obs_outs, next_outs) = (&mut f.row, &mut f.obs, &mut f.next);
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
    // Fetched ahead in two stages: transition `c + 2 * AHEAD`'s rows, then, once they
    // are in, transition `c + AHEAD`'s goal row, placed from its step header (the
    // episode in O(1), as below). A goal row lies elsewhere in its episode: a cache
    // miss of its own (W7: 20 of 38 us of a draw of 256 before this).
    let before = out.indices.len();
    let place_goal = |c: usize| -> Option<u64> {
        let (strategy, _, relabeled) = relabel.as_ref()?;
        // Only the transitions sure to be relabeled: a position cannot pass the count.
        if before + c >= *relabeled {
            return None;
        }
        let &(j, run) = runs.get(c)?;
        let hint = u64::from_le_bytes(run.read_le(j, EPISODE_OFF));
        let span = table.of_hinted(j, hint)?.span(head);
        let draw = drawn.goals.get(c).copied().unwrap_or(0);
        Some(goal_row(*strategy, draw, j, &span, (head, tail)))
    };
    let mut goal_rows: Vec<Option<u64>> = vec![None; runs.len()];
    let ahead = |c: usize, goal_rows: &mut Vec<Option<u64>>| {
        if let Some((_, run)) = runs.get(c + 2 * TRANSITIONS_AHEAD) {
            run.prefetch();
        }
        if let Some(g) = place_goal(c + TRANSITIONS_AHEAD) {
            rows.run(g, 1).prefetch();
            if let Some(slot) = goal_rows.get_mut(c + TRANSITIONS_AHEAD) {
                *slot = Some(g);
            }
        }
    };
    for (_, run) in runs.iter().take(2 * TRANSITIONS_AHEAD) {
        run.prefetch();
    }
    for c in 0..TRANSITIONS_AHEAD {
        if let Some(g) = place_goal(c) {
            rows.run(g, 1).prefetch();
            if let Some(slot) = goal_rows.get_mut(c) {
                *slot = Some(g);
            }
        }
    }
    for (c, &(j, run)) in runs.iter().enumerate() {
        ahead(c, &mut goal_rows);
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
                    let r = window_frame(j, nstep, frames, f, &span);
                    run.copy(r, &obs_fields, obs_outs, at(i, frames, f));
                }
            } else if k == 1 {
                // No stacking: the two rows themselves, without the clamping
                // arithmetic per frame.
                run.copy(j - 1, &obs_fields, obs_outs, i);
                run.copy(t.bootstrap, &obs_fields, next_outs, i);
            } else {
                // The k newest frames up to each row, the reset row's repeated
                // before it.
                for f in 0..k {
                    let r = stacked_frame(j - 1, k, f, &span);
                    run.copy(r, &obs_fields, obs_outs, at(i, k, f));
                    let r = stacked_frame(t.bootstrap, k, f, &span);
                    run.copy(r, &obs_fields, next_outs, at(i, k, f));
                }
            }
            run.copy(j, &step_fields, step_outs, i);
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
        let g = match g {
            Ok(g) => g,
            Err(lost) => return Ok(Some(lost)),
        };
        if let Some((strategy, achieved, relabeled)) = &relabel {
            let (goal_row, relabel_this) = match i < *relabeled {
                true => match goal_rows.get(c) {
                    Some(&Some(g)) => (g, true),
                    _ => {
                        let draw = drawn.goals.get(c).copied().unwrap_or(0);
                        (goal_row(*strategy, draw, j, &span, (head, tail)), true)
                    }
                },
                false => (j, false),
            };
            if relabel_this {
                // The goal reached at that row becomes the goal of both observations.
                let goal = rows.run(goal_row, 1).checked(|run| {
                    run.copy(goal_row, achieved, obs_outs, i);
                    run.copy(goal_row, achieved, next_outs, i);
                });
                if let Err(lost) = goal {
                    return Ok(Some(lost));
                }
            }
            out.relabeled.push(relabel_this);
            out.goal_indices.push(goal_row);
        }
        // With variable-length fields, the rows the frames came from: their values are
        // copied after every transition is read (`put_transition_values`).
        if values {
            if spec.window {
                let frames = k + nstep;
                (out.obs_rows)
                    .extend((0..frames).map(|f| window_frame(j, nstep, frames, f, &span)));
            } else {
                out.obs_rows
                    .extend((0..k).map(|f| stacked_frame(j - 1, k, f, &span)));
                (out.next_rows).extend((0..k).map(|f| stacked_frame(t.bootstrap, k, f, &span)));
            }
        }
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
    Ok(None)
}

/// What a round of a transition draw picked: step rows, their weights (by priority),
/// and one number per row placing its new goal (relabeling).
struct Drawn<'a> {
    candidates: &'a [u64],
    weights: &'a [f32],
    goals: &'a [u64],
}

/// The schema positions of a relabeling's goal and achieved-goal fields, which must be
/// alike (same dtype and shape).
fn goal_fields(schema: &crate::schema::Schema, r: &Relabel<'_>) -> Result<(usize, usize)> {
    let find = |name: &str| {
        schema.position(name).ok_or_else(|| {
            Error::InvalidSample(format!(
                "relabel field {name:?} is not a fixed field of the schema"
            ))
        })
    };
    let (goal, achieved) = (find(r.goal)?, find(r.achieved)?);
    match (schema.fields().get(goal), schema.fields().get(achieved)) {
        (Some(g), Some(a)) if g.dtype() == a.dtype() && g.shape() == a.shape() => {
            Ok((goal, achieved))
        }
        (Some(g), Some(a)) => Err(Error::InvalidSample(format!(
            "relabel fields differ: {:?} is {} {:?}, {:?} is {} {:?}",
            g.name(),
            g.dtype().name(),
            g.shape(),
            a.name(),
            a.dtype().name(),
            a.shape()
        ))),
        _ => Err(Error::InvalidSample("relabel fields not found".into())),
    }
}

/// The row whose achieved goal becomes the new goal of the transition ending at step
/// row `j` of the episode `span` holds, placed by `draw` (uniform over the choices):
/// `Future` a step row from `j` to the last stored, `Final` the last stored, `Episode`
/// any stored step row of the episode, `Random` any live row `head..tail`.
fn goal_row(
    strategy: GoalStrategy,
    draw: u64,
    j: u64,
    span: &Span,
    (head, tail): (u64, u64),
) -> u64 {
    let pick = |lo: u64, hi: u64| lo + draw % (hi - lo + 1);
    match strategy {
        GoalStrategy::Future => pick(j, span.last),
        GoalStrategy::Final => span.last,
        GoalStrategy::Episode => pick((span.start + 1).max(span.first), span.last),
        GoalStrategy::Random => pick(head, tail - 1),
    }
}
