//! What callers hand to `add` and `add_batch`: named, typed, shaped byte views, checked
//! against the schema before a single byte is written.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::schema::{MAX_FIELD_RANK, Schema, ValueFault};

/// Most dimensions a column may have: a field's rank plus the batch dimension.
pub const MAX_COLUMN_RANK: usize = MAX_FIELD_RANK + 1;

/// A borrowed array for one field: a name, a dtype, a shape and the bytes.
///
/// For `add` (one item) the shape is the field's shape, or one flat dimension holding the
/// same number of elements. For `add_batch` it is `[rows, field shape...]`.
///
/// ```
/// use replaystore::Column;
/// let obs = [0.5f32; 17];
/// let c = Column::new("obs", &obs);
/// assert_eq!(c.shape(), &[17]);
/// let batch = vec![0.0f32; 4 * 17];
/// let c = Column::new("obs", &batch).with_shape(&[4, 17]);
/// assert_eq!(c.shape(), &[4, 17]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Column<'a> {
    name: &'a str,
    dtype: DType,
    bytes: &'a [u8],
    dims: [usize; MAX_COLUMN_RANK],
    /// Number of dimensions; `MAX_COLUMN_RANK + 1` marks a shape that was too long.
    rank: usize,
    /// Values of a variable-length field: one (all of `bytes`), or one per row.
    var: Var<'a>,
}

/// How a column's bytes divide into values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var<'a> {
    /// A fixed field's array.
    No,
    /// One variable-length value: all of `bytes`.
    One,
    /// One value per row: row `r` is `bytes[offsets[r]..offsets[r + 1]]`.
    Many(&'a [u64]),
}

