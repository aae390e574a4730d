//! The one seam every file operation of the engine goes through.
//!
//! Tests and fuzzers swap [`OsIo`] for [`FaultyIo`] to fail the N-th operation (once or
//! from then on) and check that each failure becomes a typed error that loses nothing
//! already committed. Mappings are made here too, so a failed map is a fault point.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::confined;
pub use super::confined::Kind;

/// File operations, named for what the engine needs of them.
pub trait Io: Send + Sync + fmt::Debug {
    /// Creates a file that must not exist yet, open for reading and writing.
    fn create_new(&self, path: &Path) -> io::Result<File>;
    /// Opens an existing file for reading and writing.
    fn open_rw(&self, path: &Path) -> io::Result<File>;
    /// Opens an existing file for reading.
    fn open_ro(&self, path: &Path) -> io::Result<File>;
    /// Reads a whole (small) file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Reserves disk for the `len` bytes of the file from `offset` (fallocate), so
    /// writes through a mapping there cannot fail for lack of space. The file grows to
    /// `offset + len` if it was shorter.
    fn allocate(&self, file: &File, offset: u64, len: u64) -> io::Result<()>;
    /// Sets the file's length (ftruncate): bytes past the old end read as zeros and
    /// take no disk until written or reserved.
    fn set_len(&self, file: &File, len: u64) -> io::Result<()>;
    /// Writes all of `bytes` at `offset`.
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// fdatasync.
    fn sync_data(&self, file: &File) -> io::Result<()>;
    /// fsync of a directory, so created or renamed entries survive power loss.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Maps `len` bytes of the file as `access` says.
    fn map(&self, file: &File, len: u64, access: Access) -> io::Result<MmapRaw>;
    /// msync of a byte range of a mapping.
    fn flush_map(&self, map: &MmapRaw, offset: usize, len: usize) -> io::Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock without waiting.
    fn try_lock_exclusive(&self, file: &File) -> io::Result<()>;
    /// Renames a file, replacing the target.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes `link` a new name of the file `original` (a hard link: no bytes copied).
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()>;
    /// Copies the file `from` to the new file `to` (in the kernel where it can), and
    /// makes the copy durable.
    fn copy_file(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// The `statfs` magic number of the file system holding `dir` (0 where unknown).
    fn fs_magic(&self, dir: &Path) -> io::Result<i64>;
    /// Starts writing back `len` bytes of the file at `path` from `offset`, and with
    /// `wait` also waits until they are written (`sync_file_range`: no durability, no
    /// metadata, no device cache flush; a later msync or fdatasync still makes them
    /// durable, and only faster). Advice: a seam that does nothing is correct, so that is
    /// the default.
    fn write_behind(&self, path: &Path, offset: u64, len: u64, wait: bool) -> io::Result<()> {
        let _ = (path, offset, len, wait);
        Ok(())
    }
    /// The entries of a directory with their kinds, links not followed.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<(OsString, Kind)>> {
        confined::list_dir(dir)
    }
    /// What a name is, without following a link.
    fn kind(&self, path: &Path) -> io::Result<Kind> {
        confined::kind(path)
    }
}

/// The largest file [`Io::read`] reads whole: a MANIFEST, a LANES file or a restore
/// intent is a few pages; a file claiming more is not one the engine wrote, and reading
/// it (or a device behind it) must not eat the memory.
pub const MAX_WHOLE_READ: u64 = 64 << 20;

/// The name of a network file system, by `statfs` magic: where a writer must not run
/// (its shared mappings are not coherent between machines, its flock may not lock).
pub fn network_fs(magic: i64) -> Option<&'static str> {
    match magic {
        0x6969 => Some("nfs"),
        0x517b => Some("smb"),
        0xff53_4d42 => Some("cifs"),
        0xfe53_4d42 => Some("smb2"),
        0x0102_1997 => Some("9p"),
        0x564c => Some("ncp"),
        0x6b41_4653 => Some("afs"),
        0x0bd0_0bd0 => Some("lustre"),
        0x4750_4653 => Some("gpfs"),
        _ => None,
    }
}

/// How a file is opened and mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Shared and writable: the writer's view; stores reach the file.
    Write,
    /// Shared and read-only: sees the writer's stores as they happen.
    Read,
    /// Private copy-on-write: stores stay in this process and never reach the file.
    /// For frozen files (snapshots): the engine's own code paths may run over them
    /// unchanged without any risk of changing a byte on disk.
    Frozen,
}

impl Access {
    /// Whether the file is opened for writing.
    pub fn writes_file(self) -> bool {
        self == Access::Write
    }

    /// Whether stores into the mapping are allowed (to the file or to private pages).
    pub fn can_store(self) -> bool {
        self != Access::Read
    }
}

