//! `replaystore bench --workload ckpt`: checkpoint latency as a training loop sees it
//! (issue 28, point 3). For W1 at 100k, 1M and 4M items and W2 at 100k, each uniform and
//! prioritized:
//!
//! - `fill`: items/s of filling the ring from empty in `add_batch` calls of 1,000;
//! - `lap`: the same over the full ring once more, with the flush that makes it durable;
//! - `first`: the `get_state` right after the buffer was filled from empty, with no flush
//!   in between (what a trainer's first checkpoint after warm-up costs);
//! - `save`: `get_state` after [`STEPS`] training steps, the previous checkpoint deleted
//!   (keep-last-one, what a trainer does), over `calls` calls: p50 and p99;
//! - `set_state`: restoring a checkpoint after [`STEPS`] more training steps, and
//!   `step after`: the first training step after it, which pays the copies a restore
//!   leaves to the first store (the segment written next, a prioritized tree);
//! - `extra`: bytes written per checkpoint beyond what the same training steps write
//!   without checkpoints (`/proc/self/io` write_bytes of two runs of the same loop).
//!
//! A training step adds `n / 8` items in one `add_batch` and, for a prioritized buffer,
//! draws `n` and updates their priorities (W1: n = 256, W2: n = 32).

use std::path::Path;
use std::time::Instant;

use replaystore::{Batch, Config, Error, ReplayBuffer, Request};

use crate::row::Row;
use crate::workloads::{Chunk, Workload, random_priority, written_bytes};

/// Training steps between two checkpoints.
pub(crate) const STEPS: usize = 64;

/// One buffer shape the profile measures.
struct Case {
    workload: Workload,
    capacity: u64,
    prioritized: bool,
}

impl Case {
    fn label(&self) -> String {
        let size = match self.capacity {
            c if c >= 1_000_000 && c % 1_000_000 == 0 => format!("{}M", c / 1_000_000),
            c if c >= 1_000 && c % 1_000 == 0 => format!("{}k", c / 1_000),
            c => c.to_string(),
        };
        let kind = if self.prioritized { "per" } else { "uniform" };
        format!("{}-{size}-{kind}", self.workload.name())
    }

    fn batch(&self) -> usize {
        if self.workload == Workload::W1 {
            256
        } else {
            32
        }
    }
}

/// A training loop's writes: adds and (prioritized) draws with priority updates.
struct Trainer {
    chunk: Chunk,
    batch: Batch,
    n: usize,
    prioritized: bool,
    rng: u64,
    priorities: Vec<f32>,
}

impl Trainer {
    fn new(case: &Case) -> Trainer {
        let n = case.batch();
        Trainer {
            chunk: Chunk::new(case.workload, 0, n / 8),
            batch: Batch::default(),
            n,
            prioritized: case.prioritized,
            rng: 0x9e37_79b9_7f4a_7c15,
            priorities: vec![0.0; n],
        }
    }

    fn steps(&mut self, buf: &mut ReplayBuffer, steps: usize) -> Result<(), Error> {
        let columns = self.chunk.columns();
        for _ in 0..steps {
            buf.add_batch(&columns)?;
            if self.prioritized {
                buf.sample_into(Request::rows(self.n).prioritized(0.4), &mut self.batch)?;
                for p in &mut self.priorities {
                    *p = random_priority(&mut self.rng);
                }
                buf.update_priorities(self.batch.indices(), &self.priorities)?;
            }
        }
        Ok(())
    }
}

/// The cases of the standard profile (`quick`: W1 at 100k only and W2 at 1/16).
fn cases(quick: bool) -> Vec<Case> {
    let w1: &[u64] = if quick {
        &[100_000]
    } else {
        &[100_000, 1_000_000, 4_000_000]
    };
    let w2 = Workload::W2.capacity() / if quick { 16 } else { 1 };
    let mut out = Vec::new();
    for &capacity in w1 {
        for prioritized in [false, true] {
            out.push(Case {
                workload: Workload::W1,
                capacity,
                prioritized,
            });
        }
    }
    for prioritized in [false, true] {
        out.push(Case {
            workload: Workload::W2,
            capacity: w2,
            prioritized,
        });
    }
    out
}

