//! Parts of a buffer beyond the core ring of rows: each owns its state and its files
//! (priorities: the sum-tree file; episodes: the table built from step headers;
//! fragments: the fragment table; snapshots: the snapshot folders and restores;
//! evictions: the records that let adds overwrite committed items). `hooks` is what
//! each part answers; `set` calls every part at each hook, so the core names none.

pub mod config;
pub mod episodes;
pub(crate) mod evictions;
pub(crate) mod fragments;
pub(crate) mod heap;
pub(crate) mod hooks;
pub mod lifecycle;
pub mod priorities;
pub(crate) mod recovery;
pub(crate) mod set;
pub mod snapshot;
pub(crate) mod tree_role;
