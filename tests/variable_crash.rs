//! Promise: `kill -9` of a writer adding items with variable-length fields (one at a
//! time, in batches, while the chunk ring laps and evicts the oldest items for room, and
//! while flushing) loses nothing it acknowledged and never serves an item whose values
//! are not the ones added with it. Random kill moments, and (with `--features
//! kill-points`) the named points between a chunk's bytes and its stamp, between an
//! item's bytes and its stamp, and around commits and eviction records. Each harness
//! runs twice: on a flat buffer (`add`, `add_batch`) and on an episodic one
//! (`add_reset`, `add_step`, `add_episode`, whose draws check `obs` and `next_obs`).
//! `REPLAYSTORE_LOOP_KILLS` sets the random kill cycles (default 300).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::io::Write;
use std::ops::Range;
use std::path::Path;

use common::{run_child_and_kill_after, xorshift};
use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema, VarKind, verify};

const CHILD_ENV: &str = "REPLAYSTORE_VAR_KILL_CHILD";
const CAPACITY: u64 = 200;

fn schema() -> Schema {
    Schema::builder()
        .field("index", DType::U64, &[])
        .variable("obs", VarKind::Str, None)
        .variable("tokens", VarKind::Ragged(DType::I32), None)
        .build()
        .unwrap()
}

/// How the harness adds: items to a flat buffer, or the rows of episodes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Flat,
    Episodic,
}

impl Mode {
    fn parse(s: &str) -> Mode {
        match s {
            "episodic" => Mode::Episodic,
            _ => Mode::Flat,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Flat => "flat",
            Mode::Episodic => "episodic",
        }
    }
}

fn create(dir: &Path, mode: Mode) {
    // 48 chunks of 240 bytes: about a dozen items' values, so the chunk ring laps (and
    // evicts for room) every few calls, and whole segments of it are passed; its three
    // sparse segments are reserved again by each open's first adds into them.
    let mut config = Config::new(schema(), CAPACITY)
        .segment_slots(32)
        .chunk_bytes(240)
        .heap_bytes(48 * 256)
        .segment_bytes(16 * 256)
        .evict_for_room()
        .seed(3);
    if mode == Mode::Episodic {
        // With item states: draws remove whole episodes beside the adds.
        config = config.episodic().item_states();
    }
    ReplayBuffer::create(dir, config).unwrap().close().unwrap();
}

fn obs(i: u64) -> String {
    let n = (common::mix(i) % 700) as usize;
    (0..n)
        .map(|k| (b'A' + ((i as usize * 7 + k) % 26) as u8) as char)
        .collect()
}

fn tokens(i: u64) -> Vec<i32> {
    let n = (common::mix(i ^ 0x55) % 200) as i32;
    (0..n).map(|k| k ^ i as i32).collect()
}

/// Items `from..from + n` as batch columns: their indices, and each one's values.
struct Items {
    index: Vec<u64>,
    obs: (Vec<u8>, Vec<u64>),
    tokens: (Vec<u8>, Vec<u64>),
}

impl Items {
    fn new(from: u64, n: u64) -> Items {
        let (mut o, mut oo, mut t, mut to) = (Vec::new(), vec![0u64], Vec::new(), vec![0u64]);
        for i in from..from + n {
            o.extend_from_slice(obs(i).as_bytes());
            oo.push(o.len() as u64);
            t.extend_from_slice(bytemuck::cast_slice(&tokens(i)));
            to.push(t.len() as u64);
        }
        Items {
            index: (from..from + n).collect(),
            obs: (o, oo),
            tokens: (t, to),
        }
    }

    fn columns(&self) -> [Column<'_>; 3] {
        [
            Column::new("index", &self.index),
            Column::values("obs", DType::U8, &self.obs.0, &self.obs.1),
            Column::values("tokens", DType::I32, &self.tokens.0, &self.tokens.1),
        ]
    }
}

