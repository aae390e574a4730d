//! Promise: `kill -9` of a writer doing anything (adding, flushing, updating
//! priorities, taking and pruning snapshots, restoring one, sampling) loses nothing it
//! acknowledged and serves nothing it did not: hundreds of kill cycles per run, at
//! random moments, and (with `--features kill-points`) at named points between steps
//! that no timing hits reliably (src/killpoint.rs).
//!
//! The child (this binary re-executed) reports the state it acknowledged after every
//! call (`live a b`), announces each call before making it (`start ...`), and lists the
//! snapshots it found on opening. After each kill the parent checks: `verify` passes,
//! the buffer opens with the acknowledged live range (or, for the call in flight, one it
//! may leave), every item is intact, and every acknowledged snapshot is whole.
//! The buffer keeps item states: the child also removes items and draws that remove
//! (`removed ...` lists each call's removals once it returned), and the parent checks
//! that every acknowledged removal holds (and that no other item is removed) after the
//! kill, through snapshots and restores, which bring back their checkpoint's removals.
//! `REPLAYSTORE_LOOP_KILLS` sets the random kill cycles (default 1,000).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::ops::Range;
use std::path::Path;

use common::{
    add_range, assert_live_items_intact, columns, item, run_child_and_kill_after, xorshift,
};
use replaystore::{Config, ReplayBuffer, Request, snapshots, verify};

const CHILD_ENV: &str = "REPLAYSTORE_KILL_LOOP_CHILD";
const CAPACITY: u64 = 120;

fn create(dir: &Path) {
    let config = Config::new(common::schema(), CAPACITY)
        .segment_slots(16)
        .prioritized(0.6, 1e-6)
        .item_states()
        .seed(9);
    ReplayBuffer::create(dir, config).unwrap().close().unwrap();
}

fn say(out: &mut impl Write, line: &str) {
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn live_line(buf: &ReplayBuffer) -> String {
    let l = buf.live();
    format!("live {} {}", l.start, l.end)
}

/// The child: opens the buffer, says what it found, then works until killed (or, with
/// `ops`, for that many calls: the kill-points test runs it to an end).
#[test]
fn kill_loop_child() {
    let Ok(arg) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dir, rest) = arg.split_once(':').unwrap();
    let (seed, ops) = rest.split_once(':').unwrap();
    let (mut rng, ops): (u64, u64) = (seed.parse().unwrap(), ops.parse().unwrap());
    rng |= 1;
    let mut buf = ReplayBuffer::open(dir).unwrap();
    // Rows are sealed and sent to disk behind the tail on every lap, so kills land
    // between the early checksums and the commit that covers them.
    buf.set_write_behind(common::SMALL_WRITE_BEHIND);
    let mut out = std::io::stdout().lock();
    for s in buf.snapshots().unwrap() {
        let c = s.commit.unwrap();
        say(&mut out, &format!("have {} {} {}", s.name, c.head, c.tail));
    }
    say(&mut out, &live_line(&buf));
    let mut next_snap = buf.snapshots().unwrap().len() as u64 + rng % 1000 * 100;
    for _ in 0..ops {
        let end = buf.live().end;
        match xorshift(&mut rng) % 100 {
            0..=54 => {
                say(&mut out, "start add 1");
                buf.add(&columns(&item(end))).unwrap();
            }
            55..=69 => {
                let n = 1 + xorshift(&mut rng) % 30;
                say(&mut out, &format!("start add {n}"));
                add_range(&mut buf, end, end + n);
            }
            70..=79 => {
                say(&mut out, "start update");
                let live = buf.live();
                if !live.is_empty() {
                    let picks: Vec<u64> = (0..8)
                        .map(|_| live.start + xorshift(&mut rng) % (live.end - live.start))
                        .collect();
                    let p: Vec<f64> = picks.iter().map(|&i| 0.1 + (i % 13) as f64).collect();
                    buf.update_priorities(&picks, &p).unwrap();
                }
            }
            80..=84 => {
                say(&mut out, "start flush");
                buf.flush().unwrap();
            }
            85..=89 => {
                next_snap += 1;
                // A name an earlier child took (each child starts numbering at random)
                // would make get_state refuse, and the child die as if killed.
                let taken: Vec<String> = buf
                    .snapshots()
                    .unwrap()
                    .into_iter()
                    .map(|s| s.name)
                    .collect();
                while taken.contains(&format!("k{next_snap}")) {
                    next_snap += 1;
                }
                let name = format!("k{next_snap}");
                let l = buf.live();
                say(
                    &mut out,
                    &format!("start snap {name} {} {}", l.start, l.end),
                );
                buf.get_state_named(&name).unwrap();
                say(&mut out, &format!("snap {name} {} {}", l.start, l.end));
                say(&mut out, "start keep");
                for gone in buf.keep_last(2).unwrap() {
                    say(&mut out, &format!("deleted {gone}"));
                }
            }
            90..=92 => {
                let list = buf.snapshots().unwrap();
                if let Some(s) = list.last().filter(|s| s.commit.is_some()) {
                    let c = s.commit.unwrap();
                    let state = buf.snapshot_state(&s.name).unwrap();
                    say(
                        &mut out,
                        &format!("start restore {} {} {}", s.name, c.head, c.tail),
                    );
                    buf.set_state(&state).unwrap();
                } else {
                    say(&mut out, "start none");
                }
            }
            93..=94 => {
                let live = buf.live();
                let picks: Vec<u64> = match live.is_empty() {
                    true => Vec::new(),
                    false => (0..3)
                        .map(|_| live.start + xorshift(&mut rng) % (live.end - live.start))
                        .collect(),
                };
                let list: Vec<String> = picks.iter().map(u64::to_string).collect();
                say(&mut out, &format!("start remove {}", list.join(" ")));
                buf.remove(&picks).unwrap();
                say(&mut out, &format!("removed {}", list.join(" ")));
            }
            95..=96 => {
                say(&mut out, "start pop");
                if buf.len() >= 4 {
                    let b = buf.sample(Request::rows(4).remove()).unwrap();
                    let list: Vec<String> = b.indices().iter().map(u64::to_string).collect();
                    say(&mut out, &format!("removed {}", list.join(" ")));
                }
            }
            _ => {
                say(&mut out, "start sample");
                if !buf.is_empty() {
                    buf.sample(Request::rows(16).prioritized(0.4)).unwrap();
                }
            }
        }
        say(&mut out, &live_line(&buf));
    }
    say(&mut out, "finished");
}

