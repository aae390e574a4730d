"""DI-engine's legacy buffers (``NaiveReplayBuffer``, ``AdvancedReplayBuffer``,
``EpisodeReplayBuffer``) and ``create_buffer``, with their items in a replaystore ring.

Each class subclasses DI-engine's own and keeps all of its logic (the circular list's
``_tail`` and counts, priorities and use counts, staleness, throughput control, the
draws from ``numpy.random``); only ``_data``, DI-engine's list of ``replay_buffer_size``
slots, changes: a :class:`Slots` whose slot ``i`` names a stored chunk. DI-engine writes
keys into stored items after they are stored (``priority``, ``staleness``, ``use``,
``IS``); those writes land in an overlay kept in memory per slot (and in the state
``state_dict`` returns), as a reading of a slot is a fresh copy of what was stored with
the overlay laid over it.
"""

from __future__ import annotations

import copy
import os
import weakref
from typing import Any, Dict, Iterator, List, Optional

from ding.worker.replay_buffer.advanced_buffer import AdvancedReplayBuffer as _AdvancedReplayBuffer
from ding.worker.replay_buffer.episode_buffer import EpisodeReplayBuffer as _EpisodeReplayBuffer
from ding.worker.replay_buffer.naive_buffer import NaiveReplayBuffer as _NaiveReplayBuffer
from easydict import EasyDict

from .._chunks import ChunkStore
from .._folder import Folder, read_sidecar
from ._deque import SIDECAR, START_HEAP
from ._leaves import LeafCodec


class Item(dict):
    """What reading a dict slot gives: the stored dict with the slot's overlay; keys set
    on it are kept in the overlay, as DI-engine's writes into its stored dicts are
    kept. Copies and pickles of it are plain dicts. While one is held, reading its
    slot again gives the same object, as DI-engine's list gives its stored dict."""

    __slots__ = ("_slots", "_slot", "_seq", "__weakref__")

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._slots.overlay.setdefault(self._slot, {})[key] = value

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __deepcopy__(self, memo: dict) -> dict:
        return copy.deepcopy(dict(self), memo)

    def __copy__(self) -> dict:
        return dict(self)

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class Slots:
    """``_data`` of a legacy adapter: ``replay_buffer_size`` slots, each empty (``None``)
    or a chunk in the store."""

    def __init__(self, store: ChunkStore, size: int) -> None:
        self.store = store
        self.seqs: List[Optional[int]] = [None] * size
        self.overlay: Dict[int, dict] = {}
        #: The dict items handed out and still held by someone, per slot.
        self._handed: "weakref.WeakValueDictionary[int, Item]" = weakref.WeakValueDictionary()
        self.puts = 0
        if store.buf is not None:  # a reopened folder: each slot's newest chunk
            for seq, _key, _obj, added, slot, _state in store.items(objects=False):
                if self.seqs[slot] is not None:
                    self.store.remove([self.seqs[slot]])
                self.seqs[slot] = seq
                self.puts = max(self.puts, added)

    def _item(self, slot: int, obj: Any) -> Any:
        if isinstance(obj, dict):
            item = Item(obj)
            dict.update(item, self.overlay.get(slot, {}))
            item._slots, item._slot, item._seq = self, slot, self.seqs[slot]
            self._handed[slot] = item
            return item
        return obj

    def _held(self, slot: int) -> Optional[Item]:
        """The item of ``slot`` handed out and still held, if it is of the slot's chunk."""
        item = self._handed.get(slot)
        return item if item is not None and item._seq == self.seqs[slot] else None

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            slots = range(len(self.seqs))[i]
            held = {s: self._held(s) for s in slots if self.seqs[s] is not None}
            missing = [s for s, item in held.items() if item is None]
            got = dict(zip(missing, self.store.load([self.seqs[s] for s in missing])))
            return [None if s not in held else held[s] if held[s] is not None else self._item(s, got[s])
                    for s in slots]
        slot = range(len(self.seqs))[i]
        seq = self.seqs[slot]
        if seq is None:
            return None
        item = self._held(slot)
        return item if item is not None else self._item(slot, self.store.load([seq])[0])

    def _set(self, slot: int, obj: Any) -> None:
        old = self.seqs[slot]
        self.overlay.pop(slot, None)
        if obj is None:
            self.seqs[slot] = None
        else:
            self.puts += 1
            self.seqs[slot] = self.store.put("", dict(obj) if isinstance(obj, Item) else obj, ordinal=slot)
        if old is not None:
            self.store.remove([old])

    def __setitem__(self, i: Any, value: Any) -> None:
        if isinstance(i, slice):
            slots = range(len(self.seqs))[i]
            value = list(value)
            if len(value) != len(slots):
                raise ValueError(f"slice of {len(slots)} slots given {len(value)} items (a list keeps its size)")
            for slot, obj in zip(slots, value):
                self._set(slot, obj)
        else:
            self._set(range(len(self.seqs))[i], value)

    def __len__(self) -> int:
        return len(self.seqs)

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self.seqs)))

    def __copy__(self) -> List[Any]:
        """DI-engine's ``_data`` is a list: a copy of it is the list of the slots' items
        (``copy.deepcopy(buffer._data)`` in its tests and users' code), not a second
        handle on the store."""
        return self[:]

    def __deepcopy__(self, memo: dict) -> List[Any]:
        return copy.deepcopy(self[:], memo)

    def describe(self) -> Dict[str, Any]:
        return {"seqs": list(self.seqs), "overlay": copy.deepcopy(self.overlay), "puts": self.puts}

    def restore(self, described: Dict[str, Any]) -> None:
        self._handed.clear()
        self.seqs = list(described["seqs"])
        self.overlay = copy.deepcopy(described["overlay"])
        self.puts = described["puts"]

    def reset(self, items: List[Any]) -> None:
        self._handed.clear()
        self.store.clear()
        self.seqs = [None] * len(self.seqs)
        self.overlay = {}
        for slot, obj in enumerate(items):
            if obj is not None:
                self._set(slot, obj)


