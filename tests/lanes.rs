//! Promise: a buffer of lanes is one buffer to sample and many to write. Rows go to the
//! lane named for them, every lane keeps its own indices (its number in the top byte),
//! episodes and recovery, sampling covers all lanes as if they were one ring (uniform
//! by size, prioritized by priority mass, with weights against the smallest priority
//! of all), and every combination of processes the design forbids is a typed error.
//! Items are a pure function of their global index (`common::item`), which carries the
//! lane, so a row served from the wrong lane or slot is caught.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use common::{Drained, KillOnDrop, add_range, columns, item, item_bytes, schema, xorshift};
use replaystore::{
    Column, Config, DType, Error, Lanes, Reader, ReplayBuffer, Request, Schema, verify,
};

const CHILD_ENV: &str = "REPLAYSTORE_LANES_CHILD";
const LANE: u64 = 1 << 56;

/// Owned columns for the items at `ids` (batch dimension first).
struct Rows {
    n: usize,
    obs: Vec<f32>,
    action: Vec<i64>,
    reward: Vec<f64>,
    done: Vec<bool>,
    frame: Vec<u8>,
    tag: Vec<u16>,
}

impl Rows {
    fn of(ids: &[u64]) -> Rows {
        let items: Vec<_> = ids.iter().map(|&i| item(i)).collect();
        Rows {
            n: ids.len(),
            obs: items.iter().flat_map(|x| x.obs).collect(),
            action: items.iter().map(|x| x.action).collect(),
            reward: items.iter().map(|x| x.reward).collect(),
            done: items.iter().map(|x| x.done).collect(),
            frame: items.iter().flat_map(|x| x.frame).collect(),
            tag: items.iter().flat_map(|x| x.tag).collect(),
        }
    }

    fn columns(&self) -> [Column<'_>; 6] {
        let n = self.n;
        [
            Column::new("obs", &self.obs).with_shape(&[n, 5]),
            Column::new("action", &self.action),
            Column::new("reward", &self.reward),
            Column::new("done", &self.done),
            Column::new("frame", &self.frame).with_shape(&[n, 3, 7]),
            Column::new("tag", &self.tag).with_shape(&[n, 2]),
        ]
    }
}

/// Adds one row per entry of `lanes` through `Lanes::add_batch`, predicting each row's
/// index from the model's tails, and checks the indices returned.
fn add_to_lanes(buf: &mut Lanes, tails: &mut [u64], lanes: &[usize]) -> Vec<u64> {
    let ids: Vec<u64> = lanes
        .iter()
        .map(|&k| {
            tails[k] += 1;
            tails[k] - 1
        })
        .collect();
    let rows = Rows::of(&ids);
    let got = buf.add_batch(&rows.columns(), lanes).unwrap();
    assert_eq!(got, ids);
    ids
}

fn assert_batch_intact(batch: &replaystore::Batch) {
    for (r, &i) in batch.indices().iter().enumerate() {
        assert_eq!(batch.item_bytes(r), item_bytes(i), "item {i:#x} differs");
    }
}

#[test]
fn rows_go_to_their_lanes_and_samples_cover_all_lanes_by_size() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let config = Config::new(schema(), 300).segment_slots(16).seed(5);
    let mut buf = Lanes::create(&path, config, 3).unwrap();
    assert_eq!((buf.lane_count(), buf.capacity()), (3, 300));
    let mut tails = [0, LANE, 2 * LANE];
    let mut s = 17u64;
    // Lane 0 gets most rows and wraps many times; lane 2 gets few.
    for _ in 0..60 {
        let lanes: Vec<usize> = (0..1 + xorshift(&mut s) % 40)
            .map(|_| match xorshift(&mut s) % 10 {
                0..=5 => 0,
                6..=8 => 1,
                _ => 2,
            })
            .collect();
        add_to_lanes(&mut buf, &mut tails, &lanes);
    }
    let edges = buf.lane_edges();
    for (k, e) in edges.iter().enumerate() {
        assert_eq!(e.end, tails[k], "lane {k}");
        assert_eq!(e.start, tails[k].saturating_sub(100).max(k as u64 * LANE));
    }
    let sizes: Vec<u64> = edges.iter().map(|e| e.end - e.start).collect();
    assert_eq!(buf.len(), sizes.iter().sum::<u64>());
    // Uniform over all items: each lane's share of 40,000 draws within 3% of its size.
    let mut per_lane = [0u64; 3];
    for _ in 0..40 {
        let batch = buf.sample(1_000).unwrap();
        assert_batch_intact(&batch);
        assert!(batch.weights().is_empty());
        for &i in batch.indices() {
            assert!(
                edges[Lanes::lane_of(i) as usize].contains(&i),
                "{i:#x} not live"
            );
            per_lane[Lanes::lane_of(i) as usize] += 1;
        }
    }
    let total = buf.len() as f64;
    for k in 0..3 {
        let share = per_lane[k] as f64 / 40_000.0;
        let want = sizes[k] as f64 / total;
        assert!((share - want).abs() < 0.03, "lane {k}: {share} vs {want}");
    }
    // Without replacement, all live items exactly once.
    let all = buf
        .sample(Request::rows(buf.len() as usize).without_replacement())
        .unwrap();
    let mut seen: Vec<u64> = all.indices().to_vec();
    seen.sort_unstable();
    let live: Vec<u64> = edges.iter().flat_map(|e| e.clone()).collect();
    assert_eq!(seen, live);
    assert!(matches!(
        buf.sample_into(
            Request::rows(buf.len() as usize + 1).without_replacement(),
            &mut replaystore::Batch::default()
        ),
        Err(Error::InvalidSample(_))
    ));
    // get_many in any order across lanes.
    let want = [tails[2] - 1, tails[0] - 1, tails[1] - 3, tails[0] - 2];
    let got = buf.get_many(&want).unwrap();
    assert_eq!(got.indices(), want);
    assert_batch_intact(&got);
}

