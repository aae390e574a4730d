//! The row checksum on its own, against the candidates that could replace it (issue 56):
//! one W1 and one W2 payload span (165 and 28,237 bytes), in cache, hashed over and over
//! with a fresh index seed each time:
//! - `carry_less`: the engine's routine (`SpanCrc`: CRC-32 by carry-less multiply, read
//!   through a pointer, since mapped bytes another process may change are never borrowed);
//! - `crc32fast`: the same CRC-32 by the `crc32fast` crate, over a borrowed slice;
//! - `xxh3`: XXH3-64 (`twox-hash`, AVX2 chosen at run time) over a borrowed slice;
//! - `copy_then_*`: a private copy first, then the hash: what a crate that takes a slice
//!   costs the engine, whose mapped rows may not be borrowed.
//!
//! `cargo bench --bench row_hash`. What a sampled row pays in place is
//! `w1/sample256` against `w1/sample256_unchecked` in `benches/workloads.rs`.

#![allow(missing_docs, reason = "criterion_group! generates undocumented items")]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use replaystore::internal::format::row::{RowLayout, item_seed};
use replaystore::internal::storage::SpanCrc;
use twox_hash::XxHash3_64;

mod common;
use common::{w1_schema, w2_schema};

fn crc32fast_of(seed: u64, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(item_seed(seed));
    h.update(bytes);
    h.finalize()
}

fn row_hash(c: &mut Criterion) {
    for (name, schema) in [("w1", w1_schema()), ("w2", w2_schema())] {
        let len = RowLayout::of(&schema).payload_span().len();
        let row: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
        let spans = SpanCrc::new(len);
        let mut g = c.benchmark_group(format!("row_hash/{name}"));
        g.measurement_time(Duration::from_secs(3));
        g.throughput(Throughput::Bytes(len as u64));
        let mut seed = 0u64;
        g.bench_function("carry_less", |b| {
            b.iter(|| {
                seed += 1;
                black_box(spans.crc_of(item_seed(seed), black_box(&row)))
            })
        });
        g.bench_function("crc32fast", |b| {
            b.iter(|| {
                seed += 1;
                black_box(crc32fast_of(seed, black_box(&row)))
            })
        });
        g.bench_function("xxh3", |b| {
            b.iter(|| {
                seed += 1;
                black_box(XxHash3_64::oneshot_with_seed(seed, black_box(&row)))
            })
        });
        // The kindest form of a private copy: the whole span into a buffer kept between
        // rows (a reader's scratch), then the hash over it.
        let mut scratch = vec![0u8; len];
        g.bench_function("copy_then_crc32fast", |b| {
            b.iter(|| {
                seed += 1;
                scratch.copy_from_slice(black_box(&row));
                black_box(crc32fast_of(seed, &scratch))
            })
        });
        g.bench_function("copy_then_xxh3", |b| {
            b.iter(|| {
                seed += 1;
                scratch.copy_from_slice(black_box(&row));
                black_box(XxHash3_64::oneshot_with_seed(seed, &scratch))
            })
        });
        g.finish();
    }
}

criterion_group!(benches, row_hash);
criterion_main!(benches);
