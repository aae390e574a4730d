//! Byte layouts of every file, as pure functions over byte slices: no I/O, no mapping,
//! no panics on hostile input. `docs/FORMAT.md` is the prose version of this module and
//! changes in the same commit.
//!
//! All integers are little-endian. Offsets are chained constants: each field's offset is
//! the previous one's plus its size, so a field cannot silently overlap another.

pub mod group;
pub mod heap;
pub mod lanes;
pub mod lifecycle;
pub mod manifest;
pub mod progress;
pub mod row;
pub mod schema_doc;
pub mod segment;
pub mod state;
pub mod tree;

/// The newest format version this build reads and writes. A buffer's MANIFEST is at
/// version 1, 2 (variable-length fields) or 3 (item states) by what the buffer has
/// (FORMAT.md, version log): this build reads each, and creates a buffer at the one its
/// configuration needs, so a build that cannot read what it has refuses it.
///
/// ```
/// assert_eq!(replaystore::FORMAT_VERSION, 3);
/// ```
pub const FORMAT_VERSION: u32 = LIFECYCLE_VERSION;
/// Version 1: the MANIFEST of a buffer with neither variable-length fields nor item
/// states, and every other versioned file of any buffer (segment headers, the tree, the
/// progress page, LANES, GROUP, a schema archive of fixed fields).
pub const BASE_VERSION: u32 = 1;
/// The MANIFEST version of a buffer whose items have variable-length fields: its
/// superblock describes a chunk ring and its schema archive has the variable fields
/// (FORMAT.md, version log). Every other file, and every buffer without such fields,
/// stays at [`BASE_VERSION`].
pub const HEAP_VERSION: u32 = 2;
/// The MANIFEST version of a buffer that keeps a state word per item (`items.state`):
/// version 2's superblock layout, its chunk ring geometry zero when it has none
/// (FORMAT.md, version log). Builds before it refuse it, so none of them ever draws an
/// item this build removed.
pub const LIFECYCLE_VERSION: u32 = 3;

/// Reads fixed-size little-endian integers from a byte slice without panicking.
pub(crate) struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    pub fn array<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        self.0.get(off..off.checked_add(N)?)?.try_into().ok()
    }
    pub fn u32(&self, off: usize) -> Option<u32> {
        self.array(off).map(u32::from_le_bytes)
    }
    pub fn u64(&self, off: usize) -> Option<u64> {
        self.array(off).map(u64::from_le_bytes)
    }
    pub fn u128(&self, off: usize) -> Option<u128> {
        self.array(off).map(u128::from_le_bytes)
    }
}

/// Writes fixed-size little-endian integers into a byte slice; out-of-range writes are
/// bugs in this module's constants and are caught by its tests.
pub(crate) struct BytesMut<'a>(pub &'a mut [u8]);

impl BytesMut<'_> {
    pub fn put(&mut self, off: usize, bytes: &[u8]) {
        if let Some(dst) = self.0.get_mut(off..off + bytes.len()) {
            dst.copy_from_slice(bytes);
        } else {
            debug_assert!(false, "format constant out of range: {off}+{}", bytes.len());
        }
    }
    pub fn u32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_le_bytes());
    }
    pub fn u64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_le_bytes());
    }
    pub fn u128(&mut self, off: usize, v: u128) {
        self.put(off, &v.to_le_bytes());
    }
}

/// CRC-32 (IEEE) of a byte range; the one checksum of the format.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// A check of decoded bytes that failed, before a file name is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Fewer bytes than the layout needs.
    Short {
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// Wrong magic.
    Magic {
        /// Offset of the magic.
        offset: u64,
        /// Expected magic.
        expected: Vec<u8>,
        /// Found bytes.
        got: Vec<u8>,
    },
    /// A version this build does not read.
    Version(u32),
    /// A version of a file whose versions count on their own (MANIFEST, which this
    /// build reads in 1, 2 and 3; `items.state`): `found`, where this build reads up to
    /// `supported`.
    VersionOf {
        /// The version in the file.
        found: u32,
        /// The newest this build reads.
        supported: u32,
    },
    /// A checksum mismatch.
    Checksum {
        /// Offset of the covered region.
        offset: u64,
        /// Stored checksum.
        stored: u32,
        /// Computed checksum.
        computed: u32,
    },
    /// A field whose value is impossible.
    Field {
        /// Offset of the field.
        offset: u64,
        /// Its name.
        name: &'static str,
        /// What it should be.
        expected: String,
        /// What it is.
        got: String,
    },
}

