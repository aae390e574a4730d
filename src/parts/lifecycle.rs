//! Item lifecycles (issue 30, `docs/design/lifecycle.md`): per item, whether it was
//! removed before the ring overwrote it (and why), and how many draws returned it. One
//! atomic word per slot in `items.state` (FORMAT.md), bound to its item by lap, so an
//! add writes nothing here and a word of an item the ring passed reads as "live, never
//! drawn" for the item that replaced it.
//!
//! Orders of stores. A removal is one compare-and-swap of the word to "removed, cause"
//! (a word already removed stays as it is: removals are idempotent and two racing
//! processes agree). A draw copies the row, checks its stamp, then loads the word, so
//! a removal that lands after that load is ordered after the draw. A use is counted by
//! a CAS that adds 1, and removes the item in the same CAS when it reaches `max_use`.
//! Every store is in the page cache at once (a kill loses none); the file is msynced
//! before each commit (a power cut keeps the state as of the last flush, or later).

use std::path::Path;

use crate::error::{Finding, Result};
use crate::format::lifecycle::{
    BODY_OFFSET, Cause, LifeHeader, Policy, REMOVED_LIVE_OFF, RENAMED_OFF, Word,
};
use crate::format::manifest::Superblock;
use crate::storage::io::{Access, Io};
use crate::storage::map::{LifeMap, LimiterMap};
use crate::storage::{self};
use std::time::Duration;

use super::hooks::{Checking, Found, Holder, NewRow, Opening, Part, PartFile};
use super::priorities::LiveRange;

/// Findings past this many in the state file are summarized, not listed.
const LIFE_FINDINGS: u64 = 20;

/// What an item's word says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ItemState {
    /// Why it was removed, if it was.
    pub removed: Option<Cause>,
    /// Draws that returned it (saturating at 65,535).
    pub uses: u64,
}

/// Removals since the buffer was created, by cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Removals {
    /// `remove(indices)`.
    pub explicit: u64,
    /// Draws that removed what they returned.
    pub sampled: u64,
    /// Items drawn `max_use` times.
    pub used_up: u64,
    /// Items older than a draw's staleness bound.
    pub stale: u64,
    /// Items a FIFO consume returned.
    pub consumed: u64,
    /// Items random downsampling removed.
    pub downsampled: u64,
    /// Items reservoir sampling did not keep.
    pub reservoir: u64,
}

impl Removals {
    /// The count of `cause`.
    pub fn of(&self, cause: Cause) -> u64 {
        match cause {
            Cause::Explicit => self.explicit,
            Cause::Sampled => self.sampled,
            Cause::UsedUp => self.used_up,
            Cause::Stale => self.stale,
            Cause::Consumed => self.consumed,
            Cause::Downsampled => self.downsampled,
            Cause::Reservoir => self.reservoir,
        }
    }

    /// Every removal counted.
    pub fn total(&self) -> u64 {
        Cause::ALL.iter().map(|&c| self.of(c)).sum()
    }

    fn read(map: &LifeMap) -> Removals {
        let n = |c: Cause| map.counter(c.counter_off());
        Removals {
            explicit: n(Cause::Explicit),
            sampled: n(Cause::Sampled),
            used_up: n(Cause::UsedUp),
            stale: n(Cause::Stale),
            consumed: n(Cause::Consumed),
            downsampled: n(Cause::Downsampled),
            reservoir: n(Cause::Reservoir),
        }
    }
}

/// What `replaystore info` shows of the item states of the live range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ItemStats {
    /// Draws an item serves before it is removed (0: no bound).
    pub max_use: u64,
    /// What happens to items past `max_size`: `fifo` (the ring's alone), `downsample`
    /// or `reservoir`.
    pub policy: &'static str,
    /// Live items the policy keeps (0 with `fifo`).
    pub max_size: u64,
    /// Items of the live range not removed.
    pub live: u64,
    /// Items of the live range removed (they leave it when the ring passes them).
    pub removed: u64,
    /// Items removed since create, by cause.
    pub removals: Removals,
    /// Draws that returned a live item, summed over the live items.
    pub uses: u64,
    /// Live items never drawn.
    pub never_drawn: u64,
    /// The most uses of a live item.
    pub max_uses: u64,
    /// Kept items the policy moved to the tail since create (see `Stats::moved`).
    pub moved: u64,
}

