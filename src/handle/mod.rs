//! Handles: what a program holds to use a buffer, one type per thing it may do. The
//! writer adds and checkpoints; a reader samples a buffer another process writes; a
//! priority owner keeps the tree while actors add; lanes are one buffer per producer;
//! `inspect` and `verify` read a folder without opening it for use.

mod core;
pub mod inspect;
mod lanes;
mod owner;
mod reader;
mod transitions;
mod units;
mod views;
mod writer;

pub use lanes::{Lane, Lanes};
pub use owner::PriorityOwner;
pub use reader::Reader;
pub use transitions::{TransitionSpec, Transitions};
pub use units::{EpisodeBatch, FragmentBatch, SequenceSpec, Sequences, UnitSpec};
pub use views::{EpisodeChunk, GetOptions};
use writer::Role;
pub use writer::{Config, ReplayBuffer, Stats};
