//! What a draw returned: one contiguous, aligned array per field (and per array of the
//! draw's own) plus the logical indices. A batch is reusable: `sample_into` refills it
//! without allocating when the layout and size fit.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::schema::{Schema, VarField, VarKind};
use crate::sink::{Array, Layout, Sink, ValuesOut};

/// One field of a batch: `rows` items of the field's shape, row after row.
#[derive(Clone, Debug)]
pub struct FieldArray {
    name: String,
    dtype: DType,
    item_shape: Vec<usize>,
    item_bytes: usize,
    rows: usize,
    // u64 words so that every dtype's view of the bytes is aligned.
    words: Vec<u64>,
}

impl FieldArray {
    /// An empty array of the shape `array` describes.
    fn of(array: &Array<'_>) -> FieldArray {
        FieldArray {
            name: array.full_name(),
            dtype: array.dtype,
            item_shape: array.lead.iter().chain(array.item).copied().collect(),
            item_bytes: array.row_bytes(),
            rows: 0,
            words: Vec::new(),
        }
    }

    /// `rows` zeroed items of `field`.
    pub(crate) fn zeroed(field: &crate::schema::Field, rows: usize) -> FieldArray {
        let mut f = FieldArray {
            name: field.name().to_owned(),
            dtype: field.dtype(),
            item_shape: field.shape().to_vec(),
            item_bytes: field.bytes(),
            rows: 0,
            words: Vec::new(),
        };
        f.resize(rows);
        f
    }

    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The full shape: `[rows, item shape...]`.
    pub fn shape(&self) -> Vec<usize> {
        let mut s = vec![self.rows];
        s.extend_from_slice(&self.item_shape);
        s
    }

    /// The bytes, `rows * item size` long.
    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = bytemuck::cast_slice(&self.words);
        all.get(..self.rows * self.item_bytes).unwrap_or(all)
    }

    /// The array's storage, handed over without a copy: u64 words (so every dtype's
    /// view is aligned) whose first `rows * item size` bytes are the array's, the rest
    /// zero padding.
    ///
    /// ```
    /// use replaystore::{Column, Config, DType, ReplayBuffer, Schema};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().field("x", DType::U16, &[]).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 8))?;
    /// buf.add_batch(&[Column::new("x", &[7u16, 9, 11])])?;
    /// let field = buf.get_many(&[0, 2])?.field("x").unwrap().clone();
    /// let words = field.into_words();
    /// assert_eq!(&bytemuck::cast_slice::<u64, u16>(&words)[..2], [7, 11]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_words(self) -> Vec<u64> {
        self.words
    }

    /// The bytes, writable (a gather's destination).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.rows * self.item_bytes;
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
        let len = all.len();
        all.get_mut(..n.min(len)).unwrap_or_default()
    }

    /// The bytes of row `i`.
    pub fn row(&self, i: usize) -> Option<&[u8]> {
        self.bytes()
            .get(i * self.item_bytes..(i + 1) * self.item_bytes)
    }

    /// The elements as `T`, which must be the field's dtype.
    pub fn as_slice<T: Element + bytemuck::checked::CheckedBitPattern>(&self) -> Result<&[T]> {
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch {
                field: self.name.clone(),
                expected: self.dtype,
                got: T::DTYPE,
            });
        }
        bytemuck::checked::try_cast_slice(self.bytes()).map_err(|e| Error::Corrupt {
            file: Default::default(),
            offset: 0,
            field: self.name.clone(),
            expected: format!("valid {} elements", self.dtype),
            got: e.to_string(),
        })
    }

    fn resize(&mut self, rows: usize) {
        self.rows = rows;
        let words = (rows * self.item_bytes).div_ceil(8);
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
    }
}

/// What a draw returned: named arrays (the fields, and for transitions, sequences,
/// episodes and fragments the draw's own arrays, see [`crate::Layout`]), the logical
/// indices and, by priority, the importance weights. A batch is the allocating
/// [`Sink`]: `sample_into` refills one without allocating when the layout is the same.
///
/// ```
/// use replaystore::{Batch, DType, Schema};
/// let schema = Schema::builder().field("r", DType::F32, &[]).build()?;
/// let batch = Batch::new(&schema, 3);
/// assert_eq!(batch.len(), 3);
/// assert_eq!(batch.field("r").map(|f| f.shape()), Some(vec![3]));
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Batch {
    fields: Vec<FieldArray>,
    values: Vec<VarArray>,
    /// The value storage of the last draw, handed to the next one in field order: a
    /// batch reused draw after draw allocates (and zeroes, and faults in) its values'
    /// memory once, not on every draw.
    spare: Vec<Vec<u64>>,
    indices: Vec<u64>,
    weights: Vec<f32>,
}

