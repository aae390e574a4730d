//! What a draw asks for as Python holds it (`replaystore.Request`), and the one draw
//! every class runs it through. A Python `Request` owns its indices, field names and
//! HER's reward function, so it pickles: a Ray shard receives a request, not a method
//! name. It is checked where it is built: keywords that do not go together are refused
//! by name there, as the engine's builders refuse them at compile time.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use replaystore::{Request, Schema, Sink};

use crate::calls::{
    Count, Her, Whole, draw_values, expand_prefixes, groups, names, nest, rows, sequences,
    transitions, whole_units,
};

/// A draw: which units, how they are picked, how many, with the options of their unit.
/// Built by one of the class methods (`Request.rows`, `.at`, `.oldest`,
/// `.transitions`, `.transitions_at`, `.sequences`, `.episodes`, `.fragments`,
/// `.groups`) and drawn by any handle's `sample(request)`.
#[pyclass(module = "replaystore", name = "Request", frozen)]
pub(crate) struct PyRequest {
    spec: Spec,
}

/// A request's unit and options, owned.
#[derive(Debug)]
enum Spec {
    Rows {
        n: usize,
        beta: Option<f64>,
        replace: bool,
        remove: bool,
        by_group: Vec<String>,
    },
    Oldest {
        n: usize,
        remove: bool,
    },
    At {
        indices: Vec<u64>,
        drawn: bool,
        remove: bool,
        including_removed: bool,
    },
    Transitions {
        n: usize,
        obs: Vec<String>,
        beta: Option<f64>,
        shape: (u64, u64, f64),
        her: Option<Her>,
        at: Option<Vec<u64>>,
    },
    Sequences {
        n: usize,
        length: u64,
        obs: Vec<String>,
        burn_in: u64,
        beta: Option<f64>,
    },
    /// Whole episodes or fragments: `n` of them, or distinct ones `covering` a count.
    Whole {
        unit: Whole,
        n: Option<usize>,
        covering: Option<u64>,
        beta: Option<f64>,
        replace: bool,
        remove: bool,
    },
    Groups {
        n: usize,
        by: Vec<String>,
        unroll: u64,
        replace: bool,
        remove: bool,
    },
}

impl PyRequest {
    /// A request of `spec`, checked: a shape the engine cannot draw is refused here.
    fn checked(spec: Spec) -> PyResult<PyRequest> {
        let request = PyRequest { spec };
        request.with(None, |_| ())?;
        Ok(request)
    }

    /// Whole episodes or fragments, checked (`Request.episodes`, `Request.fragments`).
    fn whole(
        unit: Whole,
        n: Option<Count>,
        covering: Option<u64>,
        beta: Option<f64>,
        (replace, remove): (bool, bool),
    ) -> PyResult<PyRequest> {
        PyRequest::checked(Spec::Whole {
            unit,
            n: n.map(Count::get),
            covering,
            beta,
            replace,
            remove,
        })
    }

