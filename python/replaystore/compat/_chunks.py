"""Pickled objects in a replaystore ring, in the order they were put, each under a
sequence number that outlives the ring: what the adapters over libraries that store
arbitrary Python objects keep them in (RLlib's episode chunks and ``SampleBatch``
items, DI-engine's records).

Such libraries store objects, not arrays: RLlib's ``SingleAgentEpisode`` (with spaces,
infos, extra model outputs and lookback buffers), DI-engine's dicts of tensors. A chunk
is the library's own ``pickle`` of the object, so every field a version adds is kept
and what comes back is the library's own object.

The ring is a replaystore buffer with item states: the library evicts or deletes
objects, and the adapter removes their chunks. A chunk still held cannot be
overwritten by the ring: before a put that could reach it, the live chunks are copied
into a larger ring (the next *generation*, ``gen-K/``; the adapter's settings file names
the current one, so a kill mid-copy leaves the old one current). The generation before
the current one is kept, so the states ``get_state`` named there stay restorable.
"""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict, deque
from typing import Any, Callable, Dict, Hashable, Iterator, List, Optional, Tuple

import numpy as np

from .._confined import Confined
from .._native import ReplayBuffer as _Buffer
from .._native import ValueSpaceFullError
from ._folder import (drop_recorded_generations, generation_name, read_sidecar,
                      refuse_unrecorded_generation, write_sidecar)

SCHEMA = {"key": "str", "chunk": "bytes", "seq": "uint64", "added": "uint64", "ordinal": "uint64",
          "state": "bytes"}
#: A ring is replaced once the chunks from the oldest live one to the newest would fill
#: this share of its heap.
FILL = 0.6
MIN_HEAP = 1 << 12


