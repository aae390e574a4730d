"""DI-engine's ``DequeBuffer`` with its records' data in a replaystore ring (as rows of
columns, ``_leaves``).

The class subclasses DI-engine's own and keeps all of its logic and every middleware
(``PriorityExperienceReplay``, ``use_time_check``, ``staleness_check``, ``clone_object``,
``padding``, ``group_sample``, ``sample_range_view``): draws from ``random`` as DI-engine
does, the index map, grouping. Only ``storage`` changes: a :class:`Records` sequence
whose records keep their ``index`` and ``meta`` in memory (middleware read and change
metas in place, every draw) and their ``data`` in the ring, read when asked for.
"""

from __future__ import annotations

import collections.abc
import os
import pickle
import weakref
from collections import deque
from typing import Any, Iterator, List, Optional

from ding.data.buffer import BufferedData, apply_middleware
from ding.data.buffer.deque_buffer import BufferIndex
from ding.data.buffer.deque_buffer import DequeBuffer as _DequeBuffer
from ding.data.buffer.middleware import PriorityExperienceReplay
from ding.utils import fastcopy

from .._chunks import ChunkStore
from .._folder import Folder, read_sidecar
from ._leaves import LeafCodec

#: The settings file beside the ring (docs/FORMAT.md).
SIDECAR = "ding.json"
#: The first ring's heap; replaced by one twice what it holds whenever it fills.
START_HEAP = 1 << 20
#: What ``save_data`` writes first: DI-engine's own files are HDF5 (hickle).
MAGIC = b"replaystore-ding-state\n"


class Record(BufferedData):
    """A stored record: ``index`` and ``meta`` in memory, ``data`` read from the ring
    (a fresh copy each time). Setting ``data`` stores the record again."""

    def __init__(self, records: "Records", seq: int, index: str, meta: dict, ordinal: int) -> None:
        self.__dict__.update(_records=records, _seq=seq, index=index, _meta=meta, _ordinal=ordinal)

    @property
    def data(self) -> Any:
        return self._records.store.load([self._seq])[0]

    @data.setter
    def data(self, value: Any) -> None:
        self._records._store_again(self, value, self._meta)

    @property
    def meta(self) -> dict:
        return self._meta

    @meta.setter
    def meta(self, value: dict) -> None:
        # In memory, as DI-engine's middleware changes metas in place every draw: the
        # ring keeps the meta a record was pushed (or its data last set) with, and
        # save_data every current one.
        self.__dict__["_meta"] = value

    def __repr__(self) -> str:
        return f"Record(index={self.index!r}, meta={self._meta!r})"


class _Pending:
    """The rows of one draw's records, read from the ring in one call when the first of
    their data is asked for, or before anything changes the ring (``Records.settle``):
    a draw that nobody reads (a benchmark's, a group draw of thousands) costs no read,
    and what is read is what the records held when drawn."""

    def __init__(self, store: ChunkStore, seqs: List[int]) -> None:
        self.store = store
        self.seqs = seqs
        self.rows: Optional[dict] = None

    def fetch(self) -> dict:
        if self.rows is None:
            self.rows = self.store.rows(self.seqs)
        return self.rows


class Drawn(BufferedData):
    """A drawn record as DI-engine hands it out: its ``index`` and ``meta`` (the stored
    record's meta, which middleware change in place), and ``data`` decoded on first use
    into an object of its own (changing it changes nothing stored, as with DI-engine's
    ``clone_object``). Copies, pickles and ``fastcopy`` give DI-engine's own
    ``BufferedData``, or, before the data was read, another lazy record decoding a
    copy of its own."""

    def __init__(self, pending: _Pending, k: int, index: str, meta: dict) -> None:
        self.__dict__.update(_pending=pending, _k=k, index=index, meta=meta)

    @property
    def data(self) -> Any:
        mine = self.__dict__
        if "_data" not in mine:
            pending = mine["_pending"]
            mine["_data"] = pending.store.codec.decode(pending.fetch(), mine["_k"])
        return mine["_data"]

    @data.setter
    def data(self, value: Any) -> None:
        self.__dict__["_data"] = value

    def __reduce__(self) -> Any:
        return (BufferedData, (self.data, self.index, self.meta))


def _fastcopy_drawn(d: Drawn) -> BufferedData:
    # DI-engine's copy of a record (``_independence`` for a record drawn twice, and
    # ``clone_object``): its data copied, or, not read yet, decoded afresh.
    if "_data" in d.__dict__:
        return BufferedData(data=fastcopy.copy(d.__dict__["_data"]), index=d.index, meta=fastcopy.copy(d.meta))
    return Drawn(d.__dict__["_pending"], d.__dict__["_k"], d.index, fastcopy.copy(d.meta))


