//! Variable-length values (format version 2): the 16 slot bytes a row keeps per
//! variable-length field, and where in the chunk ring a value lies.
//!
//! ```text
//! slot (in the row, under the row crc)
//! offset  size  what
//! 0       8     position: chunk index x C + offset in that chunk's payload
//! 8       4     length in bytes
//! 12      4     reserved, 0
//! ```
//! `C` is the chunk payload (`HeapGeometry::chunk_bytes`). The values of one `add` /
//! `add_batch` call are packed end to end from the start of a chunk no earlier call
//! wrote, so every chunk row is written by one call and stamped once; a value may run
//! across chunk boundaries. An empty value's position is where the next value would
//! go, so the newest item's slots say where the ring's tail is.

use super::{Bytes, BytesMut, Problem};

/// Bytes of one slot.
pub const SLOT_LEN: usize = crate::schema::VAR_SLOT_BYTES;
const POS_OFF: usize = 0;
const LEN_OFF: usize = POS_OFF + 8;
const RESERVED_OFF: usize = LEN_OFF + 4;

/// Where one value lies in the chunk stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VarSlot {
    /// Chunk index x chunk payload + offset in the chunk.
    pub pos: u64,
    /// Bytes.
    pub len: u32,
}

impl VarSlot {
    /// The slot's 16 bytes.
    pub fn encode(&self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        let mut w = BytesMut(&mut b);
        w.u64(POS_OFF, self.pos);
        w.u32(LEN_OFF, self.len);
        b
    }

    /// Reads a slot; a reserved word that is not zero is damage.
    ///
    /// ```
    /// use replaystore::internal::format::heap::VarSlot;
    /// let s = VarSlot { pos: 5000, len: 77 };
    /// assert_eq!(VarSlot::decode(&s.encode()), Ok(s));
    /// let mut bad = s.encode();
    /// bad[12] = 1;
    /// assert!(VarSlot::decode(&bad).is_err());
    /// ```
    pub fn decode(b: &[u8]) -> Result<VarSlot, Problem> {
        super::need(b, SLOT_LEN)?;
        let r = Bytes(b);
        let reserved = r.u32(RESERVED_OFF).unwrap_or(0);
        if reserved != 0 {
            return Err(Problem::Field {
                offset: RESERVED_OFF as u64,
                name: "variable slot reserved word",
                expected: "0".into(),
                got: reserved.to_string(),
            });
        }
        Ok(VarSlot {
            pos: r.u64(POS_OFF).unwrap_or(0),
            len: r.u32(LEN_OFF).unwrap_or(0),
        })
    }

    /// One past the value's last byte in the stream.
    pub fn end(&self) -> u64 {
        self.pos.saturating_add(u64::from(self.len))
    }

    /// The chunks the value's bytes lie in (none for an empty value), for chunks of
    /// `chunk` payload bytes.
    ///
    /// ```
    /// use replaystore::internal::format::heap::VarSlot;
    /// assert_eq!(VarSlot { pos: 1000, len: 100 }.chunks(1008), 0..2);
    /// assert_eq!(VarSlot { pos: 1008, len: 1008 }.chunks(1008), 1..2);
    /// assert_eq!(VarSlot { pos: 2016, len: 0 }.chunks(1008), 2..2);
    /// ```
    pub fn chunks(&self, chunk: u64) -> std::ops::Range<u64> {
        let chunk = chunk.max(1);
        if self.len == 0 {
            let at = self.pos / chunk;
            return at..at;
        }
        self.pos / chunk..self.end().div_ceil(chunk)
    }

    /// The value's pieces in chunk order: `(chunk index, offset in its payload, bytes)`.
    ///
    /// ```
    /// use replaystore::internal::format::heap::VarSlot;
    /// let pieces: Vec<_> = VarSlot { pos: 1000, len: 1100 }.pieces(1008).collect();
    /// assert_eq!(pieces, vec![(0, 1000, 8), (1, 0, 1008), (2, 0, 84)]);
    /// ```
    pub fn pieces(&self, chunk: u64) -> impl Iterator<Item = (u64, usize, usize)> {
        let chunk = chunk.max(1);
        let (mut pos, end) = (self.pos, self.end());
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let (index, off) = (pos / chunk, pos % chunk);
            let n = (chunk - off).min(end - pos);
            pos += n;
            Some((index, off as usize, n as usize))
        })
    }
}

/// The first stream position of the chunk after the one `pos` lies in (or `pos` itself
/// when it starts a chunk): where the next call's values begin.
///
/// ```
/// use replaystore::internal::format::heap::next_call_start;
/// assert_eq!(next_call_start(0, 1008), 0);
/// assert_eq!(next_call_start(1, 1008), 1008);
/// assert_eq!(next_call_start(1008, 1008), 1008);
/// ```
pub fn next_call_start(pos: u64, chunk: u64) -> u64 {
    let chunk = chunk.max(1);
    pos.div_ceil(chunk).saturating_mul(chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_value_exactly_once_in_order_for_any_position_and_length() {
        for chunk in [8u64, 13, 1008] {
            for pos in [0u64, 1, 7, 8, 1000, 1007, 5000] {
                for len in [0u32, 1, 7, 8, 9, 1008, 3000] {
                    let s = VarSlot { pos, len };
                    let pieces: Vec<_> = s.pieces(chunk).collect();
                    let total: usize = pieces.iter().map(|p| p.2).sum();
                    assert_eq!(total, len as usize);
                    let mut at = pos;
                    for &(index, off, n) in &pieces {
                        assert_eq!(index * chunk + off as u64, at);
                        assert!(off as u64 + n as u64 <= chunk && n > 0);
                        at += n as u64;
                    }
                    let range = s.chunks(chunk);
                    assert_eq!(range.end - range.start, pieces.len() as u64);
                    if let Some(first) = pieces.first() {
                        assert_eq!(first.0, range.start);
                    }
                }
            }
        }
    }

    #[test]
    fn a_short_slot_is_refused_not_read_past() {
        assert!(matches!(
            VarSlot::decode(&[0u8; 15]),
            Err(Problem::Short { .. })
        ));
        assert_eq!(VarSlot::decode(&[0u8; 16]), Ok(VarSlot::default()));
    }
}
