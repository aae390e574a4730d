//! Promise: a power cut at any moment leaves a buffer that opens, verifies, and holds
//! exactly what was acknowledged durable (or, for the operation in flight, what it was
//! about to make durable): no item, priority or snapshot mixes two states.
//!
//! A workload of adds, flushes, priority updates, removals and draws that remove (the
//! buffer keeps item states and downsamples past 34 of its 40 slots), snapshots, a restore and a snapshot delete runs through `sim::SimIo`, which takes crash images before every msync,
//! fdatasync, directory fsync and durable copy (`sim.rs` says how). Each image is
//! checked once the operation in flight returned, against the states seen after each
//! operation. At a sync point with at most `REPLAYSTORE_CRASH_EXHAUSTIVE` (default 64)
//! possible images (every prefix of the pending name operations times every subset of
//! the dirty pages) all of them are checked; at a larger one, the two fixed ones (all
//! written, none of it). `REPLAYSTORE_CRASH_IMAGES=N` adds N random images per point,
//! every second with a torn sector (default 2).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;
#[path = "power_loss/sim.rs"]
mod sim;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use common::{add_range, env_count, item_bytes, schema, xorshift};
use replaystore::{Config, ReplayBuffer, Request, State, snapshots, verify};
use sim::{Image, SimIo};

const CAPACITY: u64 = 40;

/// What the driver did, as far as durability goes.
#[derive(Clone, Debug, PartialEq)]
enum Op {
    Create,
    Add(u64),
    Update,
    Remove,
    Pop,
    Flush,
    GetState(String),
    SetState(String),
    /// A restore of the state of another buffer (`Driver::foreign`).
    SetStateFrom(String),
    Delete(String),
    Close,
    Open,
}

impl Op {
    /// Whether it ends with a durable commit of the live buffer.
    fn commits(&self) -> bool {
        !matches!(self, Op::Add(_) | Op::Update | Op::Remove | Op::Pop)
    }

    /// Whether the live priorities are durable when it returns. `get_state` copies the
    /// tree into the snapshot but leaves the live one as of the last flush.
    fn syncs_tree(&self) -> bool {
        matches!(
            self,
            Op::Create | Op::Flush | Op::SetState(_) | Op::SetStateFrom(_) | Op::Close
        )
    }
}

/// The buffer as seen right after an operation returned.
#[derive(Clone, Debug)]
struct Seen {
    op: Op,
    live: Range<u64>,
    priorities: BTreeMap<u64, f64>,
    /// The removed items of the live range (item states).
    removed: BTreeSet<u64>,
}

fn seen(op: Op, buf: &ReplayBuffer) -> Seen {
    let live: Vec<u64> = buf.live().collect();
    let p = buf.priorities(&live).unwrap();
    Seen {
        op,
        live: buf.live(),
        removed: common::removed_of(buf),
        priorities: live.into_iter().zip(p).collect(),
    }
}

/// The seam for a workload under `dir`: at each sync point every crash image where
/// they number at most `REPLAYSTORE_CRASH_EXHAUSTIVE` (default 64), else the two fixed
/// ones, and `REPLAYSTORE_CRASH_IMAGES` random ones besides (default 2).
fn sim_io(dir: &Path, seed: u64) -> Arc<SimIo> {
    sim_io_up_to(dir, seed, 64)
}

/// `sim_io` enumerating at most `exhaustive` images per sync point unless
/// `REPLAYSTORE_CRASH_EXHAUSTIVE` says otherwise (for a workload whose many members
/// make each point's images many).
fn sim_io_up_to(dir: &Path, seed: u64, exhaustive: u64) -> Arc<SimIo> {
    let exhaustive = env_count("REPLAYSTORE_CRASH_EXHAUSTIVE", exhaustive) as usize;
    let random = env_count("REPLAYSTORE_CRASH_IMAGES", 2) as usize;
    Arc::new(SimIo::new(dir, seed, exhaustive, random))
}

/// Prints what a workload checked, and fails if the seam saw too few syncs or an image
/// went unchecked.
fn report(workload: &str, io: &SimIo, checked: u64) {
    let points = io.points();
    println!(
        "{workload}: sync points {points} ({} enumerated exhaustively), crash images checked {checked}",
        io.exhaustive_points()
    );
    assert!(
        points >= 20,
        "only {points} sync points: the seam missed syncs"
    );
    assert_eq!(
        checked,
        io.taken(),
        "{workload}: every image taken is checked"
    );
}

struct Snap {
    state: State,
    at: Seen,
    made: usize,
    deleted: Option<usize>,
}

struct Driver {
    io: Arc<SimIo>,
    dir: std::path::PathBuf,
    history: Vec<Seen>,
    snaps: BTreeMap<String, Snap>,
    checked: u64,
    scratch: tempfile::TempDir,
    /// The most kept items downsampling had moved to the tail, seen after an op.
    moved: u64,
    /// States of another buffer of the same layout (outside the seam's folder, made
    /// durable before the workload), with what they hold.
    foreign: BTreeMap<String, (State, Seen)>,
    /// Images taken while a `SetStateFrom` was in flight.
    foreign_images: u64,
}

