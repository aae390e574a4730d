//! NumPy arrays in and out, without per-element Python work or hidden copies: an input
//! array is read in place when it is C-contiguous and of the field's dtype (anything
//! else raises, so no silent copy or cast), and a draw's outputs are allocated once, with
//! each array's dtype and shape, filled by the engine and handed to NumPy as they are.

use numpy::ndarray::{self, Dimension, IxDyn};
use numpy::{
    PyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};
use replaystore::{Array, DType, Field, GrowValues, Layout, Sink, ValuesOut, VarField, VarKind};

use crate::errors::SchemaError;

/// One field's value, held for as long as the engine reads it.
pub enum Held<'py> {
    /// An ndarray of the field's dtype, borrowed in place.
    Array(Typed<'py>),
    /// A Python scalar, encoded.
    Scalar([u8; 8], usize),
}

/// A NumPy array borrowed with its element type (one variant per engine dtype).
pub enum Typed<'py> {
    Bool(PyReadonlyArrayDyn<'py, bool>),
    U8(PyReadonlyArrayDyn<'py, u8>),
    I8(PyReadonlyArrayDyn<'py, i8>),
    U16(PyReadonlyArrayDyn<'py, u16>),
    I16(PyReadonlyArrayDyn<'py, i16>),
    U32(PyReadonlyArrayDyn<'py, u32>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    U64(PyReadonlyArrayDyn<'py, u64>),
    I64(PyReadonlyArrayDyn<'py, i64>),
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
}

/// The bytes of one field's value, with the value's shape.
pub struct Input<'py> {
    /// What holds the bytes.
    pub held: Held<'py>,
    /// Its shape.
    pub shape: Vec<usize>,
}

impl Input<'_> {
    /// The value's bytes (an array that is not C-contiguous is refused earlier).
    pub fn bytes(&self) -> PyResult<&[u8]> {
        macro_rules! raw {
            ($a:expr) => {
                bytemuck::cast_slice($a.as_slice()?)
            };
        }
        Ok(match &self.held {
            Held::Scalar(b, n) => b.get(..*n).unwrap_or_default(),
            Held::Array(t) => match t {
                Typed::Bool(a) => raw!(a),
                Typed::U8(a) => raw!(a),
                Typed::I8(a) => raw!(a),
                Typed::U16(a) => raw!(a),
                Typed::I16(a) => raw!(a),
                Typed::U32(a) => raw!(a),
                Typed::I32(a) => raw!(a),
                Typed::U64(a) => raw!(a),
                Typed::I64(a) => raw!(a),
                Typed::F32(a) => raw!(a),
                Typed::F64(a) => raw!(a),
            },
        })
    }
}

/// `array` borrowed as `dtype`'s element type; `None` when its dtype is another.
fn borrow_as<'py>(array: &Bound<'py, PyUntypedArray>, dtype: DType) -> Option<Typed<'py>> {
    macro_rules! as_ {
        ($t:ty, $v:ident) => {
            array
                .cast::<PyArrayDyn<$t>>()
                .ok()
                .map(|a| Typed::$v(a.readonly()))
        };
    }
    match dtype {
        DType::Bool => as_!(bool, Bool),
        DType::U8 => as_!(u8, U8),
        DType::I8 => as_!(i8, I8),
        DType::U16 => as_!(u16, U16),
        DType::I16 => as_!(i16, I16),
        DType::U32 => as_!(u32, U32),
        DType::I32 => as_!(i32, I32),
        DType::U64 => as_!(u64, U64),
        DType::I64 => as_!(i64, I64),
        DType::F32 => as_!(f32, F32),
        DType::F64 => as_!(f64, F64),
    }
}

/// Allocations at least this large are tried before they are made (`Owned::zeroed`):
/// the giant ones a capped process cannot have. Below it no draw pays for the try (a
/// W2 batch's arrays are a few MiB).
const PROBE_BYTES: usize = 64 << 20;

/// Makes room for `n` more bytes in `out`, or says `MemoryError` where the process
/// cannot have them (a failed allocation would abort the interpreter).
pub fn reserve(out: &mut Vec<u8>, n: usize, what: &str) -> PyResult<()> {
    out.try_reserve(n).map_err(|_| {
        crate::errors::to_py(replaystore::Error::OutOfMemory {
            what: what.to_owned(),
            bytes: n as u64,
        })
    })
}

/// Appends the elements of `value` to `out` when it is a 1-D C-contiguous NumPy array
/// of `dtype` (a ragged field's value as trainers hand it: no conversion, one copy);
/// `false` for anything else, which the caller converts. The caller has checked its
/// size.
pub fn append_array(value: &Bound<'_, PyAny>, dtype: DType, out: &mut Vec<u8>) -> PyResult<bool> {
    let Ok(array) = value.cast::<PyUntypedArray>() else {
        return Ok(false);
    };
    if array.ndim() != 1 || !array.is_c_contiguous() {
        return Ok(false);
    }
    let Some(typed) = borrow_as(array, dtype) else {
        return Ok(false);
    };
    let input = Input {
        held: Held::Array(typed),
        shape: vec![array.len()],
    };
    let raw = input.bytes()?;
    reserve(out, raw.len(), "a variable-length value")?;
    out.extend_from_slice(raw);
    Ok(true)
}

/// A Python float, int or bool for a scalar field, encoded without NumPy; `None` when
/// the value is something else or does not fit exactly (then NumPy converts it, and
/// says why not).
fn scalar(field: &Field, value: &Bound<'_, PyAny>) -> Option<[u8; 8]> {
    if !field.shape().is_empty() {
        return None;
    }
    let dtype = field.dtype();
    if value.is_instance_of::<PyBool>() {
        let b = value.extract::<bool>().ok()?;
        return (dtype == DType::Bool).then(|| dtype.encode_f64(f64::from(u8::from(b))));
    }
    // A finite value float32 cannot hold is left to the checked conversion, which
    // refuses it (stored, it would read back as infinity).
    let fits = |v: f64| dtype != DType::F32 || !v.is_finite() || (v as f32).is_finite();
    if value.is_instance_of::<PyFloat>() {
        let v = value.extract::<f64>().ok()?;
        return (matches!(dtype, DType::F32 | DType::F64) && fits(v)).then(|| dtype.encode_f64(v));
    }
    if value.is_instance_of::<PyInt>() {
        if matches!(dtype, DType::F32 | DType::F64) {
            // Only an integer the float holds exactly; any other is left to the checked
            // conversion, which refuses it.
            let v = value.extract::<i128>().ok()?;
            let f = v as f64;
            let exact = f as i128 == v && (dtype == DType::F64 || f64::from(f as f32) == f);
            return exact.then(|| dtype.encode_f64(f));
        }
        let v = value.extract::<i128>().ok()?;
        let fits = |lo: i128, hi: i128| (lo..=hi).contains(&v);
        let ok = match dtype {
            DType::U8 => fits(0, u8::MAX.into()),
            DType::I8 => fits(i8::MIN.into(), i8::MAX.into()),
            DType::U16 => fits(0, u16::MAX.into()),
            DType::I16 => fits(i16::MIN.into(), i16::MAX.into()),
            DType::U32 => fits(0, u32::MAX.into()),
            DType::I32 => fits(i32::MIN.into(), i32::MAX.into()),
            DType::U64 => fits(0, u64::MAX.into()),
            DType::I64 => fits(i64::MIN.into(), i64::MAX.into()),
            DType::Bool | DType::F32 | DType::F64 => false,
        };
        // Two's complement little-endian: the low bytes are the value for every width.
        return ok.then(|| {
            let mut b = [0u8; 8];
            b.copy_from_slice(v.to_le_bytes().get(..8).unwrap_or(&[0; 8]));
            b
        });
    }
    // Last: a Python float, int or bool (np.float64 included) never reaches it.
    numpy_scalar(dtype, value)
}

/// A NumPy scalar of exactly `dtype` (what indexing a row of a NumPy batch gives, such
/// as `rewards[i]`), encoded from its value: it holds the field's type, so nothing can
/// change. Any other value is `None` and goes the checked ways; before this, such
/// scalars went through `_convert.field_array`, most of a W2 `add` from Python.
fn numpy_scalar(dtype: DType, value: &Bound<'_, PyAny>) -> Option<[u8; 8]> {
    let py = value.py();
    macro_rules! exact {
        ($t:ty) => {
            value.get_type().is(&numpy::dtype::<$t>(py).typeobj())
        };
    }
    let int = |v: &Bound<'_, PyAny>| {
        let v = v.extract::<i128>().ok()?;
        let mut b = [0u8; 8];
        b.copy_from_slice(v.to_le_bytes().get(..8)?);
        Some(b)
    };
    match dtype {
        DType::Bool if exact!(bool) => {
            let b = value.extract::<bool>().ok()?;
            Some(dtype.encode_f64(f64::from(u8::from(b))))
        }
        DType::U8 if exact!(u8) => int(value),
        DType::I8 if exact!(i8) => int(value),
        DType::U16 if exact!(u16) => int(value),
        DType::I16 if exact!(i16) => int(value),
        DType::U32 if exact!(u32) => int(value),
        DType::I32 if exact!(i32) => int(value),
        DType::U64 if exact!(u64) => int(value),
        DType::I64 if exact!(i64) => int(value),
        // A float32's value is exactly a double's, and back.
        DType::F32 if exact!(f32) => Some(dtype.encode_f64(value.extract::<f64>().ok()?)),
        DType::F64 if exact!(f64) => Some(dtype.encode_f64(value.extract::<f64>().ok()?)),
        _ => None,
    }
}

