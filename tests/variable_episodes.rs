//! Promise: an episodic buffer keeps variable-length fields (text observations and
//! actions, token arrays) as it keeps fixed ones. Every episodic draw returns each
//! position's value from the row its fixed fields come from: transitions (`obs` from
//! the row before the step, `next_<obs>` from the row the n-th step led to, stacked
//! frames), sequences (burn-in and padding, padding empty), whole episodes. Values
//! survive a reopen and a kill; when the chunk ring laps, the oldest steps go (whole
//! episodes with whole-episode eviction) and no value is ever served mixed.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::needless_range_loop,
    reason = "tests fail loudly; positions index several arrays of one draw"
)]

use std::collections::HashMap;

use replaystore::{Batch, Column, Config, DType, ReplayBuffer, Request, Schema, VarKind};

/// `id` is each row's own number (an observation field, so draws return it beside
/// the text from the same rows); `reward` is the step row's id, so step fields can be
/// matched to it.
fn schema() -> Schema {
    Schema::builder()
        .field("id", DType::U64, &[])
        .field("reward", DType::F32, &[])
        .variable("obs", VarKind::Str, None)
        .variable("act", VarKind::Str, Some(400))
        .variable("tokens", VarKind::Ragged(DType::I32), None)
        .build()
        .unwrap()
}

/// Values a pure function of the row's id; lengths vary widely (0.5 KB to a few KB
/// for observations, as W8's), so values cross chunk boundaries.
fn obs(id: u64) -> String {
    let n = 500 + (id * 389 % 3000) as usize;
    (0..n)
        .map(|k| (b'a' + ((id as usize * 7 + k) % 26) as u8) as char)
        .collect()
}
fn act(id: u64) -> String {
    let n = 20 + (id * 53 % 380) as usize;
    (0..n)
        .map(|k| (b'A' + ((id as usize + k) % 26) as u8) as char)
        .collect()
}
fn tokens(id: u64) -> Vec<i32> {
    (0..(64 + id * 97 % 900) as i32)
        .map(|k| k ^ id as i32)
        .collect()
}

/// Adds episode `e` of `steps` steps, its rows numbered from `first_id`: every other
/// episode through `add_episode`, the rest step by step. Returns the ids used.
fn add_episode(buf: &mut ReplayBuffer, e: u64, steps: u64, first_id: u64) -> std::ops::Range<u64> {
    let ids: Vec<u64> = (first_id..=first_id + steps).collect();
    if e.is_multiple_of(2) {
        let texts: Vec<String> = ids.iter().map(|&i| obs(i)).collect();
        let (mut o, mut oo) = (Vec::new(), vec![0u64]);
        for t in &texts {
            o.extend_from_slice(t.as_bytes());
            oo.push(o.len() as u64);
        }
        let step_ids = &ids[1..];
        let rewards: Vec<f32> = step_ids.iter().map(|&i| i as f32).collect();
        let (mut a, mut ao) = (Vec::new(), vec![0u64]);
        let (mut k, mut ko) = (Vec::new(), vec![0u64]);
        for &i in step_ids {
            a.extend_from_slice(act(i).as_bytes());
            ao.push(a.len() as u64);
            k.extend_from_slice(bytemuck::cast_slice(&tokens(i)));
            ko.push(k.len() as u64);
        }
        buf.add_episode(
            &[
                Column::new("id", &ids),
                Column::values("obs", DType::U8, &o, &oo),
            ],
            &[
                Column::new("reward", &rewards),
                Column::values("act", DType::U8, &a, &ao),
                Column::values("tokens", DType::I32, &k, &ko),
            ],
            true,
            false,
        )
        .unwrap();
    } else {
        let (o, id) = (obs(ids[0]), ids[0]);
        buf.add_reset(&[Column::scalar("id", &id), Column::text("obs", &o)])
            .unwrap();
        for (t, &i) in ids.iter().enumerate().skip(1) {
            let (o, a, k, r) = (obs(i), act(i), tokens(i), i as f32);
            buf.add_step(
                &[
                    Column::scalar("id", &i),
                    Column::scalar("reward", &r),
                    Column::text("obs", &o),
                    Column::text("act", &a),
                    Column::ragged("tokens", &k),
                ],
                t as u64 == steps,
                false,
            )
            .unwrap();
        }
    }
    first_id..first_id + steps + 1
}

