//! Buffer groups (issue 32): named member buffers in one folder, one per policy or
//! player (RLlib's `MultiAgentReplayBuffer`, DI-engine's and UnstableBaselines' `pid`),
//! each created when first used, checkpointed as one.
//!
//! A group is a lane set whose lanes have names and arrive one by one, each with its own
//! configuration: member `K` is the one-ring buffer in `lane-K/`, its logical indices
//! starting at `K << 56`, and a checkpoint of the group is the lane set's (`state.rs`:
//! every member's snapshot under one name; a restore writes every member's intent
//! before restoring any, so a kill leaves all members at the old state or all at the
//! new). What a group adds is the `GROUP` file (FORMAT.md): the member names, the
//! configuration a member created by its first add gets, and the checkpoints taken
//! while the group had no member yet. A new member takes an empty snapshot of every
//! checkpoint the group has before the file names it, so restoring an older checkpoint
//! empties the members created since, as if they had never been added to.

use std::path::{Path, PathBuf};

use rand::RngExt;

use super::{Lane, Lanes, LanesState, check_lane_range, open_all, state};
use crate::batch::Batch;
use crate::column::Column;
use crate::error::{Error, Result};
use crate::format::group::{GroupDoc, MAX_NAME, MemberDoc};
use crate::format::lanes::{MAX_LANES, first_index};
use crate::format::state::State;
use crate::handle::{Reader, ReplayBuffer};
use crate::parts::config::{Config, Stats};
use crate::parts::snapshot;
use crate::request::{GroupDraw, GroupRequest, Request};
use crate::sink::Sink;
use crate::storage::io::{self, IoRef};
use crate::storage::{self, Manifest};

/// Draws of a lockstep sample made again when a reader finds a row the writer has
/// since overwritten.
const LOCKSTEP_TRIES: usize = 64;

/// Named member buffers in one folder, created on first use and checkpointed as one.
///
/// ```
/// use replaystore::{BufferGroup, Column, Config, DType, GroupRequest, Request, Schema};
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder().field("obs", DType::F32, &[2]).build()?;
/// // Every member gets this configuration unless it is created with its own.
/// let mut group = BufferGroup::create(dir.path().join("g"), Some(Config::new(schema, 100)))?;
/// group.add("policy_0", &[Column::new("obs", &[1.0f32, 2.0])])?; // creates the member
/// group.add("policy_1", &[Column::new("obs", &[3.0f32, 4.0])])?;
/// assert_eq!(group.members(), ["policy_0", "policy_1"]);
/// let drawn = group.sample(("policy_1", Request::rows(4)))?; // one member
/// assert_eq!(drawn[0].1.get::<f32>("obs")?, [3.0, 4.0].repeat(4));
/// let each = group.sample(GroupRequest::each(2))?; // every member, in member order
/// assert_eq!(each.iter().map(|(name, b)| (name.as_str(), b.len())).collect::<Vec<_>>(),
///            [("policy_0", 2), ("policy_1", 2)]);
/// let state = group.get_state_named("step-1")?; // every member, one checkpoint
/// group.add("policy_2", &[Column::new("obs", &[5.0f32, 6.0])])?;
/// group.set_state(&state)?; // policy_2 is empty again, as at the checkpoint
/// assert_eq!(group.member("policy_2")?.len(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BufferGroup<L: Lane = ReplayBuffer> {
    dir: PathBuf,
    io: IoRef,
    doc: GroupDoc,
    /// The members as a lane set (member `K` at position `K`), once there is one.
    set: Option<Lanes<L>>,
    /// The group's own writer lock (`LOCK` in its folder), held by the writer: member
    /// creation and the checkpoints of a group with no member yet need it.
    _lock: Option<std::fs::File>,
    /// Per member, the first index a mixed draw has not returned as new yet
    /// ([`GroupRequest::mixed`]): this handle's, not stored (see there).
    new_from: Vec<u64>,
}

/// A group's checkpoint: every member's state under one snapshot name.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupState {
    /// The snapshot's name, in every member.
    pub name: String,
    /// Each member's name and state, in member order.
    pub members: Vec<(String, State)>,
}

