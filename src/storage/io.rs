//! The one seam every file operation of the engine goes through.
//!
//! Tests and fuzzers swap [`OsIo`] for [`FaultyIo`] to fail the N-th operation (once or
//! from then on) and check that each failure becomes a typed error that loses nothing
//! already committed. Mappings are made here too, so a failed map is a fault point.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

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
    /// Reserves `len` bytes of disk for the file (fallocate), so writes through a
    /// mapping cannot fail for lack of space.
    fn allocate(&self, file: &File, len: u64) -> io::Result<()>;
    /// Writes all of `bytes` at `offset`.
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// fdatasync.
    fn sync_data(&self, file: &File) -> io::Result<()>;
    /// fsync of a directory, so created or renamed entries survive power loss.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Maps `len` bytes of the file shared, writable when `writable`.
    fn map(&self, file: &File, len: u64, writable: bool) -> io::Result<MmapRaw>;
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
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsIo;

impl Io for OsIo {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
    }
    fn open_rw(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(path)
    }
    fn open_ro(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn allocate(&self, file: &File, len: u64) -> io::Result<()> {
        fs2::FileExt::allocate(file, len)
    }
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn map(&self, file: &File, len: u64, writable: bool) -> io::Result<MmapRaw> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::other("mapping longer than the address space"))?;
        let mut opts = MmapOptions::new();
        opts.len(len);
        let map = if writable {
            opts.map_raw(file)?
        } else {
            opts.map_raw_read_only(file)?
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
        std::fs::create_dir_all(dir)
    }
    fn try_lock_exclusive(&self, file: &File) -> io::Result<()> {
        fs2::FileExt::try_lock_exclusive(file)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
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
/// use replaystore::storage::io::{FaultyIo, Io};
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
    fn allocate(&self, file: &File, len: u64) -> io::Result<()> {
        self.tick("allocate")?;
        self.inner.allocate(file, len)
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
    fn map(&self, file: &File, len: u64, writable: bool) -> io::Result<MmapRaw> {
        self.tick("map")?;
        self.inner.map(file, len, writable)
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
}
