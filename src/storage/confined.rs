//! File operations that never follow a link and never open a special file.
//!
//! A buffer folder may be handed to us by someone else (a shared disk, a checkpoint
//! downloaded from a colleague, a folder another user can write). The engine therefore
//! opens, writes, renames and deletes only what it could have created: every path is
//! resolved with no symbolic link anywhere in it (`openat2` with `RESOLVE_NO_SYMLINKS`,
//! or a component-by-component `openat(O_NOFOLLOW)` walk where the kernel lacks it),
//! every file opened is checked to be a regular file (FIFOs, devices and sockets are
//! refused before a byte is read, and opened non-blocking so a FIFO cannot hang the
//! open), and names are removed with `unlinkat` relative to a parent opened the same way.
//!
//! The buffer's own path may contain links the user chose (`~/runs -> /mnt/big`): entry
//! points resolve it once with [`crate::storage::resolve_root`], so everything the engine
//! adds below it is held to the rule.
#![expect(unsafe_code, reason = "openat2, *at calls and readdir are C calls")]

pub use crate::error::foreign::{Kind, foreign};

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

impl Kind {
    fn of_mode(mode: libc::mode_t) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Link,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR | libc::S_IFBLK => Kind::Device,
            _ => Kind::Other,
        }
    }

    fn of_dirent(t: u8) -> Option<Kind> {
        Some(match t {
            libc::DT_REG => Kind::File,
            libc::DT_DIR => Kind::Dir,
            libc::DT_LNK => Kind::Link,
            libc::DT_FIFO => Kind::Fifo,
            libc::DT_SOCK => Kind::Socket,
            libc::DT_CHR | libc::DT_BLK => Kind::Device,
            _ => return None,
        })
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::other("a path with a NUL byte"))
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// ELOOP under `O_NOFOLLOW` / `RESOLVE_NO_SYMLINKS` means a link was met.
fn link_met(e: io::Error, expected: Kind) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        foreign(Kind::Link, expected)
    } else {
        e
    }
}

