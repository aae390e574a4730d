//! Promise: a buffer folder someone else prepared can make the engine refuse, never make
//! it read, write, truncate or delete anything outside the folder, nor hang on a special
//! file (issue 26). Every attack points at decoys in the test's own temporary folder, and
//! each test checks the decoys' bytes (and names) are exactly as before.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use common::fingerprint::fingerprint;
use common::{add_range, schema};
use proptest::prelude::*;
use replaystore::{Config, Error, Reader, ReplayBuffer, inspect, verify};

/// A decoy folder the attacks point at: files, a folder of files, names the engine
/// would clean (`.tmp-x`, `.del-y`), a copy of a buffer's own layout.
fn decoy(root: &Path) -> PathBuf {
    let d = root.join("decoy");
    std::fs::create_dir_all(d.join("lane-0")).unwrap();
    std::fs::create_dir_all(d.join(".tmp-x/lane-0")).unwrap();
    std::fs::create_dir_all(d.join(".del-y")).unwrap();
    std::fs::create_dir_all(d.join("precious")).unwrap();
    std::fs::write(d.join("MANIFEST"), b"decoy manifest").unwrap();
    std::fs::write(d.join("progress"), vec![7u8; 5000]).unwrap();
    std::fs::write(d.join("lane-0/seg-00000000.dat"), b"decoy segment").unwrap();
    std::fs::write(d.join(".tmp-x/MANIFEST"), b"tmp").unwrap();
    std::fs::write(d.join(".del-y/MANIFEST"), b"del").unwrap();
    std::fs::write(d.join("precious/thesis.tex"), b"five years").unwrap();
    d
}

/// A closed prioritized buffer of 100 items with one snapshot `"s1"`.
fn fixture(root: &Path) -> PathBuf {
    let path = root.join("buf");
    let config = Config::new(schema(), 100)
        .segment_slots(32)
        .prioritized(0.6, 1e-6);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    add_range(&mut buf, 0, 60);
    buf.get_state_named("s1").unwrap();
    add_range(&mut buf, 60, 100);
    buf.close().unwrap();
    path
}

/// Runs `f` on another thread and fails the test if it has not returned in 20 s: a
/// FIFO that blocked an open would otherwise hang the test run.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} did not return within 20 s"))
}

