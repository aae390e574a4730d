//! What makes state durable: flush, commits, clear, checkpoints (get_state / set_state /
//! snapshots) and close.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::manifest::{Commit, FLAG_CLEAN, Superblock};
use crate::format::progress::{EPOCH_OFF, HEAD_OFF, PID_OFF, SEALED_OFF};
use crate::format::state::State;
use crate::parts::hooks::Holder;
use crate::parts::snapshot::{self, SnapshotInfo};
use crate::storage::behind::WriteBehind;
use crate::storage::io::{self, Access};
use crate::storage::map::ProgressMap;
use crate::storage::{self, LANE_DIR, Manifest};

use super::Store;

impl Store {
    /// Makes each part's state for the items below the tail durable, before a commit
    /// covers them.
    fn sync_parts(&mut self) -> Result<()> {
        match self.parts.before_commit(&*self.rows.io, self.rows.tail) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.poison(e)),
        }
    }
    /// Seals (checksums) the live items added since the last flush and msyncs them,
    /// after the chunks of their variable-length values: a commit never covers an item
    /// whose value is not on the disk.
    fn sync_rows(&mut self) -> Result<()> {
        if let Some(h) = &mut self.rows.heap {
            let from = h.sealed();
            h.seal();
            if let Err(e) = h.flush(&*self.rows.io, &self.rows.dir, from, h.sealed()) {
                return Err(self.poison(e));
            }
        }
        let cap = self.rows.superblock.capacity;
        let from = self.rows.flushed_tail.max(self.rows.head);
        let written = self.rows.tail.saturating_sub(from);
        if written > 0 {
            let start = from % cap;
            // Rows the write-behind already sealed keep their checksums.
            let unsealed = self.commits.behind.sealed().clamp(from, self.rows.tail);
            self.rows
                .ring
                .seal(unsealed % cap, unsealed, self.rows.tail - unsealed);
            if let Err((s, e)) = self.rows.ring.flush_slots(&*self.rows.io, start, written) {
                let e = Error::io("msync", storage::segment_path(&self.rows.dir, s as u64), e);
                return Err(self.poison(e));
            }
        }
        self.rows.flushed_tail = self.rows.tail;
        self.commits.behind.flushed(self.rows.tail);
        self.publish(SEALED_OFF, self.rows.flushed_tail);
        Ok(())
    }
    /// The commit record of the state in memory, numbered `generation`.
    fn commit_record(&self, generation: u64, flags: u32) -> Commit {
        Commit {
            generation,
            head: self.rows.head,
            tail: self.rows.tail,
            cleared: self.rows.cleared,
            sampled: self.rows.draws.sampled,
            rng_seed: self.rows.draws.seed,
            rng_word_pos: self.rows.draws.rng.get_word_pos(),
            boot_id: self.commits.boot_id,
            flags,
        }
    }
    pub(crate) fn commit(&mut self, flags: u32, durable: bool) -> Result<()> {
        let Some(manifest) = &self.commits.file else {
            return Err(Error::ReadOnly {
                dir: self.rows.dir.clone(),
                op: "commit",
            });
        };
        if self.commits.lane_dirty {
            // Segment copies were renamed into place: the renames must be durable before
            // a commit covers items stored in the copies.
            let lane = self.rows.dir.join(LANE_DIR);
            if let Err(e) = self.rows.io.sync_dir(&lane) {
                let e = Error::io("fsync", lane, e);
                return Err(self.poison(e));
            }
            self.commits.lane_dirty = false;
        }
        let Some(next) = self.commits.generation.checked_add(1) else {
            // Only a crafted MANIFEST gets here (2^64 commits take no real writer):
            // wrapping would make the older slot win at the next open.
            return Err(Error::Corrupt {
                file: self.commits.path.clone(),
                offset: 0,
                field: "commit generation".into(),
                expected: "below 2^64 - 1".into(),
                got: self.commits.generation.to_string(),
            });
        };
        // Readers' draws since the last commit join this handle's count, which the
        // commit records (a count for people: a crash before the commit drops them).
        if let Some(p) = &mut self.progress {
            // Saturating: the word is not checked (a flipped bit is a wrong count).
            let taken = p.take_reader_draws();
            self.rows.draws.sampled = self.rows.draws.sampled.saturating_add(taken);
        }
        let c = self.commit_record(next, flags);
        match storage::write_commit(&*self.rows.io, manifest, &self.commits.path, &c, durable) {
            Ok(()) => {
                self.commits.generation = c.generation;
                self.parts.on_commit(c.head, c.tail);
                Ok(())
            }
            Err(e) => Err(self.poison(e)),
        }
    }
    /// The state that restores snapshot `name`, read from the snapshot itself: for a run
    /// that lost the dict `get_state` returned (a crash before the checkpoint was saved)
    /// and resumes from the newest snapshot instead.
    pub(crate) fn snapshot_state(&self, name: &str) -> Result<State> {
        snapshot::valid_name(name)?;
        let snap = snapshot::snapshot_dir(&self.rows.dir, name);
        if !snapshot::exists(&*self.rows.io, &self.rows.dir, name)? {
            return Err(Error::NoSuchSnapshot {
                dir: self.rows.dir.clone(),
                name: name.to_owned(),
            });
        }
        Manifest::load(&*self.rows.io, &snap)
            .and_then(|m| {
                Ok(snapshot::state_of(
                    &self.rows.dir,
                    name,
                    &m.superblock,
                    &m.newest_commit()?,
                ))
            })
            .map_err(|e| Error::BadSnapshot {
                dir: self.rows.dir.clone(),
                name: name.to_owned(),
                source: Box::new(e),
            })
    }
    /// This buffer's snapshots, oldest first (see [`crate::snapshots`]).
    pub(crate) fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        snapshot::snapshots(&self.rows.dir)
    }
    /// Flushes and marks the buffer cleanly closed, so the next open needs no recovery.
    pub(crate) fn close(mut self) -> Result<()> {
        if self.commits.lock.is_none() || self.closed {
            // Read-only, or already let go by a set_state that failed part way: its
            // files are the next open's to finish (the restore intent says how), and
            // nothing of this handle is left to commit.
            self.closed = true;
            return Ok(());
        }
        self.shutdown()
    }
    pub(crate) fn shutdown(&mut self) -> Result<()> {
        self.writable()?;
        self.sync_rows()?;
        self.parts.on_close();
        self.sync_parts()?;
        self.commit(FLAG_CLEAN, true)?;
        self.closed = true;
        self.publish(PID_OFF, 0);
        Ok(())
    }
}

