//! replaystore: a reinforcement-learning replay buffer kept in memory-mapped files.
//!
//! A buffer is a directory of fixed-layout files mapped into memory, so the buffer *is*
//! its on-disk state: nothing is serialized to checkpoint it and nothing is parsed to
//! open it. Items get logical indices that are never reused; each slot carries a stamp
//! (written last) and a checksum, so a killed writer loses nothing it acknowledged and a
//! damaged file is an error, never a wrong sample.
//!
//! ```
//! use replaystore::{Column, Config, DType, ReplayBuffer, SampleSpec, Schema};
//! let dir = tempfile::tempdir()?;
//! let schema = Schema::builder()
//!     .field("obs", DType::F32, &[4])
//!     .field("action", DType::I64, &[])
//!     .field("done", DType::Bool, &[])
//!     .build()?;
//! let mut buf = ReplayBuffer::create(dir.path().join("buf"), Config::new(schema, 1000).seed(0))?;
//! // A batch of 8 steps: columns with the batch dimension first.
//! let obs = vec![0.5f32; 8 * 4];
//! let action = [1i64; 8];
//! let done = [false; 8];
//! let added = buf.add_batch(&[
//!     Column::new("obs", &obs).with_shape(&[8, 4]),
//!     Column::new("action", &action),
//!     Column::new("done", &done),
//! ])?;
//! assert_eq!(added, 0..8);
//! let batch = buf.sample_with(&SampleSpec::new(4).without_replacement())?;
//! assert_eq!(batch.get::<i64>("action")?, &[1, 1, 1, 1]);
//! buf.flush()?; // survives power loss from here
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod batch;
pub mod buffer;
pub mod column;
pub mod dtype;
mod entropy;
pub mod episodes;
pub mod error;
pub mod format;
pub(crate) mod fragments;
pub mod inspect;
mod killpoint;
pub mod lookback;
pub mod priorities;
pub mod recovery;
pub mod ring;
pub mod sample;
pub mod schema;
pub mod snapshot;
pub mod storage;
pub mod sumtree;
pub mod windows;
pub mod workloads;

pub use batch::{Batch, FieldArray};
pub use buffer::{
    Config, EpisodeBatch, EpisodeChunk, FragmentBatch, GetOptions, Lane, Lanes, PriorityOwner,
    Reader, ReplayBuffer, SequenceSpec, Sequences, Stats, TransitionSpec, Transitions, UnitSpec,
};
pub use column::Column;
pub use dtype::{DType, Element};
pub use episodes::{EpisodeInfo, StepInfo};
pub use error::{Error, Result};
pub use format::state::State;
pub use inspect::{EpisodeStats, Info, Report, VerifyOptions, inspect, verify, verify_opts};
pub use priorities::{Priority, PriorityConfig, PrioritySpec, PrioritySummary, PriorityUpdate};
pub use sample::SampleSpec;
pub use schema::{Field, Schema};
pub use snapshot::{SnapshotInfo, snapshots};
pub use storage::pread::RowAccess;
