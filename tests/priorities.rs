//! Promises of prioritized replay (issue 4): items are drawn in proportion to
//! `(priority + eps)^alpha`; importance weights are `(N * P(i))^-beta / max_j w_j`;
//! updates of items gone since they were sampled are skipped and counted; bad
//! priorities change nothing; priorities survive close, reopen and `kill -9` exactly as
//! items do, and a clean open never rebuilds the tree.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use common::{
    add_range, pretend_reboot, run_child_and_kill_after, run_child_then_kill, schema, xorshift,
};
use replaystore::internal::format::tree::TreeShape;
use replaystore::internal::sumtree::SumTree;
use replaystore::{Config, Error, PriorityConfig, ReplayBuffer, Request, verify};

fn unit(s: &mut u64) -> f64 {
    (xorshift(s) >> 11) as f64 / (1u64 << 53) as f64
}

fn per_buffer(dir: &std::path::Path, cap: u64, alpha: f64, eps: f64, arity: u32) -> ReplayBuffer {
    let config = Config::new(schema(), cap)
        .segment_slots(64)
        .seed(5)
        .priority_config(PriorityConfig { alpha, eps, arity });
    ReplayBuffer::create(dir.join("per"), config).unwrap()
}

/// Upper critical value of chi-square with `df` degrees of freedom at p = 0.001
/// (Wilson-Hilferty; within 1% of the exact quantile for df >= 30).
fn chi_square_critical_0_001(df: f64) -> f64 {
    let z = 3.090_232;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

#[test]
fn sampling_frequencies_match_priorities_to_the_alpha_chi_square() {
    const ITEMS: u64 = 100;
    const DRAWS: usize = 1_000_000;
    const CALL: usize = 1000;
    type Shape = fn(u64) -> f64;
    let shapes: [(&str, Shape); 3] = [
        ("uniform", |_| 1.0),
        ("one dominant", |i| if i == 37 { 1000.0 } else { 1.0 }),
        ("geometric", |i| 0.95f64.powi(i as i32)),
    ];
    let critical = chi_square_critical_0_001((ITEMS - 1) as f64);
    for (arity, stratified) in [(8, false), (2, false), (8, true)] {
        for (name, shape) in shapes {
            let dir = tempfile::tempdir().unwrap();
            let alpha = 0.6;
            let mut buf = per_buffer(dir.path(), ITEMS, alpha, 0.0, arity);
            add_range(&mut buf, 0, ITEMS);
            let indices: Vec<u64> = (0..ITEMS).collect();
            let p: Vec<f64> = indices.iter().map(|&i| shape(i)).collect();
            buf.update_priorities(&indices, &p).unwrap();
            let mut counts = vec![0u64; ITEMS as usize];
            let spec: Request = match stratified {
                true => Request::rows(CALL).prioritized(0.4).stratified(),
                false => Request::rows(CALL).prioritized(0.4).into(),
            };
            let mut batch = replaystore::Batch::default();
            for _ in 0..DRAWS / CALL {
                buf.sample_into(spec, &mut batch).unwrap();
                for &i in batch.indices() {
                    counts[i as usize] += 1;
                }
            }
            let weights: Vec<f64> = p.iter().map(|x| x.powf(alpha)).collect();
            let total: f64 = weights.iter().sum();
            let chi2: f64 = counts
                .iter()
                .zip(&weights)
                .map(|(&o, &wt)| {
                    let e = DRAWS as f64 * wt / total;
                    (o as f64 - e).powi(2) / e
                })
                .sum();
            assert!(
                chi2 < critical,
                "{name}, arity {arity}, stratified {stratified}: chi2 {chi2:.1} >= {critical:.1}"
            );
        }
    }
}

/// What a naive O(N) implementation of the paper says, for the live items of `model`
/// (each `priority + eps`).
fn naive_weight(model: &[(u64, f64)], index: u64, alpha: f64, beta: f64) -> f64 {
    let n = model.len() as f64;
    let total: f64 = model.iter().map(|&(_, q)| q.powf(alpha)).sum();
    let p = |q: f64| q.powf(alpha) / total;
    let max_w = model
        .iter()
        .filter(|&&(_, q)| q.powf(alpha) > 0.0)
        .map(|&(_, q)| (n * p(q)).powf(-beta))
        .fold(0.0, f64::max);
    let q = model.iter().find(|&&(i, _)| i == index).unwrap().1;
    (n * p(q)).powf(-beta) / max_w
}

#[test]
fn importance_weights_match_a_naive_reference() {
    let mut rng = 0x5eed_1234_u64;
    for case in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let cap = 1 + xorshift(&mut rng) % 300;
        let alpha = unit(&mut rng);
        let beta = unit(&mut rng);
        let eps = if case % 2 == 0 { 0.0 } else { 1e-3 };
        let arity = if case % 3 == 0 { 2 } else { 8 };
        let mut buf = per_buffer(dir.path(), cap, alpha, eps, arity);
        // q of every index ever added; new items get the largest q seen (1.0 at start).
        let mut q = Vec::new();
        let mut max_seen = 1.0f64;
        for _round in 0..4 {
            let n = 1 + xorshift(&mut rng) % (cap * 2);
            let r = add_range(&mut buf, q.len() as u64, q.len() as u64 + n);
            q.resize(r.end as usize, max_seen);
            let live: Vec<u64> = buf.live().collect();
            let k = 1 + xorshift(&mut rng) as usize % live.len();
            let picked: Vec<u64> = (0..k)
                .map(|_| live[xorshift(&mut rng) as usize % live.len()])
                .collect();
            let new: Vec<f64> = (0..k).map(|_| unit(&mut rng) * 10.0).collect();
            buf.update_priorities(&picked, &new).unwrap();
            for (&i, &p) in picked.iter().zip(&new) {
                q[i as usize] = p + eps;
                max_seen = max_seen.max(p + eps);
            }
        }
        let model: Vec<(u64, f64)> = buf.live().map(|i| (i, q[i as usize])).collect();
        let got = buf.priorities(&buf.live().collect::<Vec<_>>()).unwrap();
        for (&(i, want), &got) in model.iter().zip(&got) {
            assert!(
                (got - want).abs() <= 1e-9 * want.max(1e-300),
                "case {case}: priority of {i}: {got} vs {want}"
            );
        }
        if model.iter().all(|&(_, q)| q == 0.0) {
            continue;
        }
        let batch = buf.sample(Request::rows(64).prioritized(beta)).unwrap();
        for (&i, &w) in batch.indices().iter().zip(batch.weights()) {
            assert!(buf.live().contains(&i), "case {case}: drew dead {i}");
            assert!(
                q[i as usize] > 0.0 || alpha == 0.0,
                "case {case}: drew zero {i}"
            );
            let want = naive_weight(&model, i, alpha, beta);
            assert!(
                (f64::from(w) - want).abs() <= 1e-5 * want,
                "case {case} (cap {cap}, alpha {alpha}, beta {beta}): weight of {i}: {w} vs {want}"
            );
        }
    }
}