# DI-engine registers its BufferedData the same way; fastcopy dispatches on the exact type.
fastcopy.dispatch[Drawn] = _fastcopy_drawn


class Records(collections.abc.Sequence):
    """``storage`` of the adapter: DI-engine's ``deque(maxlen=size)`` of records, the
    oldest dropped (and its chunk removed) when a push finds it full."""

    def __init__(self, store: ChunkStore, maxlen: int) -> None:
        self.store = store
        self._maxlen = maxlen
        self._items: "deque[Record]" = deque()
        self._pushed = 0
        #: Draws whose rows are not read yet: read before anything changes the ring.
        self._pending: "weakref.WeakSet[_Pending]" = weakref.WeakSet()
        if store.buf is not None:  # a reopened folder: the records in push order
            found = []
            for seq, index, _obj, _added, ordinal, meta in store.items(objects=False):
                found.append(Record(self, seq, index, pickle.loads(meta), ordinal))
            found.sort(key=lambda r: r._ordinal)
            self._items = deque(found)
            self._pushed = found[-1]._ordinal + 1 if found else 0
            self._trim()

    @property
    def maxlen(self) -> int:
        return self._maxlen

    def _put(self, data: Any, index: str, meta: dict, ordinal: int) -> int:
        # The chunk's key is the record's index; its state the meta it is stored with.
        return self.store.put(index, data, ordinal=ordinal, state=pickle.dumps(meta))

    def drawn(self, records: List[Record]) -> List[Drawn]:
        """Lazy copies of ``records`` for a draw, their rows read together."""
        pending = _Pending(self.store, [r._seq for r in records])
        self._pending.add(pending)
        return [Drawn(pending, k, r.index, r._meta) for k, r in enumerate(records)]

    def settle(self) -> None:
        """Reads the rows of every draw not read yet: the ring is about to change."""
        for pending in list(self._pending):
            pending.fetch()
        self._pending.clear()

    def append(self, buffered: BufferedData) -> None:
        # The new record is stored before the oldest is removed: a kill between the two
        # leaves one record too many, which the reopen drops, never one too few.
        self.settle()
        ordinal = self._pushed
        self._pushed += 1
        seq = self._put(buffered.data, buffered.index, buffered.meta, ordinal)
        self._items.append(Record(self, seq, buffered.index, buffered.meta, ordinal))
        self._trim()

    def _trim(self) -> None:
        while len(self._items) > self._maxlen:
            gone = self._items.popleft()
            self.store.remove([gone._seq])

    def _store_again(self, record: Record, data: Any, meta: dict) -> None:
        self.settle()
        old = record._seq
        record.__dict__.update(_seq=self._put(data, record.index, meta, record._ordinal), _meta=meta)
        self.store.remove([old])

    def __getitem__(self, i: int) -> Record:  # type: ignore[override]
        return self._items[i]

    def __delitem__(self, i: int) -> None:
        self.settle()
        gone = self._items[i]
        del self._items[i]
        self.store.remove([gone._seq])

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Record]:
        return iter(self._items)

    def clear(self) -> None:
        self.settle()
        self._items.clear()
        self.store.clear()

    def load(self, records: List[Record]) -> List[Any]:
        """The data of ``records``, read in one call."""
        return self.store.load([r._seq for r in records])

    def describe(self) -> List[tuple]:
        return [(r._seq, r.index, r._meta, r._ordinal) for r in self._items]

    def restore(self, described: List[tuple], pushed: int) -> None:
        self._items = deque(Record(self, seq, index, meta, ordinal) for seq, index, meta, ordinal in described)
        self._pushed = pushed