fn is_foreign(e: &Error) -> bool {
    matches!(e, Error::ForeignFile { .. })
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The engine files an attacker can swap, relative to the buffer.
const ENGINE_FILES: [&str; 5] = [
    "MANIFEST",
    "priorities.tree",
    "lane-0/progress",
    "lane-0/seg-00000000.dat",
    "snapshots/s1/MANIFEST",
];

/// Every opener either refuses with `ForeignFile` (verify: reports unsound) or, for
/// snapshot files, leaves them to snapshot calls; none returns success silently
/// reading a planted file.
fn every_opener_refuses(path: &Path, file: &str) {
    let p = path.to_path_buf();
    let writer = bounded("ReplayBuffer::open", move || {
        ReplayBuffer::open(&p).map(drop)
    });
    let p = path.to_path_buf();
    let reader = bounded("Reader::open", move || Reader::open(&p).map(drop));
    let p = path.to_path_buf();
    let info = bounded("inspect", move || inspect(&p).map(drop));
    let p = path.to_path_buf();
    let report = bounded("verify", move || verify(&p));
    if file.starts_with("snapshots/") {
        // The live buffer does not read its snapshots' files when it opens.
        let p = path.to_path_buf();
        let snap = bounded("open_snapshot", move || {
            ReplayBuffer::open_snapshot(&p, "s1").map(drop)
        });
        let e = snap.unwrap_err();
        assert!(
            matches!(&e, Error::BadSnapshot { source, .. } if is_foreign(source)),
            "{file}: {e}"
        );
        assert!(
            !report.unwrap().is_sound(),
            "{file}: verify called it sound"
        );
        return;
    }
    for (who, r) in [("writer", writer), ("reader", reader), ("inspect", info)] {
        if who == "inspect" && file.starts_with("lane-0/") {
            // inspect reads MANIFEST and the tree only (verify reads the rest, below).
            continue;
        }
        let e = r.expect_err(&format!("{who} opened a buffer whose {file} was planted"));
        assert!(is_foreign(&e), "{who}, {file}: {e}");
        assert!(e.to_string().contains(file), "{who}: {e} names no {file}");
    }
    match report {
        Ok(r) => assert!(!r.is_sound(), "verify called a planted {file} sound"),
        Err(e) => assert!(is_foreign(&e), "verify, {file}: {e}"),
    }
}

#[test]
fn a_link_in_place_of_any_engine_file_is_refused_and_its_target_never_written() {
    for file in ENGINE_FILES {
        let root = tempfile::tempdir().unwrap();
        let path = fixture(root.path());
        let d = decoy(root.path());
        // The decoy holds the real file's own bytes: a follower would find nothing amiss.
        let target = d.join("copy");
        std::fs::copy(path.join(file), &target).unwrap();
        let before = fingerprint(&d);
        std::fs::remove_file(path.join(file)).unwrap();
        symlink(&target, path.join(file)).unwrap();
        every_opener_refuses(&path, file);
        assert_eq!(fingerprint(&d), before, "{file}: the decoy changed");
    }
}

#[test]
fn a_fifo_or_a_device_in_place_of_any_engine_file_is_refused_without_hanging() {
    for file in ENGINE_FILES {
        for special in ["fifo", "device"] {
            let root = tempfile::tempdir().unwrap();
            let path = fixture(root.path());
            std::fs::remove_file(path.join(file)).unwrap();
            if special == "fifo" {
                mkfifo(&path.join(file));
            } else {
                // /dev/zero is endless: read whole, it would eat the memory. A link to it
                // is the only way to plant a device without root.
                symlink("/dev/zero", path.join(file)).unwrap();
            }
            every_opener_refuses(&path, file);
        }
    }
}

#[test]
fn a_linked_lane_folder_is_refused_and_its_target_never_written() {
    let root = tempfile::tempdir().unwrap();
    let path = fixture(root.path());
    let d = root.path().join("moved-lane");
    std::fs::rename(path.join("lane-0"), &d).unwrap();
    symlink(&d, path.join("lane-0")).unwrap();
    let before = fingerprint(&d);
    let e = ReplayBuffer::open(&path).map(drop).unwrap_err();
    assert!(is_foreign(&e), "{e}");
    let e = Reader::open(&path).map(drop).unwrap_err();
    assert!(is_foreign(&e), "{e}");
    assert_eq!(fingerprint(&d), before);
}

#[test]
fn a_linked_snapshot_folder_is_never_emptied_by_delete_or_keep_last() {
    let root = tempfile::tempdir().unwrap();
    let path = fixture(root.path());
    let d = decoy(root.path());
    let before = fingerprint(&d);
    symlink(&d, path.join("snapshots/evil")).unwrap();
    let mut buf = ReplayBuffer::open(&path).unwrap();
    let listed: Vec<String> = buf
        .snapshots()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(listed, ["s1"], "a link is not a snapshot");
    let e = buf.delete_snapshot("evil").unwrap_err();
    assert!(is_foreign(&e), "{e}");
    assert_eq!(buf.keep_last(0).unwrap(), ["s1"]);
    buf.close().unwrap();
    assert_eq!(fingerprint(&d), before, "the decoy changed");
    assert!(std::fs::symlink_metadata(path.join("snapshots/evil")).is_ok());
}

#[test]
fn a_linked_snapshots_folder_is_refused_by_the_writer_and_its_target_untouched() {
    let root = tempfile::tempdir().unwrap();
    let path = fixture(root.path());
    let d = decoy(root.path());
    let before = fingerprint(&d);
    std::fs::rename(path.join("snapshots"), root.path().join("old-snapshots")).unwrap();
    symlink(&d, path.join("snapshots")).unwrap();
    let e = ReplayBuffer::open(&path).map(drop).unwrap_err();
    assert!(is_foreign(&e), "{e}");
    assert!(e.to_string().contains("snapshots"), "{e}");
    let e = replaystore::snapshots(&path).unwrap_err();
    assert!(is_foreign(&e), "{e}");
    assert_eq!(fingerprint(&d), before, "the decoy changed");
}

#[test]
fn a_folder_without_a_manifest_in_snapshots_is_not_listed_and_never_deleted() {
    let root = tempfile::tempdir().unwrap();
    let path = fixture(root.path());
    let stranger = path.join("snapshots/stranger");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::write(stranger.join("notes.txt"), b"mine").unwrap();
    let before = fingerprint(&stranger);
    let mut buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.keep_last(0).unwrap(), ["s1"]);
    assert!(buf.snapshots().unwrap().is_empty());
    let e = buf.delete_snapshot("stranger").unwrap_err();
    assert!(is_foreign(&e), "{e}");
    buf.close().unwrap();
    assert_eq!(fingerprint(&stranger), before);
}

