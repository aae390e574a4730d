//! The read side every handle has: the buffer's folder, schema and ring of rows, the
//! live range and what is sealed, and the sampling stream. The writer keeps it current
//! as it adds; a reader sets it from the writer's progress page. Draws and gathers are
//! here once, so the writer and the reader copy rows the same way.

use std::ops::Range;
use std::path::PathBuf;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::groups::{GroupCount, GroupIndex, KeyField, pick_from_groups, pick_groups, render_key};
use super::stream::Draws;
use crate::algo::sample::{SampleSpec, draw_uniform, draw_uniform_skipping};
use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::format::heap::VarSlot;
use crate::format::manifest::Superblock;
use crate::parts::config::Stats;
use crate::parts::heap::Heap;
use crate::parts::lifecycle::Lifecycle;
use crate::parts::priorities::{LiveRange, Priorities, PrioritySpec};
use crate::request::{Pick, Request};
use crate::schema::{Schema, VarField};
use crate::sink::{Filled, Layout, Own, Sink, ValuesOut, check_rows, var_obs_mask};
use crate::storage;
use crate::storage::io::IoRef;
use crate::storage::map::Found;
use crate::storage::pread::Missed;
use crate::storage::ring::{Live, Ring};

/// The rows of a buffer as one handle sees them. Nominally `pub` for the sealed trait
/// `Lanes` reads its lanes through; callers can name neither.
#[derive(Debug)]
#[expect(
    unnameable_types,
    reason = "sealed: callers may reach it through a public trait but not name or implement it"
)]
pub struct Rows {
    pub(crate) dir: PathBuf,
    pub(crate) io: IoRef,
    pub(crate) superblock: Superblock,
    pub(crate) schema: Schema,
    pub(crate) ring: Ring,
    /// The live logical indices are `head..tail`, in slots `head_slot..tail_slot`.
    pub(crate) head: u64,
    pub(crate) tail: u64,
    pub(crate) head_slot: u64,
    pub(crate) tail_slot: u64,
    /// Items dropped by `clear` (the rest of `head` is eviction).
    pub(crate) cleared: u64,
    /// Items below this index are sealed (checksummed) and covered by a commit.
    pub(crate) flushed_tail: u64,
    /// Reads check sealed rows against their checksums (see `set_read_checks`).
    pub(crate) read_checks: bool,
    /// The sampling stream.
    pub(crate) draws: Draws,
    /// The chunk ring of a buffer whose items have variable-length fields.
    pub(crate) heap: Option<Heap>,
    /// The live items by group key, for stratified draws (built when first asked).
    pub(crate) groups: Option<GroupIndex>,
}

impl Rows {
    /// Records that every segment (of the rows and of the chunk ring) is now linked by
    /// another name: a snapshot was taken.
    pub(crate) fn mark_all_shared(&mut self) {
        self.ring.mark_all_shared();
        if let Some(h) = &mut self.heap {
            h.ring_mut().mark_all_shared();
        }
    }

    /// Re-reads each segment's link count (after snapshots were deleted).
    pub(crate) fn refresh_shared(&mut self) {
        self.ring.refresh_shared();
        if let Some(h) = &mut self.heap {
            h.ring_mut().refresh_shared();
        }
    }

    /// Items live.
    pub(crate) fn len(&self) -> u64 {
        self.tail - self.head
    }

    /// The live logical indices.
    pub(crate) fn live(&self) -> Range<u64> {
        self.head..self.tail
    }

    /// The live range as the priority tree's draws take it.
    pub(crate) fn live_range(&self) -> LiveRange {
        LiveRange {
            head: self.head,
            head_slot: self.head_slot,
            tail: self.tail,
        }
    }

    /// Where reads find the live rows, and below which index they check checksums.
    pub(crate) fn live_rows(&self) -> Live {
        Live {
            head: self.head,
            head_slot: self.head_slot,
            sealed: if self.read_checks {
                self.flushed_tail
            } else {
                0
            },
        }
    }

    /// Counters and sizes, with the commit generation, the tree (if this handle owns
    /// one) and the item states (if the buffer keeps them) that the handle knows.
    pub(crate) fn stats_with(
        &self,
        generation: u64,
        tree: Option<&Priorities>,
        life: Option<&Lifecycle>,
    ) -> Stats {
        let stats = self.stats(generation, tree);
        match life {
            Some(l) => {
                let removed = l.removed_live().min(self.len());
                Stats {
                    len: self.len() - removed,
                    removed,
                    removals: l.removals(),
                    moved: l.renames(),
                    ..stats
                }
            }
            None => stats,
        }
    }

