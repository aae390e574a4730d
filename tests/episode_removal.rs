//! Promise: item states in an episodic buffer (issue 57) remove whole episodes. Every
//! removal (`remove`, a draw that removes, downsampling by episode) takes all the live
//! rows of the episodes it names; no draw (episodes, transitions, sequences, rows), read
//! or reader returns a row of a removed episode again; `len` counts the rows kept;
//! downsampling counts steps against `max_size` and removes uniformly random ended
//! episodes, the same ones after a reopen; a kill inside a removal is finished by the
//! next open; what counts or moves single rows is refused by name.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use replaystore::{
    Column, Config, DType, Error, RateLimit, Reader, ReplayBuffer, Request, Schema, VarKind, verify,
};

fn schema() -> Schema {
    Schema::builder()
        .field("obs", DType::I64, &[])
        .field("reward", DType::F32, &[])
        .variable("say", VarKind::Bytes, None)
        .build()
        .unwrap()
}

/// Episode `e` of `steps` steps: every row's `obs` is `1000 e + t`, its `say` `t` bytes
/// of `e`.
fn add_episode(buf: &mut ReplayBuffer, e: i64, steps: i64) {
    let say = |t: i64| vec![e as u8; t as usize];
    let first = say(0);
    buf.add_reset(&[
        Column::scalar("obs", &(1000 * e)),
        Column::value("say", &first),
    ])
    .unwrap();
    for t in 1..=steps {
        let s = say(t);
        buf.add_step(
            &[
                Column::scalar("obs", &(1000 * e + t)),
                Column::scalar("reward", &1.0f32),
                Column::value("say", &s),
            ],
            t == steps,
            false,
        )
        .unwrap();
    }
}

/// The episodes (by `obs / 1000`) whose rows `batch` holds, with a check that each
/// row's value is its episode's.
fn episodes_in(batch: &replaystore::Batch) -> BTreeSet<i64> {
    let obs = batch.get::<i64>("obs").unwrap();
    obs.iter().map(|o| o / 1000).collect()
}

fn kept(buf: &ReplayBuffer) -> BTreeSet<i64> {
    buf.episodes()
        .unwrap()
        .iter()
        .map(|e| {
            let b = buf.get_many(&[e.start]).unwrap();
            b.get::<i64>("obs").unwrap()[0] / 1000
        })
        .collect()
}

fn config(cap: u64) -> Config {
    Config::new(schema(), cap)
        .episodic()
        .heap_bytes(1 << 20)
        .item_states()
}

