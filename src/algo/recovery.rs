//! Which items survive an unclean shutdown: pure logic over slot stamps and checksums,
//! so it is tested against a model without any file.
//!
//! The committed state `(head_c, tail_c)` is trusted: a commit follows the msync of every
//! item it covers and the checksums computed for them (a flush seals them).
//!
//! **Same boot (a killed process).** The page cache survived, so stamps are the truth.
//! Each add stamps its slot "writing index i", writes the bytes, then stamps "holds
//! index i". The highest index any stamp names (complete or being written) bounds what
//! was handed out, even when the write cut short destroyed the slot of the only other
//! evidence. From that bound recovery walks down over slots whose stamp names their
//! index. Only stamps are read: O(capacity) 8-byte loads.
//!
//! **Another boot (possibly a power loss).** Pages reached the disk in any order, so a
//! stamp proves nothing about its row. Only flushed items were promised to survive; the
//! live range is the newest run of committed items whose checksums hold.

use crate::format::row;

/// Read access to slots, as recovery needs it.
pub trait SlotProbe {
    /// The slot's stamp.
    fn stamp(&self, slot: u64) -> u64;
    /// Whether the slot's checksum matches the index its stamp names and its payload.
    fn crc_ok(&self, slot: u64) -> bool;
}

/// The outcome of recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Oldest live index after recovery.
    pub head: u64,
    /// One past the newest live index.
    pub tail: u64,
    /// Items found complete past the committed tail.
    pub rolled_forward: u64,
    /// Items that would be in the ring but were damaged or cut, and are dropped.
    pub dropped: u64,
}

fn intact(p: &dyn SlotProbe, capacity: u64, index: u64, trust_stamps: bool) -> bool {
    let slot = index % capacity;
    p.stamp(slot) == row::stamp_of(index) && (trust_stamps || p.crc_ok(slot))
}

/// Recovers the live range from a committed `(head_c, tail_c)`; `trust_stamps` when the
/// page cache survived the shutdown (same boot).
pub fn recover(
    p: &dyn SlotProbe,
    capacity: u64,
    head_c: u64,
    tail_c: u64,
    trust_stamps: bool,
) -> Recovered {
    // The highest index handed out: a complete item's, or the one before an item whose
    // write was cut short (that item itself was never acknowledged).
    let mut bound = tail_c;
    if trust_stamps {
        for slot in 0..capacity {
            let stamp = p.stamp(slot);
            // A stamp that names an index of another slot cannot be the writer's.
            let own = |i: u64| i % capacity == slot;
            let handed_out = match (row::index_of(stamp), row::writing_index(stamp)) {
                (Some(i), _) if own(i) => i + 1,
                (_, Some(i)) if own(i) => i,
                _ => 0,
            };
            bound = bound.max(handed_out);
        }
    }
    let lowest = head_c.max(bound.saturating_sub(capacity));
    let mut top = bound;
    if trust_stamps {
        // An item whose slot holds the cut-short write of a later index was evicted by
        // that add, not damaged: it cannot be served, but its index stays handed out.
        // (At the top of the range this happens only with capacity 1.)
        let evicted_by_cut =
            |i: u64| row::writing_index(p.stamp(i % capacity)).is_some_and(|j| j > i);
        while top > lowest && evicted_by_cut(top - 1) {
            top -= 1;
        }
        if top < bound {
            return Recovered {
                head: bound,
                tail: bound,
                rolled_forward: bound - tail_c,
                dropped: 0,
            };
        }
    }
    // Items at the top that are not intact were never completed (or, after a power
    // loss, never made durable); the tail ends below them.
    while top > lowest && !intact(p, capacity, top - 1, trust_stamps) {
        top -= 1;
    }
    // Indices below the committed tail were handed out durably; the range never ends
    // before it. If the items up to it are gone, nothing contiguous is left to serve.
    let tail = tail_c.max(top);
    let mut head = tail;
    if tail == top {
        while head > lowest && intact(p, capacity, head - 1, trust_stamps) {
            head -= 1;
        }
    }
    Recovered {
        head,
        tail,
        rolled_forward: tail - tail_c,
        dropped: head - lowest.min(head),
    }
}

