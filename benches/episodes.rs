//! Episode benches (issue 6): W1 transitions read from episodic rows against the plain
//! W1 buffer of docs/WORKLOADS.md.
//! - `w1_plain/sample256`: the plain W1 buffer (obs and next_obs stored in each row);
//! - `w1_episodic/transitions256`: episodes of 1,000 steps stored one row per step
//!   (obs once, the step header instead of next_obs), 256 transitions;
//! - `w1_episodic/nstep3_256`: the same with 3-step returns (gamma 0.99);
//! - `w1_episodic/sequences32x40`: 32 sequences of 20 burn-in and 20 trained steps,
//!   zero-padded before an episode's first step and past its last (R2D2);
//! - `w1_episodic/nstep3_stack4_256` and `reader_nstep3_stack4_256`: 256 transitions
//!   with 3-step returns and 4 stacked frames, drawn by the writer and by a `Reader`
//!   (issue 31: the reader's rate is to be at least 90% of the writer's);
//! - `w1_episodic/open_writer` and `open_reader_first_draw`: opening the buffer of a
//!   million steps (issue 31: at most 5 ms), and a reader's open with its first draw.
//!
//! - `w2_plain/sample32`: W2 as given (`obs` u8[4,84,84] stored in every row);
//! - `w2_frames/stack4_32`: W2 with native frame stacking (`workloads::W2Frames`: one
//!   84x84 frame per row), 32 transitions with `obs` and `next_obs` of 4 frames each;
//! - `w2_frames/window4_32`: the same transitions as one window of 5 frames each
//!   (`obs` and `next_obs` are its views; `Transitions::window`);
//! - `w2_frames/nstep3_stack4_32` and `reader_nstep3_stack4_32`: 3-step returns with
//!   4 stacked frames, by the writer and by a `Reader`.
//!
//! - `w8_text/add_step`: one W8 step (docs/WORKLOADS.md: text observation, action and
//!   token ids, player and reward) added to an episodic buffer from Rust;
//! - `w8_text/sample_episodes32`: 32 whole games of W8 steps into a `Batch` (values end
//!   to end), beside `w8_text/memcpy_floor`: the same bytes copied piece by piece from
//!   random places of a source far larger than the caches (issue 57: within 3x).
//!
//! Before the criterion output, the bytes per stored item of each layout.
//! `cargo bench --bench episodes`.

#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
#[path = "../bench/src/workloads.rs"]
#[allow(dead_code, reason = "each bench uses some of the workloads")]
mod workloads;
use replaystore::{Batch, Config, Reader, ReplayBuffer, Request};
use workloads::{Chunk, W1Episodes, W2Frames, Workload};

const CAPACITY: u64 = 1_000_000;

