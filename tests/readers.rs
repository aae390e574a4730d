//! Promise: any number of readers, in this process or others, sample one buffer while
//! its writer adds, and never get a torn, overwritten or misattributed item. Items are
//! a pure function of their logical index (`common::item`), so a wrong byte anywhere is
//! caught. The writer laps the ring many times and takes snapshots while readers read,
//! so copy-on-write renames (which readers must follow) happen under them too.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::Path;

use common::{
    Drained, KillOnDrop, add_range, columns, item, item_bytes, reader_result, schema, spawn_child,
    xorshift,
};
use replaystore::{
    Column, Config, DType, Error, Reader, ReplayBuffer, Request, RowAccess, Schema, inspect,
};

const CHILD_ENV: &str = "REPLAYSTORE_READERS_CHILD";

fn create(path: &Path, capacity: u64) {
    let config = Config::new(schema(), capacity).segment_slots(256).seed(1);
    let config = config.prioritized(0.6, 1e-6);
    ReplayBuffer::create(path, config).unwrap().close().unwrap();
}

/// Samples `n` items (by priority with `per`) and counts those whose bytes are not
/// their index's, or whose weight is not a positive number.
fn bad_in_sample(reader: &mut Reader, n: usize, per: bool) -> usize {
    let batch = match per {
        true => reader.sample(Request::rows(n).prioritized(0.4)).unwrap(),
        false => reader.sample(n).unwrap(),
    };
    let bad_weights = (batch.weights().iter())
        .filter(|w| !(w.is_finite() && **w > 0.0))
        .count();
    let bad_items = (batch.indices().iter().enumerate())
        .filter(|&(r, &i)| batch.item_bytes(r) != item_bytes(i))
        .count();
    assert_eq!(batch.weights().len(), if per { n } else { 0 });
    bad_items + bad_weights
}

#[test]
fn a_reader_sees_each_add_as_it_happens_and_every_item_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 300);
    let mut writer = ReplayBuffer::open(&path).unwrap();
    let mut reader = Reader::open(&path).unwrap();
    assert!(matches!(reader.sample(4), Err(Error::Empty)));
    let mut next = 0;
    let mut s = 7u64;
    while next < 2_000 {
        let n = 1 + xorshift(&mut s) % 40;
        add_range(&mut writer, next, next + n);
        next += n;
        // Readers draw by the tree's upper levels, which the writer fixes in runs: at
        // its own draws, updates and flushes, and every 1,024 adds.
        writer.flush().unwrap();
        reader.refresh().unwrap();
        assert_eq!(reader.live(), writer.live(), "after adding up to {next}");
        assert_eq!(bad_in_sample(&mut reader, 64, false), 0);
        assert_eq!(bad_in_sample(&mut reader, 64, true), 0);
        let newest = reader.get(next - 1).unwrap();
        assert_eq!(newest.item_bytes(0), item_bytes(next - 1));
    }
    // The oldest items are gone for the reader as they are for the writer.
    assert!(matches!(
        reader.get(0),
        Err(Error::Evicted { index: 0, .. })
    ));
    let stats = reader.stats().unwrap();
    assert_eq!((stats.head, stats.tail, stats.len), (next - 300, next, 300));
}

/// A buffer whose one field says which index and which timeline wrote it.
fn tagged(path: &Path) -> ReplayBuffer {
    let schema = Schema::builder()
        .field("x", DType::U64, &[])
        .build()
        .unwrap();
    ReplayBuffer::create(path, Config::new(schema, 64).segment_slots(16).seed(3)).unwrap()
}

fn add_tagged(buf: &mut ReplayBuffer, to: u64, timeline: u64) {
    while buf.live().end < to {
        let x = buf.live().end * 10 + timeline;
        buf.add(&[Column::scalar("x", &x)]).unwrap();
    }
}

/// Every sampled item of `reader` read back as written by `timeline_of(index)`.
fn assert_reads(reader: &mut Reader, timeline_of: impl Fn(u64) -> u64) {
    for _ in 0..20 {
        let batch = reader.sample(32).unwrap();
        for (&i, &x) in batch.indices().iter().zip(batch.get::<u64>("x").unwrap()) {
            assert_eq!(x, i * 10 + timeline_of(i), "item {i}");
        }
    }
}

