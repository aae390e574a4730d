"""Tianshou's buffers with their transitions in replaystore: each class subclasses
Tianshou's own and keeps all of its logic (positions, episode statistics, ``prev`` and
``next``, stacking, draws from its own ``RandomState``); only ``_meta``, the ``Batch`` that
logic reads and writes, is replaced by the rings of ``_store``."""

from __future__ import annotations

import copy
import os
import pickle
from typing import Any, Dict, List, Optional

import numpy as np
from tianshou.data import Batch
from tianshou.data import CachedReplayBuffer as _TSCachedReplayBuffer
from tianshou.data import HERReplayBuffer as _TSHERReplayBuffer
from tianshou.data import HERVectorReplayBuffer as _TSHERVectorReplayBuffer
from tianshou.data.buffer.manager import HERReplayBufferManager as _TSHERReplayBufferManager
from tianshou.data import PrioritizedReplayBuffer as _TSPrioritizedReplayBuffer
from tianshou.data import PrioritizedVectorReplayBuffer as _TSPrioritizedVectorReplayBuffer
from tianshou.data import ReplayBuffer as _TSReplayBuffer
from tianshou.data import VectorReplayBuffer as _TSVectorReplayBuffer
from tianshou.data.batch import create_value

from ..._confined import Confined
from ..._native import ValueSpaceFullError
from .._folder import Folder, read_sidecar, write_sidecar
from ._store import REST, SCALARS, STALE_ROWS, Ring, Store, _plain, open_extras, ring_path, schema_of

SIDECAR = "tianshou.json"