#[test]
fn updates_of_items_evicted_since_sampling_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = per_buffer(dir.path(), 50, 0.6, 0.01, 8);
    add_range(&mut buf, 0, 50);
    let sampled = buf
        .sample(Request::rows(20).prioritized(0.4))
        .unwrap()
        .indices()
        .to_vec();
    // The ring wraps past every sampled item: their slots now hold newer items.
    add_range(&mut buf, 50, 100);
    let before = buf.priorities(&(50..100).collect::<Vec<_>>()).unwrap();
    let done = buf
        .update_priorities(&sampled, &vec![7.0f32; sampled.len()])
        .unwrap();
    assert_eq!((done.applied, done.stale), (0, 20));
    assert_eq!(buf.stats().stale_updates, 20);
    // The newer items in those slots kept their priorities.
    assert_eq!(
        buf.priorities(&(50..100).collect::<Vec<_>>()).unwrap(),
        before
    );
    // A mixed call applies the live ones only, and new items still get max 1.0 + eps:
    // the stale 7.0 was never seen.
    let done = buf
        .update_priorities(&[10, 60, 99], &[3.0, 2.0, 0.5])
        .unwrap();
    assert_eq!((done.applied, done.stale), (2, 1));
    assert_eq!(buf.stats().stale_updates, 21);
    assert_eq!(buf.stats().priority_updates, 2);
    let got = buf.priorities(&[60, 99]).unwrap();
    assert!((got[0] - 2.01).abs() < 1e-12 && (got[1] - 0.51).abs() < 1e-12);
    add_range(&mut buf, 100, 101);
    assert!((buf.priorities(&[100]).unwrap()[0] - 2.01).abs() < 1e-12);
}