#[test]
fn a_removal_takes_whole_episodes_and_no_draw_returns_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = ReplayBuffer::create(&path, config(256).seed(5)).unwrap();
    for e in 0..8 {
        add_episode(&mut buf, e, 2 + e % 3);
    }
    let rows: u64 = (0..8).map(|e| 3 + e % 3).sum();
    assert_eq!(buf.len(), rows);
    // One row of episode 2 (its third) names the episode: all its 5 rows go.
    let start2 = buf.episodes().unwrap()[2].start;
    assert_eq!(buf.remove(&[start2 + 2]).unwrap(), 5);
    assert_eq!(buf.len(), rows - 5);
    // Episodes drawn and removed: whole ones, until they cover 6 steps.
    let got = buf.sample(Request::episodes_covering(6).remove()).unwrap();
    let taken = episodes_in(&got);
    let offsets = got.get::<u64>("offsets").unwrap();
    assert_eq!(offsets.len() - 1, taken.len());
    let steps: u64 = offsets.windows(2).map(|w| w[1] - w[0] - 1).sum();
    assert!(steps >= 6, "{steps}");
    assert!(!taken.contains(&2));
    let mut gone: BTreeSet<i64> = taken.clone();
    gone.insert(2);
    assert_eq!(kept(&buf), (0..8).filter(|e| !gone.contains(e)).collect());
    assert_eq!(buf.len(), rows - 5 - got.len() as u64);
    // No draw of any unit returns a row of a removed episode.
    let reader = &mut Reader::open(&path).unwrap();
    for _ in 0..50 {
        for b in [
            buf.sample(Request::episodes(4)).unwrap(),
            buf.sample(Request::transitions(16, &["obs", "say"]))
                .unwrap(),
            buf.sample(Request::sequences(4, 2, &["obs", "say"]))
                .unwrap(),
            buf.sample(16).unwrap(),
            reader.sample(Request::episodes(4)).unwrap(),
            reader.sample(Request::transitions(16, &["obs"])).unwrap(),
        ] {
            let mask = b.get::<bool>("mask").ok().map(<[bool]>::to_vec);
            let obs = b.get::<i64>("obs").unwrap();
            for (k, o) in obs.iter().enumerate() {
                if mask.as_ref().is_none_or(|m| m[k]) {
                    assert!(
                        !gone.contains(&(o / 1000)),
                        "row of episode {} drawn",
                        o / 1000
                    );
                }
            }
        }
    }
    // Reads of a removed row and its episode are refused by name.
    assert!(matches!(
        buf.get_many(&[start2]),
        Err(Error::Removed { .. })
    ));
    assert!(matches!(
        buf.episode(start2 + 1),
        Err(Error::Removed { .. })
    ));
    let at = [start2 + 1];
    let e = buf
        .sample(Request::transitions_at(&at, &["obs"]))
        .unwrap_err();
    assert!(matches!(e, Error::Removed { .. }), "{e}");
    // All of it holds after a reopen, and verify finds nothing.
    buf.close().unwrap();
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(buf.len(), rows - 5 - got.len() as u64);
    assert_eq!(kept(&buf), (0..8).filter(|e| !gone.contains(e)).collect());
    drop(buf);
    let report = verify(&path).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn rows_added_to_a_removed_open_episode_are_removed_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = ReplayBuffer::create(dir.path().join("b"), config(64)).unwrap();
    add_episode(&mut buf, 0, 2);
    let info = buf
        .add_reset(&[Column::scalar("obs", &1000i64), Column::value("say", b"")])
        .unwrap();
    assert_eq!(buf.remove(&[info.index]).unwrap(), 1);
    for t in 1..=3i64 {
        let obs = 1000 + t;
        let step = [
            Column::scalar("obs", &obs),
            Column::scalar("reward", &0.0f32),
            Column::value("say", b"x"),
        ];
        buf.add_step(&step, t == 3, false).unwrap();
    }
    assert_eq!(buf.len(), 3, "episode 0 only");
    assert_eq!(kept(&buf), BTreeSet::from([0]));
    for _ in 0..20 {
        let b = buf.sample(Request::transitions(8, &["obs"])).unwrap();
        assert!(b.get::<i64>("obs").unwrap().iter().all(|&o| o < 1000));
    }
}

#[test]
fn episode_downsampling_counts_steps_and_removes_ended_episodes_uniformly() {
    let dir = tempfile::tempdir().unwrap();
    // Ten episodes of 3 steps fill max_size 30; the 11th removes one, each equally often.
    let mut counts = [0u64; 11];
    for seed in 0..440u64 {
        let path = dir.path().join(format!("b{seed}"));
        let config = Config::new(schema(), 64)
            .episodic()
            .heap_bytes(1 << 16)
            .downsample(30)
            .seed(seed);
        let mut buf = ReplayBuffer::create(&path, config).unwrap();
        for e in 0..11 {
            add_episode(&mut buf, e, 3);
            // Steps, not rows, are held to max_size: ten episodes are 40 rows.
            assert_eq!(buf.len(), 4 * (e as u64 + 1).min(10));
        }
        let gone: Vec<i64> = (0..11).filter(|e| !kept(&buf).contains(e)).collect();
        assert_eq!(gone.len(), 1);
        counts[gone[0] as usize] += 1;
        assert_eq!(buf.stats().removals.downsampled, 4);
        drop(buf);
        std::fs::remove_dir_all(&path).unwrap();
    }
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - 40.0).powi(2) / 40.0)
        .sum();
    // 10 degrees of freedom: the 0.999 quantile is 29.6.
    assert!(chi2 < 29.6, "downsampled: {counts:?}");
}

