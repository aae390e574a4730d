"""cpprb's helpers that turn a Gymnasium environment's spaces into an ``env_dict`` and its
step values into ``add`` keywords, with cpprb's names (``obs``/``next_obs``/``act``,
``obs0``... for tuple spaces, the keys for dict spaces)."""

from __future__ import annotations

from typing import Any, Callable, Dict

import numpy as np


def _spaces():
    try:
        from gymnasium import spaces
    except ImportError:  # pragma: no cover - cpprb falls back to gym as well
        from gym import spaces  # type: ignore[no-redef]
    return spaces


def _field(space: Any, int_type: Any, float_type: Any) -> Dict[str, Any]:
    s = _spaces()
    if isinstance(space, s.Discrete):
        return {"dtype": int_type, "shape": 1}
    if isinstance(space, s.MultiDiscrete):
        return {"dtype": int_type, "shape": space.nvec.shape}
    if isinstance(space, s.MultiBinary):
        return {"dtype": int_type, "shape": space.n}
    if isinstance(space, s.Box):
        return {"dtype": float_type, "shape": space.shape}
    raise NotImplementedError(f"Error: Unknown Space {space}")


def _parts(space: Any, stem: str, int_type: Any, float_type: Any) -> Dict[str, Dict[str, Any]]:
    """One field per part of a tuple space (``{stem}{i}``) or dict space (its keys)."""
    s = _spaces()
    if isinstance(space, s.Tuple):
        return {f"{stem}{i}": _field(p, int_type, float_type) for i, p in enumerate(space.spaces)}
    if isinstance(space, s.Dict):
        return {k: _field(p, int_type, float_type) for k, p in space.spaces.items()}
    return {stem: _field(space, int_type, float_type)}


def create_env_dict(env: Any, *, int_type: Any = None, float_type: Any = None) -> Dict[str, Dict[str, Any]]:
    """cpprb's ``create_env_dict``: ``rew`` and ``done`` (float), the observation fields and
    their ``next_`` twins, the action fields.

    >>> import gymnasium as gym
    >>> from replaystore.compat.cpprb import create_env_dict
    >>> sorted(create_env_dict(gym.make("CartPole-v1")))
    ['act', 'done', 'next_obs', 'obs', 'rew']
    """
    int_type = int_type or np.int32
    float_type = float_type or np.float32
    env_dict: Dict[str, Dict[str, Any]] = {
        "rew": {"shape": 1, "dtype": float_type}, "done": {"shape": 1, "dtype": float_type}}
    for name, field in _parts(env.observation_space, "obs", int_type, float_type).items():
        env_dict[name] = field
        env_dict[f"next_{name}"] = dict(field)
    env_dict.update(_parts(env.action_space, "act", int_type, float_type))
    return env_dict


def create_before_add_func(env: Any) -> Callable[..., Dict[str, Any]]:
    """cpprb's ``create_before_add_func``: ``before_add(obs, act, next_obs, rew, done)``
    returns the keywords for ``add``, tuple parts named ``{name}{i}``, dict parts
    ``{name}_{key}`` (cpprb's names, which for dict spaces differ from
    ``create_env_dict``'s)."""
    s = _spaces()

    def splitter(space: Any) -> Callable[[str, Any], Dict[str, Any]]:
        if isinstance(space, s.Tuple):
            return lambda name, v: {f"{name}{i}": x for i, x in enumerate(v)}
        if isinstance(space, s.Dict):
            return lambda name, v: {f"{name}_{k}": x for k, x in v.items()}
        return lambda name, v: {name: v}

    obs, act = splitter(env.observation_space), splitter(env.action_space)

    def before_add(obs_, act_, next_obs, rew, done):
        return {**obs("obs", obs_), **act("act", act_), **obs("next_obs", next_obs),
                "rew": rew, "done": done}

    return before_add
