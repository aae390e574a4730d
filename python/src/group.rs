//! The Python `BufferGroup`: named member buffers in one folder (one per policy or
//! player), created by their first add, sampled one by one, all at once or in lockstep,
//! and checkpointed as one (see the engine's `BufferGroup`).

use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use replaystore::{BufferGroup, Config, GroupRequest, GroupState, Reader, ReplayBuffer, State};

use crate::arrays::NumpySink;
use crate::calls::*;
use crate::draws::{Asked, PyRequest};
use crate::errors::{ClosedError, ReadOnlyError, StateError, to_py};
use crate::reader::reopen_later;
use crate::schema::PySchema;
use crate::shared::Shared;

/// A group opened for writing, or for reading.
enum Opened {
    Writer(BufferGroup<ReplayBuffer>),
    Reader(BufferGroup<Reader>),
}

/// Runs `$body` with `$g` bound to the group, however it was opened.
macro_rules! any_group {
    ($opened:expr, $g:ident => $body:expr) => {
        match $opened {
            Opened::Writer($g) => $body,
            Opened::Reader($g) => $body,
        }
    };
}

/// Named member buffers in one folder, each created by its first `add` (with the
/// group's template: `create(path, schema, capacity, **options)`) or by `add_member`
/// (with a schema and options of its own), checkpointed as one: `get_state` /
/// `set_state` take or restore every member at once, and a kill in between leaves all
/// members at the old state or all at the new (RLlib's `MultiAgentReplayBuffer`, with
/// one buffer per policy id).
#[pyclass(module = "replaystore", name = "BufferGroup", frozen)]
pub struct PyGroup {
    /// Taken by each call in turn (see `shared`); `None` once closed.
    inner: Shared<Option<Opened>>,
    /// Rounds the counts of `sample(replay_ratio=)` as RLlib's MixIn does: the
    /// engine's mixed draw takes exact counts. Seeded by the template's `seed`, and by
    /// a draw's `seed=` as the members' RNGs are.
    mix: std::sync::Mutex<ChaCha8Rng>,
}

/// A mixing RNG from `seed`, or from the OS without one.
fn mix_rng(seed: Option<u64>) -> std::sync::Mutex<ChaCha8Rng> {
    std::sync::Mutex::new(match seed {
        Some(s) => ChaCha8Rng::seed_from_u64(s),
        None => rand::make_rng(),
    })
}

/// RLlib's `MultiAgentMixInReplayBuffer` counts for a draw of `n` at `ratio` from a
/// member with `pending` items not yet returned by a mixed draw and `held` items in
/// all: how many new items to take and how many to replay, each share rounded up or
/// down at random so that its mean is exact (RLlib's `round_up_or_down`); `(0, 0)` when
/// RLlib returns nothing (nothing new below ratio 1, an empty member above ratio 0).
fn mix_counts(
    rng: &mut ChaCha8Rng,
    n: usize,
    ratio: f64,
    (pending, held): (u64, u64),
) -> (usize, usize) {
    let mut round = |x: f64| {
        let floor = x.floor();
        (floor + f64::from(u8::from(rng.random::<f64>() < x - floor))) as usize
    };
    let max_new = round(n as f64 * (1.0 - ratio));
    let new = max_new.min(usize::try_from(pending).unwrap_or(usize::MAX));
    let replayed = match ratio {
        r if r <= 0.0 => 0,
        r if r >= 1.0 => n,
        r if (new as f64 - n as f64 * (1.0 - r)).abs() < 1e-9 => n - max_new,
        r => (n - max_new).min(round(new as f64 * r / (1.0 - r))),
    };
    match held == 0 && ratio > 0.0 || new == 0 && ratio < 1.0 {
        true => (0, 0),
        false => (new, replayed),
    }
}

fn opened(held: &mut Option<Opened>) -> PyResult<&mut Opened> {
    held.as_mut()
        .ok_or_else(|| ClosedError::new_err("the group is closed"))
}

fn writer(held: &mut Option<Opened>) -> PyResult<&mut BufferGroup<ReplayBuffer>> {
    match opened(held)? {
        Opened::Writer(w) => Ok(w),
        Opened::Reader(r) => Err(ReadOnlyError::new_err(format!(
            "{}: opened with reader=True, which never writes",
            r.dir().display()
        ))),
    }
}

/// The keywords a member's configuration takes (as `ReplayBuffer.create`'s).
const OPTIONS: &[&str] = &[
    "alpha",
    "eps",
    "seed",
    "segment_slots",
    "episodic",
    "whole_episodes",
    "fragments",
    "heap_bytes",
    "chunk_bytes",
    "item_states",
    "max_use",
    "max_size",
    "reservoir",
    "min_size_to_sample",
    "samples_per_insert",
    "error_buffer",
];

