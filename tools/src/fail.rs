//! Why a command failed, and the exit status that tells a script which kind of failure
//! it was (the table is in `--help`).

use std::path::PathBuf;

use replaystore::Error;

/// A command's exit status (`EXIT_HELP`): a number, so the Python package's entry point
/// hands it to `sys.exit` as the binary hands it to the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub u8);

impl Status {
    /// Status 0.
    pub const SUCCESS: Status = Status(0);
}

impl From<u8> for Status {
    fn from(code: u8) -> Status {
        Status(code)
    }
}

impl From<Status> for std::process::ExitCode {
    fn from(status: Status) -> std::process::ExitCode {
        std::process::ExitCode::from(status.0)
    }
}

/// The exit statuses, as `--help` lists them.
pub const EXIT_HELP: &str = "\
Exit status:
  0  success (verify: the buffer is sound)
  1  verify found damage, or a demo check failed
  2  bad request or bad input: unknown option, bad range, count or field name, nothing
     to read, a file to import that is not what its format says
  3  not a buffer: no MANIFEST (or no LANES) in the folder, or no such folder
  4  written by a newer replaystore (format version): upgrade to read it
  5  locked: another process writes the buffer (its pid is in the message)
  6  damaged: a file failed a check (which file, which offset, which check)
  7  disk full
  8  any other error (I/O), with the file it concerns";

/// A command's failure.
#[derive(Debug)]
pub enum Failure {
    /// The engine refused or failed.
    Engine(Error),
    /// A file the command itself reads or writes (an `.npz`).
    File {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// A file the command reads is not what it must be.
    BadInput {
        /// The file.
        path: PathBuf,
        /// What is wrong, with field, offset, expected and got where they apply.
        what: String,
    },
    /// Writing to standard output failed (a closed pipe ends the command quietly).
    Stdout(std::io::Error),
    /// The arguments ask for something that cannot be done.
    Usage(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Engine(e)
    }
}

impl Failure {
    /// A `File` failure.
    pub fn file(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Failure {
        Failure::File {
            path: path.into(),
            op,
            source,
        }
    }

    /// A `BadInput` failure.
    pub fn input(path: impl Into<PathBuf>, what: impl Into<String>) -> Failure {
        Failure::BadInput {
            path: path.into(),
            what: what.into(),
        }
    }

    /// The exit status for this failure.
    pub fn code(&self) -> u8 {
        match self {
            Failure::Engine(e) => engine_code(e),
            Failure::File { source, .. } if is_disk_full(source) => 7,
            Failure::File { .. } | Failure::Stdout(_) => 8,
            // The caller's file, not the buffer's: a bad request, as a bad argument is.
            Failure::BadInput { .. } => 2,
            Failure::Usage(_) => 2,
        }
    }

    /// Prints the message (nothing for a closed output pipe) and gives the exit status.
    pub fn report(&self) -> Status {
        if let Failure::Stdout(e) = self
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            // `dump | head`: the reader has what it wanted.
            return Status::SUCCESS;
        }
        eprintln!("error: {self}");
        Status(self.code())
    }
}

/// What an engine message names by the Rust call that asks for it (a `Config` option,
/// a setting), as `(text in the message, the Rust call, the Python spelling)`. A buffer is made by a
/// program in either language: the Python package's messages give the Python keyword
/// (`in_python` in the extension), the command's both (`for_command`).
pub const RUST_CALLS: &[(&str, &str, &str)] = &[
    (
        "Config::prioritized",
        "Config::prioritized",
        "alpha=, e.g. ReplayBuffer.create(path, schema, capacity, alpha=0.6)",
    ),
    ("Config::episodic", "Config::episodic", "episodic=True"),
    ("Config::heap_bytes", "Config::heap_bytes", "heap_bytes="),
    (
        "Config::evict_for_room",
        "Config::evict_for_room",
        "evict_for_room=True",
    ),
    ("Config::fragments", "Config::fragments", "fragments=True"),
    ("Config::downsample", "Config::downsample", "downsample="),
    (
        "Config::item_states() (Python: item_states=True)",
        "Config::item_states()",
        "item_states=True or max_use=N",
    ),
    (
        "set_keep_states(None)",
        "set_keep_states(None)",
        "buf.keep_states = None",
    ),
    ("get_state_named", "get_state_named", "get_state(name)"),
];

/// An engine message as the command says it: each Rust call named with its Python
/// spelling beside it.
///
/// ```
/// let said = replaystore_cli::fail::for_command("no priorities (create it with Config::prioritized)");
/// assert!(said.contains("alpha=") && said.contains("in Python") && said.contains("Config::prioritized in Rust"));
/// ```
pub fn for_command(message: &str) -> String {
    RUST_CALLS
        .iter()
        .fold(message.to_owned(), |m, (text, rust, py)| {
            m.replace(text, &format!("{py} in Python, {rust} in Rust"))
        })
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Engine(e) => write!(f, "{}", for_command(&e.to_string())),
            Failure::File { path, op, source } if is_disk_full(source) => {
                write!(f, "disk full: {op} {}: {source}", path.display())
            }
            Failure::File { path, op, source } => write!(f, "{op} {}: {source}", path.display()),
            Failure::BadInput { path, what } => write!(f, "{}: {what}", path.display()),
            Failure::Stdout(e) => write!(f, "writing to standard output: {e}"),
            Failure::Usage(what) => write!(f, "{what}"),
        }
    }
}

