//! The Python `Reader`: samples a buffer that a writer in another process may be
//! adding to (see the engine's `Reader`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use replaystore::{Reader, RowAccess};

use crate::errors::to_py;
use crate::schema::PySchema;
use crate::shared::Shared;

use crate::calls::*;
use crate::draws::{self, Asked, Drawer, Drawing, OutType, Output, PyRequest};

/// A read-only view of a buffer that another process writes: any number of readers
/// sample the same files (one copy in the page cache); a reader takes no lock and
/// writes nothing. Open one in each data-loader worker rather than pickling a buffer.
#[pyclass(module = "replaystore", name = "Reader", frozen)]
pub struct PyReader {
    /// Taken by each call in turn (see `shared`); `None` once closed.
    inner: Shared<Option<Reader>>,
    /// What `open` was given, so that a pickled reader reopens the same files.
    path: PathBuf,
    snapshot: Option<String>,
}

/// `functools.partial(open, path, **kwargs)` with no further arguments: what `__reduce__`
/// returns for a handle that pickles as "open these files again" (`open` pickles by
/// reference, so no row travels).
pub(crate) fn reopen_later<'py>(
    py: Python<'py>,
    open: Bound<'py, PyAny>,
    path: PathBuf,
    kwargs: &Bound<'py, PyDict>,
) -> PyResult<(Bound<'py, PyAny>, ())> {
    let partial = py.import("functools")?.getattr("partial")?;
    Ok((partial.call((open, path), Some(kwargs))?, ()))
}

impl Drawer for PyReader {
    fn drawing<'py>(
        &self,
        py: Python<'py>,
        seed: Option<u64>,
        schema: bool,
        f: &mut Drawing<'_, 'py>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut held = self.inner.lock(py);
        let reader = opened(&mut held)?;
        if let Some(s) = seed {
            reader.reseed(s);
        }
        // Cloned only for a request that names observation prefixes: the draw needs
        // the reader itself.
        let schema = schema.then(|| reader.schema().clone());
        // The reader re-draws an item the writer overwrites mid-copy, straight into
        // the arrays returned: no batch in between.
        f(schema.as_ref(), &mut |r, sink| reader.sample_into(r, sink))
    }
}

