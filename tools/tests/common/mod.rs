//! What the command's tests share: running the built binary and reading what it said.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `replaystore` with `args` and waits for it.
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_replaystore"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run replaystore: {e}"))
}

/// Its standard output and error, as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A path as the `&str` an argument list takes.
#[allow(dead_code, reason = "not every test file passes paths")]
pub fn s(p: &Path) -> &str {
    p.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", p.display()))
}
