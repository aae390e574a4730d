//! What an item is: named fields, each a dtype and a fixed shape.

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
}

impl Schema {
    /// Starts a schema.
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder { fields: Vec::new() }
    }

    /// Builds a schema from fields, checking names, shapes and sizes.
    pub fn new(fields: Vec<(String, DType, Vec<usize>)>) -> Result<Schema> {
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
        validate(&fields)?;
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
        Ok(Schema { fields })
    }

    /// The fields, in storage order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether the schema has no fields (never true of a built schema).
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

    /// Bytes of one item's payload (all fields, without padding).
    pub fn item_bytes(&self) -> usize {
        self.fields.iter().map(Field::bytes).sum()
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
        let names: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
        names.join(", ")
    }
}

/// Collects fields for a [`Schema`]; errors surface at [`SchemaBuilder::build`].
#[derive(Debug)]
pub struct SchemaBuilder {
    fields: Vec<(String, DType, Vec<usize>)>,
}

impl SchemaBuilder {
    /// Adds a field; `shape` is empty for a scalar.
    pub fn field(mut self, name: &str, dtype: DType, shape: &[usize]) -> Self {
        self.fields.push((name.to_owned(), dtype, shape.to_vec()));
        self
    }

    /// Checks the fields and builds the schema.
    pub fn build(self) -> Result<Schema> {
        Schema::new(self.fields)
    }
}

fn validate(fields: &[Field]) -> Result<()> {
    if fields.is_empty() {
        return Err(Error::InvalidSchema(
            "a schema needs at least one field".into(),
        ));
    }
    if fields.len() > MAX_FIELDS {
        return Err(Error::InvalidSchema(format!(
            "{} fields: at most {MAX_FIELDS} are allowed",
            fields.len()
        )));
    }
    let mut total: usize = 0;
    for (i, f) in fields.iter().enumerate() {
        if f.name.is_empty() || f.name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidSchema(format!(
                "field {i}: name must be 1 to {MAX_NAME_LEN} bytes, got {}",
                f.name.len()
            )));
        }
        if f.name.chars().any(char::is_control) {
            return Err(Error::InvalidSchema(format!(
                "field {:?}: name has a control character",
                f.name
            )));
        }
        if fields.iter().take(i).any(|g| g.name == f.name) {
            return Err(Error::InvalidSchema(format!(
                "field {:?} appears twice",
                f.name
            )));
        }
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
}
