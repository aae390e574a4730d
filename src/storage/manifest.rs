//! The files a buffer folder is known by: MANIFEST (its superblock, schema and two
//! commit slots as read and checked: `Manifest`; the bytes of a new one; the in-place
//! writes of a commit or an eviction record into a slot's page) and, for a buffer made
//! of lanes, LANES (docs/FORMAT.md).

use std::fs::File;
use std::path::{Path, PathBuf};

use super::io::Io;
use crate::error::{Error, Result};
use crate::format::group::{self, GroupDoc};
use crate::format::lanes::{self, LanesFile};
use crate::format::manifest::{
    COMMIT_LEN, COMMIT_SLOT_OFFSET, Commit, EVICT_LEN, EVICT_OFFSET, Eviction, PAGE, SCHEMA_OFFSET,
    Superblock,
};
use crate::format::row::RowLayout;
use crate::format::{Problem, crc32, schema_doc};
use crate::schema::Schema;

/// Name of the manifest file.
pub const MANIFEST: &str = "MANIFEST";
/// Name of a new buffer's MANIFEST before `create` publishes it by a rename.
pub(crate) const MANIFEST_TMP: &str = "MANIFEST.tmp";
/// The manifest as read from disk and checked: superblock, schema, both commit slots.
#[derive(Debug)]
pub struct Manifest {
    /// The MANIFEST path.
    pub path: PathBuf,
    /// The immutable description.
    pub superblock: Superblock,
    /// The schema.
    pub schema: Schema,
    /// Row layout derived from the schema.
    pub layout: RowLayout,
    /// Each slot: its commit, or why it was rejected.
    pub slots: [Result<Commit, Problem>; 2],
    /// Each slot page's eviction record: none written, one, or why it was rejected.
    pub evictions: [Result<Option<Eviction>, Problem>; 2],
}

impl Manifest {
    /// Reads and checks the manifest of `dir`.
    pub fn load(io: &dyn Io, dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let bytes = match io.read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let dir = dir.to_path_buf();
                return Err(match read_lanes(io, &dir) {
                    Ok(Some(f)) => Error::IsLanes {
                        dir,
                        lanes: f.lanes,
                    },
                    _ => Error::NotABuffer { dir },
                });
            }
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        let superblock = Superblock::decode(bytes.get(..PAGE).unwrap_or(&bytes))
            .map_err(|p| p.into_error(&path, "superblock"))?;
        let need = superblock.manifest_len();
        if (bytes.len() as u64) < need {
            return Err(Error::Truncated {
                file: path,
                expected: need,
                got: bytes.len() as u64,
            });
        }
        let schema_bytes = bytes
            .get(SCHEMA_OFFSET..SCHEMA_OFFSET + superblock.schema_len as usize)
            .unwrap_or(&[]);
        let crc = crc32(schema_bytes);
        if crc != superblock.schema_crc {
            return Err(Error::ChecksumMismatch {
                file: path,
                offset: SCHEMA_OFFSET as u64,
                what: "schema".into(),
                expected: superblock.schema_crc,
                got: crc,
            });
        }
        let schema =
            schema_doc::decode(schema_bytes, superblock.schema_version()).map_err(|got| {
                Error::Corrupt {
                    file: path.clone(),
                    offset: SCHEMA_OFFSET as u64,
                    field: "schema".into(),
                    expected: "a valid schema archive".into(),
                    got,
                }
            })?;
        let layout = RowLayout::with_steps(&schema, superblock.episodic)
            .with_fragments(superblock.fragments);
        if layout.stride as u64 != superblock.row_stride
            || schema.item_bytes() as u64 != superblock.item_bytes
        {
            return Err(Error::Corrupt {
                file: path,
                offset: 0,
                field: "superblock row_stride/item_bytes".into(),
                expected: format!(
                    "{}/{} (from the schema)",
                    layout.stride,
                    schema.item_bytes()
                ),
                got: format!("{}/{}", superblock.row_stride, superblock.item_bytes),
            });
        }
        let slot = |i: usize| {
            let off = COMMIT_SLOT_OFFSET.get(i).copied().unwrap_or(0);
            let b = bytes.get(off..off + COMMIT_LEN).unwrap_or(&[]);
            Commit::decode(b, i, superblock.capacity)
        };
        let eviction = |i: usize| {
            let off = COMMIT_SLOT_OFFSET.get(i).copied().unwrap_or(0) + EVICT_OFFSET;
            Eviction::decode(bytes.get(off..off + EVICT_LEN).unwrap_or(&[]))
        };
        Ok(Manifest {
            path,
            slots: [slot(0), slot(1)],
            evictions: [eviction(0), eviction(1)],
            superblock,
            schema,
            layout,
        })
    }

    /// How far overwrites may have gone past commit `generation` (its head when no
    /// sound eviction record extends it): the lowest index recovery in another boot
    /// may serve. Damaged records are passed over (see [`Eviction::decode`]).
    pub fn evicted_below(&self, commit: &Commit) -> u64 {
        (self.evictions.iter())
            .filter_map(|e| e.as_ref().ok().copied().flatten())
            .filter(|e| e.generation == commit.generation)
            .map(|e| e.head.min(commit.tail))
            .fold(commit.head, u64::max)
    }

    /// The newest valid commit.
    pub fn newest_commit(&self) -> Result<Commit> {
        match &self.slots {
            [Ok(a), Ok(b)] => Ok(if a.generation >= b.generation { *a } else { *b }),
            [Ok(a), Err(_)] => Ok(*a),
            [Err(_), Ok(b)] => Ok(*b),
            [Err(a), Err(b)] => Err(Error::NoValidCommit {
                file: self.path.clone(),
                slot_a: a.to_string(),
                slot_b: b.to_string(),
            }),
        }
    }
}

