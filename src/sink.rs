//! Where a draw puts what it drew. A draw first works out its [`Layout`] (the arrays it
//! will fill: their names, dtypes and shapes, known once the units are picked), asks the
//! caller's [`Sink`] for storage of exactly those arrays, and writes every byte of them.
//! [`crate::Batch`] is the allocating sink; the Python package's sink allocates the
//! NumPy arrays it returns, so no draw copies through a batch of its own.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::schema::{Field, Schema, VarField};

/// One array a draw fills: `[rows, lead, item...]` elements of `dtype`, named
/// `prefix + name`.
///
/// ```
/// use replaystore::{DType, Layout, Request, Schema};
/// let schema = Schema::builder().field("obs", DType::F32, &[4]).field("r", DType::F32, &[]).build()?;
/// let layout = Layout::of(&schema, &Request::transitions(32, &["obs"]).stack(3).into(), 32, 32)?;
/// let next = layout.arrays().iter().find(|a| a.is("next_obs")).unwrap();
/// assert_eq!((next.shape(), next.dtype), (vec![32, 3, 4], DType::F32));
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Array<'a> {
    /// `""`, or `"next_"` for the observation a transition led to.
    pub prefix: &'static str,
    /// A field's name, or one of the draw's own arrays (`indices`, `weights`,
    /// `returns`, `discounts`, `terminated`, `truncated`, `mask`, `offsets`,
    /// `episodes`, `next_offsets`).
    pub name: &'a str,
    /// The element type.
    pub dtype: DType,
    /// The first dimension: units, or rows of the units drawn.
    pub rows: usize,
    /// A second dimension after `rows` (frames of a stack, positions of a sequence),
    /// if the array has one.
    pub lead: Option<usize>,
    /// The field's shape (empty for the draw's own arrays).
    pub item: &'a [usize],
    /// What the draw writes into it.
    pub(crate) part: Part,
}

impl Array<'_> {
    /// Whether the array is named `name` (prefix included).
    pub fn is(&self, name: &str) -> bool {
        // Byte by byte: names are a few bytes long, shorter than a call to memcmp.
        name.len() == self.prefix.len() + self.name.len()
            && (self.prefix.bytes().chain(self.name.bytes())).eq(name.bytes())
    }

    /// Whether the two arrays have the same full name (without building it).
    fn same_name(&self, other: &Array<'_>) -> bool {
        let (a, b) = ((self.prefix, self.name), (other.prefix, other.name));
        a.0.len() + a.1.len() == b.0.len() + b.1.len()
            && a.0
                .bytes()
                .chain(a.1.bytes())
                .eq(b.0.bytes().chain(b.1.bytes()))
    }

    /// Its full name.
    pub fn full_name(&self) -> String {
        format!("{}{}", self.prefix, self.name)
    }

    /// Its shape: `[rows, lead?, item...]`.
    pub fn shape(&self) -> Vec<usize> {
        let mut s = vec![self.rows];
        s.extend(self.lead);
        s.extend_from_slice(self.item);
        s
    }

    /// Elements after the first dimension (one row's).
    pub fn row_elements(&self) -> usize {
        self.item
            .iter()
            .fold(self.lead.unwrap_or(1), |n, &d| n.saturating_mul(d))
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.row_elements().saturating_mul(self.dtype.size())
    }

    /// Bytes of the whole array (saturating: the draw checks sizes before any sink
    /// allocates).
    pub fn bytes(&self) -> usize {
        self.rows.saturating_mul(self.row_bytes())
    }
}

/// The arrays a draw fills, in order: what `sample` returns and what a [`Sink`] is
/// asked to store. The order is the Python package's dict order: the fields (for
/// transitions and sequences: observations, then the step's other fields, then the next
/// observations), then the draw's own arrays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout<'a> {
    arrays: Vec<Array<'a>>,
}

/// What an array of a layout holds, to a draw filling it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// Schema field `f`, as read from the row `Source` says.
    Field(usize, Source),
    /// One of the draw's own arrays.
    Own(Own),
}

/// Which row of a unit a field array is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The row itself (rows, episodes, fragments) or a transition's step row.
    Row,
    /// The observation before a step (a transition's or sequence's `obs`).
    Obs,
    /// The observation a step led to (`next_<obs>`).
    Next,
}