/// Adds `episodes` episodes of 4 to 12 steps; returns row index -> id.
fn fill(buf: &mut ReplayBuffer, from_episode: u64, episodes: u64) -> HashMap<u64, u64> {
    let mut ids = HashMap::new();
    let mut next = buf.stats().tail * 1000 + 1;
    for e in from_episode..from_episode + episodes {
        let first_row = buf.stats().tail;
        let steps = 4 + e * 5 % 9;
        let range = add_episode(buf, e, steps, next);
        for (k, id) in range.clone().enumerate() {
            ids.insert(first_row + k as u64, id);
        }
        next = range.end + 1;
    }
    ids
}

fn text(b: &Batch, name: &str, r: usize) -> String {
    b.text(name, r).unwrap().to_owned()
}
fn toks(b: &Batch, r: usize) -> Vec<i32> {
    b.values("tokens")
        .unwrap()
        .elements::<i32>(r)
        .unwrap()
        .to_vec()
}

/// Checks a transition draw: every value is the one of the row its fixed fields came
/// from (`id` is an observation, `reward` the step row's id).
fn check_transitions(t: &Batch, n: usize, frames: usize, next: bool) {
    let id = t.get::<u64>("id").unwrap();
    let reward = t.get::<f32>("reward").unwrap();
    assert_eq!(t.values("obs").unwrap().len(), n * frames);
    for p in 0..n * frames {
        assert_eq!(text(t, "obs", p), obs(id[p]), "obs frame {p}");
    }
    if next {
        let next_id = t.get::<u64>("next_id").unwrap();
        for p in 0..n * frames {
            assert_eq!(
                text(t, "next_obs", p),
                obs(next_id[p]),
                "next_obs frame {p}"
            );
        }
    } else {
        assert!(t.values("next_obs").is_none());
    }
    for i in 0..n {
        let step = reward[i] as u64;
        assert_eq!(text(t, "act", i), act(step));
        assert_eq!(toks(t, i), tokens(step));
    }
}

#[test]
fn every_episodic_draw_returns_each_positions_value_from_its_row() {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::new(schema(), 2000)
        .episodic()
        .seed(7)
        .heap_bytes(64 << 20);
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), config).unwrap();
    let ids = fill(&mut buf, 0, 30);
    let both = ["id", "obs"];

    // Transitions: one step, n steps, stacked frames, windows.
    let t = buf.sample(Request::transitions(64, &both)).unwrap();
    check_transitions(&t, 64, 1, true);
    for (i, &j) in t.indices().iter().enumerate() {
        assert_eq!(
            t.get::<u64>("next_id").unwrap()[i],
            ids[&j],
            "1-step next is the step row"
        );
    }
    let t = buf
        .sample(Request::transitions(64, &both).nstep(3, 0.9))
        .unwrap();
    check_transitions(&t, 64, 1, true);
    let t = buf
        .sample(Request::transitions(32, &both).stack(3))
        .unwrap();
    check_transitions(&t, 32, 3, true);
    let t = buf
        .sample(Request::transitions(32, &both).nstep(2, 0.9).window())
        .unwrap();
    check_transitions(&t, 32, 3, false);

    // Sequences: burn-in and padding; padding positions are empty values.
    let s = buf
        .sample(Request::sequences(16, 6, &both).burn_in(3))
        .unwrap();
    let (mask, id, next_id, reward) = (
        s.get::<bool>("mask").unwrap(),
        s.get::<u64>("id").unwrap(),
        s.get::<u64>("next_id").unwrap(),
        s.get::<f32>("reward").unwrap(),
    );
    assert_eq!(s.values("act").unwrap().len(), 16 * 9);
    assert!(mask.iter().any(|m| !m), "some sequence is padded");
    for p in 0..16 * 9 {
        if mask[p] {
            assert_eq!(text(&s, "obs", p), obs(id[p]));
            assert_eq!(text(&s, "next_obs", p), obs(next_id[p]));
            assert_eq!(text(&s, "act", p), act(reward[p] as u64));
            assert_eq!(toks(&s, p), tokens(reward[p] as u64));
        } else {
            for name in ["obs", "next_obs", "act", "tokens"] {
                assert!(
                    s.values(name).unwrap().value(p).unwrap().is_empty(),
                    "{name} {p}"
                );
            }
        }
    }

    // Whole episodes: every row, its reset row's step values empty.
    let e = buf.sample(Request::episodes(5)).unwrap();
    let offsets = e.get::<u64>("offsets").unwrap();
    let id = e.get::<u64>("id").unwrap();
    for (r, &index) in e.indices().iter().enumerate() {
        assert_eq!(id[r], ids[&index]);
        assert_eq!(text(&e, "obs", r), obs(id[r]));
        let reset = offsets.contains(&(r as u64));
        if reset {
            assert_eq!(text(&e, "act", r), "");
            assert!(toks(&e, r).is_empty());
        } else {
            assert_eq!(text(&e, "act", r), act(id[r]));
            assert_eq!(toks(&e, r), tokens(id[r]));
        }
    }
}

