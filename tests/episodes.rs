//! Promises of episodic buffers (issue 6, first part): every step carries its episode and
//! step, the table of episodes agrees with a naive model over a plain Vec of rows while
//! the ring wraps and evicts episodes in part, across reopening, and navigation follows
//! Tianshou's `prev` / `next`.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::Path;

use common::xorshift;
use replaystore::End;
use replaystore::{
    Column, Config, DType, EpisodeInfo, Error, ReplayBuffer, Request, Schema, verify,
};

const CAPACITY: u64 = 64;

fn schema() -> Schema {
    Schema::builder()
        .field("obs", DType::F32, &[3])
        .field("action", DType::I32, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap()
}

fn create(dir: &Path) -> ReplayBuffer {
    let config = Config::new(schema(), CAPACITY)
        .segment_slots(16)
        .episodic()
        .seed(3);
    ReplayBuffer::create(dir, config).unwrap()
}

/// One row as the model keeps it.
#[derive(Clone, Copy, Debug)]
struct Row {
    episode: u64,
    t: u64,
    reward: f32,
    end: Option<End>,
}

/// The naive model: every row ever added, in order; the live ones are the last
/// `CAPACITY` (no clear in these tests).
#[derive(Default)]
struct Model {
    rows: Vec<Row>,
    next_episode: u64,
    /// Episodes abandoned by a reset while open count as truncated.
    abandoned: Vec<u64>,
    /// Per episode whose start was evicted when the writer last rebuilt its table (on
    /// open): the head then. Its return counts only rows from there.
    seen_from: std::collections::HashMap<u64, u64>,
    /// Episodes older than the newest when the writer last opened: it read only their
    /// last rows, and sums their returns over the rows live when asked.
    read_late: std::collections::HashSet<u64>,
}

impl Model {
    fn head(&self) -> u64 {
        (self.rows.len() as u64).saturating_sub(CAPACITY)
    }

    fn open(&self) -> Option<Row> {
        self.rows
            .last()
            .copied()
            .filter(|r| r.end.is_none())
            .filter(|r| !self.abandoned.contains(&r.episode))
    }

    /// The episodes with a live row, as the writer's table must show them.
    fn episodes(&self) -> Vec<EpisodeInfo> {
        let mut out: Vec<EpisodeInfo> = Vec::new();
        for (i, r) in self.rows.iter().enumerate() {
            if r.t == 0 {
                out.push(EpisodeInfo {
                    id: r.episode,
                    start: i as u64,
                    rows: 0,
                    end: None,
                    ret: 0.0,
                    ret_complete: true,
                });
            }
            let e = out.last_mut().unwrap();
            e.rows += 1;
            let from = match self.read_late.contains(&e.id) {
                true => self.head(),
                false => self.seen_from.get(&e.id).copied().unwrap_or(0),
            };
            if r.t > 0 && i as u64 >= from {
                e.ret += f64::from(r.reward);
            }
            e.ret_complete = from <= e.start + 1;
            e.end = r.end;
        }
        for e in &mut out {
            if e.end.is_none() && self.abandoned.contains(&e.id) {
                e.end = Some(End::Truncated);
            }
        }
        out.retain(|e| e.last() >= self.head());
        out
    }

    /// The writer reopened and read its table from each episode's last row, and the
    /// newest episode's return from its live rows.
    fn rebuilt(&mut self) {
        let head = self.head();
        self.seen_from.clear();
        let episodes = self.episodes();
        if let Some((newest, older)) = episodes.split_last() {
            self.read_late.extend(older.iter().map(|e| e.id));
            if newest.start < head {
                self.seen_from.insert(newest.id, head);
            }
        }
    }
}

fn obs(i: u64) -> [f32; 3] {
    [i as f32, 0.5, -1.0]
}

/// Drives buffer and model with the same random resets and steps; checks every result.
fn drive(buf: &mut ReplayBuffer, model: &mut Model, rng: &mut u64, ops: usize) {
    for _ in 0..ops {
        let r = xorshift(rng);
        let index = model.rows.len() as u64;
        let open = model.open();
        // Mostly steps; a reset when nothing is open, sometimes one that abandons.
        let step_into = open.filter(|_| !r.is_multiple_of(97));
        if let Some(o) = step_into {
            step_row(buf, model, r, index, o);
        } else {
            if let Some(o) = open {
                model.abandoned.push(o.episode);
            }
            let info = buf.add_reset(&[Column::new("obs", &obs(index))]).unwrap();
            assert_eq!(
                (info.index, info.episode, info.t, info.ended),
                (index, model.next_episode, 0, None)
            );
            model.rows.push(Row {
                episode: model.next_episode,
                t: 0,
                reward: 0.0,
                end: None,
            });
            model.next_episode += 1;
        }
    }
}

/// One step row into the open episode `o`, in both, checking what add_step reports.
fn step_row(buf: &mut ReplayBuffer, model: &mut Model, r: u64, index: u64, o: Row) {
    let reward = ((r >> 20) % 7) as f32 - 2.0;
    let (terminated, truncated) = match (r >> 8) % 12 {
        0 => (true, false),
        1 => (false, true),
        _ => (false, false),
    };
    let action = (r % 5) as i32;
    let info = buf
        .add_step(
            &[
                Column::new("obs", &obs(index)),
                Column::scalar("action", &action),
                Column::scalar("reward", &reward),
            ],
            terminated,
            truncated,
        )
        .unwrap();
    let end = if terminated {
        Some(End::Terminated)
    } else if truncated {
        Some(End::Truncated)
    } else {
        None
    };
    model.rows.push(Row {
        episode: o.episode,
        t: o.t + 1,
        reward,
        end,
    });
    assert_eq!(
        (info.index, info.episode, info.t),
        (index, o.episode, (o.t + 1) as u32)
    );
    match info.ended {
        Some((ret, steps, start)) => {
            let e = model
                .episodes()
                .into_iter()
                .find(|e| e.id == o.episode)
                .unwrap();
            assert!(end.is_some());
            assert_eq!((steps, start), (e.rows - 1, e.start));
            assert!((ret - e.ret).abs() < 1e-9, "{ret} vs {}", e.ret);
        }
        None => assert!(end.is_none()),
    }
}

/// The buffer's table, navigation and items agree with the model.
fn check(buf: &ReplayBuffer, model: &Model) {
    let head = model.head();
    let tail = model.rows.len() as u64;
    assert_eq!(buf.live(), head..tail);
    let want = model.episodes();
    let got = buf.episodes().unwrap();
    assert_eq!(got.len(), want.len(), "{got:?}\n{want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            (g.id, g.start, g.rows, g.end, g.ret_complete),
            (w.id, w.start, w.rows, w.end, w.ret_complete)
        );
        assert!(
            (g.ret - w.ret).abs() < 1e-9,
            "episode {}: {} vs {}",
            g.id,
            g.ret,
            w.ret
        );
    }
    let open: Vec<u64> = buf
        .unfinished_episodes()
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    let want_open: Vec<u64> = want
        .iter()
        .filter(|e| e.end.is_none())
        .map(|e| e.id)
        .collect();
    assert_eq!(open, want_open);
    for i in head..tail {
        let row = model.rows[i as usize];
        let same = |j: u64| model.rows[j as usize].episode == row.episode;
        let prev = if i > head && same(i - 1) { i - 1 } else { i };
        let next = if i + 1 < tail && same(i + 1) {
            i + 1
        } else {
            i
        };
        assert_eq!(
            (buf.prev(i).unwrap(), buf.next(i).unwrap()),
            (prev, next),
            "index {i}"
        );
        assert_eq!(buf.episode(i).unwrap().id, row.episode);
        let b = buf.get(i).unwrap();
        assert_eq!(b.get::<f32>("obs").unwrap(), obs(i));
        assert_eq!(b.get::<f32>("reward").unwrap(), [row.reward]);
    }
}

