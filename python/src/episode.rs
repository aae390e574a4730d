//! The Python `Episode`: a view of one stored episode with RLlib's `SingleAgentEpisode`
//! getters (`get_observations`, `get_actions`, `get_rewards`, `get_infos`,
//! `get_extra_model_outputs`, with negative indices into the lookback, `fill` and
//! `one_hot_discrete`), `cut`, `slice` and `to_numpy`, read from the buffer's rows
//! through the engine's getters (`EpisodeChunk`).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySlice};
use replaystore::{EpisodeChunk, EpisodeInfo, FieldArray, GetOptions, Indices, VarKind};

use crate::arrays::numpy_of;
use crate::errors::to_py;
use crate::held::{Held, either, open_buf};

/// One stored episode (or a chunk of it: `cut`, `slice`) of a `ReplayBuffer`, read as
/// RLlib's `SingleAgentEpisode` reads: observation `k` is the `k`-th observation
/// (`k = 0` what `env.reset()` returned), step entry `k` (action, reward, info, ...) is
/// what the step taken at observation `k` stored. The view reads the buffer's rows
/// each time; it holds no copy.
#[pyclass(module = "replaystore", name = "Episode", frozen)]
pub struct PyEpisode {
    /// The buffer's engine handle (a closed buffer's views raise `ClosedError`).
    held: Held,
    chunk: EpisodeChunk,
    /// The fields the getters read: observations, actions, rewards, infos.
    obs: String,
    action: String,
    reward: String,
    info: String,
}

impl PyEpisode {
    pub(crate) fn new(held: Held, chunk: EpisodeChunk, names: [String; 4]) -> PyEpisode {
        let [obs, action, reward, info] = names;
        PyEpisode {
            held,
            chunk,
            obs,
            action,
            reward,
            info,
        }
    }

    fn with_chunk(&self, chunk: EpisodeChunk) -> PyEpisode {
        PyEpisode {
            held: self.held.clone(),
            chunk,
            obs: self.obs.clone(),
            action: self.action.clone(),
            reward: self.reward.clone(),
            info: self.info.clone(),
        }
    }

    fn record(&self, py: Python<'_>) -> PyResult<EpisodeInfo> {
        let mut held = self.held.lock(py);
        either!(open_buf(&mut held)?, b => b.episode_by_id(self.chunk.id)).map_err(to_py)
    }

    /// Entries of `field` of this view: step entries with `steps`, else observations.
    fn read(
        &self,
        py: Python<'_>,
        steps: bool,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> PyResult<FieldArray> {
        let mut held = self.held.lock(py);
        let buf = open_buf(&mut held)?;
        let chunk = &self.chunk;
        py.detach(|| match steps {
            true => either!(buf, b => b.get_steps(chunk, field, indices, options)),
            false => either!(buf, b => b.get_observations(chunk, field, indices, options)),
        })
        .map_err(to_py)
    }

    /// Whether `field` is a text, bytes or token field of the buffer.
    fn is_variable(&self, py: Python<'_>, field: &str) -> PyResult<bool> {
        let mut held = self.held.lock(py);
        Ok(open_buf(&mut held)?.schema().var_field(field).is_some())
    }

    /// Entries of variable-length `field` as a list: `str`, `bytes` or a 1-D array
    /// each (an entry `fill` stands in for is empty).
    fn read_values<'py>(
        &self,
        py: Python<'py>,
        steps: bool,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> PyResult<Bound<'py, PyList>> {
        let values = {
            let mut held = self.held.lock(py);
            let buf = open_buf(&mut held)?;
            let chunk = &self.chunk;
            py.detach(|| match steps {
                true => either!(buf, b => b.get_step_values(chunk, field, indices, options)),
                false => {
                    either!(buf, b => b.get_observation_values(chunk, field, indices, options))
                }
            })
            .map_err(to_py)?
        };
        let list = PyList::empty(py);
        for r in 0..values.len() {
            let bytes = values.value(r).unwrap_or(&[]);
            match values.kind() {
                VarKind::Str => list.append(values.text(r).map_err(to_py)?)?,
                VarKind::Bytes => list.append(pyo3::types::PyBytes::new(py, bytes))?,
                VarKind::Ragged(dtype) => {
                    let a = numpy::PyArray1::from_slice(py, bytes).call_method1(
                        "view",
                        (numpy::PyArrayDescr::new(py, dtype.numpy_str())?,),
                    )?;
                    list.append(a)?;
                }
            }
        }
        Ok(list)
    }

