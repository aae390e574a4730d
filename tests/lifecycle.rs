//! Promise: item lifecycles (issue 30). An item removed (by `remove`, by a draw that
//! removes, by its `max_use`-th draw) is never returned again by any draw or read of
//! the writer, a reader or a snapshot, uniform or by priority; `len`, the item states
//! and the removal counters say exactly what a model says; removals survive reopening,
//! `kill -9` and snapshots; `verify` finds damaged state words.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use proptest::prelude::*;
use replaystore::{
    Cause, Column, Config, DType, Error, Reader, ReplayBuffer, Request, Schema, verify,
};

fn schema() -> Schema {
    Schema::builder()
        .field("x", DType::I64, &[])
        .field("pad", DType::U8, &[5])
        .build()
        .unwrap()
}

fn add(buf: &mut ReplayBuffer, from: u64, k: u64) {
    let xs: Vec<i64> = (from..from + k).map(|i| i as i64).collect();
    let pad = vec![7u8; 5 * k as usize];
    buf.add_batch(&[
        Column::new("x", &xs),
        Column::new("pad", &pad).with_shape(&[k as usize, 5]),
    ])
    .unwrap();
}

/// What the buffer should hold: the live range, which items were removed (and why),
/// and every item's uses.
#[derive(Debug, Default)]
struct Model {
    capacity: u64,
    max_use: u64,
    head: u64,
    tail: u64,
    removed: HashMap<u64, Cause>,
    uses: HashMap<u64, u64>,
    by_cause: HashMap<Cause, u64>,
}

impl Model {
    fn live(&self) -> impl Iterator<Item = u64> + '_ {
        (self.head..self.tail).filter(|i| !self.removed.contains_key(i))
    }
    fn len(&self) -> u64 {
        self.live().count() as u64
    }
    fn add(&mut self, k: u64) {
        self.tail += k;
        self.head = self.head.max(self.tail.saturating_sub(self.capacity));
    }
    fn remove(&mut self, i: u64, cause: Cause) -> bool {
        if self.removed.contains_key(&i) {
            return false;
        }
        self.removed.insert(i, cause);
        *self.by_cause.entry(cause).or_default() += 1;
        true
    }
    fn drawn(&mut self, i: u64) {
        if self.removed.contains_key(&i) {
            return;
        }
        let u = self.uses.entry(i).or_default();
        *u = (*u + 1).min(65_535);
        if self.max_use != 0 && *u >= self.max_use {
            self.remove(i, Cause::UsedUp);
        }
    }
    fn clear(&mut self) {
        self.head = self.tail;
    }
}

/// Everything observable agrees with the model: `len`, stats, every live item's state,
/// the removal counters, and reads of removed items fail by name.
fn agree(buf: &ReplayBuffer, m: &Model) {
    assert_eq!(buf.live(), m.head..m.tail);
    assert_eq!(buf.len(), m.len(), "len");
    let stats = buf.stats();
    assert_eq!(stats.len, m.len());
    let in_range = (m.head..m.tail)
        .filter(|i| m.removed.contains_key(i))
        .count() as u64;
    assert_eq!(stats.removed, in_range, "removed in the live range");
    for c in Cause::ALL {
        let want = m.by_cause.get(&c).copied().unwrap_or(0);
        assert_eq!(stats.removals.of(c), want, "removals by {c:?}");
    }
    let live: Vec<u64> = (m.head..m.tail).collect();
    for (i, s) in live.iter().zip(buf.item_states(&live).unwrap()) {
        assert_eq!(s.removed, m.removed.get(i).copied(), "item {i} removed");
        assert_eq!(s.uses, m.uses.get(i).copied().unwrap_or(0), "item {i} uses");
        match buf.get(*i) {
            Ok(b) => {
                assert!(s.removed.is_none());
                assert_eq!(b.get::<i64>("x").unwrap(), [*i as i64]);
            }
            Err(Error::Removed { index, cause }) => {
                assert_eq!((index, Some(cause)), (*i, s.removed.map(Cause::name)));
            }
            Err(e) => panic!("get({i}): {e}"),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add(u64),
    Remove(Vec<u8>),
    Pop(usize),
    Draw(usize, bool),
    Distinct(usize),
    Consume(usize),
    Stale(u64, u64),
    Flush,
    Reopen,
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..7).prop_map(Op::Add),
        2 => proptest::collection::vec(any::<u8>(), 0..5).prop_map(Op::Remove),
        2 => (1usize..6).prop_map(Op::Pop),
        3 => ((1usize..9), any::<bool>()).prop_map(|(n, p)| Op::Draw(n, p)),
        1 => (1usize..6).prop_map(Op::Distinct),
        2 => (1usize..6).prop_map(Op::Consume),
        1 => ((0u64..40), (0u64..8)).prop_map(|(a, b)| Op::Stale(a, b)),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        1 => Just(Op::Clear),
    ]
}

fn run(ops: &[Op], max_use: u64, prioritized: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut config = Config::new(schema(), 16).segment_slots(4).seed(3);
    config = if max_use == 0 {
        config.item_states()
    } else {
        config.max_use(max_use)
    };
    if prioritized {
        config = config.prioritized(0.7, 0.01);
    }
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    let mut m = Model {
        capacity: 16,
        max_use,
        ..Model::default()
    };
    for op in ops {
        match op {
            Op::Add(k) => {
                add(&mut buf, m.tail, *k);
                m.add(*k);
            }
            Op::Remove(offsets) => {
                let span = m.tail - m.head;
                let picked: Vec<u64> = match span {
                    0 => Vec::new(),
                    _ => offsets
                        .iter()
                        .map(|&o| m.head + u64::from(o) % span)
                        .collect(),
                };
                let want = picked
                    .iter()
                    .filter(|&&i| m.remove(i, Cause::Explicit))
                    .count();
                assert_eq!(buf.remove(&picked).unwrap(), want as u64);
            }
            Op::Pop(n) => match buf.sample(Request::rows(*n).remove()) {
                Ok(b) => {
                    let got = b.indices().to_vec();
                    assert_eq!(got.len(), *n);
                    for &i in &got {
                        assert!(m.live().any(|l| l == i), "popped {i}, not live");
                        assert!(m.remove(i, Cause::Sampled), "popped {i} twice");
                    }
                }
                Err(Error::InvalidSample(_)) => assert!(m.len() < *n as u64),
                Err(Error::Empty) => assert_eq!(m.len(), 0),
                Err(e) => panic!("pop: {e}"),
            },
            Op::Draw(n, by_priority) => {
                let request: Request = match *by_priority && prioritized {
                    true => Request::rows(*n).prioritized(0.4).into(),
                    false => Request::rows(*n).into(),
                };
                match buf.sample(request) {
                    Ok(b) => {
                        for &i in b.indices() {
                            assert!(m.live().any(|l| l == i), "drew {i}, removed or gone");
                        }
                        for &i in b.indices() {
                            m.drawn(i);
                        }
                    }
                    Err(Error::Empty | Error::ZeroTotalPriority { .. }) => {
                        assert_eq!(m.len(), 0);
                    }
                    Err(e) => panic!("draw: {e}"),
                }
            }
            Op::Distinct(n) => match buf.sample(Request::rows(*n).without_replacement()) {
                Ok(b) => {
                    let mut got = b.indices().to_vec();
                    got.sort_unstable();
                    got.dedup();
                    assert_eq!(got.len(), *n, "distinct rows");
                    for &i in b.indices() {
                        assert!(m.live().any(|l| l == i), "drew {i}, removed or gone");
                        m.drawn(i);
                    }
                }
                Err(Error::InvalidSample(_)) => assert!(m.len() < *n as u64),
                Err(Error::Empty) => assert_eq!(m.len(), 0),
                Err(e) => panic!("distinct: {e}"),
            },
            Op::Consume(n) => match buf.sample(Request::rows(*n).oldest().remove()) {
                Ok(b) => {
                    let want: Vec<u64> = m.live().take(*n).collect();
                    assert_eq!(b.indices(), want, "the oldest live items, in order");
                    for i in want {
                        m.remove(i, Cause::Consumed);
                    }
                }
                Err(Error::Empty) => assert_eq!(m.len(), 0),
                Err(e) => panic!("consume: {e}"),
            },
            Op::Stale(back, max) => {
                // The tag `x` is the index: items more than `max` behind `now` go.
                let now = m.tail.saturating_sub(*back) as i64;
                let bound = now - *max as i64;
                let doomed: Vec<u64> = m.live().filter(|&i| (i as i64) < bound).collect();
                for &i in &doomed {
                    m.remove(i, Cause::Stale);
                }
                assert_eq!(
                    buf.remove_stale("x", now, *max).unwrap(),
                    doomed.len() as u64
                );
            }
            Op::Flush => buf.flush().unwrap(),
            Op::Reopen => {
                buf.close().unwrap();
                buf = ReplayBuffer::open(&path).unwrap();
            }
            Op::Clear => {
                buf.clear().unwrap();
                m.clear();
            }
        }
        agree(&buf, &m);
    }
    buf.close().unwrap();
    let report = verify(&path).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let buf = ReplayBuffer::open(&path).unwrap();
    agree(&buf, &m);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random adds, removals, draws that remove, draws that count uses (with and
    /// without `max_use`, uniform and by priority), flushes, reopens and clears on a
    /// 16-item ring that wraps: the buffer agrees with the model after every call and
    /// after a last reopen, and verifies clean.
    #[test]
    fn removals_and_uses_follow_the_model_through_every_call(
        ops in proptest::collection::vec(op(), 1..40),
        max_use in prop_oneof![Just(0u64), 1u64..4],
        prioritized in any::<bool>(),
    ) {
        run(&ops, max_use, prioritized);
    }
}

/// The live items of `buf` not removed, oldest first.
fn kept(buf: &ReplayBuffer) -> Vec<u64> {
    let removed = common::removed_of(buf);
    buf.live().filter(|i| !removed.contains(i)).collect()
}

fn filled(path: &Path, config: Config, n: u64) -> ReplayBuffer {
    let mut buf = ReplayBuffer::create(path, config).unwrap();
    add(&mut buf, 0, n);
    buf
}

#[test]
fn draws_never_return_a_removed_item_at_any_share_removed() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(schema(), 1000).item_states().seed(5);
    let mut buf = filled(&dir.path().join("b"), config, 1000);
    // Remove nine in ten, in steps: every kind of draw avoids them at every share.
    for round in 0..9u64 {
        let doomed: Vec<u64> = (0..1000).filter(|i| i % 10 == round).collect();
        buf.remove(&doomed).unwrap();
        let kept = |i: u64| i % 10 > round;
        let requests: [Request; 3] = [
            Request::rows(512).into(),
            Request::rows(50).without_replacement().into(),
            Request::rows(20).newest(100).into(),
        ];
        for request in requests {
            let b = buf.sample(request).unwrap();
            assert!(b.indices().iter().all(|&i| kept(i)), "round {round}");
        }
    }
    // Uniform over what is left: item 9 of every ten, 100 items, chi-square.
    let mut counts = HashMap::<u64, u64>::new();
    for _ in 0..200 {
        for &i in buf.sample(Request::rows(500)).unwrap().indices() {
            *counts.entry(i).or_default() += 1;
        }
    }
    assert_eq!(counts.len(), 100);
    let expected = 100_000.0 / 100.0;
    let chi2: f64 = counts
        .values()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // 99 degrees of freedom: the 0.999 quantile is 148.2.
    assert!(chi2 < 148.2, "chi-square {chi2}");
    // Everything removed: draws are Empty, distinct draws of more than is left refused.
    let rest: Vec<u64> = (0..1000).filter(|i| i % 10 == 9).collect();
    buf.remove(&rest).unwrap();
    assert!(matches!(buf.sample(4), Err(Error::Empty)));
    assert_eq!(buf.len(), 0);
}