/// The draw's own arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Own {
    Indices,
    Weights,
    Returns,
    Discounts,
    Terminated,
    Truncated,
    Mask,
    Offsets,
    Episodes,
    NextOffsets,
    Relabeled,
    GoalIndices,
}

impl Own {
    fn name(self) -> &'static str {
        match self {
            Own::Indices => "indices",
            Own::Weights => "weights",
            Own::Returns => "returns",
            Own::Discounts => "discounts",
            Own::Terminated => "terminated",
            Own::Truncated => "truncated",
            Own::Mask => "mask",
            Own::Offsets => "offsets",
            Own::Episodes => "episodes",
            Own::NextOffsets => "next_offsets",
            Own::Relabeled => "relabeled",
            Own::GoalIndices => "goal_indices",
        }
    }

    fn dtype(self) -> DType {
        match self {
            Own::Indices | Own::Offsets | Own::Episodes | Own::GoalIndices => DType::U64,
            Own::Weights => DType::F32,
            Own::Returns | Own::Discounts => DType::F64,
            Own::Terminated | Own::Truncated | Own::Mask | Own::Relabeled => DType::Bool,
            Own::NextOffsets => DType::U32,
        }
    }
}

impl<'a> Layout<'a> {
    /// The layout of `request` drawn from a buffer of `schema`: `units` units, whose
    /// rows number `rows` (episodes and fragments: known once the units are picked;
    /// every other unit: `units`).
    pub fn of(
        schema: &'a Schema,
        request: &crate::Request<'_>,
        units: usize,
        rows: usize,
    ) -> Result<Layout<'a>> {
        use crate::request::{Pick, Unit};
        let weighted = matches!(request.pick, Pick::Priority { .. });
        let mut out = Vec::with_capacity(schema.len() * 2 + 8);
        let own = |own: Own, n: usize, lead: Option<usize>| Array {
            prefix: "",
            name: own.name(),
            dtype: own.dtype(),
            rows: n,
            lead,
            item: &[],
            part: Part::Own(own),
        };
        let field = |(f, field): (usize, &'a Field), prefix, n, lead, source| Array {
            prefix,
            name: field.name(),
            dtype: field.dtype(),
            rows: n,
            lead,
            item: field.shape(),
            part: Part::Field(f, source),
        };
        let fields = || schema.fields().iter().enumerate();
        match request.unit {
            Unit::Rows => {
                out.extend(fields().map(|f| field(f, "", units, None, Source::Row)));
                out.push(own(Own::Indices, units, None));
                if weighted {
                    out.push(own(Own::Weights, units, None));
                }
            }
            Unit::Transitions | Unit::Sequences => {
                let is_obs = obs_mask(schema, request.obs)?;
                let seq = request.unit == Unit::Sequences;
                let positions = match seq {
                    true => request.burn_in.checked_add(request.len),
                    false => match request.window {
                        true => request.stack.checked_add(request.nstep),
                        false => Some(request.stack),
                    },
                };
                let positions = positions
                    .and_then(|p| usize::try_from(p).ok())
                    .ok_or_else(|| Error::InvalidSample("too many positions per unit".into()))?;
                let obs_lead = (positions > 1 || seq).then_some(positions);
                let step_lead = seq.then_some(positions);
                let obs = |&(f, _): &(usize, &Field)| is_obs.get(f).copied().unwrap_or(false);
                out.extend(
                    fields()
                        .filter(obs)
                        .map(|f| field(f, "", units, obs_lead, Source::Obs)),
                );
                out.extend(
                    fields()
                        .filter(|f| !obs(f))
                        .map(|f| field(f, "", units, step_lead, Source::Row)),
                );
                if !request.window || seq {
                    out.extend(
                        fields()
                            .filter(obs)
                            .map(|f| field(f, "next_", units, obs_lead, Source::Next)),
                    );
                }
                if seq {
                    out.push(own(Own::Mask, units, Some(positions)));
                    out.push(own(Own::Terminated, units, Some(positions)));
                    out.push(own(Own::Truncated, units, Some(positions)));
                } else {
                    out.push(own(Own::Returns, units, None));
                    out.push(own(Own::Discounts, units, None));
                    out.push(own(Own::Terminated, units, None));
                    out.push(own(Own::Truncated, units, None));
                }
                out.push(own(Own::Indices, units, None));
                if weighted {
                    out.push(own(Own::Weights, units, None));
                }
                if request.window && !seq {
                    out.push(own(Own::NextOffsets, units, None));
                }
                if request.relabel.is_some() {
                    out.push(own(Own::Relabeled, units, None));
                    out.push(own(Own::GoalIndices, units, None));
                }
            }
            Unit::Episodes => {
                out.extend(fields().map(|f| field(f, "", rows, None, Source::Row)));
                out.push(own(Own::Indices, rows, None));
                out.push(own(Own::Offsets, units + 1, None));
                out.push(own(Own::Episodes, units, None));
                if weighted {
                    out.push(own(Own::Weights, units, None));
                }
            }
            Unit::Fragments | Unit::Groups => {
                out.extend(fields().map(|f| field(f, "", rows, None, Source::Row)));
                out.push(own(Own::Indices, rows, None));
                if weighted {
                    out.push(own(Own::Weights, units, None));
                }
                out.push(own(Own::Offsets, units + 1, None));
            }
        }
        // A field named like one of the draw's own arrays, or like another field's
        // next observation, would be two arrays of one name (a dict key twice). Rows
        // add only `indices` and `weights`, which no field may be named.
        if request.unit != Unit::Rows {
            for (i, a) in out.iter().enumerate() {
                if let Some(b) = out.iter().skip(i + 1).find(|b| b.same_name(a)) {
                    let other = match b.prefix {
                        "" => "one of the draw's own arrays",
                        _ => "the next observation of another field",
                    };
                    return Err(Error::InvalidSchema(format!(
                        "the draw would return two arrays named {:?} (a field, and \
                         {other}): rename the field",
                        a.full_name()
                    )));
                }
            }
        }
        Ok(Layout { arrays: out })
    }

    /// The arrays, in order.
    pub fn arrays(&self) -> &[Array<'a>] {
        &self.arrays
    }

    /// How many arrays.
    pub fn len(&self) -> usize {
        self.arrays.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }

    /// Checks that a sink handed one slice per array, each the array's size, and that
    /// the whole draw fits in memory (a draw too large for this machine is
    /// `TooLarge`, asked before any sink allocates).
    pub(crate) fn check_outs(&self, outs: &[&mut [u8]]) -> Result<()> {
        if outs.len() != self.arrays.len() {
            return Err(Error::InvalidSample(format!(
                "the sink gave {} arrays for a draw of {}",
                outs.len(),
                self.arrays.len()
            )));
        }
        for (a, out) in self.arrays.iter().zip(outs) {
            if out.len() != a.bytes() {
                return Err(Error::OutputSize {
                    field: a.full_name(),
                    expected: a.bytes(),
                    got: out.len(),
                });
            }
        }
        Ok(())
    }

    /// Checks that the arrays together fit this machine's memory, before a sink
    /// allocates: `sample(2**45)` is `TooLarge`, never an aborted process.
    pub(crate) fn check_size(&self) -> Result<()> {
        let rows = self.arrays.iter().map(|a| a.rows).max().unwrap_or(0);
        let total = (self.arrays.iter().map(Array::bytes)).fold(0usize, usize::saturating_add);
        check_rows(rows, total.div_ceil(rows.max(1)))
    }
}

