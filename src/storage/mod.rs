//! The buffer's files: names, creation with reserved disk, the manifest's commit slots,
//! mapped segments and the writer lock. Every call goes through the [`io::Io`] seam.

pub(crate) mod behind;
pub(crate) mod confined;
pub mod crc;
pub mod io;
mod manifest;
pub(crate) mod map;
pub mod pread;
pub(crate) mod ring;

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::manifest::{Commit, Superblock};
use crate::format::segment::{DATA_OFFSET, SegmentHeader};
use io::{Access, Io};
pub use manifest::{MANIFEST, Manifest, lane_dir, read_group, read_lanes};
pub(crate) use manifest::{
    MANIFEST_TMP, manifest_bytes, write_commit, write_eviction, write_group, write_lanes,
};
use map::SegmentMap;

/// Name of the writer's lock file.
pub(crate) const LOCK: &str = "LOCK";
/// Extension of a live file being put in place by a restore (or by a copy that gives a
/// file written in place a name of its own, `sole_name`).
pub(crate) const RESTORE_EXT: &str = "restore";
/// Extension of a segment being copied before its first store (copy-on-write).
pub(crate) const COW_EXT: &str = "cow";
/// Folder of the ring's segment files.
pub const LANE_DIR: &str = "lane-0";

/// The buffer folder `dir` as the engine holds it: absolute, with every symbolic link
/// the caller's path goes through resolved (the user chose those). Everything the
/// engine then opens below it is resolved with no link at all (see `confined`), so a
/// link planted inside a buffer is refused, never followed. A part of the path that does
/// not exist yet (a buffer about to be created) is kept as given.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// std::os::unix::fs::symlink(dir.path(), dir.path().join("link"))?;
/// let root = replaystore::internal::storage::resolve_root(&dir.path().join("link").join("new-buffer"));
/// assert_eq!(root, dir.path().canonicalize()?.join("new-buffer"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn resolve_root(dir: &Path) -> PathBuf {
    let absolute = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        match std::env::current_dir() {
            Ok(cwd) => cwd.join(dir),
            Err(_) => return dir.to_path_buf(),
        }
    };
    let mut missing = Vec::new();
    let mut cur = absolute.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(cur) {
            return missing.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                cur = parent;
            }
            _ => return absolute,
        }
    }
}

/// Path of segment `n` of a buffer.
pub fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(LANE_DIR).join(format!("seg-{n:08}.dat"))
}

/// Path of segment `n` of the chunk ring (variable-length values, format version 2).
pub fn heap_segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(LANE_DIR).join(format!("heap-{n:08}.dat"))
}

/// One ring's segment files: the rows' (`seg-N.dat`) or the chunk ring's
/// (`heap-N.dat`). Everything that creates, maps, copies or checks a segment takes one,
/// so both rings get the same code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentSet {
    pub uuid: [u8; 16],
    pub capacity: u64,
    pub segment_slots: u64,
    pub segment_count: u64,
    pub stride: u64,
    pub heap: bool,
}

impl SegmentSet {
    /// The rows' segments of the buffer `sb` describes.
    pub(crate) fn rows(sb: &Superblock) -> SegmentSet {
        SegmentSet {
            uuid: sb.uuid,
            capacity: sb.capacity,
            segment_slots: sb.segment_slots,
            segment_count: sb.segment_count,
            stride: sb.row_stride,
            heap: false,
        }
    }

    /// The chunk ring's segments, if the buffer has one.
    pub(crate) fn heap(sb: &Superblock) -> Option<SegmentSet> {
        sb.heap.map(|h| SegmentSet {
            uuid: sb.uuid,
            capacity: h.capacity,
            segment_slots: h.segment_slots,
            segment_count: h.segment_count,
            stride: h.stride,
            heap: true,
        })
    }

    /// Allocated bytes of this set's segment files in `dir` (sparse chunk segments count
    /// only what was reserved).
    pub(crate) fn bytes_on_disk(&self, dir: &Path) -> u64 {
        (0..self.segment_count)
            .map(|n| file_bytes_on_disk(&self.path(dir, n)))
            .sum()
    }

    /// The rows' segments, then the chunk ring's if the buffer has one.
    pub(crate) fn all(sb: &Superblock) -> Vec<SegmentSet> {
        std::iter::once(SegmentSet::rows(sb))
            .chain(SegmentSet::heap(sb))
            .collect()
    }

