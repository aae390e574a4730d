//! Write-behind: the writer seals rows and starts their writeback a little behind the
//! tail, so that a flush (and the first checkpoint after a fill) finds at most a
//! window's worth of rows still to write, not the whole ring.
//!
//! Without it, rows stay dirty in the page cache until the kernel's flusher gets to them
//! (30 s, or once a tenth of memory is dirty): the first `get_state` after filling a
//! 2.8 GB W2 ring took 1.1 s, all of it the disk catching up. With it, rows are sealed
//! (their checksums written, as a flush would) in chunks as soon as the tail has passed
//! them, their writeback is started at once (`sync_file_range`, which makes nothing
//! durable by itself: the flush's msync still does), and once more than the window is
//! under way the writer waits for the oldest chunk. A writer faster than the disk is
//! thereby paced at the disk's rate in even steps, instead of stalling in the kernel's
//! dirty throttling.
//!
//! Nothing about the files changes: an item's checksum may be written before the commit
//! that covers it (FORMAT.md allows any time up to that flush), and recovery reads only
//! stamps and committed checksums. Rings no larger than the window never need it (a
//! flush of the whole ring is already within the window), so it stays off for them and
//! their rows are written back once per flush, not once per lap.

use std::collections::VecDeque;

use super::io::Io;
use super::ring::Ring;

/// Default window: bytes of rows under writeback and not yet known written. A flush
/// finds at most the window, the chunk being filled and up to a chunk more still to
/// write: ~96 MiB, ~45 ms at the 1.8–2.4 GB/s this machine's disk takes in large writes
/// (10–16 ms measured after a 2.8 GB fill, most of the window being written by then).
/// Smaller windows cost fill rate (issue 28 closing note: 0.4–0.7 GB/s at 32 MiB with
/// 4 MiB chunks, 1.5–2.1 GB/s at 64 MiB, against 2.6–3.4 GB/s with none).
pub const DEFAULT_WINDOW: u64 = 64 << 20;

/// The most bytes per chunk, and a chunk is at most a quarter of the window. Each
/// writeback call on freshly allocated blocks pays the file system's extent conversion,
/// so chunks of 1–4 MiB filled a new ring at a third of the rate 16–32 MiB chunks did.
const CHUNK_BYTES: u64 = 16 << 20;

/// The writer's write-behind state.
#[derive(Debug)]
pub(crate) struct WriteBehind {
    /// The window asked for (kept across a restore, which opens the files anew).
    asked: u64,
    /// Bytes under writeback allowed before the writer waits (0: off).
    window: u64,
    /// Rows per chunk (`u64::MAX` while off, so `due` never holds).
    chunk: u64,
    /// Bytes per row.
    stride: u64,
    /// Items below this are sealed: by a flush, or here with their writeback started.
    sealed: u64,
    /// Chunks whose writeback was started, oldest first: first slot and rows.
    inflight: VecDeque<(u64, u64)>,
    /// Rows in `inflight`.
    inflight_rows: u64,
}

impl WriteBehind {
    /// Off, for a handle that never writes rows.
    pub(crate) fn off() -> WriteBehind {
        WriteBehind {
            asked: 0,
            window: 0,
            chunk: u64::MAX,
            stride: 1,
            sealed: 0,
            inflight: VecDeque::new(),
            inflight_rows: 0,
        }
    }

    /// A window of `window` bytes over a ring of `capacity` rows of `stride` bytes whose
    /// items below `sealed` are sealed. Off when `window` is 0 or the ring is no larger
    /// than the window and a chunk.
    pub(crate) fn new(window: u64, capacity: u64, stride: u64, sealed: u64) -> WriteBehind {
        let stride = stride.max(1);
        let chunk = (CHUNK_BYTES.min(window / 4) / stride).max(1);
        let on = window > 0 && capacity.saturating_mul(stride) > window + chunk * stride;
        WriteBehind {
            asked: window,
            window: if on { window } else { 0 },
            chunk: if on { chunk } else { u64::MAX },
            stride,
            sealed,
            inflight: VecDeque::new(),
            inflight_rows: 0,
        }
    }

    /// The window asked for, in use or not.
    pub(crate) fn asked(&self) -> u64 {
        self.asked
    }

    /// The window in use, in bytes (0: off).
    pub(crate) fn window(&self) -> u64 {
        self.window
    }

    /// Whether a whole chunk of unsealed rows lies below `tail`: one compare per add.
    #[inline(always)]
    pub(crate) fn due(&self, tail: u64) -> bool {
        tail.saturating_sub(self.sealed) >= self.chunk
    }

    /// Items below this are sealed (a flush seals only from here).
    pub(crate) fn sealed(&self) -> u64 {
        self.sealed
    }

    /// Seals the whole chunks of live rows below `tail`, starts their writeback, and
    /// waits for the oldest chunks while more than the window is under way. Writeback
    /// errors are left to the flush: it msyncs the same rows and reports them there, and
    /// nothing here changes what is stored.
    pub(crate) fn run(&mut self, ring: &mut Ring, io: &dyn Io, head: u64, tail: u64) {
        let from = self.sealed.max(head);
        let rows = tail.saturating_sub(from) / self.chunk * self.chunk;
        self.sealed = from + rows;
        if rows == 0 {
            return;
        }
        let capacity = ring.capacity();
        let slot = from % capacity;
        ring.seal(slot, from, rows);
        let _ = ring.write_behind(io, slot, rows, false);
        crate::killpoint::hit("write-behind-started");
        self.inflight.push_back((slot, rows));
        self.inflight_rows += rows;
        while self.inflight_rows.saturating_mul(self.stride) > self.window {
            let Some((slot, rows)) = self.inflight.pop_front() else {
                break;
            };
            self.inflight_rows -= rows;
            let _ = ring.write_behind(io, slot, rows, true);
        }
    }

    /// A flush sealed and synced every item below `tail`.
    pub(crate) fn flushed(&mut self, tail: u64) {
        self.sealed = self.sealed.max(tail);
        self.inflight.clear();
        self.inflight_rows = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::WriteBehind;

    #[test]
    fn the_window_is_off_for_rings_it_would_cover() {
        // 1000 rows of 1 KiB: 1000 KiB, under a 1 MiB window and its chunk.
        assert_eq!(WriteBehind::new(1 << 20, 1000, 1024, 0).window(), 0);
        assert_eq!(WriteBehind::new(0, 1 << 30, 1024, 0).window(), 0);
        let on = WriteBehind::new(1 << 20, 4096, 1024, 0);
        assert_eq!(on.window(), 1 << 20);
        // A chunk is a quarter of the window here: 256 rows of 1 KiB.
        assert!(!on.due(255));
        assert!(on.due(256));
        assert!(!WriteBehind::off().due(u64::MAX - 1));
    }
}