#[test]
fn invalid_priorities_are_refused_and_nothing_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = per_buffer(dir.path(), 100, 0.6, 0.0, 8);
    add_range(&mut buf, 0, 10);
    buf.update_priorities(&[0, 1, 2], &[1.0, 2.0, 3.0]).unwrap();
    let all: Vec<u64> = buf.live().collect();
    let before = buf.priorities(&all).unwrap();
    let total = buf.priority_summary().unwrap().total;
    for bad in [f64::NAN, -1.0, f64::INFINITY, -f64::MIN_POSITIVE] {
        let e = buf
            .update_priorities(&[3, 4, 5], &[5.0, bad, 6.0])
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidPriority {
                    position: 1,
                    index: 4,
                    ..
                }
            ),
            "{bad}: {e}"
        );
    }
    let e = buf.update_priorities(&[3, 4], &[5.0f32]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::CountMismatch {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
    let e = buf.update_priorities(&[3, 10], &[5.0, 5.0]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotYetAdded {
                index: 10,
                tail: 10
            }
        ),
        "{e}"
    );
    assert_eq!(buf.priorities(&all).unwrap(), before);
    assert_eq!(buf.priority_summary().unwrap().total, total);
    assert_eq!(buf.stats().priority_updates, 3);
}

#[test]
fn a_tree_whose_total_is_zero_refuses_to_draw_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = per_buffer(dir.path(), 100, 1.0, 0.0, 8);
    assert!(matches!(
        buf.sample(Request::rows(4).prioritized(0.4)),
        Err(Error::Empty)
    ));
    add_range(&mut buf, 0, 30);
    let all: Vec<u64> = buf.live().collect();
    buf.update_priorities(&all, &vec![0.0; 30]).unwrap();
    let e = buf.sample(Request::rows(4).prioritized(0.4)).unwrap_err();
    assert!(matches!(e, Error::ZeroTotalPriority { live: 30 }), "{e}");
    // One item with a priority: every draw is that item, with weight 1.
    buf.update_priorities(&[17], &[0.25]).unwrap();
    let b = buf.sample(Request::rows(16).prioritized(1.0)).unwrap();
    assert!(b.indices().iter().all(|&i| i == 17));
    assert!(b.weights().iter().all(|&w| w == 1.0));
    assert!(matches!(
        buf.sample(Request::rows(4).prioritized(f64::NAN)),
        Err(Error::InvalidSample(_))
    ));
    // A priority so large that a full tree's total could overflow is refused too.
    let e = buf.update_priorities(&[3], &[f64::MAX]).unwrap_err();
    assert!(matches!(e, Error::InvalidPriority { index: 3, .. }), "{e}");

    let plain = dir.path().join("plain");
    let mut buf = ReplayBuffer::create(&plain, Config::new(schema(), 10)).unwrap();
    add_range(&mut buf, 0, 3);
    assert!(matches!(
        buf.sample(Request::rows(1).prioritized(0.4)),
        Err(Error::NotPrioritized { .. })
    ));
    assert!(matches!(
        buf.update_priorities(&[0], &[1.0]),
        Err(Error::NotPrioritized { .. })
    ));
}

#[test]
fn clear_drops_every_priority_and_new_items_start_at_the_largest_seen() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = per_buffer(dir.path(), 64, 0.5, 0.0, 8);
    add_range(&mut buf, 0, 64);
    buf.update_priorities(&[5], &[9.0]).unwrap();
    buf.clear().unwrap();
    assert_eq!(buf.priority_summary().unwrap().total, 0.0);
    add_range(&mut buf, 64, 70);
    assert_eq!(buf.priorities(&[64, 69]).unwrap(), vec![9.0, 9.0]);
    let s = buf.priority_summary().unwrap();
    assert!((s.total - 6.0 * 3.0).abs() < 1e-12, "{s:?}");
    drop(buf);
    assert!(verify(dir.path().join("per")).unwrap().is_sound());
}

