"""W7 of docs/WORKLOADS.md, goal-conditioned replay (HER), for compare.py: a dict
observation (`observation` f32[25], `achieved_goal` f32[3], `desired_goal` f32[3]),
`action` f32[4], 50-step episodes, 1,000,000 steps (--quick: 62,500); draws of 256 with
the `future` strategy and k = 4, rewards from a vectorized distance threshold
(FetchReach's `compute_reward`).

- replaystore: an episodic buffer, each episode added whole (`add_episode`); a draw is
  `sample_transitions(..., goal=, achieved=, strategy="future", n_sampled_goal=4,
  compute_reward=)`: relabeled at sample time, rewards recomputed once per batch.
- SB3 `HerReplayBuffer` (relabels at sample time too, calling the env's
  `compute_reward` through a VecEnv), steps added one by one as its `learn` adds them.
- Tianshou `HERReplayBuffer` (future strategy only, relabels at sample time by
  rewriting the sampled episodes' goals in its storage until the next call), steps
  added one by one as its `Collector` adds them. Its `future_k` relabels a share of
  `1 - 1/future_k`, SB3's `n_sampled_goal` one of `1 - 1/(1 + k)`: `future_k=5` is the
  same 80% as k = 4.
- cpprb `HindsightReplayBuffer`: relabels when an episode ends (`additional_goals=4`
  copies per step, stored), so its draw is a plain sample; its add is per step, then
  `on_episode_end(goal)`.

Figures: `fill` (steps added per second, the whole buffer) and `sample` (HER batches of
256 per second, each with its rewards).
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np

STEPS = 50
OBS, GOAL, ACT = 25, 3, 4


def compute_reward(achieved, desired, info=None):
    """FetchReach's: 0 within 5 cm of the goal, else -1."""
    return -(np.linalg.norm(achieved - desired, axis=-1) > 0.05).astype(np.float32)


def episodes(n_steps, seed=7):
    """`n_steps // 50` episodes: observations (51 rows each), achieved goals along a
    random walk, one desired goal per episode, actions and rewards (50 rows each)."""
    rng = np.random.default_rng(seed)
    n = n_steps // STEPS
    obs = rng.standard_normal((n, STEPS + 1, OBS), np.float32)
    walk = np.cumsum(rng.normal(0, 0.02, (n, STEPS + 1, GOAL)).astype(np.float32), axis=1)
    goal = rng.uniform(-0.1, 0.1, (n, GOAL)).astype(np.float32)
    act = rng.uniform(-1, 1, (n, STEPS, ACT)).astype(np.float32)
    rew = compute_reward(walk[:, 1:], goal[:, None, :])
    return obs, walk, goal, act, rew


class Replaystore:
    def __init__(self, capacity, path):
        import replaystore as rs

        schema = {"observation": ("float32", (OBS,)), "achieved_goal": ("float32", (GOAL,)),
                  "desired_goal": ("float32", (GOAL,)), "action": ("float32", (ACT,)),
                  "reward": "float32"}
        # One row per step plus the reset's: 51 rows per 50 transitions.
        rows = capacity * (STEPS + 1) // STEPS
        self.buf = rs.ReplayBuffer.create(path, schema, rows, episodic=True, seed=1)

    def add_episode(self, obs, walk, goal, act, rew):
        self.buf.add_episode(
            {"observation": obs, "achieved_goal": walk,
             "desired_goal": np.broadcast_to(goal, (STEPS + 1, GOAL)).copy(),
             "action": act, "reward": rew},
            truncated=True,
        )

    def sample(self, n):
        return self.buf.sample_transitions(
            n, ["observation", "achieved_goal", "desired_goal"], goal="desired_goal",
            achieved="achieved_goal", strategy="future", n_sampled_goal=4,
            compute_reward=compute_reward)

    def close(self):
        self.buf.close()


