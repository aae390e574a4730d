"""RLlib's old-stack buffers (``ReplayBuffer`` and its prioritized, reservoir, FIFO and
multi-agent kin), each a subclass of RLlib's own whose storage is a replaystore ring.

RLlib keeps its items (``SampleBatch`` or ``MultiAgentBatch``: a timestep, a sequence, an
episode or a fragment, as ``storage_unit`` says) in the list ``_storage`` and draws slot
numbers with ``random``; here ``_storage`` is a :class:`Slots` whose slot ``i`` names a
chunk in a :class:`~._chunks.ChunkStore`, RLlib's own pickle of the item. All of RLlib's
logic stays: slot arithmetic, eviction, draws, sum trees, counters. Reading
``_storage[i]`` gives the item's header (``count``, ``size_bytes()``, the flags RLlib's
prioritized ``sample`` reads); ``_encode_sample`` reads the drawn items in one call.
"""

from __future__ import annotations

import collections
import inspect
import os
import pickle
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from ray.rllib.policy.sample_batch import SampleBatch, concat_samples
from ray.rllib.utils.replay_buffers.fifo_replay_buffer import FifoReplayBuffer as _FifoReplayBuffer
from ray.rllib.utils.replay_buffers.multi_agent_mixin_replay_buffer import (
    MultiAgentMixInReplayBuffer as _MultiAgentMixInReplayBuffer,
)
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_replay_buffer import (
    MultiAgentPrioritizedReplayBuffer as _MultiAgentPrioritizedReplayBuffer,
)
from ray.rllib.utils.replay_buffers.multi_agent_replay_buffer import (
    MultiAgentReplayBuffer as _MultiAgentReplayBuffer,
)
from ray.rllib.utils.replay_buffers.multi_agent_replay_buffer import ReplayMode, merge_dicts_with_warning
from ray.rllib.utils.replay_buffers.prioritized_replay_buffer import (
    PrioritizedReplayBuffer as _PrioritizedReplayBuffer,
)
from ray.rllib.utils.replay_buffers.replay_buffer import ReplayBuffer as _ReplayBuffer
from ray.rllib.utils.replay_buffers.replay_buffer import StorageUnit
from ray.rllib.utils.replay_buffers.reservoir_replay_buffer import (
    ReservoirReplayBuffer as _ReservoirReplayBuffer,
)

from ..._confined import Confined
from ..._native import ReplayBuffer as _Buffer
from ..._native import ValueSpaceFullError
from .._chunks import ChunkStore
from .._folder import Folder, write_sidecar
from ._new import SIDECAR, _detach, own_settings
from ._rows import Header, Rows, fits

__all__ = [
    "ReplayBuffer",
    "PrioritizedReplayBuffer",
    "ReservoirReplayBuffer",
    "FifoReplayBuffer",
    "MultiAgentReplayBuffer",
    "MultiAgentPrioritizedReplayBuffer",
    "MultiAgentMixInReplayBuffer",
    "StorageUnit",
]

#: The reservoir's per-call counters (see ``ReservoirReplayBuffer._attach``).
TALLY = {"calls": "uint64", "added": "uint64", "wrap": "uint64", "evicted": "uint64"}

#: The first ring's heap; the ring is replaced by one twice the size of what it holds
#: whenever it fills (see ``ChunkStore``).
START_HEAP = 1 << 20


class _MultiHeader:
    """The header of a stored ``MultiAgentBatch`` (lockstep replay)."""

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self._size = size

    def size_bytes(self) -> int:
        return self._size


def _header(item: Any) -> tuple:
    if isinstance(item, SampleBatch):
        return ("s", int(item.count), int(item.size_bytes()), bool(item.zero_padded), item.max_seq_len)
    return ("m", int(item.count), int(item.size_bytes()), False, None)