fn elapsed_ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The rows of one case: first, save, set_state, extra.
fn profile(case: &Case, dir: &Path, calls: usize) -> Result<Vec<Row>, Error> {
    let path = dir.join(case.label());
    let mut config = Config::new(case.workload.schema()?, case.capacity).seed(3);
    if case.prioritized {
        config = config.prioritized(0.6, 1e-6);
    }
    let data = case.capacity * case.workload.schema()?.item_bytes() as u64;
    let mut buf = ReplayBuffer::create(&path, config)?;
    let mut trainer = Trainer::new(case);
    let label = case.label();

    // The fill in chunks of 1,000 (add_batch), then at once the first checkpoint.
    let chunk = Chunk::new(case.workload, 0, 1000);
    let columns = chunk.columns();
    let mut fill = Row::new(format!("{label} fill"), "M items/s", data);
    let mut lap = Row::new(format!("{label} lap"), "M items/s", data);
    let t = Instant::now();
    for _ in 0..case.capacity.div_ceil(1000) {
        buf.add_batch(&columns)?;
    }
    fill.values
        .push(case.capacity as f64 / t.elapsed().as_secs_f64() / 1e6);
    let mut first = Row::new(format!("{label} first"), "ms", data);
    let before = written_bytes();
    let t = Instant::now();
    let state = buf.get_state()?;
    first.values.push(elapsed_ms(t));
    first.written_bytes.push(written_bytes() - before);
    buf.delete_snapshot(&state.name)?;
    // A second lap over the ring (its pages now written back once), then a flush.
    let t = Instant::now();
    for _ in 0..case.capacity.div_ceil(1000) {
        buf.add_batch(&columns)?;
    }
    buf.flush()?;
    lap.values
        .push(case.capacity as f64 / t.elapsed().as_secs_f64() / 1e6);

    // The same loop without checkpoints, for the bytes the training steps write anyway.
    trainer.steps(&mut buf, STEPS)?;
    buf.flush()?;
    let before = written_bytes();
    for _ in 0..calls {
        trainer.steps(&mut buf, STEPS)?;
    }
    buf.flush()?;
    let plain_bytes = written_bytes() - before;

    let mut save = Row::new(format!("{label} save"), "ms", data);
    let before_loop = written_bytes();
    let mut last: Option<String> = None;
    for _ in 0..calls {
        trainer.steps(&mut buf, STEPS)?;
        let before = written_bytes();
        let t = Instant::now();
        let state = buf.get_state()?;
        save.values.push(elapsed_ms(t));
        save.written_bytes.push(written_bytes() - before);
        if let Some(old) = last.replace(state.name) {
            buf.delete_snapshot(&old)?;
        }
    }
    buf.flush()?;
    let loop_bytes = written_bytes() - before_loop;
    let mut extra = Row::new(format!("{label} extra"), "bytes/ckpt", data);
    extra
        .values
        .push(loop_bytes.saturating_sub(plain_bytes) as f64 / calls.max(1) as f64);
    if let Some(old) = last.take() {
        buf.delete_snapshot(&old)?;
    }

    let base = buf.get_state_named("ckpt-base")?;
    let mut set = Row::new(format!("{label} set_state"), "ms", data);
    let mut pause = Row::new(format!("{label} step after"), "ms", data);
    for _ in 0..calls {
        trainer.steps(&mut buf, STEPS)?;
        let before = written_bytes();
        let t = Instant::now();
        buf.set_state(&base)?;
        set.values.push(elapsed_ms(t));
        set.written_bytes.push(written_bytes() - before);
        // The first training step after a restore: it pays what the restore left for
        // the first store (copies of what the snapshot links).
        let before = written_bytes();
        let t = Instant::now();
        trainer.steps(&mut buf, 1)?;
        pause.values.push(elapsed_ms(t));
        pause.written_bytes.push(written_bytes() - before);
    }
    buf.delete_snapshot("ckpt-base")?;
    buf.close()?;
    // Scratch: freed now so that the 4M and W2 cases do not sit on the disk together;
    // `bench` removes the whole scratch folder at the end in any case.
    let _ = std::fs::remove_dir_all(&path);
    Ok(vec![fill, first, lap, save, set, pause, extra])
}

/// Every case's rows, `calls` checkpoints each; `progress` is told after each case.
pub(crate) fn rows(
    dir: &Path,
    calls: usize,
    quick: bool,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::new();
    for case in cases(quick) {
        progress(&case.label());
        rows.extend(profile(&case, dir, calls)?);
    }
    Ok(rows)
}