impl BufferGroup<ReplayBuffer> {
    /// Creates an empty group in `dir` (absent or empty). `template` is the
    /// configuration a member created by its first `add` gets (its capacity is the
    /// member's); without one, members are created by [`BufferGroup::add_member`] only.
    pub fn create(dir: impl AsRef<Path>, template: Option<Config>) -> Result<BufferGroup> {
        if template.as_ref().is_some_and(|c| c.evict_for_room) {
            // The group file's template has no place for it; a member made from it
            // would refuse where this template said evict.
            return Err(Error::InvalidConfig {
                field: "evict_for_room",
                problem: "a group's template does not keep it: create such a member with \
                          add_member"
                    .into(),
            });
        }
        let dir = storage::resolve_root(dir.as_ref());
        let io = template
            .as_ref()
            .and_then(|c| c.io.clone())
            .unwrap_or_else(io::os);
        crate::store::create_empty_dir(&*io, &dir)?;
        let lock = storage::lock(&*io, &dir)?;
        let doc = GroupDoc {
            uuid: crate::algo::entropy::uuid(),
            template: template.as_ref().map(Config::to_template),
            members: Vec::new(),
            empty_snapshots: Vec::new(),
        };
        storage::write_group(&*io, &dir, &doc)?;
        Ok(BufferGroup {
            dir,
            io,
            doc,
            set: None,
            _lock: Some(lock),
            new_from: Vec::new(),
        })
    }

    /// Opens the group in `dir` for writing: every member, each recovered as
    /// [`ReplayBuffer::open`] recovers; a member whose creation a kill cut short (its
    /// folder, but no line in `GROUP`) is removed, and so is a checkpoint a kill left
    /// in some members only.
    pub fn open(dir: impl AsRef<Path>) -> Result<BufferGroup> {
        BufferGroup::open_with(dir, io::os())
    }

    /// `open` through a given file-operation seam (members created later use it too).
    pub fn open_with(dir: impl AsRef<Path>, io: IoRef) -> Result<BufferGroup> {
        let dir = storage::resolve_root(dir.as_ref());
        let lock = storage::lock(&*io, &dir)?;
        let doc = read_doc(&io, &dir)?;
        remove_unlisted_members(&io, &dir, &doc)?;
        let dirs = member_dirs(&dir, &doc);
        for d in &dirs {
            super::own_lane_dir(&io, d)?;
        }
        let set = match dirs.is_empty() {
            true => None,
            false => {
                state::settle_restores(&*io, &dirs)?;
                let mut set = open_all(&dir, &io, |d, io| ReplayBuffer::open_with(d, io))?;
                set.drop_partial_snapshots()?;
                Some(set)
            }
        };
        let new_from = tails(set.as_ref());
        Ok(BufferGroup {
            dir,
            io,
            doc,
            set,
            _lock: Some(lock),
            new_from,
        })
    }

