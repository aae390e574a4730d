//! Episode records, step reports and snapshot listings as plain dicts. (Every draw,
//! episodes and transitions included, fills NumPy arrays in place: `calls::draw`.)

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use replaystore::End;
use replaystore::{EpisodeInfo, SnapshotInfo, StepInfo};

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
