//! Promise: nothing read from disk is trusted. A truncated, foreign, future or damaged
//! file gives a typed error naming the file (and `verify` names file and offset); a
//! damaged commit slot falls back to the other slot; nothing panics (issue 3).
//! Offsets here are the ones docs/FORMAT.md gives.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{
    COMMIT_LEN, COMMIT_SLOTS, SEGMENT_HEADER_LEN, SUPERBLOCK_LEN, add_range,
    assert_live_items_intact, flip, schema, segment,
};
use replaystore::{Config, Error, ReplayBuffer, Request, inspect, verify};

const ROW_HEADER: usize = 16;

/// A closed buffer of 300 items in 5 segments of 64 slots, and its directory.
fn fixture() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    let mut buf =
        ReplayBuffer::create(&path, Config::new(schema(), 300).segment_slots(64)).unwrap();
    add_range(&mut buf, 0, 300);
    buf.close().unwrap();
    (dir, path)
}

fn manifest(p: &Path) -> PathBuf {
    p.join("MANIFEST")
}

fn truncate(file: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn names(e: &Error, file: &Path) -> bool {
    e.to_string().contains(&file.display().to_string())
}

#[test]
fn a_directory_without_a_manifest_is_not_a_buffer() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        ReplayBuffer::open(dir.path()),
        Err(Error::NotABuffer { .. })
    ));
    assert!(matches!(verify(dir.path()), Err(Error::NotABuffer { .. })));
    assert!(
        !dir.path().join("LOCK").exists(),
        "open must not litter a non-buffer directory"
    );
}

#[test]
fn truncated_manifest_is_a_typed_error_naming_it() {
    for len in [0u64, 7, 50, 4000, 12_288 + 3] {
        let (_d, p) = fixture();
        truncate(&manifest(&p), len);
        let e = ReplayBuffer::open(&p).unwrap_err();
        assert!(
            matches!(e, Error::Truncated { .. } | Error::BadMagic { .. }),
            "len {len}: {e}"
        );
        assert!(names(&e, &manifest(&p)), "len {len}: {e}");
        let report = verify(&p).unwrap();
        assert!(!report.is_sound());
        assert_eq!(report.problems[0].file, manifest(&p));
    }
}

#[test]
fn truncated_segment_is_a_typed_error_naming_it() {
    let (_d, p) = fixture();
    let seg = segment(&p, 2);
    truncate(&seg, 4096 + 10);
    let e = ReplayBuffer::open(&p).unwrap_err();
    assert!(
        matches!(&e, Error::Truncated { file, .. } if *file == seg),
        "{e}"
    );
    let report = verify(&p).unwrap();
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].file, seg);
}

#[test]
fn wrong_magic_is_a_typed_error() {
    let (_d, p) = fixture();
    std::fs::write(manifest(&p), b"SQLite format 3\0 and then some more bytes").unwrap();
    assert!(matches!(
        ReplayBuffer::open(&p),
        Err(Error::BadMagic { offset: 0, .. })
    ));
    let (_d, p) = fixture();
    flip(&segment(&p, 0), 1, 0);
    let e = ReplayBuffer::open(&p).unwrap_err();
    assert!(
        matches!(&e, Error::BadMagic { file, .. } if *file == segment(&p, 0)),
        "{e}"
    );
}