#[test]
fn a_reader_follows_copy_on_write_and_set_state() {
    for access in [RowAccess::Mapped, RowAccess::Pread] {
        follows_copy_on_write_and_set_state(access);
    }
}

fn follows_copy_on_write_and_set_state(access: RowAccess) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let mut writer = tagged(&path);
    add_tagged(&mut writer, 50, 0);
    let state = writer.get_state_named("s").unwrap();
    let mut reader = Reader::open(&path).unwrap();
    reader.set_row_access(access).unwrap();
    // Past the capacity: every segment is copied and renamed over its old name, and
    // the reader's old mappings show the snapshot's files, which stop changing.
    add_tagged(&mut writer, 150, 0);
    assert_reads(&mut reader, |_| 0);
    assert_eq!(reader.live(), 86..150);
    // Back to the snapshot, then new items under indices the old timeline used.
    writer.set_state(&state).unwrap();
    add_tagged(&mut writer, 60, 1);
    assert_reads(&mut reader, |i| u64::from(i >= 50));
    assert_eq!(reader.live(), 0..60);
    assert!(matches!(
        reader.get(75),
        Err(Error::Evicted { index: 75, .. })
    ));
    // A snapshot reader sees the snapshot, whatever the writer does.
    let mut frozen = Reader::open_snapshot(&path, "s").unwrap();
    frozen.set_row_access(access).unwrap();
    add_tagged(&mut writer, 200, 1);
    assert_eq!(frozen.live(), 0..50);
    assert_reads(&mut frozen, |_| 0);
}