/// What the parent knows from the child's lines.
#[derive(Debug, Default)]
struct Seen {
    live: Option<Range<u64>>,
    pending: Option<Vec<String>>,
    snaps: BTreeMap<String, Range<u64>>,
    finished: bool,
    /// Acknowledged removals (as of the live state), and each snapshot's.
    removed: BTreeSet<u64>,
    snap_removed: BTreeMap<String, BTreeSet<u64>>,
    /// Removals of the restore in flight: the snapshot's.
    restoring: Option<BTreeSet<u64>>,
}

impl Seen {
    fn note(&mut self, line: &str) {
        let w: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let range = |a: &str, b: &str| a.parse::<u64>().unwrap()..b.parse::<u64>().unwrap();
        match w.first().map(String::as_str) {
            Some("have") => {
                self.snaps.insert(w[1].clone(), range(&w[2], &w[3]));
            }
            Some("removed") => {
                self.removed
                    .extend(w[1..].iter().map(|i| i.parse::<u64>().unwrap()));
            }
            Some("live") => {
                self.live = Some(range(&w[1], &w[2]));
                if let Some(theirs) = self.restoring.take() {
                    self.removed = theirs;
                }
                self.pending = None;
            }
            Some("start") => {
                self.pending = Some(w[1..].to_vec());
                self.restoring = None;
                if w.get(1).map(String::as_str) == Some("restore") {
                    // The live state becomes the snapshot's, removals included.
                    let theirs = self.snap_removed.get(&w[2]).cloned().unwrap_or_default();
                    self.restoring = Some(theirs);
                }
            }
            Some("snap") => {
                self.snaps.insert(w[1].clone(), range(&w[2], &w[3]));
                self.snap_removed.insert(w[1].clone(), self.removed.clone());
            }
            Some("deleted") => {
                self.snaps.remove(&w[1]);
            }
            Some("finished") => self.finished = true,
            _ => {}
        }
    }
}

