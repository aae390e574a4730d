//! The benchmark workloads of docs/WORKLOADS.md on this machine, each figure beside its
//! floor (the same work by the plainest Rust over memory of the same size and row
//! shape): the `replaystore-bench` binary, which `replaystore bench` runs when it sits
//! beside the command. Kept out of the command users install: the workloads, their
//! floors and their reader processes are a developer's tools, not a buffer's.
//!
//! `table` runs the workloads and prints the table; one module per workload family
//! (`w3` many processes, `w3e` episodic readers, `w4` larger than memory, `w5` text,
//! `w67` groups and HER, `ckpt` checkpoint latency); `workloads` defines W1 and W2 once
//! for these and the criterion benches (which compile it by path); `floor` the plain
//! kernels; `row` one figure of the table.

/// `println!` for standard output: a closed pipe (`bench | head`) ends the process
/// quietly with status 0 instead of panicking mid-line.
macro_rules! say {
    ($($arg:tt)*) => {
        replaystore_cli::fail::say(format_args!($($arg)*))
    };
}

mod ckpt;
mod floor;
mod row;
mod table;
mod w3;
mod w3e;
mod w4;
mod w5;
mod w67;
mod workloads;
#[cfg(test)]
mod workloads_tests;

pub use table::run;
pub use w3::reader;

/// A new process running this binary (W3's reader processes), to which the caller adds
/// the arguments.
pub(crate) fn again() -> std::process::Command {
    let me = std::env::current_exe().unwrap_or_else(|_| "replaystore-bench".into());
    std::process::Command::new(me)
}