/// Issue 26, point 5: readers sampling while the writer restores a checkpoint over and
/// over. A restore replaces the files and moves the live range back; a reader that saw
/// the new files with the old range took the rows the old range named for damage
/// ("the slot's stamp is 0x0"). Now every call succeeds, and every row holds its index.
#[test]
fn readers_racing_set_state_never_report_damage() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let mut writer = tagged(&path);
    add_tagged(&mut writer, 50, 0);
    let state = writer.get_state_named("s").unwrap();
    add_tagged(&mut writer, 100, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = [RowAccess::Mapped, RowAccess::Mapped, RowAccess::Pread]
        .into_iter()
        .map(|access| {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reader = Reader::open(&path).unwrap();
                reader.set_row_access(access).unwrap();
                let (mut calls, mut errors) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    calls += 1;
                    match reader.sample(32) {
                        Ok(batch) => {
                            let xs = batch.get::<u64>("x").unwrap();
                            for (&i, &x) in batch.indices().iter().zip(xs) {
                                assert_eq!(x / 10, i, "{access:?}: item {i} holds {x}");
                            }
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (calls, errors)
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let mut restores = 0u64;
    while restores < 400 || started.elapsed() < std::time::Duration::from_secs(2) {
        writer.set_state(&state).unwrap();
        add_tagged(&mut writer, 50 + restores % 60, restores % 10);
        restores += 1;
        if started.elapsed() > std::time::Duration::from_secs(20) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let (calls, errors) = r.join().unwrap();
        assert!(calls > 0);
        assert!(
            errors.is_empty(),
            "{} of {calls} calls failed over {restores} restores, first: {}",
            errors.len(),
            errors[0]
        );
    }
}

#[test]
fn a_reader_draws_by_the_priorities_the_writer_sets() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let schema = Schema::builder()
        .field("x", DType::U64, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 64).prioritized(1.0, 0.0).seed(5);
    let mut writer = ReplayBuffer::create(&path, config).unwrap();
    let mut reader = Reader::open(&path).unwrap();
    assert!(matches!(
        reader.sample(Request::rows(4).prioritized(0.4)),
        Err(Error::Empty)
    ));
    add_tagged(&mut writer, 40, 0);
    let only = |reader: &mut Reader, want: &[u64]| {
        let batch = reader.sample(Request::rows(64).prioritized(1.0)).unwrap();
        for (&i, &x) in batch.indices().iter().zip(batch.get::<u64>("x").unwrap()) {
            assert!(want.contains(&i), "drew {i}, expected one of {want:?}");
            assert_eq!(x, i * 10);
        }
    };
    let zeros = vec![0.0f64; 40];
    writer
        .update_priorities(&(0..40).collect::<Vec<_>>(), &zeros)
        .unwrap();
    writer.update_priorities(&[7], &[1.0f64]).unwrap();
    only(&mut reader, &[7]);
    writer
        .update_priorities(&[7, 9, 30], &[0.0f64, 1.0, 3.0])
        .unwrap();
    only(&mut reader, &[9, 30]);
    let batch = reader
        .sample(Request::rows(2_000).prioritized(1.0))
        .unwrap();
    let thirty = batch.indices().iter().filter(|&&i| i == 30).count();
    assert!(
        (1_350..1_650).contains(&thirty),
        "30 drawn {thirty} times of 2000"
    );
    // Weights (min / leaf)^beta: 1/3 for item 30, 1 for item 9.
    for (&i, &w) in batch.indices().iter().zip(batch.weights()) {
        let want = if i == 30 { 1.0 / 3.0 } else { 1.0 };
        assert!((w - want).abs() < 1e-6, "weight {w} of item {i}");
    }
    // New items enter at the largest priority seen (3), once the writer has fixed
    // the parents of their leaves (before its own draws, and every 1,024 adds).
    add_tagged(&mut writer, 50, 0);
    writer.sample(Request::rows(1).prioritized(0.4)).unwrap();
    only(
        &mut reader,
        &[9, 30, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49],
    );
}

#[test]
fn filling_caller_arrays_draws_and_copies_what_sample_into_does() {
    use replaystore::Batch;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 256);
    let mut writer = ReplayBuffer::open(&path).unwrap();
    add_range(&mut writer, 0, 300);
    // The tree's upper levels reach readers at a flush (or every thousand adds).
    writer.flush().unwrap();
    let mut a = Reader::open(&path).unwrap();
    let mut b = Reader::open(&path).unwrap();
    let sizes: Vec<usize> = schema().fields().iter().map(|f| f.bytes()).collect();
    for per in [false, true] {
        a.reseed(9);
        b.reseed(9);
        let n = 64;
        let mut batch = Batch::new(&schema(), n);
        // The caller's own arrays (a binding's): the fields, the indices, the weights.
        let mut arrays: Vec<Vec<u8>> = sizes.iter().map(|s| vec![0; s * n]).collect();
        arrays.push(vec![0; 8 * n]);
        let request: Request = match per {
            true => {
                arrays.push(vec![0; 4 * n]);
                Request::rows(n).prioritized(0.4).into()
            }
            false => n.into(),
        };
        let mut arrays = common::Arrays(arrays);
        a.sample_into(request, &mut batch).unwrap();
        b.sample_into(request, &mut arrays).unwrap();
        let fields = sizes.len();
        let indices: Vec<u64> = (arrays.0[fields].chunks(8))
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        if per {
            let weights: Vec<f32> = (arrays.0[fields + 1].chunks(4))
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(batch.weights(), weights.as_slice());
        }
        assert_eq!(batch.indices(), indices.as_slice());
        for (r, &i) in indices.iter().enumerate() {
            let row: Vec<u8> = (arrays.0.iter().take(fields))
                .zip(&sizes)
                .flat_map(|(b, &s)| b[r * s..(r + 1) * s].to_vec())
                .collect();
            assert_eq!(row, item_bytes(i), "row {r}, index {i}");
        }
    }
    // Outputs of the wrong number or size are refused, naming what is wrong.
    let mut short = common::Arrays(vec![vec![0u8; 3]]);
    assert!(matches!(
        b.sample_into(4, &mut short),
        Err(Error::InvalidSample(_))
    ));
    writer.close().unwrap();
}

#[test]
fn a_damaged_stamp_is_an_error_for_a_reader_not_a_redraw() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 300);
    let mut writer = ReplayBuffer::open(&path).unwrap();
    add_range(&mut writer, 0, 100);
    writer.close().unwrap();
    let stride = inspect(&path).unwrap().row_stride as usize;
    let seg = path.join("lane-0").join("seg-00000000.dat");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[4096 + 9 * stride] ^= 1;
    std::fs::write(&seg, bytes).unwrap();
    for access in [RowAccess::Mapped, RowAccess::Pread] {
        damaged_stamp_is_reported(&path, &seg, access);
    }
}