#[test]
fn a_removed_item_gets_no_priority_and_its_leaf_is_zero_after_a_kill_between() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let config = Config::new(schema(), 64)
        .prioritized(1.0, 0.0)
        .item_states()
        .seed(2);
    let mut buf = filled(&path, config, 64);
    buf.update_priorities(&[5, 6], &[1000.0f64, 1000.0])
        .unwrap();
    buf.remove(&[5]).unwrap();
    for _ in 0..50 {
        let b = buf.sample(Request::rows(64).prioritized(0.5)).unwrap();
        assert!(!b.indices().contains(&5));
    }
    assert_eq!(buf.priorities(&[6]).unwrap(), [1000.0]);
    // An update of a removed item is skipped and counted stale: it keeps no priority.
    let done = buf.update_priorities(&[5, 7], &[5000.0f64, 2.0]).unwrap();
    assert_eq!((done.applied, done.stale), (1, 1));
    buf.update_priorities(&[7], &[1.0f64]).unwrap();
    let p = buf.priority_summary().unwrap();
    assert!(
        (p.total - (62.0 + 1000.0)).abs() < 1e-6,
        "total {}",
        p.total
    );
}

#[test]
fn recovery_leaves_a_priority_of_zero_with_eps_zero_and_never_a_removed_leaf() {
    // After a kill, a live item with a zero leaf is one whose move or removal lost its
    // row or word, and gets the largest priority, unless eps is 0: then a zero leaf is
    // a priority of 0 the caller set, and stays.
    let dir = tempfile::tempdir().unwrap();
    for eps in [0.0, 0.01] {
        let path = dir.path().join(format!("b{eps}"));
        let config = Config::new(schema(), 16)
            .item_states()
            .prioritized(1.0, eps);
        let mut buf = ReplayBuffer::create(&path, config).unwrap();
        add(&mut buf, 0, 8);
        buf.update_priorities(&[2, 3], &[0.0f64, 5.0]).unwrap();
        buf.remove(&[4]).unwrap();
        buf.flush().unwrap();
        buf.abandon();
        let mut buf = ReplayBuffer::open(&path).unwrap();
        assert!(buf.recovery().is_some());
        let p = buf.priorities(&[2, 3, 4]).unwrap();
        assert_eq!(p, vec![eps, 5.0 + eps, 0.0], "eps {eps}");
        assert!(
            buf.sample(Request::rows(64).prioritized(0.4))
                .unwrap()
                .indices()
                .iter()
                .all(|&i| i != 4)
        );
    }
}

#[test]
fn snapshots_keep_the_item_states_of_their_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = filled(&path, Config::new(schema(), 32).max_use(2).seed(4), 20);
    buf.remove(&[1, 2]).unwrap();
    buf.sample(Request::at(&[3])).unwrap(); // a read: no use
    buf.sample(Request::rows(3).remove()).unwrap();
    let state = buf.get_state_named("a").unwrap();
    let at_checkpoint = buf.item_states(&(0..20).collect::<Vec<_>>()).unwrap();
    let len = buf.len();
    // After the checkpoint: more removals and uses, then the restore undoes them.
    buf.remove(&[10, 11, 12]).unwrap();
    for _ in 0..5 {
        buf.sample(4).unwrap();
    }
    assert_ne!(
        buf.item_states(&(0..20).collect::<Vec<_>>()).unwrap(),
        at_checkpoint
    );
    // The snapshot opened as it is, and as a reader, sees the checkpoint's states.
    let frozen = ReplayBuffer::open_snapshot(&path, "a").unwrap();
    assert_eq!(
        frozen.item_states(&(0..20).collect::<Vec<_>>()).unwrap(),
        at_checkpoint
    );
    assert_eq!(frozen.len(), len);
    let mut reader = Reader::open_snapshot(&path, "a").unwrap();
    assert_eq!(reader.len(), len);
    buf.set_state(&state).unwrap();
    assert_eq!(
        buf.item_states(&(0..20).collect::<Vec<_>>()).unwrap(),
        at_checkpoint
    );
    assert_eq!(buf.len(), len);
    assert!(matches!(buf.get(1), Err(Error::Removed { index: 1, .. })));
    // The restored file is the snapshot's until the first store, then a copy of its
    // own: the snapshot keeps its states.
    buf.remove(&[13]).unwrap();
    let frozen = ReplayBuffer::open_snapshot(&path, "a").unwrap();
    assert_eq!(
        frozen.item_states(&(0..20).collect::<Vec<_>>()).unwrap(),
        at_checkpoint
    );
    drop(frozen);
    for _ in 0..50 {
        let b = reader.sample(8).unwrap();
        let removed = buf.item_states(b.indices()).unwrap();
        assert!(
            removed
                .iter()
                .all(|s| s.removed.is_none() || s.removed == Some(Cause::Explicit))
        );
    }
    buf.close().unwrap();
    let report = verify(&path).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.snapshots_checked, 1);
}

#[test]
fn a_reader_never_returns_what_the_writer_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let config = Config::new(schema(), 256)
        .prioritized(0.6, 0.01)
        .item_states()
        .seed(8);
    let mut buf = filled(&path, config, 200);
    let mut reader = Reader::open(&path).unwrap();
    let mut removed = std::collections::HashSet::new();
    for round in 0..60u64 {
        let doomed: Vec<u64> = (0..3).map(|k| (round * 7 + k * 61) % 200).collect();
        buf.remove(&doomed).unwrap();
        removed.extend(doomed);
        let requests: [Request; 2] = [32.into(), Request::rows(32).prioritized(0.4).into()];
        for request in requests {
            let b = reader.sample(request).unwrap();
            for (&i, &x) in b.indices().iter().zip(b.get::<i64>("x").unwrap()) {
                assert!(
                    !removed.contains(&i),
                    "round {round}: reader drew removed {i}"
                );
                assert_eq!(x, i as i64);
            }
        }
        assert_eq!(reader.len(), 200 - removed.len() as u64);
    }
    let gone = *removed.iter().next().unwrap();
    assert!(matches!(reader.get(gone), Err(Error::Removed { .. })));
    assert!(matches!(
        reader.sample(Request::rows(1).remove()),
        Err(Error::ReadOnly { .. })
    ));
}

#[test]
fn a_reader_drawing_while_the_writer_removes_returns_nothing_removed_before_its_draw() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    // The writer removes items 0, 1, 2, ... one call each and then publishes how far
    // it got; a reader drawing meanwhile (uniformly, and by priority: the leaves
    // zeroed under its descent) must return no item removed before its draw began.
    // Removal changes no row byte, so an item drawn during its removal is whole.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let config = Config::new(schema(), 20_000)
        .item_states()
        .prioritized(0.6, 0.01)
        .seed(2);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    add(&mut buf, 0, 20_000);
    buf.flush().unwrap();
    let upto = Arc::new(AtomicU64::new(0));
    let mut reader = Reader::open(&path).unwrap();
    let published = upto.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..19_900u64 {
            buf.remove(&[i]).unwrap();
            published.store(i + 1, Ordering::Release);
        }
        buf
    });
    let mut draws = 0;
    while upto.load(Ordering::Acquire) < 19_900 {
        let before = upto.load(Ordering::Acquire);
        let request: Request = match draws % 2 {
            0 => Request::rows(64).into(),
            _ => Request::rows(64).prioritized(0.4).into(),
        };
        let b = reader.sample(request).unwrap();
        for &i in b.indices() {
            assert!(
                i >= before,
                "drew {i}, removed before the draw (upto {before})"
            );
        }
        draws += 1;
    }
    let buf = writer.join().unwrap();
    assert!(draws > 10, "only {draws} draws raced the removals");
    println!("{draws} draws raced 19,900 removals");
    let b = reader.sample(Request::rows(256)).unwrap();
    assert!(b.indices().iter().all(|&i| i >= 19_900));
    assert_eq!(buf.len(), 100);
}

