//! The `replaystore` command: look at, check and try out replay buffers.
//!
//! Exit status: 0 success (for `verify`: the buffer is sound); 1 `verify` found damage,
//! or the demo's own checks failed; 2 an error (not a buffer, locked, unreadable, bad
//! arguments).

mod bench;
mod demo;
mod w3;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use replaystore::{Error, Info, ReplayBuffer, inspect, snapshots, verify};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "replaystore",
    version,
    about = "Inspect, verify and try out replaystore buffers"
)]
#[command(
    after_help = "Exit status: 0 success; 1 damage found (verify) or a failed demo check; 2 error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fill a buffer from a small synthetic environment, sample, reopen, check, time.
    Demo {
        /// Where to leave the buffer (default: a new folder under the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Environment steps to add.
        #[arg(long, default_value_t = 200_000)]
        steps: u64,
    },
    /// Print a buffer's schema, capacity, fill, counters and files.
    Info {
        /// The buffer directory.
        dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List a buffer's snapshots (checkpoints) with the bytes each shares and owns;
    /// delete one or keep the newest K (these take the writer lock).
    Snapshots {
        /// The buffer directory.
        dir: PathBuf,
        /// Delete this snapshot.
        #[arg(long, value_name = "NAME")]
        delete: Option<String>,
        /// Delete all but the K newest snapshots.
        #[arg(long, value_name = "K")]
        keep_last: Option<usize>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Time the standard workloads (../shared/WORKLOADS.md) on this machine: W1/W2 add,
    /// sample, prioritized, and save / load / set_state at 1/16, 1/4 and full; W3 one
    /// writer with 1, 2 and 4 reader processes.
    Bench {
        /// W1, W2, W3 or all.
        #[arg(long, default_value = "all")]
        workload: String,
        /// Capacities and iteration counts divided by 16: a quick look, not the standard
        /// figures.
        #[arg(long)]
        quick: bool,
        /// Timed runs per figure (median and min-max are reported).
        #[arg(long, default_value_t = 7)]
        runs: usize,
        /// Where to put the scratch buffers (default: the system's temporary folder).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// W3's reader process (started by `bench`): samples `dir` for `seconds` once a
    /// line arrives on stdin, then prints batches/s and its anonymous resident bytes.
    #[command(hide = true)]
    W3Reader {
        /// The buffer directory.
        dir: PathBuf,
        /// How long to sample.
        #[arg(long)]
        seconds: f64,
    },
    /// Check every checksum and stamp; exit 1 with file, offset and problem if damaged.
    Verify {
        /// The buffer directory.
        dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { dir, steps } => demo::run(dir, steps),
        Command::Info { dir, json } => info(&dir, json),
        Command::Verify { dir, json } => run_verify(&dir, json),
        Command::Bench {
            workload,
            quick,
            runs,
            dir,
            json,
        } => bench::run(&workload, quick, runs, dir, json),
        Command::W3Reader { dir, seconds } => w3::reader(&dir, seconds),
        Command::Snapshots {
            dir,
            delete,
            keep_last,
            json,
        } => run_snapshots(&dir, delete.as_deref(), keep_last, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn info_json(info: &Info) -> serde_json::Value {
    let fields: Vec<_> = info
        .schema
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "dtype": f.dtype().name(), "shape": f.shape()}))
        .collect();
    let c = &info.commit;
    json!({
        "dir": info.dir,
        "uuid": info.uuid,
        "format_version": info.format_version,
        "schema": fields,
        "capacity": info.capacity,
        "len": info.len(),
        "head": c.head,
        "tail": c.tail,
        "added": c.tail,
        "evicted": c.head - c.cleared,
        "cleared": c.cleared,
        "sampled": c.sampled,
        "generation": c.generation,
        "clean": c.is_clean(),
        "segment_slots": info.segment_slots,
        "segment_count": info.segment_count,
        "row_stride": info.row_stride,
        "data_bytes": info.data_bytes,
        "bytes_on_disk": info.bytes_on_disk,
        "whole_episodes": info.whole_episodes,
        "fragments": info.fragments,
        "episodes": info.episodes.as_ref().map(|e| json!({
            "count": e.count,
            "ended": e.ended,
            "steps_min": e.steps.map(|s| s.0),
            "steps_mean": e.steps.map(|s| s.1),
            "steps_max": e.steps.map(|s| s.2),
            "mean_return": e.mean_return,
            "problem": e.problem,
        })),
        "priorities": info.priorities.as_ref().map(|p| json!({
            "alpha": p.alpha,
            "eps": p.eps,
            "arity": p.arity,
            "total": p.total,
            "min": p.min_max.map(|m| m.0),
            "max": p.min_max.map(|m| m.1),
            "zero": p.zero,
            "max_seen": p.max_seen,
            "updates": p.updates,
            "stale_updates": p.stale_updates,
            "histogram": p.histogram.iter()
                .map(|&(lo, hi, n)| json!({"low": lo, "high": hi, "count": n}))
                .collect::<Vec<_>>(),
        })),
    })
}

/// Width of the longest histogram bar.
const BAR: u64 = 40;

fn print_priorities(p: &replaystore::priorities::PriorityInfo) {
    println!(
        "priorities alpha {}  eps {}  {}-ary sum-tree, total {:.6e}",
        p.alpha, p.eps, p.arity, p.total
    );
    match p.min_max {
        Some((lo, hi)) => println!(
            "           priority+eps of live items: min {lo:.4e}  max {hi:.4e}{}",
            if p.zero > 0 {
                format!("  ({} at 0)", p.zero)
            } else {
                String::new()
            }
        ),
        None if p.zero > 0 => println!("           all {} live items have priority 0", p.zero),
        None => println!("           no live items"),
    }
    println!(
        "           new items get {:.4e}; {} updates applied, {} stale skipped",
        p.max_seen, p.updates, p.stale_updates
    );
    let most = p.histogram.iter().map(|b| b.2).max().unwrap_or(0).max(1);
    for &(lo, hi, n) in &p.histogram {
        let bar = "#".repeat(((n * BAR).div_ceil(most)) as usize);
        println!("  {lo:>10.3e} .. {hi:<10.3e} {n:>10} {bar}");
    }
}

fn info(dir: &std::path::Path, as_json: bool) -> Result<ExitCode, Error> {
    let info = inspect(dir)?;
    if as_json {
        println!("{:#}", info_json(&info));
        return Ok(ExitCode::SUCCESS);
    }
    let c = &info.commit;
    println!("buffer     {}", info.dir.display());
    println!(
        "uuid       {}  (format version {})",
        info.uuid, info.format_version
    );
    println!("schema");
    for f in info.schema.fields() {
        println!("  {:<16} {:<5} {:?}", f.name(), f.dtype().name(), f.shape());
    }
    let pct = 100.0 * info.len() as f64 / info.capacity as f64;
    println!(
        "fill       {} / {} items ({pct:.1}%)",
        info.len(),
        info.capacity
    );
    println!("indices    {}..{}", c.head, c.tail);
    println!(
        "counters   added {}  evicted {}  cleared {}  sampled {}",
        c.tail,
        c.head - c.cleared,
        c.cleared,
        c.sampled
    );
    println!(
        "commit     generation {}, {}",
        c.generation,
        if c.is_clean() {
            "closed cleanly"
        } else {
            "writer open or not closed cleanly (open recovers)"
        }
    );
    println!(
        "files      MANIFEST + {} segments of {} slots x {} bytes{}",
        info.segment_count,
        info.segment_slots,
        info.row_stride,
        if info.priorities.is_some() {
            " + priorities.tree"
        } else {
            ""
        }
    );
    println!(
        "disk       {} on disk, {} of live item data",
        human(info.bytes_on_disk),
        human(info.data_bytes)
    );
    if info.fragments {
        println!("units      fragments (each add / add_batch call is drawn whole)");
    }
    if let Some(e) = &info.episodes {
        match (&e.problem, e.steps) {
            (Some(p), _) => println!("episodes   unreadable: {p}"),
            (None, Some((lo, mean, hi))) => println!(
                "episodes   {} ({} ended, {} open); steps min {lo} mean {mean:.1} max {hi}{}",
                e.count,
                e.ended,
                e.count - e.ended,
                e.mean_return
                    .map_or(String::new(), |r| format!("; mean return {r:.3}"))
            ),
            (None, None) => println!("episodes   none yet"),
        }
        if info.whole_episodes {
            println!("eviction   whole episodes (the oldest episode goes at once)");
        }
    }
    let snaps = snapshots(dir)?;
    println!(
        "snapshots  {}{}",
        snaps.len(),
        if snaps.is_empty() {
            String::new()
        } else {
            format!(
                " ({}; `replaystore snapshots` for sizes)",
                snaps
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if let Some(p) = &info.priorities {
        print_priorities(p);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_verify(dir: &std::path::Path, as_json: bool) -> Result<ExitCode, Error> {
    let report = verify(dir)?;
    if as_json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| json!({"file": p.file, "offset": p.offset, "problem": p.what}))
            .collect();
        println!(
            "{:#}",
            json!({
                "sound": report.is_sound(),
                "problems": problems,
                "notes": report.notes,
                "items_checked": report.items_checked,
                "segments_checked": report.segments_checked,
                "snapshots_checked": report.snapshots_checked,
            })
        );
    } else {
        for n in &report.notes {
            println!("note: {n}");
        }
        for p in &report.problems {
            println!("problem: {p}");
        }
        println!(
            "{}: {} segments, {} items checked ({} snapshots), {} problems",
            if report.is_sound() {
                "sound"
            } else {
                "DAMAGED"
            },
            report.segments_checked,
            report.items_checked,
            report.snapshots_checked,
            report.problems.len()
        );
    }
    Ok(if report.is_sound() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_snapshots(
    dir: &std::path::Path,
    delete: Option<&str>,
    keep_last: Option<usize>,
    as_json: bool,
) -> Result<ExitCode, Error> {
    // Listing needs no lock; deleting is the writer's job, so it opens as the writer.
    let mut deleted = Vec::new();
    if delete.is_some() || keep_last.is_some() {
        let mut buf = ReplayBuffer::open(dir)?;
        if let Some(name) = delete {
            buf.delete_snapshot(name)?;
            deleted.push(name.to_owned());
        }
        if let Some(k) = keep_last {
            deleted.extend(buf.keep_last(k)?);
        }
        buf.close()?;
    } else {
        // Fails as "not a buffer" rather than listing nothing.
        inspect(dir)?;
    }
    let list = snapshots(dir)?;
    if as_json {
        let items: Vec<_> = list
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "generation": s.commit.map(|c| c.generation),
                    "head": s.commit.map(|c| c.head),
                    "tail": s.commit.map(|c| c.tail),
                    "len": s.len(),
                    "bytes_shared": s.bytes_shared,
                    "bytes_owned": s.bytes_owned,
                    "created_unix": s.created
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_secs()),
                    "problem": s.problem,
                })
            })
            .collect();
        println!("{:#}", json!({"snapshots": items, "deleted": deleted}));
        return Ok(ExitCode::SUCCESS);
    }
    for name in &deleted {
        println!("deleted {name}");
    }
    if list.is_empty() {
        println!("no snapshots in {}", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<24} {:>10} {:>12} {:>12} {:>12}  status",
        "name", "generation", "items", "shared", "owned"
    );
    for s in &list {
        println!(
            "{:<24} {:>10} {:>12} {:>12} {:>12}  {}",
            s.name,
            s.commit.map_or("-".into(), |c| c.generation.to_string()),
            s.len(),
            human(s.bytes_shared),
            human(s.bytes_owned),
            s.problem.as_deref().unwrap_or("ok")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Bytes in binary units, for people.
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS.get(u).unwrap_or(&"B"))
}