impl Problem {
    /// Attaches the file name and structure name, giving the public error.
    pub fn into_error(self, file: &std::path::Path, what: &str) -> crate::Error {
        use crate::Error;
        let file = file.to_path_buf();
        match self {
            Problem::Short { need, have } => Error::Truncated {
                file,
                expected: need,
                got: have,
            },
            Problem::Magic {
                offset,
                expected,
                got,
            } => Error::BadMagic {
                file,
                offset,
                expected,
                got,
            },
            Problem::Version(found) => Error::UnsupportedVersion {
                file,
                found,
                supported: BASE_VERSION,
            },
            Problem::VersionOf { found, supported } => Error::UnsupportedVersion {
                file,
                found,
                supported,
            },
            Problem::Checksum {
                offset,
                stored,
                computed,
            } => Error::ChecksumMismatch {
                file,
                offset,
                what: what.to_owned(),
                expected: stored,
                got: computed,
            },
            Problem::Field {
                offset,
                name,
                expected,
                got,
            } => Error::Corrupt {
                file,
                offset,
                field: format!("{what} {name}"),
                expected,
                got,
            },
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Short { need, have } => write!(f, "truncated: need {need} bytes, have {have}"),
            Problem::Magic { offset, .. } => write!(f, "bad magic at offset {offset}"),
            Problem::Version(v) | Problem::VersionOf { found: v, .. } => {
                write!(f, "unsupported version {v}")
            }
            Problem::Checksum {
                offset,
                stored,
                computed,
            } => write!(
                f,
                "checksum mismatch at offset {offset}: stored {stored:#010x}, computed {computed:#010x}"
            ),
            Problem::Field {
                offset,
                name,
                expected,
                got,
            } => write!(
                f,
                "{name} at offset {offset}: expected {expected}, got {got}"
            ),
        }
    }
}

/// Checks that `bytes` has at least `need` bytes.
pub(crate) fn need(bytes: &[u8], need: usize) -> Result<(), Problem> {
    if bytes.len() < need {
        Err(Problem::Short {
            need: need as u64,
            have: bytes.len() as u64,
        })
    } else {
        Ok(())
    }
}

/// Checks a magic at `off`.
pub(crate) fn magic(bytes: &[u8], off: usize, expected: &[u8]) -> Result<(), Problem> {
    let got = bytes.get(off..off + expected.len()).unwrap_or(&[]);
    if got == expected {
        Ok(())
    } else {
        Err(Problem::Magic {
            offset: off as u64,
            expected: expected.to_vec(),
            got: got.to_vec(),
        })
    }
}

/// The checks every fixed header starts with: magic at 0, at least `len` bytes, the CRC
/// of `bytes[..crc_off]` stored at `crc_off`, then the format version at `version_off`.
pub(crate) fn preamble(
    bytes: &[u8],
    expected_magic: &[u8],
    len: usize,
    crc_off: usize,
    version_off: usize,
) -> Result<(), Problem> {
    let version = sealed_version(bytes, expected_magic, len, crc_off, version_off)?;
    if version != BASE_VERSION {
        return Err(Problem::Version(version));
    }
    Ok(())
}

/// The preamble's checks but the last: the version at `version_off`, for a file whose
/// versions count on their own and are judged by its decoder.
pub(crate) fn sealed_version(
    bytes: &[u8],
    expected_magic: &[u8],
    len: usize,
    crc_off: usize,
    version_off: usize,
) -> Result<u32, Problem> {
    need(bytes, expected_magic.len())?;
    magic(bytes, 0, expected_magic)?;
    need(bytes, len)?;
    checksum(bytes, 0, crc_off, crc_off)?;
    Ok(Bytes(bytes).u32(version_off).unwrap_or(0))
}

/// Checks a stored CRC over `bytes[start..end]` found at `crc_off`.
pub(crate) fn checksum(
    bytes: &[u8],
    start: usize,
    end: usize,
    crc_off: usize,
) -> Result<(), Problem> {
    let r = Bytes(bytes);
    let stored = r.u32(crc_off).ok_or(Problem::Short {
        need: (crc_off + 4) as u64,
        have: bytes.len() as u64,
    })?;
    let computed = crc32(bytes.get(start..end).unwrap_or(&[]));
    if stored == computed {
        Ok(())
    } else {
        Err(Problem::Checksum {
            offset: start as u64,
            stored,
            computed,
        })
    }
}
