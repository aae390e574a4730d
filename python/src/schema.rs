//! `replaystore.Schema`: field names, NumPy dtypes and per-item shapes.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use replaystore::{DType, Schema};

use crate::errors::{SchemaError, to_py};

/// Keys a sample's dict uses besides the fields, so no field may take them.
pub const RESERVED: [&str; 3] = ["indices", "weights", "offsets"];

/// The fields every item has: `Schema({"obs": ("float32", (17,)), "reward": "float32"})`,
/// or a list of `(name, dtype, shape)`. A dtype is anything `numpy.dtype` takes.
#[pyclass(module = "replaystore", name = "Schema", frozen)]
pub struct PySchema {
    /// The engine's schema.
    pub inner: Schema,
}

/// A dtype-like (`"float32"`, `np.uint8`, `np.dtype("<f4")`) as the engine's dtype.
fn dtype_of(numpy: &Bound<'_, PyModule>, name: &str, like: &Bound<'_, PyAny>) -> PyResult<DType> {
    let s: String = numpy
        .call_method1("dtype", (like,))?
        .getattr("str")?
        .extract()?;
    DType::from_numpy_str(&s).map_err(|e| SchemaError::new_err(format!("field {name:?}: {e}")))
}

/// `(dtype, shape)` or a bare dtype (shape `()`).
fn spec_of(
    numpy: &Bound<'_, PyModule>,
    name: &str,
    spec: &Bound<'_, PyAny>,
) -> PyResult<(DType, Vec<usize>)> {
    if let Ok(t) = spec.cast::<PyTuple>()
        && t.len() == 2
        && let Ok(shape) = t.get_item(1)?.extract::<Vec<usize>>()
    {
        return Ok((dtype_of(numpy, name, &t.get_item(0)?)?, shape));
    }
    Ok((dtype_of(numpy, name, spec)?, Vec::new()))
}

impl PySchema {
    /// Builds a schema from what the constructor takes.
    pub fn from_py(fields: &Bound<'_, PyAny>) -> PyResult<PySchema> {
        if let Ok(s) = fields.cast::<PySchema>() {
            return Ok(PySchema {
                inner: s.get().inner.clone(),
            });
        }
        let numpy = fields.py().import("numpy")?;
        let mut entries: Vec<(String, DType, Vec<usize>)> = Vec::new();
        if let Ok(d) = fields.cast::<PyDict>() {
            for (k, v) in d.iter() {
                let name: String = k.extract()?;
                let (dtype, shape) = spec_of(&numpy, &name, &v)?;
                entries.push((name, dtype, shape));
            }
        } else {
            for item in fields.try_iter()? {
                let item = item?;
                let t = item.cast::<PyTuple>().map_err(|_| {
                    SchemaError::new_err("a schema is a dict, or a list of (name, dtype, shape)")
                })?;
                let name: String = t.get_item(0)?.extract()?;
                let (dtype, shape) = match t.len() {
                    2 => spec_of(&numpy, &name, &t.get_item(1)?)?,
                    3 => (
                        dtype_of(&numpy, &name, &t.get_item(1)?)?,
                        t.get_item(2)?.extract()?,
                    ),
                    n => {
                        return Err(SchemaError::new_err(format!(
                            "field {name:?}: expected (name, dtype, shape), got {n} items"
                        )));
                    }
                };
                entries.push((name, dtype, shape));
            }
        }
        let mut b = Schema::builder();
        for (name, dtype, shape) in &entries {
            if RESERVED.contains(&name.as_str()) {
                return Err(SchemaError::new_err(format!(
                    "field {name:?}: the name is reserved (a sample's dict holds `indices`, \
                     `weights` and `offsets` beside the fields)"
                )));
            }
            b = b.field(name, *dtype, shape);
        }
        Ok(PySchema {
            inner: b.build().map_err(to_py)?,
        })
    }
}

#[pymethods]
impl PySchema {
    #[new]
    fn new(fields: &Bound<'_, PyAny>) -> PyResult<PySchema> {
        PySchema::from_py(fields)
    }

    /// The schema of a transition for Gymnasium spaces: `obs`, `action`, `reward`,
    /// `next_obs`, `terminated`, `truncated` (see `replaystore.spaces`).
    #[staticmethod]
    fn from_spaces<'py>(
        observation_space: &Bound<'py, PyAny>,
        action_space: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        observation_space
            .py()
            .import("replaystore.spaces")?
            .call_method1("schema_from_spaces", (observation_space, action_space))
    }

    /// `[(name, dtype str, shape tuple), ...]` in order.
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = self
            .inner
            .fields()
            .iter()
            .map(|f| {
                Ok((
                    f.name(),
                    f.dtype().numpy_str(),
                    PyTuple::new(py, f.shape())?,
                ))
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Field names in order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.inner
            .fields()
            .iter()
            .map(|f| f.name().to_string())
            .collect()
    }

    fn __len__(&self) -> usize {
        self.inner.fields().len()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PySchema>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __repr__(&self) -> String {
        let parts: Vec<String> = self
            .inner
            .fields()
            .iter()
            .map(|f| {
                let shape: Vec<String> = f.shape().iter().map(usize::to_string).collect();
                let comma = if f.shape().len() == 1 { "," } else { "" };
                format!(
                    "{:?}: ({:?}, ({}{comma}))",
                    f.name(),
                    f.dtype().numpy_str(),
                    shape.join(", ")
                )
            })
            .collect();
        format!("Schema({{{}}})", parts.join(", "))
    }

    /// Pickles as its field list.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyList>,))> {
        let cls = slf.get_type().into_any();
        Ok((cls, (slf.get().fields(slf.py())?,)))
    }
}
