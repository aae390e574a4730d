//! Element types of fields, and the Rust types that carry them.

use std::fmt;

/// The element type of a field. The discriminant is the byte stored in the schema on
/// disk, so variants are never renumbered.
///
/// ```
/// use replaystore::DType;
/// assert_eq!(DType::F32.size(), 4);
/// assert_eq!(DType::from_code(DType::I64.code()), Some(DType::I64));
/// assert_eq!("f64".parse::<DType>().ok(), Some(DType::F64));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// One byte, 0 or 1.
    Bool = 1,
    /// Unsigned 8-bit integer.
    U8 = 2,
    /// Signed 8-bit integer.
    I8 = 3,
    /// Unsigned 16-bit integer.
    U16 = 4,
    /// Signed 16-bit integer.
    I16 = 5,
    /// Unsigned 32-bit integer.
    U32 = 6,
    /// Signed 32-bit integer.
    I32 = 7,
    /// Unsigned 64-bit integer.
    U64 = 8,
    /// Signed 64-bit integer.
    I64 = 9,
    /// IEEE 754 single precision.
    F32 = 10,
    /// IEEE 754 double precision.
    F64 = 11,
}

impl DType {
    /// Every dtype, in code order.
    pub const ALL: [DType; 11] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F32,
        DType::F64,
    ];

    /// Whether it is a signed or unsigned integer (not bool, not a float).
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            DType::U8
                | DType::I8
                | DType::U16
                | DType::I16
                | DType::U32
                | DType::I32
                | DType::U64
                | DType::I64
        )
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The code stored on disk.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The dtype for an on-disk code, if it is one.
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.code() == code)
    }

    /// The first element of `b` (little-endian bytes of this dtype) as f64; zeros stand
    /// in for bytes `b` lacks.
    ///
    /// ```
    /// use replaystore::DType;
    /// assert_eq!(DType::I16.decode_f64(&(-9i16).to_le_bytes()), -9.0);
    /// assert_eq!(DType::F32.decode_f64(&DType::F32.encode_f64(0.5)), 0.5);
    /// ```
    pub fn decode_f64(self, b: &[u8]) -> f64 {
        fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
            b.get(..N).and_then(|s| s.try_into().ok()).unwrap_or([0; N])
        }
        match self {
            DType::Bool | DType::U8 => f64::from(arr::<1>(b)[0]),
            DType::I8 => f64::from(i8::from_le_bytes(arr(b))),
            DType::U16 => f64::from(u16::from_le_bytes(arr(b))),
            DType::I16 => f64::from(i16::from_le_bytes(arr(b))),
            DType::U32 => f64::from(u32::from_le_bytes(arr(b))),
            DType::I32 => f64::from(i32::from_le_bytes(arr(b))),
            DType::U64 => u64::from_le_bytes(arr(b)) as f64,
            DType::I64 => i64::from_le_bytes(arr(b)) as f64,
            DType::F32 => f64::from(f32::from_le_bytes(arr(b))),
            DType::F64 => f64::from_le_bytes(arr(b)),
        }
    }

    /// `v` as one element of this dtype, little-endian, in the first `size()` bytes:
    /// converted as NumPy's `astype` does (saturating for integers; nonzero is true).
    ///
    /// ```
    /// use replaystore::DType;
    /// assert_eq!(&DType::I16.encode_f64(-9.0)[..2], &(-9i16).to_le_bytes());
    /// assert_eq!(DType::Bool.encode_f64(0.5)[0], 1);
    /// ```
    pub fn encode_f64(self, v: f64) -> [u8; 8] {
        let mut b = [0u8; 8];
        let mut put = |bytes: &[u8]| {
            for (d, s) in b.iter_mut().zip(bytes) {
                *d = *s;
            }
        };
        match self {
            DType::Bool => put(&[u8::from(v != 0.0)]),
            DType::U8 => put(&(v as u8).to_le_bytes()),
            DType::I8 => put(&(v as i8).to_le_bytes()),
            DType::U16 => put(&(v as u16).to_le_bytes()),
            DType::I16 => put(&(v as i16).to_le_bytes()),
            DType::U32 => put(&(v as u32).to_le_bytes()),
            DType::I32 => put(&(v as i32).to_le_bytes()),
            DType::U64 => put(&(v as u64).to_le_bytes()),
            DType::I64 => put(&(v as i64).to_le_bytes()),
            DType::F32 => put(&(v as f32).to_le_bytes()),
            DType::F64 => put(&v.to_le_bytes()),
        }
        b
    }

    /// The NumPy-style name (`f32`, `bool`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// NumPy's `dtype.str` for this type: little-endian, or `|` where byte order is moot
    /// (what `.npy` headers and the Python package use).
    ///
    /// ```
    /// use replaystore::DType;
    /// assert_eq!(DType::F32.numpy_str(), "<f4");
    /// assert_eq!(DType::from_numpy_str("|b1"), Ok(DType::Bool));
    /// assert!(DType::from_numpy_str(">f4").is_err());
    /// ```
    pub const fn numpy_str(self) -> &'static str {
        match self {
            DType::Bool => "|b1",
            DType::U8 => "|u1",
            DType::I8 => "|i1",
            DType::U16 => "<u2",
            DType::I16 => "<i2",
            DType::U32 => "<u4",
            DType::I32 => "<i4",
            DType::U64 => "<u8",
            DType::I64 => "<i8",
            DType::F32 => "<f4",
            DType::F64 => "<f8",
        }
    }

    /// The type a NumPy `dtype.str` names, accepting every spelling of little-endian or
    /// no byte order (`<`, `|`, `=`, and `>` for one-byte types); the error says why not.
    pub fn from_numpy_str(s: &str) -> std::result::Result<DType, String> {
        let (order, code) = s.split_at(s.len().min(1));
        if order == ">" && !matches!(code, "b1" | "u1" | "i1") {
            return Err(format!(
                "dtype {s:?} is big-endian: convert it with arr.astype(arr.dtype.newbyteorder('<'))"
            ));
        }
        if !matches!(order, "<" | "|" | "=" | ">") {
            return Err(format!("dtype {s:?} is not a plain numeric dtype"));
        }
        DType::ALL
            .into_iter()
            .find(|d| d.numpy_str().get(1..) == Some(code))
            .ok_or_else(|| {
                format!(
                    "dtype {s:?} has no replaystore equivalent (bool, u8..u64, i8..i64, f32, f64)"
                )
            })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    #[expect(
        unnameable_types,
        reason = "sealed: callers may reach it through a public trait but not name or implement it"
    )]
    pub trait Sealed {}
}

/// A Rust type that is the element of one [`DType`]. Sealed: the byte views the engine
/// takes of these types are only sound for plain numbers and `bool`.
pub trait Element: sealed::Sealed + bytemuck::NoUninit + Copy + 'static {
    /// The dtype this type stores as.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

element!(
    bool => Bool, u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64,
);
