//! Sampling over lanes (`Lanes`, issue 7): W1 rows in 4 lanes of 2^18 items each,
//! uniform and prioritized batches of 256 drawn over all lanes into a reused batch.
//! Measures what the split over lanes adds to a one-ring draw of the same size
//! (`one_ring/...`, the same rows in one buffer).
//!
//! `cargo bench --bench lanes`.

#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use replaystore::{Batch, Config, Lanes, ReplayBuffer, Request};

mod common;
use common::{W1Data, w1_schema};

const LANES: usize = 4;
const PER_LANE: usize = 1 << 18;
const BATCH: usize = 256;

fn lanes(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let total = LANES * PER_LANE;
    let data = W1Data::new(total);
    let config = Config::new(w1_schema(), total as u64)
        .seed(1)
        .prioritized(0.6, 1e-6);
    let mut lanes = Lanes::create(dir.path().join("lanes"), config.clone(), LANES).expect("create");
    let mut one = ReplayBuffer::create(dir.path().join("one"), config).expect("create");
    let ids: Vec<usize> = (0..1000).map(|i| i % LANES).collect();
    for i in (0..total).step_by(1000) {
        let n = 1000.min(total - i);
        lanes
            .add_batch(&data.chunk(i, n), ids.get(..n).expect("ids"))
            .expect("add");
        one.add_batch(&data.chunk(i, n)).expect("add");
    }
    let mut g = c.benchmark_group("lanes");
    g.sample_size(20).measurement_time(Duration::from_secs(6));
    g.throughput(Throughput::Elements(1));
    let mut out = Batch::default();
    let uniform = Request::rows(BATCH);
    let per = Request::rows(BATCH).prioritized(0.4);
    g.bench_function("4_lanes/sample256", |b| {
        b.iter(|| {
            lanes
                .sample_into(black_box(uniform), &mut out)
                .expect("sample")
        })
    });
    g.bench_function("4_lanes/per256", |b| {
        b.iter(|| lanes.sample_into(black_box(per), &mut out).expect("sample"))
    });
    g.bench_function("one_ring/sample256", |b| {
        b.iter(|| {
            one.sample_into(black_box(uniform), &mut out)
                .expect("sample")
        })
    });
    g.bench_function("one_ring/per256", |b| {
        b.iter(|| one.sample_into(black_box(per), &mut out).expect("sample"))
    });
    g.finish();
}

criterion_group!(benches, lanes);
criterion_main!(benches);