#[test]
fn stale_items_go_by_their_tag_in_any_order_of_adds() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("iter", DType::U32, &[])
        .field("v", DType::I8, &[])
        .build()
        .unwrap();
    let mut buf =
        ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 64).item_states()).unwrap();
    // Three collectors with their own lag: tags out of index order.
    let mut tags = Vec::new();
    let mut s = 7u64;
    for round in 0..30u32 {
        let t: Vec<u32> = (0..3).map(|c| round.saturating_sub(c * 4)).collect();
        let v = [0i8; 3];
        buf.add_batch(&[Column::new("iter", &t), Column::new("v", &v)])
            .unwrap();
        tags.extend(t);
        if round % 5 == 4 {
            let now = i64::from(round);
            let max = common::xorshift(&mut s) % 6;
            let live: Vec<u64> = buf.live().collect();
            let states = buf.item_states(&live).unwrap();
            let want = live
                .iter()
                .zip(&states)
                .filter(|&(&i, st)| {
                    st.removed.is_none() && i64::from(tags[i as usize]) < now - max as i64
                })
                .count() as u64;
            assert_eq!(
                buf.remove_stale("iter", now, max).unwrap(),
                want,
                "round {round}"
            );
            let live: Vec<u64> = buf.live().collect();
            for (i, st) in live.iter().zip(buf.item_states(&live).unwrap()) {
                let old = i64::from(tags[*i as usize]) < now - max as i64;
                assert!(
                    !old || st.removed.is_some(),
                    "item {i} (tag {}) kept",
                    tags[*i as usize]
                );
            }
        }
    }
    assert!(buf.stats().removals.stale > 0);
    assert!(matches!(
        buf.remove_stale("nope", 3, 1),
        Err(Error::UnknownField { .. })
    ));
}

#[test]
fn calls_on_item_states_are_refused_by_name_where_they_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let plain = filled(&dir.path().join("plain"), Config::new(schema(), 8), 4);
    let mut plain = plain;
    assert!(matches!(
        plain.remove(&[0]),
        Err(Error::NoItemStates { .. })
    ));
    assert!(matches!(
        plain.sample(Request::rows(1).remove()),
        Err(Error::NoItemStates { .. })
    ));
    assert!(matches!(
        plain.item_states(&[0]),
        Err(Error::NoItemStates { .. })
    ));
    let mut buf = filled(
        &dir.path().join("b"),
        Config::new(schema(), 8).item_states(),
        4,
    );
    // Nothing changes when one index is not live.
    assert!(matches!(
        buf.remove(&[1, 9]),
        Err(Error::Evicted { index: 9, .. })
    ));
    assert_eq!(buf.len(), 4);
    // A tag is an integer scalar field.
    let e = buf.remove_stale("pad", 3, 1).unwrap_err();
    assert!(e.to_string().contains("no tag"), "{e}");
    assert_eq!(buf.len(), 4);
    for bad in [
        Config::new(schema(), 8).max_use(65_536),
        Config::new(schema(), 8).max_use(2).episodic(),
        Config::new(schema(), 8).reservoir(4).fragments(),
        Config::new(schema(), 8)
            .rate_limit(replaystore::RateLimit::min_size(1))
            .fragments(),
    ] {
        let e = ReplayBuffer::create(dir.path().join("bad"), bad).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    }
}

#[test]
fn verify_finds_a_damaged_state_word_and_a_wrong_count() {
    use replaystore::internal::format::lifecycle::{BODY_OFFSET, REMOVED_LIVE_OFF, Word};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = filled(&path, Config::new(schema(), 16).item_states(), 10);
    buf.remove(&[3]).unwrap();
    buf.close().unwrap();
    assert!(verify(&path).unwrap().problems.is_empty());
    let file = path.join("items.state");
    let clean = std::fs::read(&file).unwrap();
    let damaged = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = clean.clone();
        edit(&mut b);
        std::fs::write(&file, &b).unwrap();
        let problems = verify(&path).unwrap().problems;
        std::fs::write(&file, &clean).unwrap();
        problems
    };
    let word = |slot: usize| BODY_OFFSET + slot * 8;
    // A word of a later lap than its item (index 21 in slot 5, which holds item 5).
    let ahead = Word::new(21, 16, 0, None).in_form(true).0.to_le_bytes();
    let p = damaged(&|b| b[word(5)..word(5) + 8].copy_from_slice(&ahead));
    assert!(
        p.iter()
            .any(|f| f.what.contains("ahead") && f.offset == word(5) as u64),
        "{p:?}"
    );
    // Impossible bits with a matching check: removed with no cause.
    let no_cause = Word(1).in_form(true).0.to_le_bytes();
    let p = damaged(&|b| b[word(6)..word(6) + 8].copy_from_slice(&no_cause));
    assert!(p.iter().any(|f| f.what.contains("no cause")), "{p:?}");
    // The count of removed live items is wrong after a clean close.
    let p = damaged(&|b| b[REMOVED_LIVE_OFF] = 2);
    assert!(
        p.iter().any(|f| f.offset == REMOVED_LIVE_OFF as u64),
        "{p:?}"
    );
    // A damaged header byte names the file.
    let p = damaged(&|b| b[20] ^= 1);
    assert!(p.iter().any(|f| f.file == file), "{p:?}");
    let e = ReplayBuffer::open(&path);
    assert!(e.is_ok());
}

#[test]
fn lanes_remove_and_pop_across_lanes_and_split_draws_by_what_is_left() {
    use replaystore::Lanes;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v");
    let config = Config::new(schema(), 200).item_states().seed(6);
    let mut lanes = Lanes::create(&path, config, 2).unwrap();
    let xs: Vec<i64> = (0..200).collect();
    let pad = vec![0u8; 200 * 5];
    let to: Vec<usize> = (0..200).map(|i| usize::from(i >= 100)).collect();
    let idx = lanes
        .add_batch(
            &[
                Column::new("x", &xs),
                Column::new("pad", &pad).with_shape(&[200, 5]),
            ],
            &to,
        )
        .unwrap();
    // Lane 0 keeps 10 items, lane 1 all 100: draws go 1 : 10 between them.
    assert_eq!(lanes.remove(&idx[10..100]).unwrap(), 90);
    assert_eq!(lanes.len(), 110);
    let mut in_lane0 = 0u64;
    for _ in 0..200 {
        let b = lanes.sample(Request::rows(55)).unwrap();
        for &i in b.indices() {
            assert!(
                Lanes::lane_of(i) == 1 || (i & 0xff) < 10,
                "drew removed {i}"
            );
            in_lane0 += u64::from(Lanes::lane_of(i) == 0);
        }
    }
    // 11,000 draws, p = 1/11: mean 1,000, sd ~30; 5 sd either way.
    assert!(
        (850..1150).contains(&in_lane0),
        "lane 0 drew {in_lane0} of 11000"
    );
    // Popping across lanes returns every item left exactly once.
    let mut seen = Vec::new();
    while !lanes.is_empty() {
        let n = lanes.len().min(16) as usize;
        seen.extend_from_slice(lanes.sample(Request::rows(n).remove()).unwrap().indices());
    }
    seen.sort_unstable();
    let mut want: Vec<u64> = idx[..10].iter().chain(&idx[100..]).copied().collect();
    want.sort_unstable();
    assert_eq!(seen, want);
    assert!(lanes.sample(Request::rows(1).oldest()).is_err());
}

#[test]
fn draws_by_group_over_lanes_give_every_group_of_all_lanes_its_share() {
    use replaystore::Lanes;
    let dir = tempfile::tempdir().unwrap();
    // The key is an env number.
    let schema = Schema::builder()
        .field("x", DType::I64, &[])
        .field("env", DType::U8, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 2000).item_states().seed(4);
    let mut lanes = Lanes::create(dir.path().join("v"), config, 2).unwrap();
    // Env 0: 600 items in lane 0; env 1: 300 in lane 1; env 2: 20 in each lane.
    let mut env_of = HashMap::new();
    let (mut xs, mut envs, mut to) = (Vec::new(), Vec::new(), Vec::new());
    for (env, lane, count) in [(0u8, 0usize, 600), (1, 1, 300), (2, 0, 20), (2, 1, 20)] {
        for _ in 0..count {
            xs.push(xs.len() as i64);
            envs.push(env);
            to.push(lane);
        }
    }
    let idx = lanes
        .add_batch(&[Column::new("x", &xs), Column::new("env", &envs)], &to)
        .unwrap();
    for (&i, &e) in idx.iter().zip(&envs) {
        env_of.insert(i, e);
    }
    // Remove half of env 2: its 20 left are spread over both lanes.
    let env2: Vec<u64> = idx.iter().copied().filter(|i| env_of[i] == 2).collect();
    let gone: Vec<u64> = env2.iter().copied().step_by(2).collect();
    lanes.remove(&gone).unwrap();
    for _ in 0..100 {
        let b = lanes.sample(Request::rows(30).by_group(&["env"])).unwrap();
        let mut seen = b.indices().to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 30, "distinct");
        let per: Vec<usize> = (0..3u8)
            .map(|e| b.indices().iter().filter(|i| env_of[i] == e).count())
            .collect();
        assert!(per.iter().all(|&c| c >= 10), "an even share each: {per:?}");
        assert!(
            b.indices().iter().all(|i| !gone.contains(i)),
            "removed drawn"
        );
        let got = b.get::<u8>("env").unwrap();
        for (&i, &e) in b.indices().iter().zip(got) {
            assert_eq!(env_of[&i], e, "rows gathered from their lanes");
        }
    }
    // Popping by group removes what it returns, in both lanes.
    let b = lanes
        .sample(Request::rows(30).by_group(&["env"]).remove())
        .unwrap();
    let states = lanes.item_states(b.indices()).unwrap();
    assert!(states.iter().all(|s| s.removed == Some(Cause::Sampled)));
    assert_eq!(lanes.len(), 940 - 20 - 30);
    // Each lane is asked first, as its own draws ask: lanes without item states
    // refuse to remove, and each lane's rate limiter counts its share.
    let schema = Schema::builder()
        .field("env", DType::U8, &[])
        .build()
        .unwrap();
    let plain = Config::new(schema.clone(), 100);
    let mut plain = Lanes::create(dir.path().join("p"), plain, 2).unwrap();
    plain
        .add_batch(&[Column::new("env", &[0u8, 1, 0, 1])], &[0, 1, 0, 1])
        .unwrap();
    let e = plain
        .sample(Request::rows(2).by_group(&["env"]).remove())
        .unwrap_err();
    assert!(matches!(e, Error::NoItemStates { .. }), "{e}");
    let limited = Config::new(schema, 100).rate_limit(replaystore::RateLimit::min_size(3));
    let mut limited = Lanes::create(dir.path().join("l"), limited, 2).unwrap();
    limited
        .add_batch(&[Column::new("env", &[0u8, 1, 0, 1])], &[0, 1, 0, 1])
        .unwrap();
    let e = limited
        .sample(Request::rows(2).by_group(&["env"]))
        .unwrap_err();
    assert!(matches!(e, Error::RateLimited { .. }), "{e}");
}