    /// Creates member `name` with `config` (or the group's template), empty, and
    /// returns it. Before `GROUP` names it, it takes an empty snapshot of every
    /// checkpoint the group has, so a kill leaves no member the file names without them.
    pub fn add_member(&mut self, name: &str, config: Option<Config>) -> Result<&mut ReplayBuffer> {
        self.check_new_name(name)?;
        let config = match config {
            Some(c) => c,
            None => self
                .template()?
                .ok_or_else(|| self.no_member(name, false))?,
        };
        let lane = self.doc.free_lane().ok_or_else(|| Error::InvalidConfig {
            field: "members",
            problem: format!("a group holds at most {MAX_LANES} members"),
        })?;
        let path = storage::lane_dir(&self.dir, lane);
        if self.io.kind(&path).is_ok() {
            // Left by a creation that failed in this session (an open removes those
            // a kill left).
            snapshot::remove_buffer(&*self.io, &path)?;
        }
        let mut c = config;
        c.first_index = first_index(lane);
        c.io = Some(self.io.clone());
        let mut member = ReplayBuffer::create(&path, c)?;
        let checkpoints = self.snapshots()?;
        let made = (checkpoints.iter()).try_for_each(|n| member.get_state_named(n).map(drop));
        if let Err(e) = made {
            // `GROUP` does not name it: nobody will.
            drop(member);
            let _ = snapshot::remove_buffer(&*self.io, &path);
            return Err(e);
        }
        crate::killpoint::hit("group-member-made");
        let mut doc = self.doc.clone();
        doc.members.push(MemberDoc {
            name: name.to_owned(),
            lane,
        });
        doc.empty_snapshots.clear();
        // A failure here may come after the rename (the folder's fsync): `GROUP` may
        // name the member, so its folder, whole by now, stays (found by the fault
        // sweep). If the file names it, this handle takes it as a member, so that a
        // later add never makes it again over its folder; if not, the next open
        // removes the folder. The call fails either way.
        if let Err(e) = storage::write_group(&*self.io, &self.dir, &doc) {
            let named = storage::read_group(&*self.io, &self.dir).ok().flatten();
            if named.is_some_and(|d| d.member(name).is_some()) {
                self.adopt(doc, lane, member);
            }
            return Err(e);
        }
        self.adopt(doc, lane, member);
        self.member_mut(name)
    }

    /// Takes `member`, in lane `lane`, as the group's newest, `doc` naming it.
    fn adopt(&mut self, doc: GroupDoc, lane: u32, member: ReplayBuffer) {
        self.doc = doc;
        self.new_from.push(first_index(lane));
        match &mut self.set {
            Some(set) => set.push_lane(member),
            None => self.set = Lanes::of(self.dir.clone(), vec![member]),
        }
    }

    /// Member `name` for writing.
    pub fn member_mut(&mut self, name: &str) -> Result<&mut ReplayBuffer> {
        let k = self.position(name)?;
        let set = self.set.as_mut();
        set.and_then(|s| s.lanes.get_mut(k))
            .ok_or_else(|| Error::NotABuffer {
                dir: self.dir.clone(),
            })
    }

    /// Member `name`, created with the group's template if it has none yet.
    pub fn member_or_create(&mut self, name: &str) -> Result<&mut ReplayBuffer> {
        match self.position(name) {
            Ok(_) => self.member_mut(name),
            Err(Error::NoSuchMember { .. }) => self.add_member(name, None),
            Err(e) => Err(e),
        }
    }

    /// Adds one item to member `name` (created by this add if new; see
    /// [`BufferGroup::member_or_create`]); returns its logical index.
    pub fn add(&mut self, name: &str, columns: &[Column<'_>]) -> Result<u64> {
        self.member_or_create(name)?.add(columns)
    }

    /// Adds a batch to member `name` (created if new); returns the indices given.
    pub fn add_batch(
        &mut self,
        name: &str,
        columns: &[Column<'_>],
    ) -> Result<std::ops::Range<u64>> {
        self.member_or_create(name)?.add_batch(columns)
    }

    /// Makes every member's adds survive power loss.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.set {
            Some(set) => set.flush(),
            None => Ok(()),
        }
    }

    /// Flushes and closes every member.
    pub fn close(self) -> Result<()> {
        match self.set {
            Some(set) => set.close(),
            None => Ok(()),
        }
    }

    /// Checkpoints every member as snapshot `gen-<n>` (see
    /// [`BufferGroup::get_state_named`]).
    pub fn get_state(&mut self) -> Result<GroupState> {
        let name = match &self.set {
            Some(set) => {
                let n = set
                    .lanes
                    .iter()
                    .map(|l| l.stats().generation)
                    .max()
                    .unwrap_or(0);
                format!("gen-{:012}", n.wrapping_add(1))
            }
            None => format!("empty-{:06}", self.doc.empty_snapshots.len() + 1),
        };
        self.get_state_named(&name)
    }

