"""cpprb's ``train`` loop over any of this module's buffers (cpprb's own refuses every
buffer that is not its Cython class).

>>> import numpy as np
>>> from replaystore.compat import cpprb
>>> class Env:
...     def reset(self):
...         return np.zeros(2)
...     def step(self, action):
...         return np.ones(2), 1.0, 0.0, {}
>>> rb = cpprb.ReplayBuffer(16, {"obs": {"shape": 2}, "act": {}, "rew": {},
...                              "next_obs": {"shape": 2}, "done": {}})
>>> seen = []
>>> cpprb.train(rb, Env(), lambda obs, step, episode, warmup: 0.0,
...             lambda sample, step, episode: seen.append(step), max_steps=5, n_warmups=2)
>>> rb.get_stored_size(), seen
(5, [2, 3, 4])
>>> rb.close()
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

#: cpprb counts steps in a C ``size_t``: ``max_steps`` must be below this.
_SIZE_T = 2**64 - 1


def _logger() -> logging.Logger:
    """cpprb's default: the ``cpprb`` logger at INFO, with a handler when it has none."""
    logger = logging.getLogger("cpprb")
    logger.setLevel(logging.INFO)
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setLevel(logging.INFO)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s.%(msecs)03d [%(levelname)s] (%(filename)s:%(lineno)s) %(message)s"))
        logger.addHandler(handler)
    return logger


def train(buffer: Any, env: Any, get_action: Callable, update_policy: Callable, *,
          max_steps: int = int(1e6), max_episodes: Optional[int] = None, batch_size: int = 64,
          n_warmups: int = 0, after_step: Optional[Callable] = None,
          done_check: Optional[Callable] = None, obs_update: Optional[Callable] = None,
          rew_sum: Optional[Callable[[float, Any], float]] = None,
          episode_callback: Optional[Callable[[int, int, float], Any]] = None,
          logger: Optional[logging.Logger] = None) -> None:
    """Runs ``env`` for ``max_steps`` steps (or ``max_episodes`` episodes), adding each
    transition to ``buffer`` and, past ``n_warmups`` steps, handing a drawn batch to
    ``update_policy(sample, step, episode)``; a prioritized buffer gets the returned
    ``|TD|`` as the batch's new priorities. The callbacks are cpprb's: ``after_step``
    makes the transition from ``(obs, action, env.step(action), step, episode)``,
    ``done_check`` and ``obs_update`` read it, ``rew_sum`` sums an episode's reward,
    ``episode_callback(episode, episode_step, episode_reward)`` ends each episode.
    ``ValueError`` when ``max_steps`` does not fit cpprb's step counter."""
    if max_steps >= _SIZE_T:
        raise ValueError(f"max_steps ({max_steps}) is too big. max_steps < {_SIZE_T}")
    logger = logger or _logger()
    prioritized = callable(getattr(buffer, "update_priorities", None))
    max_episodes = min(max(max_episodes if max_episodes else _SIZE_T, 0), _SIZE_T)
    n_warmups = max(0, n_warmups)
    episode, episode_step, episode_reward = 0, 0, 0.0
    obs = env.reset()
    started = time.perf_counter()
    for step in range(max(max_steps, 0)):
        warmup = step < n_warmups
        action = get_action(obs, step, episode, warmup)
        if after_step is not None:
            transition = after_step(obs, action, env.step(action), step, episode)
        else:
            next_obs, reward, done, _ = env.step(action)
            transition = {"obs": obs, "act": action, "rew": reward, "next_obs": next_obs,
                          "done": done}
        buffer.add(**transition)
        # An n-step buffer holds nothing until its window fills.
        if buffer.get_stored_size() > 0 and not warmup:
            sample = buffer.sample(batch_size)
            abs_td = update_policy(sample, step, episode)
            if prioritized:
                buffer.update_priorities(sample["indexes"], abs_td)
        episode_reward = (rew_sum(episode_reward, transition) if rew_sum is not None
                          else transition["rew"])
        if done_check(transition) if done_check is not None else transition["done"]:
            per_second = (episode_step + 1) / max(time.perf_counter() - started, 1e-9)
            logger.info(f"{episode: 6}th Episode: {episode_step + 1: 5} Steps "
                        f"({step + 1: 7} Total Steps), {episode_reward: =+7.2f} Reward, "
                        f"{per_second: =+5.2f} Steps/s")
            if episode_callback is not None:
                episode_callback(episode, episode_step, episode_reward)
            obs = env.reset()
            buffer.on_episode_end()
            episode_reward, episode_step = 0.0, 0
            episode += 1
            if episode >= max_episodes:
                break
            started = time.perf_counter()
        else:
            obs = obs_update(transition) if obs_update is not None else transition["next_obs"]
            episode_step += 1
