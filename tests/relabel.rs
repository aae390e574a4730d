//! Promise (issue 32, point 2): hindsight relabeling draws each relabeled transition's
//! new goal where its strategy says (future, final, episode, random: chi-square against
//! the uniform law over the strategy's choices), relabels exactly `round(fraction * n)`
//! transitions of a draw, replaces the goal in both observations with the goal reached
//! at the row it names (an unfinished episode only within its stored part), draws the
//! same from a reader and after a restore, and refuses what it cannot relabel.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::BTreeMap;

use replaystore::{
    Batch, Column, Config, DType, Error, GoalStrategy, Reader, Relabel, ReplayBuffer, Request,
    Schema,
};

const OBS: &[&str] = &["achieved", "desired"];

fn schema() -> Schema {
    Schema::builder()
        .field("achieved", DType::F32, &[2])
        .field("desired", DType::F32, &[2])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap()
}

/// Row `i` reaches goal `[i, -i]`; every desired goal is `[-1, -1]`. Episodes of
/// `lens[k]` steps, each ended but the last when `open_last`.
fn fill(buf: &mut ReplayBuffer, lens: &[u64], open_last: bool) {
    let mut i = buf.live().end;
    for (k, &steps) in lens.iter().enumerate() {
        for t in 0..=steps {
            let a = [i as f32, -(i as f32)];
            let cols = [
                Column::new("achieved", &a),
                Column::new("desired", &[-1.0f32, -1.0]),
                Column::scalar("reward", &0.0f32),
            ];
            if t == 0 {
                buf.add_reset(&cols[..2]).unwrap();
            } else {
                let end = t == steps && !(open_last && k == lens.len() - 1);
                buf.add_step(&cols, end, false).unwrap();
            }
            i += 1;
        }
    }
}

fn her(strategy: GoalStrategy, fraction: f64) -> Relabel<'static> {
    Relabel {
        goal: "desired",
        achieved: "achieved",
        strategy,
        fraction,
    }
}

fn create(dir: &std::path::Path, capacity: u64) -> ReplayBuffer {
    let config = Config::new(schema(), capacity).episodic().seed(7);
    ReplayBuffer::create(dir, config).unwrap()
}

/// Upper critical value of chi-square with `df` degrees of freedom at p = 0.001
/// (Wilson-Hilferty).
fn critical(df: f64) -> f64 {
    let z = 3.090_232;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Chi-square of `counts` against the uniform law over `cells` cells.
fn chi2_uniform(counts: &BTreeMap<u64, u64>, cells: u64) -> f64 {
    let total: u64 = counts.values().sum();
    let expected = total as f64 / cells as f64;
    let seen: f64 = counts
        .values()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // Cells never hit add their expected count.
    seen + (cells - counts.len() as u64) as f64 * expected
}

/// Each relabeled transition's goal is the goal reached at its goal row; the rest keep
/// theirs. Returns `(step row, goal row)` of the relabeled ones.
fn pairs(b: &Batch) -> Vec<(u64, u64)> {
    let (rel, rows) = (
        b.get::<bool>("relabeled").unwrap(),
        b.get::<u64>("goal_indices").unwrap(),
    );
    let (goal, next_goal) = (
        b.get::<f32>("desired").unwrap(),
        b.get::<f32>("next_desired").unwrap(),
    );
    let mut out = Vec::new();
    for (k, &j) in b.indices().iter().enumerate() {
        let g = rows[k];
        let want = if rel[k] {
            [g as f32, -(g as f32)]
        } else {
            [-1.0, -1.0]
        };
        assert_eq!(
            &goal[2 * k..2 * k + 2],
            want,
            "transition {k} (row {j}, goal row {g})"
        );
        assert_eq!(&next_goal[2 * k..2 * k + 2], want);
        if rel[k] {
            out.push((j, g));
        } else {
            assert_eq!(g, j);
        }
    }
    out
}

#[test]
fn goals_are_drawn_where_each_strategy_says() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"), 1000);
    // Episode 0: rows 0..=20 (20 steps); episode 1: rows 21..=51 (30 steps).
    fill(&mut buf, &[20, 30], false);
    let draws = 40_000;
    let mut by_strategy = BTreeMap::new();
    for strategy in [
        GoalStrategy::Future,
        GoalStrategy::Final,
        GoalStrategy::Episode,
        GoalStrategy::Random,
    ] {
        let b = buf
            .sample(Request::transitions(draws, OBS).relabel(her(strategy, 1.0)))
            .unwrap();
        by_strategy.insert(format!("{strategy:?}"), pairs(&b));
    }
    let episode = |j: u64| if j <= 20 { (1, 20) } else { (22, 51) };
    // Future: for transitions at row 5, goal rows 5..=20 uniformly.
    let mut counts = BTreeMap::new();
    for &(j, g) in &by_strategy["Future"] {
        let (_, last) = episode(j);
        assert!((j..=last).contains(&g), "future goal {g} for row {j}");
        if j == 5 {
            *counts.entry(g).or_insert(0u64) += 1;
        }
    }
    let chi2 = chi2_uniform(&counts, 16);
    assert!(
        chi2 < critical(15.0),
        "future: chi-square {chi2}: {counts:?}"
    );
    // Final: always the episode's last step.
    for &(j, g) in &by_strategy["Final"] {
        assert_eq!(g, episode(j).1);
    }
    // Episode: any step of the transition's episode; those of episode 1 uniformly.
    let mut counts = BTreeMap::new();
    for &(j, g) in &by_strategy["Episode"] {
        let (first, last) = episode(j);
        assert!((first..=last).contains(&g), "episode goal {g} for row {j}");
        if first == 22 {
            *counts.entry(g).or_insert(0u64) += 1;
        }
    }
    let chi2 = chi2_uniform(&counts, 30);
    assert!(
        chi2 < critical(29.0),
        "episode: chi-square {chi2}: {counts:?}"
    );
    // Random: any live row, uniformly.
    let mut counts = BTreeMap::new();
    for &(_, g) in &by_strategy["Random"] {
        *counts.entry(g).or_insert(0u64) += 1;
    }
    let chi2 = chi2_uniform(&counts, 52);
    assert!(
        chi2 < critical(51.0),
        "random: chi-square {chi2}: {counts:?}"
    );
}

