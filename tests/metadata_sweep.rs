//! Promise: every single-bit flip and every truncation of the buffer's metadata (the
//! MANIFEST's superblock and both commit slots, every segment header, a snapshot's
//! MANIFEST) is detected, exhaustively, never served: a damaged commit slot falls back
//! to the other, and anything else is a typed error naming the file (and, where there is
//! one, the offset). Counts are printed: flips and cuts tried, and detected.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{
    COMMIT_LEN, COMMIT_SLOTS, SEGMENT_HEADER_LEN, SUPERBLOCK_LEN, add_range,
    assert_live_items_intact, schema,
};
use replaystore::internal::storage::{self, Manifest};
use replaystore::io::OsIo;
use replaystore::{Config, Error, ReplayBuffer, State};

/// A closed buffer of 30 items in segments of 8 with snapshot `s` of the first 20.
fn fixture(dir: &Path) -> State {
    let config = Config::new(schema(), 24)
        .segment_slots(8)
        .prioritized(0.6, 1e-6);
    let mut buf = ReplayBuffer::create(dir, config).unwrap();
    add_range(&mut buf, 0, 20);
    let s = buf.get_state_named("s").unwrap();
    add_range(&mut buf, 20, 30);
    buf.close().unwrap();
    s
}

/// The file and offset an error names, if it names one.
fn place(e: &Error) -> Option<(&Path, Option<u64>)> {
    match e {
        Error::BadMagic { file, offset, .. }
        | Error::ChecksumMismatch { file, offset, .. }
        | Error::Corrupt { file, offset, .. } => Some((file, Some(*offset))),
        Error::UnsupportedVersion { file, .. }
        | Error::Truncated { file, .. }
        | Error::NoValidCommit { file, .. } => Some((file, None)),
        _ => None,
    }
}

#[derive(Default)]
struct Tally {
    tried: u64,
    detected: u64,
}

impl Tally {
    fn count(&mut self, detected: bool, what: impl FnOnce() -> String) {
        self.tried += 1;
        self.detected += u64::from(detected);
        assert!(detected, "not detected: {}", what());
    }
}

/// `f(bytes)` for every single-bit flip of `range` in `file`, the file restored after.
fn each_flip(file: &Path, range: std::ops::Range<usize>, mut f: impl FnMut(usize, u8)) {
    let original = std::fs::read(file).unwrap();
    for byte in range {
        for bit in 0..8u8 {
            let mut b = original.clone();
            b[byte] ^= 1 << bit;
            std::fs::write(file, &b).unwrap();
            f(byte, bit);
        }
    }
    std::fs::write(file, &original).unwrap();
}

/// A load of `dir`'s MANIFEST that fails names `file`.
fn load_error_names(dir: &Path, file: &Path) -> bool {
    match Manifest::load(&OsIo, dir) {
        Ok(_) => false,
        Err(e) => place(&e).is_some_and(|(f, _)| f == file),
    }
}

