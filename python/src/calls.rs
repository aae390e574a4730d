//! What every Python class does with its arguments and results: columns and configs
//! from Python values, index arrays, requests, the arrays a draw fills, stats as a dict.

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use replaystore::{Column, Config, Error, Request, Schema, Sink, Stats};

use crate::arrays::{self, Input, NumpySink, OutArrays};
use crate::errors::{SchemaError, to_py};

/// The fields of `values` (keyword arguments or a dict) with their schema fields, in
/// schema order, refusing unknown names before anything is written. With `required`,
/// every field must be there; without, absent ones are left to the engine (a reset row
/// carries only observations).
pub(crate) fn inputs<'s, 'py>(
    schema: &'s Schema,
    values: &Bound<'py, PyDict>,
    required: bool,
) -> PyResult<Vec<(&'s replaystore::Field, Input<'py>)>> {
    inputs_cast(schema, values, required, arrays::Cast::Exact)
}

/// [`inputs`] with arrays of another dtype taken as `cast` says.
pub(crate) fn inputs_cast<'s, 'py>(
    schema: &'s Schema,
    values: &Bound<'py, PyDict>,
    required: bool,
    cast: arrays::Cast,
) -> PyResult<Vec<(&'s replaystore::Field, Input<'py>)>> {
    // Most schemas have no dotted names: then there is nothing to spread, and the dict
    // is read as given (no call, no reference taken).
    let spread;
    let values = match schema.fields().iter().any(|f| f.name().contains('.'))
        || schema.var_fields().iter().any(|f| f.name().contains('.'))
    {
        true => {
            spread = spread_nested(schema, values)?;
            &spread
        }
        false => values,
    };
    for key in values.keys() {
        let field: String = key.extract()?;
        if schema.fields().iter().all(|f| f.name() != field) && schema.var_field(&field).is_none() {
            return Err(to_py(Error::UnknownField {
                field,
                known: schema.names(),
            }));
        }
    }
    let mut out = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        match values.get_item(f.name())? {
            Some(v) => out.push((f, arrays::input(f, &v, cast)?)),
            None if required => {
                return Err(to_py(Error::MissingField {
                    field: f.name().to_owned(),
                }));
            }
            None => {}
        }
    }
    Ok(out)
}

/// Engine columns over the borrowed inputs, and the variable-length values after them.
pub(crate) fn columns<'a>(
    inputs: &'a [(&'a replaystore::Field, Input<'_>)],
    var: &'a [VarInput],
) -> PyResult<Vec<Column<'a>>> {
    let mut cols = inputs
        .iter()
        .map(|(f, i)| {
            Ok(Column::from_bytes(
                f.name(),
                f.dtype(),
                &i.shape,
                i.bytes()?,
            ))
        })
        .collect::<PyResult<Vec<_>>>()?;
    cols.extend(
        var.iter()
            .map(|v| Column::values(&v.name, v.dtype, &v.bytes, &v.offsets)),
    );
    Ok(cols)
}

/// One variable-length field's values of an `add` (one) or `add_batch` (one per row),
/// end to end, with their byte offsets.
pub(crate) struct VarInput {
    name: String,
    dtype: replaystore::DType,
    bytes: Vec<u8>,
    offsets: Vec<u64>,
}

/// The values of every variable-length field of the schema in `values`: one each, or
/// with `batch` a sequence of them. `str` takes `str` (or UTF-8 `bytes`), `bytes`
/// takes any bytes-like object, a ragged field a 1-D array-like of its dtype (converted
/// only where no value changes, as fixed fields are). Every value is copied once here;
/// the engine checks lengths and UTF-8 before anything is written.
///
/// `room` is the most bytes of values one call may bring (the chunk ring's payload,
/// `ReplayBuffer::value_room`): a value longer than that or than its field's bound, or
/// values adding up past it, are refused as the engine refuses them (`ValueTooLong`)
/// before they are copied, and memory that cannot be had is `MemoryError`, never an
/// abort.
///
/// With `partial` (an episode's reset, which carries observations only), a field left
/// out is no input: the engine stores it as an empty value.
pub(crate) fn var_inputs(
    schema: &Schema,
    values: &Bound<'_, PyDict>,
    batch: bool,
    partial: bool,
    room: u64,
) -> PyResult<Vec<VarInput>> {
    if schema.var_fields().is_empty() {
        return Ok(Vec::new());
    }
    let values = &spread_nested(schema, values)?;
    let mut out = Vec::with_capacity(schema.var_fields().len());
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    let mut total = 0usize;
    for f in schema.var_fields() {
        let Some(v) = values.get_item(f.name())? else {
            if partial {
                continue;
            }
            return Err(to_py(Error::MissingField {
                field: f.name().to_owned(),
            }));
        };
        let mut input = VarInput {
            name: f.name().to_owned(),
            dtype: f.kind().dtype(),
            bytes: Vec::new(),
            offsets: vec![0],
        };
        if batch {
            if v.is_instance_of::<pyo3::types::PyString>()
                || v.is_instance_of::<pyo3::types::PyBytes>()
            {
                return Err(SchemaError::new_err(format!(
                    "field {:?}: add_batch takes a sequence of values, one per row, got one \
                     {}",
                    f.name(),
                    v.get_type().name()?
                )));
            }
            for (row, item) in v.try_iter()?.enumerate() {
                let bound = ValueBound {
                    room,
                    used: total,
                    row,
                };
                total += append_value(f, &item?, &mut input.bytes, &bound)?;
                input.offsets.push(input.bytes.len() as u64);
            }
        } else {
            let bound = ValueBound {
                room,
                used: total,
                row: 0,
            };
            total += append_value(f, &v, &mut input.bytes, &bound)?;
            input.offsets.push(input.bytes.len() as u64);
        }
        out.push(input);
    }
    Ok(out)
}

