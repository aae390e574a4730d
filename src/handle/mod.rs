//! Handles: what a program holds to use a buffer, one type per thing it may do. The
//! writer adds and checkpoints; a reader samples a buffer another process writes; a
//! priority owner keeps the tree while actors add; lanes are one buffer per producer.
//! The draws they share are `draw/`'s.

mod lanes;
mod owner;
mod reader;
mod views;
mod writer;

pub use crate::draw::GroupCount;
pub use crate::parts::config::{Config, Stats};
pub use lanes::{BufferGroup, GroupState, Lane, Lanes, LanesState, PriorityLane};
pub use owner::PriorityOwner;
pub use reader::Reader;
pub use views::{EpisodeChunk, GetOptions};
pub use writer::{Actor, Frozen, HoldsTree, ReplayBuffer, Role, Writer, Writes};