    /// Checkpoints every member as snapshot `name` at once (the lane set's
    /// `get_state_named`): O(1) in the data. A group with no member yet records the
    /// name in `GROUP`, for its first member to take.
    pub fn get_state_named(&mut self, name: &str) -> Result<GroupState> {
        snapshot::valid_name(name)?;
        let Some(set) = &mut self.set else {
            if self.doc.empty_snapshots.iter().any(|n| n == name) {
                return Err(Error::SnapshotExists {
                    dir: self.dir.clone(),
                    name: name.to_owned(),
                });
            }
            let mut doc = self.doc.clone();
            doc.empty_snapshots.push(name.to_owned());
            storage::write_group(&*self.io, &self.dir, &doc)?;
            self.doc = doc;
            return Ok(GroupState {
                name: name.to_owned(),
                members: Vec::new(),
            });
        };
        let states = set.get_state_named(name)?;
        Ok(self.named(states))
    }

    /// The group's checkpoints (held whole by every member), oldest first.
    pub fn snapshots(&self) -> Result<Vec<String>> {
        match &self.set {
            Some(set) => set.snapshots(),
            None => Ok(self.doc.empty_snapshots.clone()),
        }
    }

    /// The state of the group's checkpoint `name`, as `get_state_named` returned it.
    pub fn snapshot_state(&self, name: &str) -> Result<GroupState> {
        match &self.set {
            Some(set) => Ok(self.named(set.snapshot_state(name)?)),
            None if self.doc.empty_snapshots.iter().any(|n| n == name) => Ok(GroupState {
                name: name.to_owned(),
                members: Vec::new(),
            }),
            None => Err(self.no_snapshot(name)),
        }
    }

    /// Deletes the group's checkpoint `name` from every member.
    pub fn delete_snapshot(&mut self, name: &str) -> Result<()> {
        if let Some(set) = &mut self.set {
            return set.delete_snapshot(name);
        }
        if !self.doc.empty_snapshots.iter().any(|n| n == name) {
            return Err(self.no_snapshot(name));
        }
        let mut doc = self.doc.clone();
        doc.empty_snapshots.retain(|n| n != name);
        storage::write_group(&*self.io, &self.dir, &doc)?;
        self.doc = doc;
        Ok(())
    }

    /// Deletes all but the `k` newest checkpoints; returns the names deleted.
    pub fn keep_last(&mut self, k: usize) -> Result<Vec<String>> {
        let list = self.snapshots()?;
        state::all_but_last(list, k, |name| self.delete_snapshot(name))
    }

    /// Returns every member to checkpoint `state`, all or none (the lane set's
    /// `set_state`). A member created after the checkpoint returns to the empty
    /// snapshot it took when it was created; a member the state names must be the
    /// group's, with the state its snapshot holds.
    pub fn set_state(&mut self, state: &GroupState) -> Result<()> {
        let Some(set) = &mut self.set else {
            if !state.members.is_empty() {
                return Err(self.state_mismatch(state, "no members".into()));
            }
            return match self.doc.empty_snapshots.contains(&state.name) {
                true => Ok(()),
                false => Err(self.no_snapshot(&state.name)),
            };
        };
        let full = set.snapshot_state(&state.name)?;
        for (name, s) in &state.members {
            let k = self.doc.members.iter().position(|m| m.name == *name);
            let held = k
                .and_then(|k| self.doc.members.get(k))
                .map(|m| m.lane as usize);
            match held.and_then(|lane| full.lanes.get(lane)) {
                Some(h) if h == s => {}
                Some(_) => {
                    return Err(self.state_mismatch(state, format!("member {name:?}'s state")));
                }
                None => return Err(self.state_mismatch(state, format!("a member {name:?}"))),
            }
        }
        match &mut self.set {
            Some(set) => set.set_state(&full),
            None => Ok(()),
        }
    }

    /// The template as a configuration, if the group has one.
    fn template(&self) -> Result<Option<Config>> {
        let file = self.dir.join(crate::format::group::FILE_NAME);
        (self.doc.template.as_ref())
            .map(|t| Config::from_template(t, &file))
            .transpose()
    }