/// Adds items `from..from + n`: one `add` or `add_batch` call (flat), or (episodic)
/// one row, a step of the open episode or a new episode's reset row, or a whole
/// episode of `n` rows. Every row carries every field, so each row's values are a
/// function of its index whatever call stored it.
fn add(buf: &mut ReplayBuffer, from: u64, n: u64, mode: Mode) -> replaystore::Result<()> {
    let items = Items::new(from, n);
    let batch = items.columns();
    let one: Vec<Column<'_>> = batch.iter().filter_map(|c| c.row(0)).collect();
    match (mode, n) {
        (Mode::Flat, 1) => buf.add(&one).map(drop),
        (Mode::Flat, _) => buf.add_batch(&batch).map(drop),
        // Every seventh index begins an episode, every eleventh ends one.
        (Mode::Episodic, 1) if from.is_multiple_of(7) => buf.add_reset(&one).map(drop),
        (Mode::Episodic, 1) => match buf.add_step(&one, from.is_multiple_of(11), false) {
            Err(replaystore::Error::EpisodeOrder(_)) => buf.add_reset(&one).map(drop),
            other => other.map(drop),
        },
        (Mode::Episodic, _) => buf.add_episode(&batch, &[], true, false).map(drop),
    }
}

/// An episodic draw's values against the indices its fixed fields came from.
fn assert_transitions(buf: &mut ReplayBuffer, ctx: &str) {
    let t = match buf.sample(Request::transitions(8, &["index", "obs"]).nstep(2, 0.9)) {
        Ok(t) => t,
        // Too few steps live (a reset row alone, a cut episode's first row).
        Err(replaystore::Error::Empty | replaystore::Error::InvalidSample(_)) => return,
        Err(e) => panic!("{ctx}: transitions: {e}"),
    };
    let (index, next) = (
        t.get::<u64>("index").unwrap(),
        t.get::<u64>("next_index").unwrap(),
    );
    for (r, &j) in t.indices().iter().enumerate() {
        assert_eq!(
            t.text("obs", r).unwrap(),
            obs(index[r]),
            "{ctx}: obs of {j}"
        );
        assert_eq!(
            t.text("next_obs", r).unwrap(),
            obs(next[r]),
            "{ctx}: next_obs of {j}"
        );
        let toks = t.values("tokens").unwrap().elements::<i32>(r).unwrap();
        assert_eq!(toks, tokens(j).as_slice(), "{ctx}: tokens of step {j}");
    }
}

/// Every live item (removed ones too) holds the values added with its index; in an
/// episodic buffer each episode is removed whole or kept whole.
fn assert_intact(buf: &mut ReplayBuffer, ctx: &str) {
    let live: Vec<u64> = buf.live().collect();
    if let Ok(episodes) = buf.episodes() {
        let states = buf.item_states(&live).unwrap();
        let removed = states.iter().filter(|s| s.removed.is_some()).count() as u64;
        let head = buf.live().start;
        let mut kept = 0;
        for e in &episodes {
            let rows: Vec<u64> = (e.start.max(head)..=e.last()).collect();
            let s = buf.item_states(&rows).unwrap();
            assert!(
                s.iter().all(|s| s.removed.is_none()),
                "{ctx}: episode {} part removed",
                e.id
            );
            kept += rows.len() as u64;
        }
        assert_eq!(
            kept + removed,
            live.len() as u64,
            "{ctx}: rows neither kept nor removed"
        );
    }
    let at = Request::at(&live).including_removed();
    let batch = buf.sample(at).unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
    for (r, &i) in live.iter().enumerate() {
        assert_eq!(batch.get::<u64>("index").unwrap()[r], i, "{ctx}");
        assert_eq!(batch.text("obs", r).unwrap(), obs(i), "{ctx}: obs of {i}");
        let t = batch.values("tokens").unwrap().elements::<i32>(r).unwrap();
        assert_eq!(t, tokens(i).as_slice(), "{ctx}: tokens of {i}");
    }
}

