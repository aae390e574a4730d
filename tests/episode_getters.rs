//! Promises of the episode getters (issue 6): the examples of RLlib's
//! `SingleAgentEpisode` documentation (`get_observations`, `get_actions`,
//! `get_rewards` with negative indices, slices, lists, `fill` and
//! `neg_index_as_lookback`), read from episodes stored in a buffer, and `cut`
//! continuing an unfinished episode with a lookback.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use replaystore::Indices;
use replaystore::{Column, Config, DType, EpisodeChunk, Error, GetOptions, ReplayBuffer, Schema};

fn create(dir: &std::path::Path, capacity: u64) -> ReplayBuffer {
    let schema = Schema::builder()
        .field("obs", DType::I64, &[])
        .field("action", DType::I64, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    ReplayBuffer::create(dir, Config::new(schema, capacity).episodic()).unwrap()
}

fn step(buf: &mut ReplayBuffer, obs: i64, action: i64, reward: f32) {
    buf.add_step(
        &[
            Column::scalar("obs", &obs),
            Column::scalar("action", &action),
            Column::scalar("reward", &reward),
        ],
        false,
        false,
    )
    .unwrap();
}

fn plain() -> GetOptions {
    GetOptions::default()
}

fn fill(v: f64) -> GetOptions {
    GetOptions {
        fill: Some(v),
        ..GetOptions::default()
    }
}

fn lookback() -> GetOptions {
    GetOptions {
        neg_index_as_lookback: true,
        ..GetOptions::default()
    }
}

fn slice(start: Option<i64>, stop: Option<i64>) -> Indices {
    Indices::range(start, stop)
}

/// Reads observations (`"obs"`), actions or rewards of a chunk as i64 / f32.
struct Getter<'a> {
    buf: &'a ReplayBuffer,
    chunk: EpisodeChunk,
}

impl Getter<'_> {
    fn obs(&self, i: Indices, o: GetOptions) -> Vec<i64> {
        let a = self
            .buf
            .get_observations(&self.chunk, "obs", &i, o)
            .unwrap();
        a.as_slice::<i64>().unwrap().to_vec()
    }

    fn actions(&self, i: Indices, o: GetOptions) -> Vec<i64> {
        let a = self.buf.get_steps(&self.chunk, "action", &i, o).unwrap();
        a.as_slice::<i64>().unwrap().to_vec()
    }

    fn rewards(&self, i: Indices, o: GetOptions) -> Vec<f32> {
        let a = self.buf.get_steps(&self.chunk, "reward", &i, o).unwrap();
        a.as_slice::<f32>().unwrap().to_vec()
    }
}

