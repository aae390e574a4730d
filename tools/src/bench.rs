//! `replaystore bench`: the workloads of ../shared/WORKLOADS.md on this machine, one
//! table. So far the checkpoint workloads (issue 5): W1-save, W1-load, W2-save, W2-load,
//! each at 1/16, 1/4 and full, on prioritized buffers. Save is `get_state` after 32 new
//! items (their flush included); load is what a fresh process does to resume,
//! `open_at_state`, after the buffer ran 32 items past the checkpoint; set_state is the
//! same on the open buffer.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use replaystore::workloads::{Workload, written_bytes};
use replaystore::{Config, Error, ReplayBuffer};
use serde_json::json;

/// Items added before each timed checkpoint.
const STEP: u64 = 32;

/// One line of the table.
struct Row {
    name: String,
    times_ms: Vec<f64>,
    data_bytes: u64,
    written_bytes: Vec<u64>,
}

impl Row {
    fn median_ms(&self) -> f64 {
        median(&self.times_ms)
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// Waits for the previous run's background work (letting go of replaced segment files)
/// and the writeback it caused: real checkpoints are minutes apart, so each timed run
/// starts from a settled machine rather than from the tail of the run before.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(50));
}

/// Save and load rows of one workload at each fill.
fn checkpoints(w: Workload, capacity: u64, dir: &Path, runs: usize) -> Result<Vec<Row>, Error> {
    let path = dir.join(w.name());
    let config = Config::new(w.schema()?, capacity)
        .prioritized(0.6, 1e-6)
        .seed(5);
    let mut buf = ReplayBuffer::create(&path, config)?;
    let mut rows = Vec::new();
    for (label, fraction) in [("1/16", 16), ("1/4", 4), ("full", 1)] {
        let target = capacity / fraction;
        let have = buf.live().end;
        w.fill(&mut buf, target.saturating_sub(have))?;
        buf.flush()?;
        let data_bytes = buf.len() * buf.schema().item_bytes() as u64;
        let mut save = Row {
            name: format!("{}-save {label}", w.name()),
            times_ms: Vec::new(),
            data_bytes,
            written_bytes: Vec::new(),
        };
        for _ in 0..runs {
            w.fill(&mut buf, STEP)?;
            let before = written_bytes();
            settle();
            let t = Instant::now();
            let state = buf.get_state()?;
            save.times_ms.push(t.elapsed().as_secs_f64() * 1e3);
            save.written_bytes.push(written_bytes() - before);
            buf.delete_snapshot(&state.name)?;
        }
        let base = buf.get_state_named("bench-base")?;
        let mut load = Row {
            name: format!("{}-load {label}", w.name()),
            times_ms: Vec::new(),
            data_bytes,
            written_bytes: Vec::new(),
        };
        let mut set = Row {
            name: format!("{}-set_state {label}", w.name()),
            times_ms: Vec::new(),
            data_bytes,
            written_bytes: Vec::new(),
        };
        for _ in 0..runs {
            w.fill(&mut buf, STEP)?;
            buf.close()?;
            settle();
            let t = Instant::now();
            buf = ReplayBuffer::open_at_state(&path, &base)?;
            load.times_ms.push(t.elapsed().as_secs_f64() * 1e3);
            w.fill(&mut buf, STEP)?;
            settle();
            let t = Instant::now();
            buf.set_state(&base)?;
            set.times_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        buf.delete_snapshot("bench-base")?;
        rows.push(save);
        rows.push(load);
        rows.push(set);
    }
    buf.close()?;
    Ok(rows)
}

pub fn run(
    workload: &str,
    quick: bool,
    runs: usize,
    dir: Option<PathBuf>,
    as_json: bool,
) -> Result<ExitCode, Error> {
    let workloads: Vec<Workload> = match workload.to_ascii_lowercase().as_str() {
        "w1" => vec![Workload::W1],
        "w2" => vec![Workload::W2],
        "all" => vec![Workload::W1, Workload::W2],
        other => {
            return Err(Error::InvalidConfig {
                field: "workload",
                problem: format!("{other:?} is not W1, W2 or all"),
            });
        }
    };
    let runs = runs.max(1);
    let parent = dir.unwrap_or_else(std::env::temp_dir);
    let scratch = parent.join(format!("replaystore-bench-{}", std::process::id()));
    let mut rows = Vec::new();
    let mut result = Ok(());
    for &w in &workloads {
        // --quick: a sixteenth of the standard capacity.
        let capacity = w.capacity() / if quick { 16 } else { 1 };
        if !as_json {
            eprintln!(
                "{}: capacity {capacity}, filling and timing {runs} runs per figure...",
                w.name()
            );
        }
        match checkpoints(w, capacity, &scratch, runs) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    // The buffers are scratch; an error removing them must not hide the figures.
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    if as_json {
        let items: Vec<_> = rows
            .iter()
            .map(|r| {
                let (lo, hi) = min_max(&r.times_ms);
                json!({
                    "workload": r.name,
                    "median": r.median_ms(),
                    "min": lo,
                    "max": hi,
                    "unit": "ms",
                    "runs": r.times_ms.len(),
                    "data_bytes": r.data_bytes,
                    "written_bytes": r.written_bytes.iter().copied().max(),
                })
            })
            .collect();
        println!("{:#}", json!({"quick": quick, "results": items}));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<18} {:>10} {:>21} {:>6} {:>12} {:>12}",
        "workload", "median", "min-max", "unit", "data", "written"
    );
    for r in &rows {
        let (lo, hi) = min_max(&r.times_ms);
        println!(
            "{:<18} {:>10.2} {:>21} {:>6} {:>12} {:>12}",
            r.name,
            r.median_ms(),
            format!("{lo:.2}-{hi:.2}"),
            "ms",
            crate::human(r.data_bytes),
            r.written_bytes
                .iter()
                .copied()
                .max()
                .map_or("-".into(), crate::human)
        );
    }
    Ok(ExitCode::SUCCESS)
}
