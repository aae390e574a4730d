//! Episode getters in the manner of RLlib's `SingleAgentEpisode`: an [`EpisodeChunk`]
//! names part of one stored episode (from step `t0` on, with a lookback of earlier
//! steps), and `get_observations` / `get_steps` read entries of it by index, slice or
//! list, with negative indices, `fill` and `neg_index_as_lookback` as RLlib has them.
//! The index arithmetic is `lookback.rs`; this maps its positions to rows.
//!
//! Observation `k` of an episode is row `start + k`; step entry `k` (the action taken
//! at observation `k`, the reward it earned, ...) is row `start + k + 1`. So a chunk
//! of `t` steps has `t + 1` observations and `t` step entries.

use super::{ReplayBuffer, Role};
use crate::algo::lookback::{Indices, Pos, Window};
use crate::batch::{Batch, FieldArray, VarArray};
use crate::draw::{UnitValues, put_values_of};
use crate::error::{Error, Result};
use crate::parts::episodes::EpisodeInfo;

/// Part of one episode: its entries from observation `t0` on (growing as the episode
/// does), after up to `lookback` earlier entries. A plain value, valid across adds.
///
/// ```
/// use replaystore::EpisodeChunk;
/// let chunk = EpisodeChunk { id: 3, t0: 0, lookback: 0, steps: None };
/// assert_eq!(chunk.id, 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpisodeChunk {
    /// The episode's number.
    pub id: u64,
    /// The observation index of the chunk's first entry (ts = 0 of the chunk).
    pub t0: u64,
    /// Entries before `t0` readable as the lookback buffer (fewer where the episode
    /// begins or the ring evicted them).
    pub lookback: u64,
    /// Steps the chunk holds (`steps + 1` observations), when a slice ends it; `None`
    /// runs to the episode's newest entry.
    pub steps: Option<u64>,
}

/// Options of a getter, as RLlib's keyword arguments.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GetOptions {
    /// Negative indices count back from ts = 0 into the lookback, not from the end.
    pub neg_index_as_lookback: bool,
    /// Entries outside the chunk and its lookback read as this value (converted to
    /// the field's dtype) instead of being an error or, in a slice, left out.
    pub fill: Option<f64>,
}

/// Which entries of an episode a getter reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entries {
    /// Observation `k` at row `start + k`, `k = 0 ..= steps`.
    Observations,
    /// Step entry `k` at row `start + k + 1`, `k = 0 .. steps`.
    Steps,
}

