//! Promises about what the buffer accepts and refuses: a batch that does not fit the
//! schema is a typed error naming the field, expected and got, and writes nothing;
//! impossible samples are typed errors; one writer per buffer; a full disk is an error
//! at create time; after a failed sync the buffer refuses writes (issue 3).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::sync::Arc;

use common::{add_range, columns, item, schema};
use replaystore::io::FaultyIo;
use replaystore::{Column, Config, DType, Error, ReplayBuffer, Request, Schema};

fn buffer(capacity: u64) -> (tempfile::TempDir, ReplayBuffer) {
    let dir = tempfile::tempdir().unwrap();
    let buf = ReplayBuffer::create(
        dir.path().join("buf"),
        Config::new(schema(), capacity).seed(1),
    )
    .unwrap();
    (dir, buf)
}

/// Asserts `result` is the expected error and that the buffer did not change.
fn refused(buf: &ReplayBuffer, result: replaystore::Result<u64>, check: impl Fn(&Error) -> bool) {
    let tail = buf.live().end;
    let e = result.unwrap_err();
    assert!(check(&e), "unexpected error: {e}");
    assert_eq!(buf.live().end, tail, "nothing may be written");
}

#[test]
fn items_that_do_not_fit_the_schema_are_refused_naming_the_field() {
    let (_d, mut buf) = buffer(10);
    add_range(&mut buf, 0, 3);
    let it = item(3);
    let all = columns(&it);

    // Missing field.
    let r = buf.add(&all[..5]);
    refused(
        &buf,
        r,
        |e| matches!(e, Error::MissingField { field } if field == "tag"),
    );
    // Extra field.
    let extra = [0u8; 1];
    let mut cols = all.to_vec();
    cols.push(Column::new("bonus", &extra));
    let r = buf.add(&cols);
    refused(
        &buf,
        r,
        |e| matches!(e, Error::UnknownField { field, known } if field == "bonus" && known.contains("obs")),
    );
    // The same field twice.
    let mut cols = all.to_vec();
    cols.push(all[0]);
    let r = buf.add(&cols);
    refused(
        &buf,
        r,
        |e| matches!(e, Error::DuplicateField { field } if field == "obs"),
    );
    // Wrong dtype.
    let obs64 = [0f64; 5];
    let mut cols = all.to_vec();
    cols[0] = Column::new("obs", &obs64);
    let r = buf.add(&cols);
    refused(
        &buf,
        r,
        |e| matches!(e, Error::DTypeMismatch { field, expected: DType::F32, got: DType::F64 } if field == "obs"),
    );
    // Wrong shape (same element count, other layout).
    let mut cols = all.to_vec();
    cols[4] = Column::new("frame", &it.frame).with_shape(&[7, 3]);
    let r = buf.add(&cols);
    refused(
        &buf,
        r,
        |e| matches!(e, Error::ShapeMismatch { field, expected, got } if field == "frame" && expected == &[3, 7] && got == &[7, 3]),
    );
    // Wrong element count.
    let short = [0f32; 4];
    let mut cols = all.to_vec();
    cols[0] = Column::new("obs", &short);
    let r = buf.add(&cols);
    refused(
        &buf,
        r,
        |e| matches!(e, Error::ShapeMismatch { field, .. } if field == "obs"),
    );
    // A shape that disagrees with the bytes.
    let mut cols = all.to_vec();
    cols[0] = Column::from_bytes("obs", DType::F32, &[5], &[0u8; 12]);
    let r = buf.add(&cols);
    refused(
        &buf,
        r,
        |e| matches!(e, Error::LengthMismatch { field, expected: 20, got: 12, .. } if field == "obs"),
    );
    // The message says field, expected and got.
    let e = buf.add(&all[1..]).unwrap_err().to_string();
    assert!(e.contains("obs"), "{e}");
    assert_eq!(buf.live(), 0..3);
}