class _Rings(Folder):
    """Mixed in before Tianshou's class: the folder, the rings, and the swap of the
    ``Batch`` Tianshou allocates at its first add for a ``Store`` over the rings."""

    _kind = ""

    def _start(self, path: Optional[str], sizes: List[int], heap_bytes: Optional[int]) -> None:
        self.__dict__["_ring_sizes"] = [int(s) for s in sizes]
        # The most each ring's pickled keys may take (reserved on disk as they arrive).
        self.__dict__["_heap_bytes"] = heap_bytes
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
        # Plain Python values (an HDF5 file gives back NumPy scalars).
        options = {k: v.item() if isinstance(v, np.generic) else v for k, v in self.options.items()}
        return {"kind": self._kind, "version": 1, "sizes": self._ring_sizes, "options": options}

    def _save(self) -> None:
        store = self.__dict__.get("_meta")
        extra: Dict[str, Any] = {}
        if isinstance(store, Store):
            extra = {"fields": [[k, d.str, list(s)] for k, (d, s) in store.fields.items()],
                     "rest_keys": store.rest_keys, "bases": [r.base for r in store.rings]}
        write_sidecar(self._path, SIDECAR, {**self._settings(), **extra})

    def _make_store(self, fields, rest_keys: List[str], bases: List[int]) -> Store:
        rings = [Ring(ring_path(self._path, k), fields, size, base, self.__dict__.get("_heap_bytes"))
                 for k, (size, base) in enumerate(zip(self._ring_sizes, bases))]
        offsets = np.concatenate([[0], np.cumsum(self._ring_sizes)])
        total = int(offsets[-1])
        scalars = {}
        for key in SCALARS:
            if key in fields:
                dtype, shape = fields[key]
                scalars[key] = np.zeros((total, *shape), dtype)
        store = Store(rings, offsets, fields, scalars, list(rest_keys), self._path, open_extras(self._path))
        # The new base is saved before the ring is cleared: a kill between the two
        # leaves the transitions, renumbered, never a position that names nothing.
        store.on_restart = self._save
        return store

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
        try:
            return super().add(batch, buffer_ids)
        except ValueSpaceFullError as e:
            # Tianshou moved its pointers before the rings refused the batch: they are
            # counted again from what the rings hold (rare, so nothing is saved per add).
            self._recount()
            raise ValueSpaceFullError(
                f"{type(self).__name__}: nothing was added: the pickled keys of this add (those "
                f"not stored as arrays: info, nested objects) do not fit its value space, and "
                f"Tianshou keeps every transition until it holds its size; give the buffer a "
                f"larger heap_bytes= (now {self.__dict__.get('_heap_bytes') or 'the default'}, "
                f"per sub-buffer). {e}") from None

    def update(self, buffer: Any) -> np.ndarray:
        """Tianshou's ``update`` (moves ``buffer``'s transitions in, oldest first); into a
        buffer that holds nothing yet, the rings first take the layout of ``buffer``'s
        rows, where Tianshou would allocate a ``Batch`` from its ``_meta``."""
        meta = buffer.__dict__.get("_meta")
        # Managers (vector, cached) refuse update, as Tianshou's do: nothing to lay out.
        fresh = not isinstance(self.__dict__.get("_meta"), Store) and not hasattr(self, "buffers")
        if fresh and len(buffer) and meta is not None:
            stack_num, buffer.stack_num = buffer.stack_num, 1
            first = buffer.sample_indices(0)[:1]
            buffer.stack_num = stack_num
            if len(first):
                row = meta[first]
                self._meta = create_value(row[0], 1, stack=True)
        return super().update(buffer)

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

    def set_batch(self, batch: Any) -> None:
        """Tianshou's ``set_batch``: the buffer manages ``batch`` (``maxsize`` rows, one per
        position) from now on: what the rings held is dropped, then the batch's rows are
        written position by position. A batch of another layout (a new key) gets its
        rings made again in that layout; a kill between leaves them empty in the old
        one, as before the call (nothing of the batch was acknowledged)."""
        assert len(batch) == self.maxsize and set(batch.get_keys()).issubset(self._reserved_keys), \
            "Input batch doesn't meet ReplayBuffer's data form requirement."
        old = self.__dict__.get("_meta")
        if isinstance(old, Store) and isinstance(batch, Store) and batch.rings is old.rings:
            # Its own store (Tianshou's tests set a key on buf._meta, then hand it back):
            # it holds the batch already.
            if hasattr(self, "_set_batch_for_children"):
                self._set_batch_for_children()
            return
        fields = schema_of(batch[:1])
        bases = [0] * len(self._ring_sizes)
        if isinstance(old, Store):
            for ring in old.rings:
                ring.base = ring.tail
                ring.clear()
            bases = [r.base for r in old.rings]
            # The old rings let go of their folders before the new store opens them (a
            # second writer of a folder is refused); rings of another layout are
            # emptied already, and are made again in the batch's.
            for ring in old.rings:
                ring.buf.close()
            if fields != old.fields:
                folder = Confined(self._path)
                for k in range(len(old.rings)):
                    folder.remove_tree(f"ring-{k}")
                bases = [0] * len(old.rings)
        store = self._make_store(fields, [], bases)
        self.__dict__["_meta"] = store
        self._save()
        store.write(np.arange(self.maxsize), batch)
        if hasattr(self, "_set_batch_for_children"):
            self._set_batch_for_children()

    def dropnull(self) -> None:
        """Tianshou's ``dropnull``: every position that holds a null (NaN or ``None``) in
        any key, written or not, is dropped; the rest are kept in order at positions 0
        on, and the buffer holds them alone (Tianshou's ``_meta`` becomes the shorter
        batch). Here the rings are emptied and the kept rows written again, columns
        added by ``set_array_at_key`` included. Unlike Tianshou's, a field of more than
        one value per row keeps its shape (Tianshou's ``cat`` of the kept rows
        flattens it into one axis)."""
        store = self.__dict__.get("_meta")
        if not isinstance(store, Store) or len(store.rings) > 1:
            return super().dropnull()
        kept = store[np.arange(self.maxsize)].dropnull()
        n = len(kept)
        extras = {key: np.asarray(kept[key]) for key in store.extras if n}
        rows = Batch({key: kept[key] for key in kept.get_keys() if key not in store.extras}) if n else None
        for name, (_, shape) in store.fields.items() if n else ():
            # Tianshou joins the kept one-row batches with ``cat``, which flattens a
            # field of more than one value per row; the rows keep their shape here.
            *outer, last = name.split(".")
            parent = rows
            for part in outer:
                parent = parent[part]
            parent[last] = np.asarray(parent[last]).reshape((n, *shape))
        # Tianshou's dropnull changes the size and the next position only: the rings
        # are emptied, not the episode counters (no reset()).
        store.restart([0])
        if n:
            store.write(np.arange(n), rows)
            for key, values in extras.items():
                column = store.extras[key]
                column[:n] = values
                column.flush()
        self._size = self._insertion_idx = n

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
            store.restart(list(range(len(store.rings))))
        super().reset(keep_statistics=keep_statistics)

    # -- pickling and HDF5 -----------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        """With a folder of its own choosing (``path=``): the folder's name and an O(1)
        snapshot of each ring, restored by unpickling (in another process, or after this
        buffer is closed: a folder has one writer). With a temporary folder, which ends
        with the process: the transitions themselves."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_meta", "_remove_dir")}
        if "buffers" in state:
            kids = []
            for b in self.buffers:
                kid = copy.copy(b)
                kid.__dict__["_meta"] = Batch()
                kids.append(kid)
            state.update(_named_kids(self, kids))
        store = self.__dict__.get("_meta")
        if isinstance(store, Store):
            if self._own_dir:
                state["_ring_rows"] = [_ring_rows(r, store) for r in store.rings]
                state["_extras"] = {k: np.asarray(v) for k, v in store.extras.items()}
            else:
                state["_snapshots"] = [r.buf.get_state() for r in store.rings]
                state["_bases"] = [r.base for r in store.rings]
                # The pickled keys, so an unpickle needs no pass over the rings.
                state["_rest_keys"] = list(store.rest_keys)
            # The in-memory flag columns (11 bytes a transition): every position's, the
            # ones no ring holds (a reset sub-buffer's kept rows) included.
            state["_mirror"] = {k: v.copy() for k, v in store.scalars.items()}
            state["_in_memory"] = store.in_memory()
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        rows = state.pop("_ring_rows", None)
        extras = state.pop("_extras", {})
        snapshots = state.pop("_snapshots", None)
        bases = state.pop("_bases", None)
        mirror = state.pop("_mirror", None)
        rest_keys = state.pop("_rest_keys", None)
        in_memory = state.pop("_in_memory", {})
        self.__dict__.update(state)
        _rebind(self)
        self.__dict__["_meta"] = Batch()
        self.__dict__["_remove_dir"] = None
        if snapshots is not None:
            saved = read_sidecar(self._path, SIDECAR)
            if saved is None or not saved.get("fields"):
                raise FileNotFoundError(
                    f"{self._path}: the buffer's folder is gone; the pickle names it and holds "
                    "snapshots of its rings, not the transitions")
            fields = {k: (np.dtype(d), tuple(s)) for k, d, s in saved["fields"]}
            store = self._make_store(fields, rest_keys if rest_keys is not None else saved.get("rest_keys", []),
                                     bases)
            for ring, snapshot in zip(store.rings, snapshots):
                ring.buf.set_state(snapshot)
                ring.tail = int(ring.buf.stats()["tail"])
            self.__dict__["_meta"] = store
            self._save()
            if mirror is None:
                self._rebuild()
            else:
                # Tianshou's counters (and a prioritized buffer's tree) came in the
                # pickle; the flags too (below): the rings are not read.
                for k, buf in enumerate(self._children()):
                    if buf is not self:
                        buf.__dict__["_meta"] = store[int(store.offsets[k]):int(store.offsets[k + 1])]
        elif rows is not None:
            self._take_folder(None, "replaystore-tianshou-")
            os.makedirs(self._path, exist_ok=True)
            self._fill(rows, extras)
        store = self.__dict__.get("_meta")
        if isinstance(store, Store):
            for key, column in (mirror or {}).items():
                store.scalars[key][:] = column
            store.take_in_memory(in_memory)

    def _fill(self, rows: List[Dict[str, Any]], extras: Dict[str, np.ndarray]) -> None:
        """A new folder holding ``rows`` (each ring's transitions in position order),
        at the same positions: oldest first, base ``-insertion`` when a ring was full."""
        first = next((r for r in rows if r["n"]), None)
        write_sidecar(self._path, SIDECAR, self._settings())
        if first is None:
            return  # nothing stored: the first add makes the rings, as for a new buffer
        fields = first["fields"]
        bases = []
        for k, r in enumerate(rows):
            size, n, insertion = self._ring_sizes[k], r["n"], r["insertion"]
            bases.append(-insertion if n == size and insertion else 0)
        store = self._make_store(fields, first["rest_keys"] if first else [], bases)
        for k, (ring, r) in enumerate(zip(store.rings, rows)):
            n, insertion = r["n"], r["insertion"]
            if not n:
                continue
            order = (np.arange(n) + insertion) % n if n == ring.size else np.arange(n)
            ring.append({key: np.ascontiguousarray(v[order]) if key != REST else [v[i] for i in order]
                         for key, v in r["values"].items()})
        for key, values in extras.items():
            store.set_array_at_key(values, key)
        self.__dict__["_meta"] = store
        self._save()
        # A prioritized buffer's tree came with the state (pickle or HDF5).
        self._recount()

    def _recount(self) -> None:
        """Tianshou's counters and in-memory columns again from the rings, keeping a
        prioritized buffer's tree (the rebuild's fresh priorities must not replace one
        a state brought, or one an add left as it was)."""
        weight = copy.deepcopy(self.__dict__.get("weight"))  # init_weight changes it in place
        self._rebuild()
        if weight is not None:
            self.__dict__["weight"] = weight

    def save_hdf5(self, path: str, compression: Optional[str] = None) -> None:
        """Tianshou's HDF5 file of this buffer (every position, as Tianshou's own
        ``load_hdf5`` reads it). O(n): ``pickle`` with a folder is the O(1) checkpoint."""
        import h5py
        from tianshou.data.utils.converter import to_hdf5

        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_meta", "_remove_dir", "_path", "_own_dir", "_ring_sizes", "_engine_ready")}
        store = self.__dict__.get("_meta")
        meta = store.rows(np.arange(len(store))) if isinstance(store, Store) else Batch()
        state["_meta"] = meta
        if "buffers" in state:
            kids = []
            for b, lo, hi in zip(self.buffers, self._offset, self._extend_offset[1:]):
                kid = copy.copy(b)
                kid.__dict__ = {k: v for k, v in b.__dict__.items() if k != "_meta"}
                kid.__dict__["_meta"] = meta[lo:hi] if isinstance(store, Store) else Batch()
                kids.append(kid)
            state.update(_named_kids(self, kids))
        with h5py.File(path, "w") as f:
            to_hdf5(state, f, compression=compression)

    @classmethod
    def load_hdf5(cls, path: str, device: Optional[str] = None, *, folder: Optional[str] = None) -> Any:
        """A buffer of this class holding what a Tianshou HDF5 file holds (written by
        Tianshou or by ``save_hdf5``), in ``folder`` (a temporary one when ``None``)."""
        import h5py
        from tianshou.data.utils.converter import from_hdf5

        with h5py.File(path, "r") as f:
            state = from_hdf5(f, device=device)
        meta = state.pop("_meta")
        kids = state.get("buffers")
        buf = cls.__new__(cls)
        buf.__dict__.update(state)
        _rebind(buf)
        buf.__dict__["_meta"] = Batch()
        sizes = [int(b.maxsize) for b in kids] if kids is not None else [int(state["maxsize"])]
        buf.__dict__["_ring_sizes"] = sizes
        buf.__dict__["_engine_ready"] = True
        buf._take_folder(folder, "replaystore-tianshou-")
        os.makedirs(buf._path, exist_ok=True)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        counters = [kids[k] for k in range(len(sizes))] if kids is not None else [buf]
        rows = []
        for k, owner in enumerate(counters):
            n = int(owner._size)
            part = meta[int(offsets[k]):int(offsets[k]) + n] if n else None
            rows.append(_batch_rows(part, n, int(owner._insertion_idx)))
        if kids is not None:
            for kid in kids:
                kid.__dict__["_meta"] = Batch()
        buf._fill(rows, {})
        store = buf.__dict__.get("_meta")
        if isinstance(store, Store) and len(meta):
            # Positions past each sub-buffer's count (a cache's rows from before its
            # reset): Tianshou's storage keeps them, so they read as they were saved.
            for k, owner in enumerate(counters):
                lo, n, hi = int(offsets[k]), int(owner._size), int(offsets[k + 1])
                if not n < hi - lo <= STALE_ROWS:
                    continue
                values = _batch_rows(meta[lo + n:hi], hi - lo - n, 0)["values"]
                # Only rows that were written: positions never written are zeros in
                # Tianshou's storage and here (a row whose arrays and flags are all zero
                # counts as never written).
                used = np.zeros(hi - lo - n, bool)
                for key, column in store.scalars.items():
                    column[lo + n:hi] = np.asarray(meta[key][lo + n:hi])
                    used |= column[lo + n:hi].reshape(len(used), -1).any(axis=1)
                for key, v in values.items():
                    if key != REST:
                        used |= np.asarray(v).reshape(len(used), -1).any(axis=1)
                if used.any():
                    at = np.flatnonzero(used)
                    store.hold_stale(k, n + at, {key: [v[i] for i in at] if key == REST else np.asarray(v)[at]
                                                 for key, v in values.items()})
        return buf

    def _open_buffers(self) -> list:
        store = self.__dict__.get("_meta")
        return [r.buf for r in store.rings] if isinstance(store, Store) else []

    def flush(self) -> None:
        """Makes every transition added so far durable."""
        for buf in self._open_buffers():
            buf.flush()


