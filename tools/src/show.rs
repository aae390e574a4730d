//! Items as text: `dump` and `sample` print rows as an aligned table, JSON lines or CSV.

use std::io::Write;

use replaystore::{DType, Field, VarArray, VarField, VarKind};

use crate::fail::Failure;

/// How rows are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people; arrays shortened to their first values.
    Table,
    /// One JSON object per line, arrays nested as their shape (NaN and infinities are
    /// `null`).
    Jsonl,
    /// Comma-separated with a header line; an array gives one column per element
    /// (`obs[3]`, `frame[2][5]`).
    Csv,
}

/// Array elements a table cell shows before "…".
const TABLE_ELEMENTS: usize = 3;
/// Characters of text (and bytes) a table cell shows before "…", unless `--full`.
const TABLE_TEXT: usize = 200;

/// Writes rows of the chosen fields in one format; the table's column widths are set by
/// the first rows written.
pub struct Printer<'a, W: Write> {
    out: W,
    format: Format,
    fields: Vec<&'a Field>,
    /// The variable-length fields, after the fixed ones.
    var: Vec<&'a VarField>,
    /// Table cells show whole values (text is cut at `TABLE_TEXT` characters otherwise).
    full: bool,
    /// Whether rows carry importance weights (a prioritized sample).
    weights: bool,
    /// Whether rows start with their index (not in an exported file, which holds items).
    index: bool,
    /// Whether rows end with why their item was removed (`--include-removed`).
    removed: bool,
    widths: Option<Vec<usize>>,
}

impl<'a, W: Write> Printer<'a, W> {
    /// A printer of `fields` to `out`.
    pub fn new(out: W, format: Format, fields: Vec<&'a Field>, weights: bool) -> Self {
        Printer {
            out,
            format,
            fields,
            var: Vec::new(),
            full: false,
            weights,
            index: true,
            removed: false,
            widths: None,
        }
    }

    /// Rows without their index: an export holds the items, not where they were.
    pub fn without_index(mut self) -> Self {
        self.index = false;
        self
    }

    /// Rows end with a `removed` column: why each item was removed (empty, or JSON's
    /// `null`, for a live one).
    pub fn with_removed(mut self) -> Self {
        self.removed = true;
        self
    }

    /// Prints these variable-length fields too, after the fixed ones; `full`: whole
    /// values in a table (else text and bytes are cut at 200 characters, arrays at 3
    /// elements).
    pub fn with_values(mut self, var: Vec<&'a VarField>, full: bool) -> Self {
        self.var = var;
        self.full = full;
        self
    }

    fn headers(&self) -> Vec<String> {
        let mut h = vec!["index".to_string()];
        h.truncate(usize::from(self.index));
        if self.weights {
            h.push("weight".into());
        }
        for f in &self.fields {
            if self.format == Format::Csv && !f.shape().is_empty() {
                let shape = f.shape();
                h.extend((0..f.elements()).map(|i| format!("{}{}", f.name(), coords(shape, i))));
            } else {
                h.push(f.name().to_string());
            }
        }
        h.extend(self.var.iter().map(|f| f.name().to_string()));
        if self.removed {
            h.push("removed".into());
        }
        h
    }

    /// Writes rows: `indices[r]`, `weights[r]`, for each field its bytes (`cols[f]`
    /// holds the rows back to back), for each variable-length field its values
    /// (`vals[v]`, in the order `with_values` was given), and with `with_removed` why
    /// each was removed (`removed[r]`, `""` for a live item).
    pub fn rows(
        &mut self,
        indices: &[u64],
        weights: Option<&[f32]>,
        cols: &[&[u8]],
        vals: &[&VarArray],
        removed: Option<&[&str]>,
    ) -> Result<(), Failure> {
        let sizes: Vec<usize> = self.fields.iter().map(|f| f.bytes()).collect();
        let mut lines: Vec<Vec<String>> = Vec::with_capacity(indices.len());
        for (r, &index) in indices.iter().enumerate() {
            let mut cells = vec![index.to_string()];
            cells.truncate(usize::from(self.index));
            if let Some(w) = weights {
                cells.push(format!("{:?}", w.get(r).copied().unwrap_or(f32::NAN)));
            }
            for ((f, col), &size) in self.fields.iter().zip(cols).zip(&sizes) {
                let bytes = col.get(r * size..(r + 1) * size).unwrap_or(&[]);
                match self.format {
                    Format::Table => cells.push(table_cell(f, bytes)),
                    Format::Csv => cells.extend(elements(f.dtype(), bytes).map(|v| v.text())),
                    Format::Jsonl => cells.push(json_value(f, bytes)),
                }
            }
            for (f, v) in self.var.iter().zip(vals) {
                let value = v.value(r).unwrap_or(&[]);
                cells.push(var_cell(f.kind(), value, self.format, self.full));
            }
            if self.removed {
                let cause = removed.and_then(|c| c.get(r)).copied().unwrap_or("");
                cells.push(match (self.format, cause) {
                    (Format::Jsonl, "") => "null".into(),
                    (Format::Jsonl, c) => json_string(c),
                    (_, c) => c.to_string(),
                });
            }
            lines.push(cells);
        }
        self.write(lines).map_err(Failure::Stdout)
    }