    /// Counters and sizes, with the commit generation and the tree (if this handle
    /// owns one) that the handle knows.
    pub(crate) fn stats(&self, generation: u64, tree: Option<&Priorities>) -> Stats {
        Stats {
            len: self.len(),
            capacity: self.superblock.capacity,
            head: self.head,
            tail: self.tail,
            // A lane's indices start at its base (`K << 56`): the counters count items.
            added: self.tail - crate::format::lanes::lane_base(self.tail),
            evicted: (self.head - crate::format::lanes::lane_base(self.head))
                .saturating_sub(self.cleared),
            cleared: self.cleared,
            sampled: self.draws.sampled,
            bytes_on_disk: storage::bytes_on_disk(&self.dir, &self.superblock),
            bytes_at_most: storage::bytes_at_most(&self.dir, &self.superblock),
            generation,
            priority_updates: tree.map_or(0, Priorities::updates),
            stale_updates: tree.map_or(0, Priorities::stale_updates),
            removed: 0,
            removals: crate::parts::lifecycle::Removals::default(),
            moved: 0,
        }
    }

    /// Restarts the sampling RNG from `seed`.
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.draws.seed = seed;
        self.draws.rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// Draws indices as `spec` says into `out`, advancing the RNG, without gathering;
    /// with item states, never a removed one.
    pub(crate) fn draw_indices(
        &mut self,
        spec: &SampleSpec,
        life: Option<&Lifecycle>,
        out: &mut Vec<u64>,
    ) -> Result<()> {
        let rng = &mut self.draws.rng;
        match life {
            Some(l) => {
                let live = (self.head, self.tail, l.removed_live());
                // One handle draws at a time (`&mut`): the lock is never contended, and a
                // panic in another thread leaves a list whose every state is valid.
                let mut list = l.live_list.lock().unwrap_or_else(|p| p.into_inner());
                draw_uniform_skipping(rng, spec, live, l, &mut list, out)?;
            }
            None => draw_uniform(rng, spec, self.head, self.tail, out)?,
        }
        self.draws.sampled += out.len() as u64;
        Ok(())
    }

    /// Picks the rows of `request` that need no priority tree (uniform, given) into
    /// `indices`; for a draw by priority, sizes `indices` and `weights` for it and
    /// returns the spec, for the handle to draw from the tree it keeps.
    /// `sample(2**45)` is `TooLarge` here, before anything is allocated.
    pub(crate) fn pick_unless_priority(
        &mut self,
        request: &Request<'_>,
        life: Option<&Lifecycle>,
        indices: &mut Vec<u64>,
        weights: &mut Vec<f32>,
    ) -> Result<Option<PrioritySpec>> {
        check_rows(request.n, self.schema.item_bytes())?;
        weights.clear();
        indices.clear();
        match request.pick {
            Pick::Uniform if !request.group_by.is_empty() => {
                self.pick_stratified(request.n, request.group_by, life, indices)?;
            }
            Pick::Uniform => self.draw_indices(&SampleSpec::of(request), life, indices)?,
            Pick::Given(given) => {
                self.check_live(given)?;
                if !request.include_removed {
                    check_not_removed(life, given)?;
                }
                indices
                    .try_reserve(given.len())
                    .map_err(|_| Error::OutOfMemory {
                        what: format!("the {} indices of a read", given.len()),
                        bytes: (given.len() as u64).saturating_mul(8),
                    })?;
                indices.extend_from_slice(given);
                if request.drawn {
                    self.draws.sampled += given.len() as u64;
                }
            }
            Pick::Oldest => {
                self.pick_oldest(request.n, life, indices)?;
                self.draws.sampled += indices.len() as u64;
            }
            Pick::Priority { beta } => {
                indices.resize(request.n, 0);
                weights.resize(request.n, 0.0);
                return Ok(Some(PrioritySpec::of(request, beta)));
            }
        }
        Ok(None)
    }

    /// The oldest live items not removed, up to `n`, into `indices`; `Empty` when none
    /// is. With item states the walk starts at the part's hint of the first item that
    /// may be live, so a queue consumed oldest first is not walked again each call.
    fn pick_oldest(
        &self,
        n: usize,
        life: Option<&Lifecycle>,
        indices: &mut Vec<u64>,
    ) -> Result<()> {
        let from = life.map_or(self.head, |l| l.first_maybe_live().max(self.head));
        let mut first = None;
        for i in from..self.tail {
            if indices.len() == n {
                break;
            }
            if life.is_some_and(|l| l.is_removed(i)) {
                continue;
            }
            first.get_or_insert(i);
            indices.push(i);
        }
        if let Some(l) = life {
            l.note_first_maybe_live(first.unwrap_or(self.tail));
        }
        match indices.is_empty() {
            true => Err(Error::Empty),
            false => Ok(()),
        }
    }

