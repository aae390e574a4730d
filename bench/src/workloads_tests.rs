//! Tests of the benchmark workloads, kept out of `workloads.rs` because the criterion
//! benches compile that file by path.

#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]
use crate::workloads::*;
use replaystore::{Config, ReplayBuffer, Request};

/// Each workload fills a buffer one item at a time and in chunks.
#[test]
fn workloads_fill_a_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let w = Workload::W1;
    assert_eq!(w.capacity(), 1_000_000);
    let config = Config::new(w.schema().unwrap(), 100);
    let mut buf = ReplayBuffer::create(dir.path().join("w1"), config.clone()).unwrap();
    w.fill(&mut buf, 10).unwrap();
    assert_eq!(buf.len(), 10);
    let mut chunked = ReplayBuffer::create(dir.path().join("w1-chunk"), config).unwrap();
    chunked.add_batch(&Chunk::new(w, 0, 10).columns()).unwrap();
    assert_eq!(chunked.len(), 10);
}

/// W2 frames are stacked 4 deep at sample time from one frame per row.
#[test]
fn w2_frames_stack_at_sample_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(W2Frames::schema().unwrap(), 1000).episodic();
    let mut buf = ReplayBuffer::create(dir.path().join("w2f"), config).unwrap();
    let mut frames = W2Frames::default();
    frames.fill(&mut buf, 600).unwrap();
    let t = buf
        .sample(Request::transitions(32, &["obs"]).stack(4))
        .unwrap();
    assert_eq!(t.field("obs").map(|f| f.shape()), Some(vec![32, 4, 84, 84]));
}

/// Items depend on their index only, so two runs (or a bench and a CLI run) store
/// the same bytes; W2 observations repeat every 64 items and differ in between.
#[test]
fn items_are_a_function_of_their_index() {
    let dir = tempfile::tempdir().unwrap();
    for w in [Workload::W1, Workload::W2] {
        let mut batched = ReplayBuffer::create(
            dir.path().join(format!("{}-batch", w.name())),
            Config::new(w.schema().unwrap(), 8),
        )
        .unwrap();
        let mut buf = ReplayBuffer::create(
            dir.path().join(w.name()),
            Config::new(w.schema().unwrap(), 8),
        )
        .unwrap();
        for i in [3, 3, 4, 3 + W2_DISTINCT as u64] {
            w.add(&mut buf, i).unwrap();
        }
        let b = buf.get_many(&[0, 1, 2, 3]).unwrap();
        assert_eq!(b.item_bytes(0), b.item_bytes(1), "{}", w.name());
        // A chunk stores the same bytes as adding one at a time.
        batched.add_batch(&Chunk::new(w, 3, 2).columns()).unwrap();
        let c = batched.get_many(&[0, 1]).unwrap();
        assert_eq!(c.item_bytes(0), b.item_bytes(0), "{}", w.name());
        assert_eq!(c.item_bytes(1), b.item_bytes(2), "{}", w.name());
        assert_ne!(b.item_bytes(0), b.item_bytes(2), "{}", w.name());
        if w == Workload::W2 {
            let obs: &[u8] = b.get("obs").unwrap();
            assert_eq!(obs[..W2_OBS], obs[3 * W2_OBS..]);
        }
    }
}