fn damaged_stamp_is_reported(path: &Path, seg: &Path, access: RowAccess) {
    let mut reader = Reader::open(path).unwrap();
    reader.set_row_access(access).unwrap();
    let e = reader.get(9).unwrap_err();
    assert!(
        matches!(&e, Error::BadItem { index: 9, file, .. } if file == seg),
        "{e}"
    );
    let mut saw = false;
    for _ in 0..100 {
        let drawn = match saw {
            true => reader.sample(64),
            false => reader.sample(Request::rows(64).prioritized(0.4)),
        };
        match drawn {
            Ok(b) => assert!(!b.indices().contains(&9)),
            Err(Error::BadItem { index: 9, .. }) => saw = true,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(saw, "{access:?}: sampling never reported the damaged item");
}

/// Bytes of `dir`'s segment files (not the progress page) mapped in this process right now, as
/// `/proc/self/smaps` counts them (its `Rss` lines).
fn resident_segment_bytes(dir: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let lane = dir.join("lane-0");
    let mut ours = false;
    let mut total = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header line: range, perms, offset, dev, inode, path.
            ours = words.nth(4).is_some_and(|p| {
                let p = Path::new(p);
                p.starts_with(&lane) && p.extension().is_some_and(|x| x == "dat")
            });
        } else if first == "Rss:" && ours {
            total += words.next().unwrap().parse::<u64>().unwrap() * 1024;
        }
    }
    total
}

/// Promise: a reader set to `RowAccess::Pread` keeps none of the rows it samples
/// mapped, so its resident memory does not grow with the buffer; the same sampling
/// through the mappings (the control) does show up in RSS.
#[test]
#[cfg(target_os = "linux")]
fn a_pread_reader_keeps_no_sampled_row_resident() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let schema = Schema::builder()
        .field("obs", DType::U8, &[4096])
        .build()
        .unwrap();
    let config = Config::new(schema, 2_048).segment_slots(256).seed(5);
    let mut writer = ReplayBuffer::create(&path, config).unwrap();
    let obs: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    for _ in 0..2_048 {
        writer.add(&[Column::new("obs", &obs)]).unwrap();
    }
    // The writer's own mappings would count too.
    writer.close().unwrap();
    for access in [RowAccess::Pread, RowAccess::Mapped] {
        let mut reader = Reader::open(&path).unwrap();
        reader.set_row_access(access).unwrap();
        assert_eq!(reader.row_access(), access);
        for _ in 0..64 {
            let batch = reader.sample(64).unwrap();
            assert!(
                batch
                    .get::<u8>("obs")
                    .unwrap()
                    .chunks(4096)
                    .all(|row| row == obs)
            );
        }
        let resident = resident_segment_bytes(&path);
        match access {
            RowAccess::Pread => assert_eq!(resident, 0, "a pread reader mapped rows"),
            RowAccess::Mapped => assert!(resident >= 1 << 20, "control: {resident} bytes"),
        }
    }
}

/// A writer that died between making the epoch odd (a restore begins) and its end
/// leaves the page odd until the next writer's open: readers wait it out once, then go
/// on with the files as they are, without waiting on every call.
#[test]
fn a_writer_dead_mid_restore_costs_readers_one_wait_not_one_per_call() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 100);
    add_range(&mut ReplayBuffer::open(&path).unwrap(), 0, 50);
    let mut reader = Reader::open(&path).unwrap();
    let page = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("lane-0").join("progress"))
        .unwrap();
    let mut epoch = [0u8; 8];
    std::fs::File::open(path.join("lane-0").join("progress"))
        .unwrap()
        .read_exact_at(&mut epoch, 88)
        .unwrap();
    let odd = (u64::from_le_bytes(epoch) | 1).to_le_bytes();
    page.write_all_at(&odd, 88).unwrap();
    assert_eq!(bad_in_sample(&mut reader, 16, false), 0);
    let start = std::time::Instant::now();
    for _ in 0..10 {
        assert_eq!(bad_in_sample(&mut reader, 16, false), 0);
    }
    // Ten waits would take 50 s.
    assert!(start.elapsed().as_secs() < 4, "{:?}", start.elapsed());
    // The next writer's open makes it even again; the reader follows at once.
    let mut writer = ReplayBuffer::open(&path).unwrap();
    add_range(&mut writer, 50, 60);
    reader.refresh().unwrap();
    assert_eq!(reader.live(), 0..60);
}

