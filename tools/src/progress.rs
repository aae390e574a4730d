//! Progress bars for work that can take more than a second, drawn on standard error only
//! when it is a terminal (never into a pipe, a log file or JSON output).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Whether bars are drawn at all: standard error is a terminal.
pub fn visible() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar over `len` units of `what` (items, figures), or a hidden one when `quiet` or
/// when standard error is not a terminal.
pub fn bar(len: u64, what: &str, quiet: bool) -> ProgressBar {
    if quiet || !visible() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:>10} [{wide_bar}] {human_pos}/{human_len} ({elapsed} so far, {eta} left)",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
