//! Prioritized replay benches (issue 4, docs/WORKLOADS.md):
//! - `tree/...`: the sum-tree alone, binary against 8-ary, at 2^20 and 2^24 leaves:
//!   sample-256 (level-synchronous descent), update-256, and a whole PER iteration
//!   (sample 256 + importance weights + 256 new priorities, `powf` included);
//! - `w1_per/...`: W1 (capacity 10^6): sample(256) with weights, all fields gathered,
//!   then update_priorities(256 new random priorities); both arities, and stratified;
//! - `w2_per/...`: W2 (capacity 10^5, 2.8 GB): the same with batches of 32.
//!
//! `cargo bench --bench per` runs all; `-- tree/` one family. Random inputs come from
//! pools generated before the timed region.

#![allow(
    clippy::indexing_slicing,
    reason = "the bench indexes its own synthetic arrays, sized by construction"
)]
#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use replaystore::internal::format::tree::TreeShape;
use replaystore::internal::sumtree::SumTree;
use replaystore::{Batch, Config, PriorityConfig, Request};

mod common;
use common::{W1_CAP, W1Data, W2_CAP, w1_fill, w1_schema, w2_add, w2_schema};

const ALPHA: f64 = 0.6;
const BETA: f64 = 0.4;
const POOL: usize = 1 << 20;

/// SplitMix64 uniforms in [0, 1).
fn pool(seed: u64) -> Vec<f64> {
    let mut z = seed;
    (0..POOL)
        .map(|_| {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((x ^ (x >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

/// A tree of `leaves` random leaves in memory, and the benches of it.
fn tree_benches<const K: usize>(c: &mut Criterion, leaves: usize, uniforms: &[f64]) {
    let shape = TreeShape::new(leaves as u64, K as u32).expect("shape");
    let tree = SumTree::<K>::new(shape.clone());
    // Anonymous memory advised for huge pages, as the buffer's file mapping is (a plain
    // Vec of this size sits on 4 KiB pages, and the TLB misses would dominate).
    let mut map = memmap2::MmapMut::map_anon(shape.words * 8).expect("map");
    let _ = map.advise(memmap2::Advice::HugePage);
    let w: &mut [f64] = bytemuck::cast_slice_mut(&mut map[..]);
    let slots: Vec<usize> = (0..leaves).collect();
    let values: Vec<f64> = (0..leaves).map(|i| uniforms[i % POOL] + 0.01).collect();
    tree.update(w, &slots, &values, &mut Vec::new());
    let name = format!("tree/{}-ary_2^{}", K, leaves.trailing_zeros());
    let mut g = c.benchmark_group(name);
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    let mut at = 0usize;
    let mut next = |n: usize| {
        at = (at + n) % (POOL - n);
        at
    };
    let mut u = vec![0.0; 256];
    let mut got = vec![0usize; 256];
    let mut vals = vec![0.0; 256];
    g.bench_function("sample256", |b| {
        b.iter(|| {
            let total = tree.total(w);
            let s = next(256);
            for (t, r) in u.iter_mut().zip(&uniforms[s..s + 256]) {
                *t = r * total;
            }
            tree.sample(w, &mut u, &mut got, &mut vals);
            black_box(&got);
        })
    });
    let mut upd_slots = vec![0usize; 256];
    let mut upd_vals = vec![0.0; 256];
    let mut scratch = Vec::new();
    g.bench_function("update256", |b| {
        b.iter(|| {
            let s = next(512);
            for i in 0..256 {
                upd_slots[i] = (uniforms[s + i] * leaves as f64) as usize;
                upd_vals[i] = uniforms[s + 256 + i] + 0.01;
            }
            tree.update(w, &upd_slots, &upd_vals, &mut scratch);
        })
    });
    let mut weights = vec![0f32; 256];
    g.bench_function("per_iteration", |b| {
        b.iter(|| {
            let total = tree.total(w);
            let s = next(512);
            for (t, r) in u.iter_mut().zip(&uniforms[s..s + 256]) {
                *t = r * total;
            }
            tree.sample(w, &mut u, &mut got, &mut vals);
            let min = tree.min(w);
            for (wt, &v) in weights.iter_mut().zip(&vals) {
                *wt = (min / v).powf(BETA) as f32;
            }
            for (nv, r) in upd_vals.iter_mut().zip(&uniforms[s + 256..s + 512]) {
                *nv = (r + 0.01).powf(ALPHA);
            }
            tree.update(w, &got, &upd_vals, &mut scratch);
            black_box(&weights);
        })
    });
    g.finish();
}

fn tree(c: &mut Criterion) {
    let uniforms = pool(7);
    for log in [20u32, 24] {
        tree_benches::<2>(c, 1 << log, &uniforms);
        tree_benches::<8>(c, 1 << log, &uniforms);
    }
}

fn w1_per(c: &mut Criterion) {
    let data = W1Data::new(W1_CAP as usize);
    let uniforms = pool(11);
    let mut g = c.benchmark_group("w1_per");
    g.sample_size(30).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    for (arity, stratified) in [(8, false), (2, false), (8, true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = Config::new(w1_schema(), W1_CAP)
            .seed(1)
            .priority_config(PriorityConfig {
                alpha: ALPHA,
                eps: 1e-6,
                arity,
            });
        let mut buf = w1_fill(dir.path(), "w1per", config, &data);
        let spec: Request = match stratified {
            true => Request::rows(256).prioritized(BETA).stratified(),
            false => Request::rows(256).prioritized(BETA).into(),
        };
        let mut batch = Batch::default();
        let mut at = 0usize;
        let name = format!("{arity}-ary{}", if stratified { "_stratified" } else { "" });
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.sample_into(spec, &mut batch).expect("sample");
                at = (at + 256) % (POOL - 256);
                buf.update_priorities(batch.indices(), &uniforms[at..at + 256])
                    .expect("update");
            })
        });
    }
    g.finish();
}

fn w2_per(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let frames: Vec<u8> = (0..64 * 28_224).map(|i| (i * 7 % 251) as u8).collect();
    let uniforms = pool(13);
    let mut g = c.benchmark_group("w2_per");
    g.sample_size(30).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    let mut state = None;
    g.bench_function("8-ary", |b| {
        let buf = state.get_or_insert_with(|| {
            let config = Config::new(w2_schema(), W2_CAP)
                .seed(2)
                .prioritized(ALPHA, 1e-6);
            let mut buf = replaystore::ReplayBuffer::create(dir.path().join("w2per"), config)
                .expect("create");
            for i in 0..W2_CAP {
                w2_add(&mut buf, &frames, i);
            }
            buf
        });
        let spec = Request::rows(32).prioritized(BETA);
        let mut batch = Batch::default();
        let mut at = 0usize;
        b.iter(|| {
            buf.sample_into(spec, &mut batch).expect("sample");
            at = (at + 32) % (POOL - 32);
            buf.update_priorities(batch.indices(), &uniforms[at..at + 32])
                .expect("update");
        })
    });
    g.finish();
}

criterion_group!(benches, tree, w1_per, w2_per);
criterion_main!(benches);