impl ItemStats {
    /// The item states of `head..tail` in the buffer in `dir`, read-only.
    pub(crate) fn read(
        io: &dyn Io,
        dir: &Path,
        sb: &Superblock,
        head: u64,
        tail: u64,
    ) -> Result<ItemStats> {
        let life = Lifecycle::open_with(io, dir, sb, Access::Read)?;
        let mut s = ItemStats {
            max_use: life.max_use(),
            policy: match life.policy().0 {
                Policy::Fifo => "fifo",
                Policy::Downsample => "downsample",
                Policy::Reservoir => "reservoir",
            },
            max_size: life.policy().1,
            removals: life.removals(),
            moved: life.renames(),
            ..ItemStats::default()
        };
        for w in (head..tail).map(|i| life.word(i)) {
            if w.removed() {
                s.removed += 1;
                continue;
            }
            s.live += 1;
            s.uses += w.uses();
            s.never_drawn += u64::from(w.uses() == 0);
            s.max_uses = s.max_uses.max(w.uses());
        }
        Ok(s)
    }
}

/// The item states of one buffer, as one handle maps them.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    map: LifeMap,
    header: LifeHeader,
    /// The oldest live index as this part last saw it: removed items the head passes
    /// leave the `removed_live` count.
    head: u64,
    /// Every item below this index is removed or gone: where a draw of the oldest items
    /// starts (items are never un-removed while the part lives; a restore makes a new
    /// part).
    first_maybe_live: std::sync::atomic::AtomicU64,
    /// Live indices by their tag, for removing the stale ones (built when first asked).
    pub(crate) tags: Option<TagIndex>,
    /// The candidates of uniform draws past half removed (built when first needed).
    pub(crate) live_list: std::sync::Mutex<crate::algo::sample::LiveList>,
    /// The rate limiter's words, mapped writable (a rate-limited buffer's handles that
    /// draw or add live: not a snapshot's, not `inspect`'s).
    limiter: Option<LimiterMap>,
    /// How long a call the rate limiter holds back waits before it is `RateLimited`
    /// (`None`: not at all).
    pub(crate) wait: Option<Duration>,
}

/// What the rate limiter decides on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counts {
    /// Items added since create.
    pub inserts: u64,
    /// Items live (not removed).
    pub size: u64,
}

/// The live items by the value of an integer field (their producer's tag: a learner
/// iteration, a policy version), built from the rows when a staleness removal first
/// asks and extended from the tail after: each item enters once and leaves once, so
/// removing the items older than a bound costs what it removes.
#[derive(Debug, Default)]
pub(crate) struct TagIndex {
    /// The field it indexes.
    pub field: String,
    /// Items below this index are in the map (or were gone when it was extended).
    pub upto: u64,
    /// Tag value to the items carrying it.
    pub by_tag: std::collections::BTreeMap<i128, Vec<u64>>,
}

/// The live item in `slot` of a ring of `cap` holding `head..tail`, if one is.
fn item_in(slot: u64, cap: u64, head: u64, tail: u64) -> Option<u64> {
    let offset = (slot + cap - head % cap) % cap;
    let index = head + offset;
    (index < tail).then_some(index)
}

impl Lifecycle {
    /// The item states of a buffer with superblock `sb` (none without flag bit 4),
    /// mapped as `holder` may: writable for a writer or an actor, private for a
    /// snapshot, read-only for a reader.
    pub fn open(at: &Opening<'_>) -> Result<Option<Lifecycle>> {
        if !at.sb.lifecycle {
            return Ok(None);
        }
        let access = match at.holder {
            Holder::Writer | Holder::Actor => Access::Write,
            Holder::Frozen => Access::Frozen,
            Holder::Live => Access::Read,
        };
        let mut life = Lifecycle::open_with(at.io, at.dir, at.sb, access)?;
        // A restore linked the snapshot's file. Adds change its counter (the head
        // passing removed items), which cannot wait for a store that may fail: the
        // writer gives it a file of its own now, before readers are told of the open.
        if at.holder.writes() {
            life.make_private(at.io)?;
        }
        if at.holder != Holder::Frozen {
            life.map_limiter(at.io, at.dir)?;
        }
        Ok(Some(life))
    }

    /// Maps the rate limiter's words writable, if the buffer has a rate limiter.
    pub fn map_limiter(&mut self, io: &dyn Io, dir: &Path) -> Result<()> {
        if self.header.rate_limit.is_some() {
            self.limiter = Some(storage::open_limiter(io, dir)?);
        }
        Ok(())
    }

