//! The standard benchmark workloads of `docs/WORKLOADS.md` (W1 vector transitions,
//! W2 Atari frames), defined once so that criterion benches and `replaystore bench`
//! measure exactly the same items. It lives beside the command and is compiled into the
//! criterion benches by path, so the library carries no benchmark code.

use std::sync::OnceLock;

use replaystore::{Column, DType, ReplayBuffer, Result, Schema};

/// Bytes of one W2 observation (4 stacked 84x84 frames).
pub(crate) const W2_OBS: usize = 4 * 84 * 84;
/// Distinct W2 observations, cycled (the content does not matter, its size does).
pub(crate) const W2_DISTINCT: usize = 64;

/// One of the standard workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `obs` f32[17], `next_obs` f32[17], `action` f32[6], `reward` f32, `done` bool;
    /// capacity 10^6.
    W1,
    /// `obs` u8[4,84,84], `action` i64, `reward` f32, `done` bool; capacity 10^5.
    W2,
}

impl Workload {
    /// "W1" or "W2".
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
        }
    }

    /// The standard capacity.
    pub fn capacity(self) -> u64 {
        match self {
            Workload::W1 => 1_000_000,
            Workload::W2 => 100_000,
        }
    }

    /// The schema.
    pub fn schema(self) -> Result<Schema> {
        match self {
            Workload::W1 => Schema::builder()
                .field("obs", DType::F32, &[17])
                .field("next_obs", DType::F32, &[17])
                .field("action", DType::F32, &[6])
                .field("reward", DType::F32, &[])
                .field("done", DType::Bool, &[])
                .build(),
            Workload::W2 => Schema::builder()
                .field("obs", DType::U8, &[4, 84, 84])
                .field("action", DType::I64, &[])
                .field("reward", DType::F32, &[])
                .field("done", DType::Bool, &[])
                .build(),
        }
    }

    /// Adds item `i` of the workload (a pure function of `i`).
    pub fn add(self, buf: &mut ReplayBuffer, i: u64) -> Result<u64> {
        let reward = (i % 7) as f32;
        let done = i % 200 == 199;
        match self {
            Workload::W1 => {
                let obs: [f32; 17] = std::array::from_fn(|k| (i * 17 + k as u64) as f32);
                let next = obs.map(|x| x + 0.5);
                let action: [f32; 6] = std::array::from_fn(|k| ((i + k as u64) % 13) as f32);
                buf.add(&[
                    Column::new("obs", &obs),
                    Column::new("next_obs", &next),
                    Column::new("action", &action),
                    Column::scalar("reward", &reward),
                    Column::scalar("done", &done),
                ])
            }
            Workload::W2 => {
                let frames = w2_frames();
                let f = (i as usize % W2_DISTINCT) * W2_OBS;
                let obs = frames.get(f..f + W2_OBS).unwrap_or(&[]);
                let action = (i % 18) as i64;
                buf.add(&[
                    Column::new("obs", obs).with_shape(&[4, 84, 84]),
                    Column::scalar("action", &action),
                    Column::scalar("reward", &reward),
                    Column::scalar("done", &done),
                ])
            }
        }
    }

    /// Adds the next `count` items (continuing from the buffer's tail).
    pub fn fill(self, buf: &mut ReplayBuffer, count: u64) -> Result<()> {
        let from = buf.live().end;
        for i in from..from + count {
            self.add(buf, i)?;
        }
        Ok(())
    }
}

/// Items `from .. from + n` of a workload as columns with the batch dimension first,
/// for `add_batch` (W1-addB adds chunks of 1,000).
#[derive(Clone, Debug)]
pub struct Chunk {
    workload: Workload,
    n: usize,
    obs_f32: Vec<f32>,
    next_f32: Vec<f32>,
    action_f32: Vec<f32>,
    obs_u8: Vec<u8>,
    action_i64: Vec<i64>,
    reward: Vec<f32>,
    done: Vec<bool>,
}

impl Chunk {
    /// The items `from .. from + n`, the same bytes `Workload::add` stores.
    pub fn new(workload: Workload, from: u64, n: usize) -> Chunk {
        let items = from..from + n as u64;
        let mut c = Chunk {
            workload,
            n,
            obs_f32: Vec::new(),
            next_f32: Vec::new(),
            action_f32: Vec::new(),
            obs_u8: Vec::new(),
            action_i64: Vec::new(),
            reward: items.clone().map(|i| (i % 7) as f32).collect(),
            done: items.clone().map(|i| i % 200 == 199).collect(),
        };
        match workload {
            Workload::W1 => {
                for i in items {
                    let obs = (0..17).map(|k| (i * 17 + k) as f32);
                    c.obs_f32.extend(obs.clone());
                    c.next_f32.extend(obs.map(|x| x + 0.5));
                    c.action_f32.extend((0..6).map(|k| ((i + k) % 13) as f32));
                }
            }
            Workload::W2 => {
                let frames = w2_frames();
                for i in items {
                    let f = (i as usize % W2_DISTINCT) * W2_OBS;
                    c.obs_u8
                        .extend_from_slice(frames.get(f..f + W2_OBS).unwrap_or(&[]));
                    c.action_i64.push((i % 18) as i64);
                }
            }
        }
        c
    }

