//! Promise: the rows a writer seals and sends to disk behind its tail (write-behind,
//! `ReplayBuffer::set_write_behind`) are exactly what a flush would have made of them:
//! every committed row checks against its checksum after a reboot, nothing is lost or
//! changed, and the writer never has more than the window under writeback when it
//! returns from an add. Crash behaviour with the window on is covered where every
//! other crash is: `kill_loop.rs`, `power_loss.rs` and `fault_sweep.rs` run with
//! `common::SMALL_WRITE_BEHIND`.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::{add_range, assert_live_items_intact, pretend_reboot};
use replaystore::io::OsIo;
use replaystore::{Config, ReplayBuffer, verify};

/// The real file system, with a record of every write-behind call.
#[derive(Debug, Default)]
struct Recording {
    inner: OsIo,
    calls: Mutex<Vec<(PathBuf, u64, u64, bool)>>,
}

forward_io!(Recording, |_io| {}, {
    fn write_behind(&self, path: &Path, offset: u64, len: u64, wait: bool) -> std::io::Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push((path.to_owned(), offset, len, wait));
        self.inner.write_behind(path, offset, len, wait)
    }
});

const CAPACITY: u64 = 200;
const WINDOW: u64 = 2048;

fn create(dir: &Path, io: Arc<Recording>) -> ReplayBuffer {
    let config = Config::new(common::schema(), CAPACITY)
        .segment_slots(32)
        .prioritized(0.6, 1e-6)
        .seed(4)
        .io(io);
    let mut buf = ReplayBuffer::create(dir, config).unwrap();
    buf.set_write_behind(WINDOW);
    assert_eq!(buf.write_behind(), WINDOW);
    buf
}

#[test]
fn rows_sent_behind_the_tail_check_after_a_reboot_and_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let io = Arc::new(Recording::default());
    let mut buf = create(&dir, io.clone());
    // Two and a half laps, so sealing wraps and meets rows sealed on the lap before.
    add_range(&mut buf, 0, 500);
    assert!(
        io.calls.lock().unwrap().iter().any(|c| !c.3),
        "no writeback was started behind the tail"
    );
    buf.flush().unwrap();
    add_range(&mut buf, 500, 537);
    buf.flush().unwrap();
    buf.abandon();
    pretend_reboot(&dir.join("MANIFEST"));
    // Another boot: recovery keeps only rows whose checksum holds, and verify reads
    // every one of them; a wrong early checksum fails either.
    let buf = ReplayBuffer::open(&dir).unwrap();
    assert_eq!(buf.live(), 337..537);
    assert_live_items_intact(&buf);
    drop(buf);
    let report = verify(&dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn the_writer_never_has_more_than_the_window_under_writeback() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let io = Arc::new(Recording::default());
    let mut buf = create(&dir, io.clone());
    for i in 0..700 {
        add_range(&mut buf, i, i + 1);
        // Ranges started and not yet waited for, replayed in order.
        let calls = io.calls.lock().unwrap();
        let mut inflight: Vec<(PathBuf, u64, u64)> = Vec::new();
        for (path, offset, len, wait) in calls.iter() {
            let range = (path.clone(), *offset, *len);
            if *wait {
                assert_eq!(
                    inflight.first(),
                    Some(&range),
                    "after add {i}: a wait that is not for the oldest range started"
                );
                inflight.remove(0);
            } else {
                inflight.push(range);
            }
        }
        let bytes: u64 = inflight.iter().map(|r| r.2).sum();
        assert!(
            bytes <= WINDOW,
            "after add {i}: {bytes} bytes under writeback, window {WINDOW}"
        );
    }
    let calls = io.calls.lock().unwrap();
    assert!(calls.iter().any(|c| c.3), "the writer never waited");
    // Every started range lies inside a segment file, past its header.
    for (path, offset, len, _) in calls.iter() {
        let size = std::fs::metadata(path).unwrap().len();
        assert!(
            *offset >= common::SEGMENT_HEADER_LEN as u64 && offset + len <= size,
            "{path:?}: {offset}+{len} outside the rows of a {size}-byte file"
        );
    }
}

#[test]
fn the_window_survives_a_restore_and_is_off_for_a_ring_it_covers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir, Arc::new(Recording::default()));
    add_range(&mut buf, 0, 50);
    let state = buf.get_state().unwrap();
    add_range(&mut buf, 50, 80);
    buf.set_state(&state).unwrap();
    assert_eq!(buf.write_behind(), WINDOW);
    buf.set_write_behind(1 << 30);
    assert_eq!(buf.write_behind(), 0, "a 1 GiB window covers this ring");
    buf.set_write_behind(0);
    assert_eq!(buf.write_behind(), 0);
    buf.close().unwrap();
}
