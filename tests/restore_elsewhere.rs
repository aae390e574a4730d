//! Promise: a checkpoint restores into any buffer of the same schema and geometry, a
//! fresh one included (a trainer resuming in a new folder, a new process, another
//! machine's copy): `set_state` brings the snapshot into the buffer's own folder (hard
//! links where the file systems allow, copies where they do not) and restores it there,
//! with the same items, priorities, removals, counters and RNG position as a restore in
//! place, and with the same guarantees: a state of another layout is refused naming the
//! field before anything changes, the origin never changes, and a kill at any step
//! leaves the buffer as it was or restored.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{add_range, assert_live_items_intact, schema};
use replaystore::{Config, DType, Error, ReplayBuffer, Request, Schema, State, verify};

const CAPACITY: u64 = 48;

fn config() -> Config {
    Config::new(schema(), CAPACITY)
        .segment_slots(16)
        .prioritized(0.6, 1e-3)
        .item_states()
        .seed(5)
}

/// The origin: 60 items in a ring of 48 (wrapped), priorities by index, item 20
/// removed, checkpointed as `ckpt`; then it runs on (more items, more removals).
fn origin(dir: &Path) -> (ReplayBuffer, State) {
    let mut a = ReplayBuffer::create(dir, config()).unwrap();
    add_range(&mut a, 0, 60);
    let live: Vec<u64> = a.live().collect();
    let p: Vec<f64> = live.iter().map(|&i| 1.0 + (i % 7) as f64).collect();
    a.update_priorities(&live, &p).unwrap();
    a.remove(&[20]).unwrap();
    a.sample(Request::rows(8)).unwrap();
    let state = a.get_state_named("ckpt").unwrap();
    add_range(&mut a, 60, 70);
    a.remove(&[40]).unwrap();
    (a, state)
}

fn priorities(buf: &ReplayBuffer) -> Vec<f64> {
    let removed = common::removed_of(buf);
    let live: Vec<u64> = buf.live().filter(|i| !removed.contains(i)).collect();
    buf.priorities(&live).unwrap()
}

fn assert_sound(dir: &Path) {
    let report = verify(dir).unwrap();
    assert!(report.is_sound(), "{dir:?}: {:#?}", report.problems);
}

/// Every file under `dir` with its bytes: what must not change.
fn bytes_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// What a restored buffer must show: the origin's own restore of the same state.
fn assert_same_as_origin_restored(b: &mut ReplayBuffer, a: &mut ReplayBuffer, state: &State) {
    a.set_state(state).unwrap();
    assert_eq!(b.live(), a.live());
    assert_eq!(b.stats().sampled, a.stats().sampled);
    assert_eq!(common::removed_of(b), [20].into());
    assert_live_items_intact(b);
    assert_eq!(priorities(b), priorities(a));
    // The same RNG position: the next draws are the same.
    let (x, y) = (
        b.sample(Request::rows(16).prioritized(0.4)).unwrap(),
        a.sample(Request::rows(16).prioritized(0.4)).unwrap(),
    );
    assert_eq!(x.indices(), y.indices());
}