def _named_kids(buf: Any, kids: List[Any]) -> Dict[str, Any]:
    """Where a manager's state names its sub-buffers, their stand-ins ``kids`` (for a
    pickle or an HDF5 file): ``buffers``, and a cache's ``main_buffer`` and
    ``cached_buffers``, which Tianshou binds to ``buffers[0]`` and ``buffers[1:]``."""
    named: Dict[str, Any] = {"buffers": _objects(kids)}
    if "main_buffer" in buf.__dict__:
        named["main_buffer"], named["cached_buffers"] = kids[0], _objects(kids[1:])
    return named


def _rebind(buf: Any) -> None:
    """A cache's ``main_buffer`` and ``cached_buffers`` are its ``buffers[0]`` and
    ``buffers[1:]`` again after a pickle or an HDF5 file gave them as copies."""
    if "main_buffer" in buf.__dict__ and "buffers" in buf.__dict__:
        buf.__dict__["main_buffer"] = buf.buffers[0]
        buf.__dict__["cached_buffers"] = list(buf.buffers[1:])


def _objects(items: List[Any]) -> np.ndarray:
    """An object array of buffers, one element each: ``np.array`` would read a buffer
    with data as a sequence of its transitions."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def _ring_rows(ring: Ring, store: Store) -> Dict[str, Any]:
    """A ring's transitions in position order, with what ``_fill`` needs to put them back."""
    n = len(ring)
    values = ring.buf.get(ring.logical(np.arange(n))) if n else {}
    return {"n": n, "insertion": ring.next_position() if n else 0, "fields": dict(store.fields),
            "rest_keys": list(store.rest_keys), "values": {k: v for k, v in values.items() if k != "indices"}}


