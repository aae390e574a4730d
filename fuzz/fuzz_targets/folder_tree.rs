//! A buffer folder someone else prepared (issue 26): a valid small prioritized buffer
//! with a snapshot, then the fuzzer's bytes plant, two bytes a plant, links (to a decoy
//! file, to a decoy folder), FIFOs, folders of someone's and hard links to a decoy
//! file at the places the engine looks. Then every call a user makes: none may panic
//! or hang (libFuzzer's -timeout), and no byte or name of the decoy tree may change.
#![no_main]

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/fingerprint.rs"]
mod fingerprint;
use fingerprint::fingerprint;
use replaystore::{Column, Config, DType, Reader, ReplayBuffer, Schema, inspect, verify};

const PLACES: [&str; 16] = [
    "MANIFEST",
    "MANIFEST.tmp",
    "priorities.tree",
    "LOCK",
    "RESTORE",
    "lane-0",
    "lane-0/progress",
    "lane-0/seg-00000000.dat",
    "lane-0/seg-00000001.dat",
    "lane-0/seg-00000002.dat.cow",
    "snapshots",
    "snapshots/s1",
    "snapshots/s1/MANIFEST",
    "snapshots/s1/lane-0/seg-00000000.dat",
    "snapshots/.tmp-s2",
    "snapshots/.del-s3",
];

fn mkfifo(path: &Path) {
    let mut c = path.as_os_str().as_bytes().to_vec();
    c.push(0);
    // SAFETY: a NUL-terminated path that lives across the call.
    let _ = unsafe { libc::mkfifo(c.as_ptr().cast(), 0o600) };
}

fn plant(path: &Path, decoy: &Path, place: &str, kind: u8) {
    let at = path.join(place);
    // Only where every folder from the buffer down is a real folder: a plant below an
    // earlier linked plant would be the harness writing into the decoy itself.
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
    let _ = match kind % 5 {
        0 => std::os::unix::fs::symlink(decoy.join("progress"), &at),
        1 => std::os::unix::fs::symlink(decoy, &at),
        2 => {
            mkfifo(&at);
            Ok(())
        }
        3 => std::fs::create_dir(&at).and_then(|()| std::fs::write(at.join("inside"), b"x")),
        _ => std::fs::hard_link(decoy.join("thesis.tex"), &at),
    };
}

fuzz_target!(|data: &[u8]| {
    let root = tempfile::tempdir().expect("tempdir");
    let path = root.path().join("b");
    let schema = Schema::builder().field("x", DType::U32, &[2]).build().expect("schema");
    {
        let config = Config::new(schema, 12).segment_slots(4).prioritized(0.6, 0.0);
        let mut buf = ReplayBuffer::create(&path, config).expect("create");
        for i in 0..8u32 {
            buf.add(&[Column::new("x", &[i, i + 1])]).expect("add");
        }
        buf.get_state_named("s1").expect("snapshot");
        for i in 8..14u32 {
            buf.add(&[Column::new("x", &[i, i + 1])]).expect("add");
        }
        buf.close().expect("close");
    }
    let decoy = root.path().join("decoy");
    std::fs::create_dir_all(decoy.join("lane-0")).expect("decoy");
    std::fs::write(decoy.join("MANIFEST"), b"decoy manifest").expect("decoy");
    std::fs::write(decoy.join("progress"), vec![7u8; 5000]).expect("decoy");
    std::fs::write(decoy.join("thesis.tex"), vec![3u8; 9000]).expect("decoy");
    std::fs::write(decoy.join("lane-0/seg-00000000.dat"), b"decoy segment").expect("decoy");
    let before = fingerprint(&decoy);
    for p in data.chunks_exact(2).take(4) {
        let (place, kind) = (p[0], p[1]);
        plant(&path, &decoy, PLACES[place as usize % PLACES.len()], kind);
    }
    if let Ok(mut buf) = ReplayBuffer::open(&path) {
        let _ = buf.sample(4);
        for i in 14..20u32 {
            let _ = buf.add(&[Column::new("x", &[i, i + 1])]);
        }
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
    if let Ok(mut r) = Reader::open(&path) {
        let _ = r.sample(4);
    }
    let _ = ReplayBuffer::open_snapshot(&path, "s1").map(drop);
    let _ = inspect(&path);
    let _ = verify(&path);
    let _ = replaystore::snapshots(&path);
    let _ = ReplayBuffer::create(&path, Config::new(
        Schema::builder().field("x", DType::U32, &[2]).build().expect("schema"),
        12,
    ))
    .map(drop);
    let after = fingerprint(&decoy);
    let changed: Vec<_> = (before.keys().chain(after.keys()))
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "the decoy changed: {changed:?}");
});
