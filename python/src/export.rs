//! `ReplayBuffer.export`: the command's `export` (the same code, so the same files)
//! from Python, its messages in Python's words.

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use replaystore_cli::fail::Failure;
use replaystore_cli::source::Span;
use replaystore_cli::transfer::{self, ExportArgs, FileKind};

use crate::errors::to_py;

/// A failure of the export as the Python exception a caller can act on.
fn to_python(f: Failure) -> PyErr {
    let said = |m: String| crate::errors::in_python(&m);
    match f {
        Failure::Engine(e) => to_py(e),
        Failure::File { path, op, source } => pyo3::exceptions::PyOSError::new_err((
            source.raw_os_error().unwrap_or(0),
            format!("{op} {}: {source}", path.display()),
        )),
        Failure::BadInput { path, what } => {
            pyo3::exceptions::PyValueError::new_err(said(format!("{}: {what}", path.display())))
        }
        Failure::Stdout(e) => pyo3::exceptions::PyOSError::new_err(e.to_string()),
        Failure::Usage(what) => pyo3::exceptions::PyValueError::new_err(said(what)),
    }
}

/// The format a `format=` names (`None`: told by the file's extension).
fn kind(format: Option<&str>) -> PyResult<Option<FileKind>> {
    Ok(match format {
        None => None,
        Some("npz") => Some(FileKind::Npz),
        Some("parquet") => Some(FileKind::Parquet),
        Some("jsonl") => Some(FileKind::Jsonl),
        Some(other) => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "format={other:?}: expected \"npz\", \"parquet\" or \"jsonl\" (or None: by the \
                 file's extension)"
            )));
        }
    })
}

/// What `export` was asked, in Python's terms.
pub(crate) struct ExportCall<'a> {
    pub out: PathBuf,
    pub format: Option<&'a str>,
    pub fields: Option<Vec<String>>,
    pub include_removed: bool,
    pub snapshot: Option<String>,
    pub progress: bool,
}

/// Exports the items of the buffer in `dir` as `call` says; returns `{"path", "items",
/// "fields", "skipped_removed"}`. The GIL is released while the file is written.
pub(crate) fn export<'py>(
    py: Python<'py>,
    dir: &Path,
    call: ExportCall<'_>,
) -> PyResult<Bound<'py, PyDict>> {
    let format = kind(call.format)?;
    let fields = call.fields.map(|f| f.join(","));
    let done = py
        .detach(|| {
            transfer::export(&ExportArgs {
                dir,
                out: &call.out,
                snapshot: call.snapshot.as_deref(),
                lane: None,
                span: Span::default(),
                include_removed: call.include_removed,
                fields: fields.as_deref(),
                format,
                quiet: !call.progress,
            })
        })
        .map_err(to_python)?;
    let d = PyDict::new(py);
    d.set_item("path", &call.out)?;
    d.set_item("items", done.items)?;
    d.set_item("fields", done.fields)?;
    d.set_item("skipped_removed", done.skipped_removed)?;
    Ok(d)
}