    fn check_new_name(&self, name: &str) -> Result<()> {
        let problem = if name.is_empty() || name.len() > MAX_NAME {
            Some(format!("a member name is 1 to {MAX_NAME} bytes"))
        } else if self.doc.member(name).is_some() {
            Some("the group has a member of that name".into())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(Error::BadMember {
                dir: self.dir.clone(),
                name: name.to_owned(),
                problem,
            }),
            None => Ok(()),
        }
    }

    fn named(&self, states: LanesState) -> GroupState {
        let mut members: Vec<(String, State)> = Vec::with_capacity(states.lanes.len());
        for m in &self.doc.members {
            if let Some(s) = states.lanes.get(m.lane as usize) {
                members.push((m.name.clone(), s.clone()));
            }
        }
        GroupState {
            name: states.name,
            members,
        }
    }

    fn no_snapshot(&self, name: &str) -> Error {
        Error::NoSuchSnapshot {
            dir: self.dir.clone(),
            name: name.to_owned(),
        }
    }

    fn state_mismatch(&self, state: &GroupState, got: String) -> Error {
        Error::StateMismatch {
            name: state.name.clone(),
            what: "the group",
            field: "members",
            expected: format!("{:?}", self.members()),
            got,
        }
    }
}

impl BufferGroup<Reader> {
    /// Opens every member of the group in `dir` for reading while its writer goes on
    /// (see [`Reader`]); members the writer creates later are opened by
    /// [`BufferGroup::refresh`].
    pub fn open_reader(dir: impl AsRef<Path>) -> Result<BufferGroup<Reader>> {
        let dir = storage::resolve_root(dir.as_ref());
        let io = io::os();
        let doc = read_doc(&io, &dir)?;
        let set = match doc.members.is_empty() {
            true => None,
            false => Some(open_all(&dir, &io, |d, io| Reader::open_with(d, io))?),
        };
        let new_from = tails(set.as_ref());
        Ok(BufferGroup {
            dir,
            io,
            doc,
            set,
            _lock: None,
            new_from,
        })
    }

    /// Looks at `GROUP` again and opens the members created since.
    pub fn refresh(&mut self) -> Result<()> {
        let doc = read_doc(&self.io, &self.dir)?;
        let have = self.set.as_ref().map_or(0, |s| s.lanes.len());
        for (k, d) in member_dirs(&self.dir, &doc).iter().enumerate().skip(have) {
            super::own_lane_dir(&self.io, d)?;
            let r = Reader::open_with(d, self.io.clone())?;
            check_lane_range(&r.rows, k)?;
            // A member new to this reader: everything it holds is new to it.
            self.new_from.push(r.rows.live().start);
            match &mut self.set {
                Some(set) => set.push_lane(r),
                None => self.set = Lanes::of(self.dir.clone(), vec![r]),
            }
        }
        self.doc = doc;
        Ok(())
    }
}

impl<L: Lane> BufferGroup<L> {
    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The member names, in the order they were created.
    pub fn members(&self) -> Vec<&str> {
        self.doc.members.iter().map(|m| m.name.as_str()).collect()
    }

    /// Member `name`.
    pub fn member(&self, name: &str) -> Result<&L> {
        let k = self.position(name)?;
        (self.set.as_ref())
            .and_then(|s| s.lanes.get(k))
            .ok_or_else(|| self.no_member(name, true))
    }