#[test]
fn covering_draws_pick_whole_episodes_uniformly_and_refuse_too_many_steps() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = ReplayBuffer::create(dir.path().join("c"), config(256).seed(3)).unwrap();
    for e in 0..11 {
        add_episode(&mut buf, e, 1 + e % 4);
    }
    let start = buf.episodes().unwrap()[2].start;
    buf.remove(&[start]).unwrap();
    let mut first = [0u64; 11];
    for _ in 0..5000 {
        let b = buf.sample(Request::episodes_covering(1)).unwrap();
        let eps = episodes_in(&b);
        assert_eq!(eps.len(), 1, "one episode covers one step");
        first[*eps.iter().next().unwrap() as usize] += 1;
    }
    assert_eq!(first[2], 0, "a removed episode is never drawn");
    first.swap(2, 10);
    let chi2: f64 = first[..10]
        .iter()
        .map(|&c| (c as f64 - 500.0).powi(2) / 500.0)
        .sum();
    assert!(chi2 < 27.9, "covering: {first:?}"); // 9 dof, 0.999
    // Zero steps still takes one episode (UnstableBaselines' loop takes one first).
    let b = buf.sample(Request::episodes_covering(0)).unwrap();
    assert_eq!(b.get::<u64>("offsets").unwrap().len(), 2);
    let e = buf.sample(Request::episodes_covering(1000)).unwrap_err();
    assert!(e.to_string().contains("whole episodes hold"), "{e}");
    let b = buf
        .sample(Request::episodes(10).without_replacement())
        .unwrap();
    assert_eq!(episodes_in(&b).len(), 10);
    assert!(
        buf.sample(Request::episodes(11).without_replacement())
            .is_err()
    );
}

#[test]
fn downsampling_removes_the_same_episodes_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let run = |path: &Path, reopen: bool| {
        let config = Config::new(schema(), 400)
            .episodic()
            .heap_bytes(1 << 18)
            .downsample(40)
            .seed(8);
        let mut buf = ReplayBuffer::create(path, config).unwrap();
        for e in 0..40 {
            if reopen && e % 9 == 4 {
                buf.close().unwrap();
                buf = ReplayBuffer::open(path).unwrap();
            }
            add_episode(&mut buf, e, 1 + (e * 7) % 9);
        }
        kept(&buf)
    };
    let a = run(&dir.path().join("a"), false);
    assert!(a.len() > 4, "{}", a.len());
    assert_eq!(a, run(&dir.path().join("b"), true));
}

#[test]
fn what_counts_or_moves_single_rows_is_refused_in_episodic_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let base = || Config::new(schema(), 64).episodic().heap_bytes(1 << 16);
    for (config, field) in [
        (base().max_use(2), "max_use"),
        (base().reservoir(8), "reservoir"),
        (base().rate_limit(RateLimit::min_size(1)), "rate_limit"),
    ] {
        match ReplayBuffer::create(dir.path().join(field), config) {
            Err(Error::InvalidConfig { field: f, problem }) => {
                assert_eq!(f, field);
                assert!(problem.contains("whole episodes"), "{problem}");
            }
            other => panic!("{field}: {:?}", other.map(|_| ())),
        }
        assert!(
            !dir.path().join(field).exists(),
            "a refused create leaves nothing"
        );
    }
}

/// Child of the kill test: removes episodes until killed inside one (kill point
/// `episode-removal`), after a commit that covers every add.
#[test]
fn episode_removal_kill_child() {
    let Some(path) = std::env::var_os("REPLAYSTORE_EPISODE_PATH") else {
        return;
    };
    let mut buf = ReplayBuffer::create(&path, config(128)).unwrap();
    for e in 0..6 {
        add_episode(&mut buf, e, 4);
    }
    buf.flush().unwrap();
    let start = buf.episodes().unwrap()[3].start;
    buf.remove(&[start]).unwrap();
    unreachable!("the kill point ends the process inside the removal");
}