#[test]
fn a_state_restores_into_a_fresh_buffer_of_the_same_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut a, state) = origin(&tmp.path().join("a"));
    assert_eq!(state.origin, tmp.path().canonicalize().unwrap().join("a"));
    a.flush().unwrap();
    let frozen = bytes_under(&tmp.path().join("a/snapshots/ckpt"));
    let mut b = ReplayBuffer::create(tmp.path().join("b"), config().seed(77)).unwrap();
    b.set_state(&state).unwrap();
    assert_eq!(b.live(), state.head..state.tail);
    // The snapshot came in as a snapshot of b's own, its segments linked (one file
    // system here), and b's states now name b.
    let names: Vec<String> = b.snapshots().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["ckpt"]);
    let seg = |d: &str| {
        tmp.path()
            .join(d)
            .join("snapshots/ckpt/lane-0/seg-00000000.dat")
    };
    assert_eq!(
        std::fs::metadata(seg("a")).unwrap().ino(),
        std::fs::metadata(seg("b")).unwrap().ino()
    );
    assert_eq!(b.snapshot_state("ckpt").unwrap().origin, b.dir());
    // b writes on without changing a byte of a's snapshot (copy-on-write across
    // folders), and a's own live buffer is untouched by b.
    add_range(&mut b, 60, 75);
    b.flush().unwrap();
    assert_eq!(bytes_under(&tmp.path().join("a/snapshots/ckpt")), frozen);
    assert_eq!(a.live(), 22..70);
    assert!(common::removed_of(&a).contains(&40));
    assert_sound(&tmp.path().join("b"));
    b.set_state(&b.snapshot_state("ckpt").unwrap()).unwrap();
    assert_same_as_origin_restored(&mut b, &mut a, &state);
    // Closed and reopened, b is the restored buffer; so is a new process's open.
    b.close().unwrap();
    let b = ReplayBuffer::open(tmp.path().join("b")).unwrap();
    assert_eq!(b.live(), a.live());
    assert_live_items_intact(&b);
    drop(b);
    assert_sound(&tmp.path().join("a"));
    assert_sound(&tmp.path().join("b"));
}

#[test]
fn restoring_the_same_state_again_uses_the_snapshot_it_brought() {
    let tmp = tempfile::tempdir().unwrap();
    let (_a, state) = origin(&tmp.path().join("a"));
    let mut b = ReplayBuffer::create(tmp.path().join("b"), config()).unwrap();
    // b has a snapshot of that name of its own: the one brought in gets another name.
    add_range(&mut b, 0, 3);
    b.get_state_named("ckpt").unwrap();
    b.set_state(&state).unwrap();
    add_range(&mut b, 60, 64);
    b.set_state(&state).unwrap();
    let names: Vec<String> = b.snapshots().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["ckpt", "ckpt.1"]);
    assert_eq!(b.live(), state.head..state.tail);
    assert_live_items_intact(&b);
    // b's own snapshot is still b's and restores: states of either line apply.
    let own = b.snapshot_state("ckpt").unwrap();
    assert_ne!(own.uuid, state.uuid);
    b.set_state(&own).unwrap();
    assert_eq!(b.live(), 0..3);
    drop(b);
    assert_sound(&tmp.path().join("b"));
}

#[test]
fn open_at_state_resumes_a_fresh_folder_from_another_buffers_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut a, state) = origin(&tmp.path().join("a"));
    ReplayBuffer::create(tmp.path().join("b"), config())
        .unwrap()
        .close()
        .unwrap();
    let mut b = ReplayBuffer::open_at_state(tmp.path().join("b"), &state).unwrap();
    assert_same_as_origin_restored(&mut b, &mut a, &state);
}

#[test]
fn a_state_of_another_layout_is_refused_naming_what_differs_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let (_a, state) = origin(&tmp.path().join("a"));
    let cases: [(&str, Config, &str); 4] = [
        (
            "capacity",
            Config::new(schema(), CAPACITY * 2)
                .segment_slots(16)
                .prioritized(0.6, 1e-3)
                .item_states(),
            "capacity",
        ),
        ("segments", config().segment_slots(8), "segment slots"),
        (
            "priorities",
            Config::new(schema(), CAPACITY)
                .segment_slots(16)
                .item_states(),
            "prioritized",
        ),
        (
            "schema",
            Config::new(
                Schema::builder()
                    .field("x", DType::F32, &[4])
                    .build()
                    .unwrap(),
                CAPACITY,
            )
            .segment_slots(16)
            .prioritized(0.6, 1e-3)
            .item_states(),
            "schema crc",
        ),
    ];
    for (what, config, field) in cases {
        let dir = tmp.path().join(what);
        let mut b = ReplayBuffer::create(&dir, config).unwrap();
        let before = bytes_under(&dir);
        let e = b.set_state(&state).unwrap_err();
        assert!(
            matches!(&e, Error::StateMismatch { field: f, .. } if *f == field),
            "{what}: {e}"
        );
        assert!(e.to_string().contains(field), "{what}: {e}");
        assert_eq!(
            bytes_under(&dir),
            before,
            "{what}: the refusal changed a file"
        );
        assert_eq!(b.len(), 0);
        // A state that names another schema is refused before its origin is read:
        // even with the origin gone, the message names the schema.
    }
    let gone = State {
        origin: tmp.path().join("nowhere"),
        ..state.clone()
    };
    let mut b = ReplayBuffer::create(
        tmp.path().join("other-schema"),
        Config::new(
            Schema::builder()
                .field("x", DType::U8, &[])
                .build()
                .unwrap(),
            CAPACITY,
        ),
    )
    .unwrap();
    let e = b.set_state(&gone).unwrap_err();
    assert!(
        matches!(
            e,
            Error::StateMismatch {
                field: "schema crc",
                ..
            }
        ),
        "{e}"
    );
    // The same layout, but the origin no longer holds the snapshot (and b has none by
    // that name): the snapshot is named missing.
    let mut b = ReplayBuffer::create(tmp.path().join("fresh"), config()).unwrap();
    let e = b.set_state(&gone).unwrap_err();
    assert!(matches!(e, Error::NoSuchSnapshot { .. }), "{e}");
}