    /// Path of segment `n`.
    pub(crate) fn path(&self, dir: &Path, n: u64) -> PathBuf {
        if self.heap {
            heap_segment_path(dir, n)
        } else {
            segment_path(dir, n)
        }
    }

    /// The header segment `n` must have.
    pub(crate) fn header(&self, n: u64) -> SegmentHeader {
        let first_slot = n * self.segment_slots;
        SegmentHeader {
            uuid: self.uuid,
            segment_no: n,
            first_slot,
            slots: self.segment_slots.min(self.capacity - first_slot),
            row_stride: self.stride,
            heap: self.heap,
        }
    }
}

/// Refuses a writer whose buffer folder `dir` (or, before it exists, its nearest
/// existing parent) is on a network file system, unless `REPLAYSTORE_ALLOW_NETWORK_FS=1`.
/// A file system that cannot be asked is let through.
pub(crate) fn refuse_network_fs(io: &dyn Io, dir: &Path) -> Result<()> {
    if std::env::var("REPLAYSTORE_ALLOW_NETWORK_FS").is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let Some(existing) = nearest_existing(dir) else {
        return Ok(());
    };
    match io.fs_magic(existing).ok().and_then(io::network_fs) {
        Some(fs) => Err(Error::NetworkFileSystem {
            dir: dir.to_path_buf(),
            fs,
        }),
        None => Ok(()),
    }
}

/// `dir` or its nearest existing parent: where questions about a folder about to be
/// created (its file system, its free space) are asked.
pub(crate) fn nearest_existing(dir: &Path) -> Option<&Path> {
    dir.ancestors().find(|p| p.exists())
}

/// Opens an existing file (read-write for the writer) and returns it with its length.
fn open_with_len(io: &dyn Io, path: &Path, access: Access) -> Result<(File, u64)> {
    let file = if access.writes_file() {
        io.open_rw(path)
    } else {
        io.open_ro(path)
    }
    .map_err(|e| Error::io("open", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    Ok((file, len))
}

/// Creates a new file with `len` bytes of disk reserved (a full disk is `DiskFull` here,
/// never a fault through a mapping later) and `header` written at offset 0.
fn create_reserved(io: &dyn Io, path: &Path, len: u64, header: &[u8]) -> Result<File> {
    let file = io
        .create_new(path)
        .map_err(|e| Error::io("create", path, e))?;
    reserve(io, &file, path, 0, len)?;
    io.write_at(&file, 0, header)
        .map_err(|e| Error::io("write header", path, e))?;
    Ok(file)
}

/// Reserves `len` bytes of `file` from `offset` on disk: a full disk is `DiskFull`.
fn reserve(io: &dyn Io, file: &File, path: &Path, offset: u64, len: u64) -> Result<()> {
    io.allocate(file, offset, len).map_err(|e| {
        if e.raw_os_error() == Some(28) || e.kind() == std::io::ErrorKind::StorageFull {
            Error::DiskFull {
                path: path.to_path_buf(),
                bytes: len,
            }
        } else {
            Error::io("allocate", path, e)
        }
    })
}

/// Creates segment file `n` at its length, sparse, and stamps its header. A segment
/// takes disk when the writer first stores into it ([`reserve_file`]): a buffer's rows
/// and values take disk as they arrive, not all at create.
pub(crate) fn create_segment(io: &dyn Io, dir: &Path, set: &SegmentSet, n: u64) -> Result<()> {
    let path = set.path(dir, n);
    let header = set.header(n);
    let file = io
        .create_new(&path)
        .map_err(|e| Error::io("create", &path, e))?;
    io.set_len(&file, header.file_len())
        .map_err(|e| Error::io("set length", &path, e))?;
    io.write_at(&file, 0, &header.encode())
        .map_err(|e| Error::io("write header", &path, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &path, e))?;
    Ok(())
}

/// Reserves `len` bytes of the file at `path` from `offset` on disk (writes through its
/// mapping there then cannot fault for lack of space); a full disk is `DiskFull`.
/// Idempotent: reserved bytes are left as they are.
pub(crate) fn reserve_file(io: &dyn Io, path: &Path, offset: u64, len: u64) -> Result<()> {
    let file = io.open_rw(path).map_err(|e| Error::io("open", path, e))?;
    reserve(io, &file, path, offset, len)
}

/// Opens and maps segment `n`, checking its length and header.
pub(crate) fn open_segment(
    io: &dyn Io,
    dir: &Path,
    set: &SegmentSet,
    n: u64,
    access: Access,
) -> Result<SegmentMap> {
    use std::os::unix::fs::MetadataExt;
    let path = set.path(dir, n);
    let header = set.header(n);
    let (file, len) = open_with_len(io, &path, access)?;
    let links = file
        .metadata()
        .map_err(|e| Error::io("stat", &path, e))?
        .nlink();
    if len < header.file_len() {
        return Err(Error::Truncated {
            file: path,
            expected: header.file_len(),
            got: len,
        });
    }
    // Read, not loaded through the mapping: a mapped load would leave the header's page
    // (a 2 MiB folio on ext4) resident in a reader that reads its rows with pread.
    let mut head = vec![0u8; DATA_OFFSET];
    io.read_at(&file, 0, &mut head)
        .map_err(|e| Error::io("read", &path, e))?;
    SegmentHeader::check(&head, &header).map_err(|p| p.into_error(&path, "segment header"))?;
    let raw = io
        .map(&file, header.file_len(), access)
        .map_err(|e| Error::io("mmap", &path, e))?;
    let mut seg = SegmentMap::new(
        raw,
        &path,
        header.slots as usize,
        set.stride as usize,
        access.can_store(),
    )?;
    // Only stores that reach the file can change a byte another name shows.
    seg.set_shared(access.writes_file() && links > 1);
    Ok(seg)
}

/// This machine's memory in bytes (`MemTotal`; `u64::MAX` where unknown), read once.
///
/// ```
/// assert!(replaystore::kernels::mem_total() > 0);
/// ```
pub fn mem_total() -> u64 {
    use std::sync::OnceLock;
    static MEM_TOTAL: OnceLock<u64> = OnceLock::new();
    *MEM_TOTAL.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(u64::MAX, |kb| kb.saturating_mul(1024))
    })
}