impl<'a> Column<'a> {
    /// A one-dimensional column over a slice.
    pub fn new<T: Element>(name: &'a str, data: &'a [T]) -> Column<'a> {
        let mut dims = [0; MAX_COLUMN_RANK];
        dims[0] = data.len();
        Column {
            name,
            dtype: T::DTYPE,
            bytes: bytemuck::cast_slice(data),
            dims,
            rank: 1,
            var: Var::No,
        }
    }

    /// One item's value of a `str` field.
    ///
    /// ```
    /// use replaystore::Column;
    /// let c = Column::text("obs", "You are player 0.");
    /// assert!(c.is_variable());
    /// ```
    pub fn text(name: &'a str, value: &'a str) -> Column<'a> {
        Column::value(name, value.as_bytes())
    }

    /// One item's value of a `bytes` field (or a `u8` ragged field).
    pub fn value(name: &'a str, value: &'a [u8]) -> Column<'a> {
        Column::ragged(name, value)
    }

    /// One item's value of a ragged field: a 1-D array of any length.
    pub fn ragged<T: Element>(name: &'a str, value: &'a [T]) -> Column<'a> {
        Column {
            var: Var::One,
            ..Column::new(name, value)
        }
    }

    /// `add_batch` values of a variable-length field, end to end in `bytes`: row `r` is
    /// `bytes[offsets[r]..offsets[r + 1]]` (byte offsets, `rows + 1` of them, from 0 to
    /// `bytes.len()`, never decreasing: Arrow's layout, in bytes).
    ///
    /// ```
    /// use replaystore::{Column, DType};
    /// let tokens = [1i32, 2, 3, 4, 5];
    /// let offsets = [0u64, 8, 8, 20]; // rows of 2, 0 and 3 tokens
    /// let c = Column::values("tokens", DType::I32, bytemuck::cast_slice(&tokens), &offsets);
    /// assert_eq!(c.rows(), Some(3));
    /// ```
    pub fn values(name: &'a str, dtype: DType, bytes: &'a [u8], offsets: &'a [u64]) -> Column<'a> {
        Column {
            var: Var::Many(offsets),
            ..Column::from_bytes(name, dtype, &[bytes.len() / dtype.size().max(1)], bytes)
        }
    }

    /// Whether the column holds variable-length values.
    pub fn is_variable(&self) -> bool {
        self.var != Var::No
    }

    /// Rows of a variable-length column (`None` for a fixed field's array).
    pub fn rows(&self) -> Option<usize> {
        match self.var {
            Var::No => None,
            Var::One => Some(1),
            Var::Many(offsets) => Some(offsets.len().saturating_sub(1)),
        }
    }

    /// Where row `r`'s value of a variable-length column starts in its bytes (the
    /// bytes' length at `r` = rows), once checked (`match_var_columns`).
    pub(crate) fn value_start(&self, r: usize) -> usize {
        match self.var {
            Var::No => 0,
            Var::One => {
                if r == 0 {
                    0
                } else {
                    self.bytes.len()
                }
            }
            Var::Many(offsets) => offsets.get(r).map_or(self.bytes.len(), |&o| o as usize),
        }
    }

    /// Row `r`'s value of a variable-length column, once checked (`match_var_columns`).
    pub(crate) fn value_of(&self, r: usize) -> &'a [u8] {
        match self.var {
            Var::No => &[],
            Var::One => self.bytes,
            Var::Many(offsets) => {
                let (Some(&a), Some(&b)) = (offsets.get(r), offsets.get(r + 1)) else {
                    return &[];
                };
                self.bytes.get(a as usize..b as usize).unwrap_or(&[])
            }
        }
    }

    /// A scalar column (shape `[]`) for one item.
    pub fn scalar<T: Element>(name: &'a str, value: &'a T) -> Column<'a> {
        Column {
            rank: 0,
            ..Column::new(name, std::slice::from_ref(value))
        }
    }

    /// A column over raw little-endian bytes of a given dtype and shape (for bindings).
    pub fn from_bytes(name: &'a str, dtype: DType, shape: &[usize], bytes: &'a [u8]) -> Column<'a> {
        Column {
            name,
            dtype,
            bytes,
            dims: [0; MAX_COLUMN_RANK],
            rank: 0,
            var: Var::No,
        }
        .with_shape(shape)
    }

    /// The same data seen with another shape (checked when added).
    pub fn with_shape(mut self, shape: &[usize]) -> Column<'a> {
        if shape.len() > MAX_COLUMN_RANK {
            self.rank = MAX_COLUMN_RANK + 1;
            return self;
        }
        self.dims = [0; MAX_COLUMN_RANK];
        self.dims.iter_mut().zip(shape).for_each(|(d, &s)| *d = s);
        self.rank = shape.len();
        self
    }

    /// The field name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape (empty for a scalar; the full shape when it was too long).
    pub fn shape(&self) -> &[usize] {
        self.dims.get(..self.rank).unwrap_or(&self.dims)
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Rows of a batch column: its first dimension (a variable-length column's values).
    pub fn batch_rows(&self) -> usize {
        match self.var {
            Var::No => self.shape().first().copied().unwrap_or(1),
            _ => self.rows().unwrap_or(0),
        }
    }

    /// Row `r` of a batch column (`[rows, field shape...]`), as `add` takes one item;
    /// `None` past the last row.
    ///
    /// ```
    /// use replaystore::Column;
    /// let batch = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    /// let c = Column::new("obs", &batch).with_shape(&[3, 2]);
    /// let row = c.row(1).unwrap();
    /// assert_eq!((row.shape(), row.bytes()), (&[2][..], bytemuck::cast_slice(&batch[2..4])));
    /// assert!(c.row(3).is_none());
    /// ```
    pub fn row(&self, r: usize) -> Option<Column<'a>> {
        if r >= self.batch_rows() {
            return None;
        }
        if self.var != Var::No {
            return Some(Column {
                bytes: self.value_of(r),
                var: Var::One,
                ..*self
            });
        }
        let inner = self.shape().get(1..).unwrap_or(&[]);
        let size = inner.iter().product::<usize>() * self.dtype.size();
        let bytes = self.bytes.get(r * size..(r + 1) * size)?;
        Some(Column::from_bytes(self.name, self.dtype, inner, bytes))
    }
}

/// Where each field's name was last seen: (address, length) of the caller's `&str`.
/// Callers usually pass the same string literals on every add, so an address match
/// skips comparing names byte by byte on the hot path.
pub(crate) type NameCache = Vec<(usize, usize)>;

fn same_name(c: &Column<'_>, field: &str, seen: Option<&mut (usize, usize)>) -> bool {
    let key = (c.name.as_ptr() as usize, c.name.len());
    match seen {
        Some(s) if *s == key => true,
        Some(s) if c.name == field => {
            *s = key;
            true
        }
        _ => c.name == field,
    }
}