class Slots:
    """``_storage`` of an adapter: RLlib's slot list, each slot a chunk in the store.

    RLlib appends, overwrites a slot (the old item's chunk is removed), reads headers
    and takes ``len``; :meth:`load` reads items."""

    def __init__(self, owner: "_Slotted", store: ChunkStore) -> None:
        self.owner = owner
        self.store = store
        self.seqs: List[int] = []
        self.headers: List[tuple] = []

    def _put(self, slot: int, item: Any) -> int:
        return self.store.put("", item, ordinal=slot, state=self.owner._counters_blob())

    def append(self, item: Any) -> None:
        slot = len(self.seqs)
        self.seqs.append(self._put(slot, item))
        self.headers.append(_header(item))

    def __setitem__(self, slot: int, item: Any) -> None:
        slot = range(len(self.seqs))[slot]
        old = self.seqs[slot]
        self.seqs[slot] = self._put(slot, item)
        self.headers[slot] = _header(item)
        self.store.remove([old])

    def __getitem__(self, slot: int) -> Any:
        kind, count, size, padded, max_len = self.headers[slot]
        return Header(size, count, padded, max_len) if kind == "s" else _MultiHeader(count, size)

    def __len__(self) -> int:
        return len(self.seqs)

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))

    def load(self, slots: Sequence[int]) -> List[Any]:
        """The items in ``slots`` (fresh copies), read in one call."""
        return self.store.load([self.seqs[i] for i in slots])

    def items(self) -> List[Any]:
        return self.load(range(len(self)))

    def reset(self, items: Sequence[Any]) -> None:
        """Replaces every slot with ``items`` (a state that holds its items)."""
        self.store.clear()
        self.seqs, self.headers = [], []
        for item in items:
            self.append(item)

    def rebuild(self) -> Optional[Dict[str, Any]]:
        """The slots from the store's live chunks (a reopened folder); returns the
        counters stored with the newest chunk."""
        by_slot: Dict[int, tuple] = {}
        last: Optional[bytes] = None
        for seq, _key, item, _added, slot, state in self.store.items():
            by_slot[slot] = (seq, _header(item))
            last = state
        self.seqs = [by_slot[s][0] for s in sorted(by_slot)]
        self.headers = [by_slot[s][1] for s in sorted(by_slot)]
        if sorted(by_slot) != list(range(len(by_slot))):
            raise ValueError(f"{self.store.folder}: slots {sorted(by_slot)} are not 0..n-1")
        return pickle.loads(last) if last else None

    def describe(self) -> Dict[str, Any]:
        return {"seqs": list(self.seqs), "headers": list(self.headers)}

    def restore(self, described: Dict[str, Any]) -> None:
        self.seqs = list(described["seqs"])
        self.headers = list(described["headers"])


#: RLlib's counters an adapter keeps with each chunk, so a reopen counts on from them.
COUNTERS = ("_num_timesteps_added", "_num_timesteps_added_wrap", "_next_idx",
            "_eviction_started", "_num_timesteps_sampled", "_est_size_bytes",
            "_num_add_calls", "_num_evicted", "_max_priority")


