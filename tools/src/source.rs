//! What `dump` and `export` read: a buffer, one of its snapshots, or the lanes of a lane
//! set, each through a `Reader` (no lock, nothing written, a writer may run beside it).

use std::ops::Range;
use std::path::Path;

use replaystore::internal::format::lanes::first_index;
use replaystore::internal::storage;
use replaystore::io::OsIo;
use replaystore::{Batch, Error, Field, Reader, Request, Schema, VarArray, VarField};

use crate::fail::Failure;

/// Items by position: `A..B`, `A..`, `..B` or `..`, positions counted from the ring's
/// first index (a lane's `K << 56`), or the newest `last` items.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// First position (inclusive).
    pub start: Option<u64>,
    /// End position (exclusive).
    pub end: Option<u64>,
    /// The newest this many items instead.
    pub last: Option<u64>,
}

impl Span {
    /// Parses `A..B` with either end left out.
    pub fn parse(s: &str) -> Result<Span, String> {
        let (a, b) = s
            .split_once("..")
            .ok_or_else(|| format!("range {s:?}: expected A..B, A.., ..B or .."))?;
        let num = |t: &str| -> Result<Option<u64>, String> {
            let t = t.trim();
            if t.is_empty() {
                return Ok(None);
            }
            t.replace('_', "")
                .parse()
                .map(Some)
                .map_err(|_| format!("range {s:?}: {t:?} is not an index"))
        };
        let span = Span {
            start: num(a)?,
            end: num(b)?,
            last: None,
        };
        if let (Some(a), Some(b)) = (span.start, span.end)
            && b < a
        {
            return Err(format!("range {s:?}: the end is before the start"));
        }
        Ok(span)
    }

    /// The absolute indices of this span within `live`, where positions count from
    /// `base`.
    fn within(&self, base: u64, live: Range<u64>) -> Range<u64> {
        if let Some(n) = self.last {
            return live.end.saturating_sub(n).max(live.start)..live.end;
        }
        let a = self
            .start
            .map_or(live.start, |p| base.saturating_add(p).max(live.start));
        let b = self
            .end
            .map_or(live.end, |p| base.saturating_add(p).min(live.end));
        a..b.max(a)
    }
}

/// One ring to read: a buffer, a snapshot, or a lane.
pub struct Part {
    /// Its lane, for a lane set.
    pub lane: Option<u32>,
    /// The reader.
    pub reader: Reader,
}

impl Part {
    /// Index of the ring's first item ever (positions count from here).
    pub fn base(&self) -> u64 {
        self.lane.map_or(0, first_index)
    }
}

/// The rings a command reads, in order.
pub struct Source {
    /// Each ring.
    pub parts: Vec<Part>,
    schema: Schema,
}

impl Source {
    /// Opens `dir` (or its snapshot `snapshot`); for a lane set, lane `lane` or all lanes.
    pub fn open(dir: &Path, snapshot: Option<&str>, lane: Option<u32>) -> Result<Source, Failure> {
        let open = |d: &Path| match snapshot {
            Some(name) => Reader::open_snapshot(d, name),
            None => Reader::open(d),
        };
        if let Some(group) = storage::read_group(&OsIo, dir)? {
            // A group's members differ in schema: one member at a time, by lane.
            let Some(k) = lane else {
                let names: Vec<&str> = group.members.iter().map(|m| m.name.as_str()).collect();
                return Err(Error::InvalidConfig {
                    field: "member",
                    problem: format!(
                        "{} is a group, read one member at a time: name one with --member \
                         (members: {})",
                        dir.display(),
                        names.join(", ")
                    ),
                }
                .into());
            };
            let reader = open(&storage::lane_dir(dir, k))?;
            return Ok(Source {
                schema: reader.schema().clone(),
                parts: vec![Part {
                    lane: Some(k),
                    reader,
                }],
            });
        }
        let Some(lanes) = storage::read_lanes(&OsIo, dir)? else {
            if let Some(k) = lane.filter(|&k| k != 0) {
                return Err(Error::NoSuchLane {
                    dir: dir.to_path_buf(),
                    lane: u64::from(k),
                    index: None,
                    lanes: 1,
                }
                .into());
            }
            let reader = open(dir)?;
            return Ok(Source {
                schema: reader.schema().clone(),
                parts: vec![Part { lane: None, reader }],
            });
        };
        let chosen = match lane {
            Some(k) if k >= lanes.lanes => {
                return Err(Error::NoSuchLane {
                    dir: dir.to_path_buf(),
                    lane: u64::from(k),
                    index: None,
                    lanes: lanes.lanes,
                }
                .into());
            }
            Some(k) => k..k + 1,
            None => 0..lanes.lanes,
        };
        let parts = chosen
            .map(|k| {
                Ok(Part {
                    lane: Some(k),
                    reader: open(&storage::lane_dir(dir, k))?,
                })
            })
            .collect::<Result<Vec<Part>, Error>>()?;
        let schema = parts
            .first()
            .map(|p| p.reader.schema().clone())
            .ok_or_else(|| Failure::Usage(format!("{} has no lanes", dir.display())))?;
        Ok(Source { parts, schema })
    }