    /// Calls `f` with the engine's request, borrowing this one's indices and names; an
    /// observation prefix (`"obs"` of `obs/pos`, `obs/vel`) is expanded with `schema`.
    pub(crate) fn with<R>(
        &self,
        schema: Option<&Schema>,
        f: impl FnOnce(Request<'_>) -> R,
    ) -> PyResult<R> {
        Ok(match &self.spec {
            Spec::Rows {
                n,
                beta,
                replace,
                remove,
                by_group,
            } => {
                let by: Vec<&str> = by_group.iter().map(String::as_str).collect();
                f(rows(*n, *beta, (*replace, *remove), &by)?)
            }
            Spec::Oldest { n, remove } => f(match remove {
                true => Request::rows(*n).oldest().remove(),
                false => Request::rows(*n).oldest().into(),
            }),
            Spec::At {
                indices,
                drawn,
                remove,
                including_removed,
            } => {
                let at = Request::at(indices);
                f(match (drawn, remove, including_removed) {
                    (false, false, false) => at.into(),
                    (true, false, false) => at.drawn(),
                    (false, true, false) => at.remove(),
                    (false, false, true) => at.including_removed(),
                    _ => {
                        return Err(pyo3::exceptions::PyTypeError::new_err(
                            "Request.at takes one of drawn=, remove= and including_removed=",
                        ));
                    }
                })
            }
            Spec::Transitions {
                n,
                obs,
                beta,
                shape,
                her,
                at,
            } => {
                // Copied only to expand prefixes (`"obs"` of `obs/pos`, `obs/vel`).
                let expanded = schema.map(|s| expand_prefixes(s, obs.clone()));
                let obs = expanded.as_ref().unwrap_or(obs);
                let obs: Vec<&str> = obs.iter().map(String::as_str).collect();
                f(transitions(
                    *n,
                    &obs,
                    *beta,
                    *shape,
                    her.as_ref(),
                    at.as_deref(),
                )?)
            }
            Spec::Sequences {
                n,
                length,
                obs,
                burn_in,
                beta,
            } => {
                let obs: Vec<&str> = obs.iter().map(String::as_str).collect();
                f(sequences(*n, (*length, *burn_in), &obs, *beta))
            }
            Spec::Whole {
                unit,
                n,
                covering,
                beta,
                replace,
                remove,
            } => f(whole_units(
                *unit,
                *n,
                *covering,
                *beta,
                (*replace, *remove),
            )?),
            Spec::Groups {
                n,
                by,
                unroll,
                replace,
                remove,
            } => {
                let by: Vec<&str> = by.iter().map(String::as_str).collect();
                f(groups(*n, &by, *unroll, (*replace, *remove)))
            }
        })
    }

    /// Whether the request names observation fields a schema may expand.
    fn names_fields(&self) -> bool {
        matches!(self.spec, Spec::Transitions { .. })
    }

    /// HER's reward function and fraction, when the request relabels.
    fn her(&self) -> Option<&Her> {
        match &self.spec {
            Spec::Transitions { her, .. } => her.as_ref(),
            _ => None,
        }
    }
}

#[pymethods]
impl PyRequest {
    /// `n` items, uniformly (distinct with `replace=False`), or by priority with `beta`
    /// (then `weights`); `remove=True` removes what it returns (item states);
    /// `by_group=["env_id"]` draws distinct items, an even share of every group first.
    #[staticmethod]
    #[pyo3(signature = (n, *, beta=None, replace=true, remove=false, by_group=None))]
    pub(crate) fn rows(
        n: Count,
        beta: Option<f64>,
        replace: bool,
        remove: bool,
        by_group: Option<Vec<String>>,
    ) -> PyResult<PyRequest> {
        PyRequest::checked(Spec::Rows {
            n: n.get(),
            beta,
            replace,
            remove,
            by_group: by_group.unwrap_or_default(),
        })
    }

    /// The oldest `n` live items, oldest first (fewer when fewer are live); with
    /// `remove=True` consumed as a queue's.
    #[staticmethod]
    #[pyo3(signature = (n, *, remove=false))]
    pub(crate) fn oldest(n: Count, remove: bool) -> PyResult<PyRequest> {
        PyRequest::checked(Spec::Oldest { n: n.get(), remove })
    }

    /// The items at `indices`, in order (a read: the sampling RNG does not move).
    /// `drawn=True` counts them as a draw the caller made; `remove=True` removes them;
    /// `including_removed=True` reads removed items too.
    #[staticmethod]
    #[pyo3(signature = (indices, *, drawn=false, remove=false, including_removed=false))]
    pub(crate) fn at(
        py: Python<'_>,
        indices: &Bound<'_, PyAny>,
        drawn: bool,
        remove: bool,
        including_removed: bool,
    ) -> PyResult<PyRequest> {
        PyRequest::checked(Spec::At {
            indices: crate::calls::get_indices(py, indices)?,
            drawn,
            remove,
            including_removed,
        })
    }

