//! Checkpoint benches (issue 5, docs/WORKLOADS.md W1-save/W1-load, W2-save/W2-load):
//! prioritized W1 (10^6 x 192 B) and W2 (10^5 x 28 KB) buffers at 1/16, 1/4 and full.
//!
//! - `save/<workload>/<fill>`: `get_state()` after 32 new items (the flush of those items
//!   is part of it, as in a training loop that checkpoints between steps);
//! - `load/<workload>/<fill>`: what a fresh process does to resume, `open_at_state`,
//!   after the live buffer ran 32 items past the checkpoint;
//! - `set_state/<workload>/<fill>`: `set_state` on the open buffer, likewise.
//!
//! Between timed runs (untimed): the items are added, which makes the writer copy the
//! segment a snapshot shares, and the snapshot is deleted. Before the criterion output,
//! a table gives per fill the data size, the bytes `get_state` wrote to disk
//! (`/proc/self/io` write_bytes), and the writer's pause on its first store after a
//! checkpoint (the copy of one segment).
//!
//! `cargo bench --bench state`; `-- save/w2` for one family.

#![allow(
    clippy::indexing_slicing,
    reason = "the bench indexes its own synthetic arrays, sized by construction"
)]
#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
#[path = "../bench/src/workloads.rs"]
#[allow(dead_code, reason = "each bench uses some of the workloads")]
mod workloads;
use replaystore::{Config, ReplayBuffer, State};
use workloads::{Workload, written_bytes};

/// Items added between checkpoints.
const STEP: u64 = 32;

fn config(w: Workload) -> Config {
    Config::new(w.schema().expect("schema"), w.capacity())
        .prioritized(0.6, 1e-6)
        .seed(5)
}

/// Adds items until the buffer has given out `to` indices.
fn fill_to(w: Workload, buf: &mut ReplayBuffer, to: u64) {
    let end = buf.live().end;
    w.fill(buf, to.saturating_sub(end)).expect("add");
}

/// Waits for the previous run's background work (letting go of replaced segment files)
/// and the writeback it caused: real checkpoints are minutes apart, so each timed run
/// starts from a settled machine rather than from the tail of the run before.
fn settle() {
    std::thread::sleep(Duration::from_millis(50));
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A group of 10 samples of very few iterations: every iteration also does untimed work
/// (adds that copy a segment, deleting a snapshot) far longer than what it times, so
/// criterion's usual iteration counts would take minutes.
fn few_runs<'a>(
    c: &'a mut Criterion,
    what: &str,
    w: Workload,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(format!("{what}/{}", w.name().to_lowercase()));
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_millis(1));
    g
}

/// One workload at one fill: the side table, then the criterion benches.
fn bench_fill(
    c: &mut Criterion,
    w: Workload,
    buf: &mut Option<ReplayBuffer>,
    dir: &std::path::Path,
    label: &str,
) {
    let data_bytes = {
        let b = buf.as_ref().expect("open");
        b.len() * b.schema().item_bytes() as u64
    };
    // Side table: bytes written by get_state, and the first store's pause after it.
    let (mut written, mut pause, mut save) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        let b = buf.as_mut().expect("open");
        let end = b.live().end;
        fill_to(w, b, end + STEP);
        b.flush().expect("flush");
        let before = written_bytes();
        settle();
        let t = Instant::now();
        let state = b.get_state().expect("get_state");
        save.push(t.elapsed().as_secs_f64() * 1e3);
        written.push((written_bytes() - before) as f64);
        settle();
        let t = Instant::now();
        let end = b.live().end;
        fill_to(w, b, end + 1);
        pause.push(t.elapsed().as_secs_f64() * 1e3);
        b.delete_snapshot(&state.name).expect("delete");
    }
    eprintln!(
        "{:<3} {:<5} data {:>9.1} MB  get_state (flushed first) {:>6.2} ms  wrote {:>8.1} KB ({:.3}% of data)  first store after: {:>6.2} ms",
        w.name().to_lowercase(),
        label,
        data_bytes as f64 / 1e6,
        median(&mut save),
        median(&mut written) / 1e3,
        100.0 * median(&mut written) / data_bytes as f64,
        median(&mut pause),
    );

    let mut g = few_runs(c, "save", w);
    g.bench_function(label, |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let b = buf.as_mut().expect("open");
                let end = b.live().end;
                fill_to(w, b, end + STEP);
                settle();
                let t = Instant::now();
                let state = b.get_state().expect("get_state");
                total += t.elapsed();
                b.delete_snapshot(&state.name).expect("delete");
            }
            total
        });
    });
    g.finish();

    let base: State = buf
        .as_mut()
        .expect("open")
        .get_state_named("base")
        .expect("base");
    let mut g = few_runs(c, "load", w);
    g.bench_function(label, |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut b = buf.take().expect("open");
                let end = b.live().end;
                fill_to(w, &mut b, end + STEP);
                b.close().expect("close");
                settle();
                let t = Instant::now();
                let b = ReplayBuffer::open_at_state(dir, &base).expect("open_at_state");
                total += t.elapsed();
                *buf = Some(b);
            }
            total
        });
    });
    g.finish();
    let mut g = few_runs(c, "set_state", w);
    g.bench_function(label, |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let b = buf.as_mut().expect("open");
                let end = b.live().end;
                fill_to(w, b, end + STEP);
                settle();
                let t = Instant::now();
                b.set_state(&base).expect("set_state");
                total += t.elapsed();
            }
            total
        });
    });
    g.finish();
    let b = buf.as_mut().expect("open");
    b.set_state(&base).expect("set_state");
    b.delete_snapshot("base").expect("delete");
}

fn checkpoints(c: &mut Criterion) {
    for w in [Workload::W1, Workload::W2] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join(w.name());
        let mut buf = Some(ReplayBuffer::create(&dir, config(w)).expect("create"));
        for (label, fill) in [("1-16", 16), ("1-4", 4), ("full", 1)] {
            let to = w.capacity() / fill;
            let b = buf.as_mut().expect("open");
            fill_to(w, b, to);
            b.flush().expect("flush");
            bench_fill(c, w, &mut buf, &dir, label);
        }
    }
}

criterion_group!(benches, checkpoints);
criterion_main!(benches);