/// Which schema fields `names` are, as a mask in schema order.
pub(crate) fn obs_mask(schema: &Schema, names: &[&str]) -> Result<Vec<bool>> {
    let mut mask = vec![false; schema.len()];
    for name in names {
        let Some(f) = schema.position(name) else {
            if schema.var_field(name).is_some() {
                continue;
            }
            return Err(Error::UnknownField {
                field: (*name).to_owned(),
                known: schema.names(),
            });
        };
        if let Some(x) = mask.get_mut(f) {
            *x = true;
        }
    }
    Ok(mask)
}

/// Which variable-length fields of `schema` `names` (a draw's observation fields) name,
/// one flag per field in schema order (names of fixed fields are `obs_mask`'s).
pub(crate) fn var_obs_mask(schema: &Schema, names: &[&str]) -> Vec<bool> {
    (schema.var_fields().iter())
        .map(|v| names.contains(&v.name()))
        .collect()
}

/// Where a draw puts its arrays: storage for each array of a [`Layout`], in its order,
/// each exactly [`Array::bytes`] long. The draw writes every byte (so the storage need
/// not be zeroed) and asks once per draw, after its units are picked: a draw that fails
/// before then (an empty buffer, a bad request) allocates nothing.
///
/// ```
/// use replaystore::{Batch, Column, Config, DType, Layout, ReplayBuffer, Request, Schema, Sink};
/// // A sink that keeps its arrays as plain byte vectors, one per array.
/// #[derive(Default)]
/// struct Bytes(Vec<(String, Vec<u8>)>);
/// impl Sink for Bytes {
///     fn arrays(&mut self, layout: &Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
///         self.0 = layout.arrays().iter().map(|a| (a.full_name(), vec![0; a.bytes()])).collect();
///         Ok(self.0.iter_mut().map(|(_, v)| &mut v[..]).collect())
///     }
/// }
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder().field("x", DType::U32, &[]).build()?;
/// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
/// buf.add_batch(&[Column::new("x", &[7u32, 7, 7])])?;
/// let mut sink = Bytes::default();
/// buf.sample_into(4, &mut sink)?;
/// assert_eq!(sink.0[0], ("x".to_string(), [7u8, 0, 0, 0].repeat(4)));
/// assert_eq!(sink.0[1].0, "indices");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Sink {
    /// Storage for the arrays of `layout`, in its order.
    fn arrays(&mut self, layout: &Layout<'_>) -> Result<Vec<&mut [u8]>>;

    /// Storage for the values of variable-length field `field` for the rows of the
    /// draw (after `arrays`), whose lengths in bytes are `lengths`: the draw copies
    /// each value there once, end to end or one row each (see [`ValuesOut`]). A sink
    /// that keeps no such values refuses, so that a draw never silently leaves a field
    /// out.
    fn values(&mut self, field: &VarField, lengths: &[u64]) -> Result<ValuesOut<'_>> {
        let _ = lengths;
        Err(Error::InvalidSchema(format!(
            "field {:?} is variable-length ({}): this sink takes no such values",
            field.name(),
            field.kind().name()
        )))
    }

    /// Storage for the values of every variable-length field of the draw at once: one
    /// [`ValuesOut`] per field of `fields`, in that order, `lengths[f]` the lengths in
    /// bytes of field `f`'s values. A draw given them copies each row's values
    /// together: a row's values lie end to end in the chunk ring, so its bytes are
    /// read once, in order, and a chunk two of them share is checked once. `None` (the
    /// default) has the draw ask [`Sink::values`] field by field instead.
    ///
    /// ```
    /// use replaystore::{Column, Config, Layout, ReplayBuffer, Schema, Sink, ValuesOut, VarField, VarKind};
    /// // Keeps every array, and every field's values end to end, as byte vectors.
    /// #[derive(Default)]
    /// struct Texts {
    ///     arrays: Vec<Vec<u8>>,
    ///     values: Vec<Vec<u8>>,
    /// }
    /// impl Sink for Texts {
    ///     fn arrays(&mut self, layout: &Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
    ///         self.arrays = layout.arrays().iter().map(|a| vec![0; a.bytes()]).collect();
    ///         Ok(self.arrays.iter_mut().map(|v| &mut v[..]).collect())
    ///     }
    ///     fn all_values(
    ///         &mut self,
    ///         _fields: &[&VarField],
    ///         lengths: &[Vec<u64>],
    ///     ) -> replaystore::Result<Option<Vec<ValuesOut<'_>>>> {
    ///         self.values = lengths.iter().map(|l| vec![0; l.iter().sum::<u64>() as usize]).collect();
    ///         Ok(Some(self.values.iter_mut().map(|v| ValuesOut::EndToEnd(v)).collect()))
    ///     }
    /// }
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder()
    ///     .variable("obs", VarKind::Str, None)
    ///     .variable("act", VarKind::Str, None)
    ///     .build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// buf.add(&[Column::text("obs", "board"), Column::text("act", "[e2e4]")])?;
    /// let mut sink = Texts::default();
    /// buf.sample_into(replaystore::Request::at(&[0, 0]), &mut sink)?;
    /// assert_eq!(sink.values, [b"boardboard".to_vec(), b"[e2e4][e2e4]".to_vec()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn all_values(
        &mut self,
        fields: &[&VarField],
        lengths: &[Vec<u64>],
    ) -> Result<Option<Vec<ValuesOut<'_>>>> {
        let _ = (fields, lengths);
        Ok(None)
    }
}