#[test]
fn every_bit_flip_and_cut_of_the_metadata_is_detected() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut state = fixture(&dir);
    let manifest = dir.join("MANIFEST");
    let mut flips = Tally::default();
    let mut cuts = Tally::default();

    // The superblock: a typed error naming the MANIFEST and an offset.
    each_flip(&manifest, 0..SUPERBLOCK_LEN, |byte, bit| {
        let e = Manifest::load(&OsIo, &dir).err();
        let named = e
            .as_ref()
            .and_then(place)
            .is_some_and(|(f, _)| f == manifest);
        flips.count(named, || format!("superblock byte {byte} bit {bit}: {e:?}"));
    });

    // Each commit slot: that slot is rejected and the other one is used; a full open
    // then recovers every item (the older slot is the writer's opening commit).
    let healthy = Manifest::load(&OsIo, &dir).unwrap();
    let newest = healthy.newest_commit().unwrap();
    for (slot, &at) in COMMIT_SLOTS.iter().enumerate() {
        each_flip(&manifest, at..at + COMMIT_LEN, |byte, bit| {
            let m = Manifest::load(&OsIo, &dir).unwrap();
            let rejected = m.slots[slot].is_err();
            flips.count(rejected, || {
                format!("commit slot {slot} byte {byte} bit {bit}")
            });
            let used = m.newest_commit().unwrap();
            if newest.slot() == slot {
                assert_ne!(
                    used.generation, newest.generation,
                    "slot {slot} byte {byte}"
                );
                if byte % 16 == 0 && bit == 0 {
                    let buf = ReplayBuffer::open(&dir).unwrap();
                    assert_eq!(buf.live(), 6..30, "slot {slot} byte {byte}");
                    assert_live_items_intact(&buf);
                    // Its own commit is overwritten by the next flip's copy of the
                    // original bytes; the rows it recovered are the same items.
                    drop(buf);
                }
            } else {
                assert_eq!(used, newest, "slot {slot} byte {byte}");
            }
        });
        // The opens above wrote commits; start the next slot from the fixture again.
        std::fs::remove_dir_all(&dir).unwrap();
        state = fixture(&dir);
    }

    // Every segment header: a typed error naming the segment and an offset.
    let sb = Manifest::load(&OsIo, &dir).unwrap().superblock;
    for n in 0..sb.segment_count {
        let seg = storage::segment_path(&dir, n);
        each_flip(&seg, 0..SEGMENT_HEADER_LEN, |byte, bit| {
            let e = storage::check_segment(&OsIo, &dir, &sb, n).err();
            let named = e
                .as_ref()
                .and_then(place)
                .is_some_and(|(f, off)| f == seg && off.is_some());
            flips.count(named, || {
                format!("segment {n} byte {byte} bit {bit}: {e:?}")
            });
        });
    }

    // The snapshot's MANIFEST: listed as damaged or refused, and a restore of it is an
    // error that changes nothing.
    let snap_dir = replaystore::internal::snapshot_dir(&dir, "s");
    let snap_manifest = snap_dir.join("MANIFEST");
    let snap_newest = Manifest::load(&OsIo, &snap_dir)
        .unwrap()
        .newest_commit()
        .unwrap();
    let ranges = [
        0..SUPERBLOCK_LEN,
        COMMIT_SLOTS[snap_newest.slot()]..COMMIT_SLOTS[snap_newest.slot()] + COMMIT_LEN,
    ];
    for range in ranges {
        each_flip(&snap_manifest, range, |byte, bit| {
            let m = Manifest::load(&OsIo, &snap_dir);
            let detected = match &m {
                Err(e) => place(e).is_some_and(|(f, _)| f == snap_manifest),
                Ok(m) => m.newest_commit().map_or(true, |c| c != snap_newest),
            };
            flips.count(detected, || {
                format!("snapshot MANIFEST byte {byte} bit {bit}")
            });
            if byte % 24 == 0 && bit == 0 {
                let mut buf = ReplayBuffer::open(&dir).unwrap();
                let before = buf.live();
                assert!(
                    buf.set_state(&state).is_err(),
                    "snapshot byte {byte}: restored"
                );
                assert_eq!(buf.live(), before);
            }
        });
    }

    // Every length short of each file's layout.
    let len = std::fs::metadata(&manifest).unwrap().len();
    let original = std::fs::read(&manifest).unwrap();
    for cut in 0..len {
        std::fs::write(&manifest, &original[..cut as usize]).unwrap();
        cuts.count(load_error_names(&dir, &manifest), || {
            format!("MANIFEST cut to {cut}")
        });
    }
    std::fs::write(&manifest, &original).unwrap();
    let original = std::fs::read(&snap_manifest).unwrap();
    for cut in 0..original.len() {
        std::fs::write(&snap_manifest, &original[..cut]).unwrap();
        cuts.count(load_error_names(&snap_dir, &snap_manifest), || {
            format!("snapshot MANIFEST cut to {cut}")
        });
    }
    std::fs::write(&snap_manifest, &original).unwrap();
    let seg: PathBuf = storage::segment_path(&dir, 1);
    let original = std::fs::read(&seg).unwrap();
    for cut in 0..original.len() {
        std::fs::write(&seg, &original[..cut]).unwrap();
        let e = storage::check_segment(&OsIo, &dir, &sb, 1).err();
        cuts.count(
            e.as_ref().and_then(place).is_some_and(|(f, _)| f == seg),
            || format!("segment cut to {cut}: {e:?}"),
        );
    }
    std::fs::write(&seg, &original).unwrap();
    assert!(replaystore::verify(&dir).unwrap().is_sound());
    println!(
        "metadata bit flips detected {} of {}; truncations detected {} of {}",
        flips.detected, flips.tried, cuts.detected, cuts.tried
    );
}

