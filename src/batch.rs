//! Sampled items: one contiguous, aligned array per field plus the logical indices.
//! A batch is reusable: `sample_into` refills it without allocating when the size fits.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::schema::Schema;

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

/// A batch of items: per-field arrays and the logical index of each row.
///
/// ```
/// use replaystore::{Batch, DType, Schema};
/// let schema = Schema::builder().field("r", DType::F32, &[]).build()?;
/// let batch = Batch::new(&schema, 3);
/// assert_eq!(batch.len(), 3);
/// assert_eq!(batch.field("r").map(|f| f.shape()), Some(vec![3]));
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Batch {
    fields: Vec<FieldArray>,
    indices: Vec<u64>,
    weights: Vec<f32>,
}

impl Batch {
    /// A zeroed batch of `rows` items of a schema.
    pub fn new(schema: &Schema, rows: usize) -> Batch {
        let mut b = Batch {
            fields: schema
                .fields()
                .iter()
                .map(|f| FieldArray {
                    name: f.name().to_owned(),
                    dtype: f.dtype(),
                    item_shape: f.shape().to_vec(),
                    item_bytes: f.bytes(),
                    rows: 0,
                    words: Vec::new(),
                })
                .collect(),
            indices: Vec::new(),
            weights: Vec::new(),
        };
        b.resize(rows);
        b
    }

    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The logical index of each row.
    pub fn indices(&self) -> &[u64] {
        &self.indices
    }

    /// The field arrays, in schema order.
    pub fn fields(&self) -> &[FieldArray] {
        &self.fields
    }

    /// The array of a field.
    pub fn field(&self, name: &str) -> Option<&FieldArray> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// A field's elements as `T`.
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

    /// All bytes of item `i` across fields, in schema order (for comparisons).
    pub fn item_bytes(&self, i: usize) -> Vec<u8> {
        self.fields
            .iter()
            .flat_map(|f| f.row(i).unwrap_or(&[]).iter().copied())
            .collect()
    }

    /// Sets the number of rows as [`Batch::resize`] does, after checking that they fit
    /// (see [`check_rows`]): a request for more rows than memory can hold is an error,
    /// never an abort.
    ///
    /// ```
    /// # use replaystore::{Batch, DType, Schema};
    /// let schema = Schema::builder().field("x", DType::F32, &[84, 84]).build()?;
    /// let mut batch = Batch::new(&schema, 0);
    /// batch.try_resize(32)?;
    /// assert!(matches!(batch.try_resize(1 << 40), Err(replaystore::Error::TooLarge { .. })));
    /// assert_eq!(batch.len(), 32);
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn try_resize(&mut self, rows: usize) -> Result<()> {
        let row_bytes = self.fields.iter().map(|f| f.item_bytes).sum();
        check_rows(rows, row_bytes)?;
        self.resize(rows);
        Ok(())
    }

    /// Sets the number of rows, growing storage if needed (never shrinking it).
    pub fn resize(&mut self, rows: usize) {
        self.indices.resize(rows, 0);
        for f in &mut self.fields {
            f.resize(rows);
        }
    }

    /// Copies row `src_row` of `src` (made for the same schema) into row `dst_row`:
    /// fields, index, and the weight when both batches carry weights.
    pub(crate) fn copy_row(&mut self, dst_row: usize, src: &Batch, src_row: usize) {
        for (d, s) in self.fields.iter_mut().zip(&src.fields) {
            let n = d.item_bytes;
            if let (Some(to), Some(from)) = (
                d.bytes_mut().get_mut(dst_row * n..(dst_row + 1) * n),
                s.bytes().get(src_row * n..(src_row + 1) * n),
            ) {
                to.copy_from_slice(from);
            }
        }
        if let (Some(to), Some(&from)) = (self.indices.get_mut(dst_row), src.indices.get(src_row)) {
            *to = from;
        }
        if let (Some(to), Some(&from)) = (self.weights.get_mut(dst_row), src.weights.get(src_row)) {
            *to = from;
        }
    }

    /// Checks caller-owned arrays for a draw of `n` rows: `indices` (and `weights`) `n`
    /// long, and one output per field of `schema`, each `n` of its items long.
    pub(crate) fn check_fill(
        schema: &Schema,
        n: usize,
        indices: Option<usize>,
        weights: Option<usize>,
        outs: &[&mut [u8]],
    ) -> Result<()> {
        let (i, w) = (indices.unwrap_or(n), weights.unwrap_or(n));
        if i != n || w != n {
            return Err(Error::InvalidSample(format!(
                "{i} indices and {w} weights for a draw of {n}"
            )));
        }
        if outs.len() != schema.len() {
            return Err(Error::InvalidSample(format!(
                "{} outputs for {} fields",
                outs.len(),
                schema.len()
            )));
        }
        for (f, out) in schema.fields().iter().zip(outs.iter()) {
            let expected = f.bytes() * n;
            if out.len() != expected {
                return Err(Error::OutputSize {
                    field: f.name().to_owned(),
                    expected,
                    got: out.len(),
                });
            }
        }
        Ok(())
    }

    /// Whether this batch was made for `schema`.
    pub(crate) fn fits(&self, schema: &Schema) -> bool {
        self.fields.len() == schema.len()
            && self.fields.iter().zip(schema.fields()).all(|(a, f)| {
                a.name == f.name() && a.dtype == f.dtype() && a.item_shape == f.shape()
            })
    }

    /// Readies this batch to receive a draw of `n` rows (checked against `schema`,
    /// grown if needed, weights sized when `weighted`, cleared otherwise) and hands out
    /// where they go: indices, weights and one slice per field. Every `*_into` draw
    /// fills a batch through this, then the same path as the caller-array fills.
    pub(crate) fn ready(&mut self, schema: &Schema, n: usize, weighted: bool) -> Result<Drawn<'_>> {
        self.check_made_for(schema)?;
        self.try_resize(n)?;
        let (indices, weights, outs) = self.drawn_parts_mut();
        match weighted {
            true => weights.resize(n, 0.0),
            false => weights.clear(),
        }
        Ok((indices, weights, outs))
    }

    /// `fits`, as the error a sample into a batch made for another schema is.
    pub(crate) fn check_made_for(&self, schema: &Schema) -> Result<()> {
        match self.fits(schema) {
            true => Ok(()),
            false => Err(Error::InvalidSample(
                "the output batch was made for another schema".into(),
            )),
        }
    }

    /// Importance weights of a prioritized sample, one per row (`(N * P(i))^-beta`
    /// over its largest value in the buffer); empty for a uniform sample.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// The index list, the weights and one writable byte slice per field: for a gather
    /// that may draw some rows again (a reader racing the writer).
    pub(crate) fn drawn_parts_mut(&mut self) -> Drawn<'_> {
        let outs = self.fields.iter_mut().map(FieldArray::bytes_mut).collect();
        (&mut self.indices, &mut self.weights, outs)
    }

    /// The index list and one writable byte slice per field, for a gather.
    pub(crate) fn parts_mut(&mut self) -> (&mut Vec<u64>, Vec<&mut [u8]>) {
        let outs = self.fields.iter_mut().map(FieldArray::bytes_mut).collect();
        (&mut self.indices, outs)
    }
}

/// Where a draw goes in a batch: its indices, its weights and one slice per field.
pub(crate) type Drawn<'a> = (&'a mut Vec<u64>, &'a mut Vec<f32>, Vec<&'a mut [u8]>);

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