/// Slots that hold something no future read or recovery may take for a live item: a
/// write cut short, or an index at or past the recovered tail. The writer clears their
/// stamps before it commits the recovered state.
pub fn stale_slots(p: &dyn SlotProbe, capacity: u64, tail: u64) -> Vec<u64> {
    (0..capacity)
        .filter(|&slot| {
            let stamp = p.stamp(slot);
            stamp & row::WRITING_BIT != 0
                || row::index_of(stamp).is_some_and(|i| i >= tail || i % capacity != slot)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::row::{stamp_of, writing_stamp};
    use proptest::prelude::*;

    /// Slots as a model: (stamp, checksum ok).
    struct Model(Vec<(u64, bool)>);

    impl SlotProbe for Model {
        fn stamp(&self, slot: u64) -> u64 {
            self.0.get(slot as usize).map_or(0, |s| s.0)
        }
        fn crc_ok(&self, slot: u64) -> bool {
            self.0.get(slot as usize).is_some_and(|s| s.1)
        }
    }

    /// A ring of `cap` slots after adding indices `0..n` one by one.
    fn written(cap: u64, n: u64) -> Model {
        let mut m = Model(vec![(0, false); cap as usize]);
        for i in 0..n {
            if let Some(s) = m.0.get_mut((i % cap) as usize) {
                *s = (stamp_of(i), true);
            }
        }
        m
    }

    #[test]
    fn rolls_forward_past_the_commit() {
        let m = written(10, 7);
        let r = recover(&m, 10, 0, 3, true);
        assert_eq!((r.head, r.tail, r.rolled_forward, r.dropped), (0, 7, 4, 0));
    }

    #[test]
    fn follows_a_writer_that_lapped_the_ring_after_the_commit() {
        let m = written(10, 37);
        let r = recover(&m, 10, 0, 2, true);
        assert_eq!((r.head, r.tail), (27, 37));
    }

    #[test]
    fn a_write_cut_short_ends_the_roll() {
        let mut m = written(10, 15);
        if let Some(s) = m.0.get_mut(5) {
            *s = (writing_stamp(15), false);
        }
        let r = recover(&m, 10, 4, 12, true);
        assert_eq!(
            (r.head, r.tail),
            (6, 15),
            "index 15 was being written over index 5"
        );
    }

    #[test]
    fn a_damaged_item_cuts_the_range_to_the_newest_intact_run() {
        let mut m = written(10, 9);
        if let Some(s) = m.0.get_mut(3) {
            s.1 = false;
        }
        let r = recover(&m, 10, 0, 9, false);
        assert_eq!((r.head, r.tail, r.dropped), (4, 9, 4));
    }

    #[test]
    fn a_cut_write_over_the_only_evidence_still_bounds_the_indices() {
        // Capacity 1: the in-flight write of index 95 destroyed item 94, the only item.
        let m = Model(vec![(writing_stamp(95), false)]);
        let r = recover(&m, 1, 0, 0, true);
        assert_eq!(
            (r.head, r.tail),
            (95, 95),
            "indices 0..95 were handed out and must not be reused"
        );
    }

    #[test]
    fn after_a_reboot_only_committed_items_with_sound_checksums_survive() {
        // 9 items written, 6 committed; item 4's bytes did not reach the disk intact.
        let mut m = written(10, 9);
        if let Some(s) = m.0.get_mut(4) {
            s.1 = false;
        }
        let r = recover(&m, 10, 0, 6, false);
        assert_eq!((r.head, r.tail, r.rolled_forward), (5, 6, 0));
        // The same slots after a kill in the same boot: stamps are the truth.
        let r = recover(&m, 10, 0, 6, true);
        assert_eq!((r.head, r.tail, r.rolled_forward), (0, 9, 3));
    }

    #[test]
    fn a_stamp_naming_an_index_of_another_slot_bounds_nothing() {
        // Slot 3 holds a stamp for index 25 (slot 5), complete or being written: bytes
        // from elsewhere, not this ring's writer. Neither raises the bound.
        for stray in [stamp_of(25), writing_stamp(26)] {
            let mut m = written(10, 7);
            if let Some(s) = m.0.get_mut(3) {
                *s = (stray, true);
            }
            let r = recover(&m, 10, 0, 2, true);
            assert_eq!(r.tail, 7, "stray stamp {stray:#x}");
        }
    }

    #[test]
    fn a_damaged_newest_committed_item_leaves_nothing_contiguous_but_keeps_its_index() {
        // Another boot: committed 0..9, item 8's checksum fails. The range cannot end
        // before the committed tail (its indices were handed out durably), and it cannot
        // reach back past the damaged item: it is empty at 9.
        let mut m = written(10, 9);
        if let Some(s) = m.0.get_mut(8) {
            s.1 = false;
        }
        let r = recover(&m, 10, 0, 9, false);
        assert_eq!((r.head, r.tail, r.dropped), (9, 9, 9));
    }

    #[test]
    fn the_committed_head_is_never_moved_back() {
        let m = written(10, 9);
        let r = recover(&m, 10, 6, 9, true);
        assert_eq!((r.head, r.tail), (6, 9));
    }

    #[test]
    fn stale_slots_are_cut_writes_and_items_past_the_tail() {
        let mut m = written(4, 6);
        if let Some(s) = m.0.get_mut(2) {
            *s = (writing_stamp(6), false);
        }
        assert_eq!(stale_slots(&m, 4, 5), vec![1, 2]);
    }

    proptest! {
        /// After a kill (page cache intact) with the write of `n` possibly cut short,
        /// recovery returns exactly the items acknowledged and still in the ring.
        #[test]
        fn recovers_every_acknowledged_item_after_a_kill(
            cap in 1u64..40, n in 0u64..200, commit_at in 0u64..200, cut in any::<bool>()
        ) {
            let commit_at = commit_at.min(n);
            let mut m = written(cap, n);
            if cut && let Some(s) = m.0.get_mut((n % cap) as usize) {
                *s = (writing_stamp(n), false);
            }
            let head_c = commit_at.saturating_sub(cap);
            let r = recover(&m, cap, head_c, commit_at, true);
            let lost_to_cut = u64::from(cut && n >= cap);
            prop_assert_eq!(r.tail, n);
            prop_assert_eq!(r.head, n.saturating_sub(cap) + lost_to_cut);
        }
    }
}
