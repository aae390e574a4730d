//! The episode table of an episodic buffer: one record per episode with a live row, in
//! the order the episodes began. Rows are contiguous per episode (one row per
//! `env.reset()` / `env.step()`, see `docs/design/episodes.md`), so an episode is its
//! reset row's logical index and a row count. The writer keeps the table in memory; it
//! reads it when it opens the buffer from the step header of each episode's last row
//! (`walk_back`: O(episodes)), as a reader does to follow the writer (`draw/follow.rs`);
//! `verify` rebuilds it from every row (`rebuild`).

use std::collections::VecDeque;

use crate::algo::windows::{End, Span};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::row::{STEP_TERMINATED, STEP_TRUNCATED, StepHeader};
use crate::schema::Schema;

use super::hooks::{Checking, Found, Holder, NewRow, Opening, Part};
use super::priorities::LiveRange;

/// Name of the field whose values add up to an episode's return.
pub const REWARD_FIELD: &str = "reward";

/// One episode, as the table knows it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpisodeInfo {
    /// The episode's number: 0, 1, ... in the order episodes began.
    pub id: u64,
    /// Logical index of its reset row (`t = 0`), live or evicted.
    pub start: u64,
    /// Rows added so far: steps + 1 (the reset row).
    pub rows: u64,
    /// How it ended, if it has.
    pub end: Option<End>,
    /// Sum of the `reward` field over its steps the table has seen (0 without such a
    /// field): every step, unless `ret_complete` is false.
    pub ret: f64,
    /// Whether `ret` covers every step. False for an episode whose first rows the ring
    /// had already evicted when the writer opened the buffer and rebuilt the table from
    /// the rows: their rewards are gone.
    pub ret_complete: bool,
}

impl EpisodeInfo {
    /// Steps taken (actions): `rows - 1`.
    pub fn steps(&self) -> u64 {
        self.rows - 1
    }

    /// Logical index of its newest row.
    pub fn last(&self) -> u64 {
        self.start + self.rows - 1
    }

    /// The rows stored now, given the buffer's oldest live index.
    pub fn span(&self, head: u64) -> Span {
        Span {
            start: self.start,
            first: self.start.max(head),
            last: self.last(),
            end: self.end,
        }
    }
}

/// `e` with its return summed by `reward` over its steps live above `head` (a reset row
/// has no reward), unless it has one already.
fn with_return(e: &EpisodeInfo, head: u64, reward: impl Fn(u64) -> f64) -> EpisodeInfo {
    if !e.ret.is_nan() {
        return *e;
    }
    let first = (e.start + 1).max(head);
    EpisodeInfo {
        ret: (first..=e.last()).map(reward).sum(),
        ret_complete: first == e.start + 1 || e.start + 1 > e.last(),
        ..*e
    }
}

/// `BadItem` for live row `index` of `ring`, whose step header breaks the rules of
/// episodes as `problem` says, naming its file and offset (`dir` when the row cannot be
/// located).
pub(crate) fn bad_step_header(
    ring: &crate::storage::ring::Ring,
    capacity: u64,
    dir: &std::path::Path,
    index: u64,
    problem: &str,
) -> Error {
    let (file, offset) = ring.place(index % capacity, dir);
    Error::BadItem {
        file,
        offset,
        index,
        problem: format!("step header: {problem}"),
    }
}

/// What adding a row reported (Tianshou's `add` result).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepInfo {
    /// Logical index of the row.
    pub index: u64,
    /// Its episode.
    pub episode: u64,
    /// Its step in the episode (0 for a reset).
    pub t: u32,
    /// When the row ended its episode: `(return, steps, start index)`, the return as
    /// [`EpisodeInfo::ret`] has it.
    pub ended: Option<(f64, u64, u64)>,
}

/// The table.
#[derive(Clone, Debug, Default)]
pub(crate) struct Episodes {
    list: VecDeque<EpisodeInfo>,
    next_id: u64,
    reward: Option<(usize, DType)>,
}

