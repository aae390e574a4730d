//! W5 of docs/WORKLOADS.md, LLM self-play steps: `obs` text of 0.5–8 KB (log-normal,
//! median 2 KB), `act` text of 0.1–2 KB (median 400 B), `tokens` int32 of 128–2,048
//! and `logprobs` float32 of the same length, `reward` f32, `pid` i8 and `env_id` text
//! of ~20 B, about 11 KiB of payload a step. Figures:
//! - addB: batches of 64 into a new buffer (its chunk ring's pages new to the page
//!   cache), and `addB lap` into one whose rings have lapped (steady state), in GB/s of
//!   payload;
//! - add1: one step per call into the lapped buffer, in k steps/s;
//! - sample 256 with every variable-length field padded to the batch's longest value (a
//!   sink of 2-D arrays, as Python's `values="padded"` fills), flat (end to end, as
//!   Arrow's layout), and flat with the checks off: the cost of reading values safely.
//!   Their floor is a plain gather: the same random items' values copied from one
//!   arena in memory (no files, chunk headers or checks). Beside them, "memcpy same
//!   bytes": the batch's payload bytes at this host's sequential memcpy rate over
//!   arrays far larger than the caches, the yardstick issue 29 sets ("within 3x").
//!
//! Each run starts after `sync`, so a new ring's figure is not slowed by the previous
//! run's writeback (this host's disk takes about 0.4 GB/s, fdatasynced).
//!
//! The steps come from a pool of `POOL` distinct ones (about 90 MiB, larger than the
//! caches), cycled: generating 100,000 would take longer than adding them.

use std::path::Path;
use std::time::Instant;

use replaystore::{
    Batch, Column, Config, DType, Error, Layout, ReplayBuffer, Request, Schema, Sink, ValuesOut,
    VarField, VarKind,
};

use crate::row::Row;
use crate::workloads::xorshift;

/// Distinct steps generated.
const POOL: usize = 8192;
/// Steps per `add_batch`.
const BATCH: usize = 64;
/// Steps per draw.
const DRAW: usize = 256;

fn schema() -> Result<Schema, Error> {
    Schema::builder()
        .field("reward", DType::F32, &[])
        .field("pid", DType::I8, &[])
        .variable("obs", VarKind::Str, None)
        .variable("act", VarKind::Str, None)
        .variable("tokens", VarKind::Ragged(DType::I32), Some(2048))
        .variable("logprobs", VarKind::Ragged(DType::F32), Some(2048))
        .variable("env_id", VarKind::Str, None)
        .build()
}

/// One field's values for a run of steps, end to end, with byte offsets from 0.
#[derive(Default)]
struct Values {
    bytes: Vec<u8>,
    offsets: Vec<u64>,
}

impl Values {
    fn push(&mut self, v: &[u8]) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.bytes.extend_from_slice(v);
        self.offsets.push(self.bytes.len() as u64);
    }

    fn get(&self, r: usize) -> &[u8] {
        let (a, b) = (self.offsets.get(r), self.offsets.get(r + 1));
        match (a, b) {
            (Some(&a), Some(&b)) => self.bytes.get(a as usize..b as usize).unwrap_or_default(),
            _ => &[],
        }
    }
}

/// `BATCH` steps, each field's values end to end.
struct Chunk {
    reward: Vec<f32>,
    pid: Vec<i8>,
    /// obs, act, tokens, logprobs, env_id.
    var: [Values; 5],
}

const VAR: [(&str, DType); 5] = [
    ("obs", DType::U8),
    ("act", DType::U8),
    ("tokens", DType::I32),
    ("logprobs", DType::F32),
    ("env_id", DType::U8),
];