fn dims_eq(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Matches `columns` to the schema's fields. On success `order[f]` is the position of
/// field `f`'s column, and the result is the number of rows (1 when `batch` is false).
/// Nothing is written by the caller unless this succeeds.
pub(crate) fn match_columns(
    schema: &Schema,
    columns: &[Column<'_>],
    batch: bool,
    order: &mut Vec<usize>,
    names: &mut NameCache,
) -> Result<usize> {
    match_some_columns(schema, columns, batch, false, order, names)
}

/// Position in `columns` recorded for a field left out (allowed with `partial`).
pub(crate) const ABSENT: usize = usize::MAX;

/// `match_columns`, where with `partial` a field may be left out (its position in
/// `order` is `ABSENT`): an episode's reset row carries only observations.
pub(crate) fn match_some_columns(
    schema: &Schema,
    columns: &[Column<'_>],
    batch: bool,
    partial: bool,
    order: &mut Vec<usize>,
    names: &mut NameCache,
) -> Result<usize> {
    order.clear();
    names.resize(schema.len(), (0, 0));
    for (f, field) in schema.fields().iter().enumerate() {
        // Fast path: columns given in schema order.
        let pos = match columns.get(f) {
            Some(c) if same_name(c, field.name(), names.get_mut(f)) => f,
            _ => match columns.iter().position(|c| c.name == field.name()) {
                Some(p) => p,
                None if partial => ABSENT,
                None => {
                    return Err(Error::MissingField {
                        field: field.name().to_owned(),
                    });
                }
            },
        };
        order.push(pos);
    }
    if partial || columns.len() != schema.len() + schema.var_fields().len() {
        // Every field was found, so an extra column is either unknown or a duplicate.
        for (i, c) in columns.iter().enumerate() {
            if schema.position(c.name).is_none() && schema.var_field(c.name).is_none() {
                return Err(Error::UnknownField {
                    field: c.name.to_owned(),
                    known: schema.names(),
                });
            }
            if columns.iter().take(i).any(|d| d.name == c.name) {
                return Err(Error::DuplicateField {
                    field: c.name.to_owned(),
                });
            }
        }
    }
    let mut rows: Option<(usize, &str)> = None;
    for (field, &pos) in schema.fields().iter().zip(order.iter()) {
        let Some(c) = columns.get(pos) else { continue };
        if c.is_variable() {
            return Err(Error::ShapeMismatch {
                field: field.name().to_owned(),
                expected: field.shape().to_vec(),
                got: vec![c.bytes.len() / c.dtype.size().max(1)],
            });
        }
        if c.dtype != field.dtype() {
            return Err(Error::DTypeMismatch {
                field: field.name().to_owned(),
                expected: field.dtype(),
                got: c.dtype,
            });
        }
        let shape = c.shape();
        let n = if batch {
            let fits = c.rank == field.shape().len() + 1
                && dims_eq(shape.get(1..).unwrap_or(&[]), field.shape());
            if !fits {
                let mut expected = vec![shape.first().copied().unwrap_or(0)];
                expected.extend_from_slice(field.shape());
                return Err(Error::ShapeMismatch {
                    field: field.name().to_owned(),
                    expected,
                    got: shape.to_vec(),
                });
            }
            shape.first().copied().unwrap_or(0)
        } else {
            let flat = c.rank == 1 && shape.first() == Some(&field.elements());
            if !flat && !dims_eq(shape, field.shape()) {
                return Err(Error::ShapeMismatch {
                    field: field.name().to_owned(),
                    expected: field.shape().to_vec(),
                    got: shape.to_vec(),
                });
            }
            1
        };
        let expected = n.saturating_mul(field.bytes());
        if c.bytes.len() != expected {
            return Err(Error::LengthMismatch {
                field: field.name().to_owned(),
                shape: shape.to_vec(),
                dtype: c.dtype,
                expected,
                got: c.bytes.len(),
            });
        }
        // A bool is stored as the byte 0 or 1, and read back as a Rust or NumPy bool,
        // which must never see another byte (bytes from `Column::from_bytes`, an
        // imported `.npy` or a reinterpreted array can hold anything).
        if field.dtype() == DType::Bool
            && let Some(element) = c.bytes.iter().position(|&b| b > 1)
        {
            return Err(Error::BadValue {
                field: field.name().to_owned(),
                element,
                expected: "a bool: byte 0 or 1",
                got: format!("byte {}", c.bytes.get(element).copied().unwrap_or(0)),
            });
        }
        match rows {
            None => rows = Some((n, field.name())),
            Some((first, first_field)) if first != n => {
                return Err(Error::RaggedBatch {
                    field: field.name().to_owned(),
                    first_field: first_field.to_owned(),
                    expected: first,
                    got: n,
                });
            }
            Some(_) => {}
        }
    }
    Ok(rows.map_or(0, |(n, _)| n))
}

/// Matches `columns` to the schema's variable-length fields, checking every value: its
/// dtype, the offsets, its length against the field's maximum (and `max_bytes`, the most
/// one value may take), UTF-8 for `str`. On success `order[v]` is the position of
/// variable field `v`'s column, and the result is the number of rows (`rows` if the
/// fixed fields gave one, which the variable columns must then agree with). With
/// `partial` (an episode's reset row, which carries only observations) a field left
/// out is `ABSENT` in `order`, and stored as an empty value. Nothing is written by the
/// caller unless this succeeds.
pub(crate) fn match_var_columns(
    schema: &Schema,
    columns: &[Column<'_>],
    rows: Option<(usize, &str)>,
    max_bytes: usize,
    partial: bool,
    order: &mut Vec<usize>,
) -> Result<usize> {
    order.clear();
    let mut rows = rows;
    for field in schema.var_fields() {
        let Some(pos) = columns.iter().position(|c| c.name == field.name()) else {
            if partial {
                order.push(ABSENT);
                continue;
            }
            return Err(Error::MissingField {
                field: field.name().to_owned(),
            });
        };
        order.push(pos);
        let c = columns
            .get(pos)
            .copied()
            .unwrap_or(Column::new("", &[0u8; 0]));
        let name = || field.name().to_owned();
        let dtype = field.kind().dtype();
        if c.dtype != dtype {
            return Err(Error::DTypeMismatch {
                field: name(),
                expected: dtype,
                got: c.dtype,
            });
        }
        let n = match c.var {
            Var::No => {
                return Err(Error::ShapeMismatch {
                    field: name(),
                    expected: vec![0],
                    got: c.shape().to_vec(),
                });
            }
            Var::One => 1,
            Var::Many(offsets) => {
                let bad = |problem: String| Error::BadOffsets {
                    field: name(),
                    problem,
                };
                let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) else {
                    return Err(bad("are empty: a batch of n rows needs n + 1".into()));
                };
                if first != 0 || last != c.bytes.len() as u64 {
                    return Err(bad(format!(
                        "run from {first} to {last}: expected 0 to {} (the values' bytes)",
                        c.bytes.len()
                    )));
                }
                if let Some(r) = offsets.windows(2).position(|w| w.first() > w.get(1)) {
                    return Err(bad(format!("decrease at row {r}")));
                }
                offsets.len() - 1
            }
        };
        let size = dtype.size();
        for r in 0..n {
            let value = c.value_of(r);
            let len = value.len() / size;
            let max = field.max_len().unwrap_or(usize::MAX).min(max_bytes / size);
            match field.kind().check_value(value) {
                Err(ValueFault::PartElement { bytes, .. }) => {
                    return Err(Error::BadOffsets {
                        field: name(),
                        problem: format!(
                            "row {r} has {bytes} bytes, not whole {} elements",
                            dtype.name()
                        ),
                    });
                }
                _ if len > max => {
                    return Err(Error::ValueTooLong {
                        field: name(),
                        row: r,
                        len,
                        max,
                    });
                }
                Err(ValueFault::NotUtf8 { valid_up_to }) => {
                    return Err(Error::InvalidText {
                        field: name(),
                        row: r,
                        valid_up_to,
                    });
                }
                Ok(()) => {}
            }
        }
        match rows {
            None => rows = Some((n, field.name())),
            Some((first, first_field)) if first != n => {
                return Err(Error::RaggedBatch {
                    field: name(),
                    first_field: first_field.to_owned(),
                    expected: first,
                    got: n,
                });
            }
            Some(_) => {}
        }
    }
    Ok(rows.map_or(0, |(n, _)| n))
}
