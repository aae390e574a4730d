"""Tianshou's ``ReplayBuffer``, ``VectorReplayBuffer`` and ``PrioritizedReplayBuffer``,
backed by replaystore, on
plain dicts of arrays (no Tianshou ``Batch`` needed).

Follows Tianshou's documented behaviour: positions are ring positions in ``[0, size)``;
``add(batch, buffer_ids)`` stores one transition per sub-buffer and returns
``(ptr, ep_rew, ep_len, ep_idx)`` (reward and length 0 until the episode ends, the
episode's first position throughout); ``done = terminated | truncated``;
``sample_indices(0)`` is every stored position oldest first, a negative size gives none;
``prev`` stops at an episode's first step and at the oldest stored one, ``next`` at an
episode's last step and at the newest; ``unfinished_index`` is the newest position when
its episode has not ended; a ``VectorReplayBuffer`` of ``total_size`` and ``buffer_num``
has ``buffer_num`` rings of ``total_size // buffer_num`` whose positions are offset by
``subbuffer_edges``, and draws across them in proportion to their lengths.

What differs, on purpose or not yet:

- Each ring lives in a folder under ``path`` (a temporary folder when ``None``, removed
  by ``close``); the field layout is taken from the first ``add``.
- ``info`` and ``policy`` are not stored (they are nested, free-form batches).
- ``stack_num > 1``, ``save_only_last_obs`` and ``sample_avail`` raise
  ``NotImplementedError`` (replaystore's episodic buffers stack frames at sample time).
- Episode statistics and the ``done`` flags used by ``prev``/``next`` are kept in the
  process: the items survive a crash, the episode bookkeeping of this object does not.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..._confined import Confined
from ..._native import ReplayBuffer as _Buffer
from .._folder import Folder

__all__ = ["PrioritizedReplayBuffer", "ReplayBuffer", "VectorReplayBuffer"]

_REQUIRED = ("obs", "act", "rew", "terminated", "truncated")
_STORED = ("obs", "act", "rew", "terminated", "truncated", "done", "obs_next")
Index = Union[int, Sequence[int], np.ndarray]


class ReplayBuffer(Folder):
    """Tianshou's ``ReplayBuffer(size)``: a ring of ``size`` transitions in a folder."""

    def __init__(
        self,
        size: int,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        save_only_last_obs: bool = False,
        sample_avail: bool = False,
        *,
        path: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        if stack_num != 1 or save_only_last_obs or sample_avail:
            raise NotImplementedError(
                "stack_num > 1, save_only_last_obs and sample_avail are not supported"
            )
        self.maxsize = int(size)
        self.stack_num = 1
        self._save_obs_next = not ignore_obs_next
        self._take_folder(path, "replaystore-tianshou-")
        self._buf: Optional[_Buffer] = None
        self._done = np.zeros(self.maxsize, bool)
        self.reset()

    # -- bookkeeping ---------------------------------------------------------------------

    def reset(self, keep_statistics: bool = False) -> None:
        """Drops every transition (and, unless asked to keep them, episode statistics)."""
        if self._buf is not None:
            self._buf.clear()
        self._base = self._buf.stats()["tail"] if self._buf is not None else 0
        self.last_index = np.array([0])
        self._index = self._size = 0
        self._done[:] = False
        if not keep_statistics:
            self._ep_rew, self._ep_len, self._ep_idx = 0.0, 0, 0

    def __len__(self) -> int:
        return self._size

    def _add_index(self, rew: float, done: bool) -> Tuple[int, Any, int, int]:
        self.last_index[0] = ptr = self._index
        self._size = min(self._size + 1, self.maxsize)
        self._index = (self._index + 1) % self.maxsize
        self._ep_rew = self._ep_rew + rew
        self._ep_len += 1
        self._done[ptr] = done
        if done:
            result = ptr, self._ep_rew, self._ep_len, self._ep_idx
            self._ep_rew, self._ep_len, self._ep_idx = 0.0, 0, self._index
            return result
        return ptr, self._ep_rew * 0.0, 0, self._ep_idx

    def _layout(self, row: Dict[str, np.ndarray]) -> None:
        """Creates the ring from the first transition's fields."""
        schema = {k: (v.dtype.str, v.shape) for k, v in row.items()}
        self._buf = _Buffer.create(Confined(self._path).subdir("ring"), schema, self.maxsize, **self._ring_options())
        self._base = 0

    def _ring_options(self) -> Dict[str, Any]:
        return {}

    def _row(self, batch: Dict[str, Any], i: Optional[int]) -> Dict[str, np.ndarray]:
        """One transition's stored fields, from ``batch`` (row ``i`` of it if given)."""
        missing = [k for k in _REQUIRED if k not in batch]
        if missing:
            raise AssertionError(f"the batch lacks {missing}")
        pick = (lambda v: np.asarray(v)[i]) if i is not None else np.asarray
        row = {k: pick(batch[k]) for k in _REQUIRED}
        row["rew"] = np.asarray(row["rew"], dtype=np.float64)
        row["terminated"] = np.asarray(row["terminated"], dtype=bool)
        row["truncated"] = np.asarray(row["truncated"], dtype=bool)
        row["done"] = np.logical_or(row["terminated"], row["truncated"])
        if self._save_obs_next and "obs_next" in batch:
            row["obs_next"] = pick(batch["obs_next"])
        return {k: np.asarray(v, order="C") for k, v in row.items()}

    def _store(self, row: Dict[str, np.ndarray]) -> Tuple[int, Any, int, int]:
        if self._buf is None:
            self._layout(row)
        else:
            names = self._buf.schema.names
            row = {k: np.asarray(row[k], dtype=dtype, order="C") for k, dtype, _ in self._buf.schema.fields if k in row}
            if set(row) != set(names):
                raise KeyError(f"the batch's keys {sorted(row)} differ from the stored {sorted(names)}")
        self._buf.add(**row)
        return self._add_index(float(row["rew"]) if row["rew"].ndim == 0 else row["rew"], bool(row["done"]))

    def add(self, batch: Dict[str, Any], buffer_ids: Optional[Sequence[int]] = None):
        """Adds one transition (with ``buffer_ids``, a batch of one). Returns
        ``(ptr, ep_rew, ep_len, ep_idx)``, each an array of one."""
        row = self._row(batch, 0 if buffer_ids is not None else None)
        return tuple(np.array([x]) for x in self._store(row))

    # -- positions ------------------------------------------------------------------------

    def _position(self, logical: np.ndarray) -> np.ndarray:
        """The ring positions of logical indices (``_logical``'s inverse)."""
        return ((np.asarray(logical, np.uint64) - np.uint64(self._base)) % np.uint64(self.maxsize)).astype(np.int64)

    def _logical(self, index: np.ndarray) -> np.ndarray:
        s = self._buf.stats()
        head = s["head"]
        start = (head - self._base) % self.maxsize
        return (head + (np.asarray(index, np.int64) - start) % self.maxsize).astype(np.uint64)

    def prev(self, index: Index) -> np.ndarray:
        """The previous position, or ``index`` itself at an episode's first step."""
        index = (np.asarray(index) - 1) % max(self._size, 1)
        end_flag = self._done[index] | (index == self.last_index[0])
        return (index + end_flag) % max(self._size, 1)

    def next(self, index: Index) -> np.ndarray:
        """The next position, or ``index`` itself at an episode's last step."""
        index = np.asarray(index)
        end_flag = self._done[index] | (index == self.last_index[0])
        return (index + (1 - end_flag)) % max(self._size, 1)

    def unfinished_index(self) -> np.ndarray:
        """The newest position if its episode has not ended."""
        last = (self._index - 1) % self._size if self._size else 0
        return np.array([last] if self._size and not self._done[last] else [], int)

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """``batch_size`` positions drawn uniformly; 0: all, oldest first; < 0: none."""
        if batch_size > 0:
            return np.random.choice(self._size, batch_size)
        if batch_size == 0:
            return np.concatenate([np.arange(self._index, self._size), np.arange(self._index)])
        return np.array([], int)

    def sample(self, batch_size: int) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """``(self[indices], indices)`` for ``sample_indices(batch_size)``."""
        indices = self.sample_indices(batch_size)
        return self[indices], indices

    def __getitem__(self, index: Union[slice, Index]) -> Dict[str, np.ndarray]:
        if isinstance(index, slice):
            index = self.sample_indices(0) if index == slice(None) else np.arange(self._size)[index]
        index = np.atleast_1d(np.asarray(index, dtype=np.int64))
        if self._buf is None or len(index) == 0:
            return {}
        got = self._buf.get(self._logical(index))
        out = {k: got[k] for k in self._buf.schema.names}
        if not self._save_obs_next:
            out["obs_next"] = self._buf.get(self._logical(self.next(index)))["obs"]
        return out



class VectorReplayBuffer(Folder):
    """Tianshou's ``VectorReplayBuffer(total_size, buffer_num)``: one ring per env."""

    def __init__(self, total_size: int, buffer_num: int, *, path: Optional[str] = None, **kwargs: Any) -> None:
        assert buffer_num > 0
        size = int(np.ceil(total_size / buffer_num))
        self._take_folder(path, "replaystore-tianshou-")
        self.buffer_num = buffer_num
        self.buffers = [
            ReplayBuffer(size, path=Confined(self._path).subdir(f"sub-{k}"), **kwargs) for k in range(buffer_num)
        ]
        self._offset = np.arange(buffer_num) * size
        self._extend_offset = np.append(self._offset, buffer_num * size)
        self.maxsize = buffer_num * size

    @property
    def subbuffer_edges(self) -> np.ndarray:
        """Where each ring's positions start, and the end of the last."""
        return self._extend_offset

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers)

    def reset(self, keep_statistics: bool = False) -> None:
        for b in self.buffers:
            b.reset(keep_statistics)

    def add(self, batch: Dict[str, Any], buffer_ids: Optional[Sequence[int]] = None):
        """Adds row ``r`` of ``batch`` to ring ``buffer_ids[r]`` (default: row k to ring
        k). Returns ``(ptrs, ep_rews, ep_lens, ep_idxs)`` with global positions."""
        ids = np.arange(self.buffer_num) if buffer_ids is None else np.asarray(buffer_ids)
        ptrs, rews, lens, idxs = [], [], [], []
        for r, k in enumerate(ids):
            buf = self.buffers[k]
            ptr, rew, n, idx = buf._store(buf._row(batch, r))
            ptrs.append(ptr + self._offset[k])
            rews.append(rew)
            lens.append(n)
            idxs.append(idx + self._offset[k])
        return np.array(ptrs), np.array(rews), np.array(lens), np.array(idxs)

    def _split(self, index: np.ndarray):
        k = np.searchsorted(self._extend_offset, index, side="right") - 1
        return k, index - self._offset[k]

    def _per_ring(self, index: Index, fn) -> np.ndarray:
        index = np.atleast_1d(np.asarray(index, np.int64)) % self.maxsize
        k, local = self._split(index)
        out = np.zeros_like(index)
        for b in np.unique(k):
            mask = k == b
            out[mask] = fn(self.buffers[b], local[mask]) + self._offset[b]
        return out

    def prev(self, index: Index) -> np.ndarray:
        return self._per_ring(index, ReplayBuffer.prev)

    def next(self, index: Index) -> np.ndarray:
        return self._per_ring(index, ReplayBuffer.next)

    def unfinished_index(self) -> np.ndarray:
        return np.concatenate([b.unfinished_index() + o for o, b in zip(self._offset, self.buffers)])

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Draws rings in proportion to their lengths, then positions in each; 0: all."""
        if batch_size < 0:
            return np.array([], int)
        if batch_size == 0:
            counts = np.zeros(self.buffer_num, int)
        else:
            lengths = np.array([len(b) for b in self.buffers])
            which = np.random.choice(self.buffer_num, batch_size, p=lengths / lengths.sum())
            counts = np.bincount(which, minlength=self.buffer_num)
            counts[counts == 0] = -1
        return np.concatenate(
            [b.sample_indices(int(n)) + o for o, b, n in zip(self._offset, self.buffers, counts)]
        ).astype(int)

    def sample(self, batch_size: int) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        indices = self.sample_indices(batch_size)
        return self[indices], indices

    def __getitem__(self, index: Union[slice, Index]) -> Dict[str, np.ndarray]:
        if isinstance(index, slice):
            index = self.sample_indices(0)
        index = np.atleast_1d(np.asarray(index, np.int64))
        k, local = self._split(index)
        parts: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {}
        for b in np.unique(k):
            mask = np.nonzero(k == b)[0]
            for key, v in self.buffers[b][local[mask]].items():
                parts.setdefault(key, []).append((mask, v))
        out = {}
        for key, pieces in parts.items():
            first = pieces[0][1]
            arr = np.empty((len(index), *first.shape[1:]), first.dtype)
            for mask, v in pieces:
                arr[mask] = v
            out[key] = arr
        return out

    def _open_buffers(self) -> list:
        return self.buffers


class PrioritizedReplayBuffer(ReplayBuffer):
    """Tianshou's ``PrioritizedReplayBuffer(size, alpha, beta, weight_norm=True)``.

    As Tianshou: a new transition gets the largest priority seen (1 at first);
    ``update_weight(index, w)`` sets priorities ``|w| + eps`` (float32 eps) and draws
    follow ``priority ** alpha``; ``__getitem__`` and ``sample`` add ``weight``, the
    importance weight ``(priority ** alpha / min_prio) ** -beta`` with ``min_prio`` the
    smallest priority ever set (1 at first), divided by the batch's largest when
    ``weight_norm``; ``sample_indices(0)`` is every position, oldest first;
    ``set_beta`` changes beta.

    What differs: the draw by priority is the engine's sum-tree walk with its own RNG
    (seeded through the ring), not ``np.random``; the priorities live in the ring's
    folder (a reopened ring keeps them), while ``min_prio`` and ``max_prio`` are this
    object's.
    """

    def __init__(self, size: int, alpha: float, beta: float, weight_norm: bool = True, **kwargs: Any) -> None:
        assert alpha > 0.0 and beta >= 0.0
        self._alpha, self._beta = float(alpha), float(beta)
        self._max_prio = self._min_prio = 1.0
        self._eps = float(np.finfo(np.float32).eps)
        self._weight_norm = weight_norm
        super().__init__(size, **kwargs)

    def _ring_options(self) -> Dict[str, Any]:
        return {"alpha": self._alpha, "eps": self._eps}

    def set_beta(self, beta: float) -> None:
        self._beta = beta

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """``batch_size`` positions drawn by priority; 0: all, oldest first."""
        if batch_size > 0 and len(self) > 0:
            drawn = self._buf.sample(batch_size, beta=self._beta)["indices"]
            return self._position(drawn)
        return super().sample_indices(batch_size)

    def get_weight(self, index: Index) -> np.ndarray:
        """``(priority ** alpha / min_prio) ** -beta`` of each position."""
        index = np.atleast_1d(np.asarray(index, np.int64))
        leaf = self._buf.priorities(self._logical(index)) ** self._alpha
        return (leaf / self._min_prio) ** (-self._beta)

    def update_weight(self, index: Index, new_weight: Any) -> None:
        """Sets the priorities of ``index`` to ``|new_weight| + eps``."""
        weight = np.abs(np.asarray(new_weight, np.float64)).reshape(-1)
        index = np.atleast_1d(np.asarray(index, np.int64))
        self._buf.update_priorities(self._logical(index), weight)
        self._max_prio = max(self._max_prio, float((weight + self._eps).max()))
        self._min_prio = min(self._min_prio, float((weight + self._eps).min()))

    def __getitem__(self, index: Union[slice, Index]) -> Dict[str, np.ndarray]:
        if isinstance(index, slice):
            index = self.sample_indices(0) if index == slice(None) else np.arange(self._size)[index]
        index = np.atleast_1d(np.asarray(index, dtype=np.int64))
        out = super().__getitem__(index)
        if out:
            weight = self.get_weight(index)
            out["weight"] = weight / np.max(weight) if self._weight_norm else weight
        return out
