"""Promise: replaystore.compat.cpprb behaves as cpprb's documentation says its
ReplayBuffer and PrioritizedReplayBuffer do (shapes, dtypes, positions, wrap-around,
clear, empty buffers, priorities and weights), with the data kept on disk."""

import numpy as np
import pytest

import replaystore as rs
from replaystore.compat import cpprb

ENV = {"obs": {"shape": 3}, "act": {"dtype": np.int16}, "rew": {}, "next_obs": {"shape": (3,)}, "done": {}}


def transition(i):
    return dict(obs=[i, i, i], act=i % 7, rew=float(i), next_obs=[i + 1] * 3, done=float(i % 5 == 4))


def test_defaults_shape_1_and_float32_so_scalars_sample_as_columns(tmp_path):
    with cpprb.ReplayBuffer(10, ENV, path=str(tmp_path / "b")) as rb:
        assert rb.add(**transition(0)) == 0
        s = rb.sample(4)
        assert set(s) == {"obs", "act", "rew", "next_obs", "done"}
        assert s["obs"].shape == (4, 3) and s["obs"].dtype == np.float32
        assert s["rew"].shape == (4, 1) and s["rew"].dtype == np.float32
        assert s["act"].shape == (4, 1) and s["act"].dtype == np.int16
        assert s["done"].shape == (4, 1)
        rb2 = cpprb.ReplayBuffer(4, {"x": {}}, default_dtype=np.float64)
        rb2.add(x=1)
        assert rb2.sample(1)["x"].dtype == np.float64
        rb2.close()


def test_add_takes_one_or_many_returns_the_first_position_and_wraps(tmp_path):
    with cpprb.ReplayBuffer(5, ENV, path=str(tmp_path / "b")) as rb:
        assert rb.get_stored_size() == 0 and rb.get_next_index() == 0
        assert rb.add(**transition(0)) == 0
        many = {k: np.stack([np.asarray(transition(i)[k]) for i in range(1, 4)]) for k in ENV}
        assert rb.add(**many) == 1
        assert (rb.get_stored_size(), rb.get_next_index()) == (4, 4)
        more = {k: np.stack([np.asarray(transition(i)[k]) for i in range(4, 7)]) for k in ENV}
        assert rb.add(**more) == 4  # positions 4, 0, 1
        assert (rb.get_stored_size(), rb.get_next_index(), rb.get_buffer_size()) == (5, 2, 5)
        # Position order, not age order: positions 0 and 1 hold transitions 5 and 6.
        allt = rb.get_all_transitions()
        assert allt["rew"].ravel().tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
        assert allt["act"].dtype == np.int16
        assert sorted(rb.get_all_transitions(shuffle=True)["rew"].ravel().tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]
        assert rb.get_current_episode_len() == 7
        rb.on_episode_end()
        assert rb.get_current_episode_len() == 0


def test_missing_keys_raise_keyerror_and_extra_keys_are_ignored(tmp_path):
    with cpprb.ReplayBuffer(5, ENV, path=str(tmp_path / "b")) as rb:
        t = transition(0)
        del t["rew"]
        with pytest.raises(KeyError):
            rb.add(**t)
        assert rb.get_stored_size() == 0
        rb.add(**transition(1), info=123)
        assert rb.get_stored_size() == 1


def test_clear_restarts_positions_and_an_empty_buffer_cannot_be_sampled(tmp_path):
    with cpprb.ReplayBuffer(5, ENV, path=str(tmp_path / "b")) as rb:
        with pytest.raises(ValueError):
            rb.sample(1)
        for i in range(3):
            rb.add(**transition(i))
        rb.clear()
        assert (rb.get_stored_size(), rb.get_next_index()) == (0, 0)
        assert rb.get_all_transitions()["obs"].shape == (0, 3)
        assert rb.add(**transition(9)) == 0
        assert rb.get_all_transitions()["rew"].ravel().tolist() == [9.0]


def test_the_data_stays_in_its_folder(tmp_path):
    path = str(tmp_path / "b")
    rb = cpprb.ReplayBuffer(10, ENV, path=path)
    for i in range(4):
        rb.add(**transition(i))
    rb.close()
    with rs.ReplayBuffer.open(path) as buf:
        assert len(buf) == 4
        assert buf.get([3])["rew"].ravel().tolist() == [3.0]


def test_prioritized_weights_indexes_and_updates(tmp_path):
    with cpprb.PrioritizedReplayBuffer(8, ENV, alpha=1.0, eps=0.0, path=str(tmp_path / "b")) as rb:
        assert rb.get_max_priority() == 1.0
        for i in range(8):
            rb.add(**transition(i))
        s = rb.sample(32, beta=0.5)
        assert {"weights", "indexes"} <= set(s)
        assert s["weights"].dtype == np.float32 and (s["weights"] <= 1.0).all()
        assert ((0 <= s["indexes"]) & (s["indexes"] < 8)).all()
        np.testing.assert_array_equal(s["rew"].ravel(), s["indexes"].astype(np.float32))
        rb.update_priorities(np.arange(8), [0.0] * 7 + [3.0])
        s = rb.sample(16)
        assert set(s["indexes"].tolist()) == {7}
        assert rb.get_max_priority() == 3.0
        with pytest.raises(TypeError):
            rb.update_priorities([0], None)
        # A priority given at add; wrong count is a ValueError.
        rb.add(**transition(8), priorities=[1e7])  # position 0: 3 in 10 million draws elsewhere
        s = rb.sample(16)
        assert set(s["indexes"].tolist()) == {0}
        with pytest.raises(ValueError, match="incompatible"):
            rb.add(**transition(9), priorities=[1.0, 2.0])


def test_check_for_update_skips_positions_written_since_the_sample(tmp_path):
    with cpprb.PrioritizedReplayBuffer(4, ENV, alpha=1.0, eps=0.0, check_for_update=True, path=str(tmp_path / "b")) as rb:
        for i in range(4):
            rb.add(**transition(i))
        rb.sample(4)
        rb.add(**transition(4))  # overwrites position 0
        rb.update_priorities([0, 1, 2, 3], [5.0, 0.0, 0.0, 1.0])
        # Position 0's new transition kept the largest priority (1), not 5.
        counts = np.bincount(rb.sample(4000)["indexes"].astype(int), minlength=4)
        assert counts[1] == counts[2] == 0
        assert abs(counts[0] - counts[3]) < 400, counts