    /// Draws as `request` says (see [`GroupRequest`]): one batch per member drawn from,
    /// with its name, in member order. A `(name, request)` pair draws from one member
    /// (RLlib's `sample(n, policy_id=...)`).
    pub fn sample<'r>(
        &mut self,
        request: impl Into<GroupRequest<'r>>,
    ) -> Result<Vec<(String, Batch)>> {
        let request = request.into();
        let names: Vec<String> = match request.member() {
            Some(name) => vec![name.to_owned()],
            None => self.members().iter().map(|&n| n.to_owned()).collect(),
        };
        let mut batches: Vec<Batch> = names.iter().map(|_| Batch::default()).collect();
        let mut sinks: Vec<&mut dyn Sink> =
            batches.iter_mut().map(|b| b as &mut dyn Sink).collect();
        self.sample_into(request, &mut sinks)?;
        Ok(names.into_iter().zip(batches).collect())
    }

    /// [`BufferGroup::sample`] into one sink per member drawn from, in member order
    /// (one for a draw from one member; a sink may be asked again after a reader's
    /// lost race).
    pub fn sample_into<'r>(
        &mut self,
        request: impl Into<GroupRequest<'r>>,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<()> {
        let request = request.into();
        let members = match request.member() {
            Some(_) => 1,
            None => self.doc.members.len(),
        };
        if sinks.len() != members {
            return Err(Error::InvalidSample(format!(
                "{} sinks for a draw from {members} members",
                sinks.len(),
            )));
        }
        match request.0 {
            GroupDraw::Member(name, request) => self.sample_member(name, &request, sinks),
            GroupDraw::Each(request) => {
                for (k, sink) in sinks.iter_mut().enumerate() {
                    self.lane_mut(k)?.sample_lane_into(&request, *sink)?;
                }
                Ok(())
            }
            GroupDraw::Lockstep(n) => self.sample_lockstep(n, sinks),
            GroupDraw::Mixed {
                name,
                new,
                replayed,
                beta,
            } => self.sample_mixed(name, (new, replayed), beta, sinks),
        }
    }

    /// How many items member `name` got since this handle's last mixed draw from it,
    /// not evicted since: what a mixed draw's `new` can take
    /// ([`GroupRequest::mixed`]).
    ///
    /// ```
    /// use replaystore::{BufferGroup, Column, Config, DType, GroupRequest, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut group = BufferGroup::create(dir.path().join("g"), Some(Config::new(schema, 100)))?;
    /// group.add_batch("p", &[Column::new("x", &(0..10u32).collect::<Vec<_>>())])?;
    /// assert_eq!(group.new_items("p")?, 10);
    /// // Two new (the oldest not returned yet), then two replayed.
    /// let mixed = group.sample(GroupRequest::mixed("p", 2, 2))?;
    /// assert_eq!(&mixed[0].1.get::<u32>("x")?[..2], [0, 1]);
    /// assert_eq!(group.new_items("p")?, 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new_items(&mut self, name: &str) -> Result<u64> {
        let k = self.position(name)?;
        let from = self.new_from.get(k).copied();
        let lane = self.lane_mut(k)?;
        lane.refresh_lane()?;
        let live = lane.rows().live();
        let from = from.unwrap_or(live.end).clamp(live.start, live.end);
        Ok(live.end - from)
    }

    /// Restarts the sampling RNG of every member from `seed` (member `K` from a value
    /// derived from it), so that draws repeat.
    pub fn reseed(&mut self, seed: u64) {
        if let Some(set) = &mut self.set {
            set.reseed(seed);
        }
    }

    /// Each member's name and counters.
    pub fn stats(&mut self) -> Result<Vec<(String, Stats)>> {
        let names: Vec<String> = self.members().iter().map(|&s| s.to_owned()).collect();
        let Some(set) = &mut self.set else {
            return Ok(Vec::new());
        };
        let stats = set.lane_stats()?;
        Ok(names.into_iter().zip(stats).collect())
    }

    /// The lane of member `k` (its position), or `NotABuffer`.
    fn lane_mut(&mut self, k: usize) -> Result<&mut L> {
        let dir = self.dir.clone();
        (self.set.as_mut())
            .and_then(|s| s.lanes.get_mut(k))
            .ok_or(Error::NotABuffer { dir })
    }

    /// `request` from member `name` into the one sink.
    fn sample_member(
        &mut self,
        name: &str,
        request: &Request<'_>,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<()> {
        let k = self.position(name)?;
        let [sink] = sinks else {
            return Err(Error::InvalidSample(
                "a member's draw fills one sink".into(),
            ));
        };
        self.lane_mut(k)?.sample_lane_into(request, *sink)
    }

    /// A mixed draw from member `name` (see [`GroupRequest::mixed`]): up to `new` items
    /// not yet returned, oldest first, then `replayed` drawn, into the one sink.
    fn sample_mixed(
        &mut self,
        name: &str,
        (new, replayed): (usize, usize),
        beta: Option<f64>,
        sinks: &mut [&mut dyn Sink],
    ) -> Result<()> {
        let [sink] = sinks else {
            return Err(Error::InvalidSample("a mixed draw fills one sink".into()));
        };
        let k = self.position(name)?;
        let from = self.new_from.get(k).copied();
        let lane = self.lane_mut(k)?;
        lane.refresh_lane()?;
        let live = lane.rows().live();
        let from = from.unwrap_or(live.end).clamp(live.start, live.end);
        let mut indices: Vec<u64> = (from..live.end).take(new).collect();
        let taken = indices.len() as u64;
        let (mut drawn, mut weights) = (Vec::new(), Vec::new());
        if replayed > 0 && !live.is_empty() {
            let replay: Request = match beta {
                Some(beta) => Request::rows(replayed).prioritized(beta).into(),
                None => replayed.into(),
            };
            lane.pick_rows(&replay, &mut drawn, &mut weights)?;
            indices.extend(drawn);
        }
        match beta {
            None => crate::draw::sample_rows(lane, &Request::at(&indices).into(), *sink)?,
            Some(beta) => {
                let mut all = vec![1.0f32; indices.len() - weights.len()];
                all.extend(weights);
                let schema = lane.rows().schema.clone();
                let mut sink = Weighted {
                    inner: *sink,
                    schema,
                    beta,
                    weights: &all,
                };
                crate::draw::sample_rows(lane, &Request::at(&indices).into(), &mut sink)?;
            }
        }
        lane.tally_lane_draws();
        if let Some(f) = self.new_from.get_mut(k) {
            *f = from + taken;
        }
        Ok(())
    }

    /// `n` joint steps in lockstep (see [`GroupRequest::lockstep`]), one sink per
    /// member in member order.
    fn sample_lockstep(&mut self, n: usize, sinks: &mut [&mut dyn Sink]) -> Result<()> {
        let dir = self.dir.clone();
        let Some(set) = &mut self.set else {
            return Err(Error::Empty);
        };
        for _ in 0..LOCKSTEP_TRIES {
            // Positions back from the newest row: 0 is each member's newest.
            let mut held = u64::MAX;
            for lane in set.lanes.iter_mut() {
                lane.refresh_lane()?;
                let live = lane.rows().live();
                held = held.min(live.end - live.start);
            }
            if held == 0 {
                return Err(Error::Empty);
            }
            let common = 0..held;
            let rel: Vec<u64> = {
                let first = set
                    .lanes
                    .first_mut()
                    .ok_or(Error::NotABuffer { dir: dir.clone() })?;
                let rng = &mut first.rows_mut().draws.rng;
                (0..n).map(|_| rng.random_range(common.clone())).collect()
            };
            let mut lost = false;
            for (lane, sink) in set.lanes.iter_mut().zip(sinks.iter_mut()) {
                let newest = lane.rows().live().end - 1;
                let indices: Vec<u64> = rel.iter().map(|back| newest - back).collect();
                match crate::draw::sample_rows(lane, &Request::at(&indices).into(), *sink) {
                    Ok(()) => {}
                    // A reader's member whose writer passed a position meanwhile.
                    Err(Error::Evicted { .. }) => {
                        lost = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !lost {
                return Ok(());
            }
        }
        Err(Error::InvalidSample(format!(
            "{}: the members' writers overwrote the positions drawn {LOCKSTEP_TRIES} times in a row",
            dir.display()
        )))
    }

    /// The position (lane) of member `name`.
    fn position(&self, name: &str) -> Result<usize> {
        (self.doc.member(name))
            .map(|m| m.lane as usize)
            .ok_or_else(|| self.no_member(name, self.doc.template.is_some()))
    }

    fn no_member(&self, name: &str, creatable: bool) -> Error {
        Error::NoSuchMember {
            dir: self.dir.clone(),
            name: name.to_owned(),
            members: self.doc.members.iter().map(|m| m.name.clone()).collect(),
            creatable,
        }
    }
}

/// The `GROUP` file of `dir`, or `NotABuffer` (a buffer or lane set is not a group).
fn read_doc(io: &IoRef, dir: &Path) -> Result<GroupDoc> {
    match storage::read_group(&**io, dir)? {
        Some(doc) => Ok(doc),
        None => {
            if storage::read_lanes(&**io, dir)?.is_some() || Manifest::load(&**io, dir).is_ok() {
                return Err(Error::InvalidConfig {
                    field: "group",
                    problem: format!(
                        "{} is a buffer (or lane set), not a group: open it as one",
                        dir.display()
                    ),
                });
            }
            Err(Error::NotABuffer {
                dir: dir.to_path_buf(),
            })
        }
    }
}

/// The folders of a group's members, lane by lane (members take the lowest free lane
/// and are never removed, so the lanes run 0, 1, ...).
pub(super) fn member_dirs(dir: &Path, doc: &GroupDoc) -> Vec<PathBuf> {
    let mut lanes: Vec<u32> = doc.members.iter().map(|m| m.lane).collect();
    lanes.sort_unstable();
    lanes
        .into_iter()
        .map(|l| storage::lane_dir(dir, l))
        .collect()
}

/// Removes the member folders `GROUP` does not list: creations a kill cut short before
/// the file named them (nothing was ever added to them through the group).
fn remove_unlisted_members(io: &IoRef, dir: &Path, doc: &GroupDoc) -> Result<()> {
    let entries = io.list_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for (name, _) in entries {
        let Some(lane) = name.to_str().and_then(|n| n.strip_prefix("lane-")) else {
            continue;
        };
        let Ok(lane) = lane.parse::<u32>() else {
            continue;
        };
        if doc.members.iter().all(|m| m.lane != lane) {
            snapshot::remove_buffer(&**io, &storage::lane_dir(dir, lane))?;
        }
    }
    Ok(())
}

/// Each member's tail now: where what a mixed draw returns as new starts.
fn tails<L: Lane>(set: Option<&Lanes<L>>) -> Vec<u64> {
    set.map_or_else(Vec::new, |s| {
        s.lanes.iter().map(|l| l.rows().live().end).collect()
    })
}

/// A sink for a read at given indices that also takes `weights`: it asks its inner sink
/// for the arrays of a prioritized draw of as many rows (the read's arrays, then
/// `weights`), fills `weights` there and hands the read the rest.
struct Weighted<'s, 'w> {
    inner: &'s mut dyn Sink,
    schema: crate::schema::Schema,
    beta: f64,
    weights: &'w [f32],
}

impl Sink for Weighted<'_, '_> {
    fn arrays(&mut self, layout: &crate::sink::Layout<'_>) -> Result<Vec<&mut [u8]>> {
        let n = self.weights.len();
        let weighted = Request::rows(n).prioritized(self.beta).into();
        let with = crate::sink::Layout::of(&self.schema, &weighted, n, n)?;
        let mut arrays = self.inner.arrays(&with)?;
        let last = arrays.pop();
        let wanted = layout.arrays().len();
        match last {
            Some(w) if arrays.len() == wanted && w.len() == n * 4 => {
                w.copy_from_slice(bytemuck::cast_slice(self.weights));
                Ok(arrays)
            }
            _ => Err(Error::InvalidSample(format!(
                "a weighted read of {n} rows got {} arrays for {wanted} and weights",
                arrays.len() + usize::from(last.is_some()),
            ))),
        }
    }

    fn values(
        &mut self,
        field: &crate::schema::VarField,
        lengths: &[u64],
    ) -> Result<crate::sink::ValuesOut<'_>> {
        self.inner.values(field, lengths)
    }

    fn all_values(
        &mut self,
        fields: &[&crate::schema::VarField],
        lengths: &[Vec<u64>],
    ) -> Result<Option<Vec<crate::sink::ValuesOut<'_>>>> {
        self.inner.all_values(fields, lengths)
    }
}