def _batch_rows(part: Optional[Batch], n: int, insertion: int) -> Dict[str, Any]:
    """A Tianshou ``_meta`` slice of ``n`` positions as ``_fill``'s rows."""
    if not n:
        return {"n": 0, "insertion": 0, "fields": {}, "rest_keys": [], "values": {}}
    fields = schema_of(part[:1])
    values: Dict[str, Any] = {}
    for name in fields:
        v = part
        for piece in name.split("."):
            v = v[piece]
        values[name] = np.asarray(v)
    rest_keys = [k for k in part.get_keys()
                 if not any(f == k or f.startswith(k + ".") for f in fields)
                 and not (isinstance(part[k], Batch) and len(part[k].get_keys()) == 0)]
    blobs = []
    for i in range(n):
        blobs.append(pickle.dumps({k: _plain(part[k][i]) for k in rest_keys}, protocol=pickle.HIGHEST_PROTOCOL))
    values[REST] = blobs
    return {"n": n, "insertion": insertion, "fields": fields, "rest_keys": rest_keys, "values": values}


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
                 path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _TSReplayBuffer.__init__(self, size, stack_num, ignore_obs_next, save_only_last_obs,
                                 sample_avail, **kwargs)
        self._start(path, [self.maxsize], heap_bytes)


class VectorReplayBuffer(_Rings, _TSVectorReplayBuffer):
    """Tianshou's ``VectorReplayBuffer(total_size, buffer_num)``: ``buffer_num`` rings of
    ``ceil(total_size / buffer_num)``, one per env of a Collector."""

    _kind = "VectorReplayBuffer"

    def __init__(self, total_size: int, buffer_num: int, *, path: Optional[str] = None,
                 heap_bytes: Optional[int] = None, **kwargs: Any) -> None:
        _TSVectorReplayBuffer.__init__(self, total_size, buffer_num, **kwargs)
        self._start(path, [b.maxsize for b in self.buffers], heap_bytes)

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
                 path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _TSPrioritizedReplayBuffer.__init__(self, size, alpha, beta, weight_norm, **kwargs)
        self._start(path, [self.maxsize], heap_bytes)

    def _after_rebuild(self) -> None:
        if len(self):
            self.init_weight(np.arange(len(self)))