#[test]
fn exactly_the_fraction_asked_is_relabeled_and_open_episodes_stay_within_their_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"), 1000);
    // The second episode is still being written: its goals come from its rows so far.
    fill(&mut buf, &[10, 8], true);
    for (fraction, n, want) in [(0.8, 100, 80), (0.5, 7, 4), (0.0, 16, 0), (1.0, 5, 5)] {
        let b = buf
            .sample(Request::transitions(n, OBS).relabel(her(GoalStrategy::Future, fraction)))
            .unwrap();
        let rel = b.get::<bool>("relabeled").unwrap();
        assert_eq!(
            rel.iter().filter(|&&r| r).count(),
            want,
            "fraction {fraction} of {n}"
        );
        assert!(
            rel.iter().take(want).all(|&r| r),
            "the first ones are relabeled"
        );
        for (j, g) in pairs(&b) {
            let last = if j <= 10 { 10 } else { 19 };
            assert!((j..=last).contains(&g), "goal {g} for row {j}");
        }
    }
}

#[test]
fn readers_and_restores_draw_the_same_relabeled_transitions() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let mut buf = create(&path, 64);
    // 120 rows through a ring of 64: episodes cut by eviction relabel within what is left.
    fill(&mut buf, &[15, 40, 25, 35], false);
    let request = Request::transitions(256, OBS).relabel(her(GoalStrategy::Episode, 0.8));
    let state = buf.get_state_named("s").unwrap();
    let first = buf.sample(request).unwrap();
    for (j, g) in pairs(&first) {
        assert!(
            g >= buf.live().start && g >= j.saturating_sub(40),
            "goal {g} for row {j}"
        );
    }
    let mut reader = Reader::open(&path).unwrap();
    buf.reseed(3);
    reader.reseed(3);
    let (w, r) = (
        buf.sample(request).unwrap(),
        reader.sample(request).unwrap(),
    );
    assert_eq!(w.indices(), r.indices());
    assert_eq!(
        w.get::<u64>("goal_indices").unwrap(),
        r.get::<u64>("goal_indices").unwrap()
    );
    assert_eq!(
        w.get::<f32>("desired").unwrap(),
        r.get::<f32>("desired").unwrap()
    );
    buf.set_state(&state).unwrap();
    let again = buf.sample(request).unwrap();
    assert_eq!(
        again.get::<u64>("goal_indices").unwrap(),
        first.get::<u64>("goal_indices").unwrap()
    );
}

#[test]
fn a_relabel_over_fields_that_cannot_hold_goals_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"), 100);
    fill(&mut buf, &[10], false);
    let h = her(GoalStrategy::Future, 0.5);
    refused(
        &mut buf,
        Request::transitions(4, &["achieved"]).relabel(h).into(),
        "observation fields",
    );
    refused(
        &mut buf,
        Request::transitions(4, OBS)
            .relabel(her(GoalStrategy::Final, 1.5))
            .into(),
        "0..=1",
    );
    let odd = Relabel {
        goal: "desired",
        achieved: "reward",
        ..h
    };
    let fields = ["achieved", "desired", "reward"];
    refused(
        &mut buf,
        Request::transitions(4, &fields).relabel(odd).into(),
        "differ",
    );
}

fn refused(buf: &mut ReplayBuffer, request: Request<'_>, says: &str) {
    match buf.sample(request) {
        Err(Error::InvalidSample(why)) => assert!(why.contains(says), "{why}"),
        other => panic!("{request:?}: {other:?}"),
    }
}
