//! `replaystore demo`: a point-mass environment of our own fills a buffer; the demo
//! samples, closes, reopens, checks every item against the environment, and verifies.

use crate::fail::Status;
use std::path::PathBuf;
use std::time::Instant;

use replaystore::{Column, Config, DType, Error, ReplayBuffer, Request, Schema, verify};

/// A point mass chasing a goal: deterministic for a seed, episodes of varying length
/// (terminated on reaching the goal, truncated after `MAX_STEPS`).
struct PointMass {
    rng: u64,
    pos: [f32; 2],
    vel: [f32; 2],
    goal: [f32; 2],
    episode: u32,
    step: u32,
}

const MAX_STEPS: u32 = 200;

/// One environment step as stored.
struct Step {
    obs: [f32; 6],
    action: [f32; 2],
    reward: f32,
    next_obs: [f32; 6],
    terminated: bool,
    truncated: bool,
    episode: u32,
    step: u32,
}

impl PointMass {
    fn new(seed: u64) -> PointMass {
        let mut env = PointMass {
            rng: seed,
            pos: [0.0; 2],
            vel: [0.0; 2],
            goal: [0.0; 2],
            episode: 0,
            step: 0,
        };
        env.reset();
        env.episode = 0;
        env
    }

    /// SplitMix64, mapped to [-1, 1).
    fn uniform(&mut self) -> f32 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn reset(&mut self) {
        self.pos = [self.uniform(), self.uniform()];
        self.vel = [0.0; 2];
        self.goal = [self.uniform(), self.uniform()];
        self.episode += 1;
        self.step = 0;
    }

    fn obs(&self) -> [f32; 6] {
        [
            self.pos[0],
            self.pos[1],
            self.vel[0],
            self.vel[1],
            self.goal[0],
            self.goal[1],
        ]
    }

    fn step(&mut self) -> Step {
        let obs = self.obs();
        // A noisy proportional controller, so episodes end at different times.
        let mut action = [0.0f32; 2];
        for (i, a) in action.iter_mut().enumerate() {
            let to_goal = self.goal.get(i).unwrap_or(&0.0) - self.pos.get(i).unwrap_or(&0.0);
            *a = (0.5 * to_goal + 0.8 * self.uniform()).clamp(-1.0, 1.0);
        }
        for i in 0..2 {
            if let (Some(v), Some(p), Some(a)) =
                (self.vel.get_mut(i), self.pos.get_mut(i), action.get(i))
            {
                *v = 0.9 * *v + 0.1 * a;
                *p += *v;
            }
        }
        self.step += 1;
        let dist =
            ((self.pos[0] - self.goal[0]).powi(2) + (self.pos[1] - self.goal[1]).powi(2)).sqrt();
        let terminated = dist < 0.05;
        let truncated = !terminated && self.step >= MAX_STEPS;
        let s = Step {
            obs,
            action,
            reward: -dist,
            next_obs: self.obs(),
            terminated,
            truncated,
            episode: self.episode,
            step: self.step - 1,
        };
        if terminated || truncated {
            self.reset();
        }
        s
    }
}

fn schema() -> Result<Schema, Error> {
    Schema::builder()
        .field("obs", DType::F32, &[6])
        .field("action", DType::F32, &[2])
        .field("reward", DType::F32, &[])
        .field("next_obs", DType::F32, &[6])
        .field("terminated", DType::Bool, &[])
        .field("truncated", DType::Bool, &[])
        .field("episode", DType::U32, &[])
        .field("step", DType::U32, &[])
        .build()
}

fn columns(s: &Step) -> [Column<'_>; 8] {
    [
        Column::new("obs", &s.obs),
        Column::new("action", &s.action),
        Column::scalar("reward", &s.reward),
        Column::new("next_obs", &s.next_obs),
        Column::scalar("terminated", &s.terminated),
        Column::scalar("truncated", &s.truncated),
        Column::scalar("episode", &s.episode),
        Column::scalar("step", &s.step),
    ]
}

/// The bytes the buffer must hold for a step, field after field.
fn expected_bytes(s: &Step) -> Vec<u8> {
    columns(s)
        .iter()
        .flat_map(|c| c.bytes().iter().copied())
        .collect()
}

const ENV_SEED: u64 = 2024;
const BATCH: usize = 256;