    /// Admits a draw of `n` (counting it) or an add of `n` (`draw` false), as the rate
    /// limiter says, from the counts `now` gives; waits for another process to move
    /// them (up to `wait`) when it may not go ahead yet. Without a rate limiter every
    /// call goes ahead.
    pub fn admit(&self, draw: bool, n: u64, mut now: impl FnMut() -> Result<Counts>) -> Result<()> {
        let (Some(lim), Some(rl)) = (&self.limiter, self.header.rate_limit) else {
            return Ok(());
        };
        let start = std::time::Instant::now();
        loop {
            let seq = lim.wake_seq();
            let c = now()?;
            let admitted = match draw {
                true => lim.take_samples(n, |s| rl.can_sample(c.inserts, s, c.size, n)),
                false => rl.can_insert(c.inserts, lim.samples(), c.size, n),
            };
            if admitted {
                if draw {
                    lim.wake_all();
                }
                return Ok(());
            }
            let left = self.wait.and_then(|w| w.checked_sub(start.elapsed()));
            match left {
                Some(left) if !left.is_zero() => lim.wait(seq, left),
                _ => {
                    let limit = match draw {
                        true if c.size < rl.min_size_to_sample => {
                            format!("draws wait for {} live", rl.min_size_to_sample)
                        }
                        true => format!(
                            "a draw needs added x {} - drawn - n >= {}",
                            rl.samples_per_insert, rl.min_diff
                        ),
                        false => format!(
                            "an add needs (added + n) x {} - drawn <= {}",
                            rl.samples_per_insert, rl.max_diff
                        ),
                    };
                    return Err(crate::error::Error::RateLimited {
                        what: if draw { "a draw" } else { "an add" },
                        n,
                        inserts: c.inserts,
                        samples: lim.samples(),
                        size: c.size,
                        limit,
                        waited: self.wait.map(|_| start.elapsed()),
                    });
                }
            }
        }
    }

    /// Items were added: handles waiting to draw look again.
    pub fn added(&self) {
        if let Some(lim) = &self.limiter {
            lim.wake_all();
        }
    }

    /// The item states of the buffer in `dir`, mapped with `access` (a reader maps
    /// them again, read-only, when the writer replaced the file).
    pub fn open_with(
        io: &dyn Io,
        dir: &Path,
        sb: &Superblock,
        access: Access,
    ) -> Result<Lifecycle> {
        let (map, header) = storage::open_life(io, dir, sb, access)?;
        Ok(Lifecycle {
            map,
            header,
            head: 0,
            first_maybe_live: 0.into(),
            tags: None,
            live_list: std::sync::Mutex::default(),
            limiter: None,
            wait: None,
        })
    }

    /// Creates the state file of a new buffer, as `header` says: every item live,
    /// never drawn.
    pub fn create(io: &dyn Io, dir: &Path, header: &LifeHeader) -> Result<()> {
        storage::create_life(io, dir, header)
    }

    /// What happens to items beyond `max_size`, and `max_size`.
    pub fn policy(&self) -> (Policy, u64) {
        (self.header.policy, self.header.max_size)
    }

    /// Seed of the policy's random decisions.
    pub fn policy_seed(&self) -> u64 {
        self.header.seed
    }

    fn capacity(&self) -> u64 {
        self.header.capacity
    }

    /// Draws an item serves before it is removed (0: no bound).
    pub fn max_use(&self) -> u64 {
        self.header.max_use
    }

    /// The word of live index `index`, as its item's: another lap's reads as live and
    /// never drawn.
    #[inline(always)]
    fn word(&self, index: u64) -> Word {
        self.as_item(index, self.map.load(index % self.capacity()))
    }

    /// The raw word `raw` of `index`'s slot, read as `index`'s: a word of another lap
    /// describes a gone item, so `index` is live and never drawn.
    #[inline(always)]
    fn as_item(&self, index: u64, raw: u64) -> Word {
        let cap = self.capacity();
        match Word(raw).is_of(index, cap) {
            true => Word(raw),
            false => Word::new(index, cap, 0, None),
        }
    }

    /// Asks for the words of `indices` ahead of their use (see `LifeMap::prefetch`).
    pub fn prefetch(&self, indices: &[u64]) {
        let cap = self.capacity();
        for &i in indices {
            self.map.prefetch(i % cap);
        }
    }

