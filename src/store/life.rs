//! The writer's calls on item states (issue 30): removing items (explicitly, stale
//! ones), the uses and removals a draw leaves behind, reading an item's state, and
//! asking the rate limiter. The words and their rules are `parts::lifecycle`'s; here is
//! only what a call does with them, and the priority leaves a removal zeroes (the
//! tree's holder is this store). The policies past `max_size` are in `policy.rs`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::lifecycle::Cause;
use crate::parts::fragments::Fragments;
use crate::parts::lifecycle::{Counts, ItemState, TagIndex};
use crate::request::Request;
use std::time::Duration;

use super::Store;

impl Store {
    /// Removes the live items at `indices` before the ring overwrites them (DI-engine's
    /// `delete`): no draw or read returns them again, and `len` stops counting them.
    pub(crate) fn remove(&mut self, indices: &[u64]) -> Result<u64> {
        self.ready_to_remove()?;
        self.rows.check_live(indices)?;
        Ok(self.remove_for(indices, Cause::Explicit))
    }

    /// Removes the live items whose tag is older than `max_staleness` behind `now`
    /// (DI-engine's `staleness_check`: staleness = `now - tag`, removed when above
    /// `max_staleness`), where the tag is the item's value of the integer scalar field
    /// `field` (the learner iteration or policy version that produced it).
    pub(crate) fn remove_stale(
        &mut self,
        field: &str,
        now: i64,
        max_staleness: u64,
    ) -> Result<u64> {
        self.ready_to_remove()?;
        let f = self.tag_field(field)?;
        let bound = i128::from(now) - i128::from(max_staleness);
        let (head, tail, cap) = (
            self.rows.head,
            self.rows.tail,
            self.rows.superblock.capacity,
        );
        let dtype = self.rows.schema.fields().get(f).map(|x| x.dtype());
        let Some(life) = self.parts.life.as_mut() else {
            return Ok(0);
        };
        let index = match &mut life.tags {
            Some(t) if t.field == field => t,
            _ => life.tags.insert(TagIndex {
                field: field.to_owned(),
                upto: head,
                ..TagIndex::default()
            }),
        };
        let mut b = [0u8; 8];
        for i in index.upto.max(head)..tail {
            let len = dtype.map_or(8, |d| d.size());
            let bytes = b.get_mut(..len).unwrap_or(&mut []);
            self.rows.ring.read_field(i % cap, f, bytes);
            let tag = dtype.map_or(0, |d| tag_value(d, bytes));
            index.by_tag.entry(tag).or_default().push(i);
        }
        index.upto = tail;
        let stale = index
            .by_tag
            .range(..bound)
            .map(|(&k, _)| k)
            .collect::<Vec<_>>();
        let mut doomed = Vec::new();
        for k in stale {
            doomed.extend(index.by_tag.remove(&k).unwrap_or_default());
        }
        doomed.retain(|&i| i >= head);
        Ok(self.remove_for(&doomed, Cause::Stale))
    }

    /// The position of `field`, an integer scalar field (a tag), or why it is not one.
    fn tag_field(&self, field: &str) -> Result<usize> {
        let schema = &self.rows.schema;
        let Some(f) = schema.position(field) else {
            return Err(Error::UnknownField {
                field: field.to_owned(),
                known: schema.names(),
            });
        };
        match schema.fields().get(f) {
            Some(x) if x.shape().is_empty() && x.dtype().is_integer() => Ok(f),
            Some(x) => Err(Error::InvalidSample(format!(
                "field {field:?} ({:?}, shape {:?}) is no tag: staleness is measured on an \
                 integer scalar field",
                x.dtype(),
                x.shape()
            ))),
            None => Err(Error::InvalidSample(format!("no field {field:?}"))),
        }
    }
}

/// Why an item a removing draw of `request` returned is removed: consumed when the
/// draw took the oldest items (a queue), sampled otherwise.
fn removal_cause(request: &Request<'_>) -> Cause {
    match request.pick {
        crate::request::Pick::Oldest => Cause::Consumed,
        _ => Cause::Sampled,
    }
}

/// Tells the fragment table (fragment buffers, once drawn from) of each removal, so
/// draws of whole fragments skip the one that lost a row.
fn note_in(table: Option<&mut Fragments>) -> impl FnMut(u64) {
    let mut table = table;
    move |i| {
        if let Some(t) = table.as_mut() {
            t.note_removed(i);
        }
    }
}

/// An integer field's little-endian bytes as a number.
fn tag_value(dtype: DType, b: &[u8]) -> i128 {
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    if let (Some(dst), Some(src)) = (w.get_mut(..n), b.get(..n)) {
        dst.copy_from_slice(src);
    }
    let u = u64::from_le_bytes(w);
    let bits = 8 * n as u32;
    match dtype {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => {
            // Sign-extend from the field's width.
            let shift = 64 - bits;
            i128::from(((u << shift) as i64) >> shift)
        }
        _ => i128::from(u),
    }
}

