//! The store's state beside its rows: the commit slots and locks (`Commits`) and the
//! buffers reused across adds so that an add allocates nothing (`Scratch`).

use std::fs::File;
use std::path::PathBuf;

use crate::column::NameCache;
use crate::draw::UnitArrays;
use crate::storage::behind::WriteBehind;

/// The MANIFEST's commit slots as this handle writes them, and the locks it holds.
#[derive(Debug)]
pub(crate) struct Commits {
    pub path: PathBuf,
    /// The MANIFEST, open for commits (`None` for a read-only snapshot or reader).
    pub file: Option<File>,
    /// The writer lock (`None` for a read-only snapshot or reader).
    pub lock: Option<File>,
    /// The newest commit's generation.
    pub generation: u64,
    /// This boot's id, written into each commit: recovery trusts stamps in the same boot.
    pub boot_id: [u8; 16],
    /// A segment was copied and renamed since the last commit: the lane folder must be
    /// fsynced before the next commit.
    pub lane_dirty: bool,
    /// Rows sealed and sent to disk behind the tail (`storage::behind`).
    pub behind: WriteBehind,
}

/// Buffers reused across calls.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// The order of the caller's columns in schema order.
    pub order: Vec<usize>,
    /// Field names already matched, so a repeated call does not compare strings.
    pub names: NameCache,
    /// Zero bytes for fields a reset row leaves out.
    pub zeros: Vec<u8>,
    /// The own arrays of a transition or sequence draw, filled unit by unit.
    pub units: UnitArrays,
}
