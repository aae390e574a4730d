//! Promises of checkpoints: `get_state` / `set_state` give back exactly the state they
//! froze (items, priorities, counters, RNG), a snapshot never changes while the writer
//! goes on, a kill inside any checkpoint operation leaves the old or the new state whole,
//! and a damaged snapshot is an error naming it.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{StopIo, add_range, assert_live_items_intact, columns, item, item_bytes, schema};
use replaystore::{Config, Error, HoldsTree, ReplayBuffer, Request, State, snapshots, verify};

const CAPACITY: u64 = 64;
const SEGMENT: u64 = 16;

fn config() -> Config {
    Config::new(schema(), CAPACITY)
        .segment_slots(SEGMENT)
        .prioritized(0.6, 1e-3)
        .seed(11)
}

fn new_buffer(dir: &Path) -> ReplayBuffer {
    ReplayBuffer::create(dir, config()).unwrap()
}

/// Every live item of `buf` is `item_bytes(index)`, and `verify` finds the buffer and
/// all its snapshots sound.
fn assert_sound(dir: &Path) {
    let report = verify(dir).unwrap();
    assert!(report.is_sound(), "{:#?}", report.problems);
}

fn priorities_of<R: HoldsTree>(buf: &ReplayBuffer<R>) -> Vec<f64> {
    let live: Vec<u64> = buf.live().collect();
    buf.priorities(&live).unwrap()
}

/// 40 items with priorities 1..=5 by index, checkpointed: the buffer and its state.
fn forty_with_priorities(dir: &Path) -> (ReplayBuffer, State) {
    let mut buf = new_buffer(dir);
    add_range(&mut buf, 0, 40);
    let live: Vec<u64> = buf.live().collect();
    let new: Vec<f64> = live.iter().map(|&i| 1.0 + (i % 5) as f64).collect();
    buf.update_priorities(&live, &new).unwrap();
    let state = buf.get_state().unwrap();
    (buf, state)
}

/// One training step of the resume test: add, sample by priority, set new priorities.
fn step(buf: &mut ReplayBuffer, t: u64, next: &mut u64) -> (Vec<u64>, Vec<f32>, Vec<u8>) {
    let r = add_range(buf, *next, *next + 1 + t % 3);
    *next = r.end;
    let batch = buf.sample(Request::rows(16).prioritized(0.4)).unwrap();
    let indices = batch.indices().to_vec();
    let new: Vec<f64> = indices
        .iter()
        .map(|&i| ((i * 7919 + t * 104_729) % 1000) as f64 / 100.0)
        .collect();
    buf.update_priorities(&indices, &new).unwrap();
    let bytes: Vec<u8> = (0..indices.len())
        .flat_map(|r| batch.item_bytes(r))
        .collect();
    (indices, batch.weights().to_vec(), bytes)
}

/// Training steps of the resume test.
const STEPS: u64 = 200;

#[test]
fn set_state_replays_the_same_samples_byte_for_byte_with_priorities() {
    let tmp = tempfile::tempdir().unwrap();
    // Run A: never checkpointed.
    let mut a = new_buffer(&tmp.path().join("a"));
    let mut next = 0;
    let mut expected = Vec::new();
    for t in 0..STEPS {
        let s = step(&mut a, t, &mut next);
        if t >= STEPS / 2 {
            expected.push(s);
        }
    }
    // Run B: checkpoint half way, go on to the end (the ring wraps over the snapshot,
    // priorities change), close; a new process resumes from the state, by open +
    // set_state or by open_at_state.
    for at_open in [false, true] {
        let dir_b = tmp.path().join(format!("b-{at_open}"));
        run_b_and_resume(&dir_b, at_open, &expected, &a);
    }
}

fn run_b_and_resume(
    dir_b: &Path,
    at_open: bool,
    expected: &[(Vec<u64>, Vec<f32>, Vec<u8>)],
    a: &ReplayBuffer,
) {
    let mut b = new_buffer(dir_b);
    let mut next_b = 0;
    let mut saved = None;
    for t in 0..STEPS {
        if t == STEPS / 2 {
            saved = Some((b.get_state().unwrap().to_bytes(), next_b, b.stats()));
        }
        step(&mut b, t, &mut next_b);
    }
    b.close().unwrap();
    let (bytes, resume_next, stats_then) = saved.unwrap();
    let state = State::from_bytes(&bytes).unwrap();
    let mut b = if at_open {
        ReplayBuffer::open_at_state(dir_b, &state).unwrap()
    } else {
        let mut b = ReplayBuffer::open(dir_b).unwrap();
        b.set_state(&state).unwrap();
        b
    };
    let stats_now = b.stats();
    assert_eq!(
        (stats_now.head, stats_now.tail, stats_now.sampled),
        (stats_then.head, stats_then.tail, stats_then.sampled)
    );
    assert_eq!(stats_now.priority_updates, stats_then.priority_updates);
    let mut next_b = resume_next;
    for (k, t) in (STEPS / 2..STEPS).enumerate() {
        let got = step(&mut b, t, &mut next_b);
        assert_eq!(got, expected[k], "step {t} differs after set_state");
    }
    assert_eq!(priorities_of(a), priorities_of(&b));
    assert_sound(dir_b);
}