#[test]
fn the_episode_table_matches_a_naive_model_while_the_ring_wraps_and_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir);
    let mut model = Model::default();
    let mut rng = 0x0000_e915_0de5_u64;
    for round in 0..30 {
        let ops = 1 + (xorshift(&mut rng) % 40) as usize;
        drive(&mut buf, &mut model, &mut rng, ops);
        check(&buf, &model);
        if round % 5 == 4 {
            buf.close().unwrap();
            buf = ReplayBuffer::open(&dir).unwrap();
            model.rebuilt();
            check(&buf, &model);
        }
    }
    assert!(
        model.rows.len() as u64 > 5 * CAPACITY,
        "the ring wrapped several times"
    );
    assert!(!model.abandoned.is_empty(), "some episode was abandoned");
    drop(buf);
    assert!(verify(&dir).unwrap().is_sound());
}

#[test]
fn episode_calls_out_of_order_are_typed_errors_that_add_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"));
    let step = |buf: &mut ReplayBuffer| {
        buf.add_step(
            &[
                Column::new("obs", &[0f32; 3]),
                Column::scalar("action", &1i32),
                Column::scalar("reward", &1f32),
            ],
            false,
            false,
        )
    };
    assert!(matches!(step(&mut buf), Err(Error::EpisodeOrder(_))));
    assert!(matches!(
        buf.add(&[Column::new("obs", &[0f32; 3])]),
        Err(Error::EpisodeOrder(_))
    ));
    // A reset row may leave out fields; an unknown one is still an error.
    assert!(matches!(
        buf.add_reset(&[Column::new("obs", &[0f32; 3]), Column::scalar("nope", &1u8)]),
        Err(Error::UnknownField { .. })
    ));
    assert!(buf.is_empty());
    buf.add_reset(&[Column::new("obs", &[0f32; 3])]).unwrap();
    step(&mut buf).unwrap();
    assert_eq!(buf.get(0).unwrap().get::<i32>("action").unwrap(), [0]);
    // A plain buffer has no episodes.
    let mut plain = ReplayBuffer::create(tmp.path().join("p"), Config::new(schema(), 8)).unwrap();
    assert!(matches!(
        plain.add_reset(&[Column::new("obs", &[0f32; 3])]),
        Err(Error::NotEpisodic { .. })
    ));
    assert!(matches!(plain.episodes(), Err(Error::NotEpisodic { .. })));
}

