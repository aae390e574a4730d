//! Promise: a writer refuses a buffer folder on a network file system (NFS, SMB/CIFS,
//! 9p, Lustre, ...), where shared mappings are not coherent between machines and a lock
//! may not keep a second writer out: a typed error naming the folder and the file
//! system, at create (nothing is made) and at open, unless
//! `REPLAYSTORE_ALLOW_NETWORK_FS=1` says only this machine opens it. Readers, which
//! never write, are let through. (The other refusals that protect data have their tests
//! beside what they protect: a second writer, `semantics::a_second_writer_is_locked_out_by_name`
//! and `readers::refusals_are_typed_errors_naming_who_holds_what`; files shorter than
//! their layout, `metadata_sweep`; a snapshot handle asked to write,
//! `snapshots::snapshot_reader_child`.)
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::sync::Arc;

use common::{add_range, schema};
use replaystore::io::{FaultyIo, network_fs};
use replaystore::{Config, Error, Reader, ReplayBuffer};

const NFS: i64 = 0x6969;
const CHILD_ENV: &str = "REPLAYSTORE_REFUSALS_CHILD";

fn on_nfs() -> Arc<FaultyIo> {
    Arc::new(FaultyIo::fail_once(u64::MAX).fs_magic(NFS))
}

#[test]
fn a_writer_on_a_network_file_system_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let e = ReplayBuffer::create(&dir, Config::new(schema(), 10).io(on_nfs())).unwrap_err();
    assert!(
        matches!(&e, Error::NetworkFileSystem { dir: d, fs: "nfs" } if *d == dir),
        "{e}"
    );
    assert!(
        e.to_string().contains("REPLAYSTORE_ALLOW_NETWORK_FS"),
        "{e}"
    );
    assert!(!dir.exists(), "a refused create made the folder");

    // A buffer made on a local disk, then opened as if it were on NFS.
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema(), 10)).unwrap();
    add_range(&mut buf, 0, 4);
    buf.get_state_named("s").unwrap();
    buf.close().unwrap();
    let e = ReplayBuffer::open_with(&dir, on_nfs()).unwrap_err();
    assert!(
        matches!(e, Error::NetworkFileSystem { fs: "nfs", .. }),
        "{e}"
    );
    // Nothing was changed by the refused open; readers never write, and are let through.
    let buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(buf.live(), 0..4);
    drop(buf);
    let mut r = Reader::open_with(&dir, on_nfs()).unwrap();
    assert_eq!(r.sample(2).unwrap().len(), 2);
}

#[test]
fn the_file_systems_a_writer_refuses_are_network_ones() {
    for (magic, name) in [(NFS, "nfs"), (0xff53_4d42, "cifs"), (0x0102_1997, "9p")] {
        assert_eq!(network_fs(magic), Some(name));
    }
    // ext4, xfs, btrfs, tmpfs, overlayfs: local.
    for magic in [0xef53, 0x5846_5342, 0x9123_683e, 0x0102_1994, 0x794c_7630] {
        assert_eq!(network_fs(magic), None, "{magic:#x}");
    }
    // The folder these tests run in is local, and so usable.
    let tmp = tempfile::tempdir().unwrap();
    ReplayBuffer::create(tmp.path().join("b"), Config::new(schema(), 10)).unwrap();
}

/// Runs in a child with `REPLAYSTORE_ALLOW_NETWORK_FS=1` (the environment is the
/// process's, so it is not set in the test process itself).
#[test]
fn refusals_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut buf = ReplayBuffer::create(&dir, Config::new(schema(), 10).io(on_nfs())).unwrap();
    add_range(&mut buf, 0, 3);
    buf.close().unwrap();
    let buf = ReplayBuffer::open_with(&dir, on_nfs()).unwrap();
    println!("marker=opened {}", buf.live().end);
}

#[test]
fn the_network_file_system_refusal_can_be_overridden_for_one_machine() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "refusals_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .env("REPLAYSTORE_ALLOW_NETWORK_FS", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("marker=opened 3"), "{stdout}");
}