    /// The schema (every lane has the same).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// What to read of `span`: in each part the runs of live items, the removed ones
    /// cut out (counted in `skipped`) unless `include_removed`; a refusal when the span
    /// holds no live item although items are live.
    pub fn plan(&mut self, span: &Span, include_removed: bool) -> Result<Plan, Failure> {
        let whole = self.runs(span)?;
        let mut plan = Plan {
            runs: Vec::with_capacity(whole.len()),
            items: 0,
            skipped: 0,
            include_removed,
        };
        for (part, run) in self.parts.iter_mut().zip(whole) {
            let all = run.end - run.start;
            let kept = if include_removed {
                vec![run]
            } else {
                not_removed(&mut part.reader, run)?
            };
            let n: u64 = kept.iter().map(|r| r.end - r.start).sum();
            plan.items += n;
            plan.skipped += all - n;
            plan.runs.push(kept);
        }
        Ok(plan)
    }

    /// The absolute index runs of `span` in each part (as live now), and a refusal when
    /// they hold nothing although items are live.
    fn runs(&mut self, span: &Span) -> Result<Vec<Range<u64>>, Failure> {
        let mut runs = Vec::with_capacity(self.parts.len());
        let mut live_total = 0;
        let mut described = Vec::new();
        for part in &mut self.parts {
            part.reader.refresh()?;
            let live = part.reader.live();
            live_total += live.end - live.start;
            let base = part.base();
            described.push(format!("{}..{}", live.start - base, live.end - base));
            runs.push(span.within(base, live));
        }
        let chosen: u64 = runs.iter().map(|r| r.end - r.start).sum();
        if chosen == 0 && live_total > 0 {
            return Err(Failure::Usage(format!(
                "no live item in the range asked for: the live positions are {}",
                described.join(", ")
            )));
        }
        Ok(runs)
    }

