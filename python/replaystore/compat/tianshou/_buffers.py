"""Tianshou's buffers with their transitions in replaystore: each class subclasses
Tianshou's own and keeps all of its logic (positions, episode statistics, ``prev`` and
``next``, stacking, draws from its own ``RandomState``); only ``_meta``, the ``Batch`` that
logic reads and writes, is replaced by the rings of ``_store``."""

from __future__ import annotations

import os
import pickle
from typing import Any, Dict, List, Optional

import numpy as np
from tianshou.data import Batch
from tianshou.data.batch import create_value
from tianshou.data import PrioritizedReplayBuffer as _TSPrioritizedReplayBuffer
from tianshou.data import PrioritizedVectorReplayBuffer as _TSPrioritizedVectorReplayBuffer
from tianshou.data import ReplayBuffer as _TSReplayBuffer
from tianshou.data import VectorReplayBuffer as _TSVectorReplayBuffer

from .._folder import Folder, read_sidecar, write_sidecar
from ._store import REST, SCALARS, Ring, Store, ring_path, schema_of

SIDECAR = "tianshou.json"


class _Rings(Folder):
    """Mixed in before Tianshou's class: the folder, the rings, and the swap of the
    ``Batch`` Tianshou allocates at its first add for a ``Store`` over the rings."""

    _kind = ""

    def _start(self, path: Optional[str], sizes: List[int]) -> None:
        self.__dict__["_ring_sizes"] = [int(s) for s in sizes]
        self._take_folder(path, "replaystore-tianshou-")
        os.makedirs(self._path, exist_ok=True)
        saved = read_sidecar(self._path, SIDECAR)
        mine = self._settings()
        if saved is not None:
            for key, value in mine.items():
                if saved.get(key) != value:
                    raise ValueError(f"{self._path}: {key} is {saved.get(key)!r} on disk, {value!r} given")
        else:
            write_sidecar(self._path, SIDECAR, mine)
            saved = mine
        self.__dict__["_engine_ready"] = True
        if saved.get("fields"):
            # A list: the settings file is written with sorted keys, the schema's order counts.
            fields = {k: (np.dtype(d), tuple(s)) for k, d, s in saved["fields"]}
            self.__dict__["_meta"] = self._make_store(fields, saved.get("rest_keys", []), saved["bases"])
            self._rebuild()

    def _settings(self) -> Dict[str, Any]:
        return {"kind": self._kind, "version": 1, "sizes": self._ring_sizes, "options": self.options}

    def _save(self) -> None:
        store = self.__dict__.get("_meta")
        extra: Dict[str, Any] = {}
        if isinstance(store, Store):
            extra = {"fields": [[k, d.str, list(s)] for k, (d, s) in store.fields.items()],
                     "rest_keys": store.rest_keys, "bases": [r.base for r in store.rings]}
        write_sidecar(self._path, SIDECAR, {**self._settings(), **extra})

    def _make_store(self, fields, rest_keys: List[str], bases: List[int]) -> Store:
        rings = [Ring(ring_path(self._path, k), fields, size, base)
                 for k, (size, base) in enumerate(zip(self._ring_sizes, bases))]
        offsets = np.concatenate([[0], np.cumsum(self._ring_sizes)])
        total = int(offsets[-1])
        scalars = {}
        for key in SCALARS:
            if key in fields:
                dtype, shape = fields[key]
                scalars[key] = np.zeros((total, *shape), dtype)
        return Store(rings, offsets, fields, scalars, list(rest_keys))

    def __setattr__(self, key: str, value: Any) -> None:
        if (key == "_meta" and self.__dict__.get("_engine_ready") and isinstance(value, Batch)
                and len(value.get_keys()) > 0):
            # Tianshou's first add allocates its storage from the first batch: the rings
            # take that batch's layout instead.
            value = self._make_store(schema_of(value), [], [0] * len(self._ring_sizes))
            super().__setattr__(key, value)
            self._save()
            return
        super().__setattr__(key, value)

    def add(self, batch: Any, buffer_ids: Any = None) -> Any:
        """Tianshou's ``add``; before the first, the rings are made from the batch's
        layout (Tianshou would allocate ``maxsize`` rows of it in memory)."""
        if not isinstance(self.__dict__.get("_meta"), Store):
            self._first(batch if isinstance(batch, Batch) else Batch(batch), buffer_ids)
        return super().add(batch, buffer_ids)

    def _first(self, batch: Batch, buffer_ids: Any) -> None:
        keys = set(batch.get_keys())
        if not {"obs", "act", "rew", "terminated", "truncated"} <= keys:
            return  # Tianshou's add names what is missing
        vector = len(self._ring_sizes) > 1 or hasattr(self, "buffers")
        if vector:
            keys &= set(self._reserved_keys)
        b = Batch()
        for key in keys:
            b.__dict__[key] = batch[key]
        b.__dict__["done"] = np.logical_or(b.terminated, b.truncated)
        # The dtypes Tianshou's storage takes: float rewards, bool flags.
        b.rew = np.asarray(b.rew).astype(float)
        for key in ("done", "terminated", "truncated"):
            b.__dict__[key] = np.asarray(b[key]).astype(bool)
        stacked = vector or buffer_ids is not None
        if self._save_only_last_obs:
            b.obs = b.obs[:, -1] if stacked else b.obs[-1]
        if not self._save_obs_next:
            b.pop("obs_next", None)
        elif self._save_only_last_obs:
            b.obs_next = b.obs_next[:, -1] if stacked else b.obs_next[-1]
        row = b[0] if stacked else b
        self._meta = create_value(row, 1, stack=True)
        if hasattr(self, "_set_batch_for_children"):
            self._set_batch_for_children()

    def _rebuild(self) -> None:
        """Tianshou's counters and the in-memory columns, from the rings."""
        store: Store = self.__dict__["_meta"]
        for ring, offset in zip(store.rings, store.offsets[:-1]):
            n = len(ring)
            if n == 0:
                continue
            pos = np.arange(n)
            got = ring.buf.get(ring.logical(pos))
            for key, column in store.scalars.items():
                column[offset + pos] = got[key]
            # The pickled keys seen, in the order the rows first hold them.
            for blob in got[REST]:
                for key in pickle.loads(blob):
                    if key not in store.rest_keys:
                        store.rest_keys.append(key)
        for k, buf in enumerate(self._children()):
            ring = store.rings[k]
            buf.__dict__["_meta"] = store[int(store.offsets[k]):int(store.offsets[k + 1])]
            _resume(buf, ring)
        self._after_rebuild()

    def _children(self) -> List[Any]:
        return [self]

    def _after_rebuild(self) -> None:
        pass

    def reset(self, keep_statistics: bool = False) -> None:
        store = self.__dict__.get("_meta")
        if isinstance(store, Store):
            for ring in store.rings:
                ring.base = ring.tail  # saved before the rings are cleared (a kill between
            self._save()               # leaves the transitions, renumbered)
            for ring in store.rings:
                ring.clear()
        super().reset(keep_statistics=keep_statistics)

    def _open_buffers(self) -> list:
        store = self.__dict__.get("_meta")
        return [r.buf for r in store.rings] if isinstance(store, Store) else []

    def flush(self) -> None:
        """Makes every transition added so far durable."""
        for buf in self._open_buffers():
            buf.flush()


