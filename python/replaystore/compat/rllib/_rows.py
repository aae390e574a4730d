"""``_storage`` of an old-stack ``ReplayBuffer`` or ``PrioritizedReplayBuffer`` with
``storage_unit="timesteps"``: one replaystore row per timestep, in columns.

RLlib slices each added batch into one-timestep items and puts item ``k`` (counting every
item ever added) in slot ``k mod capacity``, so a ring of ``capacity`` rows holds exactly
RLlib's items, slot ``s`` being the live row whose index is ``s`` modulo ``capacity``.
An ``add`` writes the whole batch as rows in one call, then runs RLlib's own
``_add_single_batch`` once per timestep on a header (counts, slots, eviction, hit counts,
the prioritized trees), so the bookkeeping is RLlib's. A draw reads its rows in one call
and builds the batch RLlib's ``concat_samples`` would.

Numeric columns are fixed fields; object columns (``infos``) ride pickled in one bytes
field per row. A batch whose columns differ from the first one's is refused (RLlib would
take it): the columns are the ring's schema.
"""

from __future__ import annotations

import os
import pickle
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from ray.rllib.policy.sample_batch import SampleBatch, concat_samples

from ..._confined import Confined
from ..._native import ReplayBuffer as _Buffer
from ..._native import ValueSpaceFullError
from .._folder import value_space

#: Columns are fields ``c.NAME`` (the engine keeps ``indices``, ``weights`` and
#: ``offsets`` for itself, and RLlib batches have a ``weights`` column).
COLUMN = "c."
REST = "__rest__"
NGU = "__num_grad_updates__"


def fits(batch: Any) -> bool:
    """Whether RLlib's timeslices of ``batch`` can be rows of columns: a ``SampleBatch``
    of flat NumPy columns, not zero-padded, without sequence lengths or time-major."""
    if not isinstance(batch, SampleBatch) or batch.zero_padded or batch.time_major:
        return False
    if batch.get(SampleBatch.SEQ_LENS) is not None or batch.max_seq_len is not None:
        return False
    return all(isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) == batch.count
               for v in batch.values())


class Header(SampleBatch):
    """A stored ``SampleBatch`` as RLlib's bookkeeping and prioritized ``sample`` see it
    (``_storage[i]``): its ``count``, ``size_bytes()`` and sequence flags, no columns."""

    def __init__(self, size: int, count: int = 1, zero_padded: bool = False,
                 max_seq_len: Optional[int] = None) -> None:
        dict.__init__(self)
        self.count = count
        self._size = size
        self.zero_padded = zero_padded
        self.max_seq_len = max_seq_len

    def size_bytes(self) -> int:
        return self._size