fn end_flags(end: Option<End>) -> u32 {
    match end {
        Some(End::Terminated) => STEP_TERMINATED,
        Some(End::Truncated) => STEP_TRUNCATED,
        None => 0,
    }
}

fn end_of(flags: u32) -> Option<End> {
    if flags & STEP_TERMINATED != 0 {
        Some(End::Terminated)
    } else if flags & STEP_TRUNCATED != 0 {
        Some(End::Truncated)
    } else {
        None
    }
}

impl Episodes {
    /// An empty table for `schema` (its scalar `reward` field, if any, makes returns).
    pub(crate) fn new(schema: &Schema) -> Episodes {
        let reward = schema
            .fields()
            .iter()
            .position(|f| f.name() == REWARD_FIELD && f.elements() == 1)
            .and_then(|i| schema.fields().get(i).map(|f| (i, f.dtype())));
        Episodes {
            list: VecDeque::new(),
            next_id: 0,
            reward,
        }
    }

    /// Schema position and dtype of the reward field.
    pub(crate) fn reward_field(&self) -> Option<(usize, DType)> {
        self.reward
    }

    /// The episode still being written, if any.
    pub(crate) fn open(&self) -> Option<&EpisodeInfo> {
        self.list.back().filter(|e| e.end.is_none())
    }

    /// The step header of a new reset row at `index`, which begins a new episode. An
    /// episode still open is abandoned: it counts as truncated at its last row (its
    /// environment was reset, or lost with a crashed process).
    pub(crate) fn begin(&mut self, index: u64) -> StepHeader {
        if let Some(e) = self.list.back_mut().filter(|e| e.end.is_none()) {
            e.end = Some(End::Truncated);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.list.push_back(EpisodeInfo {
            id,
            start: index,
            rows: 1,
            end: None,
            ret: 0.0,
            ret_complete: true,
        });
        StepHeader {
            episode: id,
            t: 0,
            flags: 0,
        }
    }

    /// The step header of a step row at `index` continuing the open episode.
    pub(crate) fn step(
        &mut self,
        index: u64,
        reward: f64,
        end: Option<End>,
    ) -> Result<(StepHeader, StepInfo)> {
        let Some(e) = self.list.back_mut().filter(|e| e.end.is_none()) else {
            return Err(Error::EpisodeOrder(
                "no episode is open: begin one with a reset row first".into(),
            ));
        };
        debug_assert_eq!(e.start + e.rows, index);
        let t = u32::try_from(e.rows).map_err(|_| {
            Error::EpisodeOrder(format!("episode {} is longer than 2^32 steps", e.id))
        })?;
        e.rows += 1;
        e.ret += reward;
        e.end = end;
        let header = StepHeader {
            episode: e.id,
            t,
            flags: end_flags(end),
        };
        let info = StepInfo {
            index,
            episode: e.id,
            t,
            ended: end.map(|_| (e.ret, e.steps(), e.start)),
        };
        Ok((header, info))
    }

    /// Forgets episodes with no live row left (every row below `head`).
    pub(crate) fn evict(&mut self, head: u64) {
        while self.list.front().is_some_and(|e| e.last() < head) {
            self.list.pop_front();
        }
    }

    /// Forgets every episode (the buffer was cleared); numbering goes on.
    pub(crate) fn clear(&mut self) {
        self.list.clear();
    }

    /// The episode holding logical index `index`, if it is in the table.
    pub(crate) fn of(&self, index: u64) -> Option<&EpisodeInfo> {
        let i = self.list.partition_point(|e| e.start <= index);
        self.list
            .get(i.checked_sub(1)?)
            .filter(|e| index <= e.last())
    }

    /// The episode holding logical index `index`, found in O(1) when `hint` (the
    /// episode id in the row's step header) is right, by [`Episodes::of`] otherwise: a
    /// sampler that has the row's header in cache skips the binary search.
    pub(crate) fn of_hinted(&self, index: u64, hint: u64) -> Option<&EpisodeInfo> {
        let at = hint.checked_sub(self.list.front()?.id)?;
        match self.list.get(usize::try_from(at).ok()?) {
            Some(e) if e.id == hint && e.start <= index && index <= e.last() => Some(e),
            _ => self.of(index),
        }
    }

    /// The episode numbered `id`, if it has a live row (ids increase along the table).
    pub(crate) fn by_id(&self, id: u64) -> Option<&EpisodeInfo> {
        let i = self.list.partition_point(|e| e.id < id);
        self.list.get(i).filter(|e| e.id == id)
    }

    /// Positions in the table of the episodes a draw may take whole: ended, and every
    /// row live (from `head` on). Episodes lie in index order, rows end to end, so
    /// only the oldest can have rows below `head`, and only the newest can be open
    /// (`begin`, `walk_back` and `append` end any other as truncated): the rest are
    /// one range, found without a scan.
    pub(crate) fn whole_range(&self, head: u64) -> std::ops::Range<usize> {
        let first = self.list.partition_point(|e| e.start < head);
        let end = self.list.len() - usize::from(self.open().is_some());
        first..end.max(first)
    }

    /// The episode at position `i` of the table (oldest first).
    pub(crate) fn get(&self, i: usize) -> Option<&EpisodeInfo> {
        self.list.get(i)
    }

    /// Episodes in the table.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// All episodes with a live row, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &EpisodeInfo> {
        self.list.iter()
    }