def _resume(buf: Any, ring: Ring) -> None:
    """A Tianshou ``ReplayBuffer``'s counters for what ``ring`` holds: size, insertion
    position, last index, and the running episode's return, length and start."""
    n = len(ring)
    buf._size = n
    buf._insertion_idx = ring.next_position() if n else 0
    buf.last_index = np.array([(buf._insertion_idx - 1) % buf.maxsize if n else 0])
    buf._ep_return, buf._ep_len, buf._ep_start_idx = 0.0, 0, buf._insertion_idx
    if not n:
        return
    done = np.asarray(buf._meta["done"])
    rew = np.asarray(buf._meta["rew"])
    i, ret, length = int(buf.last_index[0]), 0.0, 0
    while length < n and not done[i]:
        ret += rew[i]
        length += 1
        i = (i - 1) % buf.maxsize
    if length:
        buf._ep_return, buf._ep_len = ret, length
        buf._ep_start_idx = (int(buf.last_index[0]) - length + 1) % buf.maxsize


class ReplayBuffer(_Rings, _TSReplayBuffer):
    """Tianshou's ``ReplayBuffer(size, stack_num, ignore_obs_next, save_only_last_obs,
    sample_avail)``, kept in the folder ``path``."""

    _kind = "ReplayBuffer"

    def __init__(self, size: int, stack_num: int = 1, ignore_obs_next: bool = False,
                 save_only_last_obs: bool = False, sample_avail: bool = False, *,
                 path: Optional[str] = None, **kwargs: Any) -> None:
        _TSReplayBuffer.__init__(self, size, stack_num, ignore_obs_next, save_only_last_obs,
                                 sample_avail, **kwargs)
        self._start(path, [self.maxsize])