/// How values of another type are taken: only when no value changes (the default), or
/// arrays under NumPy's `same_kind` rule too (a buffer's `cast = "same_kind"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Cast {
    /// Arrays of the field's dtype; single values and lists when no value changes.
    #[default]
    Exact,
    /// Arrays of the same kind converted (float64 into float32), overflow refused.
    SameKind,
}

/// Reads `value` for `field`: an ndarray must already have the field's dtype and be
/// C-contiguous (it is then read in place); Python scalars and lists are converted to
/// the field's dtype when no value changes (`replaystore._convert`).
pub fn input<'py>(field: &Field, value: &Bound<'py, PyAny>, cast: Cast) -> PyResult<Input<'py>> {
    if let Some(bytes) = scalar(field, value) {
        return Ok(Input {
            held: Held::Scalar(bytes, field.dtype().size()),
            shape: Vec::new(),
        });
    }
    let convert = || value.py().import("replaystore._convert");
    let same_kind = cast == Cast::SameKind;
    let converted;
    let mut array = match value.cast::<PyUntypedArray>() {
        Ok(a) => a,
        Err(_) => {
            // Checked: NumPy's own conversion would store "yes" or 2 as True and 1e300
            // as float32 infinity; another library's array follows NumPy arrays' rule.
            converted = convert()?
                .call_method1(
                    "field_array",
                    (value, field.dtype().numpy_str(), field.name(), same_kind),
                )?
                .cast_into::<PyUntypedArray>()
                .map_err(PyErr::from)?;
            &converted
        }
    };
    let recast;
    if same_kind && borrow_as(array, field.dtype()).is_none() {
        recast = convert()?
            .call_method1(
                "same_kind",
                (array, field.dtype().numpy_str(), field.name()),
            )?
            .cast_into::<PyUntypedArray>()
            .map_err(PyErr::from)?;
        array = &recast;
    }
    let Some(held) = borrow_as(array, field.dtype()) else {
        let got = array.getattr("dtype")?;
        return Err(PyErr::from_value(convert()?.call_method1(
            "wrong_dtype",
            (field.name(), field.dtype().numpy_str(), got),
        )?));
    };
    if !array.is_c_contiguous() {
        return Err(SchemaError::new_err(format!(
            "field {:?}: the array is not C-contiguous (no silent copy: pass \
             numpy.ascontiguousarray(x))",
            field.name()
        )));
    }
    Ok(Input {
        shape: array.shape().to_vec(),
        held: Held::Array(held),
    })
}

