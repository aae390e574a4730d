//! What an item is: named fields, each a dtype and a fixed shape, and variable-length
//! fields (bytes, text, ragged 1-D arrays) whose values live in the lane's chunk ring.

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Most dimensions a field may have (a batch adds one more).
pub const MAX_FIELD_RANK: usize = 7;
/// Most fields a schema may have.
pub const MAX_FIELDS: usize = 1024;
/// Longest field name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest item (all fields together), in bytes: 1 GiB.
pub const MAX_ITEM_BYTES: usize = 1 << 30;
/// Bytes a variable-length field takes in the row: its slot words (position, length,
/// reserved), `format::heap`.
pub const VAR_SLOT_BYTES: usize = 16;

/// What a variable-length field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarKind {
    /// Raw bytes.
    Bytes,
    /// UTF-8 text, checked on add.
    Str,
    /// A 1-D array of this dtype whose length varies per item (token ids, log-probs).
    Ragged(DType),
}

impl VarKind {
    /// The element type of its values (`U8` for bytes and text).
    pub fn dtype(self) -> DType {
        match self {
            VarKind::Bytes | VarKind::Str => DType::U8,
            VarKind::Ragged(d) => d,
        }
    }

    /// The kind's name in schema text: `bytes`, `str`, or the dtype's name followed by
    /// `[]`.
    ///
    /// ```
    /// use replaystore::{DType, VarKind};
    /// assert_eq!(VarKind::Str.name(), "str");
    /// assert_eq!(VarKind::Ragged(DType::I32).name(), "i32[]");
    /// ```
    pub fn name(self) -> String {
        match self {
            VarKind::Bytes => "bytes".into(),
            VarKind::Str => "str".into(),
            VarKind::Ragged(d) => format!("{}[]", d.name()),
        }
    }

    /// What is wrong with `value` as a value of this kind: a length that is not whole
    /// elements, or text that is not UTF-8. The one check an add makes of a value and
    /// `verify` makes of a stored one.
    ///
    /// ```
    /// use replaystore::{DType, ValueFault, VarKind};
    /// assert_eq!(VarKind::Str.check_value("é".as_bytes()), Ok(()));
    /// assert_eq!(VarKind::Str.check_value(&[b'a', 0xff]), Err(ValueFault::NotUtf8 { valid_up_to: 1 }));
    /// assert_eq!(
    ///     VarKind::Ragged(DType::I32).check_value(&[0; 6]),
    ///     Err(ValueFault::PartElement { bytes: 6, element: 4 })
    /// );
    /// ```
    pub fn check_value(self, value: &[u8]) -> std::result::Result<(), ValueFault> {
        let element = self.dtype().size();
        if !value.len().is_multiple_of(element) {
            return Err(ValueFault::PartElement {
                bytes: value.len(),
                element,
            });
        }
        if self == VarKind::Str
            && let Err(e) = std::str::from_utf8(value)
        {
            return Err(ValueFault::NotUtf8 {
                valid_up_to: e.valid_up_to(),
            });
        }
        Ok(())
    }
}

/// Why a value's bytes are not a value of its field's kind ([`VarKind::check_value`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFault {
    /// `bytes` is not a whole number of `element`-byte elements.
    PartElement {
        /// The value's length in bytes.
        bytes: usize,
        /// Bytes per element.
        element: usize,
    },
    /// Text whose bytes stop being UTF-8 at `valid_up_to`.
    NotUtf8 {
        /// Bytes of valid UTF-8 before the first invalid one.
        valid_up_to: usize,
    },
}

impl std::fmt::Display for ValueFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueFault::PartElement { bytes, element } => {
                write!(f, "{bytes} bytes, not whole {element}-byte elements")
            }
            ValueFault::NotUtf8 { valid_up_to } => {
                write!(f, "not UTF-8 text (valid up to byte {valid_up_to})")
            }
        }
    }
}

/// A field whose values vary in length from item to item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarField {
    name: String,
    kind: VarKind,
    max_len: Option<usize>,
}