/// Set once `openat2` answered ENOSYS (an old kernel, or a sandbox that filters it):
/// every later resolution walks.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The kernel's `struct open_how` (libc's is non-exhaustive, so it cannot be built).
#[cfg(target_os = "linux")]
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(AT_FDCWD, path, flags, mode)` with no link anywhere in the path; `None`
/// where the kernel has no `openat2`.
#[cfg(target_os = "linux")]
fn openat2(path: &CString, flags: libc::c_int, mode: libc::mode_t) -> Option<io::Result<OwnedFd>> {
    if NO_OPENAT2.load(Ordering::Relaxed) {
        return None;
    }
    let how = OpenHow {
        flags: u64::from((flags | libc::O_NOFOLLOW | libc::O_CLOEXEC).cast_unsigned()),
        mode: if flags & libc::O_CREAT != 0 {
            u64::from(mode)
        } else {
            0
        },
        resolve: libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `path` is NUL-terminated and `how` a properly sized open_how, both alive
    // for the call; the kernel writes no memory of ours.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &raw const how,
            size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        let e = last_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            NO_OPENAT2.store(true, Ordering::Relaxed);
            return None;
        }
        return Some(Err(e));
    }
    let Ok(fd) = RawFd::try_from(fd) else {
        return Some(Err(io::Error::other(
            "openat2 returned an out-of-range descriptor",
        )));
    };
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Some(Ok(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(not(target_os = "linux"))]
fn openat2(_: &CString, _: libc::c_int, _: libc::mode_t) -> Option<io::Result<OwnedFd>> {
    None
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
fn openat(
    dir: RawFd,
    name: &CString,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and alive for the call; `dir` is a descriptor the
    // caller holds open (or AT_FDCWD).
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The same resolution as `openat2`'s, one component at a time: each folder opened
/// with `O_NOFOLLOW | O_DIRECTORY` relative to the one before.
fn walk(path: &Path, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY;
    let mut names = Vec::new();
    let mut absolute = false;
    for c in path.components() {
        match c {
            Component::RootDir => absolute = true,
            Component::CurDir => {}
            Component::Normal(n) => names.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a path the engine resolves may not climb with `..`",
                ));
            }
        }
    }
    let start = cstr(OsStr::new(if absolute { "/" } else { "." }))?;
    let mut dir = openat(libc::AT_FDCWD, &start, dir_flags, 0)?;
    let Some((last, folders)) = names.split_last() else {
        return openat(libc::AT_FDCWD, &start, flags, mode);
    };
    for name in folders {
        dir = openat(dir.as_raw_fd(), &cstr(name)?, dir_flags, 0)?;
    }
    openat(dir.as_raw_fd(), &cstr(last)?, flags, mode)
}

/// Opens `path` with no link anywhere in it.
fn resolve(
    path: &Path,
    flags: libc::c_int,
    mode: libc::mode_t,
    expected: Kind,
) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    let opened = match openat2(&c, flags, mode) {
        Some(r) => r,
        None => walk(path, flags, mode),
    };
    opened.map_err(|e| link_met(e, expected))
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is writable memory of the type fstat fills; `fd` is open.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(last_error());
    }
    // SAFETY: fstat returned 0, so it filled `st` (zeroed before anyway).
    Ok(unsafe { st.assume_init() })
}

fn fstatat(dir: RawFd, name: &CString) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `name` is NUL-terminated, `st` writable memory of the type fstatat fills,
    // `dir` an open descriptor; AT_SYMLINK_NOFOLLOW makes it describe a link itself.
    let ret = unsafe {
        libc::fstatat(
            dir,
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if ret != 0 {
        return Err(last_error());
    }
    // SAFETY: fstatat returned 0, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// Opens the regular file at `path`: `write` for reading and writing, `create` to make
/// it (it must not exist). Anything but a regular file is refused; a FIFO cannot block
/// the open (it is opened non-blocking, then refused).
pub(crate) fn open_file(path: &Path, write: bool, create: bool) -> io::Result<File> {
    let mut flags = if write { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_NONBLOCK;
    if create {
        flags |= libc::O_CREAT | libc::O_EXCL;
    }
    let fd = match resolve(path, flags, 0o644, Kind::File) {
        // A folder refuses O_RDWR before any fstat could say what it is.
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Err(foreign(Kind::Dir, Kind::File));
        }
        other => other?,
    };
    let st = fstat(fd.as_raw_fd())?;
    let kind = Kind::of_mode(st.st_mode);
    if kind != Kind::File {
        return Err(foreign(kind, Kind::File));
    }
    // Back to blocking: meaningless for a regular file on Linux, but a descriptor handed
    // to the rest of the engine should hold no surprise.
    // SAFETY: plain fcntl on a descriptor we own.
    let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, 0) };
    if ret != 0 {
        return Err(last_error());
    }
    Ok(File::from(fd))
}

/// Opens the directory at `path` (for listing or fsync).
pub(crate) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    match resolve(path, libc::O_RDONLY | libc::O_DIRECTORY, 0, Kind::Dir) {
        // O_DIRECTORY answers ENOTDIR for a link as for a file: say which it was.
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => match kind(path) {
            Ok(found) if found != Kind::Dir => Err(foreign(found, Kind::Dir)),
            _ => Err(e),
        },
        other => other,
    }
}

/// The folder holding `path`, opened, and the last name of `path`.
fn parent(path: &Path) -> io::Result<(OwnedFd, CString)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a path with no final name"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((open_dir(dir)?, cstr(name)?))
}

/// What `path` names, without following a link.
pub(crate) fn kind(path: &Path) -> io::Result<Kind> {
    let (dir, name) = parent(path)?;
    Ok(Kind::of_mode(fstatat(dir.as_raw_fd(), &name)?.st_mode))
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 { Ok(()) } else { Err(last_error()) }
}

/// Removes the name `path` (a link is removed itself, never what it points to).
pub(crate) fn remove_file(path: &Path) -> io::Result<()> {
    let (dir, name) = parent(path)?;
    // SAFETY: `name` is NUL-terminated, `dir` open; unlinkat never follows the last name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })
}

/// Removes the empty directory `path`.
pub(crate) fn remove_dir(path: &Path) -> io::Result<()> {
    let (dir, name) = parent(path)?;
    // SAFETY: as in `remove_file`; AT_REMOVEDIR fails on anything but a directory.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) })
}

/// Renames `from` to `to` (the names themselves: a link is moved, never followed).
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    let (fd, fname) = parent(from)?;
    let (td, tname) = parent(to)?;
    // SAFETY: both names NUL-terminated, both folders open for the call.
    check(unsafe {
        libc::renameat(
            fd.as_raw_fd(),
            fname.as_ptr(),
            td.as_raw_fd(),
            tname.as_ptr(),
        )
    })
}

/// Makes `link` another name of the regular file `original`.
pub(crate) fn hard_link(original: &Path, link: &Path) -> io::Result<()> {
    let (od, oname) = parent(original)?;
    let found = Kind::of_mode(fstatat(od.as_raw_fd(), &oname)?.st_mode);
    if found != Kind::File {
        return Err(foreign(found, Kind::File));
    }
    let (ld, lname) = parent(link)?;
    // SAFETY: both names NUL-terminated, both folders open; flags 0: `original` is not
    // followed (and was just checked to be a regular file).
    check(unsafe {
        libc::linkat(
            od.as_raw_fd(),
            oname.as_ptr(),
            ld.as_raw_fd(),
            lname.as_ptr(),
            0,
        )
    })
}

/// Makes the directory `path` and any missing parents; a link or a file in the way is
/// refused.
pub(crate) fn create_dir_all(path: &Path) -> io::Result<()> {
    match open_dir(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(p) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_all(p)?;
    }
    let (dir, name) = parent(path)?;
    // SAFETY: `name` NUL-terminated, `dir` open; mkdirat never follows the last name.
    let made = check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) });
    match made {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => open_dir(path).map(drop),
        other => other,
    }
}

/// fsync of the directory `path`.
pub(crate) fn sync_dir(path: &Path) -> io::Result<()> {
    File::from(open_dir(path)?).sync_all()
}

/// The entries of the directory `path` (not `.` or `..`), each with its kind, links
/// not followed.
pub(crate) fn list_dir(path: &Path) -> io::Result<Vec<(OsString, Kind)>> {
    let fd = open_dir(path)?;
    let raw = fd.as_raw_fd();
    // SAFETY: fdopendir takes ownership of the descriptor on success; on failure it is
    // still ours, so `fd` is forgotten only once the call succeeded.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        return Err(last_error());
    }
    std::mem::forget(fd);
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; zeroing it lets a NULL from readdir be told
        // apart as end-of-stream (errno still 0) or failure.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is the open stream fdopendir returned and not yet closed.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = last_error();
            break if e.raw_os_error().unwrap_or(0) == 0 {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: readdir returned a valid entry that stays valid until the next call on
        // this stream; its d_name is NUL-terminated.
        let (name, dtype) = unsafe {
            let d = &*entry;
            (
                std::ffi::CStr::from_ptr(d.d_name.as_ptr()).to_owned(),
                d.d_type,
            )
        };
        let bytes = name.as_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        // SAFETY: `stream` is open; dirfd gives its descriptor without transferring it.
        let dir = unsafe { libc::dirfd(stream) };
        let kind = match Kind::of_dirent(dtype) {
            Some(k) => k,
            None => match fstatat(dir, &name) {
                Ok(st) => Kind::of_mode(st.st_mode),
                Err(e) => break Err(e),
            },
        };
        out.push((OsStr::from_bytes(bytes).to_owned(), kind));
    };
    // SAFETY: closes the stream (and its descriptor) exactly once.
    unsafe { libc::closedir(stream) };
    result.map(|()| out)
}