class _Slotted(Folder):
    """What the adapters add to RLlib's ``ReplayBuffer`` family."""

    #: Whether timestep items may be kept as rows of columns (``_rows``): RLlib's FIFO
    #: slots only; the reservoir overwrites random slots.
    _rows_allowed = True

    def _attach(self, path: Optional[str], heap_bytes: Optional[int] = None) -> None:
        self._take_folder(path, "replaystore-rllib-")
        self._heap_bytes = heap_bytes
        name = type(self).__name__
        saved = own_settings(self._path, name)
        self._settings = {"class": name, "capacity": int(self.capacity),
                          "storage_unit": self.storage_unit.value,
                          "items": min(2 * int(self.capacity) + 64, 4096), "heap": START_HEAP}
        if saved is not None:
            self._settings.update({k: saved[k] for k in ("items", "heap") if k in saved})
        self._rows: Optional[Rows] = None
        if saved is not None and saved.get("mode") == "rows":
            self._rows = Rows(self._path, int(self.capacity), saved["columns"], heap_bytes)
            self._storage = self._rows
            self._reopen_rows()
            return
        store = ChunkStore(self._path, self._settings, SIDECAR, max_heap=heap_bytes)
        store.counters_fn = lambda key: (self._num_timesteps_added, 0)
        self._storage = Slots(self, store)
        if store.buf is not None:
            self._reopen()

    # -- rows of columns (storage_unit "timesteps") ----------------------------------------

    #: Set by the multi-agent adapters on their policies' buffers (storage unit
    #: fragments) when they give them one-timestep items only, so those may be rows too.
    _one_row_items = False

    def _takes_rows(self, batch: Any, timesteps: bool) -> bool:
        """Whether ``batch`` goes in as rows, its items being ``timesteps``; an empty
        buffer of one-timestep items chooses rows for a batch of flat columns."""
        if self._rows is not None:
            return True
        if (self._rows_allowed and timesteps
                and (self.storage_unit == StorageUnit.TIMESTEPS or self._one_row_items)
                and isinstance(self._storage, Slots) and len(self._storage) == 0
                and self._storage.store.buf is None and fits(batch)):
            self._rows = Rows(self._path, int(self.capacity), heap_bytes=self._heap_bytes)
            self._storage = self._rows
            return True
        return False

    def add(self, batch: Any, **kwargs: Any) -> None:
        """RLlib's ``add``. With ``storage_unit="timesteps"`` and a batch of flat columns
        into a buffer that holds nothing else, the timesteps are rows of columns: written
        in one call, then counted in by RLlib's own ``_add_single_batch``, once per row."""
        # A fragments buffer's item is the whole batch: a timestep only when it has one.
        timesteps = self.storage_unit == StorageUnit.TIMESTEPS or batch.count <= 1
        if not self._takes_rows(batch, timesteps):
            super().add(batch, **kwargs)
        elif not timesteps:
            raise ValueError(f"{self._path}: a fragment of {batch.count} timesteps into a buffer of "
                             "one-timestep rows")
        else:
            self._add_rows(batch, None, **kwargs)

    def _add_rows(self, batch: Any, per_row: Optional[List[Dict[str, Any]]], **kwargs: Any) -> None:
        """The batch's timesteps as one-timestep items: rows written in one call, then
        RLlib's ``_add_single_batch`` per row (with ``per_row[i]`` as its arguments)."""
        rows = self._rows
        if not batch.count > 0:
            return
        if not fits(batch):
            raise ValueError(f"{self._path}: a batch of sequences, padding or nested columns into a "
                             "buffer of one-timestep rows")
        rows.check(batch)
        first = rows.buf is None
        rows.write(batch)
        if first:
            write_sidecar(self._path, SIDECAR, {**self._settings, "mode": "rows", "columns": rows.columns})
        header = rows.header()
        for i in range(batch.count):
            self._add_single_batch(header, **(per_row[i] if per_row is not None else kwargs))

    def _reopen_rows(self) -> None:
        """RLlib's counters after ``tail`` one-timestep items: item ``k`` went to slot
        ``k mod capacity``, and the wrap came back to 0 at every multiple of it."""
        tail = int(self._rows.buf.stats()["tail"]) if self._rows.buf is not None else 0
        self._num_timesteps_added = tail
        self._num_timesteps_added_wrap = tail % self.capacity
        self._next_idx = tail % self.capacity
        self._eviction_started = tail >= self.capacity
        self._est_size_bytes = len(self._rows) * self._rows.row_size
        self._restart_priorities()

    def _add_single_batch(self, item: Any, **kwargs: Any) -> None:
        # RLlib counts an item in before it stores it: a put refused for want of value
        # space (heap_bytes=) puts the counts back, so RLlib counts only what is held.
        counted = {k: getattr(self, k) for k in COUNTERS if hasattr(self, k)}
        try:
            super()._add_single_batch(item, **kwargs)
        except ValueSpaceFullError:
            for k, v in counted.items():
                setattr(self, k, v)
            raise

    def _restart_priorities(self) -> None:
        """After a reopen: what RLlib keeps beside the items only in memory (the
        prioritized buffer's trees)."""

    def _counters_blob(self) -> bytes:
        # Taken inside RLlib's _add_single_batch, after it counted the item in and
        # before it moved _next_idx on: _reopen finishes that step.
        return pickle.dumps({k: getattr(self, k) for k in COUNTERS if hasattr(self, k)})

    def _reopen(self) -> None:
        counters = self._storage.rebuild()
        if counters is None:
            return
        for k, v in counters.items():
            setattr(self, k, v)
        # RLlib's running sum, at its value after the add (the stored one was taken
        # mid-add): the sizes of the items held.
        self._est_size_bytes = sum(h[2] for h in self._storage.headers)
        self._after_reopen()
        self._restart_priorities()

    def _after_reopen(self) -> None:
        """Moves on as RLlib's ``_add_single_batch`` does after it stored an item."""
        if self._num_timesteps_added_wrap >= self.capacity:
            self._eviction_started = True
            self._num_timesteps_added_wrap = 0
            self._next_idx = 0
        else:
            self._next_idx += 1

    def _open_buffers(self) -> list:
        return [self._rows or self._storage.store]

    def flush(self) -> None:
        """Makes every item added so far durable (``fsync``)."""
        (self._rows or self._storage.store).flush()

    def _encode_sample(self, idxes: List[int]) -> Any:
        # RLlib's, reading the drawn items in one call.
        for i in idxes:
            self._hit_count[i] += 1
        if self._rows is not None:
            out = self._rows.read(idxes)
        else:
            items = self._storage.load(idxes)
            out = concat_samples(items) if items else SampleBatch()
        out.decompress_if_needed()
        return out

    def get_state(self) -> Dict[str, Any]:
        """RLlib's state, in milliseconds: with a folder of the caller's (``path=``), the
        items are an O(1) snapshot of the ring plus each slot's header, restored by
        ``set_state`` on this buffer or on one built fresh (here or in another process;
        the snapshot is brought into its folder).
        With a temporary folder (it ends with the process), the items themselves, as
        RLlib's state holds them."""
        storage = self._storage
        self._storage = []
        try:
            state = _detach(super().get_state())
        finally:
            self._storage = storage
        if self._own_dir:
            state["_storage"] = self._state_items()
            return state
        del state["_storage"]
        mine: Dict[str, Any] = {"path": os.path.realpath(self._path)}
        if self._rows is not None:
            mine["rows"] = self._rows.buf.get_state() if self._rows.buf is not None else None
            mine["n"] = len(self._rows)
            mine["columns"] = dict(self._rows.columns)
        else:
            mine["ring"] = storage.store.get_state()
            mine["slots"] = storage.describe()
        state["replaystore"] = mine
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restores a ``get_state``: of this folder, of another folder (its snapshot is
        brought into this one), or one that holds its items."""
        mine = state.get("replaystore")
        if mine is None:
            items = list(state["_storage"])
            if self._rows is not None:
                self._rows.reset(items, int(state["_next_idx"]))
            else:
                self._storage.reset(items)
        elif "rows" in mine:
            if self._rows is None:
                empty = len(self._storage) == 0 and self._storage.store.buf is None
                if not (self._rows_allowed and empty):
                    raise ValueError(f"{self._path}: the state is of a timesteps buffer of rows; "
                                     "this buffer holds chunks")
                # A buffer built fresh takes rows as its first add of timesteps would.
                self._rows = Rows(self._path, int(self.capacity), heap_bytes=self._heap_bytes)
                self._storage = self._rows
            if mine["rows"] is None:
                self._rows.reset([], 0)
            else:
                first = self._rows.buf is None
                self._rows.restore(mine["rows"], mine["n"], mine.get("columns"))
                if first:
                    write_sidecar(self._path, SIDECAR,
                                  {**self._settings, "mode": "rows", "columns": self._rows.columns})
        else:
            self._storage.store.set_state(mine["ring"])
            self._storage.restore(mine["slots"])
        storage = self._storage
        super().set_state({**state, "_storage": storage})
        self._storage = storage
        if mine is None:
            # RLlib's state holds its items themselves: the same objects come back from
            # this buffer's get_state until it changes (so two states compare equal).
            self._handed = (self._items_mark(), items)

    def _items_mark(self) -> tuple:
        """What every change of the items changes (an add, a set_state, a clear)."""
        return (id(self._storage), len(self._storage), self._num_timesteps_added, self._next_idx)

    def _state_items(self) -> List[Any]:
        """The items for a state that holds them: RLlib hands out its stored objects, so
        two get_state calls with no change between give the same objects; here the
        objects built (or given to set_state) last time, while nothing changed."""
        handed = self.__dict__.get("_handed")
        if handed is not None and handed[0] == self._items_mark():
            return list(handed[1])
        items = self._storage.items()
        self._handed = (self._items_mark(), items)
        return list(items)


class ReplayBuffer(_Slotted, _ReplayBuffer):
    """RLlib's ``ReplayBuffer(capacity=10000, storage_unit="timesteps")`` with its items in
    the folder ``path``."""

    def __init__(self, capacity: int = 10000, storage_unit: Any = "timesteps", *,
                 path: Optional[str] = None, heap_bytes: Optional[int] = None, **kwargs: Any) -> None:
        _ReplayBuffer.__init__(self, capacity, storage_unit, **kwargs)
        self._attach(path, heap_bytes)


class PrioritizedReplayBuffer(_Slotted, _PrioritizedReplayBuffer):
    """RLlib's ``PrioritizedReplayBuffer(capacity=10000, storage_unit="timesteps",
    alpha=1.0)`` with its items in the folder ``path``; the priorities are RLlib's sum
    trees, in memory (a reopened folder starts every item at the largest priority)."""

    def __init__(self, capacity: int = 10000, storage_unit: Any = "timesteps", alpha: float = 1.0, *,
                 path: Optional[str] = None, heap_bytes: Optional[int] = None, **kwargs: Any) -> None:
        _PrioritizedReplayBuffer.__init__(self, capacity, storage_unit, alpha, **kwargs)
        self._attach(path, heap_bytes)

    def _restart_priorities(self) -> None:
        top = self._max_priority ** self._alpha
        for slot in range(len(self._storage)):
            self._it_sum[slot] = top
            self._it_min[slot] = top


class ReservoirReplayBuffer(_Slotted, _ReservoirReplayBuffer):
    """RLlib's ``ReservoirReplayBuffer(capacity=10000, storage_unit="timesteps")``: every
    item ever added kept with equal chance, in the folder ``path``."""

    _rows_allowed = False

    def __init__(self, capacity: int = 10000, storage_unit: Any = "timesteps", *,
                 path: Optional[str] = None, heap_bytes: Optional[int] = None, **kwargs: Any) -> None:
        _ReservoirReplayBuffer.__init__(self, capacity, storage_unit, **kwargs)
        self._attach(path, heap_bytes)

    def _attach(self, path: Optional[str], heap_bytes: Optional[int] = None) -> None:
        super()._attach(path, heap_bytes)
        # Most adds past capacity store nothing (the item is not drawn into the
        # reservoir) yet count: each add call's counters go to a two-row ring of their
        # own, so a reopen counts every call, stored or not.
        self._tally = _Buffer.open_or_create(Confined(self._path).subdir("tally"), TALLY, 2)
        if len(self._tally):
            row = self._tally.get(np.array([self._tally.stats()["tail"] - 1]))
            calls = int(row["calls"][0])
            if calls > self._num_add_calls:
                self._num_add_calls = calls
                self._num_timesteps_added = int(row["added"][0])
                self._num_timesteps_added_wrap = int(row["wrap"][0])
                self._num_evicted = int(row["evicted"][0])
                self._eviction_started = self._num_timesteps_added >= self.capacity

    def _after_reopen(self) -> None:
        pass  # RLlib's reservoir add has nothing left to do once the item is stored

    def _add_single_batch(self, item: Any, **kwargs: Any) -> None:
        super()._add_single_batch(item, **kwargs)
        self._count_call()

    def _count_call(self) -> None:
        self._tally.add(calls=self._num_add_calls, added=self._num_timesteps_added,
                        wrap=self._num_timesteps_added_wrap, evicted=self._num_evicted)

    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        self._count_call()

    def _open_buffers(self) -> list:
        return super()._open_buffers() + [self._tally]

    def flush(self) -> None:
        super().flush()
        self._tally.flush()


class _Queue:
    """``_queue`` of the FIFO adapter: appended at the end, popped at the front."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self.seqs = collections.deque(seq for seq, *_ in store.items(objects=False))

    def append(self, batch: Any) -> None:
        self.seqs.append(self.store.put("", batch))

    def pop(self, i: int = -1) -> Any:
        if i not in (0, -len(self.seqs)):
            raise IndexError("the FIFO adapter's queue pops at the front only")
        seq = self.seqs.popleft()
        item = self.store.load([seq])[0]
        self.store.remove([seq])
        return item

    def __len__(self) -> int:
        return len(self.seqs)


