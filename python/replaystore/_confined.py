"""The files the Python package keeps beside a buffer (an adapter's settings, a drop-in's
generation folders, Tianshou's extra columns), held to the engine's rule: below the
folder the user named, no link is followed, only regular files are opened, a FIFO
cannot block an open, a file is replaced atomically inside the folder, and a name is
removed only when the caller's own record says the buffer made it.

The folder's own path may pass through links the user chose (``~/runs -> /mnt/big``),
as with the engine: it is opened once per call, and every name below it is a single
component resolved relative to that descriptor with ``O_NOFOLLOW``.

>>> import os, tempfile
>>> d = Confined(tempfile.mkdtemp())
>>> d.replace("settings.json", b"{}")
>>> d.read("settings.json")
b'{}'
>>> os.symlink("/etc/hostname", os.path.join(d.folder, "link.json"))
>>> d.read("link.json")
Traceback (most recent call last):
...
replaystore.ForeignFileError: .../link.json: found a symbolic link where replaystore keeps a regular file of its own (it follows no link and opens no special file)
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from typing import IO, Iterator, List, Optional

from ._native import ForeignFileError

_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)

_FILE = "a regular file"
_DIR = "a directory"


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")


class Confined:
    """One folder's names, each a single path component, opened without following links.

    Every method opens the folder afresh (a folder moved or replaced between calls is
    seen as it is now) and closes it before returning."""

    def __init__(self, folder: str) -> None:
        self.folder = os.fspath(folder)

    # -- what is there ---------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def _refuse(self, name: str, found: str, expected: str) -> ForeignFileError:
        return ForeignFileError(
            f"{self._path(name)}: found {found} where replaystore keeps {expected} of its own "
            f"(it follows no link and opens no special file)")

    @contextmanager
    def _dir(self) -> Iterator[int]:
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _check_name(name: str) -> None:
        if not name or "/" in name or name in (".", "..") or "\0" in name:
            raise ValueError(f"{name!r}: not a single name inside the folder")

    def _lstat(self, fd: int, name: str) -> Optional[os.stat_result]:
        self._check_name(name)
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def kind(self, name: str) -> Optional[str]:
        """What ``name`` is, in words (``"a symbolic link"``, ...), without following it;
        ``None`` if nothing is there (nor the folder)."""
        try:
            with self._dir() as fd:
                st = self._lstat(fd, name)
        except FileNotFoundError:
            return None
        return None if st is None else _kind(st.st_mode)

    def exists(self, name: str) -> bool:
        """Whether anything (a link included, not followed) is at ``name``."""
        return self.kind(name) is not None

    def names(self) -> List[str]:
        """The folder's entries, sorted; ``[]`` if the folder does not exist."""
        try:
            with self._dir() as fd:
                return sorted(os.listdir(fd))
        except FileNotFoundError:
            return []

    # -- regular files ---------------------------------------------------------------------

    def _open_file(self, fd: int, name: str, flags: int) -> int:
        """``name`` opened with ``flags`` relative to ``fd``: never through a link, never
        blocking on a FIFO, and refused unless it is a regular file."""
        self._check_name(name)
        try:
            f = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                        dir_fd=fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise self._refuse(name, "a symbolic link", _FILE) from None
            if e.errno in (errno.EISDIR, errno.ENXIO):
                st = self._lstat(fd, name)
                raise self._refuse(name, _kind(st.st_mode) if st else "a special file",
                                   _FILE) from None
            raise
        st = os.fstat(f)
        if not stat.S_ISREG(st.st_mode):
            os.close(f)
            raise self._refuse(name, _kind(st.st_mode), _FILE)
        os.set_blocking(f, True)
        return f

    def read(self, name: str) -> Optional[bytes]:
        """The bytes of the regular file ``name``; ``None`` if nothing is there (nor the
        folder)."""
        try:
            with self._dir() as fd:
                f = self._open_file(fd, name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        with os.fdopen(f, "rb") as fh:
            return fh.read()

    def replace(self, name: str, data: bytes) -> None:
        """Puts ``data`` at ``name`` atomically: written to ``name.tmp`` (a name kept for
        this, cleared first as the engine clears ``MANIFEST.tmp``: the entry is removed,
        never what a link there names), fsynced, renamed over ``name``, the folder
        fsynced. A kill leaves the old bytes or the new ones. Anything but a regular file
        at ``name``, or a folder at ``name.tmp``, is refused and left as it is. The folder
        is made if it is not there yet."""
        tmp = name + ".tmp"
        os.makedirs(self.folder, exist_ok=True)
        with self._dir() as fd:
            st = self._lstat(fd, name)
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise self._refuse(name, _kind(st.st_mode), _FILE)
            self._clear(fd, tmp)
            f = self._open_file(fd, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            with os.fdopen(f, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)

    def _clear(self, fd: int, name: str) -> None:
        """Removes the entry at a name kept for the buffer's own temporary files (a
        regular file, a link or a FIFO: the name only); a folder there is refused."""
        st = self._lstat(fd, name)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            raise self._refuse(name, _DIR, _FILE)
        os.unlink(name, dir_fd=fd)

    def open_in_place(self, name: str, create: bool = False) -> IO[bytes]:
        """``name`` opened for reading and writing in place (a memory map over it); with
        ``create``, a new empty file put there first by ``replace`` (never a truncation,
        which would empty every other name of a hard-linked file). A file with other
        names (a hard link to a file elsewhere) is first given bytes of its own, as the
        engine does with the files it writes in place, so a write reaches no other name."""
        if create:
            self.replace(name, b"")
        with self._dir() as fd:
            f = self._open_file(fd, name, os.O_RDWR)
            if os.fstat(f).st_nlink > 1:
                os.close(f)
                self._own_copy(fd, name)
                f = self._open_file(fd, name, os.O_RDWR)
        return os.fdopen(f, "r+b")

    def _own_copy(self, fd: int, name: str) -> None:
        src = self._open_file(fd, name, os.O_RDONLY)
        with os.fdopen(src, "rb") as fh:
            self.replace(name, fh.read())

    # -- folders ---------------------------------------------------------------------------

    def subdir(self, name: str, create: bool = False) -> str:
        """The path of the folder ``name`` inside this one, to hand to the engine (which
        resolves a path's links as the user's own): refused if a link or anything but a
        folder is there, made if ``create`` and absent. Where this folder does not exist
        yet, nothing can stand at the name: the engine makes both."""
        if create:
            os.makedirs(self.folder, exist_ok=True)
        try:
            with self._dir() as fd:
                st = self._lstat(fd, name)
                if st is None and create:
                    os.mkdir(name, 0o755, dir_fd=fd)
                elif st is not None and not stat.S_ISDIR(st.st_mode):
                    raise self._refuse(name, _kind(st.st_mode), _DIR)
        except FileNotFoundError:
            if create:
                raise
        return self._path(name)

    def remove_tree(self, name: str) -> None:
        """Removes ``name`` and all below it, following no link (a link is removed
        itself). Only for names the caller's record says the buffer made."""
        with self._dir() as fd:
            _remove_at(fd, name)

    def remove_self(self) -> None:
        """Removes the folder itself and all below it (a temporary folder the package
        made), following no link below it."""
        parent, name = os.path.split(os.path.abspath(self.folder))
        Confined(parent).remove_tree(name)


def _remove_at(fd: int, name: str) -> None:
    Confined._check_name(name)
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=fd)
        return
    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        # Swapped for a link between the look and the open: O_NOFOLLOW refused it.
        for entry in os.listdir(sub):
            _remove_at(sub, entry)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=fd)