#[test]
fn priorities_survive_close_and_a_clean_open_never_rebuilds_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per");
    let mut buf = per_buffer(dir.path(), 1000, 0.7, 1e-6, 8);
    add_range(&mut buf, 0, 1500);
    let live: Vec<u64> = buf.live().collect();
    let p: Vec<f64> = live.iter().map(|&i| (i % 13) as f64 * 0.5).collect();
    buf.update_priorities(&live, &p).unwrap();
    let before = buf.priorities(&live).unwrap();
    let summary = buf.priority_summary().unwrap();
    buf.close().unwrap();

    let mut buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.priorities(&live).unwrap(), before);
    assert_eq!(buf.priority_summary().unwrap(), summary);
    drop(buf);
    assert!(verify(&path).unwrap().is_sound());

    // Damage one parent of the closed buffer. A clean open trusts the file as it is, so
    // the damage is still there afterwards, and verify names the file and the offset.
    let tree = path.join("priorities.tree");
    let shape = TreeShape::new(1000, 8).unwrap();
    let word = shape.levels[1].sum + 3;
    let offset = 4096 + word as u64 * 8;
    let mut bytes = std::fs::read(&tree).unwrap();
    bytes[offset as usize..offset as usize + 8].copy_from_slice(&12345.0f64.to_le_bytes());
    std::fs::write(&tree, &bytes).unwrap();
    drop(ReplayBuffer::open(&path).unwrap());
    let report = verify(&path).unwrap();
    let found = report
        .problems
        .iter()
        .find(|f| f.file == tree && f.offset == offset);
    assert!(found.is_some(), "{:?}", report.problems);
    assert!(found.unwrap().what.contains("12345"), "{found:?}");
}

#[test]
fn a_damaged_priorities_header_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per");
    per_buffer(dir.path(), 100, 0.6, 0.0, 8).close().unwrap();
    let tree = path.join("priorities.tree");
    let mut bytes = std::fs::read(&tree).unwrap();
    bytes[40] ^= 0xff; // alpha, under the header checksum
    std::fs::write(&tree, &bytes).unwrap();
    let e = ReplayBuffer::open(&path).unwrap_err();
    assert!(
        matches!(&e, Error::ChecksumMismatch { file, .. } if *file == tree),
        "{e}"
    );
    std::fs::write(&tree, &bytes[..100]).unwrap();
    let e = ReplayBuffer::open(&path).unwrap_err();
    assert!(
        matches!(&e, Error::Truncated { file, .. } if *file == tree),
        "{e}"
    );
    std::fs::remove_file(&tree).unwrap();
    assert!(ReplayBuffer::open(&path).is_err());
    assert!(!verify(&path).unwrap().is_sound());
}

#[test]
fn the_root_stays_exact_after_ten_million_updates() {
    // Parents are recomputed from their children, never adjusted by deltas: the root must
    // equal a fresh recomputation, and a compensated sum of the leaves, after 10^7
    // updates of values spread over twelve orders of magnitude.
    const LEAVES: usize = 1 << 14;
    const UPDATES: usize = 10_000_000;
    const BATCH: usize = 256;
    let shape = TreeShape::new(LEAVES as u64, 8).unwrap();
    let tree = SumTree::<8>::new(shape.clone());
    let mut w = vec![0.0; shape.words];
    tree.rebuild(&mut w);
    let mut leaves = vec![0.0f64; LEAVES];
    let mut rng = 99u64;
    let mut slots = vec![0usize; BATCH];
    let mut values = vec![0.0f64; BATCH];
    let mut scratch = Vec::new();
    for _ in 0..UPDATES / BATCH {
        for (s, v) in slots.iter_mut().zip(values.iter_mut()) {
            *s = (xorshift(&mut rng) as usize) % LEAVES;
            *v = 10f64.powf(unit(&mut rng) * 12.0 - 6.0);
            leaves[*s] = *v;
        }
        tree.update(&mut w, &slots, &values, &mut scratch);
    }
    let root = tree.total(&w);
    let mut fresh = w.clone();
    tree.rebuild(&mut fresh);
    assert_eq!(root.to_bits(), tree.total(&fresh).to_bits());
    // Neumaier's compensated sum as the exact reference.
    let (mut sum, mut c) = (0.0f64, 0.0f64);
    for &x in &leaves {
        let t = sum + x;
        c += if sum.abs() >= x.abs() {
            (sum - t) + x
        } else {
            (x - t) + sum
        };
        sum = t;
    }
    let exact = sum + c;
    assert!(
        (root - exact).abs() <= 1e-9 * exact,
        "root {root} vs exact {exact}"
    );
    assert_eq!(tree.check(&w, 5), vec![]);
    let min = leaves
        .iter()
        .copied()
        .filter(|&x| x > 0.0)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(tree.min(&w), min);
}