#[test]
fn verify_finds_a_step_header_out_of_its_episode() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir);
    let mut model = Model::default();
    let mut rng = 7u64;
    drive(&mut buf, &mut model, &mut rng, 20);
    buf.close().unwrap();
    assert!(verify(&dir).unwrap().is_sound());
    // Row 5's step number (offset 24 of the row), rewritten and re-checksummed as if a
    // writer had stored a wrong one: the checksum holds, the episode chain does not.
    let seg = dir.join("lane-0/seg-00000000.dat");
    let mut bytes = std::fs::read(&seg).unwrap();
    let stride = u64::from_le_bytes(bytes[56..64].try_into().unwrap()) as usize;
    let row = 4096 + 5 * stride;
    let t = u32::from_le_bytes(bytes[row + 24..row + 28].try_into().unwrap());
    bytes[row + 24..row + 28].copy_from_slice(&(t + 7).to_le_bytes());
    let payload_end = 32 + 12 + 4 + 4;
    let crc = {
        let mut h = crc32fast::Hasher::new_with_initial(5);
        h.update(&bytes[row + 16..row + payload_end]);
        h.finalize()
    };
    bytes[row + 8..row + 12].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    let report = verify(&dir).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == seg && p.what.contains("step header")),
        "{:?}",
        report.problems
    );
    // An open reads only each episode's last row (O(episodes)): row 5 is in the middle
    // of the first episode, so the buffer opens, and its draws never read that `t`.
    let buf = ReplayBuffer::open(&dir).unwrap();
    model.rebuilt();
    check(&buf, &model);
    buf.close().unwrap();
    // The newest row's (19: slot 3 of the second segment) `t` reaching below index 0:
    // the open reads it, and refuses.
    let seg = dir.join("lane-0/seg-00000001.dat");
    let mut bytes = std::fs::read(&seg).unwrap();
    let row = 4096 + 3 * stride;
    bytes[row + 24..row + 28].copy_from_slice(&1_000u32.to_le_bytes());
    let crc = {
        let mut h = crc32fast::Hasher::new_with_initial(5);
        h.update(&bytes[row + 16..row + payload_end]);
        h.finalize()
    };
    bytes[row + 8..row + 12].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    let e = ReplayBuffer::open(&dir).unwrap_err();
    assert!(e.to_string().contains("step header"), "{e}");
}

