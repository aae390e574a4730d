//! The mapped priority tree: written in place by its one owner (`TreeMap`), loaded word
//! by word with atomic loads by readers in other processes (`SharedWords`).
#![expect(unsafe_code, reason = "mapped memory is reached through raw pointers")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;

use super::prefetch;
use crate::error::{Error, Result};
use crate::format::tree::BODY_OFFSET as TREE_BODY_OFFSET;
use crate::storage::io::Io;

/// The mapped priorities file: a header page, then the tree's `f64` words.
///
/// Only the writer maps it writable, and the buffer's LOCK makes that writer the only
/// one, so within its process the words may be borrowed as a slice. Readers elsewhere
/// load them one at a time ([`TreeMap::shared_words`]) or copy them out.
#[derive(Debug)]
pub(crate) struct TreeMap {
    map: MmapRaw,
    path: PathBuf,
    words: usize,
    writable: bool,
    /// The file has other names (a restore linked a snapshot's copy): it is mapped
    /// read-only, and the owner gives it a name of its own before its first store
    /// (`storage::private_tree`), so no store ever reaches the snapshot.
    shared: bool,
}

impl TreeMap {
    /// Wraps a mapping, checking that it holds the header page and `words` words.
    pub(crate) fn new(map: MmapRaw, path: &Path, words: usize, writable: bool) -> Result<TreeMap> {
        let need = words
            .checked_mul(8)
            .and_then(|b| b.checked_add(TREE_BODY_OFFSET));
        match need {
            Some(need) if map.len() >= need => Ok(TreeMap {
                map,
                path: path.to_path_buf(),
                words,
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

    /// Marks the mapping as one of a file other names share, mapped read-only: every
    /// store panics until [`TreeMap::replace_mapping`] gives it a file of its own.
    pub(crate) fn set_shared(&mut self) {
        self.shared = true;
    }

    /// Bytes mapped.
    pub(crate) fn mapped_len(&self) -> usize {
        self.map.len()
    }

    /// Whether the file has other names and must be copied before a store.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared
    }

    /// Maps the file of its own that now holds the same bytes (writable).
    pub(crate) fn replace_mapping(&mut self, map: MmapRaw) -> Result<()> {
        let fresh = TreeMap::new(map, &self.path, self.words, self.writable)?;
        *self = fresh;
        Ok(())
    }

    /// Maps every page now (`MADV_POPULATE_READ`), in one call instead of one fault
    /// per page at first touch: the tree is read all over by its first draws anyway,
    /// and a few thousand separate faults of a just-copied 10 MB tree cost milliseconds
    /// under a hypervisor. A hint: failure (an older kernel) changes nothing.
    pub(crate) fn populate(&self) {
        let _ = self.map.advise(memmap2::Advice::PopulateRead);
    }

    /// A copy of the first `len` bytes (at most the header page).
    pub(crate) fn header(&self, len: usize) -> Vec<u8> {
        let len = len.min(TREE_BODY_OFFSET).min(self.map.len());
        let mut out = vec![0u8; len];
        // SAFETY: `len` is clamped to the mapping's length; `out` is a fresh allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr(), out.as_mut_ptr(), len) };
        out
    }

    /// Writes `bytes` into the header page at `offset` (the writer's counters).
    pub(crate) fn write_header(&mut self, offset: usize, bytes: &[u8]) {
        assert!(self.writable, "write to a read-only tree mapping");
        assert!(!self.shared, "write to a tree a snapshot links");
        let end = offset.saturating_add(bytes.len());
        if end > TREE_BODY_OFFSET {
            debug_assert!(false, "header write past the header page");
            return;
        }
        // SAFETY: offset..end lies in the header page, which `new` checked is mapped, and
        // the mapping is writable; `bytes` is a separate allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(offset),
                bytes.len(),
            )
        };
    }

    /// The tree's words, for the writer.
    pub(crate) fn words_mut(&mut self) -> &mut [f64] {
        assert!(self.writable, "write to a read-only tree mapping");
        assert!(!self.shared, "write to a tree a snapshot links");
        // The mapping holds `words` f64s after the header page (checked by `new`), 8-aligned
        // (page-aligned map, 4096-byte offset); any bit pattern is a valid f64.
        // SAFETY: as above; `&mut self` makes this the only borrow in this process, and
        // the writer lock keeps other processes from writing the file.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.map.as_mut_ptr().add(TREE_BODY_OFFSET).cast::<f64>(),
                self.words,
            )
        }
    }

    /// The tree's words, for the writer (who alone changes them).
    pub(crate) fn words(&self) -> &[f64] {
        assert!(self.writable, "a reader must copy the words out");
        // SAFETY: as in `words_mut`; only the writer, whose changes need `&mut self`,
        // modifies them, so they do not change while this borrow lives.
        unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(TREE_BODY_OFFSET).cast::<f64>(),
                self.words,
            )
        }
    }

    /// A copy of the tree's words, for readers (a writer elsewhere may be changing them;
    /// a concurrent change can make the copy inconsistent, never unsafe to use).
    pub(crate) fn copy_words(&self) -> Vec<f64> {
        let mut out = vec![0.0f64; self.words];
        // SAFETY: `new` checked the range is mapped; `out` is a fresh allocation of the
        // same number of f64s; any bit pattern is a valid f64.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(TREE_BODY_OFFSET).cast::<f64>(),
                out.as_mut_ptr(),
                self.words,
            )
        };
        out
    }

    /// msync of the whole file.
    pub(crate) fn flush(&self, io: &dyn Io) -> std::io::Result<()> {
        io.flush_map(&self.map, 0, self.map.len())
    }

    /// msync of the header page (the counters, `caught_up` among them).
    pub(crate) fn flush_header(&self, io: &dyn Io) -> std::io::Result<()> {
        io.flush_map(&self.map, 0, TREE_BODY_OFFSET.min(self.map.len()))
    }

    /// msync of the pages holding body words `from..from + words`.
    pub(crate) fn flush_words(
        &self,
        io: &dyn Io,
        from: usize,
        words: usize,
    ) -> std::io::Result<()> {
        let start = TREE_BODY_OFFSET + from * 8;
        let len = (words * 8).min(self.map.len().saturating_sub(start));
        if len == 0 {
            return Ok(());
        }
        io.flush_map(&self.map, start, len)
    }

    /// The tree's words as a reader in another process sees them: loaded one at a
    /// time, atomically, while the writer may be storing into them.
    pub(crate) fn shared_words(&self) -> SharedWords<'_> {
        SharedWords {
            // SAFETY: `new` checked the mapping holds the header page and `words`
            // words after it; page-aligned plus 4096 is 8-aligned.
            first: unsafe { self.map.as_ptr().add(TREE_BODY_OFFSET).cast::<AtomicU64>() },
            len: self.words,
            _map: std::marker::PhantomData,
        }
    }
}

/// The words of a mapped tree that another process may be changing, each read with a
/// relaxed atomic load (a plain load on x86-64 and aarch64): a descent over them may
/// meet a parent not yet fixed, never a torn word.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SharedWords<'a> {
    first: *const AtomicU64,
    len: usize,
    _map: std::marker::PhantomData<&'a TreeMap>,
}

impl crate::algo::sumtree::Words for SharedWords<'_> {
    #[inline(always)]
    fn with_node<const K: usize, R>(&self, at: usize, f: impl FnOnce(&[f64; K]) -> R) -> Option<R> {
        if at.checked_add(K)? > self.len {
            return None;
        }
        let node: [f64; K] = std::array::from_fn(|i| {
            // SAFETY: at + K <= len keeps the word inside the mapped body (`shared_words`),
            // which lives as long as `'a`; every process stores these words whole (aligned
            // 8-byte stores), so an atomic load sees one value or another, never a mix.
            let word = unsafe { &*self.first.add(at + i) };
            f64::from_bits(word.load(Ordering::Relaxed))
        });
        Some(f(&node))
    }

    #[inline(always)]
    fn prefetch(&self, at: usize) {
        prefetch(self.first.wrapping_add(at).cast());
    }
}
