//! A segment file: one header page, then `slots` rows of `row_stride` bytes. The chunk
//! ring of a version-2 buffer (`heap-N.dat`) has the same layout under its own magic.
//!
//! ```text
//! offset  size  what
//! 0       4096  header (below), rest of the page zero
//! 4096    slots * row_stride   rows (see `row`)
//! ```
//! Header:
//! ```text
//! 0   8  magic "RPLYSEG\0" (a chunk ring's segment: "RPLYHEAP")
//! 8   4  format version
//! 12  4  reserved, 0
//! 16  16 buffer uuid (as in the manifest)
//! 32  8  segment number
//! 40  8  first slot of the ring held here
//! 48  8  slots held here
//! 56  8  row stride
//! 64  4  crc32 of bytes 0..64
//! ```

use super::{BASE_VERSION, Bytes, BytesMut, Problem, crc32, preamble};

/// Magic of a segment file.
pub const MAGIC: [u8; 8] = *b"RPLYSEG\0";
/// Magic of a segment of the chunk ring (variable-length values): a chunk segment put
/// where a row segment belongs, or the other way round, is refused by its magic.
pub const HEAP_MAGIC: [u8; 8] = *b"RPLYHEAP";

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const RESERVED_OFF: usize = VERSION_OFF + 4;
const UUID_OFF: usize = RESERVED_OFF + 4;
const SEGMENT_NO_OFF: usize = UUID_OFF + 16;
const FIRST_SLOT_OFF: usize = SEGMENT_NO_OFF + 8;
const SLOTS_OFF: usize = FIRST_SLOT_OFF + 8;
const ROW_STRIDE_OFF: usize = SLOTS_OFF + 8;
const CRC_OFF: usize = ROW_STRIDE_OFF + 8;
/// Bytes of the header that carry data.
pub const HEADER_LEN: usize = CRC_OFF + 4;
/// Offset of the first row.
pub const DATA_OFFSET: usize = 4096;

/// What a segment's header says; every field must equal what the manifest implies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The buffer's uuid.
    pub uuid: [u8; 16],
    /// Which segment of the ring.
    pub segment_no: u64,
    /// First ring slot held.
    pub first_slot: u64,
    /// Slots held.
    pub slots: u64,
    /// Bytes per row.
    pub row_stride: u64,
    /// A segment of the chunk ring (`HEAP_MAGIC`), not of the rows.
    pub heap: bool,
}

impl SegmentHeader {
    /// The file length this header implies.
    pub fn file_len(&self) -> u64 {
        DATA_OFFSET as u64 + self.slots * self.row_stride
    }

    /// The magic this kind of segment starts with.
    pub fn magic(&self) -> &'static [u8; 8] {
        if self.heap { &HEAP_MAGIC } else { &MAGIC }
    }

    /// The header page.
    pub fn encode(&self) -> Vec<u8> {
        let mut page = vec![0u8; DATA_OFFSET];
        let mut w = BytesMut(&mut page);
        w.put(MAGIC_OFF, self.magic());
        w.u32(VERSION_OFF, BASE_VERSION);
        w.put(UUID_OFF, &self.uuid);
        w.u64(SEGMENT_NO_OFF, self.segment_no);
        w.u64(FIRST_SLOT_OFF, self.first_slot);
        w.u64(SLOTS_OFF, self.slots);
        w.u64(ROW_STRIDE_OFF, self.row_stride);
        let crc = crc32(page.get(..CRC_OFF).unwrap_or(&[]));
        BytesMut(&mut page).u32(CRC_OFF, crc);
        page
    }

    /// Checks a header against the one the manifest implies.
    pub fn check(bytes: &[u8], expected: &SegmentHeader) -> Result<(), Problem> {
        const { assert!(MAGIC_OFF == 0) };
        preamble(bytes, expected.magic(), HEADER_LEN, CRC_OFF, VERSION_OFF)?;
        let r = Bytes(bytes);
        let fields: [(usize, &'static str, u64, u64); 5] = [
            (
                RESERVED_OFF,
                "reserved",
                0,
                r.u32(RESERVED_OFF).unwrap_or(1).into(),
            ),
            (
                SEGMENT_NO_OFF,
                "segment number",
                expected.segment_no,
                r.u64(SEGMENT_NO_OFF).unwrap_or(0),
            ),
            (
                FIRST_SLOT_OFF,
                "first slot",
                expected.first_slot,
                r.u64(FIRST_SLOT_OFF).unwrap_or(0),
            ),
            (
                SLOTS_OFF,
                "slots",
                expected.slots,
                r.u64(SLOTS_OFF).unwrap_or(0),
            ),
            (
                ROW_STRIDE_OFF,
                "row stride",
                expected.row_stride,
                r.u64(ROW_STRIDE_OFF).unwrap_or(0),
            ),
        ];
        let uuid: [u8; 16] = r.array(UUID_OFF).unwrap_or([0; 16]);
        let uuid_field = (UUID_OFF, "uuid", hex(&expected.uuid), hex(&uuid));
        let numbers = fields
            .map(|(offset, name, want, got)| (offset, name, want.to_string(), got.to_string()));
        for (offset, name, expected, got) in std::iter::once(uuid_field).chain(numbers) {
            if expected != got {
                return Err(Problem::Field {
                    offset: offset as u64,
                    name,
                    expected,
                    got,
                });
            }
        }
        Ok(())
    }
}

/// Lower-case hex of bytes, for messages and `info`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_detects_every_flipped_bit_and_foreign_uuid() {
        let h = SegmentHeader {
            uuid: [3; 16],
            segment_no: 2,
            first_slot: 512,
            slots: 256,
            row_stride: 184,
            heap: false,
        };
        let page = h.encode();
        assert_eq!(SegmentHeader::check(&page, &h), Ok(()));
        for bit in 0..HEADER_LEN * 8 {
            let mut bad = page.clone();
            if let Some(b) = bad.get_mut(bit / 8) {
                *b ^= 1 << (bit % 8);
            }
            assert!(
                SegmentHeader::check(&bad, &h).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
        let other = SegmentHeader {
            uuid: [4; 16],
            ..h.clone()
        };
        assert!(matches!(
            SegmentHeader::check(&page, &other),
            Err(Problem::Field { name: "uuid", .. })
        ));
        // A chunk segment where a row segment belongs (or the reverse): its magic.
        let chunks = SegmentHeader {
            heap: true,
            ..h.clone()
        };
        assert_eq!(SegmentHeader::check(&chunks.encode(), &chunks), Ok(()));
        assert!(matches!(
            SegmentHeader::check(&chunks.encode(), &h),
            Err(Problem::Magic { .. })
        ));
        assert!(matches!(
            SegmentHeader::check(&page, &chunks),
            Err(Problem::Magic { .. })
        ));
    }
}