#[test]
fn episodes_with_values_come_back_after_a_reopen_and_after_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let config = Config::new(schema(), 500)
        .episodic()
        .seed(3)
        .heap_bytes(16 << 20);
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    fill(&mut buf, 0, 10);
    buf.close().unwrap();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    let t = buf
        .sample(Request::transitions(64, &["id", "obs"]))
        .unwrap();
    check_transitions(&t, 64, 1, true);
    fill(&mut buf, 10, 10);
    buf.abandon();
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    assert!(replaystore::verify(&dir).unwrap().is_sound());
    let t = buf
        .sample(Request::transitions(128, &["id", "obs"]).nstep(2, 0.5))
        .unwrap();
    check_transitions(&t, 128, 1, true);
    let e = buf.sample(Request::episodes(8)).unwrap();
    let id = e.get::<u64>("id").unwrap();
    for r in 0..id.len() {
        assert_eq!(text(&e, "obs", r), obs(id[r]));
    }
}

#[test]
fn when_the_chunk_ring_laps_the_oldest_steps_go_and_no_value_is_served_mixed() {
    for whole in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        // Room for thousands of rows, values for a few dozen: the chunk ring decides.
        let mut config = Config::new(schema(), 4000)
            .episodic()
            .seed(11)
            .heap_bytes(256 << 10)
            .evict_for_room()
            .prioritized(0.6, 0.4);
        if whole {
            config = config.whole_episodes();
        }
        let mut buf = ReplayBuffer::create(&dir, config).unwrap();
        for round in 0..6 {
            fill(&mut buf, round * 10, 10);
            let stats = buf.stats();
            assert!(
                stats.tail - stats.head < 200,
                "the chunk ring evicted: {stats:?}"
            );
            let t = buf
                .sample(Request::transitions(64, &["id", "obs"]))
                .unwrap();
            check_transitions(&t, 64, 1, true);
            let t = buf
                .sample(Request::transitions(64, &["id", "obs"]).prioritized(0.4))
                .unwrap();
            check_transitions(&t, 64, 1, true);
            // The first live row of a cut episode ends no transition (its observation
            // row went): it has no priority, as after a row eviction.
            let first = buf.sample(Request::at(&[stats.head])).unwrap();
            if first.get::<f32>("reward").unwrap()[0] != 0.0 {
                assert_eq!(buf.priorities(&[stats.head]).unwrap(), [0.0]);
            }
            if whole {
                // The head is always an episode's reset row.
                let e = buf.sample(Request::episodes(1)).unwrap();
                assert!(e.indices()[0] >= stats.head);
                let first = buf.sample(Request::at(&[stats.head])).unwrap();
                let head_id = first.get::<u64>("id").unwrap()[0];
                assert_eq!(first.get::<f32>("reward").unwrap()[0], 0.0, "{head_id}");
            }
        }
        buf.close().unwrap();
        assert!(replaystore::verify(&dir).unwrap().is_sound());
    }
}