/// Whether draws return their indices as `int64` (the default; `uint64` by
/// `replaystore.set_index_dtype`): NumPy indexes with `int64`, as PyTorch and JAX do,
/// and NumPy arithmetic mixing `uint64` with `int64` gives `float64`. Exact: indices
/// stay below 2**63. Process-wide, as the dtype a program's code expects is.
pub static INT64_INDICES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether a draw's array `name` holds indices (returned as `int64` by default).
fn is_index_array(name: &str) -> bool {
    name == "indices" || name == "goal_indices"
}

/// The arrays of one draw, allocated when the engine asks for them (`Sink::arrays`) as
/// Rust vectors of each array's element type, filled in place by the engine with the GIL
/// released, then handed to NumPy without a copy ([`NumpySink::into_dict`]: each vector
/// becomes its array's base object). Bool arrays are `u8` until then: a `&mut [bool]`
/// must never be handed bytes it did not check.
#[derive(Default)]
pub struct NumpySink {
    arrays: Vec<DrawArray>,
    /// Each variable-length field's values as the draw copied them: name, kind, the
    /// storage (end to end, or `width` elements a row when padded), byte lengths.
    values: Vec<VarValues>,
    /// How they are returned.
    layout: VarLayout,
}

/// One array of a draw, its data starting [`ALIGN`] bytes aligned `lead` elements
/// into its storage.
struct DrawArray {
    name: String,
    dtype: DType,
    shape: IxDyn,
    owned: Owned,
    lead: usize,
    /// Elements of the array.
    len: usize,
}

/// Where a draw's arrays begin, in bytes: JAX takes CPU arrays so aligned without a
/// copy (`jax.dlpack.from_dlpack`; 16-byte aligned ones it copies), and whole cache
/// lines suit the copies into them.
const ALIGN: usize = 64;

impl DrawArray {
    /// `n` zeroed elements of `dtype` starting [`ALIGN`] bytes aligned: the storage has
    /// up to `ALIGN` bytes more in front, which the array leaves out.
    fn zeroed(name: String, dtype: DType, shape: IxDyn, n: usize) -> replaystore::Result<Self> {
        let size = dtype.size().max(1);
        let spare = ALIGN / size;
        let mut owned = Owned::zeroed(dtype, n + spare)?;
        // Elements are `size`-aligned and ALIGN is a multiple of every size, so a
        // whole number of elements reaches the next ALIGN boundary.
        let at = owned.bytes().as_ptr() as usize;
        let lead = ((ALIGN - at % ALIGN) % ALIGN) / size;
        Ok(DrawArray {
            name,
            dtype,
            shape,
            owned,
            lead,
            len: n,
        })
    }

    /// The bytes the draw fills.
    fn bytes(&mut self) -> &mut [u8] {
        let size = self.dtype.size().max(1);
        let from = self.lead * size;
        (self.owned.bytes())
            .get_mut(from..from + self.len * size)
            .unwrap_or_default()
    }
}

/// One variable-length field's values, in the storage the draw copied them into.
struct VarValues {
    name: String,
    kind: VarKind,
    /// The values' bytes, appended value by value as the draw copies them
    /// ([`GrowValues`]), each row padded to its full width by the next value or by
    /// [`VarValues::finish`].
    bytes: Vec<u8>,
    lengths: Vec<u64>,
    /// Elements a row (padded), or `None` (end to end).
    width: Option<usize>,
    /// One padding element's bytes (empty when the padding is zeros).
    pad: Vec<u8>,
    /// Values the draw has asked storage for.
    rows: usize,
}

/// How a draw returns the values of variable-length fields.
#[derive(Default, Clone)]
pub enum VarLayout {
    /// A list per field: `str`, `bytes`, or a 1-D array per row.
    #[default]
    List,
    /// The values end to end (`name`) and `name + "_offsets"`: `int64` element offsets,
    /// one more than the rows (Arrow's layout; PyTorch's jagged tensors take it).
    Flat,
    /// A 2-D array padded to the longest value of the draw with this value (`name`),
    /// and `name + "_lengths"`: `int64` elements of each row.
    Padded(f64),
}

impl NumpySink {
    /// A sink returning variable-length values as `layout` says.
    pub fn with_layout(layout: VarLayout) -> NumpySink {
        NumpySink {
            layout,
            ..NumpySink::default()
        }
    }
}

