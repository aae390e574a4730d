//! Promises of the sampling modes over episode storage (issue 6): n-step transitions,
//! stacked frames, sequences with burn-in and whole episodes each agree with a naive
//! reference computed from a plain Vec of every row ever added. Episodes have random
//! lengths of 1 to 500 steps and end terminated, truncated, abandoned by a reset, or not
//! at all; the ring (2,048 rows) wraps over them, so some are partly evicted and some
//! span the ring's end.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::{HashMap, HashSet};

use common::xorshift;
use replaystore::End;
use replaystore::{
    Batch, Column, Config, DType, EpisodeInfo, Error, ReplayBuffer, Request, Schema,
};

const CAPACITY: u64 = 2048;

fn schema() -> Schema {
    Schema::builder()
        .field("obs", DType::F32, &[2])
        .field("action", DType::I32, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap()
}

/// The observation of row `i`: names the row, so a gathered frame shows where it came
/// from.
fn obs(i: u64) -> [f32; 2] {
    [i as f32, -(i as f32)]
}

/// One row as the reference keeps it.
#[derive(Clone, Copy, Debug)]
struct Row {
    episode: u64,
    t: u64,
    reward: f32,
    action: i32,
    /// Set on an episode's last row: how it ended (abandoned counts as truncated).
    end: Option<End>,
}

/// Every row ever added and the oldest live one: the last `CAPACITY` rows, or with
/// whole-episode eviction, the rows from the oldest episode left whole.
#[derive(Default)]
struct Reference {
    rows: Vec<Row>,
    head: usize,
    whole_episodes: bool,
}

impl Reference {
    fn live(&self, i: usize) -> bool {
        i >= self.head && i < self.rows.len()
    }

    /// Adds a row, evicting as the buffer must.
    fn push(&mut self, row: Row) {
        if self.rows.len() - self.head == CAPACITY as usize {
            // The next reset row after the head, if the head's episode is not the one
            // being written.
            let next = (self.head + 1..self.rows.len()).find(|&i| self.rows[i].t == 0);
            self.head = match next {
                Some(n) if self.whole_episodes => n,
                _ => self.head + 1,
            };
        }
        self.rows.push(row);
    }

    /// The row of the same episode before `i` (itself at a reset row), as Tianshou's
    /// `prev`, but without regard to eviction.
    fn prev(&self, i: usize) -> usize {
        if self.rows[i].t == 0 { i } else { i - 1 }
    }

    /// Whether row `i` is the last its episode has (so far).
    fn last_of_episode(&self, i: usize) -> bool {
        self.rows[i].end.is_some()
            || i + 1 == self.rows.len()
            || self.rows[i + 1].episode != self.rows[i].episode
    }

    /// The `k` frames up to row `r`, oldest first, repeating the reset row's frame;
    /// `None` when one of them was evicted.
    fn stack(&self, r: usize, k: usize) -> Option<Vec<usize>> {
        let mut rows = vec![r];
        let mut cur = r;
        for _ in 1..k {
            cur = self.prev(cur);
            rows.push(cur);
        }
        rows.reverse();
        rows.iter().all(|&x| self.live(x)).then_some(rows)
    }

    /// The n-step transition whose first step ends at row `j`: (bootstrap row,
    /// discounted return, discount, terminated, truncated).
    fn nstep(&self, j: usize, n: usize, gamma: f64) -> (usize, f64, f64, bool, bool) {
        let (mut g, mut w, mut row) = (0.0, 1.0, j);
        for k in 1.. {
            g += w * f64::from(self.rows[row].reward);
            w *= gamma;
            if k == n || self.last_of_episode(row) {
                let end = self.ended_at(row);
                let discount = if end == Some(End::Terminated) {
                    0.0
                } else {
                    gamma.powi(k as i32)
                };
                return (
                    row,
                    g,
                    discount,
                    end == Some(End::Terminated),
                    end == Some(End::Truncated),
                );
            }
            row += 1;
        }
        unreachable!()
    }

    /// How the episode ended at row `i`, if `i` is its final row (an episode followed
    /// by another's reset row without an end was abandoned: truncated).
    fn ended_at(&self, i: usize) -> Option<End> {
        match self.rows[i].end {
            Some(end) => Some(end),
            None if i + 1 < self.rows.len() && self.rows[i + 1].episode != self.rows[i].episode => {
                Some(End::Truncated)
            }
            None => None,
        }
    }
}

/// Adds `episodes` episodes of 1 to 500 steps to both: 40% terminated, 30% truncated,
/// 20% abandoned (the next reset comes without an end), 10% left open when another
/// call adds more (then abandoned by its first reset).
fn add_episodes(buf: &mut ReplayBuffer, reference: &mut Reference, rng: &mut u64, episodes: usize) {
    for _ in 0..episodes {
        let steps = 1 + xorshift(rng) % 500;
        let how = xorshift(rng) % 10;
        let episode = buf
            .add_reset(&[Column::new("obs", &obs(reference.rows.len() as u64))])
            .unwrap()
            .episode;
        if let Some(last) = reference.rows.last_mut()
            && last.end.is_none()
        {
            last.end = Some(End::Truncated);
        }
        reference.push(Row {
            episode,
            t: 0,
            reward: 0.0,
            action: 0,
            end: None,
        });
        for t in 1..=steps {
            let r = xorshift(rng);
            let index = reference.rows.len() as u64;
            let reward = (r % 11) as f32 - 5.0;
            let action = (r >> 8) as i32 % 6;
            let end = match (t == steps, how) {
                (true, 0..=3) => Some(End::Terminated),
                (true, 4..=6) => Some(End::Truncated),
                _ => None,
            };
            buf.add_step(
                &[
                    Column::new("obs", &obs(index)),
                    Column::scalar("action", &action),
                    Column::scalar("reward", &reward),
                ],
                end == Some(End::Terminated),
                end == Some(End::Truncated),
            )
            .unwrap();
            reference.push(Row {
                episode,
                t,
                reward,
                action,
                end,
            });
        }
    }
}

/// The episodes a draw returned, as the buffer's table records them (by the ids the
/// draw's `episodes` array names, in order).
fn drawn_episodes(buf: &ReplayBuffer, batch: &Batch) -> Vec<EpisodeInfo> {
    let table = buf.episodes().unwrap();
    (batch.get::<u64>("episodes").unwrap().iter())
        .map(|id| {
            *table
                .iter()
                .find(|e| e.id == *id)
                .expect("a drawn episode is live")
        })
        .collect()
}

fn create(dir: &std::path::Path) -> ReplayBuffer {
    let config = Config::new(schema(), CAPACITY)
        .segment_slots(256)
        .episodic()
        .seed(11);
    ReplayBuffer::create(dir, config).unwrap()
}

fn obs_at(values: &[f32], i: usize) -> u64 {
    assert_eq!(values[2 * i], -values[2 * i + 1]);
    values[2 * i] as u64
}

#[test]
fn stacked_nstep_transitions_match_the_reference_while_the_ring_wraps() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create(&dir);
    let mut reference = Reference::default();
    let mut rng = 17u64;
    let mut drawn = HashSet::new();
    let mut stacks_at_reset = 0;
    for round in 0..24 {
        add_episodes(&mut buf, &mut reference, &mut rng, 3);
        for (n, gamma, k) in [
            (1usize, 0.9f64, 1usize),
            (3, 0.9, 4),
            (5, 0.5, 2),
            (1, 0.99, 4),
        ] {
            for window in [false, true] {
                let spec = Request::transitions(200, &["obs"])
                    .nstep(n as u64, gamma)
                    .stack(k as u64);
                let spec = if window { spec.window() } else { spec };
                let t = buf.sample(spec).unwrap();
                // Frame f of transition i's obs and next_obs, whichever mode.
                let obs_frame = |i: usize, f: usize| {
                    if window {
                        obs_at(t.get::<f32>("obs").unwrap(), i * (k + n) + f)
                    } else {
                        obs_at(t.get::<f32>("obs").unwrap(), i * k + f)
                    }
                };
                let next_frame = |i: usize, f: usize| {
                    if window {
                        let off = t.get::<u32>("next_offsets").unwrap()[i] as usize;
                        obs_at(t.get::<f32>("obs").unwrap(), i * (k + n) + off + f)
                    } else {
                        obs_at(t.get::<f32>("next_obs").unwrap(), i * k + f)
                    }
                };
                let shape = match (window, k) {
                    (true, _) => vec![200, k + n, 2],
                    (false, 1) => vec![200, 2],
                    (false, _) => vec![200, k, 2],
                };
                // The observations: the windows in window mode, else the obs stacks.
                assert_eq!(t.field("obs").unwrap().shape(), shape);
                for i in 0..t.len() {
                    let j = t.indices()[i] as usize;
                    let what = format!("round {round} row {j} n {n} k {k} window {window}");
                    assert!(reference.rows[j].t >= 1, "{what}: a reset row ends no step");
                    // Drawn only when every frame of the observation is stored.
                    let frames = reference
                        .stack(j - 1, k)
                        .unwrap_or_else(|| panic!("{what}: frames evicted"));
                    let (boot, g, d, term, trunc) = reference.nstep(j, n, gamma);
                    let next_frames = reference.stack(boot, k).unwrap();
                    for f in 0..k {
                        assert_eq!(obs_frame(i, f), frames[f] as u64, "{what}: obs frame {f}");
                        assert_eq!(
                            next_frame(i, f),
                            next_frames[f] as u64,
                            "{what}: next frame {f}"
                        );
                    }
                    if window {
                        assert_eq!(
                            t.get::<u32>("next_offsets").unwrap()[i] as usize,
                            boot + 1 - j,
                            "{what}"
                        );
                    }
                    stacks_at_reset += usize::from(frames[0] == frames[k - 1] && k > 1);
                    assert_eq!(
                        t.get::<i32>("action").unwrap()[i],
                        reference.rows[j].action,
                        "{what}"
                    );
                    assert!(
                        (t.get::<f64>("returns").unwrap()[i] - g).abs() < 1e-9,
                        "{what}: {} vs {g}",
                        t.get::<f64>("returns").unwrap()[i]
                    );
                    assert!(
                        (t.get::<f64>("discounts").unwrap()[i] - d).abs() < 1e-12,
                        "{what}"
                    );
                    assert_eq!(
                        (
                            t.get::<bool>("terminated").unwrap()[i],
                            t.get::<bool>("truncated").unwrap()[i]
                        ),
                        (term, trunc),
                        "{what}"
                    );
                    drawn.insert(j);
                }
            }
        }
        if round % 8 == 7 {
            buf.close().unwrap();
            buf = ReplayBuffer::open(&dir).unwrap();
        }
    }
    assert!(
        reference.rows.len() > 3 * CAPACITY as usize,
        "the ring wrapped: {}",
        reference.rows.len()
    );
    assert!(drawn.len() > 2000, "{} distinct steps drawn", drawn.len());
    assert!(
        stacks_at_reset > 0,
        "no stack was padded at an episode start"
    );
}