fn say(out: &mut impl Write, line: &str) {
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// The child: opens the buffer and adds, flushes and samples until killed (or `ops`
/// calls, for the named points), saying each call before it and the live range after.
#[test]
fn var_kill_child() {
    let Ok(arg) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = arg.split(':');
    let (dir, seed, ops, mode) = (
        parts.next().unwrap(),
        parts.next().unwrap().parse::<u64>().unwrap(),
        parts.next().unwrap().parse::<u64>().unwrap(),
        Mode::parse(parts.next().unwrap()),
    );
    let mut out = std::io::stdout();
    let mut buf = ReplayBuffer::open(dir).unwrap();
    let mut rng = seed | 1;
    let live = |b: &ReplayBuffer| format!("live {} {}", b.live().start, b.live().end);
    say(&mut out, &live(&buf));
    for _ in 0..ops {
        let tail = buf.live().end;
        match xorshift(&mut rng) % 12 {
            0..=4 => {
                say(&mut out, "start add 1");
                add(&mut buf, tail, 1, mode).unwrap();
            }
            5..=7 => {
                let n = 2 + xorshift(&mut rng) % 5;
                say(&mut out, &format!("start add {n}"));
                add(&mut buf, tail, n, mode).unwrap();
            }
            8 => {
                say(&mut out, "start flush");
                buf.flush().unwrap();
            }
            9 => {
                say(&mut out, "start sample");
                if !buf.is_empty() {
                    buf.sample(Request::rows(8)).unwrap();
                    if mode == Mode::Episodic {
                        assert_transitions(&mut buf, "child");
                        remove_episodes(&mut buf);
                    }
                }
            }
            10 => {
                say(&mut out, "start snap");
                buf.get_state().unwrap();
                buf.keep_last(3).unwrap();
            }
            _ => {
                let snaps = replaystore::snapshots(dir).unwrap();
                if let Some(s) = snaps.get(xorshift(&mut rng) as usize % snaps.len().max(1))
                    && let Some(c) = &s.commit
                {
                    let state = buf.snapshot_state(&s.name).unwrap();
                    say(&mut out, &format!("start restore {} {}", c.head, c.tail));
                    buf.set_state(&state).unwrap();
                }
            }
        }
        say(&mut out, &live(&buf));
    }
    say(&mut out, "finished");
}

#[derive(Default)]
struct Seen {
    live: Option<Range<u64>>,
    pending: Option<Vec<String>>,
    finished: bool,
}

impl Seen {
    fn note(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["live", a, b] => {
                self.live = Some(a.parse().unwrap()..b.parse().unwrap());
                self.pending = None;
            }
            ["start", rest @ ..] => {
                self.pending = Some(rest.iter().map(|s| (*s).to_owned()).collect());
            }
            ["finished"] => self.finished = true,
            _ => {}
        }
    }
}

fn check(dir: &Path, seen: &Seen, mode: Mode, ctx: &str) {
    let report = verify(dir).unwrap();
    assert!(report.is_sound(), "{ctx}: verify: {:?}", report.problems);
    let mut buf = ReplayBuffer::open(dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let got = buf.live();
    assert_intact(&mut buf, ctx);
    if mode == Mode::Episodic {
        assert_transitions(&mut buf, ctx);
    }
    drop(buf);
    let Some(acked) = seen.live.clone() else {
        return;
    };
    let pending: Vec<&str> = seen.pending.iter().flatten().map(String::as_str).collect();
    match pending.as_slice() {
        ["add", n] => {
            let n: u64 = n.parse().unwrap();
            // The add in flight may be there; the oldest items it evicted for room
            // may be gone, never an acknowledged item after them.
            assert!(
                (acked.end..=acked.end + n).contains(&got.end)
                    && (acked.start..=acked.end).contains(&got.start),
                "{ctx}: live {got:?}, acknowledged {acked:?}, add of {n} in flight"
            );
        }
        ["restore", a, b] => {
            let snap = a.parse::<u64>().unwrap()..b.parse::<u64>().unwrap();
            assert!(
                got == acked || got == snap,
                "{ctx}: live {got:?}, acknowledged {acked:?} or {snap:?}"
            );
        }
        _ => assert_eq!(got, acked, "{ctx}: in flight {pending:?}"),
    }
}

#[test]
fn kill_9_while_adding_values_loses_nothing_acknowledged() {
    let kills = common::env_count("REPLAYSTORE_LOOP_KILLS", 1000) * 3 / 10;
    // The episodic mode's calls are the flat mode's with episode bookkeeping: half as
    // many cycles.
    for (mode, kills) in [(Mode::Flat, kills), (Mode::Episodic, kills / 2)] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        create(&dir, mode);
        let mut rng = 0xabcd_1234u64;
        let (mut in_add, mut in_restore, mut evicted) = (0u64, 0u64, 0u64);
        for cycle in 0..kills {
            let lines = xorshift(&mut rng) % 80;
            let seed = xorshift(&mut rng);
            let mut seen = Seen::default();
            run_child_and_kill_after(
                "var_kill_child",
                CHILD_ENV,
                &format!("{}:{seed}:{}:{}", dir.display(), u64::MAX, mode.name()),
                lines,
                |l| seen.note(l),
            );
            match seen
                .pending
                .as_ref()
                .and_then(|p| p.first())
                .map(String::as_str)
            {
                Some("add") => in_add += 1,
                Some("restore") => in_restore += 1,
                _ => {}
            }
            check(&dir, &seen, mode, &format!("{mode:?} cycle {cycle}"));
            evicted = ReplayBuffer::open(&dir).unwrap().stats().evicted;
        }
        println!(
            "{mode:?}: kill cycles {kills}; inside an add {in_add}, a restore {in_restore}; \
             evicted {evicted}"
        );
        assert!(in_add > 0, "{mode:?}: no kill landed inside an add");
        assert!(in_restore > 0, "{mode:?}: no kill landed inside a restore");
        assert!(evicted > 0, "{mode:?}: the chunk ring never lapped");
    }
}