class Rows:
    """The ring of rows and RLlib's slot count over it."""

    def __init__(self, folder: str, capacity: int, columns: Optional[Dict[str, Any]] = None,
                 heap_bytes: Optional[int] = None) -> None:
        self.folder = folder
        self.path = os.path.join(folder, "rows")
        self.capacity = capacity
        #: The most the pickled object columns (``infos``) of the rows may take.
        self.heap_bytes = heap_bytes or value_space(capacity)
        self.buf: Optional[_Buffer] = None
        self.columns: Dict[str, Any] = {}  # name -> [dtype str, shape] or "object", in order
        self.n = 0  # RLlib's len(_storage)
        self.tail = 0  # the ring's next index: this is its only writer
        self.row_size = 0
        self._header = Header(0)
        if columns is not None and Confined(folder).exists("rows"):
            self.columns = columns
            self.buf = _Buffer.open(Confined(folder).subdir("rows"))
            self._sized()
            self.tail = int(self.buf.stats()["tail"])
            self.n = min(self.tail, capacity)

    # -- schema ---------------------------------------------------------------------------

    def _sized(self) -> None:
        # The header RLlib's bookkeeping reads for every item: size_bytes of a
        # one-timestep item is its arrays' bytes (8 per object).
        size = 0
        for spec in self.columns.values():
            if spec == "object":
                size += 8
            else:
                size += np.dtype(spec[0]).itemsize * int(np.prod(spec[1], dtype=np.int64))
        self.row_size = size
        self._header = Header(size)

    def _create(self, batch: SampleBatch) -> None:
        self._make({name: "object" if value.dtype == object else [value.dtype.str, list(value.shape[1:])]
                    for name, value in batch.items()})

    def _make(self, columns: Dict[str, Any]) -> None:
        """The ring for ``columns`` (name -> ``[dtype str, shape]`` or ``"object"``)."""
        self.columns = dict(columns)
        schema: Dict[str, Any] = {COLUMN + name: (spec[0], tuple(spec[1]))
                                  for name, spec in columns.items() if spec != "object"}
        schema[NGU] = "float64"
        schema[REST] = "bytes"
        self.buf = _Buffer.create(Confined(self.folder).subdir("rows"), schema, self.capacity,
                                  heap_bytes=self.heap_bytes)
        self._sized()

    def check(self, batch: SampleBatch) -> None:
        """Refuses a batch the ring cannot hold, naming what differs."""
        if self.buf is None:
            return
        if list(batch.keys()) != list(self.columns):
            raise ValueError(f"{self.path}: a batch of columns {sorted(batch.keys())} after batches of "
                             f"{sorted(self.columns)}: a timesteps buffer keeps its first batch's columns")
        for name, spec in self.columns.items():
            value = batch[name]
            want = ("object", None) if spec == "object" else (np.dtype(spec[0]).str, list(spec[1]))
            got = ("object", None) if value.dtype == object else (value.dtype.str, list(value.shape[1:]))
            if want != got:
                raise ValueError(f"{self.path}: column {name!r}: expected {want}, got {got}")

    # -- rows -----------------------------------------------------------------------------

    def write(self, batch: SampleBatch) -> None:
        """Adds the batch's timesteps as rows (RLlib's bookkeeping follows, per row)."""
        if self.buf is None:
            self._create(batch)
        n = batch.count
        rows: Dict[str, Any] = {}
        objects = [name for name, spec in self.columns.items() if spec == "object"]
        for name, spec in self.columns.items():
            if spec != "object":
                rows[COLUMN + name] = np.ascontiguousarray(batch[name])
        rows[REST] = ([pickle.dumps({k: batch[k][i] for k in objects}, pickle.HIGHEST_PROTOCOL)
                       for i in range(n)] if objects else [b""] * n)
        ngu = batch.num_grad_updates
        rows[NGU] = np.full(n, np.nan if ngu is None else float(ngu))
        try:
            self.tail = int(self.buf.add_batch(rows)[-1]) + 1
        except ValueSpaceFullError as e:
            # RLlib counts the rows after they are written: nothing was counted either.
            raise ValueSpaceFullError(
                f"{self.path}: the object columns of this batch ({', '.join(objects)}) do not fit "
                f"beside the {min(self.tail, self.capacity)} timesteps held, and RLlib keeps every "
                f"timestep until capacity; nothing was added: give the buffer a larger heap_bytes= "
                f"(now {self.heap_bytes}). {e}") from None

    def indices(self, slots: Sequence[int]) -> np.ndarray:
        """The ring index of the item in each slot (the ring holds RLlib's ``n`` items,
        the newest ``n`` rows)."""
        head = self.tail - self.n
        slots = np.asarray(slots, np.int64)
        return (head + (slots - head) % self.capacity).astype(np.uint64)

    def read(self, slots: Sequence[int]) -> SampleBatch:
        """The items in ``slots``, concatenated as RLlib's ``concat_samples`` does."""
        if len(slots) == 0:
            return SampleBatch()
        got = self.buf.get(self.indices(slots))
        rest = [pickle.loads(b) if b else {} for b in got[REST]]
        data = {}
        for name, spec in self.columns.items():
            if spec == "object":
                column = np.empty(len(rest), dtype=object)
                column[:] = [r[name] for r in rest]
                data[name] = column
            else:
                data[name] = got[COLUMN + name]
        ngu = [v for v in got[NGU].tolist() if v == v]
        total = 0.0
        for v in ngu:  # in order, as concat_samples sums them
            total += v
        return SampleBatch(data, seq_lens=[], _time_major=False, _zero_padded=False,
                           _max_seq_len=None, _num_grad_updates=total / (len(ngu) or 1.0))

    def reset(self, items: List[SampleBatch], next_idx: int) -> None:
        """Holds ``items`` (slot by slot, from a state that holds them) with RLlib's next
        slot ``next_idx``: written so that each slot's row index is the slot modulo
        ``capacity`` and the tail is ``next_idx`` modulo it. A full ring starts with the
        slots before ``next_idx`` once more, which the ring then evicts."""
        if self.buf is not None:
            # Only a ring this object holds is removed: nothing else at the name is ours.
            self.buf.close()
            self.buf = None
            Confined(self.folder).remove_tree("rows")
        self.tail = 0
        self.n = len(items)
        if not items:
            return
        order = items if len(items) < self.capacity else items[:next_idx] + items[next_idx:] + items[:next_idx]
        self.write(concat_samples(order))

    def restore(self, ring_state: Any, n: int, columns: Optional[Dict[str, Any]] = None) -> None:
        """Restores a snapshot of a ring holding RLlib's ``n`` items: this folder's, or
        another's of the same ``columns`` (a buffer built fresh makes its ring of them;
        the engine brings the snapshot in)."""
        if self.buf is None:
            if columns is None:
                raise ValueError(f"{self.path}: the state was taken before states named their "
                                 "columns, and this buffer has no ring yet: restore it on a buffer "
                                 "of the folder it names")
            self._make(columns)
        self.buf.set_state(ring_state)
        self.tail = int(self.buf.stats()["tail"])
        self.n = n

    def items(self) -> List[SampleBatch]:
        """Every item, slot by slot (a state that holds its items)."""
        return [self.read([s]) for s in range(self.n)]

    # -- RLlib's list ---------------------------------------------------------------------

    def append(self, header: Any) -> None:
        self.n += 1

    def __setitem__(self, slot: int, header: Any) -> None:
        pass  # the row is in the ring already

    def __getitem__(self, slot: int) -> Header:
        if not 0 <= slot < self.n:
            raise IndexError(slot)
        return self._header

    def __len__(self) -> int:
        return self.n

    def header(self) -> Header:
        return self._header

    def close(self) -> None:
        if self.buf is not None:
            self.buf.close()
            self.buf = None

    def flush(self) -> None:
        if self.buf is not None:
            self.buf.flush()
