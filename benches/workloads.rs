//! Criterion benches of the standard workloads (docs/WORKLOADS.md): W1 (vector
//! transitions, capacity 10^6) and W2 (Atari frames, capacity 10^5).
//!
//! `cargo bench --bench workloads` runs all; `-- w1/` or `-- w2/` one family.
//! W1 stores `next_obs` as its own field (no episode deduplication yet).
//! Adds are measured in the steady state of a ring that is already full (the one-time
//! first touch of fresh file pages is reported by `first_fill`).
//! `-- reader_ pread_floor` times a reader's draws with rows mapped and with `pread`,
//! beside the two `pread`s per row that the second costs at least.

#![allow(
    clippy::indexing_slicing,
    reason = "the bench indexes its own synthetic arrays, sized by construction"
)]
#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use replaystore::internal::format::row::RowLayout;
use replaystore::internal::format::segment::DATA_OFFSET;
use replaystore::internal::storage::segment_path;
use replaystore::io::{Io, OsIo};
use replaystore::{Batch, Config, Reader, ReplayBuffer, RowAccess};
use std::os::unix::fs::FileExt;

mod common;
use common::{W1_CAP, W1Data, W2_CAP, w1_full, w1_schema, w2_add, w2_schema};

fn w1(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = W1Data::new(W1_CAP as usize);
    let mut buf = w1_full(dir.path(), &data);
    let mut g = c.benchmark_group("w1");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(W1_CAP));
    g.bench_function("add1", |b| {
        b.iter(|| {
            for i in 0..W1_CAP as usize {
                black_box(buf.add(&data.row(i)).expect("add"));
            }
        })
    });
    g.bench_function("addB", |b| {
        b.iter(|| {
            for i in (0..W1_CAP as usize).step_by(1000) {
                black_box(buf.add_batch(&data.chunk(i, 1000)).expect("add"));
            }
        })
    });
    // What the checksums moved out of add cost: sealing and msyncing 10^6 fresh rows.
    g.bench_function("flush_after_1M_adds", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for i in (0..W1_CAP as usize).step_by(1000) {
                    buf.add_batch(&data.chunk(i, 1000)).expect("add");
                }
                let t = Instant::now();
                buf.flush().expect("flush");
                total += t.elapsed();
            }
            total
        })
    });
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    let mut batch = Batch::default();
    // Sealed, so every sampled row is checked against its checksum; then the same draws
    // unchecked, for the check's cost.
    buf.flush().expect("flush");
    g.bench_function("sample256", |b| {
        b.iter(|| buf.sample_into(256, &mut batch).expect("sample"))
    });
    buf.set_read_checks(false);
    g.bench_function("sample256_unchecked", |b| {
        b.iter(|| buf.sample_into(256, &mut batch).expect("sample"))
    });
    buf.set_read_checks(true);
    readers(&mut g, 256, &mut || dir.path().join("w1"));
    g.finish();
    drop(buf);
    w1_removed(c, &data);
    w1_downsample(c, &data);

    // First fill of a fresh buffer: includes the first touch of every file page.
    let mut g = c.benchmark_group("w1_first_fill");
    g.sample_size(10).throughput(Throughput::Elements(W1_CAP));
    g.bench_function("add1", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let d = tempfile::tempdir().expect("tempdir");
                let mut buf =
                    ReplayBuffer::create(d.path().join("w1"), Config::new(w1_schema(), W1_CAP))
                        .expect("create");
                let t = Instant::now();
                for i in 0..W1_CAP as usize {
                    black_box(buf.add(&data.row(i)).expect("add"));
                }
                total += t.elapsed();
            }
            total
        })
    });
    // As `compare.py`'s addB times it: the buffer made inside the timed fill (a library
    // that allocates its ring in its constructor pays for that there), then 10^6 rows
    // in batches of 1,000.
    g.bench_function("addB_with_create", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let d = tempfile::tempdir().expect("tempdir");
                let t = Instant::now();
                let mut buf =
                    ReplayBuffer::create(d.path().join("w1"), Config::new(w1_schema(), W1_CAP))
                        .expect("create");
                for i in (0..W1_CAP as usize).step_by(1000) {
                    black_box(buf.add_batch(&data.chunk(i, 1000)).expect("add"));
                }
                total += t.elapsed();
                drop(buf);
            }
            total
        })
    });
    g.finish();
}

