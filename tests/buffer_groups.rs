//! Promise (issue 32, point 1): a buffer group keeps named members in one folder, each
//! created by its first add (with the group's template or a configuration of its own),
//! survives reopening, has one writer, and is checkpointed as one: a restore brings
//! every member to the checkpoint (members created since, empty), a kill at any step of
//! a checkpoint or of a member's creation leaves every member at one state. Members are
//! sampled on their own, all at once, and in lockstep; readers open the group and see
//! members created after they opened.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

mod common;

use replaystore::{
    Batch, BufferGroup, Column, Config, DType, Error, GroupRequest, Lane, Lanes, Reader,
    ReplayBuffer, Request, Schema,
};

/// The batch of a draw of `request` from member `name`.
fn one<'r, L: Lane>(
    group: &mut BufferGroup<L>,
    name: &'r str,
    request: impl Into<Request<'r>>,
) -> replaystore::Result<Batch> {
    let mut drawn = group.sample((name, request))?;
    Ok(drawn.pop().map(|(_, b)| b).unwrap_or_default())
}

fn schema() -> Schema {
    Schema::builder()
        .field("step", DType::U64, &[])
        .field("obs", DType::F32, &[3])
        .build()
        .unwrap()
}

/// Adds joint step `t` to every member of `names`: member `m`'s row holds `step = t`
/// and `obs = [t, m, -t]`.
fn add_step(group: &mut BufferGroup, names: &[&str], t: u64) {
    for (m, name) in names.iter().enumerate() {
        let obs = [t as f32, m as f32, -(t as f32)];
        group
            .add(
                name,
                &[Column::scalar("step", &t), Column::new("obs", &obs)],
            )
            .unwrap();
    }
}

fn lens(group: &BufferGroup) -> Vec<u64> {
    group
        .members()
        .iter()
        .map(|n| group.member(n).unwrap().len())
        .collect()
}

fn template() -> Config {
    Config::new(schema(), 64).segment_slots(16).seed(1)
}

#[test]
fn members_are_created_by_their_first_add_and_survive_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let mut group = BufferGroup::create(&dir, Some(template())).unwrap();
    assert!(group.members().is_empty());
    for t in 0..10 {
        add_step(&mut group, &["a", "b"], t);
    }
    // A member with a schema of its own, and a name the group already has.
    let own = Schema::builder()
        .field("x", DType::I32, &[])
        .build()
        .unwrap();
    let c = group
        .add_member("critic", Some(Config::new(own, 8)))
        .unwrap();
    c.add(&[Column::scalar("x", &7i32)]).unwrap();
    let twice = group.add_member("a", None).map(drop);
    assert!(matches!(twice, Err(Error::BadMember { .. })), "{twice:?}");
    let empty = group.add_member("", None).map(drop);
    assert!(matches!(empty, Err(Error::BadMember { .. })), "{empty:?}");
    group.close().unwrap();

    let mut group = BufferGroup::open(&dir).unwrap();
    assert_eq!(group.members(), ["a", "b", "critic"]);
    assert_eq!(lens(&group), [10, 10, 1]);
    let b = one(&mut group, "b", Request::rows(16)).unwrap();
    assert!(b.get::<f32>("obs").unwrap().chunks(3).all(|o| o[1] == 1.0));
    // Each member's indices carry its lane, as a lane's do.
    assert!(b.indices().iter().all(|&i| Lanes::lane_of(i) == 1));
    let x = one(&mut group, "critic", 2).unwrap();
    assert_eq!(x.get::<i32>("x").unwrap(), [7, 7]);
    // One writer: a second group writer, or a member's own writer, is refused.
    assert!(matches!(BufferGroup::open(&dir), Err(Error::Locked { .. })));
    assert!(matches!(
        Lanes::open_lane(&dir, 0),
        Err(Error::Locked { .. })
    ));
    group.close().unwrap();
    assert!(replaystore::verify(dir.join("lane-2")).unwrap().is_sound());
}