    /// The columns, shaped `[n, field shape...]`.
    pub fn columns(&self) -> Vec<Column<'_>> {
        let n = self.n;
        match self.workload {
            Workload::W1 => vec![
                Column::new("obs", &self.obs_f32).with_shape(&[n, 17]),
                Column::new("next_obs", &self.next_f32).with_shape(&[n, 17]),
                Column::new("action", &self.action_f32).with_shape(&[n, 6]),
                Column::new("reward", &self.reward),
                Column::new("done", &self.done),
            ],
            Workload::W2 => vec![
                Column::new("obs", &self.obs_u8).with_shape(&[n, 4, 84, 84]),
                Column::new("action", &self.action_i64),
                Column::new("reward", &self.reward),
                Column::new("done", &self.done),
            ],
        }
    }
}

#[allow(
    dead_code,
    reason = "the episodes bench uses it; the command does not yet"
)]
/// Bytes of one W2 frame (one 84x84 observation, unstacked).
const W2_FRAME: usize = 84 * 84;

/// W2 with native frame stacking (issue 6): one 84x84 frame per row of an episodic
/// buffer (`obs` u8[84,84], `action` i64, `reward` f32), stacked 4 deep at sample time
/// instead of stored 4 deep per row. Episodes run 500 to 2,499 steps, terminated.
#[derive(Clone, Debug, Default)]
pub struct W2Frames {
    /// Rows added so far.
    rows: u64,
    /// Episodes begun so far.
    episodes: u64,
    /// Steps left in the open episode (0: the next row is a reset).
    left: u64,
}

impl W2Frames {
    /// The schema: `obs` u8[84,84], `action` i64, `reward` f32.
    pub fn schema() -> Result<Schema> {
        Schema::builder()
            .field("obs", DType::U8, &[84, 84])
            .field("action", DType::I64, &[])
            .field("reward", DType::F32, &[])
            .build()
    }

    /// Adds the next `count` rows: a reset row, then steps until the episode's length,
    /// the last one terminated, then the next episode.
    pub fn fill(&mut self, buf: &mut ReplayBuffer, count: u64) -> Result<()> {
        let frames = w2_frames();
        for _ in 0..count {
            let i = self.rows;
            let f = (i as usize % (frames.len() / W2_FRAME)) * W2_FRAME;
            let obs = frames.get(f..f + W2_FRAME).unwrap_or(&[]);
            let obs = Column::new("obs", obs).with_shape(&[84, 84]);
            if self.left == 0 {
                buf.add_reset(&[obs])?;
                self.left = 500 + self.episodes * 7919 % 2000;
                self.episodes += 1;
            } else {
                self.left -= 1;
                let action = (i % 18) as i64;
                let reward = (i % 7) as f32;
                buf.add_step(
                    &[
                        obs,
                        Column::scalar("action", &action),
                        Column::scalar("reward", &reward),
                    ],
                    self.left == 0,
                    false,
                )?;
            }
            self.rows += 1;
        }
        Ok(())
    }
}

/// W1 as episodes (issue 6): one row per step of an episodic buffer (`obs` f32[17]
/// stored once, the step header instead of `next_obs`; `action` f32[6], `reward` f32),
/// episodes of [`W1Episodes::STEPS`] steps, each terminated. Row `i`'s observation is
/// `i * 17 + k` for element `k`.
#[derive(Clone, Debug, Default)]
pub struct W1Episodes {
    /// Rows added so far.
    rows: u64,
}

impl W1Episodes {
    /// Steps per episode (MuJoCo's 1,000-step horizon).
    pub const STEPS: u64 = 1_000;

    /// The schema: `obs` f32[17], `action` f32[6], `reward` f32.
    pub fn schema() -> Result<Schema> {
        Schema::builder()
            .field("obs", DType::F32, &[17])
            .field("action", DType::F32, &[6])
            .field("reward", DType::F32, &[])
            .build()
    }

    /// Adds the next `count` rows: a reset row, then `STEPS` steps, the last terminated.
    pub fn fill(&mut self, buf: &mut ReplayBuffer, count: u64) -> Result<()> {
        for _ in 0..count {
            let i = self.rows;
            let obs: [f32; 17] = std::array::from_fn(|k| (i * 17 + k as u64) as f32);
            let t = i % (Self::STEPS + 1);
            if t == 0 {
                buf.add_reset(&[Column::new("obs", &obs)])?;
            } else {
                let action = [(i % 13) as f32; 6];
                let reward = (i % 7) as f32;
                let cols = [
                    Column::new("obs", &obs),
                    Column::new("action", &action),
                    Column::scalar("reward", &reward),
                ];
                buf.add_step(&cols, t == Self::STEPS, false)?;
            }
            self.rows += 1;
        }
        Ok(())
    }
}

fn w2_frames() -> &'static [u8] {
    static FRAMES: OnceLock<Vec<u8>> = OnceLock::new();
    FRAMES.get_or_init(|| {
        (0..W2_DISTINCT * W2_OBS)
            .map(|i| (i * 7 % 251) as u8)
            .collect()
    })
}

/// A xorshift step: the benches' reproducible random numbers.
pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A priority in (0.01, 1.01) from a xorshift draw: what the prioritized benches write
/// back after each draw, as a learner writes TD errors.
pub fn random_priority(s: &mut u64) -> f32 {
    (xorshift(s) >> 40) as f32 / (1u64 << 24) as f32 + 0.01
}

/// Bytes this process has caused to be written to storage so far (Linux
/// `/proc/self/io` `write_bytes`; 0 where unknown): what a checkpoint costs in disk.
pub fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("write_bytes: ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}