    /// Whether live index `index` was removed.
    #[inline(always)]
    pub fn is_removed(&self, index: u64) -> bool {
        self.word(index).removed()
    }

    /// Whether episode `e` was removed: a removal takes an episode's rows first to
    /// last, so it is once its first live row (from `head`) is.
    pub(crate) fn episode_removed(&self, e: &super::episodes::EpisodeInfo, head: u64) -> bool {
        self.is_removed(e.start.max(head))
    }

    /// What live index `index`'s word says.
    pub fn state(&self, index: u64) -> ItemState {
        let w = self.word(index);
        ItemState {
            removed: w.cause(),
            uses: w.uses(),
        }
    }

    /// Every item below this index is removed or gone (a hint: never above the truth).
    pub fn first_maybe_live(&self) -> u64 {
        self.first_maybe_live
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A walk from the hint found no live item below `index`.
    pub fn note_first_maybe_live(&self, index: u64) {
        self.first_maybe_live
            .fetch_max(index, std::sync::atomic::Ordering::Relaxed);
    }

    /// Removed items inside the live range.
    pub fn removed_live(&self) -> u64 {
        self.map.counter(REMOVED_LIVE_OFF)
    }

    /// Removals since create, by cause.
    pub fn removals(&self) -> Removals {
        Removals::read(&self.map)
    }

    /// Gives a state file a restore linked a file of its own before the first store.
    pub fn make_private(&mut self, io: &dyn Io) -> Result<()> {
        if self.map.is_shared() {
            storage::private_life(io, &mut self.map)?;
        }
        Ok(())
    }

    /// Whether this handle may store into the words (a writer's or an actor's own file).
    pub fn can_store(&self) -> bool {
        self.map.can_store()
    }

    /// Stores `new(word)` into live index `index`'s word by compare-and-swap, unless
    /// `new` declines (returns `None`). Returns the word stored, or `None` if declined.
    #[inline(always)]
    fn change(&self, index: u64, new: impl Fn(Word) -> Option<Word>) -> Option<Word> {
        let slot = index % self.capacity();
        let mut raw = self.map.load(slot);
        loop {
            // In the file's form: checked words in version 2, plain in version 1.
            let next = new(self.as_item(index, raw))?.in_form(self.header.checked);
            match self.map.exchange(slot, raw, next.0) {
                Ok(_) => return Some(next),
                Err(now) => raw = now,
            }
        }
    }

    /// Removes live index `index` for `cause`; false if it was removed already.
    pub fn remove(&mut self, index: u64, cause: Cause) -> bool {
        let cap = self.capacity();
        let done = self.change(index, |w| {
            (!w.removed()).then(|| Word::new(index, cap, w.uses(), Some(cause)))
        });
        if done.is_some() {
            self.counted(cause);
        }
        done.is_some()
    }

    /// Counts one more draw of live index `index`: true when that draw used it up (its
    /// uses reached `max_use`, and it is removed in the same store). An item removed
    /// meanwhile is left as it is.
    #[inline(always)]
    pub fn count_use(&mut self, index: u64) -> bool {
        let (cap, max) = (self.capacity(), self.header.max_use);
        let done = self.change(index, |w| {
            if w.removed() {
                return None;
            }
            let uses = w.uses() + 1;
            let cause = (max != 0 && uses >= max).then_some(Cause::UsedUp);
            Some(Word::new(index, cap, uses, cause))
        });
        let used_up = done.is_some_and(Word::removed);
        if used_up {
            self.counted(Cause::UsedUp);
        }
        used_up
    }

    fn counted(&self, cause: Cause) {
        self.map.add_counter(REMOVED_LIVE_OFF, 1);
        self.map.add_counter(cause.counter_off(), 1);
    }

    /// The live item `from` was renamed to `to`, the next index of its slot (the
    /// reservoir keeps it past the ring's lap): its uses go with it.
    pub fn renamed(&mut self, from: u64, to: u64) {
        let cap = self.capacity();
        let w = self.word(from);
        let moved = Word::new(to, cap, w.uses(), w.cause()).in_form(self.header.checked);
        self.map.store(to % cap, moved.0);
        self.map.add_counter(RENAMED_OFF, 1);
    }

    /// Indices handed to renamed items: the items added are `tail - base - renamed`.
    pub fn renames(&self) -> u64 {
        self.map.counter(RENAMED_OFF)
    }

    /// The head moved to `to`: removed items it passed leave the live count.
    pub fn head_to(&mut self, to: u64) {
        if to <= self.head {
            self.head = self.head.min(to);
            return;
        }
        let from = self.head.max(to.saturating_sub(self.capacity()));
        let passed = (from..to).filter(|&i| self.is_removed(i)).count() as u64;
        if passed > 0 {
            self.map
                .add_counter(REMOVED_LIVE_OFF, passed.wrapping_neg());
        }
        self.head = to;
    }

    /// Counts the removed items of `head..tail` (their words, as their items').
    fn count_removed(&self, head: u64, tail: u64) -> u64 {
        (head..tail).filter(|&i| self.is_removed(i)).count() as u64
    }

    fn check_file(io: &dyn Io, dir: &Path, sb: &Superblock) -> Result<()> {
        storage::open_life(io, dir, sb, Access::Read).map(drop)
    }
}

impl crate::algo::sample::Removed for Lifecycle {
    #[inline(always)]
    fn is_removed(&self, index: u64) -> bool {
        Lifecycle::is_removed(self, index)
    }