#[test]
fn a_group_without_a_template_creates_members_only_when_told_how() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let mut group = BufferGroup::create(&dir, None).unwrap();
    let cols = [
        Column::scalar("step", &0u64),
        Column::new("obs", &[0f32; 3]),
    ];
    match group.add("p", &cols) {
        Err(Error::NoSuchMember { creatable, .. }) => assert!(!creatable),
        other => panic!("{other:?}"),
    }
    group.add_member("p", Some(template())).unwrap();
    group.add("p", &cols).unwrap();
    assert!(matches!(
        one(&mut group, "q", 1),
        Err(Error::NoSuchMember { .. })
    ));
    // A plain buffer is not a group, and says so.
    ReplayBuffer::create(tmp.path().join("plain"), template())
        .unwrap()
        .close()
        .unwrap();
    let not = BufferGroup::open(tmp.path().join("plain")).map(drop);
    assert!(matches!(not, Err(Error::InvalidConfig { .. })), "{not:?}");
}

#[test]
fn a_checkpoint_restores_every_member_and_empties_those_created_since() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let mut group = BufferGroup::create(&dir, Some(template())).unwrap();
    // A checkpoint before any member: restoring it empties them all.
    let start = group.get_state_named("start").unwrap();
    assert!(start.members.is_empty());
    for t in 0..5 {
        add_step(&mut group, &["a", "b"], t);
    }
    let mid = group.get_state_named("mid").unwrap();
    assert_eq!(mid.members.len(), 2);
    for t in 5..9 {
        add_step(&mut group, &["a", "b", "c"], t);
    }
    assert_eq!(lens(&group), [9, 9, 4]);
    assert_eq!(group.snapshots().unwrap(), ["start", "mid"]);
    group.set_state(&mid).unwrap();
    assert_eq!(lens(&group), [5, 5, 0]);
    let steps = one(&mut group, "a", Request::rows(32)).unwrap();
    assert!(steps.get::<u64>("step").unwrap().iter().all(|&s| s < 5));
    // In a fresh process the checkpoint comes back from its name alone.
    group.close().unwrap();
    let mut group = BufferGroup::open(&dir).unwrap();
    // (with member c's empty state, which it took when it was created).
    let again = group.snapshot_state("mid").unwrap();
    assert_eq!(again.members.get(..2), Some(&mid.members[..]));
    assert_eq!(again.members[2].1.tail - again.members[2].1.head, 0);
    group
        .set_state(&group.snapshot_state("start").unwrap())
        .unwrap();
    assert_eq!(lens(&group), [0, 0, 0]);
    // A state from another group, or naming a member this one lacks, is refused.
    let mut other = mid.clone();
    other.members[1].0 = "zzz".into();
    assert!(matches!(
        group.set_state(&other),
        Err(Error::StateMismatch { .. })
    ));
    assert_eq!(group.keep_last(1).unwrap(), ["start"]);
    assert_eq!(group.snapshots().unwrap(), ["mid"]);
    group.close().unwrap();
}