/// Every file of a buffer and its snapshot (MANIFEST, every segment, the tree, the
/// progress page, the lock, the snapshot's MANIFEST, segments and tree), replaced in
/// turn by a symbolic link to a copy of itself outside the buffer, a FIFO or a folder:
/// inspect, verify, open and a reader's open each return (within 20 s: a FIFO must not
/// hang them) a value or a typed error, and whatever refuses names the replaced path as
/// a foreign file. Issue 26: the sweep of kinds, beside the sweep of bits.
#[test]
fn every_file_replaced_by_a_link_a_fifo_or_a_folder_is_refused_naming_it() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    fixture(&dir);
    let mut files = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let (mut tried, mut refused) = (0, 0);
    for file in &files {
        let good = std::fs::read(file).unwrap();
        for kind in ["link", "fifo", "folder"] {
            std::fs::remove_file(file).unwrap();
            match kind {
                "link" => {
                    let target = outside.join(file.file_name().unwrap());
                    std::fs::write(&target, &good).unwrap();
                    symlink(&target, file).unwrap();
                }
                "fifo" => {
                    let ok = std::process::Command::new("mkfifo").arg(file).status();
                    assert!(ok.unwrap().success());
                }
                _ => std::fs::create_dir(file).unwrap(),
            }
            let d = dir.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let errors: Vec<Error> = [
                    replaystore::inspect(&d).err(),
                    replaystore::verify(&d).err(),
                    ReplayBuffer::open(&d).err(),
                    replaystore::Reader::open(&d).err(),
                    ReplayBuffer::open_snapshot(&d, "s").err(),
                ]
                .into_iter()
                .flatten()
                .collect();
                let _ = tx.send(errors);
            });
            let errors = rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("{kind} at {}: a call hung", file.display()));
            tried += 1;
            // A snapshot's file is refused inside the snapshot's error.
            let foreign = |e: &Error| match e {
                Error::BadSnapshot { source, .. } => match &**source {
                    Error::ForeignFile { path, .. } => Some(path.clone()),
                    _ => None,
                },
                Error::ForeignFile { path, .. } => Some(path.clone()),
                _ => None,
            };
            for e in &errors {
                if let Some(path) = foreign(e) {
                    assert_eq!(&path, file, "{kind}: {e}");
                }
            }
            let named = errors.iter().any(|e| foreign(e).as_ref() == Some(file));
            assert!(named, "{kind} at {}: {errors:?}", file.display());
            refused += 1;
            // Put the file back for the next case.
            if std::fs::symlink_metadata(file).unwrap().is_dir() {
                std::fs::remove_dir(file).unwrap();
            } else {
                std::fs::remove_file(file).unwrap();
            }
            std::fs::write(file, &good).unwrap();
        }
    }
    println!(
        "files {} x kinds 3: {tried} tried, {refused} refused naming the path",
        files.len()
    );
    assert_eq!(refused, tried);
}

/// Issue 29: a version-2 buffer's metadata (the longer superblock with the chunk
/// ring's geometry, and every chunk segment's header) gets the same sweep: every bit
/// flip and every cut is a typed error naming the file.
#[test]
fn every_bit_flip_and_cut_of_a_version_2_buffers_metadata_is_detected() {
    // A flat buffer, and an episodic one (its episode flags in the same superblock,
    // its steps' values in the chunk ring).
    version_2_sweep(false, false);
    version_2_sweep(true, false);
}

/// An episodic buffer with values and item states (superblock flag bit 7, version 3):
/// the same sweep, and every bit of its state words, an episode removed among them.
#[test]
fn every_bit_flip_and_cut_of_an_episodic_buffer_with_states_is_detected() {
    version_2_sweep(true, true);
}