#[test]
fn a_snapshot_keeps_its_bytes_while_the_ring_wraps_twice_over_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 50);
    buf.update_priorities(&[3, 40], &[5.0f64, 0.25]).unwrap();
    let state = buf.get_state_named("half").unwrap();
    let frozen_priorities = priorities_of(&buf);
    // Two and a half laps of the ring, with priority updates, over the snapshot.
    for chunk in 0..10 {
        let from = 50 + chunk * 16;
        add_range(&mut buf, from, from + 16);
        let live: Vec<u64> = buf.live().collect();
        buf.update_priorities(&live[..4], &[9.0f32; 4]).unwrap();
    }
    assert_eq!(buf.live(), 146..210);
    assert_live_items_intact(&buf);
    let snap = ReplayBuffer::open_snapshot(&dir, "half").unwrap();
    assert_eq!(snap.live(), 0..50);
    assert_live_items_intact(&snap);
    assert_eq!(priorities_of(&snap), frozen_priorities);
    assert_sound(&dir);
    assert_eq!(verify(&dir).unwrap().snapshots_checked, 1);
    // Back to the snapshot: its items and priorities, then the ring goes on from there.
    buf.set_state(&state).unwrap();
    assert_eq!(buf.live(), 0..50);
    assert_live_items_intact(&buf);
    assert_eq!(priorities_of(&buf), frozen_priorities);
    add_range(&mut buf, 50, 150);
    assert_live_items_intact(&buf);
    assert_live_items_intact(&ReplayBuffer::open_snapshot(&dir, "half").unwrap());
    assert_sound(&dir);
}

#[test]
fn set_state_right_after_get_state_and_twice_in_a_row_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 30);
    let state = buf.get_state().unwrap();
    // No store in between: the live files are the snapshot's own.
    buf.set_state(&state).unwrap();
    assert_eq!(buf.live(), 0..30);
    add_range(&mut buf, 30, 100);
    buf.set_state(&state).unwrap();
    let first = buf.sample(8).unwrap();
    buf.set_state(&state).unwrap();
    let second = buf.sample(8).unwrap();
    assert_eq!(first.indices(), second.indices());
    assert_live_items_intact(&buf);
    assert_sound(&dir);
}

/// A tree copied while another process wrote it (an actor's checkpoint) can have
/// parents that do not match their leaves; restoring it recomputes them. (A sound copy
/// is left as it is: that is what keeps `set_state` from rewriting the whole tree.)
#[test]
fn a_restored_tree_whose_parents_disagree_with_its_leaves_is_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let (mut buf, state) = forty_with_priorities(&dir);
    let before = priorities_of(&buf);
    // The sum-tree's root is the first word of the body (FORMAT.md, priorities.tree).
    let tree = replaystore::internal::snapshot_dir(&dir, &state.name).join("priorities.tree");
    let mut bytes = std::fs::read(&tree).unwrap();
    bytes[4096..4104].copy_from_slice(&12_345.0f64.to_le_bytes());
    std::fs::write(&tree, &bytes).unwrap();
    add_range(&mut buf, 40, 50);
    buf.set_state(&state).unwrap();
    assert_eq!(priorities_of(&buf), before);
    let p = buf.priority_summary().unwrap();
    let leaves: f64 = before.iter().map(|x| x.powf(0.6)).sum();
    assert!(
        (p.total - leaves).abs() < 1e-6 * leaves,
        "{} vs {leaves}",
        p.total
    );
    // The live tree is sound again; the snapshot's copy is still damaged, and said so
    // (it names no owner, so its parents are judged).
    let report = verify(&dir).unwrap();
    assert!(!report.problems.is_empty());
    assert!(
        report.problems.iter().all(|f| f.file == tree),
        "{:#?}",
        report.problems
    );
}

/// Issue 26, point 6: `verify` judges what it can prove. A snapshot's copy of the tree
/// names no owner (the writer owned and settled it), so damaged parents in it are
/// problems, not a note about a running owner; and an owner word that fails its check
/// is damage, so setting it cannot make a damaged live tree pass.
#[test]
fn verify_judges_snapshot_trees_and_trees_whose_owner_word_was_damaged() {
    use replaystore::internal::format::tree::{BODY_OFFSET, OWNER_CHECK_OFF, OWNER_PID_OFF};
    use replaystore::{VerifyOptions, verify_opts};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let (buf, state) = forty_with_priorities(&dir);
    let copy = replaystore::internal::snapshot_dir(&dir, &state.name).join("priorities.tree");
    let mut bytes = std::fs::read(&copy).unwrap();
    assert!(
        bytes[OWNER_PID_OFF..OWNER_CHECK_OFF + 4]
            .iter()
            .all(|&b| b == 0)
    );
    bytes[BODY_OFFSET..BODY_OFFSET + 8].copy_from_slice(&12_345.0f64.to_le_bytes());
    std::fs::write(&copy, &bytes).unwrap();
    let deep = VerifyOptions {
        deep: true,
        ..VerifyOptions::default()
    };
    let report = verify_opts(&dir, &deep).unwrap();
    assert!(
        (report.problems.iter()).any(|p| p.file == copy && p.what.contains("stored 12345")),
        "{report:#?}"
    );
    buf.close().unwrap();

    // The live tree of a closed buffer: a damaged root is a problem; naming an owner
    // without its check word hides nothing.
    let tree = dir.join("priorities.tree");
    let mut bytes = std::fs::read(&tree).unwrap();
    bytes[BODY_OFFSET..BODY_OFFSET + 8].copy_from_slice(&12_345.0f64.to_le_bytes());
    std::fs::write(&tree, &bytes).unwrap();
    let parent_found = |r: &replaystore::Report| {
        (r.problems.iter()).any(|p| p.file == tree && p.what.contains("stored 12345"))
    };
    assert!(parent_found(&verify(&dir).unwrap()));
    bytes[OWNER_PID_OFF..OWNER_PID_OFF + 8].copy_from_slice(&4242u64.to_le_bytes());
    std::fs::write(&tree, &bytes).unwrap();
    let report = verify(&dir).unwrap();
    assert!(parent_found(&report), "{report:#?}");
    assert!(
        (report.problems.iter()).any(|p| p.file == tree && p.what.contains("owner_pid")),
        "{report:#?}"
    );
}