fn w2(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let frames: Vec<u8> = (0..64 * 28_224).map(|i| (i * 7 % 251) as u8).collect();
    // Filled on first use, so that `-- w1` does not pay for 2.8 GB.
    let mut state: Option<(ReplayBuffer, u64)> = None;
    let full = |state: &mut Option<(ReplayBuffer, u64)>| {
        if state.is_none() {
            let mut buf = ReplayBuffer::create(
                dir.path().join("w2"),
                Config::new(w2_schema(), W2_CAP).seed(2),
            )
            .expect("create");
            let t = Instant::now();
            for i in 0..W2_CAP {
                w2_add(&mut buf, &frames, i);
            }
            eprintln!(
                "w2 first fill: {:.0} transitions/s (one-time first touch of 2.8 GB of file pages)",
                W2_CAP as f64 / t.elapsed().as_secs_f64()
            );
            *state = Some((buf, W2_CAP));
        }
    };
    let mut g = c.benchmark_group("w2");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(W2_CAP));
    g.bench_function("add1", |b| {
        full(&mut state);
        let Some((buf, next)) = state.as_mut() else {
            return;
        };
        b.iter(|| {
            for _ in 0..W2_CAP {
                black_box(w2_add(buf, &frames, *next));
                *next += 1;
            }
        })
    });
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    for (checks, name) in [(true, "sample32"), (false, "sample32_unchecked")] {
        g.bench_function(name, |b| {
            full(&mut state);
            let Some((buf, _)) = state.as_mut() else {
                return;
            };
            // Sealed: every sampled row is checked against its checksum, or not.
            buf.flush().expect("flush");
            buf.set_read_checks(checks);
            let mut batch = Batch::default();
            b.iter(|| buf.sample_into(32, &mut batch).expect("sample"))
        });
    }
    readers(&mut g, 32, &mut || {
        full(&mut state);
        // Sealed, as for `sample32`: the readers check every row.
        if let Some((buf, _)) = state.as_mut() {
            buf.flush().expect("flush");
        }
        dir.path().join("w2")
    });
    g.finish();
}

/// The same draws from a reader (as another process would open it), with rows copied
/// through the mappings and with `pread`: the second is the path for a reader whose
/// resident memory must stay flat, and its cost next to the first is what it asks.
/// The buffer is filled (by `filled`, which returns its folder) only when a reader bench
/// is selected.
fn readers(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    filled: &mut dyn FnMut() -> std::path::PathBuf,
) {
    for (access, name) in [(RowAccess::Mapped, "mapped"), (RowAccess::Pread, "pread")] {
        g.bench_function(format!("reader_{name}_sample{n}"), |b| {
            let mut reader = Reader::open(filled()).expect("open reader");
            reader.set_row_access(access).expect("row access");
            let mut batch = Batch::default();
            b.iter(|| reader.sample_into(n, &mut batch).expect("sample"))
        });
    }
    // The system calls alone: what a pread reader cannot go below. Each of `n` random
    // rows of the ring is read with one `pread` of the row and one of its stamp (the
    // second, after the copy, is what proves the copy whole) into its place in a
    // batch-sized buffer; no checksum, no copy into fields.
    g.bench_function(format!("pread_floor_sample{n}"), |b| {
        let dir = filled();
        let reader = Reader::open(&dir).expect("open reader");
        let layout = RowLayout::of(reader.schema());
        let stride = layout.stride as u64;
        // Every segment file, each with its slots: rows drawn over the whole ring, not
        // over one segment that the last-level cache may hold.
        // Opened as the engine opens them (no link followed, nothing but a file).
        let mut files: Vec<(std::fs::File, u64)> = (0..)
            .map_while(|n| OsIo.open_ro(&segment_path(&dir, n)).ok())
            .map(|f| {
                let len = f.metadata().expect("metadata").len();
                (f, len.saturating_sub(DATA_OFFSET as u64) / stride)
            })
            .collect();
        files.retain(|&(_, slots)| slots > 0);
        let per = files.first().map_or(1, |f| f.1);
        let slots: u64 = files.iter().map(|f| f.1).sum();
        // One row's place per drawn row, as a batch has: the copies' destinations are
        // not one buffer kept hot in cache.
        let mut rows = vec![0u8; n * layout.payload_end];
        let mut stamp = [0u8; 8];
        let mut s = 0x9e37_79b9_7f4a_7c15_u64;
        b.iter(|| {
            for row in rows.chunks_exact_mut(layout.payload_end) {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let slot = s % slots;
                let (file, _) = &files[(slot / per) as usize];
                let at = DATA_OFFSET as u64 + slot % per * stride;
                file.read_exact_at(row, at).expect("pread");
                file.read_exact_at(&mut stamp, at).expect("pread");
            }
        })
    });
}