const KILL_ENV: &str = "REPLAYSTORE_EPISODE_KILL";

/// Adds episode rows forever, continuing whatever episode is open, one line per row
/// acknowledged: "index episode t".
#[test]
fn episode_kill_child() {
    let Ok(dir) = std::env::var(KILL_ENV) else {
        return;
    };
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let mut rng = u64::from(std::process::id()) | 1;
    loop {
        let r = xorshift(&mut rng);
        let index = buf.live().end;
        let info = if buf.unfinished_episodes().unwrap().is_empty() {
            buf.add_reset(&[Column::new("obs", &obs(index))]).unwrap()
        } else {
            let reward = (r % 3) as f32;
            buf.add_step(
                &[
                    Column::new("obs", &obs(index)),
                    Column::scalar("action", &1i32),
                    Column::scalar("reward", &reward),
                ],
                r.is_multiple_of(9),
                false,
            )
            .unwrap()
        };
        if r.is_multiple_of(50) {
            buf.flush().unwrap();
        }
        println!("{} {} {}", info.index, info.episode, info.t);
    }
}

#[test]
fn kill_9_while_adding_episodes_keeps_the_table_consistent_with_the_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    create(&dir).close().unwrap();
    let mut rng = 99u64;
    let mut acknowledged: Vec<(u64, u64, u32)> = Vec::new();
    for _ in 0..10 {
        let lines = 5 + xorshift(&mut rng) % 200;
        common::run_child_and_kill_after(
            "episode_kill_child",
            KILL_ENV,
            dir.to_str().unwrap(),
            lines,
            |l| {
                let v: Vec<u64> = l
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if let [i, e, t] = v[..] {
                    acknowledged.push((i, e, t as u32));
                }
            },
        );
        let buf = ReplayBuffer::open(&dir).unwrap();
        let live = buf.live();
        for &(i, e, t) in acknowledged.iter().filter(|a| live.contains(&a.0)) {
            let ep = buf.episode(i).unwrap();
            assert_eq!((ep.id, i - ep.start), (e, u64::from(t)), "index {i}");
            assert_eq!(buf.get(i).unwrap().get::<f32>("obs").unwrap(), obs(i));
        }
        let last = acknowledged.last().map_or(0, |a| a.0 + 1);
        assert!(live.end >= last, "acknowledged {last}, recovered {live:?}");
        drop(buf);
        assert!(verify(&dir).unwrap().is_sound());
    }
    assert!(acknowledged.len() > 300);
}

/// With whole-episode eviction and priorities, a kill between an eviction that jumped
/// the head past an episode and the commit that records it must still leave whole
/// episodes only (the open one excepted), and no priority on a row that ends no step.
#[test]
fn kill_9_with_whole_episode_eviction_leaves_only_whole_episodes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let config = Config::new(schema(), CAPACITY)
        .segment_slots(16)
        .whole_episodes()
        .prioritized(0.6, 0.0)
        .seed(3);
    ReplayBuffer::create(&dir, config).unwrap().close().unwrap();
    let mut rng = 7u64;
    let mut acknowledged = 0u64;
    for _ in 0..40 {
        let lines = 20 + xorshift(&mut rng) % 200;
        common::run_child_and_kill_after(
            "episode_kill_child",
            KILL_ENV,
            dir.to_str().unwrap(),
            lines,
            |_| {
                acknowledged += 1;
            },
        );
        let buf = ReplayBuffer::open(&dir).unwrap();
        let live = buf.live();
        let episodes = buf.episodes().unwrap();
        let first = episodes.first().unwrap();
        assert!(
            first.start >= live.start || first.end.is_none(),
            "{first:?} with live {live:?}"
        );
        let all: Vec<u64> = live.clone().collect();
        for (&i, p) in all.iter().zip(buf.priorities(&all).unwrap()) {
            let e = buf.episode(i).unwrap();
            let ends_a_step = i > e.start && i > live.start;
            assert_eq!(p > 0.0, ends_a_step, "row {i} of {e:?}: priority {p}");
        }
        drop(buf);
        assert!(verify(&dir).unwrap().is_sound());
    }
    assert!(acknowledged > 3 * CAPACITY, "{acknowledged} rows added");
}