#[test]
fn kill_at_each_named_point_of_a_values_add_loses_nothing_acknowledged() {
    if !cfg!(feature = "kill-points") {
        return;
    }
    let points = [
        "chunk-before-stamp",
        "before-stamp",
        "commit-written",
        "eviction-written",
        "snapshot-mid-links",
        "restore-mid-links",
    ];
    for mode in [Mode::Flat, Mode::Episodic] {
        common::kill_at_each_point(
            "var_kill_child",
            CHILD_ENV,
            &points,
            &[1, 2, 5, 13, 40],
            |dir, n| {
                create(dir, mode);
                format!("{}:{}:{}:{}", dir.display(), 7 + n, 400, mode.name())
            },
            |dir, lines, ctx| {
                let mut seen = Seen::default();
                lines.iter().for_each(|l| seen.note(l));
                check(dir, &seen, mode, &format!("{mode:?} {ctx}"));
            },
        );
    }
}

/// The buffer a fault case starts from: 30 items whose values have lapped the chunk
/// ring, flushed and closed.
fn fault_base(dir: &Path, mode: Mode) {
    create(dir, mode);
    let mut buf = ReplayBuffer::open(dir).unwrap();
    for i in 0..30 {
        add(&mut buf, i, 1, mode).unwrap();
    }
    buf.close().unwrap();
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Open,
    Add,
    Flush,
    Close,
    /// Episodic: adds, then a draw that removes whole episodes, then a flush.
    Remove,
}

/// A draw that removes whole episodes covering 3 steps (none when too few are whole).
fn remove_episodes(buf: &mut ReplayBuffer) {
    match buf.sample(Request::episodes_covering(3).remove()) {
        Ok(_) | Err(replaystore::Error::Empty | replaystore::Error::InvalidSample(_)) => {}
        Err(e) => panic!("remove: {e}"),
    }
}

/// Runs `step` on `buf`, pushing the live range after each acknowledged add to `ranges`.
/// Episodic adds are one row each (an episode added whole would leave its first rows
/// acknowledged by no call when a later one fails).
fn run_step(
    step: Step,
    buf: &mut Option<ReplayBuffer>,
    ranges: &mut Vec<Range<u64>>,
    mode: Mode,
) -> replaystore::Result<()> {
    let Some(b) = buf.as_mut() else {
        return Ok(());
    };
    let mut adds = |b: &mut ReplayBuffer, calls: u64| -> replaystore::Result<()> {
        for k in 0..calls {
            let n = match mode {
                Mode::Flat => 1 + k % 3,
                Mode::Episodic => 1,
            };
            add(b, b.live().end, n, mode)?;
            ranges.push(b.live());
        }
        Ok(())
    };
    match step {
        Step::Open => Ok(()),
        Step::Add => adds(b, 8),
        Step::Flush => {
            adds(b, 3)?;
            b.flush()
        }
        Step::Close => buf.take().unwrap().close(),
        Step::Remove if mode == Mode::Episodic => {
            adds(b, 4)?;
            match b.sample(Request::episodes_covering(3).remove()) {
                Ok(_) | Err(replaystore::Error::Empty | replaystore::Error::InvalidSample(_)) => {}
                Err(e) => return Err(e),
            }
            b.flush()
        }
        Step::Remove => Ok(()), // a flat buffer here keeps no item states
    }
}