#[test]
fn a_snapshot_holding_anything_the_engine_did_not_write_is_refused_whole_by_delete() {
    for planted in ["notes.txt", "lane-0/extra.bin", "sub/"] {
        let root = tempfile::tempdir().unwrap();
        let path = fixture(root.path());
        let snap = path.join("snapshots/s1");
        if let Some(dir) = planted.strip_suffix('/') {
            std::fs::create_dir(snap.join(dir)).unwrap();
        } else {
            std::fs::write(snap.join(planted), b"not ours").unwrap();
        }
        let before = fingerprint(&snap);
        let mut buf = ReplayBuffer::open(&path).unwrap();
        let e = buf.delete_snapshot("s1").unwrap_err();
        assert!(is_foreign(&e), "{planted}: {e}");
        assert_eq!(fingerprint(&snap), before, "{planted}: removed something");
        assert_eq!(buf.snapshots().unwrap().len(), 1);
        buf.close().unwrap();
    }
}

#[test]
fn a_buffer_reached_through_links_the_user_chose_works_in_full() {
    let root = tempfile::tempdir().unwrap();
    let path = fixture(root.path());
    // A link to the buffer, and a link to the folder holding it.
    symlink(&path, root.path().join("buf-link")).unwrap();
    symlink(root.path(), root.path().join("root-link")).unwrap();
    for through in [
        root.path().join("buf-link"),
        root.path().join("root-link/buf"),
    ] {
        let mut buf = ReplayBuffer::open(&through).unwrap();
        add_range(&mut buf, 100, 110);
        let state = buf.get_state().unwrap();
        buf.set_state(&state).unwrap();
        buf.keep_last(1).unwrap();
        buf.close().unwrap();
        let mut r = Reader::open(&through).unwrap();
        assert_eq!(r.sample(4).unwrap().len(), 4);
        assert!(verify(&through).unwrap().is_sound());
        assert_eq!(replaystore::snapshots(&through).unwrap().len(), 1);
    }
    // A new buffer created through a link lands where the link points.
    ReplayBuffer::create(root.path().join("root-link/new"), Config::new(schema(), 10))
        .unwrap()
        .close()
        .unwrap();
    assert!(root.path().join("new/MANIFEST").is_file());
}

/// A buffer copied with `cp -al` (every file a hard link to the original's) is written
/// without changing a byte of the original: segments are copied before their first
/// store, MANIFEST and the tree are given a name of their own before any write in
/// place, and the progress page is made anew. The fuzz target `folder_tree` found the
/// progress page written through a hard link to a file outside the buffer.
#[test]
fn a_hard_linked_copy_of_a_buffer_never_writes_into_the_original() {
    let root = tempfile::tempdir().unwrap();
    let original = fixture(root.path());
    let copy = root.path().join("copy");
    let status = std::process::Command::new("cp")
        .args(["-al"])
        .arg(&original)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let before = fingerprint(&original);
    let mut buf = ReplayBuffer::open(&copy).unwrap();
    add_range(&mut buf, 100, 130);
    let live: Vec<u64> = buf.live().collect();
    buf.update_priorities(&live, &vec![2.0f64; live.len()])
        .unwrap();
    buf.get_state_named("s2").unwrap();
    buf.close().unwrap();
    let after = fingerprint(&original);
    let changed: Vec<_> = (before.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "the original changed: {changed:?}");
    assert!(verify(&original).unwrap().is_sound());
    assert!(verify(&copy).unwrap().is_sound());
    assert_eq!(ReplayBuffer::open(&original).unwrap().live(), 0..100);
    assert_eq!(ReplayBuffer::open(&copy).unwrap().live(), 30..130);
}

