//! Random call sequences with crashes, against a model of the buffer: adds (one or a
//! few), priority updates, flushes, snapshots (at most three kept), restores, closes and
//! crashes (`abandon`: the handle dropped as by kill -9, the page cache as it was).
//! After every reopen, and at the end, the buffer must hold exactly what the model
//! holds: the live range, every item's bytes (a function of its index) and every
//! item's priority (alpha 1, eps 0, so priorities read back exactly).
#![no_main]

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use replaystore::{Column, Config, DType, ReplayBuffer, Schema, State};

const CAP: u64 = 24;

#[derive(Clone)]
struct Model {
    live: Range<u64>,
    prio: BTreeMap<u64, f64>,
    /// The largest priority set so far (at least 1): what a new item gets.
    max: f64,
}

fn value(i: u64) -> [u64; 2] {
    [i, i.wrapping_mul(0x9e37_79b9_7f4a_7c15)]
}

fn open(path: &Path) -> ReplayBuffer {
    ReplayBuffer::open(path).expect("reopen")
}

fn check(buf: &ReplayBuffer, m: &Model, step: usize) {
    assert_eq!(buf.live(), m.live, "step {step}: live range");
    let live: Vec<u64> = m.live.clone().collect();
    if live.is_empty() {
        return;
    }
    let batch = buf.get_many(&live).expect("get_many");
    let x = batch.get::<u64>("x").expect("x");
    for (r, &i) in live.iter().enumerate() {
        assert_eq!(&x[2 * r..2 * r + 2], &value(i), "step {step}: item {i}");
    }
    let p = buf.priorities(&live).expect("priorities");
    for (&i, got) in live.iter().zip(p) {
        assert_eq!(Some(&got), m.prio.get(&i), "step {step}: priority of {i}");
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("b");
    let schema = Schema::builder().field("x", DType::U64, &[2]).build().expect("schema");
    let config = Config::new(schema, CAP).segment_slots(8).prioritized(1.0, 0.0).seed(1);
    let mut buf = Some(ReplayBuffer::create(&path, config).expect("create"));
    let mut m = Model { live: 0..0, prio: BTreeMap::new(), max: 1.0 };
    let mut snaps: Vec<(State, Model)> = Vec::new();
    let mut made = 0u32;
    for (step, pair) in data.chunks(2).take(96).enumerate() {
        let (op, arg) = (pair[0] % 8, pair.get(1).copied().unwrap_or(0));
        let b = buf.get_or_insert_with(|| open(&path));
        match op {
            0 | 1 => {
                for _ in 0..1 + arg % 5 {
                    let i = b.add(&[Column::new("x", &value(m.live.end))]).expect("add");
                    assert_eq!(i, m.live.end, "step {step}: index given");
                    m.prio.insert(i, m.max);
                    m.live.end += 1;
                    if m.live.end - m.live.start > CAP {
                        m.prio.remove(&m.live.start);
                        m.live.start += 1;
                    }
                }
            }
            2 if !m.live.is_empty() => {
                let n = m.live.end - m.live.start;
                let picks: Vec<u64> = (0..1 + u64::from(arg % 4))
                    .map(|k| m.live.start + (u64::from(arg) * 7 + k * 5) % n)
                    .collect();
                let p = f64::from(arg) / 4.0 + 0.25;
                b.update_priorities(&picks, &vec![p; picks.len()]).expect("update");
                for i in picks {
                    m.prio.insert(i, p);
                }
                m.max = m.max.max(p);
            }
            3 => b.flush().expect("flush"),
            4 => {
                made += 1;
                let state = b.get_state_named(&format!("s{made}")).expect("get_state");
                snaps.push((state, m.clone()));
                if snaps.len() > 3 {
                    let (old, _) = snaps.remove(0);
                    b.delete_snapshot(&old.name).expect("delete");
                }
            }
            5 if !snaps.is_empty() => {
                let (state, at) = &snaps[usize::from(arg) % snaps.len()];
                b.set_state(state).expect("set_state");
                m = at.clone();
                check(b, &m, step);
            }
            6 => {
                buf.take().expect("open").abandon();
                let b = buf.insert(open(&path));
                check(b, &m, step);
            }
            7 => {
                buf.take().expect("open").close().expect("close");
                let b = buf.insert(open(&path));
                check(b, &m, step);
            }
            _ => {}
        }
    }
    let b = buf.get_or_insert_with(|| open(&path));
    check(b, &m, usize::MAX);
});
