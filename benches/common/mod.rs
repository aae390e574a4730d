//! What the benches share: the W1 and W2 schemas and data of docs/WORKLOADS.md.
#![allow(dead_code, reason = "each bench uses a different subset")]
#![allow(
    clippy::indexing_slicing,
    reason = "the bench indexes its own synthetic arrays, sized by construction"
)]

use replaystore::{Column, Config, DType, ReplayBuffer, Schema};

pub const W1_CAP: u64 = 1_000_000;
pub const W2_CAP: u64 = 100_000;

pub fn w1_schema() -> Schema {
    Schema::builder()
        .field("obs", DType::F32, &[17])
        .field("next_obs", DType::F32, &[17])
        .field("action", DType::F32, &[6])
        .field("reward", DType::F32, &[])
        .field("done", DType::Bool, &[])
        .build()
        .expect("W1 schema")
}

pub fn w2_schema() -> Schema {
    Schema::builder()
        .field("obs", DType::U8, &[4, 84, 84])
        .field("action", DType::I64, &[])
        .field("reward", DType::F32, &[])
        .field("done", DType::Bool, &[])
        .build()
        .expect("W2 schema")
}

/// W1 data: `n` transitions of distinct values, columnar.
pub struct W1Data {
    pub obs: Vec<f32>,
    pub next_obs: Vec<f32>,
    pub action: Vec<f32>,
    pub reward: Vec<f32>,
    pub done: Vec<bool>,
}

impl W1Data {
    pub fn new(n: usize) -> W1Data {
        W1Data {
            obs: (0..n * 17).map(|i| i as f32).collect(),
            next_obs: (0..n * 17).map(|i| i as f32 + 0.5).collect(),
            action: (0..n * 6).map(|i| (i % 13) as f32).collect(),
            reward: (0..n).map(|i| (i % 7) as f32).collect(),
            done: (0..n).map(|i| i % 200 == 199).collect(),
        }
    }

    pub fn row(&self, i: usize) -> [Column<'_>; 5] {
        [
            Column::new("obs", &self.obs[i * 17..i * 17 + 17]),
            Column::new("next_obs", &self.next_obs[i * 17..i * 17 + 17]),
            Column::new("action", &self.action[i * 6..i * 6 + 6]),
            Column::new("reward", &self.reward[i..i + 1]),
            Column::new("done", &self.done[i..i + 1]),
        ]
    }

    pub fn chunk(&self, i: usize, n: usize) -> [Column<'_>; 5] {
        [
            Column::new("obs", &self.obs[i * 17..(i + n) * 17]).with_shape(&[n, 17]),
            Column::new("next_obs", &self.next_obs[i * 17..(i + n) * 17]).with_shape(&[n, 17]),
            Column::new("action", &self.action[i * 6..(i + n) * 6]).with_shape(&[n, 6]),
            Column::new("reward", &self.reward[i..i + n]),
            Column::new("done", &self.done[i..i + n]),
        ]
    }
}

/// A full W1 buffer of `config` (W1 schema, capacity 10^6) in `dir/name`.
pub fn w1_fill(dir: &std::path::Path, name: &str, config: Config, data: &W1Data) -> ReplayBuffer {
    let mut buf = ReplayBuffer::create(dir.join(name), config).expect("create");
    for i in (0..W1_CAP as usize).step_by(1000) {
        buf.add_batch(&data.chunk(i, 1000)).expect("add");
    }
    buf
}

pub fn w2_add(buf: &mut ReplayBuffer, frames: &[u8], i: u64) -> u64 {
    let f = (i % 64) as usize * 28_224;
    let action = (i % 18) as i64;
    let reward = (i % 3) as f32;
    let done = i % 1000 == 999;
    buf.add(&[
        Column::new("obs", &frames[f..f + 28_224]).with_shape(&[4, 84, 84]),
        Column::scalar("action", &action),
        Column::scalar("reward", &reward),
        Column::scalar("done", &done),
    ])
    .expect("add")
}

pub fn w1_full(dir: &std::path::Path, data: &W1Data) -> ReplayBuffer {
    w1_fill(dir, "w1", Config::new(w1_schema(), W1_CAP).seed(1), data)
}
