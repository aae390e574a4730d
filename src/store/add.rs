//! Adding rows: copy-on-write of snapshotted segments, eviction (whole episodes, eviction
//! records), the stamp protocol of each row, and what the progress page tells readers.

use std::ops::Range;

use crate::algo::windows::End;
use crate::column::{ABSENT, Column, match_columns, match_some_columns, match_var_columns};
use crate::error::{Error, Result};
use crate::format::heap::{SLOT_LEN, VarSlot};
use crate::format::progress::{EPOCH_OFF, HEAD_OFF, PID_OFF, SEALED_OFF, TAIL_OFF};
use crate::format::row::{FRAGMENT_END, RowTags, fragment_word};
use crate::format::row::{STEP_HEADER_LEN, StepHeader};
use crate::parts::episodes::StepInfo;
use crate::parts::hooks::NewRow;
use crate::parts::priorities::Priority;
use crate::parts::set::Records;
use crate::storage::{self};

use super::Store;
use super::commit::mark_changing;

/// Fields an add passes on the stack; more take a heap allocation.
const INLINE_FIELDS: usize = 16;

impl Store {
    /// Adds one item with a given priority instead of the largest seen so far (Ape-X actors
    /// compute initial priorities).
    pub(crate) fn add_with_priority<P: Priority>(
        &mut self,
        columns: &[Column<'_>],
        priority: P,
    ) -> Result<u64> {
        self.check_new_priorities(&[priority])?;
        let index = self.add(columns)?;
        self.update_priorities(&[index], &[priority])?;
        Ok(index)
    }
    /// `add_batch` with one priority per row.
    pub(crate) fn add_batch_with_priorities<P: Priority>(
        &mut self,
        columns: &[Column<'_>],
        priorities: &[P],
    ) -> Result<Range<u64>> {
        self.check_new_priorities(priorities)?;
        let mut order = std::mem::take(&mut self.scratch.order);
        let rows = match_columns(
            &self.rows.schema,
            columns,
            true,
            &mut order,
            &mut self.scratch.names,
        );
        self.scratch.order = order;
        let rows = rows?;
        if rows != priorities.len() {
            return Err(Error::CountMismatch {
                what: "add_batch_with_priorities: rows and priorities",
                expected: rows,
                got: priorities.len(),
            });
        }
        let added = self.add_batch(columns)?;
        let from = added.start.max(self.rows.head);
        let indices: Vec<u64> = (from..added.end).collect();
        let skip = (from - added.start) as usize;
        self.update_priorities(&indices, priorities.get(skip..).unwrap_or(&[]))?;
        Ok(added)
    }
    fn check_new_priorities<P: Priority>(&self, priorities: &[P]) -> Result<()> {
        self.writable()?;
        match self.parts.tree.tree() {
            Some(p) => p.check_values(self.rows.tail, priorities),
            None => Err(self.no_priorities()),
        }
    }
}

impl Store {
    /// Gives a tree that a restore linked a file of its own before the first store into
    /// it (the snapshot keeps its copy), and tells readers to map the new file. Fails
    /// before anything is stored, losing nothing.
    #[cold]
    pub(crate) fn private_tree(&mut self) -> Result<()> {
        if self.parts.tree.make_private(&*self.rows.io)? {
            self.publish_files_changed();
        }
        Ok(())
    }
    /// Stores a word of the progress page, if this handle has one (the writer's).
    #[inline(always)]
    pub(crate) fn publish(&mut self, off: usize, value: u64) {
        if let Some(p) = &mut self.progress {
            p.store(off, value);
        }
    }
    /// Tells readers that the lane's files were replaced (they remap): the epoch goes
    /// to the next even number. Whatever goes with the new files (a restore's head,
    /// tail and sealed bound) is stored before it, under an odd epoch: a reader that
    /// loads the new epoch then loads those, never the old range over the new files.
    pub(crate) fn publish_files_changed(&mut self) {
        if let Some(p) = &mut self.progress {
            let epoch = (p.load(EPOCH_OFF) | 1).wrapping_add(1);
            p.store(EPOCH_OFF, epoch);
        }
    }
    /// Tells readers that several files are about to be replaced one by one (a
    /// restore): an odd epoch, which readers wait out rather than map a mix.
    pub(crate) fn publish_files_changing(&mut self) {
        if let Some(p) = &mut self.progress {
            mark_changing(p);
        }
    }
    /// What a writer's open publishes: new files possibly (a restore, a recovery),
    /// the live range, what is sealed, and which process writes.
    /// The range goes out while the epoch is odd (readers wait), then the even epoch
    /// releases it with the files: published the other way round, a reader could map
    /// the restored files at the new epoch and still load the old head and tail, and
    /// take the rows those name for damage.
    pub(crate) fn publish_open(&mut self) {
        self.publish_files_changing();
        self.publish(HEAD_OFF, self.rows.head);
        self.publish(TAIL_OFF, self.rows.tail);
        self.publish(SEALED_OFF, self.rows.flushed_tail);
        self.publish(PID_OFF, u64::from(std::process::id()));
        self.publish_files_changed();
    }
}

impl Store {
    /// Makes the next `count` stores from `first_slot` safe: copies each segment that a
    /// snapshot links and that they would change, so the snapshot keeps its bytes
    /// (copy-on-write; only live rows are copied), then reserves the disk of each segment
    /// they reach that this handle has not reserved (with its slots' item state words),
    /// so no store faults for lack of space. Fails before anything is stored, losing
    /// nothing; a full disk is `DiskFull`.
    pub(crate) fn ensure_storable(&mut self, first_slot: u64, count: u64) -> Result<()> {
        // Adds write leaves (and evictions zero them): a linked tree is copied first.
        if self.parts.tree.is_shared() {
            self.private_tree()?;
        }
        if self.rows.ring.any_shared() {
            self.private_segments(first_slot, count)?;
        }
        // Most adds: every segment reserved since the first lap, and nothing is asked.
        if self.rows.ring.any_unreserved() {
            let (io, dir) = (&*self.rows.io, &self.rows.dir);
            let life = self.parts.life.is_some();
            self.rows
                .ring
                .reserve(io, first_slot, count, |first, slots| {
                    if life {
                        storage::reserve_life(io, dir, first, slots)?;
                    }
                    Ok(())
                })?;
        }
        Ok(())
    }

    /// Copies each segment a snapshot links that `count` stores from `first_slot` would
    /// change (`ensure_storable`).
    fn private_segments(&mut self, first_slot: u64, count: u64) -> Result<()> {
        // Each copy leaves one shared segment fewer, so this ends.
        while let Some(s) = self.rows.ring.first_shared(first_slot, count) {
            let live =
                self.rows
                    .ring
                    .rows_of(s, self.rows.head_slot, self.rows.tail - self.rows.head);
            let Some(old) = self.rows.ring.segment(s) else {
                break;
            };
            let seg = storage::copy_segment(
                &*self.rows.io,
                &self.rows.dir,
                &storage::SegmentSet::rows(&self.rows.superblock),
                s as u64,
                old,
                &live,
            )?;
            self.rows.ring.replace_segment(s, seg);
            self.commits.lane_dirty = true;
            self.publish_files_changed();
        }
        Ok(())
    }
    /// Stores one row at the tail, evicting the oldest row when the ring is full (or,
    /// with whole-episode eviction, the oldest row's episode). `reset`: the row begins
    /// an episode, so it ends no transition and gets no priority.
    #[inline(always)]
    pub(crate) fn push_row(
        &mut self,
        fields: &[&[u8]],
        step: Option<&[u8; STEP_HEADER_LEN]>,
        reset: bool,
        fragment_pos: u32,
    ) {
        let cap = self.rows.superblock.capacity;
        if self.rows.tail - self.rows.head == cap {
            if self.parts.evicts_by_episode(&self.rows.superblock) {
                self.evict_for_episodes();
            } else {
                self.rows.head += 1;
                self.rows.head_slot += 1;
                if self.rows.head_slot == cap {
                    self.rows.head_slot = 0;
                }
            }
            // Before the slot is overwritten: a reader that finds the slot's stamp
            // changed then finds its index no longer live, and redraws.
            self.publish(HEAD_OFF, self.rows.head);
        }
        let row = NewRow {
            slot: self.rows.tail_slot,
            index: self.rows.tail,
            reset,
            fragment: fragment_pos,
            head: self.rows.head,
        };
        let tags = RowTags {
            step,
            fragment: fragment_pos,
        };
        // Each part's share of the row is stored while the slot is marked "being
        // written" (see `Part::on_row`).
        let parts = &mut self.parts;
        self.rows.ring.write(row.slot, row.index, tags, fields, || {
            parts.on_row(&row);
            crate::killpoint::hit("before-stamp");
        });
        self.rows.tail += 1;
        self.rows.tail_slot += 1;
        if self.rows.tail_slot == cap {
            self.rows.tail_slot = 0;
        }
        self.publish(TAIL_OFF, self.rows.tail);
        if self.commits.behind.due(self.rows.tail) {
            self.send_rows_behind();
        }
    }
    /// A chunk of rows lies behind the tail: seal it and send it to disk (see
    /// `storage::behind`).
    #[cold]
    fn send_rows_behind(&mut self) {
        let (head, tail) = (self.rows.head, self.rows.tail);
        self.commits
            .behind
            .run(&mut self.rows.ring, &*self.rows.io, head, tail);
    }
    /// Eviction in an episodic buffer about to overwrite its oldest row, when something
    /// depends on the oldest row's episode (whole episodes, or priorities). With whole
    /// episodes the head moves past the oldest row's episode, unless that episode is the
    /// one being written (longer than the ring: it loses one row); the parts say which
    /// rows lose what (`Parts::head_passed`).
    #[cold]
    fn evict_for_episodes(&mut self) {
        let (sb, head) = (&self.rows.superblock, self.rows.head);
        let cap = sb.capacity;
        let to = self.parts.eviction_target(sb, head, self.rows.tail);
        // The old head's slot is the one being written. The other rows passed over
        // lose their stamps, so that recovery after a kill finds the head where it is
        // now (it walks back from the tail over intact rows), not at the last commit's
        // with these rows alive again (`ensure_storable_for_push` made their segments
        // private first).
        self.publish(HEAD_OFF, to);
        for index in head + 1..to {
            self.rows.ring.clear_stamp(index % cap);
        }
        self.parts.head_passed(cap, head, self.rows.head_slot, to);
        self.rows.head = to;
        self.rows.head_slot = (self.rows.head_slot + (to - head)) % cap;
    }
    /// Before storing `rows` more rows: the parts' checks that may fail (an eviction
    /// record made durable when the rows overwrite committed items).
    #[inline(always)]
    pub(crate) fn guard_evictions(&mut self, rows: u64) -> Result<()> {
        let records = Records {
            io: &*self.rows.io,
            manifest: self.commits.file.as_ref(),
            path: &self.commits.path,
            generation: self.commits.generation,
        };
        let live = (self.rows.head, self.rows.tail);
        match self
            .parts
            .before_add(&self.rows.superblock, live, rows, records)
        {
            Ok(()) => Ok(()),
            Err(e) => Err(self.poison(e)),
        }
    }
    /// `ensure_storable` before storing one row: the tail's segment, and with
    /// whole-episode eviction the segments of the rows the head will pass over (their
    /// stamps change).
    fn ensure_storable_for_push(&mut self) -> Result<()> {
        self.ensure_storable(self.rows.tail_slot, 1)?;
        self.guard_evictions(1)?;
        let (sb, head, tail) = (&self.rows.superblock, self.rows.head, self.rows.tail);
        let cap = sb.capacity;
        if sb.whole_episodes && tail - head == cap {
            let passed = self.parts.eviction_target(sb, head, tail) - head;
            if passed > 1 {
                self.ensure_storable((self.rows.head_slot + 1) % cap, passed - 1)?;
            }
        }
        Ok(())
    }
    /// Adds one item and returns its logical index.
    pub(crate) fn add(&mut self, columns: &[Column<'_>]) -> Result<u64> {
        // Buffers without item states (the hot path: W1 add1) go straight to the row.
        if self.parts.life.is_none() {
            return self.store_one(columns);
        }
        let added = self.add_under_policy(1, |b| b.store_one(columns).map(|i| i..i + 1))?;
        Ok(added.start)
    }
    /// Adds `rows` items given as columns of shape `[rows, field shape...]`, and returns
    /// their logical indices.
    pub(crate) fn add_batch(&mut self, columns: &[Column<'_>]) -> Result<Range<u64>> {
        if self.parts.life.is_none() {
            return self.store_batch(columns);
        }
        let rows = columns.first().map_or(0, |c| {
            c.rows()
                .unwrap_or_else(|| c.shape().first().copied().unwrap_or(0))
        });
        self.add_under_policy(rows as u64, |b| b.store_batch(columns))
    }
    /// An add of `rows` to a buffer with item states, `store` storing them: the rate
    /// limiter's leave, room made by the policy (kept items moved), the rows, then the
    /// policy's removals (downsampling, the reservoir's decisions).
    fn add_under_policy(
        &mut self,
        rows: u64,
        store: impl FnOnce(&mut Self) -> Result<Range<u64>>,
    ) -> Result<Range<u64>> {
        self.admit(false, rows)?;
        self.make_room_for_policy(rows)?;
        let added = store(self)?;
        self.added();
        self.downsample()?;
        self.reservoir_decide(added.clone())?;
        Ok(added)
    }
    /// `add` before the policy: the item stored.
    #[inline(always)]
    fn store_one(&mut self, columns: &[Column<'_>]) -> Result<u64> {
        self.writable()?;
        self.not_episodic("add")?;
        if self.rows.heap.is_some() {
            return self.add_with_values(columns, false).map(|r| r.start);
        }
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_columns(
            &self.rows.schema,
            columns,
            false,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|_| self.ensure_storable(self.rows.tail_slot, 1))
        .and_then(|()| self.guard_evictions(1));
        let result = checked.map(|_| {
            let index = self.rows.tail;
            let nf = order.len();
            let mut inline: [&[u8]; INLINE_FIELDS] = [&[]; INLINE_FIELDS];
            let mut heap: Vec<&[u8]>;
            let fields: &mut [&[u8]] = match inline.get_mut(..nf) {
                Some(f) => f,
                None => {
                    heap = vec![&[][..]; nf];
                    &mut heap
                }
            };
            for (slot, &pos) in fields.iter_mut().zip(&order) {
                *slot = columns.get(pos).map_or(&[][..], Column::bytes);
            }
            self.push_row(fields, None, false, FRAGMENT_END);
            index
        });
        self.scratch.order = order;
        result
    }
    /// `add_batch` before the policy: the rows stored.
    #[inline(always)]
    fn store_batch(&mut self, columns: &[Column<'_>]) -> Result<Range<u64>> {
        self.writable()?;
        self.not_episodic("add_batch")?;
        if self.rows.heap.is_some() {
            return self.add_with_values(columns, true);
        }
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_columns(
            &self.rows.schema,
            columns,
            true,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|rows| {
            self.ensure_storable(self.rows.tail_slot, rows as u64)?;
            self.guard_evictions(rows as u64)?;
            Ok(rows)
        });
        let result = checked.map(|rows| {
            let first = self.rows.tail;
            let rows = rows as u64;
            let skip = self.skip_overwritten(rows);
            let nf = order.len();
            let sizes = self.rows.schema.field_sizes();
            let cols: Vec<&[u8]> = order
                .iter()
                .map(|&p| columns.get(p).map_or(&[][..], Column::bytes))
                .collect();
            let mut fields: Vec<&[u8]> = vec![&[]; nf];
            for r in skip as usize..rows as usize {
                for ((dst, col), &size) in fields.iter_mut().zip(&cols).zip(&sizes) {
                    *dst = col.get(r * size..(r + 1) * size).unwrap_or(&[]);
                }
                self.push_row(&fields, None, false, fragment_word(r as u64, rows));
            }
            first..first + rows
        });
        self.scratch.order = order;
        result
    }
    /// `add` (`batch` false) or `add_batch` of a schema with variable-length fields:
    /// every column and value is checked first; then room is made in the chunk ring
    /// (the oldest items go when the values would overwrite chunks they name, with an
    /// eviction record first if a commit covers them); then the values are written
    /// into fresh chunks, each stamped complete, and only then the rows that name them.
    fn add_with_values(&mut self, columns: &[Column<'_>], batch: bool) -> Result<Range<u64>> {
        let max = usize::try_from(self.value_room()).unwrap_or(usize::MAX);
        let mut order = std::mem::take(&mut self.scratch.order);
        let mut var_order = Vec::new();
        let schema = &self.rows.schema;
        let matched = match_columns(schema, columns, batch, &mut order, &mut self.scratch.names)
            .and_then(|n| {
                let fixed = schema.fields().first().map(|f| (n, f.name()));
                match_var_columns(schema, columns, fixed, max, false, &mut var_order)
            });
        let rows = match matched {
            Ok(rows) => rows as u64,
            Err(e) => {
                self.scratch.order = order;
                return Err(e);
            }
        };
        let cap = self.rows.superblock.capacity;
        // Rows that later rows of the same batch would evict are never written.
        let skip = rows.saturating_sub(cap);
        let column = |p: usize| columns.get(p).copied();
        let values: Vec<&[u8]> = (skip..rows)
            .flat_map(|r| {
                var_order
                    .iter()
                    .map(move |&p| column(p).map_or(&[][..], |c| c.value_of(r as usize)))
            })
            .collect();
        let checked = self.room_for_values(&values, rows - skip, |s| {
            s.ensure_storable(s.rows.tail_slot, rows)?;
            s.guard_evictions(rows)
        });
        if let Err(e) = checked {
            self.scratch.order = order;
            return Err(e);
        }
        let first = self.rows.tail;
        self.skip_overwritten(rows);
        let encoded = self.write_values(&values);
        let nvar = var_order.len();
        let sizes = self.rows.schema.field_sizes();
        let mut fields: Vec<&[u8]> = Vec::with_capacity(order.len() + nvar);
        for (j, r) in (skip..rows).enumerate() {
            let r = r as usize;
            fields.clear();
            for (&p, &size) in order.iter().zip(&sizes) {
                let bytes = column(p).map_or(&[][..], |c| c.bytes());
                let one = if batch {
                    bytes.get(r * size..(r + 1) * size).unwrap_or(&[])
                } else {
                    bytes
                };
                fields.push(one);
            }
            for slot in encoded.get(j * nvar..(j + 1) * nvar).unwrap_or(&[]) {
                fields.push(slot);
            }
            let word = if batch {
                fragment_word(r as u64, rows)
            } else {
                FRAGMENT_END
            };
            self.push_row(&fields, None, false, word);
        }
        self.scratch.order = order;
        Ok(first..first + rows)
    }
    /// Reserves on disk the chunk segments the next `needed` chunks lie in (they are
    /// sparse until the writer first stores there): a full disk is `DiskFull` here,
    /// before anything is stored or evicted, never a fault through the mapping later.
    pub(crate) fn reserve_chunks(&mut self, needed: u64) -> Result<()> {
        match &mut self.rows.heap {
            Some(h) => h.reserve(&*self.rows.io, needed),
            None => Ok(()),
        }
    }

    /// Copy-on-write of the chunk segments a snapshot links that the next `needed`
    /// chunks would change (after `make_room_for_chunks`: only chunks live items still
    /// name are copied).
    pub(crate) fn ensure_private_chunks(&mut self, needed: u64) -> Result<()> {
        let (head, tail, cap) = (
            self.rows.head,
            self.rows.tail,
            self.rows.superblock.capacity,
        );
        // Most adds: no snapshot links a chunk segment, and nothing is read for this.
        let Some(heap) = self.rows.heap.as_ref().filter(|h| h.any_shared()) else {
            return Ok(());
        };
        let chunk = heap.chunk_bytes();
        let next = heap.next_chunk();
        let live_from = if head < tail {
            crate::parts::recovery::item_slots(&self.rows.ring, self.rows.ring.layout(), cap, head)
                .iter()
                .map(|s| s.pos / chunk)
                .min()
                .unwrap_or(next)
        } else {
            next
        };
        let copied = match &mut self.rows.heap {
            Some(h) => h.make_private(
                &*self.rows.io,
                &self.rows.dir,
                &self.rows.superblock,
                live_from,
                next,
                needed,
            )?,
            None => false,
        };
        if copied {
            self.commits.lane_dirty = true;
            self.publish_files_changed();
        }
        Ok(())
    }
    /// Of a batch of `rows` longer than the capacity, the first rows would be evicted
    /// by later rows of the same batch, so they are never written: the tail (and the
    /// head) move past them. Returns how many.
    fn skip_overwritten(&mut self, rows: u64) -> u64 {
        let cap = self.rows.superblock.capacity;
        let skip = rows.saturating_sub(cap);
        if skip > 0 {
            self.rows.tail += skip;
            self.rows.head = self.rows.head.max(self.rows.tail.saturating_sub(cap));
            self.rows.head_slot = self.rows.head % cap;
            self.rows.tail_slot = self.rows.tail % cap;
        }
        skip
    }
    /// Makes room for `needed` more chunks: the oldest items whose values lie in the
    /// chunks those would overwrite are evicted first. Their rows lose their stamps
    /// (recovery after a kill must not bring them back over chunks rewritten since)
    /// and their priorities; readers see the new head before any chunk changes. The
    /// eviction record a committed item needs is made durable before anything moves.
    /// Evicts the oldest items whose values lie in chunks the next `needed` would reuse.
    /// Unless the buffer evicts for room, only items the add's `rows` replace in the
    /// ring anyway (or removed ones) may go: needing another is `ValueSpaceFull`,
    /// refused before anything changes, so no item is dropped before capacity.
    fn make_room_for_chunks(&mut self, needed: u64, rows: u64) -> Result<()> {
        let Some(heap) = &self.rows.heap else {
            return Ok(());
        };
        let bound = (heap.next_chunk() + needed).saturating_sub(heap.capacity());
        let chunk = heap.chunk_bytes();
        let (sb, head, tail) = (&self.rows.superblock, self.rows.head, self.rows.tail);
        let cap = sb.capacity;
        let layout = self.rows.ring.layout();
        let names_below = |i: u64| {
            crate::parts::recovery::item_slots(&self.rows.ring, layout, cap, i)
                .iter()
                .any(|s| s.pos / chunk < bound)
        };
        let mut to = head;
        while to < tail && names_below(to) {
            to += 1;
        }
        if to == head {
            return Ok(());
        }
        // With whole-episode eviction the head lands on an episode's first row: past
        // the rest of the episode it would cut, unless that one is still being written
        // (it then loses its first rows, as a ring full of one episode does).
        if sb.whole_episodes {
            let cut = self.parts.episodes.as_ref().and_then(|e| e.of(to));
            if let Some(e) = cut.filter(|e| e.start < to && e.end.is_some()) {
                to = (e.last() + 1).min(tail);
            }
        }
        if !sb.evict_for_room {
            let replaced = (tail - head + rows).saturating_sub(cap);
            let life = self.parts.life.as_ref();
            let removed = |i: u64| life.is_some_and(|l| l.is_removed(i));
            let early = (head..to).filter(|&i| !removed(i)).count() as u64;
            if early > replaced {
                return Err(Error::ValueSpaceFull {
                    needed: needed * heap.ring_stride(),
                    limit: heap.capacity() * heap.ring_stride(),
                    live: tail - head,
                    early: early - replaced,
                    capacity: cap,
                });
            }
        }
        self.pass_head(to)
    }

    /// Moves the head to `to`, ending the items before it as an eviction for room does:
    /// the eviction record a committed one needs is made durable first; readers see
    /// the new head before any row changes; the rows lose their stamps (recovery must
    /// never bring one back over chunks reused since) and their priorities.
    pub(crate) fn pass_head(&mut self, to: u64) -> Result<()> {
        let (sb, head) = (&self.rows.superblock, self.rows.head);
        let cap = sb.capacity;
        let records = Records {
            io: &*self.rows.io,
            manifest: self.commits.file.as_ref(),
            path: &self.commits.path,
            generation: self.commits.generation,
        };
        if let Err(e) = self.parts.before_head_moves(sb, head, to, records) {
            return Err(self.poison(e));
        }
        self.ensure_storable(self.rows.head_slot, to - head)?;
        self.publish(HEAD_OFF, to);
        for index in head..to {
            self.rows.ring.clear_stamp(index % cap);
        }
        self.parts.evicted_for_space(self.rows.head_slot, head, to);
        self.rows.head = to;
        self.rows.head_slot = to % cap;
        Ok(())
    }
    /// Before storing one episodic row (`add_reset` with `partial`, `add_step`): room
    /// for the row (`ensure_storable_for_push`) and, with variable-length fields, its
    /// values checked, written into fresh chunks of the chunk ring and stamped complete,
    /// in the order `add_with_values` keeps (disk for the chunks first, then the row's
    /// segment and eviction record, then room in the chunk ring, then copy-on-write).
    /// Returns the slots the row names its values by, in schema order; a reset row's
    /// variable fields left out are empty values. Nothing is stored when it fails.
    fn prepare_step(
        &mut self,
        columns: &[Column<'_>],
        partial: bool,
    ) -> Result<Vec<[u8; SLOT_LEN]>> {
        if self.rows.heap.is_none() {
            self.ensure_storable_for_push()?;
            return Ok(Vec::new());
        }
        let max = usize::try_from(self.value_room()).unwrap_or(usize::MAX);
        let mut var_order = Vec::new();
        let one = Some((1, "(one step)"));
        match_var_columns(
            &self.rows.schema,
            columns,
            one,
            max,
            partial,
            &mut var_order,
        )?;
        let values: Vec<&[u8]> = (var_order.iter())
            .map(|&p| columns.get(p).map_or(&[][..], |c| c.value_of(0)))
            .collect();
        self.room_for_values(&values, 1, Self::ensure_storable_for_push)?;
        Ok(self.write_values(&values))
    }

    /// Room in the chunk ring for `values`, which the next `rows` rows will name:
    /// refused when they alone need more chunks than the ring holds; else disk for the
    /// chunks first (a full disk then fails the add before anything is evicted), then
    /// `row_room` (the rows' own segments and eviction record), then the oldest items
    /// whose chunks they reuse evicted, then copy-on-write of linked chunk segments.
    fn room_for_values(
        &mut self,
        values: &[&[u8]],
        rows: u64,
        row_room: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let total: u64 = values.iter().map(|v| v.len() as u64).sum();
        let needed = self.rows.heap.as_ref().map_or(0, |h| h.chunks_for(total));
        let chunks = self.rows.heap.as_ref().map_or(0, |h| h.capacity());
        if needed > chunks {
            return Err(Error::ValueTooLong {
                field: "(the variable-length values of one call)".into(),
                row: 0,
                len: usize::try_from(total).unwrap_or(usize::MAX),
                max: usize::try_from(self.value_room()).unwrap_or(usize::MAX),
            });
        }
        self.reserve_chunks(needed)?;
        row_room(self)?;
        self.make_room_for_chunks(needed, rows)?;
        self.ensure_private_chunks(needed)
    }

    /// Writes `values` into fresh chunks, each stamped complete (after
    /// `room_for_values`), and returns the encoded slots that name them, in order.
    fn write_values(&mut self, values: &[&[u8]]) -> Vec<[u8; SLOT_LEN]> {
        let mut slots: Vec<VarSlot> = Vec::with_capacity(values.len());
        if let Some(heap) = &mut self.rows.heap {
            heap.write(values, &mut slots);
        }
        slots.iter().map(VarSlot::encode).collect()
    }

    /// Begins an episode with what `env.reset()` returned: the observation fields (any
    /// field left out is stored as zeros).
    pub(crate) fn add_reset(&mut self, columns: &[Column<'_>]) -> Result<StepInfo> {
        self.writable()?;
        self.episodes_ref()?;
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_some_columns(
            &self.rows.schema,
            columns,
            false,
            true,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|_| self.prepare_step(columns, true));
        let result = checked.map(|slots| {
            let index = self.rows.tail;
            let header = match &mut self.parts.episodes {
                Some(e) => e.begin(index),
                None => StepHeader::default(),
            };
            let sizes = self.rows.schema.field_sizes();
            let largest = sizes.iter().copied().max().unwrap_or(0);
            if self.scratch.zeros.len() < largest {
                self.scratch.zeros.resize(largest, 0);
            }
            let zeros = std::mem::take(&mut self.scratch.zeros);
            let fields: Vec<&[u8]> = order
                .iter()
                .zip(&sizes)
                .map(
                    |(&pos, &size)| match columns.get(pos).filter(|_| pos != ABSENT) {
                        Some(c) => c.bytes(),
                        None => zeros.get(..size).unwrap_or(&[]),
                    },
                )
                .chain(slots.iter().map(|s| &s[..]))
                .collect();
            self.push_row(&fields, Some(&header.encode()), true, 0);
            drop(fields);
            self.scratch.zeros = zeros;
            StepInfo {
                index,
                episode: header.episode,
                t: 0,
                ended: None,
            }
        });
        self.scratch.order = order;
        result
    }

    /// Adds a whole episode in one call (how RLlib's new stack and UnstableBaselines add
    /// data): `observations` hold the observation fields with `T + 1` rows (what
    /// `env.reset()` returned, then what each step led to), `steps` every other field with
    /// `T` rows (each step's action, reward, ...).
    pub(crate) fn add_episode(
        &mut self,
        observations: &[Column<'_>],
        steps: &[Column<'_>],
        terminated: bool,
        truncated: bool,
    ) -> Result<crate::EpisodeInfo> {
        self.writable()?;
        self.episodes_ref()?;
        let rows = observations.first().map_or(0, Column::batch_rows);
        let bad = |name: &str, got: usize, want: usize| Error::ShapeMismatch {
            field: name.to_owned(),
            expected: vec![want],
            got: vec![got],
        };
        if rows == 0 {
            return Err(Error::EpisodeOrder(
                "an episode has at least its reset's observation: no observation rows given".into(),
            ));
        }
        for c in observations {
            if c.batch_rows() != rows {
                return Err(bad(c.name(), c.batch_rows(), rows));
            }
        }
        for c in steps {
            if c.batch_rows() != rows - 1 {
                return Err(bad(c.name(), c.batch_rows(), rows - 1));
            }
        }
        let first = self.add_reset(&rows_of(observations, 0))?;
        for r in 1..rows {
            let mut cols = rows_of(observations, r);
            cols.extend(rows_of(steps, r - 1));
            let last = r == rows - 1;
            self.add_step(&cols, last && terminated, last && truncated)?;
        }
        self.episode_record(first.index)
    }

    /// Adds what `env.step()` returned to the open episode: every field of the schema (the
    /// action taken, its reward, the observation it led to), and whether the episode
    /// terminated or was truncated here.
    pub(crate) fn add_step(
        &mut self,
        columns: &[Column<'_>],
        terminated: bool,
        truncated: bool,
    ) -> Result<StepInfo> {
        self.writable()?;
        let reward_field = self.episodes_ref()?.reward_field();
        if self.episodes_ref()?.open().is_none() {
            return Err(Error::EpisodeOrder(
                "no episode is open: begin one with add_reset".into(),
            ));
        }
        let continues_removed = self.continues_removed_episode()?;
        let mut order = std::mem::take(&mut self.scratch.order);
        let checked = match_columns(
            &self.rows.schema,
            columns,
            false,
            &mut order,
            &mut self.scratch.names,
        )
        .and_then(|_| self.prepare_step(columns, false));
        let result = checked.and_then(|slots| {
            let reward = reward_field.map_or(0.0, |(f, dtype)| {
                let pos = order.get(f).copied().unwrap_or(ABSENT);
                dtype.decode_f64(columns.get(pos).map_or(&[][..], Column::bytes))
            });
            let end = if terminated {
                Some(End::Terminated)
            } else if truncated {
                Some(End::Truncated)
            } else {
                None
            };
            let index = self.rows.tail;
            let (header, info) = match &mut self.parts.episodes {
                Some(e) => e.step(index, reward, end)?,
                None => {
                    return Err(Error::NotEpisodic {
                        dir: self.rows.dir.clone(),
                    });
                }
            };
            let fields: Vec<&[u8]> = order
                .iter()
                .map(|&p| columns.get(p).map_or(&[][..], Column::bytes))
                .chain(slots.iter().map(|s| &s[..]))
                .collect();
            self.push_row(&fields, Some(&header.encode()), false, 0);
            Ok(info)
        });
        self.scratch.order = order;
        let info = result?;
        self.after_episode_row(info.index, continues_removed, info.ended.is_some())?;
        Ok(info)
    }
}

/// Row `r` of each of `columns`, as `add` takes one item.
fn rows_of<'a>(columns: &[Column<'a>], r: usize) -> Vec<Column<'a>> {
    columns.iter().filter_map(|c| c.row(r)).collect()
}