fn version_2_sweep(episodic: bool, states: bool) {
    use replaystore::internal::format::manifest::SUPERBLOCK_V2_LEN;
    use replaystore::{Column, DType, Schema, VarKind};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("v");
    let schema = Schema::builder()
        .field("x", DType::U32, &[])
        .variable("text", VarKind::Str, None)
        .build()
        .unwrap();
    let mut config = Config::new(schema, 16)
        .segment_slots(8)
        .chunk_bytes(64)
        .heap_bytes(16 * 80)
        .segment_bytes(8 * 80)
        // Flag bit 5 set, so its flips are swept too; the ring evicts for room.
        .evict_for_room();
    if episodic {
        config = config.whole_episodes();
    }
    if states {
        config = config.item_states();
    }
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    for i in 0..20u32 {
        let text = "v".repeat(i as usize * 5);
        let row = [Column::scalar("x", &i), Column::text("text", &text)];
        match (episodic, i % 4) {
            (false, _) => buf.add(&row).map(drop),
            (true, 0) => buf.add_reset(&row).map(drop),
            (true, k) => buf.add_step(&row, k == 3, false).map(drop),
        }
        .unwrap();
    }
    if states {
        let first = buf.episodes().unwrap()[0].start;
        assert!(buf.remove(&[first]).unwrap() > 0);
    }
    buf.close().unwrap();
    let manifest = dir.join("MANIFEST");
    let mut flips = Tally::default();
    let mut cuts = Tally::default();
    if states {
        use replaystore::internal::format::lifecycle::BODY_OFFSET;
        // Every bit of every state word: each flip is a finding at its word.
        let items = dir.join("items.state");
        each_flip(&items, BODY_OFFSET..BODY_OFFSET + 16 * 8, |byte, bit| {
            let at = (byte - (byte - BODY_OFFSET) % 8) as u64;
            let report = replaystore::verify(&dir).unwrap();
            let found = (report.problems.iter()).any(|p| p.file == items && p.offset == at);
            flips.count(found, || format!("items.state word byte {byte} bit {bit}"));
        });
    }
    each_flip(&manifest, 0..SUPERBLOCK_V2_LEN, |byte, bit| {
        let e = Manifest::load(&OsIo, &dir).err();
        let named = e
            .as_ref()
            .and_then(place)
            .is_some_and(|(f, _)| f == manifest);
        flips.count(named, || format!("superblock byte {byte} bit {bit}: {e:?}"));
    });
    let sb = Manifest::load(&OsIo, &dir).unwrap().superblock;
    let heap = sb.heap.unwrap();
    assert!(heap.segment_count > 1);
    for n in 0..heap.segment_count {
        let seg = storage::heap_segment_path(&dir, n);
        each_flip(&seg, 0..SEGMENT_HEADER_LEN, |byte, bit| {
            let e = storage::check_heap_segment(&OsIo, &dir, &sb, n).err();
            let named = e
                .as_ref()
                .and_then(place)
                .is_some_and(|(f, off)| f == seg && off.is_some());
            flips.count(named, || {
                format!("chunk segment {n} byte {byte} bit {bit}: {e:?}")
            });
            if byte == 0 && bit == 0 {
                // An open refuses it too, naming the file.
                let e = ReplayBuffer::open(&dir).map(drop).unwrap_err();
                assert!(place(&e).is_some_and(|(f, _)| f == seg), "{e}");
            }
        });
    }
    let seg = storage::heap_segment_path(&dir, 1);
    let original = std::fs::read(&seg).unwrap();
    for cut in (0..original.len()).step_by(7) {
        std::fs::write(&seg, &original[..cut]).unwrap();
        let e = storage::check_heap_segment(&OsIo, &dir, &sb, 1).err();
        cuts.count(
            e.as_ref().and_then(place).is_some_and(|(f, _)| f == seg),
            || format!("chunk segment cut to {cut}: {e:?}"),
        );
    }
    std::fs::write(&seg, &original).unwrap();
    // A row segment where a chunk segment belongs: its magic says so.
    let rows = storage::segment_path(&dir, 0);
    let mut swapped = std::fs::read(&rows).unwrap();
    swapped.resize(original.len(), 0);
    std::fs::write(&seg, &swapped).unwrap();
    let e = storage::check_heap_segment(&OsIo, &dir, &sb, 1).unwrap_err();
    assert!(
        matches!(&e, Error::BadMagic { file, .. } if *file == seg),
        "{e}"
    );
    std::fs::write(&seg, &original).unwrap();
    assert!(replaystore::verify(&dir).unwrap().is_sound());
    println!(
        "version-2/3 metadata (episodic {episodic}, item states {states}) bit flips detected \
         {} of {}; truncations detected {} of {}",
        flips.detected, flips.tried, cuts.detected, cuts.tried
    );
}

