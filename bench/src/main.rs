//! `replaystore-bench`: time the workloads of docs/WORKLOADS.md on this machine (also
//! `replaystore bench`, which runs this binary when it sits beside the command).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use replaystore_cli::fail::{EXIT_HELP, Failure};

/// Time the standard workloads (docs/WORKLOADS.md) on this machine: W1/W2 add, sample,
/// prioritized, and save / load / set_state at 1/16, 1/4 and full; W3 one writer with
/// 1, 2 and 4 reader processes. Beside each add, sample and prioritized figure, its
/// floor: the same work by a plain Rust kernel over memory of the same size and row
/// shape, measured in the same run (no files, checks or crash safety).
#[derive(Parser, Debug)]
#[command(name = "replaystore-bench", version, after_help = EXIT_HELP, args_conflicts_with_subcommands = true)]
struct Bench {
    /// W1, W2, W3, all (W1, W2 and W3), ckpt: checkpoint latency p50/p99 as a training
    /// loop sees it (W1 at 100k, 1M and 4M items and W2, uniform and prioritized; --runs
    /// is then the number of checkpoints per case, at least 100), w4: a 36 GB W2 ring,
    /// larger than memory, beside the disk's random-read rate (skipped when the disk
    /// lacks the space; --quick: 140 MB), w5: LLM self-play steps of text and token
    /// arrays (add in batches of 64 and one at a time, sample 256 padded and flat beside
    /// a memcpy of the same bytes), w3e: episodic draws by reader processes against the
    /// writer's own (W1 and W2 as episodes: n-step stacked transitions, the open of a
    /// million steps), w6: 8 policies in a buffer group (independent and lockstep
    /// draws), or w7: HER draws of Fetch-like episodes (their peers:
    /// python/bench/compare.py).
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
    /// An earlier `--json` output: each figure is also given as how many times better
    /// it is than the same figure there.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Only the floors (the plain kernels' figures, as the rows they bound): for
    /// another benchmark (python/bench/compare.py) to set its figures against.
    #[arg(long)]
    floors: bool,
    #[command(subcommand)]
    reader: Option<Reader>,
}

#[derive(Subcommand, Debug)]
enum Reader {
    /// W3's reader process (started by the W3 and W3e workloads): samples `dir` for
    /// `seconds` once a line arrives on stdin, then prints batches/s and its anonymous
    /// resident bytes.
    #[command(hide = true)]
    W3Reader {
        /// The buffer directory.
        dir: PathBuf,
        /// How long to sample.
        #[arg(long)]
        seconds: f64,
        /// What to draw: W1's batches of 256 rows (`rows`), or the episodic draws of
        /// W3e (`w1e`: 256 transitions, `w2e`: 32 of W2's frames, both with 3-step
        /// returns and 4 stacked frames).
        #[arg(long, default_value = "rows")]
        unit: String,
    },
}

fn main() -> ExitCode {
    let b = match Bench::try_parse() {
        Ok(b) => b,
        Err(e) => {
            // --help and --version print and succeed; a bad argument says why (status 2).
            let _closed_stream_says_nothing = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let done = match b.reader {
        Some(Reader::W3Reader { dir, seconds, unit }) => {
            replaystore_bench::reader(&dir, seconds, &unit)
        }
        None => replaystore_bench::run(
            &b.workload,
            b.quick,
            b.runs,
            b.dir,
            b.json,
            b.baseline,
            b.floors,
        ),
    };
    done.map_err(Failure::from)
        .unwrap_or_else(|f| f.report())
        .into()
}