    /// Whether live `index` is the head row of an episodic buffer and a step whose
    /// observation row the ring has evicted: it ends no transition the buffer can
    /// return, so it keeps no priority (eviction zeroed its leaf, an open zeroes it
    /// again, and a priority update skips it as stale).
    pub(crate) fn is_cut_head(&self, index: u64) -> bool {
        self.superblock.episodic
            && index == self.head
            && self.head < self.tail
            && self.ring.step_header(self.head_slot).t > 0
    }

    /// `Evicted` for the first of `indices` that is not live.
    pub(crate) fn check_live(&self, indices: &[u64]) -> Result<()> {
        match indices.iter().find(|&&i| i < self.head || i >= self.tail) {
            Some(&index) => Err(Error::Evicted {
                index,
                head: self.head,
                tail: self.tail,
            }),
            None => Ok(()),
        }
    }

    /// Copies the live items at `indices` into per-field outputs (one per field, each
    /// `indices.len()` items long: a checked layout's).
    pub(crate) fn gather_into(&self, indices: &[u64], outs: &mut [&mut [u8]]) -> Result<()> {
        self.check_live(indices)?;
        self.ring
            .gather(self.live_rows(), indices, outs)
            .map_err(|m| self.stamp_error(indices, m))
    }

    /// Asks `sink` for the arrays of `request`, `units` units of `rows` rows in all.
    pub(crate) fn open_sink<'s>(
        &self,
        request: &Request<'_>,
        units: usize,
        rows: usize,
        sink: &'s mut dyn Sink,
    ) -> Result<Filled<'s>> {
        let layout = Layout::of(&self.schema, request, units, rows)?;
        Filled::from_sink(&layout, sink, self.schema.len())
    }

    /// The items at `indices` into `sink`, as [`Request::at`] draws them: every index
    /// live and, with item states, not removed.
    pub(crate) fn read_into(
        &self,
        indices: &[u64],
        life: Option<&Lifecycle>,
        sink: &mut dyn Sink,
    ) -> Result<()> {
        self.check_live(indices)?;
        check_not_removed(life, indices)?;
        let n = indices.len();
        let mut f = self.open_sink(&Request::at(indices).into(), n, n, sink)?;
        self.gather_into(indices, &mut f.row)?;
        f.put(Own::Indices, bytemuck::cast_slice(indices));
        drop(f);
        self.put_values(indices, sink)
    }

    /// The values of every variable-length field of the live items at `indices` into
    /// `sink`, after their rows were gathered. Every slot is checked before a byte is
    /// read or allocated for it (a damaged slot is an error, never a huge allocation);
    /// each value is copied and then each chunk it lies in checked (its stamp, and its
    /// crc when a flush sealed the item); and the item's row stamp is loaded before its
    /// slots are read and again after its values were copied. A writer in another
    /// process that passed the item meanwhile makes this `Evicted` naming it (a draw
    /// then draws again): a value is never served mixed or with another item's slot.
    /// A sink that takes every field's storage at once ([`Sink::all_values`]) gets each
    /// row's values copied together, in the order they lie in the chunk ring, each
    /// chunk checked once; any other gets them field by field.
    pub(crate) fn put_values(&self, indices: &[u64], sink: &mut dyn Sink) -> Result<()> {
        let Some(heap) = &self.heap else {
            return Ok(());
        };
        let fields: Vec<&VarField> = self.schema.var_fields().iter().collect();
        let nvar = fields.len();
        if nvar == 0 {
            return Ok(());
        }
        // Row-major: item `r`'s slots are `slots[r * nvar..][..nvar]`.
        let mut slots = Vec::with_capacity(indices.len() * nvar);
        let mut lengths: Vec<Vec<u64>> = vec![Vec::with_capacity(indices.len()); nvar];
        for &index in indices {
            self.item_slots(heap, index, &fields, &mut slots)?;
        }
        for (row, _) in slots.chunks(nvar).zip(indices) {
            for (slot, l) in row.iter().zip(lengths.iter_mut()) {
                l.push(u64::from(slot.len));
            }
        }
        let total = |v: usize| lengths.get(v).map_or(0, |l| l.iter().sum::<u64>() as usize);
        let short = |v: usize, got: usize| Error::OutputSize {
            field: fields.get(v).map_or("", |f| f.name()).to_owned(),
            expected: total(v),
            got,
        };
        if let Some(mut outs) = sink.all_values(&fields, &lengths)? {
            if outs.len() != nvar {
                // A sink's bug: one storage per field was asked for.
                return Err(Error::OutputSize {
                    field: "(one storage per variable-length field)".into(),
                    expected: nvar,
                    got: outs.len(),
                });
            }
            let mut at = vec![0usize; nvar];
            for (r, (&index, row)) in indices.iter().zip(slots.chunks(nvar)).enumerate() {
                for (v, ((slot, out), at)) in row.iter().zip(&mut outs).zip(&mut at).enumerate() {
                    let got = out_len(out);
                    let dst =
                        value_dst(out, r, at, slot.len as usize).ok_or_else(|| short(v, got))?;
                    dst.copy(heap, *slot);
                }
                let sealed = self.read_checks && index < self.flushed_tail;
                let checked = heap.check_values(row, sealed).map_err(|(v, miss)| {
                    let name = fields.get(v).map_or("", |f| f.name());
                    heap.error(&self.dir, index, name, miss)
                });
                // The row changed under the read (another process's writer passed the
                // item): whatever the read found is not this item's.
                if self.ring.stamp(index % self.superblock.capacity)
                    != crate::format::row::stamp_of(index)
                {
                    return Err(self.evicted(index));
                }
                checked?;
            }
            return Ok(());
        }
        let rows: Vec<Option<u64>> = indices.iter().map(|&i| Some(i)).collect();
        let held = |_: u64| Ok((self, heap));
        for (v, field) in fields.iter().enumerate() {
            let l = lengths.get(v).map_or(&[][..], Vec::as_slice);
            let mut out = sink.values(field, l)?;
            copy_field(&mut out, (field, field.name()), v, &rows, &slots, &held)?;
        }
        Ok(())
    }

    /// Copies the value `slot` names of live item `index` (field `field`) into `dst`
    /// and checks it: each chunk's stamp after the copy, and its crc once a flush
    /// sealed the item. The item's row stamp is loaded again after the copy: a writer
    /// in another process that passed the item meanwhile makes this `Evicted`, never a
    /// value served mixed.
    fn read_value(
        &self,
        heap: &Heap,
        index: u64,
        field: &str,
        slot: VarSlot,
        dst: ValueDst<'_>,
    ) -> Result<()> {
        let sealed = self.read_checks && index < self.flushed_tail;
        dst.copy(heap, slot);
        let read = heap
            .check_values(&[slot], sealed)
            .map_err(|(_, m)| heap.error(&self.dir, index, field, m));
        if self.ring.stamp(index % self.superblock.capacity) != crate::format::row::stamp_of(index)
        {
            return Err(self.evicted(index));
        }
        read
    }

    /// The values of a transition or sequence draw, one per position (unit after
    /// unit; `None`, a padding position, is an empty value): each observation field
    /// (`obs` names them) from the `obs` rows and, as `next_<name>`, from the `next`
    /// rows (windows have none); every other field from the `step` rows. See
    /// [`put_values_of`].
    pub(crate) fn put_step_values(
        &self,
        obs_names: &[&str],
        (obs, step, next): (Positions<'_>, Positions<'_>, Option<Positions<'_>>),
        sink: &mut dyn Sink,
    ) -> Result<()> {
        if !self.schema.has_var() {
            return Ok(());
        }
        let is_obs = var_obs_mask(&self.schema, obs_names);
        let not_obs: Vec<bool> = is_obs.iter().map(|&o| !o).collect();
        let set = |prefix, which, rows| UnitValues {
            prefix,
            which,
            rows,
        };
        let mut sets = vec![set("", &is_obs, obs), set("", &not_obs, step)];
        sets.extend(next.map(|next| set("next_", &is_obs, next)));
        put_values_of(&self.schema, &sets, &|_| Ok(self), sink)
    }

    /// Appends the slots of item `index`'s values (one per field of `fields`), each
    /// decoded and bounded, read between two loads of the item's row stamp so that a
    /// row rewritten meanwhile is `Evicted`, never another item's slot.
    fn item_slots(
        &self,
        heap: &Heap,
        index: u64,
        fields: &[&VarField],
        slots: &mut Vec<VarSlot>,
    ) -> Result<()> {
        let cap = self.superblock.capacity;
        let slot_of = index % cap;
        let fixed = self.ring.layout().fixed;
        if self.ring.stamp(slot_of) != crate::format::row::stamp_of(index) {
            return Err(self.evicted(index));
        }
        let start = slots.len();
        let mut bad = None;
        for (v, field) in fields.iter().enumerate() {
            let mut b = [0u8; crate::format::heap::SLOT_LEN];
            self.ring.read_field(slot_of, fixed + v, &mut b);
            let slot = VarSlot::decode(&b)
                .map_err(|p| p.into_error(&self.ring.place(slot_of, &self.dir).0, "variable slot"))
                .and_then(|slot| {
                    heap.check_slot(slot, field.max_bytes())
                        .map(|()| slot)
                        .map_err(|got| {
                            let (file, offset) = self.ring.place(slot_of, &self.dir);
                            Error::Corrupt {
                                file,
                                offset,
                                field: format!("slot of {:?} in item {index}", field.name()),
                                expected: "a value inside the chunk ring".into(),
                                got,
                            }
                        })
                });
            match slot {
                Ok(slot) => slots.push(slot),
                Err(e) => {
                    bad.get_or_insert(e);
                    slots.push(VarSlot::default());
                }
            }
        }
        // A slot read while the writer rewrote the row is not this item's.
        if self.ring.stamp(slot_of) != crate::format::row::stamp_of(index) {
            slots.truncate(start);
            return Err(self.evicted(index));
        }
        bad.map_or(Ok(()), Err)
    }

    /// `Evicted` for `index`, with the live range as this handle knows it.
    fn evicted(&self, index: u64) -> Error {
        Error::Evicted {
            index,
            head: self.head,
            tail: self.tail,
        }
    }

    /// The items at `indices`, as a batch (see `read_into`).
    pub(crate) fn get_many(&self, indices: &[u64], life: Option<&Lifecycle>) -> Result<Batch> {
        let mut batch = Batch::default();
        self.read_into(indices, life, &mut batch)?;
        Ok(batch)
    }

    /// The error for a gather of `indices` that missed.
    pub(crate) fn stamp_error(&self, indices: &[u64], missed: Missed) -> Error {
        match missed {
            Missed::Row(m) => {
                self.row_error(indices.get(m.position).copied().unwrap_or(0), m.found)
            }
            Missed::Read(e) => e,
        }
    }

    /// The error for live `index` whose row held `found` instead.
    pub(crate) fn row_error(&self, index: u64, found: Found) -> Error {
        let slot = index % self.superblock.capacity;
        let (file, offset) = self.ring.place(slot, &self.dir);
        let problem = match found {
            Found::Stamp(stamp) => format!(
                "the slot's stamp is {:#x}, expected {:#x}",
                stamp,
                crate::format::row::stamp_of(index)
            ),
            Found::Checksum { stored, computed } => {
                format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
        };
        Error::BadItem {
            file,
            offset,
            index,
            problem,
        }
    }
}

/// A handle that draws rows (the writer in any role, a reader, the priority owner), as
/// two halves: picking and gathering. [`sample_rows`] joins them with a sink; `Lanes`
/// joins them across lanes, picking in every lane before it asks the sink for the
/// arrays. Nominally `pub`, as the sealed supertrait of the public `Lane`: callers can
/// name neither it nor `Rows`.
#[expect(
    unnameable_types,
    reason = "sealed: callers may reach it through a public trait but not name or implement it"
)]
pub trait DrawsRows {
    /// The rows as this handle sees them.
    fn rows(&self) -> &Rows;
    /// The rows, to draw from.
    fn rows_mut(&mut self) -> &mut Rows;
    /// What a draw of `n` rows by `request` needs before anything is picked: a handle
    /// that may remove (and its state files its own) for a draw that removes, and the
    /// rate limiter's leave for a draw (not a read at given indices). `pick_rows` asks
    /// first; a draw over lanes that picks for the lanes asks each lane itself.
    fn ready_to_draw(&mut self, request: &Request<'_>, n: u64) -> Result<()>;
    /// Picks the rows of `request` (rows: uniformly, by priority or given) into
    /// `indices` and, by priority, `weights`, advancing the RNG, without gathering.
    fn pick_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        weights: &mut Vec<f32>,
    ) -> Result<()>;
    /// Items a draw may return now: the live ones, less the removed (item states).
    fn drawable(&self) -> u64 {
        self.rows().len()
    }
    /// The picked rows were gathered and handed out: a writer counts their uses, or
    /// removes them when the request says so (item states).
    fn drawn(&mut self, _request: &Request<'_>, _indices: &[u64]) -> Result<()> {
        Ok(())
    }
    /// After the values of item `index` failed their check: whether a writer in another
    /// process took the item meanwhile rather than the bytes being damaged. The row's
    /// own stamp cannot always tell: a reader may read the row from a segment a snapshot
    /// froze (the writer copies it before it stores there again, so its stamps never
    /// move) while the item's chunks, already copied, are rewritten in place. A reader
    /// looks at where the writer is; a handle that is the writer never races.
    fn value_race(&mut self, _index: u64) -> Result<bool> {
        Ok(false)
    }
    /// Gathers the rows `pick_rows` picked into `outs` (one slice per field,
    /// `indices.len()` rows each): only picked rows, whose given indices the pick has
    /// checked are live. A reader picks again, the same way, a row the writer took
    /// mid-copy, changing `indices` and `weights` there.
    fn gather_rows(
        &mut self,
        request: &Request<'_>,
        indices: &mut [u64],
        weights: &mut [f32],
        outs: &mut [&mut [u8]],
    ) -> Result<()>;
}