#[test]
fn lockstep_draws_the_same_joint_steps_from_every_member() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let mut group = BufferGroup::create(&dir, Some(template())).unwrap();
    let names = ["p0", "p1", "p2"];
    for t in 0..200 {
        add_step(&mut group, &names, t);
    }
    let drawn = group.sample(GroupRequest::lockstep(128)).unwrap();
    assert_eq!(drawn.len(), 3);
    let steps: Vec<&[u64]> = drawn
        .iter()
        .map(|(_, b)| b.get::<u64>("step").unwrap())
        .collect();
    assert_eq!(steps[0], steps[1]);
    assert_eq!(steps[0], steps[2]);
    // Only the joint steps every member still holds (the ring keeps the last 64).
    assert!(
        steps[0].iter().all(|&s| (136..200).contains(&s)),
        "{:?}",
        steps[0]
    );
    for (m, (name, b)) in drawn.iter().enumerate() {
        assert_eq!(name, names[m]);
        assert!(
            b.get::<f32>("obs")
                .unwrap()
                .chunks(3)
                .all(|o| o[1] == m as f32)
        );
    }
    // Independent draws: n from each member.
    let each = group.sample(GroupRequest::each(10)).unwrap();
    assert_eq!(
        each.iter()
            .map(|(n, b)| (n.as_str(), b.len()))
            .collect::<Vec<_>>(),
        [("p0", 10), ("p1", 10), ("p2", 10)]
    );
    // A member created at joint step 200 joins the lockstep from there: positions
    // count back from each member's newest row.
    for t in 200..210 {
        add_step(&mut group, &["p0", "p1", "p2", "late"], t);
    }
    let drawn = group.sample(GroupRequest::lockstep(256)).unwrap();
    let steps: Vec<&[u64]> = drawn
        .iter()
        .map(|(_, b)| b.get::<u64>("step").unwrap())
        .collect();
    assert!(steps.iter().all(|s| *s == steps[0]));
    assert!(
        steps[0].iter().all(|&s| (200..210).contains(&s)),
        "{:?}",
        steps[0]
    );
}

#[test]
fn readers_open_a_group_and_see_members_created_later() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let mut group = BufferGroup::create(&dir, Some(template())).unwrap();
    add_step(&mut group, &["a"], 0);
    let mut reader = BufferGroup::open_reader(&dir).unwrap();
    assert_eq!(reader.members(), ["a"]);
    add_step(&mut group, &["a", "b"], 1);
    assert!(matches!(
        one(&mut reader, "b", 1),
        Err(Error::NoSuchMember { .. })
    ));
    reader.refresh().unwrap();
    assert_eq!(reader.members(), ["a", "b"]);
    let b = one(&mut reader, "b", Request::rows(4)).unwrap();
    assert_eq!(b.get::<u64>("step").unwrap(), [1, 1, 1, 1]);
    let lock = reader.sample(GroupRequest::lockstep(8)).unwrap();
    assert!(
        lock.iter()
            .all(|(_, b)| b.get::<u64>("step").unwrap().iter().all(|&s| s == 1))
    );
    let stats = reader.stats().unwrap();
    assert_eq!(
        stats
            .iter()
            .map(|(n, s)| (n.as_str(), s.len))
            .collect::<Vec<_>>(),
        [("a", 2), ("b", 1)]
    );
    // A member is a buffer of its own too.
    assert_eq!(Reader::open(dir.join("lane-1")).unwrap().len(), 1);
}

// ---- Kills in a checkpoint, and in a member's creation ----

const CHILD: &str = "REPLAYSTORE_GROUP_CHILD";

/// The child of the kill tests: restores the group to `a`, creates member `d` (with a
/// first add), takes `b`, deletes `a`, saying each once it returned.
#[test]
fn group_checkpoint_child() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let mut group = BufferGroup::open(&dir).unwrap();
    let a = group.snapshot_state("a").unwrap();
    group.set_state(&a).unwrap();
    println!("restored");
    add_step(&mut group, &["d"], 100);
    println!("created");
    group.get_state_named("b").unwrap();
    println!("snapped");
    group.delete_snapshot("a").unwrap();
    println!("deleted");
    group.close().unwrap();
    println!("finished");
}

