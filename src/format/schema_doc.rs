//! The schema as stored in MANIFEST: an rkyv archive, validated (bytecheck) before any
//! byte of it is trusted, then checked again as a [`Schema`]. Version-1 buffers hold a
//! [`SchemaDoc`]; version-2 buffers (items with variable-length fields) a
//! [`SchemaDocV2`]. The superblock's version says which: a schema without variable
//! fields is archived exactly as before, so version-1 buffers stay byte for byte the
//! same.

use rkyv::rancor;

use crate::dtype::DType;
use crate::schema::{Schema, VarKind};

/// The archived form of a schema. Field order is storage order.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug)]
pub struct SchemaDoc {
    /// The fields, in storage order.
    pub fields: Vec<FieldDoc>,
}

/// The archived form of one field.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug)]
pub struct FieldDoc {
    /// Field name.
    pub name: String,
    /// `DType::code()`.
    pub dtype: u8,
    /// Dimensions; empty for a scalar.
    pub shape: Vec<u64>,
}

/// The archived form of a schema with variable-length fields (format version 2).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug)]
pub struct SchemaDocV2 {
    /// The fixed fields, in storage order.
    pub fields: Vec<FieldDoc>,
    /// The variable-length fields, in storage order (their slots follow the fixed ones).
    pub var: Vec<VarFieldDoc>,
}

/// The archived form of one variable-length field.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug)]
pub struct VarFieldDoc {
    /// Field name.
    pub name: String,
    /// 0 bytes, 1 str, 2 ragged.
    pub kind: u8,
    /// `DType::code()` of a ragged field's elements (`u8` for bytes and str).
    pub dtype: u8,
    /// Most elements a value may have; 0 when the schema declares no maximum.
    pub max_len: u64,
}

/// Archive code of a variable-length kind.
const KIND_BYTES: u8 = 0;
const KIND_STR: u8 = 1;
const KIND_RAGGED: u8 = 2;

fn field_docs(schema: &Schema) -> Vec<FieldDoc> {
    schema
        .fields()
        .iter()
        .map(|f| FieldDoc {
            name: f.name().to_owned(),
            dtype: f.dtype().code(),
            shape: f.shape().iter().map(|&d| d as u64).collect(),
        })
        .collect()
}

/// The archive bytes of a schema: a [`SchemaDoc`] when it has no variable-length fields
/// (format version 1), else a [`SchemaDocV2`].
pub fn encode(schema: &Schema) -> Vec<u8> {
    let bytes = if schema.has_var() {
        let doc = SchemaDocV2 {
            fields: field_docs(schema),
            var: schema
                .var_fields()
                .iter()
                .map(|f| VarFieldDoc {
                    name: f.name().to_owned(),
                    kind: match f.kind() {
                        VarKind::Bytes => KIND_BYTES,
                        VarKind::Str => KIND_STR,
                        VarKind::Ragged(_) => KIND_RAGGED,
                    },
                    dtype: f.kind().dtype().code(),
                    max_len: f.max_len().map_or(0, |n| n as u64),
                })
                .collect(),
        };
        rkyv::to_bytes::<rancor::Error>(&doc)
    } else {
        rkyv::to_bytes::<rancor::Error>(&SchemaDoc {
            fields: field_docs(schema),
        })
    };
    match bytes {
        Ok(bytes) => bytes.to_vec(),
        // Serializing owned strings and vectors into a growable buffer cannot fail.
        Err(e) => unreachable!("rkyv serialization of a schema failed: {e}"),
    }
}

/// The fixed fields of an archive, checked for known dtypes and sizes.
fn fixed_fields(
    docs: &rkyv::vec::ArchivedVec<ArchivedFieldDoc>,
) -> Result<Vec<(String, DType, Vec<usize>)>, String> {
    let mut fields = Vec::with_capacity(docs.len());
    for (i, f) in docs.iter().enumerate() {
        let dtype = DType::from_code(f.dtype)
            .ok_or_else(|| format!("field {i}: unknown dtype code {}", f.dtype))?;
        let shape = f
            .shape
            .iter()
            .map(|d| {
                usize::try_from(d.to_native())
                    .map_err(|_| format!("field {i}: dimension {d} too large"))
            })
            .collect::<Result<Vec<usize>, String>>()?;
        fields.push((f.name.as_str().to_owned(), dtype, shape));
    }
    Ok(fields)
}

