//! Episode-aware draws as dicts of NumPy arrays: transitions (n-step returns, frame
//! stacks), sequences (burn-in, mask) and whole episodes, plus episode records and
//! snapshot listings as plain dicts. The engine fills its own batch for these draws;
//! each field then costs one copy into its array (the plain `sample` has none).

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use replaystore::End;
use replaystore::{
    Batch, EpisodeBatch, EpisodeInfo, FieldArray, Sequences, SnapshotInfo, StepInfo, Transitions,
};

use crate::errors::SchemaError;

/// One field of an engine batch as an array of its dtype and shape.
pub fn field_array<'py>(py: Python<'py>, fa: &FieldArray) -> PyResult<Bound<'py, PyAny>> {
    PyArray1::from_slice(py, fa.bytes())
        .call_method1("view", (fa.dtype().numpy_str(),))?
        .call_method1("reshape", (PyTuple::new(py, fa.shape())?,))
}

/// Puts the fields of `batch` that `keep` accepts into `d` as `prefix + name`, refusing
/// a key that is already there (a schema field named like a derived one, `next_obs`
/// beside an observation field `obs`).
fn put_fields(
    d: &Bound<'_, PyDict>,
    batch: &Batch,
    prefix: &str,
    keep: impl Fn(&str) -> bool,
) -> PyResult<()> {
    for fa in batch.fields().iter().filter(|f| keep(f.name())) {
        let key = format!("{prefix}{}", fa.name());
        if d.contains(&key)? {
            return Err(SchemaError::new_err(format!(
                "key {key:?} of the draw would be both a field and the next observation of \
                 field {:?}: rename the field",
                fa.name()
            )));
        }
        d.set_item(key, field_array(d.py(), fa)?)?;
    }
    Ok(())
}

/// The fields of a transition-shaped draw (`[obs, step, next_obs]` batches): each
/// observation field under its name and as `next_<name>`, every other field the step's.
fn put_steps(
    d: &Bound<'_, PyDict>,
    [before, step, after]: [&Batch; 3],
    obs: &[String],
) -> PyResult<()> {
    let is_obs = |name: &str| obs.iter().any(|o| o == name);
    put_fields(d, before, "", is_obs)?;
    put_fields(d, step, "", |n| !is_obs(n))?;
    put_fields(d, after, "next_", is_obs)
}

/// A batch the engine filled as a dict: each field, `indices` and, when `weighted`,
/// `weights`.
pub fn batch_dict<'py>(
    py: Python<'py>,
    batch: &Batch,
    weighted: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    put_fields(&d, batch, "", |_| true)?;
    d.set_item("indices", PyArray1::from_slice(py, batch.indices()))?;
    if weighted {
        d.set_item("weights", PyArray1::from_slice(py, batch.weights()))?;
    }
    Ok(d)
}

/// `values` as an array reshaped to `shape`.
fn shaped<'py, T: numpy::Element + Copy>(
    py: Python<'py>,
    values: &[T],
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    PyArray1::from_slice(py, values)
        .into_any()
        .call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// The dict of a transition draw: each observation field before the step under its own
/// name and after it as `next_<name>`, every other field of the step, `returns`,
/// `discounts`, `terminated`, `truncated`, `indices` and, by priority, `weights`.
pub fn transitions_dict<'py>(
    py: Python<'py>,
    t: &Transitions,
    obs: &[String],
    weighted: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    put_steps(&d, [t.obs(), t.step(), t.next_obs()], obs)?;
    d.set_item("returns", PyArray1::from_slice(py, t.returns()))?;
    d.set_item("discounts", PyArray1::from_slice(py, t.discounts()))?;
    d.set_item("terminated", PyArray1::from_slice(py, t.terminated()))?;
    d.set_item("truncated", PyArray1::from_slice(py, t.truncated()))?;
    d.set_item("indices", PyArray1::from_slice(py, t.indices()))?;
    if weighted {
        d.set_item("weights", PyArray1::from_slice(py, t.weights()))?;
    }
    Ok(d)
}