impl Store {
    /// Sets the write-behind window: how many bytes of added rows may be on their way to
    /// disk before an add waits for the oldest of them.
    pub(crate) fn set_write_behind(&mut self, window_bytes: u64) {
        let sealed = self.commits.behind.sealed().max(self.rows.flushed_tail);
        self.commits.behind = WriteBehind::new(
            window_bytes,
            self.rows.superblock.capacity,
            self.rows.ring.stride(),
            sealed,
        );
    }

    /// The write-behind window in use, in bytes (0: off).
    pub(crate) fn write_behind(&self) -> u64 {
        self.commits.behind.window()
    }

    /// Makes everything added so far, the counters and the RNG position survive a power
    /// loss: checksums for the items added since the last flush, msync of their rows, then
    /// a durable commit.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.writable()?;
        self.sync_rows()?;
        self.sync_parts()?;
        self.commit(0, true)
    }
    /// Drops every live item; logical indices go on from where they were.
    pub(crate) fn clear(&mut self) -> Result<()> {
        self.writable()?;
        if self.parts.tree.is_shared() {
            self.private_tree()?;
        }
        self.rows.cleared += self.rows.tail - self.rows.head;
        self.rows.head = self.rows.tail;
        self.rows.head_slot = self.rows.tail_slot;
        self.publish(HEAD_OFF, self.rows.head);
        self.parts.on_clear(self.rows.tail);
        self.sync_parts()?;
        self.commit(0, true)
    }
    /// Checkpoints the buffer: makes it durable and freezes the state as a new snapshot
    /// named `gen-<generation>` (see `get_state_named`).
    pub(crate) fn get_state(&mut self) -> Result<State> {
        self.get_state_keeping(self.keep_states)
    }

    /// `get_state` keeping `keep` unnamed checkpoints this time (at least 1:
    /// this one; `None`: all).
    pub(crate) fn get_state_keeping(&mut self, keep: Option<usize>) -> Result<State> {
        self.writable()?;
        if let Some(k) = keep {
            // Room for this one first: a failed delete leaves no new snapshot either.
            self.prune_unnamed_states(k.max(1) - 1)?;
        }
        let name = format!("gen-{:012}", self.commits.generation.wrapping_add(1));
        self.get_state_named(&name)
    }

    /// Unnamed checkpoints `get_state` keeps (`None`: every one).
    pub(crate) fn keep_states(&self) -> Option<usize> {
        self.keep_states
    }

    /// Sets how many unnamed checkpoints `get_state` keeps: the newest `k` (at least 1), or
    /// every one with `None`.
    pub(crate) fn set_keep_states(&mut self, k: Option<usize>) {
        self.keep_states = k.map(|k| k.max(1));
    }

    /// Deletes all but the `k` newest unnamed checkpoints (`gen-<generation>`). Names
    /// only are listed (no manifest loaded, no file sized): this runs in every
    /// `get_state`, and the zero-padded generation orders them.
    fn prune_unnamed_states(&mut self, k: usize) -> Result<Vec<String>> {
        let mut unnamed: Vec<String> = snapshot::names(&*self.rows.io, &self.rows.dir)?
            .into_iter()
            .filter(|n| is_unnamed_state(n))
            .collect();
        unnamed.sort();
        let doomed = unnamed.len().saturating_sub(k);
        let doomed: Vec<String> = unnamed.into_iter().take(doomed).collect();
        for name in &doomed {
            let done = snapshot::delete(&*self.rows.io, &self.rows.dir, name);
            self.rows.refresh_shared();
            done?;
        }
        Ok(doomed)
    }
    /// Checkpoints the buffer as snapshot `name`: makes the items durable and commits, then
    /// links every segment file into `snapshots/<name>/` and copies the manifest and the
    /// priorities (the copy is durable; the live tree is not msynced, so after a power cut
    /// the live buffer's priorities are those of its last `flush`, and the snapshot's are
    /// these).
    pub(crate) fn get_state_named(&mut self, name: &str) -> Result<State> {
        self.writable()?;
        snapshot::valid_name(name)?;
        if snapshot::exists(&*self.rows.io, &self.rows.dir, name)? {
            return Err(Error::SnapshotExists {
                dir: self.rows.dir.clone(),
                name: name.to_owned(),
            });
        }
        // The items must be durable (the snapshot links their files); the parts make
        // durable what the commit before the copy covers (the snapshot gets its own
        // copies of their files, taken from the page cache and synced).
        self.sync_rows()?;
        let (cap, tail) = (self.rows.superblock.capacity, self.rows.tail);
        if let Err(e) = self.parts.before_checkpoint(&*self.rows.io, cap, tail) {
            return Err(self.poison(e));
        }
        self.commit(0, true)?;
        let frozen = self.commit_record(self.commits.generation, FLAG_CLEAN);
        let made = snapshot::create(
            &*self.rows.io,
            &self.rows.dir,
            &self.rows.superblock,
            &frozen,
            name,
            &mut self.parts,
        );
        match made {
            Ok(()) => self.rows.mark_all_shared(),
            // Some links may exist (in the temporary folder, or published but not yet
            // durable): count them so no store changes a linked file.
            Err(_) => self.rows.refresh_shared(),
        }
        made?;
        Ok(snapshot::state_of(
            &self.rows.dir,
            name,
            &self.rows.superblock,
            &frozen,
        ))
    }
    /// Returns the buffer to `state`: the same items, priorities, counters and RNG position
    /// as when `get_state` made it.
    pub(crate) fn set_state(&mut self, state: &State, holder: Holder) -> Result<()> {
        let state = self.check_state(state)?;
        self.restore_state(&state, true, holder)
    }

    /// What `set_state` does before anything live changes: a handle that writes; the
    /// snapshot brought into this folder when it is another buffer's of the same
    /// schema and geometry (a fresh buffer resuming from a checkpoint of another); and
    /// that snapshot whole and frozen exactly at `state`. Returns the state to restore
    /// (of the snapshot in this folder).
    pub(crate) fn check_state(&self, state: &State) -> Result<State> {
        self.writable()?;
        let (io, dir, sb) = (&*self.rows.io, &self.rows.dir, &self.rows.superblock);
        let state = snapshot::bring_home(io, dir, sb, state)?;
        snapshot::check(io, dir, sb, &state)?;
        Ok(state)
    }

    /// `set_state` after its checks: the intent (unless the caller wrote it: a lane
    /// set writes every lane's before it restores any), then the restore and a reopen.
    pub(crate) fn restore_state(
        &mut self,
        state: &State,
        write_intent: bool,
        holder: Holder,
    ) -> Result<()> {
        // An actor replaces a tree another process may have mapped: only while no
        // PriorityOwner runs (it would go on writing the replaced file).
        let _owner = (self.parts.tree.is_actor() && self.rows.superblock.prioritized)
            .then(|| storage::lock_priorities(&*self.rows.io, &self.rows.dir))
            .transpose()?;
        self.publish_files_changing();
        let intent = match write_intent {
            true => snapshot::write_intent(&*self.rows.io, &self.rows.dir, state),
            false => Ok(()),
        };
        let restored = intent.and_then(|()| {
            snapshot::restore(
                &*self.rows.io,
                &self.rows.dir,
                &self.rows.superblock,
                &state.name,
            )
        });
        let replaced = match restored {
            Ok(files) => files,
            Err(e) => {
                self.closed = true;
                self.poisoned = Some(format!(
                    "set_state({:?}) failed part way ({e}); reopen the buffer to finish it",
                    state.name
                ));
                return Err(e);
            }
        };
        // The live files are (or may be) replaced: this handle's mappings are of the old
        // ones. Close it without a commit and open the restored files.
        self.closed = true;
        let lock = self.commits.lock.take();
        // The new handle takes the priority lock again (flock is per open file).
        self.parts.tree.release_lock();
        let (dir, io) = (self.rows.dir.clone(), self.rows.io.clone());
        match Store::open_as(dir, io, holder, lock, true) {
            Ok(fresh) => {
                let old = std::mem::replace(self, fresh);
                self.set_write_behind(old.commits.behind.asked());
                self.keep_states = old.keep_states;
                release_in_background((old, replaced));
                Ok(())
            }
            Err(e) => {
                self.poisoned = Some(format!("reopening after set_state failed: {e}"));
                Err(e)
            }
        }
    }
    /// Lets go of the handle as `kill -9` would: no flush, no commit, nothing written; the
    /// page cache keeps what the calls so far stored, and the next open recovers from it
    /// exactly as after a killed process.
    pub(crate) fn abandon(mut self) {
        self.closed = true;
    }
    /// Deletes snapshot `name`.
    pub(crate) fn delete_snapshot(&mut self, name: &str) -> Result<()> {
        self.writable()?;
        snapshot::valid_name(name)?;
        let done = snapshot::delete(&*self.rows.io, &self.rows.dir, name);
        self.rows.refresh_shared();
        done
    }
    /// Deletes all but the `k` newest snapshots (by the generation they froze; damaged ones
    /// count as oldest).
    pub(crate) fn keep_last(&mut self, k: usize) -> Result<Vec<String>> {
        self.writable()?;
        let list = self.snapshots()?;
        let doomed: Vec<String> = list
            .iter()
            .take(list.len().saturating_sub(k))
            .map(|s| s.name.clone())
            .collect();
        for name in &doomed {
            let done = snapshot::delete(&*self.rows.io, &self.rows.dir, name);
            if done.is_err() {
                self.rows.refresh_shared();
            }
            done?;
        }
        self.rows.refresh_shared();
        Ok(doomed)
    }
}

