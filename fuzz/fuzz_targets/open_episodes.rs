//! The open path of an episodic buffer with values end to end: a valid small buffer of
//! text episodes (whole-episode eviction, a chunk ring that has lapped, item states with
//! an episode removed) whose MANIFEST,
//! one row segment and one chunk segment are damaged by fuzzer bytes (two 2-byte
//! little-endian lengths, that many bytes written over MANIFEST from its start, that
//! many over the row segment at an offset the next byte places, the rest over the
//! chunk segment the same way); inspect, verify, open, the episode table, every
//! episodic draw with values (one that removes too), an episode getter and a step must
//! return a value or a typed error, never panic, hang or allocate what a damaged slot
//! claims.
#![no_main]

use libfuzzer_sys::fuzz_target;
use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema, VarKind, inspect, verify};

/// Writes `bytes` over `file` from `at` (modulo its length), keeping its length; an odd
/// count cuts the file there instead.
fn damage(file: &std::path::Path, at: u8, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut old = std::fs::read(file).unwrap_or_default();
    let from = (usize::from(at) * 64) % old.len().max(1);
    let n = bytes.len().min(old.len() - from.min(old.len()));
    old[from..from + n].copy_from_slice(&bytes[..n]);
    if bytes.len() % 2 == 1 {
        old.truncate(from + n);
    }
    std::fs::write(file, old).expect("write");
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("b");
    let schema = Schema::builder()
        .field("t", DType::U32, &[])
        .variable("obs", VarKind::Str, None)
        .variable("tokens", VarKind::Ragged(DType::I32), Some(64))
        .build()
        .expect("schema");
    {
        let config = Config::new(schema, 16)
            .segment_slots(8)
            .chunk_bytes(64)
            .heap_bytes(16 * 80)
            .segment_bytes(8 * 80)
            .whole_episodes()
            .evict_for_room()
            .prioritized(0.6, 0.0)
            .item_states();
        let mut buf = ReplayBuffer::create(&path, config).expect("create");
        for e in 0..6u32 {
            let text = "o".repeat(e as usize * 9);
            buf.add_reset(&[Column::scalar("t", &0u32), Column::text("obs", &text)]).expect("reset");
            for t in 1..=3u32 {
                let toks: Vec<i32> = (0..t as i32 * 5).collect();
                buf.add_step(
                    &[
                        Column::scalar("t", &t),
                        Column::text("obs", &text[..text.len() / t as usize]),
                        Column::ragged("tokens", &toks),
                    ],
                    t == 3,
                    false,
                )
                .expect("step");
            }
        }
        let second = buf.episodes().expect("episodes").get(1).map(|e| e.start);
        buf.remove(&second.into_iter().collect::<Vec<_>>()).expect("remove");
        buf.close().expect("close");
    }
    let Some((len, rest)) = data.split_first_chunk::<2>() else { return };
    let Some((seg_len, rest)) = rest.split_first_chunk::<2>() else { return };
    let Some((&at, rest)) = rest.split_first() else { return };
    let (manifest, rest) = rest.split_at((u16::from_le_bytes(*len) as usize).min(rest.len()));
    let (segment, heap) = rest.split_at((u16::from_le_bytes(*seg_len) as usize).min(rest.len()));
    damage(&path.join("MANIFEST"), 0, manifest);
    damage(&path.join("lane-0").join("seg-00000001.dat"), at, segment);
    damage(&path.join("lane-0").join("heap-00000001.dat"), at.rotate_left(3), heap);
    let _ = inspect(&path);
    let _ = verify(&path);
    if let Ok(mut buf) = ReplayBuffer::open(&path) {
        for i in buf.live() {
            let _ = buf.get(i);
        }
        let _ = buf.episodes();
        let _ = buf.sample(Request::transitions(8, &["t", "obs"]).nstep(2, 0.9));
        let _ = buf.sample(Request::sequences(4, 3, &["t", "obs"]).burn_in(1));
        let _ = buf.sample(Request::episodes(2));
        let _ = buf.sample(Request::transitions(8, &["obs"]).prioritized(0.4));
        if let Some(e) = buf.episodes().ok().and_then(|e| e.first().copied()) {
            let _ = buf.episode_chunk(e.id);
        }
        let _ = buf.add_step(&[Column::scalar("t", &9u32), Column::text("obs", "x"), Column::ragged::<i32>("tokens", &[])], true, false);
        let _ = buf.sample(Request::episodes(2));
        let _ = buf.sample(Request::episodes_covering(3).remove());
        let _ = buf.sample(Request::transitions(8, &["t", "obs"]));
    }
});
