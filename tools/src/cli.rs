//! The `replaystore` command: look at, check, move and try out replay buffers. The exit
//! statuses are in `fail::EXIT_HELP` (and `--help`). One [`run`] serves the binary and
//! the Python package's entry points.

use crate::fail::Status;
use crate::{check, demo, info};
use crate::{fail, transfer};

use std::ffi::OsString;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use replaystore::{Batch, Lanes, Reader, Request};

use crate::fail::Failure;
use crate::show::{Format, Printer};
use crate::source::{Source, Span, select_fields, values_of};

#[derive(Parser)]
#[command(
    name = "replaystore",
    version,
    about = "Inspect, verify and try out replaystore buffers"
)]
#[command(after_help = fail::EXIT_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fill a buffer from a small synthetic environment, sample, reopen, check, time.
    #[command(after_help = fail::EXIT_HELP)]
    Demo {
        /// Where to leave the buffer (default: a new folder under the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Environment steps to add (the buffer holds half of them, so that its ring
        /// wraps and evicts).
        #[arg(long, default_value_t = 200_000)]
        steps: u64,
    },
    /// Print a buffer's schema, capacity, fill, counters and files.
    #[command(after_help = fail::EXIT_HELP)]
    Info {
        /// The buffer directory.
        dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also count the live and removed items of each group of these fields
        /// (comma-separated: `--by env_id,pid`), as draws by group see them.
        #[arg(long, value_delimiter = ',')]
        by: Vec<String>,
    },
    /// List a buffer's snapshots (checkpoints) with the bytes each shares and owns;
    /// delete one or keep the newest K (these take the writer lock).
    #[command(after_help = fail::EXIT_HELP)]
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
    /// Time the standard workloads (docs/WORKLOADS.md) on this machine, each figure
    /// beside this host's floor: runs `replaystore-bench` (a developer's tool, built from
    /// the source tree with `cargo build --release --workspace`) when it sits beside this
    /// command, with these arguments (`replaystore-bench --help` lists them). The command
    /// pip installs leaves the workloads out.
    #[command(after_help = fail::EXIT_HELP)]
    Bench {
        /// What `replaystore-bench` takes: `--workload W1 --quick --json` and the rest.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Check the manifest, both commit slots, every segment header, every item's stamp
    /// and checksum, the priority tree, the episode chain and each snapshot's files;
    /// exit 1 listing file, offset and problem if anything is damaged. Never writes.
    #[command(after_help = fail::EXIT_HELP)]
    Verify {
        /// The buffer (or lane set) directory.
        dir: PathBuf,
        /// Also check every snapshot's items, episodes and priority tree, as the live
        /// buffer's are checked (their segments are mostly shared with the live buffer's).
        #[arg(long)]
        deep: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print items by index: all live items, a range of positions, or the newest N.
    #[command(after_help = fail::EXIT_HELP)]
    Dump {
        /// The buffer (or lane set) directory.
        dir: PathBuf,
        #[command(flatten)]
        pick: Pick,
        /// table (for people), jsonl or csv.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Show whole text and arrays in a table (else text is cut at 200 characters).
        #[arg(long)]
        full: bool,
    },
    /// Draw a batch as a trainer would (from a reader: no lock, nothing written) and
    /// print it.
    #[command(after_help = fail::EXIT_HELP)]
    Sample {
        /// The buffer (or lane set) directory.
        dir: PathBuf,
        /// Items to draw.
        #[arg(short = 'n', long = "num", visible_alias = "n", default_value_t = 8)]
        n: usize,
        /// Draw by priority (with importance weights).
        #[arg(long)]
        prioritized: bool,
        /// Importance-weight exponent for --prioritized.
        #[arg(long, default_value_t = 0.4, requires = "prioritized")]
        beta: f64,
        /// Draw without replacement (uniform only).
        #[arg(long, conflicts_with = "prioritized")]
        without_replacement: bool,
        /// Seed of the draw (the same seed draws the same batch from the same items).
        #[arg(long)]
        seed: Option<u64>,
        /// Sample this snapshot instead of the live items.
        #[arg(long, value_name = "NAME")]
        snapshot: Option<String>,
        /// For a buffer group: the member to draw from.
        #[arg(long, value_name = "NAME")]
        member: Option<String>,
        /// Only these fields (comma-separated).
        #[arg(long, value_name = "F1,F2")]
        fields: Option<String>,
        /// table (for people), jsonl or csv.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Write items to a file: NumPy's .npz (one .npy array per fixed field, item
    /// dimension first, for numpy.load), Apache Parquet (every field, variable-length
    /// ones as strings, binary and lists: pandas, pyarrow, polars, Hugging Face datasets)
    /// or JSON lines (one object per item). Streams: memory stays at one chunk whatever
    /// the size. Parquet is in `cargo build` and the wheel, not in `pip install ./python`
    /// unless built with `--features parquet`.
    #[command(after_help = fail::EXIT_HELP)]
    Export {
        /// The buffer (or lane set) directory.
        dir: PathBuf,
        /// The file to write (under a temporary name, then renamed); its extension
        /// names the format: .parquet or .pq, .jsonl or .ndjson, else .npz.
        out: PathBuf,
        #[command(flatten)]
        pick: Pick,
        /// The format, whatever the extension.
        #[arg(long, value_enum)]
        to: Option<transfer::FileKind>,
    },
    /// Create a buffer from a file of items: an .npz of arrays of equal length
    /// (np.savez; the schema from their dtypes and shapes), a Parquet file (one field
    /// per column) or JSON lines (one field per key, types inferred); items in order.
    #[command(after_help = fail::EXIT_HELP)]
    Import {
        /// The file to read; its extension names the format: .parquet or .pq, .jsonl or
        /// .ndjson, else .npz.
        input: PathBuf,
        /// The buffer directory to create (must not exist, or be empty).
        dir: PathBuf,
        /// Items the buffer holds (default: the arrays' length). With fewer, the newest
        /// items are kept.
        #[arg(long)]
        capacity: Option<u64>,
        /// Keep priorities, with this alpha (items start at priority 1).
        #[arg(long, value_name = "ALPHA")]
        prioritized: Option<f64>,
        /// The format, whatever the extension.
        #[arg(long, value_enum)]
        from: Option<transfer::FileKind>,
    },
}

/// Which items and fields `dump` and `export` read.
#[derive(clap::Args)]
struct Pick {
    /// Positions A..B (either end may be left out), counted from the ring's first item
    /// ever (for lane K, from K << 56): what `info` shows as indices.
    #[arg(long, value_name = "A..B", value_parser = Span::parse, conflicts_with = "last")]
    range: Option<Span>,
    /// The newest N items (of each lane, for a lane set).
    #[arg(long, value_name = "N")]
    last: Option<u64>,
    /// Only these fields (comma-separated).
    #[arg(long, value_name = "F1,F2")]
    fields: Option<String>,
    /// For a lane set: only this lane (default: every lane, one after another).
    #[arg(long, value_name = "K")]
    lane: Option<u32>,
    /// For a buffer group: this member (a group's members are read one at a time).
    #[arg(long, value_name = "NAME", conflicts_with = "lane")]
    member: Option<String>,
    /// Read this snapshot instead of the live items.
    #[arg(long, value_name = "NAME")]
    snapshot: Option<String>,
    /// Keep the items removed by draws, `remove` or `max_use` (left out by default,
    /// and counted), with a `removed` column naming why each was removed.
    #[arg(long)]
    include_removed: bool,
}

impl Pick {
    /// The lane to read: `--lane`, or the lane of `--member` in the group in `dir`.
    fn lane_in(&self, dir: &Path) -> Result<Option<u32>, Failure> {
        let Some(name) = &self.member else {
            return Ok(self.lane);
        };
        let io = replaystore::io::OsIo;
        let group = replaystore::internal::storage::read_group(&io, dir)?;
        let members = group.as_ref().map(|g| &g.members[..]).unwrap_or(&[]);
        match members.iter().find(|m| &m.name == name) {
            Some(m) => Ok(Some(m.lane)),
            None => Err(replaystore::Error::NoSuchMember {
                dir: dir.to_path_buf(),
                name: name.clone(),
                members: members.iter().map(|m| m.name.clone()).collect(),
                creatable: true,
            }
            .into()),
        }
    }

    fn span(&self) -> Span {
        Span {
            last: self.last,
            ..self.range.unwrap_or_default()
        }
    }
}

/// `replaystore bench ARGS`: `replaystore-bench ARGS`, the binary beside this one. The
/// workloads are not compiled into the command users install; a build from the source
/// tree has both binaries side by side.
fn bench(args: &[OsString]) -> Result<Status, Failure> {
    let beside = std::env::current_exe()
        .ok()
        .map(|me| me.with_file_name(format!("replaystore-bench{}", std::env::consts::EXE_SUFFIX)))
        .filter(|p| p.is_file());
    let Some(program) = beside else {
        return Err(Failure::Usage(
            "bench: the benchmark workloads are not part of this build (the command pip \
             installs leaves them out). From the source tree: cargo run --release -p \
             replaystore-bench -- --workload W1 (or cargo build --release --workspace, then \
             target/release/replaystore bench --workload W1)"
                .into(),
        ));
    };
    let status = std::process::Command::new(&program)
        .args(args)
        .status()
        .map_err(|e| Failure::file("run", &program, e))?;
    Ok(Status(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(8),
    ))
}

/// Runs the command line `args` (the program's name first, as `std::env::args_os`
/// gives it) and returns its exit status: the `replaystore` binary's `main`, and the
/// Python package's console script and `python -m replaystore`.
///
/// ```
/// use replaystore_cli::cli;
/// let dir = tempfile::tempdir()?;
/// let status = cli::run(["replaystore", "info", dir.path().to_str().unwrap()].map(Into::into));
/// assert_eq!(status.0, 3); // not a buffer: no MANIFEST in the folder
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run(args: impl IntoIterator<Item = OsString>) -> Status {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print and succeed; a bad argument says why (status 2).
            let _closed_stream_says_nothing = e.print();
            return Status(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let result = match cli.command {
        Command::Demo { dir, steps } => demo::run(dir, steps).map_err(Failure::from),
        Command::Info { dir, json, by } => info::info(&dir, json, &by),
        Command::Verify { dir, deep, json } => check::run_verify(&dir, deep, json),
        Command::Dump {
            dir,
            pick,
            format,
            full,
        } => dump(&dir, &pick, format, full),
        Command::Sample {
            dir,
            n,
            prioritized,
            beta,
            without_replacement,
            seed,
            snapshot,
            member,
            fields,
            format,
        } => {
            let draw = Draw {
                n,
                beta: prioritized.then_some(beta),
                without_replacement,
                seed,
            };
            let pick = Pick {
                range: None,
                last: None,
                fields: None,
                lane: None,
                member,
                snapshot: None,
                include_removed: false,
            };
            // A group's member is a buffer of its own, in its lane's folder.
            match replaystore::internal::storage::read_group(&replaystore::io::OsIo, &dir) {
                Ok(Some(_)) => pick.lane_in(&dir).and_then(|lane| match lane {
                    Some(k) => {
                        let member = replaystore::internal::storage::lane_dir(&dir, k);
                        let one = Some(member.as_path());
                        sample(
                            &dir,
                            one,
                            snapshot.as_deref(),
                            &draw,
                            fields.as_deref(),
                            format,
                        )
                    }
                    None => Err(Failure::Usage(
                        "a group: name the member to draw from with --member".into(),
                    )),
                }),
                Ok(None) => sample(
                    &dir,
                    None,
                    snapshot.as_deref(),
                    &draw,
                    fields.as_deref(),
                    format,
                ),
                Err(e) => Err(e.into()),
            }
        }
        Command::Export { dir, out, pick, to } => pick.lane_in(&dir).and_then(|lane| {
            let done = transfer::export(&transfer::ExportArgs {
                dir: &dir,
                out: &out,
                snapshot: pick.snapshot.as_deref(),
                lane,
                span: pick.span(),
                include_removed: pick.include_removed,
                fields: pick.fields.as_deref(),
                format: to,
                quiet: false,
            })?;
            for line in done.report(&out) {
                eprintln!("{line}");
            }
            Ok(Status::SUCCESS)
        }),
        Command::Import {
            input,
            dir,
            capacity,
            prioritized,
            from,
        } => transfer::import(&transfer::ImportArgs {
            input: &input,
            format: from,
            dir: &dir,
            capacity,
            prioritized,
            quiet: false,
        }),
        Command::Bench { args } => bench(&args),
        Command::Snapshots {
            dir,
            delete,
            keep_last,
            json,
        } => info::run_snapshots(&dir, delete.as_deref(), keep_last, json),
    };
    result.unwrap_or_else(|f| f.report())
}

/// Rows `dump` reads and prints per call.
const DUMP_CHUNK: u64 = 1024;

fn dump(dir: &Path, pick: &Pick, format: Format, full: bool) -> Result<Status, Failure> {
    let mut source = Source::open(dir, pick.snapshot.as_deref(), pick.lane_in(dir)?)?;
    let plan = source.plan(&pick.span(), pick.include_removed)?;
    let schema = source.schema().clone();
    let chosen = select_fields(&schema, pick.fields.as_deref())?;
    let var = chosen.var_fields(&schema);
    let out = BufWriter::new(std::io::stdout().lock());
    let mut printer =
        Printer::new(out, format, chosen.fields(&schema), false).with_values(var.clone(), full);
    if plan.include_removed {
        printer = printer.with_removed();
    }
    source.read_chunks(&plan, DUMP_CHUNK, "dump", |indices, batch, removed| {
        let vals = values_of(batch, &var)?;
        printer.rows(indices, None, &chosen.columns(batch), &vals, removed)
    })?;
    printer.finish()?;
    if let Some(note) = plan.skipped_note() {
        eprintln!("{note}");
    }
    Ok(Status::SUCCESS)
}

/// What `sample` draws.
struct Draw {
    n: usize,
    /// Prioritized, with this beta.
    beta: Option<f64>,
    without_replacement: bool,
    seed: Option<u64>,
}

/// `replaystore sample`: a draw from the buffer or lane set in `dir`, or from the one
/// buffer `member` (a group's member, whose indices are its lane's).
fn sample(
    dir: &Path,
    member: Option<&Path>,
    snapshot: Option<&str>,
    draw: &Draw,
    fields: Option<&str>,
    format: Format,
) -> Result<Status, Failure> {
    let lanes = replaystore::internal::storage::read_lanes(&replaystore::io::OsIo, dir)?;
    if lanes.is_some() && snapshot.is_some() {
        return Err(Failure::Usage(
            "a lane set has no snapshots of its own: sample a lane's (lane-K/) instead".into(),
        ));
    }
    let request: Request = match (draw.beta, draw.without_replacement) {
        (Some(beta), _) => Request::rows(draw.n).prioritized(beta).into(),
        (None, true) => Request::rows(draw.n).without_replacement().into(),
        (None, false) => Request::rows(draw.n).into(),
    };
    // `Reader` and `Lanes<Reader>` have these methods alike, through no common trait.
    macro_rules! draw_from {
        ($reader:expr) => {{
            let mut r = $reader;
            if let Some(seed) = draw.seed {
                r.reseed(seed);
            }
            // Sized by the draw itself, which checks the size first (an error, not an
            // abort, for `-n 2^45`).
            let mut out = Batch::default();
            match r.sample_into(request, &mut out) {
                // The option asked for what the buffer lacks: say which option.
                Err(replaystore::Error::NotPrioritized { dir }) => {
                    return Err(Failure::Usage(format!(
                        "{}: the buffer has no priorities to draw by: leave out \
                         --prioritized (a buffer has them when a program creates it with \
                         alpha= in Python, Config::prioritized in Rust)",
                        dir.display()
                    )));
                }
                drawn => drawn?,
            }
            (r.schema().clone(), out)
        }};
    }
    // A buffer of one ring opens as a lane set of one lane.
    let (schema, batch) = match (snapshot, member) {
        (Some(name), _) => draw_from!(Reader::open_snapshot(member.unwrap_or(dir), name)?),
        (None, Some(one)) => draw_from!(Reader::open(one)?),
        (None, None) => draw_from!(Lanes::open_reader(dir)?),
    };
    let chosen = select_fields(&schema, fields)?;
    let picked = chosen.fields(&schema);
    let var = chosen.var_fields(&schema);
    let cols = chosen.columns(&batch);
    let vals = values_of(&batch, &var)?;
    let mut printer = Printer::new(
        BufWriter::new(std::io::stdout().lock()),
        format,
        picked,
        draw.beta.is_some(),
    )
    .with_values(var, false);
    printer.rows(
        batch.indices(),
        draw.beta.is_some().then(|| batch.weights()),
        &cols,
        &vals,
        None,
    )?;
    printer.finish()?;
    Ok(Status::SUCCESS)
}
