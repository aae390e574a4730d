//! What `verify` reports of a file: where the damage is and what it is. A value every
//! layer that checks files can make (each part checks its own in `Part::verify`).

use std::path::{Path, PathBuf};

use super::Error;

/// One thing `verify` found wrong.
///
/// ```
/// use replaystore::Finding;
/// let f = Finding { file: "b/MANIFEST".into(), offset: 64, what: "bad magic".into() };
/// assert_eq!(f.to_string(), "b/MANIFEST @ 64: bad magic");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The file.
    pub file: PathBuf,
    /// Byte offset in it.
    pub offset: u64,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} @ {}: {}",
            self.file.display(),
            self.offset,
            self.what
        )
    }
}

impl Finding {
    /// The finding an error is: its file and offset when it names them, else
    /// `fallback` at offset 0.
    pub(crate) fn of(e: &Error, fallback: &Path) -> Finding {
        let (file, offset) = match e {
            Error::BadMagic { file, offset, .. }
            | Error::ChecksumMismatch { file, offset, .. }
            | Error::Corrupt { file, offset, .. }
            | Error::BadItem { file, offset, .. } => (file.clone(), *offset),
            Error::Truncated { file, expected, .. } => (file.clone(), *expected),
            Error::UnsupportedVersion { file, .. } | Error::NoValidCommit { file, .. } => {
                (file.clone(), 0)
            }
            Error::Io { path, .. } | Error::ForeignFile { path, .. } => (path.clone(), 0),
            _ => (fallback.to_path_buf(), 0),
        };
        Finding {
            file,
            offset,
            what: e.to_string(),
        }
    }
}