/// RLlib: `observations=[0, 1, 2, 3], actions=[1, 2, 3], rewards=[1, 2, 3]`, no
/// lookback.
#[test]
fn rllib_getter_examples_without_lookback() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"), 100);
    let id = buf
        .add_reset(&[Column::scalar("obs", &0i64)])
        .unwrap()
        .episode;
    for t in 1..=3i64 {
        step(&mut buf, t, t, t as f32);
    }
    let g = Getter {
        chunk: buf.episode_chunk(id).unwrap(),
        buf: &buf,
    };
    use Indices::{At, List};
    assert_eq!(g.obs(At(-1), plain()), [3]);
    assert_eq!(g.obs(At(0), plain()), [0]);
    assert_eq!(g.obs(List(vec![0, 2]), plain()), [0, 2]);
    assert_eq!(g.obs(List(vec![-1, 0]), plain()), [3, 0]);
    assert_eq!(g.obs(slice(None, Some(2)), plain()), [0, 1]);
    assert_eq!(g.obs(slice(Some(-2), None), plain()), [2, 3]);
    assert_eq!(g.obs(slice(Some(-6), Some(-2)), fill(-9.0)), [-9, -9, 0, 1]);
    assert_eq!(g.obs(slice(Some(2), Some(5)), fill(-7.0)), [2, 3, -7]);
    // -1 "one left of ts=0" with fill: the fill value (RLlib's zero-hot case).
    let o = GetOptions {
        neg_index_as_lookback: true,
        fill: Some(0.0),
    };
    assert_eq!(g.obs(At(-1), o), [0]);

    assert_eq!(g.actions(At(-1), plain()), [3]);
    assert_eq!(g.actions(At(0), plain()), [1]);
    assert_eq!(g.actions(List(vec![0, 2]), plain()), [1, 3]);
    assert_eq!(g.actions(List(vec![-1, 0]), plain()), [3, 1]);
    assert_eq!(g.actions(slice(None, Some(2)), plain()), [1, 2]);
    assert_eq!(g.actions(slice(Some(-2), None), plain()), [2, 3]);
    // RLlib's docstring comment says [-9, -9, 1, 2]; its InfiniteLookbackBuffer
    // returns [-9, -9, 1] (start -2, stop 1 over 3 entries), as the observation
    // example its doctest checks does. This follows the code.
    assert_eq!(
        g.actions(slice(Some(-5), Some(-2)), fill(-9.0)),
        [-9, -9, 1]
    );
    assert_eq!(
        g.actions(slice(Some(1), Some(5)), fill(-7.0)),
        [2, 3, -7, -7]
    );

    assert_eq!(g.rewards(At(-1), plain()), [3.0]);
    assert_eq!(g.rewards(At(0), plain()), [1.0]);
    assert_eq!(g.rewards(List(vec![0, 2]), plain()), [1.0, 3.0]);
    assert_eq!(g.rewards(List(vec![-1, 0]), plain()), [3.0, 1.0]);
    assert_eq!(g.rewards(slice(None, Some(2)), plain()), [1.0, 2.0]);
    assert_eq!(g.rewards(slice(Some(-2), None), plain()), [2.0, 3.0]);
    assert_eq!(
        g.rewards(slice(Some(-5), Some(-2)), fill(0.0)),
        [0.0, 0.0, 1.0]
    );
    assert_eq!(
        g.rewards(slice(Some(1), Some(5)), fill(0.0)),
        [2.0, 3.0, 0.0, 0.0]
    );

    // All of the chunk; out of range without fill is a typed error naming the index.
    assert_eq!(g.obs(Indices::All, plain()), [0, 1, 2, 3]);
    assert_eq!(g.actions(Indices::All, plain()), [1, 2, 3]);
    let err = buf
        .get_observations(&g.chunk, "obs", &At(4), plain())
        .unwrap_err();
    assert!(matches!(err, Error::OutOfWindow { index: 4, .. }), "{err}");
}

/// RLlib: actions `[4, 5, 6, 7, 8, 9]` of which `[4, 5, 6]` are the lookback
/// (ts = 0 is 7), made here by `cut` with a lookback of 3 after three steps, then
/// three more steps; and rewards `[10, 11, 12, 13, 14]` with a lookback of 2.
#[test]
fn rllib_lookback_examples_through_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"), 100);
    let id = buf
        .add_reset(&[Column::scalar("obs", &0i64)])
        .unwrap()
        .episode;
    for a in 4..=6i64 {
        step(&mut buf, a - 3, a, a as f32);
    }
    let first = buf.episode_chunk(id).unwrap();
    let chunk = buf.cut(&first, 3).unwrap();
    assert_eq!(
        chunk,
        EpisodeChunk {
            id,
            t0: 3,
            lookback: 3,
            steps: None,
        }
    );
    // Just cut: one observation (the newest, ts = 0), no actions yet.
    let g = Getter { buf: &buf, chunk };
    assert_eq!(g.obs(Indices::All, plain()), [3]);
    assert!(g.actions(Indices::All, plain()).is_empty());
    for a in 7..=9i64 {
        step(&mut buf, a - 3, a, a as f32);
    }
    let g = Getter { buf: &buf, chunk };
    assert_eq!(g.actions(Indices::At(-1), lookback()), [6]);
    assert_eq!(g.actions(slice(Some(-2), Some(1)), lookback()), [5, 6, 7]);
    assert_eq!(g.actions(Indices::At(-1), plain()), [9]);
    assert_eq!(g.actions(Indices::All, plain()), [7, 8, 9]);
    assert_eq!(g.obs(Indices::All, plain()), [3, 4, 5, 6]);
    assert_eq!(g.obs(slice(Some(-3), Some(1)), lookback()), [0, 1, 2, 3]);

    let id = buf
        .add_reset(&[Column::scalar("obs", &0i64)])
        .unwrap()
        .episode;
    for r in [10.0f32, 11.0] {
        step(&mut buf, 0, 0, r);
    }
    let chunk = buf.cut(&buf.episode_chunk(id).unwrap(), 2).unwrap();
    for r in [12.0f32, 13.0, 14.0] {
        step(&mut buf, 0, 0, r);
    }
    let g = Getter { buf: &buf, chunk };
    assert_eq!(
        g.rewards(slice(Some(-7), Some(-2)), fill(0.0)),
        [0.0, 0.0, 10.0, 11.0, 12.0]
    );
}