/// Where a draw copies the values of one variable-length field.
#[derive(Debug)]
pub enum ValuesOut<'a> {
    /// End to end: row `r`'s value at the sum of the lengths before it (Arrow's layout).
    EndToEnd(&'a mut [u8]),
    /// One row each: row `r`'s value at `r * row_bytes` (a padded 2-D array; the
    /// bytes after each value are the sink's, its padding).
    Rows {
        /// The storage, at least `rows * row_bytes` long.
        bytes: &'a mut [u8],
        /// Bytes from one row's start to the next's: at least the longest value.
        row_bytes: usize,
    },
    /// Grown by the sink as the draw copies each value, row after row (see
    /// [`GrowValues`]): storage made as it is filled, so a padded array is not zeroed
    /// whole first and then written over.
    Grown(&'a mut dyn GrowValues),
}

/// Storage a sink grows one value at a time ([`ValuesOut::Grown`]): the draw asks for
/// each row's value in row order, a padding position as a value of no bytes, and
/// appends exactly that many bytes to the vector it is given, so each byte is written
/// once, straight from the buffer's files. The sink lays the values out as it likes
/// (padding each row before its value, or end to end).
///
/// ```
/// use replaystore::{Column, Config, GrowValues, Layout, ReplayBuffer, Schema, Sink, ValuesOut, VarField, VarKind};
/// // Each value in a row of 8 bytes, padded with b'.'.
/// #[derive(Debug, Default)]
/// struct Padded(Vec<u8>);
/// impl GrowValues for Padded {
///     fn next_value(&mut self, _len: usize) -> &mut Vec<u8> {
///         let start = self.0.len().next_multiple_of(8);
///         self.0.resize(start, b'.');
///         &mut self.0
///     }
/// }
/// #[derive(Default)]
/// struct Texts(Vec<Vec<u8>>, Padded);
/// impl Sink for Texts {
///     fn arrays(&mut self, layout: &Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
///         self.0 = layout.arrays().iter().map(|a| vec![0; a.bytes()]).collect();
///         Ok(self.0.iter_mut().map(|v| &mut v[..]).collect())
///     }
///     fn values(&mut self, _: &VarField, _: &[u64]) -> replaystore::Result<ValuesOut<'_>> {
///         Ok(ValuesOut::Grown(&mut self.1))
///     }
/// }
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::builder().variable("obs", VarKind::Str, None).build()?;
/// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
/// buf.add(&[Column::text("obs", "board")])?;
/// buf.add(&[Column::text("obs", "e4")])?;
/// let mut sink = Texts::default();
/// buf.sample_into(replaystore::Request::at(&[0, 1]), &mut sink)?;
/// assert_eq!(sink.1.0, b"board...e4");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait GrowValues: std::fmt::Debug {
    /// The storage the next row's value of `len` bytes (whole elements of the field)
    /// is appended to: the draw appends exactly `len` bytes at its end.
    fn next_value(&mut self, len: usize) -> &mut Vec<u8>;
}

