//! `replaystore.ReplayBuffer` (the writer) and `replaystore.Reader` (any number of
//! other processes). Every call that touches the files runs with the GIL released.

use std::path::PathBuf;

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use replaystore::{
    Column, Config, Error, FragmentBatch, PrioritySpec, Reader, ReplayBuffer, SampleSpec, Schema,
    State, Stats, UnitSpec,
};

use crate::arrays::{self, Input};
use crate::errors::{ReadOnlyError, StateError, to_py};
use crate::schema::PySchema;

/// The key a state dict carries its bytes under, with the format they follow.
const STATE_KEY: &str = "replaystore_state";

/// Reads one field per schema field from `values` (keyword arguments or a dict),
/// refusing unknown names before anything is written.
fn inputs<'py>(schema: &Schema, values: &Bound<'py, PyDict>) -> PyResult<Vec<Input<'py>>> {
    for key in values.keys() {
        let field: String = key.extract()?;
        if schema.fields().iter().all(|f| f.name() != field) {
            return Err(to_py(Error::UnknownField {
                field,
                known: schema.names(),
            }));
        }
    }
    schema
        .fields()
        .iter()
        .map(|f| match values.get_item(f.name())? {
            Some(v) => arrays::input(f, &v),
            None => Err(to_py(Error::MissingField {
                field: f.name().to_owned(),
            })),
        })
        .collect()
}

/// Engine columns over the borrowed inputs.
fn columns<'a>(schema: &'a Schema, inputs: &'a [Input<'_>]) -> PyResult<Vec<Column<'a>>> {
    schema
        .fields()
        .iter()
        .zip(inputs)
        .map(|(f, i)| {
            Ok(Column::from_bytes(
                f.name(),
                f.dtype(),
                &i.shape,
                i.bytes()?,
            ))
        })
        .collect()
}

fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("len", s.len)?;
    d.set_item("capacity", s.capacity)?;
    d.set_item("head", s.head)?;
    d.set_item("tail", s.tail)?;
    d.set_item("added", s.added)?;
    d.set_item("evicted", s.evicted)?;
    d.set_item("cleared", s.cleared)?;
    d.set_item("sampled", s.sampled)?;
    d.set_item("bytes_on_disk", s.bytes_on_disk)?;
    d.set_item("generation", s.generation)?;
    d.set_item("priority_updates", s.priority_updates)?;
    d.set_item("stale_updates", s.stale_updates)?;
    Ok(d)
}

/// `values` as a contiguous array of `T` with NumPy dtype `descr` (a copy only when it
/// is not one already: indices and priorities are small).
fn contiguous<'py, T: numpy::Element>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    descr: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    let a = py
        .import("numpy")?
        .call_method1("ascontiguousarray", (values, descr))?;
    Ok(a.cast_into::<PyArrayDyn<T>>()
        .map_err(PyErr::from)?
        .readonly())
}

/// One new output array per field for `rows` items, filled by `fill` with the GIL
/// released.
fn filled<'py>(
    py: Python<'py>,
    schema: &Schema,
    rows: usize,
    fill: impl FnOnce(&mut [&mut [u8]]) -> replaystore::Result<()> + Send,
) -> PyResult<Vec<Bound<'py, PyArray1<u8>>>> {
    let outs: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| arrays::output(py, f, rows))
        .collect();
    let mut guards = outs.iter().map(|o| o.readwrite()).collect::<Vec<_>>();
    let mut slices = guards
        .iter_mut()
        .map(|g| g.as_slice_mut())
        .collect::<Result<Vec<&mut [u8]>, _>>()?;
    py.detach(|| fill(&mut slices)).map_err(to_py)?;
    drop(slices);
    drop(guards);
    Ok(outs)
}

/// A uniform draw of `n`, with or without replacement.
fn uniform(n: usize, replace: bool) -> SampleSpec {
    if replace {
        SampleSpec::new(n)
    } else {
        SampleSpec::new(n).without_replacement()
    }
}

/// A replay buffer in the folder `path`, opened by the one process that writes it.
///
/// Create it with `ReplayBuffer.create(path, schema, capacity)`, reopen it with
/// `ReplayBuffer.open(path)`; `with` closes it (and makes it durable).
#[pyclass(module = "replaystore", name = "ReplayBuffer")]
pub struct PyBuffer {
    inner: Option<ReplayBuffer>,
}

impl PyBuffer {
    fn buf(&mut self) -> PyResult<&mut ReplayBuffer> {
        self.inner
            .as_mut()
            .ok_or_else(|| ReadOnlyError::new_err("the buffer is closed"))
    }
}