/// Whether `bytes` of rows take more than half of this machine's memory: most draws
/// then miss the page cache (issue 28, W4).
pub(crate) fn larger_than_memory(bytes: u64) -> bool {
    bytes > mem_total() / 2
}

/// Copies segment `n` before its first store while another name links it (a snapshot):
/// a new file gets the header and the rows `live` (row ranges; every other row reads as
/// never written), is made durable, mapped, and renamed over the live name. The old file
/// keeps the snapshot's bytes. Returns the new mapping and file; the caller must fsync
/// the lane folder before its next commit, so the rename is durable first.
pub(crate) fn copy_segment(
    io: &dyn Io,
    dir: &Path,
    set: &SegmentSet,
    n: u64,
    old: &SegmentMap,
    live: &[std::ops::Range<usize>],
) -> Result<SegmentMap> {
    let path = set.path(dir, n);
    let mut tmp = path.clone().into_os_string();
    tmp.push(".");
    tmp.push(COW_EXT);
    let tmp = PathBuf::from(tmp);
    match io.remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("remove", &tmp, e));
        }
        _ => {}
    }
    let header = set.header(n);
    let file = create_reserved(io, &tmp, header.file_len(), &header.encode())?;
    for rows in live {
        old.copy_rows_to(io, &file, rows.start, rows.end)
            .map_err(|e| Error::io("write", &tmp, e))?;
    }
    // Durable before the rename: a power loss must never leave the live name on a copy
    // whose rows (items an earlier commit covers) were still only in the page cache.
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &tmp, e))?;
    let raw = io
        .map(&file, header.file_len(), Access::Write)
        .map_err(|e| Error::io("mmap", &tmp, e))?;
    let mut seg = SegmentMap::new(raw, &path, header.slots as usize, set.stride as usize, true)?;
    // The copy was made reserved whole.
    seg.set_reserved();
    io.rename(&tmp, &path)
        .map_err(|e| Error::io("rename", &path, e))?;
    Ok(seg)
}

/// Checks segment `n`'s file without mapping it: present, long enough, header as
/// expected. (Cheap enough to run over every segment of a snapshot before restoring it.)
pub(crate) fn check_segment_file(io: &dyn Io, dir: &Path, set: &SegmentSet, n: u64) -> Result<()> {
    let path = set.path(dir, n);
    let header = set.header(n);
    let (file, len) = open_with_len(io, &path, Access::Read)?;
    if len < header.file_len() {
        return Err(Error::Truncated {
            file: path,
            expected: header.file_len(),
            got: len,
        });
    }
    let mut bytes = vec![0u8; crate::format::segment::HEADER_LEN];
    io.read_at(&file, 0, &mut bytes)
        .map_err(|e| Error::io("read", &path, e))?;
    SegmentHeader::check(&bytes, &header).map_err(|p| p.into_error(&path, "segment header"))
}