/// The storage a sink handed a draw, split by what each array holds: per schema field
/// the slice its values go to from each source row (empty where the draw returns none),
/// and the draw's own arrays.
pub(crate) struct Filled<'s> {
    /// Values read from the unit's rows (a transition's step row), by schema field.
    pub row: Vec<&'s mut [u8]>,
    /// Observations before each step, by schema field.
    pub obs: Vec<&'s mut [u8]>,
    /// Observations each step led to (`next_<name>`), by schema field.
    pub next: Vec<&'s mut [u8]>,
    own: [Option<&'s mut [u8]>; OWN_KINDS],
}

/// How many kinds of own arrays there are: one slot each in `Filled`.
const OWN_KINDS: usize = 12;
// `Own` is indexed by its discriminant: its last variant must take the last slot.
const _: () = assert!(Own::GoalIndices as usize + 1 == OWN_KINDS);

impl<'s> Filled<'s> {
    /// Asks `sink` for the arrays of `layout` (after checking they fit in memory), checks
    /// their sizes, and splits them for a schema of `fields` fields.
    pub fn from_sink(
        layout: &Layout<'_>,
        sink: &'s mut dyn Sink,
        fields: usize,
    ) -> Result<Filled<'s>> {
        layout.check_size()?;
        let outs = sink.arrays(layout)?;
        layout.check_outs(&outs)?;
        let mut own: [Option<&'s mut [u8]>; OWN_KINDS] = Default::default();
        let (mut obs, mut next) = (Vec::new(), Vec::new());
        // Rows, episodes and fragments: the fields first, in schema order, read from
        // the rows. The sink's own list is then the per-field list, once the draw's own
        // arrays after them are taken off its end.
        let in_order = (layout.arrays.iter().enumerate()).all(|(i, a)| match a.part {
            Part::Field(f, Source::Row) => f == i,
            Part::Field(..) => false,
            Part::Own(_) => i >= fields,
        });
        if in_order {
            let mut row = outs;
            let tail = row.len().min(fields)..;
            for (a, out) in layout.arrays.iter().skip(fields).zip(row.drain(tail)) {
                if let Part::Own(o) = a.part
                    && let Some(slot) = own.get_mut(o as usize)
                {
                    *slot = Some(out);
                }
            }
            return Ok(Filled {
                row,
                obs,
                next,
                own,
            });
        }
        let mut row: Vec<&'s mut [u8]> = Vec::new();
        for (a, out) in layout.arrays.iter().zip(outs) {
            match a.part {
                Part::Own(o) => {
                    if let Some(slot) = own.get_mut(o as usize) {
                        *slot = Some(out);
                    }
                }
                Part::Field(f, source) => {
                    let list = match source {
                        Source::Row => &mut row,
                        Source::Obs => &mut obs,
                        Source::Next => &mut next,
                    };
                    if list.is_empty() {
                        list.resize_with(fields, Default::default);
                    }
                    if let Some(slot) = list.get_mut(f) {
                        *slot = out;
                    }
                }
            }
        }
        Ok(Filled {
            row,
            obs,
            next,
            own,
        })
    }

