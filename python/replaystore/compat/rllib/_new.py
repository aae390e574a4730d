"""RLlib's new-stack buffers (``EpisodeReplayBuffer`` and its prioritized and
multi-agent kin), each a subclass of RLlib's own whose ``self.episodes`` keeps the
episodes in replaystore (see ``_episodes``)."""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers.episode_replay_buffer import (
    EpisodeReplayBuffer as _EpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
    MultiAgentEpisodeReplayBuffer as _MultiAgentEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer as _MultiAgentPrioritizedEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer as _PrioritizedEpisodeReplayBuffer,
)

from .._chunks import ChunkStore
from .._folder import Folder, read_sidecar
from ._episodes import EpisodeDeque

#: The settings file an adapter writes beside its rings (docs/FORMAT.md).
SIDECAR = "rllib.json"

#: The first ring's heap: small, as the ring is replaced by one twice the size of what it
#: holds whenever it fills.
START_HEAP = 4 << 20

__all__ = [
    "EpisodeReplayBuffer",
    "PrioritizedEpisodeReplayBuffer",
    "MultiAgentEpisodeReplayBuffer",
    "MultiAgentPrioritizedEpisodeReplayBuffer",
]


def own_settings(folder: str, name: str) -> Optional[Dict[str, Any]]:
    """The settings an adapter wrote in ``folder``, refused when another class made it."""
    saved = read_sidecar(folder, SIDECAR)
    if saved is not None and saved.get("class") not in (None, name):
        raise ValueError(f"{folder}: holds an RLlib {saved['class']}, not a {name} ({SIDECAR} field 'class')")
    return saved


def _detach(value: Any) -> Any:
    """``value`` with its lists, dicts and arrays copied (one level of tuples is shared:
    they are immutable)."""
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_detach(v) if isinstance(v, (dict, list, np.ndarray)) else v for v in value]
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


class _Stored(Folder):
    """What the four classes add to RLlib's: the folder, the reopen, the checkpoints."""

    _episode_class: Any = SingleAgentEpisode

    def _attach(self, path: Optional[str], capacity: int, heap_bytes: Optional[int]) -> None:
        self._take_folder(path, "replaystore-rllib-")
        name = type(self).__name__
        saved = own_settings(self._path, name)
        settings = {"class": name, "capacity": int(capacity),
                    "items": min(2 * int(capacity) + 64, 1024), "heap": START_HEAP}
        if saved is not None:
            settings.update({k: saved[k] for k in ("items", "heap") if k in saved})
        store = ChunkStore(self._path, settings, SIDECAR, max_heap=heap_bytes)
        store.counters_fn = self._counters
        self.episodes = EpisodeDeque(store)
        if store.buf is not None:
            self._replay()

    def _counters(self, key: str) -> Tuple[int, int]:
        ordinal = self.episode_id_to_index.get(key)
        if ordinal is None:  # a new episode: RLlib indexes it next
            ordinal = len(self.episodes) + self._num_episodes_evicted
        return self._num_timesteps_added, ordinal

    def _open_buffers(self) -> list:
        return [self.episodes.store]

    def flush(self) -> None:
        """Makes every chunk added so far durable (``fsync``)."""
        self.episodes.store.flush()

    def _replay(self) -> None:
        """A reopened folder: its chunks go through RLlib's own ``add`` in the order they
        were added (stored already, so nothing is written), rebuilding the index, the
        counters and, for the prioritized buffers, the trees (every timestep at the
        largest priority: priorities are not stored)."""
        store = self.episodes.store
        last = None
        for seq, _key, chunk, added, ordinal, _state in store.items():
            if last is None:
                # The oldest live chunk starts the oldest live episode: RLlib had evicted
                # the episodes before it, and numbers episodes on from them.
                self._num_episodes_evicted = ordinal
            store.replaying = seq
            try:
                super(_Stored, self).add(chunk)  # RLlib's add, past this class's own
            finally:
                store.replaying = None
            last = added
        self.episodes.settle()
        if last is not None:
            self._num_timesteps_added = max(self._num_timesteps_added, last)

    def add(self, episodes: Any, *args: Any, **kwargs: Any) -> None:
        """RLlib's ``add``; each new chunk is written to the ring as it is kept."""
        try:
            super().add(episodes, *args, **kwargs)
        finally:
            self.episodes.settle()

    def get_state(self) -> Dict[str, Any]:
        """RLlib's state, in milliseconds: with a folder of the caller's (``path=``),
        its episodes are an O(1) snapshot of the ring plus a few numbers per episode,
        restored by ``set_state`` on this buffer or one built fresh (in this process or
        another; the snapshot is brought into its folder). With a temporary folder (it ends with the process), the episodes
        themselves, as RLlib's state holds them."""
        kept = self.episodes
        self.episodes = deque()
        try:
            # RLlib hands out its own lists and arrays; the ring's snapshot is fixed, so
            # the rest of the state is detached from the buffer too.
            state = _detach(super().get_state())
        finally:
            self.episodes = kept
        if self._own_dir:
            state["episodes"] = [e.get_state() for e in kept]
        else:
            state["replaystore"] = {"path": os.path.realpath(self._path),
                                    "ring": kept.store.get_state(),
                                    "episodes": kept.describe()}
        return state

    def _set_episodes(self, state: Dict[str, Any]) -> None:
        mine = state.get("replaystore")
        if mine is None:
            self.episodes.clear()
            for data in state["episodes"]:
                self.episodes.append(self._episode_class.from_state(data))
            return
        self.episodes.store.set_state(mine["ring"])
        self.episodes.restore(mine["episodes"])


