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


def test_unknown_constructor_keywords_are_ignored_as_cpprb_ignores_them_with_a_warning(tmp_path):
    # cpprb's own tests call create_buffer(size, obs_shape=..., act_dim=...,
    # is_discrete_action=...), which cpprb passes on to constructors that ignore them.
    with pytest.warns(UserWarning, match="act_dim, is_discrete_action, obs_shape"):
        rb = cpprb.create_buffer(8, {"x": {}}, obs_shape=(2, 3), act_dim=4,
                                 is_discrete_action=True, prioritized=True)
    assert isinstance(rb, cpprb.PrioritizedReplayBuffer)
    rb.close()


def test_positions_never_written_read_as_zeros_as_in_cpprbs_zeroed_ring(tmp_path):
    with cpprb.ReplayBuffer(6, ENV, path=str(tmp_path / "b")) as rb:
        rb.add(**transition(3))
        got = rb._encode_sample([0, 1, 5])
        assert got["obs"].tolist() == [[3, 3, 3], [0, 0, 0], [0, 0, 0]]
        assert got["act"].dtype == np.int16 and got["act"].ravel().tolist() == [3, 0, 0]


def test_the_largest_priority_is_cpprbs_without_eps_and_at_least_one(tmp_path):
    with cpprb.PrioritizedReplayBuffer(4, {"x": {}}, eps=0.25, path=str(tmp_path / "b")) as rb:
        rb.add(x=1.0)
        assert rb.get_max_priority() == 1.0
        rb.update_priorities([0], [0.5])
        assert rb.get_max_priority() == 1.0
        rb.update_priorities([0], [2.0])
        assert rb.get_max_priority() == 2.0


@pytest.mark.parametrize("dtype", [np.float16, np.complex64, np.complex128, np.longdouble,
                                   np.dtype(">f4"), np.dtype(">i2")])
def test_dtypes_the_engine_lacks_are_kept_as_their_bytes_and_read_back_as_the_dtype(tmp_path, dtype):
    path = str(tmp_path / "b")
    values = (np.arange(6).reshape(3, 2) * 1.5).astype(dtype)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * values.astype(dtype)
    with cpprb.ReplayBuffer(4, {"v": {"dtype": dtype, "shape": 2}}, path=path) as rb:
        rb.add(v=values)
    with cpprb.ReplayBuffer(4, {"v": {"dtype": dtype, "shape": 2}}, path=path) as rb:
        got = rb.get_all_transitions()["v"]
        assert got.dtype == np.dtype(dtype) and got.shape == (3, 2)
        np.testing.assert_array_equal(got, values)


def test_train_runs_cpprbs_loop_on_these_buffers_and_updates_priorities(tmp_path):
    class Env:
        def __init__(self):
            self.t = 0

        def reset(self):
            return np.zeros(2)

        def step(self, action):
            self.t += 1
            return np.full(2, self.t), 1.0, float(self.t % 4 == 0), {}

    rb = cpprb.PrioritizedReplayBuffer(32, {"obs": {"shape": 2}, "act": {}, "rew": {},
                                            "next_obs": {"shape": 2}, "done": {}},
                                       path=str(tmp_path / "b"))
    episodes = []
    cpprb.train(rb, Env(), lambda obs, step, episode, warmup: 0.0,
                lambda sample, step, episode: np.full(len(sample["indexes"]), 3.0),
                max_steps=20, batch_size=4, n_warmups=3,
                episode_callback=lambda e, s, r: episodes.append((e, s)))
    assert rb.get_stored_size() == 20
    assert episodes == [(e, 3) for e in range(5)]
    assert rb.get_max_priority() == 3.0
    with pytest.raises(ValueError, match="too big"):
        cpprb.train(rb, Env(), None, None, max_steps=2**64)
    rb.close()


def test_a_prioritized_draw_from_an_empty_buffer_returns_what_cpprb_returns(tmp_path):
    # cpprb 11: PrioritizedReplayBuffer(8, ...).sample(3) gives indexes [7, 7, 7] and
    # NaN weights.
    with cpprb.PrioritizedReplayBuffer(8, {"x": {}}, path=str(tmp_path / "b")) as rb:
        s = rb.sample(3)
        assert s["indexes"].tolist() == [7, 7, 7]
        assert np.isnan(s["weights"]).all() and s["x"].shape == (3, 1)


def test_one_priority_is_given_to_every_index_of_the_update(tmp_path):
    with cpprb.PrioritizedReplayBuffer(8, {"x": {}}, path=str(tmp_path / "b")) as rb:
        rb.add(x=np.arange(4.0))
        rb.update_priorities([0, 1, 2, 3], 5.0)
        assert rb.get_max_priority() == 5.0
        with pytest.raises(ValueError, match="4 indexes and 2 priorities"):
            rb.update_priorities([0, 1, 2, 3], [1.0, 2.0])


def test_a_buffer_without_fields_is_made_as_cpprb_makes_it(tmp_path):
    with cpprb.ReplayBuffer(8, {}, path=str(tmp_path / "b")) as rb:
        assert rb.get_stored_size() == 0 and rb.get_buffer_size() == 8


def test_an_add_stores_what_it_was_given_whatever_the_inputs_layout(tmp_path):
    """Arrays already of the field's dtype and shape are passed to the engine as they
    are; any other input (strided, another dtype, a scalar, a list, items of another
    shape) is converted first. Each kind must read back as its values."""
    env = {"obs": {"shape": (2, 3)}, "act": {"dtype": np.int16}, "rew": {}}
    grid = np.arange(48, dtype=np.float32).reshape(4, 2, 6)
    with cpprb.ReplayBuffer(16, env, path=str(tmp_path / "b")) as rb:
        inputs = [
            # Prepared: float32 items of (2, 3), contiguous.
            dict(obs=np.ones((2, 2, 3), np.float32), act=np.array([[1], [2]], np.int16),
                 rew=np.array([[0.5], [1.5]], np.float32)),
            # Strided: every other column of a wider array, right dtype and item shape.
            dict(obs=grid[:, :, ::2], act=np.array([3, 4, 5, 6], np.int16), rew=[1, 2, 3, 4]),
            # Another dtype (float64, int64), a scalar, a flat list of one item.
            dict(obs=np.full((1, 2, 3), 7.25), act=np.int64(9), rew=2.5),
            dict(obs=list(range(6)), act=[10], rew=[3.0]),
        ]
        for batch in inputs:
            rb.add(**batch)
        got = rb.get_all_transitions()
    want_obs = np.concatenate([np.ones((2, 2, 3)), grid[:, :, ::2], np.full((1, 2, 3), 7.25),
                               np.arange(6).reshape(1, 2, 3)]).astype(np.float32)
    np.testing.assert_array_equal(got["obs"], want_obs)
    assert got["act"].ravel().tolist() == [1, 2, 3, 4, 5, 6, 9, 10]
    assert got["rew"].ravel().tolist() == [0.5, 1.5, 1, 2, 3, 4, 2.5, 3.0]
    assert got["obs"].dtype == np.float32 and got["act"].dtype == np.int16
