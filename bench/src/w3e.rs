//! Episodic draws from other processes (issue 31), measured against the writer's own:
//! - `W1e open writer`, `W1e open reader + first draw`: opening W1 as episodes (a
//!   million steps, 1,000 per episode) — the episode table is read from each episode's
//!   last row — and a reader's open with its first draw of transitions;
//! - `W2e`: W2's frames one per row (`W2Frames`), 32 transitions with 3-step returns
//!   and 4 stacked frames drawn by the writer (nothing else running), then by a reader
//!   process while the writer waits: the reader's rate over the writer's;
//! - `W3e`: the W1 episodes full, 256 such transitions drawn by the writer alone, then
//!   by a reader process while the writer adds steps one at a time: the reader's rate
//!   over the writer's alone, and the writer's adds.

use std::path::Path;
use std::time::Instant;

use replaystore::{Batch, Config, Error, Reader, ReplayBuffer};

use crate::row::Row;
use crate::w3::{request, run_readers, sample_for};
use crate::workloads::{W1Episodes, W2Frames, Workload};

/// Milliseconds `op` took.
fn millis(op: impl FnOnce() -> Result<(), Error>) -> Result<f64, Error> {
    let t = Instant::now();
    op()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// The rows of this bench (see the module's doc). `quick` uses a sixteenth of the sizes.
pub fn rows(scratch: &Path, runs: usize, quick: bool) -> Result<Vec<Row>, Error> {
    let div = if quick { 16 } else { 1 };
    let seconds = if quick { 0.5 } else { 2.0 };
    let mut rows = Vec::new();

    // W1 as episodes: opens, then W3e.
    let capacity = Workload::W1.capacity() / div;
    let dir = scratch.join("w1e");
    let config = Config::new(W1Episodes::schema()?, capacity)
        .episodic()
        .seed(5);
    let mut buf = ReplayBuffer::create(&dir, config)?;
    let mut episodes = W1Episodes::default();
    episodes.fill(&mut buf, capacity)?;
    let data = buf.stats().bytes_on_disk;
    buf.close()?;
    let mut open = Row::new("W1e open writer".into(), "ms", data);
    let mut first = Row::new("W1e open reader + first draw".into(), "ms", data);
    let w1e = request("w1e")?;
    let mut batch = Batch::default();
    for _ in 0..runs.max(5) {
        let mut opened = None;
        open.values.push(millis(|| {
            opened = Some(ReplayBuffer::open(&dir)?);
            Ok(())
        })?);
        if let Some(b) = opened {
            b.close()?;
        }
        first
            .values
            .push(millis(|| Reader::open(&dir)?.sample_into(w1e, &mut batch))?);
    }
    rows.extend([open, first]);
    let mut buf = ReplayBuffer::open(&dir)?;
    let mut base = Row::new("W3e writer alone".into(), "k batches/s", data);
    let mut reader = Row::new(
        "W3e reader process, writer adding".into(),
        "k batches/s",
        data,
    );
    let mut ratio = Row::new("W3e reader/writer alone".into(), "ratio", data);
    let mut adds = Row::new("W3e writer adds".into(), "M steps/s", data);
    for _ in 0..runs {
        let alone = sample_for(|b| buf.sample_into(w1e, b), &mut batch, seconds)?;
        base.values.push(alone / 1e3);
        let add = || {
            let t = Instant::now();
            let mut added = 0u64;
            while t.elapsed().as_secs_f64() < seconds {
                episodes.fill(&mut buf, 100)?;
                added += 100;
            }
            Ok(added as f64 / t.elapsed().as_secs_f64())
        };
        let (results, added) = run_readers(&dir, 1, seconds, "w1e", add)?;
        for (rate, _) in results {
            reader.values.push(rate / 1e3);
            ratio.values.push(rate / alone);
        }
        adds.values.push(added / 1e6);
    }
    buf.close()?;
    rows.extend([base, reader, ratio, adds]);

    // W2's frames: the writer's draws, then a reader process's while the writer waits.
    let capacity = Workload::W2.capacity() / div;
    let dir = scratch.join("w2e");
    let config = Config::new(W2Frames::schema()?, capacity)
        .episodic()
        .seed(5);
    let mut buf = ReplayBuffer::create(&dir, config)?;
    W2Frames::default().fill(&mut buf, capacity)?;
    let data = buf.stats().bytes_on_disk;
    let w2e = request("w2e")?;
    let mut writer = Row::new("W2e writer".into(), "k batches/s", data);
    let mut reader = Row::new("W2e reader process".into(), "k batches/s", data);
    let mut ratio = Row::new("W2e reader/writer".into(), "ratio", data);
    for _ in 0..runs {
        let own = sample_for(|b| buf.sample_into(w2e, b), &mut batch, seconds)?;
        writer.values.push(own / 1e3);
        let wait = || {
            std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
            Ok(0.0)
        };
        let (results, _) = run_readers(&dir, 1, seconds, "w2e", wait)?;
        for (rate, _) in results {
            reader.values.push(rate / 1e3);
            ratio.values.push(rate / own);
        }
    }
    buf.close()?;
    rows.extend([writer, reader, ratio]);
    Ok(rows)
}