    fn prefetch(&self, indices: &[u64]) {
        Lifecycle::prefetch(self, indices);
    }
}

impl Part for Lifecycle {
    fn files(sb: &Superblock) -> Vec<PartFile> {
        match sb.lifecycle {
            true => vec![PartFile {
                path: storage::life_path,
                check: Lifecycle::check_file,
            }],
            false => Vec::new(),
        }
    }

    /// The header; with `items`, every word against the item its slot holds (bits that
    /// must be zero, a cause that fits the removed bit, a lap not ahead of the item),
    /// the count of removed live items, and, with priorities after a clean close, that
    /// no removed live item keeps a priority.
    fn verify(at: &Checking<'_>, found: &mut Found<'_>) {
        if !at.sb.lifecycle {
            return;
        }
        let (map, header) = match storage::open_life(at.io, at.dir, at.sb, Access::Read) {
            Ok(m) => m,
            Err(e) => {
                let path = storage::life_path(at.dir);
                found.problems.push(Finding::of(&e, &path));
                return;
            }
        };
        if !at.items {
            return;
        }
        let (cap, head, tail) = (at.sb.capacity, at.head, at.tail);
        let path = map.path().to_path_buf();
        let tree = match at.sb.prioritized && at.commit.is_clean() {
            true => super::priorities::TreeCopy::read(at.io, at.dir, at.sb).ok(),
            false => None,
        };
        let (mut bad, mut removed, mut kept) = (0u64, 0u64, 0u64);
        // Episodic buffers: which live items are removed, to hold each episode whole.
        let mut gone = match at.sb.episodic {
            true => vec![false; usize::try_from(tail - head).unwrap_or(0)],
            false => Vec::new(),
        };
        for slot in 0..cap {
            let w = Word(map.load(slot));
            let item = item_in(slot, cap, head, tail);
            let lap = item.map(|i| Word::lap_of(i, cap));
            let offset = (BODY_OFFSET as u64) + slot * 8;
            let of_item = item.is_some_and(|i| w.is_of(i, cap));
            let problem = w
                .problem(lap, header.checked)
                .or_else(|| of_item.then(|| w.uses_problem(header.max_use)).flatten());
            if let Some(what) = problem {
                bad += 1;
                if bad <= LIFE_FINDINGS {
                    found.problems.push(Finding {
                        file: path.clone(),
                        offset,
                        what: format!("slot {slot}: {what}"),
                    });
                }
                continue;
            }
            let Some(index) = item.filter(|&i| w.is_of(i, cap) && w.removed()) else {
                continue;
            };
            removed += 1;
            if let Some(g) = usize::try_from(index - head)
                .ok()
                .and_then(|k| gone.get_mut(k))
            {
                *g = true;
            }
            if let Some(t) = &tree
                && t.leaf(slot) != 0.0
            {
                kept += 1;
                if kept <= LIFE_FINDINGS {
                    found.problems.push(Finding {
                        file: t.path.clone(),
                        offset: t.leaf_offset(slot),
                        what: format!(
                            "item {index} was removed but keeps the priority leaf {}",
                            t.leaf(slot)
                        ),
                    });
                }
            }
        }
        if bad > LIFE_FINDINGS {
            found.problems.push(Finding {
                file: path.clone(),
                offset: BODY_OFFSET as u64,
                what: format!("{} more damaged item state words", bad - LIFE_FINDINGS),
            });
        }
        if at.sb.episodic {
            check_whole_episodes(at, &gone, &path, found);
        }
        let counted = map.counter(REMOVED_LIVE_OFF);
        if counted != removed {
            let what =
                format!("removed_live says {counted} removed live items, the words say {removed}");
            if at.commit.is_clean() {
                found.problems.push(Finding {
                    file: path,
                    offset: REMOVED_LIVE_OFF as u64,
                    what,
                });
            } else {
                found.notes.push(format!(
                    "{what}: expected after an unclean shutdown; the next open recounts"
                ));
            }
        }
    }

