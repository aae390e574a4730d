//! W6 and W7 of docs/WORKLOADS.md through the engine alone (their peers are Python
//! libraries: `python/bench/compare.py --workloads W6,W7` sets the engine beside them
//! through the Python package).
//! - W6, multi-agent: 8 policies, W1 shapes per agent step (`obs` and `next_obs`
//!   f32[17], `action` f32[6], `reward` f32, `done` bool), 1,000,000 steps spread
//!   evenly, added 1,000 per policy per call into a `BufferGroup` created by its first
//!   adds; draws of 256 from every policy (independent) and of 256 joint steps
//!   (lockstep), in k draws/s.
//! - W7, goal-conditioned: `observation` f32[25], `achieved_goal` and `desired_goal`
//!   f32[3], `action` f32[4], `reward` f32, 50-step episodes added whole
//!   (`add_episode`), 1,000,000 steps; draws of 256 transitions relabeled with the
//!   `future` strategy, k = 4 (rewards are the caller's: Python's `compute_reward`),
//!   beside the same draw without relabeling.

use std::path::Path;
use std::time::Instant;

use replaystore::{
    Batch, BufferGroup, Column, Config, DType, Error, GoalStrategy, GroupRequest, Relabel,
    ReplayBuffer, Request, Schema,
};

use crate::row::Row;
use crate::workloads::xorshift;

/// Policies of W6.
const POLICIES: usize = 8;
/// Steps per policy per add in W6.
const CHUNK: usize = 1000;
/// Steps per W7 episode.
const EPISODE: usize = 50;

/// Draws of `request`-like work per second, as `k`: `draw` run `draws` times.
fn rate(draws: usize, mut draw: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    draw()?;
    let t = Instant::now();
    for _ in 0..draws {
        draw()?;
    }
    Ok(draws as f64 / t.elapsed().as_secs_f64() / 1e3)
}

/// `n` pseudo-random f32 in -1..1.
fn noise(n: usize, s: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| (xorshift(s) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// W6's rows: fill, independent and lockstep draws.
pub fn w6(dir: &Path, runs: usize, quick: bool) -> Result<Vec<Row>, Error> {
    let per_policy = 1_000_000 / POLICIES / if quick { 16 } else { 1 };
    let draws = if quick { 200 } else { 2000 };
    let schema = Schema::builder()
        .field("obs", DType::F32, &[17])
        .field("next_obs", DType::F32, &[17])
        .field("action", DType::F32, &[6])
        .field("reward", DType::F32, &[])
        .field("done", DType::Bool, &[])
        .build()?;
    let data = (per_policy * POLICIES * schema.item_bytes()) as u64;
    let mut s = 3u64;
    let (obs, next, action, reward) = (
        noise(CHUNK * 17, &mut s),
        noise(CHUNK * 17, &mut s),
        noise(CHUNK * 6, &mut s),
        noise(CHUNK, &mut s),
    );
    let done = vec![0u8; CHUNK];
    let names: Vec<String> = (0..POLICIES).map(|k| format!("policy_{k}")).collect();
    let mut fill = Row::new("W6-fill".into(), "M steps/s", data);
    let mut independent = Row::new("W6-sample 8x256".into(), "k draws/s", data);
    let mut lockstep = Row::new("W6-lockstep 256".into(), "k draws/s", data);
    for run in 0..runs {
        let path = dir.join(format!("W6-{run}"));
        let t = Instant::now();
        let template = Config::new(schema.clone(), per_policy as u64).seed(run as u64 + 1);
        let mut group = BufferGroup::create(&path, Some(template))?;
        for _ in 0..per_policy / CHUNK {
            for name in &names {
                group.add_batch(
                    name,
                    &[
                        Column::new("obs", &obs).with_shape(&[CHUNK, 17]),
                        Column::new("next_obs", &next).with_shape(&[CHUNK, 17]),
                        Column::new("action", &action).with_shape(&[CHUNK, 6]),
                        Column::new("reward", &reward),
                        Column::from_bytes("done", DType::Bool, &[CHUNK], &done),
                    ],
                )?;
            }
        }
        fill.values
            .push((per_policy * POLICIES) as f64 / t.elapsed().as_secs_f64() / 1e6);
        let mut batch = Batch::default();
        independent.values.push(rate(draws, || {
            for name in &names {
                group.sample_into((name.as_str(), 256), &mut [&mut batch])?;
            }
            Ok(())
        })?);
        lockstep.values.push(rate(draws, || {
            group.sample(GroupRequest::lockstep(256)).map(drop)
        })?);
        group.close()?;
        let _ = std::fs::remove_dir_all(&path);
    }
    Ok(vec![fill, independent, lockstep])
}

/// W7's rows: fill, relabeled and plain draws.
pub fn w7(dir: &Path, runs: usize, quick: bool) -> Result<Vec<Row>, Error> {
    let steps = 1_000_000 / if quick { 16 } else { 1 };
    let draws = if quick { 500 } else { 5000 };
    let schema = Schema::builder()
        .field("observation", DType::F32, &[25])
        .field("achieved_goal", DType::F32, &[3])
        .field("desired_goal", DType::F32, &[3])
        .field("action", DType::F32, &[4])
        .field("reward", DType::F32, &[])
        .build()?;
    let rows = (steps / EPISODE * (EPISODE + 1)) as u64;
    let data = rows * schema.item_bytes() as u64;
    let mut s = 7u64;
    let observation = noise((EPISODE + 1) * 25, &mut s);
    let achieved = noise((EPISODE + 1) * 3, &mut s);
    let desired: Vec<f32> = noise(3, &mut s).repeat(EPISODE + 1);
    let action = noise(EPISODE * 4, &mut s);
    let reward = vec![-1.0f32; EPISODE];
    const OBS: &[&str] = &["observation", "achieved_goal", "desired_goal"];
    let her = Relabel {
        goal: "desired_goal",
        achieved: "achieved_goal",
        strategy: GoalStrategy::Future,
        fraction: 0.8,
    };
    let mut fill = Row::new("W7-fill".into(), "M steps/s", data);
    let mut relabeled = Row::new("W7-sample 256 HER".into(), "k batches/s", data);
    let mut plain = Row::new("W7-sample 256 plain".into(), "k batches/s", data);
    for run in 0..runs {
        let path = dir.join(format!("W7-{run}"));
        let t = Instant::now();
        let config = Config::new(schema.clone(), rows)
            .episodic()
            .seed(run as u64 + 1);
        let mut buf = ReplayBuffer::create(&path, config)?;
        for _ in 0..steps / EPISODE {
            buf.add_episode(
                &[
                    Column::new("observation", &observation).with_shape(&[EPISODE + 1, 25]),
                    Column::new("achieved_goal", &achieved).with_shape(&[EPISODE + 1, 3]),
                    Column::new("desired_goal", &desired).with_shape(&[EPISODE + 1, 3]),
                ],
                &[
                    Column::new("action", &action).with_shape(&[EPISODE, 4]),
                    Column::new("reward", &reward),
                ],
                false,
                true,
            )?;
        }
        fill.values
            .push(steps as f64 / t.elapsed().as_secs_f64() / 1e6);
        let mut batch = Batch::default();
        let request = Request::transitions(256, OBS).relabel(her);
        relabeled
            .values
            .push(rate(draws, || buf.sample_into(request, &mut batch))?);
        let request = Request::transitions(256, OBS);
        plain
            .values
            .push(rate(draws, || buf.sample_into(request, &mut batch))?);
        buf.close()?;
        let _ = std::fs::remove_dir_all(&path);
    }
    Ok(vec![fill, relabeled, plain])
}