const PROCESS_ENV: &str = "REPLAYSTORE_SNAPSHOT_READER";

/// Reads the snapshot "fixed" over and over from another process; announces how many
/// rounds found every item intact.
#[test]
fn snapshot_reader_child() {
    let Ok(dir) = std::env::var(PROCESS_ENV) else {
        return;
    };
    for round in 0..200 {
        let mut snap = ReplayBuffer::open_snapshot(&dir, "fixed").unwrap();
        assert_eq!(snap.live(), 0..40);
        assert_live_items_intact(&snap);
        let batch = snap.sample(Request::rows(32).prioritized(0.4)).unwrap();
        for (r, &i) in batch.indices().iter().enumerate() {
            assert_eq!(batch.item_bytes(r), item_bytes(i));
        }
        // (It cannot add: `ReplayBuffer<Frozen>` has no add, a compile_fail example.)
        println!("marker=round {round}");
    }
    println!("marker=done");
}

#[test]
fn a_snapshot_opens_read_only_in_another_process_while_the_writer_adds() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 40);
    buf.get_state_named("fixed").unwrap();
    let (mut child, stdout) =
        common::spawn_child("snapshot_reader_child", PROCESS_ENV, dir.as_os_str());
    let lines = std::thread::spawn(move || {
        stdout
            .lines()
            .map_while(Result::ok)
            .filter(|l| l.contains("marker="))
            .count()
    });
    let mut next = 40;
    let mut laps = 0;
    let mut autos = Vec::new();
    while child.try_wait().unwrap().is_none() {
        let r = add_range(&mut buf, next, next + 7);
        next = r.end;
        if next % 91 < 7 {
            // Other snapshots come and go meanwhile.
            autos.push(buf.get_state().unwrap().name);
            if autos.len() > 2 {
                buf.delete_snapshot(&autos.remove(0)).unwrap();
            }
        }
        laps += 1;
    }
    assert!(
        child.wait().unwrap().success(),
        "the reader found a bad item"
    );
    assert_eq!(lines.join().unwrap(), 201, "200 rounds and done");
    assert!(
        laps > 10 && next > 2 * CAPACITY,
        "the writer kept wrapping ({next})"
    );
    assert!(buf.snapshots().unwrap().iter().any(|s| s.name == "fixed"));
    assert_live_items_intact(&buf);
    assert_sound(&dir);
}

#[test]
fn a_damaged_snapshot_is_an_error_naming_it_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 40);
    let state = buf.get_state_named("s").unwrap();
    add_range(&mut buf, 40, 60);
    let live = buf.live();
    let snap = dir.join("snapshots/s");
    let is_bad_snapshot = |e: &Error, file: &str| {
        let text = e.to_string();
        matches!(e, Error::BadSnapshot { name, .. } if name == "s") && text.contains(file)
    };

    // A missing link.
    let seg = snap.join("lane-0/seg-00000001.dat");
    let saved = tmp.path().join("saved-seg");
    std::fs::rename(&seg, &saved).unwrap();
    let e = buf.set_state(&state).unwrap_err();
    assert!(is_bad_snapshot(&e, "seg-00000001.dat"), "{e}");
    let e = ReplayBuffer::open_snapshot(&dir, "s").unwrap_err();
    assert!(is_bad_snapshot(&e, "seg-00000001.dat"), "{e}");
    let report = verify(&dir).unwrap();
    assert!(
        report.problems.iter().any(|p| p.file.starts_with(&snap)),
        "{:?}",
        report.problems
    );
    assert_eq!(buf.live(), live, "a refused set_state changes nothing");
    std::fs::rename(&saved, &seg).unwrap();

    // A flipped bit in the snapshot's commit, then in its priorities header.
    let manifest = std::fs::read(snap.join("MANIFEST")).unwrap();
    let commit_slot = if &manifest[4096..4100] == b"CMIT" {
        4096
    } else {
        8192
    };
    for (file, offset) in [("MANIFEST", commit_slot + 20), ("priorities.tree", 20)] {
        let path = snap.join(file);
        let good = std::fs::read(&path).unwrap();
        let mut bad = good.clone();
        bad[offset] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let e = buf.set_state(&state).unwrap_err();
        assert!(is_bad_snapshot(&e, file), "{file}: {e}");
        assert!(!verify(&dir).unwrap().is_sound());
        std::fs::write(&path, &good).unwrap();
    }
    assert_eq!(buf.live(), live);
    assert_live_items_intact(&buf);

    // A flipped bit in an item only the snapshot holds (the writer copied that segment
    // before storing into it): verify and reads name the snapshot's file.
    let row = snap.join("lane-0/seg-00000002.dat");
    let mut bytes = std::fs::read(&row).unwrap();
    let stride = u64::from_le_bytes(bytes[56..64].try_into().unwrap()) as usize;
    bytes[4096 + 5 * stride + 20] ^= 1;
    std::fs::write(&row, &bytes).unwrap();
    let report = verify(&dir).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == row && p.what.contains("checksum")),
        "{:?}",
        report.problems
    );
    let frozen = ReplayBuffer::open_snapshot(&dir, "s").unwrap();
    let e = frozen.get(37).unwrap_err();
    assert!(
        matches!(&e, Error::BadItem { file, .. } if *file == row),
        "{e}"
    );
    assert_live_items_intact(&buf);
}

