//! Named points where a test build kills its own process (`--features kill-points`):
//! with `REPLAYSTORE_KILL_POINT=name:n` the process aborts the `n`-th time (from 1) it
//! reaches point `name`, so a crash test lands exactly between two steps that no
//! timing of a `kill -9` hits reliably. Without the feature `hit` is empty and inlined
//! away, so release builds pay nothing.
//!
//! Points: `before-stamp` (an item's bytes and priority leaf written, its final stamp
//! not), `write-behind-started` (rows sealed and their writeback started behind the
//! tail, no commit covering them yet), `commit-written` (a commit slot written, not yet fdatasynced),
//! `eviction-written` (an eviction record written, not yet fdatasynced),
//! `snapshot-mid-links` (a snapshot's first segment linked, the others not),
//! `snapshot-before-rename` (a snapshot's folder whole and synced, not yet renamed),
//! `restore-mid-links` (a restore's first segment replaced, the others not),
//! `bring-mid-links` (a snapshot of another buffer being brought in: its first segment
//! linked or copied into the temporary folder, the others not), `bring-before-rename`
//! (that folder whole and synced, not yet renamed into `snapshots/`),
//! `own-copy-made` (a file written in place that had other names, such as a tree a
//! restore linked, copied durably, the copy not yet renamed over its name),
//! `create-before-manifest` (a new buffer's files all made, MANIFEST not yet published),
//! `chunk-before-stamp` (a chunk of variable-length values written, its final stamp
//! not; the items naming it not yet written), `episode-removal` (a row of an episode
//! being removed marked removed, the episode's later rows not yet).

/// Kills the process here if the environment names this point and count.
#[cfg(feature = "kill-points")]
pub(crate) fn hit(name: &str) {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let target = TARGET.get_or_init(|| {
        let v = std::env::var("REPLAYSTORE_KILL_POINT").ok()?;
        let (point, n) = v.rsplit_once(':')?;
        Some((point.to_owned(), n.parse().ok()?))
    });
    if let Some((point, n)) = target
        && point == name
        && SEEN.fetch_add(1, Ordering::Relaxed) + 1 == *n
    {
        // As a kill -9 would: no unwinding, no destructor, no flush.
        std::process::abort();
    }
}

/// Without the feature: nothing.
#[cfg(not(feature = "kill-points"))]
#[inline(always)]
pub(crate) fn hit(_name: &str) {}