/// The values of one variable-length field for the rows of a batch, end to end: row
/// `r` is `bytes()[offsets()[r]..offsets()[r + 1]]` (Arrow's layout, in bytes).
#[derive(Clone, Debug)]
pub struct VarArray {
    name: String,
    kind: VarKind,
    // u64 words so that every dtype's view of a value is aligned (values are whole
    // elements, end to end from an aligned start).
    words: Vec<u64>,
    len: usize,
    offsets: Vec<u64>,
}

impl VarArray {
    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the field holds.
    pub fn kind(&self) -> VarKind {
        self.kind
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value's bytes, end to end, to be written.
    fn bytes_mut(&mut self) -> &mut [u8] {
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
        let len = self.len.min(all.len());
        all.get_mut(..len).unwrap_or_default()
    }

    /// Every value's bytes, end to end.
    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = bytemuck::cast_slice(&self.words);
        all.get(..self.len).unwrap_or(all)
    }

    /// Byte offsets of the rows' values, `len() + 1` of them.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// Row `r`'s value as bytes.
    pub fn value(&self, r: usize) -> Option<&[u8]> {
        let (&a, &b) = (self.offsets.get(r)?, self.offsets.get(r + 1)?);
        self.bytes().get(a as usize..b as usize)
    }

    /// Row `r`'s value of a `str` field.
    pub fn text(&self, r: usize) -> Result<&str> {
        let bytes = self.value(r).ok_or(Error::Evicted {
            index: r as u64,
            head: 0,
            tail: self.len() as u64,
        })?;
        std::str::from_utf8(bytes).map_err(|e| Error::InvalidText {
            field: self.name.clone(),
            row: r,
            valid_up_to: e.valid_up_to(),
        })
    }

    /// Row `r`'s value as elements `T` (the field's dtype).
    pub fn elements<T: Element + bytemuck::checked::CheckedBitPattern>(
        &self,
        r: usize,
    ) -> Result<&[T]> {
        if T::DTYPE != self.kind.dtype() {
            return Err(Error::DTypeMismatch {
                field: self.name.clone(),
                expected: self.kind.dtype(),
                got: T::DTYPE,
            });
        }
        let bytes = self.value(r).unwrap_or(&[]);
        bytemuck::checked::try_cast_slice(bytes).map_err(|e| Error::Corrupt {
            file: Default::default(),
            offset: 0,
            field: self.name.clone(),
            expected: format!("valid {} elements", T::DTYPE),
            got: e.to_string(),
        })
    }
}

impl Batch {
    /// A zeroed batch of `rows` items of a schema.
    pub fn new(schema: &Schema, rows: usize) -> Batch {
        Batch {
            fields: schema
                .fields()
                .iter()
                .map(|f| FieldArray::zeroed(f, rows))
                .collect(),
            values: Vec::new(),
            spare: Vec::new(),
            indices: vec![0; rows],
            weights: Vec::new(),
        }
    }

    /// Rows in the batch: items, or the rows of the episodes or fragments drawn, or
    /// the transitions or sequences.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The logical index of each row (a transition's or sequence's: its first step's
    /// row, what its priority keys on).
    pub fn indices(&self) -> &[u64] {
        &self.indices
    }

    /// Every array but `indices` and `weights`, in the draw's order.
    pub fn fields(&self) -> &[FieldArray] {
        &self.fields
    }

    /// The array named `name`.
    pub fn field(&self, name: &str) -> Option<&FieldArray> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The values of variable-length field `name`.
    pub fn values(&self, name: &str) -> Option<&VarArray> {
        self.values.iter().find(|v| v.name == name)
    }