/// Where a value of an add stands against the call's bound on value bytes.
struct ValueBound {
    /// The most bytes of values the call may bring.
    room: usize,
    /// Bytes the call's values before this one take.
    used: usize,
    /// The value's row in the batch.
    row: usize,
}

impl ValueBound {
    /// Refuses a value of `bytes` bytes (at least: a `str` is measured in characters
    /// before it is encoded) of field `f`, before a byte of it is copied: longer than
    /// the field's bound or the chunk ring, or past what the call has left.
    fn check(&self, f: &replaystore::VarField, bytes: usize) -> PyResult<()> {
        let size = f.kind().dtype().size();
        let max = f.max_bytes().unwrap_or(usize::MAX).min(self.room);
        if bytes > max {
            return Err(to_py(Error::ValueTooLong {
                field: f.name().to_owned(),
                row: self.row,
                len: bytes / size,
                max: max / size,
            }));
        }
        if self.used.saturating_add(bytes) > self.room {
            return Err(to_py(Error::ValueTooLong {
                field: "(the variable-length values of one call)".into(),
                row: self.row,
                len: self.used.saturating_add(bytes),
                max: self.room,
            }));
        }
        Ok(())
    }
}

/// Appends one value of variable-length field `f` to `out`, its size checked against
/// `bound` first; returns its length in bytes.
fn append_value(
    f: &replaystore::VarField,
    v: &Bound<'_, PyAny>,
    out: &mut Vec<u8>,
    bound: &ValueBound,
) -> PyResult<usize> {
    use pyo3::types::{PyByteArray, PyBytes, PyString};
    use replaystore::VarKind;
    let wrong = |expected: &str| -> PyResult<usize> {
        Err(SchemaError::new_err(format!(
            "field {:?}: expected {expected}, got {}",
            f.name(),
            v.get_type().name()?
        )))
    };
    let copy = |out: &mut Vec<u8>, bytes: &[u8]| -> PyResult<usize> {
        bound.check(f, bytes.len())?;
        arrays::reserve(out, bytes.len(), "a variable-length value")?;
        out.extend_from_slice(bytes);
        Ok(bytes.len())
    };
    match f.kind() {
        VarKind::Str | VarKind::Bytes => {
            if let Ok(s) = v.cast::<PyString>() {
                if f.kind() == VarKind::Bytes {
                    return wrong("bytes (encode text, or declare the field \"str\")");
                }
                // Characters first: UTF-8 takes at least a byte each, and encoding a
                // string too long to store would copy it for nothing.
                bound.check(f, s.len()?)?;
                copy(out, s.to_cow()?.as_bytes())
            } else if let Ok(b) = v.cast::<PyBytes>() {
                copy(out, b.as_bytes())
            } else if let Ok(b) = v.cast::<PyByteArray>() {
                bound.check(f, b.len())?;
                copy(out, &b.to_vec())
            } else if let Ok(view) = v.cast::<pyo3::types::PyMemoryView>() {
                bound.check(f, view.getattr("nbytes")?.extract()?)?;
                let raw = view.call_method0("tobytes")?;
                copy(out, raw.cast::<PyBytes>()?.as_bytes())
            } else {
                wrong(match f.kind() {
                    VarKind::Str => "str",
                    _ => "bytes",
                })
            }
        }
        VarKind::Ragged(dtype) => {
            // An array's (or a sequence's) elements, each `dtype` once stored.
            if let Ok(n) = v.len() {
                bound.check(f, n.saturating_mul(dtype.size()))?;
            }
            let before = out.len();
            if arrays::append_array(v, dtype, out)? {
                return Ok(out.len() - before);
            }
            let a = v
                .py()
                .import("replaystore._convert")?
                .call_method1("ragged_array", (v, dtype.numpy_str(), f.name()))?;
            let a = a
                .cast_into::<numpy::PyUntypedArray>()
                .map_err(PyErr::from)?;
            let raw = a.call_method0("tobytes")?;
            copy(out, raw.cast::<PyBytes>()?.as_bytes())
        }
    }
}

