//! What makes state durable, as a handle may ask it: flush, clear, checkpoints
//! (get_state / set_state / snapshots), close. The commits themselves are
//! `store/commit.rs`.

use crate::error::Result;
use crate::format::state::State;
use crate::parts::snapshot::SnapshotInfo;

use super::ReplayBuffer;
use super::role::{Role, Writes};

impl<R: Role> ReplayBuffer<R> {
    /// The state that restores snapshot `name`, read from the snapshot itself: for a
    /// run that lost the dict `get_state` returned (a crash before the checkpoint was
    /// saved) and resumes from the newest snapshot instead.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &3u8)])?;
    /// let state = buf.get_state_named("ckpt")?;
    /// assert_eq!(buf.snapshot_state("ckpt")?, state);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot_state(&self, name: &str) -> Result<State> {
        self.store.snapshot_state(name)
    }
    /// This buffer's snapshots, oldest first (see [`crate::snapshots`]).
    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.store.snapshots()
    }
    /// Flushes and marks the buffer cleanly closed, so the next open needs no recovery.
    /// (A read-only snapshot has nothing to flush.)
    pub fn close(self) -> Result<()> {
        self.store.close()
    }
}

impl<R: Writes> ReplayBuffer<R> {
    /// Sets the write-behind window: how many bytes of added rows may be on their way to
    /// disk before an add waits for the oldest of them. The writer seals rows and starts
    /// their writeback in chunks a little behind the tail, so a `flush` or `get_state`
    /// finds at most about this much (plus up to two chunks of at most 16 MiB each) still
    /// to write: the first checkpoint after filling a 2.8 GB ring took 1.1–1.2 s without
    /// it and 9–18 ms with it. A writer adding faster than the disk writes is paced at
    /// the disk's rate (and a new ring fills slower than it would into the page cache
    /// alone; the closing note of issue 28 has the figures). 0 turns it off: the kernel
    /// writes rows back when it sees fit, and the next flush writes the rest. Default
    /// 64 MiB; a ring no larger than the window and a chunk does not need it, and
    /// [`ReplayBuffer::write_behind`] then reports 0.
    ///
    /// ```
    /// use replaystore::{Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("frame", DType::U8, &[84, 84]).build()?;
    /// // 20,000 frames of 7 KiB: 135 MiB, more than the default window.
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 20_000))?;
    /// assert_eq!(buf.write_behind(), 64 << 20);
    /// buf.set_write_behind(0);
    /// assert_eq!(buf.write_behind(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_write_behind(&mut self, window_bytes: u64) {
        self.store.set_write_behind(window_bytes)
    }
    /// The write-behind window in use, in bytes (0: off). See
    /// [`ReplayBuffer::set_write_behind`].
    pub fn write_behind(&self) -> u64 {
        self.store.write_behind()
    }
    /// Makes everything added so far, the counters and the RNG position survive a power
    /// loss: checksums for the items added since the last flush, msync of their rows,
    /// then a durable commit.
    pub fn flush(&mut self) -> Result<()> {
        self.store.flush()
    }
    /// Drops every live item; logical indices go on from where they were. Durable.
    pub fn clear(&mut self) -> Result<()> {
        self.store.clear()
    }
    /// Checkpoints the buffer: makes it durable and freezes the state as a new snapshot named
    /// `gen-<generation>` (see [`ReplayBuffer::get_state_named`]). Unnamed checkpoints
    /// are kept up to [`ReplayBuffer::keep_states`] (3 unless set): the oldest beyond
    /// that are deleted first, so that the copies-on-write they hold do not pile up.
    /// Named ones stay until deleted.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.get_state_named("best")?;
    /// for x in 0..5u8 {
    ///     buf.add(&[Column::scalar("x", &x)])?;
    ///     buf.get_state()?;
    /// }
    /// assert_eq!(buf.snapshots()?.len(), 1 + 3);
    /// assert_eq!(buf.snapshots()?[0].name, "best");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_state(&mut self) -> Result<State> {
        self.store.get_state()
    }
    /// [`ReplayBuffer::get_state`] keeping `keep` unnamed checkpoints this time (at
    /// least 1: this one; `None`: all).
    pub fn get_state_keeping(&mut self, keep: Option<usize>) -> Result<State> {
        self.store.get_state_keeping(keep)
    }
    /// Unnamed checkpoints `get_state` keeps (`None`: every one).
    pub fn keep_states(&self) -> Option<usize> {
        self.store.keep_states()
    }
    /// Sets how many unnamed checkpoints `get_state` keeps: the newest `k` (at least 1),
    /// or every one with `None`. For this handle; each open starts at 3.
    pub fn set_keep_states(&mut self, k: Option<usize>) {
        self.store.set_keep_states(k)
    }
    /// Checkpoints the buffer as snapshot `name`: makes the items durable and commits,
    /// then links every segment file into `snapshots/<name>/` and copies the manifest
    /// and the priorities (the copy is durable; the live tree is not msynced, so after
    /// a power cut the live buffer's priorities are those of its last
    /// [`ReplayBuffer::flush`], and the snapshot's are these). No item is
    /// copied, so the cost does not grow with the data: the writer copies a segment
    /// only when it is about to store into one a snapshot still links (copy-on-write).
    /// The returned [`State`] is small; put it in the training checkpoint and hand it to
    /// [`ReplayBuffer::set_state`] to come back here. A kill at any point leaves the
    /// snapshot either whole or absent. Snapshots stay until deleted
    /// ([`ReplayBuffer::delete_snapshot`], [`ReplayBuffer::keep_last`]).
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10).seed(1))?;
    /// buf.add(&[Column::scalar("x", &1u8)])?;
    /// let state = buf.get_state_named("step-1")?;
    /// let before = buf.sample(4)?;
    /// buf.add(&[Column::scalar("x", &2u8)])?;
    /// buf.set_state(&state)?;
    /// assert_eq!(buf.len(), 1);
    /// assert_eq!(buf.sample(4)?.indices(), before.indices()); // same RNG position
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_state_named(&mut self, name: &str) -> Result<State> {
        self.store.get_state_named(name)
    }
    /// Returns the buffer to `state`: the same items, priorities, counters and RNG
    /// position as when [`ReplayBuffer::get_state`] made it. Everything added since is
    /// dropped. The snapshot stays, so the same state can be restored again. Costs
    /// a hard link per segment and copies of the manifest and priorities.
    ///
    /// The snapshot is checked first (files present, headers sound, the commit it froze
    /// equal to `state`): a problem is an error naming it and nothing changes. Then an
    /// intent file is written, and a kill after that point is finished by the next open.
    pub fn set_state(&mut self, state: &State) -> Result<()> {
        self.store.set_state(state, R::HOLDER)
    }
    /// Restores `state`, already checked, reopening the files as this role holds them
    /// (a lane set's restore, which writes every lane's intent first).
    pub(crate) fn restore_state(&mut self, state: &State, write_intent: bool) -> Result<()> {
        self.store.restore_state(state, write_intent, R::HOLDER)
    }
    /// Lets go of the handle as `kill -9` would: no flush, no commit, nothing written;
    /// the page cache keeps what the calls so far stored, and the next open recovers
    /// from it exactly as after a killed process. For crash tests and fuzzers that run
    /// many crashes inside one process.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &3u8)])?;
    /// buf.abandon();
    /// let buf = ReplayBuffer::open(dir.path().join("b"))?;
    /// assert_eq!(buf.live(), 0..1);
    /// assert!(buf.recovery().is_some()); // opened as after a killed writer
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn abandon(self) {
        self.store.abandon()
    }
    /// Deletes snapshot `name`. Its segments stay as long as the live buffer (or another
    /// snapshot) links them; segments nothing else links are freed. A kill leaves it
    /// either listed and whole or gone. A process that has it open keeps reading its
    /// files, but the writer no longer copies the segments it shared with the live
    /// buffer: reads of items the writer then overwrites fail (`BadItem`), never return
    /// the newer bytes.
    pub fn delete_snapshot(&mut self, name: &str) -> Result<()> {
        self.store.delete_snapshot(name)
    }
    /// Deletes all but the `k` newest snapshots (by the generation they froze; damaged
    /// ones count as oldest). Returns the names deleted.
    pub fn keep_last(&mut self, k: usize) -> Result<Vec<String>> {
        self.store.keep_last(k)
    }
}