fn episodes(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = Workload::W1;
    let mut plain = ReplayBuffer::create(
        tmp.path().join("plain"),
        Config::new(w.schema().expect("schema"), CAPACITY).seed(1),
    )
    .expect("create");
    for from in (0..CAPACITY).step_by(1000) {
        plain
            .add_batch(&Chunk::new(w, from, 1000).columns())
            .expect("add");
    }
    let mut epi = ReplayBuffer::create(
        tmp.path().join("episodic"),
        Config::new(W1Episodes::schema().expect("schema"), CAPACITY)
            .episodic()
            .seed(1),
    )
    .expect("create");
    W1Episodes::default()
        .fill(&mut epi, CAPACITY)
        .expect("fill");
    let per_item = |b: &ReplayBuffer| b.stats().bytes_on_disk as f64 / CAPACITY as f64;
    eprintln!(
        "bytes on disk per item: W1 plain {:.1}, episodic (obs once + step header) {:.1}",
        per_item(&plain),
        per_item(&epi)
    );

    let mut g = c.benchmark_group("w1_plain");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    let mut batch = Batch::default();
    g.bench_function("sample256", |b| {
        b.iter(|| plain.sample_into(256, &mut batch).expect("sample"));
    });
    g.finish();

    let mut g = c.benchmark_group("w1_episodic");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    let mut out = Batch::default();
    let one = Request::transitions(256, &["obs"]);
    g.bench_function("transitions256", |b| {
        b.iter(|| epi.sample_into(one, &mut out).expect("sample"));
    });
    let three = Request::transitions(256, &["obs"]).nstep(3, 0.99);
    g.bench_function("nstep3_256", |b| {
        b.iter(|| epi.sample_into(three, &mut out).expect("sample"));
    });
    // R2D2's draw: 32 sequences of 20 trained steps after 20 of burn-in, padded past an
    // episode's ends (the padding is zeroed in place).
    let r2d2 = Request::sequences(32, 20, &["obs"]).burn_in(20);
    g.bench_function("sequences32x40", |b| {
        b.iter(|| epi.sample_into(r2d2, &mut out).expect("sample"));
    });
    // Issue 31: a reader draws the writer's transitions (here in this process, from the
    // same page cache a reader process maps) at the writer's rate.
    let per = Request::transitions(256, &["obs"]).nstep(3, 0.99).stack(4);
    g.bench_function("nstep3_stack4_256", |b| {
        b.iter(|| epi.sample_into(per, &mut out).expect("sample"));
    });
    let path = tmp.path().join("episodic");
    let mut reader = Reader::open(&path).expect("reader");
    g.bench_function("reader_nstep3_stack4_256", |b| {
        b.iter(|| reader.sample_into(per, &mut out).expect("sample"));
    });
    // Opening the buffer of a million steps: the writer's open (the episode table read
    // from each episode's last row), and a reader's open with its first draw (the same
    // walk for its own table).
    epi.close().expect("close");
    g.bench_function("open_writer", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let t = std::time::Instant::now();
                let buf = ReplayBuffer::open(&path).expect("open");
                spent += t.elapsed();
                buf.close().expect("close");
            }
            spent
        });
    });
    g.bench_function("open_reader_first_draw", |b| {
        b.iter(|| {
            let mut r = Reader::open(&path).expect("reader");
            r.sample_into(per, &mut out).expect("sample");
        });
    });
    g.finish();
}

fn frames(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = Workload::W2;
    let cap = w.capacity();
    let mut plain = ReplayBuffer::create(
        tmp.path().join("plain"),
        Config::new(w.schema().expect("schema"), cap).seed(1),
    )
    .expect("create");
    for from in (0..cap).step_by(100) {
        plain
            .add_batch(&Chunk::new(w, from, 100).columns())
            .expect("add");
    }
    let mut stacked = ReplayBuffer::create(
        tmp.path().join("frames"),
        Config::new(W2Frames::schema().expect("schema"), cap)
            .episodic()
            .seed(1),
    )
    .expect("create");
    W2Frames::default().fill(&mut stacked, cap).expect("fill");
    let (a, b) = (plain.stats().bytes_on_disk, stacked.stats().bytes_on_disk);
    eprintln!(
        "W2 bytes on disk: as given {a} ({:.0} per item), one frame per row {b} ({:.0} per \
         item): {:.2}x less",
        a as f64 / cap as f64,
        b as f64 / cap as f64,
        a as f64 / b as f64
    );

    let mut g = c.benchmark_group("w2_plain");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    let mut batch = Batch::default();
    g.bench_function("sample32", |b| {
        b.iter(|| plain.sample_into(32, &mut batch).expect("sample"));
    });
    g.finish();
    drop(plain);

    let mut g = c.benchmark_group("w2_frames");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    let mut out = Batch::default();
    let spec = Request::transitions(32, &["obs"]).stack(4);
    g.bench_function("stack4_32", |b| {
        b.iter(|| stacked.sample_into(spec, &mut out).expect("sample"));
    });
    let spec = spec.window();
    g.bench_function("window4_32", |b| {
        b.iter(|| stacked.sample_into(spec, &mut out).expect("sample"));
    });
    let per = Request::transitions(32, &["obs"]).nstep(3, 0.99).stack(4);
    g.bench_function("nstep3_stack4_32", |b| {
        b.iter(|| stacked.sample_into(per, &mut out).expect("sample"));
    });
    let mut reader = Reader::open(tmp.path().join("frames")).expect("reader");
    g.bench_function("reader_nstep3_stack4_32", |b| {
        b.iter(|| reader.sample_into(per, &mut out).expect("sample"));
    });
    g.finish();
}

/// W8's steps, deterministic: (observation, action, tokens) of step `i`, lengths spread
/// as the workload's (0.5-8 KiB, 20-400 bytes, 64-2,048 ids).
fn w8_step(i: u64) -> (String, String, Vec<i32>) {
    let mix = |x: u64| x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    let obs_len = 512 + (mix(i) % 7680) as usize;
    let act_len = 20 + (mix(i ^ 1) % 381) as usize;
    let tok_len = 64 + (mix(i ^ 2) % 1985) as i32;
    let obs = "o".repeat(obs_len);
    (obs, "a".repeat(act_len), (0..tok_len).collect())
}