/// Promise: a kill at any step of a group checkpoint (between members' intents,
/// restores, snapshots, deletes) or of a member's creation (after its folder and empty
/// snapshots, before `GROUP` names it) leaves, once the group opens: every member at the
/// old state or every member at the restored one; a member `GROUP` names whole, with
/// every checkpoint the group lists, or no trace of it; every member sound.
#[cfg(feature = "kill-points")]
#[test]
fn kill_at_each_step_of_a_group_checkpoint_leaves_all_members_or_none() {
    common::kill_at_each_point(
        "group_checkpoint_child",
        CHILD,
        &[
            "lanes-intent-between",
            "lanes-restore-between",
            "group-member-made",
            "lanes-snapshot-between",
            "lanes-delete-between",
        ],
        &[1, 2, 3],
        |dir, _| {
            let mut group = BufferGroup::create(dir, Some(template())).unwrap();
            for t in 0..2 {
                add_step(&mut group, &["a", "b", "c"], t);
            }
            group.get_state_named("a").unwrap();
            for t in 2..5 {
                add_step(&mut group, &["a", "b", "c"], t);
            }
            group.close().unwrap();
            dir.display().to_string()
        },
        check_group_after_kill,
    );
}

#[cfg(feature = "kill-points")]
fn check_group_after_kill(dir: &std::path::Path, lines: &[String], ctx: &str) {
    let mut group = BufferGroup::open(dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let got = lens(&group);
    let said = |what: &str| lines.iter().any(|l| l == what);
    let old = got.get(..3) == Some(&[5, 5, 5]);
    let restored = got.get(..3) == Some(&[2, 2, 2]);
    assert!(
        restored || (!said("restored") && old),
        "{ctx}: members hold {got:?}"
    );
    let members = group.members();
    assert!(
        members == ["a", "b", "c"] || members == ["a", "b", "c", "d"],
        "{ctx}: {members:?}"
    );
    assert!(!said("created") || members.len() == 4, "{ctx}: {members:?}");
    assert_eq!(
        got.get(3).copied().unwrap_or(1),
        1,
        "{ctx}: member d holds {got:?}"
    );
    let entries = std::fs::read_dir(dir).unwrap().count();
    // GROUP, LOCK and one folder per member: no orphan folder left.
    assert_eq!(
        entries,
        2 + members.len(),
        "{ctx}: folder holds {entries} entries"
    );
    let listed = group.snapshots().unwrap();
    assert!(
        !said("snapped") || listed.contains(&"b".to_owned()),
        "{ctx}: {listed:?}"
    );
    assert!(
        said("snapped") || listed.contains(&"a".to_owned()),
        "{ctx}: {listed:?}"
    );
    assert!(
        !said("deleted") || !listed.contains(&"a".to_owned()),
        "{ctx}: {listed:?}"
    );
    for name in group
        .members()
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
    {
        let held = group.member(&name).unwrap().snapshots().unwrap().len();
        assert_eq!(
            held,
            listed.len(),
            "{ctx}: member {name} holds {held}, the group {listed:?}"
        );
    }
    // Every listed checkpoint restores every member.
    for name in &listed {
        let s = group.snapshot_state(name).unwrap();
        group.set_state(&s).unwrap();
    }
    let n = group.members().len();
    group.close().unwrap();
    for k in 0..n {
        let report = replaystore::verify(dir.join(format!("lane-{k}"))).unwrap();
        assert!(
            report.is_sound(),
            "{ctx}: member {k}: {:?}",
            report.problems
        );
    }
}

/// Promise (the shape of RLlib's MultiAgentMixInReplayBuffer, with exact counts): a
/// mixed draw returns up to `new` of the items the member got since this handle's last
/// mixed draw, oldest first, once each, then `replayed` items drawn from all it holds;
/// `new_items` says how many are waiting; new items the ring evicted first are skipped;
/// a member that holds nothing returns nothing.
#[test]
fn mixed_draws_return_each_new_item_once_and_replay_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let mut group = BufferGroup::create(tmp.path().join("g"), Some(template())).unwrap();
    let steps = |b: &Batch| b.get::<u64>("step").unwrap().to_vec();
    let draw = |group: &mut BufferGroup, new, replayed| {
        let mut drawn = group
            .sample(GroupRequest::mixed("p", new, replayed))
            .unwrap();
        assert_eq!(drawn.len(), 1, "one member drawn");
        drawn.pop().unwrap().1
    };
    for t in 0..10 {
        add_step(&mut group, &["p"], t);
    }
    assert_eq!(group.new_items("p").unwrap(), 10);
    // Only new: the oldest first, each once.
    assert_eq!(steps(&draw(&mut group, 4, 0)), [0, 1, 2, 3]);
    assert_eq!(steps(&draw(&mut group, 4, 0)), [4, 5, 6, 7]);
    assert_eq!(steps(&draw(&mut group, 4, 0)), [8, 9]);
    assert_eq!(group.new_items("p").unwrap(), 0);
    assert!(
        steps(&draw(&mut group, 4, 0)).is_empty(),
        "nothing new: nothing"
    );
    // Four new, then four replayed from what the member holds.
    for t in 10..20 {
        add_step(&mut group, &["p"], t);
    }
    let b = steps(&draw(&mut group, 4, 4));
    assert_eq!(b[..4], [10, 11, 12, 13]);
    assert_eq!(b.len(), 8);
    assert!(b[4..].iter().all(|&s| s < 20));
    // Fewer new items than asked: those there are, then the replayed ones.
    let b = steps(&draw(&mut group, 20, 6));
    assert_eq!(b[..6], [14, 15, 16, 17, 18, 19]);
    assert_eq!(b.len(), 12);
    // Only replayed: the new item stays new.
    add_step(&mut group, &["p"], 20);
    assert_eq!(draw(&mut group, 0, 5).len(), 5);
    assert_eq!(group.new_items("p").unwrap(), 1);
    // New items the ring evicted before a draw returned them are skipped (capacity 64).
    for t in 21..200 {
        add_step(&mut group, &["p"], t);
    }
    assert_eq!(group.new_items("p").unwrap(), 64);
    assert_eq!(steps(&draw(&mut group, 3, 0)), [136, 137, 138]);
    // A member that holds nothing returns nothing, new or replayed.
    group.add_member("empty", None).unwrap();
    let drawn = group.sample(GroupRequest::mixed("empty", 2, 3)).unwrap();
    assert_eq!(drawn[0].1.len(), 0);
    // One sink per member drawn: a mixed draw fills one.
    let (mut a, mut b) = (Batch::default(), Batch::default());
    let bad = group.sample_into(GroupRequest::mixed("p", 1, 1), &mut [&mut a, &mut b]);
    assert!(matches!(bad, Err(Error::InvalidSample(_))), "{bad:?}");
}