class FifoReplayBuffer(Folder, _FifoReplayBuffer):
    """RLlib's ``FifoReplayBuffer``: batches returned one at a time in the order added,
    queued in the folder ``path``."""

    def __init__(self, *args: Any, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _FifoReplayBuffer.__init__(self, *args, **kwargs)
        self._take_folder(path, "replaystore-rllib-")
        store = ChunkStore(self._path, {"class": type(self).__name__, "items": 1024, "heap": START_HEAP},
                           SIDECAR, max_heap=heap_bytes)
        self._queue = _Queue(store)

    def _open_buffers(self) -> list:
        return [self._queue.store]


# -- multi-agent: one adapter per policy, in path/policy-<id> --------------------------

#: RLlib's underlying classes, and the adapters that stand in for them.
_STAND_INS = {
    _ReplayBuffer: ReplayBuffer,
    _PrioritizedReplayBuffer: PrioritizedReplayBuffer,
    _ReservoirReplayBuffer: ReservoirReplayBuffer,
}


def _folder_name(policy_id: Any) -> str:
    text = str(policy_id)
    safe = re.sub(r"[^A-Za-z0-9_.-]", lambda m: f"%{ord(m.group()):02x}", text)
    return f"policy-{safe}"


def _policy_of(name: str) -> str:
    return re.sub(r"%([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), name[len("policy-"):])


class _PerPolicy(dict):
    """``replay_buffers`` of the multi-agent adapters: the buffer of a policy seen for the
    first time is an adapter in the folder ``policy-<id>``."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, policy_id: Any) -> Any:
        buf = self[policy_id] = self.make(policy_id)
        return buf


class _MultiAgent(Folder):
    _rllib_init: Any = None

    def _init(self, args: tuple, kwargs: Dict[str, Any]) -> Optional[str]:
        """Runs RLlib's ``__init__``; returns ``path`` (and keeps ``heap_bytes``, each
        policy's limit)."""
        path = kwargs.pop("path", None)
        self._heap_bytes = kwargs.pop("heap_bytes", None)
        init = type(self)._rllib_init
        bound = inspect.signature(init).bind(self, *args, **kwargs)
        bound.apply_defaults()
        # RLlib gives each policy's buffer capacity // num_shards when it is configured
        # with an underlying buffer, and the whole capacity when not.
        self._shard_capacity = bound.arguments["capacity"] // bound.arguments["num_shards"]
        init(*bound.args, **bound.kwargs)
        return path

    def _attach(self, path: Optional[str]) -> None:
        self._take_folder(path, "replaystore-rllib-")
        make_rllib = self.replay_buffers.default_factory
        config = self.underlying_buffer_config

        # With timesteps, RLlib gives each policy's buffer one-timestep items only.
        self._one_row = self.storage_unit is StorageUnit.TIMESTEPS

        def make(policy_id: Any) -> Any:
            folder = Confined(self._path).subdir(_folder_name(policy_id))
            if not config:
                buf = ReplayBuffer(self.capacity, storage_unit=StorageUnit.FRAGMENTS, path=folder,
                                   heap_bytes=self._heap_bytes)
            else:
                kind = config["type"]
                stand_in = _STAND_INS.get(kind, kind if isinstance(kind, type) and issubclass(kind, _Slotted) else None)
                if stand_in is None:
                    return make_rllib()
                args = {"capacity": self._shard_capacity, "storage_unit": StorageUnit.FRAGMENTS,
                        **{k: v for k, v in config.items() if k != "type"}}
                buf = stand_in(path=folder, heap_bytes=self._heap_bytes, **args)
            buf._one_row_items = self._one_row
            # A policy's folder ends with a temporary parent's: its state holds its items,
            # as a temporary buffer's does (the parent removes the folder).
            buf._own_dir = self._own_dir
            return buf

        self.replay_buffers = _PerPolicy(make)
        os.makedirs(self._path, exist_ok=True)
        for name in sorted(os.listdir(self._path)):
            if name.startswith("policy-"):
                self.replay_buffers[_policy_of(name)]  # reopen what the folder holds

    def _add_to_underlying_buffer(self, policy_id: Any, batch: Any, **kwargs: Any) -> None:
        """RLlib's, but a policy's buffer of one-timestep rows takes the whole batch in one
        write (RLlib slices it into timesteps and adds them one by one), with the
        arguments RLlib would give each timestep."""
        buf = self.replay_buffers[policy_id]
        if not (self._one_row and isinstance(buf, _Slotted)) or not buf._takes_rows(batch, True):
            super()._add_to_underlying_buffer(policy_id, batch, **kwargs)
            return
        kwargs = merge_dicts_with_warning(self.underlying_buffer_call_args, kwargs)
        per_row = None
        if isinstance(self, _MultiAgentPrioritizedReplayBuffer):
            # RLlib's prioritized multi-agent buffer: a timestep's weight is the mean of its
            # "weights" (its one value) unless the arguments hold one, and RLlib's loop
            # puts the first timestep's into the arguments for the rest (so every
            # timestep of a batch gets the first one's); none in lockstep.
            if self.replay_mode is ReplayMode.INDEPENDENT:
                has = "weights" in batch and len(batch["weights"])
                per_row = []
                for i in range(batch.count):
                    kwargs = {"weight": np.mean(batch["weights"][i:i + 1]) if has else None, **kwargs}
                    per_row.append(kwargs)
            else:
                per_row = [{**kwargs, "weight": None}] * batch.count
        buf._add_rows(batch, per_row, **kwargs)

    def _open_buffers(self) -> list:
        # The policies' adapters (an underlying type that is RLlib's own has no folder).
        return [buf for buf in self.replay_buffers.values() if isinstance(buf, Folder)]

    def flush(self) -> None:
        """Makes every policy's items added so far durable (``fsync``)."""
        for buf in self._open_buffers():
            buf.flush()


class MultiAgentReplayBuffer(_MultiAgent, _MultiAgentReplayBuffer):
    """RLlib's ``MultiAgentReplayBuffer``: one adapter per policy under ``path``."""

    _rllib_init = _MultiAgentReplayBuffer.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._attach(self._init(args, kwargs))


class MultiAgentPrioritizedReplayBuffer(_MultiAgent, _MultiAgentPrioritizedReplayBuffer):
    """RLlib's ``MultiAgentPrioritizedReplayBuffer``: one prioritized adapter per policy
    under ``path``."""

    _rllib_init = _MultiAgentPrioritizedReplayBuffer.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._attach(self._init(args, kwargs))


class MultiAgentMixInReplayBuffer(_MultiAgent, _MultiAgentMixInReplayBuffer):
    """RLlib's ``MultiAgentMixInReplayBuffer``: one adapter per policy under ``path``;
    the batches added since the last draw (mixed into the next) are RLlib's, in memory."""

    _rllib_init = _MultiAgentMixInReplayBuffer.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._attach(self._init(args, kwargs))

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restores a ``get_state``. (RLlib's raises ``TypeError``: it calls its
        parent's ``set_state`` unbound, without the buffer.)"""
        self.last_added_batches = state["last_added_batches"]
        _MultiAgentPrioritizedReplayBuffer.set_state(self, state)