#[test]
fn readers_can_be_sent_to_threads() {
    fn send<T: Send>(_: &T) {}
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 100);
    add_range(&mut ReplayBuffer::open(&path).unwrap(), 0, 50);
    let mut reader = Reader::open(&path).unwrap();
    send(&reader);
    let n = std::thread::spawn(move || bad_in_sample(&mut reader, 64, true))
        .join()
        .unwrap();
    assert_eq!(n, 0);
}

/// Issue 26, point 5: a reader opening a folder while its buffer is being created sees
/// either the whole buffer or "not a buffer yet", never a missing file: the progress
/// page is durable before MANIFEST makes the folder a buffer.
#[test]
fn a_reader_opening_during_create_sees_a_buffer_or_not_a_buffer() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let root = Arc::new(tmp.path().to_path_buf());
    let done = Arc::new(AtomicBool::new(false));
    let opener = {
        let (root, done) = (root.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut opened, mut not_yet) = (0u64, 0u64);
            while !done.load(Ordering::Relaxed) {
                for n in 0..200 {
                    match Reader::open(root.join(format!("b{n}"))) {
                        Ok(r) => {
                            assert_eq!(r.live(), 0..0);
                            opened += 1;
                        }
                        Err(Error::NotABuffer { .. }) => not_yet += 1,
                        Err(e) => panic!("b{n}: {e}"),
                    }
                }
            }
            (opened, not_yet)
        })
    };
    for n in 0..200 {
        let config = Config::new(schema(), 64).segment_slots(16);
        let path = root.join(format!("b{n}"));
        ReplayBuffer::create(&path, config)
            .unwrap()
            .close()
            .unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let (opened, not_yet) = opener.join().unwrap();
    assert!(opened + not_yet > 0);
}

#[test]
fn refusals_are_typed_errors_naming_who_holds_what() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 100);
    let mut writer = ReplayBuffer::open(&path).unwrap();
    add_range(&mut writer, 0, 10);
    // A second writer, here or in another process, learns which process writes.
    let e = ReplayBuffer::open(&path).unwrap_err();
    assert!(
        matches!(&e, Error::Locked { holder: Some(pid), .. } if *pid == std::process::id()),
        "{e}"
    );
    assert!(
        e.to_string().contains(&std::process::id().to_string()),
        "{e}"
    );
    // A reader has no update_priorities at all (a compile_fail example on `Reader`
    // keeps it so); it still opens beside the writer.
    Reader::open(&path).unwrap();
    // Not a buffer, for a reader too.
    assert!(matches!(
        Reader::open(tmp.path()),
        Err(Error::NotABuffer { .. })
    ));
}

// ---- many processes ----

/// A child's work, chosen by the parent through `CHILD_ENV`:
/// - `writer:DIR:SEED`: adds forever (single items and batches, flushes, snapshots
///   that force copy-on-write), printing `marker=ready` once going;
/// - `reader:DIR:SAMPLES:SEED:PER`: samples batches of 256 (by priority if PER is 1)
///   until it has drawn SAMPLES items, checking each, and prints what it saw.
#[test]
fn readers_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let args: Vec<&str> = mode.split(':').collect();
    match args[0] {
        "writer" => run_writer(args[1], args[2].parse().unwrap()),
        "reader" => run_reader(
            args[1],
            args[2].parse().unwrap(),
            args[3].parse().unwrap(),
            args[4] == "1",
            args[5] == "pread",
        ),
        "acking-writer" => run_acking_writer(args[1], args[2].parse().unwrap()),
        "endless-reader" => run_endless_reader(args[1]),
        other => panic!("unknown child role {other}"),
    }
}

fn run_writer(dir: &str, seed: u64) {
    use std::io::Write;
    let mut buf = ReplayBuffer::open(dir).unwrap();
    let mut next = buf.live().end;
    let mut s = seed;
    let mut out = std::io::stdout().lock();
    writeln!(out, "marker=ready").unwrap();
    out.flush().unwrap();
    let mut snapshots = 0u64;
    loop {
        match xorshift(&mut s) % 10_000 {
            0..=9 => buf.flush().unwrap(),
            10 => {
                snapshots += 1;
                buf.get_state_named(&format!("s{snapshots}")).unwrap();
                buf.keep_last(1).unwrap();
            }
            11..=500 => {
                let n = 1 + xorshift(&mut s) % 64;
                next = add_range(&mut buf, next, next + n).end;
            }
            // The learner's part, here in the writer's process (the owner of the
            // priorities): new priorities for some live items.
            501..=1_500 => {
                let live = buf.live();
                let picks: Vec<u64> = (0..16)
                    .map(|_| live.start + xorshift(&mut s) % (live.end - live.start))
                    .collect();
                let p: Vec<f64> = picks
                    .iter()
                    .map(|_| (xorshift(&mut s) % 100) as f64)
                    .collect();
                buf.update_priorities(&picks, &p).unwrap();
            }
            _ => {
                next = buf.add(&columns(&item(next))).unwrap() + 1;
            }
        }
    }
}