#[test]
fn downsampling_keeps_max_size_and_removes_uniformly_at_random() {
    let dir = tempfile::tempdir().unwrap();
    // Each of the 11 items is the one removed by the 11th add equally often.
    let mut counts = [0u64; 11];
    for seed in 0..1100u64 {
        let path = dir.path().join(format!("b{seed}"));
        let config = Config::new(schema(), 64).downsample(10).seed(seed);
        let mut buf = filled(&path, config, 10);
        assert_eq!(buf.len(), 10);
        add(&mut buf, 10, 1);
        assert_eq!(buf.len(), 10);
        let live: Vec<u64> = buf.live().collect();
        let states = buf.item_states(&live).unwrap();
        let gone: Vec<u64> = live
            .iter()
            .zip(&states)
            .filter(|(_, s)| s.removed == Some(Cause::Downsampled))
            .map(|(&i, _)| i)
            .collect();
        assert_eq!(gone.len(), 1);
        counts[gone[0] as usize] += 1;
        drop(buf);
        std::fs::remove_dir_all(&path).unwrap();
    }
    let expected = 100.0;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // 10 degrees of freedom: the 0.999 quantile is 29.6.
    assert!(chi2 < 29.6, "chi-square {chi2}: {counts:?}");
}

#[test]
fn downsampling_follows_a_model_and_resumes_its_stream_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let run = |path: &Path, reopen_at: Option<usize>| {
        let config = Config::new(schema(), 200).downsample(30).seed(11);
        let mut buf = ReplayBuffer::create(path, config).unwrap();
        let mut next = 0;
        for (step, k) in [5u64, 17, 1, 40, 3, 9, 30, 2, 60, 1]
            .into_iter()
            .enumerate()
        {
            if Some(step) == reopen_at {
                buf.close().unwrap();
                buf = ReplayBuffer::open(path).unwrap();
            }
            add(&mut buf, next, k);
            next += k;
            assert_eq!(
                buf.len(),
                (next - buf.live().start)
                    .min(30)
                    .min(buf.live().end - buf.live().start)
            );
            assert!(buf.len() <= 30);
        }
        (kept(&buf), buf.stats().removals.downsampled)
    };
    let (a, removed) = run(&dir.path().join("a"), None);
    let (b, _) = run(&dir.path().join("b"), Some(4));
    assert_eq!(a.len(), 30);
    // 168 added, 30 kept; the ring (200) never evicted.
    assert_eq!(removed, 168 - 30);
    assert_eq!(
        a, b,
        "a reopened buffer downsamples as the one that stayed open"
    );
    let e = ReplayBuffer::create(
        dir.path().join("bad"),
        Config::new(schema(), 10).downsample(11),
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
}

#[test]
fn draws_by_group_take_an_even_share_of_every_group_then_the_rest_uniformly() {
    use replaystore::VarKind;
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("pid", DType::I8, &[])
        .variable("env_id", VarKind::Str, None)
        .build()
        .unwrap();
    let config = Config::new(schema, 4000).item_states().seed(9);
    let mut buf = ReplayBuffer::create(dir.path().join("b"), config).unwrap();
    // Three envs of very different sizes (2000, 300, 30 steps), two players each.
    let envs = [("chess", 2000), ("go", 300), ("poker", 30)];
    let mut env_of = Vec::new();
    for (name, count) in envs {
        for k in 0..count {
            let pid = (k % 2) as i8;
            buf.add(&[Column::scalar("pid", &pid), Column::text("env_id", name)])
                .unwrap();
            env_of.push((name, pid));
        }
    }
    let count = |b: &replaystore::Batch, env: &str| {
        b.indices()
            .iter()
            .filter(|&&i| env_of[i as usize].0 == env)
            .count()
    };
    // 32 from three envs: 10 of each, then 2 uniformly from the rest (mostly chess).
    let mut chess_extra = 0;
    for _ in 0..200 {
        let b = buf.sample(Request::rows(32).by_group(&["env_id"])).unwrap();
        let mut seen = b.indices().to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 32, "distinct");
        assert!(count(&b, "go") >= 10 && count(&b, "poker") >= 10);
        chess_extra += count(&b, "chess") - 10;
        for (r, &i) in b.indices().iter().enumerate() {
            assert_eq!(b.text("env_id", r).unwrap(), env_of[i as usize].0);
        }
    }
    // The 2 extra per draw come from the 2,310 left in proportion: chess about 2000/2300.
    assert!(
        (300..=390).contains(&chess_extra),
        "chess drew {chess_extra} extra of 400"
    );
    // By env and player: six groups of at least 15, 5 of each in 30.
    let b = buf
        .sample(Request::rows(30).by_group(&["env_id", "pid"]))
        .unwrap();
    for (env, _) in envs {
        for pid in [0i8, 1] {
            let n = b
                .indices()
                .iter()
                .filter(|&&i| env_of[i as usize] == (env, pid))
                .count();
            assert_eq!(n, 5, "{env} player {pid}");
        }
    }
    // Popping by group removes what it returns; poker runs out, the others go on.
    let mut popped = std::collections::HashSet::new();
    for _ in 0..10 {
        let b = buf
            .sample(Request::rows(30).by_group(&["env_id"]).remove())
            .unwrap();
        for &i in b.indices() {
            assert!(popped.insert(i), "item {i} popped twice");
        }
    }
    assert_eq!(buf.len(), 2330 - 300);
    let poker_left = (2300..2330u64).filter(|i| !popped.contains(i)).count();
    assert_eq!(
        poker_left, 0,
        "poker is drawn first, 10 a time, until it runs out"
    );
    // More groups than draws: one each from two of the three envs (two left now).
    let b = buf.sample(Request::rows(1).by_group(&["env_id"])).unwrap();
    assert_eq!(b.indices().len(), 1);
    assert!(matches!(
        buf.sample(Request::rows(3).by_group(&["nope"])),
        Err(Error::UnknownField { .. })
    ));
}

const RATE_CHILD: &str = "REPLAYSTORE_RATE_CHILD";

/// The other process of the rate limit test: a reader that draws as the limiter lets
/// it, waiting for the writer's adds, and says how many it drew.
#[test]
fn rate_limit_reader_child() {
    let Ok(dir) = std::env::var(RATE_CHILD) else {
        return;
    };
    let mut reader = Reader::open(&dir).unwrap();
    reader.set_rate_limit_wait(Some(std::time::Duration::from_secs(20)));
    for k in 0..36 {
        let b = reader.sample(4).unwrap();
        assert_eq!(b.indices().len(), 4);
        println!("drew {k}");
    }
    println!("marker=done");
}

/// Promise (issue 30, point 4): Reverb's `SampleToInsertRatio` holds between a writer
/// and a reader in another process, both blocking (on a futex in the shared state file,
/// with a timeout) rather than failing: the reader's draws wait for adds, the writer's
/// adds wait for draws, and neither ever runs ahead of the ratio by more than the error
/// buffer. Without a wait, a call held back is `RateLimited` at once.
#[test]
fn a_sample_to_insert_ratio_holds_between_a_writer_and_a_reader_process() {
    use replaystore::RateLimit;
    use std::io::BufRead;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    // 4 draws per add, drawing from 8 live on, within 16 draws either way.
    let rl = RateLimit::sample_to_insert_ratio(4.0, 8, 16.0);
    let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 1000).rate_limit(rl)).unwrap();
    add(&mut buf, 0, 8);
    // Nobody draws yet: the writer may run 16 draws' worth (4 adds) ahead, then no more.
    add(&mut buf, 8, 4);
    let e = buf.add_batch(&[
        Column::new("x", &[12i64]),
        Column::new("pad", &[0u8; 5]).with_shape(&[1, 5]),
    ]);
    assert!(
        matches!(e, Err(Error::RateLimited { what: "an add", .. })),
        "{e:?}"
    );
    // The reader process draws 144 in batches of 4: what 40 adds pay for (a draw needs
    // 40 x 4 - drawn - 4 >= 32 - 16). The writer adds 28 more, waiting for the draws as
    // it goes.
    let (mut child, mut out) =
        common::spawn_child("rate_limit_reader_child", RATE_CHILD, path.as_os_str());
    buf.set_rate_limit_wait(Some(Duration::from_secs(20)));
    for i in 12..40 {
        add(&mut buf, i, 1);
        let s = buf.stats();
        // Never more adds than the draws allow: (inserts) x 4 - draws <= 32 + 16.
        let drawn = read_samples(&path);
        assert!(
            s.added as f64 * 4.0 - drawn as f64 <= 48.0,
            "add {i}: {drawn} drawn"
        );
    }
    let mut drew = 0;
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        if line.contains("marker=done") {
            break;
        }
        drew += u64::from(line.contains("drew "));
        line.clear();
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(drew, 36);
    assert_eq!(read_samples(&path), 144);
    // One more draw is more than the 40 adds pay for, from the writer too.
    buf.set_rate_limit_wait(None);
    let e = buf.sample(4).unwrap_err();
    assert!(
        matches!(e, Error::RateLimited { what: "a draw", .. }),
        "{e}"
    );
}