class _ByName(type(_EpisodeReplayBuffer)):  # type: ignore[misc]
    """Lets an adapter class pass RLlib's checks of ``replay_buffer_config["type"]``,
    which are written for strings: ``Algorithm`` tests ``"EpisodeReplayBuffer" in
    type`` (a ``TypeError`` for any class, RLlib's own too), and SAC requires ``type``
    to be one of the names of RLlib's four episode buffers (``==``). An adapter class
    answers both by its name, so ``{"type": EpisodeReplayBuffer}`` works in DQN and SAC
    as RLlib's docs show. Hashing stays the class's own."""

    def __contains__(cls, text: object) -> bool:
        return isinstance(text, str) and text in cls.__name__

    def __eq__(cls, other: object) -> bool:
        return cls is other or (isinstance(other, str) and other == cls.__name__)

    def __ne__(cls, other: object) -> bool:
        return not _ByName.__eq__(cls, other)

    __hash__ = type.__hash__


class EpisodeReplayBuffer(_Stored, _EpisodeReplayBuffer, metaclass=_ByName):
    """RLlib's ``EpisodeReplayBuffer(capacity=10000, *, batch_size_B=16,
    batch_length_T=64, ...)`` with its episodes in the folder ``path``."""

    def __init__(self, capacity: int = 10000, *, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _EpisodeReplayBuffer.__init__(self, capacity, **kwargs)
        self._attach(path, capacity, heap_bytes)


class PrioritizedEpisodeReplayBuffer(_Stored, _PrioritizedEpisodeReplayBuffer, metaclass=_ByName):
    """RLlib's ``PrioritizedEpisodeReplayBuffer(capacity=10000, *, batch_size_B=16,
    batch_length_T=1, alpha=1.0, ...)`` with its episodes in the folder ``path``."""

    def __init__(self, capacity: int = 10000, *, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _PrioritizedEpisodeReplayBuffer.__init__(self, capacity, **kwargs)
        self._attach(path, capacity, heap_bytes)


class MultiAgentEpisodeReplayBuffer(_Stored, _MultiAgentEpisodeReplayBuffer, metaclass=_ByName):
    """RLlib's ``MultiAgentEpisodeReplayBuffer`` with its episodes in the folder
    ``path``."""

    _episode_class = MultiAgentEpisode

    def __init__(self, capacity: int = 10000, *, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _MultiAgentEpisodeReplayBuffer.__init__(self, capacity, **kwargs)
        self._attach(path, capacity, heap_bytes)


class MultiAgentPrioritizedEpisodeReplayBuffer(_Stored, _MultiAgentPrioritizedEpisodeReplayBuffer, metaclass=_ByName):
    """RLlib's ``MultiAgentPrioritizedEpisodeReplayBuffer`` with its episodes in the
    folder ``path``."""

    _episode_class = MultiAgentEpisode

    def __init__(self, capacity: int = 10000, *, path: Optional[str] = None, heap_bytes: Optional[int] = None,
                 **kwargs: Any) -> None:
        _MultiAgentPrioritizedEpisodeReplayBuffer.__init__(self, capacity, **kwargs)
        self._attach(path, capacity, heap_bytes)
