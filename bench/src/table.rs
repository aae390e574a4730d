//! `replaystore-bench` (`replaystore bench`): the workloads of docs/WORKLOADS.md on
//! this machine, one table, each figure the median of `--runs` runs with min–max:
//! - add1 / addB (W1): a capacity's worth of items one at a time / in chunks of 1,000
//!   (the first run fills an empty ring, later runs wrap it);
//! - sample: 10,000 uniform batches (W1 256, W2 32) from the full, flushed buffer, every
//!   row checked against its checksum; "sample unchecked" the same with the checks off;
//! - per: 10,000 iterations of a prioritized batch (alpha 0.6, beta 0.4) with weights
//!   plus as many new priorities;
//! - save / load / set_state at 1/16, 1/4 and full, on a prioritized buffer: save is
//!   `get_state` after 32 new items (their flush included), load is what a fresh
//!   process does to resume (`open_at_state`) after the buffer ran 32 items past the
//!   checkpoint, set_state the same on the open buffer.
//!
//! `--quick` divides capacities and iteration counts by 16.

use replaystore_cli::fail::Status;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::workloads::{Chunk, Workload, random_priority, written_bytes};
use replaystore::{Batch, Config, Error, ReplayBuffer, Request};
use serde_json::json;

use crate::floor::{Arena, Tree8};
use crate::row::{Row, min_max};

/// Items added before each timed checkpoint.
const STEP: u64 = 32;