    /// Rebuilds the table from the rows `head..tail`: `header(i)` is row `i`'s step
    /// header and `reward(i)` its reward. Each episode's rows must be consecutive, `t`
    /// counting up by one from its reset row (from the first live row when the ring
    /// evicted its start), and episode numbers must increase. An episode followed by
    /// another's reset row without having ended was abandoned: it counts as truncated.
    /// Returns the first row that breaks these rules, and how.
    pub(crate) fn rebuild(
        &mut self,
        head: u64,
        tail: u64,
        mut header: impl FnMut(u64) -> StepHeader,
        mut reward: impl FnMut(u64) -> f64,
    ) -> std::result::Result<(), (u64, String)> {
        self.list.clear();
        for i in head..tail {
            let h = header(i);
            let continues = self
                .list
                .back()
                .is_some_and(|e| e.end.is_none() && h.episode == e.id && u64::from(h.t) == e.rows);
            if continues {
                if let Some(e) = self.list.back_mut() {
                    e.rows += 1;
                    e.ret += reward(i);
                    e.end = end_of(h.flags);
                }
                continue;
            }
            if h.t != 0 && i != head {
                let expected = match self.list.back() {
                    Some(e) if e.end.is_none() => format!("episode {} step {}", e.id, e.rows),
                    _ => "the reset row (step 0) of a new episode".into(),
                };
                return Err((
                    i,
                    format!(
                        "row of episode {} step {}, where {expected} was expected",
                        h.episode, h.t
                    ),
                ));
            }
            if let Some(prev) = self.list.back_mut() {
                if h.episode <= prev.id {
                    return Err((
                        i,
                        format!("episode {} begins after episode {}", h.episode, prev.id),
                    ));
                }
                if prev.end.is_none() {
                    prev.end = Some(End::Truncated);
                }
            }
            let start = i - u64::from(h.t).min(i);
            self.list.push_back(EpisodeInfo {
                id: h.episode,
                start,
                rows: i - start + 1,
                end: end_of(h.flags),
                ret: if h.t > 0 { reward(i) } else { 0.0 },
                ret_complete: h.t <= 1,
            });
        }
        if let Some(e) = self.list.back() {
            self.next_id = self.next_id.max(e.id + 1);
        }
        Ok(())
    }