#[test]
fn set_state_brings_back_the_episode_table_and_the_open_episode_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir);
    let mut model = Model::default();
    let mut rng = 11u64;
    drive(&mut buf, &mut model, &mut rng, 50);
    let state = buf.get_state().unwrap();
    let before = buf.episodes().unwrap();
    let saved_rows = model.rows.clone();
    let saved = (model.next_episode, model.abandoned.clone());
    drive(&mut buf, &mut model, &mut rng, 100);
    buf.set_state(&state).unwrap();
    let after = buf.episodes().unwrap();
    assert_eq!(after.len(), before.len());
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(
            (a.id, a.start, a.rows, a.end),
            (b.id, b.start, b.rows, b.end)
        );
    }
    // Going on from the restored state: the model goes back too.
    model.rows = saved_rows;
    (model.next_episode, model.abandoned) = saved;
    model.rebuilt();
    check(&buf, &model);
    drive(&mut buf, &mut model, &mut rng, 60);
    check(&buf, &model);
    let frozen = ReplayBuffer::open_snapshot(&dir, &state.name).unwrap();
    assert_eq!(frozen.episodes().unwrap().len(), before.len());
}

/// The n-step transition ending its first step at row `j`, computed over the model's
/// plain list of rows: (obs row, bootstrap row, discounted return, discount,
/// terminated, truncated).
fn naive_transition(
    model: &Model,
    j: usize,
    n: u64,
    gamma: f64,
) -> (usize, usize, f64, f64, bool, bool) {
    let rows = &model.rows;
    let episode = rows[j].episode;
    let mut g = 0.0;
    let mut w = 1.0;
    let mut k = 0;
    let mut row = j;
    loop {
        g += w * f64::from(rows[row].reward);
        w *= gamma;
        k += 1;
        let last_of_episode =
            rows[row].end.is_some() || row + 1 == rows.len() || rows[row + 1].episode != episode;
        if k == n || last_of_episode {
            break;
        }
        row += 1;
    }
    let at_end =
        rows[row].end.is_some() || (row + 1 < rows.len() && rows[row + 1].episode != episode);
    let terminated = at_end && rows[row].end == Some(End::Terminated);
    let truncated = at_end && !terminated;
    let discount = if terminated {
        0.0
    } else {
        gamma.powi(k as i32)
    };
    (j - 1, row, g, discount, terminated, truncated)
}