/// The rate limiter's count of items drawn, as the state file holds it.
fn read_samples(path: &Path) -> u64 {
    use replaystore::internal::format::lifecycle::SAMPLES_OFF;
    let b = std::fs::read(path.join("items.state")).unwrap();
    u64::from_le_bytes(b[SAMPLES_OFF..SAMPLES_OFF + 8].try_into().unwrap())
}

#[test]
fn a_reservoir_keeps_every_item_ever_added_with_equal_chance_past_the_rings_lap() {
    // 50 items into a reservoir of 10 in a ring of 20: each kept with chance 1/5, the
    // oldest as often as the newest, though the ring laps two and a half times.
    let dir = tempfile::tempdir().unwrap();
    let mut counts = [0u64; 50];
    for seed in 0..400u64 {
        let path = dir.path().join(format!("r{seed}"));
        let config = Config::new(schema(), 20).reservoir(10).seed(seed);
        let mut buf = ReplayBuffer::create(&path, config).unwrap();
        for i in 0..50 {
            add(&mut buf, i, 1);
        }
        assert_eq!(buf.len(), 10);
        // Each kept item is its own row (renamed items keep their bytes): x names the
        // item as it was added.
        let b = buf.get_many(&kept(&buf)).unwrap();
        for &x in b.get::<i64>("x").unwrap() {
            counts[x as usize] += 1;
        }
        drop(buf);
        std::fs::remove_dir_all(&path).unwrap();
    }
    let expected = 400.0 * 10.0 / 50.0;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // 49 degrees of freedom: the 0.999 quantile is 85.4.
    assert!(chi2 < 85.4, "chi-square {chi2}: {counts:?}");
    assert!(
        counts[..10].iter().all(|&c| c > 0),
        "the first items survive laps"
    );
}

#[test]
fn a_reservoir_decides_the_same_after_a_reopen_and_verifies_clean() {
    let dir = tempfile::tempdir().unwrap();
    let run = |path: &Path, reopen: bool| {
        let config = Config::new(schema(), 32)
            .reservoir(12)
            .prioritized(0.6, 0.01)
            .seed(21);
        let mut buf = ReplayBuffer::create(path, config).unwrap();
        let mut next = 0;
        for (step, k) in [3u64, 9, 1, 20, 5, 2, 17, 1, 8].into_iter().enumerate() {
            if reopen && step == 4 {
                buf.close().unwrap();
                buf = ReplayBuffer::open(path).unwrap();
            }
            add(&mut buf, next, k);
            next += k;
            buf.sample(Request::rows(4).prioritized(0.4)).unwrap();
        }
        let kept: Vec<i64> = (kept(&buf).iter())
            .map(|&i| buf.get(i).unwrap().get::<i64>("x").unwrap()[0])
            .collect();
        buf.close().unwrap();
        let report = verify(path).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        kept
    };
    let a = run(&dir.path().join("a"), false);
    let b = run(&dir.path().join("b"), true);
    assert_eq!(a.len(), 12);
    assert_eq!(a, b);
    let e = ReplayBuffer::create(
        dir.path().join("c"),
        Config::new(schema(), 10).reservoir(10),
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
}

const RESERVOIR_CHILD: &str = "REPLAYSTORE_RESERVOIR_CHILD";

/// The child of the reservoir kill test: adds 1 to 3 items at a time to a reservoir
/// (x = its running count), saying `added a b` after each call returns.
#[test]
fn reservoir_kill_child() {
    let Ok(dir) = std::env::var(RESERVOIR_CHILD) else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let text = buf.schema().var_field("text").is_some();
    let mut x = 1000i64;
    for k in 0..120u64 {
        let n = 1 + k % 3;
        if text {
            // One item per call: a text reservoir keeps a slot free for the next copy.
            add_text(&mut buf, x);
            println!("added {x}");
            x += 1;
            continue;
        }
        let xs: Vec<i64> = (x..x + n as i64).collect();
        let pad = vec![0u8; 5 * n as usize];
        let r = buf
            .add_batch(&[
                Column::new("x", &xs),
                Column::new("pad", &pad).with_shape(&[n as usize, 5]),
            ])
            .unwrap();
        println!("added {} {}", r.start, r.end);
        x += n as i64;
    }
    println!("finished");
}

/// Promise: a kill at any step of a reservoir's renames and copies (the named points
/// `rename-before-stamp` and `copy-before-clear`) leaves a buffer that verifies, opens,
/// and keeps every item it had kept: at most `max_size` plus the one being copied
/// (which may be at both indices, never at neither), each row intact.
#[cfg(feature = "kill-points")]
#[test]
fn kill_at_each_named_point_of_a_reservoir_keeps_every_kept_item() {
    common::kill_at_each_point(
        "reservoir_kill_child",
        RESERVOIR_CHILD,
        &["rename-before-stamp", "copy-before-clear"],
        &[1, 3, 9],
        |dir, _| {
            let config = Config::new(schema(), 24).reservoir(10).seed(5);
            let mut buf = ReplayBuffer::create(dir, config).unwrap();
            add(&mut buf, 0, 10);
            buf.close().unwrap();
            dir.display().to_string()
        },
        |dir, _lines, ctx| {
            let report = verify(dir).unwrap();
            assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
            let mut buf = ReplayBuffer::open(dir).unwrap();
            let kept = kept(&buf);
            assert!(
                (10..=11).contains(&kept.len()),
                "{ctx}: kept {}",
                kept.len()
            );
            let xs = buf.get_many(&kept).unwrap();
            let mut xs = xs.get::<i64>("x").unwrap().to_vec();
            xs.sort_unstable();
            let distinct = {
                let mut d = xs.clone();
                d.dedup();
                d.len()
            };
            assert!(distinct >= 10, "{ctx}: {xs:?}");
            // And it goes on: adds keep the reservoir at its size (a duplicate is
            // removed like any kept item, in time).
            add(&mut buf, 9000, 1);
            assert!(buf.len() <= 11, "{ctx}");
        },
    );
}

/// Promise: the same for items with text, which every move copies with its values
/// (point `copy-before-clear`, reached at every move): each kept item keeps its text.
#[cfg(feature = "kill-points")]
#[test]
fn kill_at_a_copy_of_a_text_reservoir_keeps_every_kept_item_with_its_text() {
    common::kill_at_each_point(
        "reservoir_kill_child",
        RESERVOIR_CHILD,
        &["copy-before-clear"],
        &[1, 3, 9, 27],
        |dir, _| {
            let config = Config::new(text_schema(), 24).reservoir(10).seed(5);
            let mut buf = ReplayBuffer::create(dir, config).unwrap();
            for x in 0..10 {
                add_text(&mut buf, x);
            }
            buf.close().unwrap();
            dir.display().to_string()
        },
        |dir, _lines, ctx| {
            let report = verify(dir).unwrap();
            assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
            let mut buf = ReplayBuffer::open(dir).unwrap();
            let xs = kept_texts(&buf);
            assert!((10..=11).contains(&xs.len()), "{ctx}: kept {xs:?}");
            add_text(&mut buf, 9000);
            assert!(buf.len() <= 11, "{ctx}");
            kept_texts(&buf);
        },
    );
}

/// A schema of one integer naming the item and its text.
fn text_schema() -> Schema {
    use replaystore::VarKind;
    Schema::builder()
        .field("x", DType::I64, &[])
        .variable("text", VarKind::Str, None)
        .build()
        .unwrap()
}

/// Adds item `x` with its text, longer for some (so chunks hold several, or one spans
/// several).
fn add_text(buf: &mut ReplayBuffer, x: i64) {
    let text = format!("item {x} {}", "~".repeat((x as usize * 37) % 300));
    buf.add(&[Column::scalar("x", &x), Column::text("text", &text)])
        .unwrap();
}

/// The x of every kept item, each checked against its text.
fn kept_texts(buf: &ReplayBuffer) -> Vec<i64> {
    let b = buf.get_many(&kept(buf)).unwrap();
    let xs = b.get::<i64>("x").unwrap().to_vec();
    for (r, &x) in xs.iter().enumerate() {
        let want = format!("item {x} {}", "~".repeat((x as usize * 37) % 300));
        assert_eq!(b.text("text", r).unwrap(), want, "item {x} moved whole");
    }
    xs
}

#[test]
fn downsampled_items_move_past_the_rings_laps_with_their_values() {
    // 50 items into max_size 10 in a ring of 20: past the 10th, each add removes one of
    // the 11 live items, so item i survives the end with chance (10/11)^(50 - max(i, 10)),
    // the oldest too though the ring laps twice and a half: they move to the tail.
    let dir = tempfile::tempdir().unwrap();
    for text in [false, true] {
        let seeds = 400u64;
        let mut counts = [0f64; 50];
        for seed in 0..seeds {
            let path = dir.path().join(format!("d{text}{seed}"));
            let config = match text {
                false => Config::new(schema(), 20),
                true => Config::new(text_schema(), 20),
            };
            let mut buf = ReplayBuffer::create(&path, config.downsample(10).seed(seed)).unwrap();
            for x in 0..50 {
                match text {
                    false => add(&mut buf, x, 1),
                    true => add_text(&mut buf, x as i64),
                }
                assert!(buf.len() <= 10);
            }
            let xs = match text {
                false => {
                    let b = buf.get_many(&kept(&buf)).unwrap();
                    b.get::<i64>("x").unwrap().to_vec()
                }
                true => kept_texts(&buf),
            };
            assert_eq!(xs.len(), 10);
            for x in xs {
                counts[x as usize] += 1.0;
            }
            buf.close().unwrap();
            if seed % 50 == 0 {
                let report = verify(&path).unwrap();
                assert!(report.problems.is_empty(), "{:?}", report.problems);
            }
            std::fs::remove_dir_all(&path).unwrap();
        }
        let p = |i: usize| (10.0f64 / 11.0).powi(50 - i.max(10) as i32);
        // Bins with enough expected counts: 0-9, 10-19, 20-29, 30-39, 40-44, 45-49.
        let bins = [0..10, 10..20, 20..30, 30..40, 40..45, 45..50];
        let chi2: f64 = bins
            .iter()
            .map(|b| {
                let got: f64 = counts[b.clone()].iter().sum();
                let want: f64 = b.clone().map(|i| seeds as f64 * p(i)).sum();
                (got - want).powi(2) / want
            })
            .sum();
        // 5 degrees of freedom: the 0.999 quantile is 20.5.
        assert!(chi2 < 20.5, "text {text}: chi-square {chi2}: {counts:?}");
        assert!(
            counts[..10].iter().sum::<f64>() > 40.0,
            "the first items survive laps"
        );
    }
}

#[test]
fn a_reservoir_of_text_items_keeps_each_with_equal_chance_and_snapshots_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let mut counts = [0u64; 50];
    for seed in 0..300u64 {
        let path = dir.path().join(format!("r{seed}"));
        let config = Config::new(text_schema(), 20).reservoir(10).seed(seed);
        let mut buf = ReplayBuffer::create(&path, config).unwrap();
        for x in 0..50 {
            add_text(&mut buf, x);
        }
        for x in kept_texts(&buf) {
            counts[x as usize] += 1;
        }
        drop(buf);
        std::fs::remove_dir_all(&path).unwrap();
    }
    let expected = 300.0 * 10.0 / 50.0;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // 49 degrees of freedom: the 0.999 quantile is 85.4.
    assert!(chi2 < 85.4, "chi-square {chi2}: {counts:?}");
    // A snapshot keeps its items' values while later moves rewrite chunks.
    let path = dir.path().join("snap");
    let config = Config::new(text_schema(), 20).reservoir(10).seed(1);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    for x in 0..30 {
        add_text(&mut buf, x);
    }
    let at = kept_texts(&buf);
    let state = buf.get_state().unwrap();
    for x in 30..100 {
        add_text(&mut buf, x);
    }
    assert_ne!(kept_texts(&buf), at);
    buf.set_state(&state).unwrap();
    assert_eq!(kept_texts(&buf), at);
    for x in 100..140 {
        add_text(&mut buf, x);
    }
    assert_eq!(kept_texts(&buf).len(), 10);
    buf.close().unwrap();
    let report = verify(&path).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let e = ReplayBuffer::create(
        dir.path().join("bad"),
        Config::new(text_schema(), 20).reservoir(19),
    )
    .unwrap_err();
    assert!(e.to_string().contains("2 slot(s)"), "{e}");
}

