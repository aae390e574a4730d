//! `replaystore bench --workload w4`: a W2-shaped buffer larger than this machine's
//! memory (issue 28, point 4; docs/WORKLOADS.md W4). Figures, each beside the disk's
//! own rate measured in the same run:
//!
//! - `fill`: items/s of filling the ring with `add_batch` (the write-behind paces it at
//!   the disk's write rate), and its flush;
//! - `disk random read`: rows/s of a plain loop reading one row's 32 KiB at random
//!   offsets of the segment files with `O_DIRECT` (no page cache), one read at a time,
//!   and `x16` the same from 16 threads: what one read in flight gives, and what the
//!   device gives to many (a batch's rows are asked for all at once);
//! - `sample` (mapped writer) and `reader pread sample`: batches of 32, and their rows/s
//!   as a share of the random-read floor (rows in the page cache come faster: the share
//!   of the ring that fits in memory is printed);
//! - the anonymous resident memory of the writer and of the pread reader after sampling.
//!
//! Skipped with a message when the folder's file system has less free space than the
//! ring plus 10%.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use replaystore::{Batch, Config, Error, Reader, ReplayBuffer, RowAccess};

use crate::row::Row;
use crate::w3::{rss_anon, sample_for};
use crate::workloads::{Chunk, Workload, xorshift};

/// The standard W4 ring: 36 GB of W2 items.
const W4_BYTES: u64 = 36_000_000_000;
/// Bytes one random read covers: a W2 row (28,240 bytes) from a 4 KiB boundary.
const READ_BYTES: usize = 32 << 10;

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::InvalidConfig {
        field: "bench w4",
        problem: format!("{what} {}: {e}", path.display()),
    }
}

/// Threads of the parallel random-read floor: what a batch's reads in flight at once
/// (the samplers' `MADV_WILLNEED` / `POSIX_FADV_WILLNEED` of every row) can reach.
const PARALLEL: usize = 16;

/// Rows/s of random `O_DIRECT` reads of `READ_BYTES` over `files` for `seconds`, by
/// `threads` threads each with one read in flight.
fn random_read_rate(
    files: &[std::path::PathBuf],
    seconds: f64,
    threads: usize,
) -> Result<f64, Error> {
    let t = Instant::now();
    let counts = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|k| s.spawn(move || random_reads(files, seconds, k as u64)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or(Ok(0)))
            .collect::<Result<Vec<u64>, Error>>()
    })?;
    Ok(counts.iter().sum::<u64>() as f64 / t.elapsed().as_secs_f64())
}

/// One thread's random `O_DIRECT` reads for `seconds`: how many.
fn random_reads(files: &[std::path::PathBuf], seconds: f64, seed: u64) -> Result<u64, Error> {
    let mut opened = Vec::new();
    for path in files {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|e| io_err("open O_DIRECT", path, e))?;
        let len = file.metadata().map_err(|e| io_err("stat", path, e))?.len();
        opened.push((file, path, len));
    }
    // O_DIRECT wants the buffer, offset and length aligned to the block size.
    let mut raw = vec![0u8; READ_BYTES + 4096];
    let at = raw.as_ptr().align_offset(4096).min(4096);
    let buf = raw.get_mut(at..at + READ_BYTES).unwrap_or(&mut []);
    let mut rng = 0x2545_f491_4f6c_dd1du64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let (t, mut reads) = (Instant::now(), 0u64);
    while t.elapsed().as_secs_f64() < seconds {
        let pick = (xorshift(&mut rng) % opened.len().max(1) as u64) as usize;
        let Some((file, path, len)) = opened.get(pick) else {
            break;
        };
        let blocks = (len.saturating_sub(READ_BYTES as u64) / 4096).max(1);
        let offset = xorshift(&mut rng) % blocks * 4096;
        file.read_exact_at(buf, offset)
            .map_err(|e| io_err("read O_DIRECT", path, e))?;
        reads += 1;
    }
    Ok(reads)
}

