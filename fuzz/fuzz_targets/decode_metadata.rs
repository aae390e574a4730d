//! Arbitrary bytes as a superblock, a commit slot, a schema archive, a segment header,
//! a priorities header, an item state header and word, a serialized State (what
//! RESTORE holds) and a buffer group's `GROUP` file:
//! every decoder returns a typed problem or a value, never panics or over-allocates.
#![no_main]

use libfuzzer_sys::fuzz_target;
use replaystore::internal::format::group::GroupDoc;
use replaystore::internal::format::manifest::{Commit, Superblock};
use replaystore::internal::format::schema_doc;
use replaystore::internal::format::segment::SegmentHeader;
use replaystore::internal::format::lifecycle::{LifeHeader, Word};
use replaystore::internal::format::tree::TreeHeader;
use replaystore::State;

fuzz_target!(|data: &[u8]| {
    let _ = Superblock::decode(data);
    let _ = Commit::decode(data, 0, 1 << 20);
    let _ = Commit::decode(data, 1, 1);
    let _ = schema_doc::decode(data, 1);
    let _ = schema_doc::decode(data, 2);
    let expected = SegmentHeader { uuid: [0; 16], segment_no: 0, first_slot: 0, slots: 1, row_stride: 24, heap: false };
    let _ = SegmentHeader::check(data, &SegmentHeader { heap: true, ..expected.clone() });
    let _ = replaystore::internal::format::heap::VarSlot::decode(data);
    let _ = SegmentHeader::check(data, &expected);
    if let Ok(h) = LifeHeader::decode(data) {
        // A header that decodes re-encodes to the same checked bytes.
        let again = h.encode();
        assert_eq!(LifeHeader::decode(&again), Ok(h));
        let _ = h.file_len();
    }
    if let Some(w) = data.first_chunk::<8>() {
        let word = Word(u64::from_le_bytes(*w));
        let lap = data.get(8).map(|&l| u64::from(l));
        let checked = data.get(9).is_some_and(|b| b & 1 == 1);
        let _ = (word.problem(lap, checked), word.cause(), word.uses(), word.is_of(u64::MAX, 7));
        // Putting a word in either form keeps its fields, and a word in its file's form
        // never fails its check.
        let formed = word.in_form(checked);
        assert_eq!((formed.uses(), formed.removed(), formed.lap()), (word.uses(), word.removed(), word.lap()));
        assert!(formed.problem(None, checked).is_none_or(|p| !p.contains("bits 4..8")));
    }
    if let Ok((h, _)) = TreeHeader::decode(data) {
        let _ = h.shape();
    }
    if let Ok(doc) = GroupDoc::decode(data) {
        // A group file that decodes re-encodes to a file that decodes to the same bytes
        // (bytes, not values: a NaN alpha is not equal to itself).
        let again = doc.encode();
        assert_eq!(GroupDoc::decode(&again).map(|d| d.encode()), Ok(again));
        let _ = doc.free_lane();
    }
    if let Ok(state) = State::from_bytes(data) {
        // A state that decodes re-encodes to one that decodes the same; one of the
        // version this build writes, to the same bytes (no field lost or invented).
        let again = state.to_bytes();
        assert_eq!(State::from_bytes(&again).ok(), Some(state.clone()));
        if data.get(8..12) == Some(&replaystore::internal::format::state::VERSION.to_le_bytes()[..]) {
            assert_eq!(again, data.get(..again.len()).unwrap_or(&[]));
        }
    }
});