    /// `n` transitions of an episodic buffer (see `ReplayBuffer.sample_transitions`
    /// for the keywords).
    #[staticmethod]
    #[pyo3(signature = (n, obs, *, beta=None, stack=1, nstep=1, gamma=1.0, goal=None, achieved=None, strategy="future", n_sampled_goal=4, compute_reward=None, info=None))]
    #[expect(
        clippy::too_many_arguments,
        reason = "Python keyword arguments, each an option of transitions"
    )]
    pub(crate) fn transitions(
        n: Count,
        obs: &Bound<'_, PyAny>,
        beta: Option<f64>,
        stack: u64,
        nstep: u64,
        gamma: f64,
        goal: Option<String>,
        achieved: Option<String>,
        strategy: &str,
        n_sampled_goal: u64,
        compute_reward: Option<Py<PyAny>>,
        info: Option<String>,
    ) -> PyResult<PyRequest> {
        let her = Her::of(
            goal,
            achieved,
            strategy,
            n_sampled_goal,
            compute_reward,
            info,
        )?;
        PyRequest::checked(Spec::Transitions {
            n: n.get(),
            obs: names(obs)?,
            beta,
            shape: (stack, nstep, gamma),
            her,
            at: None,
        })
    }

    /// The transitions ending at the step rows `indices` (what a transition's
    /// `indices` entry names), read instead of drawn.
    #[staticmethod]
    #[pyo3(signature = (indices, obs, *, stack=1, nstep=1, gamma=1.0))]
    pub(crate) fn transitions_at(
        py: Python<'_>,
        indices: &Bound<'_, PyAny>,
        obs: &Bound<'_, PyAny>,
        stack: u64,
        nstep: u64,
        gamma: f64,
    ) -> PyResult<PyRequest> {
        let at = crate::calls::get_indices(py, indices)?;
        PyRequest::checked(Spec::Transitions {
            n: at.len(),
            obs: names(obs)?,
            beta: None,
            shape: (stack, nstep, gamma),
            her: None,
            at: Some(at),
        })
    }

    /// `n` sequences of `length` steps after `burn_in` (see
    /// `ReplayBuffer.sample_sequences`).
    #[staticmethod]
    #[pyo3(signature = (n, length, obs, *, burn_in=0, beta=None))]
    pub(crate) fn sequences(
        n: Count,
        length: u64,
        obs: &Bound<'_, PyAny>,
        burn_in: u64,
        beta: Option<f64>,
    ) -> PyResult<PyRequest> {
        PyRequest::checked(Spec::Sequences {
            n: n.get(),
            length,
            obs: names(obs)?,
            burn_in,
            beta,
        })
    }

    /// `n` whole episodes, or distinct ones until their steps reach `covering` (see
    /// `ReplayBuffer.sample_episodes`).
    #[staticmethod]
    #[pyo3(signature = (n=None, *, covering=None, beta=None, replace=true, remove=false))]
    pub(crate) fn episodes(
        n: Option<Count>,
        covering: Option<u64>,
        beta: Option<f64>,
        replace: bool,
        remove: bool,
    ) -> PyResult<PyRequest> {
        PyRequest::whole(Whole::Episodes, n, covering, beta, (replace, remove))
    }

    /// `n` whole fragments, or distinct ones until their rows reach `covering` (see
    /// `ReplayBuffer.sample_fragments`).
    #[staticmethod]
    #[pyo3(signature = (n=None, *, covering=None, beta=None, replace=true, remove=false))]
    pub(crate) fn fragments(
        n: Option<Count>,
        covering: Option<u64>,
        beta: Option<f64>,
        replace: bool,
        remove: bool,
    ) -> PyResult<PyRequest> {
        PyRequest::whole(Whole::Fragments, n, covering, beta, (replace, remove))
    }

    /// `n` groups of the items sharing the values of `by` (see
    /// `ReplayBuffer.sample_groups`).
    #[staticmethod]
    #[pyo3(signature = (n, by, *, unroll=0, replace=true, remove=false))]
    pub(crate) fn groups(
        n: Count,
        by: &Bound<'_, PyAny>,
        unroll: u64,
        replace: bool,
        remove: bool,
    ) -> PyResult<PyRequest> {
        PyRequest::checked(Spec::Groups {
            n: n.get(),
            by: crate::calls::group_key(by)?,
            unroll,
            replace,
            remove,
        })
    }

    /// How many units it asks for (given indices: how many are given; `covering=`:
    /// `None`).
    #[getter]
    pub(crate) fn n(&self) -> Option<usize> {
        match &self.spec {
            Spec::Rows { n, .. }
            | Spec::Oldest { n, .. }
            | Spec::Transitions { n, .. }
            | Spec::Sequences { n, .. }
            | Spec::Groups { n, .. } => Some(*n),
            Spec::At { indices, .. } => Some(indices.len()),
            Spec::Whole { n, .. } => *n,
        }
    }

    /// The same request for `n` units (a Ray client's share of a draw for one shard):
    /// built again by its constructor with `n` in place of its count. A read at given
    /// indices, or fragments covering a count, has no count to change.
    fn with_n<'py>(&self, py: Python<'py>, n: Count) -> PyResult<Bound<'py, PyRequest>> {
        let (kind, args, kw) = self.parts(py)?;
        let counted = match &self.spec {
            Spec::At { .. } | Spec::Transitions { at: Some(_), .. } => false,
            Spec::Whole { n, .. } => n.is_some(),
            _ => true,
        };
        if !counted {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "Request.{kind}: a read at given indices or a covering draw has no count to \
                 change"
            )));
        }
        let mut args: Vec<Bound<'py, PyAny>> = args.iter().collect();
        if let Some(first) = args.first_mut() {
            *first = n.0.into_pyobject(py)?.into_any();
        }
        let made = py.get_type::<PyRequest>().getattr(kind)?;
        let made = made.call(PyTuple::new(py, args)?, Some(&kw))?;
        Ok(made.cast_into::<PyRequest>()?)
    }

    /// As the call that builds it: `Request.rows(256, beta=0.4, ...)`.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (kind, args, kw) = self.parts(py)?;
        let mut shown: Vec<String> = Vec::new();
        for a in args.iter() {
            shown.push(a.repr()?.to_string());
        }
        for (k, v) in kw.iter() {
            shown.push(format!("{}={}", k.str()?, v.repr()?));
        }
        Ok(format!("Request.{kind}({})", shown.join(", ")))
    }

    /// Pickles as the constructor and keywords that build it again.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let (kind, args, kw) = self.parts(py)?;
        let rebuild = py.import("replaystore._draws")?.getattr("_rebuild")?;
        let args = PyTuple::new(
            py,
            [
                kind.into_pyobject(py)?.into_any(),
                args.into_any(),
                kw.into_any(),
            ],
        )?;
        Ok((rebuild, args))
    }
}