class _Slotted(Folder):
    """What the legacy adapters add to DI-engine's classes."""

    def _attach(self, cfg: Any, path: Optional[str], heap_bytes: Optional[int]) -> None:
        path = path if path is not None else cfg.get("path")
        heap_bytes = heap_bytes if heap_bytes is not None else cfg.get("heap_bytes")
        self._take_folder(path, "replaystore-ding-")
        name = type(self).__name__
        size = int(self._replay_buffer_size)
        saved = read_sidecar(self._path, SIDECAR)
        if saved is not None and (saved.get("class"), saved.get("size")) != (name, size):
            raise ValueError(f"{self._path}: holds a {saved.get('class')} of size {saved.get('size')}, "
                             f"not a {name} of size {size} ({SIDECAR})")
        store = ChunkStore(self._path, {"class": name, "size": size, "items": min(2 * size + 64, 4096),
                                        "heap": START_HEAP}, SIDECAR, codec=LeafCodec(), cache_puts=False,
                           max_heap=heap_bytes)
        store.counters_fn = lambda key: (self._data.puts if isinstance(self._data, Slots) else 0, 0)
        self._data = Slots(store, size)
        self._reopen()

    def _reopen(self) -> None:
        """DI-engine's counters from the slots a reopened folder holds: the valid count,
        the pushes, and ``_tail`` after the newest push."""
        held = [s for s, seq in enumerate(self._data.seqs) if seq is not None]
        if not held:
            return
        newest = max(held, key=lambda s: self._data.seqs[s])
        self._valid_count = len(held)
        self._push_count = self._data.puts
        self._tail = (newest + 1) % self._replay_buffer_size

    def _open_buffers(self) -> list:
        return [self._data.store]

    def close(self) -> None:
        """DI-engine's ``close`` (its threads and logger), then the ring is closed; a
        temporary folder is removed. DI-engine's also clears the buffer; here the
        folder keeps its items, for a reopen."""
        if getattr(self, "_shut", False):
            return
        self._shut = True
        self.clear = lambda: None  # type: ignore[method-assign]  # only for DI-engine's close
        try:
            super(Folder, self).close()
        finally:
            del self.clear
        Folder.close(self)

    def flush(self) -> None:
        """Makes every item pushed so far durable (``fsync``)."""
        self._data.store.flush()

    def state_dict(self) -> dict:
        """DI-engine's state. With a folder of the caller's (``path=``) its ``data`` is
        an O(1) snapshot of the ring plus each slot's overlay, restored by
        ``load_state_dict`` on a buffer opened on that folder; with a temporary one, the
        items themselves, as DI-engine's."""
        slots = self._data
        self._data = []
        try:
            state = super().state_dict()
        finally:
            self._data = slots
        if self._own_dir:
            state["data"] = list(slots)
        else:
            state["data"] = {"replaystore": {"path": os.path.realpath(self._path),
                                             "ring": slots.store.get_state(), "slots": slots.describe()}}
        return copy.deepcopy(state)

    def load_state_dict(self, _state_dict: dict, *args: Any, **kwargs: Any) -> None:
        """Restores a ``state_dict``: of this folder or another (the snapshot, brought
        into this folder), or DI-engine's (its
        items are stored into the slots; ``{"data": [...]}`` alone is pushed, as
        DI-engine's does)."""
        data = _state_dict.get("data")
        mine = data.get("replaystore") if isinstance(data, dict) else None
        slots = self._data
        if mine is None and set(_state_dict) == {"data"}:
            super().load_state_dict(_state_dict, *args, **kwargs)
            return
        super().load_state_dict(_state_dict, *args, **kwargs)  # DI-engine's counters
        self._data = slots
        if mine is None:
            slots.reset(list(data))
            return
        slots.store.set_state(mine["ring"])
        slots.restore(mine["slots"])

    def save_data(self, file_name: str) -> None:
        """DI-engine's file (hickle) of the items, as DI-engine's ``save_data``; with a
        folder of the caller's, ``state_dict`` is the O(1) checkpoint."""
        import hickle

        if os.path.dirname(file_name):
            os.makedirs(os.path.dirname(file_name), exist_ok=True)
        # confined: the file the caller names (DI-engine's save_data), not the folder's.
        hickle.dump(py_obj=[None if x is None else (dict(x) if isinstance(x, Item) else x) for x in self._data],
                    file_obj=file_name)