/// Lock file of the priority tree's owner: the writer of a prioritized buffer, or a
/// `PriorityOwner` process while writers add as actors.
pub(crate) const PRIORITY_LOCK: &str = "priorities.lock";

/// Takes the writer lock of `dir`, creating the lock file if needed.
pub(crate) fn lock(io: &dyn Io, dir: &Path) -> Result<File> {
    lock_named(io, dir, LOCK, writer_pid)
}

/// Takes the priority owner's lock of `dir` (see [`PRIORITY_LOCK`]).
pub(crate) fn lock_priorities(io: &dyn Io, dir: &Path) -> Result<File> {
    lock_named(io, dir, PRIORITY_LOCK, tree_owner_pid)
}

/// The process named as the priority tree's owner in its header, if any.
pub(crate) fn tree_owner_pid(io: &dyn Io, dir: &Path) -> Option<u32> {
    let path = tree_path(dir);
    let file = io.open_ro(&path).ok()?;
    let mut b = [0u8; 8];
    io.read_at(&file, crate::format::tree::OWNER_PID_OFF as u64, &mut b)
        .ok()?;
    u32::try_from(u64::from_le_bytes(b))
        .ok()
        .filter(|&p| p != 0)
}

/// Takes lock file `name` in `dir`; `holder` names the process holding it on conflict.
fn lock_named(
    io: &dyn Io,
    dir: &Path,
    name: &str,
    holder: fn(&dyn Io, &Path) -> Option<u32>,
) -> Result<File> {
    let path = dir.join(name);
    let file = match io.open_rw(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match io.create_new(&path) {
            Ok(f) => f,
            // Another process created it between our two calls.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                io.open_rw(&path).map_err(|e| Error::io("open", &path, e))?
            }
            Err(e) => return Err(Error::io("create", &path, e)),
        },
        Err(e) => return Err(Error::io("open", &path, e)),
    };
    // A lock just released can still be held for a moment by a child process that
    // another thread forked and that has not yet exec'd (it shares the open file
    // description until exec closes it): wait that out before calling it a conflict.
    const TRIES: u32 = 20;
    for attempt in 1..=TRIES {
        match io.try_lock_exclusive(&file) {
            Ok(()) => return Ok(file),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(11) =>
            {
                if attempt == TRIES {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(Error::io("lock", &path, e)),
        }
    }
    Err(Error::Locked {
        dir: dir.to_path_buf(),
        lock_file: path,
        holder: holder(io, dir),
    })
}

/// The running kernel's boot id (`/proc/sys/kernel/random/boot_id`), or zeros where it
/// cannot be read. A commit records it; an unclean open in the same boot knows the page
/// cache survived. Zeros never count as the same boot.
pub(crate) fn boot_id() -> [u8; 16] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    let mut id = [0u8; 16];
    if hex.len() == 32 {
        for (b, pair) in id.iter_mut().zip(hex.chunks(2)) {
            *b = std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .unwrap_or(0);
        }
    }
    id
}

/// Whether a commit was written in the running boot.
pub(crate) fn same_boot(commit: &Commit) -> bool {
    let now = boot_id();
    now != [0; 16] && commit.boot_id == now
}

/// Makes `path`, a file the engine writes in place (MANIFEST, `priorities.tree`), the
/// only name of its bytes. A file with other hard links (a buffer copied with `cp -al`,
/// or a link someone planted to a file elsewhere) would carry the engine's writes to
/// those names, so it is replaced by a copy of itself first (copy with fdatasync,
/// rename over the name, fsync of the folder), leaving the other names as they were.
/// Segments need none of this: a linked segment is copied before any store (see
/// `Ring::refresh_shared`), which is how snapshots share them.
pub(crate) fn sole_name(io: &dyn Io, path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if regular_file_meta(path).is_none_or(|m| m.nlink() <= 1) {
        // One name, or not a regular file at all (the open then refuses it).
        return Ok(());
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".");
    tmp.push(RESTORE_EXT);
    let tmp = PathBuf::from(tmp);
    match io.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove", &tmp, e)),
    }
    io.copy_file(path, &tmp)
        .map_err(|e| Error::io("copy", &tmp, e))?;
    crate::killpoint::hit("own-copy-made");
    io.rename(&tmp, path)
        .map_err(|e| Error::io("rename", path, e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    io.sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))
}

