//! Promise: `kill -9` of the writer at any instant loses nothing `add` acknowledged.
//! A child process (this test binary, re-executed) adds items and reports each index
//! after `add` returns; the parent kills it with SIGKILL at random moments. After each
//! kill the buffer opens, `verify` passes, and every acknowledged item is present and
//! intact, except the oldest items that an add cut short was overwriting (that add had
//! already evicted them; the child announces each add's size before starting it, so the
//! parent knows exactly how many). Also: the RNG resumes from the last flush (issue 3).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use common::{
    add_range, columns, item, item_bytes, pretend_reboot, run_child_and_kill_after,
    run_child_then_kill, schema, xorshift,
};
use replaystore::{Config, ReplayBuffer, Request, verify};

const CHILD_ENV: &str = "REPLAYSTORE_CRASH_CHILD";
const CAPACITY: u64 = 700;

/// The child's work: open the buffer and add forever, reporting each acknowledged index.
/// Runs only when re-executed by the parent.
#[test]
fn crash_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut args = mode.split(':');
    let dir = args.next().unwrap().to_owned();
    let seed: u64 = args.next().unwrap().parse().unwrap();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    let mut rng = seed;
    let mut next = buf.live().end;
    loop {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match (rng >> 33) % 100 {
            // Occasionally a flush, so kills land inside msync and commit writes too.
            0 => buf.flush().unwrap(),
            // Batches: acknowledged as a whole when add_batch returns.
            1..=10 => {
                let n = 1 + (rng >> 40) % 50;
                writeln!(out, "start {n}").unwrap();
                out.flush().unwrap();
                let r = add_range(&mut buf, next, next + n);
                next = r.end;
                writeln!(out, "{}", r.end - 1).unwrap();
            }
            _ => {
                writeln!(out, "start 1").unwrap();
                out.flush().unwrap();
                let i = buf.add(&columns(&item(next))).unwrap();
                next = i + 1;
                writeln!(out, "{i}").unwrap();
            }
        }
        out.flush().unwrap();
    }
}

#[test]
fn kill_9_at_random_moments_loses_no_acknowledged_item() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    ReplayBuffer::create(
        &path,
        Config::new(schema(), CAPACITY).segment_slots(64).seed(1),
    )
    .unwrap()
    .close()
    .unwrap();
    let kills: u32 = std::env::var("REPLAYSTORE_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(150);
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut max_acked: Option<u64> = None;
    for cycle in 0..kills {
        // Rows of the add under way when the child died (0 if none was).
        let mut pending = 0u64;
        // Let it acknowledge a random number of adds (sometimes none), then kill it.
        let wait_for = xorshift(&mut rng) % 3000;
        let seed = xorshift(&mut rng);
        run_child_and_kill_after(
            "crash_child",
            CHILD_ENV,
            &format!("{}:{seed}", path.display()),
            wait_for,
            |line| {
                if let Some(n) = line.trim().strip_prefix("start ") {
                    pending = n.parse().unwrap();
                } else if let Ok(i) = line.trim().parse::<u64>() {
                    max_acked = Some(max_acked.map_or(i, |m| m.max(i)));
                    pending = 0;
                }
            },
        );

        let report = verify(&path).unwrap();
        assert!(
            report.is_sound(),
            "cycle {cycle}: verify before reopen: {:?}",
            report.problems
        );
        let buf = ReplayBuffer::open(&path).unwrap();
        let live = buf.live();
        if let Some(acked) = max_acked {
            assert!(
                live.end > acked,
                "cycle {cycle}: acknowledged {acked} but tail is {}",
                live.end
            );
            // The add under way may have evicted as many of the oldest items as it had rows.
            let from = (acked + 1 + pending).saturating_sub(CAPACITY);
            for i in from..=acked {
                let b = buf
                    .get(i)
                    .unwrap_or_else(|e| panic!("cycle {cycle}: acknowledged item {i}: {e}"));
                assert_eq!(b.item_bytes(0), item_bytes(i), "cycle {cycle}: item {i}");
            }
        }
        for i in live.clone() {
            assert_eq!(
                buf.get(i).unwrap().item_bytes(0),
                item_bytes(i),
                "cycle {cycle}: live item {i}"
            );
        }
        drop(buf);
        let report = verify(&path).unwrap();
        assert!(
            report.is_sound(),
            "cycle {cycle}: verify after reopen: {:?}",
            report.problems
        );
    }
    assert!(
        max_acked.unwrap_or(0) > CAPACITY * 3,
        "the ring should have wrapped several times"
    );
}

