//! W3 of docs/WORKLOADS.md, many processes on one buffer: the W1 buffer full, this
//! process adding one item at a time while R reader processes (this binary again, the
//! hidden `w3-reader` command) each sample batches of 256 uniformly. Measured in the
//! same run: the single-process baselines (W1 sample with nothing else running, W1 add1
//! with no reader), then for each R the batches/s of every reader, the writer's adds/s,
//! and each reader's anonymous resident memory (what it holds apart from the shared
//! file pages, which must not grow with the buffer).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use replaystore_cli::fail::Status;
use std::time::{Duration, Instant};

use crate::workloads::Workload;
use replaystore::{Batch, Config, Error, Reader, ReplayBuffer, Request};

use crate::row::Row;

/// The draw of `unit`: W1's rows (`rows`), or the episodic draws of W3e
/// (`w3e`), which a reader process draws.
pub(crate) fn request(unit: &str) -> Result<Request<'static>, Error> {
    const OBS: &[&str] = &["obs"];
    match unit {
        "rows" => Ok(Request::rows(256).into()),
        "w1e" => Ok(Request::transitions(256, OBS)
            .nstep(3, 0.99)
            .stack(4)
            .into()),
        "w2e" => Ok(Request::transitions(32, OBS).nstep(3, 0.99).stack(4).into()),
        other => Err(Error::InvalidConfig {
            field: "unit",
            problem: format!("{other:?} is not rows, w1e or w2e"),
        }),
    }
}

/// An I/O error of this bench's own process handling, as the engine reports them.
fn io_error(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Batch size of W1 sampling.
const BATCH: usize = 256;

/// Adds items one at a time for `seconds`, returning items per second.
fn add_for(buf: &mut ReplayBuffer, seconds: f64) -> Result<f64, Error> {
    let w = Workload::W1;
    let t = Instant::now();
    let mut added = 0u64;
    while t.elapsed().as_secs_f64() < seconds {
        w.fill(buf, 100)?;
        added += 100;
    }
    Ok(added as f64 / t.elapsed().as_secs_f64())
}

/// Samples batches of 256 for `seconds`, returning batches per second.
pub(crate) fn sample_for(
    mut sample: impl FnMut(&mut Batch) -> Result<(), Error>,
    batch: &mut Batch,
    seconds: f64,
) -> Result<f64, Error> {
    let t = Instant::now();
    let mut batches = 0u64;
    while t.elapsed().as_secs_f64() < seconds {
        for _ in 0..64 {
            sample(batch)?;
        }
        batches += 64;
    }
    Ok(batches as f64 / t.elapsed().as_secs_f64())
}

/// This process's anonymous resident memory in bytes (`RssAnon` of /proc/self/status):
/// its own pages, not the file pages it shares with the writer.
pub(crate) fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The `w3-reader` child: opens `dir` as a reader, says `ready`, waits for a line on
/// stdin, samples `unit` (see `request`) for `seconds`, and prints
/// `batches_per_s rss_anon_bytes`.
///
/// ```no_run
/// // In the process `replaystore-bench w3-reader DIR --seconds 2` starts:
/// replaystore_bench::reader(std::path::Path::new("w1-buffer"), 2.0, "rows")?;
/// # Ok::<(), replaystore::Error>(())
/// ```
pub fn reader(dir: &Path, seconds: f64, unit: &str) -> Result<Status, Error> {
    let request = request(unit)?;
    let mut reader = Reader::open(dir)?;
    let mut batch = Batch::default();
    // Touch the outputs once so the batch's memory counts (and an episodic reader reads
    // its tables), then wait for the start.
    reader.sample_into(request, &mut batch)?;
    say!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let rate = sample_for(|b| reader.sample_into(request, b), &mut batch, seconds)?;
    say!("{rate} {}", rss_anon());
    Ok(Status::SUCCESS)
}

/// One timed run with `readers` reader processes: their batches/s and resident
/// memory, and the writer's adds/s over the same time.
fn run_once(
    buf: &mut ReplayBuffer,
    dir: &Path,
    readers: usize,
    seconds: f64,
) -> Result<(Vec<(f64, u64)>, f64), Error> {
    run_readers(dir, readers, seconds, "rows", || add_for(buf, seconds))
}

/// Starts `readers` reader processes drawing `unit` from `dir`, lets them sample for
/// `seconds` while this process runs `meanwhile` (adding, or nothing), and returns
/// each reader's `(batches/s, anonymous RSS)` with what `meanwhile` returned.
pub(crate) fn run_readers(
    dir: &Path,
    readers: usize,
    seconds: f64,
    unit: &str,
    meanwhile: impl FnOnce() -> Result<f64, Error>,
) -> Result<(Vec<(f64, u64)>, f64), Error> {
    let mut children = Vec::new();
    let command = crate::again();
    let exe = Path::new(command.get_program());
    for _ in 0..readers {
        let mut child = crate::again()
            .arg("w3-reader")
            .arg(dir)
            .args(["--seconds", &seconds.to_string(), "--unit", unit])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| io_error("spawn", exe, e))?;
        let mut out = BufReader::new(child.stdout.take().ok_or(Error::Unsupported("pipe"))?);
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| io_error("read", exe, e))?;
        if line.trim() != "ready" {
            let _ = child.kill();
            return Err(Error::InvalidSample(format!(
                "w3 reader did not start: {line:?}"
            )));
        }
        children.push((child, out));
    }
    for (child, _) in &mut children {
        if let Some(stdin) = &mut child.stdin {
            use std::io::Write;
            let _ = writeln!(stdin, "go");
        }
    }
    let adds = meanwhile()?;
    let mut results = Vec::new();
    for (mut child, mut out) in children {
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| io_error("read", exe, e))?;
        let _ = child.wait();
        let mut words = line.split_whitespace();
        let rate = words.next().and_then(|w| w.parse().ok());
        let rss = words.next().and_then(|w| w.parse().ok());
        match (rate, rss) {
            (Some(rate), Some(rss)) => results.push((rate, rss)),
            _ => {
                return Err(Error::InvalidSample(format!("w3 reader printed {line:?}")));
            }
        }
    }
    Ok((results, adds))
}