#[test]
fn a_state_only_applies_to_the_snapshot_it_names() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = new_buffer(&tmp.path().join("a"));
    let mut b = new_buffer(&tmp.path().join("b"));
    add_range(&mut a, 0, 10);
    add_range(&mut b, 0, 10);
    let state_a = a.get_state_named("same").unwrap();
    b.get_state_named("same").unwrap();
    // A state without its origin (version 1) names a snapshot of this folder: b's
    // "same" is another buffer's line (another uuid), so it is refused.
    let unplaced = State {
        origin: PathBuf::new(),
        ..state_a.clone()
    };
    let e = b.set_state(&unplaced).unwrap_err();
    assert!(
        matches!(e, Error::StateMismatch { field: "uuid", .. }),
        "{e}"
    );
    // A name reused for a newer snapshot: the old state no longer matches it.
    add_range(&mut a, 10, 20);
    a.delete_snapshot("same").unwrap();
    a.get_state_named("same").unwrap();
    let e = a.set_state(&state_a).unwrap_err();
    assert!(
        matches!(
            e,
            Error::StateMismatch {
                field: "generation",
                ..
            }
        ),
        "{e}"
    );
    a.delete_snapshot("same").unwrap();
    assert!(matches!(
        a.set_state(&state_a).unwrap_err(),
        Error::NoSuchSnapshot { .. }
    ));
    assert_eq!(a.live(), 0..20);
}

#[test]
fn snapshots_are_named_listed_deleted_and_pruned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    for bad in ["", ".hidden", "a/b", "has space"] {
        assert!(
            matches!(buf.get_state_named(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
    }
    add_range(&mut buf, 0, 20);
    buf.get_state_named("one").unwrap();
    assert!(matches!(
        buf.get_state_named("one"),
        Err(Error::SnapshotExists { .. })
    ));
    // Right after a snapshot every segment is shared with it; the snapshot owns only
    // its copies of the manifest and the priorities.
    let list = snapshots(&dir).unwrap();
    assert_eq!(list.len(), 1);
    let one = &list[0];
    assert_eq!((one.len(), one.problem.as_ref()), (20, None));
    let tree_len = std::fs::metadata(dir.join("priorities.tree"))
        .unwrap()
        .len();
    assert!(one.bytes_owned >= tree_len && one.bytes_owned < tree_len + 64 * 1024);
    assert!(one.bytes_shared > 0);
    // The ring goes over every segment: the writer copied them all, so the snapshot
    // now owns every byte it holds.
    add_range(&mut buf, 20, 20 + CAPACITY);
    let one = &snapshots(&dir).unwrap()[0];
    assert_eq!(one.bytes_shared, 0);
    let mut next = 20 + CAPACITY;
    for name in ["two", "three", "four"] {
        next = add_range(&mut buf, next, next + 3).end;
        buf.get_state_named(name).unwrap();
    }
    let deleted = buf.keep_last(2).unwrap();
    assert_eq!(deleted, ["one", "two"]);
    let names: Vec<String> = buf
        .snapshots()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["three", "four"]);
    buf.delete_snapshot("three").unwrap();
    assert!(matches!(
        buf.delete_snapshot("three"),
        Err(Error::NoSuchSnapshot { .. })
    ));
    assert_eq!(snapshots(&dir).unwrap().len(), 1);
    assert_live_items_intact(&buf);
    assert_sound(&dir);
}

#[test]
fn a_read_only_snapshot_refuses_writes_and_samples_from_its_rng_position() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 30);
    let state = buf.get_state_named("s").unwrap();
    // A snapshot has no method that writes: add, update_priorities, flush and
    // get_state are not there (a compile_fail example on `Frozen` keeps it so).
    let mut snap = ReplayBuffer::open_snapshot(&dir, "s").unwrap();
    assert!(snap.is_read_only());
    let from_snapshot = snap.sample(Request::rows(16).prioritized(0.4)).unwrap();
    snap.close().unwrap();
    add_range(&mut buf, 30, 90);
    buf.set_state(&state).unwrap();
    let from_writer = buf.sample(Request::rows(16).prioritized(0.4)).unwrap();
    assert_eq!(from_snapshot.indices(), from_writer.indices());
    assert_eq!(from_snapshot.weights(), from_writer.weights());
    // Reading it changed no byte of it.
    assert_sound(&dir);
    assert!(matches!(
        ReplayBuffer::open_snapshot(&dir, "nope"),
        Err(Error::NoSuchSnapshot { .. })
    ));
}