/// The dict of a sequence draw: as [`transitions_dict`] with every array `[n, steps,
/// ...]` (`steps` = burn-in + length), plus `mask` (false past an episode's end).
pub fn sequences_dict<'py>(
    py: Python<'py>,
    s: &Sequences,
    obs: &[String],
    steps: usize,
    weighted: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    put_steps(&d, [s.obs(), s.step(), s.next_obs()], obs)?;
    let grid = [s.len(), steps];
    d.set_item("mask", shaped(py, s.mask(), &grid)?)?;
    d.set_item("terminated", shaped(py, s.terminated(), &grid)?)?;
    d.set_item("truncated", shaped(py, s.truncated(), &grid)?)?;
    d.set_item("indices", PyArray1::from_slice(py, s.indices()))?;
    if weighted {
        d.set_item("weights", PyArray1::from_slice(py, s.weights()))?;
    }
    Ok(d)
}

/// The dict of an episode draw: the rows of the episodes one after another (each field,
/// `indices`), `offsets` (episode `i` is rows `offsets[i]:offsets[i+1]`), `episodes`
/// (their ids) and, by priority, `weights` (one per episode).
pub fn episodes_dict<'py>(
    py: Python<'py>,
    e: &EpisodeBatch,
    weighted: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    put_fields(&d, e.rows(), "", |_| true)?;
    d.set_item("indices", PyArray1::from_slice(py, e.rows().indices()))?;
    let offsets: Vec<u64> = e.offsets().iter().map(|&o| o as u64).collect();
    d.set_item("offsets", PyArray1::from_vec(py, offsets))?;
    let ids: Vec<u64> = e.episodes().iter().map(|ep| ep.id).collect();
    d.set_item("episodes", PyArray1::from_vec(py, ids))?;
    if weighted {
        d.set_item("weights", PyArray1::from_slice(py, e.weights()))?;
    }
    Ok(d)
}

/// An episode record: `id`, `start` (index of its reset row), `rows`, `steps`,
/// `terminated`, `truncated` (both false while it is open), `ret` and `ret_complete`.
pub fn episode_dict<'py>(py: Python<'py>, e: &EpisodeInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", e.id)?;
    d.set_item("start", e.start)?;
    d.set_item("rows", e.rows)?;
    d.set_item("steps", e.steps())?;
    d.set_item("terminated", matches!(e.end, Some(End::Terminated)))?;
    d.set_item("truncated", matches!(e.end, Some(End::Truncated)))?;
    d.set_item("ret", e.ret)?;
    d.set_item("ret_complete", e.ret_complete)?;
    Ok(d)
}

/// Episode records as a list of dicts.
pub fn episode_list<'py>(py: Python<'py>, list: &[EpisodeInfo]) -> PyResult<Bound<'py, PyList>> {
    let items = list
        .iter()
        .map(|e| episode_dict(py, e))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// What `add_reset` / `add_step` report: `index`, `episode`, `t` and, when the row ended
/// its episode, `ended` = `(return, steps, start index)` (else `None`).
pub fn step_dict<'py>(py: Python<'py>, s: &StepInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("index", s.index)?;
    d.set_item("episode", s.episode)?;
    d.set_item("t", s.t)?;
    d.set_item("ended", s.ended)?;
    Ok(d)
}

/// A snapshot listing entry: `name`, `path`, `generation` and `len` (None when the
/// snapshot is damaged), `bytes_shared`, `bytes_owned`, `created` (Unix seconds) and
/// `problem` (what is wrong with it, if anything).
pub fn snapshot_dict<'py>(py: Python<'py>, s: &SnapshotInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &s.name)?;
    d.set_item("path", s.path.to_string_lossy())?;
    d.set_item("generation", s.commit.map(|c| c.generation))?;
    d.set_item("len", s.commit.map(|c| c.tail - c.head))?;
    d.set_item("bytes_shared", s.bytes_shared)?;
    d.set_item("bytes_owned", s.bytes_owned)?;
    let created = s
        .created
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    d.set_item("created", created)?;
    d.set_item("problem", &s.problem)?;
    Ok(d)
}