    /// Each fixed field's name, and whether it is an observation (named like the
    /// view's observations, or a key of a dict observation `obs.<key>`).
    fn field_kinds(&self, py: Python<'_>) -> PyResult<Vec<(String, bool)>> {
        let obs = &self.obs;
        let prefix = format!("{obs}.");
        let mut held = self.held.lock(py);
        let schema = open_buf(&mut held)?.schema();
        Ok((schema.fields().iter())
            .map(|f| {
                (
                    f.name().to_owned(),
                    f.name() == obs || f.name().starts_with(&prefix),
                )
            })
            .collect())
    }

    /// Entries of `field` (observations or step entries) as a NumPy array.
    fn entries<'py>(
        &self,
        py: Python<'py>,
        steps: bool,
        field: &str,
        indices: Option<&Bound<'py, PyAny>>,
        (neg_index_as_lookback, fill): (bool, Option<f64>),
    ) -> PyResult<Bound<'py, PyAny>> {
        let indices = indices_of(indices)?;
        let options = GetOptions {
            neg_index_as_lookback,
            fill,
        };
        let lone = matches!(indices, Indices::At(_));
        if self.is_variable(py, field)? {
            let list = self.read_values(py, steps, field, &indices, options)?;
            return match lone {
                true => list.get_item(0),
                false => Ok(list.into_any()),
            };
        }
        let a: FieldArray = self.read(py, steps, field, &indices, options)?;
        let arr = numpy_of(py, a)?;
        match lone {
            // One index: the entry itself, not a batch of one.
            true => arr.get_item(0),
            false => Ok(arr),
        }
    }
}

/// A Python index (`int`, list of ints, `slice`, or `None` for all) as the engine's.
fn indices_of(value: Option<&Bound<'_, PyAny>>) -> PyResult<Indices> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(Indices::All);
    };
    if let Ok(i) = v.extract::<i64>() {
        return Ok(Indices::At(i));
    }
    if let Ok(s) = v.cast::<PySlice>() {
        let get = |k: &str| -> PyResult<Option<i64>> {
            let x = s.getattr(k)?;
            if x.is_none() {
                Ok(None)
            } else {
                x.extract().map(Some)
            }
        };
        let step = get("step")?.unwrap_or(1);
        if step < 1 {
            return Err(PyValueError::new_err("slice step must be at least 1"));
        }
        return Ok(Indices::Range {
            start: get("start")?,
            stop: get("stop")?,
            step,
        });
    }
    if let Ok(list) = v.extract::<Vec<i64>>() {
        return Ok(Indices::List(list));
    }
    Err(PyTypeError::new_err(format!(
        "indices are an int, a list of ints, a slice or None, not {}",
        v.get_type().name()?
    )))
}

/// `a` (integers) one-hot over `n` classes, as RLlib's `one_hot_discrete=True` gives a
/// `Discrete(n)` space's actions.
fn one_hot<'py>(py: Python<'py>, a: Bound<'py, PyAny>, n: usize) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    let eye = np
        .call_method1("eye", (n,))?
        .call_method1("astype", ("float32",))?;
    eye.get_item(a)
}

#[pymethods]
impl PyEpisode {
    /// The episode's number.
    #[getter]
    fn id(&self) -> u64 {
        self.chunk.id
    }

    /// The observation index of this view's ts = 0 (RLlib's `t_started`).
    #[getter]
    fn t_started(&self) -> u64 {
        self.chunk.t0
    }