impl Chunk {
    fn columns(&self) -> Vec<Column<'_>> {
        let mut c = vec![
            Column::new("reward", &self.reward),
            Column::new("pid", &self.pid),
        ];
        for ((name, dtype), v) in VAR.iter().zip(&self.var) {
            c.push(Column::values(name, *dtype, &v.bytes, &v.offsets));
        }
        c
    }

    /// Step `r` alone, for add1: its values' bytes, and `offsets` (filled here with
    /// each value's `[0, len]`) for one-row value columns.
    fn step<'c>(&'c self, r: usize, offsets: &'c mut [[u64; 2]; 5]) -> Vec<Column<'c>> {
        let mut c = vec![
            Column::scalar("reward", self.reward.get(r).unwrap_or(&0.0)),
            Column::scalar("pid", self.pid.get(r).unwrap_or(&0)),
        ];
        for (v, o) in self.var.iter().zip(offsets.iter_mut()) {
            *o = [0, v.get(r).len() as u64];
        }
        for (((name, dtype), v), o) in VAR.iter().zip(&self.var).zip(offsets.iter()) {
            c.push(Column::values(name, *dtype, v.get(r), o));
        }
        c
    }

    fn payload(&self) -> u64 {
        let fixed = self.reward.len() * 5;
        (fixed + self.var.iter().map(|v| v.bytes.len()).sum::<usize>()) as u64
    }
}

/// A log-normal length of median `median` (sigma 0.6, as python/bench/compare.py draws),
/// clamped to `lo..=hi`.
fn log_normal(s: &mut u64, median: f64, lo: usize, hi: usize) -> usize {
    let u = |s: &mut u64| ((xorshift(s) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let z = (-2.0 * u(s).ln()).sqrt() * (std::f64::consts::TAU * u(s)).cos();
    ((median.ln() + 0.6 * z).exp() as usize).clamp(lo, hi)
}

/// The pool: `POOL / BATCH` chunks of W5 steps from a fixed seed.
fn pool() -> Vec<Chunk> {
    let mut s = 0x5eed_0005_u64;
    let text = |s: &mut u64, n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                let letters = b"abcdefghijklmnopqrstuvwxyz .,";
                letters
                    .get((xorshift(s) % 29) as usize)
                    .copied()
                    .unwrap_or(b' ')
            })
            .collect()
    };
    (0..POOL / BATCH)
        .map(|c| {
            let mut chunk = Chunk {
                reward: Vec::with_capacity(BATCH),
                pid: Vec::with_capacity(BATCH),
                var: Default::default(),
            };
            for r in 0..BATCH {
                let i = c * BATCH + r;
                chunk.reward.push((i % 5) as f32 - 2.0);
                chunk.pid.push((i % 2) as i8);
                let [obs, act, tokens, logprobs, env] = &mut chunk.var;
                let (o, a) = (
                    log_normal(&mut s, 2000.0, 500, 8000),
                    log_normal(&mut s, 400.0, 100, 2000),
                );
                obs.push(&text(&mut s, o));
                act.push(&text(&mut s, a));
                let n = 128 + (xorshift(&mut s) % 1921) as usize;
                let t: Vec<u8> = (0..n)
                    .flat_map(|_| ((xorshift(&mut s) % 50_000) as i32).to_le_bytes())
                    .collect();
                let l: Vec<u8> = (0..n)
                    .flat_map(|_| (-((xorshift(&mut s) >> 40) as f32) / 1.7e7).to_le_bytes())
                    .collect();
                tokens.push(&t);
                logprobs.push(&l);
                env.push(format!("TicTacToe-v{}-train", i % 8).as_bytes());
            }
            chunk
        })
        .collect()
}

/// A sink of 2-D arrays: each variable-length field padded with zeros to the batch's
/// longest value, as Python's `values="padded"` returns. Its arrays are reused draw
/// after draw, as a Rust trainer would keep them, and only each row's padding is
/// written by the sink (the draw writes the value before it).
#[derive(Default)]
struct Padded {
    fixed: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    used: usize,
}

impl Sink for Padded {
    fn arrays(&mut self, layout: &Layout<'_>) -> Result<Vec<&mut [u8]>, Error> {
        self.used = 0;
        self.fixed.resize_with(layout.len(), Vec::new);
        for (v, a) in self.fixed.iter_mut().zip(layout.arrays()) {
            v.resize(a.bytes(), 0);
        }
        Ok(self.fixed.iter_mut().map(Vec::as_mut_slice).collect())
    }

    fn values(&mut self, _field: &VarField, lengths: &[u64]) -> Result<ValuesOut<'_>, Error> {
        self.push(lengths);
        let row_bytes = Padded::width(lengths);
        let bytes = self.values.get_mut(self.used - 1).ok_or(Error::Empty)?;
        Ok(ValuesOut::Rows { bytes, row_bytes })
    }

    fn all_values(
        &mut self,
        fields: &[&VarField],
        lengths: &[Vec<u64>],
    ) -> Result<Option<Vec<ValuesOut<'_>>>, Error> {
        for l in lengths.iter().take(fields.len()) {
            self.push(l);
        }
        let outs = self.values.iter_mut().zip(lengths);
        Ok(Some(
            outs.map(|(bytes, l)| ValuesOut::Rows {
                bytes,
                row_bytes: Padded::width(l),
            })
            .collect(),
        ))
    }
}

