//! The `fragments` storage unit (RLlib's `StorageUnit.FRAGMENTS`): each `add` /
//! `add_batch` call's rows are one unit, drawn whole, against a plain list of the calls.

#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly by design"
)]

mod common;

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use common::xorshift;
use replaystore::{Batch, Column, Config, DType, Error, ReplayBuffer, Request, Schema, verify};

const CAPACITY: u64 = 2048;
const KILL_ENV: &str = "REPLAYSTORE_FRAGMENT_KILL_DIR";

fn schema() -> Schema {
    Schema::builder()
        .field("x", DType::U64, &[])
        .build()
        .unwrap()
}

fn config() -> Config {
    Config::new(schema(), CAPACITY)
        .segment_slots(256)
        .fragments()
        .seed(5)
}

/// Rows of the call that starts at `start`: a pure function, so a parent knows how
/// long a call its killed child meant to make.
fn call_len(start: u64) -> u64 {
    let mut s = start.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    match xorshift(&mut s) % 10 {
        0..=1 => 1,
        2 => 300 + xorshift(&mut s) % 200,
        _ => 1 + xorshift(&mut s) % 120,
    }
}

/// Adds one call at the tail: a single `add` for one row, else an `add_batch`. Row `i`
/// holds `x = i`.
fn add_call(buf: &mut ReplayBuffer) -> Range<u64> {
    add_call_of(buf, call_len)
}

/// Calls long enough that a kill almost always lands inside one.
fn long_call_len(start: u64) -> u64 {
    2000 + call_len(start) * 10
}

fn add_call_of(buf: &mut ReplayBuffer, call_len: fn(u64) -> u64) -> Range<u64> {
    let start = buf.live().end;
    let len = call_len(start);
    if len == 1 {
        let i = buf.add(&[Column::scalar("x", &start)]).unwrap();
        i..i + 1
    } else {
        let xs: Vec<u64> = (start..start + len).collect();
        buf.add_batch(&[Column::new("x", &xs)]).unwrap()
    }
}

/// Checks a draw against the calls: every fragment is a whole call whose rows are all
/// live, and its rows hold what was added.
fn check_draw(batch: &Batch, whole: &HashSet<Range<u64>>) {
    let xs = batch.get::<u64>("x").unwrap();
    let offsets = batch.get::<u64>("offsets").unwrap();
    assert_eq!(offsets.last().copied(), Some(batch.len() as u64));
    for (i, r) in ranges(batch).iter().enumerate() {
        assert!(whole.contains(r), "fragment {r:?} is not a whole live call");
        let rows = offsets[i] as usize..offsets[i + 1] as usize;
        assert_eq!(rows.len() as u64, r.end - r.start);
        for (k, row) in rows.enumerate() {
            assert_eq!(xs[row], r.start + k as u64);
            assert_eq!(batch.indices()[row], r.start + k as u64);
        }
    }
}

/// Each fragment of a draw as the logical indices its `add_batch` returned: its first
/// row's index and its row count (`check_draw` checks the rows between are those).
fn ranges(batch: &Batch) -> Vec<Range<u64>> {
    let offsets = batch.get::<u64>("offsets").unwrap();
    offsets
        .windows(2)
        .map(|o| {
            let first = batch.indices()[o[0] as usize];
            first..first + (o[1] - o[0])
        })
        .collect()
}

#[test]
fn fragments_are_whole_calls_while_the_ring_wraps_and_after_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = ReplayBuffer::create(&dir, config()).unwrap();
    let mut calls: Vec<Range<u64>> = Vec::new();
    let mut batch = Batch::default();
    for round in 0..40 {
        for _ in 0..8 {
            calls.push(add_call(&mut buf));
        }
        if round % 10 == 9 {
            // The table is rebuilt from the rows' positions.
            buf.close().unwrap();
            buf = ReplayBuffer::open(&dir).unwrap();
        }
        let head = buf.live().start;
        let whole: HashSet<Range<u64>> =
            calls.iter().filter(|r| r.start >= head).cloned().collect();
        buf.sample_into(Request::fragments(400), &mut batch)
            .unwrap();
        check_draw(&batch, &whole);
        // Uniform over the whole calls, whatever their lengths.
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for r in ranges(&batch) {
            *counts.entry(r.start).or_default() += 1;
        }
        let expect = 400.0 / whole.len() as f64;
        for r in &whole {
            let got = counts.get(&r.start).copied().unwrap_or(0) as f64;
            assert!(
                (got - expect).abs() < 5.0 * expect.sqrt() + 2.0,
                "round {round}: {r:?} drawn {got} times, expected {expect:.1}"
            );
        }
    }
    assert!(buf.live().start > 4 * CAPACITY, "the ring wrapped");
    // A call longer than the ring keeps its newest rows, and is never whole.
    let xs: Vec<u64> = (0..CAPACITY + 10).map(|k| buf.live().end + k).collect();
    buf.add_batch(&[Column::new("x", &xs)]).unwrap();
    assert!(matches!(
        buf.sample(Request::fragments(1)),
        Err(Error::InvalidSample(_))
    ));
    calls.push(add_call(&mut buf));
    let f = buf.sample(Request::fragments(20)).unwrap();
    assert!(ranges(&f).iter().all(|r| r == calls.last().unwrap()));
    buf.close().unwrap();
    assert!(verify(&dir).unwrap().is_sound());
}