    /// Reads what `plan` names in chunks of at most `chunk` items, oldest first, and
    /// hands each chunk's indices, the batch that holds them (each field's rows back to
    /// back, and the variable-length values) and, where the plan includes removed
    /// items, each item's removal cause (`""` for a live one) to `each`. `what` names
    /// the command in the hint an eviction or a removal meanwhile gets.
    pub fn read_chunks(
        &mut self,
        plan: &Plan,
        chunk: u64,
        what: &str,
        mut each: impl FnMut(&[u64], &Batch, Option<&[&'static str]>) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let chunk = chunk.max(1);
        let mut batch = Batch::default();
        let mut indices = Vec::with_capacity(chunk as usize);
        let mut causes: Vec<&'static str> = Vec::new();
        for (part, runs) in self.parts.iter_mut().zip(&plan.runs) {
            for run in runs {
                let mut at = run.start;
                while at < run.end {
                    let take = (run.end - at).min(chunk);
                    indices.clear();
                    indices.extend(at..at + take);
                    let request = match plan.include_removed {
                        true => Request::at(&indices).including_removed(),
                        false => Request::at(&indices).into(),
                    };
                    // One batch reused chunk after chunk: the rows go straight into it.
                    part.reader
                        .sample_into(request, &mut batch)
                        .map_err(|e| read_hint(e, what))?;
                    check_values(part.reader.dir(), &self.schema, &indices, &batch)?;
                    let states = match plan.include_removed {
                        true => {
                            causes.clear();
                            causes.extend(removal_causes(&mut part.reader, &indices)?);
                            Some(&causes[..])
                        }
                        false => None,
                    };
                    each(&indices, &batch, states)?;
                    at += take;
                }
            }
        }
        Ok(())
    }
}

/// What `dump` and `export` read ([`Source::plan`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Per part, the runs of indices to read, oldest first.
    pub runs: Vec<Vec<Range<u64>>>,
    /// Items the runs hold.
    pub items: u64,
    /// Removed items left out.
    pub skipped: u64,
    /// Removed items are read too, each with its cause.
    pub include_removed: bool,
}

impl Plan {
    /// What a command says of the removed items it left out, if it left any.
    pub fn skipped_note(&self) -> Option<String> {
        skipped_note(self.skipped)
    }
}

/// What is said of `skipped` removed items left out, if there were any.
pub fn skipped_note(skipped: u64) -> Option<String> {
    (skipped > 0).then(|| {
        format!(
            "left out {skipped} removed items (--include-removed keeps them, with a \"removed\" \
             column naming why each was removed)"
        )
    })
}

/// Items per look at the item states when a plan cuts removed items out.
const STATES_CHUNK: u64 = 1 << 16;

/// The runs of `run` whose items are not removed (all of it for a buffer without item
/// states, where nothing is ever removed).
fn not_removed(reader: &mut Reader, run: Range<u64>) -> Result<Vec<Range<u64>>, Failure> {
    let mut kept: Vec<Range<u64>> = Vec::new();
    let mut at = run.start;
    let mut indices = Vec::new();
    while at < run.end {
        let take = (run.end - at).min(STATES_CHUNK);
        indices.clear();
        indices.extend(at..at + take);
        let states = match reader.item_states(&indices) {
            Ok(s) => s,
            Err(Error::NoItemStates { .. }) => return Ok(vec![run]),
            Err(e) => return Err(read_hint(e, "read")),
        };
        for (&i, s) in indices.iter().zip(&states) {
            if s.removed.is_some() {
                continue;
            }
            match kept.last_mut() {
                Some(r) if r.end == i => r.end = i + 1,
                _ => kept.push(i..i + 1),
            }
        }
        at += take;
    }
    Ok(kept)
}

/// Each item's removal cause, `""` for a live one (or for every one of a buffer
/// without item states).
fn removal_causes(reader: &mut Reader, indices: &[u64]) -> Result<Vec<&'static str>, Failure> {
    match reader.item_states(indices) {
        Ok(states) => Ok(states
            .iter()
            .map(|s| s.removed.map_or("", |c| c.name()))
            .collect()),
        Err(Error::NoItemStates { .. }) => Ok(vec![""; indices.len()]),
        Err(e) => Err(read_hint(e, "read")),
    }
}

/// Refuses a chunk holding a value that is not a value of its field's kind (text that
/// is not UTF-8, a ragged length that is not whole elements): its checksums held, so it
/// was crafted or damaged before it was sealed, and printing it (text with U+FFFD, an
/// array cut short) would pass damage off as data.
fn check_values(
    dir: &Path,
    schema: &Schema,
    indices: &[u64],
    batch: &Batch,
) -> Result<(), Failure> {
    for field in schema.var_fields() {
        let Some(values) = batch.values(field.name()) else {
            continue;
        };
        for (r, &index) in indices.iter().enumerate() {
            let value = values.value(r).unwrap_or(&[]);
            if let Err(fault) = field.kind().check_value(value) {
                return Err(Error::Corrupt {
                    file: dir.to_path_buf(),
                    offset: 0,
                    field: format!("item {index}: value of {:?}", field.name()),
                    expected: format!("a {} value", field.kind().name()),
                    got: fault.to_string(),
                }
                .into());
            }
        }
    }
    Ok(())
}

