//! `replaystore.ReplayBuffer` (the writer) and `replaystore.Reader` (any number of
//! other processes). Every call that touches the files runs with the GIL released.

use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use replaystore::{ReplayBuffer, Schema, State};

use crate::calls::*;
use crate::draws::{self, Asked, Drawer, Drawing, OutType, Output, PyRequest};
use crate::errors::{StateError, to_py};
use crate::held::{Handle, Held, either, held, open_buf};
use crate::schema::PySchema;
use crate::units;

/// The key a state dict carries its bytes under, with the format they follow.
pub(crate) const STATE_KEY: &str = "replaystore_state";

/// A replay buffer in the folder `path`, opened by the one process that writes it.
///
/// Create it with `ReplayBuffer.create(path, schema, capacity)`, reopen it with
/// `ReplayBuffer.open(path)`; `with` closes it (and makes it durable).
#[pyclass(module = "replaystore", name = "ReplayBuffer", frozen)]
pub struct PyBuffer {
    /// Taken by each call in turn (see `shared`); `None` once closed. Shared with the
    /// episode views this buffer hands out.
    inner: Held,
    /// The buffer's schema (it never changes): arrays are checked against it before
    /// the lock is taken, so no Python conversion runs while other threads wait.
    schema: Schema,
    /// The most bytes of variable-length values one add can bring (the chunk ring's
    /// payload): a larger value is refused before it is copied.
    value_room: u64,
    /// How adds take arrays of another dtype (`cast`): true for NumPy's same_kind.
    same_kind: std::sync::atomic::AtomicBool,
}

impl PyBuffer {
    /// The Python handle of an engine handle (created, opened, or a lane of `Lanes`).
    pub(crate) fn of(handle: Handle) -> PyBuffer {
        let schema = handle.schema().clone();
        let value_room = handle.value_room();
        PyBuffer {
            inner: held(handle),
            schema,
            value_room,
            same_kind: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// How this handle's adds take arrays of another dtype.
    fn cast_mode(&self) -> crate::arrays::Cast {
        match self.same_kind.load(std::sync::atomic::Ordering::Relaxed) {
            true => crate::arrays::Cast::SameKind,
            false => crate::arrays::Cast::Exact,
        }
    }

    /// `step` (prev or next) of each of `indices`, as one int or an array.
    fn step_each<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        step: fn(&Handle, u64) -> replaystore::Result<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (idx, lone) = index_list(py, indices)?;
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let out = idx
            .iter()
            .map(|&i| step(buf, i))
            .collect::<replaystore::Result<Vec<u64>>>()
            .map_err(to_py)?;
        one_or_many(py, out, lone)
    }
}

impl Drawer for PyBuffer {
    fn drawing<'py>(
        &self,
        py: Python<'py>,
        seed: Option<u64>,
        _schema: bool,
        f: &mut Drawing<'_, 'py>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        if let Some(s) = seed {
            buf.reseed(s);
        }
        let schema = Some(&self.schema);
        either!(buf, b => f(schema, &mut |r, sink| b.sample_into(r, sink)))
    }
}

/// Says `message` on the "replaystore" logger at `level` (Python's logging decides
/// where it goes).
fn log(py: Python<'_>, level: &str, message: String) -> PyResult<()> {
    py.import("logging")?
        .call_method1("getLogger", ("replaystore",))?
        .call_method1(level, (message,))?;
    Ok(())
}