/// The frames before the first stored row of a partly evicted episode are gone: no
/// stack that needs them is drawn, and a buffer holding no complete stack says so.
/// The reward of step row `t` of the episode below: distinct per step, exact in every
/// type the test stores it as.
fn typed_reward(t: u64) -> i16 {
    (t as i16 % 11) - 5
}

#[test]
fn nstep_returns_sum_rewards_of_any_scalar_type() {
    // f32 rewards are read by a fast path; every other type by the general one.
    for dtype in [DType::F64, DType::I16, DType::F32] {
        let tmp = tempfile::tempdir().unwrap();
        let schema = Schema::builder()
            .field("obs", DType::F32, &[])
            .field("reward", dtype, &[])
            .build()
            .unwrap();
        let config = Config::new(schema, 64).segment_slots(16).episodic().seed(5);
        let mut buf = ReplayBuffer::create(tmp.path().join("b"), config).unwrap();
        // Episodes of 9 steps (10 rows), the last terminated; the ring wraps over them.
        for e in 0..12u64 {
            let base = e * 10;
            buf.add_reset(&[Column::scalar("obs", &(base as f32))])
                .unwrap();
            for t in 1..=9u64 {
                let r = typed_reward(t);
                let reward = match dtype {
                    DType::F64 => f64::from(r).to_le_bytes().to_vec(),
                    DType::I16 => r.to_le_bytes().to_vec(),
                    _ => f32::from(r).to_le_bytes().to_vec(),
                };
                let obs = (base + t) as f32;
                buf.add_step(
                    &[
                        Column::scalar("obs", &obs),
                        Column::from_bytes("reward", dtype, &[], &reward),
                    ],
                    t == 9,
                    false,
                )
                .unwrap();
            }
        }
        let gamma = 0.5;
        let spec = Request::transitions(300, &["obs"]).nstep(3, gamma);
        let got = buf.sample(spec).unwrap();
        let obs = got.get::<f32>("obs").unwrap();
        assert_eq!(got.len(), 300);
        for (&o, &g) in obs.iter().zip(got.get::<f64>("returns").unwrap()) {
            // The step's first reward belongs to step t (row t of its episode).
            let t = o as u64 % 10 + 1;
            let steps = 3.min(10 - t);
            let want: f64 = (0..steps)
                .map(|s| gamma.powi(s as i32) * f64::from(typed_reward(t + s)))
                .sum();
            assert_eq!(g, want, "{dtype:?}: step {t}");
        }
    }
}

