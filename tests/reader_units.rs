//! Promise: a reader draws transitions (n-step, stacked, windows), sequences with
//! burn-in, episodes, fragments and groups as the writer draws them — the same units for
//! the same rows and RNG stream, through mappings or `pread`, from a reader that follows
//! the writer's adds or one opened afresh — and, while a writer laps a small ring under
//! reader processes, never serves a unit with rows of two episodes or a torn row, nor
//! reports too few units because the writer evicted what one look read. Each row also
//! carries a text observation (`say`, a function of the row's `[tag, t]`), so every
//! unit's values are checked against the rows its fixed fields came from.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::Path;

use common::{KillOnDrop, reader_result, spawn_child, xorshift};
use replaystore::{
    Batch, Column, Config, DType, Error, Reader, ReplayBuffer, Request, RowAccess, Schema, VarKind,
};

const CHILD_ENV: &str = "REPLAYSTORE_READER_UNITS_CHILD";

/// `obs` is `[tag, t]`: the writer's own episode counter and the step, so that a reader
/// can check every row of a unit without knowing the writer's episode ids.
fn schema() -> Schema {
    Schema::builder()
        .field("obs", DType::F32, &[2])
        .field("action", DType::I32, &[])
        .field("reward", DType::F32, &[])
        .variable("say", VarKind::Str, None)
        .build()
        .unwrap()
}

/// The observations the units are drawn with: the text is one, so transitions and
/// sequences return `say` and `next_say` from the rows `obs` and `next_obs` come from.
const OBS: &[&str] = &["obs", "say"];

/// The text of the row `[tag, t]`: its length and bytes a function of both.
fn say(tag: f32, t: f32) -> String {
    let (tag, t) = (tag as u64, t as u64);
    let n = ((tag * 31 + t * 7) % 90) as usize;
    format!("{tag}:{t}:{}", "x".repeat(n))
}

/// Row `p`'s `prefix + "say"` value is the text of the `[tag, t]` in `obs` (padding,
/// where `mask` says so, is empty); returns the rows that differ.
fn bad_values(b: &Batch, obs: &str, text: &str, mask: Option<&[bool]>) -> u64 {
    let (obs, values) = (b.get::<f32>(obs).unwrap(), b.values(text).unwrap());
    assert_eq!(values.len() * 2, obs.len(), "{text}: one value per row");
    (0..values.len())
        .filter(|&p| {
            let want = match mask.is_none_or(|m| m[p]) {
                true => say(obs[2 * p], obs[2 * p + 1]),
                false => String::new(),
            };
            values.text(p).unwrap() != want
        })
        .count() as u64
}

/// The reward of step `t` of the episode tagged `tag`.
fn reward(tag: u64, t: u64) -> f32 {
    ((tag * 7 + t * 3) % 11) as f32 - 5.0
}

/// Adds one episode of `steps` steps tagged `tag`: it ends terminated, truncated, or
/// not at all (the next reset then cuts it), as `how` says.
fn add_episode(buf: &mut ReplayBuffer, tag: u64, steps: u64, how: u64) {
    let obs = [tag as f32, 0.0];
    let text = say(obs[0], obs[1]);
    buf.add_reset(&[Column::new("obs", &obs), Column::text("say", &text)])
        .unwrap();
    for t in 1..=steps {
        let obs = [tag as f32, t as f32];
        let text = say(obs[0], obs[1]);
        let (a, r) = (t as i32, reward(tag, t));
        let last = t == steps;
        buf.add_step(
            &[
                Column::new("obs", &obs),
                Column::scalar("action", &a),
                Column::scalar("reward", &r),
                Column::text("say", &text),
            ],
            last && how == 0,
            last && how == 1,
        )
        .unwrap();
    }
}

/// Adds `episodes` episodes of 0..40 steps from `tag` on; returns the next tag.
fn add_episodes(buf: &mut ReplayBuffer, tag: u64, episodes: u64, s: &mut u64) -> u64 {
    for k in tag..tag + episodes {
        add_episode(buf, k, xorshift(s) % 40, xorshift(s) % 3);
    }
    tag + episodes
}