def dumps(obj: Any) -> bytes:
    """``pickle``, or ``cloudpickle`` for what holds a function pickle cannot name (a
    ``MultiAgentEpisode`` holds its agent-to-module mapping, often a lambda). Both are
    read back by ``pickle.loads``."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        import cloudpickle  # Ray's (and DI-engine's) dependency

        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


class PickleCodec:
    """An object as one pickled blob (the ``chunk`` field): what RLlib's episodes and
    batches are stored as. Values are rounded up to 1008-byte chunks of the heap."""

    fields: Dict[str, Any] = {}
    chunk_bytes = 1008

    def ready(self, obj: Any) -> None:
        """Fixes the fields from the first object (nothing to fix for a blob)."""

    def encode(self, obj: Any) -> Tuple[Dict[str, Any], bytes]:
        return {}, dumps(obj)

    def decode(self, got: Dict[str, Any], i: int) -> Any:
        return pickle.loads(got["chunk"][i])

    def describe(self) -> Dict[str, Any]:
        return {"kind": "pickle"}


class ChunkStore:
    """Chunks under ``folder/gen-K``: ``put`` returns a sequence number, ``get`` the
    object (a small cache of recent ones in memory), ``remove`` drops chunks.

    The rings grow with what is held, up to ``max_heap`` bytes of value space (``None``:
    as far as the disk allows): a put that would need more raises
    ``ValueSpaceFullError`` with nothing stored, so no object is ever dropped for room."""

    def __init__(self, folder: str, settings: Dict[str, Any], sidecar: str,
                 cache_bytes: int = 64 << 20, codec: Any = None, cache_puts: bool = True,
                 max_heap: Optional[int] = None) -> None:
        self.folder = folder
        #: The most value space a ring may have (the owner's ``heap_bytes=``); a limit
        #: of this process, not of the folder, so a reopen may give another.
        self.max_heap = max_heap
        self.sidecar = sidecar
        #: How an object becomes a row: fixed fields beside the ``chunk`` blob.
        self.codec = codec if codec is not None else PickleCodec()
        #: Whether a put object stays in the cache (RLlib's newest episodes are read
        #: again at once; DI-engine's records are not).
        self.cache_puts = cache_puts
        self.settings = dict(settings)
        self.cache_bytes = cache_bytes
        self._cache: "OrderedDict[int, Tuple[Any, int]]" = OrderedDict()
        self._cached = 0
        self.buf: Optional[_Buffer] = None
        self.gen = 0
        #: The owner's count of timesteps added and the ordinal of the chunk's episode
        #: (RLlib's episode index: episodes added before it), stored with each chunk, so
        #: a reopened buffer counts and indexes on from them.
        self.counters_fn: Callable[[str], Tuple[int, int]] = lambda key: (0, 0)
        #: While a reopened buffer replays its chunks through RLlib's ``add``: the seq of
        #: the chunk being replayed (it is stored already; nothing is put).
        self.replaying: Optional[int] = None
        # seq -> (ring index, blob bytes) of live chunks, in put order.
        self.where: "OrderedDict[int, Tuple[int, int]]" = OrderedDict()
        self.next_seq = 0
        # (seq, bytes) of every chunk from the oldest live one on, removed or not.
        self._order: "deque[Tuple[int, int]]" = deque()
        saved = read_sidecar(folder, sidecar)
        if saved is not None and saved.get("codec") and hasattr(self.codec, "restore"):
            self.codec.restore(saved["codec"])
        if saved is not None and saved.get("gen"):
            self.gen = int(saved["gen"])
            self.buf = _Buffer.open(self._ring(self.gen))
            self._index()
        if saved is not None and drop_recorded_generations(folder, saved, self.gen):
            self._write({})

    # -- the ring ------------------------------------------------------------------------

    def _ring(self, gen: int) -> str:
        """The path of generation ``gen``'s ring, to hand to the engine; refused if
        anything but a folder (a link) stands there."""
        return Confined(self.folder).subdir(generation_name(gen))

    def _write(self, record: Dict[str, int]) -> None:
        """The settings, the current generation and ``record`` (generations made and
        not current) in the sidecar."""
        write_sidecar(self.folder, self.sidecar, {**self.settings, "gen": self.gen, **record})

    def _index(self) -> None:
        """Rebuilds ``where`` from the ring's live items (seq and size; nothing decoded)."""
        self.where.clear()
        for live, got in self._walk():
            for j, (i, seq) in enumerate(zip(live.tolist(), got["seq"].tolist())):
                size = len(got["chunk"][j]) + len(got["state"][j]) + len(got["key"][j].encode())
                self.where[int(seq)] = (i, size)
        # Sequence numbers only name live chunks, so counting on from the newest live one
        # reuses none that anything still holds.
        self.next_seq = max(self.where) + 1 if self.where else 0
        self._tail = int(self.buf.stats()["tail"])
        self._recount()
        # Sizes of removed chunks are not known after an open: the estimate stands for them.
        self._order = deque((seq, self._cost(size)) for seq, (_, size) in self.where.items())

    def _walk(self, step: int = 256) -> Iterator[Tuple[np.ndarray, Dict[str, Any]]]:
        """The live items, oldest first, ``step`` ring indices at a time: their indices
        and their rows as ``get`` returns them."""
        stats = self.buf.stats()
        head, tail = int(stats["head"]), int(stats["tail"])
        for lo in range(head, tail, step):
            idx = np.arange(lo, min(lo + step, tail), dtype=np.uint64)
            live = idx[~self.buf.item_states(idx)["removed"]]
            if len(live):
                yield live, self.buf.get(live)

    def _create(self, gen: int, items: int, heap: int) -> _Buffer:
        refuse_unrecorded_generation(self.folder, gen)
        self._write({"making": gen})
        return _Buffer.create(self._ring(gen), {**SCHEMA, **self.codec.fields}, items, heap_bytes=heap,
                              chunk_bytes=self.codec.chunk_bytes, item_states=True)

    def _cost(self, size: int) -> int:
        """Heap bytes a put of ``size`` value bytes takes: whole chunks of the heap."""
        chunk = self.codec.chunk_bytes
        return -(-max(size, 1) // chunk) * (chunk + 16)

    def _room(self, blob: int) -> None:
        """Makes sure a put of ``blob`` value bytes overwrites no live chunk."""
        if self.buf is None:
            items = int(self.settings["items"])
            # Room for the first put however large, twice over as a replacement gives.
            heap = max(MIN_HEAP, int(self.settings["heap"]), int(2 * self._cost(blob) / FILL))
            if self.max_heap is not None:
                self._within(self._cost(blob), 0)
                heap = max(min(heap, self.max_heap), int(self._cost(blob) / FILL) + 1)
            self.settings["heap"] = heap
            self.settings.setdefault("heaps", {})["1"] = heap
            self._switch(1, self._create(1, items, heap))
            return
        cap = self.buf.capacity
        heap = int(self.settings["heap"])
        oldest = next(iter(self.where.values()))[0] if self.where else self._tail
        span_items = self._tail - oldest + 1
        span_bytes = self._span + self._cost(blob)
        if span_items <= cap and span_bytes <= FILL * heap:
            return
        live = sum(self._cost(size) for _, size in self.where.values()) + self._cost(blob)
        # Twice what is live, so the next replacement is as far off as this one was.
        items = max(cap, 2 * (len(self.where) + 1) + 64)
        heap = max(heap, int(2 * live / FILL))
        if self.max_heap is not None:
            # At the limit, a ring that holds what is live as the fill rule wants.
            self._within(live, len(self.where))
            heap = max(min(heap, self.max_heap), int(live / FILL) + 1)
        self._grow(items, heap)

    def _within(self, live: int, held: int) -> None:
        """Refuses a put after which the ``live`` heap bytes (what is held and the put)
        would not fit ``max_heap`` by the fill rule: nothing was stored."""
        if self.max_heap is not None and live / FILL > self.max_heap:
            raise ValueSpaceFullError(
                f"{self.folder}: the {held} objects held and this one take {live} bytes of "
                f"value space, more than heap_bytes={self.max_heap} leaves room for (the ring "
                f"keeps {int(FILL * 100)}% of it in use at most); nothing was added and nothing "
                f"was dropped: give the buffer a larger heap_bytes=, or None for no limit but "
                f"the disk's")

    def _grow(self, items: int, heap: int) -> None:
        gen = self.gen + 1
        new = self._create(gen, items, heap)
        where: "OrderedDict[int, Tuple[int, int]]" = OrderedDict()
        for live, got in self._walk():
            rows = {k: v for k, v in got.items() if k != "indices"}
            at = new.add_batch(rows)
            for i, (seq, ring) in enumerate(zip(got["seq"].tolist(), at.tolist())):
                where[int(seq)] = (int(ring), self.where[int(seq)][1])
        new.flush()
        old = self.gen
        self.settings["heap"] = heap
        self.settings["items"] = items
        heaps = self.settings.setdefault("heaps", {})
        heaps[str(gen)] = heap
        heaps.pop(str(old - 1), None)
        self.buf.close()
        self._switch(gen, new)
        self.where = where
        self._order = deque((seq, self._cost(size)) for seq, (_, size) in where.items())
        self._span = sum(size for _, size in self._order)
        # The generation before the old one goes: the old one's snapshots stay.
        if old > 1:
            self._write({"retired": old - 1})
            Confined(self.folder).remove_tree(generation_name(old - 1))
            self._write({})

    def _switch(self, gen: int, buf: _Buffer) -> None:
        self.buf = buf
        self.gen = gen
        # Each generation's heap is its own (a restore may go back to the one before).
        self.settings["heap"] = self.settings.get("heaps", {}).get(str(gen), self.settings["heap"])
        self.settings["items"] = buf.capacity
        self._tail = int(buf.stats()["tail"])
        self._write({})

    #: Bytes from the oldest live chunk to the tail: live chunks, and removed ones the
    #: ring has not passed yet (as they were put, plus a row's rounding).
    _span = 0

    # -- chunks --------------------------------------------------------------------------

    def put(self, key: str, obj: Any, ordinal: Optional[int] = None, state: bytes = b"") -> int:
        """Stores ``obj`` (pickled) and returns its sequence number; while replaying, the
        replayed chunk's. ``ordinal`` overrides the owner's; ``state`` is stored beside
        (the owner's counters, for a reopen)."""
        if self.replaying is not None:
            return self.replaying
        added, own = self.counters_fn(key)
        ordinal = own if ordinal is None else ordinal
        if self.buf is None:
            self.codec.ready(obj)
            self.settings["codec"] = self.codec.describe()
        fields, blob = self.codec.encode(obj)
        size = len(blob) + len(state) + len(key.encode())
        self._room(size)
        seq = self.next_seq
        at = int(self.buf.add(key=key, chunk=blob, seq=seq, added=added, ordinal=ordinal, state=state,
                              **fields))
        self._tail = at + 1
        if seq % 64 == 0 and self.where and int(self.buf.stats()["head"]) > next(iter(self.where.values()))[0]:
            # _room sizes the ring so this cannot happen; if it does, say so (checked every
            # 64 puts: a stats call costs as much as the add).
            raise RuntimeError(f"{self._ring(self.gen)}: the ring overwrote a live chunk")
        self.next_seq += 1
        self.where[seq] = (at, size)
        self._span += self._cost(size)
        self._order.append((seq, self._cost(size)))
        if self.cache_puts:
            self.keep(seq, obj, size)
        return seq

    def get(self, seq: int) -> Any:
        """The object put under ``seq`` (shared with the cache: read it, do not change it)."""
        hit = self._cache.get(seq)
        if hit is not None:
            self._cache.move_to_end(seq)
            return hit[0]
        obj = self.fresh(seq)
        self.keep(seq, obj, self.where[seq][1])
        return obj

    def fresh(self, seq: int) -> Any:
        """A copy of the object under ``seq`` that the caller may change."""
        return self.codec.decode(self.buf.get(np.array([self.where[seq][0]])), 0)

    def keep(self, key: Hashable, obj: Any, size: int) -> None:
        """Caches ``obj`` (a chunk, or what is made of chunks) under ``key``."""
        self.drop(key)
        self._cache[key] = (obj, size)
        self._cached += size
        while self._cached > self.cache_bytes and len(self._cache) > 1:
            _, (_, gone) = self._cache.popitem(last=False)
            self._cached -= gone

    def cached(self, key: Hashable) -> Any:
        """The object cached under ``key``, or ``None``."""
        hit = self._cache.get(key)
        if hit is None:
            return None
        self._cache.move_to_end(key)
        return hit[0]

    def drop(self, key: Hashable) -> None:
        hit = self._cache.pop(key, None)
        if hit is not None:
            self._cached -= hit[1]

    def size(self, seq: int) -> int:
        """The value bytes of chunk ``seq`` (its blob, key and state)."""
        return self.where[seq][1]

    def remove(self, seqs: List[int]) -> None:
        """Drops the chunks ``seqs`` (an evicted episode's)."""
        idx = [self.where.pop(s)[0] for s in seqs if s in self.where]
        for s in seqs:
            self.drop(s)
        if idx:
            self.buf.remove(np.array(idx, dtype=np.uint64))
        self._trim()

    def _recount(self) -> None:
        """Estimates ``_span`` from the live chunks alone (after an open or a restore):
        removed chunks between live ones are taken at the live ones' mean size."""
        if not self.where:
            self._span = 0
            return
        first = next(iter(self.where.values()))[0]
        live = sum(self._cost(size) for _, size in self.where.values())
        self._span = int(live * (self._tail - first) / len(self.where))

    def _trim(self) -> None:
        """After a removal: chunks the ring holds before the oldest live one no longer
        count against its heap."""
        if not self.where:
            self._span = 0
            self._order.clear()
            return
        while self._order and self._order[0][0] not in self.where:
            self._span -= self._order.popleft()[1]

    def clear(self) -> None:
        self.where.clear()
        self._order.clear()
        self._cache.clear()
        self._cached = 0
        self._span = 0
        if self.buf is not None:
            self.buf.clear()

    def items(self, objects: bool = True) -> Iterator[Tuple[int, str, Any, int, int, bytes]]:
        """``(seq, key, object, added, ordinal, state)`` of every live chunk, oldest
        first (``objects=False``: ``None`` for the object, nothing decoded)."""
        if self.buf is None:
            return
        for live, got in self._walk():
            for i in range(len(live)):
                yield (int(got["seq"][i]), got["key"][i], self.codec.decode(got, i) if objects else None,
                       int(got["added"][i]), int(got["ordinal"][i]), got["state"][i])

    def load(self, seqs: List[int]) -> List[Any]:
        """Fresh copies of the objects under ``seqs``, read in one call."""
        if not len(seqs):
            return []
        got = self.rows(seqs)
        return [self.codec.decode(got, i) for i in range(len(seqs))]

    def rows(self, seqs: List[int]) -> Dict[str, Any]:
        """The stored rows of ``seqs``, read in one call, not decoded (``codec.decode``
        makes row ``i`` an object)."""
        return self.buf.get(np.array([self.where[s][0] for s in seqs], dtype=np.uint64))

    # -- checkpoints ---------------------------------------------------------------------

    def get_state(self) -> Dict[str, Any]:
        """The ring's checkpoint, with what a store elsewhere needs to make a ring it
        restores into: its size, heap and codec."""
        if self.buf is None:
            return {"gen": 0}
        return {"gen": self.gen, "ring": self.buf.get_state(), "items": self.buf.capacity,
                "heap": int(self.settings["heap"]), "codec": self.codec.describe()}

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restores a ``get_state``: of this folder (its generation, if still kept), or
        of another store's (a buffer built fresh resuming from a checkpoint): then a new
        generation of the same size is made here and the engine brings the snapshot
        into it."""
        gen = int(state["gen"])
        if gen == 0:
            self.clear()
            return
        ring = state["ring"]
        if os.path.realpath(ring["path"]) != os.path.realpath(os.path.join(self.folder, generation_name(gen))):
            self._restore_elsewhere(state)
        else:
            if gen != self.gen:
                if not Confined(self.folder).exists(generation_name(gen)):
                    raise ValueError(
                        f"{self.folder}: the state names ring generation {gen}, which is no longer "
                        f"kept (the buffer has grown its ring since; generation {self.gen} is current)")
                if self.buf is not None:
                    self.buf.close()
                self._switch(gen, _Buffer.open(self._ring(gen)))
            self.buf.set_state(ring)
        self._cache.clear()
        self._cached = 0
        self._index()

    def _restore_elsewhere(self, state: Dict[str, Any]) -> None:
        """A state of another folder's ring: a new generation of its size, restored
        from it (the engine links or copies its snapshot in), then made current as a
        grown ring is."""
        if "items" not in state:
            raise ValueError(
                f"{self.folder}: the state is of {state['ring']['path']} and was taken before "
                "states named their ring's size; restore it on a buffer of that folder")
        if self.buf is None and state.get("codec") and hasattr(self.codec, "restore"):
            self.codec.restore(state["codec"])
            self.settings["codec"] = state["codec"]
        gen, heap = self.gen + 1, int(state["heap"])
        new = self._create(gen, int(state["items"]), heap)
        try:
            new.set_state(state["ring"])
        except BaseException:
            # Refused (another layout) or failed: the generation made for it goes, and
            # the buffer stays as it was, its next generation free to make.
            new.close()
            Confined(self.folder).remove_tree(generation_name(gen))
            self._write({})
            raise
        old = self.gen
        heaps = self.settings.setdefault("heaps", {})
        heaps[str(gen)] = heap
        if self.buf is not None:
            self.buf.close()
        self._switch(gen, new)
        if old > 1:
            heaps.pop(str(old - 1), None)
            self._write({"retired": old - 1})
            Confined(self.folder).remove_tree(generation_name(old - 1))
            self._write({})

    def flush(self) -> None:
        if self.buf is not None:
            self.buf.flush()

    def close(self) -> None:
        if self.buf is not None:
            self.buf.close()
            self.buf = None
