"""RLlib's ``ReplayBuffer`` and ``PrioritizedReplayBuffer``, backed by replaystore, on
plain dicts of equal-length arrays (a ``SampleBatch`` as a dict; no Ray import).

Follows RLlib's documented behaviour: ``capacity`` counts timesteps; ``storage_unit``
decides what one item is: each timestep (``timesteps``), each sequence of
``batch["seq_lens"]`` (``sequences``), each complete episode, split by ``eps_id``, an
incomplete one dropped (``episodes``), or each ``add`` call's batch (``fragments``);
``sample(num_items)`` draws items uniformly with replacement and concatenates their
timesteps; ``stats()`` has ``added_count``, ``added_count_wrapped``,
``eviction_started``, ``sampled_count``, ``est_size_bytes`` and ``num_entries``;
``get_state()`` / ``set_state()`` save and restore the buffer. The prioritized buffer's
``sample(num_items, beta)`` adds ``weights`` and ``batch_indexes`` (one per timestep,
repeated over an item's timesteps), ``add(batch, weight=None)`` starts items at the
largest priority seen, and ``update_priorities(idxes, priorities)`` sets item priorities.

What differs, on purpose:

- The buffer lives in the folder ``path`` (a temporary folder when ``None``). Its state
  is a small dict naming a snapshot of that folder, not the items themselves: it costs
  milliseconds at any size, and applies to this folder only.
- ``capacity`` is a hard limit on stored timesteps: the oldest items go as new ones
  arrive (RLlib replaces item slots and may hold a little more for a while).
- ``batch_indexes`` are replaystore's logical indices (an item's first timestep for the
  multi-timestep units) rather than storage slots: stable while the item is stored, never
  reused, so a late ``update_priorities`` skips an evicted item instead of hitting its
  successor.
- ``sample(0)`` returns an empty dict; an empty buffer raises ``ValueError``, as
  ``random.randint(0, -1)`` does in RLlib.
- ``MultiAgentBatch`` and nested (dict) columns are not supported.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from ..._confined import Confined
from ..._native import ReplayBuffer as _Buffer
from .._folder import Folder

__all__ = ["ReplayBuffer", "PrioritizedReplayBuffer", "StorageUnit"]


class StorageUnit:
    TIMESTEPS = "timesteps"
    SEQUENCES = "sequences"
    EPISODES = "episodes"
    FRAGMENTS = "fragments"
    ALL = (TIMESTEPS, SEQUENCES, EPISODES, FRAGMENTS)


def _count(batch: Dict[str, Any]) -> int:
    lens = {len(np.asarray(v)) for k, v in batch.items() if k != "seq_lens"}
    if len(lens) != 1:
        raise ValueError(f"columns of unequal length: {sorted(lens)}")
    return lens.pop()


def _ended(eps: Dict[str, np.ndarray]) -> bool:
    for key in ("terminateds", "truncateds", "dones"):
        if key in eps and bool(np.asarray(eps[key])[-1]):
            return True
    return False


class ReplayBuffer(Folder):
    """RLlib's ``ReplayBuffer(capacity=10000, storage_unit="timesteps")``."""

    _alpha: Optional[float] = None

    def __init__(self, capacity: int = 10000, storage_unit: str = "timesteps", *, path: Optional[str] = None, **kwargs: Any) -> None:
        unit = getattr(storage_unit, "value", storage_unit)
        if unit not in StorageUnit.ALL:
            raise ValueError("storage_unit must be either 'timesteps', 'sequences', 'episodes' or 'fragments'")
        if capacity <= 0:
            raise ValueError(f"Capacity of replay buffer has to be greater than zero but was set to {capacity}.")
        self.capacity = int(capacity)
        self.storage_unit = unit
        self._take_folder(path, "replaystore-rllib-")
        self._buf: Optional[_Buffer] = None
        self._items: Dict[int, int] = {}  # first index -> timesteps, for multi-step units
        self._num_timesteps_added = 0
        self._num_timesteps_sampled = 0

    # -- storage -------------------------------------------------------------------------

    def _open(self, batch: Dict[str, np.ndarray]) -> _Buffer:
        if self._buf is None:
            schema = {k: (v.dtype.str, v.shape[1:]) for k, v in batch.items()}
            create = {"alpha": self._alpha} if self._alpha is not None else {}
            self._buf = _Buffer.create(
                Confined(self._path).subdir("ring"), schema, self.capacity,
                fragments=self.storage_unit != StorageUnit.TIMESTEPS, **create,
            )
        return self._buf

    def _columns(self, batch: Dict[str, Any]) -> Dict[str, np.ndarray]:
        cols = {k: np.asarray(v) for k, v in batch.items() if k != "seq_lens"}
        if self._buf is not None:
            cols = {k: np.asarray(cols[k], dtype=dt, order="C") for k, dt, _ in self._buf.schema.fields}
        return {k: np.asarray(v, order="C") for k, v in cols.items()}

    def _store(self, item: Dict[str, np.ndarray], weight: Optional[float]) -> None:
        buf = self._open(item)
        n = _count(item)
        pri = None if weight is None else np.full(n, float(weight))
        idx = buf.add_batch(item, priorities=pri)
        self._num_timesteps_added += n
        if self.storage_unit != StorageUnit.TIMESTEPS:
            self._items[int(idx[0])] = n

    def _prune(self) -> None:
        if self._buf is None or not self._items:
            return
        head = self._buf.stats()["head"]
        for start in [s for s in self._items if s < head]:
            del self._items[start]

    def add(self, batch: Dict[str, Any], weight: Optional[float] = None, **kwargs: Any) -> None:
        """Adds ``batch``, split into items by the storage unit."""
        count = _count(batch)
        assert count > 0, batch
        cols = self._columns(batch)
        unit = self.storage_unit
        if unit in (StorageUnit.TIMESTEPS, StorageUnit.FRAGMENTS):
            self._store(cols, weight)
        elif unit == StorageUnit.SEQUENCES:
            at = 0
            for n in np.asarray(batch["seq_lens"]).tolist():
                self._store({k: v[at:at + n] for k, v in cols.items()}, weight)
                at += n
        else:
            eps_id = np.asarray(batch["eps_id"])
            starts = np.flatnonzero(np.r_[True, eps_id[1:] != eps_id[:-1]])
            for a, b in zip(starts, np.r_[starts[1:], count]):
                eps = {k: v[a:b] for k, v in cols.items()}
                first_t = np.asarray(eps["t"])[0] if "t" in eps else 0
                if first_t == 0 and _ended(eps):
                    self._store(eps, weight)
        self._prune()

    def __len__(self) -> int:
        if self._buf is None:
            return 0
        if self.storage_unit == StorageUnit.TIMESTEPS:
            return len(self._buf)
        self._prune()
        return len(self._items)

    # -- sampling ------------------------------------------------------------------------

    def _draw(self, num_items: int, beta: Optional[float]) -> Dict[str, np.ndarray]:
        if num_items == 0:
            return {}
        if self._buf is None or len(self) == 0:
            raise ValueError("empty range for randrange() (0, 0, 0): the buffer is empty")
        if self.storage_unit == StorageUnit.TIMESTEPS:
            got = self._buf.sample(num_items, beta=beta)
            got["offsets"] = np.arange(num_items + 1)
        else:
            got = self._buf.sample_fragments(num_items, beta=beta)
        self._num_timesteps_sampled += len(got["indices"])
        return got

    def sample(self, num_items: int, **kwargs: Any) -> Dict[str, np.ndarray]:
        """``num_items`` items drawn uniformly with replacement, timesteps concatenated."""
        got = self._draw(num_items, None)
        out = {k: got[k] for k in self._buf.schema.names} if got else {}
        if got and self.storage_unit == StorageUnit.SEQUENCES:
            out["seq_lens"] = np.diff(got["offsets"]).astype(np.int32)
        return out

    # -- stats and state -----------------------------------------------------------------

    def stats(self, debug: bool = False) -> Dict[str, Any]:
        s = self._buf.stats() if self._buf is not None else {"evicted": 0, "bytes_on_disk": 0}
        return {
            "added_count": self._num_timesteps_added,
            "added_count_wrapped": self._num_timesteps_added % self.capacity,
            "eviction_started": s["evicted"] > 0,
            "sampled_count": self._num_timesteps_sampled,
            "est_size_bytes": s["bytes_on_disk"],
            "num_entries": len(self),
        }

    def get_state(self) -> Dict[str, Any]:
        """A checkpoint in milliseconds: replaystore's state of the folder plus counters."""
        state = dict(self.stats())
        state["replaystore"] = self._buf.get_state() if self._buf is not None else None
        state["_items"] = dict(self._items)
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restores a state from ``get_state`` of this buffer."""
        if state.get("replaystore") is not None:
            self._buf.set_state(state["replaystore"])
        self._items = dict(state.get("_items", {}))
        self._num_timesteps_added = state["added_count"]
        self._num_timesteps_sampled = state["sampled_count"]



class PrioritizedReplayBuffer(ReplayBuffer):
    """RLlib's ``PrioritizedReplayBuffer(capacity, storage_unit, alpha=1.0)``."""

    def __init__(self, capacity: int = 10000, storage_unit: str = "timesteps", alpha: float = 1.0, **kwargs: Any) -> None:
        self._alpha = float(alpha)
        super().__init__(capacity, storage_unit, **kwargs)

    def sample(self, num_items: int, beta: float = 0.4, **kwargs: Any) -> Dict[str, np.ndarray]:
        """Items drawn by priority, with ``weights`` and ``batch_indexes`` per timestep."""
        got = self._draw(num_items, beta)
        if not got:
            return {}
        out = {k: got[k] for k in self._buf.schema.names}
        lens = np.diff(got["offsets"].astype(np.int64))
        starts = got["indices"][got["offsets"][:-1]].astype(np.int64)
        out["weights"] = np.repeat(got["weights"], lens)
        out["batch_indexes"] = np.repeat(starts, lens)
        if self.storage_unit == StorageUnit.SEQUENCES:
            out["seq_lens"] = lens.astype(np.int32)
        return out

    def update_priorities(self, idxes, priorities) -> None:
        """Sets the priority of each item named in ``idxes`` (from ``batch_indexes``)."""
        idxes = np.asarray(idxes, dtype=np.int64).ravel()
        priorities = np.asarray(priorities, dtype=np.float64).ravel()
        assert len(idxes) == len(priorities)
        assert (priorities > 0).all(), "priorities must be > 0"
        if self.storage_unit == StorageUnit.TIMESTEPS:
            self._buf.update_priorities(idxes, priorities)
            return
        rows: List[np.ndarray] = []
        values: List[np.ndarray] = []
        for start, p in zip(idxes.tolist(), priorities.tolist()):
            n = self._items.get(start)
            if n is None:
                continue  # evicted since it was sampled, as replaystore skips stale rows
            rows.append(np.arange(start, start + n))
            values.append(np.full(n, p))
        if rows:
            self._buf.update_priorities(np.concatenate(rows), np.concatenate(values))