#[test]
fn ragged_batches_are_refused_before_anything_is_written() {
    let (_d, mut buf) = buffer(10);
    let obs = [0f32; 15];
    let action = [0i64; 3];
    let reward = [0f64; 2];
    let done = [false; 3];
    let frame = [0u8; 63];
    let tag = [0u16; 6];
    let r = buf.add_batch(&[
        Column::new("obs", &obs).with_shape(&[3, 5]),
        Column::new("action", &action),
        Column::new("reward", &reward),
        Column::new("done", &done),
        Column::new("frame", &frame).with_shape(&[3, 3, 7]),
        Column::new("tag", &tag).with_shape(&[3, 2]),
    ]);
    assert!(
        matches!(&r, Err(Error::RaggedBatch { field, first_field, expected: 3, got: 2 }) if field == "reward" && first_field == "obs"),
        "{r:?}"
    );
    // A batch column without the batch dimension.
    let r = buf.add_batch(&[
        Column::new("obs", &obs),
        Column::new("action", &action),
        Column::new("reward", &reward[..1]),
        Column::new("done", &done),
        Column::new("frame", &frame).with_shape(&[3, 3, 7]),
        Column::new("tag", &tag).with_shape(&[3, 2]),
    ]);
    assert!(
        matches!(&r, Err(Error::ShapeMismatch { field, .. }) if field == "obs"),
        "{r:?}"
    );
    assert!(buf.is_empty());
    assert_eq!(buf.stats().added, 0);
}

#[test]
fn impossible_samples_are_typed_errors() {
    let (_d, mut buf) = buffer(100);
    assert!(matches!(buf.sample(1), Err(Error::Empty)));
    add_range(&mut buf, 0, 10);
    assert!(matches!(buf.sample(0), Err(Error::InvalidSample(_))));
    assert!(matches!(
        buf.sample(Request::rows(11).without_replacement()),
        Err(Error::InvalidSample(m)) if m.contains("11") && m.contains("10")
    ));
    assert!(matches!(
        buf.sample(Request::rows(3).without_replacement().newest(2)),
        Err(Error::InvalidSample(_))
    ));
    assert!(matches!(
        buf.sample(Request::rows(3).newest(0)),
        Err(Error::InvalidSample(_))
    ));
    assert!(matches!(
        buf.get(10),
        Err(Error::Evicted {
            index: 10,
            head: 0,
            tail: 10
        })
    ));
    assert_eq!(buf.stats().sampled, 0, "refused samples are not counted");
}

#[test]
fn without_replacement_draws_distinct_items_and_newest_k_restricts_the_range() {
    let (_d, mut buf) = buffer(1000);
    add_range(&mut buf, 0, 1500);
    for _ in 0..50 {
        let b = buf
            .sample(Request::rows(1000).without_replacement())
            .unwrap();
        let mut idx = b.indices().to_vec();
        idx.sort_unstable();
        idx.dedup();
        assert_eq!(idx.len(), 1000, "all distinct");
        assert!(idx.iter().all(|&i| (500..1500).contains(&i)));
        let b = buf.sample(Request::rows(64).newest(10)).unwrap();
        assert!(b.indices().iter().all(|&i| (1490..1500).contains(&i)));
    }
    // With replacement over many draws, every item of a small range turns up.
    let b = buf.sample(Request::rows(5000).newest(20)).unwrap();
    let mut seen = b.indices().to_vec();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, (1480..1500).collect::<Vec<_>>());
    assert_eq!(buf.stats().sampled, 50 * 1064 + 5000);
}

#[test]
fn sampled_batches_hold_the_items_of_their_indices_field_by_field() {
    let (_d, mut buf) = buffer(300);
    add_range(&mut buf, 0, 1000);
    let b = buf.sample(256).unwrap();
    let obs: &[f32] = b.get("obs").unwrap();
    let action: &[i64] = b.get("action").unwrap();
    let done: &[bool] = b.get("done").unwrap();
    assert_eq!(b.field("frame").unwrap().shape(), vec![256, 3, 7]);
    for (r, &i) in b.indices().iter().enumerate() {
        let it = item(i);
        assert_eq!(&obs[r * 5..r * 5 + 5], &it.obs);
        assert_eq!(action[r], it.action);
        assert_eq!(done[r], it.done);
    }
    assert!(matches!(
        b.get::<f64>("obs"),
        Err(Error::DTypeMismatch { .. })
    ));
    // A read into the caller's arrays refuses arrays of the wrong number or size,
    // and evicted indices.
    let mut small = common::Arrays(vec![vec![0u8; 3]]);
    assert!(matches!(
        buf.sample_into(Request::at(&[900]), &mut small),
        Err(Error::InvalidSample(_))
    ));
    let mut arrays: Vec<Vec<u8>> = schema()
        .fields()
        .iter()
        .map(|f| vec![0u8; f.bytes()])
        .collect();
    arrays.push(vec![0u8; 8]);
    let mut arrays = common::Arrays(arrays);
    assert!(matches!(
        buf.sample_into(Request::at(&[5]), &mut arrays),
        Err(Error::Evicted { index: 5, .. })
    ));
    buf.sample_into(Request::at(&[999]), &mut arrays).unwrap();
    let fields = arrays.0.len() - 1;
    assert_eq!(arrays.0[..fields].concat(), common::item_bytes(999));
    assert_eq!(arrays.0[fields], 999u64.to_le_bytes());
}

