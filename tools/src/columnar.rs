//! Apache Parquet for `export` and `import`: every field, variable-length ones included,
//! as the column types pandas, pyarrow, polars and Hugging Face `datasets` read.
//!
//! | replaystore field        | Arrow type written (and read back)                   |
//! |--------------------------|------------------------------------------------------|
//! | scalar of a dtype        | Boolean, Int8 .. UInt64, Float32, Float64            |
//! | shape `[a, b]`           | FixedSizeList(a) of FixedSizeList(b) of the dtype    |
//! | `str`                    | Utf8 (also read: LargeUtf8, Utf8View)                |
//! | `bytes`                  | Binary (also read: LargeBinary, BinaryView)          |
//! | ragged array of a dtype  | List of the dtype (also read: LargeList)             |
//!
//! Nothing is null in a buffer, so a column with a null is refused on import, naming the
//! column and the row. Export writes row groups of at most `ROW_GROUP_BYTES`
//! (Snappy-compressed, as pandas writes by default) while it reads the buffer in chunks,
//! so memory stays bounded whatever the buffer's size.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeListArray, ListArray, PrimitiveArray,
    RecordBatch, StringArray,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field as ArrowField, Schema as ArrowSchema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use replaystore::{Batch, Column, DType, Field, ReplayBuffer, Schema, VarField, VarKind};

use crate::fail::Failure;
use crate::source::Selection;

/// Estimated bytes a row group holds before the writer closes it.
const ROW_GROUP_BYTES: usize = 128 << 20;

/// Rows per record batch read on import (one `add_batch` each).
const READ_ROWS: usize = 1024;

/// The Arrow element type of a dtype.
fn arrow_type(dtype: DType) -> DataType {
    match dtype {
        DType::Bool => DataType::Boolean,
        DType::U8 => DataType::UInt8,
        DType::I8 => DataType::Int8,
        DType::U16 => DataType::UInt16,
        DType::I16 => DataType::Int16,
        DType::U32 => DataType::UInt32,
        DType::I32 => DataType::Int32,
        DType::U64 => DataType::UInt64,
        DType::I64 => DataType::Int64,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
    }
}

/// The dtype of an Arrow element type, if replaystore has it.
fn dtype_of(t: &DataType) -> Option<DType> {
    DType::ALL.into_iter().find(|&d| &arrow_type(d) == t)
}

/// A list's element field: named `item`, as Arrow's writers name it; never null.
fn item(t: DataType) -> Arc<ArrowField> {
    Arc::new(ArrowField::new("item", t, false))
}

/// The Arrow type of one item of a fixed field: its dtype inside one fixed-size list
/// per dimension, outermost first.
fn fixed_type(f: &Field) -> DataType {
    f.shape()
        .iter()
        .rev()
        .fold(arrow_type(f.dtype()), |inner, &d| {
            DataType::FixedSizeList(item(inner), d as i32)
        })
}

fn var_type(f: &VarField) -> DataType {
    match f.kind() {
        VarKind::Str => DataType::Utf8,
        VarKind::Bytes => DataType::Binary,
        VarKind::Ragged(d) => DataType::List(item(arrow_type(d))),
    }
}

/// The Arrow schema of the chosen fields: fixed ones, then variable-length ones.
pub fn arrow_schema(schema: &Schema, chosen: &Selection) -> Arc<ArrowSchema> {
    let fixed = (chosen.fields(schema).into_iter())
        .map(|f| ArrowField::new(f.name(), fixed_type(f), false));
    let var = (chosen.var_fields(schema).into_iter())
        .map(|f| ArrowField::new(f.name(), var_type(f), false));
    Arc::new(ArrowSchema::new(fixed.chain(var).collect::<Vec<_>>()))
}

/// A primitive array of `dtype` over little-endian `bytes` (copied once, into memory
/// aligned for the type).
fn primitive(dtype: DType, bytes: &[u8]) -> ArrayRef {
    fn of<T: arrow_array::ArrowPrimitiveType>(bytes: &[u8]) -> ArrayRef {
        let n = bytes.len() / std::mem::size_of::<T::Native>();
        Arc::new(PrimitiveArray::<T>::new(
            ScalarBuffer::new(Buffer::from_slice_ref(bytes), 0, n),
            None,
        ))
    }
    match dtype {
        DType::Bool => Arc::new(BooleanArray::from(
            bytes.iter().map(|&b| b != 0).collect::<Vec<bool>>(),
        )),
        DType::U8 => of::<UInt8Type>(bytes),
        DType::I8 => of::<Int8Type>(bytes),
        DType::U16 => of::<UInt16Type>(bytes),
        DType::I16 => of::<Int16Type>(bytes),
        DType::U32 => of::<UInt32Type>(bytes),
        DType::I32 => of::<Int32Type>(bytes),
        DType::U64 => of::<UInt64Type>(bytes),
        DType::I64 => of::<Int64Type>(bytes),
        DType::F32 => of::<Float32Type>(bytes),
        DType::F64 => of::<Float64Type>(bytes),
    }
}

