//! The open path end to end: a valid small prioritized buffer with item states whose
//! MANIFEST, priorities file, item state file and one segment are replaced by fuzzer
//! bytes (two 2-byte little-endian lengths, that many MANIFEST bytes, that many bytes
//! written over both priorities.tree and items.state, the rest the segment); inspect,
//! verify, open, get, a prioritized sample and update, a removal and a draw that
//! removes must return a value or a typed error, never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema, inspect, verify};

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("b");
    let schema = Schema::builder().field("x", DType::U32, &[3]).build().expect("schema");
    {
        let config = Config::new(schema, 8).segment_slots(4).prioritized(0.6, 0.0).item_states();
        let mut buf = ReplayBuffer::create(&path, config).expect("create");
        for i in 0..10u32 {
            buf.add(&[Column::new("x", &[i, i + 1, i + 2])]).expect("add");
        }
        buf.update_priorities(&[5, 7], &[0.5f32, 3.0]).expect("update");
        buf.remove(&[6]).expect("remove");
    }
    let Some((len, rest)) = data.split_first_chunk::<2>() else { return };
    let Some((tree_len, rest)) = rest.split_first_chunk::<2>() else { return };
    let (manifest, rest) = rest.split_at((u16::from_le_bytes(*len) as usize).min(rest.len()));
    let (tree, segment) = rest.split_at((u16::from_le_bytes(*tree_len) as usize).min(rest.len()));
    if !manifest.is_empty() {
        std::fs::write(path.join("MANIFEST"), manifest).expect("write");
    }
    for file in ["priorities.tree", "items.state"] {
        if tree.is_empty() {
            break;
        }
        // Keep the file's length when the fuzzer gives fewer bytes: damage in place.
        let mut bytes = std::fs::read(path.join(file)).unwrap_or_default();
        let n = tree.len().min(bytes.len());
        bytes[..n].copy_from_slice(&tree[..n]);
        if tree.len() % 2 == 1 {
            bytes.truncate(tree.len());
        }
        std::fs::write(path.join(file), bytes).expect("write");
    }
    if !segment.is_empty() {
        std::fs::write(path.join("lane-0").join("seg-00000001.dat"), segment).expect("write");
    }
    let _ = inspect(&path);
    let _ = verify(&path);
    if let Ok(mut buf) = ReplayBuffer::open(&path) {
        for i in buf.live() {
            let _ = buf.get(i);
        }
        let _ = buf.sample(Request::rows(16).prioritized(0.4));
        let live: Vec<u64> = buf.live().collect();
        let _ = buf.update_priorities(&live, &vec![1.0f64; live.len()]);
        let _ = buf.sample(Request::rows(16).prioritized(0.4));
        let _ = buf.remove(&live[..live.len().min(2)]);
        let _ = buf.sample(Request::rows(2).remove());
        let _ = buf.item_states(&live);
        let _ = buf.sample(Request::rows(16).prioritized(0.4));
    }
});