    /// A word of a slot whose item did not survive is zeroed (a power cut can keep a
    /// removal written after the last flush while dropping its item, whose index the
    /// next add is then handed again: it must not be born removed), words of other
    /// laps are zeroed with it, and the live removals are counted again (a kill can
    /// come between a removal's word and its count).
    fn recovered(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        let p = self;
        if !at.holder.writes() {
            return Ok(());
        }
        p.make_private(at.io)?;
        let cap = p.capacity();
        for slot in 0..cap {
            let w = Word(p.map.load(slot));
            let keep = item_in(slot, cap, live.head, live.tail).is_some_and(|i| w.is_of(i, cap));
            if !keep && w.0 != 0 {
                p.map.store(slot, 0);
            }
        }
        let removed = p.count_removed(live.head, live.tail);
        p.map.set_counter(REMOVED_LIVE_OFF, removed);
        p.map
            .flush(at.io)
            .map_err(|e| crate::error::Error::io("msync", p.map.path(), e))
    }

    fn ready(&mut self, _at: &Opening<'_>, live: LiveRange) -> Result<()> {
        self.head = live.head;
        Ok(())
    }

    #[inline(always)]
    fn on_row(&mut self, row: &NewRow) {
        if row.head != self.head {
            self.head_to(row.head);
        }
    }

    fn on_clear(&mut self, tail: u64) {
        self.map.set_counter(REMOVED_LIVE_OFF, 0);
        self.head = tail;
    }

    fn before_commit(&mut self, io: &dyn Io, _tail: u64) -> Result<()> {
        if !self.map.can_store() {
            return Ok(());
        }
        self.map
            .flush(io)
            .map_err(|e| crate::error::Error::io("msync", self.map.path(), e))
    }

    /// A checkpoint commits the live buffer too: its item states are made durable with
    /// it, as by every other commit (msync writes only the pages changed since).
    fn before_checkpoint(&mut self, io: &dyn Io, _capacity: u64, tail: u64) -> Result<()> {
        self.before_commit(io, tail)
    }
}

/// Each episode of an episodic buffer's live rows `at.head..` is removed whole or kept
/// whole (`gone[k]`: row `head + k` is removed). A removal takes an episode first row
/// first, so after an unclean shutdown a removed prefix is a note (the next open removes
/// the rest); any other mix, or that one after a clean close, is a problem.
fn check_whole_episodes(at: &Checking<'_>, gone: &[bool], path: &Path, found: &mut Found<'_>) {
    let (cap, head, tail) = (at.sb.capacity, at.head, at.tail);
    let Ok(table) =
        super::episodes::Episodes::from_rows(at.schema, at.ring, cap, head, tail, at.dir)
    else {
        return; // the episodes' own check names what is wrong with the headers
    };
    let removed = |i: u64| {
        let k = usize::try_from(i - head).unwrap_or(usize::MAX);
        gone.get(k).copied().unwrap_or(false)
    };
    for e in table.iter() {
        let first = e.start.max(head);
        let rows = first..e.last() + 1;
        let (Some(kept), Some(cut)) = (
            rows.clone().find(|&i| !removed(i)),
            rows.clone().find(|&i| removed(i)),
        ) else {
            continue; // removed whole, or kept whole
        };
        let prefix = cut < kept && (kept..e.last() + 1).all(|i| !removed(i));
        let what = format!(
            "episode {} (rows {first}..={}) is part removed: row {cut} removed, row {kept} kept",
            e.id,
            e.last()
        );
        if prefix && !at.commit.is_clean() {
            found.notes.push(format!(
                "{what}: a removal a kill cut short; the next open removes the rest"
            ));
        } else {
            found.problems.push(Finding {
                file: path.to_path_buf(),
                offset: (BODY_OFFSET as u64) + (kept % cap) * 8,
                what,
            });
        }
    }
}