fn run_reader(dir: &str, samples: u64, seed: u64, per: bool, pread: bool) {
    let mut reader = Reader::open(dir).unwrap();
    if pread {
        reader.set_row_access(RowAccess::Pread).unwrap();
    }
    reader.reseed(seed);
    let first_tail = reader.live().end;
    let (mut drawn, mut bad, mut gets, mut evicted) = (0u64, 0u64, 0u64, 0u64);
    let mut s = seed;
    while drawn < samples {
        bad += bad_in_sample(&mut reader, 256, per) as u64;
        drawn += 256;
        // Now and then a get of the oldest live item: the one the writer overwrites
        // next, so races are common; the answer is the item or `Evicted`, never junk.
        if xorshift(&mut s).is_multiple_of(8) {
            let i = reader.live().start + xorshift(&mut s) % 4;
            gets += 1;
            match reader.get(i) {
                Ok(b) => bad += u64::from(b.item_bytes(0) != item_bytes(i)),
                Err(Error::Evicted { .. }) => evicted += 1,
                Err(e) => panic!("get({i}): {e}"),
            }
        }
    }
    let last_tail = reader.live().end;
    println!(
        "marker=result drawn={drawn} bad={bad} gets={gets} evicted={evicted} \
         first_tail={first_tail} last_tail={last_tail}"
    );
}

/// Adds forever, one item at a time, printing each index once `add` returned it (and
/// now and then a flush or a snapshot, so kills land in those too).
fn run_acking_writer(dir: &str, seed: u64) {
    use std::io::Write;
    let mut buf = ReplayBuffer::open(dir).unwrap();
    let mut next = buf.live().end;
    assert_ne!(seed, 0, "xorshift stays at 0");
    let mut s = seed;
    let mut out = std::io::stdout().lock();
    let mut snapshots = 0u64;
    loop {
        match xorshift(&mut s) % 2_000 {
            0..=3 => buf.flush().unwrap(),
            4 => {
                snapshots += 1;
                buf.get_state_named(&format!("k{seed}-{snapshots}"))
                    .unwrap();
                buf.keep_last(1).unwrap();
            }
            _ => {
                next = buf.add(&columns(&item(next))).unwrap() + 1;
                writeln!(out, "ack {}", next - 1).unwrap();
                out.flush().unwrap();
            }
        }
    }
}

/// Samples forever, printing how many items it has checked after each batch, or `bad`
/// and exiting at the first wrong item.
fn run_endless_reader(dir: &str) {
    let mut reader = Reader::open(dir).unwrap();
    common::check_forever(|checked| bad_in_sample(&mut reader, 64, checked % 128 == 64) as u64)
}

/// Kills readers and writers at random moments: a reader's death never stops the
/// writer, the writer's death never stops a reader (nor makes it serve a bad item),
/// a reader keeps going across the next writer's open (recovery, a new epoch), and the
/// killed writer's buffer reopens with everything it acknowledged.
#[test]
fn kill_9_of_readers_and_writers_stops_nobody_else_and_loses_nothing() {
    let rounds = common::env_count("REPLAYSTORE_READER_KILLS", 20);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 1_000);
    add_range(&mut ReplayBuffer::open(&path).unwrap(), 0, 100);
    let dir = path.to_str().unwrap();
    let mut s = 99u64;
    for round in 0..rounds {
        let mut writer = Drained::spawn(
            "readers_child",
            CHILD_ENV,
            &format!("acking-writer:{dir}:{}", round + 1),
        );
        writer.wait_past(0);
        let mut reader =
            Drained::spawn("readers_child", CHILD_ENV, &format!("endless-reader:{dir}"));
        reader.wait_past(xorshift(&mut s) % 2_000);
        reader.kill();
        // The writer goes on after the reader's death.
        let acked = writer.last();
        writer.wait_past(acked + 50);
        let mut reader =
            Drained::spawn("readers_child", CHILD_ENV, &format!("endless-reader:{dir}"));
        reader.wait_past(0);
        writer.wait_past(writer.last() + xorshift(&mut s) % 3_000);
        let acked = writer.kill();
        // The reader goes on after the writer's death, and across the next open.
        let checked = reader.last();
        reader.wait_past(checked + 1_000);
        let buf = ReplayBuffer::open(&path).unwrap();
        assert!(
            buf.live().end > acked,
            "round {round}: lost acknowledged {acked}"
        );
        common::assert_live_items_intact(&buf);
        let checked = reader.last();
        reader.wait_past(checked + 1_000);
        drop(buf);
        reader.kill();
    }
}

