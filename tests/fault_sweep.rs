//! Promise: whichever file operation fails, at whatever point of open, add, flush,
//! get_state, set_state (in place, and of another buffer's state), snapshot delete or close, the call returns a typed error (or
//! succeeds, when the failure hit something it can do without), nothing already stored
//! is lost or mixed, and a handle whose sync failed refuses every later write (the
//! kernel had already marked those pages clean: a retry that "succeeds" would lie).
//!
//! The buffer keeps item states: items removed before and after the snapshot, and a
//! step that removes (explicitly and by a draw) and flushes; the removals a run ends
//! with are those before the step or those after it.
//!
//! For each step, the file operations it makes are counted through `FaultyIo`, then
//! the step is run again once per operation N, with operation N failing once, and
//! again with every operation from N on failing. After each run the buffer is opened
//! through the real file system and checked: it verifies, its live range is the one
//! before the step or the one after it (after, if the step returned `Ok`), every item
//! is intact, and every snapshot that must exist is whole.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use common::{add_range, assert_live_items_intact, columns, item};
use replaystore::io::FaultyIo;
use replaystore::{Config, Error, ReplayBuffer, Request, State, verify};

const CAPACITY: u64 = 40;

/// The buffer every run starts from: 50 items in a ring of 40 (so it has wrapped),
/// snapshot `s` of the first 30 with priorities set and item 5 removed, items 31 and 32
/// removed after it, closed cleanly.
fn base(dir: &Path) -> State {
    let config = Config::new(common::schema(), CAPACITY)
        .segment_slots(8)
        .prioritized(0.6, 1e-6)
        .item_states()
        .seed(3);
    let mut buf = ReplayBuffer::create(dir, config).unwrap();
    add_range(&mut buf, 0, 30);
    buf.update_priorities(&[3, 7, 29], &[2.0, 0.5, 9.0])
        .unwrap();
    buf.remove(&[5]).unwrap();
    let s = buf.get_state_named("s").unwrap();
    add_range(&mut buf, 30, 50);
    buf.remove(&[31, 32]).unwrap();
    buf.flush().unwrap();
    buf.close().unwrap();
    s
}

/// Another buffer of the same layout beside `dir` (`<dir>.origin`), whose snapshot `o`
/// holds what the base's `s` holds: the state `SetStateFrom` restores, brought into
/// the base buffer's folder first.
fn origin(dir: &Path) -> State {
    let config = Config::new(common::schema(), CAPACITY)
        .segment_slots(8)
        .prioritized(0.6, 1e-6)
        .item_states()
        .seed(4);
    let mut buf = ReplayBuffer::create(dir.with_extension("origin"), config).unwrap();
    add_range(&mut buf, 0, 30);
    buf.update_priorities(&[3, 7, 29], &[2.0, 0.5, 9.0])
        .unwrap();
    buf.remove(&[5]).unwrap();
    let s = buf.get_state_named("o").unwrap();
    buf.close().unwrap();
    s
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Open,
    Add,
    Flush,
    GetState,
    SetState,
    SetStateFrom,
    Delete,
    Close,
    Remove,
}

/// Removed in the base buffer's live range, and by the `Remove` step.
const BASE_REMOVED: [u64; 2] = [31, 32];
const STEP_REMOVES: [u64; 3] = [12, 13, 20];

impl Step {
    /// What the live range is once the step has happened.
    fn after(self) -> Range<u64> {
        match self {
            Step::Add => 20..60,
            Step::Flush => 15..55,
            Step::SetState | Step::SetStateFrom => 0..30,
            _ => 10..50,
        }
    }

    /// Runs the step; `added` counts the adds acknowledged on the way.
    fn run(
        self,
        buf: &mut Option<ReplayBuffer>,
        (s, o): (&State, &State),
        added: &mut u64,
    ) -> replaystore::Result<()> {
        let Some(b) = buf.as_mut() else {
            return Ok(());
        };
        let mut add = |b: &mut ReplayBuffer, to: u64| {
            (50..to).try_for_each(|i| {
                b.add(&columns(&item(i)))?;
                *added += 1;
                Ok(())
            })
        };
        match self {
            Step::Open => Ok(()),
            Step::Add => add(b, 60),
            Step::Flush => {
                add(b, 55)?;
                b.flush()
            }
            Step::GetState => b.get_state_named("t").map(drop),
            Step::SetState => b.set_state(s),
            Step::SetStateFrom => b.set_state(o),
            Step::Delete => b.delete_snapshot("s"),
            Step::Close => buf.take().unwrap().close(),
            Step::Remove => {
                b.remove(&STEP_REMOVES[..2])?;
                b.sample(Request::at(&STEP_REMOVES[2..]).remove())?;
                b.flush()
            }
        }
    }