#[test]
fn prioritized_fragments_follow_their_mean_row_priority() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf =
        ReplayBuffer::create(tmp.path().join("b"), config().prioritized(1.0, 0.0)).unwrap();
    let calls: Vec<Range<u64>> = (0..12).map(|_| add_call(&mut buf)).collect();
    // Every row priority 1, but a third of the rows of one call priority 25: its
    // mean is 9.
    let all: Vec<u64> = buf.live().collect();
    buf.update_priorities(&all, &vec![1.0f64; all.len()])
        .unwrap();
    let hot = calls.iter().find(|r| r.end - r.start >= 3).unwrap().clone();
    let third: Vec<u64> = (hot.start..hot.end)
        .filter(|i| (i - hot.start) % 3 == 0)
        .collect();
    buf.update_priorities(&third, &vec![25.0f64; third.len()])
        .unwrap();
    let rows = hot.end - hot.start;
    let mean = (third.len() as f64 * 25.0 + (rows - third.len() as u64) as f64) / rows as f64;
    let mut batch = Batch::default();
    let draws = 3000;
    buf.sample_into(Request::fragments(draws).prioritized(1.0), &mut batch)
        .unwrap();
    check_draw(&batch, &calls.iter().cloned().collect());
    let p_hot = mean / (mean + (calls.len() - 1) as f64);
    let hits = ranges(&batch).iter().filter(|r| **r == hot).count() as f64;
    let expect = draws as f64 * p_hot;
    assert!(
        (hits - expect).abs() < 5.0 * expect.sqrt(),
        "{hits} draws of the hot call, expected {expect:.0}"
    );
    for (r, &w) in ranges(&batch).iter().zip(batch.weights()) {
        let want = if *r == hot { (1.0 / mean) as f32 } else { 1.0 };
        assert!((w - want).abs() < 1e-5, "{r:?}: weight {w}, want {want}");
    }
}

#[test]
fn buffers_without_fragments_refuse_to_sample_them_and_episodes_exclude_them() {
    let tmp = tempfile::tempdir().unwrap();
    let mut plain = ReplayBuffer::create(tmp.path().join("p"), Config::new(schema(), 16)).unwrap();
    plain.add(&[Column::scalar("x", &1u64)]).unwrap();
    assert!(matches!(
        plain.sample(Request::fragments(1)),
        Err(Error::InvalidSample(m)) if m.contains("Config::fragments")
    ));
    assert!(matches!(
        ReplayBuffer::create(tmp.path().join("e"), config().episodic()),
        Err(Error::InvalidConfig {
            field: "fragments",
            ..
        })
    ));
}

/// The position word is under the checksum: a flipped bit in it is found by verify.
#[test]
fn a_damaged_fragment_position_fails_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = ReplayBuffer::create(&dir, config()).unwrap();
    buf.add_batch(&[Column::new("x", &[1u64, 2, 3])]).unwrap();
    buf.close().unwrap();
    assert!(verify(&dir).unwrap().is_sound());
    let seg = dir
        .join(replaystore::internal::storage::LANE_DIR)
        .join("seg-00000000.dat");
    let mut bytes = std::fs::read(&seg).unwrap();
    let stride = replaystore::internal::format::row::RowLayout::of(&schema()).stride;
    // Slot 1's row, its position word at 12.
    bytes[4096 + stride + 12] ^= 1;
    std::fs::write(&seg, bytes).unwrap();
    assert!(!verify(&dir).unwrap().is_sound());
}

#[test]
fn fragment_kill_child() {
    let Ok(dir) = std::env::var(KILL_ENV) else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let mut n = 0u64;
    loop {
        let r = add_call_of(&mut buf, long_call_len);
        n += 1;
        // Flushes now and then, so kills land in them too; not often, or most kills
        // land in the flush's syncs (and in the eviction records of the lap after each
        // commit) rather than inside a call.
        if n.is_multiple_of(61) {
            buf.flush().unwrap();
        }
        println!("{} {}", r.start, r.end);
    }
}

/// A kill in the middle of an `add_batch` leaves its first rows stored (they are not
/// lost, just never acknowledged), but never as a whole fragment: only calls with their
/// last row stored are drawn.
#[test]
fn kill_9_mid_batch_never_yields_a_cut_fragment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let config = Config::new(schema(), 1 << 16)
        .segment_slots(1 << 12)
        .fragments()
        .seed(5);
    ReplayBuffer::create(&dir, config).unwrap().close().unwrap();
    let mut rng = 17u64;
    let mut cut = 0;
    // At least 16 kills, and on until one lands inside a call: where a kill lands is
    // timing, and a loaded machine (CI building in parallel) can miss 16 times running.
    for round in 0..96 {
        if round >= 16 && cut > 0 {
            break;
        }
        let lines = 1 + xorshift(&mut rng) % 20;
        let mut acked_end = None;
        common::run_child_and_kill_after(
            "fragment_kill_child",
            KILL_ENV,
            dir.to_str().unwrap(),
            lines,
            |l| {
                if let Some(end) = l.split_whitespace().nth(1).and_then(|x| x.parse().ok()) {
                    acked_end = Some(end);
                }
            },
        );
        let mut buf = ReplayBuffer::open(&dir).unwrap();
        let live = buf.live();
        let acked_end = acked_end.unwrap();
        // Rows past the last acknowledged call: a call the kill cut short, or a whole
        // one it did not get to acknowledge.
        if live.end > acked_end && live.end < acked_end + long_call_len(acked_end) {
            cut += 1;
        }
        let f = buf.sample(Request::fragments(200)).unwrap();
        for r in ranges(&f) {
            assert!(
                r.start >= live.start && r.end <= live.end,
                "{r:?} of {live:?}"
            );
            assert_eq!(
                r.end - r.start,
                long_call_len(r.start),
                "fragment {r:?} was cut"
            );
        }
        drop(buf);
        assert!(verify(&dir).unwrap().is_sound());
    }
    assert!(cut > 0, "no kill landed inside an add_batch");
}