    fn write(&mut self, lines: Vec<Vec<String>>) -> std::io::Result<()> {
        match self.format {
            Format::Jsonl => {
                let mut keys = vec![json_string("index")];
                keys.truncate(usize::from(self.index));
                if self.weights {
                    keys.push(json_string("weight"));
                }
                keys.extend(self.fields.iter().map(|f| json_string(f.name())));
                keys.extend(self.var.iter().map(|f| json_string(f.name())));
                if self.removed {
                    keys.push(json_string("removed"));
                }
                for cells in lines {
                    let body: Vec<String> = keys
                        .iter()
                        .zip(cells)
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect();
                    writeln!(self.out, "{{{}}}", body.join(", "))?;
                }
            }
            Format::Csv => {
                if self.widths.is_none() {
                    let h: Vec<String> = self.headers().iter().map(|s| csv_cell(s)).collect();
                    writeln!(self.out, "{}", h.join(","))?;
                    self.widths = Some(Vec::new());
                }
                for cells in lines {
                    let c: Vec<String> = cells.iter().map(|s| csv_cell(s)).collect();
                    writeln!(self.out, "{}", c.join(","))?;
                }
            }
            Format::Table => {
                if self.widths.is_none() {
                    let h = self.headers();
                    let w: Vec<usize> = h
                        .iter()
                        .enumerate()
                        .map(|(i, name)| {
                            lines
                                .iter()
                                .filter_map(|l| l.get(i))
                                .map(|c| c.chars().count())
                                .chain([name.chars().count()])
                                .max()
                                .unwrap_or(0)
                        })
                        .collect();
                    table_line(&mut self.out, &h, &w)?;
                    self.widths = Some(w);
                }
                let w = self.widths.clone().unwrap_or_default();
                for cells in lines {
                    table_line(&mut self.out, &cells, &w)?;
                }
            }
        }
        Ok(())
    }

    /// Flushes the output.
    pub fn finish(mut self) -> Result<(), Failure> {
        self.out.flush().map_err(Failure::Stdout)
    }

    /// Flushes the output and hands it back.
    pub fn into_inner(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

fn table_line(out: &mut impl Write, cells: &[String], widths: &[usize]) -> std::io::Result<()> {
    let mut line = String::new();
    for (i, c) in cells.iter().enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        let w = widths.get(i).copied().unwrap_or(0);
        if i + 1 == cells.len() {
            line.push_str(c);
        } else {
            line.push_str(&format!("{c:<w$}"));
        }
    }
    writeln!(out, "{line}")
}

/// Row-major coordinates of flat element `i` of `shape`: `[3]` or `[2][5]` (no commas,
/// so CSV headers need no quoting).
fn coords(shape: &[usize], mut i: usize) -> String {
    let mut c = vec![0; shape.len()];
    for (slot, &d) in c.iter_mut().zip(shape).rev() {
        *slot = i % d.max(1);
        i /= d.max(1);
    }
    c.iter().map(|k| format!("[{k}]")).collect()
}

/// One element's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A bool.
    Bool(bool),
    /// An unsigned integer.
    U(u64),
    /// A signed integer.
    I(i64),
    /// A single-precision float (printed with its own shortest form).
    F32(f32),
    /// A double.
    F64(f64),
}

impl Value {
    /// As people and CSV read it.
    pub fn text(self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::U(v) => v.to_string(),
            Value::I(v) => v.to_string(),
            Value::F32(v) => format!("{v:?}"),
            Value::F64(v) => format!("{v:?}"),
        }
    }

    /// As JSON: the same, with `null` for NaN and infinities (JSON has neither).
    fn json(self) -> String {
        match self {
            Value::F32(v) if !v.is_finite() => "null".into(),
            Value::F64(v) if !v.is_finite() => "null".into(),
            v => v.text(),
        }
    }
}

/// The elements of one item's field, from its little-endian bytes.
pub fn elements(dtype: DType, bytes: &[u8]) -> impl Iterator<Item = Value> + '_ {
    let size = dtype.size().max(1);
    bytes.chunks_exact(size).map(move |b| {
        let mut w = [0u8; 8];
        if let Some(dst) = w.get_mut(..b.len()) {
            dst.copy_from_slice(b);
        }
        let u = u64::from_le_bytes(w);
        let sext = |bits: u32| Value::I(((u << (64 - bits)) as i64) >> (64 - bits));
        match dtype {
            DType::Bool => Value::Bool(u != 0),
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => Value::U(u),
            DType::I8 => sext(8),
            DType::I16 => sext(16),
            DType::I32 => sext(32),
            DType::I64 => Value::I(u as i64),
            DType::F32 => Value::F32(f32::from_bits(u as u32)),
            DType::F64 => Value::F64(f64::from_bits(u)),
        }
    })
}