#[test]
fn a_group_keeps_each_players_text_episodes_and_checkpoints_them_as_one() {
    use replaystore::{BufferGroup, GroupRequest};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let template = Config::new(schema(), 1000)
        .episodic()
        .seed(2)
        .heap_bytes(16 << 20);
    let mut group = BufferGroup::create(&dir, Some(template)).unwrap();
    // Two players; player p's rows are numbered from (p + 1) * 100_000.
    for (p, name) in ["player_0", "player_1"].into_iter().enumerate() {
        let member = group.member_or_create(name).unwrap();
        let mut next = (p as u64 + 1) * 100_000;
        for e in 0..8 {
            next = add_episode(member, e, 3 + e % 4, next).end + 1;
        }
    }
    let state = group.get_state_named("after-8").unwrap();
    for (p, name) in ["player_0", "player_1"].into_iter().enumerate() {
        let drawn = group
            .sample((name, Request::transitions(32, &["id", "obs"])))
            .unwrap();
        let t = &drawn[0].1;
        check_transitions(t, 32, 1, true);
        assert!(
            t.get::<u64>("id")
                .unwrap()
                .iter()
                .all(|&i| i / 100_000 == p as u64 + 1)
        );
    }
    let each = group.sample(GroupRequest::each(16)).unwrap();
    assert_eq!(each.len(), 2);
    for (_, b) in &each {
        let id = b.get::<u64>("id").unwrap();
        for r in 0..b.len() {
            assert_eq!(text(b, "obs", r), obs(id[r]));
        }
    }
    // More turns for player 1, then the checkpoint brings back both players' games.
    {
        let member = group.member_mut("player_1").unwrap();
        add_episode(member, 9, 5, 900_000);
    }
    group.set_state(&state).unwrap();
    let e = group.sample(("player_1", Request::episodes(8))).unwrap();
    let id = e[0].1.get::<u64>("id").unwrap();
    assert!(
        id.iter().all(|&i| i < 900_000),
        "restored past the checkpoint"
    );
    for (r, &i) in id.iter().enumerate() {
        assert_eq!(text(&e[0].1, "obs", r), obs(i));
    }
    group.close().unwrap();
}

#[test]
fn hindsight_relabeling_replaces_the_fixed_goal_and_keeps_each_rows_text() {
    use replaystore::{GoalStrategy, Relabel};
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::builder()
        .field("achieved", DType::F32, &[])
        .field("desired", DType::F32, &[])
        .variable("obs", VarKind::Str, None)
        .build()
        .unwrap();
    let config = Config::new(schema, 500).episodic().seed(9);
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), config).unwrap();
    for e in 0..10u64 {
        for t in 0..=8u64 {
            let (reached, goal) = ((e * 100 + t) as f32, -1.0f32);
            let text = obs(e * 100 + t);
            let row = [
                Column::scalar("achieved", &reached),
                Column::scalar("desired", &goal),
                Column::text("obs", &text),
            ];
            if t == 0 {
                buf.add_reset(&row).unwrap();
            } else {
                buf.add_step(&row, t == 8, false).unwrap();
            }
        }
    }
    let her = Relabel {
        goal: "desired",
        achieved: "achieved",
        strategy: GoalStrategy::Future,
        fraction: 0.5,
    };
    let b = buf
        .sample(Request::transitions(64, &["achieved", "desired", "obs"]).relabel(her))
        .unwrap();
    let (achieved, next) = (
        b.get::<f32>("achieved").unwrap(),
        b.get::<f32>("next_achieved").unwrap(),
    );
    let (desired, relabeled) = (
        b.get::<f32>("desired").unwrap(),
        b.get::<bool>("relabeled").unwrap(),
    );
    assert!(relabeled.iter().any(|&r| r) && relabeled.iter().any(|&r| !r));
    for i in 0..64 {
        assert_eq!(text(&b, "obs", i), obs(achieved[i] as u64));
        assert_eq!(text(&b, "next_obs", i), obs(next[i] as u64));
        assert_eq!(desired[i] >= 0.0, relabeled[i]);
    }
}