#[pymethods]
impl PyReader {
    /// Refuses, naming the class methods that make a `Reader`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        Err(crate::errors::no_constructor(
            "Reader",
            "Reader.open(path) (any number of processes; the writer keeps adding)",
        ))
    }

    /// Opens the buffer in `path` (or its snapshot `snapshot`) for reading. With
    /// `pread=True` rows are copied out with pread instead of through the shared
    /// mappings: the process's resident memory then stays flat however much of the
    /// buffer it samples (mapped pages count in RSS although every process shares them),
    /// for a system call or two more per row.
    #[staticmethod]
    #[pyo3(signature = (path, *, snapshot=None, pread=false))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        snapshot: Option<String>,
        pread: bool,
    ) -> PyResult<PyReader> {
        // Absolute, so that a worker with another working directory reopens these files.
        let path = std::path::absolute(&path)?;
        let inner = py
            .detach(|| {
                let mut reader = match &snapshot {
                    Some(name) => Reader::open_snapshot(&path, name),
                    None => Reader::open(&path),
                }?;
                if pread {
                    reader.set_row_access(RowAccess::Pread)?;
                }
                Ok(reader)
            })
            .map_err(to_py)?;
        Ok(PyReader {
            inner: Shared::new(Some(inner)),
            path,
            snapshot,
        })
    }

    /// Pickles as its path and options: the process that unpickles it opens the same
    /// files (a data-loader worker, a `multiprocessing` child), with a sampling RNG of
    /// its own; no row is copied.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, ())> {
        let py = slf.py();
        let me = slf.borrow();
        let kwargs = PyDict::new(py);
        kwargs.set_item("snapshot", me.snapshot.clone())?;
        kwargs.set_item("pread", me.pread(py)?)?;
        let open = slf.get_type().getattr("open")?;
        reopen_later(py, open, me.path.clone(), &kwargs)
    }

    /// Whether rows are copied out with pread (see `open`).
    #[getter]
    fn pread(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(opened(&mut self.inner.lock(py))?.row_access() == RowAccess::Pread)
    }

    /// Whether every read checks each sealed item against its checksum (default True;
    /// see `ReplayBuffer.read_checks`). A pickled reader reopens with the checks on.
    #[getter]
    fn read_checks(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(opened(&mut self.inner.lock(py))?.read_checks())
    }

    #[setter]
    fn set_read_checks(&self, py: Python<'_>, on: bool) -> PyResult<()> {
        opened(&mut self.inner.lock(py))?.set_read_checks(on);
        Ok(())
    }

    /// Draws `n` of the items live now, as `ReplayBuffer.sample` does (never a removed
    /// one); `by_group=["env_id"]` draws distinct items, an even share of every group
    /// first; `out_type` as `ReplayBuffer.sample` takes it.
    /// `n` may be a `Request` of any unit, as `ReplayBuffer.sample` takes (a reader
    /// removes nothing: remove through the writer).
    #[pyo3(signature = (n, *, beta=None, seed=None, replace=true, out=None, values="list", pad=0.0, by_group=None, nested=false, out_type="numpy"))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature's keywords")]
    fn sample<'py>(
        &self,
        py: Python<'py>,
        n: Asked<'py>,
        beta: Option<f64>,
        seed: Option<u64>,
        replace: bool,
        out: Option<&Bound<'py, PyDict>>,
        values: &str,
        pad: f64,
        by_group: Option<Vec<String>>,
        nested: bool,
        out_type: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let set = [
            ("beta", beta.is_some()),
            ("replace", !replace),
            ("by_group", by_group.is_some()),
        ];
        let request = n.request(&set, |n| PyRequest::rows(n, beta, replace, false, by_group))?;
        let output = Output {
            out,
            values,
            pad,
            nested,
            out_type: OutType::parse(out_type, out)?,
        };
        draws::sample(py, self, request.get(), seed, &output)
    }

    /// The items at `indices`, as `ReplayBuffer.get`: for a worker that fetches rows a
    /// sampler elsewhere chose (a torch `Sampler` in the learner, say). An index the
    /// writer has evicted, or overwrites while it is copied, raises `EvictedError`; the
    /// rows returned are always the items their indices name. `drawn=True`: the
    /// indices are the caller's draw, counted in this reader's `stats()["sampled"]`.
    #[pyo3(signature = (indices, *, drawn=false))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        drawn: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let request = PyRequest::at(py, indices, drawn, false, false)?;
        draws::sample(py, self, &request, None, &Output::arrays(None))
    }

    /// Items live now.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let mut held = self.inner.lock(py);
        let reader = opened(&mut held)?;
        py.detach(|| reader.refresh()).map_err(to_py)?;
        Ok(reader.len() as usize)
    }

    /// `removed`, `cause` and `uses` of the live items at `indices`, as the writer left
    /// them (see `ReplayBuffer.item_states`).
    fn item_states<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let idx = get_indices(py, indices)?;
        let states = opened(&mut self.inner.lock(py))?
            .item_states(&idx)
            .map_err(to_py)?;
        states_dict(py, &states)
    }

    /// Seconds a draw the rate limiter holds back waits for the writer's adds before
    /// raising `RateLimitedError` (None: it raises at once).
    #[setter]
    fn set_rate_limit_wait(&self, py: Python<'_>, seconds: Option<f64>) -> PyResult<()> {
        let wait = seconds_to_duration(seconds)?;
        opened(&mut self.inner.lock(py))?.set_rate_limit_wait(wait);
        Ok(())
    }

    /// The priorities' `total` (sum of the live items' `(priority + eps)^alpha`) and
    /// `min_leaf` (the smallest of those) as they read now; `None` without priorities.
    fn priority_summary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut held = self.inner.lock(py);
        let reader = opened(&mut held)?;
        let (total, min_leaf) = match reader.priority_mass() {
            Ok(m) => m,
            Err(replaystore::Error::NotPrioritized { .. }) => return Ok(None),
            Err(e) => return Err(to_py(e)),
        };
        let d = PyDict::new(py);
        d.set_item("total", total)?;
        d.set_item("min_leaf", min_leaf)?;
        Ok(Some(d))
    }

    /// Counters and sizes as the reader sees them; `sampled` counts its own draws.
    /// They also reach the buffer's count (`replaystore info`, the writer's `stats()`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = opened(&mut self.inner.lock(py))?.stats().map_err(to_py)?;
        stats_dict(py, &s)
    }

    /// The schema.
    #[getter]
    fn schema(&self, py: Python<'_>) -> PyResult<PySchema> {
        Ok(PySchema {
            inner: opened(&mut self.inner.lock(py))?.schema().clone(),
        })
    }

    /// Lets the files go (their mappings and descriptors); later calls raise
    /// `ClosedError`. Twice is fine. A reader never writes, so nothing is flushed.
    fn close(&self, py: Python<'_>) {
        let reader = self.inner.lock(py).take();
        py.detach(|| drop(reader));
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let quoted = |s: &str| -> PyResult<String> {
            Ok(pyo3::types::PyString::new(py, s).repr()?.to_string())
        };
        let mut at = quoted(&self.path.display().to_string())?;
        if let Some(s) = &self.snapshot {
            at = format!("{at}, snapshot={}", quoted(s)?);
        }
        Ok(match self.inner.try_lock().as_deref() {
            Some(Some(r)) => format!("Reader({at}, {} items live)", r.len()),
            Some(None) => format!("Reader({at}, closed)"),
            None => format!("Reader({at}, in use by another thread)"),
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// The open reader, or `ClosedError` after `close`.
fn opened(held: &mut Option<Reader>) -> PyResult<&mut Reader> {
    held.as_mut()
        .ok_or_else(|| crate::errors::ClosedError::new_err("the reader is closed"))
}