    /// The table of the live rows `head..tail` of `ring`, read from their step headers
    /// and reward fields; numbering goes on past the newest row written, live or not (a
    /// cleared buffer). A chain that breaks is `BadItem` naming the row's file and offset
    /// (`dir` when the row cannot be located).
    pub(crate) fn from_rows(
        schema: &Schema,
        ring: &crate::storage::ring::Ring,
        capacity: u64,
        head: u64,
        tail: u64,
        dir: &std::path::Path,
    ) -> Result<Episodes> {
        let mut table = Episodes::new(schema);
        let reward = table.reward_field();
        let rebuilt = table.rebuild(
            head,
            tail,
            |i| ring.step_header(i % capacity),
            |i| reward.map_or(0.0, |(f, dtype)| ring.field_f64(i % capacity, f, dtype)),
        );
        if let Err((index, problem)) = rebuilt {
            return Err(bad_step_header(ring, capacity, dir, index, &problem));
        }
        let newest = tail.wrapping_sub(1);
        if tail > 0 && ring.stamp(newest % capacity) == crate::format::row::stamp_of(newest) {
            table.continue_after(ring.step_header(newest % capacity).episode + 1);
        }
        Ok(table)
    }

    /// The episodes of the rows `from..tail`, oldest first, read from the step header of
    /// each one's last row only: its `t` says where the episode began and its flags how
    /// it ended, so the walk from the newest row down costs O(episodes), not O(rows).
    /// The walk stops at the episode holding row `from` (which may have begun below it).
    /// An episode followed by a newer one without having ended counts as truncated,
    /// except the newest. Returns are not read (`ret` is NaN, `ret_complete` false; see
    /// [`Episodes::with_return`]). A header that cannot be right (an episode number not
    /// below the newer one's, a `t` reaching below index 0) stops the walk: the
    /// episodes above it are returned with the row and what is wrong with it.
    pub(crate) fn walk_back(
        from: u64,
        tail: u64,
        mut header: impl FnMut(u64) -> StepHeader,
    ) -> (VecDeque<EpisodeInfo>, Option<(u64, String)>) {
        let mut found: VecDeque<EpisodeInfo> = VecDeque::new();
        let mut j = tail;
        while j > from {
            let last = j - 1;
            let h = header(last);
            let problem = if u64::from(h.t) > last {
                Some(format!("step {} at index {last}, before index 0", h.t))
            } else {
                (found.front())
                    .filter(|newer| h.episode >= newer.id)
                    .map(|newer| format!("episode {} ends before episode {}", h.episode, newer.id))
            };
            if let Some(problem) = problem {
                return (found, Some((last, problem)));
            }
            let start = last - u64::from(h.t);
            let end = match end_of(h.flags) {
                None if !found.is_empty() => Some(End::Truncated),
                end => end,
            };
            found.push_front(EpisodeInfo {
                id: h.episode,
                start,
                rows: last - start + 1,
                end,
                ret: f64::NAN,
                ret_complete: false,
            });
            j = start;
        }
        (found, None)
    }

    /// Appends the episodes `walk_back` found for the rows from `from` on: the oldest
    /// continues the table's newest episode when it began below `from`, else begins after
    /// it (which is then truncated if still open). A walk that does not fit the table is
    /// `Err` naming row `from`; the table is then left as it was.
    pub(crate) fn append(
        &mut self,
        from: u64,
        newer: &VecDeque<EpisodeInfo>,
    ) -> std::result::Result<(), (u64, String)> {
        let Some(oldest) = newer.front().copied() else {
            return Ok(());
        };
        let mut skip = 0;
        match self.list.back_mut() {
            Some(e) if oldest.start < from => {
                if (e.id, e.start) != (oldest.id, oldest.start) {
                    return Err((
                        from,
                        format!(
                            "row of episode {} begun at {}, where episode {} begun at {} goes on",
                            oldest.id, oldest.start, e.id, e.start
                        ),
                    ));
                }
                // The episode goes on. Its return is not followed: a reader's draws
                // never read one.
                e.rows = oldest.rows;
                e.end = oldest.end;
                skip = 1;
            }
            Some(e) => {
                if oldest.id <= e.id {
                    return Err((
                        from,
                        format!("episode {} begins after episode {}", oldest.id, e.id),
                    ));
                }
                if e.end.is_none() {
                    e.end = Some(End::Truncated);
                }
            }
            None => {}
        }
        if let Some(e) = newer.back() {
            self.next_id = self.next_id.max(e.id + 1);
        }
        self.list.extend(newer.iter().skip(skip).copied());
        Ok(())
    }