/// Promise (RLlib's MixIn over prioritized buffers): with `beta` the replayed part of
/// a mixed draw comes by the member's priorities (chi-square over 20,000 items), with
/// the importance weights a plain prioritized draw gives the same items; the new part
/// comes once each, weighted 1. A member that keeps no priorities refuses `beta`.
#[test]
fn mixed_draws_with_beta_replay_by_priority() {
    let tmp = tempfile::tempdir().unwrap();
    let mut group = BufferGroup::create(tmp.path().join("g"), Some(template())).unwrap();
    let per = template().prioritized(1.0, 0.0);
    group.add_member("p", Some(per)).unwrap();
    for t in 0..4 {
        add_step(&mut group, &["p"], t);
    }
    let prios = [1.0f64, 2.0, 3.0, 4.0];
    let m = group.member_mut("p").unwrap();
    m.update_priorities(&[0, 1, 2, 3], &prios).unwrap();
    let mixed = |group: &mut BufferGroup, new, replayed| {
        let request = GroupRequest::mixed("p", new, replayed).prioritized(0.5);
        let b = group.sample(request).unwrap().pop().unwrap().1;
        let steps = b.get::<u64>("step").unwrap().to_vec();
        (steps, b.weights().to_vec())
    };
    // The plain prioritized draw's weight of each item, for comparison.
    let plain = one(&mut group, "p", Request::rows(64).prioritized(0.5)).unwrap();
    let mut weight_of = std::collections::BTreeMap::new();
    let steps = plain.get::<u64>("step").unwrap().to_vec();
    for (s, w) in steps.iter().zip(plain.weights()) {
        weight_of.insert(*s, *w);
    }
    assert_eq!(weight_of.len(), 4, "64 draws reach all four items");
    // Only replayed, by priority.
    let mut seen = [0u64; 4];
    for _ in 0..200 {
        let (steps, weights) = mixed(&mut group, 0, 100);
        assert_eq!(steps.len(), 100);
        for (s, w) in steps.iter().zip(&weights) {
            seen[*s as usize] += 1;
            assert_eq!(*w, weight_of[s], "item {s}'s weight");
        }
    }
    let total: f64 = prios.iter().sum();
    let chi: f64 = (seen.iter().zip(prios))
        .map(|(&o, p)| {
            let e = 20_000.0 * p / total;
            (o as f64 - e).powi(2) / e
        })
        .sum();
    assert!(
        chi < 16.27,
        "chi-square {chi} over 3 degrees (p = 0.001): {seen:?}"
    );
    // Only new: the four items not returned as new yet, weighted 1.
    assert_eq!(mixed(&mut group, 4, 0), (vec![0, 1, 2, 3], vec![1.0; 4]));
    // Half new, weighted 1, then replayed ones with their weights.
    add_step(&mut group, &["p"], 4);
    add_step(&mut group, &["p"], 5);
    let (steps, weights) = mixed(&mut group, 2, 2);
    assert_eq!(steps[..2], [4, 5]);
    assert_eq!(weights[..2], [1.0, 1.0]);
    assert_eq!(steps.len(), 4);
    // The new items' priority is the largest (4): the replayed weights follow it.
    let plain = one(&mut group, "p", Request::rows(256).prioritized(0.5)).unwrap();
    let steps_now = plain.get::<u64>("step").unwrap().to_vec();
    let now: std::collections::BTreeMap<u64, f32> = steps_now
        .iter()
        .copied()
        .zip(plain.weights().iter().copied())
        .collect();
    for (s, w) in steps[2..].iter().zip(&weights[2..]) {
        assert_eq!(*w, now[s], "replayed item {s}'s weight");
    }
    // A member without priorities refuses a replay by priority, and keeps its items.
    add_step(&mut group, &["q"], 0);
    let bad = group.sample(GroupRequest::mixed("q", 1, 1).prioritized(0.5));
    assert!(bad.is_err(), "{bad:?}");
    assert_eq!(group.member("q").unwrap().len(), 1);
}