#[test]
fn a_future_format_version_is_refused_by_name() {
    let (_d, p) = fixture();
    let mut b = std::fs::read(manifest(&p)).unwrap();
    b[8..12].copy_from_slice(&4u32.to_le_bytes());
    let crc = replaystore::internal::format::crc32(&b[..SUPERBLOCK_LEN - 4]);
    b[SUPERBLOCK_LEN - 4..SUPERBLOCK_LEN].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(manifest(&p), b).unwrap();
    let e = ReplayBuffer::open(&p).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnsupportedVersion {
                found: 4,
                supported: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(inspect(&p).is_err());
}

#[test]
fn every_flipped_bit_of_the_superblock_is_detected() {
    let (_d, p) = fixture();
    let original = std::fs::read(manifest(&p)).unwrap();
    for byte in 0..SUPERBLOCK_LEN {
        for bit in [0u8, 3, 7] {
            let mut b = original.clone();
            b[byte] ^= 1 << bit;
            std::fs::write(manifest(&p), &b).unwrap();
            let e = ReplayBuffer::open(&p).unwrap_err();
            assert!(names(&e, &manifest(&p)), "byte {byte} bit {bit}: {e}");
        }
    }
}

#[test]
fn a_flipped_bit_in_the_schema_is_detected() {
    let (_d, p) = fixture();
    let len = std::fs::metadata(manifest(&p)).unwrap().len() as usize;
    flip(&manifest(&p), 12_288 + (len - 12_288) / 2, 4);
    let e = ReplayBuffer::open(&p).unwrap_err();
    assert!(
        matches!(&e, Error::ChecksumMismatch { what, .. } if what == "schema"),
        "{e}"
    );
}

fn generation(b: &[u8], slot: usize) -> u64 {
    u64::from_le_bytes(
        b[COMMIT_SLOTS[slot] + 8..COMMIT_SLOTS[slot] + 16]
            .try_into()
            .unwrap(),
    )
}

#[test]
fn a_damaged_commit_slot_falls_back_to_the_other_and_loses_no_item() {
    for byte in (0..COMMIT_LEN).step_by(3) {
        let (_d, p) = fixture();
        let b = std::fs::read(manifest(&p)).unwrap();
        let newest = usize::from(generation(&b, 1) > generation(&b, 0));
        flip(&manifest(&p), COMMIT_SLOTS[newest] + byte, (byte % 8) as u8);
        let report = verify(&p).unwrap();
        assert!(report.is_sound(), "byte {byte}: {:?}", report.problems);
        assert!(
            report.notes.iter().any(|n| n.contains("commit slot")),
            "byte {byte}: {:?}",
            report.notes
        );
        // The older slot is the writer's "open" commit; recovery rolls forward over
        // every stamped, checksummed item written after it.
        let buf = ReplayBuffer::open(&p).unwrap();
        assert_eq!(buf.live(), 0..300, "byte {byte}");
        assert_live_items_intact(&buf);
    }
}

#[test]
fn both_commit_slots_damaged_is_a_typed_error() {
    let (_d, p) = fixture();
    flip(&manifest(&p), COMMIT_SLOTS[0] + 20, 1);
    flip(&manifest(&p), COMMIT_SLOTS[1] + 20, 1);
    let e = ReplayBuffer::open(&p).unwrap_err();
    assert!(matches!(e, Error::NoValidCommit { .. }), "{e}");
    assert!(!verify(&p).unwrap().is_sound());
}

#[test]
fn every_flipped_byte_of_a_segment_header_is_detected() {
    let (_d, p) = fixture();
    let seg = segment(&p, 3);
    let original = std::fs::read(&seg).unwrap();
    for byte in 0..SEGMENT_HEADER_LEN {
        let mut b = original.clone();
        b[byte] ^= 0x10;
        std::fs::write(&seg, &b).unwrap();
        let e = ReplayBuffer::open(&p).unwrap_err();
        assert!(names(&e, &seg), "byte {byte}: {e}");
        let report = verify(&p).unwrap();
        assert_eq!(report.problems.len(), 1, "byte {byte}");
        assert_eq!(report.problems[0].file, seg);
    }
}

#[test]
fn a_segment_from_another_buffer_is_refused() {
    let (_d, p) = fixture();
    let (_d2, q) = fixture();
    std::fs::copy(segment(&q, 1), segment(&p, 1)).unwrap();
    let e = ReplayBuffer::open(&p).unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { field, .. } if field.contains("uuid")),
        "{e}"
    );
}

