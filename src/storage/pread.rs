//! Rows copied out with `pread` instead of through the mappings: for a reader whose
//! resident memory must stay flat whatever the buffer's size.
//!
//! A mapped read leaves every page it touched mapped in the process. On ext4 the page
//! cache holds large folios, which the kernel maps 2 MiB at a time, so a reader that
//! samples a 2.8 GB Atari buffer soon shows 2.7 GB resident. It is the one shared copy
//! in the page cache, not the reader's own memory, but RSS counts it, and so do the
//! tools that police RSS (a DataLoader worker watchdog, an RSS-based memory monitor, a
//! person reading `top`). `pread` copies out of the same page cache and maps nothing.
//! It costs two system calls per row (the row, then its stamp again): about 0.8 µs on
//! this machine, so a draw of small rows takes 10–18× the mapped one while a draw of
//! Atari rows takes 1.4× (`cargo bench --bench workloads -- 'reader_|pread_floor'`;
//! docs/decisions/28). It is a choice ([`RowAccess`]), not the default.
//!
//! The stamp protocol needs only the stamp load after the copy here: one `pread` copies
//! the row, a second reads its stamp again. Only indices the writer has published are
//! drawn, and it publishes an index (progress page, release) after its final stamp, so
//! the item's bytes are complete before the copy starts. Stamps only move forward
//! (a slot's next stamp names a later index), so a slot overwritten before or during the
//! copy never shows the drawn index's stamp again: an overwrite stamps "being written"
//! before it changes a byte, so a copy that saw any new byte is followed by a stamp read
//! that sees that stamp or a later one. (A restore reuses indices, but in new files:
//! these stay open on the old ones until the reader sees the epoch move.)

use std::fs::File;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::format::row::{self, ROW_CRC_OFFSET, RowLayout, STAMP_EMPTY};
use crate::format::segment::DATA_OFFSET;
use crate::storage::io::IoRef;
use crate::storage::map::{Found, RowMiss, SegmentMap, SlotMap};

/// How a reader copies rows out of the segment files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowAccess {
    /// Through the shared mappings: memory speed, and every page touched stays mapped
    /// (counted in the process's RSS, though it is the page cache every process shares).
    #[default]
    Mapped,
    /// With `pread` from the same page cache: nothing is mapped, so resident memory stays
    /// flat; one or two system calls more per row.
    Pread,
}

/// Why a gather stopped.
#[derive(Debug)]
pub enum Missed {
    /// A row did not hold the index drawn: its stamp did not name it (a race with the
    /// writer, or damage) or its checksum failed (damage).
    Row(RowMiss),
    /// A read failed.
    Read(Error),
}

/// The ring's segment files, open for `pread`.
#[derive(Debug)]
pub(crate) struct RowFiles {
    io: IoRef,
    files: Vec<(File, PathBuf, usize)>,
    stride: usize,
}

impl RowFiles {
    /// Opens the files behind `segments` (by the names they were mapped from).
    pub(crate) fn open(io: IoRef, segments: &[SegmentMap], stride: usize) -> Result<RowFiles> {
        let files = segments
            .iter()
            .map(|seg| {
                let path = seg.path().to_path_buf();
                io.open_ro(&path)
                    .map(|f| (f, path.clone(), seg.slots()))
                    .map_err(|e| Error::io("open", &path, e))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RowFiles { io, files, stride })
    }

    /// What [`crate::storage::map::gather`] does, with `pread`: the fields of the rows
    /// holding `indices` into `outs` (field-major), from position `from` on, each row
    /// below `sealed` checked against its checksum. With `page_in` (the ring's rows take
    /// more than half of memory), every row is asked for before the first is read.
    #[expect(
        clippy::too_many_arguments,
        reason = "the mapped gather's arguments, and the ring's page-in choice"
    )]
    pub(crate) fn gather(
        &self,
        map: SlotMap,
        layout: &RowLayout,
        sealed: u64,
        indices: &[u64],
        outs: &mut [&mut [u8]],
        from: usize,
        page_in: bool,
    ) -> Result<(), Missed> {
        // The row from its stamp to its last field: the checksum word and the whole
        // payload span (header fields included) are in it.
        let span = layout.payload_end.clamp(8, self.stride);
        let payload = layout.payload_span();
        let mut row = vec![0u8; span];
        let mut stamp = [0u8; 8];
        if page_in {
            // Every row's read in flight at once, then the preads below mostly find the
            // page cache filled: the disk works on many rows at a time instead of one.
            for &index in indices.iter().skip(from) {
                let (s, k) = map.locate(index);
                if let Some((file, _, _)) = self.files.get(s).filter(|f| k < f.2) {
                    let at = (DATA_OFFSET + k * self.stride) as u64;
                    super::io::will_need(file, at, span as u64);
                }
            }
        }
        for (i, &index) in indices.iter().enumerate().skip(from) {
            let (s, k) = map.locate(index);
            let miss = |found| Missed::Row(RowMiss { position: i, found });
            let Some((file, path, _)) = self.files.get(s).filter(|f| k < f.2) else {
                return Err(miss(Found::Stamp(STAMP_EMPTY)));
            };
            let at = (DATA_OFFSET + k * self.stride) as u64;
            let read = |buf: &mut [u8]| {
                self.io
                    .read_at(file, at, buf)
                    .map_err(|e| Missed::Read(Error::io("read", path, e)))
            };
            read(&mut row)?;
            for (&(off, len), out) in layout.fields.iter().zip(outs.iter_mut()) {
                if let (Some(dst), Some(src)) =
                    (out.get_mut(i * len..(i + 1) * len), row.get(off..off + len))
                {
                    dst.copy_from_slice(src);
                }
            }
            let sound = if index < sealed {
                let stored = row.get(ROW_CRC_OFFSET..ROW_CRC_OFFSET + 4);
                let stored = stored
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u32::from_le_bytes);
                let computed = row::item_crc(index, row.get(payload.clone()).unwrap_or(&[]));
                (stored == computed)
                    .then_some(())
                    .ok_or(Found::Checksum { stored, computed })
            } else {
                Ok(())
            };
            read(&mut stamp)?;
            let after = row::read_stamp(&stamp);
            if after != row::stamp_of(index) {
                return Err(miss(Found::Stamp(after)));
            }
            sound.map_err(miss)?;
        }
        Ok(())
    }
}