/// Promise: a member draws every unit its own handle draws (a group's draw is the
/// member's, not rows only): transitions of an episodic member, drawn or read at given
/// step rows, and a request the member refuses is refused.
#[test]
fn a_group_draws_a_members_transitions() {
    let tmp = tempfile::tempdir().unwrap();
    let mut group = BufferGroup::create(tmp.path().join("g"), None).unwrap();
    let schema = Schema::builder()
        .field("obs", DType::F32, &[])
        .field("reward", DType::F32, &[])
        .build()
        .unwrap();
    let m = group
        .add_member("ep", Some(Config::new(schema, 64).episodic().seed(1)))
        .unwrap();
    let obs = [0.0f32, 1.0, 2.0, 3.0, 4.0];
    m.add_episode(
        &[Column::new("obs", &obs)],
        &[Column::new("reward", &[1.0f32; 4])],
        true,
        false,
    )
    .unwrap();
    let b = one(
        &mut group,
        "ep",
        Request::transitions(32, &["obs"]).nstep(2, 0.5),
    )
    .unwrap();
    let (o, next) = (
        b.get::<f32>("obs").unwrap(),
        b.get::<f32>("next_obs").unwrap(),
    );
    for (o, n) in o.iter().zip(next) {
        assert_eq!(*n, (o + 2.0).min(4.0));
    }
    let at = one(&mut group, "ep", Request::transitions_at(&[4, 1], &["obs"])).unwrap();
    assert_eq!(at.get::<f32>("obs").unwrap(), [3.0, 0.0]);
}