/// `rows` items of a fixed field from their bytes, back to back.
fn fixed_array(f: &Field, bytes: &[u8]) -> Result<ArrayRef, Failure> {
    let mut array = primitive(f.dtype(), bytes);
    for &d in f.shape().iter().rev() {
        let list =
            FixedSizeListArray::try_new(item(array.data_type().clone()), d as i32, array, None)
                .map_err(|e| Failure::Usage(format!("field {:?}: {e}", f.name())))?;
        array = Arc::new(list);
    }
    Ok(array)
}

/// Byte offsets of a batch's values as Arrow's 32-bit offsets in units of `size` bytes.
fn offsets32(f: &VarField, offsets: &[u64], size: u64) -> Result<OffsetBuffer<i32>, Failure> {
    let converted = offsets
        .iter()
        .map(|&o| i32::try_from(o / size))
        .collect::<Result<Vec<i32>, _>>()
        .map_err(|_| {
            Failure::Usage(format!(
                "field {:?}: one chunk's values pass 2 GiB, more than a Parquet column chunk's \
                 32-bit offsets hold; export fewer items at a time (--range)",
                f.name()
            ))
        })?;
    Ok(OffsetBuffer::new(ScalarBuffer::from(converted)))
}

/// The values of a variable-length field in one batch read from a buffer.
fn var_array(f: &VarField, batch: &Batch) -> Result<ArrayRef, Failure> {
    let v = batch
        .values(f.name())
        .ok_or_else(|| Failure::Usage(format!("the read returned no {:?}", f.name())))?;
    let bad = |e: arrow_schema::ArrowError| Failure::Usage(format!("field {:?}: {e}", f.name()));
    Ok(match f.kind() {
        VarKind::Str => Arc::new(
            StringArray::try_new(
                offsets32(f, v.offsets(), 1)?,
                Buffer::from_slice_ref(v.bytes()),
                None,
            )
            .map_err(bad)?,
        ),
        VarKind::Bytes => Arc::new(
            BinaryArray::try_new(
                offsets32(f, v.offsets(), 1)?,
                Buffer::from_slice_ref(v.bytes()),
                None,
            )
            .map_err(bad)?,
        ),
        VarKind::Ragged(d) => Arc::new(
            ListArray::try_new(
                item(arrow_type(d)),
                offsets32(f, v.offsets(), d.size() as u64)?,
                primitive(d, v.bytes()),
                None,
            )
            .map_err(bad)?,
        ),
    })
}

/// Writes chunks of a buffer's items as a Parquet file.
pub struct ParquetOut {
    writer: ArrowWriter<File>,
    arrow: Arc<ArrowSchema>,
}

impl ParquetOut {
    /// A writer of the chosen fields' columns into `file`, and with `removed` a last
    /// column `removed`: why each item was removed (null for a live one).
    pub fn new(
        file: File,
        schema: &Schema,
        chosen: &Selection,
        removed: bool,
    ) -> Result<ParquetOut, Failure> {
        let mut arrow = arrow_schema(schema, chosen);
        if removed {
            let mut fields: Vec<ArrowField> =
                arrow.fields().iter().map(|f| f.as_ref().clone()).collect();
            fields.push(ArrowField::new("removed", DataType::Utf8, true));
            arrow = Arc::new(ArrowSchema::new(fields));
        }
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
            .build();
        let writer = ArrowWriter::try_new(file, arrow.clone(), Some(props))
            .map_err(|e| Failure::Usage(format!("parquet: {e}")))?;
        Ok(ParquetOut { writer, arrow })
    }