#[test]
fn stacks_needing_evicted_frames_are_never_drawn() {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::new(schema(), 64)
        .segment_slots(16)
        .episodic()
        .seed(2);
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), config).unwrap();
    buf.add_reset(&[Column::new("obs", &obs(0))]).unwrap();
    for i in 1..100u64 {
        let o = obs(i);
        let step = [
            Column::new("obs", &o),
            Column::scalar("action", &0i32),
            Column::scalar("reward", &1.0f32),
        ];
        buf.add_step(&step, false, false).unwrap();
    }
    // Rows 36..100 live, all of episode 0 whose reset row 0 is gone.
    let t = buf
        .sample(Request::transitions(500, &["obs"]).stack(8))
        .unwrap();
    let o = t.get::<f32>("obs").unwrap();
    for i in 0..t.len() {
        let j = t.indices()[i];
        assert!(j > 36 + 7, "row {j}: its stack reaches below the head");
        assert_eq!(obs_at(o, i * 8), j - 8);
    }
    let err = buf
        .sample(Request::transitions(4, &["obs"]).stack(65))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidSample(_)), "{err}");
    let err = buf
        .sample(Request::transitions(4, &["obs"]).stack(0))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidSample(_)), "{err}");
}

impl Reference {
    /// The step rows of a sequence whose first trained step is row `j`: `Some(p)` for a
    /// step row of `j`'s episode, `None` for padding.
    fn sequence(&self, j: usize, burn_in: usize, len: usize) -> Vec<Option<usize>> {
        let episode = self.rows[j].episode;
        (0..burn_in + len)
            .map(|q| {
                let p = (j + q).checked_sub(burn_in)?;
                let row = self.rows.get(p)?;
                (row.episode == episode && row.t >= 1).then_some(p)
            })
            .collect()
    }
}

