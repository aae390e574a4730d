//! The live range an open settles on (`algo::recovery` decides it) over the rows and,
//! for a buffer with variable-length fields, the chunks their values lie in: what an
//! open keeps and what `verify` predicts it keeps.

use crate::algo::recovery::{self, SlotProbe};
use crate::format::heap::VarSlot;
use crate::format::manifest::Commit;
use crate::parts::heap::Heap;
use crate::storage::Manifest;
use crate::storage::ring::Ring;

impl SlotProbe for Ring {
    fn stamp(&self, slot: u64) -> u64 {
        Ring::stamp(self, slot)
    }
    fn crc_ok(&self, slot: u64) -> bool {
        self.check(slot).is_some_and(|c| c.crc_ok)
    }
}

/// The slots of item `index`'s variable-length values, as its row holds them (empty
/// for a schema without such fields, or a slot that does not decode).
pub(crate) fn item_slots(
    ring: &Ring,
    layout: &crate::format::row::RowLayout,
    capacity: u64,
    index: u64,
) -> Vec<VarSlot> {
    (layout.fixed..layout.fields.len())
        .filter_map(|f| {
            let mut b = [0u8; crate::format::heap::SLOT_LEN];
            ring.read_field(index % capacity, f, &mut b);
            VarSlot::decode(&b).ok()
        })
        .collect()
}

/// The live range recovery settles on (`algo::recovery`), over the rows and, for a
/// buffer with variable-length fields, the chunks their values lie in: what an open
/// keeps and what `verify` predicts it keeps.
pub(crate) fn recover_range(
    m: &Manifest,
    commit: &Commit,
    ring: &Ring,
    heap: Option<&Heap>,
    trust_stamps: bool,
) -> recovery::Recovered {
    // In another boot, items an eviction record names may hold newer bytes on disk.
    let head_c = match trust_stamps {
        true => commit.head,
        false => m.evicted_below(commit),
    };
    let (capacity, tail_c) = (m.superblock.capacity, commit.tail);
    match heap {
        Some(h) => {
            let probe = WithValues {
                rows: ring,
                heap: h,
                var: ring.layout().fixed..ring.layout().fields.len(),
            };
            recovery::recover(&probe, capacity, head_c, tail_c, trust_stamps)
        }
        None => recovery::recover(ring, capacity, head_c, tail_c, trust_stamps),
    }
}

/// Recovery's view of a buffer with variable-length fields: an item is intact when its
/// row is and (in another boot, where its crc is asked) every chunk its values lie in
/// holds that chunk with a sound crc.
struct WithValues<'a> {
    rows: &'a Ring,
    heap: &'a Heap,
    var: std::ops::Range<usize>,
}

impl SlotProbe for WithValues<'_> {
    fn stamp(&self, slot: u64) -> u64 {
        self.rows.stamp(slot)
    }
    fn crc_ok(&self, slot: u64) -> bool {
        self.rows.check(slot).is_some_and(|c| c.crc_ok)
            && self.var.clone().all(|f| {
                let mut b = [0u8; crate::format::heap::SLOT_LEN];
                self.rows.read_field(slot, f, &mut b);
                VarSlot::decode(&b).is_ok_and(|s| self.heap.intact(s, true))
            })
    }
}
