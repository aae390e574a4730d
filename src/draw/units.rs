//! Draws of units longer than one transition: sequences of steps with burn-in (R2D2,
//! RLlib's `replay_sequence_length` / `replay_burn_in`), whole episodes (RLlib's
//! `StorageUnit.EPISODES`) and whole fragments (`StorageUnit.FRAGMENTS`). Sequences and
//! episodes read the rows of one episode, never crossing into another. The arrays are
//! those of `sink::Layout` for each unit, filled in place.

use std::ops::Range;

use rand::RngExt;

use super::draws_units::DrawsUnits;
use super::rows::VALUE_TRIES;
use super::stream::UnitArrays;
use crate::algo::windows::{End, Span};
use crate::error::{Error, Result};
use crate::parts::episodes::EpisodeInfo;
use crate::parts::fragments::Fragment;
use crate::parts::priorities::PrioritySpec;
use crate::request::{Request, Unit};
use crate::sink::{Own, Sink, check_rows, obs_mask};
use crate::storage::pread::Missed;

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

/// Draws what `request` asks for (any unit but rows) from `h` into `sink`.
pub(crate) fn sample_units<H: DrawsUnits + ?Sized>(
    h: &mut H,
    request: &Request<'_>,
    sink: &mut dyn Sink,
) -> Result<()> {
    let mut tries = 0;
    loop {
        let done = match request.unit {
            Unit::Rows => return super::rows::sample_rows(h, request, sink),
            Unit::Transitions => super::transitions::sample_transitions(h, request, sink),
            Unit::Sequences => sample_sequences(h, request, sink),
            Unit::Episodes => sample_episodes(h, request, sink),
            Unit::Fragments => sample_fragments(h, request, sink),
            Unit::Groups => sample_groups(h, request, sink),
        };
        // A unit whose values a writer in another process overwrote while they were
        // read (its rows were checked whole before): the draw is made again.
        tries += 1;
        match done {
            Err(Error::Evicted { .. }) if request.draws() && tries < VALUE_TRIES => continue,
            other => return other,
        }
    }
}

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
fn sample_sequences<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    sink: &mut dyn Sink,
) -> Result<()> {
    h.episode_table()?;
    if spec.len == 0 {
        return Err(Error::InvalidSample("len must be at least 1".into()));
    }
    obs_mask(&h.rows().schema, spec.obs)?;
    let width = spec
        .burn_in
        .checked_add(spec.len)
        .ok_or_else(|| Error::InvalidSample("burn_in + len is too large".into()))?;
    let positions = usize::try_from(width)
        .map_err(|_| Error::InvalidSample("burn_in + len is too large".into()))?;
    if h.rows().tail - h.rows().head < 2 {
        return Err(Error::Empty);
    }
    check_rows(
        spec.n,
        positions.saturating_mul(h.rows().schema.item_bytes().saturating_add(8)),
    )?;
    let mut out = std::mem::take(h.unit_scratch());
    out.clear();
    let done = draw_sequences(h, spec, positions, &mut out, sink);
    *h.unit_scratch() = out;
    done
}