/// One array's storage, with its element type.
enum Owned {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Runs `$body` with `$v` bound to the vector, whatever its element type.
macro_rules! owned {
    ($o:expr, $v:ident => $body:expr) => {
        match $o {
            Owned::U8($v) => $body,
            Owned::I8($v) => $body,
            Owned::U16($v) => $body,
            Owned::I16($v) => $body,
            Owned::U32($v) => $body,
            Owned::I32($v) => $body,
            Owned::U64($v) => $body,
            Owned::I64($v) => $body,
            Owned::F32($v) => $body,
            Owned::F64($v) => $body,
        }
    };
}

impl Owned {
    /// `n` zeroed elements (calloc'd: pages are touched only as they are filled), or
    /// `OutOfMemory` where the process cannot have them (a memory cap): checked first
    /// for a large array, since a failed allocation would abort the interpreter.
    fn zeroed(dtype: DType, n: usize) -> replaystore::Result<Owned> {
        let bytes = n.saturating_mul(dtype.size());
        if bytes >= PROBE_BYTES && Vec::<u8>::new().try_reserve_exact(bytes).is_err() {
            return Err(replaystore::Error::OutOfMemory {
                what: format!("an array of {n} {} elements", dtype.name()),
                bytes: bytes as u64,
            });
        }
        Ok(Owned::zeroed_unchecked(dtype, n))
    }

    fn zeroed_unchecked(dtype: DType, n: usize) -> Owned {
        match dtype {
            DType::Bool | DType::U8 => Owned::U8(vec![0; n]),
            DType::I8 => Owned::I8(vec![0; n]),
            DType::U16 => Owned::U16(vec![0; n]),
            DType::I16 => Owned::I16(vec![0; n]),
            DType::U32 => Owned::U32(vec![0; n]),
            DType::I32 => Owned::I32(vec![0; n]),
            DType::U64 => Owned::U64(vec![0; n]),
            DType::I64 => Owned::I64(vec![0; n]),
            DType::F32 => Owned::F32(vec![0.0; n]),
            DType::F64 => Owned::F64(vec![0.0; n]),
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        owned!(self, v => bytemuck::cast_slice_mut(v.as_mut_slice()))
    }

    /// Elements held.
    fn len(&self) -> usize {
        owned!(self, v => v.len())
    }

    /// The vector as a NumPy array of `shape`, without a copy.
    fn into_array<'py>(self, py: Python<'py>, shape: IxDyn) -> PyResult<Bound<'py, PyAny>> {
        let len = self.len();
        self.into_array_from(py, 0, len, shape)
    }

    /// Elements `lead..lead + len` of the vector as a NumPy array of `shape`, without
    /// a copy (NumPy keeps the whole vector as the array's base).
    fn into_array_from<'py>(
        self,
        py: Python<'py>,
        lead: usize,
        len: usize,
        shape: IxDyn,
    ) -> PyResult<Bound<'py, PyAny>> {
        let bad = |e: ndarray::ShapeError| SchemaError::new_err(format!("a draw's array: {e}"));
        owned!(self, v => {
            let n = v.len();
            let part = ndarray::s![lead.min(n)..(lead + len).min(n)];
            let flat = ndarray::Array1::from_vec(v).slice_move(part);
            let a = flat.into_shape_with_order(shape).map_err(bad)?;
            Ok(PyArray::from_owned_array(py, a).into_any())
        })
    }
}

/// An engine array (an episode getter's entries) as a NumPy array of its dtype and
/// shape. A large one is handed over: NumPy owns the engine's words and views them as
/// the dtype (no copy, no second allocation, whose fresh pages cost 20x the copy: a
/// 28 MB episode took 26 ms that way, 1.25 ms now). A small one is copied into a typed
/// array, which avoids the three NumPy calls of the view (1.2 us against 0.5 us for
/// one entry).
pub fn numpy_of(py: Python<'_>, a: replaystore::FieldArray) -> PyResult<Bound<'_, PyAny>> {
    const HAND_OVER: usize = 64 << 10;
    let dtype = a.dtype();
    let shape = a.shape();
    let elements: usize = shape.iter().product();
    if a.bytes().len() < HAND_OVER {
        let mut owned = Owned::zeroed_unchecked(dtype, elements);
        if let Some(dst) = owned.bytes().get_mut(..a.bytes().len()) {
            dst.copy_from_slice(a.bytes());
        }
        let arr = owned.into_array(py, IxDyn(&shape))?;
        return match dtype {
            DType::Bool => arr.call_method1("view", (numpy::dtype::<bool>(py),)),
            _ => Ok(arr),
        };
    }
    let words = numpy::PyArray1::from_vec(py, a.into_words());
    let as_dtype = match dtype {
        DType::Bool => numpy::dtype::<bool>(py),
        _ => numpy::PyArrayDescr::new(py, dtype.numpy_str())?,
    };
    let flat = words.call_method1("view", (as_dtype,))?;
    let flat = flat.get_item(pyo3::types::PySlice::new(py, 0, elements as isize, 1))?;
    flat.call_method1("reshape", (pyo3::types::PyTuple::new(py, shape)?,))
}

/// `array`'s shape as NumPy gets it. IxDyn keeps up to four dimensions inline, and the
/// dimensions are gathered on the stack: no allocation per array and draw (a shape of
/// more dimensions than the buffer below takes one).
fn shape_of(array: &Array<'_>) -> IxDyn {
    let mut dims = [0usize; 8];
    let mut n = 0;
    for d in shape_dims(array) {
        if let Some(slot) = dims.get_mut(n) {
            *slot = d;
        }
        n += 1;
    }
    match dims.get(..n) {
        Some(d) => IxDyn(d),
        None => IxDyn(&array.shape()),
    }
}

impl Sink for NumpySink {
    fn arrays(&mut self, layout: &Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
        self.arrays = (layout.arrays().iter())
            .map(|a| {
                let n = a.rows.saturating_mul(a.row_elements());
                let mut name = String::with_capacity(a.prefix.len() + a.name.len());
                name.push_str(a.prefix);
                name.push_str(a.name);
                DrawArray::zeroed(name, a.dtype, shape_of(a), n)
            })
            .collect::<replaystore::Result<_>>()?;
        self.values.clear();
        Ok(self.arrays.iter_mut().map(DrawArray::bytes).collect())
    }

    fn values(&mut self, field: &VarField, lengths: &[u64]) -> replaystore::Result<ValuesOut<'_>> {
        self.push_values(field, lengths)?;
        let v = self.values.last_mut().ok_or(replaystore::Error::Empty)?;
        Ok(v.out())
    }

    fn all_values(
        &mut self,
        fields: &[&VarField],
        lengths: &[Vec<u64>],
    ) -> replaystore::Result<Option<Vec<ValuesOut<'_>>>> {
        for (field, l) in fields.iter().zip(lengths) {
            self.push_values(field, l)?;
        }
        Ok(Some(self.values.iter_mut().map(VarValues::out).collect()))
    }
}

