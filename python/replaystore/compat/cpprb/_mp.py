"""cpprb's ``MPReplayBuffer`` and ``MPPrioritizedReplayBuffer``: explorer processes add,
one learner samples, on one buffer. cpprb maps one shared-memory ring into every process;
here the buffer is a set of lanes in a folder (``replaystore.Lanes``), one lane per
process that adds, so no lock is shared between writers and a killed explorer loses
nothing it added.

The object pickles as its folder: hand it to ``multiprocessing.Process`` (fork or spawn)
as cpprb's is handed. A process's first ``add`` claims a free lane (the lane's lock is
the claim; the kernel drops it when the process dies, so a restarted explorer takes a
lane again). The learner's first ``sample`` opens the lanes for drawing (and, for the
prioritized buffer, as the owner of their priorities).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import numpy as np

from ..._native import Lanes as _Lanes
from ..._native import LockedError
from .._folder import Folder, holds_buffer
from ._layout import Fields, check_same, ignore_unknown, load_settings, save_settings

#: Each transition's priority as the explorer gave it (NaN: none given), which the
#: learner applies when it catches up with the lane.
_GIVEN = "__given_priority__"


def _check_context(ctx: Any) -> None:
    """cpprb's check of ``ctx``: a multiprocessing manager that was shut down cannot
    share a buffer (``ProcessError``, as cpprb raises when it starts one); an unstarted
    one is fine (cpprb starts it; the lanes need no manager at all)."""
    from multiprocessing.context import ProcessError
    from multiprocessing.managers import BaseManager, State

    if isinstance(ctx, BaseManager) and ctx._state.value == State.SHUTDOWN:
        raise ProcessError("the multiprocessing manager given as ctx has been shut down")


def _reopen(cls, path: str) -> "MPReplayBuffer":
    obj = cls.__new__(cls)
    obj._attach(path, creator=False)
    return obj


class MPReplayBuffer(Folder):
    """cpprb's ``MPReplayBuffer(size, env_dict)`` over ``writers`` lanes of
    ``size // writers`` transitions each (default: one per CPU).

    >>> from replaystore.compat import cpprb
    >>> rb = cpprb.MPReplayBuffer(8, {"obs": {}}, writers=2)
    >>> rb.add(obs=[1.0, 2.0, 3.0])
    0
    >>> rb.get_stored_size()
    3
    >>> rb.sample(4)["obs"].shape
    (4, 1)
    >>> rb.close()
    """

    _kind = "MPReplayBuffer"
    _alpha: Optional[float] = None
    _eps: float = 1e-4

    def __init__(self, size: int, env_dict: Optional[Dict[str, Dict[str, Any]]] = None, *,
                 default_dtype: Any = None, logger: Any = None, ctx: Any = None,
                 backend: str = "sharedctypes", path: Optional[str] = None,
                 writers: Optional[int] = None, **kwargs: Any) -> None:
        ignore_unknown(type(self).__name__, kwargs)
        _check_context(ctx)
        if backend not in ("sharedctypes", "SharedMemory"):
            # cpprb's two (both mean one ring every process sees; here, the lanes).
            raise ValueError(f"Unknown backend: {backend}")
        size = int(size)
        if writers is None:
            # One lane per CPU, but never more lanes than transitions (cpprb takes size=1).
            writers = max(1, min(os.cpu_count() or 1, size))
        writers = int(writers)
        if size < writers:
            raise ValueError(f"size {size} is less than one transition per writer ({writers} writers)")
        fields = Fields(env_dict, default_dtype)
        self._take_folder(path, "replaystore-cpprb-mp-")
        settings = {"size": size, "writers": writers, "fields": fields.config(),
                    "alpha": self._alpha, "eps": self._eps}
        if holds_buffer(self._path):
            saved = load_settings(self._path, self._kind)
            if saved is not None:
                for key in settings:
                    check_same(self._path, key, saved.get(key), settings[key])
        else:
            schema = fields.schema()
            if self._alpha is not None:
                schema[_GIVEN] = ("<f8", (1,))
            create = {"alpha": self._alpha, "eps": self._eps} if self._alpha is not None else {}
            _Lanes.create(self._path, schema, size // writers * writers, writers, **create).close()
            save_settings(self._path, self._kind, settings)
        self._attach(self._path, creator=True)

    def _attach(self, path: str, creator: bool) -> None:
        """This process's view: no lane and no sampler until it adds or samples. Only the
        creating object removes a temporary folder; unpickled copies never do."""
        settings = load_settings(path, self._kind)
        if settings is None:
            raise ValueError(f"{path}: holds no cpprb.{self._kind} (no cpprb.json)")
        if not creator:
            self._path, self._own_dir, self._remove_dir = path, False, None
        self._size = int(settings["size"])
        self._writers = int(settings["writers"])
        self._fields = Fields.from_config(settings["fields"])
        self._lane: Optional[Any] = None
        self._lane_no: Optional[int] = None
        self._sampler: Optional[Any] = None
        self._seen: Dict[int, int] = {}
        #: Indices this learner drew: only those take new priorities (cpprb's mask).
        self._drawn: set = set()
        #: cpprb's max_priority as this process has seen the priorities.
        self._max_priority = 1.0
        #: Whether this process owns the priorities (prioritized buffers' learner).
        self._owner = False
        self._pid = os.getpid()

    def __reduce__(self):
        return (_reopen, (type(self), self._path))

    # -- explorers ---------------------------------------------------------------------------

    def _my_lane(self):
        if self._pid != os.getpid():  # a forked child: the parent's handles are not ours
            self._lane = self._sampler = None
            self._pid = os.getpid()
        if self._lane is None:
            for k in range(self._writers):
                try:
                    self._lane = _Lanes.open_lane(self._path, k, actor=self._alpha is not None)
                    self._lane_no = k
                    break
                except LockedError:
                    continue
            else:
                raise RuntimeError(
                    f"{self._path}: all {self._writers} lanes are held by other processes; "
                    f"create the buffer with writers= at least the number of adding processes")
        return self._lane

    def _prepare(self, kwargs: Dict[str, Any]) -> Dict[str, np.ndarray]:
        batch = {}
        for name in self._fields.spec:
            if name not in kwargs:
                raise KeyError(name)
            batch[name] = self._fields.to_stored(name, kwargs[name])
        return batch

    def add(self, **kwargs: Any) -> Optional[int]:
        """Adds transitions to this process's lane; returns the first one's position in
        the lane's ring (lane ``k`` holds positions ``k * size // writers`` on)."""
        return self._add(self._prepare(kwargs))

    def _add(self, batch: Dict[str, np.ndarray]) -> Optional[int]:
        idx = self._my_lane().add_batch(batch)
        if not len(idx):
            return None
        per_lane = self._size // self._writers
        return int(self._lane_no * per_lane + (int(idx[0]) & ((1 << 56) - 1)) % per_lane)

    # -- the learner -------------------------------------------------------------------------

    def _lanes(self):
        if self._pid != os.getpid():
            self._lane = self._sampler = None
            self._pid = os.getpid()
        if self._sampler is None:
            self._owner = False
            if self._alpha is not None:
                # The first process that reads a prioritized buffer owns its priorities
                # (the learner); any other (a Ray worker, another learner) reads and
                # draws by them as they stand, as cpprb lets any process sample.
                try:
                    self._sampler = _Lanes.open(self._path, owner=True)
                    self._owner = True
                except LockedError:
                    pass
            if self._sampler is None:
                self._sampler = _Lanes.open(self._path, reader=True)
        return self._sampler

    def sample(self, batch_size: int) -> Dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly over every lane."""
        lanes = self._lanes()
        if len(lanes) == 0:
            raise ValueError("high <= 0: the buffer stores no transition")
        return self._fields.from_stored(lanes.sample(int(batch_size)))

    def get_all_transitions(self, shuffle: bool = False) -> Dict[str, np.ndarray]:
        """Every stored transition, lane by lane, oldest first in each."""
        lanes = self._lanes()
        idx = np.concatenate([np.arange(a, b, dtype=np.uint64) for a, b in lanes.lane_edges()]
                             or [np.zeros(0, np.uint64)])
        if shuffle:
            np.random.shuffle(idx)
        if len(idx) == 0:
            return self._fields.empty()
        return self._fields.from_stored(lanes.get(idx))

    def _encode_sample(self, idx: Any) -> Dict[str, np.ndarray]:
        """The transitions at ring positions ``idx`` (lane ``k`` holds positions
        ``k * size // writers`` on), as cpprb's: a position never written reads as zeros."""
        lanes = self._lanes()
        pos = np.asarray(list(idx) if not isinstance(idx, np.ndarray) else idx, np.int64).ravel()
        per_lane = self._size // self._writers
        out = {k: np.zeros((len(pos), *v.shape[1:]), v.dtype) for k, v in self._fields.empty().items()}
        lane, local = np.divmod(pos % (per_lane * self._writers), per_lane)
        edges = np.asarray(lanes.lane_edges(), np.int64).reshape(-1, 2)
        # Local offsets within each lane (its indices start at k << 56): the item at a
        # slot is the newest index congruent to it, if the lane still holds it.
        base = lane << 56
        start, stop = edges[lane, 0] - base, edges[lane, 1] - base
        last = stop - 1
        item = last - (last - local) % per_lane
        held = (stop > start) & (item >= np.maximum(start, stop - per_lane))
        at = np.flatnonzero(held)
        found = (item[held] + base[held]).astype(np.uint64)
        if len(found):
            got = self._fields.from_stored(lanes.get(found))
            for k in out:
                out[k][at] = got[k]
        return out

    def get_stored_size(self) -> int:
        return len(self._lanes())

    def get_buffer_size(self) -> int:
        return self._size

    def get_next_index(self) -> int:
        """The position this process's lane writes next."""
        lane = self._my_lane()
        per_lane = self._size // self._writers
        return int(self._lane_no * per_lane + (lane.stats()["tail"] & ((1 << 56) - 1)) % per_lane)

    def on_episode_end(self) -> None:
        """Nothing to finish: cpprb's MP buffers keep no episode state either."""

    def is_Nstep(self) -> bool:
        return False

    def clear(self) -> None:
        """Drops this process's lane's transitions (each explorer clears its own)."""
        self._my_lane().clear()

    def _open_buffers(self) -> list:
        return [b for b in (getattr(self, "_lane", None), getattr(self, "_sampler", None))
                if b is not None]

    def close(self) -> None:
        if getattr(self, "_pid", None) == os.getpid():
            super().close()
        self._lane = self._sampler = None

    def __repr__(self) -> str:
        return (f"replaystore.compat.cpprb.{type(self).__name__}(size={self._size}, "
                f"writers={self._writers}, path={self._path!r})")


class MPPrioritizedReplayBuffer(MPReplayBuffer):
    """cpprb's ``MPPrioritizedReplayBuffer(size, env_dict, alpha=0.6, eps=1e-4)``: the
    explorers add (with the priorities they computed, or the largest so far), the
    learner draws by priority and updates priorities. The Ape-X layout.

    >>> from replaystore.compat import cpprb
    >>> rb = cpprb.MPPrioritizedReplayBuffer(8, {"obs": {}}, alpha=1.0, writers=2)
    >>> rb.add(obs=[1.0, 2.0], priorities=[0.0, 1.0])
    0
    >>> rb.sample(4)["obs"].ravel().tolist()
    [2.0, 2.0, 2.0, 2.0]
    >>> rb.close()
    """

    _kind = "MPPrioritizedReplayBuffer"

    def __init__(self, size: int, env_dict: Optional[Dict[str, Dict[str, Any]]] = None, *,
                 alpha: float = 0.6, eps: float = 1e-4, ctx: Any = None, **kwargs: Any) -> None:
        self._alpha = float(alpha)
        self._eps = float(eps)
        super().__init__(size, env_dict, ctx=ctx, **kwargs)

    def _attach(self, path: str, creator: bool) -> None:
        super()._attach(path, creator)
        settings = load_settings(path, self._kind)
        self._alpha, self._eps = float(settings["alpha"]), float(settings["eps"])

    def add(self, *, priorities: Any = None, **kwargs: Any) -> Optional[int]:
        batch = self._prepare(kwargs)
        n = len(next(iter(batch.values())))
        if priorities is None:
            given = np.full((n, 1), np.nan)
        else:
            given = np.ravel(np.asarray(priorities, np.float32)).astype(np.float64).reshape(-1, 1)
            if given.shape[0] != n:
                raise ValueError("`priorities` shape is incompatible")
        batch[_GIVEN] = given
        return self._add(batch)

    def _catch_up(self, lanes) -> None:
        """Applies the priorities explorers gave to the transitions added since the last
        call (the owner gave them the largest priority meanwhile). Only the owner sets
        priorities."""
        if not self._owner:
            return
        edges = lanes.lane_edges()
        if len(self._drawn) > 2 * self._size:
            # Draws of transitions the lanes no longer hold take no update anyway (the
            # engine skips stale indices); they are forgotten only to bound the set, not
            # on every call (this runs before every draw and update).
            self._drawn = {i for i in self._drawn if edges[i >> 56][0] <= i < edges[i >> 56][1]}
        for k, (start, stop) in enumerate(edges):
            begin = max(start, self._seen.get(k, 0))
            if begin < stop:
                idx = np.arange(begin, stop, dtype=np.uint64)
                given = lanes.get(idx)[_GIVEN].ravel()
                has = ~np.isnan(given)
                if has.any():
                    lanes.update_priorities(idx[has], given[has])
                    self._max_priority = max(self._max_priority, float(given[has].max()))
            self._seen[k] = stop

    def sample(self, batch_size: int, beta: float = 0.4) -> Dict[str, np.ndarray]:
        """Transitions by priority with ``weights`` and ``indexes`` (for
        ``update_priorities``)."""
        lanes = self._lanes()
        if len(lanes) == 0:
            raise ValueError("high <= 0: the buffer stores no transition")
        self._catch_up(lanes)
        got = lanes.sample(int(batch_size), beta=beta)
        out = self._fields.from_stored(got)
        out["weights"] = got["weights"]
        out["indexes"] = got["indices"]
        self._drawn.update(int(i) for i in got["indices"])
        return out

    def update_priorities(self, indexes: Any, priorities: Any) -> None:
        """Sets priorities of transitions drawn by this learner; the others (never
        drawn, or overwritten by an explorer since the draw) are skipped: cpprb's
        unsampled mask (``check_for_update``), always on here."""
        if priorities is None or indexes is None:
            raise TypeError("``properties`` must not be ``None``")
        lanes = self._lanes()
        if not self._owner:
            raise RuntimeError(
                f"{self._path}: another process owns this buffer's priorities (the first that "
                "sampled or read it, the learner): update_priorities from that process")
        self._catch_up(lanes)
        idx = np.asarray(indexes, np.uint64).ravel()
        pri = np.ravel(np.asarray(priorities, np.float32)).astype(np.float64)
        if len(pri) == 1 and len(idx) > 1:
            pri = np.full(len(idx), pri[0])
        keep = np.fromiter((int(i) in self._drawn for i in idx), bool, len(idx))
        if keep.any():
            lanes.update_priorities(idx[keep], pri[keep])
            self._max_priority = max(self._max_priority, float(pri[keep].max()))

    def get_max_priority(self) -> float:
        """cpprb's: the largest priority given so far (1.0 before any), as this learner
        has seen them: explorers' given priorities once it caught up with their lanes,
        and its own updates of drawn transitions."""
        self._catch_up(self._lanes())
        return self._max_priority
