"""The folder an adapter keeps its buffer in: the one given, or a temporary one that
``close`` removes (an in-memory buffer's lifetime, for code that never named a path).
A temporary folder is also removed when the adapter is collected without ``close``, or
when the process exits (``weakref.finalize``), so nothing is left in the temporary
directory."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from typing import Any, Optional


class Folder:
    """Mixed into each adapter: ``path`` and ``close``."""

    _buffers: tuple = ()
    _remove_dir: Optional[weakref.finalize] = None

    def _take_folder(self, path: Optional[str], prefix: str) -> str:
        self._own_dir = path is None
        self._path = path or tempfile.mkdtemp(prefix=prefix)
        # Holds the path, not the adapter: it runs once, at close, collection or exit.
        self._remove_dir = (
            weakref.finalize(self, shutil.rmtree, self._path, True) if self._own_dir else None
        )
        return self._path

    @property
    def path(self) -> str:
        """The folder the buffer lives in."""
        return self._path

    def _open_buffers(self) -> list:
        """What ``close`` closes: the replaystore buffers, or the stores and per-policy
        adapters over them (anything with ``close``); overridden where it is not ``_buf``."""
        buf = getattr(self, "_buf", None)
        return [buf] if buf is not None else []

    def close(self) -> None:
        """Closes the buffer (durable); a temporary folder is removed."""
        for buf in self._open_buffers():
            buf.close()
        if self._remove_dir is not None:
            self._remove_dir()

    def __enter__(self):
        return self

    def __exit__(self, *args: Any) -> bool:
        self.close()
        return False


def write_sidecar(folder: str, name: str, config: dict) -> None:
    """Writes an adapter's settings beside its buffer, atomically: a temporary file,
    fsynced, renamed over the old one, the folder fsynced. A kill leaves the old file or
    the new one, never half of one."""
    target = os.path.join(folder, name)
    tmp = target + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_sidecar(folder: str, name: str) -> Optional[dict]:
    """The settings an adapter wrote beside its buffer, or ``None`` if it wrote none."""
    target = os.path.join(folder, name)
    if not os.path.exists(target):
        return None
    with open(target) as f:
        try:
            return json.load(f)
        except ValueError as e:
            raise ValueError(f"{target}: not the JSON an adapter writes ({e})") from None


def holds_buffer(folder: str) -> bool:
    """Whether ``folder`` already holds a replaystore buffer or set of lanes."""
    return any(os.path.exists(os.path.join(folder, f)) for f in ("MANIFEST", "LANES"))
