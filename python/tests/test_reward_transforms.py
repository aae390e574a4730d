"""Promise (issue 32, point 3): UnstableBaselines' three reward transforms apply where it
applies them, each exactly once: the final one per trajectory, the step one per step,
the sampling one per drawn batch. Each step keeps its raw, trajectory and step reward,
so a changed transform can be applied again from the raw ones; the stored rows survive
reopening."""

import numpy as np

import replaystore as rs
from replaystore import rewards

SCHEMA = {**rewards.FIELDS, "pid": "int8", "env_id": "str", "obs": "str", "act": "str"}


class Counted:
    """A transform that counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def win_loss(reward, pid, env_id):
    return {1.0: 1.0, 0.0: -1.0, 0.5: 0.0}[reward]


def format_penalty(player_traj, step_index, reward):
    return reward - 0.5 if player_traj["bad"][step_index] else reward


def trajectories(buf, t):
    """Two games of two players on two envs."""
    games = [
        ("TicTacToe-v0", [1.0, 0.0], 3),
        ("Kuhn-v0", [0.5, 0.5], 2),
    ]
    added = 0
    for env_id, finals, steps in games:
        for pid, final in enumerate(finals):
            traj = {"bad": [i == 1 for i in range(steps)]}
            rewards.add_trajectory(
                buf,
                {"obs": [f"{env_id} p{pid} s{i}" for i in range(steps)],
                 "act": [f"a{i}" for i in range(steps)]},
                final_reward=final, pid=pid, env_id=env_id, transforms=t, trajectory=traj,
            )
            added += steps
    return added


def test_each_transform_runs_exactly_once_where_unstable_baselines_runs_it(tmp_path):
    final, step = Counted(win_loss), Counted(format_penalty)
    sampling = Counted(rewards.normalize_by("env_id"))
    t = rewards.RewardTransforms(final=final, step=step, sampling=sampling)
    path = str(tmp_path / "b")
    with rs.ReplayBuffer.create(path, SCHEMA, 100, fragments=True, item_states=True) as buf:
        steps = trajectories(buf, t)
        assert (final.calls, step.calls) == (4, steps)
        everything = buf.get(np.arange(steps, dtype=np.uint64))
        tic = np.array([e == "TicTacToe-v0" for e in everything["env_id"]])
        # Player 0 won TicTacToe: raw 1 -> env 1 -> step 1, and 0.5 on its bad step.
        p0 = tic & (everything["pid"] == 0)
        assert everything["raw_reward"][p0].tolist() == [1.0, 1.0, 1.0]
        assert everything["env_reward"][p0].tolist() == [1.0, 1.0, 1.0]
        assert everything["reward"][p0].tolist() == [1.0, 0.5, 1.0]
        assert everything["step_index"][p0].tolist() == [0, 1, 2]
        batch = rewards.sample(buf, 6, t, remove=True)
        assert sampling.calls == 1
        assert len(buf) == steps - 6
        assert "raw_reward" in batch and "env_reward" in batch
        # Normalised within each env of the batch: mean 0 per env present.
        for env in set(batch["env_id"]):
            m = np.array([e == env for e in batch["env_id"]])
            assert abs(batch["reward"][m].mean()) < 1e-5
    # The stored rewards come back after reopening, untouched by the sampling transform.
    with rs.ReplayBuffer.open(path) as buf:
        left = buf.sample(len(buf), replace=False)
        assert len(left["reward"]) == steps - 6
        assert set(left["reward"].tolist()) <= {1.0, 0.5, -1.0, -1.5, 0.0, -0.5}


def test_a_changed_transform_applies_again_from_the_raw_rewards(tmp_path):
    first = rewards.RewardTransforms(final=win_loss)
    with rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, 100, fragments=True) as buf:
        steps = trajectories(buf, first)
        stored = buf.get(np.arange(steps, dtype=np.uint64))
        # A new final transform (a draw is now worth 0.25), and a new step transform
        # that reads the stored row instead of the trajectory object.
        new_final = lambda reward, pid, env_id: {1.0: 1.0, 0.0: -1.0, 0.5: 0.25}[float(reward)]
        new_step = lambda player_traj, step_index, reward: reward * (0.9 ** step_index)
        again = rewards.retransform(stored, rewards.RewardTransforms(new_final, new_step))
        want = np.array(
            [new_final(r, 0, "") * 0.9 ** i
             for r, i in zip(stored["raw_reward"], stored["step_index"])], np.float32)
        np.testing.assert_allclose(again["reward"], want, rtol=1e-6)
        np.testing.assert_array_equal(again["raw_reward"], stored["raw_reward"])
        kuhn = np.array([e == "Kuhn-v0" for e in stored["env_id"]])
        assert (again["env_reward"][kuhn] == 0.25).all()