impl VarValues {
    /// Where a draw copies these values: appended as it goes, end to end or one padded
    /// row each, so no byte is written twice.
    fn out(&mut self) -> ValuesOut<'_> {
        ValuesOut::Grown(self)
    }

    /// Bytes from one padded row's start to the next's.
    fn row_bytes(&self) -> Option<usize> {
        let size = self.kind.dtype().size().max(1);
        self.width.map(|w| w * size)
    }

    /// Ends the padding of every row the draw left short (the last one's, and rows of
    /// a draw that asked for fewer values than it said).
    fn finish(&mut self) {
        if let Some(row) = self.row_bytes() {
            self.pad_to(self.lengths.len() * row);
        }
    }

    /// Grows to `n` bytes, the new ones padding.
    fn pad_to(&mut self, n: usize) {
        let start = self.bytes.len();
        if n <= start {
            return;
        }
        if self.pad.is_empty() {
            self.bytes.resize(n, 0);
            return;
        }
        // Padding elements are whole (rows and values are whole elements), so the
        // pattern starts over at each element.
        let pattern = &self.pad;
        self.bytes
            .extend((start..n).map(|i| pattern.get(i % pattern.len()).copied().unwrap_or(0)));
    }

    /// The values as a NumPy array of their dtype and `shape`: the bytes handed over
    /// and viewed as the dtype, or copied into a typed array where the allocator gave
    /// storage not aligned to the element (NumPy would then copy on every use).
    fn into_array<'py>(
        bytes: Vec<u8>,
        dtype: DType,
        py: Python<'py>,
        shape: IxDyn,
    ) -> PyResult<Bound<'py, PyAny>> {
        let size = dtype.size().max(1);
        if size == 1 {
            return Owned::U8(bytes).into_array(py, shape);
        }
        if !(bytes.as_ptr() as usize).is_multiple_of(size) {
            let mut owned = Owned::zeroed_unchecked(dtype, bytes.len() / size);
            owned
                .bytes()
                .copy_from_slice(bytes.get(..bytes.len() / size * size).unwrap_or(&[]));
            return owned.into_array(py, shape);
        }
        let flat = numpy::PyArray1::from_vec(py, bytes);
        let typed =
            flat.call_method1("view", (numpy::PyArrayDescr::new(py, dtype.numpy_str())?,))?;
        typed.call_method1("reshape", (pyo3::types::PyTuple::new(py, shape.slice())?,))
    }
}

/// Names and counts, not the megabytes of values.
impl std::fmt::Debug for VarValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VarValues")
            .field("name", &self.name)
            .field("rows", &self.rows)
            .field("width", &self.width)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl GrowValues for VarValues {
    fn next_value(&mut self, _len: usize) -> &mut Vec<u8> {
        // The row before ends in padding, then this row's value begins.
        if let Some(row) = self.row_bytes() {
            self.pad_to(self.rows * row);
        }
        self.rows += 1;
        &mut self.bytes
    }
}

/// Room for `bytes` bytes of `field`'s values, none yet, or `OutOfMemory` where the
/// process cannot have them (a failed allocation would abort the interpreter).
fn reserved(field: &VarField, bytes: usize) -> replaystore::Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(bytes)
        .map_err(|_| replaystore::Error::OutOfMemory {
            what: format!("the values of field {:?}", field.name()),
            bytes: bytes as u64,
        })?;
    Ok(v)
}