/// A draw of rows by `handle` into `sink`: picked into the draw's scratch vectors, then
/// the sink is asked for the arrays (a refused or empty draw allocates nothing), then
/// the rows are gathered straight into them and the indices and weights copied.
pub(crate) fn sample_rows<H: DrawsRows + ?Sized>(
    handle: &mut H,
    request: &Request<'_>,
    sink: &mut dyn Sink,
) -> Result<()> {
    let mut picked = std::mem::take(&mut handle.rows_mut().draws.picked);
    let mut tries = 0;
    let done = loop {
        let done =
            (handle.pick_rows(request, &mut picked.indices, &mut picked.weights)).and_then(|()| {
                let n = picked.indices.len();
                let mut f = handle.rows().open_sink(request, n, n, sink)?;
                let (indices, weights) = (&mut picked.indices, &mut picked.weights);
                handle.gather_rows(request, indices, weights, &mut f.row)?;
                f.put(Own::Indices, bytemuck::cast_slice(indices));
                f.put(Own::Weights, bytemuck::cast_slice(weights));
                drop(f);
                handle.rows().put_values(indices, sink)
            });
        // An item a writer in another process evicted while its values were read: a
        // draw picks again (from the items live now); a given index is the caller's.
        tries += 1;
        match done {
            Err(Error::Evicted { .. }) if request.draws() && tries < VALUE_TRIES => continue,
            // A race the row's stamp did not show: drawn (or read, if still live) again.
            Err(Error::BadItem { index, .. })
                if tries < VALUE_TRIES && handle.value_race(index)? =>
            {
                continue;
            }
            Err(Error::Evicted { .. }) if request.draws() => {
                break Err(Error::InvalidSample(format!(
                    "the writer evicted an item drawn while its values were read {VALUE_TRIES} \
                     times in a row: it laps the live items faster than one call reads \
                     them (a larger chunk ring, heap_bytes, keeps more items live)"
                )));
            }
            other => break other,
        }
    };
    let done = done.and_then(|()| handle.drawn(request, &picked.indices));
    handle.rows_mut().draws.picked = picked;
    done
}