/// The engine configuration the Python `create` calls share.
pub(crate) fn config(
    schema: Schema,
    capacity: u64,
    alpha: Option<f64>,
    eps: f64,
    seed: Option<u64>,
    segment_slots: Option<u64>,
) -> Config {
    let mut config = Config::new(schema, capacity);
    if let Some(a) = alpha {
        config = config.prioritized(a, eps);
    }
    if let Some(s) = seed {
        config = config.seed(s);
    }
    if let Some(s) = segment_slots {
        config = config.segment_slots(s);
    }
    config
}

/// `config` with the chunk ring's keywords (`heap_bytes`, `chunk_bytes`,
/// `evict_for_room`), as `ReplayBuffer.create` and `Lanes.create` take them.
pub(crate) fn value_ring(
    mut config: Config,
    heap_bytes: Option<u64>,
    chunk_bytes: Option<u64>,
    evict_for_room: bool,
) -> Config {
    if let Some(b) = heap_bytes {
        config = config.heap_bytes(b);
    }
    if let Some(b) = chunk_bytes {
        config = config.chunk_bytes(b);
    }
    if evict_for_room {
        config = config.evict_for_room();
    }
    config
}

/// A priority update from Python (every handle that sets priorities): `indices` and
/// `priorities` read in place, `apply` run on them (it takes its handle's lock and
/// releases the GIL), and what it did as `{"applied", "stale"}`.
pub(crate) fn update_from_py<'py>(
    py: Python<'py>,
    indices: &Bound<'py, PyAny>,
    priorities: &Bound<'py, PyAny>,
    apply: impl FnOnce(&[u64], &[f64]) -> PyResult<replaystore::PriorityUpdate>,
) -> PyResult<Bound<'py, PyDict>> {
    let idx = index_array(py, indices, "indices")?;
    let pr = contiguous::<f64>(py, priorities, "<f8")?;
    let done = apply(idx.as_slice()?, pr.as_slice()?)?;
    let d = PyDict::new(py);
    d.set_item("applied", done.applied)?;
    d.set_item("stale", done.stale)?;
    Ok(d)
}

/// The item-state keywords of `create` (`ReplayBuffer` and `Lanes`), as one value.
pub(crate) struct LifeArgs {
    pub item_states: bool,
    pub max_use: Option<u64>,
    pub max_size: Option<u64>,
    pub reservoir: Option<u64>,
    pub min_size_to_sample: Option<u64>,
    pub samples_per_insert: Option<f64>,
    pub error_buffer: Option<f64>,
}

impl LifeArgs {
    /// `config` with the item states these keywords ask for: `max_use`, random
    /// downsampling past `max_size`, a reservoir, and Reverb's rate limiters
    /// (SampleToInsertRatio with `samples_per_insert` and `error_buffer`, else MinSize
    /// with `min_size_to_sample` alone).
    /// `max_size` and `reservoir` are two ways to bound the items: both is a
    /// `ValueError`, not one silently taking the other's place.
    pub(crate) fn apply(&self, mut config: Config) -> PyResult<Config> {
        if let (Some(m), Some(r)) = (self.max_size, self.reservoir) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "max_size={m} (random downsampling) and reservoir={r} (reservoir sampling) \
                 are two ways to bound the items kept: give one"
            )));
        }
        config = match (self.max_use, self.item_states) {
            (Some(n), _) => config.max_use(n),
            (None, true) => config.item_states(),
            (None, false) => config,
        };
        if let Some(m) = self.max_size {
            config = config.downsample(m);
        }
        if let Some(m) = self.reservoir {
            config = config.reservoir(m);
        }
        let min_size = self.min_size_to_sample.unwrap_or(1);
        match (self.samples_per_insert, self.min_size_to_sample) {
            (Some(spi), _) => {
                let buffer = self.error_buffer.unwrap_or(f64::MAX / 4.0);
                config = config.rate_limit(replaystore::RateLimit::sample_to_insert_ratio(
                    spi, min_size, buffer,
                ));
            }
            (None, Some(n)) => config = config.rate_limit(replaystore::RateLimit::min_size(n)),
            (None, None) => {}
        }
        Ok(config)
    }
}

/// Indices from an int or an array-like, and whether it was a lone int (so the answer
/// is one too).
pub(crate) fn index_list<'py>(
    py: Python<'py>,
    indices: &Bound<'py, PyAny>,
) -> PyResult<(Vec<u64>, bool)> {
    if let Ok(i) = indices.extract::<u64>() {
        return Ok((vec![i], true));
    }
    let idx = index_array(py, indices, "indices")?;
    Ok((idx.as_slice()?.to_vec(), false))
}

/// Names from a str or a sequence of str.
pub(crate) fn names(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    match value.extract::<String>() {
        Ok(one) => Ok(vec![one]),
        Err(_) => value.extract(),
    }
}

pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
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
    d.set_item("bytes_at_most", s.bytes_at_most)?;
    d.set_item("generation", s.generation)?;
    d.set_item("priority_updates", s.priority_updates)?;
    d.set_item("stale_updates", s.stale_updates)?;
    d.set_item("removed", s.removed)?;
    let by = PyDict::new(py);
    for c in replaystore::Cause::ALL {
        by.set_item(c.name(), s.removals.of(c))?;
    }
    d.set_item("removals", by)?;
    d.set_item("moved", s.moved)?;
    Ok(d)
}

/// A Python timeout in seconds (None: no wait) as a duration; negative or not finite
/// is a `ValueError`.
pub(crate) fn seconds_to_duration(seconds: Option<f64>) -> PyResult<Option<std::time::Duration>> {
    seconds
        .map(|s| {
            std::time::Duration::try_from_secs_f64(s).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "a wait of {s} seconds: give a finite number >= 0, or None"
                ))
            })
        })
        .transpose()
}

/// What `item_states(indices)` returns: `removed` (bool), `cause` (the cause's name, or
/// None while not removed) and `uses` (int64), one entry per index.
pub(crate) fn states_dict<'py>(
    py: Python<'py>,
    states: &[replaystore::ItemState],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let removed: Vec<bool> = states.iter().map(|s| s.removed.is_some()).collect();
    let uses: Vec<i64> = states.iter().map(|s| s.uses as i64).collect();
    let cause: Vec<Option<&str>> = states.iter().map(|s| s.removed.map(|c| c.name())).collect();
    d.set_item("removed", numpy::PyArray1::from_vec(py, removed))?;
    d.set_item("cause", cause)?;
    d.set_item("uses", numpy::PyArray1::from_vec(py, uses))?;
    Ok(d)
}

/// `values` as a contiguous array of `T` with NumPy dtype `descr` (a copy only when it
/// is not one already: indices and priorities are small).
pub(crate) fn contiguous<'py, T: numpy::Element>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    descr: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    let values = &on_host(values)?;
    let a = py
        .import("numpy")?
        .call_method1("ascontiguousarray", (values, descr))?;
    Ok(a.cast_into::<PyArrayDyn<T>>()
        .map_err(PyErr::from)?
        .readonly())
}

/// `values` (an int array or sequence) as a contiguous `u64` array. Anything but
/// integers is refused, not cast: indices reach 2^56 and more (lane `k` starts at
/// `k << 56`), which a float cannot hold, so a cast would silently name other items
/// (`np.concatenate([uint64_array, [python_int]])` is float64).
pub(crate) fn index_array<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, u64>> {
    // What `sample` returned, handed straight back to `update_priorities`: no NumPy
    // call on the PER hot path.
    if let Ok(a) = values.cast::<PyArrayDyn<u64>>()
        && a.is_c_contiguous()
    {
        return Ok(a.readonly());
    }
    let np = py.import("numpy")?;
    let a = np.call_method1("asarray", (on_host(values)?,))?;
    let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
    let empty = a.getattr("size")?.extract::<usize>()? == 0;
    if !(kind == "u" || kind == "i" || empty) {
        let got: String = a.getattr("dtype")?.getattr("name")?.extract()?;
        return Err(SchemaError::new_err(format!(
            "{what}: expected integers, got {got} (no silent cast: an index above 2**53 \
             does not survive a float; keep indices as the uint64 arrays the buffer returns)"
        )));
    }
    if kind == "i" && !empty && a.call_method0("min")?.extract::<i64>()? < 0 {
        return Err(SchemaError::new_err(format!(
            "{what}: expected indices >= 0, got {}",
            a.call_method0("min")?
        )));
    }
    contiguous::<u64>(py, &a, "<u8")
}

/// A draw as the dict every sample and get returns: `sample` (the engine's
/// `sample_into`) runs with the GIL released and fills the arrays in place. Without
/// `out` they are fresh NumPy arrays, which become the dict's without a copy; with
/// `out`, the caller's arrays of those names (`sample(..., out=...)`), returned as given.
pub(crate) fn draw<'py>(
    py: Python<'py>,
    out: Option<&Bound<'py, PyDict>>,
    sample: impl FnOnce(&mut dyn Sink) -> replaystore::Result<()> + Send,
) -> PyResult<Bound<'py, PyDict>> {
    match out {
        None => {
            let mut sink = NumpySink::default();
            py.detach(|| sample(&mut sink)).map_err(to_py)?;
            sink.into_dict(py)
        }
        Some(out) => {
            let mut given = OutArrays::borrow(out)?;
            let mut sink = given.sink()?;
            py.detach(|| sample(&mut sink)).map_err(to_py)?;
            let filled = sink.into_filled();
            given.into_dict(py, &filled)
        }
    }
}