/// Picks `spec.n` sequences into `out` and gathers each one's rows into the sink's
/// arrays as soon as it is picked, so that a sequence the writer overwrote mid-copy
/// (a reader's lost race) is drawn again alone.
fn draw_sequences<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    positions: usize,
    out: &mut UnitArrays,
    sink: &mut dyn Sink,
) -> Result<()> {
    let mut f = h.rows().open_sink(spec, spec.n, spec.n, sink)?;
    let (mut rows, mut prev) = (Vec::with_capacity(positions), Vec::with_capacity(positions));
    let mut tries = 0usize;
    while out.indices.len() < spec.n {
        tries += 1;
        if tries > TRIES_PER_DRAW * spec.n.max(1) {
            return Err(Error::InvalidSample(format!(
                "no sequence with its burn-in stored found in {} draws",
                tries - 1
            )));
        }
        rows.clear();
        if !pick_sequence(h, spec, out, &mut rows)? {
            continue;
        }
        let s = out.indices.len() - 1;
        if h.rows().schema.has_var() {
            out.next_rows.extend_from_slice(&rows);
        }
        prev.clear();
        prev.extend(rows.iter().map(|r| r - 1));
        let all = h.rows();
        let mut lost = None;
        for (outs, rows) in [
            (&mut f.obs, &prev),
            (&mut f.row, &rows),
            (&mut f.next, &rows),
        ] {
            let mut at = unit_slices(outs, s, positions, spec.n);
            match all.ring.gather(all.live_rows(), rows, &mut at) {
                Ok(()) => {}
                Err(Missed::Row(m)) => {
                    lost = Some((rows.get(m.position).copied().unwrap_or(0), m.found));
                    break;
                }
                Err(missed) => return Err(all.stamp_error(rows, missed)),
            }
        }
        if let Some((index, found)) = lost {
            h.unit_lost(index, found)?;
            out.drop_last_unit(positions);
        }
    }
    if spec.beta().is_none() {
        h.rows_mut().draws.sampled += out.indices.len() as u64;
    }
    for outs in [&mut f.obs, &mut f.row, &mut f.next] {
        zero_padding(outs, &out.mask);
    }
    f.put(Own::Mask, bytemuck::cast_slice(&out.mask));
    f.put(Own::Terminated, bytemuck::cast_slice(&out.terminated));
    f.put(Own::Truncated, bytemuck::cast_slice(&out.truncated));
    f.put(Own::Indices, bytemuck::cast_slice(&out.indices));
    f.put(Own::Weights, bytemuck::cast_slice(&out.weights));
    drop(f);
    put_sequence_values(h.rows(), spec, out, sink)
}

/// The values of the variable-length fields of the sequences in `out`, position by
/// position as the fixed fields are: each observation field's from the row before the
/// step and, as `next_<name>`, from the step row; every other field's from the step
/// row; padding positions empty.
fn put_sequence_values(
    rows: &crate::draw::rows::Rows,
    spec: &Request<'_>,
    out: &UnitArrays,
    sink: &mut dyn Sink,
) -> Result<()> {
    if !rows.schema.has_var() {
        return Ok(());
    }
    let at = |back: u64| -> Vec<Option<u64>> {
        (out.next_rows.iter().zip(&out.mask))
            .map(|(&r, &m)| m.then(|| r - back))
            .collect()
    };
    let (before, row) = (at(1), at(0));
    rows.put_step_values(spec.obs, (&before, &row, Some(&row)), sink)
}

/// The part of each of `outs` (one per field, `units * per_unit` rows each, or empty
/// for a field not drawn) that holds unit `u`.
fn unit_slices<'a>(
    outs: &'a mut [&mut [u8]],
    u: usize,
    per_unit: usize,
    units: usize,
) -> Vec<&'a mut [u8]> {
    outs.iter_mut()
        .map(|o| {
            let row = o.len() / (units * per_unit).max(1);
            let from = u * per_unit * row;
            o.get_mut(from..from + per_unit * row).unwrap_or(&mut [])
        })
        .collect()
}