#[pymethods]
impl PyBuffer {
    /// Creates a buffer of `capacity` items in the folder `path` (which must not exist or
    /// be empty). `alpha` makes it prioritized (new items get the largest priority seen);
    /// `fragments=True` remembers each `add` / `add_batch` call as one unit for
    /// `sample_fragments` (RLlib's fragments, sequences and episodes).
    #[staticmethod]
    #[pyo3(signature = (path, schema, capacity, *, alpha=None, eps=1e-6, seed=None, segment_slots=None, fragments=false))]
    #[expect(
        clippy::too_many_arguments,
        reason = "Python keyword arguments, each a Config option"
    )]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        schema: &Bound<'_, PyAny>,
        capacity: u64,
        alpha: Option<f64>,
        eps: f64,
        seed: Option<u64>,
        segment_slots: Option<u64>,
        fragments: bool,
    ) -> PyResult<PyBuffer> {
        let schema = PySchema::from_py(schema)?.inner;
        let mut config = Config::new(schema, capacity);
        if fragments {
            config = config.fragments();
        }
        if let Some(a) = alpha {
            config = config.prioritized(a, eps);
        }
        if let Some(s) = seed {
            config = config.seed(s);
        }
        if let Some(s) = segment_slots {
            config = config.segment_slots(s);
        }
        let buf = py
            .detach(|| ReplayBuffer::create(path, config))
            .map_err(to_py)?;
        Ok(PyBuffer { inner: Some(buf) })
    }

    /// Opens the buffer in `path` for writing; `actor=True` adds beside a priority owner
    /// (Ape-X) without touching the priorities.
    #[staticmethod]
    #[pyo3(signature = (path, *, actor=false))]
    fn open(py: Python<'_>, path: PathBuf, actor: bool) -> PyResult<PyBuffer> {
        let buf = py
            .detach(|| {
                if actor {
                    ReplayBuffer::open_actor(path)
                } else {
                    ReplayBuffer::open(path)
                }
            })
            .map_err(to_py)?;
        Ok(PyBuffer { inner: Some(buf) })
    }

    /// Adds one item: `buf.add(obs=o, action=a, reward=1.0, done=False)`. Returns its
    /// index.
    #[pyo3(signature = (**fields))]
    fn add(&mut self, py: Python<'_>, fields: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
        let empty = PyDict::new(py);
        let fields = fields.unwrap_or(&empty);
        let buf = self.buf()?;
        let schema = buf.schema().clone();
        let inputs = inputs(&schema, fields)?;
        let cols = columns(&schema, &inputs)?;
        py.detach(|| buf.add(&cols)).map_err(to_py)
    }

    /// Adds `n` items from a dict of arrays with the batch dimension first
    /// (`{"obs": (n, 17) float32, ...}`), with their initial `priorities` if given
    /// (otherwise the largest seen). Every array is checked before anything is written.
    /// Returns the new items' indices.
    #[pyo3(signature = (batch, *, priorities=None))]
    fn add_batch<'py>(
        &mut self,
        py: Python<'py>,
        batch: &Bound<'py, PyDict>,
        priorities: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let priorities = priorities
            .map(|p| contiguous::<f64>(py, p, "<f8"))
            .transpose()?;
        let buf = self.buf()?;
        let schema = buf.schema().clone();
        let inputs = inputs(&schema, batch)?;
        let cols = columns(&schema, &inputs)?;
        let range = match &priorities {
            Some(p) => {
                let p = p.as_slice()?;
                py.detach(|| buf.add_batch_with_priorities(&cols, p))
            }
            None => py.detach(|| buf.add_batch(&cols)),
        }
        .map_err(to_py)?;
        Ok(PyArray1::from_vec(py, range.collect()))
    }

    /// The items at `indices` (live ones; an evicted index raises `EvictedError`), as a
    /// dict of arrays plus `indices`.
    fn get<'py>(
        &mut self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let idx = contiguous::<u64>(py, indices, "<u8")?;
        let idx = idx.as_slice()?.to_vec();
        let buf = self.buf()?;
        let schema = buf.schema().clone();
        let n = idx.len();
        let outs = filled(py, &schema, n, |slices| buf.gather_into(&idx, slices))?;
        arrays::batch_dict(py, &schema, &outs, n, idx, None)
    }

    /// Drops every item (indices go on from where they were; priorities of new items
    /// start again from the largest seen).
    fn clear(&mut self, py: Python<'_>) -> PyResult<()> {
        let buf = self.buf()?;
        py.detach(|| buf.clear()).map_err(to_py)
    }

    /// The priority new items get: the largest `priority + eps` seen so far (`None`
    /// when the buffer keeps no priorities).
    #[getter]
    fn max_priority(&mut self) -> PyResult<Option<f64>> {
        Ok(self.buf()?.priority_summary().map(|s| s.max_priority))
    }

    /// Draws `n` items: uniformly (with replacement unless `replace=False`), or by
    /// priority when `beta` is given (then `weights` holds the importance weights).
    /// Returns a dict of arrays, one per field (`[n, *shape]`), plus `indices`.
    /// `seed` restarts the sampling RNG first, for a repeatable draw.
    #[pyo3(signature = (n, *, beta=None, seed=None, replace=true))]
    fn sample<'py>(
        &mut self,
        py: Python<'py>,
        n: usize,
        beta: Option<f64>,
        seed: Option<u64>,
        replace: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let buf = self.buf()?;
        if let Some(s) = seed {
            buf.reseed(s);
        }
        let schema = buf.schema().clone();
        let mut indices = vec![0u64; n];
        let mut weights = beta.map(|_| vec![0f32; n]);
        let outs = filled(py, &schema, n, |slices| {
            match (beta, weights.as_mut()) {
                (Some(b), Some(w)) => {
                    buf.draw_prioritized(&PrioritySpec::new(n, b), &mut indices, w)?
                }
                _ => buf.draw_indices(&uniform(n, replace), &mut indices)?,
            }
            buf.gather_into(&indices, slices)
        })?;
        arrays::batch_dict(py, &schema, &outs, n, indices, weights)
    }

    /// Draws `n` whole fragments (the rows of one `add_batch` call each; never one that
    /// eviction has cut): uniformly, or by the mean priority of their rows with `beta`.
    /// Returns the rows concatenated (one array per field, plus `indices`), `offsets`
    /// (fragment `i` is rows `offsets[i]:offsets[i+1]`) and, with `beta`, one weight per
    /// fragment in `weights`.
    #[pyo3(signature = (n, *, beta=None, seed=None))]
    fn sample_fragments<'py>(
        &mut self,
        py: Python<'py>,
        n: usize,
        beta: Option<f64>,
        seed: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let buf = self.buf()?;
        if let Some(s) = seed {
            buf.reseed(s);
        }
        let schema = buf.schema().clone();
        let mut out = FragmentBatch::new(&schema);
        let spec = match beta {
            Some(b) => UnitSpec::new(n).prioritized(b),
            None => UnitSpec::new(n),
        };
        py.detach(|| buf.sample_fragments_into(&spec, &mut out))
            .map_err(to_py)?;
        let rows = out.rows();
        let outs: Vec<_> = rows
            .fields()
            .iter()
            .map(|f| PyArray1::from_slice(py, f.bytes()))
            .collect();
        let weights = beta.map(|_| out.weights().to_vec());
        let d = arrays::batch_dict(
            py,
            &schema,
            &outs,
            rows.len(),
            rows.indices().to_vec(),
            weights,
        )?;
        let offsets: Vec<u64> = out.offsets().iter().map(|&o| o as u64).collect();
        d.set_item("offsets", PyArray1::from_vec(py, offsets))?;
        Ok(d)
    }

    /// Sets the priorities of the items at `indices` (typically |TD error|). Items
    /// evicted since they were sampled are skipped and counted. Returns
    /// `{"applied": .., "stale": ..}`.
    fn update_priorities<'py>(
        &mut self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        priorities: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let idx = contiguous::<u64>(py, indices, "<u8")?;
        let pr = contiguous::<f64>(py, priorities, "<f8")?;
        let (idx, pr) = (idx.as_slice()?, pr.as_slice()?);
        let buf = self.buf()?;
        let done = py
            .detach(|| buf.update_priorities(idx, pr))
            .map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("applied", done.applied)?;
        d.set_item("stale", done.stale)?;
        Ok(d)
    }

    /// A checkpoint of the buffer as it is now, in milliseconds whatever its size: a
    /// small picklable dict (`torch.save` it with the model). The buffer may run ahead
    /// afterwards; `set_state` brings it back.
    fn get_state<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let buf = self.buf()?;
        let state = py.detach(|| buf.get_state()).map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item(STATE_KEY, PyBytes::new(py, &state.to_bytes()))?;
        d.set_item("name", &state.name)?;
        d.set_item("path", buf.dir().to_string_lossy())?;
        d.set_item("len", state.tail - state.head)?;
        d.set_item("generation", state.generation)?;
        Ok(d)
    }

    /// Puts the buffer back to a state from `get_state`: the same items, priorities,
    /// counters and RNG position.
    fn set_state(&mut self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes: Vec<u8> = match state.cast::<PyDict>() {
            Ok(d) => d
                .get_item(STATE_KEY)?
                .ok_or_else(|| {
                    StateError::new_err(format!("not a replaystore state: no {STATE_KEY:?} key"))
                })?
                .extract()?,
            Err(_) => state.extract()?,
        };
        let state = State::from_bytes(&bytes).map_err(to_py)?;
        let buf = self.buf()?;
        py.detach(|| buf.set_state(&state)).map_err(to_py)
    }

    /// Counters and sizes: len, capacity, head, tail, added, evicted, sampled, ...
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.buf()?.stats();
        stats_dict(py, &s)
    }

    /// Makes everything added so far survive power loss (a kill -9 loses nothing
    /// acknowledged even without it).
    fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        let buf = self.buf()?;
        py.detach(|| buf.flush()).map_err(to_py)
    }

    /// Flushes and closes; the buffer then refuses every call. Closing twice is fine.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.inner.take() {
            Some(buf) => py.detach(|| buf.close()).map_err(to_py),
            None => Ok(()),
        }
    }

    /// The schema.
    #[getter]
    fn schema(&mut self) -> PyResult<PySchema> {
        Ok(PySchema {
            inner: self.buf()?.schema().clone(),
        })
    }

    /// The buffer's folder.
    #[getter]
    fn path(&mut self) -> PyResult<PathBuf> {
        Ok(self.buf()?.dir().to_path_buf())
    }

    /// Items the ring holds.
    #[getter]
    fn capacity(&mut self) -> PyResult<u64> {
        Ok(self.buf()?.capacity())
    }

    fn __len__(&mut self) -> PyResult<usize> {
        Ok(self.buf()?.len() as usize)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        _args: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &self.inner {
            Some(b) => format!(
                "ReplayBuffer({:?}, {} / {} items)",
                b.dir().display().to_string(),
                b.len(),
                b.capacity()
            ),
            None => "ReplayBuffer(closed)".into(),
        }
    }
}

