//! Parts of a buffer beyond the core ring of rows: each owns its state and its files
//! (priorities: the sum-tree file; episodes: the table built from step headers;
//! fragments: the fragment table; snapshots: the snapshot folders and restores).

pub mod episodes;
pub(crate) mod fragments;
pub mod priorities;
pub mod snapshot;
