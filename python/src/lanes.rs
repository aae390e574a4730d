//! `replaystore.Lanes`: one buffer made of lanes (Tianshou's `VectorReplayBuffer`), each
//! a ring with its own writer lock, so that environments or actor processes add at once
//! and a learner samples them as one buffer. Lane `k`'s indices start at `k << 56`.

use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use replaystore::{Lanes, LanesState, PriorityOwner, Reader, ReplayBuffer, State};

use crate::buffer::PyBuffer;
use crate::calls::{
    BatchDict, Count, LifeArgs, columns, config, deprecated, get_indices, index_array, inputs,
    states_dict, stats_dict, update_from_py, value_ring, var_inputs,
};
use crate::draws::{self, Asked, Drawer, Drawing, Output, PyRequest};
use crate::errors::{ClosedError, ReadOnlyError, StateError, to_py};
use crate::held::Handle;
use crate::reader::reopen_later;
use crate::schema::PySchema;
use crate::shared::Shared;

/// The lanes, opened for writing (every lane, in this process), for reading, or as
/// the owner of their priorities (actor processes add, one per lane).
enum Opened {
    Writer(Lanes<ReplayBuffer>),
    Reader(Lanes<Reader>),
    Owner(Lanes<PriorityOwner>),
}

/// Runs `$body` with `$l` bound to the lanes, however they were opened.
macro_rules! any_lanes {
    ($opened:expr, $l:ident => $body:expr) => {
        match $opened {
            Opened::Writer($l) => $body,
            Opened::Reader($l) => $body,
            Opened::Owner($l) => $body,
        }
    };
}

/// A buffer of `lanes` rings sampled as one: `Lanes.create(path, schema, capacity,
/// lanes)` splits `capacity` evenly; `add(lane, **fields)` / `add_batch(batch, lanes)`
/// route rows to lanes; `sample`, `get` and `update_priorities` span every lane.
/// `Lanes.open(path, reader=True)` samples from another process without a lock.
#[pyclass(module = "replaystore", name = "Lanes", frozen)]
pub struct PyLanes {
    /// Taken by each call in turn (see `shared`); `None` once closed.
    inner: Shared<Option<Opened>>,
}

/// The open lanes behind a taken lock.
fn opened(held: &mut Option<Opened>) -> PyResult<&mut Opened> {
    held.as_mut()
        .ok_or_else(|| ClosedError::new_err("the lanes are closed"))
}

/// The open lanes behind a taken lock, if opened for writing.
fn writer(held: &mut Option<Opened>) -> PyResult<&mut Lanes<ReplayBuffer>> {
    match opened(held)? {
        Opened::Writer(w) => Ok(w),
        Opened::Reader(r) => Err(ReadOnlyError::new_err(format!(
            "{}: opened with reader=True, which never writes",
            r.dir().display()
        ))),
        Opened::Owner(o) => Err(ReadOnlyError::new_err(format!(
            "{}: opened with owner=True, which draws and sets priorities; the actors \
             add (Lanes.open_lane(path, k, actor=True))",
            o.dir().display()
        ))),
    }
}

/// Any kind of lanes draws rows: each lane gathers its share of the rows straight into
/// the arrays returned.
impl Drawer for PyLanes {
    fn drawing<'py>(
        &self,
        py: Python<'py>,
        seed: Option<u64>,
        _schema: bool,
        f: &mut Drawing<'_, 'py>,
    ) -> PyResult<Bound<'py, PyDict>> {
        any_lanes!(opened(&mut self.inner.lock(py))?, l => {
            if let Some(s) = seed {
                l.reseed(s);
            }
            f(None, &mut |r, sink| l.sample_into(r, sink))
        })
    }
}