class PrioritizedVectorReplayBuffer(_Rings, _TSPrioritizedVectorReplayBuffer):
    """Tianshou's ``PrioritizedVectorReplayBuffer(total_size, buffer_num, alpha, beta)``."""

    _kind = "PrioritizedVectorReplayBuffer"

    def __init__(self, total_size: int, buffer_num: int, *, path: Optional[str] = None,
                 heap_bytes: Optional[int] = None, **kwargs: Any) -> None:
        _TSPrioritizedVectorReplayBuffer.__init__(self, total_size, buffer_num, **kwargs)
        self._start(path, [b.maxsize for b in self.buffers], heap_bytes)

    def _children(self) -> List[Any]:
        return list(self.buffers)

    def _after_rebuild(self) -> None:
        VectorReplayBuffer._after_rebuild(self)
        for offset, b in zip(self._offset, self.buffers):
            if len(b):
                self.init_weight(offset + np.arange(len(b)))


class CachedReplayBuffer(_Rings, _TSCachedReplayBuffer):
    """Tianshou's ``CachedReplayBuffer(main_buffer, cached_buffer_num,
    max_episode_length)``: each env's steps wait in a cached ring until its episode
    ends, then move to the main ring. ``main_buffer`` gives the main ring's size and
    options (an empty Tianshou or replaystore ``ReplayBuffer``); all rings live in
    ``path``."""

    _kind = "CachedReplayBuffer"

    def __init__(self, main_buffer: Any, cached_buffer_num: int, max_episode_length: int, *,
                 path: Optional[str] = None, heap_bytes: Optional[int] = None) -> None:
        if isinstance(main_buffer, _Rings):
            # Its own folder goes unused: the cache's rings hold everything.
            plain = _TSReplayBuffer(main_buffer.maxsize, **main_buffer.options)
            main_buffer.close()
            main_buffer = plain
        _TSCachedReplayBuffer.__init__(self, main_buffer, cached_buffer_num, max_episode_length)
        self._start(path, [b.maxsize for b in self.buffers], heap_bytes)

    def _children(self) -> List[Any]:
        return list(self.buffers)

    def _after_rebuild(self) -> None:
        VectorReplayBuffer._after_rebuild(self)

    def add(self, batch: Any, buffer_ids: Any = None) -> Any:
        """Tianshou's ``add``; a cached ring whose episode moved to the main ring is
        cleared then (Tianshou resets that sub-buffer), not at its next write, so a
        reopen finds it empty as Tianshou holds it."""
        out = super().add(batch, buffer_ids)
        store = self.__dict__.get("_meta")
        if isinstance(store, Store):
            emptied = [k for k, (b, r) in enumerate(zip(self.buffers, store.rings)) if len(b) == 0 and len(r)]
            if emptied:
                store.restart(emptied)
        return out


