//! Checkpoints of a lane set as one (issue 31): a snapshot of every lane under one
//! name, and a restore of every lane to it, each O(1) in the data as one lane's is.
//!
//! No file of its own: the set's state is in the lanes'.
//! - A snapshot is the set's when every lane holds it whole. Lanes take it in lane
//!   order and drop it in reverse, so a kill leaves a prefix of the lanes holding a
//!   name the set never listed; the writer's open of the set removes it.
//! - A restore writes every lane's intent (lane order) before it restores any lane, so
//!   the last lane's intent says the set committed to it. An open of the set, or of
//!   one of its lanes, that finds intents but none in the last lane removes them (no
//!   lane was restored yet: the lanes stay as they were); otherwise each lane's own
//!   open finishes its intent (every lane comes to the new state).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::Lanes;
use crate::error::{Error, Result};
use crate::format::state::State;
use crate::handle::ReplayBuffer;
use crate::parts::snapshot;
use crate::storage::{self, io::Io};

/// Every lane's state as [`Lanes::get_state_named`] froze it, under one name: put it in
/// the training checkpoint and hand it to [`Lanes::set_state`].
#[derive(Clone, Debug, PartialEq)]
pub struct LanesState {
    /// The snapshot's name, in every lane.
    pub name: String,
    /// Lane `k`'s state.
    pub lanes: Vec<State>,
}

impl Lanes<ReplayBuffer> {
    /// Checkpoints every lane as snapshot `gen-<n>`, `n` one past the largest commit
    /// generation of the lanes (see [`Lanes::get_state_named`]).
    pub fn get_state(&mut self) -> Result<LanesState> {
        let n = (self.lanes.iter())
            .map(|l| l.stats().generation)
            .max()
            .unwrap_or(0);
        self.get_state_named(&format!("gen-{:012}", n.wrapping_add(1)))
    }

