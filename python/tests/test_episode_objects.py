"""Promise (issue 32, point 4): a whole episode goes in with one add_episode call, and
comes back as an Episode view whose getters read as RLlib's SingleAgentEpisode
documents them (indices, lists, slices, negative indices into the lookback, fill,
one_hot_discrete), with cut, slice, len, is_done/is_terminated/is_truncated,
t_started and to_numpy."""

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"obs": "int64", "action": "int64", "reward": "float32", "info": "int32"}


@pytest.fixture
def buf(tmp_path):
    with rs.ReplayBuffer.create(str(tmp_path / "e"), SCHEMA, 100, episodic=True) as b:
        yield b


def rllib_episode(buf, terminated=True):
    """RLlib's docstring example: observations [0, 1, 2, 3], actions [1, 2, 3],
    rewards [1, 2, 3]."""
    rec = buf.add_episode(
        {
            "obs": np.array([0, 1, 2, 3]),
            "action": np.array([1, 2, 3]),
            "reward": np.array([1.0, 2.0, 3.0], np.float32),
            "info": np.array([10, 20, 30], np.int32),
        },
        terminated=terminated,
    )
    return buf.get_episode(rec["id"])


def test_add_episode_stores_the_rows_add_step_would(buf):
    ep = rllib_episode(buf)
    rec = buf.episodes()[0]
    assert (rec["rows"], rec["steps"], rec["terminated"], rec["ret"]) == (4, 3, True, 6.0)
    assert len(ep) == 3 and ep.is_done and ep.is_terminated and not ep.is_truncated
    assert ep.t_started == 0
    with pytest.raises(rs.SchemaError):
        buf.add_episode({"obs": np.array([0, 1, 2]), "action": np.array([1])})
    assert len(buf.episodes()) == 1, "a refused episode adds nothing"


def test_getters_read_as_rllib_documents(buf):
    ep = rllib_episode(buf)
    assert ep.get_observations(-1) == 3
    assert ep.get_observations([0, -1]).tolist() == [0, 3]
    assert ep.get_observations(slice(None, 2)).tolist() == [0, 1]
    assert ep.get_observations(slice(-2, None)).tolist() == [2, 3]
    assert ep.get_actions().tolist() == [1, 2, 3]
    assert ep.get_actions(-1) == 3
    assert ep.get_rewards(slice(1, None)).tolist() == [2.0, 3.0]
    assert ep.get_infos(0) == 10
    assert ep.get_extra_model_outputs("info", [0, 2]).tolist() == [10, 30]
    assert ep.get_actions([0, 2], one_hot_discrete=4).tolist() == [[0, 1, 0, 0], [0, 0, 0, 1]]
    with pytest.raises(rs.Error):
        ep.get_observations(9)
    assert ep.get_observations([0, 9], fill=-10).tolist() == [0, -10]
    data = ep.to_numpy()
    assert data["obs"].tolist() == [0, 1, 2, 3] and data["action"].tolist() == [1, 2, 3]


def test_lookback_through_slice_and_cut(buf):
    ep = rllib_episode(buf, terminated=False)
    # ts = 0 at observation 2, with observations 0 and 1 as the lookback buffer.
    tail = ep.slice(slice(2, None), len_lookback_buffer=2)
    assert tail.t_started == 2 and len(tail) == 1
    assert tail.get_observations().tolist() == [2, 3]
    assert tail.get_observations(-1, neg_index_as_lookback=True) == 1
    assert tail.get_observations([-2, -1], neg_index_as_lookback=True).tolist() == [0, 1]
    assert tail.get_observations(slice(-2, 1), neg_index_as_lookback=True).tolist() == [0, 1, 2]
    assert tail.get_observations(
        slice(-3, 1), neg_index_as_lookback=True, fill=-10).tolist() == [-10, 0, 1, 2]
    mid = ep.slice(slice(1, 3))
    assert mid.get_observations().tolist() == [1, 2, 3] and mid.get_actions().tolist() == [2, 3]
    # cut: the unfinished episode goes on from its newest observation.
    cont = ep.cut(len_lookback_buffer=1)
    assert cont.t_started == 3 and len(cont) == 0
    assert cont.get_observations(-1, neg_index_as_lookback=True) == 2
    buf.add_step(obs=4, action=4, reward=4.0, info=40, terminated=True)
    assert len(cont) == 1 and cont.get_actions().tolist() == [4] and cont.is_terminated


def test_iter_episodes_gives_a_view_per_stored_episode(buf):
    rllib_episode(buf)
    rllib_episode(buf)
    views = buf.iter_episodes()
    assert [v.id for v in views] == [0, 1]
    assert all(v.get_observations().tolist() == [0, 1, 2, 3] for v in views)
    assert repr(views[1]).startswith("Episode(id=1")


@pytest.mark.parametrize("steps", [3, 40])
def test_getters_of_large_and_small_episodes_equal_the_arrays_added(tmp_path, steps):
    """Entries past 64 KB are handed to NumPy without a copy, smaller ones copied; runs
    of consecutive entries are read as one: every dtype, index form and fill reads as
    NumPy indexing of the arrays added."""
    schema = {"obs": ("float32", (32, 32)), "frame": ("uint8", (96, 96)),
              "done": ("bool", (64, 64)), "action": "int64", "reward": "float32"}
    rng = np.random.default_rng(steps)
    data = {
        "obs": rng.standard_normal((steps + 1, 32, 32)).astype(np.float32),
        "frame": rng.integers(0, 255, (steps + 1, 96, 96), dtype=np.uint8),
        "done": rng.random((steps + 1, 64, 64)) < 0.5,
        "action": rng.integers(0, 9, steps),
        "reward": rng.standard_normal(steps).astype(np.float32),
    }
    with rs.ReplayBuffer.create(str(tmp_path / "b"), schema, 4 * steps + 8,
                                episodic=True) as buf:
        rec = buf.add_episode(data, truncated=True)
        ep = buf.get_episode(rec["id"])
        for field in ("obs", "frame", "done"):
            got = ep.get_observations(field=field)
            assert got.dtype == data[field].dtype and got.shape == data[field].shape
            np.testing.assert_array_equal(got, data[field])
            for index in (slice(1, None, 2), [0, -1, 2, 1], -2, slice(-3, None)):
                np.testing.assert_array_equal(ep.get_observations(index, field=field),
                                              data[field][index])
            # Entries before the episode filled, the rest read: fill and runs mixed.
            filled = ep.get_observations(slice(-2, 3), neg_index_as_lookback=True, fill=0,
                                         field=field)
            np.testing.assert_array_equal(filled[:2], np.zeros_like(data[field][:2]))
            np.testing.assert_array_equal(filled[2:], data[field][:3])
        np.testing.assert_array_equal(ep.get_actions(), data["action"])
        np.testing.assert_array_equal(ep.get_rewards(slice(1, None)), data["reward"][1:])
        arrays = ep.to_numpy()
        np.testing.assert_array_equal(arrays["obs"], data["obs"])
        # A field that is not the observation reads as a step entry: rows 1.. of it.
        np.testing.assert_array_equal(arrays["frame"], data["frame"][1:])
        big = ep.get_observations(field="frame")
        big[:] = 0  # the caller's own memory: the buffer keeps its bytes
        np.testing.assert_array_equal(ep.get_observations(field="frame"), data["frame"])