/// Every field, the indices and the weights of two batches agree byte for byte.
fn assert_same(what: &str, w: &Batch, r: &Batch) {
    assert_eq!(w.indices(), r.indices(), "{what}: indices");
    assert_eq!(w.weights(), r.weights(), "{what}: weights");
    let names = |b: &Batch| {
        b.fields()
            .iter()
            .map(|f| f.name().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(w), names(r), "{what}: arrays");
    for (a, b) in w.fields().iter().zip(r.fields()) {
        assert_eq!(a.bytes(), b.bytes(), "{what}: {}", a.name());
    }
    for name in ["say", "next_say"] {
        let (a, b) = (w.values(name), r.values(name));
        assert_eq!(a.is_some(), b.is_some(), "{what}: {name}");
        if let (Some(a), Some(b)) = (a, b) {
            assert_eq!(
                (a.bytes(), a.offsets()),
                (b.bytes(), b.offsets()),
                "{what}: {name}"
            );
        }
    }
    assert!(w.values("say").is_some(), "{what}: no values drawn");
}

fn episodic_requests() -> Vec<(&'static str, Request<'static>)> {
    vec![
        (
            "rows by priority",
            Request::rows(64).prioritized(0.4).into(),
        ),
        ("transitions", Request::transitions(64, OBS).into()),
        (
            "n-step 3, stack 4",
            Request::transitions(64, OBS).nstep(3, 0.9).stack(4).into(),
        ),
        (
            "window",
            Request::transitions(32, OBS)
                .nstep(2, 0.5)
                .stack(3)
                .window()
                .into(),
        ),
        (
            "transitions by priority",
            Request::transitions(64, OBS)
                .nstep(3, 0.9)
                .prioritized(0.4)
                .into(),
        ),
        (
            "sequences",
            Request::sequences(16, 8, OBS).burn_in(4).into(),
        ),
        (
            "sequences by priority",
            Request::sequences(16, 8, OBS)
                .burn_in(2)
                .prioritized(0.6)
                .into(),
        ),
        ("episodes", Request::episodes(8).into()),
        (
            "episodes by priority",
            Request::episodes(8).prioritized(0.5),
        ),
    ]
}

/// The writer and `reader` draw every unit alike from the same seed.
fn assert_draws_alike(writer: &mut ReplayBuffer, reader: &mut Reader, seed: u64) {
    for (what, request) in episodic_requests() {
        writer.reseed(seed);
        reader.reseed(seed);
        let w = writer.sample(request).unwrap();
        let r = reader.sample(request).unwrap();
        assert_same(what, &w, &r);
    }
}

fn episodic(path: &Path) -> ReplayBuffer {
    let config = Config::new(schema(), 256)
        .segment_slots(64)
        .episodic()
        .prioritized(0.6, 1e-3)
        .seed(5);
    ReplayBuffer::create(path, config).unwrap()
}

/// Priorities that differ per row, so that draws by priority mean something.
fn shuffle_priorities(buf: &mut ReplayBuffer, s: &mut u64) {
    let live = buf.live();
    let indices: Vec<u64> = live.clone().step_by(3).collect();
    let p: Vec<f64> = indices.iter().map(|_| (xorshift(s) % 50) as f64).collect();
    buf.update_priorities(&indices, &p).unwrap();
}

#[test]
fn a_reader_draws_the_units_the_writer_draws_for_the_same_seed() {
    for access in [RowAccess::Mapped, RowAccess::Pread] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("b");
        let mut buf = episodic(&path);
        let mut s = 9u64;
        // A reader that follows every round's adds, and one opened afresh each round.
        let mut following = Reader::open(&path).unwrap();
        following.set_row_access(access).unwrap();
        let mut tag = 0;
        for round in 0..12 {
            // Rounds of a few episodes, then of many: the ring (256 rows) laps in
            // some rounds, evicts episodes in part, and passes every row the
            // following reader had read in others.
            let episodes = if round % 4 == 3 { 40 } else { 3 };
            tag = add_episodes(&mut buf, tag, episodes, &mut s);
            shuffle_priorities(&mut buf, &mut s);
            buf.flush().unwrap();
            assert_draws_alike(&mut buf, &mut following, round);
            let mut fresh = Reader::open(&path).unwrap();
            fresh.set_row_access(access).unwrap();
            assert_draws_alike(&mut buf, &mut fresh, round + 100);
        }
        // A snapshot reader draws as the writer did when it took the snapshot.
        buf.get_state_named("s").unwrap();
        let mut snap = Reader::open_snapshot(&path, "s").unwrap();
        assert_draws_alike(&mut buf, &mut snap, 7);
    }
}