impl NumpySink {
    /// Storage for one field's values of `lengths` bytes each, in this sink's layout
    /// (reserved whole; each byte is then written once, by the draw or as padding).
    fn push_values(&mut self, field: &VarField, lengths: &[u64]) -> replaystore::Result<()> {
        let dtype = field.kind().dtype();
        let size = dtype.size() as u64;
        let (bytes, width, pad) = match self.layout {
            VarLayout::Padded(pad) => {
                let width = lengths.iter().map(|&n| n / size).max().unwrap_or(0) as usize;
                let bytes = reserved(field, lengths.len() * width * size as usize)?;
                let word = dtype.encode_f64(pad);
                let pattern = match pad != 0.0 {
                    true => word.get(..size as usize).unwrap_or(&[]).to_vec(),
                    false => Vec::new(),
                };
                (bytes, Some(width), pattern)
            }
            _ => {
                let n = lengths.iter().sum::<u64>() as usize;
                (reserved(field, n)?, None, Vec::new())
            }
        };
        self.values.push(VarValues {
            name: field.name().to_owned(),
            kind: field.kind(),
            bytes,
            lengths: lengths.to_vec(),
            width,
            pad,
            rows: 0,
        });
        Ok(())
    }
}

impl NumpySink {
    /// The arrays as the dict every draw returns, in the draw's order.
    pub fn into_dict(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let d = PyDict::new(py);
        let signed = INT64_INDICES.load(std::sync::atomic::Ordering::Relaxed);
        // Values of several positions a unit are shaped `[units, positions, ...]` as the
        // fixed arrays are: the units are the rows of `indices` (a transition or
        // sequence draw), a sequence's positions the second dimension of `mask`.
        let dim = |name: &str, k: usize| {
            (self.arrays.iter())
                .find(|a| a.name == name)
                .and_then(|a| a.shape.slice().get(k).copied())
        };
        let (units, positions) = match self.values.is_empty() {
            true => (None, None),
            false => (dim("indices", 0), dim("mask", 1)),
        };
        for a in self.arrays {
            let DrawArray {
                name,
                dtype,
                shape,
                owned,
                lead,
                len,
            } = a;
            let (owned, lead) = match owned {
                // Indices stay below 2^63 (lane 127's base is 127 << 56), so the
                // conversion is exact; 256 of them cost nothing next to the draw.
                Owned::U64(v) if signed && is_index_array(&name) => {
                    let v = v.get(lead..lead + len).unwrap_or_default().iter();
                    let v = v.map(|&i| i64::try_from(i).unwrap_or(i64::MAX));
                    (Owned::I64(v.collect()), 0)
                }
                other => (other, lead),
            };
            let a = owned.into_array_from(py, lead, len, shape)?;
            let a = match dtype {
                DType::Bool => a.call_method1("view", (numpy::dtype::<bool>(py),))?,
                _ => a,
            };
            d.set_item(name, a)?;
        }
        for mut v in self.values {
            v.finish();
            // Several values a unit (a sequence's positions, a transition's stacked
            // frames): one lead dimension, as the fixed fields have.
            let rows = v.lengths.len();
            let lead = positions.or_else(|| {
                let units = units.filter(|&u| u > 0 && rows > u && rows % u == 0)?;
                Some(rows / units)
            });
            let shape = match (units, lead) {
                (Some(units), Some(lead)) if units * lead == rows => Some((units, lead)),
                _ => None,
            };
            put_values(py, &d, v, &self.layout, shape)?;
        }
        Ok(d)
    }
}

/// One variable-length field's values into the draw's dict, as `layout` says: the
/// storage the draw filled becomes the array (end to end, or padded rows) without a
/// copy; a list copies each value into its object.
fn put_values(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    v: VarValues,
    layout: &VarLayout,
    units: Option<(usize, usize)>,
) -> PyResult<()> {
    use pyo3::types::{PyBytes, PyList, PyString};
    let VarValues {
        name,
        kind,
        bytes,
        lengths,
        width,
        ..
    } = v;
    let dtype = kind.dtype();
    let size = dtype.size() as u64;
    // A stored length that is not whole elements passed every checksum (crafted, or
    // damaged before its row was sealed): damage, not a schema the caller got wrong.
    if let Some((row, &n)) = lengths.iter().enumerate().find(|(_, n)| **n % size != 0) {
        return Err(crate::errors::CorruptError::new_err(format!(
            "field {name:?}: the value of row {row} of the draw is {n} bytes, not whole \
             {size}-byte {} elements",
            dtype.name()
        )));
    }
    let elements: Vec<i64> = lengths.iter().map(|&n| (n / size) as i64).collect();
    match (layout, width) {
        (VarLayout::Padded(_), Some(w)) => {
            let lens = numpy::PyArray1::from_vec(py, elements);
            match units {
                Some((u, p)) => {
                    let a = VarValues::into_array(bytes, dtype, py, IxDyn(&[u, p, w]))?;
                    d.set_item(&name, a)?;
                    d.set_item(format!("{name}_lengths"), lens.reshape([u, p])?)?;
                }
                None => {
                    let a = VarValues::into_array(bytes, dtype, py, IxDyn(&[lengths.len(), w]))?;
                    d.set_item(&name, a)?;
                    d.set_item(format!("{name}_lengths"), lens)?;
                }
            }
        }
        (VarLayout::Flat, _) => {
            let n = elements.iter().sum::<i64>() as usize;
            let mut offsets = Vec::with_capacity(elements.len() + 1);
            offsets.push(0i64);
            let mut at = 0;
            for e in &elements {
                at += e;
                offsets.push(at);
            }
            d.set_item(&name, VarValues::into_array(bytes, dtype, py, IxDyn(&[n]))?)?;
            d.set_item(
                format!("{name}_offsets"),
                numpy::PyArray1::from_vec(py, offsets),
            )?;
        }
        _ => {
            let list = PyList::empty(py);
            let mut at = 0usize;
            for &n in &lengths {
                let value = bytes.get(at..at + n as usize).unwrap_or(&[]);
                at += n as usize;
                match kind {
                    VarKind::Str => {
                        let text = std::str::from_utf8(value).map_err(|e| {
                            crate::errors::CorruptError::new_err(format!(
                                "field {name:?}: a stored value is not UTF-8 ({e})"
                            ))
                        })?;
                        list.append(PyString::new(py, text))?;
                    }
                    VarKind::Bytes => list.append(PyBytes::new(py, value))?,
                    VarKind::Ragged(_) => {
                        let k = n as usize / size as usize;
                        let mut one = Owned::zeroed(dtype, k).map_err(crate::errors::to_py)?;
                        one.bytes().copy_from_slice(value);
                        list.append(one.into_array(py, IxDyn(&[k]))?)?;
                    }
                }
            }
            match units {
                // A list per unit, of its positions' values.
                Some((u, p)) => {
                    let nested = PyList::empty(py);
                    for k in 0..u {
                        nested.append(list.get_slice(k * p, (k + 1) * p))?;
                    }
                    d.set_item(&name, nested)?;
                }
                None => d.set_item(&name, list)?,
            }
        }
    }
    Ok(())
}

