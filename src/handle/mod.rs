//! Handles: what a program holds to use a buffer, one type per thing it may do. The
//! writer adds and checkpoints; a reader samples a buffer another process writes; a
//! priority owner keeps the tree while actors add; lanes are one buffer per producer;
//! `inspect` and `verify` read a folder without opening it for use.

pub(crate) mod config;
mod core;
mod draws_units;
mod follow;
pub(crate) mod groups;
pub mod inspect;
mod lanes;
mod owner;
mod reader;
mod rows;
mod transitions;
mod units;
mod views;
mod writer;

pub use config::{Config, Stats};
pub use groups::GroupCount;
pub use lanes::{BufferGroup, GroupState, Lane, Lanes, LanesState, PriorityLane};
pub use owner::PriorityOwner;
pub use reader::Reader;
pub use views::{EpisodeChunk, GetOptions};
pub use writer::{Actor, Frozen, HoldsTree, ReplayBuffer, Role, Writer, Writes};
