//! `import` from JSON lines: one object per line, one field per key, the schema
//! inferred from the values in a first pass over the file (a second pass adds them).
//!
//! | values of a key, on every line                     | field                     |
//! |----------------------------------------------------|---------------------------|
//! | `true` / `false`                                   | `bool`                    |
//! | whole numbers                                      | `i64` (`u64` past i64)    |
//! | numbers, some with a fraction or exponent          | `f64`                     |
//! | strings                                            | `str`                     |
//! | objects                                            | `str` holding their JSON  |
//! | (nested) arrays of one shape on every line         | fixed field of that shape |
//! | flat arrays whose length varies                    | ragged array              |
//!
//! JSON has one number type, so a field exported from `f32` comes back as `f64`, and a
//! `bytes` field (exported as hex text) as `str`: Parquet keeps every type. A line that
//! is not an object, lacks a key the first line has or has one it lacks, a `null`, or a
//! key whose values change kind (a number on one line, a string on another) is refused
//! with its line number, before anything is created.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use replaystore::{Column, DType, ReplayBuffer, Schema, VarKind};
use serde_json::{Map, Value};

use crate::fail::Failure;

/// Lines per `add_batch`.
const LINES: usize = 1024;

/// What the values of one key have been so far.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    /// Numbers or bools, one per line.
    Scalar(Element),
    Str,
    Object,
    /// Arrays: their element class, and their shape while every line had the same.
    Array {
        element: Element,
        shape: Option<Vec<usize>>,
        flat: bool,
    },
}

/// The class of an array's numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Element {
    Bool,
    /// Whole numbers: `wide` once one passed `i64::MAX`, `negative` once one was < 0.
    Int {
        wide: bool,
        negative: bool,
    },
    Float,
}

impl Element {
    fn of(n: &serde_json::Number) -> Element {
        if let Some(x) = n.as_i64() {
            Element::Int {
                wide: false,
                negative: x < 0,
            }
        } else if n.is_u64() {
            Element::Int {
                wide: true,
                negative: false,
            }
        } else {
            Element::Float
        }
    }

    fn dtype(self) -> DType {
        match self {
            Element::Bool => DType::Bool,
            Element::Int { wide: true, .. } => DType::U64,
            Element::Int { .. } => DType::I64,
            Element::Float => DType::F64,
        }
    }

    /// The class both `self` and `other` fit (whole numbers widen to floats).
    fn join(self, other: Element) -> Result<Element, &'static str> {
        match (self, other) {
            (Element::Bool, Element::Bool) => Ok(Element::Bool),
            (
                Element::Int {
                    wide: a,
                    negative: m,
                },
                Element::Int {
                    wide: b,
                    negative: n,
                },
            ) => {
                if (a || b) && (m || n) {
                    Err("whole numbers past both i64's and u64's range")
                } else {
                    Ok(Element::Int {
                        wide: a || b,
                        negative: m || n,
                    })
                }
            }
            (Element::Int { .. } | Element::Float, Element::Int { .. } | Element::Float) => {
                Ok(Element::Float)
            }
            _ => Err("bools mixed with numbers"),
        }
    }
}