fn is_disk_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// The exit status for an engine error.
pub fn engine_code(e: &Error) -> u8 {
    match e {
        Error::NotABuffer { .. } => 3,
        Error::UnsupportedVersion {
            found, supported, ..
        } if found > supported => 4,
        Error::Locked { .. } | Error::NotPriorityOwner { .. } => 5,
        Error::BadMagic { .. }
        | Error::UnsupportedVersion { .. }
        | Error::Truncated { .. }
        | Error::ChecksumMismatch { .. }
        | Error::Corrupt { .. }
        | Error::NoValidCommit { .. }
        | Error::BadItem { .. }
        | Error::BadSnapshot { .. }
        | Error::ForeignFile { .. }
        | Error::Poisoned { .. } => 6,
        e if e.is_disk_full() => 7,
        Error::InvalidConfig { .. }
        | Error::InvalidSchema(_)
        | Error::NoSuchLane { .. }
        | Error::NoSuchMember { .. }
        | Error::BadMember { .. }
        | Error::NoSuchSnapshot { .. }
        | Error::Empty
        | Error::NotPrioritized { .. }
        | Error::NotEpisodic { .. }
        | Error::InvalidName { .. }
        | Error::AlreadyExists { .. }
        | Error::Evicted { .. }
        | Error::InvalidSample(_)
        | Error::TooLarge { .. }
        | Error::BadValue { .. }
        | Error::NotYetAdded { .. } => 2,
        _ => 8,
    }
}

/// Writes one line to standard output; a closed pipe exits with status 0 (the reader
/// has what it wanted), any other failure with the "other error" status.
pub fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        drop(out);
        let broken = e.kind() == std::io::ErrorKind::BrokenPipe;
        let failure = Failure::Stdout(e);
        failure.report();
        std::process::exit(if broken { 0 } else { i32::from(failure.code()) });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn each_failure_kind_has_its_documented_exit_status() {
        let p = PathBuf::from("/b/seg-0");
        let full = std::io::Error::from_raw_os_error(28);
        assert_eq!(
            engine_code(&Error::DiskFull {
                path: p.clone(),
                bytes: 1
            }),
            7
        );
        assert_eq!(Failure::file("write", &p, full).code(), 7);
        assert!(
            Failure::file("write", &p, std::io::Error::from_raw_os_error(28))
                .to_string()
                .starts_with("disk full")
        );
        assert_eq!(
            Failure::file("write", &p, std::io::Error::from_raw_os_error(13)).code(),
            8
        );
        let newer = Error::UnsupportedVersion {
            file: p.clone(),
            found: 9,
            supported: 1,
        };
        assert_eq!(engine_code(&newer), 4);
        assert!(newer.to_string().contains("newer replaystore"), "{newer}");
        let older = Error::UnsupportedVersion {
            file: p.clone(),
            found: 0,
            supported: 1,
        };
        assert_eq!(engine_code(&older), 6);
        assert_eq!(engine_code(&Error::NotABuffer { dir: p.clone() }), 3);
        assert_eq!(Failure::Usage("x".into()).code(), 2);
        assert_eq!(Failure::input(&p, "bad").code(), 2);
        // Every status named in the help text, and only those.
        for code in 0..=8 {
            assert!(EXIT_HELP.contains(&format!("\n  {code}  ")), "{code}");
        }
    }
}