/// Gives a tree mapped as shared (`open_tree`) a file of its own, holding the same bytes,
/// and maps that writable: the copy is durable before its rename and the rename before
/// this returns (`sole_name`), as with a segment's copy-on-write. If the other names are
/// gone by now (the snapshot was deleted) nothing is copied.
pub(crate) fn private_tree(io: &dyn Io, map: &mut map::TreeMap) -> Result<()> {
    let raw = own_copy_mapped(io, map.path(), map.mapped_len())?;
    map.replace_mapping(raw)
}

/// Makes the file at `path` (written in place: the tree, the item states) the only
/// name of its bytes (`sole_name`) and maps `len` bytes of it writable.
fn own_copy_mapped(io: &dyn Io, path: &Path, len: usize) -> Result<memmap2::MmapRaw> {
    sole_name(io, path)?;
    let file = io.open_rw(path).map_err(|e| Error::io("open", path, e))?;
    io.map(&file, len as u64, Access::Write)
        .map_err(|e| Error::io("mmap", path, e))
}

/// Opens a file written in place (the tree, the item states) for `access`, with at
/// least `least` bytes. One with other names (a restore linked a snapshot's copy) is
/// opened read-only: its holder copies it before the first store, so a restore costs
/// links and a restored file that is only read is never copied. Returns the file, its
/// length, the access it was opened with and whether it is shared.
fn open_in_place(
    io: &dyn Io,
    path: &Path,
    access: Access,
    least: u64,
) -> Result<(File, u64, Access, bool)> {
    use std::os::unix::fs::MetadataExt;
    let shared = access.writes_file() && regular_file_meta(path).is_some_and(|m| m.nlink() > 1);
    let access = if shared { Access::Read } else { access };
    let (file, len) = open_with_len(io, path, access)?;
    if len < least {
        return Err(Error::Truncated {
            file: path.to_path_buf(),
            expected: least,
            got: len,
        });
    }
    Ok((file, len, access, shared))
}

/// The metadata of `path` if it is a regular file, the name itself (a link is not
/// followed: a planted link is nothing of the engine's, whatever it points to).
pub(crate) fn regular_file_meta(path: &Path) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
}

/// Bytes the files of a buffer occupy on disk (allocated blocks): MANIFEST, the
/// progress page, the tree, the item states, and the segments of every ring (rows, and the chunk ring if there
/// is one). Segments take disk as they are first written, so this grows as data arrives.
pub(crate) fn bytes_on_disk(dir: &Path, sb: &Superblock) -> u64 {
    buffer_files(dir, sb).map(|p| file_bytes_on_disk(&p)).sum()
}

/// The most the same files may take on disk: their lengths in whole blocks of their
/// file system, every segment written.
pub(crate) fn bytes_at_most(dir: &Path, sb: &Superblock) -> u64 {
    use std::os::unix::fs::MetadataExt;
    buffer_files(dir, sb)
        .filter_map(|p| regular_file_meta(&p))
        .map(|m| {
            m.len()
                .next_multiple_of(m.blksize().max(1))
                .max(m.blocks() * 512)
        })
        .sum()
}

/// The files `bytes_on_disk` and `bytes_at_most` count.
fn buffer_files(dir: &Path, sb: &Superblock) -> impl Iterator<Item = PathBuf> {
    let sets = SegmentSet::all(sb);
    let segments = sets
        .into_iter()
        .flat_map(move |set| (0..set.segment_count).map(move |n| (set, n)));
    let dir2 = dir.to_path_buf();
    [
        dir.join(MANIFEST),
        progress_path(dir),
        tree_path(dir),
        life_path(dir),
    ]
    .into_iter()
    .chain(segments.map(move |(set, n)| set.path(&dir2, n)))
}

/// Allocated bytes of the regular file at `path` (0 if there is none).
fn file_bytes_on_disk(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    regular_file_meta(path).map_or(0, |m| m.blocks() * 512)
}