class DequeBuffer(Folder, _DequeBuffer):
    """DI-engine's ``DequeBuffer(size, sliced=False)`` with its records in the folder
    ``path`` (a temporary one when ``None``; an existing one is reopened with its
    records).

    >>> from replaystore.compat.ding import DequeBuffer
    >>> buf = DequeBuffer(size=10)
    >>> for i in range(12):
    ...     _ = buf.push({"obs": i}, meta={"env": i % 2})
    >>> buf.count(), sorted(r.data["obs"] for r in buf.sample(10))[:3]
    (10, [2, 3, 4])
    >>> buf.close()
    """

    def __init__(self, size: int, sliced: bool = False, *, path: Optional[str] = None,
                 heap_bytes: Optional[int] = None) -> None:
        _DequeBuffer.__init__(self, size=size, sliced=sliced)
        self._take_folder(path, "replaystore-ding-")
        saved = read_sidecar(self._path, SIDECAR)
        if saved is not None and saved.get("size") not in (None, size):
            raise ValueError(f"{self._path}: holds a DequeBuffer of size {saved['size']}, not {size} "
                             f"({SIDECAR} field 'size')")
        store = ChunkStore(self._path, {"class": "DequeBuffer", "size": size,
                                        "items": min(2 * size + 64, 4096), "heap": START_HEAP}, SIDECAR,
                           codec=LeafCodec(), cache_puts=False, max_heap=heap_bytes)
        self.storage = Records(store, size)
        self._reindex()

    def _reindex(self) -> None:
        # DI-engine's index map, as its delete rebuilds it: each record's position.
        self.indices = BufferIndex(self.size, [(r.index, i) for i, r in enumerate(self.storage)])
        self.meta_index = {}

    def _open_buffers(self) -> list:
        return [self.storage.store]

    def flush(self) -> None:
        """Makes every record pushed so far durable (``fsync``)."""
        self.storage.store.flush()

    @apply_middleware("update")
    def update(self, index: str, data: Optional[Any] = None, meta: Optional[dict] = None) -> bool:
        """DI-engine's ``update``; new data is stored once, with the new meta."""
        found = _DequeBuffer.update.__wrapped__(self, index, None, meta)
        if found and data is not None:
            record = self.storage[self.indices.get(index)]
            self.storage._store_again(record, data, record.meta)
        return found

    def _independence(self, sampled: Any) -> Any:
        # The drawn records become lazy ones whose data is read in one call when first
        # used (a group draw hands out thousands); then DI-engine copies the repeated
        # ones, as it does.
        flat = [r for item in sampled for r in (item if isinstance(item, list) else [item])]
        stored = [r for r in flat if isinstance(r, Record)]
        drawn = dict(zip(map(id, stored), self.storage.drawn(stored)))

        def plain(r: Any) -> Any:
            return drawn[id(r)] if isinstance(r, Record) else r

        sampled = [[plain(r) for r in item] if isinstance(item, list) else plain(item) for item in sampled]
        return super()._independence(sampled)

    def use(self, func: Any) -> "DequeBuffer":
        """DI-engine's ``use``. A ``PriorityExperienceReplay`` added to a reopened buffer
        takes the priorities its records were pushed (or last updated) with."""
        super().use(func)
        if isinstance(func, PriorityExperienceReplay) and len(self.storage):
            for record in self.storage:
                meta = record.meta
                if "priority_idx" in meta:
                    func._update_tree(meta["priority"], meta["priority_idx"])
                    func.buffer_idx[meta["priority_idx"]] = record.index
                    func.max_priority = max(func.max_priority, meta["priority"])
            newest = self.storage[-1].meta.get("priority_idx")
            if newest is not None:
                func.pivot = (newest + 1) % func.buffer_size
        return self

    def save_data(self, file_name: str) -> None:
        """Saves the buffer in milliseconds: an O(1) snapshot of the ring plus each
        record's index and meta (``load_data`` restores it on a buffer opened on the same
        folder, here or in another process). DI-engine's ``load_data`` cannot read it."""
        if os.path.dirname(file_name):
            os.makedirs(os.path.dirname(file_name), exist_ok=True)
        state = {"path": os.path.realpath(self._path), "ring": self.storage.store.get_state(),
                 "records": self.storage.describe(), "pushed": self.storage._pushed}
        # Not the buffer's folder but the file the caller names, as DI-engine's save_data
        # writes where it is told (following the caller's links, as open does).
        # confined: the caller's file, outside the buffer's folder.
        with open(file_name, "wb") as f:
            f.write(MAGIC)
            pickle.dump(state, f)

    def load_data(self, file_name: str) -> None:
        """Loads a ``save_data`` of this folder, or DI-engine's own file (its records are
        pushed into the ring)."""
        # confined: the caller's file, as DI-engine's load_data reads it.
        with open(file_name, "rb") as f:
            head = f.read(len(MAGIC))
            if head == MAGIC:
                state = pickle.load(f)
            else:
                state = None
        if state is None:
            import hickle

            storage, _indices, _meta_index = hickle.load(file_name)
            self.storage.clear()
            for record in storage:
                self.storage.append(record)
            self._reindex()
            return
        self.storage.settle()
        self.storage.store.set_state(state["ring"])
        self.storage.restore(state["records"], state["pushed"])
        self._reindex()

    def __copy__(self) -> "DequeBuffer":
        # DI-engine's view(): a new buffer of the same size over the same records, index
        # and meta index, with no middleware (and, as DI-engine's, sliced=False); it has
        # no folder of its own to make or remove.
        view = type(self).__new__(type(self))
        _DequeBuffer.__init__(view, size=self.size)
        view.storage, view.indices, view.meta_index = self.storage, self.indices, self.meta_index
        view._path, view._own_dir, view._remove_dir = self._path, False, None
        return view