    /// Appends one chunk of items, read into `batch`, with why each was removed
    /// (`removed[r]`, `""` for a live item) where the file has that column.
    pub fn write(
        &mut self,
        schema: &Schema,
        chosen: &Selection,
        batch: &Batch,
        removed: Option<&[&str]>,
        path: &Path,
    ) -> Result<(), Failure> {
        let mut columns = Vec::with_capacity(self.arrow.fields().len());
        for (f, bytes) in chosen.fields(schema).into_iter().zip(chosen.columns(batch)) {
            columns.push(fixed_array(f, bytes)?);
        }
        for f in chosen.var_fields(schema) {
            columns.push(var_array(f, batch)?);
        }
        if columns.len() < self.arrow.fields().len() {
            let causes = removed.unwrap_or(&[]);
            let cells = causes.iter().map(|&c| (!c.is_empty()).then_some(c));
            columns.push(Arc::new(arrow_array::StringArray::from_iter(cells)));
        }
        let rb = RecordBatch::try_new(self.arrow.clone(), columns)
            .map_err(|e| Failure::Usage(format!("parquet: {e}")))?;
        self.writer
            .write(&rb)
            .map_err(|e| Failure::file("write", path, std::io::Error::other(e)))
    }

    /// Writes the footer; the file is complete (not yet synced).
    pub fn finish(self, path: &Path) -> Result<File, Failure> {
        self.writer
            .into_inner()
            .map_err(|e| Failure::file("write", path, std::io::Error::other(e)))
    }
}

/// What one column of a table being imported becomes.
#[derive(Clone, Debug)]
enum Kind {
    /// A fixed field of this dtype and item shape.
    Fixed(DType, Vec<usize>),
    /// A variable-length field.
    Var(VarKind),
}

/// The field kind an Arrow column type maps to, or why none does.
fn kind_of(t: &DataType) -> Result<Kind, String> {
    if let Some(d) = dtype_of(t) {
        return Ok(Kind::Fixed(d, Vec::new()));
    }
    let element = |f: &ArrowField| {
        dtype_of(f.data_type()).ok_or_else(|| format!("a list of {}", f.data_type()))
    };
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(Kind::Var(VarKind::Str)),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            Ok(Kind::Var(VarKind::Bytes))
        }
        DataType::List(f) | DataType::LargeList(f) => Ok(Kind::Var(VarKind::Ragged(element(f)?))),
        DataType::FixedSizeList(f, d) => match kind_of(f.data_type())? {
            Kind::Fixed(dtype, mut shape) => {
                shape.insert(0, usize::try_from(*d).map_err(|e| e.to_string())?);
                Ok(Kind::Fixed(dtype, shape))
            }
            Kind::Var(_) => Err(format!("a fixed-size list of {}", f.data_type())),
        },
        other => Err(other.to_string()),
    }
}

/// A Parquet file being imported: its columns' kinds and its rows.
pub struct ParquetIn {
    path: std::path::PathBuf,
    names: Vec<String>,
    kinds: Vec<Kind>,
    /// Rows, from the footer.
    pub rows: u64,
}