#[test]
fn transitions_and_nstep_returns_match_a_naive_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir);
    let mut model = Model::default();
    let mut rng = 5u64;
    let mut seen = std::collections::HashSet::new();
    for round in 0..20 {
        drive(&mut buf, &mut model, &mut rng, 25);
        if buf.live().end - buf.live().start < 2 {
            continue;
        }
        for (n, gamma) in [(1u64, 0.9f64), (3, 0.9), (5, 0.5)] {
            let spec = Request::transitions(64, &["obs"]).nstep(n, gamma);
            let t = match buf.sample(spec) {
                Ok(t) => t,
                Err(Error::InvalidSample(_)) => continue,
                Err(e) => panic!("{e}"),
            };
            for i in 0..t.len() {
                let j = t.indices()[i] as usize;
                assert!(
                    model.rows[j].t >= 1,
                    "round {round}: row {j} is a reset row"
                );
                assert!(j as u64 > buf.live().start);
                let (o, b, g, d, term, trunc) = naive_transition(&model, j, n, gamma);
                assert_eq!(
                    t.get::<f32>("obs").unwrap()[3 * i..3 * i + 3],
                    obs(o as u64)
                );
                assert_eq!(
                    t.get::<f32>("next_obs").unwrap()[3 * i..3 * i + 3],
                    obs(b as u64)
                );
                assert_eq!(t.get::<f32>("reward").unwrap()[i], model.rows[j].reward);
                assert!(
                    (t.get::<f64>("returns").unwrap()[i] - g).abs() < 1e-9,
                    "row {j} n {n}: {} vs {g}",
                    t.get::<f64>("returns").unwrap()[i]
                );
                assert!(
                    (t.get::<f64>("discounts").unwrap()[i] - d).abs() < 1e-12,
                    "row {j} n {n}"
                );
                assert_eq!(
                    (
                        t.get::<bool>("terminated").unwrap()[i],
                        t.get::<bool>("truncated").unwrap()[i]
                    ),
                    (term, trunc),
                    "row {j} n {n}"
                );
                // The observations carry only the observation fields.
                assert!(t.field("next_reward").is_none() && t.field("next_action").is_none());
                seen.insert(j);
            }
        }
        if round % 7 == 6 {
            buf.close().unwrap();
            buf = ReplayBuffer::open(&dir).unwrap();
            model.rebuilt();
        }
    }
    assert!(seen.len() > 100, "{} distinct steps drawn", seen.len());
}

#[test]
fn inspect_counts_episodes_and_their_lengths() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir);
    let mut model = Model::default();
    let mut rng = 21u64;
    drive(&mut buf, &mut model, &mut rng, 150);
    buf.close().unwrap();
    model.rebuilt();
    let stats = replaystore::inspect(&dir).unwrap().episodes.unwrap();
    let want = model.episodes();
    let steps: Vec<u64> = want.iter().map(EpisodeInfo::steps).collect();
    assert_eq!(stats.problem, None);
    assert_eq!(stats.count, want.len() as u64);
    assert_eq!(
        stats.ended,
        want.iter().filter(|e| e.end.is_some()).count() as u64
    );
    let (lo, mean, hi) = stats.steps.unwrap();
    assert_eq!(
        (lo, hi),
        (*steps.iter().min().unwrap(), *steps.iter().max().unwrap())
    );
    assert!((mean - steps.iter().sum::<u64>() as f64 / steps.len() as f64).abs() < 1e-9);
    let whole: Vec<f64> = want
        .iter()
        .filter(|e| e.end.is_some() && e.ret_complete)
        .map(|e| e.ret)
        .collect();
    let mean_return = whole.iter().sum::<f64>() / whole.len() as f64;
    assert!((stats.mean_return.unwrap() - mean_return).abs() < 1e-9);
}

/// Promise: transitions read at given step rows (`Request::transitions_at`) are the ones a
/// draw returned at those rows, every array equal (n-step returns, discounts, flags,
/// stacked frames), the RNG untouched; a row that ends no step (a reset row) or an
/// evicted one is refused by name.
#[test]
fn transitions_read_at_given_steps_equal_the_drawn_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"));
    let mut s = 5u64;
    for e in 0..30u64 {
        let len = 1 + xorshift(&mut s) % 6;
        let obs: Vec<f32> = (0..=len).flat_map(|t| [e as f32, t as f32, 0.0]).collect();
        let act: Vec<i32> = (0..len as i32).collect();
        let rew: Vec<f32> = (0..len).map(|t| (t + e) as f32).collect();
        let cols = [Column::new("action", &act), Column::new("reward", &rew)];
        let shape = [len as usize + 1, 3];
        let obs = Column::from_bytes("obs", DType::F32, &shape, bytemuck::cast_slice(&obs));
        buf.add_episode(&[obs], &cols, e % 3 == 0, e % 3 == 1)
            .unwrap();
    }
    let obs = ["obs"];
    let request = || Request::transitions(64, &obs).nstep(3, 0.9).stack(2);
    let at_steps = |at| Request::transitions_at(at, &obs).nstep(3, 0.9).stack(2);
    let drawn = buf.sample(request()).unwrap();
    let again = buf.sample(request()).unwrap();
    let at = drawn.indices().to_vec();
    let read = buf.sample(at_steps(&at)).unwrap();
    let arrays = |b: &replaystore::Batch| -> Vec<(String, Vec<u8>)> {
        (b.fields().iter())
            .filter(|f| f.name() != "weights")
            .map(|f| (f.name().to_owned(), f.bytes().to_vec()))
            .collect()
    };
    assert_eq!(arrays(&read), arrays(&drawn));
    // The read moved no RNG: the next draw is the one after `drawn`.
    buf.reseed(3);
    let first = buf.sample(request()).unwrap();
    let _ = buf.sample(at_steps(&at)).unwrap();
    let second = buf.sample(request()).unwrap();
    assert_eq!(arrays(&first), arrays(&drawn));
    assert_eq!(arrays(&second), arrays(&again));
    // A reset row ends no step; an evicted row is gone.
    let reset = buf.episodes().unwrap().last().unwrap().start;
    let pair = [at[0], reset];
    let bad = buf.sample(at_steps(&pair));
    assert!(
        matches!(&bad, Err(Error::InvalidSample(m)) if m.contains(&format!("index {reset}"))),
        "{bad:?}"
    );
    let bad = buf.sample(at_steps(&[0]));
    assert!(
        matches!(bad, Err(Error::Evicted { index: 0, .. })),
        "{bad:?}"
    );
}