/// The real file system, held to the engine's rule for files (see
/// `storage::confined`): no path is resolved through a symbolic link, only regular
/// files are opened, and removals never follow a name.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsIo;

impl Io for OsIo {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        confined::open_file(path, true, true)
    }
    fn open_rw(&self, path: &Path) -> io::Result<File> {
        confined::open_file(path, true, false)
    }
    fn open_ro(&self, path: &Path) -> io::Result<File> {
        confined::open_file(path, false, false)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = confined::open_file(path, false, false)?;
        let len = file.metadata()?.len();
        if len > MAX_WHOLE_READ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the file is {len} bytes, more than any file the engine reads whole \
                     ({MAX_WHOLE_READ})"
                ),
            ));
        }
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        // `take`: a file growing under us still cannot make this read unbounded.
        file.take(MAX_WHOLE_READ).read_to_end(&mut out)?;
        Ok(out)
    }
    fn read_at(&self, file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    fn allocate(&self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        reserve(file, offset, len)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        confined::sync_dir(dir)
    }
    fn map(&self, file: &File, len: u64, access: Access) -> io::Result<MmapRaw> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::other("mapping longer than the address space"))?;
        let mut opts = MmapOptions::new();
        opts.len(len);
        let map = match access {
            Access::Write => opts.map_raw(file)?,
            Access::Read => opts.map_raw_read_only(file)?,
            Access::Frozen => map_private(&opts, file)?,
        };
        // Large page-cache folios mapped by PMDs: random row reads then cost no TLB walk
        // per 4 KiB page. A hint; kernels without file THP ignore it.
        let _ = map.advise(memmap2::Advice::HugePage);
        Ok(map)
    }
    fn flush_map(&self, map: &MmapRaw, offset: usize, len: usize) -> io::Result<()> {
        map.flush_range(offset, len)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        confined::create_dir_all(dir)
    }
    fn try_lock_exclusive(&self, file: &File) -> io::Result<()> {
        fs2::FileExt::try_lock_exclusive(file)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        confined::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        confined::remove_file(path)
    }
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        confined::hard_link(original, link)
    }
    fn copy_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        let src = self.open_ro(from)?;
        let dst = self.create_new(to)?;
        copy_sparse(&src, &dst)?;
        dst.sync_data()
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        confined::remove_dir(dir)
    }
    fn fs_magic(&self, dir: &Path) -> io::Result<i64> {
        statfs_magic(dir)
    }
    fn write_behind(&self, path: &Path, offset: u64, len: u64, wait: bool) -> io::Result<()> {
        start_writeback(&self.open_ro(path)?, offset, len, wait)
    }
}

/// `sync_file_range(2)` of a byte range: start its writeback, and with `wait` also wait
/// for it (and for writeback already under way there) to finish.
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "sync_file_range is a C call")]
fn start_writeback(file: &File, offset: u64, len: u64, wait: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) else {
        return Err(io::Error::other("range past the largest off_t"));
    };
    let flags = if wait {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER
    } else {
        libc::SYNC_FILE_RANGE_WRITE
    };
    // SAFETY: the descriptor stays open while `file` is borrowed, and the call touches no
    // memory of this process.
    let ret = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `posix_fadvise(WILLNEED)` of a byte range: the kernel starts reading it into the page
/// cache and returns at once. A hint, not an operation: never a fault point, and an
/// error (an old kernel) changes nothing but speed.
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "posix_fadvise is a C call")]
pub(crate) fn will_need(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: the descriptor stays open while `file` is borrowed, and the call touches no
    // memory of this process.
    let _ =
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn will_need(_file: &File, _offset: u64, _len: u64) {}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64, _wait: bool) -> io::Result<()> {
    Ok(())
}

/// `statfs(2)`'s `f_type` for `dir`.
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "statfs is a C call")]
fn statfs_magic(dir: &Path) -> io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a path with a NUL byte"))?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `path` is NUL-terminated and outlives the call; `st` is writable memory of
    // the type statfs fills.
    let ret = unsafe { libc::statfs(path.as_ptr(), st.as_mut_ptr()) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statfs returned 0, so it filled `st` (and it was zeroed before anyway).
    let st = unsafe { st.assume_init() };
    #[allow(
        clippy::useless_conversion,
        reason = "f_type is i64 on x86_64 glibc, a 32-bit type on other Linux targets"
    )]
    Ok(i64::from(st.f_type))
}

#[cfg(not(target_os = "linux"))]
fn statfs_magic(_dir: &Path) -> io::Result<i64> {
    Ok(0)
}

