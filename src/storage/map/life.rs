//! The mapped item state file (`items.state`, see `format::lifecycle`): one atomic word
//! per slot and the header's atomic counters, changed in place with 8-byte atomics by
//! the writer and loaded by readers in other processes.
#![expect(unsafe_code, reason = "mapped memory is reached through raw pointers")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;

use crate::error::{Error, Result};
use crate::format::lifecycle::BODY_OFFSET;
use crate::storage::io::Io;

/// The mapped state file: a header page, then `slots` words.
#[derive(Debug)]
pub(crate) struct LifeMap {
    map: MmapRaw,
    path: PathBuf,
    slots: usize,
    writable: bool,
    /// The file has other names (a restore linked a snapshot's copy): mapped read-only
    /// until its holder gives it a file of its own (`storage::private_life`).
    shared: bool,
}

// SAFETY: the mapping is plain shared memory owned by this value; every word is reached
// through atomics, so sharing the handle between threads shares nothing else.
unsafe impl Send for LifeMap {}
// SAFETY: as above.
unsafe impl Sync for LifeMap {}

impl LifeMap {
    /// Wraps a mapping, checking that it holds the header page and `slots` words.
    pub(crate) fn new(map: MmapRaw, path: &Path, slots: usize, writable: bool) -> Result<LifeMap> {
        let need = slots
            .checked_mul(8)
            .and_then(|b| b.checked_add(BODY_OFFSET));
        match need {
            Some(need) if map.len() >= need => Ok(LifeMap {
                map,
                path: path.to_path_buf(),
                slots,
                writable,
                shared: false,
            }),
            _ => Err(Error::Truncated {
                file: path.to_path_buf(),
                expected: need.map_or(u64::MAX, |n| n as u64),
                got: map.len() as u64,
            }),
        }
    }

    /// The file this maps.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes mapped.
    pub(crate) fn mapped_len(&self) -> usize {
        self.map.len()
    }

    /// Marks the mapping as one of a file other names share, mapped read-only: every
    /// store is refused until [`LifeMap::replace_mapping`] gives it a file of its own.
    pub(crate) fn set_shared(&mut self) {
        self.shared = true;
    }

    /// Whether the file has other names and must be copied before a store.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared
    }

    /// Whether stores into the words are allowed.
    pub(crate) fn can_store(&self) -> bool {
        self.writable && !self.shared
    }

    /// Maps the file of its own that now holds the same bytes (writable).
    pub(crate) fn replace_mapping(&mut self, map: MmapRaw) -> Result<()> {
        *self = LifeMap::new(map, &self.path, self.slots, true)?;
        Ok(())
    }

    #[inline(always)]
    fn at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= BODY_OFFSET + self.slots * 8);
        let off = off.min(BODY_OFFSET + self.slots.saturating_sub(1) * 8) & !7;
        // SAFETY: `off + 8` lies inside the header page or the words `new` checked are
        // mapped, 8-aligned (the mapping is page-aligned); every process reaches these
        // words only through atomics, and the borrow lives no longer than the mapping.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast::<u64>()) }
    }

    /// The word of slot `slot` (acquire: a removal stored before it is seen).
    #[inline(always)]
    pub(crate) fn load(&self, slot: u64) -> u64 {
        self.at(BODY_OFFSET + slot as usize * 8)
            .load(Ordering::Acquire)
    }

    /// Asks the CPU for the cache line of `slot`'s word: a batch's words are fetched
    /// together, so their misses overlap instead of queueing one after another.
    #[inline(always)]
    pub(crate) fn prefetch(&self, slot: u64) {
        let off = BODY_OFFSET + (slot as usize).min(self.slots.saturating_sub(1)) * 8;
        super::prefetch(self.map.as_ptr().wrapping_add(off));
    }

    /// Replaces the word of `slot` by `new` if it still holds `old`; the word found
    /// otherwise. Across processes: the mapping is shared and the exchange atomic.
    #[inline(always)]
    pub(crate) fn exchange(&self, slot: u64, old: u64, new: u64) -> std::result::Result<u64, u64> {
        if !self.can_store() {
            debug_assert!(false, "store into a read-only item state mapping");
            return Err(old ^ 1);
        }
        self.at(BODY_OFFSET + slot as usize * 8).compare_exchange(
            old,
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
    }

    /// Stores the word of `slot` (recovery's repairs, a restore's settling).
    pub(crate) fn store(&self, slot: u64, value: u64) {
        if self.can_store() {
            self.at(BODY_OFFSET + slot as usize * 8)
                .store(value, Ordering::Release);
        } else {
            debug_assert!(false, "store into a read-only item state mapping");
        }
    }

    /// The header's atomic word at `off`.
    pub(crate) fn counter(&self, off: usize) -> u64 {
        self.at(off).load(Ordering::Acquire)
    }

    /// Adds `delta` (two's complement: a wrapping add subtracts) to the header's word
    /// at `off`.
    pub(crate) fn add_counter(&self, off: usize, delta: u64) {
        if self.can_store() {
            self.at(off).fetch_add(delta, Ordering::AcqRel);
        }
    }

    /// Sets the header's word at `off`.
    pub(crate) fn set_counter(&self, off: usize, value: u64) {
        if self.can_store() {
            self.at(off).store(value, Ordering::Release);
        }
    }

    /// msync of the whole file.
    pub(crate) fn flush(&self, io: &dyn Io) -> std::io::Result<()> {
        io.flush_map(&self.map, 0, self.map.len())
    }
}