/// W4's rows, or none (with a message on stderr) when the disk is too small for it.
pub(crate) fn rows(scratch: &Path, quick: bool) -> Result<Vec<Row>, Error> {
    let w = Workload::W2;
    let item = w.schema()?.item_bytes() as u64;
    let bytes = W4_BYTES / if quick { 256 } else { 1 };
    let capacity = (bytes / item).max(1000) / 1000 * 1000;
    let data = capacity * item;
    std::fs::create_dir_all(scratch).map_err(|e| io_err("create", scratch, e))?;
    let free = fs2::available_space(scratch).map_err(|e| io_err("statvfs", scratch, e))?;
    if free < data + data / 10 {
        eprintln!(
            "W4: skipped: a {:.1} GB ring needs {:.1} GB free in {}, which has {:.1} GB",
            data as f64 / 1e9,
            (data + data / 10) as f64 / 1e9,
            scratch.display(),
            free as f64 / 1e9
        );
        return Ok(Vec::new());
    }
    let dir = scratch.join("w4");
    let mut buf = ReplayBuffer::create(&dir, Config::new(w.schema()?, capacity).seed(4))?;
    let chunk = Chunk::new(w, 0, 1000);
    let columns = chunk.columns();
    let mut fill = Row::new("W4 fill".into(), "k items/s", data);
    let t = Instant::now();
    for _ in 0..capacity / 1000 {
        buf.add_batch(&columns)?;
    }
    buf.flush()?;
    fill.values
        .push(capacity as f64 / t.elapsed().as_secs_f64() / 1e3);

    let seconds = if quick { 0.5 } else { 5.0 };
    let files: Vec<_> = std::fs::read_dir(dir.join("lane-0"))
        .map_err(|e| io_err("list", &dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "dat"))
        .collect();
    let mut floor = Row::new("W4 disk random read".into(), "k rows/s", data);
    floor
        .values
        .push(random_read_rate(&files, seconds, 1)? / 1e3);
    let mut parallel = Row::new(format!("W4 disk random read x{PARALLEL}"), "k rows/s", data);
    parallel
        .values
        .push(random_read_rate(&files, seconds, PARALLEL)? / 1e3);
    // The shares below are of the device's rate with many reads in flight.
    let floor_rows = parallel.median() * 1e3;

    let mut batch = Batch::default();
    let mut sample = Row::new("W4 sample 32".into(), "k batches/s", data);
    let mut sample_share = Row::new("W4 sample rows/x16 floor".into(), "ratio", data);
    let rate = sample_for(|b| buf.sample_into(32, b).map(drop), &mut batch, seconds)?;
    sample.values.push(rate / 1e3);
    sample_share.values.push(rate * 32.0 / floor_rows);
    let mut writer_rss = Row::new("W4 writer RSS".into(), "MiB anon", data);
    writer_rss.values.push(rss_anon() as f64 / (1 << 20) as f64);

    let mut reader = Reader::open(&dir)?;
    reader.set_row_access(RowAccess::Pread)?;
    let before = rss_anon();
    let mut pread = Row::new("W4 reader pread sample 32".into(), "k batches/s", data);
    let mut pread_share = Row::new("W4 reader pread rows/x16 floor".into(), "ratio", data);
    let rate = sample_for(|b| reader.sample_into(32, b).map(drop), &mut batch, seconds)?;
    pread.values.push(rate / 1e3);
    pread_share.values.push(rate * 32.0 / floor_rows);
    let mut reader_rss = Row::new("W4 reader pread RSS growth".into(), "MiB anon", data);
    reader_rss
        .values
        .push(rss_anon().saturating_sub(before) as f64 / (1 << 20) as f64);
    drop(reader);
    let mut cached = Row::new("W4 memory / ring".into(), "ratio", data);
    cached
        .values
        .push(replaystore::kernels::mem_total() as f64 / data as f64);
    buf.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![
        fill,
        floor,
        parallel,
        sample,
        sample_share,
        pread,
        pread_share,
        writer_rss,
        reader_rss,
        cached,
    ])
}