fn create_with(dir: &std::path::Path, config: impl Fn(Config) -> Config) -> ReplayBuffer {
    let config = config(Config::new(schema(), CAPACITY).segment_slots(256).seed(11));
    ReplayBuffer::create(dir, config).unwrap()
}

#[test]
fn sequences_with_burn_in_match_the_reference_and_never_cross_episodes() {
    use replaystore::Request;
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"));
    let mut reference = Reference::default();
    let mut rng = 23u64;
    let (mut padded_front, mut padded_back) = (0, 0);
    for round in 0..16 {
        add_episodes(&mut buf, &mut reference, &mut rng, 3);
        for (len, burn_in) in [(1usize, 0usize), (8, 4), (40, 20)] {
            let spec = Request::sequences(64, len as u64, &["obs"]).burn_in(burn_in as u64);
            let s = buf.sample(spec).unwrap();
            let w = len + burn_in;
            assert_eq!(s.field("obs").unwrap().shape(), vec![64, w, 2]);
            let (o, next) = (
                s.get::<f32>("obs").unwrap(),
                s.get::<f32>("next_obs").unwrap(),
            );
            let action = s.get::<i32>("action").unwrap();
            for i in 0..s.len() {
                let j = s.indices()[i] as usize;
                let what = format!("round {round} start {j} len {len} burn-in {burn_in}");
                let want = reference.sequence(j, burn_in, len);
                assert!(
                    want[burn_in].is_some(),
                    "{what}: the first trained step is a step"
                );
                for (q, p) in want.iter().enumerate() {
                    let at = i * w + q;
                    assert_eq!(
                        s.get::<bool>("mask").unwrap()[at],
                        p.is_some(),
                        "{what} position {q}"
                    );
                    match *p {
                        Some(p) => {
                            // Every step shown, burn-in included, is stored.
                            assert!(reference.live(p - 1), "{what}: row {} evicted", p - 1);
                            assert_eq!(obs_at(o, at), (p - 1) as u64, "{what} position {q}");
                            assert_eq!(obs_at(next, at), p as u64, "{what} position {q}");
                            assert_eq!(action[at], reference.rows[p].action, "{what}");
                            let end = reference.ended_at(p);
                            assert_eq!(
                                s.get::<bool>("terminated").unwrap()[at],
                                end == Some(End::Terminated)
                            );
                            assert_eq!(
                                s.get::<bool>("truncated").unwrap()[at],
                                end == Some(End::Truncated)
                            );
                        }
                        None => {
                            assert_eq!((o[2 * at], next[2 * at], action[at]), (0.0, 0.0, 0));
                            assert!(
                                !s.get::<bool>("terminated").unwrap()[at]
                                    && !s.get::<bool>("truncated").unwrap()[at]
                            );
                            if q < burn_in {
                                padded_front += 1;
                            } else {
                                padded_back += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        padded_front > 0 && padded_back > 0,
        "{padded_front} {padded_back}"
    );
}

#[test]
fn whole_episodes_are_drawn_complete_and_match_their_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"));
    let mut reference = Reference::default();
    let mut rng = 29u64;
    let mut seen = HashSet::new();
    for _ in 0..16 {
        add_episodes(&mut buf, &mut reference, &mut rng, 3);
        let complete: Vec<u64> = buf
            .episodes()
            .unwrap()
            .iter()
            .filter(|e| e.end.is_some() && reference.live(e.start as usize))
            .map(|e| e.id)
            .collect();
        let eps = match buf.sample(Request::episodes(8)) {
            Ok(eps) => eps,
            Err(Error::InvalidSample(_)) if complete.is_empty() => continue,
            Err(e) => panic!("{e} with {} complete", complete.len()),
        };
        let o = eps.get::<f32>("obs").unwrap();
        let offsets = eps.get::<u64>("offsets").unwrap();
        for (i, e) in drawn_episodes(&buf, &eps).iter().enumerate() {
            assert!(complete.contains(&e.id), "episode {} is not complete", e.id);
            let rows = offsets[i] as usize..offsets[i + 1] as usize;
            assert_eq!(rows.len() as u64, e.steps() + 1);
            for (k, r) in rows.enumerate() {
                let index = e.start as usize + k;
                assert_eq!(eps.indices()[r], index as u64);
                assert_eq!(obs_at(o, r), index as u64);
                assert_eq!(reference.rows[index].episode, e.id);
            }
            assert!(reference.ended_at(e.last() as usize).is_some());
            seen.insert(e.id);
        }
    }
    assert!(seen.len() > 10, "{} distinct episodes drawn", seen.len());
}

/// With whole-episode eviction every stored episode keeps all its rows (the one being
/// written excepted, when it outgrows the ring), across reopening.
#[test]
fn whole_episode_eviction_keeps_every_episode_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let mut buf = create_with(&dir, Config::whole_episodes);
    let mut reference = Reference {
        whole_episodes: true,
        ..Reference::default()
    };
    let mut rng = 31u64;
    let mut frozen = None;
    for round in 0..30 {
        if round == 5 {
            // A snapshot shares the segments the jumps later clear stamps in.
            frozen = Some((buf.get_state().unwrap(), buf.live()));
        }
        add_episodes(&mut buf, &mut reference, &mut rng, 2);
        assert_eq!(
            buf.live(),
            reference.head as u64..reference.rows.len() as u64,
            "round {round}"
        );
        let eps = buf.episodes().unwrap();
        let first = eps.first().unwrap();
        assert!(
            first.start >= buf.live().start || first.end.is_none(),
            "round {round}: {first:?}"
        );
        // Nothing is sampled from a partly stored episode.
        let batch = buf.sample(Request::episodes(4)).unwrap();
        let drawn = drawn_episodes(&buf, &batch);
        assert!(drawn.iter().all(|e| e.start >= buf.live().start));
        if round % 10 == 9 {
            buf.close().unwrap();
            buf = ReplayBuffer::open(&dir).unwrap();
            assert_eq!(
                buf.live(),
                reference.head as u64..reference.rows.len() as u64
            );
        }
    }
    let (state, live) = frozen.unwrap();
    let snap = ReplayBuffer::open_snapshot(&dir, &state.name).unwrap();
    assert_eq!(snap.live(), live);
    let o = snap.get_many(&live.clone().collect::<Vec<_>>()).unwrap();
    for (k, i) in live.enumerate() {
        assert_eq!(
            obs_at(o.get::<f32>("obs").unwrap(), k),
            i,
            "snapshot row {i}"
        );
    }
    drop(snap);
    assert!(
        reference.head > 0 && buf.len() < CAPACITY,
        "the head jumped over episodes"
    );
    buf.close().unwrap();
    assert!(replaystore::verify(&dir).unwrap().is_sound());
}

/// Prioritized transitions: reset rows and rows whose observation row is evicted are
/// never drawn; draws follow the priorities set on step rows, with importance weights.
#[test]
fn prioritized_transitions_follow_step_priorities_and_skip_reset_rows() {
    use replaystore::Request;
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create_with(&tmp.path().join("b"), |c| {
        c.episodic().prioritized(1.0, 0.0)
    });
    let mut reference = Reference::default();
    let mut rng = 37u64;
    add_episodes(&mut buf, &mut reference, &mut rng, 12);
    // Reset rows carry no priority, nor does a first live row whose previous row is
    // gone; every other row carries the largest seen.
    let live = buf.live();
    let all: Vec<u64> = live.clone().collect();
    for (&j, p) in all.iter().zip(buf.priorities(&all).unwrap()) {
        let ends_a_step = reference.rows[j as usize].t >= 1 && j > live.start;
        assert_eq!(p > 0.0, ends_a_step, "row {j}: priority {p}");
    }
    let spec = Request::transitions(2000, &["obs"]).prioritized(0.5);
    let t = buf.sample(spec).unwrap();
    for &j in t.indices() {
        assert!(
            reference.rows[j as usize].t >= 1 && reference.live(j as usize - 1),
            "row {j}"
        );
    }
    // Priority 1 on every step row, 9 on two of them: those two take 9/(n+16) each.
    let live = buf.live();
    let steps: Vec<u64> = (live.start + 1..live.end)
        .filter(|&j| reference.rows[j as usize].t >= 1)
        .collect();
    buf.update_priorities(&steps, &vec![1.0f64; steps.len()])
        .unwrap();
    let (a, b) = (steps[3], steps[steps.len() / 2]);
    buf.update_priorities(&[a, b], &[9.0f64, 9.0]).unwrap();
    let t = buf.sample(spec).unwrap();
    let hits = t.indices().iter().filter(|&&j| j == a || j == b).count() as f64;
    let expect = 2000.0 * 18.0 / (steps.len() as f64 + 16.0);
    assert!(
        (hits - expect).abs() < 5.0 * expect.sqrt() + 5.0,
        "{hits} vs {expect}"
    );
    // Sequences key on their first trained step the same way.
    let spec = replaystore::Request::sequences(2000, 4, &["obs"]).prioritized(0.5);
    let s = buf.sample(spec).unwrap();
    let hits = s.indices().iter().filter(|&&j| j == a || j == b).count() as f64;
    assert!(
        (hits - expect).abs() < 5.0 * expect.sqrt() + 5.0,
        "sequences: {hits} vs {expect}"
    );
    for (i, &j) in s.indices().iter().enumerate() {
        let want = if j == a || j == b {
            (1.0f32 / 9.0).powf(0.5)
        } else {
            1.0
        };
        assert!(
            (s.weights()[i] - want).abs() < 1e-5,
            "sequence at {j}: weight {}",
            s.weights()[i]
        );
    }
    for (i, &j) in t.indices().iter().enumerate() {
        let want = if j == a || j == b {
            (1.0f32 / 9.0).powf(0.5)
        } else {
            1.0
        };
        assert!(
            (t.weights()[i] - want).abs() < 1e-5,
            "row {j}: weight {}",
            t.weights()[i]
        );
    }
}

/// Prioritized whole episodes: an episode's chance is the mean priority of its step
/// rows over that of every complete episode (a plain reference computes both), only
/// complete episodes are drawn, and weights are `(P_min / P)^beta`. Equal priorities
/// draw uniformly, as the uniform sampler does.
#[test]
fn prioritized_episodes_follow_their_mean_step_priority() {
    use replaystore::Request;
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create_with(&tmp.path().join("b"), |c| {
        c.episodic().prioritized(1.0, 0.0)
    });
    let mut reference = Reference::default();
    let mut rng = 41u64;
    // Wraps the ring: the first live episode is partly evicted, the last one open.
    add_episodes(&mut buf, &mut reference, &mut rng, 14);
    let live = buf.live();
    let steps: Vec<u64> = live
        .clone()
        .filter(|&j| reference.rows[j as usize].t >= 1)
        .collect();
    let prios: Vec<f64> = steps
        .iter()
        .map(|_| (1 + xorshift(&mut rng) % 5) as f64)
        .collect();
    buf.update_priorities(&steps, &prios).unwrap();
    let prio_of: HashMap<u64, f64> = steps.iter().copied().zip(prios).collect();

    // The reference: complete episodes (reset row live, ended) and their mean priority.
    let mut mass: HashMap<u64, f64> = HashMap::new();
    for e in buf.episodes().unwrap() {
        let ended = reference.ended_at(e.last() as usize).is_some();
        if reference.live(e.start as usize) && ended {
            let sum: f64 = (e.start + 1..=e.last()).map(|j| prio_of[&j]).sum();
            mass.insert(e.id, sum / e.steps() as f64);
        }
    }
    assert!(mass.len() >= 3, "{} complete episodes", mass.len());
    let total: f64 = mass.values().sum();
    let min = mass.values().copied().fold(f64::INFINITY, f64::min);

    let draws = 3000;
    let mut batch = Batch::default();
    buf.sample_into(Request::episodes(draws).prioritized(0.5), &mut batch)
        .unwrap();
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for (e, &w) in drawn_episodes(&buf, &batch).iter().zip(batch.weights()) {
        let m = *mass
            .get(&e.id)
            .unwrap_or_else(|| panic!("episode {} is not complete", e.id));
        let want = (min / m).powf(0.5) as f32;
        assert!(
            (w - want).abs() < 1e-5,
            "episode {}: weight {w}, want {want}",
            e.id
        );
        *counts.entry(e.id).or_default() += 1;
    }
    assert_eq!(batch.weights().len(), draws);
    for (id, m) in &mass {
        let expect = draws as f64 * m / total;
        let got = counts.get(id).copied().unwrap_or(0) as f64;
        assert!(
            (got - expect).abs() < 5.0 * expect.sqrt() + 3.0,
            "episode {id}: {got} draws, expected {expect:.0}"
        );
    }

    // Equal priorities: uniform over complete episodes, every weight 1.
    buf.update_priorities(&steps, &vec![3.0f64; steps.len()])
        .unwrap();
    buf.sample_into(Request::episodes(draws).prioritized(0.5), &mut batch)
        .unwrap();
    assert!(batch.weights().iter().all(|&w| (w - 1.0).abs() < 1e-6));
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for e in drawn_episodes(&buf, &batch) {
        *counts.entry(e.id).or_default() += 1;
    }
    let expect = draws as f64 / mass.len() as f64;
    for id in mass.keys() {
        let got = counts.get(id).copied().unwrap_or(0) as f64;
        assert!(
            (got - expect).abs() < 5.0 * expect.sqrt(),
            "episode {id}: {got} draws, expected {expect:.0}"
        );
    }

    // Uniform specs leave the weights empty; a buffer without priorities refuses.
    buf.sample_into(Request::episodes(4), &mut batch).unwrap();
    assert!(batch.weights().is_empty());
    let mut plain = create(&tmp.path().join("plain"));
    add_episodes(&mut plain, &mut Reference::default(), &mut rng, 3);
    assert!(matches!(
        plain.sample_into(Request::episodes(4).prioritized(0.5), &mut batch),
        Err(Error::NotPrioritized { .. })
    ));
}