#[test]
fn lanes_survive_close_and_reopen_and_the_same_seed_gives_the_same_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = [0, 1, 1, 0, 1, 1, 1, 0];
    let make = |name: &str| {
        let config = Config::new(schema(), 200).segment_slots(16).seed(9);
        let mut buf = Lanes::create(tmp.path().join(name), config, 2).unwrap();
        let mut tails = [0, LANE];
        add_to_lanes(&mut buf, &mut tails, &rows);
        buf
    };
    let mut straight = make("a");
    let restarted = make("b");
    restarted.close().unwrap();
    let mut restarted = Lanes::open(tmp.path().join("b")).unwrap();
    assert_eq!(restarted.lane_edges(), vec![0..3, LANE..LANE + 5]);
    for _ in 0..3 {
        // The split draws from lane 0's RNG and each lane from its own: both resume.
        let (a, b) = (straight.sample(64).unwrap(), restarted.sample(64).unwrap());
        assert_eq!(a.indices(), b.indices());
        assert_batch_intact(&b);
    }
    let mut tails = [3, LANE + 5];
    add_to_lanes(&mut restarted, &mut tails, &[1, 0]);
    assert_eq!(restarted.lane_edges(), vec![0..4, LANE..LANE + 6]);
    // A one-ring buffer opens as one lane.
    let plain = tmp.path().join("plain");
    let mut one = ReplayBuffer::create(&plain, Config::new(schema(), 10)).unwrap();
    add_range(&mut one, 0, 4);
    drop(one);
    let lanes = Lanes::open(&plain).unwrap();
    assert_eq!(lanes.lane_count(), 1);
    assert_eq!(lanes.lane_edges().first(), Some(&(0..4)));
}

#[test]
fn prioritized_draws_weigh_every_lane_by_its_priority_mass() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let config = Config::new(schema(), 200)
        .segment_slots(16)
        .seed(3)
        .prioritized(1.0, 0.0);
    let mut buf = Lanes::create(&path, config, 2).unwrap();
    let mut tails = [0, LANE];
    let ids = add_to_lanes(&mut buf, &mut tails, &[0, 0, 0, 0, 1, 1]);
    // Lane 0: four items of priority 1; lane 1: one of 2, one of 6.
    let p = [1.0f64, 1.0, 1.0, 1.0, 2.0, 6.0];
    let done = buf.update_priorities(&ids, &p).unwrap();
    assert_eq!((done.applied, done.stale), (6, 0));
    let mut hits = std::collections::HashMap::<u64, u64>::new();
    let draws = 48_000;
    for _ in 0..draws / 1_000 {
        let batch = buf.sample(Request::rows(1_000).prioritized(0.5)).unwrap();
        assert_batch_intact(&batch);
        for (&i, &w) in batch.indices().iter().zip(batch.weights()) {
            *hits.entry(i).or_default() += 1;
            // Weights against the smallest priority of all lanes (1): (1 / p)^0.5.
            let want = (1.0 / p[ids.iter().position(|&x| x == i).unwrap()]).sqrt() as f32;
            assert!((w - want).abs() < 1e-5, "{i:#x}: weight {w}, want {want}");
        }
    }
    for (k, &i) in ids.iter().enumerate() {
        let share = hits.get(&i).copied().unwrap_or(0) as f64 / draws as f64;
        let want = p[k] / 12.0;
        assert!((share - want).abs() < 0.015, "{i:#x}: {share} vs {want}");
    }
    // Stratified: the same shares.
    let spec = Request::rows(1_200).prioritized(0.0).stratified();
    let mut b = replaystore::Batch::default();
    buf.sample_into(spec, &mut b).unwrap();
    let last = b.indices().iter().filter(|&&i| i == ids[5]).count();
    assert!((550..=650).contains(&last), "stratified: {last} of 1200");
    // New items in any lane enter at the largest priority of all lanes (6).
    let new = add_to_lanes(&mut buf, &mut tails, &[0]);
    assert_eq!(
        buf.lane_mut(0).unwrap().priorities(&new).unwrap(),
        vec![6.0]
    );
}