#[test]
fn a_failed_segment_copy_is_an_error_that_loses_nothing() {
    use replaystore::io::FaultyIo;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    // The reservations before the first copy (the small files at create, then each
    // segment as the first 20 items reach it), counted on a twin: the next is the copy.
    let twin = tmp.path().join("twin");
    let counting = Arc::new(FaultyIo::fail_once(u64::MAX).only("allocate"));
    let mut buf = ReplayBuffer::create(&twin, config().io(counting.clone())).unwrap();
    add_range(&mut buf, 0, 20);
    buf.get_state_named("s").unwrap();
    let before_copy = counting.ops();
    let io = Arc::new(FaultyIo::fail_once(before_copy).only("allocate").errno(28));
    let mut buf = ReplayBuffer::create(&dir, config().io(io)).unwrap();
    add_range(&mut buf, 0, 20);
    buf.get_state_named("s").unwrap();
    let e = buf.add(&columns(&item(20))).unwrap_err();
    assert!(matches!(e, Error::DiskFull { .. }), "{e}");
    assert_eq!(buf.live(), 0..20);
    // The disk has room again: the copy happens and the item goes in.
    assert_eq!(buf.add(&columns(&item(20))).unwrap(), 20);
    buf.flush().unwrap();
    assert_live_items_intact(&buf);
    assert_live_items_intact(&ReplayBuffer::open_snapshot(&dir, "s").unwrap());
    drop(buf);
    assert!(
        std::fs::read_dir(dir.join("lane-0")).unwrap().all(|e| {
            let path = e.unwrap().path();
            path.ends_with("progress") || path.extension().unwrap() == "dat"
        }),
        "no temporary copy is left behind"
    );
    assert_sound(&dir);
}

// ---- kill -9 inside get_state, set_state and delete ----

const KILL_ENV: &str = "REPLAYSTORE_SNAPSHOT_KILL";

/// What a kill test's child does, and where it stops: written next to the buffer.
fn plan_path(dir: &Path) -> PathBuf {
    dir.with_extension("plan")
}

/// The buffer every kill case starts from: items 0..40 frozen as "old" (with a
/// priority changed), then 40..90 added (live 26..90) and closed.
fn kill_setup(dir: &Path) -> State {
    let mut buf = new_buffer(dir);
    add_range(&mut buf, 0, 40);
    buf.update_priorities(&[5], &[7.0f64]).unwrap();
    let old = buf.get_state_named("old").unwrap();
    add_range(&mut buf, 40, 90);
    buf.close().unwrap();
    old
}

/// The operation under test, through `io` (armed only around it).
fn kill_op(dir: &Path, op: &str, io: &std::sync::Arc<StopIo>, old: &State) -> u64 {
    if op == "resume" {
        io.arm();
        let buf = ReplayBuffer::open_at_state_with(dir, old, io.clone()).unwrap();
        let ops = io.disarm();
        std::mem::forget(buf);
        return ops;
    }
    let mut buf = ReplayBuffer::open_with(dir, io.clone()).unwrap();
    io.arm();
    match op {
        "get" => drop(buf.get_state_named("new").unwrap()),
        "set" => buf.set_state(old).unwrap(),
        "delete" => buf.delete_snapshot("old").unwrap(),
        _ => unreachable!("{op}"),
    }
    let ops = io.disarm();
    std::mem::forget(buf);
    ops
}