#[test]
fn a_second_writer_is_locked_out_by_name() {
    let (d, buf) = buffer(10);
    let e = ReplayBuffer::open(d.path().join("buf")).unwrap_err();
    assert!(
        matches!(&e, Error::Locked { dir, .. } if *dir == d.path().join("buf")),
        "{e}"
    );
    assert!(e.to_string().contains("locked"));
    drop(buf);
    ReplayBuffer::open(d.path().join("buf")).unwrap();
}

#[test]
fn create_refuses_a_directory_that_is_not_empty() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("notes.txt"), b"mine").unwrap();
    let e = ReplayBuffer::create(d.path(), Config::new(schema(), 10)).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    assert_eq!(std::fs::read(d.path().join("notes.txt")).unwrap(), b"mine");
}

/// Reservations a create with `config` makes (segments are sparse: they are reserved
/// when first stored into, so these are the small files).
fn allocations_at_create(config: impl Fn(Arc<FaultyIo>) -> Config) -> u64 {
    let d = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultyIo::fail_once(u64::MAX).only("allocate"));
    ReplayBuffer::create(d.path().join("buf"), config(io.clone())).unwrap();
    io.ops()
}

#[test]
fn a_buffer_takes_disk_as_rows_arrive_and_a_full_disk_is_an_error_at_that_add_losing_nothing() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("buf");
    let config = |io: Arc<FaultyIo>| Config::new(schema(), 1000).segment_slots(64).io(io);
    // The third segment's reservation fails with ENOSPC: the add of item 128.
    let at_create = allocations_at_create(config);
    let io = Arc::new(
        FaultyIo::fail_once(at_create + 2)
            .only("allocate")
            .errno(28),
    );
    let mut buf = ReplayBuffer::create(&path, config(io)).unwrap();
    let on_disk = |path: &std::path::Path| replaystore::inspect(path).unwrap().bytes_on_disk;
    let (at_first, at_most) = (
        on_disk(&path),
        replaystore::inspect(&path).unwrap().bytes_at_most,
    );
    add_range(&mut buf, 0, 128);
    let e = buf.add(&columns(&item(128))).unwrap_err();
    assert!(
        matches!(&e, Error::DiskFull { path, .. } if path.ends_with("seg-00000002.dat")),
        "{e}"
    );
    assert_eq!(buf.live(), 0..128, "nothing stored, nothing lost");
    let two_segments = on_disk(&path);
    assert!(
        two_segments > at_first,
        "{two_segments} after two segments, {at_first} at create"
    );
    // The disk has room again: the add goes in, and the buffer grows to at most its size.
    assert_eq!(buf.add(&columns(&item(128))).unwrap(), 128);
    add_range(&mut buf, 129, 1000);
    buf.flush().unwrap();
    let full = on_disk(&path);
    assert!(
        full > two_segments && full <= at_most,
        "{two_segments} < {full} <= {at_most}"
    );
    drop(buf);
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.live(), 0..1000);
    assert_eq!(buf.get(128).unwrap().item_bytes(0), common::item_bytes(128));
}

/// The real seam on a real full file system (a 64 KiB tmpfs, where the test may mount
/// one): the reservation's error is ENOSPC itself, not a stale errno, and it comes at
/// the add that first needs the space, before anything is stored.
#[test]
fn a_really_full_disk_is_disk_full_through_the_os_seam() {
    let d = tempfile::tempdir().unwrap();
    let tiny = d.path().join("tiny");
    std::fs::create_dir(&tiny).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&tiny)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!("cannot mount a tmpfs here: the fault-injected test above covers the mapping");
        return;
    }
    let path = tiny.join("buf");
    let outcome = (|| {
        let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 1024).segment_slots(256))?;
        let mut added = 0u64;
        let e = loop {
            match buf.add(&columns(&item(added))) {
                Ok(_) => added += 1,
                Err(e) => break e,
            }
        };
        let live = buf.live();
        let intact = (0..added).all(|i| buf.get(i).unwrap().item_bytes(0) == common::item_bytes(i));
        Ok::<_, Error>((e, added, live, intact))
    })();
    let _ = std::process::Command::new("umount").arg(&tiny).status();
    let (e, added, live, intact) = outcome.unwrap();
    assert!(matches!(&e, Error::DiskFull { .. }), "{e}");
    assert!(e.to_string().starts_with("disk full"), "{e}");
    assert!(
        added >= 256,
        "the first segment fits in 64 KiB: {added} added"
    );
    assert_eq!(live, 0..added);
    assert!(intact, "every item added before the full disk reads back");
}

