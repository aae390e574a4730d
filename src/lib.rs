//! replaystore: a reinforcement-learning replay buffer kept in memory-mapped files.
//!
//! A buffer is a directory of fixed-layout files mapped into memory, so the buffer *is*
//! its on-disk state: nothing is serialized to checkpoint it and nothing is parsed to
//! open it. Items get logical indices that are never reused; each slot carries a stamp
//! (written last) and a checksum, so a killed writer loses nothing it acknowledged and a
//! damaged file is an error, never a wrong sample.
//!
//! ```
//! use replaystore::{Column, Config, DType, ReplayBuffer, Request, Schema};
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
//! let batch = buf.sample(Request::rows(4).without_replacement())?;
//! assert_eq!(batch.get::<i64>("action")?, &[1, 1, 1, 1]);
//! buf.flush()?; // survives power loss from here
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
// A type the API hands out must be nameable (the layer folders are private).
#![warn(unnameable_types)]

// The layers, bottom up (docs/ARCHITECTURE.md, "Layers"): each imports only the ones
// below it (tests/layers.rs). The value types (dtype, error, schema, column, request,
// sink, batch) sit under all of them.
mod algo; // pure algorithms: recovery's decisions, the sum-tree, draws, windows
mod draw; // the draw machinery the handles share: rows, units, transitions, groups
mod format; // byte layouts of every file, as pure functions over byte slices
mod handle; // what a program holds: writer, reader, priority owner, lanes
mod inspect; // `inspect` and `verify`: a folder read without opening it for use
mod parts; // what a buffer holds beyond its rows: priorities, episodes, fragments, snapshots
mod storage;
mod store; // a buffer as its writer holds it: open, recovery, add, commit, removals // files, mappings, the Io seam and the ring of rows: the only `unsafe`

mod batch;
mod column;
mod dtype;
mod error;
mod killpoint;
pub mod request;
mod schema;
mod sink;

pub use algo::lookback::Indices;
pub use algo::recovery::Recovered;
pub use algo::windows::End;
pub use batch::{Batch, FieldArray, VarArray};
pub use column::Column;
pub use dtype::{DType, Element};
pub use error::{Error, Finding, Result};
pub use format::FORMAT_VERSION;
pub use format::lifecycle::{Cause, RateLimit};
pub use format::state::State;
pub use handle::{
    Actor, BufferGroup, Config, EpisodeChunk, Frozen, GetOptions, GroupCount, GroupState,
    HoldsTree, Lane, Lanes, LanesState, PriorityLane, PriorityOwner, Reader, ReplayBuffer, Role,
    Stats, Writer, Writes,
};
pub use inspect::{
    EpisodeStats, Info, Report, ValueLengths, ValueStats, VerifyOptions, inspect, verify,
    verify_opts,
};
pub use parts::config::{DEFAULT_CHUNK_BYTES, DEFAULT_HEAP_BYTES_PER_ITEM, DEFAULT_SEGMENT_BYTES};
pub use parts::episodes::{EpisodeInfo, StepInfo};
pub use parts::lifecycle::{ItemState, ItemStats, Removals};
pub use parts::priorities::{Priority, PriorityConfig, PrioritySummary, PriorityUpdate};
pub use parts::snapshot::{SnapshotInfo, snapshots};
pub use request::{GoalStrategy, GroupRequest, Pick, Relabel, Request, Unit};
pub use schema::{Field, Schema, SchemaBuilder, ValueFault, VarField, VarKind};
pub use sink::{Array, GrowValues, Layout, Sink, ValuesOut};
pub use storage::io;
pub use storage::pread::RowAccess;

/// The copy and prefetch the engine's gather uses, and the host's memory, in safe forms:
/// what a benchmark's floor (the same work by the plainest code) is held to, so that it
/// does the work by the same means as the engine it bounds (`replaystore-bench`).
pub mod kernels {
    pub use crate::storage::crc::row_check_path;
    pub use crate::storage::map::{copy_field, prefetch_bytes};
    pub use crate::storage::mem_total;
}

/// What the CLI, the tests, the fuzz targets and the benches reach beyond the public
/// API: byte layouts, file names and the pure algorithms they check the engine against.
/// Not part of the API: no stability promise, and nothing here maps a file.
#[doc(hidden)]
pub mod internal {
    /// Byte layouts of every file (docs/FORMAT.md).
    pub mod format {
        pub use crate::format::*;
    }
    /// File names and the metadata the CLI reads without opening a buffer.
    pub mod storage {
        pub use crate::storage::crc::SpanCrc;
        pub use crate::storage::{
            LANE_DIR, MANIFEST, Manifest, heap_segment_path, lane_dir, read_group, read_lanes,
            resolve_root, segment_path,
        };

        /// Opens segment `n` of the buffer in `dir` read-only and lets it go: the checks
        /// a reader's open makes of one segment file, without handing out its mapping.
        pub fn check_segment(
            io: &dyn crate::io::Io,
            dir: &std::path::Path,
            sb: &crate::format::manifest::Superblock,
            n: u64,
        ) -> crate::Result<()> {
            crate::storage::open_segment(
                io,
                dir,
                &crate::storage::SegmentSet::rows(sb),
                n,
                crate::io::Access::Read,
            )
            .map(drop)
        }

        /// `check_segment` for segment `n` of the chunk ring (variable-length values).
        pub fn check_heap_segment(
            io: &dyn crate::io::Io,
            dir: &std::path::Path,
            sb: &crate::format::manifest::Superblock,
            n: u64,
        ) -> crate::Result<()> {
            let Some(set) = crate::storage::SegmentSet::heap(sb) else {
                return Err(crate::Error::Unsupported("the buffer keeps no chunk ring"));
            };
            crate::storage::open_segment(io, dir, &set, n, crate::io::Access::Read).map(drop)
        }
    }
    pub use crate::algo::{lookback, sumtree, windows};
    pub use crate::parts::priorities::PriorityInfo;
    pub use crate::parts::snapshot::snapshot_dir;
    pub use crate::sink::check_rows;
}