fn table_cell(f: &Field, bytes: &[u8]) -> String {
    let shape = f.shape();
    let mut values = elements(f.dtype(), bytes);
    if shape.is_empty() {
        return values.next().map_or_else(String::new, Value::text);
    }
    let n = f.elements();
    let shown: Vec<String> = values
        .by_ref()
        .take(TABLE_ELEMENTS)
        .map(Value::text)
        .collect();
    let dims = if shape.len() > 1 {
        let d: Vec<String> = shape.iter().map(usize::to_string).collect();
        format!("{} ", d.join("x"))
    } else {
        String::new()
    };
    if n > TABLE_ELEMENTS {
        format!("{dims}[{}, … {n} values]", shown.join(", "))
    } else {
        format!("{dims}[{}]", shown.join(", "))
    }
}

/// One variable-length value as a cell: text as text (JSON: a string; a table: cut at
/// `TABLE_TEXT` characters, line breaks shown as `\n`, unless `full`), bytes as hex
/// (a table: cut likewise), a ragged array as a list (a table: its first elements).
fn var_cell(kind: VarKind, value: &[u8], format: Format, full: bool) -> String {
    let cut = |text: String, n: usize| -> String {
        if full || text.chars().count() <= TABLE_TEXT {
            text
        } else {
            let shown: String = text.chars().take(TABLE_TEXT).collect();
            format!("{shown}… ({n} in all)")
        }
    };
    match kind {
        VarKind::Str => {
            let text = String::from_utf8_lossy(value);
            match format {
                Format::Jsonl => json_string(&text),
                Format::Csv => text.into_owned(),
                Format::Table => {
                    let n = text.chars().count();
                    cut(text.escape_debug().to_string(), n).replace("\\\"", "\"")
                }
            }
        }
        VarKind::Bytes => {
            let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
            match format {
                Format::Jsonl => json_string(&hex),
                Format::Csv => hex,
                Format::Table => cut(hex, value.len() * 2),
            }
        }
        VarKind::Ragged(dtype) => {
            let all: Vec<String> = elements(dtype, value)
                .map(|v| match format {
                    Format::Jsonl => v.json(),
                    _ => v.text(),
                })
                .collect();
            if format == Format::Table && !full && all.len() > TABLE_ELEMENTS {
                let shown = all.get(..TABLE_ELEMENTS).unwrap_or(&[]).join(", ");
                format!("[{shown}, … {} values]", all.len())
            } else {
                format!("[{}]", all.join(", "))
            }
        }
    }
}

/// A field's value as JSON: a number, or lists nested as its shape.
fn json_value(f: &Field, bytes: &[u8]) -> String {
    let values: Vec<String> = elements(f.dtype(), bytes).map(Value::json).collect();
    nest(&values, f.shape())
}

fn nest(values: &[String], shape: &[usize]) -> String {
    match shape.split_first() {
        None => values.first().cloned().unwrap_or_default(),
        Some((&d, rest)) => {
            let inner: usize = rest.iter().product();
            let parts: Vec<String> = (0..d)
                .map(|i| nest(values.get(i * inner..).unwrap_or(&[]), rest))
                .collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// RFC 4180: quoted when it holds a comma, quote or line break.
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Bytes in binary units, for people.
///
/// ```
/// assert_eq!(replaystore_cli::show::human(3 << 20), "3.0 MiB");
/// ```
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS.get(u).unwrap_or(&"B"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn elements_decode_every_dtype_from_little_endian_bytes() {
        let v = |d: DType, b: &[u8]| elements(d, b).collect::<Vec<_>>();
        assert_eq!(v(DType::I8, &[0xff, 7]), [Value::I(-1), Value::I(7)]);
        assert_eq!(v(DType::I16, &(-300i16).to_le_bytes()), [Value::I(-300)]);
        assert_eq!(v(DType::I32, &(-5i32).to_le_bytes()), [Value::I(-5)]);
        assert_eq!(v(DType::I64, &i64::MIN.to_le_bytes()), [Value::I(i64::MIN)]);
        assert_eq!(v(DType::U64, &u64::MAX.to_le_bytes()), [Value::U(u64::MAX)]);
        assert_eq!(v(DType::U16, &[1, 1]), [Value::U(257)]);
        assert_eq!(
            v(DType::Bool, &[0, 1]),
            [Value::Bool(false), Value::Bool(true)]
        );
        assert_eq!(v(DType::F32, &0.1f32.to_le_bytes())[0].text(), "0.1");
        assert_eq!(v(DType::F64, &(-2.5f64).to_le_bytes())[0].text(), "-2.5");
        assert_eq!(Value::F32(f32::NAN).json(), "null");
    }

    #[test]
    fn json_nests_arrays_as_their_shape_and_csv_names_each_element() {
        let vals: Vec<String> = (0..6).map(|i| i.to_string()).collect();
        assert_eq!(nest(&vals, &[2, 3]), "[[0, 1, 2], [3, 4, 5]]");
        assert_eq!(nest(&vals[..1], &[]), "0");
        assert_eq!(coords(&[2, 3], 4), "[1][1]");
        assert_eq!(coords(&[5], 3), "[3]");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