#[test]
fn a_reader_draws_the_fragments_and_groups_the_writer_draws() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    let config = Config::new(schema(), 200)
        .segment_slots(64)
        .fragments()
        .prioritized(0.6, 1e-3)
        .seed(2);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    let mut reader = Reader::open(&path).unwrap();
    let mut s = 4u64;
    for round in 0..10u64 {
        for _ in 0..6 {
            let n = 1 + xorshift(&mut s) % 20;
            let obs: Vec<f32> = (0..n * 2).map(|k| (round * 100 + k) as f32).collect();
            let action: Vec<i32> = (0..n).map(|k| (k % 3) as i32).collect();
            let r: Vec<f32> = (0..n).map(|k| k as f32).collect();
            let (mut text, mut offsets) = (Vec::new(), vec![0u64]);
            for k in 0..n as usize {
                text.extend_from_slice(say(obs[2 * k], obs[2 * k + 1]).as_bytes());
                offsets.push(text.len() as u64);
            }
            buf.add_batch(&[
                Column::new("obs", &obs).with_shape(&[n as usize, 2]),
                Column::new("action", &action),
                Column::new("reward", &r),
                Column::values("say", DType::U8, &text, &offsets),
            ])
            .unwrap();
        }
        shuffle_priorities(&mut buf, &mut s);
        let requests: [(&str, Request); 6] = [
            ("fragments", Request::fragments(6).into()),
            (
                "distinct fragments",
                Request::fragments(3).without_replacement().into(),
            ),
            ("fragments covering", Request::fragments_covering(30).into()),
            (
                "fragments by priority",
                Request::fragments(6).prioritized(0.4),
            ),
            ("groups", Request::groups(3, &["action"]).into()),
            (
                "group windows",
                Request::groups(3, &["action"]).unroll(2).into(),
            ),
        ];
        for (what, request) in requests {
            buf.reseed(round);
            reader.reseed(round);
            let w = buf.sample(request).unwrap();
            let r = reader.sample(request).unwrap();
            assert_same(what, &w, &r);
        }
    }
    // A reader removes nothing: a draw that would is refused, and nothing moved.
    let len = buf.len();
    let refused = reader.sample(Request::fragments(1).remove());
    assert!(
        matches!(refused, Err(Error::ReadOnly { .. })),
        "{refused:?}"
    );
    assert_eq!(buf.len(), len);
}

#[test]
fn a_reader_of_a_buffer_without_episodes_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let config = Config::new(schema(), 16);
    ReplayBuffer::create(&path, config)
        .unwrap()
        .close()
        .unwrap();
    let mut reader = Reader::open(&path).unwrap();
    let got = reader.sample(Request::episodes(1));
    assert!(matches!(got, Err(Error::NotEpisodic { .. })), "{got:?}");
    let got = reader.sample(Request::fragments(1));
    assert!(matches!(got, Err(Error::InvalidSample(_))), "{got:?}");
}

// ---- Readers in other processes while the writer laps a small ring ----

const RACE_CAPACITY: u64 = 512;

/// A child's work, chosen by the parent through `CHILD_ENV`:
/// - `writer:DIR:SEED`: adds episodes forever (with flushes and snapshots that force
///   copy-on-write), printing `marker=ready` once going;
/// - `reader:DIR:UNITS:SEED:ACCESS`: draws transitions, sequences and episodes until
///   it has checked UNITS of them, and prints what it saw.
#[test]
fn reader_units_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let args: Vec<&str> = mode.split(':').collect();
    match args[0] {
        "writer" => run_writer(args[1], args[2].parse().unwrap()),
        "reader" => run_reader(
            args[1],
            args[2].parse().unwrap(),
            args[3].parse().unwrap(),
            args[4] == "pread",
        ),
        other => panic!("unknown child role {other}"),
    }
}

fn run_writer(dir: &str, seed: u64) {
    use std::io::Write;
    let mut buf = ReplayBuffer::open(dir).unwrap();
    let mut s = seed;
    let mut out = std::io::stdout().lock();
    writeln!(out, "marker=ready").unwrap();
    out.flush().unwrap();
    let (mut tag, mut snapshots) = (1_000, 0);
    loop {
        match xorshift(&mut s) % 100 {
            0 => buf.flush().unwrap(),
            1 => {
                snapshots += 1;
                buf.get_state_named(&format!("s{snapshots}")).unwrap();
                buf.keep_last(1).unwrap();
            }
            _ => {
                add_episode(&mut buf, tag, xorshift(&mut s) % 60, xorshift(&mut s) % 3);
                tag += 1;
            }
        }
    }
}

/// The `[tag, t]` of row `r` of `obs` (two f32 per row).
fn tag_t(obs: &[f32], r: usize) -> (f32, f32) {
    (obs[2 * r], obs[2 * r + 1])
}