#[cfg(feature = "kill-points")]
#[test]
fn a_kill_inside_a_removal_is_finished_by_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "episode_removal_kill_child", "--nocapture"])
        .env("REPLAYSTORE_EPISODE_PATH", &path)
        .env("REPLAYSTORE_KILL_POINT", "episode-removal:2")
        .status()
        .unwrap();
    assert!(!status.success(), "the child was to be killed");
    // Before the open, verify notes the cut removal without calling it damage.
    let report = verify(&path).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        report.notes.iter().any(|n| n.contains("part removed")),
        "{:?}",
        report.notes
    );
    // The kill left episode 3 part removed: the open removes the rest.
    let buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(kept(&buf), BTreeSet::from([0, 1, 2, 4, 5]));
    assert_eq!(buf.len(), 25);
    // Episode 3 is rows 15..20, the kill came after its second row.
    let states = buf.item_states(&(15..20).collect::<Vec<_>>()).unwrap();
    assert!(states.iter().all(|s| s.removed.is_some()), "{states:?}");
    drop(buf);
    let report = verify(&path).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn verify_finds_an_episode_part_removed_after_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = ReplayBuffer::create(&path, config(64)).unwrap();
    for e in 0..3 {
        add_episode(&mut buf, e, 3);
    }
    buf.remove(&[5]).unwrap(); // episode 1: rows 4..8
    buf.close().unwrap();
    assert!(verify(&path).unwrap().problems.is_empty());
    // Row 6's word zeroed (the zero word checks: "live, never drawn").
    let state = path.join("items.state");
    let mut bytes = std::fs::read(&state).unwrap();
    bytes[4096 + 6 * 8..4096 + 7 * 8].fill(0);
    std::fs::write(&state, &bytes).unwrap();
    let report = verify(&path).unwrap();
    let found = report
        .problems
        .iter()
        .find(|p| p.what.contains("part removed"))
        .unwrap_or_else(|| panic!("{:?}", report.problems));
    assert!(found.what.contains("episode 1"), "{}", found.what);
    assert_eq!(found.offset, 4096 + 6 * 8);
}

#[test]
fn an_actor_that_may_not_remove_refuses_to_continue_a_removed_episode_storing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut buf = ReplayBuffer::create(&path, config(64).prioritized(0.6, 1e-6)).unwrap();
    add_episode(&mut buf, 0, 2);
    let open = buf
        .add_reset(&[Column::scalar("obs", &1000i64), Column::value("say", b"")])
        .unwrap();
    buf.remove(&[open.index]).unwrap();
    buf.close().unwrap();
    // An actor's removals would leave leaves it does not own: the step is refused
    // before anything is stored, and the open episode stays removed whole.
    let mut actor = ReplayBuffer::open_actor(&path).unwrap();
    let (live, len) = (actor.live(), actor.len());
    let step = [
        Column::scalar("obs", &1001i64),
        Column::scalar("reward", &0.0f32),
        Column::value("say", b"x"),
    ];
    let e = actor.add_step(&step, true, false).unwrap_err();
    assert!(matches!(e, Error::NotPriorityOwner { .. }), "{e}");
    assert_eq!((actor.live(), actor.len()), (live, len));
    drop(actor);
    assert!(verify(&path).unwrap().problems.is_empty());
}

#[test]
fn with_every_episode_removed_each_draw_is_an_error_and_len_is_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = ReplayBuffer::create(dir.path().join("b"), config(4096)).unwrap();
    for e in 0..200 {
        add_episode(&mut buf, e, 3);
    }
    let starts: Vec<u64> = buf.episodes().unwrap().iter().map(|e| e.start).collect();
    assert_eq!(buf.remove(&starts).unwrap(), 800);
    assert_eq!(buf.len(), 0);
    assert!(buf.episodes().unwrap().is_empty());
    assert!(buf.sample(Request::transitions(8, &["obs"])).is_err());
    assert!(buf.sample(Request::sequences(2, 2, &["obs"])).is_err());
    assert!(buf.sample(Request::episodes(2)).is_err());
    assert!(buf.sample(Request::episodes_covering(1)).is_err());
}