/// Issue 30: a version-3 buffer's metadata (the superblock with item states and no
/// chunk ring, the `items.state` header, a snapshot's copy of it) gets the same sweep:
/// every bit flip of the checked header and every cut of the file is a typed error
/// naming the file, a flip of the removed-live count is found by `verify`, and a
/// restore from a damaged copy changes nothing.
#[test]
fn every_bit_flip_and_cut_of_a_version_3_buffers_metadata_is_detected() {
    use replaystore::internal::format::lifecycle::{BODY_OFFSET, HEADER_LEN, REMOVED_LIVE_OFF};
    use replaystore::internal::format::manifest::SUPERBLOCK_V2_LEN;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("l");
    let config = Config::new(schema(), 24)
        .segment_slots(8)
        .prioritized(0.6, 1e-6)
        .max_use(3);
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    add_range(&mut buf, 0, 20);
    buf.remove(&[2, 9]).unwrap();
    let state = buf.get_state_named("s").unwrap();
    add_range(&mut buf, 20, 30);
    buf.remove(&[25]).unwrap();
    buf.close().unwrap();
    let manifest = dir.join("MANIFEST");
    let items = dir.join("items.state");
    let mut flips = Tally::default();
    let mut cuts = Tally::default();
    each_flip(&manifest, 0..SUPERBLOCK_V2_LEN, |byte, bit| {
        let e = Manifest::load(&OsIo, &dir).err();
        let named = e
            .as_ref()
            .and_then(place)
            .is_some_and(|(f, _)| f == manifest);
        flips.count(named, || format!("superblock byte {byte} bit {bit}: {e:?}"));
    });
    each_flip(&items, 0..HEADER_LEN, |byte, bit| {
        let e = ReplayBuffer::open(&dir).map(drop).err();
        let named = e.as_ref().and_then(place).is_some_and(|(f, _)| f == items);
        flips.count(named, || {
            format!("items.state byte {byte} bit {bit}: {e:?}")
        });
        let report = replaystore::verify(&dir).unwrap();
        assert!(
            report.problems.iter().any(|p| p.file == items),
            "verify misses items.state byte {byte} bit {bit}"
        );
    });
    each_flip(
        &items,
        REMOVED_LIVE_OFF..REMOVED_LIVE_OFF + 8,
        |byte, bit| {
            let report = replaystore::verify(&dir).unwrap();
            let found = report
                .problems
                .iter()
                .any(|p| p.file == items && p.offset == REMOVED_LIVE_OFF as u64);
            flips.count(found, || format!("removed_live byte {byte} bit {bit}"));
        },
    );
    // Every bit of every word (uses of live and used-up items, removals, unwritten
    // slots): the word's check makes each flip a finding at its offset.
    each_flip(&items, BODY_OFFSET..BODY_OFFSET + 24 * 8, |byte, bit| {
        let at = (byte - (byte - BODY_OFFSET) % 8) as u64;
        let report = replaystore::verify(&dir).unwrap();
        let found = report
            .problems
            .iter()
            .any(|p| p.file == items && p.offset == at);
        flips.count(found, || format!("items.state word byte {byte} bit {bit}"));
    });
    let original = std::fs::read(&items).unwrap();
    for cut in (0..original.len()).step_by(61) {
        std::fs::write(&items, &original[..cut]).unwrap();
        let e = ReplayBuffer::open(&dir).map(drop).err();
        cuts.count(
            e.as_ref().and_then(place).is_some_and(|(f, _)| f == items),
            || format!("items.state cut to {cut}: {e:?}"),
        );
    }
    std::fs::write(&items, &original).unwrap();
    // The snapshot's copy: a damaged header makes the restore an error that changes
    // nothing.
    let snap_items = replaystore::internal::snapshot_dir(&dir, "s").join("items.state");
    each_flip(&snap_items, 0..HEADER_LEN, |byte, bit| {
        if bit != 0 {
            return;
        }
        let mut buf = ReplayBuffer::open(&dir).unwrap();
        let before = (buf.live(), buf.len());
        let e = buf.set_state(&state).err();
        let inner = match &e {
            Some(Error::BadSnapshot { source, .. }) => Some(&**source),
            other => other.as_ref(),
        };
        let named = inner.and_then(place).is_some_and(|(f, _)| f == snap_items);
        flips.count(named, || format!("snapshot items.state byte {byte}: {e:?}"));
        assert_eq!((buf.live(), buf.len()), before);
    });
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    buf.set_state(&state).unwrap();
    assert_eq!((buf.live(), buf.len()), (0..20, 18));
    drop(buf);
    assert!(replaystore::verify(&dir).unwrap().is_sound());
    println!(
        "version-3 metadata bit flips detected {} of {}; truncations detected {} of {}",
        flips.detected, flips.tried, cuts.detected, cuts.tried
    );
}