class SB3:
    def __init__(self, capacity, path):
        import gymnasium as gym
        from stable_baselines3.common.vec_env import DummyVecEnv
        from stable_baselines3.her.her_replay_buffer import HerReplayBuffer

        spaces = gym.spaces
        box = lambda n: spaces.Box(-np.inf, np.inf, (n,), np.float32)
        obs_space = spaces.Dict({"observation": box(OBS), "achieved_goal": box(GOAL),
                                 "desired_goal": box(GOAL)})

        class Goal(gym.Env):
            observation_space = obs_space
            action_space = spaces.Box(-1, 1, (ACT,), np.float32)

            def reset(self, seed=None, options=None):
                return obs_space.sample(), {}

            def step(self, action):
                return obs_space.sample(), 0.0, False, False, {}

            def compute_reward(self, achieved, desired, info):
                return compute_reward(achieved, desired, info)

        self.env = DummyVecEnv([Goal])
        self.buf = HerReplayBuffer(capacity, obs_space, Goal.action_space, self.env,
                                   n_sampled_goal=4, goal_selection_strategy="future")

    def add_episode(self, obs, walk, goal, act, rew):
        for t in range(STEPS):
            o = {"observation": obs[t:t + 1], "achieved_goal": walk[t:t + 1],
                 "desired_goal": goal[None]}
            o2 = {"observation": obs[t + 1:t + 2], "achieved_goal": walk[t + 1:t + 2],
                  "desired_goal": goal[None]}
            done = np.array([t == STEPS - 1])
            self.buf.add(o, o2, act[t:t + 1], rew[t:t + 1], done,
                         [{"TimeLimit.truncated": bool(done[0])}])

    def sample(self, n):
        return self.buf.sample(n)

    def close(self):
        self.env.close()


class Cpprb:
    def __init__(self, capacity, path):
        from cpprb import HindsightReplayBuffer

        # cpprb's state holds the achieved goal (goal_func reads it back out).
        env_dict = {"obs": {"shape": OBS + GOAL}, "act": {"shape": ACT},
                    "next_obs": {"shape": OBS + GOAL}}
        self.buf = HindsightReplayBuffer(
            capacity, env_dict, max_episode_len=STEPS,
            reward_func=lambda s, a, g: compute_reward(s[:, -GOAL:], g),
            goal_func=lambda s: s[:, -GOAL:], goal_shape=GOAL, state="obs", action="act",
            next_state="next_obs", strategy="future", additional_goals=4)

    def add_episode(self, obs, walk, goal, act, rew):
        s = np.concatenate([obs, walk], axis=1)
        for t in range(STEPS):
            self.buf.add(obs=s[t], act=act[t], next_obs=s[t + 1])
        self.buf.on_episode_end(goal)

    def sample(self, n):
        return self.buf.sample(n)

    def close(self):
        pass


class Tianshou:
    def __init__(self, capacity, path):
        from tianshou.data import HERReplayBuffer

        self.buf = HERReplayBuffer(
            capacity, lambda achieved, desired: compute_reward(achieved, desired),
            horizon=STEPS, future_k=5.0)

    def add_episode(self, obs, walk, goal, act, rew):
        from tianshou.data import Batch

        for t in range(STEPS):
            o = Batch(observation=obs[t], achieved_goal=walk[t], desired_goal=goal)
            o2 = Batch(observation=obs[t + 1], achieved_goal=walk[t + 1], desired_goal=goal)
            last = t == STEPS - 1
            self.buf.add(Batch(obs=o, act=act[t], rew=rew[t], terminated=False,
                               truncated=last, obs_next=o2, info={}))

    def sample(self, n):
        return self.buf.sample(n)

    def close(self):
        pass


LIBS = {"replaystore": Replaystore, "sb3": SB3, "cpprb": Cpprb, "tianshou": Tianshou}
AVAILABLE = {"replaystore": "replaystore", "sb3": "stable_baselines3", "cpprb": "cpprb",
             "tianshou": "tianshou"}


def child(lib_name, quick, runs, scratch, put):
    """W7's figures for one library, each put as soon as measured."""
    n_steps = 1_000_000 // (16 if quick else 1)
    draws = 2000 // (4 if quick else 1)
    data = episodes(n_steps)
    fill, sample = [], []
    for r in range(runs):
        path = os.path.join(scratch, f"{lib_name}-W7-{r}")
        t = time.perf_counter()
        b = LIBS[lib_name](n_steps, path)
        for e in range(len(data[0])):
            b.add_episode(*(x[e] for x in data))
        fill.append(n_steps / (time.perf_counter() - t))
        b.sample(256)
        t = time.perf_counter()
        for _ in range(draws):
            b.sample(256)
        sample.append(draws / (time.perf_counter() - t))
        b.close()
        del b
        shutil.rmtree(path, ignore_errors=True)
    put("fill", fill)
    put("sample", sample)