/// The shape and element class of a (nested) array, if it is rectangular and of numbers
/// or bools.
fn array_shape(v: &[Value]) -> Result<(Vec<usize>, Option<Element>), String> {
    let mut element: Option<Element> = None;
    let mut inner: Option<Vec<usize>> = None;
    for x in v {
        let (shape, e) = match x {
            Value::Array(a) => array_shape(a)?,
            Value::Bool(_) => (Vec::new(), Some(Element::Bool)),
            Value::Number(n) => (Vec::new(), Some(Element::of(n))),
            other => return Err(format!("an array holding {}", kind_name(other))),
        };
        match &inner {
            None => inner = Some(shape),
            Some(s) if *s == shape => {}
            Some(s) => {
                return Err(format!(
                    "a ragged nested array (rows of shape {s:?} and {shape:?})"
                ));
            }
        }
        element = match (element, e) {
            (None, e) | (e, None) => e,
            (Some(a), Some(b)) => Some(a.join(b)?),
        };
    }
    let mut shape = vec![v.len()];
    shape.extend(inner.unwrap_or_default());
    Ok((shape, element))
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Seen {
    /// What one value is, alone.
    fn of(v: &Value) -> Result<Seen, String> {
        Ok(match v {
            Value::Null => return Err("null (a buffer's items have every field)".into()),
            Value::Bool(_) => Seen::Scalar(Element::Bool),
            Value::Number(n) => Seen::Scalar(Element::of(n)),
            Value::String(_) => Seen::Str,
            Value::Object(_) => Seen::Object,
            Value::Array(a) => {
                let (shape, element) = array_shape(a)?;
                Seen::Array {
                    // An empty array says nothing of its elements: numbers until told.
                    element: element.unwrap_or(Element::Int {
                        wide: false,
                        negative: false,
                    }),
                    flat: shape.len() == 1,
                    shape: Some(shape),
                }
            }
        })
    }

    /// What a key is after one more value.
    fn join(self, v: &Value) -> Result<Seen, String> {
        let next = Seen::of(v)?;
        let clash = |a: &Seen| format!("{} after values that were {}", kind_name(v), a.name());
        Ok(match (self, next) {
            (Seen::Scalar(a), Seen::Scalar(b)) => match a.join(b) {
                Ok(e) => Seen::Scalar(e),
                Err(_) if a == Element::Bool || b == Element::Bool => {
                    return Err(clash(&Seen::Scalar(a)));
                }
                Err(e) => return Err(e.into()),
            },
            (
                Seen::Array {
                    element: e,
                    shape: s,
                    flat: f,
                },
                Seen::Array {
                    element: g,
                    shape: t,
                    flat: h,
                },
            ) => {
                let empty = |s: &Option<Vec<usize>>| s.as_deref() == Some(&[0]);
                Seen::Array {
                    element: if empty(&t) {
                        e
                    } else if empty(&s) {
                        g
                    } else {
                        e.join(g)?
                    },
                    shape: if s == t { s } else { None },
                    flat: f && h,
                }
            }
            (a, b) if a == b => a,
            (a, _) => return Err(clash(&a)),
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Seen::Scalar(Element::Bool) => "bools",
            Seen::Scalar(Element::Int { .. }) => "whole numbers",
            Seen::Scalar(Element::Float) => "numbers",
            Seen::Str => "strings",
            Seen::Object => "objects",
            Seen::Array { .. } => "arrays",
        }
    }

    /// The field a key becomes.
    fn field(&self) -> Result<Field, String> {
        Ok(match self {
            Seen::Scalar(e) => Field::Fixed(e.dtype(), Vec::new()),
            Seen::Str => Field::Var(VarKind::Str),
            Seen::Object => Field::Object,
            // A shape with a zero (every line `[]`) is no fixed field: such arrays are
            // ragged ones that happen to be empty so far.
            Seen::Array {
                element,
                shape: Some(shape),
                ..
            } if !shape.contains(&0) => Field::Fixed(element.dtype(), shape.clone()),
            Seen::Array {
                element,
                flat: true,
                ..
            } => Field::Var(VarKind::Ragged(element.dtype())),
            Seen::Array { .. } => {
                return Err("nested arrays whose shape varies from line to line".into());
            }
        })
    }
}

/// What a key is stored as.
#[derive(Clone, Debug, PartialEq)]
enum Field {
    Fixed(DType, Vec<usize>),
    Var(VarKind),
    /// A `str` field holding each object's JSON text.
    Object,
}

/// A JSON-lines file being imported: its keys, the fields they make and its lines.
pub struct JsonlIn {
    path: PathBuf,
    keys: Vec<String>,
    fields: Vec<Field>,
    /// Items (non-blank lines).
    pub rows: u64,
    /// Bytes of every variable-length value.
    pub value_bytes: u64,
}

impl JsonlIn {
    /// The `add_batch` calls `fill` makes.
    pub fn calls(&self) -> u64 {
        self.rows.div_ceil(LINES as u64)
    }

    /// Reads the whole file once, inferring each key's field.
    pub fn open(path: &Path) -> Result<JsonlIn, Failure> {
        let mut keys: Vec<String> = Vec::new();
        let mut seen: Vec<Seen> = Vec::new();
        let mut rows = 0u64;
        let mut value_bytes = 0u64;
        each_object(path, |object| {
            if rows == 0 {
                keys = object.keys().cloned().collect();
                for (k, v) in object {
                    seen.push(Seen::of(v).map_err(|e| format!("key {k:?}: {e}"))?);
                }
            } else {
                same_keys(&keys, object)?;
                for (k, s) in keys.iter().zip(seen.iter_mut()) {
                    let v = object.get(k).unwrap_or(&Value::Null);
                    *s = s.clone().join(v).map_err(|e| format!("key {k:?}: {e}"))?;
                }
            }
            value_bytes += object.values().map(var_bytes).sum::<u64>();
            rows += 1;
            Ok(())
        })?;
        let fields = keys
            .iter()
            .zip(&seen)
            .map(|(k, s)| {
                s.field()
                    .map_err(|e| Failure::input(path, format!("key {k:?}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(JsonlIn {
            path: path.to_path_buf(),
            keys,
            fields,
            rows,
            value_bytes,
        })
    }

    /// The schema its keys make, in the first line's key order.
    pub fn schema(&self) -> Result<Schema, Failure> {
        let mut b = Schema::builder();
        for (k, f) in self.keys.iter().zip(&self.fields) {
            b = match f {
                Field::Fixed(d, shape) => b.field(k, *d, shape),
                Field::Var(v) => b.variable(k, *v, None),
                Field::Object => b.variable(k, VarKind::Str, None),
            };
        }
        Ok(b.build()?)
    }

    /// Adds every line to `buf`, `LINES` per `add_batch`; `done(rows)` after each.
    pub fn fill(&self, buf: &mut ReplayBuffer, mut done: impl FnMut(u64)) -> Result<(), Failure> {
        let mut cols: Vec<Col> = self.fields.iter().map(|_| Col::default()).collect();
        let mut pending = 0usize;
        let mut flush = |cols: &mut Vec<Col>, rows: usize| -> Result<(), Failure> {
            if rows == 0 {
                return Ok(());
            }
            let columns: Vec<Column<'_>> = self
                .keys
                .iter()
                .zip(&self.fields)
                .zip(cols.iter())
                .map(|((k, f), c)| match f {
                    Field::Fixed(d, shape) => {
                        let mut s = vec![rows];
                        s.extend(shape);
                        Column::from_bytes(k, *d, &s, &c.bytes)
                    }
                    Field::Var(v) => Column::values(k, v.dtype(), &c.bytes, &c.offsets),
                    Field::Object => Column::values(k, DType::U8, &c.bytes, &c.offsets),
                })
                .collect();
            buf.add_batch(&columns)?;
            done(rows as u64);
            for c in cols.iter_mut() {
                c.bytes.clear();
                c.offsets.clear();
            }
            Ok(())
        };
        let mut failure = None;
        each_object(&self.path, |object| {
            for ((k, f), c) in self.keys.iter().zip(&self.fields).zip(cols.iter_mut()) {
                let v = object.get(k).unwrap_or(&Value::Null);
                c.push(f, v)?;
            }
            pending += 1;
            if pending == LINES {
                if let Err(e) = flush(&mut cols, pending) {
                    failure = Some(e);
                    return Err(String::new());
                }
                pending = 0;
            }
            Ok(())
        })
        .map_err(|e| failure.take().unwrap_or(e))?;
        flush(&mut cols, pending)
    }
}

/// One field's bytes for the lines read since the last `add_batch`.
#[derive(Default)]
struct Col {
    bytes: Vec<u8>,
    /// Byte offsets of variable-length values (from 0, one more than rows).
    offsets: Vec<u64>,
}

impl Col {
    fn push(&mut self, f: &Field, v: &Value) -> Result<(), String> {
        match f {
            Field::Fixed(d, _) => push_elements(*d, v, &mut self.bytes),
            Field::Var(VarKind::Str) => {
                self.start();
                self.bytes
                    .extend_from_slice(v.as_str().unwrap_or_default().as_bytes());
                self.end();
                Ok(())
            }
            Field::Object => {
                self.start();
                self.bytes.extend_from_slice(v.to_string().as_bytes());
                self.end();
                Ok(())
            }
            Field::Var(VarKind::Ragged(d)) => {
                self.start();
                push_elements(*d, v, &mut self.bytes)?;
                self.end();
                Ok(())
            }
            Field::Var(VarKind::Bytes) => Err("bytes are not inferred from JSON".into()),
        }
    }

    fn start(&mut self) {
        if self.offsets.is_empty() {
            self.offsets.push(self.bytes.len() as u64);
        }
    }

    fn end(&mut self) {
        self.offsets.push(self.bytes.len() as u64);
    }
}

/// Appends a value's numbers (nested arrays flattened, outermost first) as `d`'s
/// little-endian bytes.
fn push_elements(d: DType, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    match v {
        Value::Array(a) => a.iter().try_for_each(|x| push_elements(d, x, out)),
        Value::Bool(b) => {
            out.push(u8::from(*b));
            Ok(())
        }
        Value::Number(n) => {
            match d {
                DType::U64 => out.extend(n.as_u64().ok_or("a number past u64")?.to_le_bytes()),
                DType::I64 => out.extend(n.as_i64().ok_or("a number past i64")?.to_le_bytes()),
                _ => out.extend(n.as_f64().unwrap_or(f64::NAN).to_le_bytes()),
            }
            Ok(())
        }
        other => Err(format!("{} where a number was inferred", kind_name(other))),
    }
}

/// Bytes a value takes as a variable-length field (0 for what becomes a fixed field:
/// this only sizes the chunk ring, so a fixed array counted too is harmless slack).
fn var_bytes(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.len() as u64,
        Value::Object(_) => v.to_string().len() as u64,
        Value::Array(a) => a.iter().map(|x| var_bytes(x).max(8)).sum(),
        _ => 0,
    }
}

fn same_keys(keys: &[String], object: &Map<String, Value>) -> Result<(), String> {
    if let Some(k) = keys.iter().find(|k| !object.contains_key(k.as_str())) {
        return Err(format!("no key {k:?}, which the first line has"));
    }
    if let Some(k) = object.keys().find(|k| !keys.contains(k)) {
        return Err(format!("key {k:?}, which the first line does not have"));
    }
    Ok(())
}

/// Calls `each(object)` for every non-blank line; a line that is not a JSON object, or
/// an error from `each`, stops with the line's number.
fn each_object(
    path: &Path,
    mut each: impl FnMut(&Map<String, Value>) -> Result<(), String>,
) -> Result<(), Failure> {
    let file = File::open(path).map_err(|e| Failure::file("open", path, e))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut number = 0u64;
    loop {
        line.clear();
        number += 1;
        let n = reader
            .read_line(&mut line)
            .map_err(|e| Failure::input(path, format!("line {number}: {e}")))?;
        if n == 0 {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        let object = match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(o)) => o,
            Ok(other) => {
                return Err(Failure::input(
                    path,
                    format!("line {number}: {}, not an object", kind_name(&other)),
                ));
            }
            Err(e) => {
                return Err(Failure::input(
                    path,
                    format!("line {number}: not JSON: {e}"),
                ));
            }
        };
        each(&object).map_err(|e| Failure::input(path, format!("line {number}: {e}")))?;
    }
}