#[test]
fn an_update_with_one_bad_value_changes_no_lane() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let config = Config::new(schema(), 100).prioritized(1.0, 0.0);
    let mut buf = Lanes::create(&path, config, 2).unwrap();
    let mut tails = [0, LANE];
    let ids = add_to_lanes(&mut buf, &mut tails, &[0, 1, 0, 1]);
    let before = buf.lane_mut(0).unwrap().priorities(&[0, 1]).unwrap();
    for (bad_ids, bad_p) in [
        (vec![ids[0], ids[1], ids[2]], vec![5.0, f64::NAN, 5.0]),
        (vec![ids[0], LANE + 99], vec![5.0, 5.0]),
        (vec![ids[0], 7 * LANE], vec![5.0, 5.0]),
    ] {
        let e = buf.update_priorities(&bad_ids, &bad_p).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidPriority { position: 1, .. }
                    | Error::NotYetAdded { .. }
                    | Error::NoSuchLane { lane: 7, .. }
            ),
            "{e}"
        );
        assert_eq!(
            buf.lane_mut(0).unwrap().priorities(&[0, 1]).unwrap(),
            before
        );
    }
    assert!(matches!(
        buf.update_priorities(&ids, &[1.0]),
        Err(Error::CountMismatch { .. })
    ));
}

#[test]
fn episodes_stay_in_their_lane_while_envs_interleave() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let schema = Schema::builder()
        .field("obs", DType::F32, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 64).episodic();
    let mut buf = Lanes::create(&path, config, 2).unwrap();
    let step = |x: f32| [x, 1.0f32];
    fn cols(v: &[f32; 2]) -> [Column<'_>; 2] {
        [
            Column::scalar("obs", &v[0]),
            Column::scalar("reward", &v[1]),
        ]
    }
    // Two environments stepping in turn, with episodes of 3 (env 0) and 2 (env 1) steps.
    let mut starts = [None, None];
    for t in 0..12u32 {
        for (env, start) in starts.iter_mut().enumerate() {
            let len = 3 - env as u32;
            let lane = buf.lane_mut(env).unwrap();
            let v = step(t as f32);
            let at = if t % (len + 1) == 0 {
                lane.add_reset(&cols(&v)[..1]).unwrap().index
            } else {
                let done = t % (len + 1) == len;
                lane.add_step(&cols(&v), done, false).unwrap().index
            };
            assert_eq!(Lanes::lane_of(at), env as u64);
            start.get_or_insert(at);
        }
    }
    for (env, start) in starts.iter().enumerate() {
        let first = start.unwrap();
        let ep = buf.episode(first + 1).unwrap();
        assert_eq!((ep.start, ep.steps()), (first, 3 - env as u64));
        assert_eq!(buf.prev(first + 1).unwrap(), first);
        assert_eq!(buf.next(first).unwrap(), first + 1);
        assert_eq!(
            buf.next(first + 3 - env as u64).unwrap(),
            first + 3 - env as u64
        );
    }
    assert!(matches!(
        buf.episode(5 * LANE),
        Err(Error::NoSuchLane { .. })
    ));
}

