//! Pure algorithms over plain values: what recovery decides from stamps, the sum-tree,
//! the sampling draws, episode windows and lookback. No files, no mappings, no `unsafe`:
//! each is tested (and property-tested) on its own.

pub(crate) mod entropy;
pub mod lookback;
pub mod recovery;
pub mod sample;
pub mod sumtree;
pub mod windows;
