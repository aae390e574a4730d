//! The tables a reader follows: the episode table and the fragment table of the rows
//! its writer (in another process, or this one) has added, so that a reader draws
//! transitions, sequences, episodes and fragments with the writer's own code and gets
//! the writer's units for the same rows and RNG stream.
//!
//! The writer keeps both tables as it adds; a reader cannot see those. It reads what the
//! writer added since it last looked: for episodes, the step header of each new
//! episode's last row only (`Episodes::walk_back`: O(episodes), so a reader's first
//! episodic draw on a buffer of a million steps reads a few thousand headers), for
//! fragments the position word of each new row. Then it forgets what the head has
//! passed.
//!
//! Rows are read without a lock while the writer may be lapping the ring. The writer
//! moves the head past a row before it overwrites it, so the head loaded after the reads
//! (`settle`) bounds what may have been torn: everything read below it is dropped as
//! evicted, and everything at or above it was intact when read. A header that cannot be
//! right at or above that head is damage (`BadItem`); below it, a lost race.

use crate::error::Result;
use crate::parts::episodes::{Episodes, bad_step_header};
use crate::parts::fragments::Fragments;
use crate::parts::lifecycle::Lifecycle;

use super::rows::Rows;

/// The tables of the rows read so far.
#[derive(Debug, Default)]
pub(crate) struct Followed {
    /// The episode table (episodic buffers), once read.
    episodes: Option<Episodes>,
    /// The fragment table (fragment buffers), once read.
    fragments: Option<Fragments>,
    /// The rows below this index have been read into the tables.
    read_to: u64,
    /// The files epoch the rows were read at: files replaced since (a restore) are read
    /// again from their head.
    epoch: u64,
}

/// A header the last read found that cannot be right: its row, and what is wrong. Damage
/// if the row is still live once the head is loaded again, a lost race if not.
pub(crate) type Suspect = Option<(u64, String)>;

impl Followed {
    /// The episode table, if read.
    pub(crate) fn episodes(&self) -> Option<&Episodes> {
        self.episodes.as_ref()
    }

    /// The fragment table, if read.
    pub(crate) fn fragments(&self) -> Option<&Fragments> {
        self.fragments.as_ref()
    }

    /// Reads into the tables the rows of `rows` (as of its last look at the progress
    /// page, at files `epoch`) not read before: those the writer added since the last
    /// call, or every live row after a restore, a lap past every row read, or the first
    /// time. Call [`Followed::settle`] with the head loaded afterwards before using them.
    pub(crate) fn read_new_rows(&mut self, rows: &Rows, epoch: u64) -> Suspect {
        let sb = &rows.superblock;
        let (head, tail, cap) = (rows.head, rows.tail, sb.capacity);
        let known = self.episodes.is_some() || self.fragments.is_some();
        let from = if known && self.epoch == epoch && (head..=tail).contains(&self.read_to) {
            self.read_to
        } else {
            *self = Followed::default();
            head
        };
        let ring = &rows.ring;
        let mut suspect = None;
        if sb.episodic {
            let (found, problem) = Episodes::walk_back(from, tail, |i| ring.step_header(i % cap));
            let table = (self.episodes).get_or_insert_with(|| Episodes::new(&rows.schema));
            let appended = match problem {
                Some(p) => Err(p),
                None => table.append(from, &found),
            };
            if let Err(problem) = appended {
                // Only the episodes read above the problem are kept: if the rows below
                // it were torn, the head is past them by now (`settle` says).
                *table = Episodes::new(&rows.schema);
                let _empty_table_takes_any = table.append(from, &found);
                suspect = Some(problem);
            }
        }
        if sb.fragments {
            let table = self.fragments.get_or_insert_with(Fragments::default);
            for i in from..tail {
                table.on_add(i, ring.fragment_pos(i % cap));
            }
        }
        (self.read_to, self.epoch) = (tail, epoch);
        suspect
    }

    /// The writer's head was at `head` after the last read: forgets what lies below it,
    /// and with item states recounts the removed rows of each fragment from `life`'s
    /// words (the writer's removals are not in the rows). A suspect header at or above
    /// `head` was read intact: it is `BadItem`, and the tables are dropped.
    pub(crate) fn settle(
        &mut self,
        rows: &Rows,
        head: u64,
        suspect: Suspect,
        life: Option<&Lifecycle>,
    ) -> Result<()> {
        if let Some((index, problem)) = suspect.filter(|s| s.0 >= head) {
            *self = Followed::default();
            let cap = rows.superblock.capacity;
            return Err(bad_step_header(&rows.ring, cap, &rows.dir, index, &problem));
        }
        if let Some(t) = &mut self.episodes {
            t.evict(head);
        }
        if let Some(t) = &mut self.fragments {
            t.evict(head);
            if let Some(life) = life {
                t.count_removed(head, |i| life.is_removed(i));
            }
        }
        Ok(())
    }
}
