"""The folder an adapter keeps its buffer in: the one given, or a temporary one that
``close`` removes (an in-memory buffer's lifetime, for code that never named a path)."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any, Optional


class Folder:
    """Mixed into each adapter: ``path`` and ``close``."""

    _buffers: tuple = ()

    def _take_folder(self, path: Optional[str], prefix: str) -> str:
        self._own_dir = path is None
        self._path = path or tempfile.mkdtemp(prefix=prefix)
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
        if self._own_dir:
            shutil.rmtree(self._path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *args: Any) -> bool:
        self.close()
        return False
