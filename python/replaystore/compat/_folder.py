"""The folder an adapter keeps its buffer in: the one given, or a temporary one that
``close`` removes (an in-memory buffer's lifetime, for code that never named a path).
A temporary folder is also removed when the adapter is collected without ``close``, or
when the process exits (``weakref.finalize``), so nothing is left in the temporary
directory."""

from __future__ import annotations

import json
import os
import tempfile
import weakref
from typing import Any, Optional

from .._confined import Confined
from .._native import ForeignFileError


class Folder:
    """Mixed into each adapter: ``path`` and ``close``."""

    _buffers: tuple = ()
    _remove_dir: Optional[weakref.finalize] = None

    def _take_folder(self, path: Optional[str], prefix: str) -> str:
        self._own_dir = path is None
        self._path = path or tempfile.mkdtemp(prefix=prefix)
        # Holds the path, not the adapter: it runs once, at close, collection or exit.
        self._remove_dir = (
            weakref.finalize(self, remove_own_folder, self._path) if self._own_dir else None
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


def value_space(items: int) -> int:
    """The default most the pickled objects of a ring of ``items`` may take (its
    ``heap_bytes``): 16 KiB per item and at least 256 MiB, so the large objects some
    libraries' users store per step (an env in Tianshou's ``info``, RLlib's ``infos``)
    fit a small buffer whole. The engine reserves disk only as values arrive.

    >>> value_space(100) == 256 << 20, value_space(1_000_000) == 16_384_000_000
    (True, True)
    """
    return max(256 << 20, 16384 * int(items))


def write_sidecar(folder: str, name: str, config: dict) -> None:
    """Writes an adapter's settings beside its buffer, atomically and inside the folder
    (``Confined.replace``): a kill leaves the old file or the new one, never half of one."""
    Confined(folder).replace(name, json.dumps(config, sort_keys=True).encode())


def read_sidecar(folder: str, name: str) -> Optional[dict]:
    """The settings an adapter wrote beside its buffer, or ``None`` if it wrote none. A
    link, a FIFO or a folder at the name is refused (``ForeignFileError``)."""
    data = Confined(folder).read(name)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError as e:
        raise ValueError(f"{os.path.join(folder, name)}: not the JSON an adapter writes ({e})") from None


def holds_buffer(folder: str) -> bool:
    """Whether ``folder`` already holds a replaystore buffer or set of lanes (anything at
    the name, a link included: the engine's open then refuses what it did not make)."""
    d = Confined(folder)
    try:
        return any(d.exists(f) for f in ("MANIFEST", "LANES"))
    except (FileNotFoundError, NotADirectoryError):
        return False


def remove_own_folder(path: str) -> None:
    """Removes a temporary folder the adapter made, following no link inside it."""
    try:
        Confined(path).remove_self()
    except OSError:
        pass  # already gone, or in use elsewhere: a temporary folder, never the user's


# -- generations (gen-K/ folders a buffer replaces whole) -------------------------------------
# A generation is removed only when the adapter's settings record it: ``making`` (written
# before it is created, so a kill mid-copy leaves it named) or ``retired`` (written before
# the one it replaced is removed). Nothing is ever removed by its name alone.


def generation_name(gen: int) -> str:
    return f"gen-{gen}"


def drop_recorded_generations(folder: str, saved: dict, current: int) -> bool:
    """Removes the generations ``saved`` records as made but not ``current``; whether it
    recorded any (the caller then writes its settings again without them)."""
    recorded = [int(saved[k]) for k in ("making", "retired") if saved.get(k) is not None]
    for gen in recorded:
        if gen != current:
            Confined(folder).remove_tree(generation_name(gen))
    return bool(recorded)


def refuse_unrecorded_generation(folder: str, gen: int) -> None:
    """Refuses to make generation ``gen`` where something already stands at its name: an
    open removed every generation the record named, so this one is not the buffer's."""
    found = Confined(folder).kind(generation_name(gen))
    if found is not None:
        raise ForeignFileError(
            f"{os.path.join(folder, generation_name(gen))}: {found} this buffer did not make "
            f"stands where it keeps its next generation; move it away")