/// Priority a crash child gives item `i` in its `round`-th update: at most 1.0, so the
/// largest priority seen stays 1.0 and items never updated read exactly 1.0.
fn crash_priority(i: u64, round: u64) -> f64 {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    ((h >> 40) % 1000 + 1) as f64 / 1000.0
}

const CRASH_ENV: &str = "REPLAYSTORE_PER_CRASH_CHILD";
const CRASH_CAP: u64 = 300;

/// The child: adds items and updates priorities forever, announcing each update before
/// making it and acknowledging it after. Runs only when re-executed by the parent.
#[test]
fn per_crash_child() {
    let Ok(mode) = std::env::var(CRASH_ENV) else {
        return;
    };
    let (dir, seed) = mode.split_once(':').unwrap();
    let mut rng: u64 = seed.parse().unwrap();
    let mut buf = ReplayBuffer::open(dir).unwrap();
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    let mut round = rng;
    loop {
        match xorshift(&mut rng) % 10 {
            0 => {
                let next = buf.live().end;
                let n = 1 + xorshift(&mut rng) % 20;
                writeln!(out, "add {n}").unwrap();
                out.flush().unwrap();
                add_range(&mut buf, next, next + n);
                writeln!(out, "added {}", next + n).unwrap();
            }
            1 if xorshift(&mut rng).is_multiple_of(20) => buf.flush().unwrap(),
            _ => {
                let live = buf.live();
                if live.is_empty() {
                    continue;
                }
                let k = 1 + xorshift(&mut rng) % 8;
                round += 1;
                let idx: Vec<u64> = (0..k)
                    .map(|_| live.start + xorshift(&mut rng) % (live.end - live.start))
                    .collect();
                let p: Vec<f64> = idx.iter().map(|&i| crash_priority(i, round)).collect();
                let list = idx.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
                writeln!(out, "begin {round} {list}").unwrap();
                out.flush().unwrap();
                buf.update_priorities(&idx, &p).unwrap();
                writeln!(out, "done {round}").unwrap();
            }
        }
        out.flush().unwrap();
    }
}