impl PyRequest {
    /// The constructor's name, positional arguments and keywords that build this
    /// request again.
    fn parts<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(&'static str, Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kw = PyDict::new(py);
        let (kind, args): (&str, Bound<'py, PyTuple>) = match &self.spec {
            Spec::Rows {
                n,
                beta,
                replace,
                remove,
                by_group,
            } => {
                kw.set_item("beta", beta)?;
                kw.set_item("replace", replace)?;
                kw.set_item("remove", remove)?;
                kw.set_item("by_group", by_group)?;
                ("rows", PyTuple::new(py, [n])?)
            }
            Spec::Oldest { n, remove } => {
                kw.set_item("remove", remove)?;
                ("oldest", PyTuple::new(py, [n])?)
            }
            Spec::At {
                indices,
                drawn,
                remove,
                including_removed,
            } => {
                kw.set_item("drawn", drawn)?;
                kw.set_item("remove", remove)?;
                kw.set_item("including_removed", including_removed)?;
                ("at", PyTuple::new(py, [indices.clone()])?)
            }
            Spec::Transitions {
                n,
                obs,
                beta,
                shape: (stack, nstep, gamma),
                her,
                at,
            } => {
                kw.set_item("stack", stack)?;
                kw.set_item("nstep", nstep)?;
                kw.set_item("gamma", gamma)?;
                match at {
                    Some(at) => (
                        "transitions_at",
                        PyTuple::new(
                            py,
                            [
                                at.clone().into_pyobject(py)?.into_any(),
                                obs.clone().into_pyobject(py)?.into_any(),
                            ],
                        )?,
                    ),
                    None => {
                        kw.set_item("beta", beta)?;
                        if let Some(h) = her {
                            h.keywords(py, &kw)?;
                        }
                        (
                            "transitions",
                            PyTuple::new(
                                py,
                                [
                                    n.into_pyobject(py)?.into_any(),
                                    obs.clone().into_pyobject(py)?.into_any(),
                                ],
                            )?,
                        )
                    }
                }
            }
            Spec::Sequences {
                n,
                length,
                obs,
                burn_in,
                beta,
            } => {
                kw.set_item("burn_in", burn_in)?;
                kw.set_item("beta", beta)?;
                (
                    "sequences",
                    PyTuple::new(
                        py,
                        [
                            n.into_pyobject(py)?.into_any(),
                            length.into_pyobject(py)?.into_any(),
                            obs.clone().into_pyobject(py)?.into_any(),
                        ],
                    )?,
                )
            }
            Spec::Whole {
                unit,
                n,
                covering,
                beta,
                replace,
                remove,
            } => {
                kw.set_item("covering", covering)?;
                kw.set_item("beta", beta)?;
                kw.set_item("replace", replace)?;
                kw.set_item("remove", remove)?;
                (unit.name(), PyTuple::new(py, [n])?)
            }
            Spec::Groups {
                n,
                by,
                unroll,
                replace,
                remove,
            } => {
                kw.set_item("unroll", unroll)?;
                kw.set_item("replace", replace)?;
                kw.set_item("remove", remove)?;
                (
                    "groups",
                    PyTuple::new(
                        py,
                        [
                            n.into_pyobject(py)?.into_any(),
                            by.clone().into_pyobject(py)?.into_any(),
                        ],
                    )?,
                )
            }
        };
        Ok((kind, args, kw))
    }
}