/// The values `sets` name, each row read from the ring `ring_of` says holds it (a
/// lane set's lanes, or one buffer's only ring): per set and flagged field, the sink
/// is asked once for every row's value (named `prefix` + the field's name), and each
/// value is copied from its ring's chunks and checked as [`Rows::put_values`] checks
/// it. A row a writer in another process passed meanwhile is `Evicted`.
pub(crate) fn put_values_of<'r>(
    schema: &Schema,
    sets: &[UnitValues<'_>],
    ring_of: &dyn Fn(u64) -> Result<&'r Rows>,
    sink: &mut dyn Sink,
) -> Result<()> {
    let fields: Vec<&VarField> = schema.var_fields().iter().collect();
    let nvar = fields.len();
    if nvar == 0 {
        return Ok(());
    }
    let holder = |index: u64| -> Result<(&'r Rows, &'r Heap)> {
        let rows = ring_of(index)?;
        let heap = rows
            .heap
            .as_ref()
            .ok_or(Error::Unsupported("no chunk ring"))?;
        Ok((rows, heap))
    };
    let mut slots = Vec::new();
    for set in sets.iter().filter(|s| s.which.contains(&true)) {
        slots.clear();
        for row in set.rows {
            match *row {
                Some(index) => {
                    let (rows, heap) = holder(index)?;
                    rows.item_slots(heap, index, &fields, &mut slots)?;
                }
                None => slots.extend(std::iter::repeat_n(VarSlot::default(), nvar)),
            }
        }
        let flagged = fields.iter().enumerate();
        for (v, field) in flagged.filter(|&(v, _)| set.which.get(v) == Some(&true)) {
            let lengths: Vec<u64> = (slots.chunks(nvar))
                .map(|r| r.get(v).map_or(0, |s| u64::from(s.len)))
                .collect();
            let named = field.prefixed(set.prefix);
            let mut out = sink.values(&named, &lengths)?;
            copy_field(
                &mut out,
                (&named, field.name()),
                v,
                set.rows,
                &slots,
                &holder,
            )?;
        }
    }
    Ok(())
}

