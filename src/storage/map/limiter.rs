//! The rate limiter's words in the header page of `items.state` (see
//! `format::lifecycle`): the count of items drawn by every handle, and a 32-bit futex
//! word bumped after every add and draw, on which a handle held back by the limiter
//! sleeps until another process moves the counts. Mapped shared and writable by every
//! handle of a rate-limited buffer, readers included: these words are the only bytes a
//! reader of such a buffer writes.
#![expect(unsafe_code, reason = "mapped memory is reached through raw pointers")]

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use memmap2::MmapRaw;

use crate::error::{Error, Result};
use crate::format::lifecycle::{BODY_OFFSET, SAMPLES_OFF, WAITING_OFF, WAKE_OFF};

/// The header page of `items.state`, mapped shared and writable.
#[derive(Debug)]
pub(crate) struct LimiterMap {
    map: MmapRaw,
}

// SAFETY: the words are reached only through atomics (and the futex calls, which the
// kernel serializes), so a handle may move between threads.
unsafe impl Send for LimiterMap {}
// SAFETY: as above.
unsafe impl Sync for LimiterMap {}

impl LimiterMap {
    /// Wraps a mapping of the header page.
    pub(crate) fn new(map: MmapRaw, path: &Path) -> Result<LimiterMap> {
        if map.len() < BODY_OFFSET {
            return Err(Error::Truncated {
                file: path.to_path_buf(),
                expected: BODY_OFFSET as u64,
                got: map.len() as u64,
            });
        }
        Ok(LimiterMap { map })
    }

    fn word64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is one of the header's 8-aligned word offsets, inside the page
        // `new` checked is mapped (page-aligned, so the word is aligned); every process
        // reaches it only through atomics, and the borrow lives no longer than `self`.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast::<u64>()) }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `word64`, for the 4-aligned 32-bit words at 200 and 204.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(off).cast::<u32>()) }
    }

    /// Items drawn since create, by every handle.
    pub(crate) fn samples(&self) -> u64 {
        self.word64(SAMPLES_OFF).load(Ordering::Acquire)
    }

    /// Counts a draw of `n` if `admit(samples now)` allows it, atomically against other
    /// processes drawing; returns whether it was counted.
    pub(crate) fn take_samples(&self, n: u64, admit: impl Fn(u64) -> bool) -> bool {
        let word = self.word64(SAMPLES_OFF);
        let mut now = word.load(Ordering::Acquire);
        loop {
            if !admit(now) {
                return false;
            }
            match word.compare_exchange(now, now + n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// The wake word's value now (read before checking the counts, so a change after
    /// the check makes the wait return at once).
    pub(crate) fn wake_seq(&self) -> u32 {
        self.word32(WAKE_OFF).load(Ordering::Acquire)
    }

    /// Tells waiting handles (in any process) that the counts moved.
    pub(crate) fn wake_all(&self) {
        self.word32(WAKE_OFF).fetch_add(1, Ordering::AcqRel);
        if self.word32(WAITING_OFF).load(Ordering::Acquire) == 0 {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            let addr = self.word32(WAKE_OFF).as_ptr();
            // SAFETY: FUTEX_WAKE on a 4-aligned u32 of a shared mapping that lives as
            // long as `self`; the kernel only reads the address to find the waiters
            // (shared, not PRIVATE: they are in other processes), it never writes it.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    addr,
                    libc::FUTEX_WAKE,
                    i32::MAX,
                    0usize,
                    0usize,
                    0u32,
                );
            }
        }
    }

    /// Sleeps until the wake word is no longer `seq`, or `timeout` passes (whichever
    /// first; a spurious wake returns early too: the caller checks again).
    pub(crate) fn wait(&self, seq: u32, timeout: Duration) {
        let waiting = self.word32(WAITING_OFF);
        waiting.fetch_add(1, Ordering::AcqRel);
        #[cfg(target_os = "linux")]
        {
            let ts = libc::timespec {
                tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
            };
            let addr = self.word32(WAKE_OFF).as_ptr();
            // The kernel compares the word with `seq` and sleeps only if they are equal,
            // so a wake between the caller's check and this call is never lost.
            // SAFETY: FUTEX_WAIT on a 4-aligned u32 of a shared mapping that lives as
            // long as `self`, with a relative timeout in a timespec on this stack.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    addr,
                    libc::FUTEX_WAIT,
                    seq,
                    &raw const ts,
                    0usize,
                    0u32,
                );
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = seq;
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
        waiting.fetch_sub(1, Ordering::AcqRel);
    }
}