/// Draws one sequence: its first trained step row, weight, and per position its mask
/// and end flags into `out`, and the rows its positions read into `rows`. False when
/// the draw is passed over (a sequence whose burn-in is not stored).
fn pick_sequence<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    out: &mut UnitArrays,
    rows: &mut Vec<u64>,
) -> Result<bool> {
    let (j, weight) = match spec.beta() {
        Some(beta) => {
            let (mut j, mut w) = ([0u64], [0.0f32]);
            h.draw_by_priority(&PrioritySpec::new(1, beta), &mut j, &mut w)?;
            (j[0], Some(w[0]))
        }
        None => match h.draw_kept_step() {
            Some(j) => (j, None),
            None => return Ok(false),
        },
    };
    let table = h.episode_table()?;
    let e = table.of(j).ok_or_else(|| {
        Error::EpisodeOrder(format!("index {j} belongs to no episode in the table"))
    })?;
    let steps = step_span(e.span(h.rows().head));
    if j < steps.first {
        return Ok(false);
    }
    let Some(seq) = steps.sequence(j, spec.burn_in, spec.len) else {
        return Ok(false);
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
    Ok(true)
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
fn sample_episodes<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    sink: &mut dyn Sink,
) -> Result<()> {
    // A draw that removes needs a handle that may.
    h.ready_to_draw(spec, 0)?;
    let table = h.episode_table()?;
    if table.len() == 0 {
        return Err(Error::Empty);
    }
    let range = table.whole_range(h.rows().head);
    // Allocated as drawn: `spec.n` is checked first (`check_rows`).
    let (mut picks, mut weights) = (Vec::new(), Vec::new());
    if spec.covering.is_none() && spec.beta().is_none() && spec.replace && !h.keeps_states() {
        // Uniform with replacement, nothing ever removed: the whole episodes are the
        // range itself, drawn from as the list below would be (the same stream) without
        // building it, so a draw costs the same at 1,000 episodes or 100,000.
        if range.is_empty() {
            return Err(no_whole_episode(table.len()));
        }
        check_rows(spec.n, 0)?;
        let rng = &mut h.rows_mut().draws.rng;
        picks.extend((0..spec.n).map(|_| rng.random_range(range.clone())));
    } else {
        // Positions in the table of the episodes not removed.
        let whole: Vec<usize> = (range.clone())
            .filter(|&i| table.get(i).is_some_and(|e| !h.removed(e.start)))
            .collect();
        if whole.is_empty() {
            return Err(no_whole_episode(table.len()));
        }
        // An episode's priority lives in its step rows.
        let runs: Vec<(u64, u64)> = (whole.iter())
            .filter_map(|&i| table.get(i))
            .map(|e| (e.start + 1, e.steps()))
            .collect();
        if spec.covering.is_none() {
            check_rows(spec.n, 0)?;
        }
        let mut of_whole = Vec::with_capacity(spec.n);
        match spec.covering {
            Some(steps) => cover_units(h, &runs, steps, "episodes", &mut of_whole)?,
            None => draw_units(h, &runs, spec, &mut of_whole, &mut weights)?,
        }
        picks.extend(of_whole.iter().filter_map(|&k| whole.get(k)));
    }
    let table = h.episode_table()?;
    let episodes: Vec<EpisodeInfo> = (picks.iter())
        .filter_map(|&i| table.get(i).copied())
        .collect();
    let ids: Vec<u64> = episodes.iter().map(|e| e.id).collect();
    let runs = episodes.iter().map(|e| e.start..e.last() + 1);
    gather_runs(h, spec, runs, &weights, &ids, sink)
}

/// No episode of the table's `episodes` can be drawn whole.
fn no_whole_episode(episodes: usize) -> Error {
    Error::InvalidSample(format!(
        "no complete episode to draw (of {episodes} episodes, each still open, partly \
             evicted or removed)"
    ))
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
fn sample_fragments<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    sink: &mut dyn Sink,
) -> Result<()> {
    // A draw that removes needs a handle that may (no rate limiter's leave here:
    // fragments are admitted as their rows are counted).
    h.ready_to_draw(spec, 0)?;
    let (mut fragments, mut weights) = (Vec::new(), Vec::new());
    draw_fragments(h, spec, &mut fragments, &mut weights)?;
    gather_runs(h, spec, fragments.into_iter(), &weights, &[], sink)
}

fn draw_fragments<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    fragments: &mut Vec<Range<u64>>,
    weights: &mut Vec<f32>,
) -> Result<()> {
    if !h.rows().superblock.fragments {
        return Err(Error::InvalidSample(format!(
            "{} does not keep fragments (create it with Config::fragments)",
            h.rows().dir.display()
        )));
    }
    fragments.clear();
    weights.clear();
    let (head, tail) = (h.rows().head, h.rows().tail);
    if tail == head {
        return Err(Error::Empty);
    }
    let table = h.fragments()?;
    let whole: Vec<Range<u64>> = table
        .iter()
        .filter(|f| f.whole(head))
        .map(Fragment::range)
        .collect();
    if whole.is_empty() {
        return Err(Error::InvalidSample(format!(
            "no whole fragment to draw among {} rows (each lost its first rows to \
                 eviction, its last rows to a kill, or a row to a removal)",
            tail - head
        )));
    }
    let runs: Vec<(u64, u64)> = whole.iter().map(|r| (r.start, r.end - r.start)).collect();
    let mut picks = Vec::with_capacity(spec.n);
    match spec.covering {
        Some(rows) => cover_units(h, &runs, rows, "fragments", &mut picks)?,
        None => {
            check_rows(spec.n, 0)?;
            draw_units(h, &runs, spec, &mut picks, weights)?;
        }
    }
    fragments.extend(picks.iter().filter_map(|&i| whole.get(i).cloned()));
    Ok(())
}

