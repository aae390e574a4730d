"""RLlib's new-stack episode buffers with their episodes in a replaystore ring.

Each class subclasses RLlib's own and keeps all of its logic: the per-timestep index
``_indices``, eviction of whole episodes oldest first, the sum trees of the prioritized
ones, every ``sample`` draw from the buffer's own ``rng`` and every metric. Only
``self.episodes`` changes: it is an :class:`EpisodeDeque` of :class:`StoredEpisode`
handles, whose chunks live pickled in a :class:`~._chunks.ChunkStore`. A handle answers
``len``, ids, flags and spaces from memory, reads a getter or ``slice`` from the one or
few chunks it spans, and anything else from the whole episode (its chunks concatenated by
RLlib's own ``concat_episode``; the newest ones stay in a cache).
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, Dict, Iterable, Iterator, List, Optional

from .._chunks import ChunkStore

#: Getters whose index counts observations (one more than steps; the others count
#: steps): a chunk of ``n`` steps holds observations ``0..n`` and steps ``0..n-1``.
OBS_GETTERS = ("get_observations", "get_infos")
_OWN = frozenset({"_store", "_seqs", "_offs", "_lens", "_lookback", "_multi", "id_"})


def _plain_index(i: Any) -> bool:
    return isinstance(i, int) and not isinstance(i, bool) and i >= 0


class StoredEpisode:
    """One episode of the buffer, as RLlib's code reads ``self.episodes[i]``: its
    chunks in the store, in order, ``_offs[k]`` the step the ``k``-th starts at."""

    def __init__(self, store: ChunkStore, seq: int, first: Any) -> None:
        self._store = store
        self._seqs: List[int] = [seq]
        self._offs: List[int] = [0]
        self._lens: List[int] = [len(first)]
        self._multi = not hasattr(first, "observations")
        self.id_ = first.id_
        self._note(first)
        self._lookback: Optional[int] = None
        if not self._multi:
            # SingleAgentEpisode keeps attributes RLlib's samplers read per draw.
            for name in ("agent_id", "module_id", "multi_agent_episode_id",
                         "observation_space", "action_space", "t_started"):
                self.__dict__[name] = getattr(first, name, None)
            backs = {first.observations.lookback, first.infos.lookback,
                     first.actions.lookback, first.rewards.lookback,
                     *(v.lookback for v in first.extra_model_outputs.values())}
            self._lookback = backs.pop() if len(backs) == 1 else None

    def _note(self, whole_or_chunk: Any) -> None:
        self.is_terminated = bool(whole_or_chunk.is_terminated)
        self.is_truncated = bool(whole_or_chunk.is_truncated)

    # -- answered from memory ------------------------------------------------------------

    def __len__(self) -> int:
        return self._offs[-1] + self._lens[-1]

    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    @property
    def t(self) -> int:
        return self.t_started + len(self)

    def __repr__(self) -> str:
        return f"StoredEpisode(id_={self.id_!r}, len={len(self)}, chunks={len(self._seqs)})"

    # -- the whole episode ---------------------------------------------------------------

    @property
    def _key(self) -> tuple:
        # The cache key of the whole episode: its first chunk's seq, which no other live
        # handle has (an id_ may come back once RLlib has evicted its episode, and the
        # evicted handle stays readable until its add returns).
        return ("whole", self._seqs[0])

    def _cached_whole(self) -> Any:
        return self._store.cached(self._key)

    def _keep_whole(self, whole: Any) -> None:
        self._store.keep(self._key, whole, sum(self._store.size(s) for s in self._seqs))

    def _whole(self) -> Any:
        whole = self._cached_whole()
        if whole is None:
            whole = self._join(0, len(self._seqs) - 1)
            self._keep_whole(whole)
        return whole

    def _join(self, j: int, k: int) -> Any:
        """Chunks ``j..k`` joined by RLlib's ``concat_episode`` (a copy of chunk ``j``)."""
        if j == k:
            return self._store.get(self._seqs[j])
        base = self._store.fresh(self._seqs[j])
        for m in range(j + 1, k + 1):
            base.concat_episode(self._store.get(self._seqs[m]))
        return base

    def __getattr__(self, name: str) -> Any:
        if name in _OWN or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._whole(), name)

    def concat_episode(self, other: Any) -> None:
        """RLlib's ``concat_episode``: checked by RLlib's own (on the whole episode), then
        stored as the next chunk."""
        whole = self._whole()
        self._store.drop(self._key)  # a failed concat must not leave a half-joined copy behind
        whole.concat_episode(other)
        seq = self._store.put(self.id_, other)
        before = len(self)
        self._seqs.append(seq)
        self._offs.append(before)
        self._lens.append(len(whole) - before)
        self._note(whole)
        self._keep_whole(whole)

    def get_state(self) -> Dict[str, Any]:
        return self._whole().get_state()

    # -- read from the chunks it spans ---------------------------------------------------

    def _chunk_of(self, i: int) -> int:
        return max(bisect.bisect_right(self._offs, i) - 1, 0)

    def _read(self, name: str, indices: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        whole = self._cached_whole()
        n = len(self)
        top = n if name in OBS_GETTERS else n - 1
        fast = whole is None and not self._multi and not any(kwargs.values())
        if fast and _plain_index(indices) and indices <= top:
            # The last chunk starting at or before the index holds it: a step below its
            # end, an observation at its end at the latest.
            j = self._chunk_of(indices)
            return getattr(self._store.get(self._seqs[j]), name)(*args, indices - self._offs[j], **kwargs)
        if (fast and isinstance(indices, slice) and indices.step is None
                and _plain_index(indices.start) and _plain_index(indices.stop)
                and indices.start < indices.stop <= top + 1):
            j = self._chunk_of(indices.start)
            k = self._chunk_of(indices.stop - 1)
            part = self._join(j, k)
            off = self._offs[j]
            return getattr(part, name)(*args, slice(indices.start - off, indices.stop - off), **kwargs)
        return getattr(whole if whole is not None else self._whole(), name)(*args, indices, **kwargs)

    def get_observations(self, indices: Any = None, **kwargs: Any) -> Any:
        return self._read("get_observations", indices, (), kwargs)

    def get_infos(self, indices: Any = None, **kwargs: Any) -> Any:
        return self._read("get_infos", indices, (), kwargs)

    def get_actions(self, indices: Any = None, **kwargs: Any) -> Any:
        return self._read("get_actions", indices, (), kwargs)

    def get_rewards(self, indices: Any = None, **kwargs: Any) -> Any:
        return self._read("get_rewards", indices, (), kwargs)

    def get_extra_model_outputs(self, key: str, indices: Any = None, **kwargs: Any) -> Any:
        return self._read("get_extra_model_outputs", indices, (key,), kwargs)

    def slice(self, slice_: slice, *, len_lookback_buffer: Optional[int] = None) -> Any:
        """RLlib's ``slice``, made from the chunks the slice and its lookback span."""
        whole = self._cached_whole()
        lb = len_lookback_buffer if len_lookback_buffer is not None else self._lookback
        a, b = slice_.start, slice_.stop
        if (whole is None and not self._multi and lb is not None and slice_.step is None
                and _plain_index(a) and _plain_index(b) and a <= b <= len(self)):
            # From the chunk holding the lookback's first step (the first chunk's own
            # lookback serves one that reaches before the episode).
            j = self._chunk_of(a - lb) if a >= lb else 0
            k = self._chunk_of(b)
            part = self._join(j, k)
            off = self._offs[j]
            return part.slice(slice(a - off, b - off), len_lookback_buffer=lb)
        return (whole if whole is not None else self._whole()).slice(
            slice_, len_lookback_buffer=len_lookback_buffer)

    # -- checkpoints ---------------------------------------------------------------------

    def describe(self) -> Dict[str, Any]:
        """What rebuilds this handle without reading its chunks (``get_state``)."""
        return {k: (list(v) if isinstance(v, list) else v)
                for k, v in self.__dict__.items() if k != "_store"}

    @classmethod
    def from_description(cls, store: ChunkStore, state: Dict[str, Any]) -> "StoredEpisode":
        self = cls.__new__(cls)
        self.__dict__.update({k: (list(v) if isinstance(v, list) else v) for k, v in state.items()})
        self._store = store
        return self


class EpisodeDeque:
    """``self.episodes`` of an adapter: RLlib appends, concatenates (on the handle),
    pops oldest first and indexes; the chunks go to and from the store. A popped
    episode's chunks are removed when RLlib's ``add`` returns, so RLlib can still read
    the episode it evicts (its lengths and steps for the metrics)."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self._items: "deque[StoredEpisode]" = deque()
        self.evicted: List[StoredEpisode] = []

    def append(self, episode: Any) -> None:
        seq = self.store.put(episode.id_, episode)
        self._items.append(StoredEpisode(self.store, seq, episode))

    def popleft(self) -> StoredEpisode:
        gone = self._items.popleft()
        self.evicted.append(gone)
        return gone

    def settle(self) -> None:
        """Removes the chunks of the episodes popped since the last call."""
        for gone in self.evicted:
            self.store.drop(gone._key)
            self.store.remove(gone._seqs)
        self.evicted.clear()

    def clear(self) -> None:
        self._items.clear()
        self.evicted.clear()
        self.store.clear()

    def __getitem__(self, i: int) -> StoredEpisode:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[StoredEpisode]:
        return iter(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def describe(self) -> List[Dict[str, Any]]:
        return [e.describe() for e in self._items]

    def restore(self, described: Iterable[Dict[str, Any]]) -> None:
        self._items = deque(StoredEpisode.from_description(self.store, d) for d in described)
        self.evicted.clear()
