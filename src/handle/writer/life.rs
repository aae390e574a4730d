//! The calls on item states a writer or an actor may make: removing items (explicitly,
//! stale ones), reading an item's state, the rate limiter's wait. `store/life.rs` does
//! them.

use crate::error::Result;
use crate::parts::lifecycle::ItemState;
use std::time::Duration;

use super::ReplayBuffer;
use super::role::{Role, Writes};

impl<R: Writes> ReplayBuffer<R> {
    /// Removes the live items at `indices` before the ring overwrites them (DI-engine's
    /// `delete`): no draw or read returns them again, and `len` stops counting them.
    /// Returns how many were removed now; an index removed before is skipped. Every
    /// index must be live (else `Evicted`, and nothing is removed). With priorities,
    /// their leaves are zeroed in the same call. Survives a kill at once, a power loss
    /// after the next `flush`.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 8).prioritized(0.6, 1e-6).item_states();
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// buf.add_batch(&[Column::new("x", &[1.0f32, 2.0, 3.0])])?;
    /// assert_eq!(buf.remove(&[0, 2, 2])?, 2);
    /// assert_eq!(buf.remove(&[0])?, 0); // removed already
    /// let batch = buf.sample(replaystore::Request::rows(16).prioritized(0.4))?;
    /// assert!(batch.indices().iter().all(|&i| i == 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove(&mut self, indices: &[u64]) -> Result<u64> {
        self.store.remove(indices)
    }
    /// Removes the live items whose tag is older than `max_staleness` behind `now`
    /// (DI-engine's `staleness_check`: staleness = `now - tag`, removed when above
    /// `max_staleness`), where the tag is the item's value of the integer scalar field
    /// `field` (the learner iteration or policy version that produced it). Returns how
    /// many were removed. The first call indexes the live items by tag (one pass over
    /// their rows); later calls cost what they remove, plus the items added since.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("train_iter", DType::I64, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).item_states())?;
    /// buf.add_batch(&[Column::new("train_iter", &[1i64, 2, 3, 4, 5])])?;
    /// assert_eq!(buf.remove_stale("train_iter", 5, 2)?, 2); // tags 1 and 2 are 4 and 3 behind
    /// assert_eq!(buf.len(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove_stale(&mut self, field: &str, now: i64, max_staleness: u64) -> Result<u64> {
        self.store.remove_stale(field, now, max_staleness)
    }
}

impl<R: Role> ReplayBuffer<R> {
    /// What each live item at `indices` is: whether it was removed (and why) and how
    /// many draws returned it (DI-engine's use count). Removed items are live until
    /// the ring passes them, so their state stays readable. `Evicted` for an index not
    /// live; `NoItemStates` for a buffer without item states.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8).item_states())?;
    /// buf.add_batch(&[Column::new("x", &[1.0f32, 2.0])])?;
    /// buf.sample(Request::at(&[0]))?; // a read: not a use
    /// buf.sample(Request::rows(2).without_replacement())?;
    /// let states = buf.item_states(&[0, 1])?;
    /// assert_eq!((states[0].uses, states[1].uses), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn item_states(&self, indices: &[u64]) -> Result<Vec<ItemState>> {
        self.store.item_states(indices)
    }
    /// How long a draw or an add the rate limiter holds back waits for another process
    /// (a reader drawing, the writer adding) before it is `RateLimited`: `None` (the
    /// default) does not wait. Not stored: set it after each open.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use replaystore::{Column, Config, DType, Error, RateLimit, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::F32, &[]).build()?;
    /// let config = Config::new(schema, 100).rate_limit(RateLimit::min_size(1));
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), config)?;
    /// buf.set_rate_limit_wait(Some(Duration::from_millis(20)));
    /// let t = Instant::now();
    /// let e = buf.sample(1).unwrap_err(); // nobody adds meanwhile
    /// assert!(matches!(e, Error::RateLimited { waited: Some(_), .. }));
    /// assert!(t.elapsed() >= Duration::from_millis(20));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_rate_limit_wait(&mut self, wait: Option<Duration>) {
        self.store.set_rate_limit_wait(wait)
    }
    /// How long a call the rate limiter holds back waits (see `set_rate_limit_wait`).
    pub fn rate_limit_wait(&self) -> Option<Duration> {
        self.store.rate_limit_wait()
    }
}