    /// Copies `bytes` into own array `own`, if the draw returns it.
    pub fn put(&mut self, own: Own, bytes: &[u8]) {
        if let Some(Some(out)) = self.own.get_mut(own as usize) {
            let n = out.len().min(bytes.len());
            if let (Some(to), Some(from)) = (out.get_mut(..n), bytes.get(..n)) {
                to.copy_from_slice(from);
            }
        }
    }
}

/// Checks that a draw of `rows` rows of `row_bytes` bytes each (plus its index and
/// weight) can be held: the total fits the address space and this machine's memory.
/// Every draw checks this before it allocates, so `sample(2**45)` is a typed error
/// ([`Error::TooLarge`]) and not an aborted process.
///
/// ```
/// use replaystore::internal::check_rows;
/// assert!(check_rows(256, 200).is_ok());
/// assert!(check_rows(usize::MAX, 1).is_err());
/// ```
pub fn check_rows(rows: usize, row_bytes: usize) -> Result<()> {
    let limit = physical_memory();
    let per_row = u64::try_from(row_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(12);
    let bytes = u64::try_from(rows)
        .ok()
        .and_then(|r| r.checked_mul(per_row));
    match bytes {
        Some(b) if b <= limit && usize::try_from(b).is_ok_and(|b| b <= isize::MAX as usize) => {
            Ok(())
        }
        _ => Err(Error::TooLarge {
            rows: rows as u64,
            bytes,
            limit,
        }),
    }
}

/// This machine's memory in bytes (`MemTotal`), the bound no single draw may exceed;
/// half the address space where it cannot be read.
fn physical_memory() -> u64 {
    static TOTAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())
            .map_or(u64::MAX >> 1, |kb| kb.saturating_mul(1024))
    })
}