#[test]
fn every_forbidden_combination_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let config = Config::new(schema(), 100).prioritized(0.6, 0.0);
    for bad in [0, 129] {
        let e = Lanes::create(tmp.path().join(format!("bad{bad}")), config.clone(), bad);
        assert!(matches!(
            e,
            Err(Error::InvalidConfig { field: "lanes", .. })
        ));
    }
    let mut all = Lanes::create(&path, config.clone(), 2).unwrap();
    let mut tails = [0, LANE];
    add_to_lanes(&mut all, &mut tails, &[0, 1]);
    // A lane id out of range or a row count that differs: nothing is added anywhere.
    let rows = Rows::of(&[2, 3]);
    assert!(matches!(
        all.add_batch(&rows.columns(), &[0, 2]),
        Err(Error::NoSuchLane { lane: 2, .. })
    ));
    assert!(matches!(
        all.add_batch(&rows.columns(), &[0]),
        Err(Error::CountMismatch { .. })
    ));
    assert_eq!(all.len(), 2);
    // A second writer on a lane, or on all lanes, names the lane's lock.
    match Lanes::open_lane(&path, 1) {
        Err(Error::Locked { lock_file, .. }) => assert!(lock_file.ends_with("lane-1/LOCK")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(Lanes::open(&path), Err(Error::Locked { .. })));
    // A priority owner beside the writer that owns the trees.
    assert!(matches!(
        Lanes::open_owner(&path),
        Err(Error::Locked { .. })
    ));
    drop(all);
    // The folder is not a one-ring buffer; a lane that does not exist.
    assert!(matches!(
        ReplayBuffer::open(&path),
        Err(Error::IsLanes { lanes: 2, .. })
    ));
    assert!(matches!(
        Lanes::open_lane(&path, 2),
        Err(Error::NoSuchLane { lane: 2, .. })
    ));
    // Two owners; a reader updating; a lane actor drawing by priority.
    let mut actor = Lanes::open_lane_actor(&path, 0).unwrap();
    let mut owner = Lanes::open_owner(&path).unwrap();
    assert!(matches!(
        Lanes::open_owner(&path),
        Err(Error::Locked { .. })
    ));
    // Lanes opened as readers have no update_priorities (a compile_fail example on
    // `Lanes::update_priorities` keeps it so).
    let mut reader = Lanes::open_reader(&path).unwrap();
    // An actor lane has no update_priorities (a compile_fail example on `Actor` keeps
    // it so), and draws by priority are the owner's.
    assert!(matches!(
        actor.sample(Request::rows(4).prioritized(0.4)),
        Err(Error::NotPriorityOwner { .. })
    ));
    // The owner and the reader see the actor's adds; the owner's updates reach readers.
    add_range(&mut actor, 1, 3);
    owner.update_priorities(&[2, LANE], &[0.0f32, 0.0]).unwrap();
    let b = reader.sample(Request::rows(256).prioritized(0.4)).unwrap();
    assert!(b.indices().iter().all(|&i| i < 2), "{:?}", b.indices());
    assert_batch_intact(&b);
    drop((actor, owner, reader));
    // A damaged LANES names itself; lanes swapped on disk are refused.
    let lanes_file = path.join("LANES");
    let good = std::fs::read(&lanes_file).unwrap();
    let mut bad = good.clone();
    bad[13] ^= 1;
    std::fs::write(&lanes_file, &bad).unwrap();
    match Lanes::open(&path) {
        Err(Error::ChecksumMismatch { file, .. }) => assert_eq!(file, lanes_file),
        other => panic!("{other:?}"),
    }
    std::fs::write(&lanes_file, &good).unwrap();
    std::fs::rename(path.join("lane-0"), path.join("x")).unwrap();
    std::fs::rename(path.join("lane-1"), path.join("lane-0")).unwrap();
    std::fs::rename(path.join("x"), path.join("lane-1")).unwrap();
    match Lanes::open(&path) {
        Err(Error::Corrupt { field, .. }) => assert_eq!(field, "indices of lane 0"),
        other => panic!("{other:?}"),
    }
    // Creating over an existing buffer.
    assert!(matches!(
        Lanes::create(&path, config, 2),
        Err(Error::AlreadyExists { .. })
    ));
}

#[test]
fn each_lane_verifies_as_a_buffer_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let config = Config::new(schema(), 64)
        .segment_slots(16)
        .prioritized(0.6, 1e-6);
    let mut buf = Lanes::create(&path, config, 2).unwrap();
    let mut tails = [0, LANE];
    let lanes: Vec<usize> = (0..150).map(|i| i % 2).collect();
    add_to_lanes(&mut buf, &mut tails, &lanes);
    buf.close().unwrap();
    for k in 0..2u32 {
        let report = verify(path.join(format!("lane-{k}"))).unwrap();
        assert!(report.is_sound(), "lane {k}: {:?}", report.problems);
    }
}

// ---- many processes ----

