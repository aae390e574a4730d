//! `replaystore bench`: the workloads of ../shared/WORKLOADS.md on this machine, one
//! table. So far the checkpoint workloads (issue 5): W1-save, W1-load, W2-save, W2-load,
//! each at 1/16, 1/4 and full, on prioritized buffers. Save is `get_state` after 32 new
//! items (their flush included); load is what a fresh process does to resume,
//! `open_at_state`, after the buffer ran 32 items past the checkpoint; set_state is the
//! same on the open buffer.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use replaystore::{Column, Config, DType, Error, ReplayBuffer, Schema};
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

/// A workload: its schema and capacity, and how item `i` is added.
struct Workload {
    name: &'static str,
    capacity: u64,
    frames: Vec<u8>,
}

impl Workload {
    fn w1(quick: bool) -> Workload {
        Workload {
            name: "W1",
            capacity: if quick { 62_500 } else { 1_000_000 },
            frames: Vec::new(),
        }
    }

    fn w2(quick: bool) -> Workload {
        Workload {
            name: "W2",
            capacity: if quick { 6_250 } else { 100_000 },
            // 64 distinct 4x84x84 frames, cycled.
            frames: (0..64 * 28_224).map(|i| (i * 7 % 251) as u8).collect(),
        }
    }

    fn schema(&self) -> Result<Schema, Error> {
        let b = Schema::builder();
        if self.name == "W1" {
            b.field("obs", DType::F32, &[17])
                .field("next_obs", DType::F32, &[17])
                .field("action", DType::F32, &[6])
                .field("reward", DType::F32, &[])
                .field("done", DType::Bool, &[])
                .build()
        } else {
            b.field("obs", DType::U8, &[4, 84, 84])
                .field("action", DType::I64, &[])
                .field("reward", DType::F32, &[])
                .field("done", DType::Bool, &[])
                .build()
        }
    }

    fn add(&self, buf: &mut ReplayBuffer, i: u64) -> Result<u64, Error> {
        let reward = (i % 7) as f32;
        let done = i % 200 == 199;
        if self.name == "W1" {
            let obs: [f32; 17] = std::array::from_fn(|k| (i * 17 + k as u64) as f32);
            let next = obs.map(|x| x + 0.5);
            let action: [f32; 6] = std::array::from_fn(|k| ((i + k as u64) % 13) as f32);
            buf.add(&[
                Column::new("obs", &obs),
                Column::new("next_obs", &next),
                Column::new("action", &action),
                Column::scalar("reward", &reward),
                Column::scalar("done", &done),
            ])
        } else {
            let f = (i % 64) as usize * 28_224;
            let frame = self.frames.get(f..f + 28_224).unwrap_or(&[]);
            let action = (i % 18) as i64;
            buf.add(&[
                Column::new("obs", frame).with_shape(&[4, 84, 84]),
                Column::scalar("action", &action),
                Column::scalar("reward", &reward),
                Column::scalar("done", &done),
            ])
        }
    }

    fn fill(&self, buf: &mut ReplayBuffer, count: u64) -> Result<(), Error> {
        let from = buf.live().end;
        for i in from..from + count {
            self.add(buf, i)?;
        }
        Ok(())
    }
}

/// Waits for the previous run's background work (letting go of replaced segment files)
/// and the writeback it caused: real checkpoints are minutes apart, so each timed run
/// starts from a settled machine rather than from the tail of the run before.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(50));
}

/// Bytes this process has caused to be written to storage so far (0 where unknown).
fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("write_bytes: ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Save and load rows of one workload at each fill.
fn checkpoints(w: &Workload, dir: &Path, runs: usize) -> Result<Vec<Row>, Error> {
    let path = dir.join(w.name);
    let config = Config::new(w.schema()?, w.capacity)
        .prioritized(0.6, 1e-6)
        .seed(5);
    let mut buf = ReplayBuffer::create(&path, config)?;
    let mut rows = Vec::new();
    for (label, fraction) in [("1/16", 16), ("1/4", 4), ("full", 1)] {
        let target = w.capacity / fraction;
        let have = buf.live().end;
        w.fill(&mut buf, target.saturating_sub(have))?;
        buf.flush()?;
        let data_bytes = buf.len() * buf.schema().item_bytes() as u64;
        let mut save = Row {
            name: format!("{}-save {label}", w.name),
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
            name: format!("{}-load {label}", w.name),
            times_ms: Vec::new(),
            data_bytes,
            written_bytes: Vec::new(),
        };
        let mut set = Row {
            name: format!("{}-set_state {label}", w.name),
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
        "w1" => vec![Workload::w1(quick)],
        "w2" => vec![Workload::w2(quick)],
        "all" => vec![Workload::w1(quick), Workload::w2(quick)],
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
    for w in &workloads {
        if !as_json {
            eprintln!(
                "{}: capacity {}, filling and timing {runs} runs per figure...",
                w.name, w.capacity
            );
        }
        match checkpoints(w, &scratch, runs) {
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