/// A member's configuration from a schema, a capacity and `ReplayBuffer.create`'s
/// keywords; an unknown keyword is a `TypeError`, as Python's own calls say.
fn member_config(
    schema: &Bound<'_, PyAny>,
    capacity: u64,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Config> {
    let empty = PyDict::new(schema.py());
    let options = options.unwrap_or(&empty);
    for key in options.keys() {
        let key: String = key.extract()?;
        if !OPTIONS.contains(&key.as_str()) {
            return Err(PyTypeError::new_err(format!(
                "unexpected keyword argument {key:?} (a member takes {})",
                OPTIONS.join(", ")
            )));
        }
    }
    fn get<T>(d: &Bound<'_, PyDict>, k: &str) -> PyResult<Option<T>>
    where
        T: for<'a, 'py> FromPyObject<'a, 'py>,
    {
        match d.get_item(k)? {
            Some(v) if !v.is_none() => v.extract::<T>().map(Some).map_err(Into::into),
            _ => Ok(None),
        }
    }
    let flag = |k: &str| get::<bool>(options, k).map(|v| v.unwrap_or(false));
    let schema = PySchema::from_py(schema)?.inner;
    let eps = get::<f64>(options, "eps")?.unwrap_or(1e-6);
    let mut c = config(
        schema,
        capacity,
        get(options, "alpha")?,
        eps,
        get(options, "seed")?,
        get(options, "segment_slots")?,
    );
    c = LifeArgs {
        item_states: flag("item_states")?,
        max_use: get(options, "max_use")?,
        max_size: get(options, "max_size")?,
        reservoir: get(options, "reservoir")?,
        min_size_to_sample: get(options, "min_size_to_sample")?,
        samples_per_insert: get(options, "samples_per_insert")?,
        error_buffer: get(options, "error_buffer")?,
    }
    .apply(c)?;
    if flag("episodic")? {
        c = c.episodic();
    }
    if flag("whole_episodes")? {
        c = c.whole_episodes();
    }
    if flag("fragments")? {
        c = c.fragments();
    }
    if let Some(b) = get::<u64>(options, "heap_bytes")? {
        c = c.heap_bytes(b);
    }
    if let Some(b) = get::<u64>(options, "chunk_bytes")? {
        c = c.chunk_bytes(b);
    }
    Ok(c)
}

impl PyGroup {
    /// The schema of member `member`, created with the template if new. The lock is let
    /// go before the caller converts its arrays: no Python runs while other threads
    /// wait for the group.
    /// `draw(group, name, sink)` from `member`, or `{name: batch}` from every member
    /// without one (text values as lists).
    fn draw_members<'py>(
        &self,
        py: Python<'py>,
        member: Option<&str>,
        seed: Option<u64>,
        draw: impl Fn(&mut Opened, &str, &mut dyn replaystore::Sink) -> replaystore::Result<()> + Sync,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut held = self.inner.lock(py);
        let g = opened(&mut held)?;
        if let Some(s) = seed {
            any_group!(g, g => g.reseed(s));
        }
        let names: Vec<String> = match member {
            Some(m) => vec![m.to_owned()],
            None => any_group!(g, g => g.members().iter().map(|s| s.to_string()).collect()),
        };
        let out = PyDict::new(py);
        for name in &names {
            let d = draw_values(py, None, "list", 0.0, |sink| draw(g, name, sink))?;
            if member.is_some() {
                return Ok(d.into_any());
            }
            out.set_item(name, d)?;
        }
        Ok(out.into_any())
    }

    /// `member`'s schema and the most bytes of variable-length values one of its adds
    /// can bring (created from the template if new).
    fn member_schema(&self, py: Python<'_>, member: &str) -> PyResult<(replaystore::Schema, u64)> {
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        let m = py.detach(|| w.member_or_create(member)).map_err(to_py)?;
        Ok((m.schema().clone(), m.value_room()))
    }
}

#[pymethods]
impl PyGroup {
    /// Refuses, naming the class methods that make a `BufferGroup`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        Err(crate::errors::no_constructor(
            "BufferGroup",
            "BufferGroup.create(path, schema, capacity, ...) or BufferGroup.open(path)",
        ))
    }

    /// Creates an empty group in `path`. With `schema` and `capacity` (and any of
    /// `ReplayBuffer.create`'s keywords), that is the template a member gets when its
    /// first `add` creates it; without, members are made by `add_member` only.
    #[staticmethod]
    #[pyo3(signature = (path, schema=None, capacity=None, **options))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        schema: Option<&Bound<'_, PyAny>>,
        capacity: Option<u64>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyGroup> {
        let seed: Option<u64> = match options {
            Some(o) => (o.get_item("seed")?)
                .filter(|s| !s.is_none())
                .map(|s| s.extract())
                .transpose()?,
            None => None,
        };
        let template = match (schema, capacity) {
            (Some(s), Some(c)) => Some(member_config(s, c, options)?),
            (None, None) if options.is_none_or(|o| o.is_empty()) => None,
            _ => {
                return Err(PyValueError::new_err(
                    "a template needs both schema and capacity (or neither, and add_member \
                     for each member)",
                ));
            }
        };
        let made = py
            .detach(|| BufferGroup::create(path, template))
            .map_err(to_py)?;
        Ok(PyGroup {
            inner: Shared::new(Some(Opened::Writer(made))),
            mix: mix_rng(seed),
        })
    }

    /// Opens the group in `path` for writing (one process), or with `reader=True` for
    /// sampling only (any number of processes, no lock; `refresh()` sees members
    /// created since).
    #[staticmethod]
    #[pyo3(signature = (path, *, reader=false))]
    fn open(py: Python<'_>, path: PathBuf, reader: bool) -> PyResult<PyGroup> {
        // Absolute, so that a pickled reader reopens these files from any directory.
        let path = std::path::absolute(&path)?;
        let opened = py
            .detach(|| match reader {
                true => BufferGroup::open_reader(path).map(Opened::Reader),
                false => BufferGroup::open(path).map(Opened::Writer),
            })
            .map_err(to_py)?;
        Ok(PyGroup {
            inner: Shared::new(Some(opened)),
            mix: mix_rng(None),
        })
    }

    /// Pickles a reader as its path, reopened where it is unpickled; refuses for the
    /// writer, which holds the group's locks.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, ())> {
        let py = slf.py();
        match &*slf.get().inner.lock(py) {
            Some(Opened::Reader(r)) => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("reader", true)?;
                let open = slf.get_type().getattr("open")?;
                reopen_later(py, open, r.dir().to_path_buf(), &kwargs)
            }
            Some(Opened::Writer(w)) => Err(PyTypeError::new_err(format!(
                "the BufferGroup writing {} cannot be pickled: it holds the group's locks. Give \
                 a worker replaystore.BufferGroup.open(path, reader=True) instead",
                w.dir().display()
            ))),
            None => Err(PyTypeError::new_err(
                "a closed BufferGroup cannot be pickled",
            )),
        }
    }

    /// Creates member `member` with `schema`, `capacity` and `ReplayBuffer.create`'s
    /// keywords (or the group's template, given neither).
    #[pyo3(signature = (member, schema=None, capacity=None, **options))]
    fn add_member(
        &self,
        py: Python<'_>,
        member: &str,
        schema: Option<&Bound<'_, PyAny>>,
        capacity: Option<u64>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let config = match (schema, capacity) {
            (Some(s), Some(c)) => Some(member_config(s, c, options)?),
            (None, None) => None,
            _ => {
                return Err(PyValueError::new_err(
                    "a member's config needs schema and capacity",
                ));
            }
        };
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.add_member(member, config).map(drop))
            .map_err(to_py)
    }

    /// Adds one item to `member` (created by this add if new); returns its index.
    #[pyo3(signature = (member, **fields))]
    fn add(
        &self,
        py: Python<'_>,
        member: &str,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let empty = PyDict::new(py);
        let fields = fields.unwrap_or(&empty);
        let (schema, room) = self.member_schema(py, member)?;
        let inputs = inputs(&schema, fields, true)?;
        let var = var_inputs(&schema, fields, false, false, room)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.add(member, &cols)).map_err(to_py)
    }

    /// Adds a batch (a dict of arrays, batch dimension first) to `member` (created if
    /// new); returns the indices.
    fn add_batch<'py>(
        &self,
        py: Python<'py>,
        member: &str,
        batch: BatchDict<'py>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let batch = &batch.0;
        let (schema, room) = self.member_schema(py, member)?;
        let inputs = inputs(&schema, batch, true)?;
        let var = var_inputs(&schema, batch, true, false, room)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        let range = py.detach(|| w.add_batch(member, &cols)).map_err(to_py)?;
        Ok(PyArray1::from_vec(py, range.collect()))
    }

    /// Adds a whole episode to `member` (an episodic one; created with the template if
    /// new), as `ReplayBuffer.add_episode`: observation fields with one row more than
    /// the step fields. Returns the episode's record.
    #[pyo3(signature = (member, batch, *, terminated=false, truncated=false))]
    fn add_episode<'py>(
        &self,
        py: Python<'py>,
        member: &str,
        batch: &Bound<'py, PyDict>,
        terminated: bool,
        truncated: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (schema, room) = self.member_schema(py, member)?;
        let inputs = inputs(&schema, batch, false)?;
        // One value per row: the observations' T + 1, the steps' T.
        let var = var_inputs(&schema, batch, true, false, room)?;
        let cols = columns(&inputs, &var)?;
        let (obs, steps) = split_episode(cols);
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        let e = py
            .detach(|| {
                let m = w.member_mut(member)?;
                m.add_episode(&obs, &steps, terminated, truncated)
            })
            .map_err(to_py)?;
        crate::units::episode_dict(py, &e)
    }

    /// The member names, in the order they were created.
    #[getter]
    fn members(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let held = &mut self.inner.lock(py);
        let names =
            any_group!(opened(held)?, g => g.members().iter().map(|s| s.to_string()).collect());
        Ok(names)
    }

    /// Draws `n` items from `member` (RLlib's `sample(n, policy_id=...)`): uniformly
    /// (distinct with `replace=False`) or by priority with `beta`. Without `member`,
    /// `n` from every member: `{name: batch}` (RLlib's independent mode). With
    /// `replay_ratio`, RLlib's `MultiAgentMixInReplayBuffer`: the items added since
    /// this handle's last such draw, oldest first, up to `n * (1 - replay_ratio)`, then
    /// replayed ones to make up that share: by priority with `beta` (the new items
    /// weighted 1, the replayed ones by importance).
    #[pyo3(signature = (n, member=None, *, beta=None, seed=None, replace=true, replay_ratio=None))]
    #[expect(
        clippy::too_many_arguments,
        reason = "Python keyword arguments, each an option of a draw"
    )]
    fn sample<'py>(
        &self,
        py: Python<'py>,
        n: Asked<'py>,
        member: Option<&str>,
        beta: Option<f64>,
        seed: Option<u64>,
        replace: bool,
        replay_ratio: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let set = [
            ("beta", beta.is_some()),
            ("replace", !replace),
            ("replay_ratio", replay_ratio.is_some()),
        ];
        let asked = n.request(&set, |n| PyRequest::rows(n, beta, replace, false, None))?;
        let asked = asked.get();
        let Some(r) = replay_ratio else {
            return asked.with(None, |request| {
                self.draw_members(
                    py,
                    member,
                    seed,
                    |g, name, sink| any_group!(g, g => g.sample_into((name, request), &mut [sink])),
                )
            })?;
        };
        let n = asked.n().unwrap_or(0);
        if !(0.0..=1.0).contains(&r) {
            return Err(to_py(replaystore::Error::InvalidSample(format!(
                "replay_ratio={r} is not in 0..=1"
            ))));
        }
        // Taken inside each member's draw, where the group is held: a mixing RNG
        // poisoned by a panic elsewhere still rounds.
        let mix = || {
            self.mix
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(s) = seed {
            *mix() = ChaCha8Rng::seed_from_u64(s);
        }
        self.draw_members(py, member, seed, |g, name, sink| {
            any_group!(g, g => {
                let pending = g.new_items(name)?;
                let held = g.member(name)?.len();
                let (new, replayed) = mix_counts(&mut mix(), n, r, (pending, held));
                let mixed = GroupRequest::mixed(name, new, replayed);
                match beta {
                    Some(b) => g.sample_into(mixed.prioritized(b), &mut [sink]),
                    None => g.sample_into(mixed, &mut [sink]),
                }
            })
        })
    }

    /// Draws `n` joint steps from every member in lockstep (RLlib's
    /// `replay_mode="lockstep"`): the same positions, counted back from each member's
    /// newest row, so row `i` of every batch is one joint step when the members are
    /// added to in step. Returns `{name: batch}`.
    #[pyo3(signature = (n, *, seed=None))]
    fn sample_lockstep<'py>(
        &self,
        py: Python<'py>,
        n: Count,
        seed: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let n = n.get();
        let mut held = self.inner.lock(py);
        let g = opened(&mut held)?;
        let names: Vec<String> =
            any_group!(g, g => g.members().iter().map(|s| s.to_string()).collect());
        let mut sinks: Vec<NumpySink> = names.iter().map(|_| NumpySink::default()).collect();
        py.detach(|| {
            let mut refs: Vec<&mut dyn replaystore::Sink> = sinks
                .iter_mut()
                .map(|s| s as &mut dyn replaystore::Sink)
                .collect();
            any_group!(g, g => {
                if let Some(s) = seed {
                    g.reseed(s);
                }
                g.sample_into(GroupRequest::lockstep(n), &mut refs)
            })
        })
        .map_err(to_py)?;
        let out = PyDict::new(py);
        for (name, sink) in names.iter().zip(sinks) {
            out.set_item(name, sink.into_dict(py)?)?;
        }
        Ok(out)
    }

    /// Each member's counters: `{name: stats}`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let all = any_group!(opened(&mut self.inner.lock(py))?, g => g.stats()).map_err(to_py)?;
        let out = PyDict::new(py);
        for (name, s) in &all {
            out.set_item(name, stats_dict(py, s)?)?;
        }
        Ok(out)
    }

    /// Sets the priorities of member `member`'s items at `indices` (RLlib's
    /// `update_priorities({policy_id: (indices, td_errors)})`, one member per call).
    /// Items evicted since they were drawn are skipped and counted. Returns
    /// `{"applied": .., "stale": ..}`.
    fn update_priorities<'py>(
        &self,
        py: Python<'py>,
        member: &str,
        indices: &Bound<'py, PyAny>,
        priorities: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        update_from_py(py, indices, priorities, |idx, pr| {
            let mut held = self.inner.lock(py);
            let m = writer(&mut held)?.member_mut(member).map_err(to_py)?;
            py.detach(|| m.update_priorities(idx, pr)).map_err(to_py)
        })
    }

    /// Items member `member` holds.
    fn member_len(&self, py: Python<'_>, member: &str) -> PyResult<u64> {
        let mut held = self.inner.lock(py);
        let stats = any_group!(opened(&mut held)?, g => g.stats()).map_err(to_py)?;
        match stats.iter().find(|(n, _)| n == member) {
            Some((_, s)) => Ok(s.len),
            None => Err(pyo3::exceptions::PyKeyError::new_err(member.to_owned())),
        }
    }

    /// Looks at the group again: a reader opens the members created since.
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        match opened(&mut self.inner.lock(py))? {
            Opened::Reader(r) => py.detach(|| r.refresh()).map_err(to_py),
            Opened::Writer(_) => Ok(()),
        }
    }

    /// Checkpoints every member at once; returns a picklable dict (`name`, `path`,
    /// `members`: each member's state bytes by name) for `set_state`.
    #[pyo3(signature = (name=None))]
    fn get_state<'py>(&self, py: Python<'py>, name: Option<&str>) -> PyResult<Bound<'py, PyDict>> {
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        let state = py
            .detach(|| match name {
                Some(n) => w.get_state_named(n),
                None => w.get_state(),
            })
            .map_err(to_py)?;
        let members = PyDict::new(py);
        for (m, s) in &state.members {
            members.set_item(m, PyBytes::new(py, &s.to_bytes()))?;
        }
        let d = PyDict::new(py);
        d.set_item("name", &state.name)?;
        d.set_item("path", w.dir().to_string_lossy())?;
        d.set_item("members", members)?;
        Ok(d)
    }

    /// Puts every member back to a state from `get_state` (all members or none, also
    /// across a kill); members created since are emptied.
    fn set_state(&self, py: Python<'_>, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let field = |key: &str| {
            state.get_item(key)?.ok_or_else(|| {
                StateError::new_err(format!("not a replaystore group state: no {key:?} key"))
            })
        };
        let name: String = field("name")?.extract()?;
        let given = field("members")?;
        let given = given.cast::<PyDict>()?;
        let mut members = Vec::with_capacity(given.len());
        for (k, v) in given.iter() {
            let bytes: Vec<u8> = v.extract()?;
            members.push((
                k.extract::<String>()?,
                State::from_bytes(&bytes).map_err(to_py)?,
            ));
        }
        let state = GroupState { name, members };
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.set_state(&state)).map_err(to_py)
    }

    /// The group's checkpoints, oldest first.
    fn snapshots(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        writer(&mut self.inner.lock(py))?.snapshots().map_err(to_py)
    }

    /// Deletes checkpoint `name` from every member.
    fn delete_snapshot(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.delete_snapshot(name)).map_err(to_py)
    }

    /// Deletes all but the `k` newest checkpoints; returns the names deleted.
    fn keep_last(&self, py: Python<'_>, k: usize) -> PyResult<Vec<String>> {
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.keep_last(k)).map_err(to_py)
    }

    /// Makes every member's adds survive power loss.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.flush()).map_err(to_py)
    }

    /// Flushes and closes (twice is fine).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.lock(py).take();
        match taken {
            Some(Opened::Writer(w)) => py.detach(|| w.close()).map_err(to_py),
            _ => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}
