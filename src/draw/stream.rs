//! The sampling stream every draw moves (`Draws`, whose position each commit records)
//! and the arrays a draw fills, kept between draws so that a warm draw allocates
//! nothing (`Picked`, `UnitArrays`).

use rand_chacha::ChaCha8Rng;

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
    /// With variable-length fields, the rows whose values the draw returns: a
    /// transition's observation frames and the frames it led to; a sequence's rows,
    /// position by position, in `next_rows` (its observations are the rows before).
    pub obs_rows: Vec<u64>,
    pub next_rows: Vec<u64>,
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
        self.obs_rows.clear();
        self.next_rows.clear();
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
        self.next_rows.truncate(keep.min(self.next_rows.len()));
    }
}