#[pymethods]
impl PyBuffer {
    /// Refuses, naming the class methods that make a `ReplayBuffer`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        Err(crate::errors::no_constructor(
            "ReplayBuffer",
            "ReplayBuffer.create(path, schema, capacity, ...) for a new buffer, ReplayBuffer.open(path) for an existing one",
        ))
    }

    /// Opens the buffer in `path`, or creates it there with `schema`, `capacity` and
    /// `create`'s keywords when the folder holds none: what a resumable training
    /// script calls. An existing buffer whose schema or capacity differ from the ones
    /// given is refused (`SchemaError`, both shown), not silently reused.
    ///
    /// >>> import replaystore as rs, tempfile
    /// >>> path = tempfile.mkdtemp() + "/b"
    /// >>> buf = rs.ReplayBuffer.open_or_create(path, {"x": "int64"}, 100)
    /// >>> _ = buf.add(x=1); buf.close()
    /// >>> len(rs.ReplayBuffer.open_or_create(path, {"x": "int64"}, 100))
    /// 1
    #[classmethod]
    #[pyo3(signature = (path, schema, capacity, **options))]
    fn open_or_create<'py>(
        cls: &Bound<'py, pyo3::types::PyType>,
        path: PathBuf,
        schema: &Bound<'py, PyAny>,
        capacity: Count,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !path.join(replaystore::internal::storage::MANIFEST).exists() {
            return cls.call_method("create", (path, schema, capacity.0), options);
        }
        let want = Bound::new(cls.py(), crate::schema::PySchema::from_py(schema)?)?;
        let buf = cls.call_method1("open", (path.clone(),))?;
        let have = buf.getattr("schema")?;
        let have_capacity: u64 = buf.getattr("capacity")?.extract()?;
        if !have.eq(&want)? || have_capacity != capacity.0 {
            buf.call_method0("close")?;
            return Err(crate::errors::SchemaError::new_err(format!(
                "{} holds a buffer of {have_capacity} items with {}, not the {} items with \
                 {} asked for: open it with ReplayBuffer.open, or give another path",
                path.display(),
                have.repr()?,
                capacity.0,
                want.repr()?
            )));
        }
        Ok(buf)
    }

    /// Creates a buffer of `capacity` items in the folder `path` (which must not exist or
    /// be empty). `alpha` makes it prioritized (new items get the largest priority seen);
    /// `fragments=True` remembers each `add` / `add_batch` call as one unit for
    /// `sample_fragments` (RLlib's fragments, sequences and episodes).
    /// `episodic=True` stores episodes step by step (`add_reset`, `add_step`) for
    /// `prev` / `next`, n-step and stacked transitions, sequences and whole episodes;
    /// `whole_episodes=True` also evicts whole episodes only. With variable-length
    /// fields (`"str"`, `"bytes"`, `(dtype, (None,))`), `heap_bytes` is the most
    /// their values may take (default 4 KiB per item; disk is reserved as values
    /// arrive) and `chunk_bytes` the rows of its ring. An add whose values need more
    /// while fewer than `capacity` items are held raises `ValueSpaceFullError`, nothing
    /// stored, unless `evict_for_room=True` lets it evict the oldest items early.
    #[staticmethod]
    #[pyo3(signature = (path, schema, capacity, *, alpha=None, eps=1e-6, seed=None, segment_slots=None, fragments=false, episodic=false, whole_episodes=false, heap_bytes=None, chunk_bytes=None, evict_for_room=false, item_states=false, max_use=None, max_size=None, reservoir=None, min_size_to_sample=None, samples_per_insert=None, error_buffer=None))]
    #[expect(
        clippy::too_many_arguments,
        reason = "Python keyword arguments, each a Config option"
    )]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        schema: &Bound<'_, PyAny>,
        capacity: Count,
        alpha: Option<f64>,
        eps: f64,
        seed: Option<u64>,
        segment_slots: Option<u64>,
        fragments: bool,
        episodic: bool,
        whole_episodes: bool,
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
    ) -> PyResult<PyBuffer> {
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
        let config = life.apply(config(schema, capacity, alpha, eps, seed, segment_slots))?;
        let mut config = value_ring(config, heap_bytes, chunk_bytes, evict_for_room);
        if whole_episodes {
            config = config.whole_episodes();
        } else if episodic {
            config = config.episodic();
        }
        if fragments {
            config = config.fragments();
        }
        let buf = py
            .detach(|| ReplayBuffer::create(path, config))
            .map_err(to_py)?;
        // Segments take disk as data arrives: say what the buffer holds now and the
        // most it may take, on the "replaystore" logger: INFO, or WARNING when that is
        // more than the disk has free now (an add that finds it full raises then).
        let stats = buf.stats();
        let human = replaystore_cli::show::human;
        let free: u64 = py
            .import("shutil")?
            .call_method1("disk_usage", (buf.dir(),))?
            .getattr("free")?
            .extract()?;
        let mut message = format!(
            "{}: created; {} on disk now, at most {} once every segment is written \
             (disk is reserved as items arrive)",
            buf.dir().display(),
            human(stats.bytes_on_disk),
            human(stats.bytes_at_most)
        );
        let level = if stats.bytes_at_most > stats.bytes_on_disk + free {
            message += &format!(
                "; the disk has {} free: an add that finds it full raises DiskFullError",
                human(free)
            );
            "warning"
        } else {
            "info"
        };
        log(py, level, message)?;
        Ok(PyBuffer::of(Handle::Writer(buf)))
    }

    /// Opens the buffer in `path` for writing; `actor=True` adds beside a priority owner
    /// (Ape-X) without touching the priorities.
    #[staticmethod]
    #[pyo3(signature = (path, *, actor=false))]
    fn open(py: Python<'_>, path: PathBuf, actor: bool) -> PyResult<PyBuffer> {
        let buf = py
            .detach(|| {
                if actor {
                    ReplayBuffer::open_actor(path).map(Handle::Actor)
                } else {
                    ReplayBuffer::open(path).map(Handle::Writer)
                }
            })
            .map_err(to_py)?;
        if let Some(r) = either!(&buf, b => b.recovery()) {
            // The last writer did not close the buffer: say what the open kept, on the
            // "replaystore" logger (Python's logging decides where it goes).
            let dir = either!(&buf, b => b.dir().display().to_string());
            let message = format!(
                "{dir}: the last writer did not close the buffer (crash, kill or power \
                 loss); recovered items {}..{}: {} past the last commit kept, {} dropped",
                r.head, r.tail, r.rolled_forward, r.dropped
            );
            log(py, "warning", message)?;
        }
        Ok(PyBuffer::of(buf))
    }

    /// Adds one item: `buf.add(obs=o, action=a, reward=1.0, done=False)`. Returns its
    /// index.
    #[pyo3(signature = (**fields))]
    fn add(&self, py: Python<'_>, fields: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
        let empty = PyDict::new(py);
        let fields = fields.unwrap_or(&empty);
        let inputs = inputs_cast(&self.schema, fields, true, self.cast_mode())?;
        let var = var_inputs(&self.schema, fields, false, false, self.value_room)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| either!(buf, b => b.add(&cols))).map_err(to_py)
    }

    /// Adds `n` items from a dict of arrays with the batch dimension first
    /// (`{"obs": (n, 17) float32, ...}`), with their initial `priorities` if given
    /// (otherwise the largest seen). Every array is checked before anything is written.
    /// Returns the new items' indices.
    #[pyo3(signature = (batch, *, priorities=None))]
    fn add_batch<'py>(
        &self,
        py: Python<'py>,
        batch: BatchDict<'py>,
        priorities: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let batch = &batch.0;
        let priorities = priorities
            .map(|p| contiguous::<f64>(py, p, "<f8"))
            .transpose()?;
        let inputs = inputs_cast(&self.schema, batch, true, self.cast_mode())?;
        let var = var_inputs(&self.schema, batch, true, false, self.value_room)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let range = match &priorities {
            Some(p) => {
                let p = p.as_slice()?;
                let buf = buf.owner()?;
                py.detach(|| buf.add_batch_with_priorities(&cols, p))
            }
            None => py.detach(|| either!(buf, b => b.add_batch(&cols))),
        }
        .map_err(to_py)?;
        Ok(PyArray1::from_vec(py, range.collect()))
    }

    /// The items at `indices` (live ones; an evicted index raises `EvictedError`), as a
    /// dict of arrays plus `indices`.
    /// Variable-length fields come back as `values` says: `"list"` (a list of `str`,
    /// `bytes` or 1-D arrays), `"flat"` (the values end to end, plus `<name>_offsets`),
    /// or `"padded"` (a 2-D array padded with `pad`, plus `<name>_lengths`).
    /// `drawn=True`: the indices are a draw the caller made with its own RNG (an adapter
    /// keeping its library's sampling), counted in `stats()["sampled"]` and `info`.
    #[pyo3(signature = (indices, *, values="list", pad=0.0, drawn=false))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        values: &str,
        pad: f64,
        drawn: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let request = PyRequest::at(py, indices, drawn, false, false)?;
        draws::sample(py, self, &request, None, &Output::values(None, values, pad))
    }

    /// Drops every item (indices go on from where they were; priorities of new items
    /// start again from the largest seen).
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| either!(buf, b => b.clear())).map_err(to_py)
    }

    /// Whether every read checks each item a flush has sealed against its checksum
    /// (default True): a damaged row raises CorruptError naming its file and offset.
    /// Setting it False saves the check's cost on every sample and get, and serves a
    /// flipped bit as data: for benchmarks, or buffers verified since last written.
    #[getter]
    fn read_checks(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(open_buf(&mut self.inner.lock(py))?.read_checks())
    }

    #[setter]
    fn set_read_checks(&self, py: Python<'_>, on: bool) -> PyResult<()> {
        open_buf(&mut self.inner.lock(py))?.set_read_checks(on);
        Ok(())
    }

    /// Bytes of added rows that may be on their way to disk before an add waits
    /// (default 64 MiB; 0 when off, or when the ring is no larger than the window plus
    /// a chunk). The writer checksums rows and starts their writeback a little behind
    /// the newest, so `flush()` and the first `get_state()` after filling a large buffer
    /// find at most about this much still to write (W2, 2.8 GB: 1.1 s without, 11-16 ms
    /// with). Set 0 to leave write-back to the kernel: a new ring then fills faster and
    /// the next flush writes what it left. Not stored: set it after each open.
    /// How adds take values of another type: `"exact"` (the default: arrays of the
    /// field's dtype, NumPy, torch or JAX alike; single values and lists when no value
    /// changes) or `"same_kind"` (arrays of the same kind converted, as NumPy's
    /// `astype(casting="same_kind")`: float64 into float32, int64 into int32, never
    /// float into int; overflow refused). Not stored: set it after each open.
    #[getter]
    fn cast(&self) -> &'static str {
        match self.same_kind.load(std::sync::atomic::Ordering::Relaxed) {
            true => "same_kind",
            false => "exact",
        }
    }

    #[setter(cast)]
    fn set_cast(&self, mode: &str) -> PyResult<()> {
        let same_kind = match mode {
            "exact" => false,
            "same_kind" => true,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "cast is 'exact' or 'same_kind', not {other:?}"
                )));
            }
        };
        self.same_kind
            .store(same_kind, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Unnamed checkpoints `get_state()` keeps: the newest 3 unless set; `None` keeps
    /// every one (each holds the segments the writer has copied since). Named ones
    /// are kept until deleted. Not stored: each open starts at 3.
    #[getter]
    fn keep_states(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        Ok(either!(open_buf(&mut self.inner.lock(py))?, b => b.keep_states()))
    }

    #[setter]
    fn set_keep_states(&self, py: Python<'_>, k: Option<Count>) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        either!(open_buf(&mut held)?, b => b.set_keep_states(k.map(Count::get)));
        Ok(())
    }

    #[getter]
    fn write_behind(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(open_buf(&mut self.inner.lock(py))?.write_behind())
    }

    #[setter]
    fn set_write_behind(&self, py: Python<'_>, window_bytes: u64) -> PyResult<()> {
        open_buf(&mut self.inner.lock(py))?.set_write_behind(window_bytes);
        Ok(())
    }

    /// The priority new items get: the largest `priority + eps` seen so far (`None`
    /// when the buffer keeps no priorities).
    #[getter]
    fn max_priority(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        Ok(open_buf(&mut self.inner.lock(py))?
            .priority_summary()
            .map(|s| s.max_priority))
    }

    /// Draws `n` items: uniformly (with replacement unless `replace=False`), or by
    /// priority when `beta` is given (then `weights` holds the importance weights).
    /// Returns a dict of arrays, one per field (`[n, *shape]`), plus `indices`.
    /// `seed` restarts the sampling RNG first, for a repeatable draw. `out` (a dict kept
    /// from an earlier draw of the same shape, as every draw method takes) is filled in
    /// place and returned: a training loop then allocates nothing per batch. An array of
    /// `out` that is absent, of another dtype or shape, read-only or not C-contiguous
    /// raises `SchemaError` naming it; on any error its arrays may hold part of a draw.
    /// Variable-length fields come back as `values` says (see `get`); `out` takes
    /// fixed fields only. With item states, removed items are never drawn;
    /// `remove=True` draws distinct items and removes them, and
    /// `by_group=["env_id"]` draws distinct items, an even share of every group of that
    /// key first (UnstableBaselines' stratified strategies).
    /// `out_type="torch"` returns the arrays as tensors (`replaystore.torch.as_tensors`),
    /// `"jax"` as `jax.Array`s (`replaystore.jax.as_jax`): the same memory on the CPU.
    ///
    /// `n` may instead be a `Request` (`Request.transitions(32, "obs", nstep=3)`, any
    /// unit): then it holds the draw's options, and only `seed`, `out`, `values`, `pad`,
    /// `nested` and `out_type` go beside it.
    #[pyo3(signature = (n, *, beta=None, seed=None, replace=true, out=None, values="list", pad=0.0, remove=false, by_group=None, nested=false, out_type="numpy"))]
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
        remove: bool,
        by_group: Option<Vec<String>>,
        nested: bool,
        out_type: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let set = [
            ("beta", beta.is_some()),
            ("replace", !replace),
            ("remove", remove),
            ("by_group", by_group.is_some()),
        ];
        // The draw checks the size before any allocation: sample(2**45) is a
        // MemoryError, not an abort.
        let request = n.request(&set, |n| {
            PyRequest::rows(n, beta, replace, remove, by_group)
        })?;
        let output = Output {
            out,
            values,
            pad,
            nested,
            out_type: OutType::parse(out_type, out)?,
        };
        draws::sample(py, self, request.get(), seed, &output)
    }

    /// Deprecated: `sample(n, remove=True)`, which this calls after a
    /// `DeprecationWarning`. Kept one release because the README showed it.
    #[pyo3(signature = (n, *, seed=None, out=None, values="list", pad=0.0, by_group=None))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature's keywords")]
    fn pop_batch<'py>(
        &self,
        py: Python<'py>,
        n: Count,
        seed: Option<u64>,
        out: Option<&Bound<'py, PyDict>>,
        values: &str,
        pad: f64,
        by_group: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        deprecated(py, "ReplayBuffer.pop_batch(n) is sample(n, remove=True)")?;
        let n = n.get();
        self.sample(
            py,
            Asked::Count(Count(n as u64)),
            None,
            seed,
            true,
            out,
            values,
            pad,
            true,
            by_group,
            false,
            "numpy",
        )
    }

    /// Removes the live items at `indices` before the ring overwrites them (DI-engine's
    /// `delete`): no draw or read returns them again and `len` stops counting them.
    /// Returns how many were removed now (an item removed before is skipped). Every
    /// index must be live (else `EvictedError`, and nothing is removed).
    fn remove(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<u64> {
        let idx = get_indices(py, indices)?;
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| buf.remove(&idx)).map_err(to_py)
    }

    /// Seconds a draw or an add the rate limiter holds back waits for another process
    /// before raising `RateLimitedError` (None, the default: it raises at once). Not
    /// stored: set it after each open.
    #[getter]
    fn rate_limit_wait(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        Ok(open_buf(&mut self.inner.lock(py))?
            .rate_limit_wait()
            .map(|d| d.as_secs_f64()))
    }

    #[setter]
    fn set_rate_limit_wait(&self, py: Python<'_>, seconds: Option<f64>) -> PyResult<()> {
        let wait = seconds_to_duration(seconds)?;
        open_buf(&mut self.inner.lock(py))?.set_rate_limit_wait(wait);
        Ok(())
    }

    /// Removes the live items whose tag, the integer field `field` (the learner
    /// iteration or policy version that produced them), is more than `max_staleness`
    /// behind `now` (DI-engine's `staleness_check`). Returns how many were removed.
    fn remove_stale(
        &self,
        py: Python<'_>,
        field: &str,
        now: i64,
        max_staleness: u64,
    ) -> PyResult<u64> {
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| buf.remove_stale(field, now, max_staleness))
            .map_err(to_py)
    }

    /// Takes the `n` oldest items not removed (fewer when fewer are left; `EmptyError`
    /// when none is) and removes them: a FIFO queue (RLlib's `FifoReplayBuffer`), each
    /// item returned once, oldest first.
    #[pyo3(signature = (n, *, out=None, values="list", pad=0.0))]
    fn consume<'py>(
        &self,
        py: Python<'py>,
        n: Count,
        out: Option<&Bound<'py, PyDict>>,
        values: &str,
        pad: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let request = PyRequest::oldest(n, true)?;
        draws::sample(py, self, &request, None, &Output::values(out, values, pad))
    }

    /// What each live item at `indices` is: a dict of `removed` (bool array), `cause`
    /// (list: `"explicit"`, `"sampled"`, `"used_up"`, ... or None) and `uses` (int64
    /// array: draws that returned it, DI-engine's use count).
    fn item_states<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let idx = get_indices(py, indices)?;
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let states = buf.item_states(&idx).map_err(to_py)?;
        states_dict(py, &states)
    }

    /// Starts an episode with what `env.reset()` returned: `buf.add_reset(obs=o)` (the
    /// observation fields; other fixed fields stay zero, other text and token fields
    /// empty). An episode still open is cut (truncated).
    /// Returns `{"index", "episode", "t", "ended"}`.
    #[pyo3(signature = (**fields))]
    fn add_reset<'py>(
        &self,
        py: Python<'py>,
        fields: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let empty = PyDict::new(py);
        let fields = fields.unwrap_or(&empty);
        let inputs = inputs_cast(&self.schema, fields, false, self.cast_mode())?;
        let var = var_inputs(&self.schema, fields, false, true, self.value_room)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let info = py
            .detach(|| either!(buf, b => b.add_reset(&cols)))
            .map_err(to_py)?;
        units::step_dict(py, &info)
    }

    /// Adds what `env.step()` returned to the open episode: every field (the action,
    /// its reward, the observation it led to) and whether the episode `terminated` or
    /// was `truncated` here (stored as the step's flags, so these two names are not
    /// field names here). Returns `{"index", "episode", "t", "ended"}`, `ended` being
    /// `(return, steps, start index)` on the step that ends the episode.
    #[pyo3(signature = (*, terminated=false, truncated=false, **fields))]
    fn add_step<'py>(
        &self,
        py: Python<'py>,
        terminated: bool,
        truncated: bool,
        fields: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let empty = PyDict::new(py);
        let fields = fields.unwrap_or(&empty);
        let inputs = inputs_cast(&self.schema, fields, true, self.cast_mode())?;
        let var = var_inputs(&self.schema, fields, false, false, self.value_room)?;
        let cols = columns(&inputs, &var)?;
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let info = py
            .detach(|| either!(buf, b => b.add_step(&cols, terminated, truncated)))
            .map_err(to_py)?;
        units::step_dict(py, &info)
    }

    /// The episode holding item `index`: `{"id", "start", "rows", "steps",
    /// "terminated", "truncated", "ret", "ret_complete"}`.
    fn episode<'py>(&self, py: Python<'py>, index: u64) -> PyResult<Bound<'py, PyDict>> {
        let e = open_buf(&mut self.inner.lock(py))?
            .episode(index)
            .map_err(to_py)?;
        units::episode_dict(py, &e)
    }

    /// Episode `id` as a view with RLlib's `SingleAgentEpisode` getters
    /// (`get_observations`, `get_actions`, ...), reading fields `obs`, `action`,
    /// `reward` and `info`.
    #[pyo3(signature = (id, *, obs="obs", action="action", reward="reward", info="info"))]
    fn get_episode(
        slf: &Bound<'_, Self>,
        id: u64,
        obs: &str,
        action: &str,
        reward: &str,
        info: &str,
    ) -> PyResult<crate::episode::PyEpisode> {
        let py = slf.py();
        let chunk = {
            let mut held = slf.get().inner.lock(py);
            either!(open_buf(&mut held)?, b => b.episode_chunk(id)).map_err(to_py)?
        };
        let names = [obs, action, reward, info].map(str::to_owned);
        Ok(crate::episode::PyEpisode::new(
            slf.get().inner.clone(),
            chunk,
            names,
        ))
    }

    /// Every episode with a live row, oldest first, as views (see `get_episode`).
    #[pyo3(signature = (*, obs="obs", action="action", reward="reward", info="info"))]
    fn iter_episodes<'py>(
        slf: &Bound<'py, Self>,
        obs: &str,
        action: &str,
        reward: &str,
        info: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = slf.py();
        let chunks = {
            let mut held = slf.get().inner.lock(py);
            let buf = open_buf(&mut held)?;
            let list = buf.episodes().map_err(to_py)?;
            list.iter()
                .map(|e| either!(&*buf, b => b.episode_chunk(e.id)))
                .collect::<replaystore::Result<Vec<_>>>()
                .map_err(to_py)?
        };
        let names = [obs, action, reward, info].map(str::to_owned);
        crate::episode::views(py, &slf.get().inner, chunks, names)
    }

    /// Adds a whole episode in one call (how RLlib's new stack and UnstableBaselines
    /// add data): `batch` maps each field to its rows, the observation fields with one
    /// row more than the others (what `env.reset()` returned, then each step's), every
    /// other field one row per step. Ends it terminated or truncated as said. Returns
    /// its record (as `episode` describes it).
    #[pyo3(signature = (batch, *, terminated=false, truncated=false))]
    fn add_episode<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyDict>,
        terminated: bool,
        truncated: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inputs = inputs_cast(&self.schema, batch, false, self.cast_mode())?;
        // One value per row: the observations' T + 1, the steps' T.
        let var = var_inputs(&self.schema, batch, true, false, self.value_room)?;
        let cols = columns(&inputs, &var)?;
        let (obs, steps) = split_episode(cols);
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let e = py
            .detach(|| either!(buf, b => b.add_episode(&obs, &steps, terminated, truncated)))
            .map_err(to_py)?;
        units::episode_dict(py, &e)
    }

    /// The episodes with a live row, oldest first (as `episode` describes them).
    fn episodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = open_buf(&mut self.inner.lock(py))?
            .episodes()
            .map_err(to_py)?;
        units::episode_list(py, &list)
    }

    /// The episodes not ended yet (at most one: the open one).
    fn unfinished_episodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = open_buf(&mut self.inner.lock(py))?
            .unfinished_episodes()
            .map_err(to_py)?;
        units::episode_list(py, &list)
    }

    /// The step before each of `indices` in its episode; an episode's first live step
    /// stays put (Tianshou's `prev`). An int gives an int, an array an array.
    fn prev<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.step_each(py, indices, Handle::prev)
    }

    /// The step after each of `indices` in its episode; an episode's last stored step
    /// stays put (Tianshou's `next`). An int gives an int, an array an array.
    fn next<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.step_each(py, indices, Handle::next)
    }

    /// This buffer's snapshots (checkpoints), oldest first: `{"name", "path",
    /// "generation", "len", "bytes_shared", "bytes_owned", "created", "problem"}`.
    fn snapshots<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = open_buf(&mut self.inner.lock(py))?
            .snapshots()
            .map_err(to_py)?;
        let items = list
            .iter()
            .map(|s| units::snapshot_dict(py, s))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Deletes snapshot `name` (the files it shares with the buffer stay).
    fn delete_snapshot(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| either!(buf, b => b.delete_snapshot(name)))
            .map_err(to_py)
    }

    /// Deletes all but the `k` newest snapshots; returns the names deleted.
    fn keep_last(&self, py: Python<'_>, k: usize) -> PyResult<Vec<String>> {
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| either!(buf, b => b.keep_last(k)))
            .map_err(to_py)
    }

    /// Sets the priorities of the items at `indices` (typically |TD error|). Items
    /// evicted since they were sampled are skipped and counted. Returns
    /// `{"applied": .., "stale": ..}`.
    fn update_priorities<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
        priorities: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        update_from_py(py, indices, priorities, |idx, pr| {
            let mut held = self.inner.lock(py);
            let buf = open_buf(&mut held)?.owner()?;
            py.detach(|| buf.update_priorities(idx, pr)).map_err(to_py)
        })
    }

    /// The priorities' totals, or `None` for a buffer without priorities: `alpha`,
    /// `eps`, `total` (the sum of every live item's `(priority + eps)^alpha`),
    /// `min_leaf` (the smallest of those, `inf` if none), `max_priority`, `updates`
    /// and `stale_updates`. A draw across buffers needs the first two sums: shards are
    /// chosen by `total` and weighed against the smallest `min_leaf` of all.
    fn priority_summary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut held = self.inner.lock(py);
        // An actor's priorities are the owner's: `owner` says so, as for `priorities`.
        let Some(s) = open_buf(&mut held)?.owner()?.priority_summary() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("alpha", s.alpha)?;
        d.set_item("eps", s.eps)?;
        d.set_item("total", s.total)?;
        d.set_item("min_leaf", s.min_leaf)?;
        d.set_item("max_priority", s.max_priority)?;
        d.set_item("updates", s.updates)?;
        d.set_item("stale_updates", s.stale_updates)?;
        Ok(Some(d))
    }

    /// The priority (`priority + eps`, as stored) of each live item at `indices`.
    fn priorities<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let idx = index_array(py, indices, "indices")?;
        let idx = idx.as_slice()?;
        let p = open_buf(&mut self.inner.lock(py))?
            .owner()?
            .priorities(idx)
            .map_err(to_py)?;
        Ok(PyArray1::from_vec(py, p))
    }

    /// A checkpoint of the buffer as it is now, in milliseconds whatever its size: a
    /// small picklable dict (`torch.save` it with the model). The buffer may run ahead
    /// afterwards; `set_state` brings it back.
    /// `name` names the snapshot it keeps, kept until deleted; without one it is
    /// `gen-<generation>`, and only the newest `keep_states` (3 unless set) of those
    /// are kept: `keep_last=k` keeps the newest `k` this time.
    #[pyo3(signature = (name=None, *, keep_last=None))]
    fn get_state<'py>(
        &self,
        py: Python<'py>,
        name: Option<&str>,
        keep_last: Option<Count>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if name.is_some() && keep_last.is_some() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "keep_last bounds the unnamed checkpoints; a named one is kept until deleted",
            ));
        }
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let state = py
            .detach(|| match (name, keep_last) {
                (Some(n), _) => either!(buf, b => b.get_state_named(n)),
                (None, Some(k)) => either!(buf, b => b.get_state_keeping(Some(k.get()))),
                (None, None) => either!(buf, b => b.get_state()),
            })
            .map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item(STATE_KEY, PyBytes::new(py, &state.to_bytes()))?;
        d.set_item("name", &state.name)?;
        d.set_item("path", buf.dir().to_string_lossy())?;
        d.set_item("len", state.tail - state.head)?;
        d.set_item("generation", state.generation)?;
        Ok(d)
    }

    /// Puts the buffer back to a state from `get_state`: the same items, priorities,
    /// counters and RNG position. The state may be another buffer's of the same schema
    /// and geometry (a buffer built fresh resuming from a checkpoint): its snapshot is
    /// brought into this buffer's folder first (linked, or copied across file systems).
    fn set_state(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<()> {
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
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| either!(buf, b => b.set_state(&state)))
            .map_err(to_py)
    }

    /// Counters and sizes: len, capacity, head, tail, added, evicted, sampled, ...
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        let d = stats_dict(py, &buf.stats())?;
        // What this handle's open recovered after an unclean shutdown (None: it was
        // closed cleanly, or this handle created it).
        let recovered = match either!(&*buf, b => b.recovery()) {
            Some(r) => {
                let r_dict = PyDict::new(py);
                r_dict.set_item("head", r.head)?;
                r_dict.set_item("tail", r.tail)?;
                r_dict.set_item("rolled_forward", r.rolled_forward)?;
                r_dict.set_item("dropped", r.dropped)?;
                Some(r_dict)
            }
            None => None,
        };
        d.set_item("recovered", recovered)?;
        // What only the snapshots hold on disk (segments copied since they were taken):
        // the cost of keeping checkpoints, beside bytes_on_disk.
        let owned: u64 = either!(&*buf, b => b.snapshots())
            .map_err(to_py)?
            .iter()
            .map(|s| s.bytes_owned)
            .sum();
        d.set_item("snapshot_bytes", owned)?;
        Ok(d)
    }

    /// Makes everything added so far survive power loss (a kill -9 loses nothing
    /// acknowledged even without it).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let mut held = self.inner.lock(py);
        let buf = open_buf(&mut held)?;
        py.detach(|| either!(buf, b => b.flush())).map_err(to_py)
    }

    /// Flushes and closes; the buffer then refuses every call. Closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // Taken out under the lock, closed without it (a close flushes).
        let taken = self.inner.lock(py).take();
        match taken {
            Some(buf) => py.detach(|| either!(buf, b => b.close())).map_err(to_py),
            None => Ok(()),
        }
    }

    /// Refuses: the writer holds the buffer's lock, and a copy in another process would
    /// be a second writer (or a copy of the data). Workers open a `Reader`.
    fn __reduce__(&self, py: Python<'_>) -> PyResult<()> {
        let what = self
            .inner
            .lock(py)
            .as_ref()
            .map_or("a closed ReplayBuffer".to_owned(), |b| {
                format!("the ReplayBuffer writing {}", b.dir().display())
            });
        Err(PyTypeError::new_err(format!(
            "{what} cannot be pickled: it is the buffer's one writer. Give a worker \
             replaystore.Reader.open(path) instead (it pickles as its path and reopens the files)"
        )))
    }

    /// The schema.
    #[getter]
    fn schema(&self, py: Python<'_>) -> PyResult<PySchema> {
        Ok(PySchema {
            inner: open_buf(&mut self.inner.lock(py))?.schema().clone(),
        })
    }

    /// Writes the live items to the file `out`, as `replaystore export` does: NumPy's
    /// `.npz` (fixed fields), Apache Parquet or JSON lines, by `format` (`"npz"`,
    /// `"parquet"`, `"jsonl"`) or else by the file's extension. Streams a chunk at a
    /// time (memory stays at one chunk), writes under a temporary name and renames, and
    /// draws a progress bar on standard error when it is a terminal (`progress=False`:
    /// none). Items a draw, `remove` or `max_use` removed are left out and counted;
    /// `include_removed=True` keeps them, with a `removed` column naming why (in an
    /// `.npz`, `removed` of cause codes). `fields` picks fields; `snapshot` exports a
    /// snapshot instead. Read beside this handle through a reader: nothing is locked.
    /// Returns `{"path", "items", "fields", "skipped_removed"}`. Parquet is in the wheel;
    /// a source build has it only with `--features parquet` (`replaystore.HAS_PARQUET`
    /// says; without it, a `.parquet` file is a `ValueError` saying how to get it).
    ///
    /// >>> import os, tempfile, numpy as np, replaystore as rs
    /// >>> d = tempfile.mkdtemp()
    /// >>> buf = rs.ReplayBuffer.create(d + "/b", {"x": "int64"}, 8, item_states=True)
    /// >>> _ = buf.add_batch({"x": np.arange(4)})
    /// >>> _ = buf.remove([1])
    /// >>> done = buf.export(d + "/x.npz", progress=False)
    /// >>> done["items"], done["skipped_removed"], np.load(d + "/x.npz")["x"].tolist()
    /// (3, 1, [0, 2, 3])
    /// >>> buf.export(d + "/all.jsonl", include_removed=True, progress=False)["items"]
    /// 4
    /// >>> buf.close()
    #[pyo3(signature = (out, format=None, *, fields=None, include_removed=false, snapshot=None, progress=true))]
    #[allow(clippy::too_many_arguments, reason = "Python keywords")]
    fn export<'py>(
        &self,
        py: Python<'py>,
        out: PathBuf,
        format: Option<&str>,
        fields: Option<Vec<String>>,
        include_removed: bool,
        snapshot: Option<String>,
        progress: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let dir = open_buf(&mut self.inner.lock(py))?.dir().to_path_buf();
        let call = crate::export::ExportCall {
            out,
            format,
            fields,
            include_removed,
            snapshot,
            progress,
        };
        crate::export::export(py, &dir, call)
    }

    /// The buffer's folder.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<PathBuf> {
        Ok(open_buf(&mut self.inner.lock(py))?.dir().to_path_buf())
    }

    /// Items the ring holds.
    #[getter]
    fn capacity(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(open_buf(&mut self.inner.lock(py))?.capacity())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(open_buf(&mut self.inner.lock(py))?.len() as usize)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match self.inner.try_lock().as_deref() {
            Some(Some(b)) => format!(
                "ReplayBuffer({:?}, {} / {} items)",
                b.dir().display().to_string(),
                b.len(),
                b.capacity()
            ),
            Some(None) => "ReplayBuffer(closed)".into(),
            None => "ReplayBuffer(in use by another thread)".into(),
        }
    }
}