#[test]
fn two_reader_processes_sample_a_million_items_while_the_writer_laps_the_ring() {
    const CAPACITY: u64 = 4_096;
    const PER_READER: u64 = 500_000;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, CAPACITY);
    let dir = path.to_str().unwrap();
    let role = format!("writer:{dir}:11");
    let writer = common::spawn_filling_writer("readers_child", CHILD_ENV, &role, &path, CAPACITY);
    let readers: Vec<_> = (0..2)
        .map(|r| {
            spawn_child(
                "readers_child",
                CHILD_ENV,
                // One uniform reader through the mappings, one by priority with pread.
                format!(
                    "reader:{dir}:{PER_READER}:{r}:{r}:{}",
                    ["mapped", "pread"][r]
                )
                .as_ref(),
            )
        })
        .collect();
    let mut total = 0;
    for (child, out) in readers {
        let mut child = KillOnDrop(child);
        let result = reader_result(out);
        assert!(
            child.0.wait().unwrap().success(),
            "reader failed: {result:?}"
        );
        assert_eq!(result["bad"], 0, "bad items served: {result:?}");
        let laps = (result["last_tail"] - result["first_tail"]) / CAPACITY;
        assert!(
            laps >= 3,
            "the writer lapped the ring only {laps} times: {result:?}"
        );
        total += result["drawn"];
    }
    assert!(total >= 1_000_000);
    drop(writer);
    // The writer's kill lost nothing it acknowledged, and readers left no trace.
    let buf = ReplayBuffer::open(&path).unwrap();
    common::assert_live_items_intact(&buf);
}

