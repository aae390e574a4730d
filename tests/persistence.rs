//! Promise: a buffer closed and reopened is the same buffer: every item byte-identical,
//! counters continued, and the sampling RNG continuing its stream exactly, so the same
//! seed and the same calls give the same samples across a restart (issue 3).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use common::{add_range, assert_live_items_intact, columns, item, item_bytes, schema};
use replaystore::{Config, ReplayBuffer, Request};

#[test]
fn hundred_thousand_items_survive_close_and_reopen_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    let mut buf = ReplayBuffer::create(
        &path,
        Config::new(schema(), 100_000).segment_slots(4096).seed(3),
    )
    .unwrap();
    // Both add paths: one at a time, then batches of varied sizes.
    for i in 0..10_000 {
        assert_eq!(buf.add(&columns(&item(i))).unwrap(), i);
    }
    let mut next = 10_000;
    for size in [1u64, 7, 1000, 4095, 4097, 33_333].iter().cycle() {
        let end = (next + size).min(100_000);
        assert_eq!(add_range(&mut buf, next, end), next..end);
        next = end;
        if next == 100_000 {
            break;
        }
    }
    assert_eq!(buf.len(), 100_000);
    buf.sample(1000).unwrap();
    let before = buf.stats();
    buf.close().unwrap();

    let buf = ReplayBuffer::open(&path).unwrap();
    assert!(buf.recovery().is_none(), "a clean close needs no recovery");
    assert_eq!(buf.live(), 0..100_000);
    assert_live_items_intact(&buf);
    let after = buf.stats();
    assert_eq!(
        (after.added, after.evicted, after.sampled, after.len),
        (before.added, before.evicted, before.sampled, before.len)
    );
    assert!(after.bytes_on_disk >= 100_000 * schema().item_bytes() as u64);
}

#[test]
fn ring_wraps_and_batches_longer_than_capacity_keep_their_newest_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    let mut buf =
        ReplayBuffer::create(&path, Config::new(schema(), 1000).segment_slots(64)).unwrap();
    add_range(&mut buf, 0, 2500);
    assert_eq!(buf.live(), 1500..2500);
    assert_eq!(add_range(&mut buf, 2500, 6001), 2500..6001);
    assert_eq!(buf.live(), 5001..6001);
    for i in 6001..6500 {
        buf.add(&columns(&item(i))).unwrap();
    }
    assert_eq!(buf.live(), 5500..6500);
    let s = buf.stats();
    assert_eq!((s.added, s.evicted, s.len), (6500, 5500, 1000));
    assert!(matches!(
        buf.get(5499),
        Err(replaystore::Error::Evicted {
            index: 5499,
            head: 5500,
            tail: 6500
        })
    ));
    buf.close().unwrap();
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.live(), 5500..6500);
    assert_live_items_intact(&buf);
}

/// Samples rounds `rounds` (every third without replacement) and returns their indices.
fn draws(buf: &mut ReplayBuffer, rounds: std::ops::Range<usize>) -> Vec<Vec<u64>> {
    rounds
        .map(|r| {
            let spec: Request = if r % 3 == 2 {
                Request::rows(64).without_replacement().into()
            } else {
                64.into()
            };
            let b = buf.sample(spec).unwrap();
            for (row, &i) in b.indices().iter().enumerate() {
                assert_eq!(b.item_bytes(row), item_bytes(i), "sampled item {i} differs");
            }
            b.indices().to_vec()
        })
        .collect()
}

#[test]
fn same_seed_and_calls_give_the_same_samples_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || Config::new(schema(), 5000).segment_slots(512).seed(99);
    // Run A: never restarts.
    let mut a = ReplayBuffer::create(dir.path().join("a"), config()).unwrap();
    add_range(&mut a, 0, 3000);
    let a_draws = draws(&mut a, 0..20);
    // Run B: the same calls with a close and reopen in the middle.
    let mut b = ReplayBuffer::create(dir.path().join("b"), config()).unwrap();
    add_range(&mut b, 0, 3000);
    let mut b_draws = draws(&mut b, 0..7);
    b.close().unwrap();
    let mut b = ReplayBuffer::open(dir.path().join("b")).unwrap();
    b_draws.extend(draws(&mut b, 7..20));
    assert_eq!(a_draws, b_draws);
    // And a different seed gives a different stream.
    let mut c = ReplayBuffer::create(dir.path().join("c"), config().seed(100)).unwrap();
    add_range(&mut c, 0, 3000);
    assert_ne!(draws(&mut c, 0..20), a_draws);
}

#[test]
fn clear_empties_the_buffer_and_never_reuses_indices() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 100)).unwrap();
    add_range(&mut buf, 0, 150);
    buf.clear().unwrap();
    assert!(buf.is_empty());
    assert!(matches!(buf.sample(1), Err(replaystore::Error::Empty)));
    assert_eq!(buf.add(&columns(&item(150))).unwrap(), 150);
    let s = buf.stats();
    assert_eq!((s.added, s.cleared, s.evicted, s.len), (151, 100, 50, 1));
    buf.close().unwrap();
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.live(), 150..151);
    assert_eq!(buf.stats().cleared, 100);
    assert_live_items_intact(&buf);
}

#[test]
fn dropping_the_handle_closes_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 100)).unwrap();
    add_range(&mut buf, 0, 40);
    drop(buf);
    let info = replaystore::inspect(&path).unwrap();
    assert!(info.commit.is_clean());
    assert_eq!(info.len(), 40);
}
