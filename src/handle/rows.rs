//! The read side every handle has: the buffer's folder, schema and ring of rows, the
//! live range and what is sealed, and the sampling stream. The writer keeps it current
//! as it adds; a reader sets it from the writer's progress page. Draws and gathers are
//! here once, so the writer and the reader copy rows the same way.

use std::ops::Range;
use std::path::PathBuf;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::Stats;
use super::core::Draws;
use crate::algo::sample::{SampleSpec, draw_uniform};
use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::format::manifest::Superblock;
use crate::parts::priorities::{LiveRange, Priorities};
use crate::schema::Schema;
use crate::storage;
use crate::storage::io::IoRef;
use crate::storage::map::Found;
use crate::storage::pread::Missed;
use crate::storage::ring::{Live, Ring};

/// The rows of a buffer as one handle sees them. Nominally `pub` for the sealed trait
/// `Lanes` reads its lanes through; callers can name neither.
#[derive(Debug)]
#[expect(
    unnameable_types,
    reason = "sealed: callers may reach it through a public trait but not name or implement it"
)]
pub struct Rows {
    pub(crate) dir: PathBuf,
    pub(crate) io: IoRef,
    pub(crate) superblock: Superblock,
    pub(crate) schema: Schema,
    pub(crate) ring: Ring,
    /// The live logical indices are `head..tail`, in slots `head_slot..tail_slot`.
    pub(crate) head: u64,
    pub(crate) tail: u64,
    pub(crate) head_slot: u64,
    pub(crate) tail_slot: u64,
    /// Items dropped by `clear` (the rest of `head` is eviction).
    pub(crate) cleared: u64,
    /// Items below this index are sealed (checksummed) and covered by a commit.
    pub(crate) flushed_tail: u64,
    /// Reads check sealed rows against their checksums (see `set_read_checks`).
    pub(crate) read_checks: bool,
    /// The sampling stream.
    pub(crate) draws: Draws,
}

impl Rows {
    /// Items live.
    pub(crate) fn len(&self) -> u64 {
        self.tail - self.head
    }

    /// The live logical indices.
    pub(crate) fn live(&self) -> Range<u64> {
        self.head..self.tail
    }

    /// The live range as the priority tree's draws take it.
    pub(crate) fn live_range(&self) -> LiveRange {
        LiveRange {
            head: self.head,
            head_slot: self.head_slot,
            tail: self.tail,
        }
    }

    /// Where reads find the live rows, and below which index they check checksums.
    pub(crate) fn live_rows(&self) -> Live {
        Live {
            head: self.head,
            head_slot: self.head_slot,
            sealed: if self.read_checks {
                self.flushed_tail
            } else {
                0
            },
        }
    }

    /// Counters and sizes, with the commit generation and the tree (if this handle
    /// owns one) that the handle knows.
    pub(crate) fn stats(&self, generation: u64, tree: Option<&Priorities>) -> Stats {
        Stats {
            len: self.len(),
            capacity: self.superblock.capacity,
            head: self.head,
            tail: self.tail,
            added: self.tail,
            evicted: self.head - self.cleared,
            cleared: self.cleared,
            sampled: self.draws.sampled,
            bytes_on_disk: storage::bytes_on_disk(&self.dir, self.superblock.segment_count),
            generation,
            priority_updates: tree.map_or(0, Priorities::updates),
            stale_updates: tree.map_or(0, Priorities::stale_updates),
        }
    }

    /// Restarts the sampling RNG from `seed`.
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.draws.seed = seed;
        self.draws.rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// Checks that `outs` has one output per field, each `rows` items long.
    pub(crate) fn check_outputs(&self, rows: usize, outs: &[&mut [u8]]) -> Result<()> {
        Batch::check_fill(&self.schema, rows, None, None, outs)
    }

    /// Draws indices as `spec` says into `out`, advancing the RNG, without gathering.
    pub(crate) fn draw_indices(&mut self, spec: &SampleSpec, out: &mut Vec<u64>) -> Result<()> {
        draw_uniform(&mut self.draws.rng, spec, self.head, self.tail, out)?;
        self.draws.sampled += out.len() as u64;
        Ok(())
    }

    /// Draws as `spec` says and gathers into `out`, reusing its storage.
    pub(crate) fn sample_into(&mut self, spec: &SampleSpec, out: &mut Batch) -> Result<()> {
        let (indices, _, mut outs) = out.ready(&self.schema, spec.n, false)?;
        self.draw_indices(spec, indices)?;
        self.ring
            .gather(self.live_rows(), indices, &mut outs)
            .map_err(|m| self.stamp_error(indices, m))
    }

    /// Copies the live items at `indices` into per-field outputs.
    pub(crate) fn gather_into(&self, indices: &[u64], outs: &mut [&mut [u8]]) -> Result<()> {
        self.check_outputs(indices.len(), outs)?;
        if let Some(&index) = indices.iter().find(|&&i| i < self.head || i >= self.tail) {
            return Err(Error::Evicted {
                index,
                head: self.head,
                tail: self.tail,
            });
        }
        self.ring
            .gather(self.live_rows(), indices, outs)
            .map_err(|m| self.stamp_error(indices, m))
    }

    /// The items at `indices`, as a batch.
    pub(crate) fn get_many(&self, indices: &[u64]) -> Result<Batch> {
        let mut batch = Batch::new(&self.schema, indices.len());
        let (idx, mut outs) = batch.parts_mut();
        idx.copy_from_slice(indices);
        self.gather_into(indices, &mut outs)?;
        Ok(batch)
    }

    /// The error for a gather of `indices` that missed.
    pub(crate) fn stamp_error(&self, indices: &[u64], missed: Missed) -> Error {
        match missed {
            Missed::Row(m) => {
                self.row_error(indices.get(m.position).copied().unwrap_or(0), m.found)
            }
            Missed::Read(e) => e,
        }
    }

    /// The error for live `index` whose row held `found` instead.
    pub(crate) fn row_error(&self, index: u64, found: Found) -> Error {
        let slot = index % self.superblock.capacity;
        let (file, offset) = self.ring.place(slot, &self.dir);
        let problem = match found {
            Found::Stamp(stamp) => format!(
                "the slot's stamp is {:#x}, expected {:#x}",
                stamp,
                crate::format::row::stamp_of(index)
            ),
            Found::Checksum { stored, computed } => {
                format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
        };
        Error::BadItem {
            file,
            offset,
            index,
            problem,
        }
    }
}