/// Across file systems (the origin on tmpfs, here on disk) the segments are copied:
/// the restored buffer shares no file with the origin and outlives it.
#[test]
fn across_file_systems_the_snapshot_is_copied_and_outlives_its_origin() {
    let shm = Path::new("/dev/shm");
    let tmp = tempfile::tempdir().unwrap();
    let far = tempfile::tempdir_in(shm).expect("/dev/shm (tmpfs) for a second file system");
    assert_ne!(
        std::fs::metadata(far.path()).unwrap().dev(),
        std::fs::metadata(tmp.path()).unwrap().dev(),
        "/dev/shm must be another file system than the temporary folder"
    );
    let (mut a, state) = origin(&far.path().join("a"));
    let mut b = ReplayBuffer::create(tmp.path().join("b"), config()).unwrap();
    b.set_state(&state).unwrap();
    let seg = tmp.path().join("b/lane-0/seg-00000000.dat");
    assert_eq!(std::fs::metadata(&seg).unwrap().nlink(), 2); // live + b's snapshot
    assert_same_as_origin_restored(&mut b, &mut a, &state);
    a.close().unwrap();
    drop(far);
    b.close().unwrap();
    let b = ReplayBuffer::open(tmp.path().join("b")).unwrap();
    assert_live_items_intact(&b);
    drop(b);
    assert_sound(&tmp.path().join("b"));
}

/// A state carried to another process (bytes, as in a training checkpoint) restores
/// there into a buffer that process made.
#[test]
fn a_state_restores_in_another_process() {
    const CHILD: &str = "REPLAYSTORE_RESTORE_ELSEWHERE_CHILD";
    if let Ok(arg) = std::env::var(CHILD) {
        let (dir, hex) = arg.split_once('=').unwrap();
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let state = State::from_bytes(&bytes).unwrap();
        let mut b = ReplayBuffer::create(dir, config()).unwrap();
        b.set_state(&state).unwrap();
        b.close().unwrap();
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (mut a, state) = origin(&tmp.path().join("a"));
    let hex: String = state
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = tmp.path().join("b");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_state_restores_in_another_process",
            "--nocapture",
        ])
        .env(CHILD, format!("{}={hex}", dir.display()))
        .status()
        .unwrap();
    assert!(status.success());
    let mut b = ReplayBuffer::open(&dir).unwrap();
    assert_same_as_origin_restored(&mut b, &mut a, &state);
}