#[test]
fn snapshot_kill_child() {
    let Ok(dir) = std::env::var(KILL_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let plan = std::fs::read_to_string(plan_path(&dir)).unwrap();
    let (op, rest) = plan.split_once(' ').unwrap();
    let (stop_at, state) = rest.split_once(' ').unwrap();
    let state = State::from_bytes(&hex_decode(state)).unwrap();
    kill_op(&dir, op, &StopIo::new(stop_at.parse().unwrap()), &state);
    common::wait_for_kill();
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// After a kill: the buffer opens (finishing any restore), it and every snapshot listed
/// verify, "old" (unless being deleted) still holds 0..40 and its priority, and the live
/// buffer is wholly before or wholly after the operation.
fn check_after_kill(dir: &Path, op: &str) -> bool {
    let buf = ReplayBuffer::open(dir).unwrap();
    let live = buf.live();
    let applied = match op {
        "set" | "resume" => {
            assert!(live == (26..90) || live == (0..40), "{live:?}");
            live == (0..40)
        }
        _ => {
            assert_eq!(live, 26..90);
            false
        }
    };
    assert_live_items_intact(&buf);
    drop(buf);
    assert_sound(dir);
    let names: Vec<String> = snapshots(dir)
        .unwrap()
        .into_iter()
        .map(|s| {
            assert_eq!(s.problem, None, "snapshot {}", s.name);
            s.name
        })
        .collect();
    for name in &names {
        let snap = ReplayBuffer::open_snapshot(dir, name).unwrap();
        assert_live_items_intact(&snap);
        match name.as_str() {
            "old" => {
                assert_eq!(snap.live(), 0..40);
                let p = snap.priorities(&[5]).unwrap()[0];
                assert!((p - 7.001).abs() < 1e-9, "{p}");
            }
            "new" => assert_eq!(snap.live(), 26..90),
            other => panic!("unexpected snapshot {other}"),
        }
    }
    match op {
        "get" => {
            assert!(names.contains(&"old".to_owned()));
            names.contains(&"new".to_owned())
        }
        "delete" => !names.contains(&"old".to_owned()),
        _ => applied,
    }
}

#[test]
fn kill_9_between_any_two_file_operations_of_a_checkpoint_leaves_old_or_new_state() {
    let tmp = tempfile::tempdir().unwrap();
    let mut points = 0;
    for op in ["get", "set", "resume", "delete"] {
        // How many file operations the operation makes, counted in this process.
        let probe = tmp.path().join(format!("probe-{op}"));
        let old = kill_setup(&probe);
        let total = kill_op(&probe, op, &StopIo::new(u64::MAX), &old);
        assert!(total >= 8, "{op}: {total} operations");
        let mut outcomes = [0u32; 2];
        for stop_at in 0..=total {
            let dir = tmp.path().join(format!("{op}-{stop_at}"));
            let old = kill_setup(&dir);
            let plan = format!("{op} {stop_at} {}", hex_encode(&old.to_bytes()));
            std::fs::write(plan_path(&dir), plan).unwrap();
            common::run_child_then_kill("snapshot_kill_child", KILL_ENV, &dir);
            let done = check_after_kill(&dir, op);
            outcomes[usize::from(done)] += 1;
            // Stopped after the last operation, the operation must have happened.
            if stop_at == total {
                assert!(
                    done,
                    "{op} did not take effect after all {total} operations"
                );
            }
            std::fs::remove_dir_all(&dir).unwrap();
            points += 1;
        }
        assert!(
            outcomes[0] > 0 && outcomes[1] > 0,
            "{op}: kills landed both before and after it took effect: {outcomes:?}"
        );
    }
    eprintln!("{points} kill points");
    assert!(points >= 30, "{points} kill points");
}

const LOOP_ENV: &str = "REPLAYSTORE_SNAPSHOT_LOOP";

/// Checkpoints, restores, prunes and adds in a random order forever, one line per
/// operation, until killed.
#[test]
fn snapshot_loop_child() {
    let Ok(dir) = std::env::var(LOOP_ENV) else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    buf.keep_last(3).unwrap();
    // The loop keeps its own list of states and deletes them itself.
    buf.set_keep_states(None);
    let mut states: Vec<State> = Vec::new();
    let mut rng = u64::from(std::process::id()) | 1;
    loop {
        let op = common::xorshift(&mut rng) % 5;
        match op {
            0 => states.push(buf.get_state().unwrap()),
            1 if !states.is_empty() => {
                let pick = (common::xorshift(&mut rng) % states.len() as u64) as usize;
                buf.set_state(&states[pick]).unwrap();
            }
            2 if states.len() > 2 => buf.delete_snapshot(&states.remove(0).name).unwrap(),
            _ => {
                let next = buf.live().end;
                add_range(&mut buf, next, next + 1 + common::xorshift(&mut rng) % 40);
            }
        }
        println!("op {op}");
    }
}

#[test]
fn kill_9_at_random_moments_of_checkpoint_loops_leaves_every_snapshot_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 50);
    buf.close().unwrap();
    let mut rng = 0x5eed_u64;
    for cycle in 0..12 {
        let lines = 1 + common::xorshift(&mut rng) % 60;
        common::run_child_and_kill_after(
            "snapshot_loop_child",
            LOOP_ENV,
            dir.to_str().unwrap(),
            lines,
            |_| {},
        );
        let buf = ReplayBuffer::open(&dir).unwrap();
        assert_live_items_intact(&buf);
        drop(buf);
        assert_sound(&dir);
        for s in snapshots(&dir).unwrap() {
            assert_eq!(s.problem, None, "cycle {cycle}: snapshot {}", s.name);
            assert_live_items_intact(&ReplayBuffer::open_snapshot(&dir, &s.name).unwrap());
        }
    }
}

#[test]
fn a_pending_restore_is_reported_by_verify_and_finished_by_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 30);
    let state = buf.get_state_named("s").unwrap();
    add_range(&mut buf, 30, 50);
    buf.close().unwrap();
    // What a kill right after the intent became durable leaves: RESTORE, old files.
    std::fs::write(dir.join("RESTORE"), state.to_bytes()).unwrap();
    let report = verify(&dir).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("set_state") && n.contains("\"s\"")),
        "{:?}",
        report.notes
    );
    let buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(buf.live(), 0..30);
    assert_live_items_intact(&buf);
    drop(buf);
    assert!(!dir.join("RESTORE").exists());
    assert_sound(&dir);

    // An intent naming a snapshot that is gone: open refuses, naming it, and changes
    // nothing (the intent stays for a person to look at).
    std::fs::write(
        dir.join("RESTORE"),
        State {
            name: "gone".into(),
            ..state.clone()
        }
        .to_bytes(),
    )
    .unwrap();
    let e = ReplayBuffer::open(&dir).unwrap_err();
    assert!(
        matches!(&e, Error::NoSuchSnapshot { name, .. } if name == "gone"),
        "{e}"
    );
    assert!(!verify(&dir).unwrap().is_sound());
    // A damaged intent is an error naming the file, never a guess.
    std::fs::write(dir.join("RESTORE"), b"RPLYSTAT garbage").unwrap();
    let e = ReplayBuffer::open(&dir).unwrap_err();
    assert!(e.to_string().contains("RESTORE"), "{e}");
}

#[test]
fn open_at_state_refuses_a_damaged_snapshot_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    add_range(&mut buf, 0, 30);
    let state = buf.get_state_named("s").unwrap();
    add_range(&mut buf, 30, 50);
    buf.close().unwrap();
    let tree = dir.join("snapshots/s/priorities.tree");
    let good = std::fs::read(&tree).unwrap();
    std::fs::write(&tree, &good[..100]).unwrap();
    let e = ReplayBuffer::open_at_state(&dir, &state).unwrap_err();
    assert!(
        matches!(&e, Error::BadSnapshot { name, .. } if name == "s")
            && e.to_string().contains("priorities.tree"),
        "{e}"
    );
    std::fs::write(&tree, &good).unwrap();
    let buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(buf.live(), 0..50);
    assert_live_items_intact(&buf);
    drop(buf);
    let buf = ReplayBuffer::open_at_state(&dir, &state).unwrap();
    assert_eq!(buf.live(), 0..30);
}

