//! The bytes of NumPy's `.npz`: a ZIP archive of `.npy` arrays. Pure layout code: what
//! goes where and what a header says; the file I/O is in `transfer`.
//!
//! Written archives are deterministic (fixed timestamps, entries in schema order,
//! stored uncompressed), so exporting the same items twice gives the same bytes. ZIP64
//! records are written only when a size or offset needs them, as `numpy.load` (Python's
//! `zipfile`) reads both.

use replaystore::DType;

/// `.npy` magic: `\x93NUMPY`.
const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy aligns the data after an `.npy` header to this many bytes.
const NPY_ALIGN: usize = 64;

/// ZIP signatures (little-endian u32s).
const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const END_SIG: u32 = 0x0605_4b50;
const END64_SIG: u32 = 0x0606_4b50;
const LOCATOR64_SIG: u32 = 0x0706_4b50;
/// Fixed part of a local file header.
pub const LOCAL_LEN: usize = 30;
/// Fixed part of a central directory entry.
const CENTRAL_LEN: usize = 46;
/// Fixed part of the end-of-central-directory record.
const END_LEN: usize = 22;
const END64_LEN: usize = 56;
const LOCATOR64_LEN: usize = 20;
/// Header id of the ZIP64 extended-information extra field.
const ZIP64_EXTRA: u16 = 0x0001;
/// A 32-bit size or offset field that says "see the ZIP64 extra field".
const FULL32: u32 = u32::MAX;
/// General-purpose flag bit 11: the name is UTF-8.
const UTF8_NAME: u16 = 1 << 11;
/// MS-DOS date of 1980-01-01, the earliest a ZIP can say: fixed so bytes are repeatable.
const DOS_DATE: u16 = (1 << 5) | 1;
/// "Version needed to extract": 2.0 for stored entries, 4.5 for ZIP64.
const VERSION_20: u16 = 20;
const VERSION_45: u16 = 45;
/// The compression methods a reader meets in `.npz` files: `np.savez` stores,
/// `np.savez_compressed` deflates.
pub const STORED: u16 = 0;
/// The ZIP method number of deflated members (`np.savez_compressed`).
pub const DEFLATED: u16 = 8;

/// What an `.npy` header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// The `descr` string.
    pub descr: String,
    /// Whether the data is in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The array's shape.
    pub shape: Vec<u64>,
    /// Bytes from the start of the `.npy` to its data.
    pub data_offset: usize,
}