/// The checks after a kill (or an abort at a kill point).
fn check(dir: &Path, seen: &Seen, ctx: &str) {
    let report = verify(dir).unwrap();
    assert!(report.is_sound(), "{ctx}: verify: {:?}", report.problems);
    let buf = ReplayBuffer::open(dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let got = buf.live();
    assert_live_items_intact(&buf);
    check_removals(&buf, seen, ctx);
    drop(buf);
    let Some(acked) = seen.live.clone() else {
        // Killed before it said anything: nothing new was acknowledged.
        return;
    };
    let pending: Vec<&str> = seen.pending.iter().flatten().map(String::as_str).collect();
    match pending.as_slice() {
        ["add", n] => {
            let n: u64 = n.parse().unwrap();
            // Rows of the add in flight may be there; the oldest items it was evicting
            // may be gone; everything else acknowledged is there.
            let keep_from = acked.start.max((acked.end + n).saturating_sub(CAPACITY));
            assert!(
                (acked.end..=acked.end + n).contains(&got.end)
                    && (acked.start..=keep_from).contains(&got.start),
                "{ctx}: live {got:?}, acknowledged {acked:?}, add of {n} in flight"
            );
        }
        ["restore", _, a, b] => {
            let snap = a.parse::<u64>().unwrap()..b.parse::<u64>().unwrap();
            assert!(
                got == acked || got == snap,
                "{ctx}: live {got:?}, acknowledged {acked:?} or {snap:?}"
            );
        }
        _ => assert_eq!(got, acked, "{ctx}: in flight {pending:?}"),
    }
    // Acknowledged snapshots are listed and whole, unless a prune was in flight; one in
    // the making may be there (whole) or not.
    let listed: BTreeMap<String, replaystore::SnapshotInfo> = snapshots(dir)
        .unwrap()
        .into_iter()
        .map(|s| (s.name.clone(), s))
        .collect();
    let pruning = pending.first() == Some(&"keep");
    for (name, range) in &seen.snaps {
        match listed.get(name) {
            None => assert!(pruning, "{ctx}: acknowledged snapshot {name} is gone"),
            Some(info) => {
                let c = info
                    .commit
                    .as_ref()
                    .unwrap_or_else(|| panic!("{ctx}: {name} damaged: {info:?}"));
                assert_eq!(c.head..c.tail, *range, "{ctx}: snapshot {name}");
            }
        }
    }
    for (name, info) in &listed {
        let making = pending.first() == Some(&"snap") && pending.get(1) == Some(&name.as_str());
        assert!(
            seen.snaps.contains_key(name) || making,
            "{ctx}: unknown snapshot {name}"
        );
        let snap =
            ReplayBuffer::open_snapshot(dir, name).unwrap_or_else(|e| panic!("{ctx}: {name}: {e}"));
        let c = info.commit.as_ref().unwrap();
        assert_eq!(snap.live(), c.head..c.tail, "{ctx}: snapshot {name}");
        assert_live_items_intact(&snap);
    }
}

/// Every acknowledged removal of a live item holds and no other item is removed,
/// except those of the call in flight (a removal, a draw that removes) or, with a
/// restore in flight, those of either state.
fn check_removals(buf: &ReplayBuffer, seen: &Seen, ctx: &str) {
    let pending: Vec<&str> = seen.pending.iter().flatten().map(String::as_str).collect();
    let maybe: BTreeSet<u64> = match pending.first() {
        Some(&"remove") => pending[1..].iter().map(|i| i.parse().unwrap()).collect(),
        // A pop in flight removes items the parent does not know: up to four.
        _ => BTreeSet::new(),
    };
    let restoring = pending.first() == Some(&"restore");
    let theirs = seen
        .snap_removed
        .get(pending.get(1).copied().unwrap_or(""))
        .cloned()
        .unwrap_or_default();
    let live: Vec<u64> = buf.live().collect();
    let states = buf.item_states(&live).unwrap();
    let mut unknown = 0;
    for (&i, s) in live.iter().zip(&states) {
        let acked = seen.removed.contains(&i) || (restoring && theirs.contains(&i));
        let either =
            maybe.contains(&i) || (restoring && (seen.removed.contains(&i) != theirs.contains(&i)));
        match (s.removed.is_some(), acked) {
            (true, true) | (false, false) => {}
            (false, true) if either => {}
            (true, false) if either => {}
            (true, false) if pending.first() == Some(&"pop") => unknown += 1,
            (got, _) => panic!(
                "{ctx}: item {i} removed {got}, acknowledged removed {acked} (in flight {pending:?})"
            ),
        }
    }
    assert!(unknown <= 4, "{ctx}: {unknown} removals by a pop of 4");
    // A removed item keeps no priority, also when the kill came between its word and
    // its leaf (kill point `remove-before-leaf`): the open zeroed the leaf.
    let gone: Vec<u64> = live
        .iter()
        .zip(&states)
        .filter(|(_, s)| s.removed.is_some())
        .map(|(&i, _)| i)
        .collect();
    for (i, p) in gone.iter().zip(buf.priorities(&gone).unwrap()) {
        assert_eq!(p, 0.0, "{ctx}: removed item {i} has priority {p}");
    }
}

#[test]
fn kill_9_at_random_moments_of_every_kind_of_call_loses_nothing_acknowledged() {
    let kills = common::env_count("REPLAYSTORE_LOOP_KILLS", 1000);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    create(&dir);
    let mut rng = 0xfeed_beefu64;
    let mut in_flight = BTreeMap::<String, u64>::new();
    // Snapshots on disk after the last check: a child killed before it listed them
    // still has them.
    let mut known = BTreeMap::new();
    // Removals as of the last check (read back from the buffer: the call in flight may
    // or may not have removed), and each snapshot's.
    let mut removed = BTreeSet::new();
    let mut snap_removed: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for cycle in 0..kills {
        let lines = xorshift(&mut rng) % 120;
        let seed = xorshift(&mut rng);
        let mut seen = Seen {
            snaps: known.clone(),
            removed: removed.clone(),
            snap_removed: snap_removed.clone(),
            ..Seen::default()
        };
        run_child_and_kill_after(
            "kill_loop_child",
            CHILD_ENV,
            &format!("{}:{seed}:{}", dir.display(), u64::MAX),
            lines,
            |l| seen.note(l),
        );
        let what = seen
            .pending
            .as_ref()
            .and_then(|p| p.first().cloned())
            .unwrap_or("none".into());
        *in_flight.entry(what).or_default() += 1;
        check(&dir, &seen, &format!("cycle {cycle}"));
        removed = removed_now(&dir);
        snap_removed = seen.snap_removed.clone();
        for name in known.keys() {
            if !seen.snap_removed.contains_key(name) {
                snap_removed.insert(name.clone(), removed_in(&dir, Some(name)));
            }
        }
        known = snapshots(&dir)
            .unwrap()
            .into_iter()
            .map(|s| {
                let c = s.commit.unwrap();
                (s.name, c.head..c.tail)
            })
            .collect();
    }
    println!("kill cycles {kills}; call in flight at the kill: {in_flight:?}");
    // The kills must have landed inside calls of several kinds, not only between them.
    for kind in ["add", "flush", "snap", "update", "remove", "pop"] {
        assert!(
            in_flight.get(kind).copied().unwrap_or(0) > 0,
            "no kill inside a {kind}: {in_flight:?}"
        );
    }
}

/// The removed items of the live range of the buffer in `dir`.
fn removed_now(dir: &Path) -> BTreeSet<u64> {
    removed_in(dir, None)
}

/// The removed items of the live range of the buffer in `dir`, or of its snapshot.
fn removed_in(dir: &Path, snapshot: Option<&str>) -> BTreeSet<u64> {
    match snapshot {
        None => common::removed_of(&ReplayBuffer::open(dir).unwrap()),
        Some(name) => common::removed_of(&ReplayBuffer::open_snapshot(dir, name).unwrap()),
    }
}

/// The child of the create kill: creates the buffer `dir` (and is killed before its
/// MANIFEST is published).
#[test]
fn kill_create_child() {
    if let Ok(dir) = std::env::var(CREATE_CHILD_ENV) {
        create(Path::new(&dir));
    }
}

const CREATE_CHILD_ENV: &str = "REPLAYSTORE_KILL_CREATE_CHILD";

/// Issue 26, point 7: a create killed before MANIFEST leaves a folder that open calls
/// "not a buffer" (saying that creating again reuses it), and that create takes back
/// once no process holds its lock; the buffer made then is sound.
#[cfg(feature = "kill-points")]
#[test]
fn a_create_killed_before_its_manifest_is_created_again_in_the_same_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let (mut child, mut out) = common::spawn_child_env(
        "kill_create_child",
        &[
            (CREATE_CHILD_ENV, dir.clone().into_os_string()),
            ("REPLAYSTORE_KILL_POINT", "create-before-manifest:1".into()),
        ],
    );
    std::io::copy(&mut out, &mut std::io::sink()).unwrap();
    assert!(!child.wait().unwrap().success(), "the child was not killed");
    assert!(dir.join("LOCK").exists() && !dir.join("MANIFEST").exists());
    let e = ReplayBuffer::open(&dir).unwrap_err();
    assert!(
        e.to_string().contains("creating the buffer again reuses"),
        "{e}"
    );
    create(&dir);
    let buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(buf.live(), 0..0);
    drop(buf);
    assert!(replaystore::verify(&dir).unwrap().is_sound());
}

/// Kills at each named point, at several counts: the child aborts exactly there.
#[cfg(feature = "kill-points")]
#[test]
fn kill_at_each_named_point_loses_nothing_acknowledged() {
    let points = [
        "remove-before-leaf",
        "before-stamp",
        "write-behind-started",
        "commit-written",
        "eviction-written",
        "snapshot-mid-links",
        "restore-mid-links",
        "own-copy-made",
    ];
    common::kill_at_each_point(
        "kill_loop_child",
        CHILD_ENV,
        &points,
        &[1, 2, 5, 13],
        |dir, n| {
            create(dir);
            format!("{}:{}:{}", dir.display(), 7 + n, 600)
        },
        |dir, lines, ctx| {
            let mut seen = Seen::default();
            lines.iter().for_each(|l| seen.note(l));
            check(dir, &seen, ctx);
        },
    );
}
