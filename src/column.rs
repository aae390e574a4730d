//! What callers hand to `add` and `add_batch`: named, typed, shaped byte views, checked
//! against the schema before a single byte is written.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::schema::{MAX_FIELD_RANK, Schema};

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
    if partial || columns.len() != schema.len() {
        // Every field was found, so an extra column is either unknown or a duplicate.
        for (i, c) in columns.iter().enumerate() {
            if schema.position(c.name).is_none() {
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