// ---- A failure at any file operation of a group's steps ----

/// What a fault-sweep run does through the failing seam.
#[derive(Clone, Copy, Debug)]
enum GroupStep {
    Open,
    AddMember,
    Checkpoint,
    Restore,
    Delete,
}

impl GroupStep {
    fn run(self, group: &mut BufferGroup) -> replaystore::Result<()> {
        match self {
            GroupStep::Open => Ok(()),
            GroupStep::AddMember => {
                let c = [
                    Column::scalar("step", &7u64),
                    Column::new("obs", &[0f32; 3]),
                ];
                group.add("c", &c).map(drop)
            }
            GroupStep::Checkpoint => group.get_state_named("t").map(drop),
            GroupStep::Restore => {
                let s = group.snapshot_state("s")?;
                group.set_state(&s)
            }
            GroupStep::Delete => group.delete_snapshot("s"),
        }
    }
}

/// Members a and b: 3 joint steps under snapshot `s`, 6 live.
fn group_base(dir: &std::path::Path) {
    let mut group = BufferGroup::create(dir, Some(template())).unwrap();
    for t in 0..3 {
        add_step(&mut group, &["a", "b"], t);
    }
    group.get_state_named("s").unwrap();
    for t in 3..6 {
        add_step(&mut group, &["a", "b"], t);
    }
    group.close().unwrap();
}