/// `draw` for a handle whose items may have variable-length fields: returned as
/// `values` says (`"list"`, `"flat"` or `"padded"`, padded with `pad`). `out=` takes
/// fixed fields only (its arrays are the caller's, sized before the draw).
pub(crate) fn draw_values<'py>(
    py: Python<'py>,
    out: Option<&Bound<'py, PyDict>>,
    values: &str,
    pad: f64,
    sample: impl FnOnce(&mut dyn Sink) -> replaystore::Result<()> + Send,
) -> PyResult<Bound<'py, PyDict>> {
    use crate::arrays::VarLayout;
    let layout = match values {
        "list" => VarLayout::List,
        "flat" => VarLayout::Flat,
        "padded" => VarLayout::Padded(pad),
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "values={other:?}: expected \"list\", \"flat\" or \"padded\""
            )));
        }
    };
    match out {
        Some(_) => draw(py, out, sample),
        None => {
            let mut sink = NumpySink::with_layout(layout);
            py.detach(|| sample(&mut sink)).map_err(to_py)?;
            sink.into_dict(py)
        }
    }
}

/// `values` as an int when the question was one, else as an array.
pub(crate) fn one_or_many<'py>(
    py: Python<'py>,
    values: Vec<u64>,
    lone: bool,
) -> PyResult<Bound<'py, PyAny>> {
    match (lone, values.first()) {
        (true, Some(&v)) => Ok(v.into_pyobject(py)?.into_any()),
        _ => Ok(PyArray1::from_vec(py, values).into_any()),
    }
}

/// `InvalidSample` (the engine's error, as Python sees it) for keywords of one draw
/// that do not go together.
fn refused<T>(why: &str) -> PyResult<T> {
    Err(to_py(Error::InvalidSample(why.to_owned())))
}

/// The transitions a Python `sample_transitions(n, obs, beta=, stack=, nstep=, gamma=,
/// goal=...)` asks for (the writer's and a reader's alike), or read at the step rows
/// `at` (a group's `at=`).
pub(crate) fn transitions<'a>(
    n: usize,
    obs: &'a [&'a str],
    beta: Option<f64>,
    (stack, nstep, gamma): (u64, u64, f64),
    her: Option<&'a Her>,
    at: Option<&'a [u64]>,
) -> PyResult<Request<'a>> {
    if let Some(at) = at {
        if beta.is_some() {
            return refused(
                "at= reads the transitions at given steps; beta= draws them by priority",
            );
        }
        return Ok(Request::transitions_at(at, obs)
            .stack(stack)
            .nstep(nstep, gamma)
            .into());
    }
    let drawn = Request::transitions(n, obs);
    let drawn = match beta {
        Some(b) => drawn.prioritized(b),
        None => drawn,
    };
    match her {
        Some(_) if nstep != 1 || stack != 1 => refused(
            "relabeling (goal=) draws transitions of one step without stacking (nstep=1, \
             stack=1): a new goal changes every reward of an n-step return",
        ),
        Some(h) => Ok(drawn.relabel(h.relabel()).gamma(gamma).into()),
        None => Ok(drawn.stack(stack).nstep(nstep, gamma).into()),
    }
}

/// Hindsight relabeling as `sample_transitions(..., goal=, achieved=, strategy=,
/// n_sampled_goal=, compute_reward=, info=)` asks for it (SB3's `HerReplayBuffer`
/// arguments): which fields, where new goals come from, the fraction `k / (k + 1)`,
/// and the function that gives the relabeled transitions their rewards.
#[derive(Debug)]
pub(crate) struct Her {
    goal: String,
    achieved: String,
    strategy: replaystore::GoalStrategy,
    n_sampled_goal: u64,
    fraction: f64,
    compute_reward: Option<Py<PyAny>>,
    info: Option<String>,
}