def _config(cls: type, cfg: Any) -> EasyDict:
    # DI-engine's buffers read every key of their default config from cfg.
    full = EasyDict(copy.deepcopy(cls.config))
    full.update(cfg or {})
    return full


class NaiveReplayBuffer(_Slotted, _NaiveReplayBuffer):
    """DI-engine's ``NaiveReplayBuffer(cfg, tb_logger=None, exp_name=..., instance_name=...)``
    with its items in the folder ``path`` (or ``cfg.path``)."""

    def __init__(self, cfg: Any, *args: Any, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _NaiveReplayBuffer.__init__(self, cfg, *args, **kwargs)
        self._attach(cfg, path, heap_bytes)


class EpisodeReplayBuffer(_Slotted, _EpisodeReplayBuffer):
    """DI-engine's ``EpisodeReplayBuffer``: a ``NaiveReplayBuffer`` of whole episodes."""

    def __init__(self, cfg: Any, *args: Any, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _EpisodeReplayBuffer.__init__(self, cfg, *args, **kwargs)
        self._attach(cfg, path, heap_bytes)


class AdvancedReplayBuffer(_Slotted, _AdvancedReplayBuffer):
    """DI-engine's ``AdvancedReplayBuffer`` (priorities, use counts, staleness,
    throughput control) with its items in the folder ``path`` (or ``cfg.path``). A
    reopened folder starts each item at the priority it was pushed with."""

    def __init__(self, cfg: Any, *args: Any, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _AdvancedReplayBuffer.__init__(self, cfg, *args, **kwargs)
        self._attach(cfg, path, heap_bytes)

    def _reopen(self) -> None:
        super()._reopen()
        held = [s for s, seq in enumerate(self._data.seqs) if seq is not None]
        if not held:
            return
        items = self._data[:]
        for slot in held:
            self._set_weight(items[slot])
        ids = [int(str(items[s]["replay_unique_id"]).rsplit("_", 1)[-1]) for s in held
               if str(items[s].get("replay_unique_id", "")).rsplit("_", 1)[-1].isdigit()]
        self._next_unique_id = max(ids) + 1 if ids else self._push_count
        self._head = self._tail if self._valid_count == self._replay_buffer_size else min(
            held, key=lambda s: self._data.seqs[s])


_TYPES = {"naive": NaiveReplayBuffer, "advanced": AdvancedReplayBuffer, "episode": EpisodeReplayBuffer}


def create_buffer(cfg: Any, *args: Any, **kwargs: Any) -> Any:
    """DI-engine's ``create_buffer(cfg, ...)`` for ``cfg.type`` ``naive``, ``advanced``
    and ``episode``: the adapter of that type (``cfg.path`` names its folder)."""
    kind = cfg.type
    if kind not in _TYPES:
        raise KeyError(f"buffer type {kind!r}: replaystore.compat.ding has {sorted(_TYPES)}")
    if kind == "naive":
        kwargs.pop("tb_logger", None)
    return _TYPES[kind](cfg, *args, **kwargs)

