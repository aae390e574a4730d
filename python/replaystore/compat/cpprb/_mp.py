"""cpprb's ``MPReplayBuffer`` and ``MPPrioritizedReplayBuffer``: explorer processes add,
one learner samples, on one buffer. cpprb maps one shared-memory ring into every process;
here the transitions live in a set of lanes in a folder (``replaystore.Lanes``), one lane
per process that adds, so a killed explorer loses nothing it added, and a small shared
*position table* (``cpprb-mp.positions``, mapped by every process) makes them one ring
as cpprb's is: each add takes the next positions of the one ring (under a lock on the
table, as cpprb's adds take its lock), and the table names the transition at each
position. So every process sees the same ``get_next_index``, ``get_stored_size`` and
positions, and one explorer may fill the whole ring.

The object pickles as its folder: hand it to ``multiprocessing.Process`` (fork or spawn)
as cpprb's is handed. A process's first ``add`` claims a free lane (the lane's lock is
the claim; the kernel drops it when the process dies, so a restarted explorer takes a
lane again). The learner's first ``sample`` opens the lanes for drawing (and, for the
prioritized buffer, as the owner of their priorities: it gives a transition the
priority its explorer gave, and priority 0 once a later add took its position).
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
from typing import Any, Dict, Iterator, Optional

import numpy as np

from ..._confined import Confined
from ..._native import Lanes as _Lanes
from ..._native import LockedError
from .._folder import Folder, holds_buffer
from ._layout import Fields, check_same, ignore_unknown, load_settings, save_settings

#: The position table beside the lanes.
_TABLE = "cpprb-mp.positions"
_MAGIC = b"RSMPPOS1"
#: Header words: magic, size, transitions added ever (``added``), ``added`` at the last
#: ``clear`` (positions count from it).
_HEADER = 32
#: What the folder's lanes and table are laid out as (``cpprb.json`` field ``layout``).
_LAYOUT = 2


class _Table:
    """The ring's positions, shared by every process through one mapped file: ``items``
    (the lane index + 1 of the transition at each position, 0 for none), ``given`` (the
    priority its explorer gave, NaN for none), and the counters. Writers hold ``lock``."""

    def __init__(self, folder: str, size: int, create: bool = False) -> None:
        length = _HEADER + 16 * size
        if create:
            head = np.array([0, size, 0, 0], np.uint64)
            head[0] = np.frombuffer(_MAGIC, np.uint64)[0]
            body = np.zeros(size, np.uint64).tobytes() + np.full(size, np.nan).tobytes()
            Confined(folder).replace(_TABLE, head.tobytes() + body)
        self._file = Confined(folder).open_in_place(_TABLE)
        got = os.fstat(self._file.fileno()).st_size
        if got != length:
            self._file.close()
            raise ValueError(f"{os.path.join(folder, _TABLE)}: {got} bytes, expected {length} "
                             f"for a ring of {size} positions")
        self._map = mmap.mmap(self._file.fileno(), length)
        self._words = np.frombuffer(self._map, np.uint64, 4)
        if bytes(self._map[:8]) != _MAGIC or int(self._words[1]) != size:
            self.close()
            raise ValueError(f"{os.path.join(folder, _TABLE)}: not the position table of a ring "
                             f"of {size} (magic {bytes(self._map[:8])!r}, size {int(self._words[1])})")
        self.items = np.frombuffer(self._map, np.uint64, size, _HEADER)
        self.given = np.frombuffer(self._map, np.float64, size, _HEADER + 8 * size)
        self.size = size

    @property
    def added(self) -> int:
        return int(self._words[2])

    @property
    def base(self) -> int:
        return int(self._words[3])

    def set_counters(self, added: int, base: int) -> None:
        self._words[3] = base
        self._words[2] = added

    def stored(self) -> int:
        return min(self.added - self.base, self.size)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)

    def close(self) -> None:
        self.items = self.given = self._words = None  # type: ignore[assignment]
        with contextlib.suppress(BufferError):
            self._map.close()
        self._file.close()


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
    """cpprb's ``MPReplayBuffer(size, env_dict)``: one ring of ``size`` positions over
    ``writers`` lanes (one per process adding at once; default one per CPU, at most 4)
    of ``size`` transitions each, so any one explorer may fill the ring, and the disk
    holds up to ``writers`` times ``size`` transitions.

    >>> from replaystore.compat import cpprb
    >>> rb = cpprb.MPReplayBuffer(8, {"obs": {}}, writers=2)
    >>> rb.add(obs=[1.0, 2.0, 3.0])
    0
    >>> rb.get_stored_size(), rb.get_next_index()
    (3, 3)
    >>> rb.get_all_transitions()["obs"].ravel().tolist()
    [1.0, 2.0, 3.0]
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
            # cpprb's two (both mean one ring every process sees; here, the table).
            raise ValueError(f"Unknown backend: {backend}")
        size = int(size)
        if writers is None:
            # Each lane holds `size` transitions (one explorer may fill the ring), so the
            # disk holds up to writers x size: one lane per CPU, but at most 4 by default.
            writers = max(1, min(os.cpu_count() or 1, size, 4))
        writers = int(writers)
        if writers < 1:
            raise ValueError(f"writers={writers}: at least one lane is needed")
        fields = Fields(env_dict, default_dtype)
        self._take_folder(path, "replaystore-cpprb-mp-")
        settings = {"size": size, "writers": writers, "fields": fields.config(),
                    "alpha": self._alpha, "eps": self._eps, "layout": _LAYOUT}
        if holds_buffer(self._path):
            saved = load_settings(self._path, self._kind)
            if saved is not None:
                if saved.get("layout") != _LAYOUT:
                    raise ValueError(
                        f"{self._path}: lanes of size // writers, as an earlier replaystore made "
                        f"them, with no position table: this one keeps one ring over lanes of "
                        f"size each; read it with replaystore.Lanes.open, or give another path")
                for key in settings:
                    check_same(self._path, key, saved.get(key), settings[key])
        else:
            # The engine's eps is 0: priority 0 must end a transition's draws (a position a
            # later add took), so cpprb's eps is added here to every priority set.
            create = {"alpha": self._alpha, "eps": 0.0} if self._alpha is not None else {}
            _Lanes.create(self._path, fields.schema(), size * writers, writers, **create).close()
            _Table(self._path, size, create=True).close()
            save_settings(self._path, self._kind, settings, version=_LAYOUT)
        self._attach(self._path, creator=True)

    def _attach(self, path: str, creator: bool) -> None:
        """This process's view: the table now, no lane and no sampler until it adds or
        samples. Only the creating object removes a temporary folder; unpickled copies
        never do."""
        settings = load_settings(path, self._kind)
        if settings is None:
            raise ValueError(f"{path}: holds no cpprb.{self._kind} (no cpprb.json)")
        if not creator:
            self._path, self._own_dir, self._remove_dir = path, False, None
        self._size = int(settings["size"])
        self._writers = int(settings["writers"])
        self._fields = Fields.from_config(settings["fields"])
        self._table = _Table(path, self._size)
        self._lane: Optional[Any] = None
        self._sampler: Optional[Any] = None
        self._pid = os.getpid()
        #: This process's copy of the table's items as of ``added == _seen_added`` (and
        #: ``base == _seen_base``), and the position of each item in it.
        self._mine = np.zeros(self._size, np.uint64)
        self._where: Dict[int, int] = {}
        self._seen_added = self._seen_base = 0
        #: Positions this learner drew since they were last written (cpprb's mask).
        self._drawn: set = set()
        #: cpprb's max_priority as this process has seen the priorities.
        self._max_priority = 1.0
        #: Whether this process owns the priorities (prioritized buffers' learner).
        self._owner = False

    def __reduce__(self):
        return (_reopen, (type(self), self._path))

    # -- explorers ---------------------------------------------------------------------------

    def _forked(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's handles are not ours
            self._lane = self._sampler = None
            self._table = _Table(self._path, self._size)
            self._pid = os.getpid()

    def _my_lane(self):
        self._forked()
        if self._lane is None:
            for k in range(self._writers):
                try:
                    self._lane = _Lanes.open_lane(self._path, k, actor=self._alpha is not None)
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
        """Adds transitions at the ring's next positions; returns the first one's."""
        return self._add(self._prepare(kwargs), None)

    def _add(self, batch: Dict[str, np.ndarray], given: Optional[np.ndarray]) -> Optional[int]:
        lane = self._my_lane()
        table = self._table
        with table.lock():
            added, base = table.added, table.base
            idx = np.asarray(lane.add_batch(batch), np.uint64)
            n = len(idx)
            if not n:
                return None
            # Only the last `size` of a longer batch keep a position (the lane kept no more).
            k = min(n, self._size)
            pos = (added - base + np.arange(n - k, n)) % self._size
            table.items[pos] = idx[n - k:] + 1
            table.given[pos] = np.nan if given is None else given[n - k:]
            table.set_counters(added + n, base)
        return int((added - base) % self._size)

    # -- the learner -------------------------------------------------------------------------

    def _lanes(self):
        self._forked()
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
        """``batch_size`` transitions at positions drawn uniformly, as cpprb draws."""
        stored = self.get_stored_size()
        if stored == 0:
            raise ValueError("high <= 0: the buffer stores no transition")
        return self._encode_sample(np.random.randint(0, stored, int(batch_size)))

    def get_all_transitions(self, shuffle: bool = False) -> Dict[str, np.ndarray]:
        """Every stored transition in position order (shuffled with ``shuffle``)."""
        idx = np.arange(self.get_stored_size())
        if shuffle:
            np.random.shuffle(idx)
        if len(idx) == 0:
            return self._fields.empty()
        return self._encode_sample(idx)

    def _encode_sample(self, idx: Any) -> Dict[str, np.ndarray]:
        """The transitions at ring positions ``idx``, as cpprb's: a position never
        written reads as zeros."""
        self._forked()
        pos = np.asarray(list(idx) if not isinstance(idx, np.ndarray) else idx, np.int64).ravel()
        items = self._table.items[pos % self._size]
        out = {k: np.zeros((len(pos), *v.shape[1:]), v.dtype) for k, v in self._fields.empty().items()}
        at = np.flatnonzero(items)
        if len(at):
            got = self._fields.from_stored(self._lanes().get(items[at] - 1))
            for k in out:
                out[k][at] = got[k]
        return out

    def get_stored_size(self) -> int:
        self._forked()
        return self._table.stored()

    def get_buffer_size(self) -> int:
        return self._size

    def get_next_index(self) -> int:
        """The position the next add writes, whichever process adds it."""
        self._forked()
        return (self._table.added - self._table.base) % self._size

    def on_episode_end(self) -> None:
        """Nothing to finish: cpprb's MP buffers keep no episode state either."""

    def is_Nstep(self) -> bool:
        return False

    def clear(self) -> None:
        """Empties the ring for every process, as cpprb's does (the lanes keep the
        transitions, no longer at any position)."""
        self._forked()
        table = self._table
        with table.lock():
            table.items[:] = 0
            table.given[:] = np.nan
            table.set_counters(table.added, table.added)

    def _open_buffers(self) -> list:
        return [b for b in (getattr(self, "_lane", None), getattr(self, "_sampler", None))
                if b is not None]

    def close(self) -> None:
        if getattr(self, "_pid", None) == os.getpid():
            super().close()
            table = getattr(self, "_table", None)
            if table is not None:
                table.close()
                self._table = None
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
    >>> s = rb.sample(4)
    >>> s["obs"].ravel().tolist(), s["indexes"].tolist()
    ([2.0, 2.0, 2.0, 2.0], [1, 1, 1, 1])
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
        given = None
        if priorities is not None:
            given = np.ravel(np.asarray(priorities, np.float32)).astype(np.float64)
            if given.shape[0] == 1 and n > 1:
                given = np.full(n, given[0])
            if given.shape[0] != n:
                raise ValueError("`priorities` shape is incompatible")
        return self._add(batch, given)

    def _set(self, lanes, items: np.ndarray, priorities: np.ndarray) -> None:
        """Sets engine priorities: cpprb's ``priority + eps`` (0 exactly ends draws)."""
        if len(items):
            lanes.update_priorities(items, priorities)

    def _catch_up(self, lanes) -> None:
        """Brings this process's copy of the table up to date. The owner also gives each
        new transition the priority its explorer gave (others have the largest so far),
        and priority 0 to each transition a later add displaced, so draws reach only the
        transitions at positions."""
        table, size = self._table, self._size
        added, base = table.added, table.base
        owner = self._owner
        if base != self._seen_base:  # cleared: no transition before is at a position
            if owner:
                self._set(lanes, self._mine[self._mine > 0] - 1, np.zeros(int((self._mine > 0).sum())))
            self._mine[:] = 0
            self._where.clear()
            self._drawn.clear()
            self._seen_added = self._seen_base = base
        if added == self._seen_added:
            return
        lapped = added - self._seen_added >= size
        first = max(self._seen_added, added - size)
        pos = (np.arange(first, added) - base) % size
        new = table.items[pos].copy()
        old = self._mine[pos]
        moved = old != new
        for p, o, nw in zip(pos[moved].tolist(), old[moved].tolist(), new[moved].tolist()):
            self._where.pop(o, None)
            if nw:
                self._where[nw] = p
            self._drawn.discard(p)
        self._mine[pos] = new
        if owner:
            gone = old[moved & (old > 0)]
            self._set(lanes, gone - 1, np.zeros(len(gone)))
            given = table.given[pos]
            has = ~np.isnan(given) & (new > 0)
            if has.any():
                self._set(lanes, new[has] - 1, given[has] + self._eps)
                self._max_priority = max(self._max_priority, float(given[has].max()))
            if lapped:
                # Transitions added and displaced between two calls: never seen here.
                held = np.concatenate([np.arange(a, b, dtype=np.uint64) for a, b in lanes.lane_edges()]
                                      or [np.zeros(0, np.uint64)])
                stray = held[~np.isin(held + 1, self._mine)]
                self._set(lanes, stray, np.zeros(len(stray)))
        self._seen_added = added

    def _positions(self, items: np.ndarray) -> np.ndarray:
        """The position of each lane index in ``items`` (-1: at no position)."""
        where = self._where
        return np.fromiter((where.get(int(i) + 1, -1) for i in items), np.int64, len(items))

    def sample(self, batch_size: int, beta: float = 0.4) -> Dict[str, np.ndarray]:
        """Transitions by priority with ``weights`` and ``indexes`` (their positions, for
        ``update_priorities``)."""
        if self.get_stored_size() == 0:
            raise ValueError("high <= 0: the buffer stores no transition")
        lanes = self._lanes()
        self._catch_up(lanes)
        n = int(batch_size)
        got = lanes.sample(n, beta=beta)
        pos = self._positions(got["indices"])
        for _ in range(16):
            # A draw outside the positions: a transition the owner has not zeroed yet
            # (another process's draw, or an add cut by a kill before the table named
            # it). The owner ends it; the row is drawn again.
            bad = np.flatnonzero(pos < 0)
            if not len(bad):
                break
            if self._owner:
                self._set(lanes, np.asarray(got["indices"])[bad], np.zeros(len(bad)))
            again = lanes.sample(len(bad), beta=beta)
            for key in got:
                got[key][bad] = again[key]
            pos[bad] = self._positions(again["indices"])
        out = self._fields.from_stored(got)
        out["weights"] = got["weights"]
        out["indexes"] = pos
        self._drawn.update(pos.tolist())
        return out

    def update_priorities(self, indexes: Any, priorities: Any) -> None:
        """Sets priorities of the positions this learner drew; the others (never drawn,
        or written by an explorer since the draw) are skipped: cpprb's unsampled mask
        (``check_for_update``), always on here."""
        if priorities is None or indexes is None:
            raise TypeError("``properties`` must not be ``None``")
        lanes = self._lanes()
        if not self._owner:
            raise RuntimeError(
                f"{self._path}: another process owns this buffer's priorities (the first that "
                "sampled or read it, the learner): update_priorities from that process")
        self._catch_up(lanes)
        pos = np.asarray(indexes, np.int64).ravel()
        pri = np.ravel(np.asarray(priorities, np.float32)).astype(np.float64)
        if len(pri) == 1 and len(pos) > 1:
            pri = np.full(len(pos), pri[0])
        keep = np.fromiter((int(p) in self._drawn for p in pos), bool, len(pos))
        items = self._mine[pos[keep] % self._size]
        held = items > 0
        if held.any():
            self._set(lanes, items[held] - 1, pri[keep][held] + self._eps)
            self._max_priority = max(self._max_priority, float(pri[keep][held].max()))

    def get_max_priority(self) -> float:
        """cpprb's: the largest priority given so far (1.0 before any), as this learner
        has seen them: explorers' given priorities once it caught up with the table,
        and its own updates of drawn transitions."""
        lanes = self._lanes()
        self._catch_up(lanes)
        return self._max_priority
