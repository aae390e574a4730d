//! The writer's core state beside its rows, grouped by what each group is for: the
//! commit slots and locks (`Commits`), the sampling stream that commits persist
//! (`Draws`), and buffers reused across calls so adds allocate nothing (`Scratch`).

use std::fs::File;
use std::path::PathBuf;

use rand_chacha::ChaCha8Rng;

use crate::column::NameCache;
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

/// The sampling stream: a seeded RNG whose position each commit records, so the same
/// seed and calls give the same samples across a restart, and the count of draws.
#[derive(Debug)]
pub(crate) struct Draws {
    pub rng: ChaCha8Rng,
    pub seed: u64,
    /// Items sampled so far (`Stats::sampled`).
    pub sampled: u64,
    /// The indices and weights of the draw under way, kept between draws so that a
    /// draw allocates nothing of its own once warm.
    pub picked: Picked,
}

/// What a draw picked, before it is copied into the caller's arrays.
#[derive(Debug, Default)]
pub(crate) struct Picked {
    pub indices: Vec<u64>,
    pub weights: Vec<f32>,
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

/// The own arrays of a transition or sequence draw (see `sink::Layout`), kept between
/// draws so that a draw grows none of them once warm: a transition draw pushes every
/// one of them per transition.
#[derive(Debug, Default)]
pub(crate) struct UnitArrays {
    pub indices: Vec<u64>,
    pub weights: Vec<f32>,
    pub returns: Vec<f64>,
    pub discounts: Vec<f64>,
    pub terminated: Vec<bool>,
    pub truncated: Vec<bool>,
    pub next_offsets: Vec<u32>,
    pub mask: Vec<bool>,
    /// Transitions relabeled in hindsight, and the row each one's goal came from.
    pub relabeled: Vec<bool>,
    pub goal_indices: Vec<u64>,
}

impl UnitArrays {
    /// Empties every array, keeping its storage.
    pub fn clear(&mut self) {
        self.indices.clear();
        self.weights.clear();
        self.returns.clear();
        self.discounts.clear();
        self.terminated.clear();
        self.truncated.clear();
        self.next_offsets.clear();
        self.mask.clear();
        self.relabeled.clear();
        self.goal_indices.clear();
    }

    /// Forgets the last sequence pushed (its `positions` masks and end flags): the
    /// writer overwrote one of its rows before it was copied.
    pub fn drop_last_unit(&mut self, positions: usize) {
        self.indices.pop();
        self.weights.truncate(self.indices.len());
        let keep = self.indices.len() * positions;
        self.mask.truncate(keep);
        self.terminated.truncate(keep);
        self.truncated.truncate(keep);
    }
}
