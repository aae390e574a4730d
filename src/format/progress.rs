//! `lane-0/progress`: one page through which the writer tells readers in other
//! processes where the live rows are. The writer keeps its words current with plain
//! atomic stores into its shared mapping; the page is never synced and recovery never
//! reads it (the commit slots and the stamps decide what survived a crash).
//!
//! ```text
//! offset  size  what
//! 0       8     magic "RPLYPRG\0"
//! 8       4     format version
//! 12      4     reserved, 0
//! 16      16    buffer uuid (as in the manifest)
//! 32      4     crc32 of bytes 0..32
//! 36      28    reserved, 0
//! 64      8     head: oldest live logical index            (atomic)
//! 72      8     tail: next logical index to be written     (atomic)
//! 80      8     sealed: items below it carry their checksum (atomic)
//! 88      8     epoch: bumped after a lane file is replaced (atomic)
//! 96      8     writer pid: the process that opened the buffer for writing, 0 after
//!               it closed                                  (atomic)
//! 104     24    reserved, 0
//! 128     8     reader draws: items readers drew that no commit counts yet; readers
//!               add, the writer takes them into its count  (atomic)
//! 136     3960  reserved, 0
//! ```
//!
//! The reader draws sit on their own cache line: readers in other processes add to it
//! at every draw, and sharing the line with head and tail would slow every add.

use super::{BASE_VERSION, Bytes, BytesMut, Problem, preamble};

/// Magic of the progress page.
pub const MAGIC: [u8; 8] = *b"RPLYPRG\0";

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const RESERVED_OFF: usize = VERSION_OFF + 4;
const UUID_OFF: usize = RESERVED_OFF + 4;
const CRC_OFF: usize = UUID_OFF + 16;
/// Bytes of the static header (the crc covers all before it).
pub const HEADER_LEN: usize = CRC_OFF + 4;

/// The live words start on their own cache line, away from the static header.
pub const HEAD_OFF: usize = 64;
/// Next logical index to be written.
pub const TAIL_OFF: usize = HEAD_OFF + 8;
/// Items below this index carry their checksum (sealed by a flush).
pub const SEALED_OFF: usize = TAIL_OFF + 8;
/// Bumped after any file of the lane (a segment, `priorities.tree`) is replaced by a
/// rename: copy-on-write, `set_state`, a writer's open.
pub const EPOCH_OFF: usize = SEALED_OFF + 8;
/// The writing process's id, 0 when no writer has the buffer open.
pub const PID_OFF: usize = EPOCH_OFF + 8;
/// Items readers drew that no commit counts yet: each reader that may write the page
/// adds its draws (`fetch_add`); the writer takes the word (`swap(0)`) into the count
/// its next commit records.
pub const READER_DRAWS_OFF: usize = 128;
const WORDS_END: usize = READER_DRAWS_OFF + 8;
/// Length of the file: one page.
pub const FILE_LEN: usize = 4096;

const _: () = assert!(HEADER_LEN <= HEAD_OFF && WORDS_END <= FILE_LEN);
const _: () = assert!(READER_DRAWS_OFF >= PID_OFF + 8 && READER_DRAWS_OFF.is_multiple_of(64));
const _: () = assert!(HEAD_OFF.is_multiple_of(8));

/// The page a writer creates for the buffer `uuid`: the header, every word zero.
pub fn encode(uuid: &[u8; 16]) -> Vec<u8> {
    let mut page = vec![0u8; FILE_LEN];
    let mut w = BytesMut(&mut page);
    w.put(MAGIC_OFF, &MAGIC);
    w.u32(VERSION_OFF, BASE_VERSION);
    w.put(UUID_OFF, uuid);
    let crc = super::crc32(page.get(..CRC_OFF).unwrap_or(&[]));
    BytesMut(&mut page).u32(CRC_OFF, crc);
    page
}

/// Checks the static header of a progress page against the buffer's uuid.
pub fn check(bytes: &[u8], uuid: &[u8; 16]) -> Result<(), Problem> {
    const { assert!(MAGIC_OFF == 0) };
    preamble(bytes, &MAGIC, HEADER_LEN, CRC_OFF, VERSION_OFF)?;
    let r = Bytes(bytes);
    let reserved = r.u32(RESERVED_OFF).unwrap_or(1);
    if reserved != 0 {
        return Err(Problem::Field {
            offset: RESERVED_OFF as u64,
            name: "reserved",
            expected: "0".into(),
            got: reserved.to_string(),
        });
    }
    let got: [u8; 16] = r.array(UUID_OFF).unwrap_or([0; 16]);
    if &got != uuid {
        return Err(Problem::Field {
            offset: UUID_OFF as u64,
            name: "uuid",
            expected: super::segment::hex(uuid),
            got: super::segment::hex(&got),
        });
    }
    Ok(())
}

/// The writer pid stored in a page (0 when the page is too short).
pub fn writer_pid(bytes: &[u8]) -> u64 {
    Bytes(bytes).u64(PID_OFF).unwrap_or(0)
}

/// The reader draws a page holds that no commit counts yet (0 when the page is too
/// short).
pub fn reader_draws(bytes: &[u8]) -> u64 {
    Bytes(bytes).u64(READER_DRAWS_OFF).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_checksummed_page_with_a_reserved_word_or_another_uuid_is_refused() {
        let uuid = [9; 16];
        assert_eq!(check(&encode(&uuid), &uuid), Ok(()));
        let mut page = encode(&uuid);
        BytesMut(&mut page).u32(RESERVED_OFF, 1);
        let crc = super::super::crc32(&page[..CRC_OFF]);
        BytesMut(&mut page).u32(CRC_OFF, crc);
        let got = check(&page, &uuid);
        assert!(
            matches!(&got, Err(Problem::Field { offset, .. }) if *offset == RESERVED_OFF as u64),
            "{got:?}"
        );
        let got = check(&encode(&[8; 16]), &uuid);
        assert!(
            matches!(&got, Err(Problem::Field { offset, .. }) if *offset == UUID_OFF as u64),
            "{got:?}"
        );
    }

    #[test]
    fn header_detects_every_flipped_bit_and_a_foreign_uuid() {
        let page = encode(&[7; 16]);
        assert_eq!(check(&page, &[7; 16]), Ok(()));
        for bit in 0..HEADER_LEN * 8 {
            let mut bad = page.clone();
            if let Some(b) = bad.get_mut(bit / 8) {
                *b ^= 1 << (bit % 8);
            }
            assert!(
                check(&bad, &[7; 16]).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
        assert!(matches!(
            check(&page, &[8; 16]),
            Err(Problem::Field { name: "uuid", .. })
        ));
        assert!(matches!(
            check(page.get(..20).unwrap_or(&[]), &[7; 16]),
            Err(Problem::Short { .. })
        ));
    }

    #[test]
    fn live_words_start_zero_and_the_pid_reads_back() {
        let mut page = encode(&[1; 16]);
        for off in [HEAD_OFF, TAIL_OFF, SEALED_OFF, EPOCH_OFF, PID_OFF] {
            assert_eq!(Bytes(&page).u64(off), Some(0));
        }
        BytesMut(&mut page).u64(PID_OFF, 4242);
        assert_eq!(writer_pid(&page), 4242);
        assert_eq!(writer_pid(&[]), 0);
    }
}