class _Relabel:
    """Tianshou's HER relabelling over a ``Store`` (or one sub-buffer's view of it): at
    each ``sample`` the goals of the drawn transitions' episodes, with Tianshou's own
    draws. Tianshou rewrites its storage in place and restores it at the next call;
    here the relabelled goals and rewards are laid over the rings in memory and lifted
    then, and the rings keep what was added."""

    def _restore_cache(self) -> None:
        store = self.__dict__.get("_meta")
        altered = self.__dict__.get("_altered_indices")
        if altered is None or altered.size == 0 or not isinstance(store, Store):
            return
        store.lift()
        store.lay_over(altered, {"rew": self._original_meta.rew})
        self._original_meta = Batch()
        self._altered_indices = np.array([])

    def rewrite_transitions(self, indices: np.ndarray) -> None:
        """Tianshou's relabelling, draw for draw (``np.random.uniform`` for each
        transition's future step, then ``np.random.choice`` of the episodes to relabel),
        written as an overlay."""
        if indices.size == 0:
            return
        # The drawn transitions oldest first, then each one's next horizon - 1 steps.
        indices = indices.copy()
        indices[indices < self._insertion_idx] += self.maxsize
        indices = np.sort(indices)
        indices[indices >= self.maxsize] -= self.maxsize
        steps = [indices]
        for _ in range(self.horizon - 1):
            steps.append(self.next(steps[-1]))
        grid = np.stack(steps)
        current, terminal = grid[0], grid[-1]
        episodes_len = (terminal - current + self.maxsize) % self.maxsize
        future_t = (current + np.round(np.random.uniform(size=len(current)) * episodes_len).astype(int)) % self.maxsize
        opens = np.sort(np.unique(terminal, return_index=True)[1])
        episodes = grid[:, opens]
        closes = np.hstack([(opens - 1)[1:], len(terminal) - 1])
        chosen = np.random.choice(len(opens), size=int(len(opens) * self.future_p), replace=False)
        self._altered_indices = episodes.copy()
        self._original_meta = Batch(rew=np.asarray(self._meta["rew"])[episodes].copy())
        view = self[episodes]
        ep_obs, ep_rew = view.obs, view.rew
        if self._save_obs_next:
            ep_obs_next = view.obs_next
            future_obs = self[future_t[closes]].obs_next
        else:
            future_obs = self[self.next(future_t[closes])].obs
        ep_obs.desired_goal[:, chosen] = future_obs.achieved_goal[None, chosen]
        laid = {"obs.desired_goal": ep_obs.desired_goal}
        if self._save_obs_next:
            ep_obs_next.desired_goal[:, chosen] = future_obs.achieved_goal[None, chosen]
            ep_rew[:, chosen] = self._compute_reward(ep_obs_next)[:, chosen]
            laid["obs_next.desired_goal"] = ep_obs_next.desired_goal
        else:
            ep_rew[:, chosen] = self._compute_reward(self[self.next(episodes)].obs)[:, chosen]
        laid["rew"] = ep_rew.astype(np.float32)
        self.__dict__["_meta"].lay_over(episodes, laid)