impl Store {
    /// What every removal needs before a word changes: a handle that writes, item
    /// states, the state file (and the tree) its own, and the tree's leaves in reach.
    pub(crate) fn ready_to_remove(&mut self) -> Result<()> {
        self.writable()?;
        if self.parts.life.is_none() {
            return Err(self.no_item_states());
        }
        if self.rows.superblock.prioritized && self.parts.tree.is_actor() {
            // The leaves of removed items must be zeroed with the removal, and another
            // process owns them.
            return Err(self.no_priorities());
        }
        if self.parts.tree.is_shared() {
            self.private_tree()?;
        }
        self.private_life()
    }

    /// Removes `indices` (live, checked) for `cause`, zeroing the leaves of those
    /// removed now; returns how many that is. In an episodic buffer the removal takes
    /// every live row of each episode holding one of `indices`.
    pub(crate) fn remove_for(&mut self, indices: &[u64], cause: Cause) -> u64 {
        let whole = self.whole_episodes_of(indices);
        let episodic = whole.is_some();
        let indices = whole.as_deref().unwrap_or(indices);
        let Some(life) = self.parts.life.as_mut() else {
            return 0;
        };
        let cap = self.rows.superblock.capacity;
        let mut note = note_in(self.parts.fragments.as_mut());
        let gone: Vec<u64> = indices
            .iter()
            .filter(|&&i| life.remove(i, cause))
            .inspect(|&&i| {
                note(i);
                if episodic {
                    crate::killpoint::hit("episode-removal");
                }
            })
            .map(|&i| i % cap)
            .collect();
        drop(note);
        self.zero_leaves(&gone);
        gone.len() as u64
    }

    /// In an episodic buffer, the live rows of every episode holding one of `indices`,
    /// each episode once, in index order (a removal takes whole episodes, first row
    /// first, so a kill inside one leaves a removed prefix); `None` in any other buffer.
    fn whole_episodes_of(&self, indices: &[u64]) -> Option<Vec<u64>> {
        let table = self.parts.episodes.as_ref()?;
        let head = self.rows.head;
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for &i in indices {
            // A draw's indices come an episode at a time: one lookup per episode.
            if spans.last().is_some_and(|&(a, b)| (a..=b).contains(&i)) {
                continue;
            }
            if let Some(e) = table.of(i) {
                spans.push((e.start.max(head), e.last()));
            }
        }
        spans.sort_unstable();
        spans.dedup();
        Some(spans.into_iter().flat_map(|(a, b)| a..=b).collect())
    }

    /// Before an episodic step row is stored: whether it continues an episode whose
    /// rows were removed (`remove` of the open episode), which then takes the new row
    /// too. Such an add is refused before anything is stored when this handle may not
    /// remove, so an episode is never part removed.
    pub(crate) fn continues_removed_episode(&mut self) -> Result<bool> {
        let (Some(life), Some(table)) = (&self.parts.life, &self.parts.episodes) else {
            return Ok(false);
        };
        let removed = table
            .open()
            .is_some_and(|e| life.episode_removed(e, self.rows.head));
        if removed {
            self.ready_to_remove()?;
        }
        Ok(removed)
    }

    /// After episodic row `index` was stored with item states: removed with its
    /// episode when `continues_removed` (see `continues_removed_episode`); an add that
    /// ended an episode downsamples.
    pub(crate) fn after_episode_row(
        &mut self,
        index: u64,
        continues_removed: bool,
        ended: bool,
    ) -> Result<()> {
        if self.parts.life.is_none() {
            return Ok(());
        }
        if continues_removed {
            self.remove_for(&[index], Cause::Explicit);
        }
        // No `added()`: it wakes draws a rate limiter holds, which episodic buffers
        // refuse.
        if ended {
            self.downsample()?;
        }
        Ok(())
    }

    /// In an episodic buffer with item states: removes the rest of each episode a kill
    /// left part removed (its first live row removed, its last not), so an episode is
    /// removed whole or kept whole from the open on.
    pub(crate) fn finish_episode_removals(&mut self) -> Result<()> {
        let (Some(life), Some(table)) = (&self.parts.life, &self.parts.episodes) else {
            return Ok(());
        };
        let head = self.rows.head;
        // Each cut episode's last row, with the cause its first row was removed for.
        let cut: Vec<(u64, Cause)> = (table.iter())
            .filter(|e| life.episode_removed(e, head) && !life.is_removed(e.last()))
            .map(|e| {
                let cause = life.state(e.start.max(head)).removed;
                (e.last(), cause.unwrap_or(Cause::Explicit))
            })
            .collect();
        // An actor of a prioritized buffer may not remove (the owner holds the leaves):
        // its draws pass over the cut episode, and the writer's next open finishes it.
        let actor = self.rows.superblock.prioritized && self.parts.tree.is_actor();
        if cut.is_empty() || actor {
            return Ok(());
        }
        self.ready_to_remove()?;
        for (last, cause) in cut {
            self.remove_for(&[last], cause);
        }
        Ok(())
    }

