//! Making a handle: create, open as the writer, an actor or a snapshot, open at a
//! checkpoint. `store/open.rs` opens the files and recovers after an unclean shutdown.

use crate::error::Result;
use crate::format::state::State;
use crate::parts::config::Config;
use crate::storage::io::{self, IoRef};
use std::path::Path;

use super::ReplayBuffer;
use super::role::{Actor, Frozen, Writer};
use crate::store::Store;

impl ReplayBuffer<Writer> {
    /// Creates a buffer in `dir` (which must be absent or empty). Its files are sparse:
    /// each segment's disk is reserved before its first row is stored, so a full disk is
    /// a `DiskFull` error at that add (nothing stored, nothing lost), never a crash.
    pub fn create(dir: impl AsRef<Path>, config: Config) -> Result<ReplayBuffer> {
        Store::create(dir, config).map(ReplayBuffer::of)
    }
    /// Opens an existing buffer for writing. After an unclean shutdown (a killed writer,
    /// a power loss) it recovers every item that is complete and intact first.
    pub fn open(dir: impl AsRef<Path>) -> Result<ReplayBuffer> {
        ReplayBuffer::open_with(dir, io::os())
    }
    /// `open` through a given file-operation seam.
    pub fn open_with(dir: impl AsRef<Path>, io: IoRef) -> Result<ReplayBuffer> {
        Store::open_with(dir, io).map(ReplayBuffer::of)
    }
    /// Opens an existing buffer for adding while another process owns its priorities:
    /// the actor of an Ape-X style setup, whose learner samples by priority and updates
    /// them through [`crate::PriorityOwner`]. The actor never maps or writes the tree;
    /// the owner gives each new item the largest priority seen before its next draw.
    /// Drawing by priority here is a `NotPriorityOwner` error, and the handle has no
    /// method that sets priorities. Everything else is as [`ReplayBuffer::open`],
    /// including the one-writer lock.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, Error, PriorityOwner, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).prioritized(0.6, 1e-6);
    /// ReplayBuffer::create(dir.path().join("b"), config)?.close()?;
    /// let mut actor = ReplayBuffer::open_actor(dir.path().join("b"))?;
    /// let mut learner = PriorityOwner::open(dir.path().join("b"))?; // another process
    /// actor.add(&[Column::scalar("x", &1.0f32)])?;
    /// let per = Request::rows(4).prioritized(0.4);
    /// let batch = learner.sample(per)?;
    /// learner.update_priorities(batch.indices(), &[2.0f32; 4])?;
    /// assert!(matches!(actor.sample(per), Err(Error::NotPriorityOwner { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_actor(dir: impl AsRef<Path>) -> Result<ReplayBuffer<Actor>> {
        ReplayBuffer::open_actor_with(dir, io::os())
    }
    /// `open_actor` through a given file-operation seam.
    pub fn open_actor_with(dir: impl AsRef<Path>, io: IoRef) -> Result<ReplayBuffer<Actor>> {
        Store::open_actor_with(dir, io).map(ReplayBuffer::of)
    }
    /// Opens snapshot `name` of the buffer in `dir` read-only: sampling and reads work
    /// (from the snapshot's RNG position), and the handle has no method that writes
    /// (see [`Frozen`]). Any number of
    /// processes may do this while the writer goes on; nothing here takes a lock or
    /// writes a byte (the files are mapped private).
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &1u8)])?;
    /// buf.get_state_named("first")?;
    /// buf.add(&[Column::scalar("x", &2u8)])?;
    /// let frozen = ReplayBuffer::open_snapshot(dir.path().join("b"), "first")?;
    /// assert_eq!((frozen.len(), buf.len()), (1, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_snapshot(dir: impl AsRef<Path>, name: &str) -> Result<ReplayBuffer<Frozen>> {
        Store::open_snapshot(dir, name).map(ReplayBuffer::of)
    }
    /// Opens the buffer in `dir` at `state`, as a fresh process resuming from a training
    /// checkpoint does: the same as [`ReplayBuffer::open`] then
    /// [`ReplayBuffer::set_state`], without opening the state it leaves behind.
    ///
    /// ```
    /// # use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::builder().field("x", DType::U8, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::scalar("x", &1u8)])?;
    /// let state = buf.get_state()?;
    /// buf.add(&[Column::scalar("x", &2u8)])?;
    /// buf.close()?; // the process ends; a new one resumes from the checkpoint
    /// let buf = ReplayBuffer::open_at_state(dir.path().join("b"), &state)?;
    /// assert_eq!(buf.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_at_state(dir: impl AsRef<Path>, state: &State) -> Result<ReplayBuffer> {
        ReplayBuffer::open_at_state_with(dir, state, io::os())
    }
    /// `open_at_state` through a given file-operation seam.
    pub fn open_at_state_with(
        dir: impl AsRef<Path>,
        state: &State,
        io: IoRef,
    ) -> Result<ReplayBuffer> {
        Store::open_at_state_with(dir, state, io).map(ReplayBuffer::of)
    }
}
