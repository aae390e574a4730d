//! The draw machinery every handle shares, under the handles: the rows and their
//! sampling stream (`rows`, `stream`), the draws of units longer than one row written
//! once for the writer and a reader alike (`units`, `transitions`, through the
//! `DrawsUnits` trait), the group index of stratified and grouped draws (`groups`), and
//! how a reader catches up with the rows a writer added (`follow`). A handle holds a
//! `Rows` and implements `DrawsRows` / `DrawsUnits`; what it may draw is its own.

mod draws_units;
mod follow;
pub(crate) mod groups;
mod rows;
mod stream;
mod transitions;
mod units;

pub(crate) use draws_units::DrawsUnits;
pub(crate) use follow::Followed;
pub use groups::GroupCount;
pub(crate) use groups::{GroupIndex, pick_from_groups};
pub(crate) use rows::{
    DrawsRows, Rows, UnitValues, VALUE_TRIES, check_not_removed, put_values_of, sample_rows,
};
pub(crate) use stream::{Draws, Picked, UnitArrays};
pub(crate) use units::sample_units;