    /// The table of the live rows `head..tail` of `ring`, read by [`Episodes::walk_back`]
    /// (what the writer's open and a reader's first unit draw read: O(episodes)). The
    /// newest episode's return is summed from its live rows, so that the return an
    /// `add_step` reports when it ends it is whole; older ones' are read when asked for
    /// ([`Episodes::with_return`]). A header that cannot be right is `BadItem` naming
    /// its row's file and offset. Numbering goes on past the newest row written.
    pub(crate) fn from_last_rows(
        schema: &Schema,
        ring: &crate::storage::ring::Ring,
        capacity: u64,
        (head, tail): (u64, u64),
        dir: &std::path::Path,
    ) -> Result<Episodes> {
        let mut table = Episodes::new(schema);
        let (found, problem) = Episodes::walk_back(head, tail, |i| ring.step_header(i % capacity));
        if let Some((index, problem)) = problem {
            return Err(bad_step_header(ring, capacity, dir, index, &problem));
        }
        table.list = found;
        if let Some(e) = table.list.back().copied() {
            table.next_id = e.id + 1;
            let reward = table.reward;
            let r = |i| reward.map_or(0.0, |(f, dtype)| ring.field_f64(i % capacity, f, dtype));
            if let Some(last) = table.list.back_mut() {
                *last = with_return(&e, head, r);
            }
        }
        let newest = tail.wrapping_sub(1);
        if tail > 0 && ring.stamp(newest % capacity) == crate::format::row::stamp_of(newest) {
            table.continue_after(ring.step_header(newest % capacity).episode + 1);
        }
        Ok(table)
    }

    /// `e` with its return, summed from its rows live above `head` by `reward` when the
    /// table has not kept it (an episode that had ended when the buffer was opened).
    pub(crate) fn with_return(
        &self,
        e: &EpisodeInfo,
        head: u64,
        reward: impl Fn(u64) -> f64,
    ) -> EpisodeInfo {
        match self.reward {
            Some(_) => with_return(e, head, reward),
            None => with_return(e, head, |_| 0.0),
        }
    }

    /// Numbering continues after `id` (an empty table after a clear keeps counting).
    pub(crate) fn continue_after(&mut self, next_id: u64) {
        self.next_id = self.next_id.max(next_id);
    }
}

impl Episodes {
    /// The table an episodic buffer's writer or snapshot keeps (built by `ready`); a
    /// reader keeps its own outside the parts (`draw/follow.rs`), read before each
    /// unit draw, since the rows change under it.
    pub(crate) fn for_holder(at: &Opening<'_>) -> Option<Episodes> {
        (at.sb.episodic && at.holder != Holder::Live).then(|| Episodes::new(at.schema))
    }
}

impl Part for Episodes {
    /// The step headers must chain into whole episodes, as the writer's open needs.
    fn verify(at: &Checking<'_>, found: &mut Found<'_>) {
        if !(at.sb.episodic && at.items) {
            return;
        }
        let rebuilt =
            Episodes::from_rows(at.schema, at.ring, at.sb.capacity, at.head, at.tail, at.dir);
        if let Err(e) = rebuilt {
            found.problems.push(crate::error::Finding::of(&e, at.dir));
        }
    }

    /// Read from the last row of each episode (O(episodes), not O(rows): the open of a
    /// buffer of a million steps reads a few thousand headers); `verify` reads them all.
    fn ready(&mut self, at: &Opening<'_>, live: LiveRange) -> Result<()> {
        let live = (live.head, live.tail);
        *self = Episodes::from_last_rows(at.schema, at.ring, at.sb.capacity, live, at.dir)?;
        Ok(())
    }

