//! The fragment table of a fragment buffer (superblock flag bit 3): the rows of each
//! `add` / `add_batch` call, in order. Every row stores its position in its call and
//! whether it is the call's last row, so the table is rebuilt from the rows when first
//! needed and then kept by the adds, and a call a kill cut short is never whole.
//! With item states, each fragment counts its removed rows (from the state words when
//! the table is built, then from each removal), so a draw of whole fragments skips one
//! that lost a row, and downsampling finds the fragments that still have one.

use crate::format::row::{FRAGMENT_END, FRAGMENT_MAX_POS};

use super::hooks::{NewRow, Part};

use std::collections::VecDeque;
use std::ops::Range;

/// The rows of one `add` / `add_batch` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fragment {
    /// Logical index of its first row (live or evicted).
    pub start: u64,
    /// One past its newest row.
    pub end: u64,
    /// Whether its call's last row is stored: the fragment has every row it will have.
    pub closed: bool,
    /// Of its rows, those removed (item states) while they were live.
    pub removed: u64,
}

impl Fragment {
    /// Its logical indices.
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
    }

    /// Whether a draw of whole fragments may return it: every row it will have is
    /// stored (`head` is the buffer's oldest live index) and none was removed.
    pub fn whole(&self, head: u64) -> bool {
        self.closed && self.start >= head && self.removed == 0
    }
}

/// Fragments with a live row, oldest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fragments {
    list: VecDeque<Fragment>,
}

impl Fragments {
    /// The table of rows `head..` whose position words `rows` yields in index order.
    pub(crate) fn from_positions(rows: impl Iterator<Item = (u64, u32)>) -> Fragments {
        let mut f = Fragments::default();
        for (index, pos) in rows {
            f.on_add(index, pos);
        }
        f
    }

    /// Row `index` was added with position word `word` (its position in its call,
    /// and [`FRAGMENT_END`] on the call's last row). A position that saturated (a call
    /// of 2^31 rows or more) continues the open fragment before it.
    pub(crate) fn on_add(&mut self, index: u64, word: u32) {
        let pos = word & !FRAGMENT_END;
        let closed = word & FRAGMENT_END != 0;
        let start = index.saturating_sub(u64::from(pos));
        if let Some(last) = self.list.back_mut()
            && last.end == index
            && !last.closed
            && (last.start == start || pos == FRAGMENT_MAX_POS)
        {
            last.end += 1;
            last.closed = closed;
            return;
        }
        self.list.push_back(Fragment {
            start,
            end: index + 1,
            closed,
            removed: 0,
        });
    }

    /// Counts the removed rows of each fragment from `head` on, as `removed` says of
    /// each index: once, when the table is built from the rows of a buffer with item
    /// states.
    pub(crate) fn count_removed(&mut self, head: u64, removed: impl Fn(u64) -> bool) {
        for f in &mut self.list {
            f.removed = (f.start.max(head)..f.end).filter(|&i| removed(i)).count() as u64;
        }
    }

    /// Row `index` was removed: its fragment counts it. Fragments lie in index order,
    /// so it is found by bisection.
    pub(crate) fn note_removed(&mut self, index: u64) {
        let k = self.list.partition_point(|f| f.end <= index);
        if let Some(f) = self.list.get_mut(k).filter(|f| f.start <= index) {
            f.removed += 1;
        }
    }

    /// Forgets fragments with no live row left.
    pub(crate) fn evict(&mut self, head: u64) {
        while self.list.front().is_some_and(|f| f.end <= head) {
            self.list.pop_front();
        }
    }

    /// Forgets every fragment (the buffer was cleared).
    pub(crate) fn clear(&mut self) {
        self.list.clear();
    }

    /// Fragments with a live row, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Fragment> {
        self.list.iter()
    }
}

/// Built from the rows when first drawn from (`Option::None` until then), then kept by
/// the adds.
impl Part for Fragments {
    #[inline(always)]
    fn on_row(&mut self, row: &NewRow) {
        self.on_add(row.index, row.fragment);
    }

    fn on_clear(&mut self, _tail: u64) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const END: u32 = FRAGMENT_END;

    fn ranges(f: &Fragments) -> Vec<(Range<u64>, bool)> {
        f.iter().map(|x| (x.range(), x.closed)).collect()
    }

    #[test]
    fn positions_split_rows_into_their_calls() {
        // Calls of 3, 1, 2 rows from index 10, the first already partly evicted (its
        // rows 10.. show positions 1 and 2), then one cut short by a kill.
        let rows = [
            (11, 1),
            (12, 2 | END),
            (13, END),
            (14, 0),
            (15, 1 | END),
            (16, 0),
            (17, 1),
        ];
        let f = Fragments::from_positions(rows.into_iter());
        assert_eq!(
            ranges(&f),
            vec![
                (10..13, true),
                (13..14, true),
                (14..16, true),
                (16..18, false)
            ]
        );
    }

    #[test]
    fn a_saturated_position_continues_its_fragment() {
        let f = Fragments::from_positions(
            [
                (5, 0),
                (6, 1),
                (7, FRAGMENT_MAX_POS),
                (8, FRAGMENT_MAX_POS | END),
            ]
            .into_iter(),
        );
        assert_eq!(ranges(&f), vec![(5..9, true)]);
    }

    #[test]
    fn eviction_drops_only_fragments_with_no_live_row() {
        let mut f =
            Fragments::from_positions([(0, 0), (1, 1 | END), (2, 0), (3, 1 | END)].into_iter());
        f.evict(1);
        assert_eq!(f.iter().count(), 2);
        f.evict(2);
        assert_eq!(ranges(&f), vec![(2..4, true)]);
    }

    #[test]
    fn removals_are_counted_in_their_fragment_and_a_counted_one_is_not_whole() {
        let mut f = Fragments::from_positions(
            [(0, 0), (1, 1 | END), (2, END), (3, 0), (4, 1), (5, 2 | END)].into_iter(),
        );
        f.count_removed(1, |i| i == 0 || i == 4); // row 0 is before the head
        f.note_removed(2);
        f.note_removed(9); // past every fragment: nothing to count
        let removed: Vec<u64> = f.iter().map(|x| x.removed).collect();
        assert_eq!(removed, vec![0, 1, 1]);
        let whole: Vec<bool> = f.iter().map(|x| x.whole(0)).collect();
        assert_eq!(whole, vec![true, false, false]);
        assert!(!f.iter().next().unwrap().whole(1), "partly evicted");
    }
}