    /// The removed items of the live range once the step has happened.
    fn removed_after(self) -> BTreeSet<u64> {
        match self {
            Step::SetState | Step::SetStateFrom => [5].into(),
            Step::Remove => BASE_REMOVED.iter().chain(&STEP_REMOVES).copied().collect(),
            _ => BASE_REMOVED.into(),
        }
    }
}

/// The failure was a sync (or commit write) of a file the buffer goes on using: the
/// handle must be poisoned for good. A failed sync of work the engine abandons and
/// redoes from scratch (a segment copy, a snapshot being made, a restore's copy) is no
/// such lie.
fn was_sync(e: &Error) -> bool {
    const SYNCS: [&str; 5] = [
        "msync",
        "fdatasync",
        "fsync",
        "write commit slot",
        "write eviction record",
    ];
    let Error::Io { op, path, .. } = e else {
        return false;
    };
    let scratch = path.components().any(|c| c.as_os_str() == "snapshots")
        || path
            .extension()
            .is_some_and(|x| x == "cow" || x == "restore" || x == "tmp");
    SYNCS.contains(op) && !scratch
}

struct Case {
    step: Step,
    fail_at: u64,
    sticky: bool,
}

/// Runs one case in a fresh copy of the base buffer; returns whether the step failed.
fn run_case(root: &Path, case: &Case) -> bool {
    let dir = root.join(format!("{:?}-{}-{}", case.step, case.fail_at, case.sticky));
    let s = base(&dir);
    let o = origin(&dir);
    let io = Arc::new(match case.sticky {
        true => FaultyIo::fail_from(case.fail_at),
        false => FaultyIo::fail_once(case.fail_at),
    });
    let ctx = format!(
        "{:?}, operation {} failing{}",
        case.step,
        case.fail_at,
        if case.sticky {
            " from then on"
        } else {
            " once"
        }
    );
    let mut buf = None;
    let mut added = 0;
    let result = match ReplayBuffer::open_with(&dir, io) {
        Ok(mut b) => {
            b.set_write_behind(common::SMALL_WRITE_BEHIND);
            buf = Some(b);
            case.step.run(&mut buf, (&s, &o), &mut added)
        }
        Err(e) => Err(e),
    };
    if let (Err(e), Some(b)) = (&result, buf.as_mut())
        && was_sync(e)
    {
        let next = b.add(&columns(&item(99)));
        assert!(
            matches!(next, Err(Error::Poisoned { .. })),
            "{ctx}: after a failed sync ({e}) an add returned {next:?}"
        );
    }
    drop(buf);
    let report = verify(&dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
    let buf = ReplayBuffer::open(&dir).unwrap_or_else(|e| panic!("{ctx} ({result:?}): open: {e}"));
    let live = buf.live();
    let after = case.step.after();
    match &result {
        Ok(()) => assert_eq!(live, after, "{ctx}: the step returned Ok"),
        // Adds acknowledged before the failure stay (this is the same boot: the page
        // cache has them); an add that failed stored nothing.
        Err(_) => assert!(
            live == (10 + added..50 + added) || live == after,
            "{ctx} ({result:?}): live range {live:?} after {added} acknowledged adds"
        ),
    }
    assert_live_items_intact(&buf);
    let removed = common::removed_of(&buf);
    let before: BTreeSet<u64> = BASE_REMOVED.into();
    match &result {
        Ok(()) => assert_eq!(removed, case.step.removed_after(), "{ctx}: removals"),
        // A step cut short leaves the removals before it, or (a restore) the
        // snapshot's, or some of its own on top (each is durable in the page cache
        // as it returns).
        Err(_) => {
            let after = case.step.removed_after();
            assert!(
                removed == before
                    || removed == after
                    || (removed.is_superset(&before) && removed.is_subset(&after)),
                "{ctx} ({result:?}): removed {removed:?}, before {before:?}, after {after:?}"
            );
        }
    }
    drop(buf);
    // Snapshot `s` stays whole unless a delete of it was acknowledged (or under way).
    let names: Vec<String> = replaystore::snapshots(&dir)
        .unwrap()
        .into_iter()
        .filter(|i| i.commit.is_some())
        .map(|i| i.name)
        .collect();
    let deleting = case.step == Step::Delete;
    if !deleting || result.is_err() {
        if !deleting {
            assert!(
                names.contains(&"s".to_string()),
                "{ctx}: snapshot s is gone: {names:?}"
            );
        }
        if names.contains(&"s".to_string()) {
            let snap = ReplayBuffer::open_snapshot(&dir, "s").unwrap();
            assert_eq!(snap.live(), 0..30, "{ctx}");
            assert_live_items_intact(&snap);
            assert_eq!(
                common::removed_of(&snap),
                [5].into(),
                "{ctx}: snapshot removals"
            );
        }
    } else {
        assert!(
            !names.contains(&"s".to_string()),
            "{ctx}: deleted snapshot s is listed"
        );
    }
    if case.step == Step::GetState && result.is_ok() {
        assert!(
            names.contains(&"t".to_string()),
            "{ctx}: acknowledged snapshot t is missing"
        );
    }
    // The origin is never changed by a restore from it.
    let from = ReplayBuffer::open_snapshot(dir.with_extension("origin"), "o").unwrap();
    assert_eq!(from.live(), 0..30, "{ctx}: the origin");
    assert_live_items_intact(&from);
    drop(from);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(dir.with_extension("origin")).unwrap();
    result.is_err()
}

/// File operations `step` makes (open's included for `Open`), and those open makes.
fn count(root: &Path, step: Step) -> (u64, u64) {
    let dir = root.join(format!("count-{step:?}"));
    let s = base(&dir);
    let o = origin(&dir);
    let io = Arc::new(FaultyIo::fail_once(u64::MAX));
    let mut buf = Some(ReplayBuffer::open_with(&dir, io.clone()).unwrap());
    if let Some(b) = buf.as_mut() {
        b.set_write_behind(common::SMALL_WRITE_BEHIND);
    }
    let opened = io.ops();
    step.run(&mut buf, (&s, &o), &mut 0).unwrap();
    let done = io.ops();
    drop(buf);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(dir.with_extension("origin")).unwrap();
    match step {
        Step::Open => (0, opened),
        _ => (opened, done - opened),
    }
}

#[test]
fn a_failure_at_any_file_operation_of_any_step_is_a_typed_error_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let mut points = 0;
    let mut failed = 0;
    for step in [
        Step::Open,
        Step::Add,
        Step::Flush,
        Step::GetState,
        Step::SetState,
        Step::SetStateFrom,
        Step::Delete,
        Step::Close,
        Step::Remove,
    ] {
        let (from, ops) = count(root.path(), step);
        assert!(ops > 0, "{step:?} makes no file operation");
        for n in 0..ops {
            for sticky in [false, true] {
                points += 1;
                let case = Case {
                    step,
                    fail_at: from + n,
                    sticky,
                };
                failed += u64::from(run_case(root.path(), &case));
            }
        }
    }
    println!("fault points {points}, of which the step failed {failed}");
    // Most injected failures must surface: an engine that swallowed them would pass
    // every other check here.
    assert!(
        failed * 2 > points,
        "only {failed} of {points} injected failures surfaced"
    );
}

/// Segments are reserved as rows arrive, again after every open: the sweep's adds make
/// such reservations, so each of them is among the operations failed above.
#[test]
fn the_adds_swept_reserve_the_segments_they_reach() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("b");
    let s = base(&dir);
    let o = origin(&dir);
    let io = Arc::new(FaultyIo::fail_once(u64::MAX).only("allocate"));
    let mut buf = Some(ReplayBuffer::open_with(&dir, io.clone()).unwrap());
    let opened = io.ops();
    Step::Add.run(&mut buf, (&s, &o), &mut 0).unwrap();
    assert!(io.ops() > opened, "the adds reserved no segment");
}