impl VarField {
    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it holds.
    pub fn kind(&self) -> VarKind {
        self.kind
    }

    /// The most elements (bytes, for bytes and text) a value may have, if declared.
    pub fn max_len(&self) -> Option<usize> {
        self.max_len
    }

    /// The most bytes a value may have, if declared.
    pub fn max_bytes(&self) -> Option<usize> {
        self.max_len.map(|n| n * self.kind.dtype().size())
    }

    /// The field as a draw returns it under `prefix` (`next_` for the observation a
    /// transition led to): the name is the only change.
    pub(crate) fn prefixed(&self, prefix: &str) -> VarField {
        VarField {
            name: format!("{prefix}{}", self.name),
            ..self.clone()
        }
    }
}

/// One named field of every item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    // Derived once: the add path asks for them per item.
    elements: usize,
    bytes: usize,
}

impl Field {
    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Its shape; empty for a scalar.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Elements per item (1 for a scalar).
    pub fn elements(&self) -> usize {
        self.elements
    }

    /// Bytes per item.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The fields every item of a buffer has, in a fixed order.
///
/// ```
/// use replaystore::{DType, Schema};
/// let schema = Schema::builder()
///     .field("obs", DType::F32, &[17])
///     .field("action", DType::F32, &[6])
///     .field("reward", DType::F32, &[])
///     .field("done", DType::Bool, &[])
///     .build()?;
/// assert_eq!(schema.len(), 4);
/// assert_eq!(schema.field("obs").map(|f| f.bytes()), Some(68));
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    fields: Vec<Field>,
    var: Vec<VarField>,
}

impl Schema {
    /// Starts a schema.
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder {
            fields: Vec::new(),
            var: Vec::new(),
        }
    }

    /// Builds a schema from fixed fields, checking names, shapes and sizes.
    pub fn new(fields: Vec<(String, DType, Vec<usize>)>) -> Result<Schema> {
        Schema::with_variable(fields, Vec::new())
    }

    /// Builds a schema from fixed fields and variable-length fields (name, kind,
    /// maximum length in elements), checking names, shapes and sizes. Names are unique
    /// across both; a schema needs at least one field of either kind.
    pub fn with_variable(
        fields: Vec<(String, DType, Vec<usize>)>,
        var: Vec<(String, VarKind, Option<usize>)>,
    ) -> Result<Schema> {
        let fields: Vec<Field> = fields
            .into_iter()
            .map(|(name, dtype, shape)| Field {
                name,
                dtype,
                shape,
                elements: 0,
                bytes: 0,
            })
            .collect();
        let var: Vec<VarField> = var
            .into_iter()
            .map(|(name, kind, max_len)| VarField {
                name,
                kind,
                max_len,
            })
            .collect();
        validate(&fields, &var)?;
        let fields = fields
            .into_iter()
            .map(|f| {
                let elements = f.shape.iter().product();
                Field {
                    elements,
                    bytes: elements * f.dtype.size(),
                    ..f
                }
            })
            .collect();
        Ok(Schema { fields, var })
    }

    /// The fixed fields, in storage order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The variable-length fields, in storage order (their slots follow the fixed
    /// fields in the row).
    pub fn var_fields(&self) -> &[VarField] {
        &self.var
    }

    /// The variable-length field with this name.
    pub fn var_field(&self, name: &str) -> Option<&VarField> {
        self.var.iter().find(|f| f.name == name)
    }

    /// Whether items have variable-length fields (the buffer then keeps a chunk ring).
    pub fn has_var(&self) -> bool {
        !self.var.is_empty()
    }

    /// Number of fixed fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether the schema has no fixed fields (a schema of variable-length fields only).
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The field with this name.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Position of the field with this name.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Bytes per item of each fixed field, in storage order.
    pub(crate) fn field_sizes(&self) -> Vec<usize> {
        self.fields.iter().map(Field::bytes).collect()
    }

    /// Bytes of one item's row payload (all fixed fields and the slots of the variable
    /// ones, without padding).
    pub fn item_bytes(&self) -> usize {
        self.fields.iter().map(Field::bytes).sum::<usize>() + self.var.len() * VAR_SLOT_BYTES
    }

    /// The field names joined by commas, for error messages.
    ///
    /// ```
    /// use replaystore::{DType, Schema};
    /// let s = Schema::builder().field("obs", DType::F32, &[3]).field("done", DType::Bool, &[]).build()?;
    /// assert_eq!(s.names(), "obs, done");
    /// # Ok::<(), replaystore::Error>(())
    /// ```
    pub fn names(&self) -> String {
        let names: Vec<&str> = self
            .fields
            .iter()
            .map(|f| f.name.as_str())
            .chain(self.var.iter().map(|f| f.name.as_str()))
            .collect();
        names.join(", ")
    }
}