impl Driver {
    /// Runs `op` as operation number `history.len()`, then checks the images it left.
    fn run(&mut self, buf: &mut Option<ReplayBuffer>, op: Op, rng: &mut u64) {
        let phase = self.history.len();
        self.io.set_phase(phase);
        match &op {
            Op::Create => {
                let config = Config::new(schema(), CAPACITY)
                    .segment_slots(8)
                    .prioritized(0.6, 1e-6)
                    .downsample(34)
                    .seed(7)
                    .io(self.io.clone());
                let mut b = ReplayBuffer::create(&self.dir, config).unwrap();
                b.set_write_behind(common::SMALL_WRITE_BEHIND);
                *buf = Some(b);
            }
            Op::Open => {
                let mut b = ReplayBuffer::open_with(&self.dir, self.io.clone()).unwrap();
                b.set_write_behind(common::SMALL_WRITE_BEHIND);
                *buf = Some(b);
            }
            Op::Close => buf.take().unwrap().close().unwrap(),
            _ => {}
        }
        if let Some(b) = buf.as_mut() {
            match &op {
                Op::Add(n) => {
                    let end = b.live().end;
                    add_range(b, end, end + n);
                }
                Op::Update => {
                    let live = b.live();
                    let picks: Vec<u64> = (0..6)
                        .map(|_| live.start + xorshift(rng) % (live.end - live.start))
                        .collect();
                    let p: Vec<f64> = picks
                        .iter()
                        .map(|_| 0.25 * (xorshift(rng) % 64) as f64)
                        .collect();
                    b.update_priorities(&picks, &p).unwrap();
                }
                Op::Remove => {
                    let live = b.live();
                    let picks: Vec<u64> = (0..4)
                        .map(|_| live.start + xorshift(rng) % (live.end - live.start))
                        .collect();
                    b.remove(&picks).unwrap();
                }
                Op::Pop => {
                    b.sample(Request::rows(3).remove()).unwrap();
                }
                Op::Flush => b.flush().unwrap(),
                Op::GetState(name) => {
                    let state = b.get_state_named(name).unwrap();
                    let at = seen(op.clone(), b);
                    let made = phase;
                    self.snaps.insert(
                        name.clone(),
                        Snap {
                            state,
                            at,
                            made,
                            deleted: None,
                        },
                    );
                }
                Op::SetState(name) => b.set_state(&self.snaps[name].state.clone()).unwrap(),
                Op::SetStateFrom(name) => b.set_state(&self.foreign[name].0.clone()).unwrap(),
                Op::Delete(name) => {
                    b.delete_snapshot(name).unwrap();
                    self.snaps.get_mut(name).unwrap().deleted = Some(phase);
                }
                _ => {}
            }
        }
        let now = match buf.as_ref() {
            Some(b) => seen(op, b),
            None => Seen {
                op,
                ..self.history.last().unwrap().clone()
            },
        };
        self.history.push(now);
        for image in self.io.take_images() {
            self.check(&image);
        }
    }

