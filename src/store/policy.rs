//! What happens to items past `max_size` (issue 30): random downsampling after each
//! add, and a reservoir (algorithm R) whose kept items move to the tail when the ring
//! reaches them, renamed in place or copied into a free slot, so the ring's age bound
//! never ends one.

use std::ops::Range;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use crate::algo::sample::{SampleSpec, draw_uniform_skipping, uniform_below};
use crate::error::{Error, Result};
use crate::format::lifecycle::{Cause, Policy};
use crate::parts::fragments::Fragment;
use crate::parts::lifecycle::Lifecycle;

use super::Store;

impl Store {
    /// Past `max_size` live items (random downsampling), removes uniformly random live
    /// items until `max_size` are left. The draw comes from a stream that is a pure
    /// function of the policy's seed and the tail: a reopened or restored buffer
    /// removes what this one would have. A kill before it ran leaves more than
    /// `max_size` live, which the next add trims.
    pub(crate) fn downsample(&mut self) -> Result<()> {
        let Some(life) = &self.parts.life else {
            return Ok(());
        };
        let (policy, max_size) = life.policy();
        let live = self.len();
        if policy != Policy::Downsample || live <= max_size {
            return Ok(());
        }
        self.ready_to_remove()?;
        if self.rows.superblock.fragments {
            return self.downsample_fragments(max_size);
        }
        if self.rows.superblock.episodic {
            return self.downsample_episodes(max_size);
        }
        let Some(life) = &self.parts.life else {
            return Ok(());
        };
        let (head, tail) = (self.rows.head, self.rows.tail);
        let mut rng = ChaCha8Rng::seed_from_u64(life.policy_seed() ^ tail.wrapping_mul(MIX));
        let spec = SampleSpec {
            n: (live - max_size) as usize,
            replace: false,
            newest: None,
        };
        let mut doomed = Vec::new();
        let mut list = life.live_list.lock().unwrap_or_else(|p| p.into_inner());
        let range = (head, tail, life.removed_live());
        draw_uniform_skipping(&mut rng, &spec, range, life, &mut list, &mut doomed)?;
        drop(list);
        self.remove_for(&doomed, Cause::Downsampled);
        Ok(())
    }