#[test]
fn kill_9_loses_no_acknowledged_priority_update() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per");
    per_buffer(dir.path(), CRASH_CAP, 0.6, 0.0, 8)
        .close()
        .unwrap();
    let mut rng = 0xfeed_f00d_u64;
    // What each index's priority must be (acknowledged), and what it may also be (an
    // update cut short by the kill).
    let mut acked: std::collections::HashMap<u64, f64> = Default::default();
    let (mut updates_seen, mut tail) = (0u64, 0u64);
    for cycle in 0..100 {
        let mut pending: Option<(u64, Vec<u64>)> = None;
        let wait_for = 1 + xorshift(&mut rng) % 2000;
        let seed = xorshift(&mut rng);
        run_child_and_kill_after(
            "per_crash_child",
            CRASH_ENV,
            &format!("{}:{seed}", path.display()),
            wait_for,
            |line| {
                // libtest may print its own header on the same line: start at the keyword.
                let line = ["begin ", "done "]
                    .iter()
                    .find_map(|k| line.find(k).map(|at| &line[at..]))
                    .unwrap_or("");
                let mut words = line.split_whitespace();
                match (words.next(), words.next(), words.next()) {
                    (Some("begin"), Some(r), Some(list)) => {
                        let idx = list.split(',').map(|x| x.parse().unwrap()).collect();
                        pending = Some((r.parse().unwrap(), idx));
                    }
                    (Some("done"), Some(_), _) => {
                        updates_seen += 1;
                        let (round, idx) = pending.take().unwrap();
                        for i in idx {
                            acked.insert(i, crash_priority(i, round));
                        }
                    }
                    _ => {}
                }
            },
        );

        let report = verify(&path).unwrap();
        assert!(report.is_sound(), "cycle {cycle}: {:?}", report.problems);
        let mut buf = ReplayBuffer::open(&path).unwrap();
        let live: Vec<u64> = buf.live().collect();
        let got = buf.priorities(&live).unwrap();
        let mut total = 0.0;
        for (&i, &g) in live.iter().zip(&got) {
            let want = acked.get(&i).copied().unwrap_or(1.0);
            let cut_short = pending
                .as_ref()
                .filter(|(_, idx)| idx.contains(&i))
                .map(|(round, _)| crash_priority(i, *round));
            let close = |x: f64| (g - x).abs() <= 1e-9 * x;
            assert!(
                close(want) || cut_short.is_some_and(close),
                "cycle {cycle}: priority of {i} is {g}, acknowledged {want}, cut short {cut_short:?}"
            );
            if let Some(x) = cut_short.filter(|&x| close(x)) {
                acked.insert(i, x);
            }
            total += g.powf(0.6);
        }
        let s = buf.priority_summary().unwrap();
        assert!(
            (s.total - total).abs() <= 1e-9 * total,
            "cycle {cycle}: root {} vs leaves {total}",
            s.total
        );
        // The tree serves draws of live items only.
        let b = buf.sample(Request::rows(64).prioritized(0.4)).unwrap();
        assert!(b.indices().iter().all(|i| live.contains(i)));
        drop(buf);
        let report = verify(&path).unwrap();
        assert!(report.is_sound(), "cycle {cycle}: {:?}", report.problems);
        acked.retain(|&i, _| i >= live.first().copied().unwrap_or(0));
        tail = live.last().map_or(0, |&l| l + 1);
    }
    assert!(
        updates_seen > 1000,
        "only {updates_seen} updates acknowledged"
    );
    assert!(
        tail > 2 * CRASH_CAP,
        "the ring should have wrapped (tail {tail})"
    );
}

/// The reboot child: 200 items, 100 priorities, flush; then more items and updates
/// that a power loss may take away.
#[test]
fn per_reboot_child() {
    let Ok(dir) = std::env::var("REPLAYSTORE_PER_REBOOT_CHILD") else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    add_range(&mut buf, 0, 200);
    let first: Vec<u64> = (0..100).collect();
    buf.update_priorities(&first, &vec![0.5; 100]).unwrap();
    buf.flush().unwrap();
    add_range(&mut buf, 200, 250);
    buf.update_priorities(&[0, 220], &[0.25, 0.75]).unwrap();
    println!("marker=done");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn after_a_reboot_flushed_priorities_survive_and_the_tree_covers_only_live_items() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per");
    per_buffer(dir.path(), 400, 0.6, 0.0, 8).close().unwrap();
    run_child_then_kill("per_reboot_child", "REPLAYSTORE_PER_REBOOT_CHILD", &path);
    pretend_reboot(&path.join("MANIFEST"));
    let mut buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.live(), 0..200);
    let got = buf.priorities(&(0..200).collect::<Vec<_>>()).unwrap();
    // Item 0's later update may or may not have reached the disk; the rest are as flushed.
    assert!(
        (got[0] - 0.5).abs() < 1e-9 || (got[0] - 0.25).abs() < 1e-9,
        "{}",
        got[0]
    );
    assert!(got[1..100].iter().all(|&g| (g - 0.5).abs() < 1e-9));
    assert!(got[100..].iter().all(|&g| (g - 1.0).abs() < 1e-9));
    // Items 200..250 are gone, and so are their leaves: the root is the live items' sum.
    let total: f64 = got.iter().map(|g| g.powf(0.6)).sum();
    let s = buf.priority_summary().unwrap();
    assert!(
        (s.total - total).abs() <= 1e-9 * total,
        "{} vs {total}",
        s.total
    );
    drop(buf);
    assert!(verify(&path).unwrap().is_sound());
}

