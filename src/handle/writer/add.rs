//! The adds a writer or an actor may make: items, batches, with priorities, episode
//! steps. What an add does (copy-on-write, eviction, the stamp protocol, the progress
//! page) is `store/add.rs`.

use crate::column::Column;
use crate::error::Result;
use crate::parts::episodes::StepInfo;
use crate::parts::priorities::Priority;
use std::ops::Range;

use super::ReplayBuffer;
use super::role::{Writer, Writes};

impl ReplayBuffer<Writer> {
    /// Adds one item with a given priority instead of the largest seen so far (Ape-X
    /// actors compute initial priorities). A bad priority is an error and nothing is
    /// added.
    pub fn add_with_priority<P: Priority>(
        &mut self,
        columns: &[Column<'_>],
        priority: P,
    ) -> Result<u64> {
        self.store.add_with_priority(columns, priority)
    }
    /// `add_batch` with one priority per row. The priorities and the columns are checked
    /// before anything is added; a batch longer than the capacity keeps its newest rows
    /// and their priorities.
    pub fn add_batch_with_priorities<P: Priority>(
        &mut self,
        columns: &[Column<'_>],
        priorities: &[P],
    ) -> Result<Range<u64>> {
        self.store.add_batch_with_priorities(columns, priorities)
    }
}

impl<R: Writes> ReplayBuffer<R> {
    /// Adds one item and returns its logical index. Every field of the schema must be
    /// given once, with its dtype and shape (or as one flat dimension of the same size).
    /// Once this returns, a kill of the process loses nothing: the bytes are in the
    /// page cache. `flush` makes them survive a power loss too. With
    /// [`crate::Config::downsample`], random live items are then removed past its size.
    pub fn add(&mut self, columns: &[Column<'_>]) -> Result<u64> {
        self.store.add(columns)
    }
    /// Adds `rows` items given as columns of shape `[rows, field shape...]`, and returns
    /// their logical indices. A batch longer than the capacity keeps its newest rows.
    /// With [`crate::Config::downsample`], random live items are then removed past its
    /// size (the new ones among them).
    pub fn add_batch(&mut self, columns: &[Column<'_>]) -> Result<Range<u64>> {
        self.store.add_batch(columns)
    }
    /// Begins an episode with what `env.reset()` returned: the observation fields (any
    /// field left out is stored as zeros). An episode still open is abandoned and
    /// counts as truncated at its last row.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .field("obs", DType::F32, &[2])
    ///     .field("action", DType::I64, &[])
    ///     .field("reward", DType::F32, &[])
    ///     .build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// buf.add_reset(&[Column::new("obs", &[0.0f32, 0.0])])?;
    /// for t in 1..=3 {
    ///     let (obs, action, reward) = ([t as f32, 0.0], 1i64, 1.0f32);
    ///     let cols = [Column::new("obs", &obs), Column::scalar("action", &action),
    ///                 Column::scalar("reward", &reward)];
    ///     let info = buf.add_step(&cols, t == 3, false)?;
    ///     if let Some((ret, steps, start)) = info.ended {
    ///         assert_eq!((ret, steps, start), (3.0, 3, 0));
    ///     }
    /// }
    /// assert_eq!(buf.prev(2)?, 1);
    /// assert_eq!(buf.prev(0)?, 0); // stays put at the episode's start
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_reset(&mut self, columns: &[Column<'_>]) -> Result<StepInfo> {
        self.store.add_reset(columns)
    }
    /// Adds a whole episode in one call (how RLlib's new stack and UnstableBaselines
    /// add data): `observations` hold the observation fields with `T + 1` rows (what
    /// `env.reset()` returned, then what each step led to), `steps` every other field
    /// with `T` rows (each step's action, reward, ...). The episode ends terminated or
    /// truncated as said, or stays open (the next call's reset cuts it). Returns its
    /// record. Every column's rows are checked first; a row a later check refuses (a
    /// text value that is not UTF-8, say) leaves the rows before it added, the
    /// episode open.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .field("obs", DType::F32, &[])
    ///     .field("action", DType::I64, &[])
    ///     .field("reward", DType::F32, &[])
    ///     .build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// let (obs, actions, rewards) = ([0.0f32, 1.0, 2.0, 3.0], [1i64, 0, 1], [0.5f32, 0.5, 1.0]);
    /// let e = buf.add_episode(
    ///     &[Column::new("obs", &obs)],
    ///     &[Column::new("action", &actions), Column::new("reward", &rewards)],
    ///     true,
    ///     false,
    /// )?;
    /// assert_eq!((e.rows, e.ret), (4, 2.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_episode(
        &mut self,
        observations: &[Column<'_>],
        steps: &[Column<'_>],
        terminated: bool,
        truncated: bool,
    ) -> Result<crate::EpisodeInfo> {
        self.store
            .add_episode(observations, steps, terminated, truncated)
    }
    /// Adds what `env.step()` returned to the open episode: every field of the schema
    /// (the action taken, its reward, the observation it led to), and whether the episode
    /// terminated or was truncated here. Reports the episode's return, steps and start
    /// index when this step ends it (Tianshou's `add` result).
    pub fn add_step(
        &mut self,
        columns: &[Column<'_>],
        terminated: bool,
        truncated: bool,
    ) -> Result<StepInfo> {
        self.store.add_step(columns, terminated, truncated)
    }
}