/// add1, addB, sample and per rows of one workload.
fn throughput(
    w: Workload,
    capacity: u64,
    dir: &Path,
    runs: usize,
    batches: usize,
) -> Result<Vec<Row>, Error> {
    let item_bytes = w.schema()?.item_bytes() as u64;
    let data = capacity * item_bytes;
    let mut rows = Vec::new();
    // Measured first, and their ring let go before the buffer fills the page cache. A
    // floor is what the host can do, so its best run: a run slowed by a neighbour says
    // nothing about the host (the add floors moved 2x between medians of 3).
    let floors = floor_rows(w, capacity, dir, runs, batches)?;
    let floor = |name: &str| {
        let full = format!("{}-{name}", w.name());
        floors
            .iter()
            .find(|r| r.name == full)
            .map(|r| min_max(&r.values).1)
    };
    let path = dir.join(format!("{}-plain", w.name()));
    let mut buf = ReplayBuffer::create(&path, Config::new(w.schema()?, capacity).seed(1))?;
    let mut add1 = Row::new(format!("{}-add1", w.name()), "M items/s", data);
    for _ in 0..runs {
        let t = Instant::now();
        w.fill(&mut buf, capacity)?;
        add1.values
            .push(capacity as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    add1.floor = floor("add1");
    rows.push(add1);
    if w == Workload::W1 {
        let mut add_b = Row::new(format!("{}-addB", w.name()), "M items/s", data);
        let chunk = Chunk::new(w, 0, 1000);
        let columns = chunk.columns();
        for _ in 0..runs {
            let t = Instant::now();
            for _ in 0..capacity.div_ceil(1000) {
                buf.add_batch(&columns)?;
            }
            add_b
                .values
                .push(capacity as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
        add_b.floor = floor("addB");
        rows.push(add_b);
    }
    let n = if w == Workload::W1 { 256 } else { 32 };
    // Sealed, as a buffer is after its first checkpoint: every sampled row is checked
    // against its checksum. The same draws unchecked give the check's cost in one sitting.
    buf.flush()?;
    let mut batch = Batch::default();
    for (checks, name) in [(true, "sample"), (false, "sample unchecked")] {
        buf.set_read_checks(checks);
        let mut sample = Row::new(format!("{}-{name}", w.name()), "k batches/s", data);
        for _ in 0..runs {
            let t = Instant::now();
            for _ in 0..batches {
                buf.sample_into(n, &mut batch)?;
            }
            sample
                .values
                .push(batches as f64 / t.elapsed().as_secs_f64() / 1e3);
        }
        sample.floor = floor("sample");
        rows.push(sample);
    }
    buf.close()?;

    let path = dir.join(format!("{}-per", w.name()));
    let config = Config::new(w.schema()?, capacity)
        .prioritized(0.6, 1e-6)
        .seed(2);
    let mut buf = ReplayBuffer::create(&path, config)?;
    w.fill(&mut buf, capacity)?;
    buf.flush()?;
    let mut per = Row::new(format!("{}-per", w.name()), "k it/s", data);
    let spec = Request::rows(n).prioritized(0.4);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut priorities = vec![0f32; n];
    for _ in 0..runs {
        let t = Instant::now();
        for _ in 0..batches {
            buf.sample_into(spec, &mut batch)?;
            for p in &mut priorities {
                *p = random_priority(&mut rng);
            }
            buf.update_priorities(batch.indices(), &priorities)?;
        }
        per.values
            .push(batches as f64 / t.elapsed().as_secs_f64() / 1e3);
    }
    per.floor = floor("per");
    rows.push(per);
    buf.close()?;
    Ok(rows)
}

/// One floor kernel: a rate, measured on the ring it is given.
type Kernel<'a> = dyn FnMut(&mut Arena) -> f64 + 'a;

/// The floors of one workload's add1, addB, sample and per figures (`floor.rs`), each
/// a row of `runs` runs in the unit of the figure it bounds.
fn floor_rows(
    w: Workload,
    capacity: u64,
    dir: &Path,
    runs: usize,
    batches: usize,
) -> Result<Vec<Row>, Error> {
    let data = capacity * w.schema()?.item_bytes() as u64;
    let widths: Vec<usize> = w.schema()?.fields().iter().map(|f| f.bytes()).collect();
    let mut arena = Arena::new(&widths, capacity as usize).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        op: "map the floors' anonymous ring",
        source,
    })?;
    let cap = capacity as usize;
    let n = if w == Workload::W1 { 256 } else { 32 };
    let mut tree = Tree8::new(cap, 1.0);
    let mut rows = Vec::new();
    let kernels: [(&str, &str, f64, &mut Kernel<'_>); 4] = [
        ("add1", "M items/s", 1e6, &mut |a| a.add_rate(cap, 1)),
        ("addB", "M items/s", 1e6, &mut |a| a.add_rate(cap, 1000)),
        ("sample", "k batches/s", 1e3, &mut |a| {
            a.sample_rate(n, batches)
        }),
        ("per", "k it/s", 1e3, &mut |a| {
            a.per_rate(&mut tree, n, batches, 0.4)
        }),
    ];
    for (name, unit, scale, kernel) in kernels {
        let mut row = Row::new(format!("{}-{name}", w.name()), unit, data);
        for _ in 0..runs {
            row.values.push(kernel(&mut arena) / scale);
        }
        rows.push(row);
    }
    Ok(rows)
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
        let mut save = Row::new(format!("{}-save {label}", w.name()), "ms", data_bytes);
        for _ in 0..runs {
            w.fill(&mut buf, STEP)?;
            let before = written_bytes();
            settle();
            let t = Instant::now();
            let state = buf.get_state()?;
            save.values.push(t.elapsed().as_secs_f64() * 1e3);
            save.written_bytes.push(written_bytes() - before);
            buf.delete_snapshot(&state.name)?;
        }
        let base = buf.get_state_named("bench-base")?;
        let mut load = Row::new(format!("{}-load {label}", w.name()), "ms", data_bytes);
        let mut set = Row::new(format!("{}-set_state {label}", w.name()), "ms", data_bytes);
        for _ in 0..runs {
            w.fill(&mut buf, STEP)?;
            buf.close()?;
            settle();
            let t = Instant::now();
            buf = ReplayBuffer::open_at_state(&path, &base)?;
            load.values.push(t.elapsed().as_secs_f64() * 1e3);
            w.fill(&mut buf, STEP)?;
            settle();
            let t = Instant::now();
            buf.set_state(&base)?;
            set.values.push(t.elapsed().as_secs_f64() * 1e3);
        }
        buf.delete_snapshot("bench-base")?;
        rows.push(save);
        rows.push(load);
        rows.push(set);
    }
    buf.close()?;
    Ok(rows)
}

/// Runs `workload` (`w1`, `w2`, `w3`, `all`, `ckpt`, `w3e`, `w4`, `w5`, `w6`, `w7`;
/// `InvalidConfig` naming the choices otherwise) `runs` times per figure in `dir` (a
/// temporary folder by default, removed after) and prints the table, or JSON; against
/// `baseline` (an earlier JSON output) each figure also says how many times better it
/// is; `floors_only` prints the floors alone.
///
/// ```no_run
/// replaystore_bench::run("w1", true, 3, None, true, None, false)?;
/// # Ok::<(), replaystore::Error>(())
/// ```
pub fn run(
    workload: &str,
    quick: bool,
    runs: usize,
    dir: Option<PathBuf>,
    as_json: bool,
    baseline: Option<PathBuf>,
    floors_only: bool,
) -> Result<Status, Error> {
    let name = workload.to_ascii_lowercase();
    let (workloads, w3): (Vec<Workload>, bool) = match name.as_str() {
        "w1" => (vec![Workload::W1], false),
        "w2" => (vec![Workload::W2], false),
        "w3" => (vec![], true),
        "ckpt" | "w3e" | "w4" | "w5" | "w6" | "w7" => (vec![], false),
        "all" => (vec![Workload::W1, Workload::W2], true),
        other => {
            return Err(Error::InvalidConfig {
                field: "workload",
                problem: format!("{other:?} is not W1, W2, W3, W3e, W4, W5, W6, W7, ckpt or all"),
            });
        }
    };
    let (ckpt, w4, w5) = (name == "ckpt", name == "w4", name == "w5");
    let w3e = name == "w3e";
    let (w6, w7) = (name == "w6", name == "w7");
    let runs = runs.max(1);
    let parent = dir.unwrap_or_else(std::env::temp_dir);
    let scratch = parent.join(format!("replaystore-bench-{}", std::process::id()));
    let mut rows = Vec::new();
    let mut result = Ok(());
    // One step per workload: the bar redraws only between timed phases, never inside one.
    let bar =
        replaystore_cli::progress::bar(workloads.len() as u64 + u64::from(w3), "bench", as_json);
    for &w in &workloads {
        // --quick: a sixteenth of the standard capacity.
        let capacity = w.capacity() / if quick { 16 } else { 1 };
        if !as_json {
            bar.suspend(|| {
                eprintln!(
                    "{}: capacity {capacity}, filling and timing {runs} runs per figure...",
                    w.name()
                );
            });
        }
        let batches = if quick { 10_000 / 16 } else { 10_000 };
        let measured = if floors_only {
            floor_rows(w, capacity, &scratch, runs, batches)
        } else {
            throughput(w, capacity, &scratch, runs, batches).and_then(|mut r| {
                r.extend(checkpoints(w, capacity, &scratch, runs)?);
                Ok(r)
            })
        };
        bar.inc(1);
        match measured {
            Ok(r) => rows.extend(r),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if w3 && !floors_only && result.is_ok() {
        let capacity = Workload::W1.capacity() / if quick { 16 } else { 1 };
        if !as_json {
            bar.suspend(|| {
                eprintln!("W3: capacity {capacity}, a writer and 1, 2, 4 reader processes...");
            });
        }
        match crate::w3::rows(capacity, &scratch, runs, quick) {
            Ok(r) => rows.extend(r),
            Err(e) => result = Err(e),
        }
        bar.inc(1);
    }
    if w3e && !floors_only && result.is_ok() {
        if !as_json {
            bar.suspend(|| eprintln!("W3e: episodic draws by reader processes, {runs} runs..."));
        }
        match crate::w3e::rows(&scratch, runs, quick) {
            Ok(r) => rows.extend(r),
            Err(e) => result = Err(e),
        }
    }
    if (w6 || w7) && !floors_only && result.is_ok() {
        if !as_json {
            bar.suspend(|| eprintln!("{}: {runs} runs of fill and draws...", name.to_uppercase()));
        }
        let measured = match w6 {
            true => crate::w67::w6(&scratch, runs, quick),
            false => crate::w67::w7(&scratch, runs, quick),
        };
        match measured {
            Ok(r) => rows.extend(r),
            Err(e) => result = Err(e),
        }
    }
    if w4 && !floors_only && result.is_ok() {
        if !as_json {
            bar.suspend(|| eprintln!("W4: filling a ring larger than memory, then sampling..."));
        }
        match crate::w4::rows(&scratch, quick) {
            Ok(r) => rows.extend(r),
            Err(e) => result = Err(e),
        }
    }
    if w5 && !floors_only && result.is_ok() {
        if !as_json {
            bar.suspend(|| eprintln!("W5: LLM self-play steps, {runs} runs of add and sample..."));
        }
        match crate::w5::rows(&scratch, runs, quick) {
            Ok(r) => rows.extend(r),
            Err(e) => result = Err(e),
        }
    }
    if ckpt && !floors_only && result.is_ok() {
        // `runs` is the number of checkpoints per case: p99 needs many (100 standard).
        let calls = if quick { runs.max(20) } else { runs.max(100) };
        let progress = |case: &str| {
            if !as_json {
                bar.suspend(|| eprintln!("ckpt {case}: fill, then {calls} checkpoints..."));
            }
        };
        match crate::ckpt::rows(&scratch, calls, quick, progress) {
            Ok(r) => rows.extend(r),
            Err(e) => result = Err(e),
        }
    }
    bar.finish_and_clear();
    // The buffers are scratch; an error removing them must not hide the figures.
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    let base = match baseline {
        Some(path) => Some(Baseline::read(&path)?),
        None => None,
    };
    if as_json {
        let items: Vec<_> = rows
            .iter()
            .map(|r| {
                let (lo, hi) = min_max(&r.values);
                json!({
                    "workload": r.name,
                    "median": r.median(),
                    "p99": r.p99(),
                    "min": lo,
                    "max": hi,
                    "unit": r.unit,
                    "runs": r.values.len(),
                    "data_bytes": r.data_bytes,
                    "written_bytes": r.written_bytes.iter().copied().max(),
                    "floor": r.floor,
                    "of_floor_pct": r.of_floor(),
                    "vs_baseline": base.as_ref().and_then(|b| b.better(r)),
                })
            })
            .collect();
        say!(
            "{:#}",
            json!({"quick": quick, "profile": replaystore_cli::PROFILE, "build": replaystore_cli::build_line(), "results": items})
        );
        return Ok(Status::SUCCESS);
    }
    say!(
        "{:<24} {:>10} {:>21} {:>9} {:<12} {:>12} {:>12} {:>10} {:>8} {:>8}",
        "workload",
        "median",
        "min-max",
        "p99",
        "unit",
        "data",
        "written",
        "floor",
        "% floor",
        "vs base"
    );
    for r in &rows {
        let (lo, hi) = min_max(&r.values);
        say!(
            "{:<24} {:>10.2} {:>21} {:>9} {:<12} {:>12} {:>12} {:>10} {:>8} {:>8}",
            r.name,
            r.median(),
            format!("{lo:.2}-{hi:.2}"),
            r.p99().map_or("-".into(), |p| format!("{p:.2}")),
            r.unit,
            replaystore_cli::show::human(r.data_bytes),
            r.written_bytes
                .iter()
                .copied()
                .max()
                .map_or("-".into(), replaystore_cli::show::human),
            r.floor.map_or("-".into(), |f| format!("{f:.2}")),
            r.of_floor().map_or("-".into(), |p| format!("{p:.0}%")),
            (base.as_ref().and_then(|b| b.better(r))).map_or("-".into(), |x| format!("{x:.2}x")),
        );
    }
    say!(
        "floor: the best run of the same work by a plain Rust kernel over memory of the same size on this \
         host, this run (bench --help); vs base: times better than --baseline"
    );
    say!(
        "{} (the quoted figures: profile dist)",
        replaystore_cli::build_line()
    );
    Ok(Status::SUCCESS)
}

/// Figures of an earlier `bench --json`, to compare a run against.
struct Baseline {
    medians: Vec<(String, f64)>,
}

impl Baseline {
    fn read(path: &Path) -> Result<Baseline, Error> {
        let bad = |problem: String| Error::InvalidConfig {
            field: "baseline",
            problem: format!("{}: {problem}", path.display()),
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let results = (v.get("results").and_then(|r| r.as_array()))
            .ok_or_else(|| bad("no \"results\" list (write it with bench --json)".into()))?;
        let medians = results
            .iter()
            .filter_map(|r| {
                Some((
                    r.get("workload")?.as_str()?.to_owned(),
                    r.get("median")?.as_f64()?,
                ))
            })
            .collect();
        Ok(Baseline { medians })
    }

    /// How many times better `row` is than the baseline's figure of the same name:
    /// ours / theirs for rates, theirs / ours for times.
    fn better(&self, row: &Row) -> Option<f64> {
        let (_, theirs) = self.medians.iter().find(|(n, _)| *n == row.name)?;
        let ours = row.median();
        Some(if row.unit == "ms" {
            theirs / ours
        } else {
            ours / theirs
        })
    }
}