/// Zeroes the owner word (and its check word) of the priorities file at `path` and seals
/// it with `body_crc`, the crc32 of its body, durably: a copy a settled owner made names
/// nobody, so `verify` judges its parents, and its seal lets a restore skip that
/// judgement while the copy is byte for byte what was sealed.
pub(crate) fn seal_tree_copy(io: &dyn Io, path: &Path, body_crc: u32) -> Result<()> {
    use crate::format::tree::{HEADER_LEN, OWNER_PID_OFF, encode_seal};
    let file = io.open_rw(path).map_err(|e| Error::io("open", path, e))?;
    let mut page = [0u8; HEADER_LEN];
    io.read_at(&file, 0, &mut page)
        .map_err(|e| Error::io("read", path, e))?;
    if let Some(owner) = page.get_mut(OWNER_PID_OFF..) {
        owner.fill(0);
    }
    encode_seal(&mut page, body_crc);
    io.write_at(
        &file,
        OWNER_PID_OFF as u64,
        page.get(OWNER_PID_OFF..).unwrap_or(&[]),
    )
    .map_err(|e| Error::io("write", path, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", path, e))
}

/// Path of the priorities file.
pub(crate) fn tree_path(dir: &Path) -> PathBuf {
    dir.join(crate::format::tree::FILE_NAME)
}

/// Creates the priorities file with its disk reserved and an empty tree (every leaf 0,
/// min-tree +inf), durable before it returns.
pub(crate) fn create_tree(
    io: &dyn Io,
    dir: &Path,
    header: &crate::format::tree::TreeHeader,
    rebuild: impl FnOnce(&mut [f64]),
) -> Result<()> {
    let path = tree_path(dir);
    let shape = header
        .shape()
        .map_err(|p| p.into_error(&path, "priorities header"))?;
    let len = shape.file_len();
    let file = create_reserved(io, &path, len, &header.encode())?;
    let raw = io
        .map(&file, len, Access::Write)
        .map_err(|e| Error::io("mmap", &path, e))?;
    let mut map = map::TreeMap::new(raw, &path, shape.words, true)?;
    rebuild(map.words_mut());
    map.flush(io).map_err(|e| Error::io("msync", &path, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &path, e))?;
    Ok(())
}

/// Opens and maps the priorities file, checking its header against the superblock.
pub(crate) fn open_tree(
    io: &dyn Io,
    dir: &Path,
    sb: &Superblock,
    access: Access,
) -> Result<(
    map::TreeMap,
    crate::format::tree::TreeHeader,
    crate::format::tree::TreeCounters,
)> {
    use crate::format::tree::{BODY_OFFSET, CAPACITY_OFF, HEADER_LEN, TreeHeader, UUID_OFF};
    let path = tree_path(dir);
    // A tree a restore linked is mapped read-only until its owner's first store
    // (`private_tree`).
    let (file, len, access, shared) = open_in_place(io, &path, access, BODY_OFFSET as u64)?;
    let raw = io
        .map(&file, len, access)
        .map_err(|e| Error::io("mmap", &path, e))?;
    let map = map::TreeMap::new(raw, &path, 0, access.can_store())?;
    let (header, counters) = TreeHeader::decode(&map.header(HEADER_LEN))
        .map_err(|p| p.into_error(&path, "priorities header"))?;
    let field = |offset: u64, field: &str, expected: String, got: String| Error::Corrupt {
        file: path.clone(),
        offset,
        field: format!("priorities header {field}"),
        expected,
        got,
    };
    if header.uuid != sb.uuid {
        return Err(field(
            UUID_OFF as u64,
            "uuid",
            "the manifest's uuid".into(),
            "another buffer's".into(),
        ));
    }
    if header.capacity != sb.capacity {
        return Err(field(
            CAPACITY_OFF as u64,
            "capacity",
            sb.capacity.to_string(),
            header.capacity.to_string(),
        ));
    }
    let shape = header
        .shape()
        .map_err(|p| p.into_error(&path, "priorities header"))?;
    if len < shape.file_len() {
        return Err(Error::Truncated {
            file: path,
            expected: shape.file_len(),
            got: len,
        });
    }
    let raw = io
        .map(&file, shape.file_len(), access)
        .map_err(|e| Error::io("mmap", &path, e))?;
    let mut map = map::TreeMap::new(raw, &path, shape.words, shared || access.can_store())?;
    if shared {
        map.set_shared();
    }
    Ok((map, header, counters))
}

/// Path of the item state file.
pub(crate) fn life_path(dir: &Path) -> PathBuf {
    dir.join(crate::format::lifecycle::FILE_NAME)
}

/// Creates the item state file: the header, then every word 0 (every item live and
/// never drawn), durable before it returns. Only the header page takes disk now; the
/// words of a segment's slots are reserved with its rows ([`reserve_life`]).
pub(crate) fn create_life(
    io: &dyn Io,
    dir: &Path,
    header: &crate::format::lifecycle::LifeHeader,
) -> Result<()> {
    let path = life_path(dir);
    let file = create_reserved(
        io,
        &path,
        crate::format::lifecycle::BODY_OFFSET as u64,
        &header.encode(),
    )?;
    io.set_len(&file, header.file_len())
        .map_err(|e| Error::io("set length", &path, e))?;
    io.sync_data(&file)
        .map_err(|e| Error::io("fdatasync", &path, e))
}

/// Reserves on disk the item state words of `count` slots from `first_slot` (before
/// the writer first stores rows there, so no store to a word faults for lack of space).
pub(crate) fn reserve_life(io: &dyn Io, dir: &Path, first_slot: u64, count: u64) -> Result<()> {
    let offset = crate::format::lifecycle::BODY_OFFSET as u64 + first_slot * 8;
    reserve_file(io, &life_path(dir), offset, count * 8)
}

/// Opens and maps the item state file, checking its header against the superblock. A
/// file with other names (a restore linked the snapshot's) is mapped read-only until
/// its holder's first store (`private_life`), as the tree is.
pub(crate) fn open_life(
    io: &dyn Io,
    dir: &Path,
    sb: &Superblock,
    access: Access,
) -> Result<(map::LifeMap, crate::format::lifecycle::LifeHeader)> {
    use crate::format::lifecycle::{BODY_OFFSET, CAPACITY_OFF, LifeHeader, UUID_OFF};
    let path = life_path(dir);
    let (file, len, access, shared) = open_in_place(io, &path, access, BODY_OFFSET as u64)?;
    let mut page = vec![0u8; BODY_OFFSET];
    io.read_at(&file, 0, &mut page)
        .map_err(|e| Error::io("read", &path, e))?;
    let header = LifeHeader::decode(&page).map_err(|p| p.into_error(&path, "item state header"))?;
    let field = |offset: usize, field: &str, expected: String, got: String| Error::Corrupt {
        file: path.clone(),
        offset: offset as u64,
        field: format!("item state header {field}"),
        expected,
        got,
    };
    if header.uuid != sb.uuid {
        let got = "another buffer's".into();
        return Err(field(UUID_OFF, "uuid", "the manifest's uuid".into(), got));
    }
    if header.capacity != sb.capacity {
        let (expected, got) = (sb.capacity.to_string(), header.capacity.to_string());
        return Err(field(CAPACITY_OFF, "capacity", expected, got));
    }
    if len < header.file_len() {
        return Err(Error::Truncated {
            file: path,
            expected: header.file_len(),
            got: len,
        });
    }
    let raw = io
        .map(&file, header.file_len(), access)
        .map_err(|e| Error::io("mmap", &path, e))?;
    let mut map = map::LifeMap::new(raw, &path, sb.capacity as usize, access.can_store())?;
    if shared {
        map.set_shared();
    }
    Ok((map, header))
}

/// Maps the header page of the item state file shared and writable: the rate
/// limiter's words, which every handle of a rate-limited buffer stores into (a reader
/// too). The header was checked by `open_life` first.
pub(crate) fn open_limiter(io: &dyn Io, dir: &Path) -> Result<map::LimiterMap> {
    let path = life_path(dir);
    let file = io.open_rw(&path).map_err(|e| Error::io("open", &path, e))?;
    let raw = io
        .map(
            &file,
            crate::format::lifecycle::BODY_OFFSET as u64,
            Access::Write,
        )
        .map_err(|e| Error::io("mmap", &path, e))?;
    map::LimiterMap::new(raw, &path)
}

/// Gives a state file mapped as shared (`open_life`) a file of its own holding the same
/// bytes, durable before it is renamed into place, and maps that writable.
pub(crate) fn private_life(io: &dyn Io, map: &mut map::LifeMap) -> Result<()> {
    let raw = own_copy_mapped(io, map.path(), map.mapped_len())?;
    map.replace_mapping(raw)
}

/// Path of the lane's progress page.
pub(crate) fn progress_path(dir: &Path) -> PathBuf {
    dir.join(LANE_DIR).join(PROGRESS)
}

/// File name of the progress page in a lane folder.
pub(crate) const PROGRESS: &str = "progress";

/// Opens the progress page: the writer (`Access::Write`) creates it when missing and
/// rewrites a damaged header (nothing ever trusts the page for recovery); a reader
/// (`Access::Read`) checks its header against the buffer's uuid and maps it shared,
/// writable only to add its draws (`reader_progress_file`).
pub(crate) fn open_progress(
    io: &dyn Io,
    dir: &Path,
    sb: &Superblock,
    access: Access,
) -> Result<map::ProgressMap> {
    use crate::format::progress::{self, FILE_LEN};
    use std::os::unix::fs::MetadataExt;
    let path = progress_path(dir);
    let page = progress::encode(&sb.uuid);
    if access.writes_file() && regular_file_meta(&path).is_some_and(|m| m.nlink() > 1) {
        // The page holds nothing to keep (recovery never reads it): a page with other
        // names loses its own, and a new one is made below, so no write reaches them.
        io.remove_file(&path)
            .map_err(|e| Error::io("remove", &path, e))?;
    }
    let (file, stores) = if access.writes_file() {
        match io.open_rw(&path) {
            Ok(file) => (file, map::Stores::All),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let file = create_reserved(io, &path, FILE_LEN as u64, &page)?;
                io.sync_data(&file)
                    .map_err(|e| Error::io("fdatasync", &path, e))?;
                (file, map::Stores::All)
            }
            Err(e) => return Err(Error::io("open", &path, e)),
        }
    } else {
        reader_progress_file(io, &path)?
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", &path, e))?
        .len();
    if len < FILE_LEN as u64 {
        if !access.writes_file() {
            return Err(Error::Truncated {
                file: path,
                expected: FILE_LEN as u64,
                got: len,
            });
        }
        io.allocate(&file, 0, FILE_LEN as u64)
            .map_err(|e| Error::io("allocate", &path, e))?;
    }
    let mapped = match stores {
        map::Stores::Nothing => Access::Read,
        map::Stores::All | map::Stores::ReaderDraws => Access::Write,
    };
    let raw = io
        .map(&file, FILE_LEN as u64, mapped)
        .map_err(|e| Error::io("mmap", &path, e))?;
    let map = map::ProgressMap::new(raw, &path, stores)?;
    if let Err(p) = progress::check(&map.header(), &sb.uuid) {
        if !access.writes_file() {
            return Err(p.into_error(&path, "progress header"));
        }
        let header = page.get(..progress::HEADER_LEN).unwrap_or(&[]);
        io.write_at(&file, 0, header)
            .map_err(|e| Error::io("write header", &path, e))?;
    }
    Ok(map)
}

/// A reader's progress page and what it may store there: its draws when the file
/// opens for writing and has no other name (a page linked elsewhere is not this
/// buffer's alone to write); nothing when the reader may not write it (permissions, a
/// read-only mount), which it then opens read-only: it draws, uncounted there.
fn reader_progress_file(io: &dyn Io, path: &Path) -> Result<(File, map::Stores)> {
    use std::io::ErrorKind::{PermissionDenied, ReadOnlyFilesystem};
    use std::os::unix::fs::MetadataExt;
    match io.open_rw(path) {
        Ok(file) => match file.metadata().is_ok_and(|m| m.nlink() == 1) {
            true => Ok((file, map::Stores::ReaderDraws)),
            false => Ok((file, map::Stores::Nothing)),
        },
        Err(e) if matches!(e.kind(), PermissionDenied | ReadOnlyFilesystem) => {
            let file = io.open_ro(path).map_err(|e| Error::io("open", path, e))?;
            Ok((file, map::Stores::Nothing))
        }
        Err(e) => Err(Error::io("open", path, e)),
    }
}

/// The process that last opened the buffer in `dir` for writing, as its progress page
/// says (`None` when the page is missing or names none): for the `Locked` message.
pub(crate) fn writer_pid(io: &dyn Io, dir: &Path) -> Option<u32> {
    let bytes = io.read(&progress_path(dir)).ok()?;
    let pid = crate::format::progress::writer_pid(&bytes);
    u32::try_from(pid).ok().filter(|&p| p != 0)
}
