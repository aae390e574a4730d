//! Promise: no size a caller or a file gives can abort or wrap: a draw larger than the
//! machine's memory is `Error::TooLarge` from every handle and every kind of draw, before
//! anything is allocated, and a commit generation at the end of its range is a typed
//! error that changes nothing (issue 26).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use common::{COMMIT_LEN, COMMIT_SLOTS, add_range, schema};
use replaystore::internal::format::manifest::Commit;
use replaystore::{
    Column, Config, DType, Error, Lanes, Reader, ReplayBuffer, Request, Schema, verify,
};

/// Sizes no machine holds: past memory, past the address space, past `usize` products.
const HUGE: [usize; 4] = [1 << 40, 1 << 45, 1 << 63, usize::MAX];

fn too_large<T: std::fmt::Debug>(what: &str, n: usize, r: replaystore::Result<T>) {
    match r {
        Err(Error::TooLarge { rows, limit, .. }) => {
            assert_eq!(rows, n as u64, "{what}");
            assert!(limit > 0, "{what}");
        }
        other => panic!("{what}({n}): {other:?}"),
    }
}

#[test]
fn a_draw_larger_than_memory_is_too_large_from_every_handle_never_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf =
        ReplayBuffer::create(&path, Config::new(schema(), 100).prioritized(0.6, 1e-6)).unwrap();
    add_range(&mut buf, 0, 50);
    buf.flush().unwrap();
    let mut reader = Reader::open(&path).unwrap();
    for n in HUGE {
        too_large("writer sample", n, buf.sample(n));
        too_large(
            "writer sample_prioritized",
            n,
            buf.sample(Request::rows(n).prioritized(0.4)),
        );
        too_large("reader sample", n, reader.sample(n));
        too_large(
            "reader sample_prioritized",
            n,
            reader.sample(Request::rows(n).prioritized(0.4)),
        );
    }
    // The buffer is untouched and still draws.
    assert_eq!(buf.sample(8).unwrap().len(), 8);
    buf.close().unwrap();

    let lanes_path = dir.path().join("lanes");
    let mut lanes = Lanes::create(&lanes_path, Config::new(schema(), 100), 2).unwrap();
    for k in 0..2 {
        add_range(lanes.lane_mut(k).unwrap(), 0, 10);
    }
    for n in HUGE {
        too_large("lanes sample", n, lanes.sample(n));
    }
    assert_eq!(lanes.sample(4).unwrap().len(), 4);
}

#[test]
fn episodic_draws_larger_than_memory_are_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("obs", DType::F32, &[3])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let mut buf =
        ReplayBuffer::create(dir.path().join("e"), Config::new(schema, 200).episodic()).unwrap();
    for _ in 0..4 {
        buf.add_reset(&[Column::new("obs", &[0f32; 3])]).unwrap();
        for t in 0..10 {
            let end = t == 9;
            buf.add_step(
                &[
                    Column::new("obs", &[1f32; 3]),
                    Column::scalar("reward", &1f32),
                ],
                end,
                false,
            )
            .unwrap();
        }
    }
    for n in HUGE {
        too_large(
            "sample_transitions",
            n,
            buf.sample(Request::transitions(n, &["obs"])),
        );
        too_large(
            "sample_sequences",
            n,
            buf.sample(Request::sequences(n, 4, &["obs"])),
        );
        too_large("sample_episodes", n, buf.sample(Request::episodes(n)));
    }
    let two = buf.sample(Request::episodes(2)).unwrap();
    assert_eq!(two.get::<u64>("episodes").unwrap().len(), 2);
}

