//! Eviction records (FORMAT.md, "Eviction records"): the writer's promise that recovery
//! after a power cut never serves an item whose slot may already hold a newer item.
//!
//! After a power cut, recovery may serve the items between the newest commit's head and
//! tail. Adds that overwrite one of them would leave its old row on disk beside the new
//! item's priority leaf (or some of its new bytes). So before the first such overwrite a
//! record naming the new head is made durable in the MANIFEST, and recovery starts at it.
//! One record covers the next `capacity / 32` to `capacity / 4` evictions (more when
//! records come fast; at least the batch's), so a lap of the ring past a commit costs at
//! most 32 fdatasyncs; a power cut may then lose up to that many of the oldest committed
//! items, which acknowledged adds were about to evict.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::format::manifest::Eviction;
use crate::storage::{self, io::Io};

use super::hooks::Part;

/// Records closer together than this make the next one cover twice as many evictions:
/// at most ~2% of a fast writer's time.
const EVICT_SPACING: Duration = Duration::from_millis(20);

/// What the writer knows about its eviction records since the newest commit.
#[derive(Debug)]
pub(crate) struct Evictions {
    /// Items below this index may be overwritten without another record: the newest
    /// commit's head, or the last record written since it.
    mark: u64,
    /// The newest commit's tail: items from it on are in no commit, so overwriting
    /// them needs no record.
    committed_tail: u64,
    /// Records written since the newest commit (their slot pages alternate).
    writes: u64,
    /// Evictions the next record covers past the head, and when the last was written.
    chunk: u64,
    at: Option<Instant>,
}

/// Where a record goes: the MANIFEST, and the commit generation it follows.
pub(crate) struct RecordTo<'a> {
    pub io: &'a dyn Io,
    pub manifest: &'a File,
    pub path: &'a Path,
    pub generation: u64,
}

impl Evictions {
    /// The state right after a commit covering `head..tail`.
    pub fn after_commit(head: u64, tail: u64) -> Evictions {
        Evictions {
            mark: head,
            committed_tail: tail,
            writes: 0,
            chunk: 0,
            at: None,
        }
    }

    /// A commit covering `head..tail` was written: records start over.
    pub fn on_commit(&mut self, head: u64, tail: u64) {
        self.mark = head;
        self.committed_tail = tail;
        self.writes = 0;
    }

    /// Whether moving the head to `to` overwrites items the newest commit covers that
    /// no record names yet.
    #[inline(always)]
    pub fn needed(&self, to: u64) -> bool {
        to > self.mark && self.mark < self.committed_tail
    }

    /// Makes a record durable that lets the head move to `to` (and, ahead of later adds,
    /// up to `chunk` past `head`, never past the commit's tail). A failure is returned
    /// for the caller to poison the handle with.
    #[cold]
    pub fn record(&mut self, to: u64, head: u64, capacity: u64, at: RecordTo<'_>) -> Result<()> {
        self.record_at(Instant::now(), to, head, capacity, at)
    }

    fn record_at(
        &mut self,
        now: Instant,
        to: u64,
        head: u64,
        capacity: u64,
        at: RecordTo<'_>,
    ) -> Result<()> {
        // Records cost an fdatasync each (~0.1-0.4 ms). A writer adding fast enough to
        // need one within EVICT_SPACING of the last covers twice as many evictions with
        // the next, up to a quarter of the ring; a slow one, 1/32 of it.
        let quick = self
            .at
            .is_some_and(|t| now.duration_since(t) < EVICT_SPACING);
        self.chunk = match quick {
            true => (self.chunk * 2).min(capacity.div_ceil(4)),
            false => capacity.div_ceil(32),
        };
        self.at = Some(now);
        let head = to.max(head + self.chunk).min(self.committed_tail);
        let e = Eviction {
            generation: at.generation,
            head,
        };
        // Alternate pages: a record torn by a power cut leaves the one before it whole.
        let slot = (at.generation.wrapping_add(1).wrapping_add(self.writes) % 2) as usize;
        storage::write_eviction(at.io, at.manifest, at.path, slot, &e)?;
        self.mark = head;
        self.writes += 1;
        Ok(())
    }
}

impl Part for Evictions {
    fn on_commit(&mut self, head: u64, tail: u64) {
        Evictions::on_commit(self, head, tail);
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        reason = "tests fail loudly"
    )]
    use super::*;
    use crate::format::manifest::{COMMIT_SLOT_OFFSET, EVICT_OFFSET};

    /// Only overwrites of committed items no record names yet need a record.
    #[test]
    fn a_record_is_needed_only_past_the_mark_and_inside_the_commit() {
        let e = Evictions::after_commit(100, 200);
        assert!(!e.needed(100), "the commit's head itself is free");
        assert!(e.needed(101));
        let empty = Evictions::after_commit(200, 200);
        assert!(!empty.needed(500), "nothing committed is overwritten");
    }

    /// A record covers a chunk of the ring past the head, doubling when records come
    /// fast, and its slot page alternates; a commit starts over.
    #[test]
    fn records_cover_growing_chunks_on_alternate_pages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("MANIFEST");
        std::fs::write(&path, vec![0u8; 3 * 4096]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let io = storage::io::OsIo;
        let to = || RecordTo {
            io: &io,
            manifest: &file,
            path: &path,
            generation: 7,
        };
        let t0 = Instant::now();
        let soon = t0 + EVICT_SPACING / 2;
        let later = soon + EVICT_SPACING * 2;
        let mut e = Evictions::after_commit(0, 1 << 20);
        e.record_at(t0, 1, 0, 3200, to()).unwrap();
        assert_eq!(e.mark, 100, "a slow writer's record covers capacity / 32");
        assert!(!e.needed(100) && e.needed(101));
        e.record_at(soon, 101, 100, 3200, to()).unwrap();
        assert_eq!(e.mark, 300, "a quick second record covers twice as many");
        assert_eq!(e.writes, 2);
        // The two records sit on the two commit pages: a torn one leaves the other.
        let bytes = std::fs::read(&path).unwrap();
        let page = |k: usize| {
            let off = COMMIT_SLOT_OFFSET[k] + EVICT_OFFSET;
            Eviction::decode(&bytes[off..]).unwrap().map(|r| r.head)
        };
        assert_eq!((page(0), page(1)), (Some(100), Some(300)));
        e.record_at(later, 301, 300, 3200, to()).unwrap();
        assert_eq!(e.mark, 400, "a slow one covers capacity / 32 again");
        e.record_at(later, 5000, 400, 3200, to()).unwrap();
        assert_eq!(e.mark, 5000, "at least the batch's own evictions");
        e.on_commit(5000, 5100);
        assert_eq!(e.writes, 0);
        e.record_at(later, 5050, 5000, 3200, to()).unwrap();
        assert_eq!(e.mark, 5100, "never past the commit's tail");
        assert!(!e.needed(10_000));
    }
}