/// Drawing from lanes that hold nothing is `Empty`, with one lane and with several,
/// uniformly and by priority, into a batch and into caller arrays; nothing panics and
/// the caller's arrays are left as they were.
#[test]
fn an_empty_draw_over_lanes_is_a_typed_error_with_one_lane_or_several() {
    let dir = tempfile::tempdir().unwrap();
    for lanes in [1, 3] {
        let path = dir.path().join(format!("lanes-{lanes}"));
        let mut buf = Lanes::create(&path, lanes_config(64), lanes).unwrap();
        assert!(matches!(buf.sample(4), Err(Error::Empty)), "{lanes} lanes");
        let per = buf.sample(Request::rows(4).prioritized(0.4));
        assert!(matches!(per, Err(Error::Empty)), "{lanes} lanes: {per:?}");
        // The caller's own arrays: the fields, then the indices.
        let mut arrays: Vec<Vec<u8>> = schema()
            .fields()
            .iter()
            .map(|f| vec![9u8; 4 * f.bytes()])
            .collect();
        arrays.push(7u64.to_le_bytes().repeat(4));
        let mut sink = common::Arrays(arrays);
        let r = buf.sample_into(4, &mut sink);
        assert!(matches!(r, Err(Error::Empty)), "{lanes} lanes: {r:?}");
        assert_eq!(sink.0.last().unwrap(), &7u64.to_le_bytes().repeat(4));
        // Once an item is in, the same arrays are filled.
        let it = item(0);
        buf.add(0, &columns(&it)).unwrap();
        buf.sample_into(4, &mut sink).unwrap();
        assert_eq!(sink.0.last().unwrap(), &[0u8; 32]);
        assert_eq!(sink.0[1], it.action.to_le_bytes().repeat(4));
    }
}

fn lanes_config(capacity: u64) -> Config {
    Config::new(schema(), capacity)
        .segment_slots(256)
        .seed(1)
        .prioritized(0.6, 1e-6)
}

/// A child's work, chosen by the parent through `CHILD_ENV`:
/// - `writer:DIR:LANE:SEED`: lane LANE's writer (owning its priorities), adding and
///   updating forever;
/// - `reader:DIR:SAMPLES:SEED`: samples all lanes, batches of 256 alternately uniform
///   and by priority, until SAMPLES items, and prints what it saw;
/// - `actor:DIR:LANE:SEED`: lane LANE's actor, printing each index `add` returned;
/// - `owner:DIR`: the priority owner, drawing, checking and updating forever;
/// - `endless-reader:DIR`: samples forever, printing how many items it checked.
#[test]
fn lanes_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let args: Vec<&str> = mode.split(':').collect();
    match args[0] {
        "writer" => run_lane_writer(args[1], args[2].parse().unwrap(), args[3].parse().unwrap()),
        "reader" => run_reader(args[1], args[2].parse().unwrap(), args[3].parse().unwrap()),
        "actor" => run_actor(args[1], args[2].parse().unwrap(), args[3].parse().unwrap()),
        "owner" => run_owner(args[1]),
        "endless-reader" => run_endless_reader(args[1]),
        other => panic!("unknown child role {other}"),
    }
}

fn run_lane_writer(dir: &str, lane: usize, seed: u64) {
    use std::io::Write;
    let mut buf = Lanes::open_lane(dir, lane).unwrap();
    let mut next = buf.live().end;
    let mut s = seed;
    let mut out = std::io::stdout().lock();
    writeln!(out, "marker=ready").unwrap();
    out.flush().unwrap();
    loop {
        match xorshift(&mut s) % 1_000 {
            0 => buf.flush().unwrap(),
            1..=50 => {
                let n = 1 + xorshift(&mut s) % 64;
                next = add_range(&mut buf, next, next + n).end;
            }
            51..=150 if !buf.is_empty() => {
                let live = buf.live();
                let picks: Vec<u64> = (0..16)
                    .map(|_| live.start + xorshift(&mut s) % (live.end - live.start))
                    .collect();
                let p: Vec<f64> = picks
                    .iter()
                    .map(|_| (xorshift(&mut s) % 100) as f64)
                    .collect();
                buf.update_priorities(&picks, &p).unwrap();
            }
            _ => next = buf.add(&columns(&item(next))).unwrap() + 1,
        }
    }
}

/// Samples 256 items (by priority with `per`) from all lanes and counts those whose
/// bytes are not their index's, or whose weight is not a positive number.
fn bad_in_sample(lanes: &mut Lanes<Reader>, n: usize, per: bool) -> u64 {
    let batch = match per {
        true => lanes.sample(Request::rows(n).prioritized(0.4)).unwrap(),
        false => lanes.sample(n).unwrap(),
    };
    assert_eq!(batch.len(), n);
    let bad_weights = (batch.weights().iter())
        .filter(|w| !(w.is_finite() && **w > 0.0))
        .count();
    let bad_items = (batch.indices().iter().enumerate())
        .filter(|&(r, &i)| batch.item_bytes(r) != item_bytes(i))
        .count();
    (bad_items + bad_weights) as u64
}

