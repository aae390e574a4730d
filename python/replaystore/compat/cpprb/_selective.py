"""cpprb's ``SelectiveReplayBuffer``: whole episodes (runs of steps closed by ``done``)
that can be read back and deleted one by one, the later ones moving up, as in
self-imitation learning. Once full, further steps are dropped, as cpprb drops them.

The steps live in a replaystore buffer in ``path/gen-N``. Deleting an episode first
records ``gen-N+1`` in ``cpprb.json`` as the one being made, writes the kept steps there
and then names it current (an atomic rename), so a kill during a delete leaves the old
episodes or the new ones, never a mix; cpprb's delete moves memory too, O(stored) either
way. Only generations the settings file records are ever removed: a folder of the
user's beside them (``gen-backup``) is left alone.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from ..._confined import Confined
from ..._native import ReplayBuffer as _Buffer
from .._folder import (Folder, drop_recorded_generations, generation_name,
                       refuse_unrecorded_generation)
from ._layout import check_same, ignore_unknown, load_settings, save_settings

_KIND = "SelectiveReplayBuffer"


class SelectiveReplayBuffer(Folder):
    """cpprb's ``SelectiveReplayBuffer(episode_len, obs_dim=1, act_dim=1, *,
    Nepisodes=10, rew_dim=1)``: ``episode_len * Nepisodes`` float64 steps of ``obs``,
    ``act``, ``rew``, ``next_obs`` and ``done``.

    >>> from replaystore.compat import cpprb
    >>> rb = cpprb.SelectiveReplayBuffer(3, obs_dim=2, Nepisodes=2)
    >>> rb.add([[0, 0], [1, 1]], [0, 1], [0, 1], [[1, 1], [2, 2]], [0, 1])
    0
    >>> rb.add([2, 2], 2, 2, [3, 3], 1.0)
    2
    >>> rb.get_stored_episode_size(), rb.delete_episode(0), rb.get_stored_size()
    (2, 2, 1)
    >>> rb.get_episode(0)["obs"].tolist()
    [[2.0, 2.0]]
    >>> rb.close()
    """

    def __init__(self, episode_len: int, obs_dim: int = 1, act_dim: int = 1, *,
                 Nepisodes: int = 10, rew_dim: int = 1, path: Optional[str] = None,
                 **kwargs: Any) -> None:
        self._dims = {"obs": int(obs_dim), "act": int(act_dim), "rew": int(rew_dim),
                      "next_obs": int(obs_dim), "done": 1}
        self._size = int(episode_len) * int(Nepisodes)
        self._obs_shape = kwargs.pop("obs_shape", None)
        ignore_unknown("SelectiveReplayBuffer", kwargs)
        self._take_folder(path, "replaystore-cpprb-selective-")
        settings = {"size": self._size, "dims": self._dims}
        saved = load_settings(self._path, _KIND)
        if saved is not None:
            for key in settings:
                check_same(self._path, key, saved.get(key), settings[key])
            self._gen = int(saved["generation"])
        else:
            self._gen = 0
        self._buf = self._open_generation(self._gen)
        if saved is None or drop_recorded_generations(self._path, saved, self._gen):
            self._save()
        self._closed = self._closed_ends()

    # -- the folder's generations -----------------------------------------------------------

    def _open_generation(self, gen: int):
        schema = {k: ("<f8", (d,)) for k, d in self._dims.items()}
        path = Confined(self._path).subdir(generation_name(gen))
        return _Buffer.open_or_create(path, schema, self._size)

    def _save(self, **record: int) -> None:
        """Writes the settings, naming the current generation and, in ``record``, the
        ones this buffer made that are not (or not yet) current."""
        save_settings(self._path, _KIND, {"size": self._size, "dims": self._dims,
                                          "generation": self._gen, **record})

    def _switch_to(self, batch: Optional[Dict[str, np.ndarray]]) -> None:
        """Writes ``batch`` as the next generation and names it: the atomic step."""
        new = self._gen + 1
        refuse_unrecorded_generation(self._path, new)
        self._save(making=new)
        buf = self._open_generation(new)
        if batch is not None and len(batch["done"]):
            buf.add_batch(batch)
        buf.flush()
        old = self._gen
        self._gen = new
        self._save(retired=old)
        self._buf.close()
        self._buf = buf
        Confined(self._path).remove_tree(generation_name(old))
        self._save()

    # -- episodes ----------------------------------------------------------------------------

    def _closed_ends(self) -> List[int]:
        """Where each episode closed by a ``done`` ends (exclusive), read from the steps."""
        n = len(self._buf)
        if n == 0:
            return []
        return (np.flatnonzero(self._rows(0, n)["done"].ravel() != 0) + 1).tolist()

    @property
    def _ends(self) -> List[int]:
        """Every episode's end, the unfinished one after the last ``done`` included."""
        n = len(self._buf)
        return self._closed + ([n] if n > (self._closed[-1] if self._closed else 0) else [])

    def _rows(self, start: int, stop: int) -> Dict[str, np.ndarray]:
        return self._at(np.arange(start, stop))

    def _at(self, positions: np.ndarray) -> Dict[str, np.ndarray]:
        """The steps at ``positions`` (0 is the oldest), cpprb's five fields only."""
        head = self._buf.stats()["head"]
        got = self._buf.get((np.asarray(positions, np.int64) + head).astype(np.uint64))
        return {k: got[k] for k in self._dims}

    def add(self, obs: Any, act: Any, rew: Any, next_obs: Any, done: Any) -> int:
        """Adds steps; returns where the first went. Steps past the capacity are dropped."""
        values = {"obs": obs, "act": act, "rew": rew, "next_obs": next_obs, "done": done}
        batch = {k: np.asarray(v, np.float64).reshape(-1, self._dims[k]) for k, v in values.items()}
        counts = {len(v) for v in batch.values()}
        if len(counts) != 1:
            raise ValueError(f"obs, act, rew, next_obs and done hold different step counts: {sorted(counts)}")
        stored = len(self._buf)
        room = self._size - stored
        take = min(counts.pop(), room)
        if take > 0:
            self._buf.add_batch({k: np.ascontiguousarray(v[:take]) for k, v in batch.items()})
            self._closed += (np.flatnonzero(batch["done"][:take, 0] != 0) + 1 + stored).tolist()
        return stored

    def get_stored_episode_size(self) -> int:
        return len(self._ends)

    def get_episode(self, i: int) -> Dict[str, np.ndarray]:
        """Episode ``i``'s steps (empty arrays if there is no episode ``i``)."""
        _unsigned(i)
        if not 0 <= i < len(self._ends):
            return {"obs": np.zeros((0, self._dims["obs"])), "act": np.zeros((0, self._dims["act"])),
                    "rew": np.zeros((0, self._dims["rew"])),
                    "next_obs": np.zeros((0, self._dims["obs"])), "done": np.zeros(0)}
        start = self._ends[i - 1] if i else 0
        return self._rows(start, self._ends[i])

    def delete_episode(self, i: int) -> int:
        """Deletes episode ``i`` (the later ones move up); returns how many steps it had."""
        _unsigned(i)
        if not 0 <= i < len(self._ends):
            return 0
        start, stop = (self._ends[i - 1] if i else 0), self._ends[i]
        n = len(self._buf)
        kept = np.concatenate([np.arange(0, start), np.arange(stop, n)])
        batch = self._at(kept) if len(kept) else None
        self._switch_to(batch)
        self._closed = self._closed_ends()
        return stop - start

    def sample(self, batch_size: int) -> Dict[str, np.ndarray]:
        """Steps drawn uniformly with replacement by NumPy's generator, as cpprb draws."""
        n = len(self._buf)
        if n == 0:
            raise ValueError("high <= 0: the buffer stores no step")
        return self._at(np.random.randint(0, n, int(batch_size)))

    def clear(self) -> None:
        self._switch_to(None)
        self._closed = []

    def get_stored_size(self) -> int:
        return len(self._buf)

    def get_next_index(self) -> int:
        return len(self._buf)

    def get_buffer_size(self) -> int:
        return self._size

    def get_obs_dim(self) -> int:
        return self._dims["obs"]

    def get_act_dim(self) -> int:
        return self._dims["act"]

    def get_rew_dim(self) -> int:
        return self._dims["rew"]

    def get_obs_shape(self) -> Any:
        return self._obs_shape


def _unsigned(i: int) -> None:
    """cpprb takes episode numbers as C ``size_t``: a negative one is an OverflowError."""
    if int(i) < 0:
        raise OverflowError("can't convert negative value to size_t")