/// A caller's array borrowed for writing, as its element type (bool arrays as their
/// `uint8` view: the engine writes bytes it has not checked are 0 or 1).
enum Writable<'py> {
    U8(numpy::PyReadwriteArrayDyn<'py, u8>),
    I8(numpy::PyReadwriteArrayDyn<'py, i8>),
    U16(numpy::PyReadwriteArrayDyn<'py, u16>),
    I16(numpy::PyReadwriteArrayDyn<'py, i16>),
    U32(numpy::PyReadwriteArrayDyn<'py, u32>),
    I32(numpy::PyReadwriteArrayDyn<'py, i32>),
    U64(numpy::PyReadwriteArrayDyn<'py, u64>),
    I64(numpy::PyReadwriteArrayDyn<'py, i64>),
    F32(numpy::PyReadwriteArrayDyn<'py, f32>),
    F64(numpy::PyReadwriteArrayDyn<'py, f64>),
}

impl Writable<'_> {
    fn bytes(&mut self) -> PyResult<&mut [u8]> {
        macro_rules! raw {
            ($a:expr) => {
                bytemuck::cast_slice_mut($a.as_slice_mut()?)
            };
        }
        Ok(match self {
            Writable::U8(a) => raw!(a),
            Writable::I8(a) => raw!(a),
            Writable::U16(a) => raw!(a),
            Writable::I16(a) => raw!(a),
            Writable::U32(a) => raw!(a),
            Writable::I32(a) => raw!(a),
            Writable::U64(a) => raw!(a),
            Writable::I64(a) => raw!(a),
            Writable::F32(a) => raw!(a),
            Writable::F64(a) => raw!(a),
        })
    }
}

/// The arrays of `sample(..., out=...)`: a dict the caller keeps from one draw to the
/// next (typically the dict an earlier draw returned), borrowed for writing while the
/// GIL is held, so a training loop draws every batch into the same memory and
/// allocates nothing. [`OutArrays::sink`] hands the engine their bytes.
pub struct OutArrays<'py> {
    given: Vec<Given<'py>>,
}

/// One array of `out`, borrowed.
struct Given<'py> {
    name: String,
    /// The caller's object, returned as it was given.
    object: Bound<'py, PyAny>,
    dtype: DType,
    shape: Vec<usize>,
    borrowed: Writable<'py>,
}

impl<'py> OutArrays<'py> {
    /// Borrows every array of `out` for writing: each must be a C-contiguous, writable
    /// NumPy array of one of the engine's dtypes, and no two may share memory (a
    /// `SchemaError` says which is not). Keys the draw does not fill are left alone.
    pub fn borrow(out: &Bound<'py, PyDict>) -> PyResult<OutArrays<'py>> {
        let mut given = Vec::with_capacity(out.len());
        for (key, object) in out.iter() {
            let name: String = key.extract().map_err(|_| {
                SchemaError::new_err(format!("out: keys are array names, got {key:?}"))
            })?;
            let array = object.cast::<PyUntypedArray>().map_err(|_| {
                SchemaError::new_err(format!(
                    "out[{name:?}]: expected a numpy array, got {}",
                    object
                        .get_type()
                        .name()
                        .map_or_else(|_| "?".into(), |n| n.to_string())
                ))
            })?;
            let dtype = engine_dtype(array)
                .map_err(|e| SchemaError::new_err(format!("out[{name:?}]: {e}")))?;
            if !array.is_c_contiguous() {
                return Err(SchemaError::new_err(format!(
                    "out[{name:?}]: the array is not C-contiguous (a draw writes rows \
                     back to back)"
                )));
            }
            let shape = array.shape().to_vec();
            let borrowed = writable(array, dtype).map_err(|e| {
                SchemaError::new_err(format!(
                    "out[{name:?}]: cannot write into it ({e}): it must be writable and \
                     share no memory with another array of out"
                ))
            })?;
            given.push(Given {
                name,
                object: object.clone(),
                dtype,
                shape,
                borrowed,
            });
        }
        Ok(OutArrays { given })
    }

    /// The sink a draw fills: the arrays' bytes, free of the GIL.
    pub fn sink(&mut self) -> PyResult<OutSink<'_>> {
        let mut arrays = Vec::with_capacity(self.given.len());
        for g in &mut self.given {
            arrays.push((
                g.name.as_str(),
                g.dtype,
                g.shape.as_slice(),
                g.borrowed.bytes()?,
            ));
        }
        Ok(OutSink {
            arrays,
            filled: Vec::new(),
        })
    }

    /// The arrays a draw filled, as the dict it returns: the caller's own objects, in
    /// the draw's order (`filled`, from [`OutSink::into_filled`]).
    pub fn into_dict(self, py: Python<'py>, filled: &[usize]) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for &i in filled {
            if let Some(g) = self.given.get(i) {
                d.set_item(&g.name, &g.object)?;
            }
        }
        Ok(d)
    }
}

/// The engine dtype of `array`, read from its descriptor's fields: `dtype.str` formats
/// a string on every call (a third of an `out=` draw's overhead on W1). A dtype the
/// engine lacks is refused as the schema's parser words it.
fn engine_dtype(array: &Bound<'_, PyUntypedArray>) -> Result<DType, String> {
    let d = array.dtype();
    let (kind, size, order) = (d.kind(), d.itemsize(), d.byteorder());
    // '=' is native order; '|' has none (one byte); '>' is big-endian.
    let little =
        order == b'<' || order == b'|' || (order == b'=' && cfg!(target_endian = "little"));
    let found = match (kind, size) {
        (b'b', 1) => Some(DType::Bool),
        (b'u', 1) => Some(DType::U8),
        (b'i', 1) => Some(DType::I8),
        (b'u', 2) => Some(DType::U16),
        (b'i', 2) => Some(DType::I16),
        (b'u', 4) => Some(DType::U32),
        (b'i', 4) => Some(DType::I32),
        (b'u', 8) => Some(DType::U64),
        (b'i', 8) => Some(DType::I64),
        (b'f', 4) => Some(DType::F32),
        (b'f', 8) => Some(DType::F64),
        _ => None,
    };
    match found {
        Some(t) if little => Ok(t),
        _ => {
            let code = (d.getattr("str").and_then(|c| c.extract::<String>()))
                .map_err(|e| e.to_string())?;
            Err(match DType::from_numpy_str(&code) {
                Err(e) => e,
                Ok(_) => format!("dtype {code:?} is not little-endian"),
            })
        }
    }
}

/// `array` borrowed for writing as `dtype`'s element type (a bool array as its
/// `uint8` view, which shares its memory).
fn writable<'py>(array: &Bound<'py, PyUntypedArray>, dtype: DType) -> PyResult<Writable<'py>> {
    macro_rules! rw {
        ($a:expr, $t:ty, $v:ident) => {
            Writable::$v($a.cast::<PyArrayDyn<$t>>()?.try_readwrite()?)
        };
    }
    Ok(match dtype {
        DType::Bool => {
            let view = array.call_method1("view", ("u1",))?;
            rw!(view, u8, U8)
        }
        DType::U8 => rw!(array, u8, U8),
        DType::I8 => rw!(array, i8, I8),
        DType::U16 => rw!(array, u16, U16),
        DType::I16 => rw!(array, i16, I16),
        DType::U32 => rw!(array, u32, U32),
        DType::I32 => rw!(array, i32, I32),
        DType::U64 => rw!(array, u64, U64),
        DType::I64 => rw!(array, i64, I64),
        DType::F32 => rw!(array, f32, F32),
        DType::F64 => rw!(array, f64, F64),
    })
}

/// The bytes of a caller's arrays, handed to a draw by name: each array of the draw's
/// layout must be there with its dtype and shape, or the draw fails with
/// `OutMismatch` naming it.
pub struct OutSink<'a> {
    arrays: Vec<(&'a str, DType, &'a [usize], &'a mut [u8])>,
    filled: Vec<usize>,
}

impl OutSink<'_> {
    /// Which arrays of `out` the draw filled, in the draw's order.
    pub fn into_filled(self) -> Vec<usize> {
        self.filled
    }
}

impl Sink for OutSink<'_> {
    fn arrays(&mut self, layout: &Layout<'_>) -> replaystore::Result<Vec<&mut [u8]>> {
        self.filled.clear();
        for a in layout.arrays() {
            let found = self.arrays.iter().enumerate().find(|(_, g)| a.is(g.0));
            let Some((i, (out_name, dtype, shape, _))) = found else {
                return Err(replaystore::Error::OutMismatch {
                    array: a.full_name(),
                    expected: format!("{} {:?}", a.dtype.numpy_str(), a.shape()),
                    got: "no such array".into(),
                });
            };
            // Indices may come back into int64 arrays (the default index dtype): the
            // engine's u64 values stay below 2^63, so their bytes are the same.
            let index = is_index_array(out_name) && a.dtype == DType::U64;
            let same_dtype = *dtype == a.dtype || (index && *dtype == DType::I64);
            if !same_dtype || !shape.iter().copied().eq(shape_dims(a)) {
                return Err(replaystore::Error::OutMismatch {
                    array: a.full_name(),
                    expected: format!("{} {:?}", a.dtype.numpy_str(), a.shape()),
                    got: format!("{} {:?}", dtype.numpy_str(), shape),
                });
            }
            self.filled.push(i);
        }
        // Each array of `out` at most once: the layout's names are distinct.
        let mut slots: Vec<Option<&mut [u8]>> =
            self.arrays.iter_mut().map(|g| Some(&mut *g.3)).collect();
        Ok(self
            .filled
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .collect())
    }
}

/// `array`'s dimensions, without building a vector.
fn shape_dims<'a>(array: &'a Array<'a>) -> impl Iterator<Item = usize> + 'a {
    std::iter::once(array.rows)
        .chain(array.lead)
        .chain(array.item.iter().copied())
}