    /// Zeroes the priority leaves of `slots`, whose items were just removed. A kill
    /// between the removal and this leaves the leaf: the next open zeroes the leaves of
    /// removed items when it recovers.
    fn zero_leaves(&mut self, slots: &[u64]) {
        if slots.is_empty() {
            return;
        }
        crate::killpoint::hit("remove-before-leaf");
        if let Some(tree) = self.parts.tree.tree_mut() {
            tree.zero_slots(slots);
        }
    }

    pub(crate) fn private_life(&mut self) -> Result<()> {
        let Some(life) = self.parts.life.as_mut() else {
            return Ok(());
        };
        if life.can_store() {
            return Ok(());
        }
        life.make_private(&*self.rows.io)?;
        self.publish_files_changed();
        Ok(())
    }

    /// After the rows of `request` at `indices` were handed out: a draw that removes
    /// removes them; any other draw (not a read at given indices) counts a use of
    /// each, and removes those it used up.
    fn counted_draw(&mut self, request: &Request<'_>, indices: &[u64]) -> Result<()> {
        if self.parts.life.is_none() || !(request.remove || request.draws()) {
            return Ok(());
        }
        if request.remove {
            self.remove_for(indices, removal_cause(request));
            return Ok(());
        }
        if self.rows.superblock.prioritized && self.parts.tree.is_actor() {
            // An actor draws uniformly; the owner of the leaves counts nothing here
            // for it to zero, so its uses are counted without removals.
            return Ok(());
        }
        self.private_life()?;
        let Some(life) = self.parts.life.as_mut() else {
            return Ok(());
        };
        let cap = self.rows.superblock.capacity;
        life.prefetch(indices);
        let mut note = note_in(self.parts.fragments.as_mut());
        let gone: Vec<u64> = indices
            .iter()
            .filter(|&&i| life.count_use(i))
            .inspect(|&&i| note(i))
            .map(|&i| i % cap)
            .collect();
        drop(note);
        self.zero_leaves(&gone);
        Ok(())
    }

    /// What each live item at `indices` is: whether it was removed (and why) and how many
    /// draws returned it (DI-engine's use count).
    pub(crate) fn item_states(&self, indices: &[u64]) -> Result<Vec<ItemState>> {
        let Some(life) = &self.parts.life else {
            return Err(self.no_item_states());
        };
        self.rows.check_live(indices)?;
        Ok(indices.iter().map(|&i| life.state(i)).collect())
    }

    /// Asks the rate limiter (buffers with one) whether a draw of `n` (`draw`, then
    /// counted) or an add of `n` may go ahead, waiting as `set_rate_limit_wait` says.
    pub(crate) fn admit(&self, draw: bool, n: u64) -> Result<()> {
        let Some(life) = &self.parts.life else {
            return Ok(());
        };
        let tail = self.rows.tail;
        life.admit(draw, n, || {
            Ok(Counts {
                inserts: tail - crate::format::lanes::lane_base(tail) - life.renames(),
                size: self.len(),
            })
        })
    }

    /// How long a draw or an add the rate limiter holds back waits for another process (a
    /// reader drawing, the writer adding) before it is `RateLimited`: `None` (the default)
    /// does not wait.
    pub(crate) fn set_rate_limit_wait(&mut self, wait: Option<Duration>) {
        if let Some(life) = &mut self.parts.life {
            life.wait = wait;
        }
    }

    /// How long a call the rate limiter holds back waits (see `set_rate_limit_wait`).
    pub(crate) fn rate_limit_wait(&self) -> Option<Duration> {
        self.parts.life.as_ref().and_then(|l| l.wait)
    }

    /// Items were added: handles waiting to draw (in any process) look again.
    pub(crate) fn added(&self) {
        if let Some(life) = &self.parts.life {
            life.added();
        }
    }

    /// Removed items still in the live range.
    pub(crate) fn removed_live(&self) -> u64 {
        self.parts
            .life
            .as_ref()
            .map_or(0, |l| l.removed_live().min(self.rows.len()))
    }

    pub(crate) fn no_item_states(&self) -> Error {
        Error::NoItemStates {
            dir: self.rows.dir.clone(),
        }
    }

    /// What a draw of `request` at `indices` leaves behind: uses and removals, by a
    /// handle that writes; nothing by a snapshot's.
    pub(crate) fn after_draw(&mut self, request: &Request<'_>, indices: &[u64]) -> Result<()> {
        if self.parts.life.is_none() || self.is_read_only() {
            return Ok(());
        }
        self.counted_draw(request, indices)
    }
}