    /// Steps in this view (RLlib's `len(episode)`): from ts = 0 to its end, or to the
    /// episode's newest step.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let e = self.record(py)?;
        let to_end = e.steps().saturating_sub(self.chunk.t0);
        Ok(self.chunk.steps.map_or(to_end, |s| s.min(to_end)) as usize)
    }

    /// Whether the episode ended (terminated or truncated).
    #[getter]
    fn is_done(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.record(py)?.end.is_some())
    }

    /// Whether it ended terminated.
    #[getter]
    fn is_terminated(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(matches!(
            self.record(py)?.end,
            Some(replaystore::End::Terminated)
        ))
    }

    /// Whether it ended truncated.
    #[getter]
    fn is_truncated(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(matches!(
            self.record(py)?.end,
            Some(replaystore::End::Truncated)
        ))
    }

    /// Observations at `indices` (an int, a list, a slice, or None for all of this
    /// view; negative ones count from the end, or with `neg_index_as_lookback` back
    /// into the lookback); `fill` pads entries outside the episode instead of an error.
    #[pyo3(signature = (indices=None, *, neg_index_as_lookback=false, fill=None, field=None))]
    fn get_observations<'py>(
        &self,
        py: Python<'py>,
        indices: Option<&Bound<'py, PyAny>>,
        neg_index_as_lookback: bool,
        fill: Option<f64>,
        field: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let field = field.unwrap_or(&self.obs);
        self.entries(py, false, field, indices, (neg_index_as_lookback, fill))
    }

    /// Actions at `indices` (as `get_observations`); `one_hot_discrete=n` one-hot
    /// encodes integer actions over `n` classes.
    #[pyo3(signature = (indices=None, *, neg_index_as_lookback=false, fill=None, one_hot_discrete=None))]
    fn get_actions<'py>(
        &self,
        py: Python<'py>,
        indices: Option<&Bound<'py, PyAny>>,
        neg_index_as_lookback: bool,
        fill: Option<f64>,
        one_hot_discrete: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let a = self.entries(
            py,
            true,
            &self.action,
            indices,
            (neg_index_as_lookback, fill),
        )?;
        match one_hot_discrete {
            Some(n) => one_hot(py, a, n),
            None => Ok(a),
        }
    }

    /// Rewards at `indices` (as `get_observations`).
    #[pyo3(signature = (indices=None, *, neg_index_as_lookback=false, fill=None))]
    fn get_rewards<'py>(
        &self,
        py: Python<'py>,
        indices: Option<&Bound<'py, PyAny>>,
        neg_index_as_lookback: bool,
        fill: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.entries(
            py,
            true,
            &self.reward,
            indices,
            (neg_index_as_lookback, fill),
        )
    }

    /// Infos at `indices`: the `info` field's step entries (as `get_observations`).
    #[pyo3(signature = (indices=None, *, neg_index_as_lookback=false, fill=None))]
    fn get_infos<'py>(
        &self,
        py: Python<'py>,
        indices: Option<&Bound<'py, PyAny>>,
        neg_index_as_lookback: bool,
        fill: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.entries(py, true, &self.info, indices, (neg_index_as_lookback, fill))
    }

    /// The step entries of field `key` at `indices` (RLlib's extra model outputs:
    /// logits, value estimates, ... stored as fields).
    #[pyo3(signature = (key, indices=None, *, neg_index_as_lookback=false, fill=None))]
    fn get_extra_model_outputs<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        indices: Option<&Bound<'py, PyAny>>,
        neg_index_as_lookback: bool,
        fill: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.entries(py, true, key, indices, (neg_index_as_lookback, fill))
    }

    /// RLlib's `cut`: the view that continues this unfinished episode from its newest
    /// observation, with the `len_lookback_buffer` entries before it as lookback.
    #[pyo3(signature = (len_lookback_buffer=0))]
    fn cut(&self, py: Python<'_>, len_lookback_buffer: u64) -> PyResult<PyEpisode> {
        let chunk = {
            let mut held = self.held.lock(py);
            let buf = open_buf(&mut held)?;
            either!(buf, b => b.cut(&self.chunk, len_lookback_buffer)).map_err(to_py)?
        };
        Ok(self.with_chunk(chunk))
    }

    /// RLlib's `slice`: steps `slice.start:slice.stop` of this view as a view of its
    /// own (one more observation than steps), with `len_lookback_buffer` entries
    /// before it readable as its lookback.
    #[pyo3(signature = (slice, len_lookback_buffer=0))]
    fn slice(
        &self,
        py: Python<'_>,
        slice: &Bound<'_, PySlice>,
        len_lookback_buffer: u64,
    ) -> PyResult<PyEpisode> {
        let get = |k: &str| -> PyResult<Option<u64>> {
            let x = slice.getattr(k)?;
            if x.is_none() {
                Ok(None)
            } else {
                x.extract().map(Some)
            }
        };
        if get("step")?.is_some_and(|s| s != 1) {
            return Err(PyValueError::new_err("an episode slice takes step 1"));
        }
        let start = get("start")?.unwrap_or(0);
        let stop = get("stop")?;
        let chunk = {
            let mut held = self.held.lock(py);
            let buf = open_buf(&mut held)?;
            either!(buf, b => b.slice(&self.chunk, start, stop, len_lookback_buffer))
                .map_err(to_py)?
        };
        Ok(self.with_chunk(chunk))
    }

    /// Every field of this view as NumPy arrays: observation fields with `len + 1`
    /// entries, every other field with `len` (RLlib's `to_numpy` data).
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, is_obs) in self.field_kinds(py)? {
            let a = self.read(py, !is_obs, &name, &Indices::All, GetOptions::default())?;
            d.set_item(name, numpy_of(py, a)?)?;
        }
        Ok(d)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let e = self.record(py)?;
        Ok(format!(
            "Episode(id={}, t_started={}, len={}, done={})",
            self.chunk.id,
            self.chunk.t0,
            self.__len__(py)?,
            e.end.is_some()
        ))
    }
}

/// The episodes with a live row, as views.
pub(crate) fn views<'py>(
    py: Python<'py>,
    held: &Held,
    ids: Vec<EpisodeChunk>,
    names: [String; 4],
) -> PyResult<Bound<'py, PyList>> {
    let items = ids
        .into_iter()
        .map(|c| Py::new(py, PyEpisode::new(held.clone(), c, names.clone())))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}
