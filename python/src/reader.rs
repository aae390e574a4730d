//! The Python `Reader`: samples a buffer that a writer in another process may be
//! adding to (see the engine's `Reader`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use replaystore::{Reader, Request, RowAccess};

use crate::errors::to_py;
use crate::schema::PySchema;
use crate::shared::Shared;

use crate::calls::*;

/// A read-only view of a buffer that another process writes: any number of readers
/// sample the same files (one copy in the page cache); a reader takes no lock and
/// writes nothing. Open one in each data-loader worker rather than pickling a buffer.
#[pyclass(module = "replaystore", name = "Reader", frozen)]
pub struct PyReader {
    /// Taken by each call in turn (see `shared`).
    inner: Shared<Reader>,
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

#[pymethods]
impl PyReader {
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
            inner: Shared::new(inner),
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
        kwargs.set_item("pread", me.pread(py))?;
        let open = slf.get_type().getattr("open")?;
        reopen_later(py, open, me.path.clone(), &kwargs)
    }

    /// Whether rows are copied out with pread (see `open`).
    #[getter]
    fn pread(&self, py: Python<'_>) -> bool {
        self.inner.lock(py).row_access() == RowAccess::Pread
    }

    /// Whether every read checks each sealed item against its checksum (default True;
    /// see `ReplayBuffer.read_checks`). A pickled reader reopens with the checks on.
    #[getter]
    fn read_checks(&self, py: Python<'_>) -> bool {
        self.inner.lock(py).read_checks()
    }

    #[setter]
    fn set_read_checks(&self, py: Python<'_>, on: bool) {
        self.inner.lock(py).set_read_checks(on);
    }

    /// Draws `n` of the items live now, as `ReplayBuffer.sample` does (never a removed
    /// one); `by_group=["env_id"]` draws distinct items, an even share of every group
    /// first.
    #[pyo3(signature = (n, *, beta=None, seed=None, replace=true, out=None, by_group=None))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature's keywords")]
    fn sample<'py>(
        &self,
        py: Python<'py>,
        n: usize,
        beta: Option<f64>,
        seed: Option<u64>,
        replace: bool,
        out: Option<&Bound<'py, PyDict>>,
        by_group: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let names: Vec<String> = by_group.unwrap_or_default();
        let group: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut held = self.inner.lock(py);
        let reader = &mut *held;
        if let Some(s) = seed {
            reader.reseed(s);
        }
        // The reader re-draws an item the writer overwrites mid-copy, straight into
        // the arrays returned: no batch in between.
        let mut request = rows(n, beta, replace);
        if !group.is_empty() {
            request = request.by_group(&group);
        }
        draw(py, out, |sink| reader.sample_into(request, sink))
    }

    /// The items at `indices`, as `ReplayBuffer.get`: for a worker that fetches rows a
    /// sampler elsewhere chose (a torch `Sampler` in the learner, say). An index the
    /// writer has evicted, or overwrites while it is copied, raises `EvictedError`; the
    /// rows returned are always the items their indices name.
    fn get<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let idx = get_indices(py, indices)?;
        let mut held = self.inner.lock(py);
        let reader = &mut *held;
        draw(py, None, |sink| reader.sample_into(Request::at(&idx), sink))
    }

    /// Items live now.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let mut held = self.inner.lock(py);
        let reader = &mut *held;
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
        let states = self.inner.lock(py).item_states(&idx).map_err(to_py)?;
        states_dict(py, &states)
    }

    /// Seconds a draw the rate limiter holds back waits for the writer's adds before
    /// raising `RateLimitedError` (None: it raises at once).
    #[setter]
    fn set_rate_limit_wait(&self, py: Python<'_>, seconds: Option<f64>) -> PyResult<()> {
        let wait = seconds_to_duration(seconds)?;
        self.inner.lock(py).set_rate_limit_wait(wait);
        Ok(())
    }

    /// Counters and sizes as the reader sees them.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.lock(py).stats().map_err(to_py)?;
        stats_dict(py, &s)
    }

    /// The schema.
    #[getter]
    fn schema(&self, py: Python<'_>) -> PySchema {
        PySchema {
            inner: self.inner.lock(py).schema().clone(),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        false
    }
}