/// A handle's engine draw: `request` into `sink`.
pub(crate) type EngineDraw<'d> =
    dyn FnMut(Request<'_>, &mut dyn Sink) -> replaystore::Result<()> + Send + 'd;

/// What the one draw does with a handle's schema and engine draw.
pub(crate) type Drawing<'f, 'py> =
    dyn FnMut(Option<&Schema>, &mut EngineDraw<'_>) -> PyResult<Bound<'py, PyDict>> + 'f;

/// What every handle gives the one draw: its draw, with its lock held.
pub(crate) trait Drawer {
    /// Calls `f` with this handle's schema (with `schema`, for a request that names
    /// observation prefixes) and its draw, after `seed` restarts its sampling RNG; the
    /// handle stays locked until `f` returns.
    fn drawing<'py>(
        &self,
        py: Python<'py>,
        seed: Option<u64>,
        schema: bool,
        f: &mut Drawing<'_, 'py>,
    ) -> PyResult<Bound<'py, PyDict>>;
}

/// How a draw's arrays come back: filled into `out`, variable-length values as
/// `values` says (padded with `pad`), nested by `/` with `nested`, as `out_type`'s
/// arrays.
pub(crate) struct Output<'a, 'py> {
    pub(crate) out: Option<&'a Bound<'py, PyDict>>,
    pub(crate) values: &'a str,
    pub(crate) pad: f64,
    pub(crate) nested: bool,
    pub(crate) out_type: OutType,
}

/// The arrays a draw returns (`out_type=`): NumPy's, or the same memory as tensors or
/// `jax.Array`s through the package's one conversion for each (`replaystore.torch`'s
/// `as_tensors`, `replaystore.jax`'s `as_jax`), so a keyword and a call give the same.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutType {
    Numpy,
    Torch,
    Jax,
}