/// Validates archive bytes of a MANIFEST of format `version` (1 or 2) and rebuilds the
/// schema; the message says what is wrong. A version-1 archive holding a variable
/// field, or a version-2 one holding none, is refused: the superblock and the schema
/// must agree on whether a chunk ring exists.
pub fn decode(bytes: &[u8], version: u32) -> Result<Schema, String> {
    // rkyv reads archives in place and needs them aligned; file bytes come unaligned.
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(bytes);
    if version != super::HEAP_VERSION {
        let doc = rkyv::access::<ArchivedSchemaDoc, rancor::Error>(&aligned)
            .map_err(|e| format!("schema archive fails validation: {e}"))?;
        return Schema::new(fixed_fields(&doc.fields)?).map_err(|e| e.to_string());
    }
    let doc = rkyv::access::<ArchivedSchemaDocV2, rancor::Error>(&aligned)
        .map_err(|e| format!("schema archive (version 2) fails validation: {e}"))?;
    let fields = fixed_fields(&doc.fields)?;
    let mut var = Vec::with_capacity(doc.var.len());
    for (k, f) in doc.var.iter().enumerate() {
        let dtype = DType::from_code(f.dtype)
            .ok_or_else(|| format!("variable field {k}: unknown dtype code {}", f.dtype))?;
        let kind = match (f.kind, dtype) {
            (KIND_BYTES, DType::U8) => VarKind::Bytes,
            (KIND_STR, DType::U8) => VarKind::Str,
            (KIND_RAGGED, d) => VarKind::Ragged(d),
            (kind, d) => {
                return Err(format!(
                    "variable field {k}: kind {kind} with dtype {} is not a known kind",
                    d.name()
                ));
            }
        };
        let max_len = match f.max_len.to_native() {
            0 => None,
            n => Some(usize::try_from(n).map_err(|_| format!("variable field {k}: max_len {n}"))?),
        };
        var.push((f.name.as_str().to_owned(), kind, max_len));
    }
    if var.is_empty() {
        return Err("a version-2 schema archive has no variable-length field".into());
    }
    Schema::with_variable(fields, var).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_round_trips_and_garbage_is_refused() {
        let s = Schema::builder()
            .field("obs", DType::U8, &[4, 84, 84])
            .field("r", DType::F32, &[])
            .build()
            .expect("valid schema");
        let bytes = encode(&s);
        assert_eq!(decode(&bytes, 1), Ok(s));
        assert!(decode(&[], 1).is_err());
        assert!(decode(&[0xff; 64], 1).is_err());
        let mut flipped = bytes.clone();
        if let Some(last) = flipped.last_mut() {
            *last ^= 0x80;
        }
        // A flip may still validate (it is caught by the manifest's schema crc), but it
        // must never panic.
        let _ = decode(&flipped, 1);
    }

    #[test]
    fn variable_fields_round_trip_in_version_2_and_only_there() {
        let s = Schema::builder()
            .field("reward", DType::F32, &[])
            .variable("obs", VarKind::Str, Some(8192))
            .variable("blob", VarKind::Bytes, None)
            .variable("tokens", VarKind::Ragged(DType::I32), Some(2048))
            .build()
            .expect("valid schema");
        let bytes = encode(&s);
        assert_eq!(decode(&bytes, 2), Ok(s.clone()));
        // Read as version 1, the archive is not a version-1 schema of the same fields.
        assert_ne!(decode(&bytes, 1), Ok(s));
        // A fixed-only schema is archived as before, and is refused as version 2.
        let fixed = Schema::builder()
            .field("x", DType::U8, &[])
            .build()
            .expect("valid");
        assert!(decode(&encode(&fixed), 2).is_err());
        assert!(decode(&[0xff; 64], 2).is_err());
    }
}