const DOWNSAMPLE_CHILD: &str = "REPLAYSTORE_DOWNSAMPLE_CHILD";

/// A buffer of text items whose downsampling (16 of 40) moves kept items, values and
/// all, through a chunk ring of 64-byte chunks that laps often (and evicts for room:
/// the path where a move finds no room is part of what is tested).
fn create_moving_text_buffer(path: &Path) {
    let config = Config::new(text_schema(), 40)
        .segment_slots(8)
        .heap_bytes(40 * 256)
        .chunk_bytes(64)
        .downsample(16)
        .evict_for_room()
        .seed(12);
    ReplayBuffer::create(path, config).unwrap().close().unwrap();
}

/// The child of the downsampling kill test: reopens the buffer, then adds text items
/// one or three at a time (x going on from the largest kept), flushing now and then,
/// saying `added x` after each call returns, until killed.
#[test]
fn downsample_kill_child() {
    let Ok(dir) = std::env::var(DOWNSAMPLE_CHILD) else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let mut x = kept_texts(&buf).into_iter().max().map_or(0, |m| m + 1);
    for k in 0u64.. {
        for _ in 0..1 + 2 * (k % 2) {
            add_text(&mut buf, x);
            x += 1;
        }
        if k % 7 == 3 {
            buf.flush().unwrap();
        }
        println!("added {x}");
    }
}

/// Promise: `kill -9` at random moments of a buffer whose downsampling moves kept items
/// with their values to the tail (copies through the spare slot, chunk ring lapping)
/// leaves a buffer that verifies and opens, with at most `max_size` kept items plus
/// those of the call in flight and a copy cut short, each item whole with its own
/// text, none twice but the one being copied; and adds go on after it.
#[test]
fn kill_9_at_random_moments_of_a_moving_downsampling_buffer_keeps_items_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    create_moving_text_buffer(&path);
    let cycles = std::env::var("REPLAYSTORE_LOOP_KILLS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(40, |n| (n / 25).max(10));
    let mut rng = 0x5eed_u64;
    let mut moved = 0;
    for cycle in 0..cycles {
        let lines = 1 + common::xorshift(&mut rng) % 40;
        common::run_child_and_kill_after(
            "downsample_kill_child",
            DOWNSAMPLE_CHILD,
            path.to_str().unwrap(),
            lines,
            |_| {},
        );
        let ctx = format!("cycle {cycle}");
        let report = verify(&path).unwrap();
        assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
        let buf = ReplayBuffer::open(&path).unwrap();
        let mut xs = kept_texts(&buf);
        // max_size, the add in flight (up to 3 past it) and a copy cut short.
        assert!(xs.len() <= 16 + 3 + 1, "{ctx}: {} kept", xs.len());
        xs.sort_unstable();
        let twice = xs.windows(2).filter(|w| w[0] == w[1]).count();
        assert!(twice <= 1, "{ctx}: {xs:?}");
        moved = moved.max(buf.stats().moved);
        buf.close().unwrap();
    }
    assert!(moved > 0, "no kept item was ever moved");
    let mut buf = ReplayBuffer::open(&path).unwrap();
    let x = kept_texts(&buf).into_iter().max().unwrap_or(0) + 1;
    for k in 0..40 {
        add_text(&mut buf, x + k);
    }
    assert!(buf.len() <= 16);
    kept_texts(&buf);
}

/// An episode of UnstableBaselines-shaped text steps: `len` rows of one `add_batch`
/// call, each row's `episode` the episode's number and its `obs` a text naming both.
fn add_episode(buf: &mut ReplayBuffer, episode: u32, len: usize) {
    let texts: Vec<String> = (0..len)
        .map(|t| format!("episode {episode} step {t}"))
        .collect();
    let mut bytes = Vec::new();
    let mut offsets = vec![0u64];
    for t in &texts {
        bytes.extend_from_slice(t.as_bytes());
        offsets.push(bytes.len() as u64);
    }
    buf.add_batch(&[
        Column::new("episode", &vec![episode; len]),
        Column::values("obs", DType::U8, &bytes, &offsets),
    ])
    .unwrap();
}

fn episode_schema() -> Schema {
    use replaystore::VarKind;
    Schema::builder()
        .field("episode", DType::U32, &[])
        .variable("obs", VarKind::Str, None)
        .build()
        .unwrap()
}

/// The episodes of a batch of whole fragments, checked whole: each fragment's rows are
/// one episode's, in step order, with their texts.
fn episodes_of(b: &replaystore::Batch, lens: &HashMap<u32, usize>) -> Vec<u32> {
    let offsets = b.get::<u64>("offsets").unwrap();
    let eps = b.get::<u32>("episode").unwrap();
    let mut out = Vec::new();
    for w in offsets.windows(2) {
        let (a, z) = (w[0] as usize, w[1] as usize);
        let e = eps[a];
        assert_eq!(z - a, lens[&e], "episode {e} whole");
        for (t, r) in (a..z).enumerate() {
            assert_eq!(eps[r], e);
            assert_eq!(b.text("obs", r).unwrap(), format!("episode {e} step {t}"));
        }
        out.push(e);
    }
    out
}

#[test]
fn whole_fragments_downsample_and_pop_as_an_episode_buffer_of_text_steps_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    // UnstableBaselines' EpisodeBuffer: at most 60 steps; past that, random whole
    // episodes go; get_batch(batch) pops whole episodes until it has `batch` steps.
    let config = Config::new(episode_schema(), 400)
        .fragments()
        .downsample(60)
        .seed(5);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    let (mut lens, mut ranges) = (HashMap::new(), Vec::new());
    let (mut popped, mut removed_rows) = (Vec::new(), 0u64);
    let mut rng = 17u64;
    for e in 0..60u32 {
        if e == 30 {
            // A reopened buffer rebuilds its fragments with their removed rows.
            buf.close().unwrap();
            buf = ReplayBuffer::open(&path).unwrap();
        }
        let len = 1 + (common::xorshift(&mut rng) % 12) as usize;
        lens.insert(e, len);
        let start = buf.live().end;
        add_episode(&mut buf, e, len);
        ranges.push(start..start + len as u64);
        assert!(buf.len() <= 60, "{} live past max_size", buf.len());
        // Every episode is whole or gone: a row removed means its episode's all are.
        let head = buf.live().start;
        let removed = common::removed_of(&buf);
        for (ep, r) in ranges.iter().enumerate().filter(|(_, r)| r.start >= head) {
            let gone = r.clone().filter(|i| removed.contains(i)).count();
            assert!(
                gone == 0 || gone == r.clone().count(),
                "episode {ep}: {gone} removed"
            );
        }
        if e % 7 == 6 {
            let b = buf
                .sample(Request::fragments_covering(20).remove())
                .unwrap();
            let got = episodes_of(&b, &lens);
            // Whole episodes until 20 steps: without the last one it was short.
            let rows: usize = got.iter().map(|e| lens[e]).sum();
            assert!(rows >= 20 && rows - lens[got.last().unwrap()] < 20);
            removed_rows += rows as u64;
            for ep in &got {
                assert!(!popped.contains(ep), "episode {ep} popped twice");
                popped.push(*ep);
            }
        }
        // A draw of whole fragments never returns a popped or downsampled episode.
        if !buf.is_empty() {
            let b = buf.sample(Request::fragments(16)).unwrap();
            for ep in episodes_of(&b, &lens) {
                assert!(!popped.contains(&ep), "popped episode {ep} drawn");
            }
        }
    }
    let stats = buf.stats();
    assert_eq!(stats.removals.sampled, removed_rows);
    let added: u64 = lens.values().map(|&l| l as u64).sum();
    assert_eq!(
        stats.removals.downsampled,
        added - removed_rows - buf.len(),
        "every row not popped and not live was downsampled"
    );
    buf.close().unwrap();
    assert!(verify(&path).unwrap().problems.is_empty());
}