/// Reserves disk for the `len` bytes of `file` from `offset`. Not fs2's `allocate`: it reads
/// errno after `posix_fallocate`, which returns its error number and leaves errno
/// alone (fs2-rs pull request 42, unmerged), so a full disk came back as whatever errno
/// held before and never as `DiskFull`.
#[expect(unsafe_code, reason = "posix_fallocate is a C call")]
fn reserve(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let too_long = |_| io::Error::other("file length over the largest off_t");
    let offset = libc::off_t::try_from(offset).map_err(too_long)?;
    let len = libc::off_t::try_from(len).map_err(too_long)?;
    // SAFETY: the descriptor stays open while `file` is borrowed, and the call touches no
    // memory of this process.
    let ret = unsafe { libc::posix_fallocate(file.as_raw_fd(), offset, len) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(ret))
    }
}

/// Copies `src` into the empty file `dst` keeping its holes: segments take disk only
/// where they were written, and a copy (a snapshot brought from another file system)
/// must not write their holes out as zeros, as one `copy_file_range` over the whole file
/// does on a file system without reflinks. Each data range `SEEK_DATA` and `SEEK_HOLE`
/// name is copied in the kernel (`copy_range`); a file system without them reports the
/// whole file as one range, which is the copy as it was before. The rest is the length.
fn copy_sparse(src: &File, dst: &File) -> io::Result<()> {
    let len = src.metadata()?.len();
    dst.set_len(len)?;
    let mut at = 0;
    while at < len {
        let Some(start) = seek(src, at, libc::SEEK_DATA)? else {
            break;
        };
        let end = seek(src, start, libc::SEEK_HOLE)?.unwrap_or(len).min(len);
        copy_range(src, dst, start, end.saturating_sub(start))?;
        at = end.max(start + 1);
    }
    Ok(())
}

/// Copies `len` bytes at `offset` of `src` to the same offset of `dst`: with
/// `copy_file_range` (no user-space pass, and the page cache fills as it did for the
/// whole-file copy), or with `pread`/`pwrite` where the kernel cannot (another file
/// system type, an old kernel).
#[expect(unsafe_code, reason = "copy_file_range is a C call")]
fn copy_range(src: &File, dst: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let too_far = |_| io::Error::other("offset over the largest off_t");
    let (mut from, mut to) = (
        libc::off64_t::try_from(offset).map_err(too_far)?,
        libc::off64_t::try_from(offset).map_err(too_far)?,
    );
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left.min(1 << 30)).unwrap_or(1 << 30);
        // SAFETY: both descriptors stay open while `src` and `dst` are borrowed; the
        // kernel reads and writes the two offsets, locals of this frame that outlive the
        // call, and no other memory of this process.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut from,
                dst.as_raw_fd(),
                &mut to,
                want,
                0,
            )
        };
        if n > 0 {
            left -= n as u64;
            continue;
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank during its copy",
            ));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL) => break,
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
    // What copy_file_range could not do, through this process's memory.
    let mut pos = len - left + offset;
    let end = offset + len;
    let mut buf = vec![0u8; usize::try_from(left.min(1 << 20)).unwrap_or(1 << 20)];
    while pos < end {
        let n = buf
            .len()
            .min(usize::try_from(end - pos).unwrap_or(usize::MAX));
        let chunk = buf.get_mut(..n).unwrap_or_default();
        src.read_exact_at(chunk, pos)?;
        dst.write_all_at(chunk, pos)?;
        pos += n as u64;
    }
    Ok(())
}

/// `lseek(fd, offset, whence)`: the offset found, or `None` where nothing lies past
/// `offset` (ENXIO).
#[expect(unsafe_code, reason = "lseek is a C call")]
fn seek(file: &File, offset: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    use std::os::fd::AsRawFd;
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::other("offset over the largest off_t"))?;
    // SAFETY: the descriptor stays open while `file` is borrowed; the call moves only
    // the file's offset (this code reads and writes by position, never by that offset)
    // and touches no memory of this process.
    let at = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if at >= 0 {
        return Ok(Some(at as u64));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        _ => Err(e),
    }
}

/// A private (copy-on-write) mapping, handed back as raw memory like the others.
#[expect(unsafe_code, reason = "memmap2 marks private mappings unsafe")]
fn map_private(opts: &MmapOptions, file: &File) -> io::Result<MmapRaw> {
    // The engine maps only published snapshot files this way, which nothing writes.
    // SAFETY: unsafe because the file could change under the mapping; it becomes `MmapRaw`
    // at once, reached only through raw pointers that never assume the bytes are stable.
    let map = unsafe { opts.map_copy(file) }?;
    Ok(MmapRaw::from(map))
}

/// Shared handle to the seam.
pub type IoRef = Arc<dyn Io>;

/// The default seam: the real file system.
pub fn os() -> IoRef {
    Arc::new(OsIo)
}