/// The child for the RNG test: adds, samples, flushes, then prints the indices of four
/// more samples and waits to be killed.
#[test]
fn rng_child() {
    let Ok(dir) = std::env::var("REPLAYSTORE_RNG_CHILD") else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    add_range(&mut buf, 0, 400);
    for _ in 0..3 {
        buf.sample(32).unwrap();
    }
    buf.flush().unwrap();
    for _ in 0..4 {
        let b = buf.sample(Request::rows(32)).unwrap();
        println!("marker={:?}", b.indices());
    }
    println!("marker=done");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn after_a_kill_the_rng_resumes_from_the_last_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    ReplayBuffer::create(&path, Config::new(schema(), 400).seed(11))
        .unwrap()
        .close()
        .unwrap();
    let expected = run_child_then_kill("rng_child", "REPLAYSTORE_RNG_CHILD", &path);
    let mut buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.len(), 400);
    let got: Vec<String> = (0..4)
        .map(|_| format!("{:?}", buf.sample(32).unwrap().indices()))
        .collect();
    assert_eq!(got, expected);
}

/// The child for the reboot test: 100 items, flush, 50 more, then wait to be killed.
#[test]
fn reboot_child() {
    let Ok(dir) = std::env::var("REPLAYSTORE_REBOOT_CHILD") else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    add_range(&mut buf, 0, 100);
    buf.flush().unwrap();
    add_range(&mut buf, 100, 150);
    println!("marker=done");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn after_a_kill_stamps_prove_items_and_after_a_reboot_only_flushed_items_survive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    ReplayBuffer::create(&path, Config::new(schema(), 1000).segment_slots(64))
        .unwrap()
        .close()
        .unwrap();
    run_child_then_kill("reboot_child", "REPLAYSTORE_REBOOT_CHILD", &path);
    let backup = dir.path().join("backup");
    std::fs::create_dir(&backup).unwrap();
    for f in [
        "MANIFEST",
        "lane-0/seg-00000000.dat",
        "lane-0/seg-00000001.dat",
        "lane-0/seg-00000002.dat",
    ] {
        std::fs::create_dir_all(backup.join(f).parent().unwrap()).unwrap();
        std::fs::copy(path.join(f), backup.join(f)).unwrap();
    }

    // Same boot: the 50 unflushed items are proved by their stamps.
    let report = verify(&path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    assert_eq!(report.recovery.map(|r| (r.head, r.tail)), Some((0, 150)));

    // Another boot: only the flushed 100 were promised; they come back whole.
    pretend_reboot(&path.join("MANIFEST"));
    let report = verify(&path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    assert!(
        report.notes.iter().any(|n| n.contains("reboot")),
        "{:?}",
        report.notes
    );
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.live(), 0..100);
    for i in buf.live() {
        assert_eq!(buf.get(i).unwrap().item_bytes(0), item_bytes(i));
    }
    drop(buf);
    assert!(verify(&path).unwrap().is_sound());
    // The next add gets the index after the last flushed one.
    let mut buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.add(&columns(&item(100))).unwrap(), 100);
    drop(buf);

    // Another boot, and a flushed item whose bytes did not survive: never served; the
    // range is cut to the newest intact run.
    for f in [
        "MANIFEST",
        "lane-0/seg-00000000.dat",
        "lane-0/seg-00000001.dat",
        "lane-0/seg-00000002.dat",
    ] {
        std::fs::copy(backup.join(f), path.join(f)).unwrap();
    }
    pretend_reboot(&path.join("MANIFEST"));
    let stride = replaystore::inspect(&path).unwrap().row_stride as usize;
    let seg = path.join("lane-0/seg-00000000.dat");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[4096 + 60 * stride + 20] ^= 1;
    std::fs::write(&seg, bytes).unwrap();
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.live(), 61..100);
    assert_eq!(buf.recovery().map(|r| r.dropped), Some(61));
}
