"""Promise (issue 32, point 2): sample_transitions relabels goals in hindsight as SB3's
HerReplayBuffer does (n_sampled_goal=k relabels k/(k+1) of each batch, goals by the
strategy) and gives the relabeled transitions the rewards of the user's vectorized
compute_reward, called once per batch; the others keep the rewards stored. A Reader
draws the same for the same seed."""

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {
    "observation": ("float32", (4,)),
    "achieved_goal": ("float32", (3,)),
    "desired_goal": ("float32", (3,)),
    "action": ("float32", (2,)),
    "reward": "float32",
}
OBS = ["observation", "achieved_goal", "desired_goal"]


def compute_reward(achieved, desired, info):
    """FetchReach's: 0 within 5 cm of the goal, else -1 (vectorized)."""
    return -(np.linalg.norm(achieved - desired, axis=-1) > 0.05).astype(np.float32)


@pytest.fixture
def fetch(tmp_path):
    path = str(tmp_path / "her")
    buf = rs.ReplayBuffer.create(path, SCHEMA, 10_000, episodic=True, seed=4)
    rng = np.random.default_rng(0)
    for _ in range(20):  # 50-step episodes, as Fetch's
        goal = rng.uniform(-1, 1, 3).astype(np.float32)
        pos = np.zeros(3, np.float32)
        buf.add_reset(observation=np.zeros(4, np.float32), achieved_goal=pos, desired_goal=goal)
        for t in range(1, 51):
            pos = pos + rng.normal(0, 0.1, 3).astype(np.float32)
            r = compute_reward(pos, goal, None)
            buf.add_step(
                observation=np.zeros(4, np.float32),
                achieved_goal=pos,
                desired_goal=goal,
                action=np.zeros(2, np.float32),
                reward=float(r),
                truncated=t == 50,
            )
    yield path, buf
    buf.close()


def test_relabeled_transitions_get_the_rewards_of_compute_reward(fetch):
    path, buf = fetch
    calls = []

    def counted(achieved, desired, info):
        calls.append(len(achieved))
        return compute_reward(achieved, desired, info)

    b = buf.sample_transitions(
        256, OBS, goal="desired_goal", achieved="achieved_goal", strategy="future",
        n_sampled_goal=4, compute_reward=counted, seed=1,
    )
    rel = b["relabeled"]
    assert rel.sum() == round(256 * 4 / 5) and rel[: rel.sum()].all()
    assert calls == [rel.sum()], "compute_reward runs once per batch, on the relabeled rows"
    want = compute_reward(b["next_achieved_goal"], b["desired_goal"], None)
    np.testing.assert_array_equal(b["reward"][rel], want[rel])
    np.testing.assert_array_equal(b["returns"][rel], want[rel])
    # A relabeled goal is a goal reached later in the episode, often the next one.
    assert (b["reward"][rel] == 0).mean() > (b["reward"][~rel] == 0).mean()
    # The others keep their goal and the reward stored with it (which the episodes
    # were given by the same function).
    np.testing.assert_array_equal(b["reward"][~rel], compute_reward(
        b["next_achieved_goal"][~rel], b["desired_goal"][~rel], None))
    assert (b["next_desired_goal"] == b["desired_goal"]).all()


def test_each_strategy_draws_goals_where_it_says(fetch):
    _, buf = fetch
    for strategy in ["future", "final", "episode", "random"]:
        b = buf.sample_transitions(
            512, OBS, goal="desired_goal", achieved="achieved_goal", strategy=strategy,
            n_sampled_goal=1, seed=2,
        )
        rel, rows, idx = b["relabeled"], b["goal_indices"], b["indices"]
        assert rel.sum() == 256
        ep = lambda i: i // 51  # 51 rows per episode
        if strategy == "future":
            assert ((rows >= idx) & (ep(rows) == ep(idx)))[rel].all()
        elif strategy == "final":
            assert (rows[rel] % 51 == 50).all() and (ep(rows) == ep(idx))[rel].all()
        elif strategy == "episode":
            assert (ep(rows) == ep(idx))[rel].all() and (rows[rel] % 51 > 0).all()
        else:
            assert len(set(ep(rows[rel]).tolist())) > 10, "goals from many episodes"
        assert (rows[~rel] == idx[~rel]).all()


def test_a_reader_relabels_as_the_writer_does(fetch):
    path, buf = fetch
    args = dict(goal="desired_goal", achieved="achieved_goal", strategy="episode",
                n_sampled_goal=4, compute_reward=compute_reward, seed=9)
    w = buf.sample_transitions(64, OBS, **args)
    r = rs.Reader.open(path).sample_transitions(64, OBS, **args)
    for k in ["indices", "goal_indices", "desired_goal", "reward"]:
        np.testing.assert_array_equal(w[k], r[k])


def test_bad_relabel_arguments_are_value_errors(fetch):
    _, buf = fetch
    with pytest.raises(ValueError):
        buf.sample_transitions(4, OBS, goal="desired_goal")
    with pytest.raises(ValueError):
        buf.sample_transitions(4, OBS, goal="desired_goal", achieved="achieved_goal",
                               strategy="nearest")
    with pytest.raises(rs.Error, match="one step"):
        buf.sample_transitions(4, OBS, goal="desired_goal", achieved="achieved_goal", nstep=3)