/// A seam that fails chosen operations, for fault-injection tests.
///
/// ```
/// use replaystore::io::{FaultyIo, Io};
/// let io = FaultyIo::fail_from(0);
/// assert!(io.create_dir_all(std::path::Path::new("/tmp")).is_err());
/// assert_eq!(io.ops(), 1);
/// ```
#[derive(Debug)]
pub struct FaultyIo {
    inner: OsIo,
    ops: AtomicU64,
    fail_at: u64,
    sticky: bool,
    only: Option<&'static str>,
    errno: Option<i32>,
    fs_magic: Option<i64>,
}

impl FaultyIo {
    /// Fails only the operation numbered `n` (0-based), then works again.
    pub fn fail_once(n: u64) -> Self {
        FaultyIo {
            inner: OsIo,
            ops: AtomicU64::new(0),
            fail_at: n,
            sticky: false,
            only: None,
            errno: None,
            fs_magic: None,
        }
    }

    /// Fails operation `n` and every one after it.
    pub fn fail_from(n: u64) -> Self {
        FaultyIo {
            sticky: true,
            ..FaultyIo::fail_once(n)
        }
    }

    /// Counts (and fails) only operations of this name, e.g. `"flush_map"`.
    pub fn only(mut self, op: &'static str) -> Self {
        self.only = Some(op);
        self
    }

    /// Fails with this OS error number (e.g. 28, ENOSPC) instead of a generic error.
    pub fn errno(mut self, errno: i32) -> Self {
        self.errno = Some(errno);
        self
    }

    /// Reports every folder as on the file system with this `statfs` magic (e.g.
    /// 0x6969, NFS), to test what a writer refuses.
    pub fn fs_magic(mut self, magic: i64) -> Self {
        self.fs_magic = Some(magic);
        self
    }

    /// Operations counted so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    fn tick(&self, op: &'static str) -> io::Result<()> {
        if self.only.is_some_and(|o| o != op) {
            return Ok(());
        }
        let n = self.ops.fetch_add(1, Ordering::Relaxed);
        if n == self.fail_at || (self.sticky && n > self.fail_at) {
            Err(match self.errno {
                Some(errno) => io::Error::from_raw_os_error(errno),
                None => io::Error::other(format!("injected fault in {op} (operation {n})")),
            })
        } else {
            Ok(())
        }
    }
}

impl Io for FaultyIo {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        self.tick("create_new")?;
        self.inner.create_new(path)
    }
    fn open_rw(&self, path: &Path) -> io::Result<File> {
        self.tick("open_rw")?;
        self.inner.open_rw(path)
    }
    fn open_ro(&self, path: &Path) -> io::Result<File> {
        self.tick("open_ro")?;
        self.inner.open_ro(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.tick("read")?;
        self.inner.read(path)
    }
    fn read_at(&self, file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.tick("read_at")?;
        self.inner.read_at(file, offset, buf)
    }
    fn allocate(&self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        self.tick("allocate")?;
        self.inner.allocate(file, offset, len)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        self.tick("set_len")?;
        self.inner.set_len(file, len)
    }
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.tick("write_at")?;
        self.inner.write_at(file, offset, bytes)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        self.tick("sync_data")?;
        self.inner.sync_data(file)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.tick("sync_dir")?;
        self.inner.sync_dir(dir)
    }
    fn map(&self, file: &File, len: u64, access: Access) -> io::Result<MmapRaw> {
        self.tick("map")?;
        self.inner.map(file, len, access)
    }
    fn flush_map(&self, map: &MmapRaw, offset: usize, len: usize) -> io::Result<()> {
        self.tick("flush_map")?;
        self.inner.flush_map(map, offset, len)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.tick("create_dir_all")?;
        self.inner.create_dir_all(dir)
    }
    fn try_lock_exclusive(&self, file: &File) -> io::Result<()> {
        self.tick("try_lock_exclusive")?;
        self.inner.try_lock_exclusive(file)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.tick("rename")?;
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.tick("remove_file")?;
        self.inner.remove_file(path)
    }
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        self.tick("hard_link")?;
        self.inner.hard_link(original, link)
    }
    fn copy_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.tick("copy_file")?;
        self.inner.copy_file(from, to)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.tick("remove_dir")?;
        self.inner.remove_dir(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<(OsString, Kind)>> {
        self.tick("list_dir")?;
        self.inner.list_dir(dir)
    }
    fn kind(&self, path: &Path) -> io::Result<Kind> {
        self.tick("kind")?;
        self.inner.kind(path)
    }
    fn write_behind(&self, path: &Path, offset: u64, len: u64, wait: bool) -> io::Result<()> {
        self.tick("write_behind")?;
        self.inner.write_behind(path, offset, len, wait)
    }
    fn fs_magic(&self, dir: &Path) -> io::Result<i64> {
        // A question, not an operation on a file: never counted, never failed.
        match self.fs_magic {
            Some(m) => Ok(m),
            None => self.inner.fs_magic(dir),
        }
    }
}