/// A lookback never reaches before the episode's start nor into evicted rows; an
/// ended episode cannot be cut; an evicted episode is a typed error.
#[test]
fn lookbacks_stop_at_the_episode_start_and_the_ring_head() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"), 8);
    let id = buf
        .add_reset(&[Column::scalar("obs", &0i64)])
        .unwrap()
        .episode;
    step(&mut buf, 1, 1, 1.0);
    let chunk = buf.cut(&buf.episode_chunk(id).unwrap(), 10).unwrap();
    let g = Getter { buf: &buf, chunk };
    // Only one step before the cut: lookback -2 is outside, filled or refused.
    assert_eq!(g.actions(Indices::At(-1), lookback()), [1]);
    assert_eq!(
        g.actions(
            Indices::At(-2),
            GetOptions {
                fill: Some(-1.0),
                ..lookback()
            }
        ),
        [-1]
    );
    assert_eq!(g.obs(slice(Some(-5), Some(1)), lookback()), [0, 1]);
    // Eight more steps: the ring (8 rows, 2..=9) keeps observations 2..=9 and the step
    // entries of rows 2..=9 (actions 2..=9; entry k is row k + 1).
    for t in 2..=9i64 {
        step(&mut buf, t, t, t as f32);
    }
    let chunk = buf.cut(&chunk, 100).unwrap();
    let g = Getter { buf: &buf, chunk };
    assert_eq!(
        g.obs(slice(Some(-100), Some(1)), lookback()),
        [2, 3, 4, 5, 6, 7, 8, 9]
    );
    assert_eq!(
        g.actions(slice(Some(-100), Some(0)), lookback()),
        [2, 3, 4, 5, 6, 7, 8, 9]
    );
    // The whole-episode chunk begins at the first stored observation.
    let whole = buf.episode_chunk(id).unwrap();
    assert_eq!(whole.t0, 2);
    let g = Getter {
        buf: &buf,
        chunk: whole,
    };
    assert_eq!(g.obs(Indices::At(0), plain()), [2]);
    // A chunk whose first entry was evicted is an error naming the episode.
    let old = EpisodeChunk {
        id,
        t0: 1,
        lookback: 0,
        steps: None,
    };
    let err = buf
        .get_observations(&old, "obs", &Indices::All, plain())
        .unwrap_err();
    assert!(matches!(err, Error::NoSuchEpisode { id: 0, .. }), "{err}");
    buf.add_step(
        &[
            Column::scalar("obs", &10i64),
            Column::scalar("action", &10i64),
            Column::scalar("reward", &0.0f32),
        ],
        true,
        false,
    )
    .unwrap();
    let err = buf.cut(&chunk, 1).unwrap_err();
    assert!(matches!(err, Error::NoSuchEpisode { id: 0, .. }), "{err}");
    let mut newest = 0;
    for _ in 0..9 {
        newest = buf
            .add_reset(&[Column::scalar("obs", &0i64)])
            .unwrap()
            .episode;
    }
    let err = buf.episode_chunk(id).unwrap_err();
    assert!(matches!(err, Error::NoSuchEpisode { id: 0, .. }), "{err}");
    let live = buf.episode_chunk(newest).unwrap();
    let err = buf
        .get_steps(&live, "nope", &Indices::All, plain())
        .unwrap_err();
    assert!(matches!(err, Error::UnknownField { .. }), "{err}");
}

