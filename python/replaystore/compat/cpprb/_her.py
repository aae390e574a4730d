"""cpprb's ``HindsightReplayBuffer``: an episode is staged until ``on_episode_end(goal)``,
then stored once with its own goal and again with goals relabelled from its states."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional

import numpy as np

from ..._confined import Confined
from .._folder import Folder
from ._buffer import PrioritizedReplayBuffer, ReplayBuffer

STRATEGIES = ("future", "episode", "random", "final")


class HindsightReplayBuffer(Folder):
    """cpprb's ``HindsightReplayBuffer(size, env_dict, max_episode_len, reward_func)``.

    The relabelled transitions live in ``path/main``; the episode being collected in
    ``path/episode``, so a crash mid-episode keeps the steps already added (cpprb keeps
    them in memory).

    >>> import numpy as np
    >>> from replaystore.compat import cpprb
    >>> reward = lambda s, a, g: -1.0 * (np.abs(s - g).sum(axis=1, keepdims=True) > 0.5)
    >>> rb = cpprb.HindsightReplayBuffer(
    ...     64, {"obs": {"shape": 2}, "act": {}, "next_obs": {"shape": 2}}, 8, reward,
    ...     prioritized=False, additional_goals=2)
    >>> for t in range(3):
    ...     rb.add(obs=[t, 0], act=0, next_obs=[t + 1, 0])
    >>> rb.on_episode_end(goal=[5, 0])
    >>> rb.get_stored_size()  # the episode with its goal, then twice relabelled
    9
    >>> sorted(rb.sample(2))[:3]
    ['act', 'goal', 'next_obs']
    >>> rb.close()
    """

    def __init__(
        self,
        size: int,
        env_dict: Dict[str, Dict[str, Any]],
        max_episode_len: int,
        reward_func: Callable,
        *,
        goal_func: Optional[Callable] = None,
        goal_shape: Optional[Iterable[int]] = None,
        state: str = "obs",
        action: str = "act",
        next_state: str = "next_obs",
        strategy: str = "future",
        additional_goals: int = 4,
        prioritized: bool = True,
        path: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"Unknown Strategy: {strategy}. Known Strategies: {list(STRATEGIES)}")
        self.max_episode_len = int(max_episode_len)
        self.reward_func = reward_func
        self.goal_func = goal_func or (lambda s: s)
        self.state, self.action, self.next_state = state, action, next_state
        self.strategy = strategy
        self.additional_goals = 1 if strategy == "final" else int(additional_goals)
        self.prioritized = bool(prioritized)
        goal_dict = dict(env_dict[state])
        if goal_shape:
            goal_dict["shape"] = goal_shape
        self.goal_shape = tuple(int(d) for d in np.atleast_1d(np.asarray(goal_dict.get("shape", 1))))
        self._take_folder(path, "replaystore-cpprb-her-")
        main = PrioritizedReplayBuffer if self.prioritized else ReplayBuffer
        self.rb = main(size, {**env_dict, "rew": {}, "goal": goal_dict},
                       path=Confined(self._path).subdir("main"), **kwargs)
        self.episode_rb = ReplayBuffer(self.max_episode_len, env_dict,
                                       path=Confined(self._path).subdir("episode"))
        self.rng = np.random.default_rng()

    def add(self, **kwargs: Any) -> None:
        """Adds steps to the episode being collected (``ValueError`` past
        ``max_episode_len``)."""
        if self.episode_rb.get_stored_size() >= self.max_episode_len:
            raise ValueError("Exceed Max Episode Length")
        self.episode_rb.add(**kwargs)

    def sample(self, batch_size: int, **kwargs: Any) -> Dict[str, np.ndarray]:
        return self.rb.sample(batch_size, **kwargs)

    def _store(self, trajectory: Dict[str, np.ndarray], goal: np.ndarray) -> None:
        rew = self.reward_func(trajectory[self.next_state], trajectory[self.action], goal)
        self.rb.add(**trajectory, goal=goal, rew=rew)

    def on_episode_end(self, goal: Any) -> None:
        """Stores the episode with ``goal``, then relabelled by ``strategy``."""
        n = self.episode_rb.get_stored_size()
        if n == 0:
            return
        trajectory = self.episode_rb.get_all_transitions()
        reached = trajectory[self.next_state]
        self._store(trajectory, np.broadcast_to(np.asarray(goal), (n, *self.goal_shape)))
        if self.strategy == "future":
            # For step t, goals from the states reached at t or after.
            picks = self.rng.integers(np.arange(n), n, size=(self.additional_goals, n))
            for pick in picks:
                self._store(trajectory, self.goal_func(reached[pick]))
        elif self.strategy == "episode":
            for pick in self.rng.integers(0, n, size=(self.additional_goals, n)):
                self._store(trajectory, self.goal_func(reached[pick]))
        elif self.strategy == "final":
            self._store(trajectory, self.goal_func(np.broadcast_to(reached[-1], reached.shape)))
        else:  # random: states reached anywhere in the buffer, drawn uniformly
            stored = self.rb.get_stored_size()
            pick = self.rng.integers(0, stored, size=self.additional_goals * n)
            goals = self.goal_func(self.rb._encode_sample(pick)[self.next_state])
            for g in goals.reshape((self.additional_goals, n, *goals.shape[1:])):
                self._store(trajectory, g)
        self.episode_rb.clear()
        self.rb.on_episode_end()

    def clear(self) -> None:
        self.rb.clear()
        self.episode_rb.clear()

    def get_stored_size(self) -> int:
        return self.rb.get_stored_size()

    def get_buffer_size(self) -> int:
        return self.rb.get_buffer_size()

    def get_all_transitions(self, shuffle: bool = False) -> Dict[str, np.ndarray]:
        return self.rb.get_all_transitions(shuffle)

    def update_priorities(self, indexes: Any, priorities: Any) -> None:
        if not self.prioritized:
            raise ValueError("Buffer is constructed without PER")
        self.rb.update_priorities(indexes, priorities)

    def get_max_priority(self) -> float:
        if not self.prioritized:
            raise ValueError("Buffer is constructed without PER")
        return self.rb.get_max_priority()

    def _open_buffers(self) -> list:
        return []

    def close(self) -> None:
        for b in (getattr(self, "rb", None), getattr(self, "episode_rb", None)):
            if b is not None:
                b.close()
        super().close()