impl OutType {
    /// `out_type` as given, checked against `out` (`out_type="jax"` with `out` is a
    /// `TypeError`: `out`'s arrays are filled again by the next draw, and JAX takes a
    /// `jax.Array` never to change).
    pub(crate) fn parse(out_type: &str, out: Option<&Bound<'_, PyDict>>) -> PyResult<OutType> {
        let t = match out_type {
            "numpy" => OutType::Numpy,
            "torch" => OutType::Torch,
            "jax" => OutType::Jax,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "out_type must be \"numpy\", \"torch\" or \"jax\", got '{other}'"
                )));
            }
        };
        if t == OutType::Jax && out.is_some() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "out= refills its NumPy arrays on the next draw, and a jax.Array must not \
                 change: draw with out_type=\"jax\" and no out=",
            ));
        }
        Ok(t)
    }

    /// `draw`'s arrays as this type says (the module is imported on the first call).
    fn convert<'py>(self, draw: Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
        let (module, function) = match self {
            OutType::Numpy => return Ok(draw),
            OutType::Torch => ("replaystore.torch", "as_tensors"),
            OutType::Jax => ("replaystore.jax", "as_jax"),
        };
        let py = draw.py();
        let converted = py.import(module)?.getattr(function)?.call1((draw,))?;
        Ok(converted.cast_into::<PyDict>()?)
    }
}

impl<'a, 'py> Output<'a, 'py> {
    /// Fixed-size arrays, filled into `out` when given (variable-length values as lists).
    pub(crate) fn arrays(out: Option<&'a Bound<'py, PyDict>>) -> Output<'a, 'py> {
        Output::values(out, "list", 0.0)
    }

    /// Filled into `out` when given, variable-length values as `values` says.
    pub(crate) fn values(
        out: Option<&'a Bound<'py, PyDict>>,
        values: &'a str,
        pad: f64,
    ) -> Output<'a, 'py> {
        Output {
            out,
            values,
            pad,
            nested: false,
            out_type: OutType::Numpy,
        }
    }
}

/// The one draw: `request` from `handle` (after `seed`), returned as `output` says; a
/// relabeling request's rewards from its `compute_reward`, called after the handle is
/// unlocked.
pub(crate) fn sample<'py>(
    py: Python<'py>,
    handle: &impl Drawer,
    request: &PyRequest,
    seed: Option<u64>,
    output: &Output<'_, 'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = handle.drawing(py, seed, request.names_fields(), &mut |schema, draw| {
        request.with(schema, |r| {
            draw_values(py, output.out, output.values, output.pad, |sink| {
                draw(r, sink)
            })
        })?
    })?;
    if let (Some(h), Some(n)) = (request.her(), request.n()) {
        h.rewards(py, &d, n)?;
    }
    let d = if output.nested { nest(&d)? } else { d };
    output.out_type.convert(d)
}

/// A draw method's first argument: a `Request`, or a count the method's keywords
/// describe (`sample(256, beta=0.4)`).
pub(crate) enum Asked<'py> {
    Request(Bound<'py, PyRequest>),
    Count(Count),
}

impl<'a, 'py> FromPyObject<'a, 'py> for Asked<'py> {
    type Error = PyErr;

    fn extract(ob: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Asked<'py>> {
        match ob.cast::<PyRequest>() {
            Ok(r) => Ok(Asked::Request(r.to_owned())),
            Err(_) => ob.extract::<Count>().map(Asked::Count),
        }
    }
}

impl<'py> Asked<'py> {
    /// The request given, with none of the method's request keywords beside it
    /// (`TypeError` naming the first set: the request holds the draw's options), or
    /// the one `build` makes of the count and the keywords (kept in Rust: a draw by
    /// count allocates no Python object for its request).
    pub(crate) fn request(
        self,
        keywords: &[(&str, bool)],
        build: impl FnOnce(Count) -> PyResult<PyRequest>,
    ) -> PyResult<Given<'py>> {
        match self {
            Asked::Request(r) => match keywords.iter().find(|(_, set)| *set) {
                Some((name, _)) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "{name}= goes into the Request (Request.rows(n, {name}=...)), not beside it"
                ))),
                None => Ok(Given::Python(r)),
            },
            Asked::Count(n) => Ok(Given::Built(build(n)?)),
        }
    }
}

/// A draw's request: the caller's `Request` object, or one built from a count.
pub(crate) enum Given<'py> {
    Python(Bound<'py, PyRequest>),
    Built(PyRequest),
}

impl Given<'_> {
    /// The request.
    pub(crate) fn get(&self) -> &PyRequest {
        match self {
            Given::Python(r) => r.get(),
            Given::Built(r) => r,
        }
    }
}