/// Distinct units of `runs` (first index, rows) in uniformly random order until
/// their rows reach `rows`, as positions in `runs`: a partial shuffle, stopped as
/// soon as the rows suffice (at least one unit is taken).
fn cover_units<H: DrawsUnits + ?Sized>(
    h: &mut H,
    runs: &[(u64, u64)],
    rows: u64,
    what: &str,
    picks: &mut Vec<usize>,
) -> Result<()> {
    let total: u64 = runs.iter().map(|r| r.1).sum();
    if total < rows {
        return Err(Error::InvalidSample(format!(
            "units covering {rows} rows, but the {} whole {what} hold {total}",
            runs.len()
        )));
    }
    let mut order: Vec<usize> = (0..runs.len()).collect();
    let mut got = 0;
    for k in 0..order.len() {
        if got >= rows && k > 0 {
            break;
        }
        let j = h.rows_mut().draws.rng.random_range(k..order.len());
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
fn sample_groups<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    sink: &mut dyn Sink,
) -> Result<()> {
    check_rows(spec.n, 0)?;
    h.ready_to_draw(spec, spec.n as u64)?;
    let (mut indices, mut offsets) = (Vec::new(), vec![0u64]);
    h.pick_groups(spec, &mut indices, &mut offsets)?;
    gather_units(h, spec, &indices, &offsets, &[], &[], sink)
}

/// Gathers every field of the units whose rows `runs` gives into `sink`, their rows
/// concatenated, with `offsets`, the units' `weights` and, for episodes, their
/// `ids`; counts the units as sampled.
fn gather_runs<H: DrawsUnits + ?Sized>(
    h: &mut H,
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
        h.rows_mut().draws.sampled += 1;
    }
    gather_units(h, spec, &indices, &offsets, weights, ids, sink)
}

/// Gathers the rows `indices` of units ending at `offsets` (after a leading 0) into
/// `sink`, with the units' `weights` and, for episodes, their `ids`; then, with item
/// states, counts each row's use or removes the units whole.
fn gather_units<H: DrawsUnits + ?Sized>(
    h: &mut H,
    spec: &Request<'_>,
    indices: &[u64],
    offsets: &[u64],
    weights: &[f32],
    ids: &[u64],
    sink: &mut dyn Sink,
) -> Result<()> {
    let units = offsets.len() - 1;
    let mut f = h.rows().open_sink(spec, units, indices.len(), sink)?;
    h.rows().gather_into(indices, &mut f.row)?;
    f.put(Own::Indices, bytemuck::cast_slice(indices));
    f.put(Own::Offsets, bytemuck::cast_slice(offsets));
    f.put(Own::Episodes, bytemuck::cast_slice(ids));
    f.put(Own::Weights, bytemuck::cast_slice(weights));
    drop(f);
    h.rows().put_values(indices, sink)?;
    h.drawn(spec, indices)
}

/// Draws `spec.n` of the units whose rows `runs` gives (first index, rows), as
/// positions in `runs`: uniformly, or by the mean leaf of their rows with
/// importance weights. Every unit's mass is computed each call, two prefix sums of
/// the tree each: O(units * depth), and no state to keep in step with adds,
/// evictions and priority updates.
fn draw_units<H: DrawsUnits + ?Sized>(
    h: &mut H,
    runs: &[(u64, u64)],
    spec: &Request<'_>,
    picks: &mut Vec<usize>,
    weights: &mut Vec<f32>,
) -> Result<()> {
    let Some(beta) = spec.beta() else {
        if spec.replace {
            let rng = &mut h.rows_mut().draws.rng;
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
            let j = h.rows_mut().draws.rng.random_range(k..order.len());
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
    let mut masses = Vec::with_capacity(runs.len());
    h.run_masses(runs, &mut masses)?;
    let mut cumulative = Vec::with_capacity(runs.len());
    let mut total = 0.0;
    let mut min = f64::INFINITY;
    for (mass, &(_, rows)) in masses.iter_mut().zip(runs) {
        *mass /= rows.max(1) as f64;
        total += *mass;
        if *mass > 0.0 {
            min = min.min(*mass);
        }
        cumulative.push(total);
    }
    if !(total > 0.0 && total.is_finite()) {
        return Err(Error::ZeroTotalPriority {
            live: runs.len() as u64,
        });
    }
    let beta32 = beta as f32;
    while picks.len() < spec.n {
        let u = h.rows_mut().draws.rng.random::<f64>() * total;
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