impl<R: Role> ReplayBuffer<R> {
    /// The chunk of the whole stored episode `id`: from its first stored observation,
    /// without lookback.
    ///
    /// ```
    /// use replaystore::Indices;
    /// use replaystore::{Column, Config, DType, GetOptions, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .field("obs", DType::I64, &[])
    ///     .field("action", DType::I64, &[])
    ///     .build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// // RLlib's example: observations [0, 1, 2, 3], actions [1, 2, 3].
    /// let id = buf.add_reset(&[Column::scalar("obs", &0i64)])?.episode;
    /// for t in 1..=3i64 {
    ///     buf.add_step(&[Column::scalar("obs", &t), Column::scalar("action", &t)], false, false)?;
    /// }
    /// let chunk = buf.episode_chunk(id)?;
    /// let get = |i| buf.get_observations(&chunk, "obs", &i, GetOptions::default());
    /// assert_eq!(get(Indices::At(-1))?.as_slice::<i64>()?, &[3]);
    /// assert_eq!(get(Indices::List(vec![-1, 0]))?.as_slice::<i64>()?, &[3, 0]);
    /// let acts = buf.get_steps(&chunk, "action", &Indices::range(None, Some(2)), GetOptions::default())?;
    /// assert_eq!(acts.as_slice::<i64>()?, &[1, 2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn episode_chunk(&self, id: u64) -> Result<EpisodeChunk> {
        let e = self.episode_by_id(id)?;
        Ok(EpisodeChunk {
            id,
            t0: self.store.rows.head.saturating_sub(e.start),
            lookback: 0,
            steps: None,
        })
    }

    /// RLlib's `slice(slice(start, stop), len_lookback_buffer)`: steps `start..stop`
    /// of `chunk` (ts counted from its ts = 0; `stop` past its end is its end) as a
    /// chunk of its own, with up to `lookback` entries before it readable as its
    /// lookback.
    pub fn slice(
        &self,
        chunk: &EpisodeChunk,
        start: u64,
        stop: Option<u64>,
        lookback: u64,
    ) -> Result<EpisodeChunk> {
        let e = self.episode_by_id(chunk.id)?;
        let end = chunk
            .steps
            .map_or(e.steps(), |s| (chunk.t0 + s).min(e.steps()));
        let t0 = (chunk.t0 + start).min(end);
        let stop = stop.map_or(end, |s| (chunk.t0 + s).min(end)).max(t0);
        Ok(EpisodeChunk {
            id: chunk.id,
            t0,
            lookback,
            steps: Some(stop - t0),
        })
    }

    /// RLlib's `cut`: the chunk that continues an unfinished episode from its newest
    /// observation (ts = 0 of the new chunk), with a lookback of the `lookback`
    /// entries before it. Steps added later extend it.
    pub fn cut(&self, chunk: &EpisodeChunk, lookback: u64) -> Result<EpisodeChunk> {
        let e = self.episode_by_id(chunk.id)?;
        if e.end.is_some() {
            return Err(Error::NoSuchEpisode {
                id: chunk.id,
                problem: "it has ended: only an unfinished episode can be cut".into(),
            });
        }
        Ok(EpisodeChunk {
            id: chunk.id,
            t0: e.steps(),
            lookback,
            steps: None,
        })
    }

    /// Observation entries of a field (RLlib's `get_observations`), one item per
    /// entry asked for.
    pub fn get_observations(
        &self,
        chunk: &EpisodeChunk,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> Result<FieldArray> {
        self.get_entries(chunk, Entries::Observations, field, indices, options)
    }

    /// Step entries of a field (RLlib's `get_actions`, `get_rewards`, ...): entry `k`
    /// is what step `k` stored, the action taken at observation `k` and what followed.
    pub fn get_steps(
        &self,
        chunk: &EpisodeChunk,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> Result<FieldArray> {
        self.get_entries(chunk, Entries::Steps, field, indices, options)
    }

    /// The record of episode `id`, while a row of it is live (`NoSuchEpisode` after).
    pub fn episode_by_id(&self, id: u64) -> Result<EpisodeInfo> {
        self.store
            .episodes_ref()?
            .by_id(id)
            .copied()
            .ok_or_else(|| Error::NoSuchEpisode {
                id,
                problem: "no live row of it is stored".into(),
            })
    }

    /// The text, bytes or token entries of variable-length field `field` (observations:
    /// row `start + k`, as [`ReplayBuffer::get_observations`] reads a fixed field), one
    /// value per entry asked for; an entry `fill` stands in for is an empty value.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, GetOptions, Indices, ReplayBuffer, Schema, VarKind};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("t", DType::I64, &[]).variable("board", VarKind::Str, None).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 100).episodic())?;
    /// let id = buf.add_reset(&[Column::text("board", "...")])?.episode;
    /// buf.add_step(&[Column::scalar("t", &1i64), Column::text("board", "X..")], false, false)?;
    /// buf.add_step(&[Column::scalar("t", &2i64), Column::text("board", "XO.")], false, false)?;
    /// let chunk = buf.episode_chunk(id)?;
    /// let last_two = buf.get_observation_values(&chunk, "board", &Indices::range(Some(-2), None), GetOptions::default())?;
    /// assert_eq!((last_two.text(0)?, last_two.text(1)?), ("X..", "XO."));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_observation_values(
        &self,
        chunk: &EpisodeChunk,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> Result<VarArray> {
        self.get_values(chunk, Entries::Observations, field, indices, options)
    }

    /// The step entries of variable-length field `field` (the action text taken at
    /// observation `k`, its tokens, ...), as [`ReplayBuffer::get_observation_values`].
    pub fn get_step_values(
        &self,
        chunk: &EpisodeChunk,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> Result<VarArray> {
        self.get_values(chunk, Entries::Steps, field, indices, options)
    }

    fn get_values(
        &self,
        chunk: &EpisodeChunk,
        entries: Entries,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> Result<VarArray> {
        let schema = &self.store.rows.schema;
        if schema.var_field(field).is_none() {
            return Err(Error::UnknownField {
                field: field.to_owned(),
                known: schema.names(),
            });
        }
        let (first_row, positions) = self.entry_positions(chunk, entries, indices, options)?;
        let rows: Vec<Option<u64>> = (positions.iter())
            .map(|p| match *p {
                Pos::At(p) => Some(first_row + p),
                Pos::Fill => None,
            })
            .collect();
        let which: Vec<bool> = (schema.var_fields().iter())
            .map(|v| v.name() == field)
            .collect();
        let set = UnitValues {
            prefix: "",
            which: &which,
            rows: &rows,
        };
        let mut batch = Batch::default();
        put_values_of(schema, &[set], &|_| Ok(&self.store.rows), &mut batch)?;
        batch.values(field).cloned().ok_or(Error::UnknownField {
            field: field.to_owned(),
            known: schema.names(),
        })
    }

    /// The entries `indices` asks for of the chunk, as positions from the row of its
    /// first readable entry (its lookback's first, or ts = 0), which is returned too.
    fn entry_positions(
        &self,
        chunk: &EpisodeChunk,
        entries: Entries,
        indices: &Indices,
        options: GetOptions,
    ) -> Result<(u64, Vec<Pos>)> {
        let e = self.episode_by_id(chunk.id)?;
        // Entry k lives at row start + k + shift; the chunk's entries run from t0 to
        // the episode's newest.
        let (shift, count) = match entries {
            Entries::Observations => (0, e.steps() + 1),
            Entries::Steps => (1, e.steps()),
        };
        let first_stored = (self.store.rows.head.max(e.start) - e.start).saturating_sub(shift);
        if chunk.t0 < first_stored || chunk.t0 > count {
            return Err(Error::NoSuchEpisode {
                id: chunk.id,
                problem: format!(
                    "the chunk begins at entry {} but entries {first_stored}..{count} are stored",
                    chunk.t0
                ),
            });
        }
        // A slice ends the chunk: its steps, and one observation more.
        let sliced = chunk
            .steps
            .map(|s| s + u64::from(entries == Entries::Observations));
        let window = Window {
            lookback: chunk.lookback.min(chunk.t0 - first_stored),
            len: sliced.map_or(count - chunk.t0, |n| n.min(count - chunk.t0)),
        };
        let mut positions = Vec::new();
        window.resolve(
            indices,
            options.neg_index_as_lookback,
            options.fill.is_some(),
            &mut positions,
        )?;
        let first_entry = chunk.t0 - window.lookback;
        Ok((e.start + first_entry + shift, positions))
    }

    fn get_entries(
        &self,
        chunk: &EpisodeChunk,
        entries: Entries,
        field: &str,
        indices: &Indices,
        options: GetOptions,
    ) -> Result<FieldArray> {
        if self.store.rows.schema.var_field(field).is_some() {
            return Err(Error::InvalidSample(format!(
                "field {field:?} is variable-length: read its entries with \
                 get_observation_values or get_step_values"
            )));
        }
        let (f, spec) = self
            .store
            .rows
            .schema
            .fields()
            .iter()
            .enumerate()
            .find(|(_, x)| x.name() == field)
            .ok_or_else(|| Error::UnknownField {
                field: field.to_owned(),
                known: self.store.rows.schema.names(),
            })?;
        let (first_row, positions) = self.entry_positions(chunk, entries, indices, options)?;
        let mut out = FieldArray::zeroed(spec, positions.len());
        let size = spec.bytes();
        let fill = options.fill.map(|v| spec.dtype().encode_f64(v));
        let elem = spec.dtype().size();
        let rows = self.store.rows.ring.reader(self.store.rows.live_rows());
        let read = [(
            self.store
                .rows
                .ring
                .layout()
                .fields
                .get(f)
                .map_or(0, |&(off, _)| off),
            size,
            0,
        )];
        let bytes = out.bytes_mut();
        let mut i = 0;
        while let Some(p) = positions.get(i) {
            match *p {
                Pos::At(p) => {
                    // A run of consecutive entries is read as one: its stamps checked
                    // before and after, its sealed rows against their checksums, as
                    // every row is read.
                    let len = (positions.get(i..).unwrap_or(&[]).iter())
                        .zip(p..)
                        .take_while(|(q, want)| **q == Pos::At(*want))
                        .count();
                    let row = first_row + p;
                    let mut outs = [&mut bytes[..]];
                    rows.run(row, len as u64)
                        .checked(|run| {
                            for k in 0..len {
                                run.copy(row + k as u64, &read, &mut outs, i + k);
                            }
                        })
                        .map_err(|(index, found)| self.store.rows.row_error(index, found))?;
                    i += len;
                }
                Pos::Fill => {
                    if let (Some(v), Some(dst)) = (&fill, bytes.get_mut(i * size..(i + 1) * size)) {
                        for x in dst.chunks_mut(elem) {
                            x.copy_from_slice(v.get(..elem).unwrap_or(&[]));
                        }
                    }
                    i += 1;
                }
            }
        }
        Ok(out)
    }
}