#[test]
fn a_commit_generation_at_the_end_of_its_range_is_a_typed_error_never_a_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 100)).unwrap();
    add_range(&mut buf, 0, 20);
    buf.close().unwrap();
    // Rewrite the newest commit with the largest generation (a valid checksum: only
    // the number is absurd).
    let manifest = path.join("MANIFEST");
    let mut bytes = std::fs::read(&manifest).unwrap();
    let decoded: Vec<_> = (0..2)
        .map(|i| Commit::decode(&bytes[COMMIT_SLOTS[i]..][..COMMIT_LEN], i, 100))
        .collect();
    let newest = decoded
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .max_by_key(|c| c.generation)
        .copied()
        .unwrap();
    let last = Commit {
        generation: u64::MAX - 1,
        ..newest
    };
    let at = COMMIT_SLOTS[last.slot()];
    bytes[at..at + COMMIT_LEN].copy_from_slice(&last.encode());
    std::fs::write(&manifest, &bytes).unwrap();

    // The open's own commit takes the last number; the next one cannot be had.
    let mut buf = ReplayBuffer::open(&path).unwrap();
    let e = buf.flush().unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { field, .. } if field == "commit generation"),
        "{e}"
    );
    drop(buf);
    // verify names it (it said sound before: a buffer no writer can write again).
    let report = replaystore::verify(&path).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.what.contains("commit generation") && p.file.ends_with("MANIFEST")),
        "{:?}",
        report.problems
    );
    // Nothing acknowledged was lost: the items are all there.
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.live(), 0..20);
}

#[test]
fn a_buffer_larger_than_the_free_disk_takes_disk_only_as_rows_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge");
    let free = fs2::available_space(dir.path()).unwrap();
    // Rows of 4 KiB: enough of them to need twice the free space, but mappable; segments
    // of 1 GiB, so the create makes tens of files, not thousands.
    let schema = Schema::builder()
        .field("x", DType::U8, &[4096])
        .build()
        .unwrap();
    let capacity = (free / 4096).saturating_mul(2).max(1 << 20);
    let config = Config::new(schema.clone(), capacity).segment_bytes(1 << 30);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    let made = buf.stats();
    assert!(made.bytes_at_most > free, "{} > {free}", made.bytes_at_most);
    assert!(
        made.bytes_on_disk < 16 << 20,
        "{} at create",
        made.bytes_on_disk
    );
    // The first add reserves the first segment (at most 1 GiB: a power of two of rows
    // that fits), not the buffer.
    buf.add(&[replaystore::Column::new("x", &[7u8; 4096][..])])
        .unwrap();
    let (before, one) = (made.bytes_on_disk, buf.stats().bytes_on_disk);
    assert!(
        one > before + (256 << 20) && one <= before + (1 << 30) + 4096,
        "{one} after one add, {before} before"
    );
    drop(buf);
    std::fs::remove_dir_all(&path).unwrap();
    // More than any process can map: refused as a capacity, at once.
    let e = ReplayBuffer::create(dir.path().join("h2"), Config::new(schema.clone(), 1 << 40))
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                field: "capacity",
                ..
            } | Error::DiskFull { .. }
        ),
        "{e}"
    );
    assert!(!dir.path().join("h2").exists());
    // A folder that was there before a refused create stays, empty as it was.
    let there = dir.path().join("there");
    std::fs::create_dir(&there).unwrap();
    assert!(ReplayBuffer::create(&there, Config::new(schema.clone(), 1 << 40)).is_err());
    assert_eq!(std::fs::read_dir(&there).unwrap().count(), 0);
    ReplayBuffer::create(&path, Config::new(schema, 16))
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn a_superblock_declaring_millions_of_segments_is_one_finding_not_an_hour_of_verify() {
    use replaystore::internal::format::manifest::Superblock;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf =
        ReplayBuffer::create(&path, Config::new(schema(), 128).segment_slots(64)).unwrap();
    add_range(&mut buf, 0, 10);
    buf.close().unwrap();
    let manifest = path.join("MANIFEST");
    let mut bytes = std::fs::read(&manifest).unwrap();
    let sb = Superblock::decode(&bytes[..4096]).unwrap();
    // A well-checksummed superblock: 2^26 segments of 64 slots.
    let huge = Superblock {
        capacity: 1 << 32,
        segment_count: Superblock::segments_for(1 << 32, 64),
        ..sb
    };
    bytes[..4096].copy_from_slice(&huge.encode());
    std::fs::write(&manifest, &bytes).unwrap();
    let report = verify(&path).unwrap();
    assert!(!report.is_sound());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.what.contains("declares 67108864 segments")),
        "{:?}",
        report.problems
    );
    let e = ReplayBuffer::open(&path).map(drop).unwrap_err();
    assert!(!matches!(e, Error::TooLarge { .. }), "{e}");
}