class VectorReplayBuffer(_Rings, _TSVectorReplayBuffer):
    """Tianshou's ``VectorReplayBuffer(total_size, buffer_num)``: ``buffer_num`` rings of
    ``ceil(total_size / buffer_num)``, one per env of a Collector."""

    _kind = "VectorReplayBuffer"

    def __init__(self, total_size: int, buffer_num: int, *, path: Optional[str] = None,
                 **kwargs: Any) -> None:
        _TSVectorReplayBuffer.__init__(self, total_size, buffer_num, **kwargs)
        self._start(path, [b.maxsize for b in self.buffers])

    def _children(self) -> List[Any]:
        return list(self.buffers)

    def _after_rebuild(self) -> None:
        self._lengths = np.array([len(b) for b in self.buffers])
        self.last_index = np.array([b.last_index[0] + o for b, o in zip(self.buffers, self._offset)])


class PrioritizedReplayBuffer(_Rings, _TSPrioritizedReplayBuffer):
    """Tianshou's ``PrioritizedReplayBuffer(size, alpha, beta, weight_norm=True)``. The
    priorities are Tianshou's own segment tree, in memory as in Tianshou; a reopened
    folder starts every stored transition at the largest priority."""

    _kind = "PrioritizedReplayBuffer"

    def __init__(self, size: int, alpha: float, beta: float, weight_norm: bool = True, *,
                 path: Optional[str] = None, **kwargs: Any) -> None:
        _TSPrioritizedReplayBuffer.__init__(self, size, alpha, beta, weight_norm, **kwargs)
        self._start(path, [self.maxsize])

    def _after_rebuild(self) -> None:
        if len(self):
            self.init_weight(np.arange(len(self)))


class PrioritizedVectorReplayBuffer(_Rings, _TSPrioritizedVectorReplayBuffer):
    """Tianshou's ``PrioritizedVectorReplayBuffer(total_size, buffer_num, alpha, beta)``."""

    _kind = "PrioritizedVectorReplayBuffer"

    def __init__(self, total_size: int, buffer_num: int, *, path: Optional[str] = None,
                 **kwargs: Any) -> None:
        _TSPrioritizedVectorReplayBuffer.__init__(self, total_size, buffer_num, **kwargs)
        self._start(path, [b.maxsize for b in self.buffers])

    def _children(self) -> List[Any]:
        return list(self.buffers)

    def _after_rebuild(self) -> None:
        VectorReplayBuffer._after_rebuild(self)
        for offset, b in zip(self._offset, self.buffers):
            if len(b):
                self.init_weight(offset + np.arange(len(b)))