/// Issue 26, point 7: a checkpoint that meets a full disk is a disk-full error (Python's
/// `DiskFullError`, the CLI's exit 7), leaves no partial snapshot behind, and costs
/// nothing stored; a restore that meets one leaves a handle that closes quietly, and
/// the next open finishes the restore.
#[test]
fn a_full_disk_during_get_state_or_set_state_is_disk_full_and_leaves_nothing_behind() {
    use replaystore::io::FaultyIo;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    // The first tree copy (get_state) fails with ENOSPC.
    let io = Arc::new(FaultyIo::fail_once(0).only("copy_file").errno(28));
    let mut buf = ReplayBuffer::create(&dir, config().io(io)).unwrap();
    add_range(&mut buf, 0, 20);
    let e = buf.get_state_named("full").unwrap_err();
    assert!(e.is_disk_full(), "{e}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("snapshots"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Nothing is shared with a half-made snapshot: the ring goes on, and the next
    // checkpoint works.
    add_range(&mut buf, 20, 30);
    let state = buf.get_state_named("s").unwrap();
    add_range(&mut buf, 30, 40);
    assert_live_items_intact(&buf);
    buf.close().unwrap();

    // The first link of a restore fails with ENOSPC.
    let io = Arc::new(FaultyIo::fail_once(0).only("hard_link").errno(28));
    let mut buf = ReplayBuffer::open_with(&dir, io).unwrap();
    let e = buf.set_state(&state).unwrap_err();
    assert!(e.is_disk_full(), "{e}");
    buf.close().unwrap();
    let buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(buf.live(), 0..30, "the next open finishes the restore");
    assert_live_items_intact(&buf);
    drop(buf);
    assert_sound(&dir);
}

/// Inode of a file (to tell a link from a copy).
fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// Issue 28, point 3: `set_state` links the snapshot's tree instead of copying it, so a
/// restore costs the same at any capacity. Whatever the writer then does first (draw,
/// flush, add, update, clear, a new checkpoint, close), the snapshot's tree keeps its
/// bytes, and the first store copies the tree to a file of its own; with the snapshot
/// deleted first, nothing is copied at all.
#[test]
fn set_state_links_the_tree_and_the_first_store_copies_it_leaving_the_snapshot_whole() {
    type Op = fn(&mut ReplayBuffer, &State);
    let ops: [(&str, bool, Op); 6] = [
        ("draws and a flush", false, |b, _| {
            b.sample(Request::rows(8).prioritized(0.4)).unwrap();
            b.flush().unwrap();
        }),
        ("an add", true, |b, _| {
            let end = b.live().end;
            add_range(b, end, end + 1);
        }),
        ("an update", true, |b, _| {
            b.update_priorities(&[5], &[9.0]).unwrap();
        }),
        ("a clear", true, |b, _| b.clear().unwrap()),
        ("a checkpoint", false, |b, _| {
            b.get_state_named("again").unwrap();
        }),
        ("a restore of the same state", false, |b, s| {
            b.set_state(s).unwrap()
        }),
    ];
    for (what, copies, op) in ops {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        let (mut buf, state) = forty_with_priorities(&dir);
        let before = priorities_of(&buf);
        let snap_tree =
            replaystore::internal::snapshot_dir(&dir, &state.name).join("priorities.tree");
        let snap_bytes = std::fs::read(&snap_tree).unwrap();
        add_range(&mut buf, 40, 70);
        buf.update_priorities(&[45], &[3.0]).unwrap();
        buf.set_state(&state).unwrap();
        let live_tree = dir.join("priorities.tree");
        assert_eq!(inode(&live_tree), inode(&snap_tree), "{what}: not linked");
        assert_eq!(priorities_of(&buf), before, "{what}");
        op(&mut buf, &state);
        assert_eq!(
            inode(&live_tree) != inode(&snap_tree),
            copies,
            "{what}: copied {}",
            !copies
        );
        assert_eq!(
            std::fs::read(&snap_tree).unwrap(),
            snap_bytes,
            "{what}: the snapshot's tree changed"
        );
        buf.close().unwrap();
        assert_eq!(
            std::fs::read(&snap_tree).unwrap(),
            snap_bytes,
            "{what}: close"
        );
        assert_sound(&dir);
        let mut buf = ReplayBuffer::open(&dir).unwrap();
        buf.set_state(&state).unwrap();
        assert_eq!(priorities_of(&buf), before, "{what}: restored again");
        buf.close().unwrap();
    }

    // A close and an open in between: still linked (nothing was stored), and the first
    // update after the open copies.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let (mut buf, state) = forty_with_priorities(&dir);
    let snap_tree = replaystore::internal::snapshot_dir(&dir, &state.name).join("priorities.tree");
    let snap_bytes = std::fs::read(&snap_tree).unwrap();
    buf.set_state(&state).unwrap();
    buf.close().unwrap();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(inode(&dir.join("priorities.tree")), inode(&snap_tree));
    buf.update_priorities(&[5], &[9.0]).unwrap();
    assert_ne!(inode(&dir.join("priorities.tree")), inode(&snap_tree));
    assert_eq!(std::fs::read(&snap_tree).unwrap(), snap_bytes);
    buf.close().unwrap();
    assert_sound(&dir);

    // The snapshot deleted before the first store: the tree has one name again, and is
    // written in place.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let (mut buf, state) = forty_with_priorities(&dir);
    buf.set_state(&state).unwrap();
    let linked = inode(&dir.join("priorities.tree"));
    buf.delete_snapshot(&state.name).unwrap();
    buf.update_priorities(&[5], &[9.0]).unwrap();
    assert_eq!(inode(&dir.join("priorities.tree")), linked);
    buf.close().unwrap();
    assert_sound(&dir);
}

/// The copy a linked tree needs before its first store can fail (a full disk): the
/// call is an error, nothing is stored, the snapshot keeps its bytes, and the next
/// call makes the copy.
#[test]
fn a_failed_copy_of_a_linked_tree_stores_nothing_and_the_next_call_makes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let (buf, state) = forty_with_priorities(&dir);
    let before = priorities_of(&buf);
    buf.close().unwrap();
    let snap_tree = replaystore::internal::snapshot_dir(&dir, &state.name).join("priorities.tree");
    let snap_bytes = std::fs::read(&snap_tree).unwrap();
    let io = std::sync::Arc::new(
        replaystore::io::FaultyIo::fail_once(0)
            .only("copy_file")
            .errno(28),
    );
    let mut buf = ReplayBuffer::open_with(&dir, io).unwrap();
    buf.set_state(&state).unwrap();
    let e = buf.update_priorities(&[5], &[9.0]).unwrap_err();
    assert!(e.to_string().contains("priorities.tree"), "{e}");
    assert_eq!(priorities_of(&buf), before);
    assert_eq!(std::fs::read(&snap_tree).unwrap(), snap_bytes);
    buf.update_priorities(&[5], &[9.0]).unwrap();
    assert_eq!(std::fs::read(&snap_tree).unwrap(), snap_bytes);
    assert!((buf.priorities(&[5]).unwrap()[0] - 9.0).abs() < 0.01);
    buf.close().unwrap();
    assert_sound(&dir);
}

