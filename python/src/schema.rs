//! `replaystore.Schema`: field names, NumPy dtypes and per-item shapes.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use replaystore::{DType, Schema, VarKind};

use crate::errors::{SchemaError, to_py};

/// Keys a sample's dict uses besides the fields, so no field may take them.
pub const RESERVED: [&str; 3] = ["indices", "weights", "offsets"];

/// The fields every item has: `Schema({"obs": ("float32", (17,)), "reward": "float32"})`,
/// or a list of `(name, dtype, shape)`. A dtype is anything `numpy.dtype` takes.
/// Variable-length fields: `"str"` (UTF-8 text), `"bytes"`, or a 1-D array whose length
/// varies per item, `("int32", (None,))`; each may add its maximum length in elements
/// (bytes for str and bytes) as a third item: `("str", (None,), 8192)`.
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

/// A field as declared: fixed (dtype and shape) or variable-length (kind, maximum).
enum Spec {
    Fixed(DType, Vec<usize>),
    Var(VarKind, Option<usize>),
}

/// The variable-length kind `like` names with `shape` (None when it is no such
/// declaration): `"str"` and `"bytes"` (shape `()` or `(None,)`), or any dtype with
/// shape `(None,)`.
fn var_kind(
    numpy: &Bound<'_, PyModule>,
    name: &str,
    like: &Bound<'_, PyAny>,
    shape: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<VarKind>> {
    let ragged = match shape {
        None => false,
        Some(s) => s
            .extract::<Vec<Option<usize>>>()
            .is_ok_and(|d| d.as_slice() == [None]),
    };
    if let Ok(text) = like.extract::<String>() {
        match text.as_str() {
            "str" => return Ok(Some(VarKind::Str)),
            "bytes" => return Ok(Some(VarKind::Bytes)),
            _ => {}
        }
    }
    if ragged {
        return Ok(Some(VarKind::Ragged(dtype_of(numpy, name, like)?)));
    }
    Ok(None)
}

/// `(dtype, shape)`, `(dtype, shape, max_len)`, or a bare dtype (shape `()`).
fn spec_of(numpy: &Bound<'_, PyModule>, name: &str, spec: &Bound<'_, PyAny>) -> PyResult<Spec> {
    if let Ok(t) = spec.cast::<PyTuple>()
        && (t.len() == 2 || t.len() == 3)
    {
        let (like, shape) = (t.get_item(0)?, t.get_item(1)?);
        let max = match t.len() {
            3 => Some(t.get_item(2)?.extract::<usize>()?),
            _ => None,
        };
        if let Some(kind) = var_kind(numpy, name, &like, Some(&shape))? {
            return Ok(Spec::Var(kind, max));
        }
        if let Ok(shape) = shape.extract::<Vec<usize>>() {
            if max.is_some() {
                return Err(SchemaError::new_err(format!(
                    "field {name:?}: a maximum length is for variable-length fields \
                     (shape (None,), \"str\" or \"bytes\")"
                )));
            }
            return Ok(Spec::Fixed(dtype_of(numpy, name, &like)?, shape));
        }
    }
    if let Some(kind) = var_kind(numpy, name, spec, None)? {
        return Ok(Spec::Var(kind, None));
    }
    Ok(Spec::Fixed(dtype_of(numpy, name, spec)?, Vec::new()))
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
        let mut entries: Vec<(String, Spec)> = Vec::new();
        if let Ok(d) = fields.cast::<PyDict>() {
            for (k, v) in d.iter() {
                let name: String = k.extract()?;
                let spec = spec_of(&numpy, &name, &v)?;
                entries.push((name, spec));
            }
        } else {
            for item in fields.try_iter()? {
                let item = item?;
                let t = item.cast::<PyTuple>().map_err(|_| {
                    SchemaError::new_err("a schema is a dict, or a list of (name, dtype, shape)")
                })?;
                let name: String = t.get_item(0)?.extract()?;
                let spec = match t.len() {
                    2 => spec_of(&numpy, &name, &t.get_item(1)?)?,
                    3 | 4 => spec_of(&numpy, &name, &t.get_slice(1, t.len()).into_any())?,
                    n => {
                        return Err(SchemaError::new_err(format!(
                            "field {name:?}: expected (name, dtype, shape), got {n} items"
                        )));
                    }
                };
                entries.push((name, spec));
            }
        }
        let mut b = Schema::builder();
        for (name, spec) in &entries {
            if RESERVED.contains(&name.as_str()) {
                return Err(SchemaError::new_err(format!(
                    "field {name:?}: the name is reserved (a sample's dict holds `indices`, \
                     `weights` and `offsets` beside the fields)"
                )));
            }
            b = match spec {
                Spec::Fixed(dtype, shape) => b.field(name, *dtype, shape),
                Spec::Var(kind, max) => b.variable(name, *kind, *max),
            };
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

    /// The schema of a transition for Gymnasium spaces, or for an env (its spaces):
    /// `obs`, `action`, `reward`, `next_obs`, `terminated`, `truncated` (see
    /// `replaystore.spaces`).
    #[staticmethod]
    #[pyo3(signature = (observation_space, action_space=None))]
    fn from_spaces<'py>(
        observation_space: &Bound<'py, PyAny>,
        action_space: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        observation_space
            .py()
            .import("replaystore.spaces")?
            .call_method1("_from_spaces", (observation_space, action_space))
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
        let list = PyList::new(py, items)?;
        for f in self.inner.var_fields() {
            let none = PyTuple::new(py, [py.None()])?;
            let dtype = match f.kind() {
                VarKind::Str => "str".into_pyobject(py)?.into_any(),
                VarKind::Bytes => "bytes".into_pyobject(py)?.into_any(),
                VarKind::Ragged(d) => d.numpy_str().into_pyobject(py)?.into_any(),
            };
            let entry = match f.max_len() {
                Some(m) => PyTuple::new(
                    py,
                    [
                        f.name().into_pyobject(py)?.into_any(),
                        dtype,
                        none.into_any(),
                        m.into_pyobject(py)?.into_any(),
                    ],
                )?,
                None => PyTuple::new(
                    py,
                    [
                        f.name().into_pyobject(py)?.into_any(),
                        dtype,
                        none.into_any(),
                    ],
                )?,
            };
            list.append(entry)?;
        }
        Ok(list)
    }

    /// Field names in order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.inner
            .fields()
            .iter()
            .map(|f| f.name().to_string())
            .chain(self.inner.var_fields().iter().map(|f| f.name().to_string()))
            .collect()
    }

    fn __len__(&self) -> usize {
        self.inner.fields().len() + self.inner.var_fields().len()
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
            .chain(self.inner.var_fields().iter().map(|f| {
                let kind = match f.kind() {
                    VarKind::Str => "\"str\"".to_string(),
                    VarKind::Bytes => "\"bytes\"".to_string(),
                    VarKind::Ragged(d) => format!("{:?}", d.numpy_str()),
                };
                match f.max_len() {
                    Some(m) => format!("{:?}: ({kind}, (None,), {m})", f.name()),
                    None => format!("{:?}: ({kind}, (None,))", f.name()),
                }
            }))
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