/// Collects fields for a [`Schema`]; errors surface at [`SchemaBuilder::build`].
///
/// ```
/// use replaystore::{DType, Schema, VarKind};
/// let schema = Schema::builder()
///     .variable("obs", VarKind::Str, Some(8192))
///     .variable("tokens", VarKind::Ragged(DType::I32), Some(2048))
///     .field("reward", DType::F32, &[])
///     .build()?;
/// assert_eq!(schema.var_fields().len(), 2);
/// assert_eq!(schema.var_field("tokens").and_then(|f| f.max_bytes()), Some(8192));
/// # Ok::<(), replaystore::Error>(())
/// ```
#[derive(Debug)]
pub struct SchemaBuilder {
    fields: Vec<(String, DType, Vec<usize>)>,
    var: Vec<(String, VarKind, Option<usize>)>,
}

impl SchemaBuilder {
    /// Adds a field; `shape` is empty for a scalar.
    pub fn field(mut self, name: &str, dtype: DType, shape: &[usize]) -> Self {
        self.fields.push((name.to_owned(), dtype, shape.to_vec()));
        self
    }

    /// Adds a variable-length field, with the most elements a value may have (bytes,
    /// for bytes and text) if `max_len` is given.
    pub fn variable(mut self, name: &str, kind: VarKind, max_len: Option<usize>) -> Self {
        self.var.push((name.to_owned(), kind, max_len));
        self
    }

    /// Checks the fields and builds the schema.
    pub fn build(self) -> Result<Schema> {
        Schema::with_variable(self.fields, self.var)
    }
}

/// Checks one name against the rules and the names before it.
fn check_name<'a>(i: usize, name: &str, before: impl Iterator<Item = &'a str>) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidSchema(format!(
            "field {i}: name must be 1 to {MAX_NAME_LEN} bytes, got {}",
            name.len()
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(Error::InvalidSchema(format!(
            "field {name:?}: name has a control character"
        )));
    }
    if before.into_iter().any(|g| g == name) {
        return Err(Error::InvalidSchema(format!(
            "field {name:?} appears twice"
        )));
    }
    Ok(())
}