/// Tells a person what to do when a running writer evicts or removes an item mid-read.
fn read_hint(e: Error, what: &str) -> Failure {
    match e {
        Error::Evicted { .. } => Failure::Usage(format!(
            "{e}: the running writer evicted it during the {what}; {what} a snapshot \
             (--snapshot NAME) or the newest items (--last N) instead"
        )),
        Error::Removed { .. } => Failure::Usage(format!(
            "{e}: the running writer removed it during the {what}; {what} a snapshot \
             (--snapshot NAME), or keep removed items (--include-removed)"
        )),
        e => e.into(),
    }
}

/// The fields a `--fields a,b` list names (all when `None`): positions of fixed fields
/// and of variable-length fields in the schema, each in the list's order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Positions in `schema.fields()`.
    pub fixed: Vec<usize>,
    /// Positions in `schema.var_fields()`.
    pub var: Vec<usize>,
}

impl Selection {
    /// The chosen fixed fields.
    pub fn fields<'s>(&self, schema: &'s Schema) -> Vec<&'s Field> {
        self.fixed
            .iter()
            .filter_map(|&f| schema.fields().get(f))
            .collect()
    }

    /// The chosen variable-length fields.
    pub fn var_fields<'s>(&self, schema: &'s Schema) -> Vec<&'s VarField> {
        self.var
            .iter()
            .filter_map(|&v| schema.var_fields().get(v))
            .collect()
    }

    /// The chosen fixed fields' rows in `batch`, each field's back to back.
    pub fn columns<'b>(&self, batch: &'b Batch) -> Vec<&'b [u8]> {
        self.fixed
            .iter()
            .filter_map(|&f| batch.fields().get(f).map(|a| a.bytes()))
            .collect()
    }
}

/// The values of `var` in `batch`, in that order.
pub fn values_of<'b>(batch: &'b Batch, var: &[&VarField]) -> Result<Vec<&'b VarArray>, Failure> {
    var.iter()
        .map(|f| {
            batch
                .values(f.name())
                .ok_or_else(|| Failure::Usage(format!("the draw returned no {:?}", f.name())))
        })
        .collect()
}

/// The fields a `--fields a,b` list names, in the list's order (all when `None`).
pub fn select_fields(schema: &Schema, list: Option<&str>) -> Result<Selection, Failure> {
    let Some(list) = list else {
        return Ok(Selection {
            fixed: (0..schema.fields().len()).collect(),
            var: (0..schema.var_fields().len()).collect(),
        });
    };
    let mut out = Selection::default();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(p) = schema.fields().iter().position(|f| f.name() == name) {
            out.fixed.push(p);
        } else if let Some(p) = schema.var_fields().iter().position(|f| f.name() == name) {
            out.var.push(p);
        } else {
            return Err(Failure::Usage(format!(
                "--fields: no field {name:?} (the schema has {})",
                schema.names()
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn spans_parse_and_clip_to_the_live_range() {
        let s = Span::parse("10..20").unwrap();
        assert_eq!(s.within(0, 0..100), 10..20);
        assert_eq!(s.within(0, 15..100), 15..20);
        assert_eq!(s.within(0, 30..100), 30..30);
        assert_eq!(Span::parse("..").unwrap().within(0, 5..9), 5..9);
        assert_eq!(
            Span::parse("3..")
                .unwrap()
                .within(1 << 56, (1 << 56)..(1 << 56) + 10),
            (1 << 56) + 3..(1 << 56) + 10
        );
        assert_eq!(Span::parse("..1_000").unwrap().end, Some(1000));
        let last = Span {
            last: Some(4),
            ..Span::default()
        };
        assert_eq!(last.within(0, 5..100), 96..100);
        assert_eq!(last.within(0, 98..100), 98..100);
        assert!(Span::parse("5").is_err());
        assert!(
            Span::parse("9..3")
                .unwrap_err()
                .contains("before the start")
        );
        assert!(Span::parse("a..3").unwrap_err().contains("not an index"));
    }
}
