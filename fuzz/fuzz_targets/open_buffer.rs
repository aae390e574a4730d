//! The open path end to end: a valid small buffer whose MANIFEST and one segment are
//! replaced by fuzzer bytes (a 2-byte little-endian length, that many MANIFEST bytes, the
//! rest the segment); inspect, verify and open must return a value or a typed error,
//! never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use replaystore::{Column, Config, DType, ReplayBuffer, Schema, inspect, verify};

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("b");
    let schema = Schema::builder().field("x", DType::U32, &[3]).build().expect("schema");
    {
        let mut buf = ReplayBuffer::create(&path, Config::new(schema, 8).segment_slots(4)).expect("create");
        for i in 0..10u32 {
            buf.add(&[Column::new("x", &[i, i + 1, i + 2])]).expect("add");
        }
    }
    let Some((len, rest)) = data.split_first_chunk::<2>() else { return };
    let (manifest, segment) = rest.split_at((u16::from_le_bytes(*len) as usize).min(rest.len()));
    if !manifest.is_empty() {
        std::fs::write(path.join("MANIFEST"), manifest).expect("write");
    }
    if !segment.is_empty() {
        std::fs::write(path.join("lane-0").join("seg-00000001.dat"), segment).expect("write");
    }
    let _ = inspect(&path);
    let _ = verify(&path);
    if let Ok(buf) = ReplayBuffer::open(&path) {
        for i in buf.live() {
            let _ = buf.get(i);
        }
    }
});