impl Her {
    /// The keywords, or `None` without `goal`; `achieved` must come with it.
    pub(crate) fn of(
        goal: Option<String>,
        achieved: Option<String>,
        strategy: &str,
        n_sampled_goal: u64,
        compute_reward: Option<Py<PyAny>>,
        info: Option<String>,
    ) -> PyResult<Option<Her>> {
        use replaystore::GoalStrategy as G;
        let (goal, achieved) = match (goal, achieved) {
            (Some(g), Some(a)) => (g, a),
            (None, None) if compute_reward.is_none() => return Ok(None),
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "relabeling needs goal= and achieved= (the desired and achieved goal \
                     fields); compute_reward= needs them too",
                ));
            }
        };
        let strategy = match strategy {
            "future" => G::Future,
            "final" => G::Final,
            "episode" => G::Episode,
            "random" => G::Random,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "strategy={other:?}: expected \"future\", \"final\", \"episode\" or \"random\""
                )));
            }
        };
        let k = n_sampled_goal as f64;
        Ok(Some(Her {
            goal,
            achieved,
            strategy,
            n_sampled_goal,
            fraction: k / (k + 1.0),
            compute_reward,
            info,
        }))
    }

    /// The keywords that build it again, set in `kw`.
    pub(crate) fn keywords(&self, py: Python<'_>, kw: &Bound<'_, PyDict>) -> PyResult<()> {
        use replaystore::GoalStrategy as G;
        let strategy = match self.strategy {
            G::Future => "future",
            G::Final => "final",
            G::Episode => "episode",
            G::Random => "random",
        };
        kw.set_item("goal", &self.goal)?;
        kw.set_item("achieved", &self.achieved)?;
        kw.set_item("strategy", strategy)?;
        kw.set_item("n_sampled_goal", self.n_sampled_goal)?;
        kw.set_item(
            "compute_reward",
            self.compute_reward.as_ref().map(|f| f.bind(py)),
        )?;
        kw.set_item("info", &self.info)?;
        Ok(())
    }

    fn relabel(&self) -> replaystore::Relabel<'_> {
        replaystore::Relabel {
            goal: &self.goal,
            achieved: &self.achieved,
            strategy: self.strategy,
            fraction: self.fraction,
        }
    }

    /// Calls `compute_reward(next_<achieved>, <goal>, info)` once for the relabeled
    /// rows of draw `d` and writes what it returns into their `reward` (if the schema
    /// has one) and `returns`. The relabeled rows are the draw's first ones
    /// (`Transitions::relabel`), so each array is passed as a view of its first rows, not
    /// a masked copy.
    pub(crate) fn rewards(&self, py: Python<'_>, d: &Bound<'_, PyDict>, n: usize) -> PyResult<()> {
        let Some(f) = &self.compute_reward else {
            return Ok(());
        };
        let item = |k: &str| {
            d.get_item(k)?
                .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(k.to_owned()))
        };
        // As the engine counts them (`Transitions::relabel`).
        let relabeled = (self.fraction * n as f64).round() as isize;
        let rel = pyo3::types::PySlice::new(py, 0, relabeled, 1);
        let pick = |k: &str| item(k)?.get_item(&rel);
        let info = match &self.info {
            Some(name) => pick(name)?,
            None => py.None().into_bound(py),
        };
        let achieved = pick(&format!("next_{}", self.achieved))?;
        let goal = pick(&self.goal)?;
        let r = f.bind(py).call1((achieved, goal, info))?;
        for key in ["reward", "returns"] {
            if let Some(a) = d.get_item(key)? {
                a.set_item(&rel, &r)?;
            }
        }
        Ok(())
    }
}

/// The sequences a Python `sample_sequences(n, length, obs, burn_in=, beta=)` asks for.
pub(crate) fn sequences<'a>(
    n: usize,
    (length, burn_in): (u64, u64),
    obs: &'a [&'a str],
    beta: Option<f64>,
) -> Request<'a> {
    let request = Request::sequences(n, length, obs).burn_in(burn_in);
    match beta {
        Some(b) => request.prioritized(b).into(),
        None => request.into(),
    }
}

/// A whole episode's columns as `add_episode` takes them: the observation fields (the
/// most rows: the reset's and one per step), then the step fields.
pub(crate) fn split_episode(
    cols: Vec<replaystore::Column<'_>>,
) -> (Vec<replaystore::Column<'_>>, Vec<replaystore::Column<'_>>) {
    let most = cols
        .iter()
        .map(replaystore::Column::batch_rows)
        .max()
        .unwrap_or(0);
    cols.into_iter().partition(|c| c.batch_rows() == most)
}

/// Which unit of whole rows a Python draw asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Whole {
    /// `sample_episodes`: ended episodes; `covering=` counts steps.
    Episodes,
    /// `sample_fragments`: the rows of one `add_batch` call; `covering=` counts rows.
    Fragments,
}

impl Whole {
    /// The unit's name: `Request.episodes` / `Request.fragments`, `sample_<name>`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Whole::Episodes => "episodes",
            Whole::Fragments => "fragments",
        }
    }
}

/// The episodes or fragments a Python `sample_episodes` / `sample_fragments(n |
/// covering=, beta=, replace=, remove=)` asks for.
pub(crate) fn whole_units(
    unit: Whole,
    n: Option<usize>,
    covering: Option<u64>,
    beta: Option<f64>,
    (replace, remove): (bool, bool),
) -> PyResult<Request<'static>> {
    let name = unit.name();
    match (n, covering, beta) {
        (Some(_), None, Some(_)) if remove => refused(&format!(
            "remove=True draws {name} uniformly, not by priority (beta=): draw them, then \
             remove(indices)"
        )),
        (Some(_), None, Some(_)) if !replace => refused(&format!(
            "replace=False draws {name} uniformly; beta= draws them by priority, with \
             replacement"
        )),
        (Some(n), None, Some(b)) => Ok(match unit {
            Whole::Episodes => Request::episodes(n).prioritized(b),
            Whole::Fragments => Request::fragments(n).prioritized(b),
        }),
        (Some(n), None, None) => Ok(match (unit, replace, remove) {
            (Whole::Episodes, _, true) => Request::episodes(n).remove().into(),
            (Whole::Episodes, false, false) => Request::episodes(n).without_replacement().into(),
            (Whole::Episodes, true, false) => Request::episodes(n).into(),
            (Whole::Fragments, _, true) => Request::fragments(n).remove().into(),
            (Whole::Fragments, false, false) => Request::fragments(n).without_replacement().into(),
            (Whole::Fragments, true, false) => Request::fragments(n).into(),
        }),
        // Distinct whatever `replace` says: units until their rows (steps) reach a count.
        (None, Some(_), Some(_)) => refused(&format!(
            "covering= draws whole {name} uniformly, not by priority (beta=)"
        )),
        (None, Some(rows), None) => {
            let covering = match unit {
                Whole::Episodes => Request::episodes_covering(rows),
                Whole::Fragments => Request::fragments_covering(rows),
            };
            Ok(if remove {
                covering.remove()
            } else {
                covering.into()
            })
        }
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "sample_{name} takes n or covering=, not both nor neither"
        ))),
    }
}

