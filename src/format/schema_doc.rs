//! The schema as stored in MANIFEST: an rkyv archive, validated (bytecheck) before any
//! byte of it is trusted, then checked again as a [`Schema`].

use rkyv::rancor;

use crate::dtype::DType;
use crate::schema::Schema;

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

/// The archive bytes of a schema.
pub fn encode(schema: &Schema) -> Vec<u8> {
    let doc = SchemaDoc {
        fields: schema
            .fields()
            .iter()
            .map(|f| FieldDoc {
                name: f.name().to_owned(),
                dtype: f.dtype().code(),
                shape: f.shape().iter().map(|&d| d as u64).collect(),
            })
            .collect(),
    };
    match rkyv::to_bytes::<rancor::Error>(&doc) {
        Ok(bytes) => bytes.to_vec(),
        // Serializing owned strings and vectors into a growable buffer cannot fail.
        Err(e) => unreachable!("rkyv serialization of a schema failed: {e}"),
    }
}

/// Validates archive bytes and rebuilds the schema; the message says what is wrong.
pub fn decode(bytes: &[u8]) -> Result<Schema, String> {
    // rkyv reads archives in place and needs them aligned; file bytes come unaligned.
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(bytes);
    let doc = rkyv::access::<ArchivedSchemaDoc, rancor::Error>(&aligned)
        .map_err(|e| format!("schema archive fails validation: {e}"))?;
    let mut fields = Vec::with_capacity(doc.fields.len());
    for (i, f) in doc.fields.iter().enumerate() {
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
    Schema::new(fields).map_err(|e| e.to_string())
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
        assert_eq!(decode(&bytes), Ok(s));
        assert!(decode(&[]).is_err());
        assert!(decode(&[0xff; 64]).is_err());
        let mut flipped = bytes.clone();
        if let Some(last) = flipped.last_mut() {
            *last ^= 0x80;
        }
        // A flip may still validate (it is caught by the manifest's schema crc), but it
        // must never panic.
        let _ = decode(&flipped);
    }
}
