//! `replaystore._native`: the engine for Python. Thin on purpose: arrays go in and come
//! out through `arrays` (no per-field Python loop, no hidden copy), the GIL is released
//! around every call that touches the files, and errors map to one exception family.

mod arrays;
mod buffer;
mod calls;
mod draws;
mod episode;
mod errors;
mod export;
mod group;
mod held;
mod lanes;
mod owner;
mod reader;
mod schema;
mod shared;
mod units;

use pyo3::prelude::*;

/// A draw's flat dict with dotted names made nested: `{"obs.pos": a}` becomes
/// `{"obs": {"pos": a}}`, the same arrays (no copy). `sample(..., nested=True)` does
/// this itself.
#[pyfunction]
fn nest<'py>(batch: &Bound<'py, pyo3::types::PyDict>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    calls::nest(batch)
}

/// Sets the dtype every draw returns its `indices` in, for the whole process:
/// `"int64"` (the default: what NumPy, PyTorch and JAX index with; exact, as indices
/// stay below 2**63) or `"uint64"` (the engine's own type). Every call that takes
/// indices takes either.
#[pyfunction]
fn set_index_dtype(dtype: &str) -> PyResult<()> {
    let signed = match dtype {
        "uint64" => false,
        "int64" => true,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "index dtype is 'uint64' or 'int64', not {other:?}"
            )));
        }
    };
    arrays::INT64_INDICES.store(signed, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The dtype draws return their `indices` in (see `set_index_dtype`).
#[pyfunction]
fn index_dtype() -> &'static str {
    match arrays::INT64_INDICES.load(std::sync::atomic::Ordering::Relaxed) {
        true => "int64",
        false => "uint64",
    }
}

/// Runs the `replaystore` command on `argv` (the program's name first) and returns its
/// exit status: the package's console script and `python -m replaystore`
/// (`replaystore/__main__.py`). The command writes to the process's standard output and
/// error itself, with the GIL released.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> PyResult<u8> {
    Ok(py.detach(|| replaystore_cli::cli::run(argv)).0)
}

/// The module `replaystore._native`; `replaystore/__init__.py` re-exports it.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<schema::PySchema>()?;
    m.add_class::<draws::PyRequest>()?;
    m.add_class::<buffer::PyBuffer>()?;
    m.add_class::<reader::PyReader>()?;
    m.add_class::<lanes::PyLanes>()?;
    m.add_class::<owner::PyOwner>()?;
    m.add_class::<group::PyGroup>()?;
    m.add_class::<episode::PyEpisode>()?;
    m.add_function(wrap_pyfunction!(nest, m)?)?;
    m.add_function(wrap_pyfunction!(set_index_dtype, m)?)?;
    m.add_function(wrap_pyfunction!(index_dtype, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add("Error", py.get_type::<errors::Error>())?;
    m.add("NotABufferError", py.get_type::<errors::NotABufferError>())?;
    m.add("VersionError", py.get_type::<errors::VersionError>())?;
    m.add("LockedError", py.get_type::<errors::LockedError>())?;
    m.add("CorruptError", py.get_type::<errors::CorruptError>())?;
    m.add(
        "ForeignFileError",
        py.get_type::<errors::ForeignFileError>(),
    )?;
    m.add("DiskFullError", py.get_type::<errors::DiskFullError>())?;
    m.add(
        "ValueSpaceFullError",
        py.get_type::<errors::ValueSpaceFullError>(),
    )?;
    m.add("SchemaError", py.get_type::<errors::SchemaError>())?;
    m.add("EmptyError", py.get_type::<errors::EmptyError>())?;
    m.add("EvictedError", py.get_type::<errors::EvictedError>())?;
    m.add("RemovedError", py.get_type::<errors::RemovedError>())?;
    m.add(
        "RateLimitedError",
        py.get_type::<errors::RateLimitedError>(),
    )?;
    m.add(
        "NoItemStatesError",
        py.get_type::<errors::NoItemStatesError>(),
    )?;
    m.add("StateError", py.get_type::<errors::StateError>())?;
    m.add("ReadOnlyError", py.get_type::<errors::ReadOnlyError>())?;
    m.add("ClosedError", py.get_type::<errors::ClosedError>())?;
    m.add("FORMAT_VERSION", replaystore::FORMAT_VERSION)?;
    // The package's version, as `pip show replaystore` gives it (the crate's).
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // How this extension was built (benchmarks print it beside their figures).
    m.add("BUILD", replaystore_cli::build_line())?;
    // Whether `export` and the command read and write Parquet (the wheel does; a source
    // build only with `--features parquet`).
    m.add("HAS_PARQUET", replaystore_cli::HAS_PARQUET)?;
    Ok(())
}