/// Field `v`'s value of each of `rows` (`slots` holds every field's slot of each row,
/// row after row) into `out`, laid out as the sink gave it, each read from the ring
/// `held` names and checked (`Rows::read_value`); `None` rows (padding) take no bytes.
/// `names` are the array's name (for a storage too short) and the field's.
fn copy_field<'r>(
    out: &mut ValuesOut<'_>,
    (named, field): (&VarField, &str),
    v: usize,
    rows: &[Option<u64>],
    slots: &[VarSlot],
    held: &dyn Fn(u64) -> Result<(&'r Rows, &'r Heap)>,
) -> Result<()> {
    let nvar = slots.len() / rows.len().max(1);
    let slot_of = |r: &[VarSlot]| r.get(v).copied().unwrap_or_default();
    let mut at = 0usize;
    for (r, (row, of_row)) in rows.iter().zip(slots.chunks(nvar.max(1))).enumerate() {
        let slot = slot_of(of_row);
        let got = out_len(out);
        let Some(dst) = value_dst(out, r, &mut at, slot.len as usize) else {
            let expected = slots
                .chunks(nvar.max(1))
                .map(|r| slot_of(r).len as usize)
                .sum();
            return Err(Error::OutputSize {
                field: named.name().to_owned(),
                expected,
                got,
            });
        };
        let Some(index) = *row else { continue };
        let (ring, heap) = held(index)?;
        ring.read_value(heap, index, field, slot, dst)?;
    }
    Ok(())
}

