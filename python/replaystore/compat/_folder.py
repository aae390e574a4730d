"""The folder an adapter keeps its buffer in: the one given, or a temporary one that
``close`` removes (an in-memory buffer's lifetime, for code that never named a path).
A temporary folder is also removed when the adapter is collected without ``close``, or
when the process exits (``weakref.finalize``), so nothing is left in the temporary
directory."""

from __future__ import annotations

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
        """The replaystore buffers to close (overridden where there are several)."""
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
