//! `verify`: every checksum, stamp and tree node, with a progress bar.

use crate::fail::Status;
use std::path::Path;

use replaystore::internal::format::lanes::MAX_LANES;
use replaystore::internal::storage::{self, Manifest};
use replaystore::io::OsIo;
use replaystore::{VerifyOptions, snapshots, verify_opts};
use serde_json::json;

use crate::fail::Failure;
use crate::progress;

/// `replaystore verify`: every check `VerifyOptions` names, with a progress bar over the
/// items; exit 1 when anything is damaged. Reads only: a damaged buffer stays as it is.
pub fn run_verify(dir: &Path, deep: bool, as_json: bool) -> Result<Status, Failure> {
    let quiet = as_json || !progress::visible();
    let bar = progress::bar(
        if quiet { 0 } else { items_to_check(dir, deep) },
        "verify",
        quiet,
    );
    let tell = |n: u64| bar.inc(n);
    let opts = VerifyOptions {
        deep,
        progress: Some(&tell),
    };
    let report = verify_opts(dir, &opts)?;
    bar.finish_and_clear();
    if as_json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| json!({"file": p.file, "offset": p.offset, "problem": p.what}))
            .collect();
        say!(
            "{:#}",
            json!({
                "sound": report.is_sound(),
                "problems": problems,
                "notes": report.notes,
                "items_checked": report.items_checked,
                "segments_checked": report.segments_checked,
                "snapshots_checked": report.snapshots_checked,
                "lanes": report.lanes,
                "members": report.members,
                "deep": deep,
            })
        );
    } else {
        for n in &report.notes {
            say!("note: {n}");
        }
        for p in &report.problems {
            say!("problem: {p}");
        }
        say!(
            "{}: {}{} segments, {} items checked ({} snapshot{}{}), {} problems",
            if report.is_sound() {
                "sound"
            } else {
                "DAMAGED"
            },
            match (&report.members, report.lanes) {
                (Some(m), _) => format!("group of {} members {m:?}, ", m.len()),
                (None, Some(n)) => format!("{n} lanes, "),
                (None, None) => String::new(),
            },
            report.segments_checked,
            report.items_checked,
            report.snapshots_checked,
            if report.snapshots_checked == 1 {
                ""
            } else {
                "s"
            },
            match (deep, report.snapshots_checked) {
                (true, _) | (_, 0) => "",
                (false, 1) => ": headers; --deep checks its items",
                (false, _) => ": headers; --deep checks their items",
            },
            report.problems.len()
        );
    }
    Ok(if report.is_sound() {
        Status::SUCCESS
    } else {
        Status::from(1)
    })
}

/// About how many items `verify` will check: the progress bar's length, from the
/// manifests alone (0 when they cannot say; verify then reports why).
fn items_to_check(dir: &Path, deep: bool) -> u64 {
    let one = |d: &Path| -> u64 {
        let live = Manifest::load(&OsIo, d)
            .and_then(|m| m.newest_commit())
            .map_or(0, |c| c.tail - c.head);
        let snaps = if deep {
            snapshots(d).map_or(0, |s| s.iter().map(|s| s.len()).sum())
        } else {
            0
        };
        live + snaps
    };
    let set = |name: &str| dir.join(name).exists();
    if set(replaystore::internal::format::lanes::FILE_NAME)
        || set(replaystore::internal::format::group::FILE_NAME)
    {
        (0..MAX_LANES)
            .map(|k| storage::lane_dir(dir, k))
            .take_while(|d| d.is_dir())
            .map(|d| one(&d))
            .sum()
    } else {
        one(dir)
    }
}