    /// Random downsampling of a fragments buffer (UnstableBaselines' `EpisodeBuffer`):
    /// past `max_size` live rows, removes every live row of uniformly random fragments
    /// that still have one (the one just added among them) until at most `max_size`
    /// rows are left. The stream is seeded as item-level downsampling's, and the
    /// fragments are taken in index order, so a reopened buffer removes the same ones.
    fn downsample_fragments(&mut self, max_size: u64) -> Result<()> {
        let Some(seed) = self.parts.life.as_ref().map(Lifecycle::policy_seed) else {
            return Ok(());
        };
        let (head, tail) = (self.rows.head, self.rows.tail);
        let table: Vec<Fragment> = self.fragment_table().iter().copied().collect();
        let Some(life) = &self.parts.life else {
            return Ok(());
        };
        // Only the oldest fragment can have rows before the head: its live ones are
        // looked up; every other one's count says whether any row is left.
        let mut candidates: Vec<Range<u64>> = table
            .iter()
            .filter(|f| match f.start >= head {
                true => f.removed < f.end - f.start,
                false => (head..f.end).any(|i| !life.is_removed(i)),
            })
            .map(|f| f.start.max(head)..f.end)
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ tail.wrapping_mul(MIX));
        while self.len() > max_size && !candidates.is_empty() {
            let k = uniform_below(rng.next_u64(), candidates.len() as u64) as usize;
            let rows = candidates.swap_remove(k);
            let live: Vec<u64> = match &self.parts.life {
                Some(life) => rows.filter(|&i| !life.is_removed(i)).collect(),
                None => Vec::new(),
            };
            self.remove_for(&live, Cause::Downsampled);
        }
        Ok(())
    }

    /// Random downsampling of an episodic buffer (UnstableBaselines' `EpisodeBuffer`
    /// over episodes): past `max_size` live steps (rows less reset rows), removes
    /// uniformly random ended episodes still kept (the one just ended among them) until
    /// at most `max_size` steps are left. Seeded as the other downsamplings; the
    /// episodes are taken in index order, so a reopened buffer removes the same ones.
    fn downsample_episodes(&mut self, max_size: u64) -> Result<()> {
        let (Some(life), Some(table)) = (&self.parts.life, &self.parts.episodes) else {
            return Ok(());
        };
        let (head, tail) = (self.rows.head, self.rows.tail);
        let mut steps = 0;
        let mut candidates: Vec<(u64, u64)> = Vec::new();
        for e in table.iter() {
            if life.episode_removed(e, head) {
                continue;
            }
            let first = e.start.max(head);
            let held = e.last() + 1 - first - u64::from(e.start >= head);
            steps += held;
            if e.end.is_some() {
                candidates.push((first, held));
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(life.policy_seed() ^ tail.wrapping_mul(MIX));
        while steps > max_size && !candidates.is_empty() {
            let k = uniform_below(rng.next_u64(), candidates.len() as u64) as usize;
            let (first, held) = candidates.swap_remove(k);
            self.remove_for(&[first], Cause::Downsampled);
            steps -= held;
        }
        Ok(())
    }

    /// Before an add of `rows` with a policy that ends items itself (a reservoir, or
    /// random downsampling below the capacity): frees `rows` slots without ending a
    /// kept item. While the ring is too full, its head is dropped when it was removed
    /// (nothing is written: the slot is free for the add) or, when it is kept, moved to
    /// the tail: renamed in place in a full ring (`rename_head`), copied into a free
    /// slot otherwise (`copy_head`). Only drops free slots, so this ends within a lap
    /// when the kept items and the add fit the ring.
    ///
    /// An item with variable-length values is never renamed (its values would stay in
    /// chunks the chunk ring is about to reuse): it is copied, values and all, so one
    /// slot is kept free after every add for the next copy. Downsampling falls back to
    /// the ring's FIFO (as a plain ring ends its oldest item) where relocation cannot
    /// keep every kept item: a fragments or episodic buffer (a moved row would split its
    /// fragment or episode)
    /// or an add that with the kept items would overfill the ring; a reservoir refuses
    /// such an add instead. For either policy, a kept item whose values cannot move (a
    /// chunk ring too small to take them again beside every kept item's, or a damaged
    /// value) is ended by the ring, as in a plain buffer with such fields.
    pub(crate) fn make_room_for_policy(&mut self, rows: u64) -> Result<()> {
        let Some((policy, max_size)) = self.parts.life.as_ref().map(|l| l.policy()) else {
            return Ok(());
        };
        let cap = self.rows.superblock.capacity;
        let spare = u64::from(self.rows.heap.is_some());
        match policy {
            Policy::Fifo => return Ok(()),
            Policy::Reservoir if rows + spare > cap - max_size => {
                return Err(Error::CountMismatch {
                    what: "add to a reservoir: rows in one call, at most capacity - max_size \
                           (less one with variable-length fields)",
                    expected: (cap - max_size - spare) as usize,
                    got: rows as usize,
                });
            }
            Policy::Reservoir => {}
            Policy::Downsample => {
                let fits = self.len() + rows + spare <= cap;
                let units = self.rows.superblock.fragments || self.rows.superblock.episodic;
                if units || max_size >= cap || !fits {
                    return Ok(());
                }
            }
        }
        self.writable()?;
        self.private_life()?;
        // The rows go to consecutive indices, so every move comes first. Kept items
        // plus the add fit (checked above), and each drop frees a slot, so this ends
        // within a lap.
        for _ in 0..=2 * cap {
            let (head, tail) = (self.rows.head, self.rows.tail);
            if cap - (tail - head) >= rows + spare {
                return Ok(());
            }
            let removed = self.parts.life.as_ref().is_some_and(|l| l.is_removed(head));
            let moved = match (removed, tail - head == cap, spare == 1) {
                (true, _, _) => {
                    self.drop_head()?;
                    true
                }
                (false, true, false) => {
                    self.rename_head()?;
                    true
                }
                // A full ring of items with values has no slot to copy into: only a
                // kill between an add and its relocation leaves one (the ring ends its
                // oldest item, as a plain ring does).
                (false, true, true) => false,
                (false, false, _) => self.copy_head()?,
            };
            if !moved {
                return Ok(());
            }
        }
        Err(Error::Unsupported(
            "a buffer with a policy found no room within two laps",
        ))
    }

    /// The head item is kept and the ring has a free slot: the item is written again
    /// at the tail (its fields and values, its priority leaf, its uses), then its old
    /// slot is cleared and the head moves past it. A kill between the two may leave it
    /// at both indices (never at neither): the write is complete before the old stamp
    /// goes. Returns false, moving nothing, when its values cannot be read back or the
    /// chunk ring has no room for them without ending a kept item.
    fn copy_head(&mut self) -> Result<bool> {
        let (from, slot) = (self.rows.head, self.rows.head_slot);
        let (to, to_slot) = (self.rows.tail, self.rows.tail_slot);
        let Some(values) = self.values_to_move(from)? else {
            return Ok(false);
        };
        self.ensure_storable(to_slot, 1)?;
        self.ensure_storable(slot, 1)?;
        self.guard_evictions(1)?;
        let mut fields: Vec<Vec<u8>> = (self.rows.schema.fields().iter().enumerate())
            .map(|(f, x)| {
                let mut b = vec![0u8; x.bytes()];
                self.rows.ring.read_field(slot, f, &mut b);
                b
            })
            .collect();
        if let Some(heap) = self.rows.heap.as_mut().filter(|_| !values.is_empty()) {
            let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
            let mut slots = Vec::with_capacity(refs.len());
            heap.write(&refs, &mut slots);
            fields.extend(slots.iter().map(|s| s.encode().to_vec()));
        }
        let refs: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
        self.push_row(&refs, None, false, crate::format::row::FRAGMENT_END);
        if let Some(life) = &mut self.parts.life {
            life.renamed(from, to);
        }
        if let Some(tree) = self.parts.tree.tree_mut() {
            tree.move_leaf(slot, to_slot);
        }
        crate::killpoint::hit("copy-before-clear");
        // The old row goes as an evicted one does (its record first, if a commit
        // covers it), so recovery never brings it back over chunks reused since.
        self.pass_head(from + 1)?;
        if let Some(life) = &mut self.parts.life {
            life.head_to(from + 1);
        }
        Ok(true)
    }

    /// The values of item `index` (the head), read back and checked, when the chunk
    /// ring can take them again at its tail without reusing a chunk that a live item
    /// names (chunk positions ascend with the index, so the head's are the oldest);
    /// with its chunk segments made private for a snapshot. `Some(empty)` without
    /// variable-length fields, `None` when the item cannot move (a value that fails
    /// its stamp check is damaged, and ends as the ring would end it).
    fn values_to_move(&mut self, index: u64) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(heap) = self.rows.heap.as_ref() else {
            return Ok(Some(Vec::new()));
        };
        let cap = self.rows.superblock.capacity;
        let slots = crate::parts::recovery::item_slots(
            &self.rows.ring,
            self.rows.ring.layout(),
            cap,
            index,
        );
        let mut values = Vec::with_capacity(slots.len());
        for s in &slots {
            let mut v = vec![0u8; s.len as usize];
            if heap.read_into(*s, &mut v, false).is_err() {
                return Ok(None);
            }
            values.push(v);
        }
        let total: u64 = values.iter().map(|v| v.len() as u64).sum();
        let needed = heap.chunks_for(total);
        let bound = (heap.next_chunk() + needed).saturating_sub(heap.capacity());
        let chunk = heap.chunk_bytes();
        if slots.iter().any(|s| s.pos / chunk < bound) {
            return Ok(None);
        }
        self.reserve_chunks(needed)?;
        self.ensure_private_chunks(needed)?;
        Ok(Some(values))
    }

    /// The head item was removed: the head moves past it. Its slot is free for the
    /// next add, which stamps it; with fixed-size fields nothing else is written (a kill
    /// before that add may bring the removed item back, still removed). An item with
    /// values loses its stamp as an evicted one does, with its eviction record first: its
    /// chunks are free for reuse from now on, and recovery must never bring back a row
    /// whose values were overwritten (the spare slot may keep it past the add).
    fn drop_head(&mut self) -> Result<()> {
        let head = self.rows.head + 1;
        if self.rows.heap.is_some() {
            self.pass_head(head)?;
        } else {
            let cap = self.rows.superblock.capacity;
            self.rows.head = head;
            self.rows.head_slot = (self.rows.head_slot + 1) % cap;
            self.publish(crate::format::progress::HEAD_OFF, head);
        }
        if let Some(life) = &mut self.parts.life {
            life.head_to(head);
        }
        Ok(())
    }

    /// The head item is kept: it becomes the tail's item, the next index of its own
    /// slot, by one store of its stamp (its bytes, priority leaf and uses stay), as if
    /// it had been added again. Before the store: the segment's copy-on-write and, when
    /// a commit covers the head item, an eviction record (its old index is gone from the
    /// moment the stamp names the new one). A kill leaves one name or the other.
    fn rename_head(&mut self) -> Result<()> {
        let cap = self.rows.superblock.capacity;
        let (from, to, slot) = (self.rows.head, self.rows.tail, self.rows.head_slot);
        debug_assert_eq!(to - from, cap);
        self.ensure_storable(slot, 1)?;
        self.guard_evictions(1)?;
        crate::killpoint::hit("rename-before-stamp");
        self.publish(crate::format::progress::HEAD_OFF, from + 1);
        self.rows.ring.restamp(slot, to);
        if let Some(life) = &mut self.parts.life {
            life.renamed(from, to);
            life.head_to(from + 1);
        }
        if let Some(tree) = self.parts.tree.tree_mut() {
            tree.note_caught_up(to + 1);
        }
        self.rows.head = from + 1;
        self.rows.head_slot = (slot + 1) % cap;
        self.rows.tail = to + 1;
        self.rows.tail_slot = (slot + 1) % cap;
        self.publish(crate::format::progress::TAIL_OFF, to + 1);
        Ok(())
    }

    /// After items `added` were stored in a reservoir: algorithm R for each, in order.
    /// The `n`-th item ever added (`n > max_size`) is kept with probability
    /// `max_size / n`, removing a uniformly random item kept before it; otherwise it is
    /// removed itself. Each decision's random stream is a pure function of the seed and
    /// the item's index.
    pub(crate) fn reservoir_decide(&mut self, added: Range<u64>) -> Result<()> {
        let Some((Policy::Reservoir, max_size)) = self.parts.life.as_ref().map(|l| l.policy())
        else {
            return Ok(());
        };
        let Some(seed) = self.parts.life.as_ref().map(Lifecycle::policy_seed) else {
            return Ok(());
        };
        for i in added {
            let head = self.rows.head;
            if i < head {
                continue;
            }
            let renamed = self.parts.life.as_ref().map_or(0, Lifecycle::renames);
            // The n-th item ever added: indices handed to renamed items do not count.
            let n = i - crate::format::lanes::lane_base(i) + 1 - renamed;
            if n <= max_size {
                continue;
            }
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ i.wrapping_mul(MIX));
            let keep = uniform_below(rng.next_u64(), n) < max_size;
            let doomed = match keep {
                true => self.kept_before(i, &mut rng),
                false => Some(i),
            };
            if let Some(d) = doomed {
                self.remove_for(&[d], Cause::Reservoir);
            }
        }
        Ok(())
    }

    /// A uniformly random item kept (live, not removed) among those before `i`.
    fn kept_before(&self, i: u64, rng: &mut ChaCha8Rng) -> Option<u64> {
        let life = self.parts.life.as_ref()?;
        let head = self.rows.head;
        let span = i.checked_sub(head).filter(|&s| s > 0)?;
        for _ in 0..64 {
            let j = head + uniform_below(rng.next_u64(), span);
            if !life.is_removed(j) {
                return Some(j);
            }
        }
        let kept: Vec<u64> = (head..i).filter(|&j| !life.is_removed(j)).collect();
        let k = uniform_below(rng.next_u64(), kept.len() as u64) as usize;
        kept.get(k).copied()
    }
}

/// Spreads the tail over the seed's bits, so neighbouring adds draw unrelated streams.
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