/// The groups a Python `sample_groups(n, by, unroll=, replace=, remove=)` asks for.
pub(crate) fn groups<'a>(
    n: usize,
    by: &'a [&'a str],
    unroll: u64,
    (replace, remove): (bool, bool),
) -> Request<'a> {
    let groups = Request::groups(n, by).unroll(unroll);
    match (replace, remove) {
        (_, true) => groups.remove().into(),
        (false, false) => groups.without_replacement().into(),
        (true, false) => groups.into(),
    }
}

/// The group key of a Python `by=`: a field name or a list of them.
pub(crate) fn group_key(by: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    match by.extract::<String>() {
        Ok(one) => Ok(vec![one]),
        Err(_) => by.extract(),
    }
}

/// The rows a Python `sample(n, beta=, replace=, remove=, by_group=)` asks for
/// (`by` empty: no `by_group`).
pub(crate) fn rows<'a>(
    n: usize,
    beta: Option<f64>,
    (replace, remove): (bool, bool),
    by: &'a [&'a str],
) -> PyResult<Request<'a>> {
    let rows = Request::rows(n);
    if let Some(b) = beta {
        return match (replace, remove, by.is_empty()) {
            (true, false, true) => Ok(rows.prioritized(b).into()),
            (_, true, _) => refused(
                "remove=True draws rows uniformly, oldest first or at given indices, not \
                 rows drawn by priority (beta=): draw them, then remove(indices)",
            ),
            (false, _, _) => refused(
                "replace=False draws rows uniformly; beta= draws them by priority, with \
                 replacement",
            ),
            (_, _, false) => {
                refused("by_group= draws uniform rows, not rows drawn by priority (beta=)")
            }
        };
    }
    Ok(match (by.is_empty(), replace, remove) {
        (false, _, true) => rows.by_group(by).remove(),
        (false, _, false) => rows.by_group(by).into(),
        (true, _, true) => rows.remove().into(),
        (true, false, false) => rows.without_replacement().into(),
        (true, true, false) => rows.into(),
    })
}

/// The indices a Python `get(indices)` reads (an int or an array-like).
pub(crate) fn get_indices<'py>(py: Python<'py>, indices: &Bound<'py, PyAny>) -> PyResult<Vec<u64>> {
    let array = index_array(py, indices, "indices")?;
    let given = array.as_slice()?;
    let mut out = Vec::new();
    // A failed allocation would abort the interpreter: a capped process says MemoryError.
    out.try_reserve_exact(given.len()).map_err(|_| {
        to_py(Error::OutOfMemory {
            what: format!("{} indices", given.len()),
            bytes: (given.len() as u64).saturating_mul(8),
        })
    })?;
    out.extend_from_slice(given);
    Ok(out)
}

/// A count from Python (`n`, `capacity`): a negative one is a `ValueError`, as Python's
/// own `random.sample(x, -1)` says, not the `OverflowError` of an unsigned integer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Count(pub u64);

impl Count {
    /// As a length.
    pub(crate) fn get(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Count {
    type Error = PyErr;

    fn extract(ob: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Count> {
        let v: i128 = ob.extract()?;
        u64::try_from(v).map(Count).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!("a count must be 0 or more, got {v}"))
        })
    }
}

/// A batch from Python: a dict of arrays, batch dimension first. A list of per-item
/// dicts (what a loop over env steps collects) is a `TypeError` saying how to stack it.
pub(crate) struct BatchDict<'py>(pub Bound<'py, PyDict>);

impl<'a, 'py> FromPyObject<'a, 'py> for BatchDict<'py> {
    type Error = PyErr;

    fn extract(ob: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<BatchDict<'py>> {
        if let Ok(d) = ob.cast::<PyDict>() {
            return Ok(BatchDict(d.to_owned()));
        }
        let kind = ob.get_type().name()?.to_string();
        let hint = match ob.cast::<pyo3::types::PyList>() {
            Ok(_) => {
                " (a list of per-item dicts? stack it: {k: np.stack([d[k] for d in items]) \
                 for k in items[0]}, or add each with add(**item))"
            }
            Err(_) => "",
        };
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "a batch is a dict of arrays, batch dimension first, not a {kind}{hint}"
        )))
    }
}