class HERReplayBuffer(_Relabel, _Rings, _TSHERReplayBuffer):
    """Tianshou's ``HERReplayBuffer(size, compute_reward_fn, horizon, future_k=8.0)``
    (the ``future`` strategy, online), relabelling as ``_Relabel`` says."""

    _kind = "HERReplayBuffer"

    def __init__(self, size: int, compute_reward_fn: Any, horizon: int, future_k: float = 8.0, *,
                 path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _TSHERReplayBuffer.__init__(self, size, compute_reward_fn, horizon, future_k, **kwargs)
        self._start(path, [self.maxsize], heap_bytes)


class _HERChild(_Relabel, _TSHERReplayBuffer):
    """One sub-buffer of ``HERVectorReplayBuffer``: Tianshou's, relabelling over its view
    of the rings."""


class HERVectorReplayBuffer(_Rings, _TSHERVectorReplayBuffer):
    """Tianshou's ``HERVectorReplayBuffer(total_size, buffer_num, compute_reward_fn=,
    horizon=, future_k=)``: ``buffer_num`` HER sub-buffers, one per env."""

    _kind = "HERVectorReplayBuffer"

    def __init__(self, total_size: int, buffer_num: int, *, path: Optional[str] = None,
                 heap_bytes: Optional[int] = None, **kwargs: Any) -> None:
        assert buffer_num > 0
        size = int(np.ceil(total_size / buffer_num))
        _TSHERReplayBufferManager.__init__(self, [_HERChild(size, **kwargs) for _ in range(buffer_num)])
        self._start(path, [b.maxsize for b in self.buffers], heap_bytes)

    def _children(self) -> List[Any]:
        return list(self.buffers)

    def _after_rebuild(self) -> None:
        VectorReplayBuffer._after_rebuild(self)