#[test]
fn fragment_downsampling_and_covering_draws_pick_episodes_uniformly() {
    let dir = tempfile::tempdir().unwrap();
    // Ten episodes of 3 steps fill max_size 30; the 11th removes one, each equally often.
    let mut counts = [0u64; 11];
    for seed in 0..550u64 {
        let path = dir.path().join(format!("b{seed}"));
        let config = Config::new(episode_schema(), 64)
            .fragments()
            .downsample(30)
            .seed(seed);
        let mut buf = ReplayBuffer::create(&path, config).unwrap();
        for e in 0..11 {
            add_episode(&mut buf, e, 3);
        }
        assert_eq!(buf.len(), 30);
        let gone: Vec<u64> = (0..33).filter(|i| !kept(&buf).contains(i)).collect();
        assert_eq!(gone.len(), 3);
        assert_eq!(gone[2] - gone[0], 2, "one whole episode: {gone:?}");
        counts[(gone[0] / 3) as usize] += 1;
        drop(buf);
        std::fs::remove_dir_all(&path).unwrap();
    }
    let chi2 = |c: &[u64], expected: f64| -> f64 {
        c.iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    };
    // 10 degrees of freedom: the 0.999 quantile is 29.6.
    assert!(chi2(&counts, 50.0) < 29.6, "downsampled: {counts:?}");
    // Covering one row takes one episode: uniformly over the whole ones.
    let config = Config::new(episode_schema(), 64)
        .fragments()
        .item_states()
        .seed(3);
    let mut buf = ReplayBuffer::create(dir.path().join("c"), config).unwrap();
    for e in 0..11 {
        add_episode(&mut buf, e, 1 + e as usize % 4);
    }
    buf.remove(&[4]).unwrap(); // episode 2's first row: never drawn whole again
    let mut first = [0u64; 11];
    for _ in 0..5000 {
        let b = buf.sample(Request::fragments_covering(1)).unwrap();
        first[b.get::<u32>("episode").unwrap()[0] as usize] += 1;
    }
    assert_eq!(first[2], 0, "an episode that lost a row is not whole");
    first.swap(2, 10);
    assert!(chi2(&first[..10], 500.0) < 27.9, "covering: {first:?}"); // 9 dof, 0.999
    // Distinct without replacement; more than there are is refused by name.
    let b = buf
        .sample(Request::fragments(10).without_replacement())
        .unwrap();
    let mut eps = b.get::<u32>("episode").unwrap().to_vec();
    eps.dedup();
    eps.sort_unstable();
    eps.dedup();
    assert_eq!(eps.len(), 10);
    let e = buf
        .sample(Request::fragments(11).without_replacement())
        .unwrap_err();
    assert!(matches!(e, Error::InvalidSample(_)), "{e}");
    let e = buf.sample(Request::fragments_covering(1000)).unwrap_err();
    assert!(e.to_string().contains("whole fragments hold"), "{e}");
}

#[test]
fn fragment_downsampling_removes_the_same_episodes_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let run = |path: &Path, reopen: bool| {
        let config = Config::new(episode_schema(), 300)
            .fragments()
            .downsample(40)
            .seed(8);
        let mut buf = ReplayBuffer::create(path, config).unwrap();
        for e in 0..40u32 {
            if reopen && e % 9 == 4 {
                buf.close().unwrap();
                buf = ReplayBuffer::open(path).unwrap();
            }
            add_episode(&mut buf, e, 1 + (e as usize * 7) % 9);
        }
        kept(&buf)
    };
    let a = run(&dir.path().join("a"), false);
    assert!(a.len() <= 40 && a.len() > 30, "{}", a.len());
    assert_eq!(a, run(&dir.path().join("b"), true));
}

#[test]
fn a_fragment_drawn_max_use_times_is_used_up_whole() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(episode_schema(), 64).fragments().max_use(2);
    let mut buf = ReplayBuffer::create(dir.path().join("b"), config).unwrap();
    add_episode(&mut buf, 0, 4);
    buf.sample(Request::fragments(1)).unwrap();
    let states = buf.item_states(&[0, 1, 2, 3]).unwrap();
    assert!(states.iter().all(|s| s.uses == 1 && s.removed.is_none()));
    buf.sample(Request::fragments(1)).unwrap();
    let states = buf.item_states(&[0, 1, 2, 3]).unwrap();
    assert!(
        states.iter().all(|s| s.removed == Some(Cause::UsedUp)),
        "{states:?}"
    );
    assert_eq!(buf.len(), 0);
    assert!(buf.sample(Request::fragments(1)).is_err());
}

#[test]
fn groups_come_back_whole_or_as_windows_uniformly_as_di_engine_groupby_draws() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("env", DType::U8, &[])
        .field("t", DType::U32, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 200).item_states().seed(21);
    let mut buf = ReplayBuffer::create(dir.path().join("b"), config).unwrap();
    // Group g (0..6) gets g + 2 items, interleaved; the ring keeps all 27.
    let mut model: Vec<Vec<u32>> = vec![Vec::new(); 6];
    let mut t = 0u32;
    for round in 0..7 {
        for (g, items) in model.iter_mut().enumerate() {
            if round < g + 2 {
                buf.add(&[Column::scalar("env", &(g as u8)), Column::scalar("t", &t)])
                    .unwrap();
                items.push(t);
                t += 1;
            }
        }
    }
    // Item t is at index t; remove two of group 5: its list skips them.
    let gone = [model[5][1], model[5][4]];
    buf.remove(&[u64::from(gone[0]), u64::from(gone[1])])
        .unwrap();
    model[5].retain(|t| !gone.contains(t));
    let groups_of = |b: &replaystore::Batch| -> Vec<(u8, Vec<u32>)> {
        let (o, env, ts) = (
            b.get::<u64>("offsets").unwrap(),
            b.get::<u8>("env").unwrap(),
            b.get::<u32>("t").unwrap(),
        );
        o.windows(2)
            .map(|w| {
                let (a, z) = (w[0] as usize, w[1] as usize);
                assert!(env[a..z].iter().all(|&e| e == env[a]), "one key per group");
                (env[a], ts[a..z].to_vec())
            })
            .collect()
    };
    // Whole groups: exactly the model's lists; all six, distinct.
    let b = buf
        .sample(Request::groups(6, &["env"]).without_replacement())
        .unwrap();
    let mut got = groups_of(&b);
    got.sort();
    let want: Vec<(u8, Vec<u32>)> = (0..6).map(|g| (g as u8, model[g].clone())).collect();
    assert_eq!(got, want);
    // Uniform over groups, and over window starts: group 4 (6 items) has 5 windows of 2.
    let (mut per_group, mut starts) = ([0f64; 6], [0f64; 5]);
    for _ in 0..3000 {
        let b = buf.sample(Request::groups(1, &["env"]).unroll(2)).unwrap();
        let (g, ts) = groups_of(&b).remove(0);
        per_group[g as usize] += 1.0;
        let items = &model[g as usize];
        let s = items.iter().position(|&x| x == ts[0]).unwrap();
        assert_eq!(ts, items[s..s + 2], "a window of consecutive items");
        if g == 4 {
            starts[s] += 1.0;
        }
    }
    let chi2 = |c: &[f64]| {
        let e = c.iter().sum::<f64>() / c.len() as f64;
        c.iter().map(|x| (x - e).powi(2) / e).sum::<f64>()
    };
    assert!(chi2(&per_group) < 20.5, "groups {per_group:?}"); // 5 dof, 0.999
    assert!(chi2(&starts) < 18.5, "starts {starts:?}"); // 4 dof, 0.999
    // unroll 5: only groups 3, 4 and 5 (5 items left of 7) have five.
    for _ in 0..50 {
        let b = buf.sample(Request::groups(4, &["env"]).unroll(5)).unwrap();
        assert!(groups_of(&b).iter().all(|(g, ts)| *g >= 3 && ts.len() == 5));
    }
    let e = buf
        .sample(Request::groups(4, &["env"]).unroll(5).without_replacement())
        .unwrap_err();
    assert!(e.to_string().contains("3 of the 6 groups"), "{e}");
    // Popping a group removes all of it; the rest stay whole.
    let b = buf.sample(Request::groups(2, &["env"]).remove()).unwrap();
    let popped: Vec<u8> = groups_of(&b).iter().map(|g| g.0).collect();
    assert_eq!(
        buf.len(),
        25 - popped
            .iter()
            .map(|&g| model[g as usize].len() as u64)
            .sum::<u64>()
    );
    let b = buf
        .sample(Request::groups(4, &["env"]).without_replacement())
        .unwrap();
    assert!(
        groups_of(&b)
            .iter()
            .all(|(g, ts)| !popped.contains(g) && *ts == model[*g as usize])
    );
    // A group's key names at least one field (a value, not a shape the builder holds).
    assert!(matches!(
        buf.sample(Request::groups(1, &[])),
        Err(Error::InvalidSample(_))
    ));
    // Under a rate limiter a group is one sample: MinSize holds back before 30 items.
    let schema = Schema::builder()
        .field("env", DType::U8, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 64).rate_limit(replaystore::RateLimit::min_size(30));
    let mut limited = ReplayBuffer::create(dir.path().join("l"), config).unwrap();
    limited
        .add_batch(&[Column::new("env", &[0u8; 20])])
        .unwrap();
    let e = limited.sample(Request::groups(1, &["env"])).unwrap_err();
    assert!(matches!(e, Error::RateLimited { .. }), "{e}");
}