/// The row of each position of a draw, unit after unit; `None` for padding.
pub(crate) type Positions<'r> = &'r [Option<u64>];

/// One set of values a unit draw returns (see [`put_values_of`]).
pub(crate) struct UnitValues<'r> {
    /// `""`, or `"next_"` for the observations the units led to.
    pub prefix: &'static str,
    /// Which variable-length fields, one flag per field in schema order.
    pub which: &'r [bool],
    /// The row of each position.
    pub rows: Positions<'r>,
}

/// Draws of items with variable-length values made again when a writer in another
/// process passes one of the items while its values are read.
pub(crate) const VALUE_TRIES: u32 = 64;

/// Where one value goes: into room the sink made for it, or appended to the storage
/// the sink grows ([`ValuesOut::Grown`]).
enum ValueDst<'o> {
    Into(&'o mut [u8]),
    Append(&'o mut Vec<u8>),
}

impl ValueDst<'_> {
    /// Copies `slot`'s value from `heap`, unchecked ([`Heap::check_values`] must follow).
    fn copy(self, heap: &Heap, slot: VarSlot) {
        match self {
            ValueDst::Into(dst) => heap.copy(slot, dst),
            ValueDst::Append(out) => heap.append(slot, out),
        }
    }
}

/// Where row `r`'s value of `n` bytes goes in `out`: at `*at` end to end (which then
/// moves past it), at `r`'s row, or appended to what the sink grows; `None` when `out`
/// is too short.
fn value_dst<'o>(
    out: &'o mut ValuesOut<'_>,
    r: usize,
    at: &mut usize,
    n: usize,
) -> Option<ValueDst<'o>> {
    let dst = match out {
        ValuesOut::EndToEnd(bytes) => bytes.get_mut(*at..*at + n).map(ValueDst::Into),
        ValuesOut::Rows { bytes, row_bytes } => {
            (bytes.get_mut(r * *row_bytes..r * *row_bytes + n)).map(ValueDst::Into)
        }
        ValuesOut::Grown(grow) => Some(ValueDst::Append(grow.next_value(n))),
    };
    *at += n;
    dst
}

/// Bytes a sink gave for one field's values.
fn out_len(out: &ValuesOut<'_>) -> usize {
    match out {
        ValuesOut::EndToEnd(b) | ValuesOut::Rows { bytes: b, .. } => b.len(),
        // Grown as asked: a storage of another length is the sink's bug, said as 0.
        ValuesOut::Grown(_) => 0,
    }
}

impl Rows {
    /// Picks `n` distinct live items stratified by the key `names` (see
    /// `draw/groups.rs`): an even share of every group, then the rest uniformly.
    /// Removed items (item states) are never picked.
    pub(crate) fn pick_stratified(
        &mut self,
        n: usize,
        names: &[&str],
        life: Option<&Lifecycle>,
        out: &mut Vec<u64>,
    ) -> Result<()> {
        let mut index = self.group_index(names)?;
        let removed = |i: u64| life.is_some_and(|l| l.is_removed(i));
        let live = Some((self.head, self.tail));
        let rng = &mut self.draws.rng;
        let picked = pick_from_groups(&mut index, n, live, &removed, rng, out);
        self.groups = Some(index);
        picked?;
        self.draws.sampled += out.len() as u64;
        Ok(())
    }