/// Runs `step` with file operation `n` failing (once, or from then on); returns
/// whether the step failed. Then the group opens through the real file system and
/// must be whole: every member sound, at the state before the step or after it, the
/// members those before or after, every listed checkpoint held by every member.
fn group_fault_case(root: &std::path::Path, step: GroupStep, n: u64, sticky: bool) -> bool {
    use replaystore::io::FaultyIo;
    let dir = root.join(format!("{step:?}-{n}-{sticky}"));
    group_base(&dir);
    let io = std::sync::Arc::new(match sticky {
        true => FaultyIo::fail_from(n),
        false => FaultyIo::fail_once(n),
    });
    let ctx = format!(
        "{step:?}, operation {n} failing{}",
        if sticky { " from then on" } else { " once" }
    );
    let result = BufferGroup::open_with(&dir, io).and_then(|mut g| step.run(&mut g));
    let report = replaystore::verify(&dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(report.is_sound(), "{ctx}: {:?}", report.problems);
    let group = BufferGroup::open(&dir).unwrap_or_else(|e| panic!("{ctx} ({result:?}): open: {e}"));
    let members = group.members();
    assert!(
        members == ["a", "b"] || members == ["a", "b", "c"],
        "{ctx}: {members:?}"
    );
    let got = lens(&group);
    let before_or_after = match step {
        GroupStep::Restore => got[..2] == [6, 6] || got[..2] == [3, 3],
        _ => got[..2] == [6, 6],
    };
    assert!(before_or_after, "{ctx}: members hold {got:?} ({result:?})");
    if matches!(step, GroupStep::Restore) && result.is_ok() {
        assert_eq!(got[..2], [3, 3], "{ctx}");
    }
    let listed = group.snapshots().unwrap();
    for name in &members {
        let held = group.member(name).unwrap().snapshots().unwrap().len();
        assert_eq!(
            held,
            listed.len(),
            "{ctx}: member {name} holds {held}, the group {listed:?}"
        );
    }
    if let GroupStep::AddMember = step {
        assert!(result.is_err() || members.len() == 3, "{ctx}");
    }
    group.close().unwrap();
    result.is_err()
}

/// Promise: whichever file operation of a group's open, member creation, checkpoint,
/// restore or delete fails, the call returns a typed error or succeeds, and the group
/// then opens whole, each member at one state (`group_fault_case`).
#[test]
fn a_failure_at_any_file_operation_of_a_group_step_loses_nothing() {
    use replaystore::io::FaultyIo;
    let root = tempfile::tempdir().unwrap();
    let (mut points, mut failed) = (0, 0);
    for step in [
        GroupStep::Open,
        GroupStep::AddMember,
        GroupStep::Checkpoint,
        GroupStep::Restore,
        GroupStep::Delete,
    ] {
        // The step's operations, counted through a seam that never fails.
        let dir = root.path().join(format!("count-{step:?}"));
        group_base(&dir);
        let io = std::sync::Arc::new(FaultyIo::fail_once(u64::MAX));
        let mut g = BufferGroup::open_with(&dir, io.clone()).unwrap();
        let opened = io.ops();
        step.run(&mut g).unwrap();
        let (from, ops) = match step {
            GroupStep::Open => (0, opened),
            _ => (opened, io.ops() - opened),
        };
        drop(g);
        for k in 0..ops {
            for sticky in [false, true] {
                points += 1;
                failed += u64::from(group_fault_case(root.path(), step, from + k, sticky));
            }
        }
    }
    println!("group fault points {points}, of which the step failed {failed}");
    assert!(
        failed * 2 > points,
        "only {failed} of {points} injected failures surfaced"
    );
}

#[test]
fn an_unlisted_member_folder_with_a_foreign_entry_is_refused_with_nothing_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let mut group = BufferGroup::create(&dir, Some(template())).unwrap();
    add_step(&mut group, &["a"], 0);
    drop(group);
    // A member folder GROUP does not list (a creation a kill cut short, as far as the
    // open can tell), with a snapshot, and a file of someone's beside its own.
    let lane7 = dir.join("lane-7");
    let mut stray = ReplayBuffer::create(&lane7, template()).unwrap();
    stray
        .add(&[
            Column::scalar("step", &1u64),
            Column::new("obs", &[0f32; 3]),
        ])
        .unwrap();
    stray.get_state_named("keep").unwrap();
    stray.close().unwrap();
    std::fs::write(lane7.join("notes.txt"), b"mine").unwrap();
    let snapshot: Vec<_> = std::fs::read_dir(lane7.join("snapshots/keep"))
        .unwrap()
        .collect();
    assert!(!snapshot.is_empty());
    let refused = BufferGroup::open(&dir);
    assert!(
        matches!(&refused, Err(Error::ForeignFile { path, .. }) if path.ends_with("notes.txt")),
        "{:?}",
        refused.err()
    );
    // Nothing was removed before the refusal: the snapshot is whole.
    let after: Vec<_> = std::fs::read_dir(lane7.join("snapshots/keep"))
        .unwrap()
        .collect();
    assert_eq!(after.len(), snapshot.len());
    assert!(lane7.join("MANIFEST").exists());
    // Without the foreign file the open removes the stray member whole.
    std::fs::remove_file(lane7.join("notes.txt")).unwrap();
    let group = BufferGroup::open(&dir).unwrap();
    assert_eq!(group.members(), ["a"]);
    assert!(!lane7.exists());
}

#[test]
fn a_member_folder_that_is_a_link_is_refused_by_readers_as_by_the_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let mut group = BufferGroup::create(&dir, Some(template())).unwrap();
    add_step(&mut group, &["a", "b"], 0);
    drop(group);
    // Member b's folder moved elsewhere, a link left in its place.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::rename(dir.join("lane-1"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("lane-1")).unwrap();
    let is_link_refusal = |e: &Error| {
        matches!(e, Error::ForeignFile { path, found, .. }
            if path.ends_with("lane-1") && found.contains("link"))
    };
    let w = BufferGroup::open(&dir).err().unwrap();
    assert!(is_link_refusal(&w), "{w}");
    let r = BufferGroup::open_reader(&dir).err().unwrap();
    assert!(is_link_refusal(&r), "{r}");
    let l = Lanes::open_reader(&dir).err().unwrap();
    assert!(is_link_refusal(&l), "{l}");
}