/// Promise: a writer that stops at any call boundary (`abandon`, as `kill -9` between
/// calls) of a downsampling buffer that moves items with values leaves a buffer that
/// verifies sound at every reopen: a removed item the head dropped never comes back
/// over chunks reused since (it loses its stamp, with its eviction record first).
#[test]
fn a_moving_downsampling_buffer_verifies_sound_after_every_abandon() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    create_moving_text_buffer(&path);
    let mut rng = 7u64;
    let mut x = 0;
    for cycle in 0..200 {
        let report = verify(&path).unwrap();
        assert!(report.is_sound(), "cycle {cycle}: {:?}", report.problems);
        let mut buf = ReplayBuffer::open(&path).unwrap();
        kept_texts(&buf);
        for k in 0..common::xorshift(&mut rng) % 10 {
            for _ in 0..1 + 2 * (k % 2) {
                add_text(&mut buf, x);
                x += 1;
            }
            if k % 7 == 3 {
                buf.flush().unwrap();
            }
        }
        buf.abandon();
    }
}

#[test]
fn a_distinct_draw_of_nearly_every_live_item_succeeds_at_every_seed_and_is_uniform() {
    // With removals, a batch close to the live count made rejection a coupon collector
    // that ran out of tries (7 seeds in 40 failed at n = live): it must succeed whenever
    // enough are live, and fail only when they are not.
    for seed in 0..60u64 {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(schema(), 200).item_states().seed(seed);
        let mut buf = filled(&dir.path().join("b"), config, 200);
        // Few removed (the rejection branch), then most (the list branch).
        for (doomed, live) in [
            ((0..200).step_by(20).collect::<Vec<u64>>(), 190),
            ((0..200).filter(|i| i % 2 == 1).collect(), 90),
        ] {
            buf.remove(&doomed).unwrap();
            let kept = kept(&buf);
            assert_eq!(kept.len(), live);
            for n in [live * 3 / 4, live - 1, live] {
                let got = buf.sample(Request::rows(n).without_replacement()).unwrap();
                let mut ids = got.indices().to_vec();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), n, "seed {seed}, n {n}: duplicates");
                assert!(
                    ids.iter().all(|i| kept.binary_search(i).is_ok()),
                    "seed {seed}"
                );
            }
            let err = buf.sample(Request::rows(live + 1).without_replacement());
            assert!(
                matches!(err, Err(Error::InvalidSample(_))),
                "seed {seed}: {err:?}"
            );
        }
        // A draw that removes takes every live item and leaves none.
        let all = buf.sample(Request::rows(90).remove()).unwrap();
        assert_eq!(all.indices().len(), 90, "seed {seed}");
        assert_eq!(buf.len(), 0);
    }
    // The enumerated draw is uniform: 100 live items, batches of 80, chi-square over
    // how often each is drawn.
    let dir = tempfile::tempdir().unwrap();
    let mut buf = filled(
        &dir.path().join("u"),
        Config::new(schema(), 200).item_states().seed(9),
        200,
    );
    buf.remove(&(0..200).filter(|i| i % 2 == 0).collect::<Vec<u64>>())
        .unwrap();
    let mut counts = HashMap::<u64, u64>::new();
    let draws = 500;
    for _ in 0..draws {
        for &i in buf
            .sample(Request::rows(80).without_replacement())
            .unwrap()
            .indices()
        {
            *counts.entry(i).or_default() += 1;
        }
    }
    assert_eq!(counts.len(), 100);
    let expected = (draws * 80) as f64 / 100.0;
    // Each count is binomial with p = 0.8: its variance is a fifth of the mean.
    let chi2: f64 = counts
        .values()
        .map(|&c| (c as f64 - expected).powi(2) / (expected * 0.2))
        .sum();
    // 99 degrees of freedom: the 0.999 quantile is 148.2.
    assert!(chi2 < 148.2, "chi-square {chi2}");
}

#[test]
fn verify_finds_a_flipped_uses_bit_in_the_item_states() {
    use replaystore::internal::format::lifecycle::{BODY_OFFSET, FILE_NAME, Word};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = filled(&path, Config::new(schema(), 32).max_use(3).seed(4), 20);
    buf.sample(Request::rows(10)).unwrap();
    buf.close().unwrap();
    assert!(verify(&path).unwrap().is_sound());
    // Item 5's word (slot 5): bit 15 of its uses (bits 8..24 of the word) set. The
    // word's check finds the flip; with the check made to match (a crafted word), the
    // rule of max_use still finds a live item holding 32,768+ uses under max_use 3.
    let file = path.join(FILE_NAME);
    let clean = std::fs::read(&file).unwrap();
    let at = BODY_OFFSET + 5 * 8;
    let word = |b: &[u8]| Word(u64::from_le_bytes(b[at..at + 8].try_into().unwrap()));
    let mut bytes = clean.clone();
    bytes[at + 2] ^= 0x80;
    for (bytes, finding) in [
        (bytes.clone(), "flipped bit"),
        (
            {
                let crafted = word(&bytes).in_form(true).0.to_le_bytes();
                bytes[at..at + 8].copy_from_slice(&crafted);
                bytes
            },
            "max_use 3",
        ),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        let report = verify(&path).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.what.contains("slot 5") && p.what.contains(finding)),
            "{finding}: {:?}",
            report.problems
        );
    }
    assert!(word(&clean).uses() < 3);
}

/// Issue 52: without `max_use` no rule bounds a use count, so only the word's check
/// can tell a flipped bit: every bit of a drawn item's word, flipped alone, is found by
/// `verify` at that word's offset, and the buffer is sound again once it is put back.
#[test]
fn verify_finds_every_flipped_bit_of_a_word_without_max_use() {
    use replaystore::internal::format::lifecycle::{BODY_OFFSET, FILE_NAME};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = filled(&path, Config::new(schema(), 32).item_states().seed(4), 40);
    for _ in 0..20 {
        buf.sample(Request::rows(8)).unwrap();
    }
    buf.remove(&[20]).unwrap();
    buf.close().unwrap();
    assert!(verify(&path).unwrap().is_sound());
    let file = path.join(FILE_NAME);
    let original = std::fs::read(&file).unwrap();
    // Item 37 in slot 5 (drawn, live), item 20 in slot 20 (removed), and slot 3's word
    // of item 35, all in their checked form.
    for slot in [5usize, 20, 3] {
        let at = BODY_OFFSET + slot * 8;
        for bit in 0..64 {
            let mut bytes = original.clone();
            bytes[at + bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&file, &bytes).unwrap();
            let report = verify(&path).unwrap();
            assert!(
                report.problems.iter().any(|p| p.offset == at as u64),
                "slot {slot} bit {bit}: {:?}",
                report.problems
            );
        }
    }
    std::fs::write(&file, &original).unwrap();
    assert!(verify(&path).unwrap().is_sound());
}

/// Item state files made before words carried a check (version 1, zeros in bits
/// 4..8) open, draw, remove and close as before and stay version 1: the words this
/// build writes into them carry no check, and `verify` judges them as version 1.
#[test]
fn an_item_state_file_from_before_the_check_is_written_in_its_own_form() {
    use replaystore::internal::format::crc32;
    use replaystore::internal::format::lifecycle::{BODY_OFFSET, FILE_NAME, HEADER_LEN};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    // max_use 8: the 160 draws below leave items live (32 x 8 uses).
    let mut buf = filled(&path, Config::new(schema(), 32).max_use(8).seed(2), 40);
    for _ in 0..10 {
        buf.sample(Request::rows(8)).unwrap();
    }
    buf.close().unwrap();
    // What a build before the check left: version 1 and words without it.
    let file = path.join(FILE_NAME);
    let mut bytes = std::fs::read(&file).unwrap();
    let version = |b: &[u8]| u32::from_le_bytes(b[8..12].try_into().unwrap());
    assert_eq!(version(&bytes), 2);
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32(&bytes[..HEADER_LEN - 4]);
    bytes[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    for word in bytes[BODY_OFFSET..].chunks_exact_mut(8) {
        word[0] &= 0x0F;
    }
    std::fs::write(&file, &bytes).unwrap();
    assert!(verify(&path).unwrap().is_sound());
    let mut buf = ReplayBuffer::open(&path).unwrap();
    let before = buf.item_states(&[36, 37]).unwrap();
    for _ in 0..10 {
        buf.sample(Request::rows(8)).unwrap();
    }
    buf.remove(&[30]).unwrap();
    let after = buf.item_states(&[36, 37]).unwrap();
    assert!(before.iter().zip(&after).all(|(b, a)| a.uses >= b.uses));
    buf.close().unwrap();
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(version(&bytes), 1);
    let words = bytes[BODY_OFFSET..].chunks_exact(8);
    assert!(words.clone().any(|w| w != [0; 8]));
    assert!(words.into_iter().all(|w| w[0] & 0xF0 == 0));
    assert!(verify(&path).unwrap().is_sound());
}

#[test]
fn a_rate_limiter_waiting_for_more_items_than_the_ring_holds_is_refused_at_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let config = Config::new(schema(), 100).rate_limit(replaystore::RateLimit::min_size(1 << 63));
    let e = ReplayBuffer::create(&path, config).map(drop).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidConfig { field: "min_size_to_sample", problem } if problem.contains("capacity 100")),
        "{e}"
    );
    assert!(!path.exists());
    let at_capacity = Config::new(schema(), 100).rate_limit(replaystore::RateLimit::min_size(100));
    ReplayBuffer::create(&path, at_capacity)
        .unwrap()
        .close()
        .unwrap();
}