impl ParquetIn {
    /// Reads the footer of `path` and maps each column to a field kind.
    pub fn open(path: &Path) -> Result<ParquetIn, Failure> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?)
            .map_err(|e| Failure::input(path, format!("not a readable Parquet file: {e}")))?;
        let rows = builder.metadata().file_metadata().num_rows();
        let mut names = Vec::new();
        let mut kinds = Vec::new();
        for f in builder.schema().fields() {
            let kind = kind_of(f.data_type()).map_err(|t| {
                Failure::input(
                    path,
                    format!(
                        "column {:?}: type {t} has no replaystore field (numbers, bools, \
                         fixed-size lists of them, strings, binary, lists of numbers)",
                        f.name()
                    ),
                )
            })?;
            names.push(f.name().clone());
            kinds.push(kind);
        }
        Ok(ParquetIn {
            path: path.to_path_buf(),
            names,
            kinds,
            rows: u64::try_from(rows).unwrap_or(0),
        })
    }

    /// The schema its columns make, in column order.
    pub fn schema(&self) -> Result<Schema, Failure> {
        let mut b = Schema::builder();
        for (name, kind) in self.names.iter().zip(&self.kinds) {
            b = match kind {
                Kind::Fixed(d, shape) => b.field(name, *d, shape),
                Kind::Var(v) => b.variable(name, *v, None),
            };
        }
        Ok(b.build()?)
    }

    fn batches(&self) -> Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader, Failure> {
        ParquetRecordBatchReaderBuilder::try_new(open(&self.path)?)
            .and_then(|b| b.with_batch_size(READ_ROWS).build())
            .map_err(|e| Failure::input(&self.path, format!("not a readable Parquet file: {e}")))
    }

    /// Bytes of every variable-length value in the file and the record batches `fill`
    /// will add (a first pass over the variable-length columns only, to size the new
    /// buffer's chunk ring so that no imported item is evicted for space: each batch
    /// may leave a chunk's tail unfilled).
    pub fn value_bytes(&self) -> Result<(u64, u64), Failure> {
        let var: Vec<(usize, &String, VarKind)> = (self.names.iter().zip(&self.kinds).enumerate())
            .filter_map(|(i, (name, kind))| match kind {
                Kind::Var(v) => Some((i, name, *v)),
                Kind::Fixed(..) => None,
            })
            .collect();
        if var.is_empty() {
            return Ok((0, 0));
        }
        let bad = |e: parquet::errors::ParquetError| {
            Failure::input(&self.path, format!("not a readable Parquet file: {e}"))
        };
        let builder = ParquetRecordBatchReaderBuilder::try_new(open(&self.path)?).map_err(bad)?;
        let mask = ProjectionMask::roots(builder.parquet_schema(), var.iter().map(|v| v.0));
        let reader = builder
            .with_projection(mask)
            .with_batch_size(READ_ROWS)
            .build()
            .map_err(bad)?;
        let (mut total, mut batches, mut row) = (0u64, 0u64, 0u64);
        for rb in reader {
            let rb = rb.map_err(|e| Failure::input(&self.path, format!("row {row}: {e}")))?;
            for (a, &(_, name, kind)) in rb.columns().iter().zip(&var) {
                let (bytes, _) = self.var_column(name, kind, a.as_ref(), row)?;
                total += bytes.len() as u64;
            }
            row += rb.num_rows() as u64;
            batches += 1;
        }
        Ok((total, batches))
    }

    /// Adds every row to `buf`, a record batch per `add_batch`; `done(rows)` after each.
    pub fn fill(&self, buf: &mut ReplayBuffer, mut done: impl FnMut(u64)) -> Result<(), Failure> {
        let mut row = 0u64;
        for rb in self.batches()? {
            let rb = rb.map_err(|e| Failure::input(&self.path, format!("row {row}: {e}")))?;
            let n = rb.num_rows();
            let mut owned = Vec::with_capacity(self.kinds.len());
            for (a, (name, kind)) in rb.columns().iter().zip(self.names.iter().zip(&self.kinds)) {
                owned.push(match kind {
                    Kind::Fixed(..) => {
                        let mut bytes = Vec::new();
                        self.fixed_column(name, a.as_ref(), row, &mut bytes)?;
                        (bytes, None)
                    }
                    Kind::Var(v) => {
                        let (bytes, offsets) = self.var_column(name, *v, a.as_ref(), row)?;
                        (bytes, Some(offsets))
                    }
                });
            }
            let cols: Vec<Column<'_>> = owned
                .iter()
                .zip(self.names.iter().zip(&self.kinds))
                .map(|((bytes, offsets), (name, kind))| match (kind, offsets) {
                    (Kind::Var(v), Some(o)) => Column::values(name, v.dtype(), bytes, o),
                    (Kind::Fixed(d, shape), _) => {
                        let mut s = vec![n];
                        s.extend(shape);
                        Column::from_bytes(name, *d, &s, bytes)
                    }
                    (Kind::Var(v), None) => Column::values(name, v.dtype(), bytes, &[]),
                })
                .collect();
            buf.add_batch(&cols)?;
            row += n as u64;
            done(n as u64);
        }
        Ok(())
    }

    fn no_nulls(&self, name: &str, a: &dyn Array, row: u64) -> Result<(), Failure> {
        match a
            .logical_nulls()
            .and_then(|n| n.iter().position(|valid| !valid))
        {
            Some(r) => Err(Failure::input(
                &self.path,
                format!(
                    "column {name:?}, row {}: null (a buffer's items have every field)",
                    row + r as u64
                ),
            )),
            None => Ok(()),
        }
    }

    /// Appends the little-endian bytes of a fixed column's rows to `out`.
    fn fixed_column(
        &self,
        name: &str,
        a: &dyn Array,
        row: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        self.no_nulls(name, a, row)?;
        if let DataType::FixedSizeList(_, d) = a.data_type() {
            let l = a.as_fixed_size_list();
            let d = *d as usize;
            let start = if l.is_empty() {
                0
            } else {
                l.value_offset_at(0)
            };
            let inner = l.values().slice(start, l.len() * d);
            return self.fixed_column(name, inner.as_ref(), row, out);
        }
        primitive_bytes(a, out).ok_or_else(|| {
            Failure::input(
                &self.path,
                format!("column {name:?}: unexpected type {}", a.data_type()),
            )
        })
    }

    /// A variable-length column's values end to end and their byte offsets from 0.
    fn var_column(
        &self,
        name: &str,
        kind: VarKind,
        a: &dyn Array,
        row: u64,
    ) -> Result<(Vec<u8>, Vec<u64>), Failure> {
        self.no_nulls(name, a, row)?;
        let rebase = |offsets: &[i64], scale: u64| -> Vec<u64> {
            let first = offsets.first().copied().unwrap_or(0);
            offsets
                .iter()
                .map(|&o| (o - first) as u64 * scale)
                .collect()
        };
        let span = |offsets: &[i64]| {
            let a = offsets.first().copied().unwrap_or(0) as usize;
            let b = offsets.last().copied().unwrap_or(0) as usize;
            a..b
        };
        let wide = |o: &[i32]| o.iter().map(|&x| i64::from(x)).collect::<Vec<i64>>();
        let bytes_of = |values: &[u8], offsets: Vec<i64>| {
            (
                values.get(span(&offsets)).unwrap_or_default().to_vec(),
                rebase(&offsets, 1),
            )
        };
        let by_value = |values: &mut dyn Iterator<Item = Option<&[u8]>>| {
            let mut bytes = Vec::new();
            let mut offsets = vec![0u64];
            for v in values {
                bytes.extend_from_slice(v.unwrap_or_default());
                offsets.push(bytes.len() as u64);
            }
            (bytes, offsets)
        };
        Ok(match (kind, a.data_type()) {
            (_, DataType::Utf8) => {
                let s = a.as_string::<i32>();
                bytes_of(s.values(), wide(s.value_offsets()))
            }
            (_, DataType::LargeUtf8) => {
                let s = a.as_string::<i64>();
                bytes_of(s.values(), s.value_offsets().to_vec())
            }
            (_, DataType::Binary) => {
                let s = a.as_binary::<i32>();
                bytes_of(s.values(), wide(s.value_offsets()))
            }
            (_, DataType::LargeBinary) => {
                let s = a.as_binary::<i64>();
                bytes_of(s.values(), s.value_offsets().to_vec())
            }
            (_, DataType::Utf8View) => {
                by_value(&mut a.as_string_view().iter().map(|s| s.map(str::as_bytes)))
            }
            (_, DataType::BinaryView) => by_value(&mut a.as_binary_view().iter()),
            (VarKind::Ragged(d), DataType::List(_) | DataType::LargeList(_)) => {
                let (offsets, values) = match a.data_type() {
                    DataType::List(_) => {
                        let l = a.as_list::<i32>();
                        (wide(l.value_offsets()), l.values().clone())
                    }
                    _ => {
                        let l = a.as_list::<i64>();
                        (l.value_offsets().to_vec(), l.values().clone())
                    }
                };
                let r = span(&offsets);
                let inner = values.slice(r.start, r.len());
                self.no_nulls(name, inner.as_ref(), row)?;
                let mut bytes = Vec::with_capacity(r.len() * d.size());
                primitive_bytes(inner.as_ref(), &mut bytes).ok_or_else(|| {
                    Failure::input(
                        &self.path,
                        format!("column {name:?}: unexpected element type"),
                    )
                })?;
                (bytes, rebase(&offsets, d.size() as u64))
            }
            (_, t) => {
                return Err(Failure::input(
                    &self.path,
                    format!("column {name:?}: unexpected type {t}"),
                ));
            }
        })
    }
}

