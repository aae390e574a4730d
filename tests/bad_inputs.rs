//! Promise: input no item may hold is refused before anything is stored, naming the
//! field, and a configuration that cannot be honoured is refused rather than quietly
//! changed (issue 26, point 7).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use replaystore::{Column, Config, DType, Error, Lanes, ReplayBuffer, Schema};

fn schema() -> Schema {
    Schema::builder()
        .field("x", DType::F32, &[])
        .field("done", DType::Bool, &[])
        .build()
        .unwrap()
}

#[test]
fn a_bool_byte_other_than_0_or_1_is_refused_naming_field_and_element() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), Config::new(schema(), 8)).unwrap();
    buf.add_batch(&[
        Column::new("x", &[1.0f32, 2.0]),
        Column::new("done", &[false, true]),
    ])
    .unwrap();
    let raw = [0u8, 1, 2];
    let e = buf
        .add_batch(&[
            Column::new("x", &[3.0f32, 4.0, 5.0]),
            Column::from_bytes("done", DType::Bool, &[3], &raw),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadValue { field, element: 2, .. } if field == "done"),
        "{e}"
    );
    let e = buf
        .add(&[
            Column::scalar("x", &6.0f32),
            Column::from_bytes("done", DType::Bool, &[], &[255]),
        ])
        .unwrap_err();
    assert!(matches!(e, Error::BadValue { element: 0, .. }), "{e}");
    // Nothing of either call was stored.
    assert_eq!(buf.live(), 0..2);
    assert_eq!(buf.get(1).unwrap().get::<bool>("done").unwrap(), [true]);
}

#[test]
fn a_field_named_as_a_samples_own_key_is_refused_before_any_file_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["indices", "weights"] {
        let schema = Schema::builder()
            .field("x", DType::F32, &[])
            .field(name, DType::U64, &[])
            .build()
            .unwrap();
        let path = tmp.path().join(name);
        let e = ReplayBuffer::create(&path, Config::new(schema.clone(), 8)).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidSchema(m) if m.contains(name)),
            "{e}"
        );
        assert!(!path.exists(), "{name}: nothing made");
        let e = Lanes::create(tmp.path().join("lanes"), Config::new(schema, 8), 2).unwrap_err();
        assert!(matches!(e, Error::InvalidSchema(_)), "{e}");
    }
}

#[test]
fn lanes_refuse_a_capacity_smaller_than_their_count_instead_of_growing_it() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("l");
    let e = Lanes::create(&path, Config::new(schema(), 4), 8).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidConfig { field: "capacity", problem } if problem.contains("8 lanes")),
        "{e}"
    );
    assert!(!path.exists());
    // Enough items for every lane: each holds its share, rounded up (as Tianshou's
    // VectorReplayBuffer does).
    let lanes = Lanes::create(&path, Config::new(schema(), 10), 4).unwrap();
    assert_eq!(lanes.capacity(), 12);
}