/// Issue 28: the writer seals its snapshot copies of the tree (the crc of the body in
/// the header), and a restore that finds the seal holding trusts the copy instead of
/// recomputing every parent. Shown with a forged seal over a damaged root, which is
/// kept (the pass was skipped), against the same damage without a seal, which is
/// repaired. The damage without a forged seal is `a_restored_tree_whose_parents_...`.
#[test]
fn a_sealed_tree_copy_is_trusted_and_an_unsealed_one_is_judged() {
    use replaystore::internal::format::crc32;
    use replaystore::internal::format::tree::{
        BODY_OFFSET, HEADER_LEN, SEAL_CHECK_OFF, SEAL_OFF, encode_seal, seal_holds,
    };
    for forge in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        let (mut buf, state) = forty_with_priorities(&dir);
        let tree = replaystore::internal::snapshot_dir(&dir, &state.name).join("priorities.tree");
        let mut bytes = std::fs::read(&tree).unwrap();
        assert!(
            seal_holds(&bytes[..HEADER_LEN], crc32(&bytes[BODY_OFFSET..])),
            "get_state did not seal its copy"
        );
        let root = buf.priority_summary().unwrap().total;
        bytes[BODY_OFFSET..BODY_OFFSET + 8].copy_from_slice(&12_345.0f64.to_le_bytes());
        if forge {
            let body = crc32(&bytes[BODY_OFFSET..]);
            encode_seal(&mut bytes[..HEADER_LEN], body);
        } else {
            bytes[SEAL_OFF..SEAL_CHECK_OFF + 4].fill(0);
        }
        std::fs::write(&tree, &bytes).unwrap();
        add_range(&mut buf, 40, 50);
        buf.set_state(&state).unwrap();
        let total = buf.priority_summary().unwrap().total;
        if forge {
            assert!(total >= 12_345.0, "a holding seal was not trusted: {total}");
        } else {
            assert!((total - root).abs() < 1e-9 * root, "{total} vs {root}");
        }
        buf.close().unwrap();
    }
}

/// Promise (issue 33.2): unnamed checkpoints are bounded (the newest 3 unless set,
/// across restores), named ones stay until deleted, and the disk the old ones held
/// is given back.
#[test]
fn unnamed_checkpoints_are_bounded_and_named_ones_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = new_buffer(&dir);
    let names = |buf: &ReplayBuffer| -> Vec<String> {
        buf.snapshots()
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    add_range(&mut buf, 0, 10);
    buf.get_state_named("best").unwrap();
    let mut taken = Vec::new();
    for k in 0..6u64 {
        let next = buf.live().end;
        add_range(&mut buf, next, next + 10 + k);
        taken.push(buf.get_state().unwrap());
    }
    assert_eq!(buf.keep_states(), Some(3));
    let kept: Vec<String> = taken[3..].iter().map(|s| s.name.clone()).collect();
    assert_eq!(
        names(&buf),
        [vec!["best".to_owned()], kept.clone()].concat()
    );
    // A state pruned is gone; a kept one restores, and the setting survives it.
    assert!(matches!(
        buf.set_state(&taken[0]),
        Err(Error::NoSuchSnapshot { .. })
    ));
    buf.set_keep_states(Some(2));
    buf.set_state(&taken[4]).unwrap();
    assert_eq!(buf.keep_states(), Some(2));
    buf.get_state().unwrap();
    assert_eq!(names(&buf).len(), 1 + 2);
    // Every one with None; one call's own bound with get_state_keeping.
    buf.set_keep_states(None);
    for _ in 0..4 {
        buf.get_state().unwrap();
    }
    assert_eq!(names(&buf).len(), 1 + 6);
    buf.get_state_keeping(Some(1)).unwrap();
    assert_eq!(names(&buf).len(), 1 + 1);
    assert_eq!(names(&buf)[0], "best");
    assert_sound(&dir);
}
