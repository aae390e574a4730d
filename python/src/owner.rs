//! The Python `PriorityOwner`: the learner of the Ape-X layout. Actor processes add to
//! a prioritized buffer (`ReplayBuffer.open(path, actor=True)`, or one lane each with
//! `Lanes.open_lane(path, k, actor=True)`) while this one process owns the priority
//! tree: it draws by priority and sets priorities (see the engine's `PriorityOwner`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use replaystore::PriorityOwner;

use crate::calls::*;
use crate::draws::{self, Asked, Drawer, Drawing, Output, PyRequest};
use crate::errors::{ClosedError, to_py};
use crate::schema::PySchema;
use crate::shared::Shared;

/// The owner of a prioritized buffer's priorities, beside actors that add: it draws
/// (by priority with `beta`, or uniformly) and updates priorities; items the actors
/// add since get the largest priority seen when it catches up (each call does). One
/// owner per buffer (`LockedError` for a second).
#[pyclass(module = "replaystore", name = "PriorityOwner", frozen)]
pub struct PyOwner {
    /// Taken by each call in turn (see `shared`); `None` once closed.
    inner: Shared<Option<PriorityOwner>>,
}

impl Drawer for PyOwner {
    fn drawing<'py>(
        &self,
        py: Python<'py>,
        seed: Option<u64>,
        schema: bool,
        f: &mut Drawing<'_, 'py>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut held = self.inner.lock(py);
        let owner = open_owner(&mut held)?;
        if let Some(s) = seed {
            owner.reader().reseed(s);
        }
        let schema = schema.then(|| owner.reader().schema().clone());
        f(schema.as_ref(), &mut |r, sink| owner.sample_into(r, sink))
    }
}

fn open_owner(held: &mut Option<PriorityOwner>) -> PyResult<&mut PriorityOwner> {
    held.as_mut()
        .ok_or_else(|| ClosedError::new_err("the priority owner is closed"))
}

#[pymethods]
impl PyOwner {
    /// Refuses, naming the class methods that make a `PriorityOwner`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        Err(crate::errors::no_constructor(
            "PriorityOwner",
            "PriorityOwner.open(path)",
        ))
    }

    /// Opens the prioritized buffer in `path` as the owner of its priorities.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<PyOwner> {
        let owner = py.detach(|| PriorityOwner::open(path)).map_err(to_py)?;
        Ok(PyOwner {
            inner: Shared::new(Some(owner)),
        })
    }

    /// Draws `n` of the items the actors have added: by priority with `beta` (then
    /// `weights`), else uniformly (distinct with `replace=False`); as
    /// `ReplayBuffer.sample` returns them. `n` may be a `Request` of any unit.
    #[pyo3(signature = (n, *, beta=None, seed=None, replace=true, out=None))]
    fn sample<'py>(
        &self,
        py: Python<'py>,
        n: Asked<'py>,
        beta: Option<f64>,
        seed: Option<u64>,
        replace: bool,
        out: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let set = [("beta", beta.is_some()), ("replace", !replace)];
        let request = n.request(&set, |n| PyRequest::rows(n, beta, replace, false, None))?;
        draws::sample(py, self, request.get(), seed, &Output::arrays(out))
    }

    /// Sets the priorities of `indices`; those the actors overwrote since they were
    /// drawn are skipped. Returns `{"applied", "stale"}`.
    fn update_priorities<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        priorities: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        update_from_py(py, indices, priorities, |idx, pr| {
            let mut held = self.inner.lock(py);
            let owner = open_owner(&mut held)?;
            py.detach(|| owner.update_priorities(idx, pr))
                .map_err(to_py)
        })
    }

    /// The `priority + eps` of each live item at `indices`.
    fn priorities<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, numpy::PyArray1<f64>>> {
        let idx = get_indices(py, indices)?;
        let mut held = self.inner.lock(py);
        let p = open_owner(&mut held)?.priorities(&idx).map_err(to_py)?;
        Ok(numpy::PyArray1::from_vec(py, p))
    }

    /// Items live now (what the actors' adds have made visible).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let mut held = self.inner.lock(py);
        let owner = open_owner(&mut held)?;
        py.detach(|| owner.catch_up()).map_err(to_py)?;
        Ok(owner.reader().len() as usize)
    }

    /// Counters and sizes as the owner sees them.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut held = self.inner.lock(py);
        let s = open_owner(&mut held)?.reader().stats().map_err(to_py)?;
        stats_dict(py, &s)
    }

    /// The schema.
    #[getter]
    fn schema(&self, py: Python<'_>) -> PyResult<PySchema> {
        let mut held = self.inner.lock(py);
        Ok(PySchema {
            inner: open_owner(&mut held)?.reader().schema().clone(),
        })
    }

    /// Makes the priorities durable (the actors' flushes make their items durable).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        let owner = open_owner(&mut held)?;
        py.detach(|| owner.flush()).map_err(to_py)
    }

    /// Flushes and gives up ownership (another owner may open then).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.lock(py).take();
        match taken {
            Some(owner) => py.detach(|| owner.close()).map_err(to_py),
            None => Ok(()),
        }
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