/// Promise (issue 32, point 4): a whole episode added in one call reads back as added
/// step by step, and RLlib's `slice` gives a chunk of steps `start..stop` with its
/// observations (one more) and a lookback before it.
#[test]
fn add_episode_and_slice_read_as_rllib_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buf = create(&tmp.path().join("b"), 100);
    let obs = [0i64, 1, 2, 3, 4, 5];
    let actions = [1i64, 2, 3, 4, 5];
    let rewards = [0.1f32, 0.2, 0.3, 0.4, 0.5];
    let e = buf
        .add_episode(
            &[Column::new("obs", &obs)],
            &[
                Column::new("action", &actions),
                Column::new("reward", &rewards),
            ],
            false,
            true,
        )
        .unwrap();
    assert_eq!((e.rows, e.steps()), (6, 5));
    assert_eq!(e.end, Some(replaystore::End::Truncated));
    let whole = buf.episode_chunk(e.id).unwrap();
    let get = |c: &EpisodeChunk, field: &str, i: Indices, o: GetOptions| {
        let a = if field == "obs" {
            buf.get_observations(c, field, &i, o)
        } else {
            buf.get_steps(c, field, &i, o)
        };
        a.unwrap().as_slice::<i64>().unwrap().to_vec()
    };
    assert_eq!(get(&whole, "obs", Indices::All, plain()), obs);
    assert_eq!(get(&whole, "action", Indices::All, plain()), actions);
    // episode.slice(slice(1, 3)): observations 1..=3, actions of steps 1 and 2.
    let s = buf.slice(&whole, 1, Some(3), 0).unwrap();
    assert_eq!(get(&s, "obs", Indices::All, plain()), [1, 2, 3]);
    assert_eq!(get(&s, "action", Indices::All, plain()), [2, 3]);
    assert_eq!(get(&s, "obs", Indices::At(-1), plain()), [3]);
    // With a lookback of one: entry -1 before ts = 0 is the observation before it.
    let s = buf.slice(&whole, 1, Some(3), 1).unwrap();
    assert_eq!(get(&s, "obs", Indices::At(-1), lookback()), [0]);
    assert_eq!(get(&s, "action", Indices::At(-1), lookback()), [1]);
    // Past its end a slice reads as fill says, or not at all.
    assert_eq!(
        get(&s, "action", Indices::List(vec![0, 5]), fill(-7.0)),
        [2, -7]
    );
    assert!(
        buf.get_steps(&s, "action", &Indices::At(5), plain())
            .is_err()
    );
    // A slice of a slice counts from its own ts = 0; a stop past the end is the end.
    let s2 = buf.slice(&s, 1, Some(99), 0).unwrap();
    assert_eq!(get(&s2, "obs", Indices::All, plain()), [2, 3]);
    // Rows that do not match: refused before anything is added.
    let len = buf.len();
    let short = [1i64, 2];
    let refused = buf.add_episode(
        &[Column::new("obs", &obs)],
        &[
            Column::new("action", &short),
            Column::new("reward", &rewards),
        ],
        false,
        false,
    );
    assert!(
        matches!(refused, Err(Error::ShapeMismatch { .. })),
        "{refused:?}"
    );
    assert_eq!(buf.len(), len);
}