    /// The episodes the head has passed are forgotten (`begin` / `step` recorded the
    /// row before it was stored: its header carries what they return).
    #[inline(always)]
    fn on_row(&mut self, row: &NewRow) {
        self.evict(row.head);
    }

    fn on_clear(&mut self, _tail: u64) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Step headers of episodes of `lens[k]` steps each (ending as `ends[k]`: 0
    /// terminated, 1 truncated, 2 not at all), from episode 0 at index 0.
    fn headers(lens: &[u64], ends: &[u8]) -> Vec<StepHeader> {
        let mut out = Vec::new();
        for (id, (&steps, &end)) in lens.iter().zip(ends).enumerate() {
            for t in 0..=steps {
                let flags = match (t == steps && t > 0, end) {
                    (true, 0) => STEP_TERMINATED,
                    (true, 1) => STEP_TRUNCATED,
                    _ => 0,
                };
                out.push(StepHeader {
                    episode: id as u64,
                    t: t as u32,
                    flags,
                });
            }
        }
        out
    }

    /// What a walk cannot know: returns.
    fn shape(t: &Episodes) -> Vec<(u64, u64, u64, Option<End>)> {
        t.iter().map(|e| (e.id, e.start, e.rows, e.end)).collect()
    }

    proptest! {
        /// Reading only each episode's last row finds the table that reading every row
        /// does, for any live range; and a walk continued in pieces (a reader following
        /// the writer's adds) finds it too.
        #[test]
        fn a_walk_over_last_rows_finds_the_table_every_row_gives(
            eps in prop::collection::vec((0u64..6, 0u8..3), 1..30),
            cut in 0usize..1000,
            pieces in prop::collection::vec(0usize..1000, 0..6),
        ) {
            let (lens, ends): (Vec<u64>, Vec<u8>) = eps.into_iter().unzip();
            let h = headers(&lens, &ends);
            let tail = h.len() as u64;
            let head = (cut as u64) % tail;
            let schema = Schema::builder()
                .field("x", crate::DType::U8, &[])
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            let mut full = Episodes::new(&schema);
            let rebuilt = full.rebuild(head, tail, |i| h[i as usize], |_| 0.0);
            prop_assert!(rebuilt.is_ok(), "{rebuilt:?}");
            let (found, problem) = Episodes::walk_back(head, tail, |i| h[i as usize]);
            prop_assert!(problem.is_none(), "{problem:?}");
            let mut walked = Episodes::new(&schema);
            prop_assert!(walked.append(head, &found).is_ok());
            prop_assert_eq!(shape(&walked), shape(&full));
            // The same rows read in pieces, each piece's walk appended to the table.
            let mut cuts: Vec<u64> = pieces.iter().map(|&p| head + p as u64 % (tail - head + 1)).collect();
            cuts.extend([head, tail]);
            cuts.sort_unstable();
            let mut followed = Episodes::new(&schema);
            for w in cuts.windows(2) {
                let (found, problem) = Episodes::walk_back(w[0], w[1], |i| h[i as usize]);
                prop_assert!(problem.is_none(), "{problem:?}");
                prop_assert!(followed.append(w[0], &found).is_ok());
            }
            prop_assert_eq!(shape(&followed), shape(&full));
        }
    }

    #[test]
    fn a_walk_stops_at_a_header_that_cannot_be_right() {
        let mut h = headers(&[3, 2, 4], &[0, 1, 0]);
        // Episode 1's last row (index 6) claims episode 2: not below the newer one's.
        h[6].episode = 2;
        let (found, problem) = Episodes::walk_back(0, h.len() as u64, |i| h[i as usize]);
        assert_eq!(found.len(), 1, "only the newest episode was read before it");
        assert_eq!(problem.map(|p| p.0), Some(6));
        // A `t` reaching below index 0.
        let mut h = headers(&[3], &[0]);
        h[3].t = 9;
        let (_, problem) = Episodes::walk_back(0, 4, |i| h[i as usize]);
        assert_eq!(problem.map(|p| p.0), Some(3));
    }
}