fn w8(c: &mut Criterion) {
    use replaystore::{Column, DType, Schema, VarKind};
    let tmp = tempfile::tempdir().expect("tempdir");
    let schema = Schema::builder()
        .field("pid", DType::I8, &[])
        .field("reward", DType::F32, &[])
        .variable("obs", VarKind::Str, None)
        .variable("act", VarKind::Str, None)
        .variable("tokens", VarKind::Ragged(DType::I32), None)
        .build()
        .expect("schema");
    const STEPS: u64 = 20_000;
    let config = Config::new(schema, STEPS)
        .episodic()
        .seed(8)
        .heap_bytes(STEPS * (12 << 10))
        .evict_for_room();
    let mut buf = ReplayBuffer::create(tmp.path().join("w8"), config).expect("create");
    let mut i = 0u64;
    let mut add_game = |buf: &mut ReplayBuffer| {
        let turns = 4 + i % 9;
        let (o, _, _) = w8_step(i);
        buf.add_reset(&[Column::text("obs", &o)]).expect("reset");
        for t in 0..turns {
            i += 1;
            let (o, a, k) = w8_step(i);
            let (pid, r) = ((t % 2) as i8, if t + 1 == turns { 1.0f32 } else { 0.0 });
            let step = [
                Column::scalar("pid", &pid),
                Column::scalar("reward", &r),
                Column::text("obs", &o),
                Column::text("act", &a),
                Column::ragged("tokens", &k),
            ];
            buf.add_step(&step, t + 1 == turns, false).expect("step");
        }
    };
    while buf.len() < STEPS - 16 {
        add_game(&mut buf);
    }
    buf.flush().expect("flush");
    let mut g = c.benchmark_group("w8_text");
    g.measurement_time(Duration::from_secs(5));
    let mut batch = Batch::default();
    let request = Request::episodes(32);
    buf.sample_into(request, &mut batch).expect("sample");
    let bytes: u64 = ["obs", "act", "tokens"]
        .iter()
        .filter_map(|n| batch.values(n))
        .map(|v| v.bytes().len() as u64)
        .sum();
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("sample_episodes32", |b| {
        b.iter(|| buf.sample_into(request, &mut batch).expect("sample"))
    });
    // The floor: as many pieces of the same sizes, each from a random place of 1 GiB.
    let pieces: Vec<usize> = (0..batch.len())
        .flat_map(|r| {
            ["obs", "act", "tokens"].map(|n| {
                batch
                    .values(n)
                    .and_then(|v| v.value(r))
                    .map_or(0, <[u8]>::len)
            })
        })
        .collect();
    let source = vec![1u8; 1 << 30];
    let mut dst = vec![0u8; bytes as usize];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    g.bench_function("memcpy_floor", |b| {
        b.iter(|| {
            let mut at = 0;
            for &n in &pieces {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let from = (seed % ((1u64 << 30) - 8192)) as usize;
                if let (Some(d), Some(s)) = (dst.get_mut(at..at + n), source.get(from..from + n)) {
                    d.copy_from_slice(s);
                }
                at += n;
            }
            std::hint::black_box(&dst);
        })
    });
    // Steps of one long open episode, into a ring that has lapped (values and rows).
    g.throughput(Throughput::Elements(1));
    let (o, _, _) = w8_step(0);
    buf.add_reset(&[Column::text("obs", &o)]).expect("reset");
    // Made beforehand: the bench times the add, not the making of its values.
    let pool: Vec<(String, String, Vec<i32>)> = (0..64).map(w8_step).collect();
    let mut k = 0usize;
    g.bench_function("add_step", |b| {
        b.iter(|| {
            k += 1;
            let (o, a, t) = pool.get(k % pool.len()).expect("a step of the pool");
            let (pid, r) = ((k % 2) as i8, 0.0f32);
            let step = [
                Column::scalar("pid", &pid),
                Column::scalar("reward", &r),
                Column::text("obs", o),
                Column::text("act", a),
                Column::ragged("tokens", t),
            ];
            buf.add_step(&step, false, false).expect("step")
        })
    });
    g.finish();
}

criterion_group!(benches, episodes, frames, w8);
criterion_main!(benches);