#[pymethods]
impl PyLanes {
    /// Refuses, naming the class methods that make a `Lanes`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        Err(crate::errors::no_constructor(
            "Lanes",
            "Lanes.create(path, schema, capacity, lanes, ...) or Lanes.open(path)",
        ))
    }

    /// Creates `lanes` lanes of `capacity / lanes` items each (rounded up) in `path`;
    /// the options are `ReplayBuffer.create`'s, and apply to each lane: `max_size`
    /// and `reservoir` bound each lane's items, and each lane keeps its own rate
    /// limiter (a draw over lanes asks each lane for its share). With text or token
    /// fields each lane keeps its own chunk ring, of `heap_bytes / lanes` bytes.
    #[staticmethod]
    #[pyo3(signature = (path, schema, capacity, lanes, *, alpha=None, eps=1e-6, seed=None, segment_slots=None, episodic=false, heap_bytes=None, chunk_bytes=None, evict_for_room=false, item_states=false, max_use=None, max_size=None, reservoir=None, min_size_to_sample=None, samples_per_insert=None, error_buffer=None))]
    #[expect(
        clippy::too_many_arguments,
        reason = "Python keyword arguments, each a Config option"
    )]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        schema: &Bound<'_, PyAny>,
        capacity: Count,
        lanes: usize,
        alpha: Option<f64>,
        eps: f64,
        seed: Option<u64>,
        segment_slots: Option<u64>,
        episodic: bool,
        heap_bytes: Option<u64>,
        chunk_bytes: Option<u64>,
        evict_for_room: bool,
        item_states: bool,
        max_use: Option<u64>,
        max_size: Option<u64>,
        reservoir: Option<u64>,
        min_size_to_sample: Option<u64>,
        samples_per_insert: Option<f64>,
        error_buffer: Option<f64>,
    ) -> PyResult<PyLanes> {
        let capacity = capacity.0;
        let schema = PySchema::from_py(schema)?.inner;
        let life = LifeArgs {
            item_states,
            max_use,
            max_size,
            reservoir,
            min_size_to_sample,
            samples_per_insert,
            error_buffer,
        };
        let mut config = life.apply(config(schema, capacity, alpha, eps, seed, segment_slots))?;
        if episodic {
            config = config.episodic();
        }
        let config = value_ring(config, heap_bytes, chunk_bytes, evict_for_room);
        let made = py
            .detach(|| Lanes::create(path, config, lanes))
            .map_err(to_py)?;
        Ok(PyLanes {
            inner: Shared::new(Some(Opened::Writer(made))),
        })
    }

    /// Pickles a reader (`reader=True`) as its path, reopened where it is unpickled;
    /// refuses for the writer, which holds every lane's lock.
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
                "the Lanes writing {} cannot be pickled: they hold every lane's lock. Give a \
                 worker replaystore.Lanes.open(path, reader=True) instead (it pickles as its path)",
                w.dir().display()
            ))),
            Some(Opened::Owner(o)) => Err(PyTypeError::new_err(format!(
                "the Lanes owning the priorities of {} cannot be pickled: there is one owner. \
                 Give a worker replaystore.Lanes.open(path, reader=True) instead",
                o.dir().display()
            ))),
            None => Err(PyTypeError::new_err("closed Lanes cannot be pickled")),
        }
    }

    /// Opens the lanes in `path`: for writing every lane (one process), with
    /// `reader=True` for sampling only (any number of processes, no lock), or with
    /// `owner=True` as the learner of the Ape-X layout: it draws over all lanes and sets
    /// priorities while one actor process per lane adds (`open_lane(path, k,
    /// actor=True)`).
    #[staticmethod]
    #[pyo3(signature = (path, *, reader=false, owner=false))]
    fn open(py: Python<'_>, path: PathBuf, reader: bool, owner: bool) -> PyResult<PyLanes> {
        // Absolute, so that a pickled reader reopens these files from any directory.
        let path = std::path::absolute(&path)?;
        let opened = py
            .detach(|| match (reader, owner) {
                (true, true) => Err(replaystore::Error::Unsupported(
                    "reader=True and owner=True: a reader writes nothing, an owner sets \
                     priorities; open one or the other",
                )),
                (true, false) => Lanes::open_reader(path).map(Opened::Reader),
                (false, true) => Lanes::open_owner(path).map(Opened::Owner),
                (false, false) => Lanes::open(path).map(Opened::Writer),
            })
            .map_err(to_py)?;
        Ok(PyLanes {
            inner: Shared::new(Some(opened)),
        })
    }

    /// Adds one item to lane `lane`; returns its index.
    #[pyo3(signature = (lane, **fields))]
    fn add(
        &self,
        py: Python<'_>,
        lane: usize,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let empty = PyDict::new(py);
        let fields = fields.unwrap_or(&empty);
        // Converted before the lock is held for the add: no Python runs while other
        // threads wait.
        let (schema, room) = {
            let mut held = self.inner.lock(py);
            let w = writer(&mut held)?;
            let room = w.lane(lane).map_or(u64::MAX, |b| b.value_room());
            (w.schema().clone(), room)
        };
        let inputs = inputs(&schema, fields, true)?;
        let var = var_inputs(&schema, fields, false, false, room)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.add(lane, &cols)).map_err(to_py)
    }

    /// Adds row `r` of `batch` (a dict of arrays, batch dimension first) to lane
    /// `lanes[r]`; every array and lane id is checked first. Returns the indices.
    fn add_batch<'py>(
        &self,
        py: Python<'py>,
        batch: BatchDict<'py>,
        lanes: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let batch = &batch.0;
        let ids = index_array(py, lanes, "lanes")?;
        let ids: Vec<usize> = ids
            .as_slice()?
            .iter()
            .map(|&k| usize::try_from(k).unwrap_or(usize::MAX))
            .collect();
        // Converted before the lock is held for the add: no Python runs while other
        // threads wait.
        let schema = writer(&mut self.inner.lock(py))?.schema().clone();
        let inputs = inputs(&schema, batch, true)?;
        // Each lane's share of the values is held against its room by the engine.
        let var = var_inputs(&schema, batch, true, false, u64::MAX)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        let idx = py.detach(|| w.add_batch(&cols, &ids)).map_err(to_py)?;
        Ok(PyArray1::from_vec(py, idx))
    }

    /// Opens lane `lane` of the lanes in `path` for writing, as a `ReplayBuffer` of its
    /// own: each env worker or actor process owns one lane (its lock), and adds there
    /// while the others add to theirs. `actor=True` adds beside the owner of the
    /// priorities (`Lanes.open(path, owner=True)`), which gives new items their
    /// priority. Its indices are the lane's (`lane << 56` on).
    #[staticmethod]
    #[pyo3(signature = (path, lane, *, actor=false))]
    fn open_lane(py: Python<'_>, path: PathBuf, lane: usize, actor: bool) -> PyResult<PyBuffer> {
        let handle = py
            .detach(|| match actor {
                true => Lanes::open_lane_actor(path, lane).map(Handle::Actor),
                false => Lanes::open_lane(path, lane).map(Handle::Writer),
            })
            .map_err(to_py)?;
        Ok(PyBuffer::of(handle))
    }

    /// Draws `n` items over all lanes: uniformly (distinct with `replace=False`), or by
    /// priority with `beta` (then `weights`). Rows come grouped by lane. Returns a dict
    /// of arrays plus `indices`. `remove=True` draws distinct items and removes them
    /// (lanes with item states); `by_group=["env"]` draws distinct items, an even share
    /// of every group of all lanes first (UnstableBaselines' stratified strategies).
    /// `n` may be a `Request` of rows (`Request.rows`, `.at`, `.oldest`). Text and token
    /// fields come back as `values` says (`"list"`, `"padded"` with `pad`, `"flat"`).
    #[pyo3(signature = (n, *, beta=None, seed=None, replace=true, out=None, remove=false, by_group=None, values="list", pad=0.0))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature's keywords")]
    fn sample<'py>(
        &self,
        py: Python<'py>,
        n: Asked<'py>,
        beta: Option<f64>,
        seed: Option<u64>,
        replace: bool,
        out: Option<&Bound<'py, PyDict>>,
        remove: bool,
        by_group: Option<Vec<String>>,
        values: &str,
        pad: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let set = [
            ("beta", beta.is_some()),
            ("replace", !replace),
            ("remove", remove),
            ("by_group", by_group.is_some()),
        ];
        let request = n.request(&set, |n| {
            PyRequest::rows(n, beta, replace, remove, by_group)
        })?;
        draws::sample(
            py,
            self,
            request.get(),
            seed,
            &Output::values(out, values, pad),
        )
    }

    /// The items at `indices`, in whichever lanes hold them.
    fn get<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let request = PyRequest::at(py, indices, false, false, false)?;
        draws::sample(py, self, &request, None, &Output::arrays(None))
    }

    /// Sets priorities in whichever lanes hold `indices`; returns `{"applied",
    /// "stale"}`.
    fn update_priorities<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        priorities: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        update_from_py(py, indices, priorities, |idx, pr| {
            let mut held = self.inner.lock(py);
            match opened(&mut held)? {
                Opened::Writer(w) => py.detach(|| w.update_priorities(idx, pr)),
                Opened::Owner(o) => py.detach(|| o.update_priorities(idx, pr)),
                Opened::Reader(r) => {
                    return Err(ReadOnlyError::new_err(format!(
                        "{}: opened with reader=True, which never writes (open with \
                         owner=True to set priorities beside actors)",
                        r.dir().display()
                    )));
                }
            }
            .map_err(to_py)
        })
    }

    /// Removes the live items at `indices` from whichever lanes hold them; returns how
    /// many were removed now (lanes with item states).
    fn remove(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<u64> {
        let idx = get_indices(py, indices)?;
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.remove(&idx)).map_err(to_py)
    }

    /// Deprecated: `sample(n, remove=True)`, which this calls after a
    /// `DeprecationWarning`. Kept one release because the README showed it.
    #[pyo3(signature = (n, *, seed=None, out=None, by_group=None))]
    fn pop_batch<'py>(
        &self,
        py: Python<'py>,
        n: Count,
        seed: Option<u64>,
        out: Option<&Bound<'py, PyDict>>,
        by_group: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        deprecated(py, "Lanes.pop_batch(n) is sample(n, remove=True)")?;
        let n = n.get();
        self.sample(
            py,
            Asked::Count(Count(n as u64)),
            None,
            seed,
            true,
            out,
            true,
            by_group,
            "list",
            0.0,
        )
    }

    /// `{"removed", "cause", "uses"}` of the live items at `indices`, from whichever
    /// lanes hold them (as `ReplayBuffer.item_states`).
    fn item_states<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let idx = get_indices(py, indices)?;
        let mut held = self.inner.lock(py);
        let states = any_lanes!(opened(&mut held)?, l => l.item_states(&idx)).map_err(to_py)?;
        states_dict(py, &states)
    }

    /// Checkpoints every lane as one (snapshot `name`, or `gen-<n>`): O(1) in the data.
    /// Returns a picklable dict (`name`, `path`, and each lane's state bytes in
    /// `lanes`) for `set_state`. A kill leaves the snapshot in every lane or in none
    /// that the set lists.
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
        let lanes = (state.lanes.iter())
            .map(|s| PyBytes::new(py, &s.to_bytes()))
            .collect::<Vec<_>>();
        let d = PyDict::new(py);
        d.set_item("name", &state.name)?;
        d.set_item("path", w.dir().to_string_lossy())?;
        d.set_item("lanes", PyList::new(py, lanes)?)?;
        Ok(d)
    }

    /// Puts every lane back to a state from `get_state` (all lanes or none, also
    /// across a kill: the next open finishes or undoes it).
    fn set_state(&self, py: Python<'_>, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let field = |key: &str| {
            state.get_item(key)?.ok_or_else(|| {
                StateError::new_err(format!("not a replaystore lanes state: no {key:?} key"))
            })
        };
        let name: String = field("name")?.extract()?;
        let bytes: Vec<Vec<u8>> = field("lanes")?.extract()?;
        let lanes = (bytes.iter())
            .map(|b| State::from_bytes(b))
            .collect::<replaystore::Result<Vec<_>>>()
            .map_err(to_py)?;
        let state = LanesState { name, lanes };
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.set_state(&state)).map_err(to_py)
    }

    /// The names of the set's snapshots (held by every lane), oldest first.
    fn snapshots(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        writer(&mut self.inner.lock(py))?.snapshots().map_err(to_py)
    }

    /// Deletes the set's snapshot `name` from every lane.
    fn delete_snapshot(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.delete_snapshot(name)).map_err(to_py)
    }

    /// Deletes all but the `k` newest of the set's snapshots; returns the names deleted.
    fn keep_last(&self, py: Python<'_>, k: usize) -> PyResult<Vec<String>> {
        let mut held = self.inner.lock(py);
        let w = writer(&mut held)?;
        py.detach(|| w.keep_last(k)).map_err(to_py)
    }

    /// Each lane's live indices as `(start, stop)`.
    fn lane_edges<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let edges = any_lanes!(opened(&mut self.inner.lock(py))?, l => {
            l.refresh().map_err(to_py)?;
            l.lane_edges()
        });
        let pairs = edges
            .into_iter()
            .map(|e| PyTuple::new(py, [e.start, e.end]))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, pairs)
    }

    /// Lanes in the set.
    #[getter]
    fn lane_count(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(any_lanes!(opened(&mut self.inner.lock(py))?, l => l.lane_count()))
    }

    /// Items all lanes hold together.
    #[getter]
    fn capacity(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(any_lanes!(opened(&mut self.inner.lock(py))?, l => l.capacity()))
    }

    /// The schema.
    #[getter]
    fn schema(&self, py: Python<'_>) -> PyResult<PySchema> {
        let inner = any_lanes!(opened(&mut self.inner.lock(py))?, l => l.schema().clone());
        Ok(PySchema { inner })
    }

    /// Each lane's counters, as `ReplayBuffer.stats` gives them (a reader's and the
    /// owner's as they see the lanes now).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let all =
            any_lanes!(opened(&mut self.inner.lock(py))?, l => l.lane_stats()).map_err(to_py)?;
        let items = all
            .iter()
            .map(|s| stats_dict(py, s))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Makes every lane durable (see `ReplayBuffer.flush`); for the owner, every
    /// lane's priorities.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        match opened(&mut held)? {
            Opened::Owner(o) => py.detach(|| o.flush()).map_err(to_py),
            _ => {
                let w = writer(&mut held)?;
                py.detach(|| w.flush()).map_err(to_py)
            }
        }
    }

    /// Flushes (a writer, the owner) and closes every lane. Closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.lock(py).take();
        match taken {
            Some(Opened::Writer(w)) => py.detach(|| w.close()).map_err(to_py),
            Some(Opened::Owner(o)) => py.detach(|| o.close()).map_err(to_py),
            Some(Opened::Reader(_)) | None => Ok(()),
        }
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let n = any_lanes!(opened(&mut self.inner.lock(py))?, l => {
            l.refresh().map_err(to_py)?;
            l.len()
        });
        Ok(n as usize)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}