impl Padded {
    /// Bytes of one row: the longest value.
    fn width(lengths: &[u64]) -> usize {
        lengths.iter().copied().max().unwrap_or(0) as usize
    }

    /// Storage for one field's rows, its padding zeroed.
    fn push(&mut self, lengths: &[u64]) {
        let row_bytes = Padded::width(lengths);
        if self.values.len() == self.used {
            self.values.push(Vec::new());
        }
        if let Some(bytes) = self.values.get_mut(self.used) {
            bytes.resize(row_bytes * lengths.len(), 0);
            for (row, &n) in bytes.chunks_mut(row_bytes.max(1)).zip(lengths) {
                row.get_mut(n as usize..).unwrap_or_default().fill(0);
            }
        }
        self.used += 1;
    }
}

/// Adds `steps` steps in batches of `BATCH`, cycling through the pool.
fn add_chunks(buf: &mut ReplayBuffer, pool: &[Chunk], steps: u64) -> Result<(), Error> {
    for (_, chunk) in (0..steps.div_ceil(BATCH as u64)).zip(pool.iter().cycle()) {
        buf.add_batch(&chunk.columns())?;
    }
    Ok(())
}

/// This host's memcpy rate in bytes/s: the best of three copies of 512 MiB (far larger
/// than the caches), after one that faults every page in.
fn memcpy_rate() -> f64 {
    let src = vec![1u8; 512 << 20];
    let mut dst = vec![0u8; 512 << 20];
    dst.copy_from_slice(&src);
    (0..3)
        .map(|_| {
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            src.len() as f64 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// The gather floor of a W5 draw, in k batches/s: the plainest kernel doing a draw's
/// work without files, chunk headers or checks. `steps` steps' values lie end to end,
/// item after item, in one arena of memory (as a call packs them in the chunk ring,
/// without the rows' headers); each draw copies `DRAW` random items' five values into
/// five reused end-to-end outputs. Best of three timings of `draws` draws.
fn gather_floor(pool: &[Chunk], steps: u64, draws: usize) -> f64 {
    // Arena: item-major, each item's values back to back; `starts[i]` its values' offsets.
    let mut arena = Vec::new();
    let mut starts: Vec<[usize; 6]> = Vec::with_capacity(steps as usize);
    for (_, chunk) in (0..steps.div_ceil(BATCH as u64)).zip(pool.iter().cycle()) {
        for r in 0..BATCH {
            let mut at = [0usize; 6];
            for (k, v) in chunk.var.iter().enumerate() {
                if let Some(a) = at.get_mut(k) {
                    *a = arena.len();
                }
                arena.extend_from_slice(v.get(r));
            }
            at[5] = arena.len();
            starts.push(at);
        }
    }
    let mut outs: Vec<Vec<u8>> = vec![Vec::new(); 5];
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..draws {
            let picked: Vec<&[usize; 6]> = (0..DRAW)
                .filter_map(|_| starts.get((xorshift(&mut s) % steps) as usize))
                .collect();
            for (k, out) in outs.iter_mut().enumerate() {
                let total: usize = picked
                    .iter()
                    .map(|at| at.get(k + 1).unwrap_or(&0) - at.get(k).unwrap_or(&0))
                    .sum();
                out.resize(total, 0);
                let mut w = 0;
                for at in &picked {
                    let (a, b) = (*at.get(k).unwrap_or(&0), *at.get(k + 1).unwrap_or(&0));
                    if let (Some(dst), Some(src)) = (out.get_mut(w..w + b - a), arena.get(a..b)) {
                        dst.copy_from_slice(src);
                    }
                    w += b - a;
                }
            }
            std::hint::black_box(&outs);
        }
        best = best.max(draws as f64 / t.elapsed().as_secs_f64() / 1e3);
    }
    best
}

/// Steps of a standard run.
const STEPS: u64 = 100_000;

/// W5's rows: `runs` runs of each figure, each run on a new buffer in `dir`.
pub fn rows(dir: &Path, runs: usize, quick: bool) -> Result<Vec<Row>, Error> {
    let steps = if quick { STEPS / 16 } else { STEPS };
    let draws = if quick { 50 } else { 300 };
    let pool = pool();
    let per_step = pool.iter().map(Chunk::payload).sum::<u64>() as f64 / POOL as f64;
    let data = (per_step * steps as f64) as u64;
    let memcpy = memcpy_rate() / (per_step * DRAW as f64) / 1e3;
    let floor = gather_floor(&pool, steps, draws);
    let mut add_b = Row::new("W5-addB".into(), "GB/s", data);
    let mut lap = Row::new("W5-addB lap".into(), "GB/s", data);
    let mut add1 = Row::new("W5-add1".into(), "k steps/s", data);
    let mut padded = Row::new("W5-sample padded".into(), "k batches/s", data);
    let mut flat = Row::new("W5-sample flat".into(), "k batches/s", data);
    let mut unchecked = Row::new("W5-sample unchecked".into(), "k batches/s", data);
    let gbs = |t: Instant| data as f64 / t.elapsed().as_secs_f64() / 1e9;
    for run in 0..runs {
        let path = dir.join(format!("W5-{run}"));
        // The chunk ring holds as many steps as the rows: about 12 KiB each.
        let config = Config::new(schema()?, steps)
            .heap_bytes(steps * 12 * 1024)
            .seed(run as u64 + 1);
        // The previous run's gigabytes written back first (sync(2)): a new ring fills
        // the page cache at memory speed until the kernel's dirty limits, and then at
        // the disk's; without this, run N would pay for run N - 1's writeback.
        sync_disks();
        let t = Instant::now();
        let mut buf = ReplayBuffer::create(&path, config)?;
        add_chunks(&mut buf, &pool, steps)?;
        add_b.values.push(gbs(t));
        // Both rings have lapped after a second capacity's worth: the third is timed.
        add_chunks(&mut buf, &pool, steps)?;
        let t = Instant::now();
        add_chunks(&mut buf, &pool, steps)?;
        lap.values.push(gbs(t));
        let ones = (steps / 5) as usize;
        let mut offsets = [[0u64; 2]; 5];
        let t = Instant::now();
        for (i, chunk) in (0..ones).zip(
            pool.iter()
                .flat_map(|c| std::iter::repeat_n(c, BATCH))
                .cycle(),
        ) {
            buf.add(&chunk.step(i % BATCH, &mut offsets))?;
        }
        add1.values
            .push(ones as f64 / t.elapsed().as_secs_f64() / 1e3);
        // Sealed, as after a checkpoint: every value drawn is checked against its crc.
        buf.flush()?;
        let mut sink = Padded::default();
        let t = Instant::now();
        for _ in 0..draws {
            buf.sample_into(Request::rows(DRAW), &mut sink)?;
        }
        padded
            .values
            .push(draws as f64 / t.elapsed().as_secs_f64() / 1e3);
        let mut batch = Batch::default();
        for (checks, row) in [(true, &mut flat), (false, &mut unchecked)] {
            buf.set_read_checks(checks);
            let t = Instant::now();
            for _ in 0..draws {
                buf.sample_into(DRAW, &mut batch)?;
            }
            row.values
                .push(draws as f64 / t.elapsed().as_secs_f64() / 1e3);
        }
        buf.close()?;
        std::fs::remove_dir_all(&path).map_err(|source| Error::Io {
            path: path.clone(),
            op: "remove",
            source,
        })?;
    }
    for row in [&mut padded, &mut flat, &mut unchecked] {
        row.floor = Some(floor);
    }
    // The yardstick beside the floor: the same payload bytes per batch at this
    // host's memcpy rate (sequential, so faster than any gather of them).
    let mut same_bytes = Row::new("W5-memcpy same bytes".into(), "k batches/s", data);
    same_bytes.values.push(memcpy);
    Ok(vec![add_b, lap, add1, padded, flat, unchecked, same_bytes])
}

/// Writes every dirty page of the machine back (sync(2)) and waits for it.
fn sync_disks() {
    // A command rather than the call: the one `unsafe` block would not live in
    // `storage/`, and this runs once per run.
    let _ = std::process::Command::new("sync").status();
}
