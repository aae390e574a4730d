//! Promise: a damaged row is never served (issue 26, point 2). Every read of an item a
//! flush has sealed checks the item's checksum as it copies it (sample, prioritized
//! sample, get, the fill-in-place gather, readers mapped and with `pread`, snapshots,
//! n-step transitions, sequences, whole episodes, the episode getters); a flipped bit
//! is an error naming the file, the row's offset and the item, and the other items
//! still read. Items added since the last flush carry no checksum yet and read on their
//! stamps alone. `set_read_checks(false)` turns the check off, and then the damage is
//! served: the control that shows the check is what caught it.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{add_range, flip, item_bytes, schema, segment};
use replaystore::Indices;
use replaystore::{
    Batch, Column, Config, DType, Error, GetOptions, Reader, ReplayBuffer, Request, RowAccess,
    Schema, inspect,
};

/// Offset of the first field of a row of the common schema (after the 16-byte header).
const FIRST_FIELD: usize = 16;
/// Offset of the first row of a segment.
const DATA: usize = 4096;

/// Whether `e` is the damage of item `index`, named by its file and row offset.
fn names_damage(e: &Error, index: u64, file: &Path, offset: u64) -> bool {
    matches!(e, Error::BadItem { file: f, offset: o, index: i, problem }
        if f == file && *o == offset && *i == index && problem.contains("checksum mismatch"))
}

/// A closed prioritized buffer of 300 items in 5 segments of 64 slots, with one bit
/// of item 130's first field flipped (segment 2, row 2); the damaged file and offset.
fn damaged_fixture() -> (tempfile::TempDir, PathBuf, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    let config = Config::new(schema(), 300)
        .segment_slots(64)
        .prioritized(0.6, 1e-6)
        .seed(5);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    add_range(&mut buf, 0, 300);
    buf.get_state_named("before").unwrap();
    buf.close().unwrap();
    let stride = inspect(&path).unwrap().row_stride as usize;
    let seg = segment(&path, 2);
    let offset = DATA + 2 * stride;
    flip(&seg, offset + FIRST_FIELD + 1, 3);
    (dir, path, seg, offset as u64)
}

/// Samples until item 130 comes up: every batch that succeeds leaves it out, and the
/// one that drew it failed naming it. Any other error fails the test.
fn sampling_never_serves(mut sample: impl FnMut() -> Result<Vec<u64>, Error>, seg: &Path, at: u64) {
    let mut saw = false;
    for _ in 0..400 {
        match sample() {
            Ok(indices) => assert!(!indices.contains(&130), "item 130 served"),
            Err(e) => {
                assert!(names_damage(&e, 130, seg, at), "{e}");
                saw = true;
            }
        }
    }
    assert!(saw, "400 batches of 64 out of 300 never drew item 130");
}

#[test]
fn every_read_of_a_sealed_row_with_a_flipped_bit_is_an_error_naming_file_offset_and_item() {
    let (_d, path, seg, at) = damaged_fixture();
    let mut buf = ReplayBuffer::open(&path).unwrap();
    assert!(buf.read_checks(), "checks are on by default");
    let e = buf.get(130).unwrap_err();
    assert!(names_damage(&e, 130, &seg, at), "{e}");
    let e = buf.get_many(&[129, 130, 131]).unwrap_err();
    assert!(names_damage(&e, 130, &seg, at), "{e}");
    assert_eq!(buf.get(131).unwrap().item_bytes(0), item_bytes(131));
    // The fill-in-place read the bindings use (into a sink).
    let mut out = Batch::default();
    let e = buf.sample_into(Request::at(&[130]), &mut out).unwrap_err();
    assert!(names_damage(&e, 130, &seg, at), "{e}");
    sampling_never_serves(|| buf.sample(64).map(|b| b.indices().to_vec()), &seg, at);
    sampling_never_serves(
        || {
            buf.sample(Request::rows(64).prioritized(0.4))
                .map(|b| b.indices().to_vec())
        },
        &seg,
        at,
    );
    buf.close().unwrap();

    // A snapshot shares the damaged segment (nothing was written after it): the error
    // names the snapshot's own link to it.
    let snap = ReplayBuffer::open_snapshot(&path, "before").unwrap();
    let linked = path.join("snapshots/before/lane-0/seg-00000002.dat");
    let e = snap.get(130).unwrap_err();
    assert!(names_damage(&e, 130, &linked, at), "{e}");

    // Readers, through the mappings and with pread.
    for access in [RowAccess::Mapped, RowAccess::Pread] {
        let mut r = Reader::open(&path).unwrap();
        r.set_row_access(access).unwrap();
        let e = r.get(130).unwrap_err();
        assert!(names_damage(&e, 130, &seg, at), "{access:?}: {e}");
        sampling_never_serves(|| r.sample(64).map(|b| b.indices().to_vec()), &seg, at);
        sampling_never_serves(
            || {
                r.sample(Request::rows(64).prioritized(0.4))
                    .map(|b| b.indices().to_vec())
            },
            &seg,
            at,
        );
    }
}