    /// Checkpoints every lane as snapshot `name` ([`ReplayBuffer::get_state_named`], lane
    /// after lane): O(1) in the data. The set lists the name once every lane holds it; a
    /// failure removes it from the lanes that took it, and a kill leaves it in some
    /// lanes only, where the next open of the set for writing removes it.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Lanes, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
    /// let mut lanes = Lanes::create(dir.path().join("v"), Config::new(schema, 8), 2)?;
    /// lanes.add_batch(&[Column::new("x", &[1u32, 2])], &[0, 1])?;
    /// let state = lanes.get_state_named("step-1")?;
    /// lanes.add_batch(&[Column::new("x", &[3u32, 4])], &[0, 1])?;
    /// lanes.set_state(&state)?;
    /// assert_eq!(lanes.len(), 2);
    /// assert_eq!(lanes.snapshots()?, ["step-1"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_state_named(&mut self, name: &str) -> Result<LanesState> {
        snapshot::valid_name(name)?;
        let mut states = Vec::with_capacity(self.lanes.len());
        for k in 0..self.lanes.len() {
            let taken = match self.lanes.get_mut(k) {
                Some(lane) => lane.get_state_named(name),
                None => break,
            };
            match taken {
                Ok(s) => states.push(s),
                Err(e) => {
                    // Taken by the lanes before this one only: the set never had it.
                    for lane in self.lanes.iter_mut().take(k).rev() {
                        let _ = lane.delete_snapshot(name);
                    }
                    return Err(e);
                }
            }
            crate::killpoint::hit("lanes-snapshot-between");
        }
        Ok(LanesState {
            name: name.to_owned(),
            lanes: states,
        })
    }

    /// The state of the set's snapshot `name`, as `get_state_named` returned it: for a
    /// checkpoint that kept only the name.
    pub fn snapshot_state(&self, name: &str) -> Result<LanesState> {
        if !self.snapshots()?.iter().any(|n| n == name) {
            return Err(Error::NoSuchSnapshot {
                dir: self.dir.clone(),
                name: name.to_owned(),
            });
        }
        let lanes = (self.lanes.iter())
            .map(|l| l.snapshot_state(name))
            .collect::<Result<Vec<_>>>()?;
        Ok(LanesState {
            name: name.to_owned(),
            lanes,
        })
    }

    /// The names of the set's snapshots (held whole by every lane), oldest first (by
    /// lane 0's generations).
    pub fn snapshots(&self) -> Result<Vec<String>> {
        let mut held: BTreeMap<String, usize> = BTreeMap::new();
        let mut order = Vec::new();
        for (k, lane) in self.lanes.iter().enumerate() {
            for info in lane.snapshots()? {
                if info.commit.is_none() {
                    continue;
                }
                if k == 0 {
                    order.push(info.name.clone());
                }
                *held.entry(info.name).or_default() += 1;
            }
        }
        let all = self.lanes.len();
        Ok(order
            .into_iter()
            .filter(|n| held.get(n) == Some(&all))
            .collect())
    }

    /// Deletes the set's snapshot `name` from every lane, the last lane first (a kill
    /// leaves it in a prefix of the lanes: no longer the set's).
    pub fn delete_snapshot(&mut self, name: &str) -> Result<()> {
        if !self.snapshots()?.iter().any(|n| n == name) {
            return Err(Error::NoSuchSnapshot {
                dir: self.dir.clone(),
                name: name.to_owned(),
            });
        }
        for lane in self.lanes.iter_mut().rev() {
            lane.delete_snapshot(name)?;
            crate::killpoint::hit("lanes-delete-between");
        }
        Ok(())
    }

    /// Deletes all but the `k` newest of the set's snapshots; returns the names deleted.
    pub fn keep_last(&mut self, k: usize) -> Result<Vec<String>> {
        let list = self.snapshots()?;
        all_but_last(list, k, |name| self.delete_snapshot(name))
    }

    /// Returns every lane to `state` ([`ReplayBuffer::set_state`] for each): all lanes
    /// or none. Every lane's snapshot is checked first (a problem changes nothing);
    /// then every lane's intent is written, lane after lane, before any lane is
    /// restored: a kill before the last lane's intent leaves every lane as it was (the
    /// next open removes the others), a kill after it leaves every lane to be restored
    /// by its next open.
    pub fn set_state(&mut self, state: &LanesState) -> Result<()> {
        if state.lanes.len() != self.lanes.len() {
            return Err(Error::StateMismatch {
                name: state.name.clone(),
                what: "the lane set",
                field: "lanes",
                expected: self.lanes.len().to_string(),
                got: state.lanes.len().to_string(),
            });
        }
        let mut here = Vec::with_capacity(self.lanes.len());
        for (lane, s) in self.lanes.iter().zip(&state.lanes) {
            here.push(lane.store.check_state(s)?);
        }
        for (lane, s) in self.lanes.iter().zip(&here) {
            snapshot::write_intent(&*lane.store.rows.io, &lane.store.rows.dir, s)?;
            crate::killpoint::hit("lanes-intent-between");
        }
        for (lane, s) in self.lanes.iter_mut().zip(&here) {
            lane.restore_state(s, false)?;
            crate::killpoint::hit("lanes-restore-between");
        }
        Ok(())
    }

    /// After the lanes opened for writing: a snapshot name some lanes hold and others
    /// do not is what a kill in `get_state_named` or `delete_snapshot` left, never the
    /// set's: it is removed from the lanes that hold it.
    pub(super) fn drop_partial_snapshots(&mut self) -> Result<()> {
        let mut held: BTreeMap<String, usize> = BTreeMap::new();
        for lane in &self.lanes {
            for info in lane.snapshots()? {
                *held.entry(info.name).or_default() += 1;
            }
        }
        let all = self.lanes.len();
        for (name, _) in held.iter().filter(|(_, c)| **c < all) {
            for lane in &mut self.lanes {
                match lane.delete_snapshot(name) {
                    Ok(()) | Err(Error::NoSuchSnapshot { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// Before any lane of the set in `dirs` opens: restore intents that a kill left in
/// some lanes but not the last (the set's restore never committed, and no lane was
/// restored yet) are removed, so every lane stays at its state. With the last lane's
/// intent present, each lane's open finishes its own. Only while holding every lane's
/// writer lock: a set restoring now holds them all, and its intents are not a kill's
/// (nor is there anything to settle when another process holds a lane: its open
/// settled first).
pub(super) fn settle_restores(io: &dyn Io, dirs: &[PathBuf]) -> Result<()> {
    let Some(last) = dirs.last() else {
        return Ok(());
    };
    if dirs.len() < 2 || snapshot::pending_restore(io, last)?.is_some() {
        return Ok(());
    }
    let mut held = Vec::with_capacity(dirs.len());
    for dir in dirs {
        match storage::lock(io, dir) {
            Ok(lock) => held.push(lock),
            Err(Error::Locked { .. }) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    // Under the locks, the last lane's intent decides (a restore may have committed
    // between the first look and the locks).
    if snapshot::pending_restore(io, last)?.is_some() {
        return Ok(());
    }
    for dir in dirs {
        if snapshot::pending_restore(io, dir)?.is_some() {
            snapshot::drop_intent(io, dir)?;
        }
    }
    drop(held);
    Ok(())
}

/// Deletes (with `delete`) every name of `list`, oldest first, but the `k` newest;
/// returns the names deleted: `keep_last` of a lane set and of a group.
pub(super) fn all_but_last(
    list: Vec<String>,
    k: usize,
    mut delete: impl FnMut(&str) -> Result<()>,
) -> Result<Vec<String>> {
    let doomed: Vec<String> = list
        .iter()
        .take(list.len().saturating_sub(k))
        .cloned()
        .collect();
    for name in &doomed {
        delete(name)?;
    }
    Ok(doomed)
}