/// Checks each transition (n-step 3, gamma 0.5, stack 4); returns the bad ones.
fn bad_transitions(b: &Batch) -> u64 {
    let (obs, next) = (
        b.get::<f32>("obs").unwrap(),
        b.get::<f32>("next_obs").unwrap(),
    );
    let (action, ret) = (
        b.get::<i32>("action").unwrap(),
        b.get::<f64>("returns").unwrap(),
    );
    let term = b.get::<bool>("terminated").unwrap();
    let discount = b.get::<f64>("discounts").unwrap();
    let mut bad = 0;
    for i in 0..b.indices().len() {
        // Frames f = 0..4 of obs: t - 3 + f, the reset row repeated before it.
        let (tag, t) = tag_t(obs, i * 4 + 3);
        let frames_ok = (0..4).all(|f| {
            let (g, u) = tag_t(obs, i * 4 + f);
            g == tag && u == (t - 3.0 + f as f32).max(0.0)
        });
        let (ntag, nt) = tag_t(next, i * 4 + 3);
        let steps = nt - t;
        let next_ok = ntag == tag
            && (1.0..=3.0).contains(&steps)
            && (0..4).all(|f| tag_t(next, i * 4 + f) == (tag, (nt - 3.0 + f as f32).max(0.0)));
        let expected: f64 = (0..steps as u64)
            .map(|k| 0.5f64.powi(k as i32) * f64::from(reward(tag as u64, t as u64 + 1 + k)))
            .sum();
        let ret_ok = (ret[i] - expected).abs() < 1e-9;
        // A terminal transition bootstraps from nothing: its discount is 0.
        let end_ok = !term[i] || discount[i] == 0.0;
        let good = frames_ok && next_ok && ret_ok && end_ok && action[i] == (t + 1.0) as i32;
        bad += u64::from(!good);
    }
    bad + bad_values(b, "obs", "say", None) + bad_values(b, "next_obs", "next_say", None)
}

/// Checks each sequence (8 steps after a burn-in of 4); returns the bad ones.
fn bad_sequences(b: &Batch) -> u64 {
    let (obs, mask) = (b.get::<f32>("obs").unwrap(), b.get::<bool>("mask").unwrap());
    let action = b.get::<i32>("action").unwrap();
    let mut bad = 0;
    for i in 0..b.indices().len() {
        let rows: Vec<usize> = (0..12).map(|p| i * 12 + p).filter(|&p| mask[p]).collect();
        let first = rows.first().map(|&p| tag_t(obs, p));
        let good = rows.windows(2).all(|w| w[1] == w[0] + 1)
            && rows.iter().enumerate().all(|(k, &p)| {
                let (tag, t0) = first.unwrap();
                tag_t(obs, p) == (tag, t0 + k as f32) && action[p] == (t0 + k as f32) as i32 + 1
            });
        bad += u64::from(!good || rows.is_empty());
    }
    bad + bad_values(b, "obs", "say", Some(mask))
        + bad_values(b, "next_obs", "next_say", Some(mask))
}

/// Checks each episode: one tag, steps 0, 1, ... in order; returns the bad ones.
fn bad_episodes(b: &Batch) -> u64 {
    let (obs, offsets) = (
        b.get::<f32>("obs").unwrap(),
        b.get::<u64>("offsets").unwrap(),
    );
    let mut bad = 0;
    for e in offsets.windows(2) {
        let tag = tag_t(obs, e[0] as usize).0;
        let good = (e[0]..e[1]).all(|r| tag_t(obs, r as usize) == (tag, (r - e[0]) as f32));
        bad += u64::from(!good);
    }
    bad + bad_values(b, "obs", "say", None)
}

fn run_reader(dir: &str, units: u64, seed: u64, pread: bool) {
    let mut reader = Reader::open(dir).unwrap();
    if pread {
        reader.set_row_access(RowAccess::Pread).unwrap();
    }
    reader.reseed(seed);
    let first_tail = reader.live().end;
    let (mut drawn, mut bad) = (0u64, 0u64);
    while drawn < units {
        let t = reader
            .sample(Request::transitions(64, OBS).nstep(3, 0.5).stack(4))
            .unwrap();
        bad += bad_transitions(&t);
        let q = reader
            .sample(Request::sequences(16, 8, OBS).burn_in(4))
            .unwrap();
        bad += bad_sequences(&q);
        let e = reader.sample(Request::episodes(4)).unwrap();
        bad += bad_episodes(&e);
        drawn += 64 + 16 + 4;
    }
    let last_tail = reader.live().end;
    println!("marker=result drawn={drawn} bad={bad} first_tail={first_tail} last_tail={last_tail}");
}