#[test]
fn with_read_checks_off_the_damage_is_served_and_stamps_are_still_checked() {
    let (_d, path, seg, _) = damaged_fixture();
    let mut buf = ReplayBuffer::open(&path).unwrap();
    buf.set_read_checks(false);
    let got = buf.get(130).unwrap().item_bytes(0);
    assert_ne!(got, item_bytes(130), "the flipped bit is served");
    let mut r = Reader::open(&path).unwrap();
    r.set_read_checks(false);
    assert_eq!(r.get(130).unwrap().item_bytes(0), got);
    // A damaged stamp is still refused.
    let stride = inspect(&path).unwrap().row_stride as usize;
    flip(&seg, DATA + 3 * stride, 0);
    assert!(matches!(
        buf.get(131),
        Err(Error::BadItem { index: 131, .. })
    ));
}

#[test]
fn items_not_yet_sealed_read_on_their_stamps_and_are_checked_once_a_flush_seals_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("buf");
    let mut buf = ReplayBuffer::create(&path, Config::new(schema(), 64).segment_slots(64)).unwrap();
    add_range(&mut buf, 0, 100);
    buf.flush().unwrap();
    // 100..150 overwrite slots whose checksums belong to items 36..85: read before the
    // next flush, they must not be held against those.
    add_range(&mut buf, 100, 150);
    for i in buf.live() {
        assert_eq!(buf.get(i).unwrap().item_bytes(0), item_bytes(i), "item {i}");
    }
    let mut r = Reader::open(&path).unwrap();
    for i in r.live() {
        assert_eq!(
            r.get(i).unwrap().item_bytes(0),
            item_bytes(i),
            "reader, item {i}"
        );
    }
    buf.flush().unwrap();
    for i in buf.live() {
        assert_eq!(buf.get(i).unwrap().item_bytes(0), item_bytes(i), "item {i}");
    }
    for i in r.live() {
        assert_eq!(
            r.get(i).unwrap().item_bytes(0),
            item_bytes(i),
            "reader, item {i}"
        );
    }
}

/// An episodic buffer of three 20-step episodes; the reward of the step at `damaged`
/// flipped on disk.
fn damaged_episodes(damaged: u64) -> (tempfile::TempDir, PathBuf, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("epi");
    let schema = Schema::builder()
        .field("obs", DType::F32, &[3])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::create(&p, Config::new(schema, 128).episodic().seed(3)).unwrap();
    for _ in 0..3 {
        buf.add_reset(&[Column::new("obs", &[0.0f32; 3])]).unwrap();
        for t in 1..=20u64 {
            let (obs, r) = ([t as f32; 3], 1.0f32);
            let cols = [Column::new("obs", &obs), Column::scalar("reward", &r)];
            buf.add_step(&cols, t == 20, false).unwrap();
        }
    }
    buf.close().unwrap();
    let layout = inspect(&p).unwrap();
    let stride = layout.row_stride as usize;
    // Episodic rows: 16-byte row header, 16-byte step header, obs (12 bytes), reward.
    let offset = DATA + damaged as usize * stride;
    let seg = segment(&p, 0);
    flip(&seg, offset + 32 + 12 + 2, 5);
    (dir, p, seg, offset as u64)
}

#[test]
fn transitions_sequences_episodes_and_episode_getters_never_serve_a_damaged_step() {
    // Row 30 is step 9 of the second episode (rows 21..=41).
    let (_d, p, seg, at) = damaged_episodes(30);
    let mut buf = ReplayBuffer::open(&p).unwrap();
    let check = |e: &Error| assert!(names_damage(e, 30, &seg, at), "{e}");
    let spec = Request::transitions(16, &["obs"]).nstep(3, 0.5);
    let mut saw = false;
    for _ in 0..300 {
        match buf.sample(spec) {
            // Steps 28..=30 sum row 30's reward; step 31 reads row 30 as its obs.
            Ok(t) => assert!(t.indices().iter().all(|j| !(28..=31).contains(j))),
            Err(e) => {
                check(&e);
                saw = true;
            }
        }
    }
    assert!(saw, "no transition over row 30 drawn");
    let spec = Request::sequences(8, 5, &["obs"]);
    let mut saw = false;
    for _ in 0..300 {
        match buf.sample(spec) {
            Ok(_) => {}
            Err(e) => {
                check(&e);
                saw = true;
            }
        }
    }
    assert!(saw, "no sequence over row 30 drawn");
    let mut saw = false;
    for _ in 0..100 {
        match buf.sample(Request::episodes(1)) {
            Ok(b) => assert!(!b.indices().contains(&30)),
            Err(e) => {
                check(&e);
                saw = true;
            }
        }
    }
    assert!(saw, "the second episode was never drawn");
    let id = buf.episode(30).unwrap().id;
    let chunk = buf.episode_chunk(id).unwrap();
    let e = buf
        .get_steps(&chunk, "reward", &Indices::All, GetOptions::default())
        .unwrap_err();
    check(&e);
    // The first episode's rows are sound.
    let first = buf.episode_chunk(buf.episode(5).unwrap().id).unwrap();
    let rewards = buf
        .get_steps(&first, "reward", &Indices::All, GetOptions::default())
        .unwrap();
    assert_eq!(rewards.as_slice::<f32>().unwrap(), [1.0f32; 20]);
}