#[test]
fn a_failed_msync_is_never_retried_into_success() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("buf");
    let io = Arc::new(FaultyIo::fail_once(0).only("flush_map"));
    let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 100).io(io)).unwrap();
    add_range(&mut buf, 0, 10);
    let e = buf.flush().unwrap_err();
    assert!(matches!(e, Error::Io { op: "msync", .. }), "{e}");
    // The fault was one-shot, but the pages were already marked clean by the kernel:
    // the handle must not pretend a second try made them durable.
    assert!(matches!(buf.flush(), Err(Error::Poisoned { .. })));
    assert!(matches!(
        buf.add(&columns(&item(10))),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(buf.clear(), Err(Error::Poisoned { .. })));
    // Reads still work, and what was added is still there after a reopen.
    assert_eq!(buf.get(3).unwrap().item_bytes(0), common::item_bytes(3));
    drop(buf);
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.live(), 0..10);
}

#[test]
fn a_failed_commit_write_poisons_the_handle_and_keeps_the_previous_commit() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("buf");
    let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 100)).unwrap();
    add_range(&mut buf, 0, 10);
    buf.close().unwrap();
    // Opening writes one commit (0); the flush's commit (1) fails.
    let io = Arc::new(FaultyIo::fail_once(1).only("write_at"));
    let mut buf = ReplayBuffer::open_with(&path, io).unwrap();
    add_range(&mut buf, 10, 20);
    assert!(buf.flush().is_err());
    assert!(matches!(
        buf.add(&columns(&item(20))),
        Err(Error::Poisoned { .. })
    ));
    drop(buf);
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(
        buf.live(),
        0..20,
        "the added items are recovered from the page cache"
    );
}

#[test]
fn schemas_are_checked_at_create() {
    assert!(Schema::builder().field("", DType::U8, &[]).build().is_err());
    assert!(
        Schema::builder()
            .field("a\nb", DType::U8, &[])
            .build()
            .is_err()
    );
    assert!(
        Schema::builder()
            .field("a", DType::U8, &[1, 1, 1, 1, 1, 1, 1, 1])
            .build()
            .is_err()
    );
    let d = tempfile::tempdir().unwrap();
    let e = ReplayBuffer::create(d.path().join("b"), Config::new(schema(), 0)).unwrap_err();
    assert!(matches!(
        e,
        Error::InvalidConfig {
            field: "capacity",
            ..
        }
    ));
    let e = ReplayBuffer::create(
        d.path().join("c"),
        Config::new(schema(), 10).segment_slots(3),
    )
    .unwrap_err();
    assert!(matches!(
        e,
        Error::InvalidConfig {
            field: "segment_slots",
            ..
        }
    ));
}

/// The seam's copy (a snapshot brought from another file system, a private copy of a
/// file with other names) keeps a sparse file's holes: a segment mostly unwritten does
/// not become its whole length of zeros on disk, and every byte reads the same.
#[test]
fn a_copy_keeps_the_holes_of_a_sparse_file_and_every_byte() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let d = tempfile::tempdir().unwrap();
    let (from, to) = (d.path().join("from"), d.path().join("to"));
    let f = std::fs::File::create(&from).unwrap();
    f.set_len(64 << 20).unwrap();
    f.write_all_at(b"head", 0).unwrap();
    f.write_all_at(&[7u8; 10_000], 32 << 20).unwrap();
    f.write_all_at(b"tail", (64 << 20) - 4).unwrap();
    drop(f);
    replaystore::io::os().copy_file(&from, &to).unwrap();
    let (a, b) = (std::fs::read(&from).unwrap(), std::fs::read(&to).unwrap());
    assert!(a == b, "the copy reads differently");
    let used = std::fs::metadata(&to).unwrap().blocks() * 512;
    assert!(
        used < 4 << 20,
        "{used} bytes on disk for 10 KB of data in 64 MiB"
    );
}