fn validate(fields: &[Field], var: &[VarField]) -> Result<()> {
    if fields.is_empty() && var.is_empty() {
        return Err(Error::InvalidSchema(
            "a schema needs at least one field".into(),
        ));
    }
    let count = fields.len() + var.len();
    if count > MAX_FIELDS {
        return Err(Error::InvalidSchema(format!(
            "{count} fields: at most {MAX_FIELDS} are allowed"
        )));
    }
    let mut total: usize = var.len() * VAR_SLOT_BYTES;
    for (i, f) in fields.iter().enumerate() {
        check_name(i, &f.name, fields.iter().take(i).map(|g| g.name.as_str()))?;
        if f.shape.len() > MAX_FIELD_RANK {
            return Err(Error::InvalidSchema(format!(
                "field {:?}: rank {} is over the limit of {MAX_FIELD_RANK}",
                f.name,
                f.shape.len()
            )));
        }
        if f.shape.contains(&0) {
            return Err(Error::InvalidSchema(format!(
                "field {:?}: shape {:?} has a zero dimension",
                f.name, f.shape
            )));
        }
        let bytes = f
            .shape
            .iter()
            .try_fold(f.dtype.size(), |acc, &d| acc.checked_mul(d))
            .filter(|&b| b <= MAX_ITEM_BYTES);
        total = bytes
            .and_then(|b| total.checked_add(b))
            .filter(|&t| t <= MAX_ITEM_BYTES)
            .ok_or_else(|| {
                Error::InvalidSchema(format!(
                    "field {:?}: items would be over {MAX_ITEM_BYTES} bytes",
                    f.name
                ))
            })?;
    }
    for (k, f) in var.iter().enumerate() {
        let before = fields
            .iter()
            .map(|g| g.name.as_str())
            .chain(var.iter().take(k).map(|g| g.name.as_str()));
        check_name(fields.len() + k, &f.name, before)?;
        if let Some(max) = f.max_len {
            let bytes = max.checked_mul(f.kind.dtype().size());
            if max == 0 || bytes.is_none_or(|b| b > MAX_ITEM_BYTES) {
                return Err(Error::InvalidSchema(format!(
                    "field {:?}: max_len {max} must be 1 to {} elements",
                    f.name,
                    MAX_ITEM_BYTES / f.kind.dtype().size()
                )));
            }
        }
    }
    Ok(())
}

// Here rather than beside `DType`: the dtype names are schema text, and `dtype` stays
// below `error` (an error names dtypes).
impl std::str::FromStr for DType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let alias = match s {
            "float32" => "f32",
            "float64" => "f64",
            "int64" => "i64",
            "int32" => "i32",
            "uint8" => "u8",
            other => other,
        };
        DType::ALL
            .into_iter()
            .find(|d| d.name() == alias)
            .ok_or_else(|| Error::InvalidSchema(format!("unknown dtype {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_duplicate_names_zero_dims_and_empty_schemas() {
        let dup = Schema::builder()
            .field("a", DType::U8, &[])
            .field("a", DType::U8, &[])
            .build();
        assert!(matches!(dup, Err(Error::InvalidSchema(m)) if m.contains("twice")));
        let zero = Schema::builder().field("a", DType::U8, &[3, 0]).build();
        assert!(matches!(zero, Err(Error::InvalidSchema(m)) if m.contains("zero")));
        assert!(Schema::builder().build().is_err());
        let huge = Schema::builder()
            .field("a", DType::F64, &[1 << 20, 1 << 20])
            .build();
        assert!(huge.is_err());
    }

    #[test]
    fn variable_fields_share_the_name_rules_and_bound_their_lengths() {
        let s = Schema::builder()
            .variable("obs", VarKind::Str, Some(100))
            .build()
            .expect("a schema of one variable field");
        assert!(s.is_empty() && s.has_var());
        assert_eq!(s.item_bytes(), VAR_SLOT_BYTES);
        let clash = Schema::builder()
            .field("obs", DType::U8, &[])
            .variable("obs", VarKind::Bytes, None)
            .build();
        assert!(matches!(clash, Err(Error::InvalidSchema(m)) if m.contains("twice")));
        let zero = Schema::builder()
            .variable("t", VarKind::Ragged(DType::I32), Some(0))
            .build();
        assert!(matches!(zero, Err(Error::InvalidSchema(m)) if m.contains("max_len")));
        let huge = Schema::builder()
            .variable("t", VarKind::Ragged(DType::F64), Some(MAX_ITEM_BYTES))
            .build();
        assert!(matches!(huge, Err(Error::InvalidSchema(m)) if m.contains("max_len")));
        let mixed = Schema::builder()
            .field("r", DType::F32, &[])
            .variable("tokens", VarKind::Ragged(DType::I32), Some(2048))
            .build()
            .expect("valid");
        assert_eq!(mixed.item_bytes(), 4 + VAR_SLOT_BYTES);
        assert_eq!(mixed.names(), "r, tokens");
        assert_eq!(
            mixed.var_field("tokens").and_then(VarField::max_bytes),
            Some(8192)
        );
    }
}
