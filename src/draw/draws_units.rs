//! What a handle provides to draw units longer than one row (transitions, sequences,
//! episodes, fragments, groups): the draws in `units` and `transitions` are written
//! once against it, for the writer and a reader alike.

use rand::RngExt;

use super::rows::DrawsRows;
use super::stream::UnitArrays;
use crate::error::Result;
use crate::parts::episodes::Episodes;
use crate::parts::fragments::Fragments;
use crate::parts::priorities::PrioritySpec;
use crate::request::Request;
use crate::storage::map::Found;

/// A handle that draws units longer than one row: transitions, sequences, episodes,
/// fragments and groups. The writer and a reader draw them with the functions of this
/// module and `transitions`, from the same tables, so both return the same units for
/// the same RNG stream and rows. What differs is where the tables come from (the writer
/// keeps them as it adds; a reader reads the step headers and position words of the
/// rows the writer added since it last looked) and what a row the writer overwrote
/// mid-copy means (damage to the writer; a lost race to a reader, which draws again).
pub(crate) trait DrawsUnits: DrawsRows {
    /// The episode table, up to date with `rows()` (`NotEpisodic` without one).
    fn episode_table(&self) -> Result<&Episodes>;
    /// The fragment table, up to date with `rows()`, its removed rows counted.
    fn fragments(&mut self) -> Result<&Fragments>;
    /// Draws `indices.len()` live rows by priority with their importance weights,
    /// counting them as sampled.
    fn draw_by_priority(
        &mut self,
        spec: &PrioritySpec,
        indices: &mut [u64],
        weights: &mut [f32],
    ) -> Result<()>;
    /// The priority mass of each run `(first index, rows)` into `masses`.
    fn run_masses(&mut self, runs: &[(u64, u64)], masses: &mut Vec<f64>) -> Result<()>;
    /// The arrays a draw fills unit by unit, kept between draws.
    fn unit_scratch(&mut self) -> &mut UnitArrays;
    /// Whether live row `index` was removed (item states): in an episodic buffer, its
    /// episode was (a removal takes an episode's rows first to last, so an episode is
    /// removed when its first live row is).
    fn removed(&self, index: u64) -> bool;
    /// Whether the buffer keeps item states (without them, nothing is ever removed).
    fn keeps_states(&self) -> bool;
    /// A step row drawn uniformly from the live rows past the head that were not
    /// removed, or `None` when every row is removed or 64 laps' worth of draws found
    /// none. Without removals, one draw: the stream of a buffer without item states is
    /// unchanged.
    fn draw_kept_step(&mut self) -> Option<u64> {
        if self.drawable() == 0 {
            return None;
        }
        let span = self.rows().tail - self.rows().head;
        for _ in 0..64 * span.max(1) {
            let rows = self.rows_mut();
            let j = rows.draws.rng.random_range(rows.head + 1..rows.tail);
            if !self.removed(j) {
                return Some(j);
            }
        }
        None
    }
    /// Row `index` of a unit just drawn held `found` instead of the item: the writer's
    /// own rows never change under a draw, so to the writer that is damage (`BadItem`).
    /// A reader looks at the writer's head again: when it has passed `index` the race
    /// is lost and the unit is drawn again (`Ok`), from the rows still live.
    fn unit_lost(&mut self, index: u64, found: Found) -> Result<()>;
    /// Picks the groups of a groups `request` into `indices`, each group ending at the
    /// next of `offsets` (see `Rows::pick_groups`).
    fn pick_groups(
        &mut self,
        request: &Request<'_>,
        indices: &mut Vec<u64>,
        offsets: &mut Vec<u64>,
    ) -> Result<()>;
}
