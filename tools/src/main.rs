//! The `replaystore` command (`replaystore_cli::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    replaystore_cli::cli::run(std::env::args_os()).into()
}
