//! One engine handle used by several Python threads (a collector thread adding while a
//! learner thread samples, in one process): each call takes the handle's lock, so calls
//! run one at a time and none sees another half done.
//!
//! The lock is only ever waited for with the GIL released. A call holding it releases
//! the GIL around its file work (`py.detach`) and takes the GIL back before it returns;
//! a thread that waited for the lock while holding the GIL would keep that call from
//! ever finishing. So the first try is made with the GIL held (free in the common,
//! uncontended case) and any wait happens inside `detach`.

use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::prelude::*;

/// A value behind a lock that Python threads take in turn.
pub(crate) struct Shared<T>(Mutex<T>);

impl<T: Send> Shared<T> {
    pub(crate) fn new(value: T) -> Shared<T> {
        Shared(Mutex::new(value))
    }

    /// The value, once no other thread's call is using it.
    pub(crate) fn lock(&self, py: Python<'_>) -> MutexGuard<'_, T> {
        loop {
            match self.0.try_lock() {
                Ok(held) => return held,
                // A call that panicked left the engine's own guards (a poisoned or
                // closed handle) to say what is usable; the lock itself carries nothing.
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                // Wait without the GIL, then try again with it.
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.0.lock())),
            }
        }
    }

    /// The value if no call is using it now (for `repr`, which must not wait).
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(held) => Some(held),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}