/// One planted entry: where, and what.
#[derive(Debug, Clone)]
enum Plant {
    LinkToDecoyFile(&'static str),
    LinkToDecoyDir(&'static str),
    Fifo(&'static str),
    Folder(&'static str),
}

const PLACES: [&str; 14] = [
    "MANIFEST",
    "priorities.tree",
    "LOCK",
    "RESTORE",
    "lane-0",
    "lane-0/progress",
    "lane-0/seg-00000001.dat",
    "lane-0/seg-00000002.dat.cow",
    "snapshots",
    "snapshots/s1",
    "snapshots/s1/MANIFEST",
    "snapshots/s1/lane-0/seg-00000000.dat",
    "snapshots/.tmp-s2",
    "snapshots/.del-s3",
];

fn plant() -> impl Strategy<Value = Plant> {
    let place = proptest::sample::select(PLACES.to_vec());
    prop_oneof![
        place.clone().prop_map(Plant::LinkToDecoyFile),
        place.clone().prop_map(Plant::LinkToDecoyDir),
        place.clone().prop_map(Plant::Fifo),
        place.prop_map(Plant::Folder),
    ]
}

fn apply(path: &Path, decoy: &Path, p: &Plant) {
    let (place, what) = match p {
        Plant::LinkToDecoyFile(x) => (x, 0),
        Plant::LinkToDecoyDir(x) => (x, 1),
        Plant::Fifo(x) => (x, 2),
        Plant::Folder(x) => (x, 3),
    };
    let at = path.join(place);
    // Only inside folders that are real folders of the buffer, every one of them: a
    // plant below an earlier linked plant would land in the decoy (the test's own write,
    // which the check at the end would then blame on the engine).
    let inside = at
        .ancestors()
        .skip(1)
        .take_while(|a| a.starts_with(path))
        .all(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.is_dir()));
    if !inside {
        return;
    }
    let _ = std::fs::remove_file(&at);
    let _ = std::fs::remove_dir_all(&at);
    match what {
        0 => symlink(decoy.join("progress"), &at).unwrap(),
        1 => symlink(decoy, &at).unwrap(),
        2 => mkfifo(&at),
        _ => {
            std::fs::create_dir(&at).unwrap();
            std::fs::write(at.join("inside"), b"someone's").unwrap();
        }
    }
}

/// Every call a user makes of a buffer, each bounded in time; errors are fine.
fn every_call(path: &Path) {
    let p = path.to_path_buf();
    bounded("the calls", move || {
        if let Ok(mut buf) = ReplayBuffer::open(&p) {
            let _ = buf.sample(8);
            add_range(&mut buf, 100, 140);
            let _ = buf.flush();
            let state = buf.get_state();
            let _ = buf.snapshots();
            let _ = buf.delete_snapshot("s1");
            let _ = buf.keep_last(0);
            if let Ok(s) = state {
                let _ = buf.set_state(&s);
            }
            let _ = buf.close();
        }
        if let Ok(mut r) = Reader::open(&p) {
            let _ = r.sample(8);
        }
        let _ = ReplayBuffer::open_snapshot(&p, "s1").map(drop);
        let _ = Reader::open_snapshot(&p, "s1").map(drop);
        let _ = inspect(&p);
        let _ = verify(&p);
        let _ = replaystore::snapshots(&p);
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Random plants of links, FIFOs and folders anywhere the engine looks, then every
    /// call: the decoy tree (and the link targets) never change.
    #[test]
    fn no_tree_of_links_and_special_files_makes_the_engine_touch_anything_outside(
        plants in proptest::collection::vec(plant(), 1..3)
    ) {
        let root = tempfile::tempdir().unwrap();
        let path = fixture(root.path());
        let d = decoy(root.path());
        let before = fingerprint(&d);
        for p in &plants {
            apply(&path, &d, p);
        }
        every_call(&path);
        prop_assert_eq!(fingerprint(&d), before);
    }
}