#[test]
fn a_flipped_bit_in_an_item_is_found_by_verify_and_get_never_serves_it() {
    let (_d, p) = fixture();
    let stride = inspect(&p).unwrap().row_stride as usize;
    // Item 130 lives in slot 130: segment 2, row 2.
    let seg = segment(&p, 2);
    let offset = 4096 + 2 * stride;
    flip(&seg, offset + ROW_HEADER + 5, 2);
    let report = verify(&p).unwrap();
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].file, seg);
    assert_eq!(report.problems[0].offset, offset as u64);
    assert!(report.problems[0].what.contains("item 130"));
    let buf = ReplayBuffer::open(&p).unwrap();
    let e = buf.get(130).unwrap_err();
    assert!(
        matches!(&e, Error::BadItem { file, index: 130, .. } if *file == seg),
        "{e}"
    );
    assert!(buf.get(131).is_ok());
}

#[test]
fn a_damaged_stamp_is_never_served() {
    let (_d, p) = fixture();
    let stride = inspect(&p).unwrap().row_stride as usize;
    flip(&segment(&p, 0), 4096 + 9 * stride, 0);
    let report = verify(&p).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|f| f.what.contains("item 9") && f.what.contains("stamp"))
    );
    let mut buf = ReplayBuffer::open(&p).unwrap();
    assert!(matches!(buf.get(9), Err(Error::BadItem { index: 9, .. })));
    // Sampling every item surfaces it as an error rather than a wrong row.
    let mut saw = false;
    for _ in 0..200 {
        match buf.sample(64) {
            Ok(b) => assert!(!b.indices().contains(&9)),
            Err(Error::BadItem { index: 9, .. }) => saw = true,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(saw);
}

/// An n-step transition reads every row from its observation row to its bootstrap row,
/// the rewards of the rows between too: a damaged stamp on any of them is an error
/// naming that row, never a return summed from a row that may be another item.
#[test]
fn a_damaged_stamp_inside_an_nstep_transition_is_never_served() {
    use replaystore::{Column, DType, Schema};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("epi");
    let schema = Schema::builder()
        .field("obs", DType::F32, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&p, Config::new(schema, 64).episodic().seed(3)).unwrap();
    buf.add_reset(&[Column::scalar("obs", &0.0f32)]).unwrap();
    for t in 1..=20u64 {
        let (obs, r) = (t as f32, 1.0f32);
        let cols = [Column::scalar("obs", &obs), Column::scalar("reward", &r)];
        buf.add_step(&cols, t == 20, false).unwrap();
    }
    buf.close().unwrap();
    let stride = inspect(&p).unwrap().row_stride as usize;
    // Row 10 is only ever read for its reward (and as some transitions' obs row).
    flip(&segment(&p, 0), 4096 + 10 * stride, 1);
    let mut buf = ReplayBuffer::open(&p).unwrap();
    let spec = Request::transitions(16, &["obs"]).nstep(3, 0.5);
    let mut saw = false;
    for _ in 0..200 {
        match buf.sample(spec) {
            // Steps 8, 9 and 10 sum row 10's reward; step 11 reads it as its obs.
            Ok(t) => assert!(t.indices().iter().all(|j| !(8..=11).contains(j))),
            Err(Error::BadItem { index: 10, .. }) => saw = true,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(saw);
}

#[test]
fn random_garbage_as_any_file_never_panics() {
    let (_d, p) = fixture();
    let files = [manifest(&p), segment(&p, 0), segment(&p, 4)];
    let originals: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for round in 0..300 {
        for (f, o) in files.iter().zip(&originals) {
            std::fs::write(f, o).unwrap();
        }
        let which = round % files.len();
        let mut b = originals[which].clone();
        for _ in 0..1 + round % 5 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let at = (s as usize) % b.len().min(16_384);
            b[at] = (s >> 32) as u8;
        }
        if round % 7 == 0 {
            b.truncate((s as usize >> 3) % b.len());
        }
        std::fs::write(&files[which], &b).unwrap();
        let _ = verify(&p);
        let _ = inspect(&p);
        if let Ok(buf) = ReplayBuffer::open(&p) {
            for i in buf.live() {
                let _ = buf.get(i);
            }
        }
    }
}