/// Promise (issue 54): a reader's draws, in any process, reach `info` at once and the
/// writer's count at its next commit; a writer opened after readers drew alone takes
/// theirs in; a reader that may not write the progress page (one linked elsewhere)
/// draws as before, counts only in its own stats, and writes nothing.
#[test]
fn readers_draws_reach_info_and_the_writers_count_from_every_process() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 4_096);
    let mut writer = ReplayBuffer::open(&path).unwrap();
    add_range(&mut writer, 0, 1_000);
    writer.sample(100).unwrap();
    writer.flush().unwrap();
    let dir = path.to_str().unwrap();
    // Two reader processes (one by priority through pread), each drawing 2 × 256 and
    // a few reads at given indices, which are not draws.
    let mut drawn = 0;
    for r in 0..2u64 {
        let role = format!(
            "reader:{dir}:512:{r}:{r}:{}",
            ["mapped", "pread"][r as usize]
        );
        let (child, out) = spawn_child("readers_child", CHILD_ENV, role.as_ref());
        let mut child = KillOnDrop(child);
        let result = reader_result(out);
        assert!(child.0.wait().unwrap().success(), "{result:?}");
        drawn += result["drawn"];
    }
    assert_eq!(drawn, 1_024);
    // A reader here too: its draws count, its read at a given index does not.
    let mut reader = Reader::open(&path).unwrap();
    reader.sample(Request::rows(7)).unwrap();
    reader.get(3).unwrap();
    let readers = drawn + 7;
    let info = inspect(&path).unwrap();
    assert_eq!((info.commit.sampled, info.reader_draws), (100, readers));
    assert_eq!(info.sampled(), 100 + readers);
    assert_eq!(writer.stats().sampled, 100 + readers);
    writer.flush().unwrap();
    let info = inspect(&path).unwrap();
    assert_eq!((info.commit.sampled, info.reader_draws), (100 + readers, 0));
    writer.close().unwrap();

    // With no writer: the readers' draws wait in the page; the next writer's open takes
    // them into the commit it writes.
    reader.sample(5).unwrap();
    assert_eq!(inspect(&path).unwrap().reader_draws, 5);
    let writer = ReplayBuffer::open(&path).unwrap();
    let info = inspect(&path).unwrap();
    assert_eq!((info.commit.sampled, info.reader_draws), (105 + readers, 0));
    assert_eq!(writer.stats().sampled, 105 + readers);

    // A page with another name is not the reader's to write: drawn from, not counted.
    let progress = path.join("lane-0").join("progress");
    let elsewhere = tmp.path().join("progress-link");
    std::fs::hard_link(&progress, &elsewhere).unwrap();
    let before = std::fs::read(&elsewhere).unwrap();
    let mut linked = Reader::open(&path).unwrap();
    let own = linked.stats().unwrap().sampled;
    linked.sample(9).unwrap();
    assert_eq!(linked.stats().unwrap().sampled, own + 9);
    assert_eq!(
        std::fs::read(&elsewhere).unwrap(),
        before,
        "the reader wrote the page"
    );
    assert_eq!(inspect(&path).unwrap().reader_draws, 0);

    // A page the reader may not write (EACCES, EROFS): opened read-only, drawn from,
    // not counted (the page has one name again, so only the errno stops the count).
    std::fs::remove_file(&elsewhere).unwrap();
    for errno in [libc::EACCES, libc::EROFS] {
        let io = std::sync::Arc::new(
            replaystore::io::FaultyIo::fail_from(0)
                .only("open_rw")
                .errno(errno),
        );
        let mut barred = Reader::open_with(&path, io).unwrap();
        barred.sample(4).unwrap();
        assert_eq!(inspect(&path).unwrap().reader_draws, 0, "errno {errno}");
    }
    Reader::open(&path).unwrap().sample(1).unwrap();
    assert_eq!(inspect(&path).unwrap().reader_draws, 1);
    drop((writer, reader, linked));
}

/// Promise: a lane set's readers count each lane's draws in that lane's page, so each
/// lane's writer and `info` see them.
#[test]
fn a_lane_readers_draws_reach_each_lanes_count() {
    use replaystore::Lanes;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let mut lanes = Lanes::create(&path, Config::new(schema(), 64).seed(3), 2).unwrap();
    for k in 0..2 {
        let lane = lanes.lane_mut(k).unwrap();
        let base = lane.live().end;
        add_range(lane, base, base + 20);
    }
    lanes.flush().unwrap();
    let mut readers = Lanes::open_reader(&path).unwrap();
    readers.sample(40).unwrap();
    let per_lane: Vec<u64> = (0..2)
        .map(|k| {
            inspect(path.join(format!("lane-{k}")))
                .unwrap()
                .reader_draws
        })
        .collect();
    assert_eq!(per_lane.iter().sum::<u64>(), 40, "{per_lane:?}");
    assert!(per_lane.iter().all(|&n| n > 0), "{per_lane:?}");
    let writers: u64 = lanes.stats().iter().map(|s| s.sampled).sum();
    assert_eq!(writers, 40);
}

/// Promise: the reader draws word is a count and nothing more: any value there (a
/// flipped bit, a stale page after a power cut) changes the count `info` and the next
/// commit report, never an item, an open or `verify`.
#[test]
fn any_value_in_the_reader_draws_word_changes_only_the_count() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 512);
    let mut writer = ReplayBuffer::open(&path).unwrap();
    add_range(&mut writer, 0, 700);
    writer.close().unwrap();
    let page = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("lane-0").join("progress"))
        .unwrap();
    for junk in [1u64 << 40, u64::MAX, 0x0123_4567_89ab_cdef] {
        page.write_all_at(&junk.to_le_bytes(), 128).unwrap();
        let info = inspect(&path).unwrap();
        assert_eq!(info.reader_draws, junk);
        assert!(replaystore::verify(&path).unwrap().is_sound());
        let buf = ReplayBuffer::open(&path).unwrap();
        assert_eq!(inspect(&path).unwrap().reader_draws, 0);
        assert!(buf.stats().sampled >= junk.min(1 << 40));
        common::assert_live_items_intact(&buf);
        buf.close().unwrap();
    }
}
