//! NumPy arrays in and out, without per-element Python work or hidden copies: an input
//! array is read in place when it is C-contiguous and of the field's dtype (anything
//! else raises, so no silent copy or cast), and outputs are allocated once, with the
//! field's dtype and shape, and filled by the engine.

use numpy::{
    PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};
use replaystore::{DType, Field, Schema};

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
    None
}

/// Reads `value` for `field`: an ndarray must already have the field's dtype and be
/// C-contiguous (it is then read in place); Python scalars and lists are converted to
/// the field's dtype when no value changes (`replaystore._convert`).
pub fn input<'py>(field: &Field, value: &Bound<'py, PyAny>) -> PyResult<Input<'py>> {
    if let Some(bytes) = scalar(field, value) {
        return Ok(Input {
            held: Held::Scalar(bytes, field.dtype().size()),
            shape: Vec::new(),
        });
    }
    let converted;
    let array = match value.cast::<PyUntypedArray>() {
        Ok(a) => a,
        Err(_) => {
            // Checked: NumPy's own conversion would store "yes" or 2 as True and 1e300
            // as float32 infinity.
            converted = value
                .py()
                .import("replaystore._convert")?
                .call_method1(
                    "field_array",
                    (value, field.dtype().numpy_str(), field.name()),
                )?
                .cast_into::<PyUntypedArray>()
                .map_err(PyErr::from)?;
            &converted
        }
    };
    let Some(held) = borrow_as(array, field.dtype()) else {
        let got = array
            .getattr("dtype")?
            .getattr("str")?
            .extract::<String>()?;
        return Err(SchemaError::new_err(format!(
            "field {:?}: wrong dtype: expected {} ({}), got {got} (no silent cast: \
             convert with .astype({:?}))",
            field.name(),
            field.dtype().numpy_str(),
            field.dtype(),
            field.dtype().numpy_str()
        )));
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

/// An output array borrowed for writing, with its element type. Bool fields are written
/// as `u8` (the engine stores 0 or 1) and viewed as bool once written: a `&mut [bool]`
/// must never be handed bytes it did not check.
pub enum Writing<'py> {
    U8(PyReadwriteArrayDyn<'py, u8>),
    I8(PyReadwriteArrayDyn<'py, i8>),
    U16(PyReadwriteArrayDyn<'py, u16>),
    I16(PyReadwriteArrayDyn<'py, i16>),
    U32(PyReadwriteArrayDyn<'py, u32>),
    I32(PyReadwriteArrayDyn<'py, i32>),
    U64(PyReadwriteArrayDyn<'py, u64>),
    I64(PyReadwriteArrayDyn<'py, i64>),
    F32(PyReadwriteArrayDyn<'py, f32>),
    F64(PyReadwriteArrayDyn<'py, f64>),
}

impl Writing<'_> {
    /// The array's bytes (C-contiguous: it was made so).
    pub fn bytes(&mut self) -> PyResult<&mut [u8]> {
        macro_rules! raw {
            ($a:expr) => {
                bytemuck::cast_slice_mut($a.as_slice_mut()?)
            };
        }
        Ok(match self {
            Writing::U8(a) => raw!(a),
            Writing::I8(a) => raw!(a),
            Writing::U16(a) => raw!(a),
            Writing::I16(a) => raw!(a),
            Writing::U32(a) => raw!(a),
            Writing::I32(a) => raw!(a),
            Writing::U64(a) => raw!(a),
            Writing::I64(a) => raw!(a),
            Writing::F32(a) => raw!(a),
            Writing::F64(a) => raw!(a),
        })
    }
}

/// A zeroed (calloc'd: pages are touched only when the engine fills them) array for
/// `rows` items of `field`, made with its element type and shape `[rows, *shape]` by
/// NumPy's C API: no Python-level `view` or `reshape` per field and call. Returns the
/// array and its write borrow; a bool field's array is `u8` until [`finished`].
pub fn typed_output<'py>(
    py: Python<'py>,
    field: &Field,
    rows: usize,
) -> PyResult<(Bound<'py, PyAny>, Writing<'py>)> {
    let mut shape = vec![rows];
    shape.extend_from_slice(field.shape());
    macro_rules! make {
        ($t:ty, $v:ident) => {{
            let a = PyArrayDyn::<$t>::zeros(py, shape, false);
            let w = Writing::$v(a.try_readwrite()?);
            (a.into_any(), w)
        }};
    }
    Ok(match field.dtype() {
        DType::Bool | DType::U8 => make!(u8, U8),
        DType::I8 => make!(i8, I8),
        DType::U16 => make!(u16, U16),
        DType::I16 => make!(i16, I16),
        DType::U32 => make!(u32, U32),
        DType::I32 => make!(i32, I32),
        DType::U64 => make!(u64, U64),
        DType::I64 => make!(i64, I64),
        DType::F32 => make!(f32, F32),
        DType::F64 => make!(f64, F64),
    })
}

/// An array from [`typed_output`], once written, as the caller gets it.
pub fn finished<'py>(array: Bound<'py, PyAny>, field: &Field) -> PyResult<Bound<'py, PyAny>> {
    match field.dtype() {
        DType::Bool => array.call_method1("view", (numpy::dtype::<bool>(array.py()),)),
        _ => Ok(array),
    }
}

/// The dict a sample returns: each field, then `indices` (and `weights`).
pub fn batch_dict<'py>(
    py: Python<'py>,
    schema: &Schema,
    outs: Vec<Bound<'py, PyAny>>,
    indices: Vec<u64>,
    weights: Option<Vec<f32>>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (f, out) in schema.fields().iter().zip(outs) {
        d.set_item(f.name(), out)?;
    }
    d.set_item("indices", PyArray1::from_vec(py, indices))?;
    if let Some(w) = weights {
        d.set_item("weights", PyArray1::from_vec(py, w))?;
    }
    Ok(d)
}