/// W2 rows into a ring small enough (30,000 frames, 850 MB) to stay under the kernel's
/// dirty-writeback thresholds: what adds cost when writeback does not interfere.
fn w2_small_ring(c: &mut Criterion) {
    const CAP: u64 = 30_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let frames: Vec<u8> = (0..64 * 28_224).map(|i| (i * 7 % 251) as u8).collect();
    let mut g = c.benchmark_group("w2_small_ring");
    g.sample_size(10).throughput(Throughput::Elements(CAP));
    let mut state: Option<(ReplayBuffer, u64)> = None;
    g.bench_function("add1", |b| {
        let (buf, next) = state.get_or_insert_with(|| {
            let mut buf =
                ReplayBuffer::create(dir.path().join("w2s"), Config::new(w2_schema(), CAP))
                    .expect("create");
            for i in 0..CAP {
                w2_add(&mut buf, &frames, i);
            }
            (buf, CAP)
        });
        b.iter(|| {
            for _ in 0..CAP {
                black_box(w2_add(buf, &frames, *next));
                *next += 1;
            }
        })
    });
    g.finish();
}

/// W1 sample (256, checked) from a buffer with item states, with 0%, 50% and 90% of
/// its items removed at random (issue 30): uniform draws stay O(1) expected per item,
/// by rejection below half removed and from the handle's kept list of candidates past
/// it. `plain` is the same draw from a buffer without item states, for the cost of the
/// state word check itself.
fn w1_removed(c: &mut Criterion, data: &W1Data) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new(w1_schema(), W1_CAP).seed(1).item_states();
    let mut buf = common::w1_fill(dir.path(), "w1-states", config, data);
    buf.flush().expect("flush");
    let mut g = c.benchmark_group("w1_removed");
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    let mut batch = Batch::default();
    g.bench_function("sample256_removed_0", |b| {
        b.iter(|| buf.sample_into(256, &mut batch).expect("sample"))
    });
    // A random order of every index: the first half removed, then the next 40%.
    let mut order: Vec<u64> = (0..W1_CAP).collect();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let half = W1_CAP as usize / 2;
    buf.remove(&order[..half]).expect("remove");
    g.bench_function("sample256_removed_50", |b| {
        b.iter(|| buf.sample_into(256, &mut batch).expect("sample"))
    });
    buf.remove(&order[half..W1_CAP as usize * 9 / 10])
        .expect("remove");
    g.bench_function("sample256_removed_90", |b| {
        b.iter(|| buf.sample_into(256, &mut batch).expect("sample"))
    });
    g.finish();
}

/// W1 adds to a buffer that downsamples to half its capacity, past the ring's first
/// lap: each add first moves the kept items at the head to the tail (renamed in place),
/// drops the removed ones, then removes one random live item.
fn w1_downsample(c: &mut Criterion, data: &W1Data) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new(w1_schema(), W1_CAP)
        .seed(1)
        .downsample(W1_CAP / 2);
    let mut buf = common::w1_fill(dir.path(), "w1-downsample", config, data);
    let mut g = c.benchmark_group("w1_downsample");
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    g.bench_function("add1", |b| {
        b.iter(|| {
            i = (i + 1) % W1_CAP as usize;
            black_box(buf.add(&data.row(i)).expect("add"))
        })
    });
    g.finish();
    println!("w1_downsample: moved {} kept items", buf.stats().moved);
}

criterion_group!(benches, w1, w2, w2_small_ring);
criterion_main!(benches);