/// Marks the progress page's epoch odd before a writer without a handle yet (an open
/// that restores) replaces files one by one; its open makes the epoch even again.
pub(crate) fn files_changing(io: &dyn io::Io, dir: &Path, sb: &Superblock) -> Result<()> {
    mark_changing(&mut storage::open_progress(io, dir, sb, Access::Write)?);
    Ok(())
}

/// Makes the epoch odd (files being replaced), if it is not already.
pub(crate) fn mark_changing(p: &mut ProgressMap) {
    let epoch = p.load(EPOCH_OFF);
    if epoch.is_multiple_of(2) {
        p.store(EPOCH_OFF, epoch.wrapping_add(1));
    }
}

/// Drops `files` on another thread (in place if no thread can be started). Letting go of
/// the last handle of a segment file that lost its name makes the kernel free its page
/// cache and extents, milliseconds per segment and growing with the data: reclamation,
/// not part of restoring, so it stays off the caller's path.
pub(crate) fn release_in_background<T: Send + 'static>(files: T) {
    let _ = std::thread::Builder::new()
        .name("replaystore-release".into())
        .spawn(move || drop(files));
}

/// Whether `name` is one `get_state` gave (`gen-` and 12 digits).
fn is_unnamed_state(name: &str) -> bool {
    name.strip_prefix("gen-")
        .is_some_and(|d| d.len() == 12 && d.bytes().all(|b| b.is_ascii_digit()))
}