/// A read-only view of a buffer that another process writes: any number of readers
/// sample the same files (one copy in the page cache); a reader takes no lock and
/// writes nothing. Open one in each data-loader worker rather than pickling a buffer.
#[pyclass(module = "replaystore", name = "Reader")]
pub struct PyReader {
    inner: Reader,
}

#[pymethods]
impl PyReader {
    /// Opens the buffer in `path` (or its snapshot `snapshot`) for reading.
    #[staticmethod]
    #[pyo3(signature = (path, *, snapshot=None))]
    fn open(py: Python<'_>, path: PathBuf, snapshot: Option<String>) -> PyResult<PyReader> {
        let inner = py
            .detach(|| match &snapshot {
                Some(name) => Reader::open_snapshot(&path, name),
                None => Reader::open(&path),
            })
            .map_err(to_py)?;
        Ok(PyReader { inner })
    }

    /// Draws `n` of the items live now, as `ReplayBuffer.sample` does.
    #[pyo3(signature = (n, *, beta=None, seed=None, replace=true))]
    fn sample<'py>(
        &mut self,
        py: Python<'py>,
        n: usize,
        beta: Option<f64>,
        seed: Option<u64>,
        replace: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        if let Some(s) = seed {
            self.inner.reseed(s);
        }
        let schema = self.inner.schema().clone();
        let reader = &mut self.inner;
        let mut indices = vec![0u64; n];
        let mut weights = beta.map(|_| vec![0f32; n]);
        // The reader re-draws an item the writer overwrites mid-copy, straight into
        // these arrays: no batch in between.
        let outs = filled(py, &schema, n, |slices| match (beta, weights.as_mut()) {
            (Some(b), Some(w)) => {
                reader.sample_prioritized_fill(&PrioritySpec::new(n, b), &mut indices, w, slices)
            }
            _ => reader.sample_fill(&uniform(n, replace), &mut indices, slices),
        })?;
        arrays::batch_dict(py, &schema, &outs, n, indices, weights)
    }

    /// Items live now.
    fn __len__(&mut self, py: Python<'_>) -> PyResult<usize> {
        let reader = &mut self.inner;
        py.detach(|| reader.refresh()).map_err(to_py)?;
        Ok(reader.len() as usize)
    }

    /// Counters and sizes as the reader sees them.
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats().map_err(to_py)?;
        stats_dict(py, &s)
    }

    /// The schema.
    #[getter]
    fn schema(&self) -> PySchema {
        PySchema {
            inner: self.inner.schema().clone(),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        false
    }
}
