//! Promise: with actors adding and one priority owner (`PriorityOwner`) sampling by
//! priority and updating, new items enter at the largest priority seen, evicted slots
//! are never drawn, the tree stays consistent across kills of the owner, and every
//! other combination (two owners, an owner beside a tree-owning writer, an actor
//! sampling by priority or updating, a reader updating) is a typed error.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use std::path::Path;

use common::{Drained, add_range, item_bytes, schema, xorshift};
use replaystore::{
    Actor, Column, Config, DType, Error, PriorityOwner, Reader, ReplayBuffer, Request, Schema,
};

const CHILD_ENV: &str = "REPLAYSTORE_OWNER_CHILD";

/// A prioritized buffer with alpha 1 and eps 0, so leaves are the priorities.
fn create(path: &Path, capacity: u64) {
    let config = Config::new(schema(), capacity)
        .segment_slots(64)
        .prioritized(1.0, 0.0)
        .seed(3);
    ReplayBuffer::create(path, config).unwrap().close().unwrap();
}

#[test]
fn items_an_actor_adds_enter_the_owners_tree_at_the_largest_priority() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 8);
    let mut actor = ReplayBuffer::open_actor(&path).unwrap();
    let mut owner = PriorityOwner::open(&path).unwrap();
    add_range(&mut actor, 0, 4);
    assert_eq!(owner.priorities(&[0, 1, 2, 3]).unwrap(), vec![1.0; 4]);
    owner
        .update_priorities(&[0, 1, 2, 3], &[0.5f64, 0.25, 3.0, 0.0])
        .unwrap();
    add_range(&mut actor, 4, 6);
    assert_eq!(
        owner.priorities(&[0, 1, 2, 3, 4, 5]).unwrap(),
        vec![0.5, 0.25, 3.0, 0.0, 3.0, 3.0]
    );
    // The actor laps the ring: overwritten slots take the new items' priority, and
    // the total is the sum of the live leaves, with nothing left of the old ones.
    add_range(&mut actor, 6, 13);
    let live: Vec<u64> = (5..13).collect();
    assert_eq!(owner.priorities(&live).unwrap(), vec![3.0; 8]);
    assert_eq!(owner.priority_summary().unwrap().total, 24.0);
    // Draws land on live items only, with their weights.
    let batch = owner.sample(Request::rows(256).prioritized(0.4)).unwrap();
    assert!(batch.indices().iter().all(|i| live.contains(i)));
    for (r, &i) in batch.indices().iter().enumerate() {
        assert_eq!(batch.item_bytes(r), item_bytes(i));
    }
    // A clear by the actor empties the tree for the owner.
    actor.clear().unwrap();
    add_range(&mut actor, 13, 14);
    assert_eq!(owner.priority_summary().unwrap().total, 3.0);
}

#[test]
fn a_writer_reopening_after_actors_catches_their_items_up() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 16);
    let mut buf = ReplayBuffer::open(&path).unwrap();
    add_range(&mut buf, 0, 3);
    buf.update_priorities(&[0, 1, 2], &[2.0f64, 4.0, 0.5])
        .unwrap();
    buf.close().unwrap();
    // No owner runs: the actor's items are unknown to the tree until someone catches up.
    let mut actor = ReplayBuffer::open_actor(&path).unwrap();
    add_range(&mut actor, 3, 5);
    actor.close().unwrap();
    let mut buf = ReplayBuffer::open(&path).unwrap();
    assert_eq!(
        buf.priorities(&[0, 1, 2, 3, 4]).unwrap(),
        vec![2.0, 4.0, 0.5, 4.0, 4.0]
    );
    assert_eq!(buf.priority_summary().unwrap().total, 14.5);
}

#[test]
fn whole_episodes_evicted_by_an_actor_leave_no_priority_and_reset_rows_none() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    let schema = Schema::builder()
        .field("obs", DType::F32, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let config = Config::new(schema, 10)
        .whole_episodes()
        .prioritized(1.0, 0.0);
    ReplayBuffer::create(&path, config)
        .unwrap()
        .close()
        .unwrap();
    let mut actor = ReplayBuffer::open_actor(&path).unwrap();
    let mut owner = PriorityOwner::open(&path).unwrap();
    let episode = |actor: &mut ReplayBuffer<Actor>, steps: u32| {
        actor.add_reset(&[Column::scalar("obs", &0.0f32)]).unwrap();
        for t in 1..=steps {
            let (o, r) = (t as f32, 1.0f32);
            actor
                .add_step(
                    &[Column::scalar("obs", &o), Column::scalar("reward", &r)],
                    t == steps,
                    false,
                )
                .unwrap();
        }
    };
    episode(&mut actor, 4); // rows 0..=4
    episode(&mut actor, 3); // rows 5..=8
    // Steps have priority 1, reset rows none: 7 steps.
    assert_eq!(owner.priority_summary().unwrap().total, 7.0);
    // A third episode of 3 steps evicts the first whole (rows 0..=4).
    episode(&mut actor, 3);
    assert_eq!(actor.live(), 5..13);
    assert_eq!(owner.priority_summary().unwrap().total, 6.0);
}

