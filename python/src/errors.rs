//! Every engine error as a Python exception under one base class, chosen by what the
//! caller can do about it; the message is the engine's (file, field, index, expected,
//! got).

use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use replaystore::Error as E;

create_exception!(
    replaystore,
    Error,
    PyException,
    "Base class of every replaystore error."
);
create_exception!(
    replaystore,
    NotABufferError,
    Error,
    "The folder holds no buffer (no MANIFEST), or a lane set where one ring was asked for."
);
create_exception!(
    replaystore,
    VersionError,
    Error,
    "The files were written by a newer replaystore: upgrade to read them."
);
create_exception!(
    replaystore,
    LockedError,
    Error,
    "Another process writes the buffer (or owns its priorities); the message names it."
);
create_exception!(
    replaystore,
    CorruptError,
    Error,
    "A file failed a check: the message names the file, the offset and the check."
);
create_exception!(
    replaystore,
    ForeignFileError,
    CorruptError,
    "A path inside a buffer names something replaystore did not make (a symbolic link, a \
     FIFO, a device, a stray folder): refused before anything is read, written or removed."
);
create_exception!(
    replaystore,
    DiskFullError,
    Error,
    "The disk could not hold the buffer's files (reserved up front, never mid-write)."
);
create_exception!(
    replaystore,
    ValueSpaceFullError,
    Error,
    "An add whose values need room the value space (heap_bytes=) has not while the buffer \
     holds fewer than its capacity: refused, nothing stored (evict_for_room=True at create \
     lets such an add evict the oldest items instead)."
);
create_exception!(
    replaystore,
    SchemaError,
    Error,
    "Arrays that do not fit the schema: missing or unknown field, dtype, shape, length, layout."
);
create_exception!(
    replaystore,
    EmptyError,
    Error,
    "Nothing to draw from: the buffer is empty, or every priority is 0."
);
create_exception!(
    replaystore,
    EvictedError,
    Error,
    "An index that is no longer (or not yet) live."
);
create_exception!(
    replaystore,
    RemovedError,
    EvictedError,
    "An item removed before the ring overwrote it (by remove, a draw that removes, max_use): \
     no draw or read returns it."
);
create_exception!(
    replaystore,
    NoItemStatesError,
    Error,
    "A call on item states (remove, a draw that removes, item_states) on a buffer created \
     without them: create it with item_states=True or max_use=N."
);
create_exception!(
    replaystore,
    RateLimitedError,
    Error,
    "The buffer's rate limiter holds the call back (Reverb's model): a draw before enough \
     items are live or beyond what the adds pay for, an add before the draws caught up."
);
create_exception!(
    replaystore,
    StateError,
    Error,
    "A state of another schema or geometry, or naming a snapshot that is no longer kept."
);
create_exception!(
    replaystore,
    ClosedError,
    Error,
    "A call on a handle after its close() (as a closed file's ValueError)."
);
create_exception!(
    replaystore,
    ReadOnlyError,
    Error,
    "A write through a read-only handle (a Reader, a snapshot), or after a failed sync."
);

/// The command's options in a message, and what a Python caller writes instead.
const PYTHON_NAMES: &[(&str, &str)] = &[
    // The command's options, in the messages of the export both fronts share.
    ("--include-removed", "include_removed=True"),
    ("--fields", "fields="),
    ("--snapshot NAME", "snapshot=NAME"),
    (" or the newest items (--last N)", ""),
];

/// `message` with every Rust name a Python caller cannot write replaced by its Python
/// spelling (`replaystore_cli::fail::RUST_CALLS`, then the command's options).
pub fn in_python(message: &str) -> String {
    let config = replaystore_cli::fail::RUST_CALLS
        .iter()
        .map(|(text, _, py)| (*text, *py));
    config
        .chain(PYTHON_NAMES.iter().copied())
        .fold(message.to_owned(), |m, (rust, py)| m.replace(rust, py))
}

/// The Python exception for an engine error, its message in Python's words.
pub fn to_py(e: E) -> PyErr {
    let msg = in_python(&e.to_string());
    if e.is_disk_full() {
        // A reservation refused up front, or a checkpoint's write that hit ENOSPC: the
        // same remedy, so the same class.
        return DiskFullError::new_err(msg);
    }
    match e {
        E::NotABuffer { .. } | E::IsLanes { .. } => NotABufferError::new_err(msg),
        E::UnsupportedVersion {
            found, supported, ..
        } if found > supported => VersionError::new_err(msg),
        E::Locked { .. } | E::NotPriorityOwner { .. } => LockedError::new_err(msg),
        E::BadMagic { .. }
        | E::UnsupportedVersion { .. }
        | E::Truncated { .. }
        | E::ChecksumMismatch { .. }
        | E::Corrupt { .. }
        | E::NoValidCommit { .. }
        | E::BadItem { .. }
        | E::BadSnapshot { .. } => CorruptError::new_err(msg),
        E::ForeignFile { .. } => ForeignFileError::new_err(msg),
        // As NumPy answers np.empty(2**45): the size, not the buffer, is at fault.
        E::TooLarge { .. } | E::OutOfMemory { .. } => pyo3::exceptions::PyMemoryError::new_err(msg),
        E::InvalidSchema(_)
        | E::MissingField { .. }
        | E::UnknownField { .. }
        | E::DuplicateField { .. }
        | E::DTypeMismatch { .. }
        | E::ShapeMismatch { .. }
        | E::LengthMismatch { .. }
        | E::BadValue { .. }
        | E::RaggedBatch { .. }
        | E::BadOffsets { .. }
        | E::OutputSize { .. }
        | E::OutMismatch { .. } => SchemaError::new_err(msg),
        E::ValueTooLong { .. } | E::InvalidText { .. } => {
            pyo3::exceptions::PyValueError::new_err(msg)
        }
        E::ValueSpaceFull { .. } => ValueSpaceFullError::new_err(msg),
        E::Empty | E::ZeroTotalPriority { .. } => EmptyError::new_err(msg),
        // A member is looked up by name, as a dict key is.
        E::NoSuchMember { .. } => pyo3::exceptions::PyKeyError::new_err(msg),
        E::BadMember { .. } => pyo3::exceptions::PyValueError::new_err(msg),
        E::Evicted { .. } | E::NotYetAdded { .. } => EvictedError::new_err(msg),
        E::Removed { .. } => RemovedError::new_err(msg),
        E::RateLimited { .. } => RateLimitedError::new_err(msg),
        E::NoItemStates { .. } => NoItemStatesError::new_err(msg),
        E::BadState(_)
        | E::StateMismatch { .. }
        | E::NoSuchSnapshot { .. }
        | E::SnapshotExists { .. }
        | E::InvalidName { .. } => StateError::new_err(msg),
        E::ReadOnly { .. } | E::Poisoned { .. } => ReadOnlyError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// What calling a handle class directly says: which class methods make one.
pub fn no_constructor(class: &str, makers: &str) -> PyErr {
    pyo3::exceptions::PyTypeError::new_err(format!(
        "{class}(...) is not how a {class} is made: use {makers}"
    ))
}