fn open(path: &Path) -> Result<File, Failure> {
    File::open(path).map_err(|e| Failure::file("open", path, e))
}

/// Appends a primitive or boolean array's values as little-endian bytes (bools as 0/1).
fn primitive_bytes(a: &dyn Array, out: &mut Vec<u8>) -> Option<()> {
    fn raw<T: arrow_array::ArrowPrimitiveType>(a: &dyn Array, out: &mut Vec<u8>) {
        // The scalar buffer is already cut to the array's rows.
        out.extend_from_slice(a.as_primitive::<T>().values().inner().as_slice());
    }
    match a.data_type() {
        DataType::Boolean => out.extend(a.as_boolean().values().iter().map(u8::from)),
        DataType::UInt8 => raw::<UInt8Type>(a, out),
        DataType::Int8 => raw::<Int8Type>(a, out),
        DataType::UInt16 => raw::<UInt16Type>(a, out),
        DataType::Int16 => raw::<Int16Type>(a, out),
        DataType::UInt32 => raw::<UInt32Type>(a, out),
        DataType::Int32 => raw::<Int32Type>(a, out),
        DataType::UInt64 => raw::<UInt64Type>(a, out),
        DataType::Int64 => raw::<Int64Type>(a, out),
        DataType::Float32 => raw::<Float32Type>(a, out),
        DataType::Float64 => raw::<Float64Type>(a, out),
        _ => return None,
    }
    Some(())
}