/// The checks the reader processes run catch a unit with rows of two episodes: an
/// episode whose tag changes half way (as a torn copy would) fails each of them.
#[test]
fn the_race_checks_catch_a_unit_mixing_two_episodes() {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::new(schema(), 64).episodic().seed(3);
    let mut buf = ReplayBuffer::create(tmp.path().join("b"), config).unwrap();
    let draw = |buf: &mut ReplayBuffer| {
        let t = buf
            .sample(Request::transitions(64, OBS).nstep(3, 0.5).stack(4))
            .unwrap();
        let q = buf
            .sample(Request::sequences(16, 8, OBS).burn_in(4))
            .unwrap();
        let e = buf.sample(Request::episodes(4)).unwrap();
        (bad_transitions(&t), bad_sequences(&q), bad_episodes(&e))
    };
    add_episode(&mut buf, 1, 40, 0);
    assert_eq!(draw(&mut buf), (0, 0, 0));
    // One more episode of 40 steps whose rows from step 20 on carry another tag.
    let text = say(2.0, 0.0);
    buf.add_reset(&[
        Column::new("obs", &[2.0f32, 0.0]),
        Column::text("say", &text),
    ])
    .unwrap();
    for t in 1..=40u64 {
        let tag = if t < 20 { 2 } else { 3 };
        let obs = [tag as f32, t as f32];
        let (a, r) = (t as i32, reward(tag, t));
        let text = say(obs[0], obs[1]);
        let cols = [
            Column::new("obs", &obs),
            Column::scalar("action", &a),
            Column::scalar("reward", &r),
            Column::text("say", &text),
        ];
        buf.add_step(&cols, t == 40, false).unwrap();
    }
    let (t, q, e) = draw(&mut buf);
    assert!(
        t > 0 && q > 0 && e > 0,
        "mixed units passed the checks: {t} {q} {e}"
    );
}

#[test]
fn reader_processes_never_draw_a_torn_unit_while_the_writer_laps_a_small_ring() {
    const PER_READER: u64 = 60_000;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let config = Config::new(schema(), RACE_CAPACITY)
        .segment_slots(64)
        .episodic()
        .seed(1);
    ReplayBuffer::create(&path, config)
        .unwrap()
        .close()
        .unwrap();
    let dir = path.to_str().unwrap();
    let role = format!("writer:{dir}:5");
    let writer =
        common::spawn_filling_writer("reader_units_child", CHILD_ENV, &role, &path, RACE_CAPACITY);
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let access = ["mapped", "pread"][r];
            let role = format!("reader:{dir}:{PER_READER}:{r}:{access}");
            spawn_child("reader_units_child", CHILD_ENV, role.as_ref())
        })
        .collect();
    for (child, out) in readers {
        let mut child = KillOnDrop(child);
        let result = reader_result(out);
        assert!(
            child.0.wait().unwrap().success(),
            "reader failed: {result:?}"
        );
        assert_eq!(result["bad"], 0, "torn units served: {result:?}");
        let laps = (result["last_tail"] - result["first_tail"]) / RACE_CAPACITY;
        assert!(
            laps >= 3,
            "the writer lapped the ring only {laps} times: {result:?}"
        );
    }
    drop(writer);
}

/// A reader whose look at a small ring the writer mostly evicts before it draws (a
/// slow look while the writer laps) looks again, rather than report too few units: a
/// ring of 64 rows always holds a whole episode of at most 20 steps, and episode draws
/// racing a writer thread all succeed, with no unit mixing two episodes.
#[test]
fn a_reader_lapped_during_its_look_looks_again_rather_than_finding_no_episode() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let config = Config::new(schema(), 64)
        .segment_slots(16)
        .episodic()
        .seed(2);
    let mut buf = ReplayBuffer::create(&path, config).unwrap();
    let mut s = 9;
    for tag in 0..10 {
        add_episode(&mut buf, tag, 1 + xorshift(&mut s) % 20, tag % 2);
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut tag = 10;
            while !stop.load(Ordering::Relaxed) {
                add_episode(&mut buf, tag, 1 + xorshift(&mut s) % 20, tag % 2);
                tag += 1;
            }
            tag
        });
        let mut reader = Reader::open(&path).unwrap();
        let first_tail = reader.live().end;
        let mut bad = 0;
        for draw in 0..50_000 {
            match reader.sample(Request::episodes(4)) {
                Ok(e) => bad += bad_episodes(&e),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    panic!("draw {draw}: {e}");
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let laps = (reader.live().end - first_tail) / 64;
        writer.join().unwrap();
        assert_eq!(bad, 0, "units mixing two episodes");
        assert!(laps >= 10, "the writer lapped the ring only {laps} times");
    });
}
