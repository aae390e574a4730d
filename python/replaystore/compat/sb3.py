"""Stable-Baselines3's replay buffers, backed by replaystore: pass them as
``replay_buffer_class=`` to DQN, SAC, TD3 or DDPG.

>>> import gymnasium as gym
>>> from stable_baselines3 import DQN
>>> from replaystore.compat import sb3
>>> model = DQN("MlpPolicy", gym.make("CartPole-v1"), buffer_size=1000, learning_starts=50,
...             replay_buffer_class=sb3.ReplayBuffer)
>>> _ = model.learn(100)
>>> model.replay_buffer.size()
100
>>> model.replay_buffer.close()

Each class subclasses SB3's own (``isinstance`` checks, ``load_replay_buffer`` and the
algorithms' code see an SB3 buffer) and keeps SB3's attributes (``pos``, ``full``,
``buffer_size``, ``n_envs``, ...) and its draws: ``sample`` takes its indices from
``np.random`` exactly as SB3 does, so a seeded NumPy returns SB3's batch, value for value
(``python/tests/test_sb3_differential.py`` drives both). One step of all ``n_envs``
environments is one replaystore item, added whole or not at all.

What it gains: the buffer lives in the folder ``path`` (``replay_buffer_kwargs={"path":
...}``); an existing one is reopened with everything it held, so a run killed with
``kill -9`` resumes. ``save_replay_buffer`` pickles the folder's name and an O(1)
snapshot, and ``load_replay_buffer`` restores that snapshot, in this process or a fresh
one: milliseconds at any size. Every such snapshot is kept, as ``CheckpointCallback``
keeps every file it writes, so each checkpoint's buffer loads (a snapshot holds only the
segments written since it, where SB3's pickle holds the whole buffer);
``keep_states=K`` (``replay_buffer_kwargs``) keeps the newest ``K``, and loading an
older one then says that rule and setting. Without ``path`` the buffer lives in a temporary folder
and the pickle carries the transitions themselves (O(n), as SB3's does), since the folder
does not outlive the process.

``model.replay_buffer.replaystore`` is the handle under it, whose ``stats()`` count SB3's
draws; ``model.learn(..., callback=replaystore.integrations.sb3_callback())`` writes
those figures with SB3's own (its stdout table, ``progress.csv``, TensorBoard).

Where it differs from SB3, and why:

- ``observations``, ``actions``, ``rewards``, ``dones``, ``timeouts`` and
  ``next_observations`` are read from the folder when asked (a copy, O(n)), not arrays
  kept in memory. Writing into them is refused, except ``dones[pos] = ...``, which SB3's
  own ``_setup_learn`` does to end the last trajectory (kept as an override). After
  ``reset()``, positions not written since read as zeros; SB3's arrays keep the old
  values there (no draw reaches them in either).
- ``optimize_memory_usage=True`` returns SB3's values (the next observation is the
  following step's) but stores the next observations anyway: the memory it saves in SB3
  is disk pages here.
- With ``n_envs > 1`` a draw reads each drawn step of every environment and keeps one:
  ``n_envs`` times the bytes SB3 copies.
- A buffer whose folder another process writes (a trainer, while an evaluation
  process runs ``DQN.load`` of its saved model) opens to read: it sees the steps as
  they come, logs a warning, and refuses adds with ``ReadOnlyError`` (SB3's own buffer
  is the evaluation's private copy; a second writer here would be a ``LockedError``).
- ``HerReplayBuffer`` with ``copy_info_dict=True`` keeps the infos in memory, as SB3
  does: a reopened folder has empty infos for the steps before the reopen.
- ``HerReplayBuffer.reset()`` forgets the episodes with the steps; SB3's keeps their
  lengths, so after its reset it goes on drawing steps from before it.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

try:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import BaseBuffer
    from stable_baselines3.common.buffers import DictReplayBuffer as _SB3DictReplayBuffer
    from stable_baselines3.common.buffers import NStepReplayBuffer as _SB3NStepReplayBuffer
    from stable_baselines3.common.buffers import ReplayBuffer as _SB3ReplayBuffer
    from stable_baselines3.common.type_aliases import DictReplayBufferSamples, ReplayBufferSamples
    from stable_baselines3.her.goal_selection_strategy import KEY_TO_GOAL_STRATEGY, GoalSelectionStrategy
    from stable_baselines3.her.her_replay_buffer import HerReplayBuffer as _SB3HerReplayBuffer
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "replaystore.compat.sb3 subclasses Stable-Baselines3's buffers: "
        "pip install stable-baselines3") from e

from .._native import LockedError, ReadOnlyError
from .._native import Reader as _Reader
from .._native import ReplayBuffer as _Buffer
from ._folder import Folder, holds_buffer, read_sidecar, write_sidecar

__all__ = ["ReplayBuffer", "DictReplayBuffer", "NStepReplayBuffer", "HerReplayBuffer"]

SIDECAR = "sb3.json"


class _Column:
    """One of SB3's per-step arrays (``[buffer_size, n_envs, ...]``), read from the folder
    when indexed. Only ``dones`` and ``timeouts`` take writes (SB3 ends the last
    trajectory with them: ``_setup_learn``, ``truncate_last_trajectory``)."""

    def __init__(self, owner: "ReplayBuffer", field: str) -> None:
        self._owner, self._field = owner, field

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self._owner._column(self._field)
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        return self._owner._column(self._field)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._field not in ("done", "timeout"):
            raise TypeError(
                f"replaystore keeps {self._field} in its folder: stored values are not rewritten "
                "(dones and timeouts, which SB3 sets to end a trajectory, are kept as overrides)")
        self._owner._override(self._field, key, value)

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._owner._column_shape(self._field)

    @property
    def dtype(self) -> np.dtype:
        return self._owner._fields[self._field][0]

    def __len__(self) -> int:
        return self.shape[0]


class ReplayBuffer(Folder, _SB3ReplayBuffer):
    """SB3's ``ReplayBuffer``, kept in the folder ``path``."""

    _kind = "ReplayBuffer"

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: Any = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, *, path: Optional[str] = None,
                 keep_states: Optional[int] = None) -> None:
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        #: Snapshots ``save_replay_buffer`` keeps: every one (``None``) or the newest K.
        self.keep_states = keep_states
        self.buffer_size = max(buffer_size // n_envs, 1)
        if optimize_memory_usage and handle_timeout_termination:
            raise ValueError(
                "ReplayBuffer does not support optimize_memory_usage = True "
                "and handle_timeout_termination = True simultaneously.")
        self.optimize_memory_usage = optimize_memory_usage
        self.handle_timeout_termination = handle_timeout_termination
        self._fields = self._layout()
        self._take_folder(path, "replaystore-sb3-")
        self._open_folder()

    # -- layout and folder -------------------------------------------------------------------

    def _obs_fields(self) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
        if isinstance(self.obs_shape, dict):
            # SB3's own ReplayBuffer fails here too, with a TypeError about a shape.
            raise TypeError(
                f"{type(self).__name__} takes one array observation (Box, Discrete, "
                f"MultiDiscrete, MultiBinary), not a Dict space of keys {list(self.obs_shape)}: "
                "use DictReplayBuffer (SB3's algorithms pick it for a Dict space)")
        return {"obs": (np.dtype(self.observation_space.dtype), tuple(self.obs_shape))}

    def _layout(self) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
        """Each field's dtype and its shape per step (all ``n_envs`` environments)."""
        n = self.n_envs
        fields = {}
        for name, (dtype, shape) in self._obs_fields().items():
            fields[name] = (dtype, (n, *shape))
            fields["next_" + name] = (dtype, (n, *shape))
        fields["action"] = (np.dtype(self._maybe_cast_dtype(self.action_space.dtype)), (n, self.action_dim))
        for name in ("reward", "done", "timeout"):
            fields[name] = (np.dtype(np.float32), (n,))
        return fields

    def _settings(self) -> Dict[str, Any]:
        return {"kind": self._kind, "version": 1, "buffer_size": self.buffer_size,
                "n_envs": self.n_envs,
                "fields": {k: [d.str, list(s)] for k, (d, s) in self._fields.items()},
                "optimize_memory_usage": self.optimize_memory_usage}

    def _open_folder(self) -> None:
        path = self._path
        saved = read_sidecar(path, SIDECAR) if holds_buffer(path) else None
        mine = self._settings()
        if saved is not None:
            for key, value in mine.items():
                if saved.get(key) != value:
                    raise ValueError(f"{path}: {key} is {saved.get(key)!r} on disk, {value!r} given")
        schema = {k: (d.str, s) for k, (d, s) in self._fields.items()}
        try:
            self._buf = _shared_open(path, lambda: _Buffer.open_or_create(path, schema, self.buffer_size))
        except LockedError as e:
            if saved is None:
                raise
            # Another process writes the folder: a trainer, while this one loads the saved
            # model to evaluate it (DQN.load). This one reads the steps as they come;
            # adding is refused (ReadOnlyError).
            self._buf = _shared_open(path, lambda: _Reader.open(path))
            logging.getLogger(__name__).warning(
                "%s: another process writes this replay buffer (%s); this one reads it, "
                "and refuses adds", path, e)
        if not isinstance(self._buf, _Reader):
            self._buf.keep_states = self.keep_states
        self._release = weakref.finalize(self, _release, path)
        self._tail = int(self._buf.stats()["tail"])
        self._base = int(saved["base"]) if saved else self._tail - len(self._buf)
        self._overrides: Dict[str, Dict[int, List[float]]] = {
            f: {int(k): v for k, v in rows.items()}
            for f, rows in (saved or {}).get("overrides", {}).items()}
        if saved is None:
            self._save_settings()
        self._sync_pos()

    def _save_settings(self) -> None:
        write_sidecar(self._path, SIDECAR, {**self._settings(), "base": self._base,
                                             "overrides": self._overrides})

    def _sync_pos(self) -> None:
        """``pos`` and ``full`` from the folder (steps added since the last reset)."""
        self._tail = int(self._buf.stats()["tail"])
        steps = self._tail - self._base
        self.pos = steps % self.buffer_size
        self.full = steps >= self.buffer_size

    # -- positions -----------------------------------------------------------------------------

    def _logical(self, positions: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The step stored at each ring position (in ``[0, buffer_size)``), and whether
        one is (a position past ``pos`` before the ring is full holds none)."""
        newest = self._tail - 1 - self._base  # steps since the last reset, numbered from 0
        pos = np.asarray(positions, np.int64)
        k = newest - (newest - pos) % self.buffer_size
        return (k + self._base), k >= max(0, newest + 1 - self.buffer_size)

    def _rows(self, positions: np.ndarray, drawn: bool = False) -> Dict[str, np.ndarray]:
        """The steps at ring positions ``positions``: zeros where none is stored yet, as
        SB3's arrays hold there. ``drawn``: they are a draw (SB3's RNG picked them), counted
        in the buffer's ``sampled`` as the engine's own draws are."""
        logical, stored = self._logical(positions)
        if stored.all():
            got = self._buf.get(logical.astype(np.uint64), drawn=drawn)
            got = {k: got[k] for k in self._fields}
        else:
            got = {k: np.zeros((len(logical), *s), d) for k, (d, s) in self._fields.items()}
            if stored.any():
                part = self._buf.get(logical[stored].astype(np.uint64), drawn=drawn)
                for k in self._fields:
                    got[k][stored] = part[k]
        for field, rows in self._overrides.items():
            for row, idx in enumerate(logical.tolist()):
                if idx in rows:
                    got[field][row] = rows[idx]
        return got

    def _column(self, field: str) -> np.ndarray:
        dtype, shape = self._fields[field]
        out = np.zeros((self.buffer_size, *shape), dtype)
        stored = self.size()
        if stored:
            out[:stored] = self._rows(np.arange(stored))[field]
        return out

    def _column_shape(self, field: str) -> Tuple[int, ...]:
        return (self.buffer_size, *self._fields[field][1])

    def _override(self, field: str, key: Any, value: Any) -> None:
        """``column[key] = value`` for ``done`` or ``timeout``: the steps it changes keep
        their new values beside them (in the settings file), read over the stored ones."""
        before = self._column(field)
        after = before.copy()
        after[key] = value
        changed = np.flatnonzero((after != before).any(axis=1))
        rows = self._overrides.setdefault(field, {})
        for pos, idx in zip(changed, self._logical(changed)[0].tolist()):
            rows[int(idx)] = after[pos].tolist()
        live = self._tail - len(self._buf)
        self._overrides = {f: {k: v for k, v in r.items() if k >= live}
                           for f, r in self._overrides.items()}
        self._save_settings()

    observations = property(lambda self: _Column(self, "obs"))
    next_observations = property(lambda self: _Column(self, "next_obs"))
    actions = property(lambda self: _Column(self, "action"))
    rewards = property(lambda self: _Column(self, "reward"))
    dones = property(lambda self: _Column(self, "done"))
    timeouts = property(lambda self: _Column(self, "timeout"))

    # -- SB3's calls ---------------------------------------------------------------------------

    def _step(self, obs: Dict[str, Any], next_obs: Dict[str, Any], action: Any, reward: Any,
              done: Any, infos: List[Dict[str, Any]]) -> Dict[str, np.ndarray]:
        """One step of every env as a one-item batch, cast as SB3's array assignment
        casts (one cast and one reshape per field: this is most of an add)."""
        fields = self._fields
        row = {}
        for name, value in obs.items():
            dtype, shape = fields[name]
            row[name] = np.ascontiguousarray(np.asarray(value, dtype).reshape((1, *shape)))
        for name, value in next_obs.items():
            dtype, shape = fields["next_" + name]
            row["next_" + name] = np.ascontiguousarray(np.asarray(value, dtype).reshape((1, *shape)))
        dtype, shape = fields["action"]
        row["action"] = np.ascontiguousarray(np.asarray(action, dtype).reshape((1, *shape)))
        n = self.n_envs
        row["reward"] = np.asarray(reward, np.float32).reshape(1, n)
        row["done"] = np.asarray(done, np.float32).reshape(1, n)
        row["timeout"] = (np.array([[info.get("TimeLimit.truncated", False) for info in infos]], np.float32)
                          if self.handle_timeout_termination else np.zeros((1, n), np.float32))
        return row

    def add(self, obs: np.ndarray, next_obs: np.ndarray, action: np.ndarray, reward: np.ndarray,
            done: np.ndarray, infos: List[Dict[str, Any]]) -> None:
        self._add({"obs": obs}, {"obs": next_obs}, action, reward, done, infos)

    def _add(self, obs, next_obs, action, reward, done, infos) -> None:
        if isinstance(self._buf, _Reader):
            raise ReadOnlyError(
                f"{self._path}: another process writes this replay buffer; this one was opened "
                "while it did, to read it (an evaluation's DQN.load), and adds nothing")
        # This object is the folder's only writer: it tracks the tail (stats() costs
        # more than a draw).
        self._tail = int(self._buf.add_batch(self._step(obs, next_obs, action, reward, done, infos))[-1]) + 1
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def reset(self) -> None:
        """Drops every transition (positions start again at 0)."""
        self._base, self._overrides = self._tail, {}
        self._save_settings()
        self._buf.clear()
        self.pos, self.full = 0, False

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:
        if not self.optimize_memory_usage:
            return BaseBuffer.sample(self, batch_size=batch_size, env=env)
        # As SB3: the step at pos is not drawn (its next observation is gone there).
        if self.full:
            batch_inds = (np.random.randint(1, self.buffer_size, size=batch_size) + self.pos) % self.buffer_size
        else:
            batch_inds = np.random.randint(0, self.pos, size=batch_size)
        return self._get_samples(batch_inds, env=env)

    def _pick(self, batch_inds: np.ndarray) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """SB3's env draw, then each drawn (step, env)'s values."""
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        return env_indices, self._at(batch_inds, env_indices, drawn=True)

    def _at(self, batch_indices: np.ndarray, env_indices: np.ndarray,
            drawn: bool = False) -> Dict[str, np.ndarray]:
        """The values of env ``env_indices[i]`` at ring position ``batch_indices[i]``."""
        rows = self._rows(batch_indices, drawn)
        at = np.arange(len(batch_indices))
        return {k: v[at, env_indices] for k, v in rows.items()}

    def _next_obs(self, batch_inds: np.ndarray, env_indices: np.ndarray,
                  got: Dict[str, np.ndarray], name: str) -> np.ndarray:
        if not self.optimize_memory_usage:
            return got["next_" + name]
        # SB3 keeps one array: step i's next observation is step i + 1's observation,
        # except for the newest step, whose next observation was written there last.
        after = (batch_inds + 1) % self.buffer_size
        out = got["next_" + name].copy()
        other = after != self.pos
        if other.any():
            rows = self._rows(after[other])
            out[other] = rows[name][np.arange(int(other.sum())), env_indices[other]]
        return out

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> ReplayBufferSamples:
        env_indices, got = self._pick(batch_inds)
        data = (
            self._normalize_obs(got["obs"], env),
            got["action"],
            self._normalize_obs(self._next_obs(batch_inds, env_indices, got, "obs"), env),
            (got["done"] * (1 - got["timeout"])).reshape(-1, 1),
            self._normalize_reward(got["reward"].reshape(-1, 1), env),
        )
        return ReplayBufferSamples(*tuple(map(self.to_torch, data)))

    # -- pickling: SB3's save_replay_buffer / load_replay_buffer ---------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_buf", "_remove_dir", "_release", "device")}
        state["device"] = str(self.device)
        if self._own_dir:
            # A temporary folder ends with this process: the pickle carries the steps.
            stored = self.size()
            state["_steps"] = self._rows(np.arange(stored)) if stored else None
        else:
            state["_snapshot"] = self._buf.get_state()
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        steps = state.pop("_steps", None)
        snapshot = state.pop("_snapshot", None)
        self.__dict__.update(state)
        from stable_baselines3.common.utils import get_device
        self.device = get_device(self.device)
        self._remove_dir = None
        if snapshot is not None:
            if not holds_buffer(self._path):
                raise FileNotFoundError(
                    f"{self._path}: the replay buffer's folder is gone; the pickle names it "
                    "and holds a snapshot of it, not the transitions")
            self._buf = _shared_open(self._path)
            self._buf.keep_states = self.__dict__.get("keep_states")  # None in older pickles
            self._release = weakref.finalize(self, _release, self._path)
            self._buf.set_state(snapshot)
            self._save_settings()  # the snapshot's numbering (base, done overrides)
            self._sync_pos()
            return
        pos, full = state["pos"], state["full"]
        self._take_folder(None, "replaystore-sb3-")
        self._open_folder()
        if steps is not None:
            # Oldest first; base -pos puts the newest at pos - 1 again when the ring was full.
            order = (np.arange(self.buffer_size) + pos) % self.buffer_size if full else np.arange(pos)
            self._buf.add_batch({k: np.ascontiguousarray(steps[k][order]) for k in self._fields})
            self._base = -pos if full else 0
            self._save_settings()
            self._sync_pos()

    def _open_buffers(self) -> list:
        return []  # shared by the adapters of this process: _release closes it

    @property
    def replaystore(self):
        """The replaystore handle under this buffer (a ``ReplayBuffer``, or a ``Reader``
        while another process writes the folder): its ``stats()``, snapshots and draws,
        and what ``replaystore.integrations`` reads."""
        return self._buf

    def close(self) -> None:
        """Closes the folder's buffer unless another adapter of this process uses it."""
        release = getattr(self, "_release", None)
        if release is not None:
            release()
        super().close()


#: Buffers this process has open, by folder, with how many adapters use each: SB3 loads
#: a pickled buffer while the one it replaces is still alive, and a folder has one writer.
_OPEN: Dict[str, List[Any]] = {}


def _shared_open(path: str, make: Any = None):
    key = os.path.realpath(path)
    held = _OPEN.get(key)
    if held is not None:
        held[1] += 1
        return held[0]
    buf = make() if make is not None else _Buffer.open(path)
    _OPEN[key] = [buf, 1]
    return buf


def _release(path: str) -> None:
    """One adapter of this process is done with the folder's buffer (closed, or
    collected): the last one closes it."""
    key = os.path.realpath(path)
    held = _OPEN.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        del _OPEN[key]
        held[0].close()


class DictReplayBuffer(ReplayBuffer, _SB3DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` (``Dict`` observation spaces): one field per key,
    ``obs.KEY`` and ``next_obs.KEY``."""

    _kind = "DictReplayBuffer"

    def __init__(self, buffer_size: int, observation_space: spaces.Dict, action_space: spaces.Space,
                 device: Any = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, *, path: Optional[str] = None,
                 keep_states: Optional[int] = None) -> None:
        assert not optimize_memory_usage, "DictReplayBuffer does not support optimize_memory_usage"
        super().__init__(buffer_size, observation_space, action_space, device, n_envs,
                         optimize_memory_usage, handle_timeout_termination, path=path,
                         keep_states=keep_states)

    def _obs_fields(self) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
        assert isinstance(self.obs_shape, dict), "DictReplayBuffer must be used with Dict obs space only"
        return {f"obs.{k}": (np.dtype(self.observation_space[k].dtype), tuple(s))
                for k, s in self.obs_shape.items()}

    def add(self, obs: Dict[str, np.ndarray], next_obs: Dict[str, np.ndarray], action: np.ndarray,
            reward: np.ndarray, done: np.ndarray, infos: List[Dict[str, Any]]) -> None:
        self._add({f"obs.{k}": v for k, v in obs.items()},
                  {f"obs.{k}": v for k, v in next_obs.items()}, action, reward, done, infos)

    def sample(self, batch_size: int, env: Any = None) -> DictReplayBufferSamples:
        return BaseBuffer.sample(self, batch_size=batch_size, env=env)

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> DictReplayBufferSamples:
        return self._samples(self._pick(batch_inds)[1], env)

    def _samples(self, got: Dict[str, np.ndarray], env: Any) -> DictReplayBufferSamples:
        """Drawn steps' values as SB3's samples (one env's values per drawn step)."""
        keys = list(self.obs_shape)
        obs_ = self._normalize_obs({k: got[f"obs.{k}"] for k in keys}, env)
        next_ = self._normalize_obs({k: got[f"next_obs.{k}"] for k in keys}, env)
        return DictReplayBufferSamples(
            observations={k: self.to_torch(v) for k, v in obs_.items()},
            actions=self.to_torch(got["action"]),
            next_observations={k: self.to_torch(v) for k, v in next_.items()},
            dones=self.to_torch(got["done"] * (1 - got["timeout"])).reshape(-1, 1),
            rewards=self.to_torch(self._normalize_reward(got["reward"].reshape(-1, 1), env)),
        )

    observations = property(lambda self: {k: _Column(self, f"obs.{k}") for k in self.obs_shape})
    next_observations = property(lambda self: {k: _Column(self, f"next_obs.{k}") for k in self.obs_shape})


class NStepReplayBuffer(ReplayBuffer, _SB3NStepReplayBuffer):
    """SB3's ``NStepReplayBuffer(..., n_steps=3, gamma=0.99)``: n-step returns summed at
    sample time over the stored steps, cut at the first done or timeout, never across the
    newest step (whose successor is not there yet)."""

    _kind = "NStepReplayBuffer"

    def __init__(self, *args: Any, n_steps: int = 3, gamma: float = 0.99, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.n_steps = n_steps
        self.gamma = gamma
        if self.optimize_memory_usage:
            raise NotImplementedError("NStepReplayBuffer doesn't support optimize_memory_usage=True")

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> ReplayBufferSamples:
        env_indices = np.random.randint(0, self.n_envs, size=batch_inds.shape)
        steps = np.arange(self.n_steps).reshape(1, -1)
        indices = (batch_inds[:, None] + steps) % self.buffer_size
        rows = self._rows(indices.ravel(), drawn=True)
        b, n = indices.shape
        pick = lambda field: rows[field].reshape(b, n, *rows[field].shape[1:])[  # noqa: E731
            np.arange(b)[:, None], np.arange(n)[None, :], env_indices[:, None]]
        rewards_seq = self._normalize_reward(pick("reward"), env)
        dones_seq = pick("done")
        truncated_seq = pick("timeout").copy()
        # As SB3: the newest step ends every window it is in (its successor is not there),
        # unless it is already done.
        newest = indices == (self.pos - 1) % self.buffer_size
        truncated_seq = np.where(newest, np.logical_or(truncated_seq, np.logical_not(dones_seq)), truncated_seq)
        done_or_truncated = np.logical_or(dones_seq, truncated_seq)
        done_idx = np.where(done_or_truncated.any(axis=1), done_or_truncated.argmax(axis=1), self.n_steps - 1)
        mask = np.arange(self.n_steps).reshape(1, -1) <= done_idx[:, None]
        target_q_discounts = self.gamma ** mask.sum(axis=1, keepdims=True).astype(np.float32)
        discounts = self.gamma ** np.arange(self.n_steps, dtype=np.float32).reshape(1, -1)
        n_step_returns = (rewards_seq * discounts * mask).sum(axis=1, keepdims=True)
        last = (np.arange(b), done_idx)
        obs_all = rows["obs"].reshape(b, n, *rows["obs"].shape[1:])
        next_all = rows["next_obs"].reshape(b, n, *rows["next_obs"].shape[1:])
        next_obs = self._normalize_obs(next_all[last[0], last[1], env_indices], env)
        final_dones = (dones_seq[last] * (1.0 - truncated_seq[last]))[:, None].astype(np.float32)
        obs = self._normalize_obs(obs_all[np.arange(b), 0, env_indices], env)
        actions = rows["action"].reshape(b, n, *rows["action"].shape[1:])[np.arange(b), 0, env_indices]
        return ReplayBufferSamples(
            observations=self.to_torch(obs),
            actions=self.to_torch(actions),
            next_observations=self.to_torch(next_obs),
            dones=self.to_torch(final_dones),
            rewards=self.to_torch(n_step_returns),
            discounts=self.to_torch(target_q_discounts),
        )


class HerReplayBuffer(DictReplayBuffer, _SB3HerReplayBuffer):
    """SB3's ``HerReplayBuffer``: goals relabelled at sample time (``n_sampled_goal``
    virtual transitions per real one, ``future``/``final``/``episode``), rewards from the
    env's ``compute_reward``. Each step stores where its episode began, so a reopened
    folder knows its episodes again (SB3 keeps that in memory only)."""

    _kind = "HerReplayBuffer"

    def __init__(self, buffer_size: int, observation_space: spaces.Dict, action_space: spaces.Space,
                 env: Any, device: Any = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, n_sampled_goal: int = 4,
                 goal_selection_strategy: Any = "future", copy_info_dict: bool = False, *,
                 path: Optional[str] = None, keep_states: Optional[int] = None) -> None:
        super().__init__(buffer_size, observation_space, action_space, device=device, n_envs=n_envs,
                         optimize_memory_usage=optimize_memory_usage,
                         handle_timeout_termination=handle_timeout_termination, path=path,
                         keep_states=keep_states)
        self.env = env
        self.copy_info_dict = copy_info_dict
        if isinstance(goal_selection_strategy, str):
            goal_selection_strategy = KEY_TO_GOAL_STRATEGY[goal_selection_strategy.lower()]
        assert isinstance(goal_selection_strategy, GoalSelectionStrategy), (
            f"Invalid goal selection strategy, please use one of {list(GoalSelectionStrategy)}")
        self.goal_selection_strategy = goal_selection_strategy
        self.n_sampled_goal = n_sampled_goal
        self.her_ratio = 1 - (1.0 / (self.n_sampled_goal + 1))
        self.infos = np.array([[{} for _ in range(self.n_envs)] for _ in range(self.buffer_size)])
        self._rebuild_episodes()

    def _layout(self) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
        return {**super()._layout(), "ep_start": (np.dtype(np.int64), (self.n_envs,))}

    def _rebuild_episodes(self) -> None:
        """``ep_start``, ``ep_length`` and the running episodes' starts, from the stored
        steps: the lengths SB3 would hold (an episode whose first step was overwritten
        has length 0, one still running too)."""
        bs, n = self.buffer_size, self.n_envs
        self.ep_start = np.zeros((bs, n), np.int64)
        self.ep_length = np.zeros((bs, n), np.int64)
        self._current_ep_start = np.zeros(n, np.int64)
        stored = self.size()
        if not stored:
            return
        rows = self._rows(np.arange(stored))
        self.ep_start[:stored] = rows["ep_start"]
        done = rows["done"]
        logical, _ = self._logical(np.arange(stored))
        oldest = logical.min()
        newest = (self.pos - 1) % bs
        for e in range(n):
            self._current_ep_start[e] = self.pos if done[newest, e] else self.ep_start[newest, e]
            for d in np.flatnonzero(done[:, e]):
                s = self.ep_start[d, e]
                length = (d + 1 - s) % bs  # as SB3 computes it (0 for a whole lap)
                if length and logical[d] - (length - 1) >= oldest:  # its first step is still stored
                    self.ep_length[(s + np.arange(length)) % bs, e] = length

    def _step(self, obs, next_obs, action, reward, done, infos) -> Dict[str, np.ndarray]:
        row = super()._step(obs, next_obs, action, reward, done, infos)
        row["ep_start"] = self._current_ep_start.reshape(1, -1).astype(np.int64)
        return row

    def add(self, obs: Dict[str, np.ndarray], next_obs: Dict[str, np.ndarray], action: np.ndarray,
            reward: np.ndarray, done: np.ndarray, infos: List[Dict[str, Any]]) -> None:
        for e in range(self.n_envs):
            # The episode whose step is overwritten loses its length (it is cut).
            start, length = self.ep_start[self.pos, e], self.ep_length[self.pos, e]
            if length > 0:
                self.ep_length[np.arange(self.pos, start + length) % self.buffer_size, e] = 0
        self.ep_start[self.pos] = self._current_ep_start.copy()
        if self.copy_info_dict:
            self.infos[self.pos] = infos
        super().add(obs, next_obs, action, reward, done, infos)
        for e in range(self.n_envs):
            if done[e]:
                self._compute_episode_length(e)

    def reset(self) -> None:
        super().reset()
        self._rebuild_episodes()

    # SB3's own draw (real and virtual shares, np.random.choice over valid steps) over
    # this class's episode arrays and reads.
    sample = _SB3HerReplayBuffer.sample

    def _get_real_samples(self, batch_indices: np.ndarray, env_indices: np.ndarray,
                          env: Any = None) -> DictReplayBufferSamples:
        return self._samples(self._at(batch_indices, env_indices, drawn=True), env)

    def _get_virtual_samples(self, batch_indices: np.ndarray, env_indices: np.ndarray,
                             env: Any = None) -> DictReplayBufferSamples:
        import copy

        got = self._at(batch_indices, env_indices, drawn=True)
        keys = list(self.obs_shape)
        obs = {k: got[f"obs.{k}"] for k in keys}
        next_obs = {k: got[f"next_obs.{k}"] for k in keys}
        infos = (copy.deepcopy(self.infos[batch_indices, env_indices]) if self.copy_info_dict
                 else [{} for _ in range(len(batch_indices))])
        new_goals = self._sample_goals(batch_indices, env_indices)
        obs["desired_goal"] = new_goals
        next_obs["desired_goal"] = new_goals
        assert self.env is not None, (
            "You must initialize HerReplayBuffer with a VecEnv so it can compute rewards for virtual transitions")
        rewards = self.env.env_method("compute_reward", next_obs["achieved_goal"], obs["desired_goal"],
                                      infos, indices=[0])[0].astype(np.float32)
        obs = self._normalize_obs(obs, env)
        next_obs = self._normalize_obs(next_obs, env)
        return DictReplayBufferSamples(
            observations={k: self.to_torch(v) for k, v in obs.items()},
            actions=self.to_torch(got["action"]),
            next_observations={k: self.to_torch(v) for k, v in next_obs.items()},
            dones=self.to_torch(got["done"] * (1 - got["timeout"])).reshape(-1, 1),
            rewards=self.to_torch(self._normalize_reward(rewards.reshape(-1, 1), env)),
        )

    def _sample_goals(self, batch_indices: np.ndarray, env_indices: np.ndarray) -> np.ndarray:
        batch_ep_start = self.ep_start[batch_indices, env_indices]
        batch_ep_length = self.ep_length[batch_indices, env_indices]
        if self.goal_selection_strategy == GoalSelectionStrategy.FINAL:
            in_episode = batch_ep_length - 1
        elif self.goal_selection_strategy == GoalSelectionStrategy.FUTURE:
            current = (batch_indices - batch_ep_start) % self.buffer_size
            in_episode = np.random.randint(current, batch_ep_length)
        elif self.goal_selection_strategy == GoalSelectionStrategy.EPISODE:
            in_episode = np.random.randint(0, batch_ep_length)
        else:
            raise ValueError(f"Strategy {self.goal_selection_strategy} for sampling goals not supported!")
        at = (in_episode + batch_ep_start) % self.buffer_size
        return self._at(at, env_indices)["next_obs.achieved_goal"]

    def truncate_last_trajectory(self) -> None:
        """Ends the running episodes at the newest step (SB3's call after a load), as a
        done; kept as an override, since stored steps are not rewritten."""
        if (self._current_ep_start != self.pos).any():
            import warnings

            warnings.warn(
                "The last trajectory in the replay buffer will be truncated.\n"
                "If you are in the same episode as when the replay buffer was saved,\n"
                "you should use `truncate_last_trajectory=False` to avoid that issue.")
            newest = (self.pos - 1) % self.buffer_size
            for e in np.where(self._current_ep_start != self.pos)[0]:
                self.dones[newest, e] = True
                self._compute_episode_length(int(e))
                if self.handle_timeout_termination:
                    self.timeouts[newest, e] = True  # not a timeout: it lets the value bootstrap

    def __getstate__(self) -> Dict[str, Any]:
        state = super().__getstate__()
        state.pop("env", None)
        # Rebuilt from the steps on load; the infos are pickled only if they are kept.
        for name in ("ep_start", "ep_length", "_current_ep_start"):
            state.pop(name, None)
        if not self.copy_info_dict:
            state.pop("infos", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        self.env = None
        if not self.copy_info_dict:
            self.infos = np.array([[{} for _ in range(self.n_envs)] for _ in range(self.buffer_size)])
        self._rebuild_episodes()