/// The `.npy` header (magic, version, length, dict, padding) of a C-order array, as
/// NumPy writes it: version 1.0 unless the dict needs more than 65,535 bytes.
pub fn npy_header(dtype: DType, shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        dtype.numpy_str()
    );
    let build = |len_bytes: usize, version: u8| {
        let fixed = NPY_MAGIC.len() + 2 + len_bytes;
        // The dict, spaces, and a newline, up to a multiple of NPY_ALIGN.
        let total = (fixed + dict.len() + 1).div_ceil(NPY_ALIGN) * NPY_ALIGN;
        let header_len = total - fixed;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(NPY_MAGIC);
        out.extend_from_slice(&[version, 0]);
        if len_bytes == 2 {
            out.extend_from_slice(&(header_len as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header_len as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(total - 1, b' ');
        out.push(b'\n');
        out
    };
    let v1 = build(2, 1);
    if v1.len() - NPY_MAGIC.len() - 4 <= usize::from(u16::MAX) {
        v1
    } else {
        build(4, 2)
    }
}

/// The bytes before an `.npy` header's dict (magic, version, length: 10 for version 1,
/// 12 for versions 2 and 3), from its first bytes.
pub fn npy_prefix_len(bytes: &[u8]) -> Result<usize, String> {
    let magic = bytes.get(..NPY_MAGIC.len()).unwrap_or(bytes);
    if magic != NPY_MAGIC {
        return Err(format!(
            "not an .npy array: expected magic {NPY_MAGIC:?}, got {magic:?}"
        ));
    }
    match bytes.get(6) {
        Some(1) => Ok(10),
        Some(2 | 3) => Ok(12),
        Some(v) => Err(format!(".npy version {v} is not known (1, 2 and 3 are)")),
        None => Err("no .npy version".into()),
    }
}

/// The length of an `.npy` header's dict, from its prefix.
pub fn npy_dict_len(bytes: &[u8]) -> Result<usize, String> {
    match npy_prefix_len(bytes)? {
        10 => Ok(usize::from(u16_at(bytes, 8)?)),
        _ => Ok(u32_at(bytes, 8)? as usize),
    }
}

/// The longest `.npy` header `import` reads: NumPy pads its headers to 64 bytes and
/// caps what it reads at 10,000 bytes by default; this leaves room for any dict it
/// writes while keeping a crafted length from becoming a huge allocation.
pub const MAX_HEADER_LEN: usize = 1 << 16;

/// Reads an `.npy` header from the start of `bytes` (which must hold all of it).
pub fn parse_npy_header(bytes: &[u8]) -> Result<NpyHeader, String> {
    let start = npy_prefix_len(bytes)?;
    let len = npy_dict_len(bytes)?;
    let dict = bytes
        .get(start..start + len)
        .ok_or_else(|| format!("header of {len} bytes runs past the array's end"))?;
    let dict = std::str::from_utf8(dict).map_err(|_| "header is not text".to_string())?;
    let mut p = DictParser {
        s: dict.trim_end().as_bytes(),
        at: 0,
    };
    let (descr, fortran_order, shape) = p.dict()?;
    Ok(NpyHeader {
        descr,
        fortran_order,
        shape,
        data_offset: start + len,
    })
}

/// A parser for the Python literal dict an `.npy` header holds:
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 17), }`.
struct DictParser<'a> {
    s: &'a [u8],
    at: usize,
}

impl DictParser<'_> {
    fn skip_space(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip_space();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!(
                "header: expected {:?} at byte {}",
                char::from(c),
                self.at
            ))
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.skip_space();
        let quote = *self
            .s
            .get(self.at)
            .filter(|&&q| q == b'\'' || q == b'"')
            .ok_or_else(|| format!("header: expected a string at byte {}", self.at))?;
        let start = self.at + 1;
        let len = self
            .s
            .get(start..)
            .and_then(|rest| rest.iter().position(|&c| c == quote))
            .ok_or("header: unterminated string")?;
        self.at = start + len + 1;
        Ok(String::from_utf8_lossy(self.s.get(start..start + len).unwrap_or(&[])).into_owned())
    }

    fn word(&mut self) -> &[u8] {
        self.skip_space();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            self.at += 1;
        }
        self.s.get(start..self.at).unwrap_or(&[])
    }

    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        while !self.eat(b')') {
            let w = self.word();
            let w = w.strip_suffix(b"L").unwrap_or(w);
            let dim = std::str::from_utf8(w)
                .ok()
                .and_then(|w| w.parse::<u64>().ok())
                .ok_or_else(|| {
                    format!("header: a shape entry at byte {} is not a size", self.at)
                })?;
            dims.push(dim);
            if !self.eat(b',') {
                self.expect(b')')?;
                break;
            }
        }
        Ok(dims)
    }

    fn dict(&mut self) -> Result<(String, bool, Vec<u64>), String> {
        self.expect(b'{')?;
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        while !self.eat(b'}') {
            let key = self.string()?;
            self.expect(b':')?;
            match key.as_str() {
                "descr" => {
                    self.skip_space();
                    if self.s.get(self.at) == Some(&b'[') {
                        return Err("a structured (record) dtype: save one array per field".into());
                    }
                    descr = Some(self.string()?);
                }
                "fortran_order" => {
                    fortran = Some(match self.word() {
                        b"True" => true,
                        b"False" => false,
                        _ => return Err("header: fortran_order is not True or False".into()),
                    });
                }
                "shape" => shape = Some(self.tuple()?),
                other => return Err(format!("header: unexpected key {other:?}")),
            }
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        match (descr, fortran, shape) {
            (Some(d), Some(f), Some(s)) => Ok((d, f, s)),
            _ => Err("header lacks descr, fortran_order or shape".into()),
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    b.get(at..at + 2)
        .and_then(|s| s.try_into().ok())
        .map(u16::from_le_bytes)
        .ok_or_else(|| format!("truncated at byte {at}"))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| format!("truncated at byte {at}"))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| format!("truncated at byte {at}"))
}

/// One archive member as the central directory lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name (`obs.npy`).
    pub name: String,
    /// CRC-32 of its bytes.
    pub crc: u32,
    /// Its length, uncompressed.
    pub size: u64,
    /// Its length in the archive (the same when stored).
    pub compressed: u64,
    /// Where its local header starts.
    pub header_offset: u64,
    /// Its compression method (0 stored, 8 deflated).
    pub method: u16,
}

impl Entry {
    /// A stored (uncompressed) member of `size` bytes whose header is at `header_offset`;
    /// its CRC is filled in once its bytes are written.
    pub fn stored(name: &str, size: u64, header_offset: u64) -> Entry {
        Entry {
            name: name.into(),
            crc: 0,
            size,
            compressed: size,
            header_offset,
            method: STORED,
        }
    }

    /// General-purpose flags: bit 11 says the name is UTF-8 (readers take it as CP437
    /// otherwise, and field names may be any Unicode).
    fn flags(&self) -> u16 {
        if self.name.is_ascii() { 0 } else { UTF8_NAME }
    }

    /// Whether the entry needs ZIP64 fields.
    fn zip64(&self) -> bool {
        self.size >= u64::from(FULL32) || self.header_offset >= u64::from(FULL32)
    }

    /// Bytes of its local header (fixed part, name, extra).
    pub fn local_len(name: &str, size: u64, header_offset: u64) -> usize {
        let e = Entry::stored(name, size, header_offset);
        e.local_header().len()
    }

    /// The local file header that precedes the entry's bytes.
    pub fn local_header(&self) -> Vec<u8> {
        let zip64 = self.zip64();
        let mut out = Vec::with_capacity(LOCAL_LEN + self.name.len() + 20);
        put32(&mut out, LOCAL_SIG);
        put16(&mut out, if zip64 { VERSION_45 } else { VERSION_20 });
        put16(&mut out, self.flags());
        put16(&mut out, STORED);
        put16(&mut out, 0); // time 00:00
        put16(&mut out, DOS_DATE);
        put32(&mut out, self.crc);
        let size32 = if zip64 { FULL32 } else { self.size as u32 };
        put32(&mut out, size32); // compressed
        put32(&mut out, size32); // uncompressed
        put16(&mut out, self.name.len() as u16);
        put16(&mut out, if zip64 { 20 } else { 0 });
        out.extend_from_slice(self.name.as_bytes());
        if zip64 {
            put16(&mut out, ZIP64_EXTRA);
            put16(&mut out, 16);
            put64(&mut out, self.size);
            put64(&mut out, self.size);
        }
        out
    }

    fn central(&self, out: &mut Vec<u8>) {
        let zip64 = self.zip64();
        put32(out, CENTRAL_SIG);
        put16(out, if zip64 { VERSION_45 } else { VERSION_20 }); // made by (MS-DOS)
        put16(out, if zip64 { VERSION_45 } else { VERSION_20 });
        put16(out, self.flags());
        put16(out, STORED);
        put16(out, 0); // time 00:00
        put16(out, DOS_DATE);
        put32(out, self.crc);
        let size32 = if zip64 { FULL32 } else { self.size as u32 };
        put32(out, size32);
        put32(out, size32);
        put16(out, self.name.len() as u16);
        put16(out, if zip64 { 28 } else { 0 });
        put16(out, 0); // comment
        put16(out, 0); // disk
        put16(out, 0); // internal attributes
        put32(out, 0o100_644 << 16); // external: a regular file, rw-r--r--
        put32(
            out,
            if zip64 {
                FULL32
            } else {
                self.header_offset as u32
            },
        );
        out.extend_from_slice(self.name.as_bytes());
        if zip64 {
            put16(out, ZIP64_EXTRA);
            put16(out, 24);
            put64(out, self.size);
            put64(out, self.size);
            put64(out, self.header_offset);
        }
    }
}

/// The central directory and end records for `entries`, which start at `offset`.
pub fn directory(entries: &[Entry], offset: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        e.central(&mut out);
    }
    let size = out.len() as u64;
    let count = entries.len() as u64;
    let zip64 = count >= u64::from(u16::MAX)
        || size >= u64::from(FULL32)
        || offset >= u64::from(FULL32)
        || entries.iter().any(Entry::zip64);
    if zip64 {
        let end64_at = offset + size;
        put32(&mut out, END64_SIG);
        put64(&mut out, (END64_LEN - 12) as u64);
        put16(&mut out, VERSION_45);
        put16(&mut out, VERSION_45);
        put32(&mut out, 0);
        put32(&mut out, 0);
        put64(&mut out, count);
        put64(&mut out, count);
        put64(&mut out, size);
        put64(&mut out, offset);
        put32(&mut out, LOCATOR64_SIG);
        put32(&mut out, 0);
        put64(&mut out, end64_at);
        put32(&mut out, 1);
    }
    let c16 = if zip64 { u16::MAX } else { count as u16 };
    put32(&mut out, END_SIG);
    put16(&mut out, 0);
    put16(&mut out, 0);
    put16(&mut out, c16);
    put16(&mut out, c16);
    put32(&mut out, if zip64 { FULL32 } else { size as u32 });
    put32(&mut out, if zip64 { FULL32 } else { offset as u32 });
    put16(&mut out, 0);
    out
}

/// How many bytes from the end of an archive can hold its end records: the end record
/// with a comment of at most 65,535 bytes, after the ZIP64 end record and locator.
pub const TAIL_SEARCH: u64 = (END64_LEN + LOCATOR64_LEN + END_LEN + 65_535) as u64;

/// Where the central directory is and how many entries it lists.
pub struct DirectorySpan {
    /// Offset of the central directory.
    pub offset: u64,
    /// Its length.
    pub size: u64,
    /// Entries it lists.
    pub count: u64,
}

/// Finds the end records in `tail` (the archive's last bytes, starting at `tail_offset`).
pub fn find_directory(tail: &[u8], tail_offset: u64) -> Result<DirectorySpan, String> {
    let end = (0..=tail.len().saturating_sub(END_LEN))
        .rev()
        .find(|&at| u32_at(tail, at) == Ok(END_SIG))
        .ok_or("not a ZIP archive (no end-of-central-directory record)")?;
    let count16 = u16_at(tail, end + 10)?;
    let size32 = u32_at(tail, end + 12)?;
    let offset32 = u32_at(tail, end + 16)?;
    let locator = end.checked_sub(LOCATOR64_LEN);
    let zip64 = locator.is_some_and(|at| u32_at(tail, at) == Ok(LOCATOR64_SIG));
    if !zip64 {
        return Ok(DirectorySpan {
            offset: u64::from(offset32),
            size: u64::from(size32),
            count: u64::from(count16),
        });
    }
    let at = locator.unwrap_or(0);
    let end64 = u64_at(tail, at + 8)?;
    let rel = end64
        .checked_sub(tail_offset)
        .and_then(|r| usize::try_from(r).ok())
        .ok_or("the ZIP64 end record lies before the archive's last 64 KiB")?;
    if u32_at(tail, rel) != Ok(END64_SIG) {
        return Err(format!("no ZIP64 end record at offset {end64}"));
    }
    Ok(DirectorySpan {
        count: u64_at(tail, rel + 32)?,
        size: u64_at(tail, rel + 40)?,
        offset: u64_at(tail, rel + 48)?,
    })
}

/// Reads the central directory's entries.
pub fn parse_directory(dir: &[u8], count: u64) -> Result<Vec<Entry>, String> {
    let mut at = 0;
    let mut out = Vec::new();
    for i in 0..count {
        if u32_at(dir, at) != Ok(CENTRAL_SIG) {
            return Err(format!("central directory entry {i}: bad signature"));
        }
        let flags = u16_at(dir, at + 8)?;
        let method = u16_at(dir, at + 10)?;
        let crc = u32_at(dir, at + 16)?;
        let csize = u32_at(dir, at + 20)?;
        let usize32 = u32_at(dir, at + 24)?;
        let nlen = usize::from(u16_at(dir, at + 28)?);
        let elen = usize::from(u16_at(dir, at + 30)?);
        let clen = usize::from(u16_at(dir, at + 32)?);
        let lho = u32_at(dir, at + 42)?;
        let name_at = at + CENTRAL_LEN;
        let name = dir
            .get(name_at..name_at + nlen)
            .ok_or_else(|| format!("central directory entry {i}: name runs past the end"))?;
        let name = String::from_utf8_lossy(name).into_owned();
        if flags & 1 != 0 {
            return Err(format!("{name}: encrypted members are not supported"));
        }
        let extra = dir
            .get(name_at + nlen..name_at + nlen + elen)
            .ok_or_else(|| format!("{name}: extra field runs past the end"))?;
        // ZIP64 values appear in this order, each only when its 32-bit field is full.
        let mut z64 = zip64_values(extra);
        let mut next = |v32: u32| -> Result<u64, String> {
            if v32 == FULL32 {
                z64.next()
                    .ok_or_else(|| format!("{name}: a full 32-bit field without its ZIP64 value"))
            } else {
                Ok(u64::from(v32))
            }
        };
        let size = next(usize32)?;
        let compressed = next(csize)?;
        let header_offset = next(lho)?;
        if method == STORED && compressed != size {
            return Err(format!(
                "{name}: stored with {compressed} bytes on disk for {size} bytes of data"
            ));
        }
        out.push(Entry {
            name,
            crc,
            size,
            compressed,
            header_offset,
            method,
        });
        at = name_at + nlen + elen + clen;
    }
    Ok(out)
}

/// The 64-bit values of a ZIP64 extra field, if `extra` has one.
fn zip64_values(extra: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let mut at = 0;
    let mut found: &[u8] = &[];
    while let (Ok(id), Ok(len)) = (u16_at(extra, at), u16_at(extra, at + 2)) {
        let body = extra.get(at + 4..at + 4 + usize::from(len)).unwrap_or(&[]);
        if id == ZIP64_EXTRA {
            found = body;
            break;
        }
        at += 4 + usize::from(len);
    }
    found
        .chunks_exact(8)
        .filter_map(|c| c.try_into().ok().map(u64::from_le_bytes))
}

/// Where a member's bytes start, from its local header's fixed part.
pub fn data_start(local: &[u8], header_offset: u64) -> Result<u64, String> {
    if u32_at(local, 0) != Ok(LOCAL_SIG) {
        return Err(format!("no local file header at offset {header_offset}"));
    }
    let nlen = u64::from(u16_at(local, 26)?);
    let elen = u64::from(u16_at(local, 28)?);
    Ok(header_offset + LOCAL_LEN as u64 + nlen + elen)
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    #[test]
    fn npy_headers_are_64_byte_aligned_and_read_back() {
        for (dtype, shape) in [
            (DType::F32, vec![10, 17]),
            (DType::U8, vec![0, 84, 84]),
            (DType::Bool, vec![5]),
            (DType::I64, vec![3, 1, 1, 1, 1, 1, 2]),
        ] {
            let h = npy_header(dtype, &shape);
            assert_eq!(h.len() % NPY_ALIGN, 0);
            assert_eq!(h.last(), Some(&b'\n'));
            let p = parse_npy_header(&h).unwrap();
            assert_eq!(p.shape, shape);
            assert_eq!(p.descr, dtype.numpy_str());
            assert!(!p.fortran_order);
            assert_eq!(p.data_offset, h.len());
            assert_eq!(DType::from_numpy_str(&p.descr).unwrap(), dtype);
        }
        let one = npy_header(DType::F32, &[7]);
        assert!(String::from_utf8_lossy(&one).contains("'shape': (7,)"));
    }

    #[test]
    fn npy_parser_takes_what_numpy_writes_and_refuses_what_it_cannot_store() {
        // numpy 2 pads the header for growth and may write "=" or "|" byte orders.
        let text =
            "{'descr': '=f8', 'fortran_order': False, 'shape': (2, 3), }                    \n";
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(text.len() as u16).to_le_bytes());
        b.extend_from_slice(text.as_bytes());
        let p = parse_npy_header(&b).unwrap();
        assert_eq!(
            (p.shape.as_slice(), DType::from_numpy_str(&p.descr)),
            (&[2u64, 3][..], Ok(DType::F64))
        );
        assert!(
            DType::from_numpy_str(">f4")
                .unwrap_err()
                .contains("big-endian")
        );
        assert_eq!(DType::from_numpy_str(">u1"), Ok(DType::U8));
        assert!(
            DType::from_numpy_str("<c8")
                .unwrap_err()
                .contains("no replaystore equivalent")
        );
        assert!(DType::from_numpy_str("<U5").is_err());
        let rec = b"\x93NUMPY\x01\x00\x30\x00{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }";
        assert!(parse_npy_header(rec).unwrap_err().contains("structured"));
        assert!(
            parse_npy_header(b"PK\x03\x04")
                .unwrap_err()
                .contains("not an .npy")
        );
        let cut = &npy_header(DType::F32, &[4])[..20];
        assert!(parse_npy_header(cut).unwrap_err().contains("runs past"));
    }

    #[test]
    fn a_unicode_member_name_is_marked_utf8_so_python_reads_it() {
        let flags = |name: &str| {
            let h = Entry::stored(name, 1, 0).local_header();
            u16::from_le_bytes([h[6], h[7]])
        };
        assert_eq!(flags("obs.npy"), 0);
        assert_eq!(flags("观测.npy"), 1 << 11);
        let d = directory(&[Entry::stored("观测.npy", 1, 0)], 100);
        assert_eq!(u16::from_le_bytes([d[8], d[9]]), 1 << 11);
    }

    #[test]
    fn zip_directory_reads_back_with_and_without_zip64() {
        for big in [false, true] {
            let base = if big { 5 << 30 } else { 0 };
            let entries = vec![
                Entry {
                    crc: 0xdead_beef,
                    ..Entry::stored("obs.npy", 1000, base)
                },
                Entry {
                    crc: 7,
                    ..Entry::stored("reward.npy", if big { 6 << 30 } else { 400 }, base + 2000)
                },
            ];
            let at = base + (1 << 20);
            let d = directory(&entries, at);
            let span = find_directory(&d, at).unwrap();
            assert_eq!((span.offset, span.count), (at, 2));
            let got = parse_directory(&d[..span.size as usize], span.count).unwrap();
            assert_eq!(got, entries);
            assert_eq!(
                entries[1].local_header().len(),
                Entry::local_len("reward.npy", entries[1].size, entries[1].header_offset)
            );
            let local = entries[1].local_header();
            assert_eq!(
                data_start(&local, entries[1].header_offset).unwrap(),
                entries[1].header_offset + local.len() as u64
            );
        }
    }
}
