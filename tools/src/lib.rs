//! What the `replaystore` command and the Python package share: reading a buffer's
//! items out (`source`), writing them as `.npz`, Parquet or JSON lines and reading such
//! files into a new buffer (`transfer`), and how a failure is said (`fail`); and the
//! command itself (`cli::run`), which the binary (`main.rs`) and the Python package's
//! `replaystore` console script both run. The Python extension also calls `export`.

// `info --json` builds one `json!` object of every field a buffer reports.
#![recursion_limit = "256"]

/// `println!` for the command's standard output: a closed pipe (`info | head`) ends
/// the process quietly with status 0, as `dump` does through `Failure::Stdout`, instead
/// of panicking mid-line. Every command that prints this way only reads or has
/// finished writing, so exiting there loses nothing.
macro_rules! say {
    ($($arg:tt)*) => {
        crate::fail::say(format_args!($($arg)*))
    };
}

/// The Cargo profile this build was made with: `release` (thin LTO, quick to build),
/// `dist` (fat LTO: the wheel users get, and the figures benchmarks quote) or `dev`.
/// Benchmarks print it beside their figures.
///
/// ```
/// assert!(!replaystore_cli::PROFILE.is_empty());
/// ```
pub const PROFILE: &str = env!("REPLAYSTORE_PROFILE");

/// How this build was made: profile, opt-level, LTO, target CPU and the SIMD it may
/// assume (what runs at run time beside it: `replaystore::kernels::row_check_path`).
///
/// ```
/// use replaystore_cli::{BUILD, PROFILE};
/// assert!(BUILD.starts_with(&format!("profile {PROFILE}, opt-level ")), "{BUILD}");
/// assert!(BUILD.contains(", lto ") && BUILD.contains(", target-cpu "), "{BUILD}");
/// ```
pub const BUILD: &str = env!("REPLAYSTORE_BUILD");

/// [`BUILD`] and the row check this CPU runs: the line benchmarks print beside their
/// figures.
///
/// ```
/// assert!(replaystore_cli::build_line().contains("row check"));
/// ```
pub fn build_line() -> String {
    format!(
        "built with {BUILD}; row check: {}",
        replaystore::kernels::row_check_path()
    )
}

/// Whether this build reads and writes Apache Parquet (the `parquet` feature): the
/// command built by Cargo and the wheel do; the Python package built from source leaves
/// it out unless asked (`transfer::PARQUET_LEFT_OUT` says how), to build in minutes.
///
/// ```
/// let _: bool = replaystore_cli::HAS_PARQUET;
/// ```
pub const HAS_PARQUET: bool = cfg!(feature = "parquet");

pub mod cli;
#[cfg(feature = "parquet")]
pub mod columnar;
pub mod fail;
pub mod jsonl;
pub mod npz;
pub mod progress;
pub mod show;
pub mod source;
pub mod transfer;

mod check;
mod demo;
mod info;