/// Kills at each step of a restore from another buffer: before the snapshot is in
/// (mid-links, before its rename), and mid-restore. After each, the buffer opens as it
/// was (empty) or restored (restored if the child said so), verifies, and a second
/// `set_state` of the same state completes; the origin is unchanged throughout.
#[cfg(feature = "kill-points")]
#[test]
fn kill_at_each_step_of_a_restore_from_another_buffer_leaves_it_as_it_was_or_restored() {
    const CHILD: &str = "REPLAYSTORE_RESTORE_ELSEWHERE_KILL_CHILD";
    let origin_dir = tempfile::tempdir().unwrap();
    let (a, state) = origin(&origin_dir.path().join("a"));
    drop(a);
    let frozen = bytes_under(&origin_dir.path().join("a/snapshots/ckpt"));
    let hex: String = state
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    common::kill_at_each_point(
        "restore_elsewhere_kill_child",
        CHILD,
        &[
            "bring-mid-links",
            "bring-before-rename",
            "restore-mid-links",
        ],
        &[1, 2],
        |dir, _| {
            let mut b = ReplayBuffer::create(dir, config()).unwrap();
            add_range(&mut b, 0, 5);
            b.close().unwrap();
            format!("{}={hex}", dir.display())
        },
        |dir, lines, ctx| {
            let report = verify(dir).unwrap();
            assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
            let mut b = ReplayBuffer::open(dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
            let restored = lines.iter().any(|l| l == "restored");
            let live = b.live();
            assert!(
                live == (state.head..state.tail) || (!restored && live == (0..5)),
                "{ctx}: live {live:?} (restore acknowledged: {restored})"
            );
            assert_live_items_intact(&b);
            b.set_state(&state).unwrap();
            assert_eq!(b.live(), state.head..state.tail, "{ctx}");
            assert_eq!(common::removed_of(&b), [20].into(), "{ctx}");
            drop(b);
            assert_sound(dir);
            assert_eq!(
                bytes_under(&origin_dir.path().join("a/snapshots/ckpt")),
                frozen,
                "{ctx}: the origin's snapshot changed"
            );
        },
    );
}

/// The child of the kill-points test: restores the state it is given, says so.
#[cfg(feature = "kill-points")]
#[test]
fn restore_elsewhere_kill_child() {
    let Ok(arg) = std::env::var("REPLAYSTORE_RESTORE_ELSEWHERE_KILL_CHILD") else {
        return;
    };
    let (dir, hex) = arg.split_once('=').unwrap();
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let state = State::from_bytes(&bytes).unwrap();
    let mut b = ReplayBuffer::open(dir).unwrap();
    b.set_state(&state).unwrap();
    println!("restored");
    b.close().unwrap();
    println!("finished");
}

/// A lane set's state restores into a fresh lane set of the same layout: every lane's
/// snapshot is brought into the same lane of the new set, all lanes restored.
#[test]
fn a_lane_sets_state_restores_into_a_fresh_lane_set() {
    use replaystore::Lanes;
    let tmp = tempfile::tempdir().unwrap();
    let lane_config = || Config::new(schema(), 30).segment_slots(8).seed(2);
    let mut a = Lanes::create(tmp.path().join("a"), lane_config(), 3).unwrap();
    for i in 0..20u64 {
        let it = common::item(i);
        a.add((i % 3) as usize, &common::columns(&it)).unwrap();
    }
    let state = a.get_state_named("set").unwrap();
    let edges = a.lane_edges();
    for i in 20..26u64 {
        let it = common::item(i);
        a.add(0, &common::columns(&it)).unwrap();
    }
    let mut b = Lanes::create(tmp.path().join("b"), lane_config(), 3).unwrap();
    b.set_state(&state).unwrap();
    assert_eq!(b.lane_edges(), edges);
    let names: Vec<String> = b.snapshots().unwrap();
    assert_eq!(names, ["set"]);
    b.close().unwrap();
    let b = Lanes::open(tmp.path().join("b")).unwrap();
    assert_eq!(b.lane_edges(), edges);
    for k in 0..3 {
        let report = verify(tmp.path().join("b").join(format!("lane-{k}"))).unwrap();
        assert!(report.is_sound(), "lane {k}: {:?}", report.problems);
    }
    // A lane set of another lane count is refused by name.
    let mut c = Lanes::create(tmp.path().join("c"), lane_config(), 2).unwrap();
    let e = c.set_state(&state).unwrap_err();
    assert!(
        matches!(e, Error::StateMismatch { field: "lanes", .. }),
        "{e}"
    );
}
