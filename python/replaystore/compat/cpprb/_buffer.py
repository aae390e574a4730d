"""cpprb's single-process buffers: ``ReplayBuffer``, ``PrioritizedReplayBuffer``,
``ReverseReplayBuffer`` and ``create_buffer``, each one replaystore buffer in a folder."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from ..._native import ReplayBuffer as _Buffer
from .._folder import Folder, holds_buffer
from ._layout import Fields, check_same, ignore_unknown, load_settings, names, save_settings
from ._nstep import NstepQueue

#: The column that carries each transition's given priority through the n-step queue.
_PRIORITY = "__priority__"


class ReplayBuffer(Folder):
    """cpprb's ``ReplayBuffer(size, env_dict)``, kept in the folder ``path``.

    ``path`` (or cpprb's ``mmap_prefix``: the folder ``{mmap_prefix}_replaystore``)
    names the folder; an existing folder made by this class is reopened with everything
    it holds, so a trainer killed with ``kill -9`` resumes where its last add ended.

    >>> import numpy as np
    >>> from replaystore.compat import cpprb
    >>> rb = cpprb.ReplayBuffer(4, {"obs": {"shape": 2}, "rew": {}, "done": {}})
    >>> rb.add(obs=[1, 2], rew=1.0, done=0.0)
    0
    >>> rb.sample(3)["obs"].shape
    (3, 2)
    >>> rb.close()
    """

    _kind = "ReplayBuffer"
    _alpha: Optional[float] = None
    _eps: float = 1e-4

    def __init__(
        self,
        size: int,
        env_dict: Optional[Dict[str, Dict[str, Any]]] = None,
        *,
        next_of: Any = None,
        stack_compress: Any = None,
        default_dtype: Any = None,
        Nstep: Optional[Dict[str, Any]] = None,
        mmap_prefix: Optional[str] = None,
        path: Optional[str] = None,
        cache_size: int = 1,
        logger: Any = None,
        **kwargs: Any,
    ) -> None:
        ignore_unknown(type(self).__name__, kwargs)
        self._size = int(size)
        if self._size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self._next_of = names(next_of)
        # Stacked values are stored whole: the memory cpprb saves is a disk page here.
        self._stack_compress = names(stack_compress)
        self._fields = Fields(env_dict, default_dtype, self._next_of)
        self._nstep = NstepQueue(Nstep) if Nstep else None
        if path is None and mmap_prefix:
            path = f"{mmap_prefix}_replaystore"
        self._take_folder(path, "replaystore-cpprb-")
        self._episode_len = 0
        self._open_folder()

    # -- the folder ------------------------------------------------------------------------

    def _settings(self) -> Dict[str, Any]:
        return {
            "size": self._size,
            "fields": self._fields.config(),
            "Nstep": self._nstep.config() if self._nstep else None,
            "alpha": self._alpha,
            "eps": self._eps,
        }

    def _open_folder(self) -> None:
        path = self._path
        settings = self._settings()
        existed = holds_buffer(path)
        saved = load_settings(path, self._kind) if existed else None
        if saved is not None:
            for key in ("size", "fields", "Nstep", "alpha", "eps"):
                check_same(path, key, saved.get(key), settings[key])
        schema = self._fields.schema()
        create = {"alpha": self._alpha, "eps": self._eps} if self._alpha is not None else {}
        self._buf = _Buffer.open_or_create(path, schema, self._size, **create)
        self._tail = int(self._buf.stats()["tail"])
        # Position 0 is the item added first since the last clear(): its logical index.
        self._base = int(saved["base"]) if saved is not None else self._live()[0]
        if saved is None:
            self._save(base=self._base)

    def _save(self, base: int) -> None:
        save_settings(self._path, self._kind, {**self._settings(), "base": base})

    # -- positions <-> replaystore's logical indices ----------------------------------------

    def _live(self):
        """The live logical indices ``[head, tail)``. This object is the folder's only
        writer, so it tracks the tail itself: ``stats()`` cost more than a uniform draw
        of W1."""
        return self._tail - len(self._buf), self._tail

    def _to_logical(self, positions, head: int) -> np.ndarray:
        """Ring positions in ``[0, size)`` to the logical indices stored there."""
        pos = np.asarray(positions, dtype=np.int64).ravel()
        start = (head - self._base) % self._size
        return (head + (pos - start) % self._size).astype(np.uint64)

    def _position(self, logical: int) -> int:
        return int((int(logical) - self._base) % self._size)

    def _encode_sample(self, positions, drawn: bool = False) -> Dict[str, np.ndarray]:
        """The transitions at ring positions ``positions``, as cpprb returns them;
        ``drawn``: cpprb's RNG drew them, and they count in the buffer's ``sampled``."""
        positions = np.asarray(positions, dtype=np.int64).ravel()
        if len(positions) == 0:
            return self._fields.empty()
        head, tail = self._live()
        logical = self._to_logical(positions, head)
        held = logical < tail
        if held.all():
            return self._fields.from_stored(self._buf.get(logical, drawn=drawn))
        # cpprb's ring starts zeroed: a position no transition was written to reads as
        # zeros there, not as an error.
        out = {n: np.zeros((len(positions), *s), d) for n, (d, s) in self._fields.spec.items()}
        if held.any():
            for name, values in self._fields.from_stored(self._buf.get(logical[held], drawn=drawn)).items():
                out[name][held] = values
        return out

    # -- adding ------------------------------------------------------------------------------

    def _prepare(self, kwargs: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """The env_dict's values as arrays of cpprb's dtypes and shapes, ``KeyError`` for
        a missing one (keys env_dict does not name are ignored, as cpprb ignores them)."""
        batch = {}
        n = None
        for name, (dtype, shape) in self._fields.spec.items():
            if name not in kwargs:
                raise KeyError(name)
            a = np.asarray(kwargs[name], dtype=dtype).reshape((-1, *shape))
            if n is not None and a.shape[0] != n:
                raise ValueError(f"{name}: {a.shape[0]} transitions, the fields before it have {n}")
            n = a.shape[0]
            batch[name] = a
        return batch

    def _store(self, batch: Dict[str, np.ndarray], priorities: Optional[np.ndarray]) -> Optional[int]:
        stored = {name: self._fields.to_stored(name, batch[name]) for name in self._fields.spec}
        idx = self._buf.add_batch(stored, priorities=priorities)
        if not len(idx):
            return None
        self._tail = int(idx[-1]) + 1
        return self._position(idx[0])

    def _add(self, batch: Dict[str, np.ndarray], priorities: Optional[np.ndarray]) -> Optional[int]:
        self._episode_len += len(next(iter(batch.values()), ()))
        if self._nstep is None:
            return self._store(batch, priorities)
        if priorities is not None:
            batch = {**batch, _PRIORITY: priorities.reshape(-1, 1)}
        ready = self._nstep.push(batch)
        return None if ready is None else self._store_ready(ready)

    def _store_ready(self, ready: Dict[str, np.ndarray]) -> Optional[int]:
        p = ready.pop(_PRIORITY, None)
        return self._store(ready, None if p is None else p.ravel().astype(np.float64))

    def add(self, **kwargs: Any) -> Optional[int]:
        """Adds one transition or several (leading axis); returns the first stored
        position, or ``None`` when all of them wait in the ``Nstep`` queue."""
        return self._add(self._prepare(kwargs), None)

    # -- reading -----------------------------------------------------------------------------

    def sample(self, batch_size: int) -> Dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement, with NumPy's
        global generator as cpprb draws them (``np.random.seed`` reproduces a draw)."""
        stored = len(self._buf)
        if stored == 0:
            raise ValueError("high <= 0: the buffer stores no transition")
        pos = np.random.randint(0, stored, int(batch_size))
        head = self._live()[0]
        # Every position drawn holds a transition when position 0 holds the head (a
        # ring not yet lapped) or the ring is full: the general path's checks
        # (_encode_sample) cost a third of the adapter's time over the engine's (W1).
        if len(pos) and (head == self._base or stored == self._size):
            logical = self._to_logical(pos, head)
            return self._fields.from_stored(self._buf.get(logical, drawn=True))
        return self._encode_sample(pos, drawn=True)

    def get_all_transitions(self, shuffle: bool = False) -> Dict[str, np.ndarray]:
        """Every stored transition, in position order (shuffled with NumPy's generator).
        cpprb's are positions ``0..stored``; here, the positions the stored transitions
        hold, which are those, except after a kill cut an add into a full ring (the
        slots it had begun overwriting are empty then)."""
        head, tail = self._live()
        pos = np.sort((np.arange(head, tail, dtype=np.int64) - self._base) % self._size)
        if shuffle:
            np.random.shuffle(pos)
        return self._encode_sample(pos)

    def get_stored_size(self) -> int:
        return len(self._buf)

    def get_buffer_size(self) -> int:
        return self._size

    def get_next_index(self) -> int:
        return self._position(self._live()[1])

    def get_current_episode_len(self) -> int:
        return self._episode_len

    def is_Nstep(self) -> bool:
        return self._nstep is not None

    # -- episodes, clearing, state -----------------------------------------------------------

    def on_episode_end(self) -> None:
        """Ends the episode: the ``Nstep`` queue is summed and stored, the length reset."""
        if self._nstep is not None:
            ready = self._nstep.flush()
            if ready is not None:
                self._store_ready(ready)
        self._episode_len = 0

    def clear(self) -> None:
        """Drops every transition; positions start again at 0."""
        tail = self._live()[1]
        # The new base first: a kill between the two leaves the transitions, renumbered.
        self._save(base=tail)
        self._buf.clear()
        self._base = tail
        self._episode_len = 0
        if self._nstep is not None:
            self._nstep.waiting = None

    def get_state(self) -> Dict[str, Any]:
        """An O(1) snapshot of the buffer (the engine's ``get_state``) with what the
        adapter keeps in memory: a picklable dict for ``set_state``, in this process or a
        fresh one that opened the same folder."""
        return {
            "engine": self._buf.get_state(),
            "base": self._base,
            "episode_len": self._episode_len,
            "nstep_waiting": None if self._nstep is None else self._nstep.waiting,
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        """Back to ``state`` (from ``get_state``)."""
        self._buf.set_state(state["engine"])
        self._tail = int(self._buf.stats()["tail"])
        self._base = int(state["base"])
        self._save(base=self._base)
        self._episode_len = int(state["episode_len"])
        if self._nstep is not None:
            self._nstep.waiting = state["nstep_waiting"]

    def save_transitions(self, file: Any, *, safe: bool = True) -> None:
        """Writes every stored transition in cpprb's own ``.npz`` format (version 1), so
        cpprb's ``load_transitions`` reads it. O(n): ``get_state`` is the O(1) checkpoint."""
        np.savez_compressed(
            file, safe=True, version=1, data=self.get_all_transitions(),
            Nstep=self.is_Nstep(), cache=None, next_of=None)

    def load_transitions(self, file: Any) -> None:
        """Adds the transitions of a file ``save_transitions`` wrote, here or in cpprb
        (either of cpprb's layouts: ``safe=True``, or ``safe=False``, which keeps
        ``next_of`` values as the following row and episode ends in a cache). The file is
        read with pickle, as cpprb reads it: never load an untrusted one."""
        with np.load(file, allow_pickle=True) as data:
            if int(data["version"]) != 1:
                raise ValueError(f"Unknown Format Version: {int(data['version'])}")
            if bool(data["Nstep"]) != self.is_Nstep():
                raise ValueError("Stored data and Buffer mismatch for Nstep")
            transitions = data["data"].item()
            safe = bool(data["safe"])
            cache = None if safe else data["cache"].item()
            next_of = None if safe else data["next_of"]
        # Already summed: straight to the buffer, past the n-step queue.
        for batch in ([transitions] if safe else _unsafe_segments(transitions, cache, next_of)):
            prepared = self._prepare(batch)
            n = len(next(iter(prepared.values()), ()))
            if n:
                self._episode_len += n
                self._store(prepared, None)

    def _open_buffers(self) -> list:
        return [self._buf] if getattr(self, "_buf", None) is not None else []

    def __len__(self) -> int:
        return len(self._buf)

    def __repr__(self) -> str:
        return (f"replaystore.compat.cpprb.{type(self).__name__}(size={self._size}, "
                f"stored={len(self._buf)}, path={self._path!r})")


class PrioritizedReplayBuffer(ReplayBuffer):
    """cpprb's ``PrioritizedReplayBuffer(size, env_dict, alpha=0.6, eps=1e-4)``: draws by
    ``(p + eps)^alpha``, weights normalized by the largest (``<= 1``).

    >>> from replaystore.compat import cpprb
    >>> rb = cpprb.PrioritizedReplayBuffer(4, {"obs": {}}, alpha=1.0)
    >>> rb.add(obs=[1.0, 2.0], priorities=[0.0, 5.0])
    0
    >>> s = rb.sample(8)
    >>> sorted(s)
    ['indexes', 'obs', 'weights']
    >>> rb.update_priorities(s["indexes"], [1.0] * 8)
    >>> rb.close()
    """

    _kind = "PrioritizedReplayBuffer"

    def __init__(
        self,
        size: int,
        env_dict: Optional[Dict[str, Dict[str, Any]]] = None,
        *,
        alpha: float = 0.6,
        Nstep: Optional[Dict[str, Any]] = None,
        eps: float = 1e-4,
        check_for_update: bool = False,
        **kwargs: Any,
    ) -> None:
        self._alpha = float(alpha)
        self._eps = float(eps)
        self._check = bool(check_for_update)
        self._sampled_at: Optional[int] = None
        super().__init__(size, env_dict, Nstep=Nstep, **kwargs)

    def add(self, *, priorities: Any = None, **kwargs: Any) -> Optional[int]:
        """Adds transitions with their priorities (default: the largest so far)."""
        batch = self._prepare(kwargs)
        n = len(next(iter(batch.values()))) if batch else 0
        if priorities is not None:
            priorities = np.ravel(np.asarray(priorities, dtype=np.float32)).astype(np.float64)
            if priorities.shape[0] != n:
                raise ValueError("`priorities` shape is incompatible")
        elif self._nstep is not None:
            # cpprb fixes a waiting transition's priority when it is added.
            priorities = np.full(n, self.get_max_priority(), np.float64)
        return self._add(batch, priorities)

    def sample(self, batch_size: int, beta: float = 0.4) -> Dict[str, np.ndarray]:
        """Transitions drawn by priority, with ``weights`` and ``indexes`` (positions).
        From an empty buffer (an n-step one before its window fills, say), what cpprb
        returns rather than an error: ``batch_size`` times the last position, as its
        empty tree draws, with NaN weights (its values: zeros here, its fill there)."""
        if len(self._buf) == 0:
            last = np.full(int(batch_size), self._size - 1, np.uint64)
            out = self._encode_sample(last.astype(np.int64))
            out["weights"] = np.full(int(batch_size), np.nan, np.float32)
            out["indexes"] = last
            return out
        got = self._buf.sample(int(batch_size), beta=beta)
        out = self._fields.from_stored(got)
        out["weights"] = got["weights"]
        out["indexes"] = ((got["indices"].astype(np.int64) - self._base) % self._size).astype(np.uint64)
        self._sampled_at = self._live()[1]
        return out

    def update_priorities(self, indexes: Any, priorities: Any) -> None:
        """Sets the priorities at positions ``indexes``. With ``check_for_update``,
        positions written since the last ``sample`` are skipped."""
        if priorities is None or indexes is None:
            raise TypeError("``properties`` must not be ``None``")
        pos = np.asarray(indexes, dtype=np.int64).ravel()
        p = np.ravel(np.asarray(priorities, dtype=np.float32)).astype(np.float64)
        if p.shape[0] == 1 and len(pos) != 1:
            # One priority for the batch (cpprb reads past its one value; it is meant
            # for every position).
            p = np.full(len(pos), p[0])
        elif p.shape[0] != len(pos):
            raise ValueError(f"{len(pos)} indexes and {p.shape[0]} priorities")
        head, tail = self._live()
        logical = self._to_logical(pos, head)
        if self._check and self._sampled_at is not None:
            keep = logical < self._sampled_at
            logical, p = logical[keep], p[keep]
        else:
            # Positions not yet written hold nothing to prioritize (cpprb sets a priority
            # that the next add there overwrites).
            keep = logical < tail
            logical, p = logical[keep], p[keep]
        if len(logical):
            self._buf.update_priorities(logical, p)

    def get_max_priority(self) -> float:
        """The largest priority given so far, at least 1.0, without ``eps`` (cpprb's:
        its maximum starts at 1.0; replaystore's keeps ``priority + eps``)."""
        return max(1.0, float(self._buf.max_priority or 1.0) - self._eps)


class ReverseReplayBuffer(ReplayBuffer):
    """cpprb's ``ReverseReplayBuffer(size, env_dict, stride=300)``: Reverse Experience
    Replay. Each ``sample`` returns transitions ``stride`` apart walking back from one
    step before the last draw's first, restarting at the newest when the writer got
    ``2 * stride`` ahead: the positions cpprb returns."""

    _kind = "ReverseReplayBuffer"

    def __init__(self, size: int, env_dict: Optional[Dict[str, Dict[str, Any]]] = None, *,
                 stride: int = 300, **kwargs: Any) -> None:
        self._stride = int(stride)
        self._last = 0
        super().__init__(size, env_dict, **kwargs)

    def sample(self, batch_size: int) -> Dict[str, np.ndarray]:
        stored = len(self._buf)
        if stored == 0:
            raise ValueError("the buffer stores no transition")
        nxt = self.get_next_index()
        ahead = nxt + stored if nxt <= self._last else nxt
        if ahead - self._last >= 2 * self._stride:
            self._last = (nxt or stored) - 1
        else:
            self._last = (self._last or stored) - 1
        pos = (self._last - self._stride * np.arange(int(batch_size))) % stored
        return self._encode_sample(pos, drawn=True)


def create_buffer(size: int, env_dict: Optional[Dict[str, Dict[str, Any]]] = None, *,
                  prioritized: bool = False, **kwargs: Any) -> ReplayBuffer:
    """cpprb's ``create_buffer``: a ``PrioritizedReplayBuffer`` if ``prioritized``, else a
    ``ReplayBuffer``; other keywords go to the constructor."""
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    return cls(size, env_dict, **kwargs)


def _unsafe_segments(data: Dict[str, np.ndarray], cache: Optional[Dict[int, Dict[str, Any]]],
                     next_of: Any) -> List[Dict[str, np.ndarray]]:
    """cpprb's ``safe=False`` layout as batches of whole transitions, in order: a row's
    ``next_*`` value is the following row's value, except at the rows the cache holds
    (episode ends, where it keeps the ``next_*`` and compressed values)."""
    names_next = [] if next_of is None or np.ndim(next_of) == 0 and next_of.item() is None \
        else [str(n) for n in np.atleast_1d(next_of)]
    size = len(next(iter(data.values())))
    cache = cache or {}
    out: List[Dict[str, np.ndarray]] = []

    def rows(start: int, stop: int, nxt: Optional[np.ndarray] = None) -> None:
        if start >= stop:
            return
        batch = {k: v[start:stop] for k, v in data.items()}
        for k in names_next:
            batch[f"next_{k}"] = data[k][start + 1:stop + 1] if nxt is None else nxt[k]
        out.append(batch)

    at = 0
    for i in sorted(int(c) for c in cache):
        rows(at, i)
        row = {k: v[i:i + 1] for k, v in data.items()}
        for k, v in cache[i].items():
            row[k] = np.asarray(v)[None]
        out.append(row)
        at = i + 1
    if at < size:
        rows(at, size - 1)
        # The newest row: its next values were never cached (cpprb takes row 0's).
        rows(size - 1, size, {k: data[k][0:1] for k in names_next})
    return out