#[test]
fn a_failure_at_any_file_operation_of_a_values_add_flush_or_close_loses_nothing() {
    use replaystore::io::FaultyIo;
    use std::sync::Arc;
    let root = tempfile::tempdir().unwrap();
    let (mut points, mut failed) = (0u64, 0u64);
    let steps = [
        Step::Open,
        Step::Add,
        Step::Flush,
        Step::Close,
        Step::Remove,
    ];
    let modes = [Mode::Flat, Mode::Episodic];
    let runs = modes.into_iter().flat_map(|m| steps.map(|s| (m, s)));
    for (mode, step) in runs.filter(|&(m, s)| s != Step::Remove || m == Mode::Episodic) {
        // The run without a fault: how many operations, and the range after each add.
        let dir = root.path().join(format!("count-{mode:?}-{step:?}"));
        fault_base(&dir, mode);
        let before = ReplayBuffer::open(&dir).unwrap().live();
        let io = Arc::new(FaultyIo::fail_once(u64::MAX));
        let mut buf = Some(ReplayBuffer::open_with(&dir, io.clone()).unwrap());
        let opened = io.ops();
        let mut ranges = vec![before.clone()];
        run_step(step, &mut buf, &mut ranges, mode).unwrap();
        let after = buf
            .as_ref()
            .map_or_else(|| ranges.last().unwrap().clone(), ReplayBuffer::live);
        let (from, ops) = match step {
            Step::Open => (0, opened),
            _ => (opened, io.ops() - opened),
        };
        drop(buf);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(ops > 0, "{step:?} makes no file operation");
        for n in 0..ops {
            for sticky in [false, true] {
                points += 1;
                let ctx = format!(
                    "{mode:?} {step:?}, operation {} failing (sticky {sticky})",
                    from + n
                );
                let dir = root.path().join(format!("{mode:?}-{step:?}-{n}-{sticky}"));
                fault_base(&dir, mode);
                let io = Arc::new(match sticky {
                    true => FaultyIo::fail_from(from + n),
                    false => FaultyIo::fail_once(from + n),
                });
                let mut seen = vec![before.clone()];
                let mut buf = None;
                let result = match ReplayBuffer::open_with(&dir, io) {
                    Ok(b) => {
                        buf = Some(b);
                        run_step(step, &mut buf, &mut seen, mode)
                    }
                    Err(e) => Err(e),
                };
                if let (Err(replaystore::Error::Io { op, .. }), Some(b)) = (&result, buf.as_mut())
                    && [
                        "msync",
                        "fdatasync",
                        "fsync",
                        "write commit slot",
                        "write eviction record",
                    ]
                    .contains(op)
                {
                    let next = add(b, b.live().end, 1, mode);
                    assert!(
                        matches!(next, Err(replaystore::Error::Poisoned { .. })),
                        "{ctx}: after a failed sync an add returned {next:?}"
                    );
                }
                drop(buf);
                failed += u64::from(result.is_err());
                let report = verify(&dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
                assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
                let buf = ReplayBuffer::open(&dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
                let live = buf.live();
                match &result {
                    Ok(()) => assert_eq!(live, after, "{ctx}: the step returned Ok"),
                    Err(e) => assert!(
                        live == *seen.last().unwrap() || live == after,
                        "{ctx} ({e}): live {live:?}, acknowledged {:?}",
                        seen.last()
                    ),
                }
                let mut buf = buf;
                assert_intact(&mut buf, &ctx);
                if mode == Mode::Episodic {
                    assert_transitions(&mut buf, &ctx);
                }
                drop(buf);
                std::fs::remove_dir_all(&dir).unwrap();
            }
        }
    }
    println!("fault points {points}, of which the step failed {failed}");
    assert!(
        failed * 2 > points,
        "only {failed} of {points} injected failures surfaced"
    );
}