#[test]
fn every_combination_but_one_owner_and_its_actors_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 16);
    let me = Some(std::process::id());
    // A writer that owns the tree refuses an owner, and the other way round.
    let writer = ReplayBuffer::open(&path).unwrap();
    match PriorityOwner::open(&path) {
        Err(Error::Locked {
            lock_file, holder, ..
        }) => {
            assert!(lock_file.ends_with("priorities.lock"));
            assert_eq!(holder, me);
        }
        other => panic!("owner beside a writer: {other:?}"),
    }
    drop(writer);
    let mut actor = ReplayBuffer::open_actor(&path).unwrap();
    let owner = PriorityOwner::open(&path).unwrap();
    match PriorityOwner::open(&path) {
        Err(Error::Locked { holder, .. }) => assert_eq!(holder, me),
        other => panic!("two owners: {other:?}"),
    }
    assert!(matches!(
        ReplayBuffer::open(&path),
        Err(Error::Locked { .. })
    ));
    add_range(&mut actor, 0, 2);
    // An actor has no update_priorities at all (a compile_fail example on `Actor` keeps
    // it so); a draw by priority names the owner's lock and process.
    match actor.sample(Request::rows(4).prioritized(0.4)) {
        Err(e @ Error::NotPriorityOwner { .. }) => {
            let text = e.to_string();
            assert!(text.contains("priorities.lock"), "{text}");
            assert!(text.contains(&std::process::id().to_string()), "{text}");
        }
        other => panic!("actor draw by priority: {other:?}"),
    }
    // An actor may not restore a checkpoint under a running owner: it would replace
    // the tree the owner has mapped.
    let state = actor.get_state().unwrap();
    assert!(matches!(actor.set_state(&state), Err(Error::Locked { .. })));
    // A reader has no update_priorities at all (a compile_fail example on `Reader`
    // keeps it so); it still opens beside the owner and the actor.
    Reader::open(&path).unwrap();
    // Once the owner is gone, the actor may restore, and a new owner open.
    owner.close().unwrap();
    actor.set_state(&state).unwrap();
    assert_eq!(
        PriorityOwner::open(&path)
            .unwrap()
            .priorities(&[0, 1])
            .unwrap(),
        vec![1.0, 1.0]
    );
}

/// Samples by priority and updates forever, printing a count after each round.
fn run_endless_owner(dir: &str, seed: u64) {
    let mut owner = PriorityOwner::open(dir).unwrap();
    let mut s = seed;
    let mut rounds = 0u64;
    loop {
        match owner.sample(Request::rows(32).prioritized(0.4)) {
            Ok(batch) => {
                let p: Vec<f32> = (0..batch.len())
                    .map(|_| (xorshift(&mut s) % 1000) as f32 / 100.0)
                    .collect();
                owner.update_priorities(batch.indices(), &p).unwrap();
            }
            Err(Error::Empty) => {}
            Err(e) => panic!("{e}"),
        }
        if xorshift(&mut s).is_multiple_of(64) {
            owner.flush().unwrap();
        }
        rounds += 1;
        println!("rounds {rounds}");
    }
}

/// Adds forever as an actor, printing each index once `add` returned it.
fn run_endless_actor(dir: &str) {
    use std::io::Write;
    let mut actor = ReplayBuffer::open_actor(dir).unwrap();
    let mut next = actor.live().end;
    let mut out = std::io::stdout().lock();
    loop {
        next = add_range(&mut actor, next, next + 1).end;
        writeln!(out, "ack {}", next - 1).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn owner_child() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (what, dir) = role.split_once(':').unwrap();
    match what {
        "owner" => run_endless_owner(dir, 77),
        "actor" => run_endless_actor(dir),
        _ => panic!("unknown role {what}"),
    }
}

/// Kills the owner at random moments (mid-update, mid-catch-up, mid-flush) while an
/// actor process keeps adding, and sometimes the actor: the survivor goes on, a new
/// owner opens with a consistent tree (`verify`), priorities only of live items, and
/// the actor's buffer keeps everything it acknowledged.
#[test]
fn kill_9_of_the_owner_or_an_actor_leaves_a_sound_tree_and_every_acked_item() {
    let rounds = common::env_count("REPLAYSTORE_OWNER_KILLS", 12);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b");
    create(&path, 500);
    let dir = path.to_str().unwrap();
    let mut s = 5u64;
    let mut actor = Drained::spawn("owner_child", CHILD_ENV, &format!("actor:{dir}"));
    actor.wait_past(10);
    for round in 0..rounds {
        let mut owner = Drained::spawn("owner_child", CHILD_ENV, &format!("owner:{dir}"));
        owner.wait_past(xorshift(&mut s) % 400);
        owner.kill();
        if round % 3 == 2 {
            let acked = actor.kill();
            let buf = ReplayBuffer::open_actor(&path).unwrap();
            assert!(buf.live().end > acked, "round {round}: lost {acked}");
            common::assert_live_items_intact(&buf);
            drop(buf);
            // With no process writing, the files as a whole: a sound tree (parents the
            // sums of their children, every leaf finite) whatever the owner was doing.
            let report = replaystore::verify(&path).unwrap();
            assert!(
                report.problems.is_empty(),
                "round {round}: {:?}",
                report.problems
            );
            actor = Drained::spawn("owner_child", CHILD_ENV, &format!("actor:{dir}"));
            actor.wait_past(acked + 1);
        }
        // The next owner repairs what the killed one left: every leaf finite, parents
        // the sums of their children, nothing on dead slots.
        let mut next = PriorityOwner::open(&path).unwrap();
        let summary = next.priority_summary().unwrap();
        assert!(
            summary.total > 0.0 && summary.total.is_finite(),
            "round {round}"
        );
        let live = next.reader().live();
        let p = next.priorities(&(live.start..live.start + 1).collect::<Vec<_>>());
        assert!(p.is_ok() || matches!(p, Err(Error::Evicted { .. })));
        drop(next);
    }
    actor.kill();
}