/// The W3 rows: baselines, then per R the readers' batches/s (each reader of each run
/// is one value), their ratio to the baseline, the writer's adds/s and its ratio, and
/// the readers' anonymous resident memory.
pub fn rows(capacity: u64, scratch: &Path, runs: usize, quick: bool) -> Result<Vec<Row>, Error> {
    let w = Workload::W1;
    let data = capacity * w.schema()?.item_bytes() as u64;
    let dir = scratch.join("w3");
    let mut buf = ReplayBuffer::create(&dir, Config::new(w.schema()?, capacity).seed(3))?;
    w.fill(&mut buf, capacity)?;
    let seconds = if quick { 0.5 } else { 2.0 };
    let mut batch = Batch::default();
    let mut base_sample = Row::new("W3 base sample".into(), "k batches/s", data);
    let mut base_add = Row::new("W3 base add1".into(), "M items/s", data);
    for _ in 0..runs {
        let rate = sample_for(|b| buf.sample_into(BATCH, b), &mut batch, seconds)?;
        base_sample.values.push(rate / 1e3);
        base_add.values.push(add_for(&mut buf, seconds)? / 1e6);
    }
    let (sample0, add0) = (base_sample.median() * 1e3, base_add.median() * 1e6);
    let mut rows = vec![base_sample, base_add];
    // WORKLOADS.md asks for R = 1, 2, 4; on a machine with fewer cores than R + 1 the
    // readers share cores with each other and the writer, which the figures show.
    for readers in [1usize, 2, 4] {
        let name = |what: &str| format!("W3 R={readers} {what}");
        let mut per_reader = Row::new(name("reader"), "k batches/s", data);
        let mut reader_ratio = Row::new(name("reader/base"), "ratio", data);
        let mut writer = Row::new(name("writer"), "M items/s", data);
        let mut writer_ratio = Row::new(name("writer/base"), "ratio", data);
        let mut rss = Row::new(name("reader RSS"), "MiB anon", data);
        for _ in 0..runs {
            let (results, adds) = run_once(&mut buf, &dir, readers, seconds)?;
            for (rate, bytes) in results {
                per_reader.values.push(rate / 1e3);
                reader_ratio.values.push(rate / sample0);
                rss.values.push(bytes as f64 / (1 << 20) as f64);
            }
            writer.values.push(adds / 1e6);
            writer_ratio.values.push(adds / add0);
        }
        rows.extend([per_reader, reader_ratio, writer, writer_ratio, rss]);
        std::thread::sleep(Duration::from_millis(100));
    }
    buf.close()?;
    Ok(rows)
}
