//! [`ReplayBuffer`]: the writer's handle on a buffer directory, a `Store` (`src/store/`)
//! under a role. The methods a role may call are here, by what they do (`open`, `add`,
//! `draw`, `commit`, `life`); each is the store's.

mod add;
mod commit;
mod draw;
mod life;
mod open;
mod role;

pub use role::{Actor, Frozen, HoldsTree, Role, Writer, Writes};

use std::marker::PhantomData;
use std::ops::Range;
use std::path::Path;

use crate::algo::recovery::Recovered;
use crate::parts::config::Stats;
use crate::schema::Schema;
use crate::store::Store;

/// A replay buffer handle: the one writer of its directory (`ReplayBuffer`, which is
/// `ReplayBuffer<Writer>`), an actor adding beside a priority owner
/// (`ReplayBuffer<Actor>`, from [`ReplayBuffer::open_actor`]), or a frozen snapshot
/// (`ReplayBuffer<Frozen>`, from [`ReplayBuffer::open_snapshot`]). The role `R` says
/// what the handle may do: a method it may not call is not there.
///
/// ```
/// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder()
///     .field("obs", DType::F32, &[3])
///     .field("reward", DType::F32, &[])
///     .build()?;
/// let mut buf = ReplayBuffer::create(dir.path().join("buf"), Config::new(schema, 100).seed(1))?;
/// for t in 0..10 {
///     let obs = [t as f32; 3];
///     let reward = 1.0f32;
///     buf.add(&[Column::new("obs", &obs), Column::scalar("reward", &reward)])?;
/// }
/// let batch = buf.sample(4)?;
/// assert_eq!(batch.get::<f32>("obs")?.len(), 12);
/// buf.close()?;
/// let buf = ReplayBuffer::open(dir.path().join("buf"))?;
/// assert_eq!(buf.len(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ReplayBuffer<R: Role = Writer> {
    /// The buffer's files and state; every method is the store's.
    pub(crate) store: Store,
    role: PhantomData<R>,
}

impl<R: Role> ReplayBuffer<R> {
    /// The handle over a store opened as `R` holds files.
    pub(crate) fn of(store: Store) -> ReplayBuffer<R> {
        ReplayBuffer {
            store,
            role: PhantomData,
        }
    }

    /// Gathers as for a ring larger than memory, whatever its size (tests).
    #[cfg(test)]
    pub(crate) fn force_page_in(&mut self) {
        self.store.force_page_in();
    }

    /// The buffer directory.
    pub fn dir(&self) -> &Path {
        self.store.dir()
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        self.store.schema()
    }

    /// Items live now (with item states: not counting removed ones).
    pub fn len(&self) -> u64 {
        self.store.len()
    }

    /// Whether no item is live.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Items the ring holds.
    pub fn capacity(&self) -> u64 {
        self.store.capacity()
    }

    /// The most bytes of variable-length values one `add` or `add_batch` call can hold:
    /// the chunk ring's payload (0 for a schema without such fields). More is refused
    /// with `ValueTooLong`; a binding checks a value against it before copying it.
    ///
    /// ```
    /// use replaystore::{Config, ReplayBuffer, Schema, VarKind};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().variable("t", VarKind::Str, None).build()?;
    /// // 4 chunk rows of 1 KiB (a 16-byte header and 1,008 bytes of payload each).
    /// let buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).heap_bytes(4 * 1024))?;
    /// assert_eq!(buf.value_room(), 4 * 1008);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn value_room(&self) -> u64 {
        self.store.value_room()
    }

    /// The live logical indices, `head..tail`.
    pub fn live(&self) -> Range<u64> {
        self.store.live()
    }

    /// What opening found after an unclean shutdown, if it was one.
    pub fn recovery(&self) -> Option<Recovered> {
        self.store.recovery()
    }

    /// Counters and sizes. `sampled` counts this handle's draws and those of readers
    /// that may write the progress page, in any process (theirs since the last commit
    /// included).
    pub fn stats(&self) -> Stats {
        self.store.stats()
    }

    /// Whether this handle is a read-only snapshot.
    pub fn is_read_only(&self) -> bool {
        self.store.is_read_only()
    }
}