/// Uniform episode draws take only episodes with every row stored and ended: never the
/// oldest once the ring has cut it, never the one still open. Each whole one is drawn
/// about as often as the others, and a reader with the same seed draws the same.
#[test]
fn uniform_episode_draws_skip_the_cut_oldest_and_the_open_newest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir);
    // Episodes of 5 rows (a reset and 4 steps) end to end; 16 of them lap the ring of
    // 64 rows: the head is at row 16, inside episode 3 (rows 15..20).
    for _ in 0..16 {
        buf.add_reset(&[Column::new("obs", &obs(0))]).unwrap();
        for t in 1..=4u64 {
            let o = obs(t);
            let row = [
                Column::new("obs", &o),
                Column::scalar("action", &0i32),
                Column::scalar("reward", &0f32),
            ];
            buf.add_step(&row, t == 4, false).unwrap();
        }
    }
    // One open: a reset and a step of episode 16.
    buf.add_reset(&[Column::new("obs", &obs(0))]).unwrap();
    let o = obs(1);
    let row = [
        Column::new("obs", &o),
        Column::scalar("action", &0i32),
        Column::scalar("reward", &0f32),
    ];
    buf.add_step(&row, false, false).unwrap();
    buf.flush().unwrap();
    let head = buf.live().start;
    assert!(
        !head.is_multiple_of(5),
        "the head cuts an episode (head {head})"
    );
    let mut reader = replaystore::Reader::open(&dir).unwrap();
    buf.reseed(5);
    reader.reseed(5);
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..100 {
        let eps = buf.sample(Request::episodes(8)).unwrap();
        let theirs = reader.sample(Request::episodes(8)).unwrap();
        assert_eq!(
            eps.indices(),
            theirs.indices(),
            "the reader drew other episodes"
        );
        let offsets = eps.get::<u64>("offsets").unwrap();
        for w in offsets.windows(2) {
            let rows = &eps.indices()[w[0] as usize..w[1] as usize];
            assert_eq!(rows.len(), 5, "episode at {rows:?} is not whole");
            assert!(
                rows[0] >= head && rows[0].is_multiple_of(5),
                "episode at {rows:?}"
            );
            *counts.entry(rows[0]).or_insert(0u32) += 1;
        }
    }
    // The whole episodes: from the first start past the head to the last ended one.
    let whole: Vec<u64> = (head.div_ceil(5) * 5..80).step_by(5).collect();
    assert_eq!(counts.keys().copied().collect::<Vec<_>>(), whole);
    // 800 draws over 12 episodes: about 67 each; 30..110 is far outside chance.
    assert!(
        counts.values().all(|&c| (30..110).contains(&c)),
        "{counts:?}"
    );
}