pub fn run(dir: Option<PathBuf>, steps: u64) -> Result<Status, Error> {
    let dir = dir.unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("replaystore-demo-{secs}-{}", std::process::id()))
    });
    let steps = steps.max(1);
    let capacity = (steps / 2).max(1);
    let schema = schema()?;
    say!(
        "replaystore demo: {steps} steps of a point-mass environment into a buffer of \
         {capacity} items (half the steps: the ring wraps and evicts)"
    );
    say!("  buffer   {}", dir.display());

    let t = Instant::now();
    let config = Config::new(schema, capacity).seed(7).prioritized(0.6, 1e-6);
    let mut buf = ReplayBuffer::create(&dir, config)?;
    say!("  create   {:.1} ms (disk reserved up front)", ms(t));

    let mut env = PointMass::new(ENV_SEED);
    let mut episodes = 0u64;
    let t = Instant::now();
    for _ in 0..steps {
        let s = env.step();
        episodes += u64::from(s.terminated || s.truncated);
        buf.add(&columns(&s))?;
    }
    let secs = t.elapsed().as_secs_f64();
    say!(
        "  add      {steps} steps one at a time in {:.1} ms: {:.2} M steps/s (incl. the environment), {episodes} episodes ended",
        secs * 1e3,
        steps as f64 / secs / 1e6
    );

    let batches = 2000;
    let mut batch = replaystore::Batch::default();
    let t = Instant::now();
    for _ in 0..batches {
        buf.sample_into(BATCH, &mut batch)?;
    }
    let secs = t.elapsed().as_secs_f64();
    say!(
        "  sample   {batches} uniform batches of {BATCH} (every field copied out) in {:.1} ms: {:.0} k batches/s",
        secs * 1e3,
        batches as f64 / secs / 1e3
    );

    // Prioritized replay as a DQN learner drives it: sample with importance weights,
    // then set each sampled item's priority to its (here: made-up) TD error.
    let spec = Request::rows(BATCH).prioritized(0.4);
    let mut td = vec![0f32; BATCH];
    let t = Instant::now();
    for _ in 0..batches {
        buf.sample_into(spec, &mut batch)?;
        let reward = batch.get::<f32>("reward")?;
        for ((e, r), w) in td.iter_mut().zip(reward).zip(batch.weights()) {
            *e = r.abs() * w + 0.01;
        }
        buf.update_priorities(batch.indices(), &td)?;
    }
    let secs = t.elapsed().as_secs_f64();
    say!(
        "  per      {batches} prioritized batches of {BATCH} + priority updates in {:.1} ms: {:.1} k iterations/s",
        secs * 1e3,
        batches as f64 / secs / 1e3
    );
    let before = buf.priority_summary();

    let t = Instant::now();
    buf.close()?;
    say!("  close    {:.1} ms (msync + durable commit)", ms(t));

    let t = Instant::now();
    let mut buf = ReplayBuffer::open(&dir)?;
    let same_priorities = buf.priority_summary() == before;
    say!(
        "  reopen   {:.1} ms, {} items live (indices {}..{}), no rebuild; priorities {}",
        ms(t),
        buf.len(),
        buf.live().start,
        buf.live().end,
        if same_priorities {
            "as they were"
        } else {
            "CHANGED"
        }
    );

    // Every live item must be byte-identical to the step the environment produced.
    let t = Instant::now();
    let mut env = PointMass::new(ENV_SEED);
    let live = buf.live();
    let mut mismatches = 0u64;
    let mut index = 0u64;
    let mut chunk: Vec<u64> = Vec::new();
    let mut expected = Vec::new();
    while index < live.end {
        let s = env.step();
        if index >= live.start {
            chunk.push(index);
            expected.push(expected_bytes(&s));
        }
        index += 1;
        if chunk.len() == 4096 || (index == live.end && !chunk.is_empty()) {
            let got = buf.get_many(&chunk)?;
            mismatches += expected
                .iter()
                .enumerate()
                .filter(|(i, want)| got.item_bytes(*i) != **want)
                .count() as u64;
            chunk.clear();
            expected.clear();
        }
    }
    let ok = mismatches == 0;
    say!(
        "  check    {} items against the environment in {:.1} ms: {}",
        buf.len(),
        ms(t),
        if ok {
            "all byte-identical".to_string()
        } else {
            format!("{mismatches} MISMATCHED")
        }
    );
    // Checkpoint, run ahead, roll back: what resuming from a model checkpoint does.
    let t = Instant::now();
    let state = buf.get_state_named("demo-checkpoint")?;
    let save_ms = ms(t);
    let next_batch = buf.sample(Request::rows(BATCH).prioritized(0.4))?;
    let ahead = (live.end - live.start) / 10 + 1;
    for _ in 0..ahead {
        buf.add(&columns(&env.step()))?;
    }
    let t = Instant::now();
    buf.set_state(&state)?;
    let load_ms = ms(t);
    let again = buf.sample(Request::rows(BATCH).prioritized(0.4))?;
    let resumed = buf.live() == live
        && again.indices() == next_batch.indices()
        && again.weights() == next_batch.weights();
    say!(
        "  state    get_state {save_ms:.1} ms ({} bytes of State), ran {ahead} steps ahead, set_state {load_ms:.1} ms: {}",
        state.to_bytes().len(),
        if resumed {
            "same items, same next batch"
        } else {
            "DIFFERENT after set_state"
        }
    );
    let stats = buf.stats();
    drop(buf);

    let t = Instant::now();
    let report = verify(&dir)?;
    say!(
        "  verify   {} in {:.1} ms: {} segments, {} items ({} snapshot), {} problems",
        if report.is_sound() {
            "sound"
        } else {
            "DAMAGED"
        },
        ms(t),
        report.segments_checked,
        report.items_checked,
        report.snapshots_checked,
        report.problems.len()
    );
    say!(
        "  stats    added {}  evicted {}  sampled {}  on disk {}",
        stats.added,
        stats.evicted,
        stats.sampled,
        crate::info::human(stats.bytes_on_disk)
    );
    say!(
        "  next     replaystore info {0}   |   replaystore verify {0}   |   replaystore snapshots {0}",
        dir.display()
    );
    Ok(if ok && same_priorities && resumed && report.is_sound() {
        Status::SUCCESS
    } else {
        Status::from(1)
    })
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