/// Bytes of a new MANIFEST: superblock, an initial commit in slot A, the schema.
pub(crate) fn manifest_bytes(sb: &Superblock, schema_archive: &[u8], first: &Commit) -> Vec<u8> {
    let mut out = vec![0u8; SCHEMA_OFFSET];
    out.splice(0..PAGE, sb.encode());
    let off = COMMIT_SLOT_OFFSET
        .get(first.slot())
        .copied()
        .unwrap_or(PAGE);
    out.splice(off..off + COMMIT_LEN, first.encode());
    out.extend_from_slice(schema_archive);
    out
}

/// Writes a commit into its slot; `durable` adds an fdatasync.
pub(crate) fn write_commit(
    io: &dyn Io,
    manifest: &File,
    path: &Path,
    commit: &Commit,
    durable: bool,
) -> Result<()> {
    let off = COMMIT_SLOT_OFFSET
        .get(commit.slot())
        .copied()
        .unwrap_or(PAGE);
    io.write_at(manifest, off as u64, &commit.encode())
        .map_err(|e| Error::io("write commit slot", path, e))?;
    crate::killpoint::hit("commit-written");
    if durable {
        io.sync_data(manifest)
            .map_err(|e| Error::io("fdatasync", path, e))?;
    }
    Ok(())
}

/// Writes eviction record `e` into the page of slot `slot` and makes it durable: it
/// must be on disk before any item it names is overwritten.
pub(crate) fn write_eviction(
    io: &dyn Io,
    manifest: &File,
    path: &Path,
    slot: usize,
    e: &Eviction,
) -> Result<()> {
    let off = COMMIT_SLOT_OFFSET.get(slot).copied().unwrap_or(PAGE) + EVICT_OFFSET;
    io.write_at(manifest, off as u64, &e.encode())
        .map_err(|err| Error::io("write eviction record", path, err))?;
    crate::killpoint::hit("eviction-written");
    io.sync_data(manifest)
        .map_err(|err| Error::io("fdatasync", path, err))
}

/// The folder of lane `lane` of a buffer made of lanes: a one-ring buffer of its own.
pub fn lane_dir(dir: &Path, lane: u32) -> PathBuf {
    dir.join(format!("lane-{lane}"))
}

/// Reads and checks the `LANES` file of `dir`; `None` when there is none (a buffer of
/// one ring, or no buffer).
pub fn read_lanes(io: &dyn Io, dir: &Path) -> Result<Option<LanesFile>> {
    let path = dir.join(lanes::FILE_NAME);
    match io.read(&path) {
        Ok(bytes) => LanesFile::decode(&bytes)
            .map(Some)
            .map_err(|p| p.into_error(&path, "lanes file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

/// Reads and checks the `GROUP` file of `dir`; `None` when there is none (not a group).
pub fn read_group(io: &dyn Io, dir: &Path) -> Result<Option<GroupDoc>> {
    let path = dir.join(group::FILE_NAME);
    match io.read(&path) {
        Ok(bytes) => GroupDoc::decode(&bytes)
            .map(Some)
            .map_err(|p| p.into_error(&path, "group file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

/// Writes `GROUP` durably in place of the old one (a temporary name, fdatasync, a
/// rename over it, an fsync of `dir`): a kill leaves the old file or the new.
pub(crate) fn write_group(io: &dyn Io, dir: &Path, doc: &GroupDoc) -> Result<()> {
    let tmp = dir.join("GROUP.tmp");
    match io.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove", &tmp, e)),
    }
    let f = io
        .create_new(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    io.write_at(&f, 0, &doc.encode())
        .map_err(|e| Error::io("write", &tmp, e))?;
    io.sync_data(&f)
        .map_err(|e| Error::io("fdatasync", &tmp, e))?;
    let path = dir.join(group::FILE_NAME);
    io.rename(&tmp, &path)
        .map_err(|e| Error::io("rename", &path, e))?;
    io.sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))
}

/// Writes `LANES` durably under its final name (through a temporary name, then a
/// rename and an fsync of `dir`): its presence is what makes the lanes one buffer.
pub(crate) fn write_lanes(io: &dyn Io, dir: &Path, file: &LanesFile) -> Result<()> {
    let tmp = dir.join("LANES.tmp");
    let f = io
        .create_new(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    io.write_at(&f, 0, &file.encode())
        .map_err(|e| Error::io("write", &tmp, e))?;
    io.sync_data(&f)
        .map_err(|e| Error::io("fdatasync", &tmp, e))?;
    let path = dir.join(lanes::FILE_NAME);
    io.rename(&tmp, &path)
        .map_err(|e| Error::io("rename", &path, e))?;
    io.sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))
}