    /// Checks one crash image taken during operation `image.phase`.
    fn check(&mut self, image: &Image) {
        let p = image.phase;
        let ctx = format!("operation {p} ({:?}), {}", self.history[p].op, image.what);
        if matches!(self.history[p].op, Op::SetStateFrom(_)) {
            self.foreign_images += 1;
        }
        let dir = self.scratch.path().join(format!("image-{}", self.checked));
        self.checked += 1;
        sim::materialize(image, &dir);
        if p == 0 && !dir.join("MANIFEST").exists() {
            // Cut before the buffer existed at all: nothing was acknowledged.
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
        let report = verify(&dir).unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
        assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
        let buf = ReplayBuffer::open(&dir).unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        // The last operation that committed before this one, and the last that made the
        // live tree durable.
        let acked = (0..p)
            .rev()
            .find(|&j| self.history[j].op.commits())
            .unwrap_or(0);
        let tree = (0..p)
            .rev()
            .find(|&j| self.history[j].op.syncs_tree())
            .unwrap_or(0);
        let live = buf.live();
        let restored = match &self.history[p].op {
            Op::SetState(name) => self.snaps.get(name.as_str()).map(|s| &s.at),
            Op::SetStateFrom(name) => self.foreign.get(name.as_str()).map(|f| &f.1),
            _ => None,
        };
        // The tail is that of the last commit or of the one in flight. The head may be
        // later than that commit's: adds after it overwrote the oldest items in place,
        // and a power cut loses those adds but not the overwriting (the items were being
        // evicted by acknowledged adds anyway), or that an eviction record names: at most
        // `capacity / 4` past the head reached (FORMAT.md, "Eviction records").
        let states: Vec<&Seen> = self.history[acked..=p].iter().chain(restored).collect();
        let reached = states.iter().map(|s| s.live.start).max().unwrap() + CAPACITY.div_ceil(4);
        assert!(
            states
                .iter()
                .any(|s| s.live.end == live.end && (s.live.start..=reached).contains(&live.start)),
            "{ctx}: live range {live:?}, but the acknowledged ones were {:?}",
            states.iter().map(|s| s.live.clone()).collect::<Vec<_>>()
        );
        // Each item is removed or not as in a state since the last commit (or the
        // snapshot's, for a restore in flight), and a removed one keeps no priority.
        let removed = common::removed_of(&buf);
        for i in live.clone() {
            let r = removed.contains(&i);
            assert!(
                states.iter().any(|s| s.removed.contains(&i) == r),
                "{ctx}: item {i} removed {r}, in no state since the last commit"
            );
        }
        // Each kept item is intact (downsampling moves kept items to the tail).
        common::assert_kept_items_intact(&buf, &ctx);
        let gone: Vec<u64> = removed.iter().copied().collect();
        for (i, g) in gone.iter().zip(buf.priorities(&gone).unwrap()) {
            assert_eq!(g, 0.0, "{ctx}: removed item {i} has priority {g}");
        }
        // Each priority is one the item had at some point since the tree was last made
        // durable (or the snapshot's, for a restore in flight): never a mix.
        let got = buf.priorities(&live.clone().collect::<Vec<_>>()).unwrap();
        let allowed: Vec<&Seen> = self.history[tree.min(acked)..=p]
            .iter()
            .chain(restored)
            .collect();
        // An item moved to the tail or removed since then may be back, live, with the
        // zeroed leaf of the move or removal on disk but not its row or word: recovery
        // gives it the largest priority, as a new item (a zero leaf would never draw it).
        let mut buf = buf;
        let max = buf.priority_summary().map_or(0.0, |s| s.max_priority);
        for (i, g) in live.clone().zip(got) {
            let lost = (allowed.iter()).any(|s| !s.live.contains(&i) || s.removed.contains(&i));
            assert!(
                allowed.iter().any(|s| s.priorities.get(&i) == Some(&g))
                    || (lost && (g - max).abs() <= 1e-9 * max),
                "{ctx}: item {i} has priority {g}, never set since the last durable tree: {:?}",
                allowed
                    .iter()
                    .map(|s| s.priorities.get(&i))
                    .collect::<Vec<_>>()
            );
        }
        // Indices a power cut dropped are handed out again: the new items are born
        // live, whatever removals of the dropped ones reached the disk. The add's own
        // downsampling may remove some of them (and older ones): every removed word in
        // the live range is then one the removal counters count.
        let before = buf.stats().removals.downsampled;
        let fresh = add_range(&mut buf, live.end, live.end + 12);
        let states = buf.item_states(&fresh.clone().collect::<Vec<_>>()).unwrap();
        let downsampled = buf.stats().removals.downsampled - before;
        let born_removed = states.iter().filter(|s| s.removed.is_some()).count() as u64;
        assert!(
            states.iter().all(|s| s.uses == 0
                && matches!(s.removed, None | Some(replaystore::Cause::Downsampled)))
                && born_removed <= downsampled,
            "{ctx}: a new item was born removed or used ({downsampled} downsampled): {states:?}"
        );
        assert_eq!(
            common::removed_of(&buf).len() as u64,
            buf.stats().removed,
            "{ctx}: a removed word no removal counted"
        );
        drop(buf);
        self.check_snapshots(&dir, p, &ctx);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Acknowledged snapshots are there and whole; one being made or deleted is whole
    /// or gone; deleted ones are gone.
    fn check_snapshots(&self, dir: &Path, p: usize, ctx: &str) {
        let listed = snapshots(dir).unwrap();
        for (name, snap) in &self.snaps {
            let present = listed.iter().find(|s| &s.name == name);
            let must = snap.made < p && snap.deleted.is_none_or(|d| d > p);
            let may = must || snap.made == p || snap.deleted == Some(p);
            match present {
                None => assert!(!must, "{ctx}: acknowledged snapshot {name} is gone"),
                Some(info) => {
                    assert!(may, "{ctx}: snapshot {name} is listed but should not be");
                    assert!(
                        info.commit.is_some(),
                        "{ctx}: snapshot {name} is damaged: {info:?}"
                    );
                    let s = ReplayBuffer::open_snapshot(dir, name)
                        .unwrap_or_else(|e| panic!("{ctx}: snapshot {name}: {e}"));
                    assert_eq!(s.live(), snap.at.live, "{ctx}: snapshot {name}");
                    common::assert_kept_items_intact(&s, ctx);
                    let live: Vec<u64> = s.live().collect();
                    let got: BTreeMap<u64, f64> = live
                        .iter()
                        .copied()
                        .zip(s.priorities(&live).unwrap())
                        .collect();
                    assert_eq!(got, snap.at.priorities, "{ctx}: snapshot {name} priorities");
                    assert_eq!(
                        common::removed_of(&s),
                        snap.at.removed,
                        "{ctx}: snapshot {name} removals"
                    );
                }
            }
        }
    }
}

/// The workload: every kind of durable step, a ring that wraps (so snapshot-shared
/// segments are copied before writing), a restore and a delete.
fn workload() -> Vec<Op> {
    use Op::*;
    let s = |n: &str| n.to_string();
    vec![
        Create,
        Add(12),
        Flush,
        Update,
        Add(5),
        Flush,
        Update,
        Remove,
        GetState(s("a")),
        Add(30),
        Pop,
        Update,
        Flush,
        Add(3),
        Remove,
        GetState(s("b")),
        Update,
        Pop,
        SetState(s("a")),
        Add(9),
        Remove,
        Update,
        Close,
        Open,
        Delete(s("b")),
        Pop,
        Add(20),
        Remove,
        SetStateFrom(s("far")),
        Add(4),
        Remove,
        Flush,
        Update,
        Close,
    ]
}

/// Another buffer of the workload's layout, outside the seam's folder: 26 items with
/// priorities and removals, checkpointed as `far` (the state `SetStateFrom` restores).
fn foreign(dir: &Path) -> BTreeMap<String, (State, Seen)> {
    let config = Config::new(schema(), CAPACITY)
        .segment_slots(8)
        .prioritized(0.6, 1e-6)
        .downsample(34)
        .seed(8);
    let mut b = ReplayBuffer::create(dir, config).unwrap();
    add_range(&mut b, 0, 26);
    b.update_priorities(&[2, 9, 25], &[3.0, 0.25, 7.5]).unwrap();
    b.remove(&[4, 17]).unwrap();
    let state = b.get_state_named("far").unwrap();
    let at = seen(Op::SetStateFrom("far".into()), &b);
    b.close().unwrap();
    [("far".to_string(), (state, at))].into()
}

#[test]
fn every_crash_image_at_every_sync_point_opens_verifies_and_holds_an_acknowledged_state() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let io = sim_io(&dir, 0x5eed);
    let mut driver = Driver {
        io: io.clone(),
        dir,
        history: Vec::new(),
        snaps: BTreeMap::new(),
        checked: 0,
        scratch: tempfile::tempdir().unwrap(),
        moved: 0,
        foreign: foreign(&tmp.path().join("far")),
        foreign_images: 0,
    };
    let mut buf = None;
    let mut rng = 99u64;
    for op in workload() {
        driver.run(&mut buf, op, &mut rng);
        if let Some(b) = &buf {
            driver.moved = driver.moved.max(b.stats().moved);
        }
    }
    assert!(driver.moved > 0, "downsampling never moved a kept item");
    println!(
        "images during the restore from another buffer: {}",
        driver.foreign_images
    );
    assert!(
        driver.foreign_images > 0,
        "no image during the restore from another buffer"
    );
    // And a cut after everything returned: the closed state, whatever was written back.
    io.capture("after the last operation");
    for image in io.take_images() {
        driver.check(&image);
    }
    report("ring", &io, driver.checked);
}

/// The buffer right after each call of the episodic workload.
struct EpisodeSeen {
    live: Range<u64>,
    episodes: Vec<replaystore::EpisodeInfo>,
    priorities: BTreeMap<u64, f64>,
    /// The call made the commit durable (flush, get_state, close) or the whole tree.
    commits: bool,
    syncs_tree: bool,
}

fn episode_obs(i: u64) -> [u64; 2] {
    [i, i.wrapping_mul(0x2545_f491_4f6c_dd1d)]
}

/// Checks one image of the episodic workload: it verifies and opens; live range and
/// priorities as in the ring workload; every row holds its own bytes; every episode the
/// table lists is one the writer had (same id and start), with at most the rows it had,
/// and with an end only where it had that end at that length.
fn check_episodes(image: &Image, history: &[EpisodeSeen], scratch: &Path, n: u64, text: bool) {
    let p = image.phase;
    let ctx = format!("episodic call {p}, {}", image.what);
    let dir = scratch.join(format!("ep-{n}"));
    sim::materialize(image, &dir);
    if !dir.join("MANIFEST").exists() {
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let report = verify(&dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
    let mut buf = ReplayBuffer::open(&dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let live = buf.live();
    let acked = (0..p).rev().find(|&j| history[j].commits).unwrap_or(0);
    let tree = (0..p).rev().find(|&j| history[j].syncs_tree).unwrap_or(0);
    let window = &history[acked..=p];
    let reached = window.iter().map(|s| s.live.start).max().unwrap() + 32u64.div_ceil(4);
    assert!(
        window
            .iter()
            .any(|s| s.live.end == live.end && (s.live.start..=reached).contains(&live.start)),
        "{ctx}: live {live:?}, acknowledged {:?}",
        window.iter().map(|s| s.live.clone()).collect::<Vec<_>>()
    );
    let idx: Vec<u64> = live.clone().collect();
    if !idx.is_empty() {
        let b = buf
            .sample(replaystore::Request::at(&idx).including_removed())
            .unwrap();
        let obs = b.get::<u64>("obs").unwrap();
        for (r, &i) in idx.iter().enumerate() {
            assert_eq!(&obs[2 * r..2 * r + 2], &episode_obs(i), "{ctx}: row {i}");
            if text {
                assert_eq!(
                    b.text("text", r).unwrap(),
                    var_text(i),
                    "{ctx}: text of row {i}"
                );
            }
        }
        let got = buf.priorities(&idx).unwrap();
        for (&i, g) in idx.iter().zip(got) {
            assert!(
                history[tree.min(acked)..=p]
                    .iter()
                    .any(|s| s.priorities.get(&i) == Some(&g)),
                "{ctx}: row {i} has priority {g}, never set since the last durable tree \
                 (call {tree}); it had {:?}; live then {:?}, episodes now {:?}",
                history[..=p]
                    .iter()
                    .map(|s| s.priorities.get(&i))
                    .collect::<Vec<_>>(),
                history[..=p]
                    .iter()
                    .map(|s| s.live.clone())
                    .collect::<Vec<_>>(),
                buf.episodes().unwrap()
            );
        }
    }
    if let Ok(states) = buf.item_states(&idx) {
        // Kept episodes hold every row kept; every other row is removed.
        let kept: u64 = (buf.episodes().unwrap().iter())
            .map(|e| e.last() + 1 - e.start.max(live.start))
            .sum();
        let removed = states.iter().filter(|s| s.removed.is_some()).count() as u64;
        assert_eq!(
            kept + removed,
            idx.len() as u64,
            "{ctx}: an episode part removed"
        );
    }
    for e in buf.episodes().unwrap() {
        let had: Vec<&replaystore::EpisodeInfo> = history[..=p]
            .iter()
            .flat_map(|s| s.episodes.iter())
            .filter(|h| h.id == e.id)
            .collect();
        assert!(
            had.iter().any(|h| h.start == e.start && h.rows >= e.rows),
            "{ctx}: episode {e:?} never had those rows: {had:?}"
        );
        if e.end.is_some() {
            assert!(
                had.iter().any(|h| h.end == e.end && h.rows == e.rows),
                "{ctx}: episode {e:?} never ended so: {had:?}"
            );
        }
    }
    drop(buf);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_crash_image_of_an_episodic_buffer_keeps_episodes_whole_or_cut_never_mixed() {
    episodic_crash_images(false);
}

/// The same workload with a text observation in the chunk ring: no image shows a row
/// with another row's text.
#[test]
fn every_crash_image_of_an_episodic_buffer_with_values_keeps_each_rows_own_value() {
    episodic_crash_images(true);
}

fn episodic_crash_images(text: bool) {
    episodic_images(text, false);
}

/// The text workload with item states: every fourth episode's end is followed by a
/// draw that removes a whole episode. No image shows an episode part removed once
/// opened, nor a removed row's bytes changed.
#[test]
fn every_crash_image_of_an_episodic_buffer_with_states_keeps_each_episode_whole() {
    episodic_images(true, true);
}

fn episodic_images(text: bool, states: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("e");
    let scratch = tempfile::tempdir().unwrap();
    let io = sim_io(&dir, 0xe915);
    let mut schema = replaystore::Schema::builder()
        .field("obs", replaystore::DType::U64, &[2])
        .field("reward", replaystore::DType::F32, &[]);
    if text {
        schema = schema.variable("text", replaystore::VarKind::Str, None);
    }
    let schema = schema.build().unwrap();
    let mut config = Config::new(schema, 32)
        .segment_slots(8)
        .whole_episodes()
        .prioritized(0.6, 1e-6)
        .seed(4)
        .io(io.clone());
    if states {
        config = config.item_states();
    }
    let mut history: Vec<EpisodeSeen> = Vec::new();
    let mut checked = 0;
    let mut rng = 31u64;
    let mut buf = Some(ReplayBuffer::create(&dir, config).unwrap());
    // Episodes sealed and sent to disk behind the tail, with whole-episode eviction.
    if let Some(b) = buf.as_mut() {
        b.set_write_behind(common::SMALL_WRITE_BEHIND);
    }
    let seen = |b: &ReplayBuffer, commits: bool, syncs_tree: bool| {
        let idx: Vec<u64> = b.live().collect();
        let p = b.priorities(&idx).unwrap();
        EpisodeSeen {
            live: b.live(),
            episodes: b.episodes().unwrap(),
            priorities: idx.into_iter().zip(p).collect(),
            commits,
            syncs_tree,
        }
    };
    history.push(seen(buf.as_ref().unwrap(), true, true));
    for image in io.take_images() {
        check_episodes(&image, &history, scratch.path(), checked, text);
        checked += 1;
    }
    for episode in 0..14u64 {
        let steps = 1 + xorshift(&mut rng) % 6;
        for t in 0..=steps {
            let phase = history.len();
            io.set_phase(phase);
            let b = buf.as_mut().unwrap();
            let i = b.live().end;
            let obs = episode_obs(i);
            let (mut commits, mut syncs_tree) = (false, false);
            let words = var_text(i);
            let value = replaystore::Column::text("text", &words);
            if t == 0 {
                let mut cols = vec![replaystore::Column::new("obs", &obs)];
                cols.extend(text.then_some(value));
                b.add_reset(&cols).unwrap();
            } else {
                let reward = (i % 5) as f32;
                let mut cols = vec![
                    replaystore::Column::new("obs", &obs),
                    replaystore::Column::scalar("reward", &reward),
                ];
                cols.extend(text.then_some(value));
                // Every third episode is cut off (truncated) rather than terminated.
                let last = t == steps;
                b.add_step(&cols, last && episode % 3 != 0, last && episode % 3 == 0)
                    .unwrap();
            }
            if t == steps {
                match episode % 4 {
                    0 => {
                        b.flush().unwrap();
                        (commits, syncs_tree) = (true, true);
                    }
                    1 => {
                        let live = b.live();
                        let picks = [live.start + 1, live.end - 1];
                        b.update_priorities(&picks, &[0.5 + episode as f64, 2.0])
                            .unwrap();
                    }
                    2 => {
                        b.get_state_named(&format!("e{episode}")).unwrap();
                        commits = true;
                    }
                    _ if states => {
                        b.sample(replaystore::Request::episodes_covering(1).remove())
                            .unwrap();
                    }
                    _ => {}
                }
            }
            history.push(seen(b, commits, syncs_tree));
            for image in io.take_images() {
                check_episodes(&image, &history, scratch.path(), checked, text);
                checked += 1;
            }
        }
    }
    let phase = history.len();
    io.set_phase(phase);
    let last = seen(buf.as_ref().unwrap(), true, true);
    buf.take().unwrap().close().unwrap();
    history.push(last);
    io.capture("after close");
    for image in io.take_images() {
        check_episodes(&image, &history, scratch.path(), checked, text);
        checked += 1;
    }
    report(
        match (text, states) {
            (_, true) => "episodic with values and item states",
            (true, false) => "episodic with values",
            (false, false) => "episodic",
        },
        &io,
        checked,
    );
}

/// The lanes right after each call of the lanes workload: per lane, live range and
/// priorities.
struct LanesSeen {
    lanes: Vec<(Range<u64>, BTreeMap<u64, f64>)>,
    commits: bool,
}

fn lanes_seen(l: &replaystore::Lanes, commits: bool) -> LanesSeen {
    let lanes = (0..l.lane_count())
        .map(|k| {
            let b = l.lane(k).unwrap();
            let idx: Vec<u64> = b.live().collect();
            let p = b.priorities(&idx).unwrap();
            (b.live(), idx.into_iter().zip(p).collect())
        })
        .collect();
    LanesSeen { lanes, commits }
}

/// Each lane of the image, on its own, as the ring workload's check: the tail of an
/// acknowledged state (lanes flush one after the other, so a cut mid-flush may leave
/// some lanes at the new commit and some at the old), items intact, priorities had.
fn check_lanes(image: &Image, history: &[LanesSeen], scratch: &Path, n: u64) {
    let p = image.phase;
    let ctx = format!("lanes call {p}, {}", image.what);
    let dir = scratch.join(format!("lanes-{n}"));
    sim::materialize(image, &dir);
    if !dir.join("LANES").exists() {
        // Cut before `create` returned: nothing was acknowledged.
        assert_eq!(p, 0, "{ctx}: the LANES file is gone");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let report = verify(&dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
    let mut lanes = replaystore::Lanes::open(&dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let acked = (0..p).rev().find(|&j| history[j].commits).unwrap_or(0);
    for k in 0..lanes.lane_count() {
        let live = lanes.lane(k).unwrap().live();
        let window: Vec<&(Range<u64>, BTreeMap<u64, f64>)> =
            history[acked..=p].iter().map(|s| &s.lanes[k]).collect();
        let reached = window.iter().map(|s| s.0.start).max().unwrap() + 16u64.div_ceil(4);
        assert!(
            window
                .iter()
                .any(|s| s.0.end == live.end && (s.0.start..=reached).contains(&live.start)),
            "{ctx}: lane {k} live {live:?}, acknowledged {:?}",
            window.iter().map(|s| s.0.clone()).collect::<Vec<_>>()
        );
        let idx: Vec<u64> = live.clone().collect();
        if idx.is_empty() {
            continue;
        }
        let b = lanes.get_many(&idx).unwrap();
        for (r, &i) in idx.iter().enumerate() {
            assert_eq!(b.item_bytes(r), item_bytes(i), "{ctx}: item {i:#x}");
        }
        let got = lanes.lane(k).unwrap().priorities(&idx).unwrap();
        for (&i, g) in idx.iter().zip(got) {
            assert!(
                history[..=p]
                    .iter()
                    .any(|s| s.lanes[k].1.get(&i) == Some(&g)),
                "{ctx}: item {i:#x} has priority {g}, never set"
            );
        }
    }
    drop(lanes);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_crash_image_of_a_lane_set_opens_with_each_lane_at_an_acknowledged_state() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("l");
    let scratch = tempfile::tempdir().unwrap();
    let io = sim_io(&dir, 0x1a9e);
    let config = Config::new(schema(), 48)
        .segment_slots(8)
        .prioritized(0.6, 1e-6)
        .seed(2)
        .io(io.clone());
    let mut lanes = replaystore::Lanes::create(&dir, config, 3).unwrap();
    let mut history = vec![lanes_seen(&lanes, true)];
    let mut checked = 0;
    for image in io.take_images() {
        check_lanes(&image, &history, scratch.path(), checked);
        checked += 1;
    }
    let mut rng = 77u64;
    for call in 1..=60u64 {
        io.set_phase(history.len());
        let commits = match xorshift(&mut rng) % 10 {
            0..=2 => {
                let k = (xorshift(&mut rng) % 3) as usize;
                let next = lanes.lane(k).unwrap().live().end;
                lanes.add(k, &common::columns(&common::item(next))).unwrap();
                false
            }
            3..=5 => {
                // A few rows into one lane: the lanes of 16 wrap, so committed items
                // are overwritten (eviction records) here too.
                let k = (xorshift(&mut rng) % 3) as usize;
                let b = lanes.lane_mut(k).unwrap();
                let end = b.live().end;
                add_range(b, end, end + 1 + xorshift(&mut rng) % 4);
                false
            }
            6 => {
                let k = (call % 3) as usize;
                let b = lanes.lane_mut(k).unwrap();
                let live = b.live();
                if !live.is_empty() {
                    b.update_priorities(&[live.end - 1], &[0.5 + call as f64])
                        .unwrap();
                }
                false
            }
            _ => {
                lanes.flush().unwrap();
                true
            }
        };
        history.push(lanes_seen(&lanes, commits));
        for image in io.take_images() {
            check_lanes(&image, &history, scratch.path(), checked);
            checked += 1;
        }
    }
    io.set_phase(history.len());
    history.push(lanes_seen(&lanes, true));
    lanes.close().unwrap();
    io.capture("after close");
    for image in io.take_images() {
        check_lanes(&image, &history, scratch.path(), checked);
        checked += 1;
    }
    report("lanes", &io, checked);
}

/// A value of item `i` of the variable-length workload: text whose length and bytes
/// are a function of the index (some empty), so that a value of another item, a stale
/// chunk or a torn one is caught byte for byte.
fn var_text(i: u64) -> String {
    let n = (common::mix(i) % 500) as usize;
    (0..n)
        .map(|k| (b'a' + ((i as usize + 3 * k) % 26) as u8) as char)
        .collect()
}

/// Checks one image of the variable-length workload: it verifies and opens at the end
/// of an acknowledged state (the newest commit before the call, or the call's own),
/// with at most that state's oldest items evicted for room, and every live item holds
/// exactly its own value.
fn check_values(image: &Image, history: &[(Range<u64>, bool)], scratch: &Path, n: u64) {
    let p = image.phase;
    let ctx = format!("values call {p}, {}", image.what);
    let dir = scratch.join(format!("v-{n}"));
    let Some(buf) = open_image(image, &dir, &ctx) else {
        return;
    };
    let live = buf.live();
    let acked = (0..p).rev().find(|&j| history[j].1).unwrap_or(0);
    let window = &history[acked..=p];
    assert!(
        window
            .iter()
            .any(|(s, _)| s.end == live.end && (s.start..=s.end).contains(&live.start)),
        "{ctx}: live {live:?}, acknowledged {:?}",
        window.iter().map(|s| s.0.clone()).collect::<Vec<_>>()
    );
    let idx: Vec<u64> = live.clone().collect();
    if !idx.is_empty() {
        let b = buf
            .get_many(&idx)
            .unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
        for (r, &i) in idx.iter().enumerate() {
            assert_eq!(b.get::<u64>("index").unwrap()[r], i, "{ctx}");
            assert_eq!(
                b.text("text", r).unwrap(),
                var_text(i),
                "{ctx}: text of {i}"
            );
        }
    }
    drop(buf);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_crash_image_of_a_buffer_with_values_holds_each_item_with_its_own_value() {
    use replaystore::{Column, DType, Schema, VarKind};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("v");
    let scratch = tempfile::tempdir().unwrap();
    let io = sim_io(&dir, 0x7a1);
    let schema = Schema::builder()
        .field("index", DType::U64, &[])
        .variable("text", VarKind::Str, None)
        .build()
        .unwrap();
    // 24 chunks of 120 bytes: a few items' values, so the ring laps and evicts for
    // room (with eviction records past commits) several times in the workload, and its
    // three sparse segments are reserved as the writer first reaches each.
    let config = Config::new(schema, 64)
        .segment_slots(16)
        .chunk_bytes(120)
        .heap_bytes(24 * 136)
        .segment_bytes(8 * 136)
        .evict_for_room()
        .seed(5)
        .io(io.clone());
    let mut buf = Some(ReplayBuffer::create(&dir, config).unwrap());
    if let Some(b) = buf.as_mut() {
        b.set_write_behind(common::SMALL_WRITE_BEHIND);
    }
    let mut history: Vec<(Range<u64>, bool)> = vec![(buf.as_ref().unwrap().live(), true)];
    let mut checked = 0;
    for image in io.take_images() {
        check_values(&image, &history, scratch.path(), checked);
        checked += 1;
    }
    let mut rng = 77u64;
    for call in 0..40u64 {
        let phase = history.len();
        io.set_phase(phase);
        let b = buf.as_mut().unwrap();
        let tail = b.live().end;
        let commits = match call % 5 {
            0 | 2 => {
                let text = var_text(tail);
                b.add(&[Column::scalar("index", &tail), Column::text("text", &text)])
                    .unwrap();
                false
            }
            1 | 3 => {
                let n = 2 + xorshift(&mut rng) % 4;
                let index: Vec<u64> = (tail..tail + n).collect();
                let (mut t, mut o) = (Vec::new(), vec![0u64]);
                for i in tail..tail + n {
                    t.extend_from_slice(var_text(i).as_bytes());
                    o.push(t.len() as u64);
                }
                b.add_batch(&[
                    Column::new("index", &index),
                    Column::values("text", DType::U8, &t, &o),
                ])
                .unwrap();
                false
            }
            _ => {
                b.flush().unwrap();
                true
            }
        };
        history.push((b.live(), commits));
        for image in io.take_images() {
            check_values(&image, &history, scratch.path(), checked);
            checked += 1;
        }
    }
    let phase = history.len();
    io.set_phase(phase);
    let last = buf.as_ref().unwrap().live();
    assert!(
        buf.as_ref().unwrap().stats().evicted > 0,
        "the chunk ring never lapped"
    );
    buf.take().unwrap().close().unwrap();
    history.push((last, true));
    io.capture("after close");
    for image in io.take_images() {
        check_values(&image, &history, scratch.path(), checked);
        checked += 1;
    }
    report("values", &io, checked);
}

/// Materializes `image` in `dir`, checks it verifies, and opens it (recovering it);
/// `None` (the folder removed) when the cut came before the buffer existed.
fn open_image(image: &Image, dir: &Path, ctx: &str) -> Option<ReplayBuffer> {
    sim::materialize(image, dir);
    if !dir.join("MANIFEST").exists() {
        std::fs::remove_dir_all(dir).unwrap();
        return None;
    }
    let report = verify(dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
    Some(ReplayBuffer::open(dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}")))
}

/// The kept items' numbers (`x`, the order they were added in) of a reservoir, each
/// with its text intact when the items have one (a move copies the values too).
fn kept_xs(buf: &ReplayBuffer) -> Vec<i64> {
    let live: Vec<u64> = buf.live().collect();
    let removed = common::removed_of(buf);
    let kept: Vec<u64> = live.into_iter().filter(|i| !removed.contains(i)).collect();
    let b = buf.get_many(&kept).unwrap();
    let mut xs = b.get::<i64>("x").unwrap().to_vec();
    if buf.schema().var_field("text").is_some() {
        for (r, &x) in xs.iter().enumerate() {
            assert_eq!(b.text("text", r).unwrap(), reservoir_text(x), "item {x}");
        }
    }
    xs.sort_unstable();
    xs
}

/// Item `x`'s text in the text reservoir: long enough that chunks hold one or two.
fn reservoir_text(x: i64) -> String {
    format!("{x}:{}", "t".repeat(20 + (x as usize * 13) % 90))
}

/// Adds items `xs` to a reservoir of either schema (a 5-byte pad, or a text).
fn add_reservoir(buf: &mut ReplayBuffer, xs: &[i64]) {
    use replaystore::Column;
    let n = xs.len();
    if buf.schema().var_field("text").is_some() {
        let (mut bytes, mut offsets) = (Vec::new(), vec![0u64]);
        for &x in xs {
            bytes.extend_from_slice(reservoir_text(x).as_bytes());
            offsets.push(bytes.len() as u64);
        }
        let texts = Column::values("text", replaystore::DType::U8, &bytes, &offsets);
        buf.add_batch(&[Column::new("x", xs), texts]).unwrap();
    } else {
        let pad = vec![0u8; 5 * n];
        buf.add_batch(&[
            Column::new("x", xs),
            Column::new("pad", &pad).with_shape(&[n, 5]),
        ])
        .unwrap();
    }
}

/// Checks one image of the reservoir workload: it verifies and opens; every kept item
/// is one kept in a state since the last commit (or the one in flight), at most twice
/// (a copy cut short), and never more than the reservoir and that one; new items added
/// to it are born live.
fn check_reservoir(image: &Image, history: &[(Vec<i64>, bool)], scratch: &Path, n: u64) {
    let p = image.phase;
    let ctx = format!("reservoir call {p}, {}", image.what);
    let dir = scratch.join(format!("r-{n}"));
    let Some(mut buf) = open_image(image, &dir, &ctx) else {
        return;
    };
    let xs = kept_xs(&buf);
    let acked = (0..p).rev().find(|&j| history[j].1).unwrap_or(0);
    let seen: BTreeSet<i64> = history[acked..=p]
        .iter()
        .flat_map(|h| h.0.iter().copied())
        .collect();
    assert!(
        xs.len() <= 9,
        "{ctx}: {} kept of a reservoir of 8: {xs:?}",
        xs.len()
    );
    for w in xs.windows(3) {
        assert!(!(w[0] == w[1] && w[1] == w[2]), "{ctx}: {xs:?}");
    }
    for x in &xs {
        assert!(
            seen.contains(x),
            "{ctx}: kept {x}, kept in no state since the last commit"
        );
    }
    let tail = buf.live().end as i64;
    for i in tail..tail + 3 {
        add_reservoir(&mut buf, &[10_000 + i]);
    }
    assert!(
        buf.len() <= 9,
        "{ctx}: {} kept after 3 more adds",
        buf.len()
    );
    kept_xs(&buf);
    drop(buf);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_crash_image_of_a_reservoir_keeps_only_items_it_had_kept() {
    use replaystore::{DType, Schema, VarKind};
    for text in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r");
        let scratch = tempfile::tempdir().unwrap();
        let io = sim_io(&dir, 0x4e5);
        let schema = Schema::builder().field("x", DType::I64, &[]);
        let schema = match text {
            false => schema.field("pad", DType::U8, &[5]),
            true => schema.variable("text", VarKind::Str, None),
        };
        // A reservoir of 8 in a ring of 16: kept items are renamed past the ring's lap
        // (a full ring) and copied into free slots (after drops) all through the
        // workload. Items with text are always copied, values and all, into a chunk
        // ring of 32 chunks of 64 bytes that laps many times.
        let config = Config::new(schema.build().unwrap(), 16)
            .segment_slots(4)
            .reservoir(8)
            .seed(3)
            .io(io.clone());
        let config = match text {
            false => config,
            true => config.heap_bytes(32 * 64).chunk_bytes(64),
        };
        let mut buf = ReplayBuffer::create(&dir, config).unwrap();
        let mut history: Vec<(Vec<i64>, bool)> = vec![(Vec::new(), true)];
        let mut checked = 0;
        for image in io.take_images() {
            check_reservoir(&image, &history, scratch.path(), checked);
            checked += 1;
        }
        let mut x = 0i64;
        for call in 0..36u64 {
            io.set_phase(history.len());
            let commits = match call % 6 {
                5 => {
                    buf.flush().unwrap();
                    true
                }
                k => {
                    let n = 1 + k % 2;
                    let xs: Vec<i64> = (x..x + n as i64).collect();
                    add_reservoir(&mut buf, &xs);
                    x += n as i64;
                    false
                }
            };
            history.push((kept_xs(&buf), commits));
            for image in io.take_images() {
                check_reservoir(&image, &history, scratch.path(), checked);
                checked += 1;
            }
        }
        assert!(
            buf.stats().removals.reservoir > 20 && buf.stats().moved > 10,
            "the reservoir never filled, or moved too few: {:?}",
            buf.stats()
        );
        io.set_phase(history.len());
        let last = kept_xs(&buf);
        buf.close().unwrap();
        history.push((last, true));
        io.capture("after close");
        for image in io.take_images() {
            check_reservoir(&image, &history, scratch.path(), checked);
            checked += 1;
        }
        report(
            if text { "text reservoir" } else { "reservoir" },
            &io,
            checked,
        );
    }
}

/// The group right after each call of the group workload: per member, its live range;
/// the checkpoints acknowledged, with each member's live range at the time.
#[derive(Clone)]
struct GroupSeen {
    members: BTreeMap<String, Range<u64>>,
    snapshots: BTreeMap<String, BTreeMap<String, Range<u64>>>,
    commits: bool,
    restores: bool,
}

fn group_seen(
    g: &replaystore::BufferGroup,
    snapshots: &BTreeMap<String, BTreeMap<String, Range<u64>>>,
    commits: bool,
    restores: bool,
) -> GroupSeen {
    let members = (g.members().into_iter())
        .map(|m| (m.to_owned(), g.member(m).unwrap().live()))
        .collect();
    GroupSeen {
        members,
        snapshots: snapshots.clone(),
        commits,
        restores,
    }
}

/// Which of `window`'s states member `name`'s live range `live` is the tail of (a
/// member a state lacks counts as empty there); `reached` allows the oldest slots a
/// reopen may give up.
fn matching_states(window: &[&GroupSeen], name: &str, live: &Range<u64>) -> Vec<usize> {
    (window.iter().enumerate())
        .filter(|(_, s)| match s.members.get(name) {
            Some(r) => {
                r.end == live.end && (r.start..=r.start + 16u64.div_ceil(4)).contains(&live.start)
            }
            None => live.is_empty(),
        })
        .map(|(j, _)| j)
        .collect()
}

/// One image of the group workload: it verifies and opens; it names every member whose
/// creation was acknowledged and none never created; each member is at an acknowledged
/// state with its own items; a restore in flight left every member at the old state or
/// every member at the new; the checkpoints acknowledged are all there, and restoring
/// the newest gives each member the range it had when it was taken.
fn check_group(image: &Image, history: &[GroupSeen], scratch: &Path, n: u64) {
    let p = image.phase;
    let ctx = format!("group call {p}, {}", image.what);
    let dir = scratch.join(format!("group-{n}"));
    sim::materialize(image, &dir);
    if !dir.join("GROUP").exists() {
        assert_eq!(p, 0, "{ctx}: the GROUP file is gone");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let report = verify(&dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
    let mut g = replaystore::BufferGroup::open(&dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let names: BTreeSet<String> = g.members().iter().map(|s| s.to_string()).collect();
    let before = &history[p.saturating_sub(1)];
    let after = &history[p.min(history.len() - 1)];
    assert!(
        before.members.keys().all(|m| names.contains(m)),
        "{ctx}: members {names:?}, acknowledged {:?}",
        before.members.keys()
    );
    assert!(
        names.iter().all(|m| after.members.contains_key(m)),
        "{ctx}: members {names:?}, created {:?}",
        after.members.keys()
    );
    let acked = (0..p).rev().find(|&j| history[j].commits).unwrap_or(0);
    let window: Vec<&GroupSeen> = history[acked..=p.min(history.len() - 1)].iter().collect();
    let mut per_member = Vec::new();
    for name in &names {
        let live = g.member(name).unwrap().live();
        let states = matching_states(&window, name, &live);
        assert!(
            !states.is_empty(),
            "{ctx}: member {name} live {live:?}, acknowledged {:?}",
            window
                .iter()
                .map(|s| s.members.get(name))
                .collect::<Vec<_>>()
        );
        per_member.push(states);
        let idx: Vec<u64> = live.collect();
        let b = g.member(name).unwrap().get_many(&idx).unwrap();
        for (r, &i) in idx.iter().enumerate() {
            assert_eq!(b.item_bytes(r), item_bytes(i), "{ctx}: {name} item {i:#x}");
        }
    }
    if history.get(p).is_some_and(|s| s.restores) {
        // The restore's own state is the window's last; every member there, or none.
        let last = window.len() - 1;
        let all_new = per_member.iter().all(|s| s.contains(&last));
        let all_old = per_member.iter().all(|s| s.iter().any(|&j| j < last));
        assert!(
            all_new || all_old,
            "{ctx}: a restore left members at two states: {per_member:?}"
        );
    }
    let listed: BTreeSet<String> = g.snapshots().unwrap().into_iter().collect();
    assert!(
        before.snapshots.keys().all(|s| listed.contains(s)),
        "{ctx}: snapshots {listed:?}, acknowledged {:?}",
        before.snapshots.keys()
    );
    assert!(
        listed.iter().all(|s| after.snapshots.contains_key(s)),
        "{ctx}: snapshots {listed:?}, taken {:?}",
        after.snapshots.keys()
    );
    if let Some((name, at)) = before.snapshots.iter().next_back() {
        let state = g.snapshot_state(name).unwrap();
        g.set_state(&state)
            .unwrap_or_else(|e| panic!("{ctx}: restore {name}: {e}"));
        for (m, range) in at {
            assert_eq!(
                &g.member(m).unwrap().live(),
                range,
                "{ctx}: {m} restored to {name}"
            );
        }
    }
    drop(g);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_crash_image_of_a_group_holds_acknowledged_members_and_checkpoints_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let scratch = tempfile::tempdir().unwrap();
    // Three members, each with its own files: 16 images per point keeps this near the
    // lane set's cost; REPLAYSTORE_CRASH_EXHAUSTIVE=64 runs the full enumeration.
    let io = sim_io_up_to(&dir, 0x6e0, 16);
    let template = Config::new(schema(), 16)
        .segment_slots(8)
        .seed(3)
        .io(io.clone());
    let mut g = replaystore::BufferGroup::create(&dir, Some(template)).unwrap();
    let mut snaps = BTreeMap::new();
    let mut history = vec![group_seen(&g, &snaps, true, false)];
    let mut checked = 0;
    for image in io.take_images() {
        check_group(&image, &history, scratch.path(), checked);
        checked += 1;
    }
    let mut rng = 0x9e0u64;
    for call in 1..=48u64 {
        io.set_phase(history.len());
        // Member "c" comes only after the first checkpoint; a restore follows a flush.
        let names: &[&str] = if snaps.is_empty() {
            &["a", "b"]
        } else {
            &["a", "b", "c"]
        };
        let (commits, restores) = match (call, xorshift(&mut rng) % 8) {
            (c, _) if c % 12 == 0 => {
                g.flush().unwrap();
                (true, false)
            }
            (c, _) if c % 12 == 1 && !snaps.is_empty() => {
                let name = snaps.keys().next().cloned().unwrap();
                let state = g.snapshot_state(&name).unwrap();
                g.set_state(&state).unwrap();
                (true, true)
            }
            (c, _) if c % 12 == 6 => {
                let state = g.get_state().unwrap();
                let at = group_seen(&g, &snaps, false, false).members;
                snaps.insert(state.name, at);
                (true, false)
            }
            (_, r) => {
                let name = names[(r as usize) % names.len()];
                let next = match g.member(name) {
                    Ok(m) => m.live().end,
                    Err(_) => g.add_member(name, None).unwrap().live().end,
                };
                let m = g.member_mut(name).unwrap();
                add_range(m, next, next + 1 + xorshift(&mut rng) % 3);
                (false, false)
            }
        };
        history.push(group_seen(&g, &snaps, commits, restores));
        for image in io.take_images() {
            check_group(&image, &history, scratch.path(), checked);
            checked += 1;
        }
    }
    io.set_phase(history.len());
    history.push(group_seen(&g, &snaps, true, false));
    g.close().unwrap();
    io.capture("after close");
    for image in io.take_images() {
        check_group(&image, &history, scratch.path(), checked);
        checked += 1;
    }
    report("group", &io, checked);
}