fn run_reader(dir: &str, samples: u64, seed: u64) {
    let mut lanes = Lanes::open_reader(dir).unwrap();
    lanes.reseed(seed);
    let first = lanes.lane_edges();
    let (mut drawn, mut bad, mut per_lane) = (0u64, 0u64, [0u64; 2]);
    while drawn < samples {
        let per = (drawn / 256).is_multiple_of(2);
        bad += bad_in_sample(&mut lanes, 256, per);
        drawn += 256;
        let b = lanes.get_many(&[lanes.lane_edges()[1].end - 1]);
        if let Ok(b) = b {
            bad += u64::from(b.item_bytes(0) != item_bytes(b.indices()[0]));
            per_lane[1] += 1;
        }
    }
    let last = lanes.lane_edges();
    let laps = |k: usize| (last[k].end - first[k].end) / lanes.lane(k).unwrap().capacity();
    println!(
        "marker=result drawn={drawn} bad={bad} laps0={} laps1={} gets={}",
        laps(0),
        laps(1),
        per_lane[1]
    );
}

#[test]
fn two_lane_writers_and_two_readers_serve_a_million_items_none_bad() {
    use std::io::BufRead;
    const LANE_CAPACITY: u64 = 2_048;
    const PER_READER: u64 = 500_000;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    Lanes::create(&path, lanes_config(2 * LANE_CAPACITY), 2)
        .unwrap()
        .close()
        .unwrap();
    let dir = path.to_str().unwrap();
    let writers: Vec<KillOnDrop> = (0..2)
        .map(|k| {
            let (child, mut out) = common::spawn_child(
                "lanes_child",
                CHILD_ENV,
                format!("writer:{dir}:{k}:{}", 11 + k).as_ref(),
            );
            let mut line = String::new();
            while !line.contains("marker=ready") {
                line.clear();
                assert!(out.read_line(&mut line).unwrap() > 0, "writer {k} died");
            }
            KillOnDrop(child)
        })
        .collect();
    // Both rings full before the readers start.
    let start = std::time::Instant::now();
    while Lanes::open_reader(&path).unwrap().len() < 2 * LANE_CAPACITY {
        assert!(start.elapsed().as_secs() < 60, "the lane writers stalled");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let readers: Vec<_> = (0..2)
        .map(|r| {
            common::spawn_child(
                "lanes_child",
                CHILD_ENV,
                format!("reader:{dir}:{PER_READER}:{}", r + 1).as_ref(),
            )
        })
        .collect();
    let mut total = 0;
    for (child, out) in readers {
        let mut child = KillOnDrop(child);
        let result = common::reader_result(out);
        assert!(
            child.0.wait().unwrap().success(),
            "reader failed: {result:?}"
        );
        assert_eq!(result["bad"], 0, "bad items served: {result:?}");
        eprintln!("lanes reader: {result:?}");
        for k in ["laps0", "laps1"] {
            assert!(result[k] >= 3, "a lane lapped too few times: {result:?}");
        }
        total += result["drawn"];
    }
    assert!(total >= 1_000_000);
    drop(writers);
    // The kills lost nothing any lane acknowledged.
    let lanes = Lanes::open(&path).unwrap();
    for k in 0..2 {
        common::assert_live_items_intact(lanes.lane(k).unwrap());
    }
}

fn run_actor(dir: &str, lane: usize, seed: u64) {
    use std::io::Write;
    let mut buf = Lanes::open_lane_actor(dir, lane).unwrap();
    let mut next = buf.live().end;
    let mut s = seed;
    let mut out = std::io::stdout().lock();
    loop {
        if xorshift(&mut s).is_multiple_of(500) {
            buf.flush().unwrap();
        }
        next = buf.add(&columns(&item(next))).unwrap() + 1;
        writeln!(out, "ack {}", next - 1).unwrap();
        out.flush().unwrap();
    }
}

fn run_owner(dir: &str) {
    let mut owner = Lanes::open_owner(dir).unwrap();
    let mut checked = 0u64;
    let mut s = 5u64;
    loop {
        let batch = owner.sample(Request::rows(64).prioritized(0.4)).unwrap();
        for (r, &i) in batch.indices().iter().enumerate() {
            if batch.item_bytes(r) != item_bytes(i) {
                println!("bad {i}");
                std::process::exit(3);
            }
        }
        let p: Vec<f32> = (0..64).map(|_| (xorshift(&mut s) % 50) as f32).collect();
        owner.update_priorities(batch.indices(), &p).unwrap();
        if xorshift(&mut s).is_multiple_of(64) {
            owner.flush().unwrap();
        }
        checked += 64;
        println!("checked {checked}");
    }
}

fn run_endless_reader(dir: &str) {
    let mut lanes = Lanes::open_reader(dir).unwrap();
    common::check_forever(|checked| bad_in_sample(&mut lanes, 64, checked % 128 == 64))
}

/// Kills, in turn and at random moments, a lane actor, the priority owner and a reader
/// while the others run: the rest keep going, and every lane reopens with everything
/// its actor acknowledged, intact.
#[test]
fn kill_9_of_lane_actors_the_owner_and_readers_loses_nothing_and_stops_nobody() {
    let rounds = common::env_count("REPLAYSTORE_LANE_KILLS", 8);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("v");
    let mut buf = Lanes::create(&path, lanes_config(1_000), 2).unwrap();
    let mut tails = [0, LANE];
    add_to_lanes(&mut buf, &mut tails, &[0, 1, 0, 1]);
    drop(buf);
    let dir = path.to_str().unwrap();
    let mut s = 77u64;
    let spawn = |role: String| Drained::spawn("lanes_child", CHILD_ENV, &role);
    for round in 0..rounds {
        let mut actors: Vec<Drained> = (0..2)
            .map(|k| spawn(format!("actor:{dir}:{k}:{}", round * 2 + k + 1)))
            .collect();
        for a in &actors {
            a.wait_past(0);
        }
        let mut owner = spawn(format!("owner:{dir}"));
        let mut reader = spawn(format!("endless-reader:{dir}"));
        owner.wait_past(0);
        reader.wait_past(0);
        std::thread::sleep(std::time::Duration::from_millis(xorshift(&mut s) % 50));
        // The victim dies; the others must go on.
        let victim = round % 4;
        match victim {
            0 | 1 => {
                let k = victim as usize;
                let acked = actors[k].kill();
                let lane = Lanes::open_lane_actor(&path, k).unwrap();
                assert!(
                    lane.live().end > acked,
                    "round {round}: lane {k} lost {acked}"
                );
                common::assert_live_items_intact(&lane);
                drop(lane);
                actors[k] = spawn(format!("actor:{dir}:{k}:{}", 100 + round));
                actors[k].wait_past(acked);
            }
            2 => {
                owner.kill();
                owner = spawn(format!("owner:{dir}"));
                owner.wait_past(0);
            }
            _ => {
                reader.kill();
                reader = spawn(format!("endless-reader:{dir}"));
                reader.wait_past(0);
            }
        }
        for d in actors.iter().chain([&owner, &reader]) {
            let last = d.last();
            d.wait_past(last + 64);
        }
        reader.kill();
        owner.kill();
        let acked: Vec<u64> = actors.iter_mut().map(Drained::kill).collect();
        for (k, &a) in acked.iter().enumerate() {
            let lane = Lanes::open_lane_actor(&path, k).unwrap();
            assert!(lane.live().end > a, "round {round}: lane {k} lost {a}");
            common::assert_live_items_intact(&lane);
        }
    }
    // After all the kills, the trees agree with the lanes once an owner repairs them.
    Lanes::open_owner(&path).unwrap().close().unwrap();
    for k in 0..2 {
        let report = verify(path.join(format!("lane-{k}"))).unwrap();
        assert!(report.is_sound(), "lane {k}: {:?}", report.problems);
    }
}

const CHECKPOINT_CHILD: &str = "REPLAYSTORE_LANES_CHECKPOINT_CHILD";

/// The child of the lane checkpoint kill test: restores the set to snapshot `a`, takes
/// snapshot `b`, deletes `a`, saying each once it returned.
#[test]
fn lanes_checkpoint_child() {
    let Ok(dir) = std::env::var(CHECKPOINT_CHILD) else {
        return;
    };
    let mut lanes = Lanes::open(&dir).unwrap();
    let a = lanes.snapshot_state("a").unwrap();
    lanes.set_state(&a).unwrap();
    println!("restored");
    lanes.get_state_named("b").unwrap();
    println!("snapped");
    lanes.delete_snapshot("a").unwrap();
    println!("deleted");
    lanes.close().unwrap();
    println!("finished");
}

/// Promise: a lane set's checkpoints are atomic across its lanes. A kill at any step of
/// a restore (between lanes' intents, between lanes' restores), of a snapshot (between
/// lanes) or of a delete leaves, once the set opens: every lane at the old state or
/// every lane at the restored one; each snapshot listed held whole by every lane and no
/// lane holding a name the set does not list; every lane sound.
#[cfg(feature = "kill-points")]
#[test]
fn kill_at_each_step_of_a_lane_checkpoint_leaves_all_lanes_or_none() {
    let ranges = |lanes: &Lanes| -> Vec<u64> {
        lanes.lane_edges().iter().map(|r| r.end - r.start).collect()
    };
    common::kill_at_each_point(
        "lanes_checkpoint_child",
        CHECKPOINT_CHILD,
        &[
            "lanes-intent-between",
            "lanes-restore-between",
            "lanes-snapshot-between",
            "lanes-delete-between",
        ],
        &[1, 2, 3],
        |dir, _| {
            let config = Config::new(schema(), 90).seed(3);
            let mut lanes = Lanes::create(dir, config, 3).unwrap();
            let rows = |n: u64| (0..n).map(|i| (i % 3) as usize).collect::<Vec<_>>();
            let add = |lanes: &mut Lanes, n: u64| {
                let items: Vec<_> = (0..n).map(item).collect();
                for (it, &k) in items.iter().zip(&rows(n)) {
                    lanes.add(k, &columns(it)).unwrap();
                }
            };
            add(&mut lanes, 6); // 2 per lane: snapshot a
            lanes.get_state_named("a").unwrap();
            add(&mut lanes, 9); // 5 per lane live
            lanes.close().unwrap();
            dir.display().to_string()
        },
        |dir, lines, ctx| {
            let mut lanes = Lanes::open(dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
            let got = ranges(&lanes);
            let restored = lines.iter().any(|l| l == "restored");
            assert!(
                got == [2, 2, 2] || (!restored && got == [5, 5, 5]),
                "{ctx}: lanes hold {got:?} (restore acknowledged: {restored})"
            );
            let listed = lanes.snapshots().unwrap();
            let snapped = lines.iter().any(|l| l == "snapped");
            let deleted = lines.iter().any(|l| l == "deleted");
            assert!(
                !snapped || listed.contains(&"b".to_owned()),
                "{ctx}: {listed:?}"
            );
            // A delete in flight (after "snapped") may or may not have ended "a".
            assert!(
                snapped || listed.contains(&"a".to_owned()),
                "{ctx}: {listed:?}"
            );
            assert!(
                !deleted || !listed.contains(&"a".to_owned()),
                "{ctx}: {listed:?}"
            );
            for k in 0..3 {
                let names: Vec<String> = (lanes.lane(k).unwrap().snapshots().unwrap().into_iter())
                    .map(|s| s.name)
                    .collect();
                assert_eq!(
                    names.len(),
                    listed.len(),
                    "{ctx}: lane {k} holds {names:?}, the set {listed:?}"
                );
            }
            // Every listed snapshot restores every lane.
            for name in &listed {
                let s = lanes.snapshot_state(name).unwrap();
                lanes.set_state(&s).unwrap();
            }
            lanes.close().unwrap();
            for k in 0..3 {
                let report = replaystore::verify(dir.join(format!("lane-{k}"))).unwrap();
                assert!(report.is_sound(), "{ctx}: lane {k}: {:?}", report.problems);
            }
        },
    );
}

/// Promise: an open of one lane while the set is held (a restore under way writes its
/// intents under every lane's lock) leaves the intents alone and is refused; once the
/// set is let go, intents a kill left in some lanes but not the last are removed by the
/// next open, and every lane stays as it was.
#[test]
fn intents_of_a_restore_under_way_are_left_to_it_and_a_kills_are_undone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v");
    let mut lanes = Lanes::create(&path, Config::new(schema(), 30), 3).unwrap();
    for k in 0..3 {
        add_range(
            lanes.lane_mut(k).unwrap(),
            (k as u64) << 56,
            ((k as u64) << 56) + 2,
        );
    }
    let state = lanes.get_state_named("a").unwrap();
    for k in 0..3 {
        let base = (k as u64) << 56;
        add_range(lanes.lane_mut(k).unwrap(), base + 2, base + 5);
    }
    // As a restore under way would leave it: lane 0's intent written, the others not.
    let intent = path.join("lane-0").join("RESTORE");
    std::fs::write(&intent, state.lanes[0].to_bytes()).unwrap();
    let e = Lanes::open_lane(&path, 1).unwrap_err();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    assert!(
        intent.exists(),
        "an intent of a set held elsewhere was removed"
    );
    drop(lanes);
    let lanes = Lanes::open(&path).unwrap();
    assert!(!intent.exists());
    let sizes: Vec<u64> = lanes.lane_edges().iter().map(|r| r.end - r.start).collect();
    assert_eq!(sizes, [5, 5, 5], "no lane was restored");
}
