"""Promise (issue 33.3): dict observations end to end. A Dict space's schema takes
nested dicts (and Tianshou-style batches) in add / add_batch, gives them back nested
with sample(..., nested=True) (the same arrays, no copy), names them by prefix in
sample_transitions, and from_spaces takes an env but refuses a vector env's batched
spaces with the single-env spaces to use."""

import numpy as np
import pytest

import replaystore as rs

gym = pytest.importorskip("gymnasium")
spaces = gym.spaces

OBS = spaces.Dict({"pos": spaces.Box(-1, 1, (3,), np.float32),
                   "grid": spaces.Box(0, 255, (4, 4), np.uint8),
                   "inner": spaces.Dict({"k": spaces.Discrete(5)})})
ACT = spaces.Discrete(2)


def obs(i):
    return {"pos": np.full(3, i, np.float32), "grid": np.full((4, 4), i % 256, np.uint8),
            "inner": {"k": np.int64(i % 5)}}


class Batch:
    """What Tianshou's Batch offers a consumer here: items()."""

    def __init__(self, **kw):
        self._d = kw

    def items(self):
        return self._d.items()


def test_nested_dicts_in_and_out(tmp_path):
    schema = rs.Schema.from_spaces(OBS, ACT)
    assert "obs.inner.k" in [f[0] for f in schema.fields]
    with rs.ReplayBuffer.create(str(tmp_path / "b"), schema, 64, seed=1) as buf:
        for i in range(10):
            buf.add(obs=obs(i), action=i % 2, reward=np.float32(i), next_obs=obs(i + 1),
                    terminated=False, truncated=False)
        n = 5
        stacked = {"pos": np.stack([obs(i)["pos"] for i in range(10, 15)]),
                   "grid": np.stack([obs(i)["grid"] for i in range(10, 15)]),
                   "inner": Batch(k=np.arange(10, 15) % 5)}
        buf.add_batch({"obs": stacked, "action": np.zeros(n, np.int64),
                       "reward": np.zeros(n, np.float32), "next_obs": stacked,
                       "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool)})
        b = buf.sample(32, nested=True)
        assert set(b) >= {"obs", "next_obs", "action", "indices"}
        assert set(b["obs"]) == {"pos", "grid", "inner"} and set(b["obs"]["inner"]) == {"k"}
        i = b["indices"].astype(np.int64)
        np.testing.assert_array_equal(b["obs"]["pos"][:, 0], i)
        np.testing.assert_array_equal(b["obs"]["grid"][:, 0, 0], i % 256)
        np.testing.assert_array_equal(b["obs"]["inner"]["k"], i % 5)
        flat = buf.sample(4, seed=3)
        again = rs.nest(flat)
        assert again["obs"]["pos"] is flat["obs.pos"], "nesting shares the arrays"
        with pytest.raises(rs.SchemaError, match="unknown field"):
            buf.add(obs=obs(0), nope={"x": 1}, action=0, reward=np.float32(0),
                    next_obs=obs(0), terminated=False, truncated=False)


def test_transitions_name_a_dict_observation_by_its_prefix(tmp_path):
    schema = rs.Schema({"obs.pos": ("float32", (3,)), "obs.vel": ("float32", (2,)),
                        "action": "int64", "reward": "float32"})
    with rs.ReplayBuffer.create(str(tmp_path / "e"), schema, 64, episodic=True) as buf:
        t = np.arange(6, dtype=np.float32)
        buf.add_episode({"obs": {"pos": np.repeat(t[:, None], 3, 1),
                                 "vel": np.repeat(t[:, None], 2, 1)},
                         "action": np.arange(5), "reward": np.ones(5, np.float32)},
                        terminated=True)
        b = buf.sample_transitions(16, "obs", nstep=2, gamma=1.0, nested=True)
        assert set(b["obs"]) == {"pos", "vel"} and set(b["next_obs"]) == {"pos", "vel"}
        np.testing.assert_array_equal(b["next_obs"]["pos"][:, 0],
                                      np.minimum(b["obs"]["pos"][:, 0] + 2, 5))


def test_from_spaces_takes_an_env_and_refuses_a_vector_env(tmp_path):
    env = gym.make("CartPole-v1")
    schema = rs.Schema.from_spaces(env)
    assert dict((f[0], f[2]) for f in schema.fields)["obs"] == (4,)
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    with pytest.raises(rs.SchemaError, match="single_observation_space"):
        rs.Schema.from_spaces(venv)
    single = rs.Schema.from_spaces(venv.single_observation_space, venv.single_action_space)
    assert single == schema
    with pytest.raises(TypeError, match="or an env with those attributes, not a int"):
        rs.Schema.from_spaces(3)
    venv.close()
    env.close()
