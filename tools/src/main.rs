//! The `replaystore` command (`replaystore_cli::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let me = std::env::current_exe().map_or_else(|_| "replaystore".into(), Into::into);
    replaystore_cli::cli::run(vec![me], std::env::args_os()).into()
}
