"""cpprb's ``ReplayBuffer`` and ``PrioritizedReplayBuffer``, backed by replaystore.

Follows cpprb's documented behaviour: ``env_dict`` entries default to shape ``1`` and
dtype ``default_dtype`` (float32), so a scalar field samples as ``(batch, 1)``;
``add(**kwargs)`` takes one transition or several (leading axis), casts to the stored
dtype, ignores keys not in ``env_dict`` and raises ``KeyError`` for a missing one, and
returns the first stored position; positions (``get_next_index``, ``indexes``) are
ring positions in ``[0, size)``, restarting at 0 after ``clear()``;
``get_all_transitions()`` returns the stored transitions in position order;
``sample`` on an empty buffer raises ``ValueError`` as NumPy's ``randint`` does there.

What differs, on purpose or not yet:

- The data lives in the folder ``path`` (a temporary folder when ``None``, removed by
  ``close``): reopening it with ``replaystore.ReplayBuffer.open(path)`` finds every
  transition, and ``replaystore.Reader`` samples it from other processes.
- Sampling draws from replaystore's own seeded RNG, not from ``numpy.random``.
- ``next_of``, ``stack_compress`` and ``Nstep`` are not supported (``NotImplementedError``);
  ``on_episode_end`` only resets the episode length, as in cpprb without them.
- ``indices`` and ``weights`` may not name a field (replaystore reserves them).
- ``update_priorities`` at a position that holds no transition raises
  ``replaystore.EvictedError`` (cpprb sets a priority nothing will use).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from .._native import ReplayBuffer as _Buffer
from ._folder import Folder

__all__ = ["ReplayBuffer", "PrioritizedReplayBuffer"]


def _shape(defs: Dict[str, Any]) -> tuple:
    return tuple(int(d) for d in np.atleast_1d(np.asarray(defs.get("shape", 1))))


class ReplayBuffer(Folder):
    """cpprb's ``ReplayBuffer(size, env_dict)``, kept in the folder ``path``."""

    _alpha: Optional[float] = None
    _eps: float = 1e-4

    def __init__(
        self,
        size: int,
        env_dict: Optional[Dict[str, Dict[str, Any]]] = None,
        *,
        next_of=None,
        stack_compress=None,
        default_dtype=None,
        Nstep=None,
        mmap_prefix=None,
        path: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        for name, value in (("next_of", next_of), ("stack_compress", stack_compress), ("Nstep", Nstep)):
            if value:
                raise NotImplementedError(f"replaystore.compat.cpprb does not support {name}")
        self._size = int(size)
        default_dtype = np.dtype(default_dtype or np.single)
        self._fields = {
            name: (np.dtype(defs.get("dtype", default_dtype)), _shape(defs))
            for name, defs in (env_dict or {}).items()
        }
        self._take_folder(path, "replaystore-cpprb-")
        schema = {name: (dtype.str, shape) for name, (dtype, shape) in self._fields.items()}
        create = {"alpha": self._alpha, "eps": self._eps} if self._alpha is not None else {}
        self._buf = _Buffer.create(self._path, schema, self._size, **create)
        self._base = 0  # logical index of position 0 since the last clear()
        self._episode_len = 0

    # -- positions <-> replaystore's logical indices ------------------------------------

    def _live(self):
        s = self._buf.stats()
        return s["head"], s["tail"]

    def _to_logical(self, positions, head: int, tail: int) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64).ravel()
        start = (head - self._base) % self._size
        return (head + (pos - start) % self._size).astype(np.uint64)

    # -- cpprb's API ---------------------------------------------------------------------

    def _prepare(self, kwargs: Dict[str, Any]) -> Dict[str, np.ndarray]:
        batch = {}
        n = None
        for name, (dtype, shape) in self._fields.items():
            if name not in kwargs:
                raise KeyError(name)
            a = np.ascontiguousarray(np.asarray(kwargs[name], dtype=dtype).reshape((-1, *shape)))
            if n is not None and a.shape[0] != n:
                raise ValueError(f"{name}: {a.shape[0]} transitions, the others have {n}")
            n = a.shape[0]
            batch[name] = a
        return batch

    def add(self, **kwargs: Any) -> Optional[int]:
        """Adds one transition or several; returns the first stored position."""
        batch = self._prepare(kwargs)
        idx = self._buf.add_batch(batch)
        self._episode_len += len(idx)
        return int((int(idx[0]) - self._base) % self._size) if len(idx) else None

    def _encode(self, logical: np.ndarray) -> Dict[str, np.ndarray]:
        got = self._buf.get(logical)
        return {name: got[name] for name in self._fields}

    def sample(self, batch_size: int) -> Dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly, with replacement."""
        if len(self._buf) == 0:
            raise ValueError("high <= 0: the buffer stores no transition")
        got = self._buf.sample(int(batch_size))
        return {name: got[name] for name in self._fields}

    def get_all_transitions(self, shuffle: bool = False) -> Dict[str, np.ndarray]:
        """Every stored transition, in position order (shuffled if asked)."""
        head, tail = self._live()
        pos = np.arange(tail - head)
        if shuffle:
            np.random.shuffle(pos)
        if len(pos) == 0:
            return {name: np.zeros((0, *shape), dtype) for name, (dtype, shape) in self._fields.items()}
        return self._encode(self._to_logical(pos, head, tail))

    def clear(self) -> None:
        """Drops every transition; positions start again at 0."""
        self._buf.clear()
        self._base = self._live()[1]
        self._episode_len = 0

    def get_stored_size(self) -> int:
        return len(self._buf)

    def get_buffer_size(self) -> int:
        return self._size

    def get_next_index(self) -> int:
        return int((self._live()[1] - self._base) % self._size)

    def get_current_episode_len(self) -> int:
        return self._episode_len

    def on_episode_end(self) -> None:
        """Ends the episode (only its length is kept, as in cpprb without Nstep)."""
        self._episode_len = 0

    def is_Nstep(self) -> bool:
        return False


class PrioritizedReplayBuffer(ReplayBuffer):
    """cpprb's ``PrioritizedReplayBuffer(size, env_dict, alpha=0.6, eps=1e-4)``: draws
    by ``(p + eps)^alpha``, weights normalized by the largest (``<= 1``)."""

    def __init__(
        self,
        size: int,
        env_dict: Optional[Dict[str, Dict[str, Any]]] = None,
        *,
        alpha: float = 0.6,
        Nstep=None,
        eps: float = 1e-4,
        check_for_update: bool = False,
        **kwargs: Any,
    ) -> None:
        self._alpha = float(alpha)
        self._eps = float(eps)
        self._check = check_for_update
        self._sampled_at: Optional[tuple] = None
        super().__init__(size, env_dict, Nstep=Nstep, **kwargs)

    def add(self, *, priorities=None, **kwargs: Any) -> Optional[int]:
        """Adds transitions with their priorities (default: the largest so far)."""
        batch = self._prepare(kwargs)
        n = len(next(iter(batch.values()))) if batch else 0
        if priorities is not None:
            priorities = np.ravel(np.asarray(priorities, dtype=np.float64))
            if priorities.shape[0] != n:
                raise ValueError("`priorities` shape is incompatible")
        idx = self._buf.add_batch(batch, priorities=priorities)
        self._episode_len += len(idx)
        return int((int(idx[0]) - self._base) % self._size) if len(idx) else None

    def sample(self, batch_size: int, beta: float = 0.4) -> Dict[str, np.ndarray]:
        """Transitions drawn by priority, with ``weights`` and ``indexes`` (positions)."""
        if len(self._buf) == 0:
            raise ValueError("high <= 0: the buffer stores no transition")
        got = self._buf.sample(int(batch_size), beta=beta)
        out = {name: got[name] for name in self._fields}
        out["weights"] = got["weights"]
        out["indexes"] = ((got["indices"].astype(np.int64) - self._base) % self._size).astype(np.uint64)
        self._sampled_at = self._live()
        return out

    def update_priorities(self, indexes, priorities) -> None:
        """Sets the priorities at positions ``indexes``. With ``check_for_update``,
        positions written since the last ``sample`` are skipped."""
        if priorities is None:
            raise TypeError("``properties`` must not be ``None``")
        head, tail = self._sampled_at if (self._check and self._sampled_at) else self._live()
        self._buf.update_priorities(self._to_logical(indexes, head, tail), np.ravel(priorities))

    def get_max_priority(self) -> float:
        """The largest priority so far (``priority + eps``, as replaystore keeps it)."""
        return float(self._buf.max_priority or 1.0)