#[test]
fn episode_getters_read_text_entries_with_lookback_slices_and_fill() {
    use replaystore::{GetOptions, Indices};
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::new(schema(), 500).episodic().seed(4);
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), config).unwrap();
    // One episode of 8 steps: rows (and ids) 1000..=1008.
    add_episode(&mut buf, 1, 8, 1000);
    let id = buf.episodes().unwrap()[0].id;
    let whole = buf.episode_chunk(id).unwrap();
    let all = buf
        .get_observation_values(&whole, "obs", &Indices::All, GetOptions::default())
        .unwrap();
    assert_eq!(all.len(), 9);
    for k in 0..9 {
        assert_eq!(all.text(k).unwrap(), obs(1000 + k as u64));
    }
    let acts = buf
        .get_step_values(
            &whole,
            "act",
            &Indices::List(vec![0, -1]),
            GetOptions::default(),
        )
        .unwrap();
    assert_eq!(
        (acts.text(0).unwrap(), acts.text(1).unwrap()),
        (act(1001).as_str(), act(1008).as_str())
    );
    // Steps 3..6 with a lookback of 2: index -1 with neg_index_as_lookback is the
    // entry before ts = 0, and entries past the lookback are `fill` (empty values).
    let part = buf.slice(&whole, 3, Some(6), 2).unwrap();
    let opts = GetOptions {
        neg_index_as_lookback: true,
        fill: Some(0.0),
    };
    let back = buf
        .get_observation_values(&part, "obs", &Indices::List(vec![-1, 0, -5]), opts)
        .unwrap();
    assert_eq!(back.text(0).unwrap(), obs(1002));
    assert_eq!(back.text(1).unwrap(), obs(1003));
    assert_eq!(back.text(2).unwrap(), "");
    let toks = buf
        .get_step_values(&part, "tokens", &Indices::At(0), GetOptions::default())
        .unwrap();
    assert_eq!(toks.elements::<i32>(0).unwrap(), tokens(1004).as_slice());
    // A fixed field through the values getter, and a text field through the fixed one,
    // are refused by name.
    let e = buf.get_observation_values(&whole, "id", &Indices::All, GetOptions::default());
    assert!(
        matches!(e, Err(replaystore::Error::UnknownField { .. })),
        "{e:?}"
    );
    let e = buf.get_observations(&whole, "obs", &Indices::All, GetOptions::default());
    assert!(
        matches!(&e, Err(replaystore::Error::InvalidSample(m)) if m.contains("get_observation_values")),
        "{e:?}"
    );
}

#[test]
fn verify_checks_every_value_of_every_episode_and_draws_refuse_a_damaged_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let config = Config::new(schema(), 100).episodic().seed(1);
    let mut buf = ReplayBuffer::create(&dir, config).unwrap();
    add_episode(&mut buf, 1, 5, 1000);
    add_episode(&mut buf, 2, 5, 2000);
    buf.close().unwrap();
    assert!(replaystore::verify(&dir).unwrap().is_sound());
    // The first byte of the first episode's reset observation: chunk 0 of the ring
    // (chunk stride 1024, payload 16 bytes into the row, after the 4 KiB header).
    let heap = dir.join("lane-0").join("heap-00000000.dat");
    let mut bytes = std::fs::read(&heap).unwrap();
    bytes[4096 + 16] ^= 0x20;
    std::fs::write(&heap, &bytes).unwrap();
    let report = replaystore::verify(&dir).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.what.contains("item 0") && p.what.contains("obs")),
        "{:?}",
        report.problems
    );
    let mut buf = ReplayBuffer::open(&dir).unwrap();
    // Every draw that reads row 0's value refuses, naming it; the other episode reads.
    let e = buf.sample(Request::at(&[0])).unwrap_err();
    assert!(
        matches!(&e, replaystore::Error::BadItem { index: 0, .. }),
        "{e}"
    );
    let e = buf
        .sample(Request::transitions_at(&[1], &["id", "obs"]))
        .unwrap_err();
    assert!(
        matches!(&e, replaystore::Error::BadItem { index: 0, .. }),
        "{e}"
    );
    let t = buf
        .sample(Request::transitions_at(&[7, 8], &["id", "obs"]))
        .unwrap();
    check_transitions(&t, 2, 1, true);
}
