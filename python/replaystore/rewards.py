"""Reward transforms where UnstableBaselines applies them (issue 32, point 3).

UnstableBaselines' buffers take three transforms:

- ``final_reward_transformation(reward=, pid=, env_id=)``: once per player trajectory,
  on its final reward (a win/loss/draw mapping, a role advantage);
- ``step_reward_transformation(player_traj=, step_index=, reward=)``: once per step,
  given the trajectory and the step (a penalty for a badly formatted answer);
- ``sampling_reward_transformation(batch)``: once per drawn batch (normalising rewards
  per ``env_id``).

Here each stored step keeps three rewards: ``raw_reward`` (the trajectory's final
reward as the game gave it), ``env_reward`` (after the final transform) and ``reward``
(after the step transform). That is UnstableBaselines' ``step_info``, stored as fields,
so that a changed transform can be applied again from the raw rewards
(:func:`retransform`). The sampling transform runs on the drawn NumPy batch
(:func:`sample`).

A buffer for this needs the fields ``raw_reward``, ``env_reward`` and ``reward`` (float),
``step_index`` (int) and whatever else each step holds (``pid``, ``env_id``, ``obs``,
``act``...). :data:`FIELDS` gives the reward ones::

    schema = {**rs.rewards.FIELDS, "pid": "int8", "env_id": "str", "obs": "str", "act": "str"}
    buf = rs.ReplayBuffer.create(path, schema, 100_000, fragments=True, item_states=True)
    t = rs.rewards.RewardTransforms(final=win_loss, step=format_penalty, sampling=by_env)
    rs.rewards.add_trajectory(buf, {"obs": obs, "act": act}, final_reward=1.0, pid=0,
                              env_id="TicTacToe-v0", transforms=t)
    batch = rs.rewards.sample(buf, 256, t, remove=True)
"""

import numpy as np

#: The reward fields a buffer of transformed rewards keeps, as schema entries.
FIELDS = {
    "raw_reward": "float32",
    "env_reward": "float32",
    "reward": "float32",
    "step_index": "int32",
}


class RewardTransforms:
    """The three transforms, each optional (``None`` keeps the reward as it is)."""

    def __init__(self, final=None, step=None, sampling=None):
        self.final, self.step, self.sampling = final, step, sampling

    def apply(self, final_reward, *, pid, env_id, steps, trajectory=None):
        """``(env_reward, [step reward per step])`` as the transforms return them (the
        Python objects, uncast): the final transform once, the step transform once per
        step."""
        env = final_reward
        if self.final is not None:
            env = self.final(reward=final_reward, pid=pid, env_id=env_id)
        if self.step is None:
            return env, [env] * steps
        return env, [
            self.step(player_traj=trajectory, step_index=i, reward=env) for i in range(steps)
        ]

    def trajectory(self, final_reward, *, pid, env_id, steps, trajectory=None):
        """The three rewards of each of a trajectory's ``steps`` steps, as the float32
        fields of :data:`FIELDS` (see :meth:`apply`)."""
        env, step_rewards = self.apply(final_reward, pid=pid, env_id=env_id, steps=steps,
                                       trajectory=trajectory)
        return {
            "raw_reward": np.full(steps, final_reward, np.float32),
            "env_reward": np.full(steps, env, np.float32),
            "reward": np.asarray(step_rewards, np.float32).reshape(steps),
            "step_index": np.arange(steps, dtype=np.int32),
        }

    def on_batch(self, batch):
        """The sampling transform, once, on a drawn batch."""
        return batch if self.sampling is None else self.sampling(batch)


def add_trajectory(buf, steps, *, final_reward, pid, env_id, transforms, trajectory=None):
    """Adds one player trajectory as one call (one fragment): ``steps`` maps each field
    to one value per step; ``pid`` and ``env_id`` are stored with each step when the
    schema has them. Returns the indices."""
    n = len(next(iter(steps.values())))
    rows = transforms.trajectory(
        final_reward, pid=pid, env_id=env_id, steps=n, trajectory=trajectory
    )
    dtypes = {name: dtype for name, dtype, _ in buf.schema.fields}
    batch = dict(steps)
    if "pid" in dtypes:
        batch["pid"] = np.full(n, pid, np.dtype(dtypes["pid"]))
    if "env_id" in dtypes:
        batch["env_id"] = [env_id] * n
    batch.update(rows)
    return buf.add_batch(batch)


def sample(buf, n, transforms, *, remove=False, **kwargs):
    """Draws ``n`` steps (removing them with ``remove=True``, UnstableBaselines'
    ``get_batch``) and applies the sampling transform once to the batch."""
    batch = buf.sample(n, remove=remove, **kwargs)
    return transforms.on_batch(batch)


def retransform(batch, transforms):
    """The batch's ``env_reward`` and ``reward`` computed again from its ``raw_reward``
    with (changed) ``transforms``: the final transform per step from ``raw_reward``,
    ``pid`` and ``env_id``, the step transform with ``step_index`` and, as its
    ``player_traj``, the step's own stored fields (a dict of that row), since the
    trajectory object it saw when added is gone. The sampling transform is not run
    (it runs on each draw)."""
    out = dict(batch)
    n = len(batch["raw_reward"])
    env = np.empty(n, np.float32)
    step = np.empty(n, np.float32)
    for i in range(n):
        row = {k: v[i] for k, v in batch.items() if len(v) == n}
        e = row["raw_reward"]
        if transforms.final is not None:
            e = transforms.final(reward=e, pid=row.get("pid"), env_id=row.get("env_id"))
        s = e
        if transforms.step is not None:
            s = transforms.step(player_traj=row, step_index=int(row["step_index"]), reward=e)
        env[i], step[i] = e, s
    out["env_reward"], out["reward"] = env, step
    return out


def normalize_by(field="env_id"):
    """A sampling transform: each step's ``reward`` as a z-score within the steps of the
    batch that share its ``field`` (UnstableBaselines' ``NormalizeRewardsByEnv``)."""

    def transform(batch):
        out = dict(batch)
        r = np.asarray(batch["reward"], np.float64)
        keys = np.asarray(batch[field], dtype=object)
        z = np.zeros_like(r)
        for key in set(keys.tolist()):
            m = keys == key
            sd = r[m].std()
            z[m] = (r[m] - r[m].mean()) / (sd if sd > 0 else 1.0)
        out["reward"] = z.astype(np.float32)
        return out

    return transform
