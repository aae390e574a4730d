"""Type stubs of the native module (re-exported by ``replaystore``)."""

from os import PathLike
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

FORMAT_VERSION: int

_Path = Union[str, PathLike[str]]
_DTypeLike = Any
_FieldSpec = Union[_DTypeLike, Tuple[_DTypeLike, Tuple[int, ...]]]
_Batch = Dict[str, np.ndarray]

class Error(Exception):
    """Base class of every replaystore error."""

class NotABufferError(Error):
    """The folder holds no buffer (no MANIFEST), or a lane set where one ring was asked for."""

class VersionError(Error):
    """The files were written by a newer replaystore: upgrade to read them."""

class LockedError(Error):
    """Another process writes the buffer (or owns its priorities); the message names it."""

class CorruptError(Error):
    """A file failed a check: the message names the file, the offset and the check."""

class DiskFullError(Error):
    """The disk could not hold the buffer's files (reserved up front, never mid-write)."""

class SchemaError(Error):
    """Arrays that do not fit the schema: missing or unknown field, dtype, shape, length, layout."""

class EmptyError(Error):
    """Nothing to draw from: the buffer is empty, or every priority is 0."""

class EvictedError(Error):
    """An index that is no longer (or not yet) live."""

class StateError(Error):
    """A state that does not belong to this buffer, or names a snapshot it no longer has."""

class ReadOnlyError(Error):
    """A write through a read-only handle, on a closed buffer, or after a failed sync."""

class Schema:
    """The fields every item has: ``Schema({"obs": ("float32", (17,)), "reward": "float32"})``
    or a list of ``(name, dtype, shape)``. ``indices``, ``weights`` and ``offsets`` are
    reserved."""

    def __init__(
        self, fields: Union[Mapping[str, _FieldSpec], Iterable[Tuple[Any, ...]], "Schema"]
    ) -> None: ...
    @staticmethod
    def from_spaces(observation_space: Any, action_space: Any) -> "Schema":
        """The schema of a transition for Gymnasium spaces."""
    @property
    def fields(self) -> list[Tuple[str, str, Tuple[int, ...]]]:
        """``[(name, dtype str, shape), ...]`` in order."""
    @property
    def names(self) -> list[str]:
        """Field names in order."""
    def __len__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...

class ReplayBuffer:
    """A replay buffer in a folder, opened by the one process that writes it."""

    @staticmethod
    def create(
        path: _Path,
        schema: Union[Schema, Mapping[str, _FieldSpec]],
        capacity: int,
        *,
        alpha: Optional[float] = None,
        eps: float = 1e-6,
        seed: Optional[int] = None,
        segment_slots: Optional[int] = None,
        fragments: bool = False,
    ) -> "ReplayBuffer":
        """Creates a buffer of ``capacity`` items; ``alpha`` makes it prioritized;
        ``fragments`` keeps each ``add_batch`` call whole for ``sample_fragments``."""
    @staticmethod
    def open(path: _Path, *, actor: bool = False) -> "ReplayBuffer":
        """Opens the buffer for writing (``actor=True``: beside a priority owner)."""
    def add(self, **fields: Any) -> int:
        """Adds one item; returns its index."""
    def add_batch(
        self, batch: Mapping[str, npt.ArrayLike], *, priorities: Optional[npt.ArrayLike] = None
    ) -> npt.NDArray[np.uint64]:
        """Adds ``n`` items (batch dimension first), with initial priorities if given;
        returns their indices."""
    def get(self, indices: npt.ArrayLike) -> _Batch:
        """The live items at ``indices`` (``EvictedError`` for one that is not)."""
    def clear(self) -> None:
        """Drops every item."""
    @property
    def max_priority(self) -> Optional[float]:
        """The ``priority + eps`` new items get (``None`` without priorities)."""
    def sample(
        self,
        n: int,
        *,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        replace: bool = True,
    ) -> _Batch:
        """``n`` items as one array per field plus ``indices`` (and ``weights`` with ``beta``)."""
    def sample_fragments(
        self, n: int, *, beta: Optional[float] = None, seed: Optional[int] = None
    ) -> _Batch:
        """``n`` whole fragments: rows concatenated, ``indices``, ``offsets`` (n + 1) and,
        with ``beta``, one weight per fragment."""
    def update_priorities(
        self, indices: npt.ArrayLike, priorities: npt.ArrayLike
    ) -> Dict[str, int]:
        """Sets priorities; returns ``{"applied": .., "stale": ..}``."""
    def get_state(self) -> Dict[str, Any]:
        """A small picklable checkpoint of the buffer, taken in milliseconds."""
    def set_state(self, state: Union[Mapping[str, Any], bytes]) -> None:
        """Puts the buffer back to a state from ``get_state``."""
    def stats(self) -> Dict[str, int]:
        """Counters and sizes."""
    def flush(self) -> None:
        """Makes everything added so far survive power loss."""
    def close(self) -> None:
        """Flushes and closes (twice is fine)."""
    @property
    def schema(self) -> Schema: ...
    @property
    def path(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "ReplayBuffer": ...
    def __exit__(self, *args: Any) -> bool: ...

class Reader:
    """A read-only view of a buffer another process writes: no lock, nothing written."""

    @staticmethod
    def open(path: _Path, *, snapshot: Optional[str] = None) -> "Reader":
        """Opens the buffer (or its snapshot) for reading."""
    def sample(
        self,
        n: int,
        *,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        replace: bool = True,
    ) -> _Batch:
        """``n`` of the items live now, as ``ReplayBuffer.sample``."""
    def stats(self) -> Dict[str, int]: ...
    @property
    def schema(self) -> Schema: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "Reader": ...
    def __exit__(self, *args: Any) -> bool: ...
