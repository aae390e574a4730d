//! The open path end to end: a valid small buffer whose MANIFEST (first input half) and
//! one segment (second half) are replaced by fuzzer bytes; inspect, verify and open must
//! return a value or a typed error, never panic.
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
    let (manifest, segment) = data.split_at(data.len() / 2);
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