    /// Picks the groups of `request` ([`Request::groups`]): their items into `out`, one
    /// end offset per group into `offsets` (see `draw/groups.rs`).
    pub(crate) fn pick_groups(
        &mut self,
        request: &Request<'_>,
        life: Option<&Lifecycle>,
        out: &mut Vec<u64>,
        offsets: &mut Vec<u64>,
    ) -> Result<()> {
        let mut index = self.group_index(request.group_by)?;
        let removed = |i: u64| life.is_some_and(|l| l.is_removed(i));
        let how = (request.n, request.replace, request.unroll);
        let rng = &mut self.draws.rng;
        let picked = pick_groups(&mut index, how, &removed, rng, out, offsets);
        self.groups = Some(index);
        picked?;
        self.draws.sampled += (offsets.len() as u64).saturating_sub(1);
        Ok(())
    }

    /// The handle's index of the key `names`, taken out to draw from (the caller puts
    /// it back), extended to the tail and forgetting what the head passed; a new one
    /// when the last draw grouped by another key.
    pub(crate) fn group_index(&mut self, names: &[&str]) -> Result<GroupIndex> {
        let mut index = match self.groups.take() {
            Some(g) if g.is_of(names) => g,
            _ => GroupIndex::new(&self.schema, names)?,
        };
        let fields = index.fields.clone();
        index.extend(self.head, self.tail, |i| self.key_of(i, &fields));
        index.forget_before(self.head);
        Ok(index)
    }

    /// How many items of the live range each group of the key `names` holds, live and
    /// removed, in the order of the keys' bytes (one pass over the live rows).
    pub(crate) fn group_counts(
        &self,
        names: &[&str],
        life: Option<&Lifecycle>,
    ) -> Result<Vec<GroupCount>> {
        let index = GroupIndex::new(&self.schema, names)?;
        let mut counts: std::collections::BTreeMap<Vec<u8>, (u64, u64)> = Default::default();
        for i in self.head..self.tail {
            let Some(key) = self.key_of(i, &index.fields) else {
                continue;
            };
            let c = counts.entry(key).or_default();
            match life.is_some_and(|l| l.is_removed(i)) {
                true => c.1 += 1,
                false => c.0 += 1,
            }
        }
        Ok(counts
            .into_iter()
            .map(|(key, (live, removed))| GroupCount {
                key: render_key(&self.schema, &index.fields, &key),
                live,
                removed,
            })
            .collect())
    }

    /// The group key of item `index`: each field's bytes, length-prefixed; `None` when
    /// the row changed under the read.
    fn key_of(&self, index: u64, fields: &[KeyField]) -> Option<Vec<u8>> {
        let slot = index % self.superblock.capacity;
        let stamp = crate::format::row::stamp_of(index);
        if self.ring.stamp(slot) != stamp {
            return None;
        }
        let mut key = Vec::new();
        let mut put = |bytes: &[u8]| {
            key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            key.extend_from_slice(bytes);
        };
        let var_fields: Vec<&VarField> = self.schema.var_fields().iter().collect();
        let mut slots = Vec::new();
        for &f in fields {
            match f {
                KeyField::Fixed(p) => {
                    let size = self.schema.fields().get(p).map_or(0, |x| x.bytes());
                    let mut b = vec![0u8; size];
                    self.ring.read_field(slot, p, &mut b);
                    put(&b);
                }
                KeyField::Var(v) => {
                    let heap = self.heap.as_ref()?;
                    if slots.is_empty() {
                        self.item_slots(heap, index, &var_fields, &mut slots).ok()?;
                    }
                    let s = *slots.get(v)?;
                    let mut b = vec![0u8; s.len as usize];
                    heap.copy(s, &mut b);
                    put(&b);
                }
            }
        }
        (self.ring.stamp(slot) == stamp).then_some(key)
    }
}

/// `Removed` for the first of the live `indices` whose item was removed.
pub(crate) fn check_not_removed(life: Option<&Lifecycle>, indices: &[u64]) -> Result<()> {
    let Some(l) = life else { return Ok(()) };
    match indices.iter().find(|&&i| l.is_removed(i)) {
        Some(&index) => Err(Error::Removed {
            index,
            cause: l.state(index).removed.map_or("unknown", |c| c.name()),
        }),
        None => Ok(()),
    }
}