/// `values` with each nested mapping under a key that is no field but the prefix of
/// dotted ones (`obs` of `obs.pos` and `obs.vel`: a Dict space's fields) spread into
/// those names, at any depth: `add(obs={"pos": p, "vel": v})`. A dict or anything with
/// `items()` (Tianshou's `Batch`) is a mapping. The same dict when no key is such a
/// prefix, so flat calls pay one look at each key.
fn spread_nested<'py>(
    schema: &Schema,
    values: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyDict>> {
    let names = || {
        (schema.fields().iter().map(replaystore::Field::name))
            .chain(schema.var_fields().iter().map(replaystore::VarField::name))
    };
    // A schema without dotted names (most) has nothing to spread: no key is looked at.
    if !names().any(|n| n.contains('.')) {
        return Ok(values.clone());
    }
    let is_field = |k: &str| names().any(|n| n == k);
    let is_prefix =
        |k: &str| names().any(|n| n.strip_prefix(k).is_some_and(|rest| rest.starts_with('.')));
    let mut nested = false;
    for key in values.keys() {
        let key: String = key.extract()?;
        if !is_field(&key) && is_prefix(&key) {
            nested = true;
            break;
        }
    }
    if !nested {
        return Ok(values.clone());
    }
    fn spread<'py>(
        out: &Bound<'py, PyDict>,
        name: String,
        value: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let items = match value.cast::<PyDict>() {
            Ok(d) => Some(d.items().into_any()),
            Err(_) if value.hasattr("items")? && !value.hasattr("dtype")? => {
                Some(value.call_method0("items")?)
            }
            Err(_) => None,
        };
        match items {
            Some(items) => {
                for pair in items.try_iter()? {
                    let (k, v): (String, Bound<'py, PyAny>) = pair?.extract()?;
                    spread(out, format!("{name}.{k}"), v)?;
                }
                Ok(())
            }
            None => out.set_item(name, value),
        }
    }
    let out = PyDict::new(values.py());
    for (k, v) in values.iter() {
        let key: String = k.extract()?;
        match !is_field(&key) && is_prefix(&key) {
            true => spread(&out, key, v)?,
            false => out.set_item(key, v)?,
        }
    }
    Ok(out)
}

/// A draw's flat dict with dotted names (`obs.pos`, `next_obs.pos`) made nested
/// (`{"obs": {"pos": ...}}`), the arrays themselves shared, not copied.
pub(crate) fn nest<'py>(flat: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    let py = flat.py();
    let out = PyDict::new(py);
    for (k, v) in flat.iter() {
        let key: String = k.extract()?;
        let mut parts = key.split('.').peekable();
        let mut at = out.clone();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                at.set_item(part, &v)?;
                break;
            }
            let next = match at.get_item(part)? {
                Some(d) => d.cast_into::<PyDict>().map_err(|_| {
                    SchemaError::new_err(format!(
                        "{key}: {part} is both a field and the prefix of fields"
                    ))
                })?,
                None => {
                    let d = PyDict::new(py);
                    at.set_item(part, &d)?;
                    d
                }
            };
            at = next;
        }
    }
    Ok(out)
}

/// Observation names with each that is no field but the prefix of dotted ones (`obs`
/// for a Dict space's `obs.pos`, `obs.vel`) replaced by those fields, in schema order.
pub(crate) fn expand_prefixes(schema: &Schema, names: Vec<String>) -> Vec<String> {
    let fields: Vec<&str> = (schema.fields().iter().map(replaystore::Field::name))
        .chain(schema.var_fields().iter().map(replaystore::VarField::name))
        .collect();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let under: Vec<&str> = (fields.iter().copied())
            .filter(|f| {
                f.strip_prefix(n.as_str())
                    .is_some_and(|r| r.starts_with('.'))
            })
            .collect();
        match fields.contains(&n.as_str()) || under.is_empty() {
            true => out.push(n),
            false => out.extend(under.into_iter().map(str::to_owned)),
        }
    }
    out
}

/// A torch tensor (on any device, with or without grad) as its CPU tensor, which NumPy
/// reads in place; anything else as it is. So `update_priorities(batch["indices"],
/// td_errors)` takes what a training step on the GPU has.
pub(crate) fn on_host<'py>(values: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if values.cast::<numpy::PyUntypedArray>().is_ok()
        || !(values.hasattr("detach")? && values.hasattr("cpu")?)
    {
        return Ok(values.clone());
    }
    values.call_method0("detach")?.call_method0("cpu")
}

/// Warns that a name is going (a `DeprecationWarning` pointing at the caller's line),
/// for the one release an old spelling is kept after the README showed it.
pub(crate) fn deprecated(py: Python<'_>, what: &str) -> PyResult<()> {
    let category = py.get_type::<pyo3::exceptions::PyDeprecationWarning>();
    let message = std::ffi::CString::new(format!("{what}; the old name goes in the next release"))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    PyErr::warn(py, &category, &message, 1)
}
