//! The fragment table of a fragment buffer (superblock flag bit 3): the rows of each
//! `add` / `add_batch` call, in order. Every row stores its position in its call and
//! whether it is the call's last row, so the table is rebuilt from the rows when first
//! needed and then kept by the adds, and a call a kill cut short is never whole.

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
}

impl Fragment {
    /// Its logical indices.
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
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
        });
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
}
