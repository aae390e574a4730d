//! The mapped progress page (FORMAT.md, "Progress page"): the words the writer stores
//! and readers in other processes load, one relaxed or release/acquire word at a time.
#![expect(unsafe_code, reason = "mapped memory is reached through raw pointers")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;

use crate::error::{Error, Result};

/// The mapped progress page (`lane-0/progress`, see `format::progress`): the live
/// words the writer stores and readers in other processes load, all atomics.
#[derive(Debug)]
pub(crate) struct ProgressMap {
    map: MmapRaw,
    path: PathBuf,
    stores: Stores,
}

/// Which words a mapping of the progress page may store into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stores {
    /// Every word: the writer's.
    All,
    /// Only the reader draws it adds to: a reader that may write the file.
    ReaderDraws,
    /// None: a reader on a file it may not write (its draws are then its own count).
    Nothing,
}

impl ProgressMap {
    /// Wraps a mapping of at least one progress page, writable unless `stores` is
    /// `Nothing`.
    pub(crate) fn new(map: MmapRaw, path: &Path, stores: Stores) -> Result<ProgressMap> {
        use crate::format::progress::FILE_LEN;
        if map.len() < FILE_LEN {
            return Err(Error::Truncated {
                file: path.to_path_buf(),
                expected: FILE_LEN as u64,
                got: map.len() as u64,
            });
        }
        Ok(ProgressMap {
            map,
            path: path.to_path_buf(),
            stores,
        })
    }

    /// The file this maps.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A copy of the static header.
    pub(crate) fn header(&self) -> Vec<u8> {
        use crate::format::progress::HEADER_LEN;
        let mut out = vec![0u8; HEADER_LEN];
        // SAFETY: `new` checked the mapping holds a whole page; `out` is a fresh
        // allocation. The header is written once, before any reader maps the file.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr(), out.as_mut_ptr(), HEADER_LEN) };
        out
    }

    #[inline(always)]
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= crate::format::progress::FILE_LEN);
        let off = off.min(crate::format::progress::FILE_LEN - 8) & !7;
        // SAFETY: `off + 8` is inside the page `new` checked is mapped, and 8-aligned
        // (the mapping is page-aligned); every process reaches these words only through
        // atomics.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast::<u64>()) }
    }

    /// The word at `off` (acquire: what the writer stored before it is visible).
    #[inline(always)]
    pub(crate) fn load(&self, off: usize) -> u64 {
        self.word(off).load(Ordering::Acquire)
    }

    /// Stores the word at `off` (release: everything stored before it, a row's stamp
    /// included, is visible to a reader that loads this value).
    #[inline(always)]
    pub(crate) fn store(&mut self, off: usize, value: u64) {
        if self.stores == Stores::All {
            self.word(off).store(value, Ordering::Release);
        } else {
            debug_assert!(false, "store into a read-only progress page");
        }
    }

    /// Adds a reader's `n` draws to the page's reader draws, unless this mapping may
    /// not (the file is not the reader's to write: the draws stay in its own count).
    /// Relaxed: a count for people, ordered with nothing.
    pub(crate) fn add_reader_draws(&self, n: u64) {
        if self.stores != Stores::Nothing {
            let off = crate::format::progress::READER_DRAWS_OFF;
            self.word(off).fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Takes the reader draws the page holds (the word goes to 0 in the same step, so
    /// a reader's add lands either here or in the next take): the writer's.
    pub(crate) fn take_reader_draws(&mut self) -> u64 {
        if self.stores != Stores::All {
            debug_assert!(false, "take from a reader's progress page");
            return 0;
        }
        let off = crate::format::progress::READER_DRAWS_OFF;
        self.word(off).swap(0, Ordering::Relaxed)
    }
}