#[test]
fn a_damaged_tree_is_an_error_at_draw_time_never_a_nan_weight() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per");
    let mut buf = per_buffer(dir.path(), 64, 0.6, 0.0, 8);
    add_range(&mut buf, 0, 64);
    buf.close().unwrap();
    let tree = path.join("priorities.tree");
    let shape = TreeShape::new(64, 8).unwrap();
    let clean = std::fs::read(&tree).unwrap();
    let word_at = |w: usize| 4096 + w * 8;

    // Every leaf NaN with the parents intact (each descent lands on a damaged leaf), or
    // a NaN in the top node (the root is not finite).
    let every_leaf: Vec<usize> = (0..64).map(|s| shape.leaves().sum + s).collect();
    for words in [every_leaf, vec![shape.levels[0].sum]] {
        let mut bytes = clean.clone();
        for w in words {
            let at = word_at(w);
            bytes[at..at + 8].copy_from_slice(&f64::NAN.to_le_bytes());
        }
        std::fs::write(&tree, &bytes).unwrap();
        let mut buf = ReplayBuffer::open(&path).unwrap();
        let e = buf.sample(Request::rows(8).prioritized(0.4)).unwrap_err();
        assert!(
            matches!(&e, Error::Corrupt { file, .. } if *file == tree),
            "{e}"
        );
    }
    assert!(!verify(&path).unwrap().is_sound());
}

/// A batch's fields as columns with the batch dimension first.
fn columns_of(b: &replaystore::Batch) -> Vec<replaystore::Column<'_>> {
    b.fields()
        .iter()
        .map(|f| replaystore::Column::from_bytes(f.name(), f.dtype(), &f.shape(), f.bytes()))
        .collect()
}

#[test]
fn adds_may_bring_their_own_priorities_and_a_bad_one_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = per_buffer(dir.path(), 10, 1.0, 0.0, 8);
    let it = common::item(0);
    assert_eq!(
        buf.add_with_priority(&common::columns(&it), 0.25).unwrap(),
        0
    );
    assert_eq!(buf.priorities(&[0]).unwrap(), vec![0.25]);
    let e = buf
        .add_with_priority(&common::columns(&it), f64::NAN)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidPriority { index: 1, .. }), "{e}");
    assert_eq!(buf.len(), 1);

    // A batch of 3 rows: 3 priorities, or nothing is added.
    let batch = |from: u64, n: u64| {
        let d = tempfile::tempdir().unwrap();
        let mut scratch = per_buffer(d.path(), 64, 1.0, 0.0, 8);
        let r = add_range(&mut scratch, from, from + n);
        scratch.get_many(&r.collect::<Vec<_>>()).unwrap()
    };
    let b = batch(1, 3);
    let cols = columns_of(&b);
    let e = buf
        .add_batch_with_priorities(&cols, &[1.0, 2.0])
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::CountMismatch {
                expected: 3,
                got: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = buf
        .add_batch_with_priorities(&cols, &[1.0, -2.0, 3.0])
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidPriority {
                position: 1,
                index: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(buf.len(), 1);
    assert_eq!(
        buf.add_batch_with_priorities(&cols, &[1.0, 2.0, 3.0])
            .unwrap(),
        1..4
    );
    assert_eq!(buf.priorities(&[1, 2, 3]).unwrap(), vec![1.0, 2.0, 3.0]);
    // The largest priority seen is what a plain add gets.
    add_range(&mut buf, 4, 5);
    assert_eq!(buf.priorities(&[4]).unwrap(), vec![3.0]);
    // Longer than the capacity: the newest rows keep their own priorities.
    let b = batch(5, 12);
    let cols = columns_of(&b);
    let p: Vec<f64> = (0..12).map(|k| 0.5 + k as f64).collect();
    assert_eq!(buf.add_batch_with_priorities(&cols, &p).unwrap(), 5..17);
    assert_eq!(buf.live(), 7..17);
    let got = buf.priorities(&(7..17).collect::<Vec<_>>()).unwrap();
    assert_eq!(got, p[2..].to_vec());
    assert_eq!(buf.stats().stale_updates, 0);
    common::assert_live_items_intact(&buf);
}
