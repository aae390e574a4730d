//! NumPy arrays in and out, without per-element Python work or hidden copies: an input
//! array is read in place when it is C-contiguous and of the field's dtype (anything
//! else raises, so no silent copy or cast), and outputs are allocated once and filled by
//! the engine, then viewed with the field's dtype and shape.

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use replaystore::{DType, Field, Schema};

use crate::errors::SchemaError;

/// The bytes of one field's value, read in place, with the value's shape.
pub struct Input<'py> {
    /// The array's bytes, borrowed from NumPy for as long as this lives.
    pub bytes: PyReadonlyArray1<'py, u8>,
    /// Its shape.
    pub shape: Vec<usize>,
}

/// Reads `value` for `field`: an ndarray must already have the field's dtype and be
/// C-contiguous; Python scalars and lists are converted to the field's dtype.
pub fn input<'py>(field: &Field, value: &Bound<'py, PyAny>) -> PyResult<Input<'py>> {
    let py = value.py();
    let numpy = py.import("numpy")?;
    let array = match value.cast::<PyUntypedArray>() {
        Ok(a) => {
            let got = a.getattr("dtype")?.getattr("str")?.extract::<String>()?;
            if DType::from_numpy_str(&got).ok() != Some(field.dtype()) {
                return Err(SchemaError::new_err(format!(
                    "field {:?}: wrong dtype: expected {} ({}), got {got} (no silent cast: \
                     convert with .astype({:?}))",
                    field.name(),
                    field.dtype().numpy_str(),
                    field.dtype(),
                    field.dtype().numpy_str()
                )));
            }
            if !a.is_c_contiguous() {
                return Err(SchemaError::new_err(format!(
                    "field {:?}: the array is not C-contiguous (no silent copy: pass \
                     numpy.ascontiguousarray(x))",
                    field.name()
                )));
            }
            a.clone()
        }
        Err(_) => numpy
            .call_method1("asarray", (value, field.dtype().numpy_str()))?
            .cast_into::<PyUntypedArray>()
            .map_err(PyErr::from)?,
    };
    let shape = array.shape().to_vec();
    // A view of the same memory as flat bytes: reshape(-1) of a C-contiguous array and
    // view(uint8) of a 1-d one never copy.
    let flat = array
        .call_method1("reshape", (-1,))?
        .call_method1("view", (numpy.getattr("uint8")?,))?;
    let bytes = flat
        .cast_into::<PyArray1<u8>>()
        .map_err(PyErr::from)?
        .readonly();
    Ok(Input { bytes, shape })
}

/// A zeroed byte array for `rows` items of `field` (calloc'd: pages are touched only
/// when the engine fills them).
pub fn output<'py>(py: Python<'py>, field: &Field, rows: usize) -> Bound<'py, PyArray1<u8>> {
    PyArray1::zeros(py, rows * field.bytes(), false)
}

/// `bytes` (filled with `rows` items of `field`) seen with the field's dtype and shape
/// `[rows, *shape]`: a view, no copy.
pub fn typed<'py>(
    bytes: &Bound<'py, PyArray1<u8>>,
    field: &Field,
    rows: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let mut shape = vec![rows];
    shape.extend_from_slice(field.shape());
    bytes
        .call_method1("view", (field.dtype().numpy_str(),))?
        .call_method1("reshape", (PyTuple::new(bytes.py(), shape)?,))
}

/// The dict a sample returns: each field, then `indices` (and `weights`).
pub fn batch_dict<'py>(
    py: Python<'py>,
    schema: &Schema,
    outs: &[Bound<'py, PyArray1<u8>>],
    rows: usize,
    indices: Vec<u64>,
    weights: Option<Vec<f32>>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (f, out) in schema.fields().iter().zip(outs) {
        d.set_item(f.name(), typed(out, f, rows)?)?;
    }
    d.set_item("indices", PyArray1::from_vec(py, indices))?;
    if let Some(w) = weights {
        d.set_item("weights", PyArray1::from_vec(py, w))?;
    }
    Ok(d)
}