    /// Row `r`'s value of `str` field `name`.
    ///
    /// ```
    /// use replaystore::{Column, Config, ReplayBuffer, Schema, VarKind};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::builder().variable("act", VarKind::Str, Some(64)).build()?;
    /// let mut buf = ReplayBuffer::create(dir.path().join("b"), Config::new(schema, 10))?;
    /// let i = buf.add(&[Column::text("act", "[move] e2e4")])?;
    /// assert_eq!(buf.get(i)?.text("act", 0)?, "[move] e2e4");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn text(&self, name: &str, r: usize) -> Result<&str> {
        self.values(name)
            .ok_or_else(|| Error::UnknownField {
                field: name.to_owned(),
                known: self
                    .values
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?
            .text(r)
    }

    /// An array's elements as `T`: a field (`"obs"`, `"next_obs"`) or one of the
    /// draw's own (`"returns"`, `"offsets"`, ...).
    ///
    /// ```
    /// # use replaystore::{Batch, DType, Schema};
    /// # let schema = Schema::builder().field("r", DType::F32, &[]).build()?;
    /// let batch = Batch::new(&schema, 2);
    /// let r: &[f32] = batch.get("r")?;
    /// assert_eq!(r, &[0.0, 0.0]);
    /// assert!(batch.get::<f64>("r").is_err());
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn get<T: Element + bytemuck::checked::CheckedBitPattern>(
        &self,
        name: &str,
    ) -> Result<&[T]> {
        let f = self.field(name).ok_or_else(|| Error::UnknownField {
            field: name.to_owned(),
            known: self
                .fields
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        f.as_slice()
    }

    /// All bytes of row `i` across the arrays, in order (for comparisons).
    pub fn item_bytes(&self, i: usize) -> Vec<u8> {
        self.fields
            .iter()
            .flat_map(|f| f.row(i).unwrap_or(&[]).iter().copied())
            .collect()
    }

    /// Importance weights of a draw by priority, one per unit (`(N * P(i))^-beta`
    /// over its largest value in the buffer); empty for a uniform draw.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Whether the batch holds exactly the arrays of `layout` (but for their lengths).
    fn shaped_as(&self, layout: &Layout<'_>) -> bool {
        let mut fields = self.fields.iter();
        layout.arrays().iter().filter(|a| !own_vec(a)).all(|a| {
            fields.next().is_some_and(|f| {
                f.dtype == a.dtype
                    && a.is(&f.name)
                    && f.item_shape.len() == a.item.len() + usize::from(a.lead.is_some())
                    && f.item_shape.iter().eq(a.lead.iter().chain(a.item))
            })
        }) && fields.next().is_none()
    }
}

/// Whether a batch keeps `array` in its typed `indices` or `weights`.
fn own_vec(array: &Array<'_>) -> bool {
    array.prefix.is_empty() && (array.name == "indices" || array.name == "weights")
}

impl Sink for Batch {
    /// Reshapes the batch to `layout`: the arrays it already has are reused (grown,
    /// never shrunk) when the layout is the same as the last draw's.
    fn arrays(&mut self, layout: &Layout<'_>) -> Result<Vec<&mut [u8]>> {
        if !self.shaped_as(layout) {
            self.fields = (layout.arrays().iter().filter(|a| !own_vec(a)))
                .map(FieldArray::of)
                .collect();
        }
        let mut weighted = false;
        for a in layout.arrays() {
            match (a.prefix, a.name) {
                ("", "indices") => self.indices.resize(a.rows, 0),
                ("", "weights") => {
                    self.weights.resize(a.rows, 0.0);
                    weighted = true;
                }
                _ => {}
            }
        }
        if !weighted {
            self.weights.clear();
        }
        // Reversed, so that popping hands them out in the order they were used.
        self.spare
            .extend(self.values.drain(..).rev().map(|v| v.words));
        let (mut indices, mut weights) = (
            Some(bytemuck::cast_slice_mut::<u64, u8>(&mut self.indices)),
            Some(bytemuck::cast_slice_mut::<f32, u8>(&mut self.weights)),
        );
        let mut fields = self.fields.iter_mut();
        let mut outs = Vec::with_capacity(layout.len());
        for a in layout.arrays() {
            let out = match (a.prefix, a.name) {
                ("", "indices") => indices.take(),
                ("", "weights") => weights.take(),
                _ => fields.next().map(|f| {
                    f.resize(a.rows);
                    f.bytes_mut()
                }),
            };
            outs.push(out.unwrap_or_default());
        }
        Ok(outs)
    }

    fn values(&mut self, field: &VarField, lengths: &[u64]) -> Result<ValuesOut<'_>> {
        self.push_values(field, lengths);
        let v = self.values.last_mut().ok_or(Error::Empty)?;
        Ok(ValuesOut::EndToEnd(v.bytes_mut()))
    }

    fn all_values(
        &mut self,
        fields: &[&VarField],
        lengths: &[Vec<u64>],
    ) -> Result<Option<Vec<ValuesOut<'_>>>> {
        for (field, l) in fields.iter().zip(lengths) {
            self.push_values(field, l);
        }
        Ok(Some(
            self.values
                .iter_mut()
                .map(|v| ValuesOut::EndToEnd(v.bytes_mut()))
                .collect(),
        ))
    }
}

impl Batch {
    /// Storage for one field's values of `lengths` bytes each, end to end.
    fn push_values(&mut self, field: &VarField, lengths: &[u64]) {
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        let mut at = 0u64;
        offsets.push(0);
        for &n in lengths {
            at += n;
            offsets.push(at);
        }
        let len = at as usize;
        // The draw writes every byte of `..len`: only memory beyond the last draw's is
        // zeroed first (so nothing uninitialised is ever seen), none is cleared again.
        let mut words = self.spare.pop().unwrap_or_default();
        words.resize(len.div_ceil(8), 0);
        self.values.push(VarArray {
            name: field.name().to_owned(),
            kind: field.kind(),
            words,
            len,
            offsets,
        });
    }
}
