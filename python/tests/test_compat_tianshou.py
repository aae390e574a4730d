"""Promise: replaystore.compat.tianshou's plain-dict stand-ins (what the module gives
where Tianshou is not installed: ``replaystore.compat.tianshou._plain``) behave as
Tianshou's documentation says its
ReplayBuffer, VectorReplayBuffer and PrioritizedReplayBuffer do: add's return values, positions and wrap-around,
sample(0) oldest first, prev/next at episode and buffer boundaries, unfinished_index,
sub-buffer edges and proportional draws, importance weights and new items' priority."""

import numpy as np
import pytest

from replaystore.compat.tianshou import _plain as ts


def step(t, done=False, trunc=False):
    return {"obs": np.array([t, t], np.float32), "act": np.int64(t % 3), "rew": 1.0,
            "terminated": done, "truncated": trunc, "obs_next": np.array([t + 1, t + 1], np.float32)}


def test_add_returns_ptr_and_episode_statistics_when_the_episode_ends(tmp_path):
    buf = ts.ReplayBuffer(10, path=str(tmp_path / "b"))
    ptr, rew, n, idx = buf.add(step(0))
    assert (ptr.tolist(), rew.tolist(), n.tolist(), idx.tolist()) == ([0], [0.0], [0], [0])
    buf.add(step(1))
    ptr, rew, n, idx = buf.add(step(2, done=True))
    assert (ptr.tolist(), rew.tolist(), n.tolist(), idx.tolist()) == ([2], [3.0], [3], [0])
    ptr, rew, n, idx = buf.add(step(3, trunc=True))  # truncation ends an episode too
    assert (ptr.tolist(), n.tolist(), idx.tolist()) == ([3], [1], [3])
    assert len(buf) == 4
    b = buf[np.array([2, 3])]
    assert b["done"].tolist() == [True, True] and b["terminated"].tolist() == [True, False]
    assert b["obs"].tolist() == [[2, 2], [3, 3]] and b["act"].tolist() == [2, 0]
    buf.close()


def test_prev_next_stop_at_episode_edges_and_at_the_oldest_and_newest(tmp_path):
    buf = ts.ReplayBuffer(5, path=str(tmp_path / "b"))
    for t, d in enumerate([False, True, False, False, True, False, False]):
        buf.add(step(t, done=d))
    # 7 adds into 5: positions 0,1 hold steps 5,6; 2,3,4 hold steps 2,3,4 (4 ended).
    assert buf.sample_indices(0).tolist() == [2, 3, 4, 0, 1]
    assert buf[:]["obs"][:, 0].tolist() == [2, 3, 4, 5, 6]
    assert buf.prev(np.array([2, 3, 4, 0, 1])).tolist() == [2, 2, 3, 0, 0]
    assert buf.next(np.array([2, 3, 4, 0, 1])).tolist() == [3, 4, 4, 1, 1]
    assert buf.unfinished_index().tolist() == [1]
    buf.add(step(7, done=True))
    assert buf.unfinished_index().tolist() == []
    assert buf.sample_indices(-1).tolist() == []
    idx = buf.sample_indices(1000)
    assert idx.min() >= 0 and idx.max() < 5
    batch, ind = buf.sample(8)
    np.testing.assert_array_equal(batch["obs"][:, 0] % 1, 0)
    assert len(ind) == 8
    buf.reset()
    assert len(buf) == 0 and buf.sample_indices(0).tolist() == []
    assert buf.add(step(9))[0].tolist() == [0]
    buf.close()


def test_obs_next_can_come_from_the_next_step(tmp_path):
    buf = ts.ReplayBuffer(5, ignore_obs_next=True, path=str(tmp_path / "b"))
    for t in range(3):
        buf.add(step(t, done=t == 2))
    b = buf[np.array([0, 1, 2])]
    # obs_next is obs at next(); at an episode's end next() stays put.
    assert b["obs_next"][:, 0].tolist() == [1, 2, 2]
    buf.close()


def test_vector_buffer_offsets_adds_and_draws_per_ring(tmp_path):
    vb = ts.VectorReplayBuffer(9, 3, path=str(tmp_path / "v"))
    assert vb.subbuffer_edges.tolist() == [0, 3, 6, 9]
    batch = {k: np.stack([np.asarray(step(10 * e)[k]) for e in range(3)]) for k in step(0)}
    ptr, rew, n, idx = vb.add(batch)
    assert ptr.tolist() == [0, 3, 6] and idx.tolist() == [0, 3, 6]
    two = {k: v[:2] for k, v in batch.items()}
    two["terminated"] = np.array([True, False])
    ptr, rew, n, idx = vb.add(two, buffer_ids=[2, 0])
    assert ptr.tolist() == [7, 1] and n.tolist() == [2, 0] and idx.tolist() == [6, 0]
    assert len(vb) == 5
    assert vb.sample_indices(0).tolist() == [0, 1, 3, 6, 7]
    assert vb.unfinished_index().tolist() == [1, 3]
    assert vb.prev(np.array([1, 3, 7])).tolist() == [0, 3, 6]
    assert vb.next(np.array([0, 3, 7])).tolist() == [1, 3, 7]
    got = vb[np.array([7, 0, 3])]
    assert got["obs"][:, 0].tolist() == [0, 0, 10] and got["done"].tolist() == [True, False, False]
    # Rings are drawn in proportion to their lengths (2, 1, 2 of 5).
    counts = np.bincount(np.searchsorted(vb.subbuffer_edges, vb.sample_indices(20_000), side="right") - 1, minlength=3)
    np.testing.assert_allclose(counts / 20_000, [0.4, 0.2, 0.4], atol=0.02)
    vb.close()


def test_vector_buffer_with_an_empty_ring_and_more_draws_than_items(tmp_path):
    vb = ts.VectorReplayBuffer(4, 2, path=str(tmp_path / "v"))
    vb.add({k: np.asarray(v)[None] for k, v in step(1).items()}, buffer_ids=[1])
    idx = vb.sample_indices(10)
    assert idx.tolist() == [2] * 10
    assert vb.unfinished_index().tolist() == [2]
    vb.close()


def test_prioritized_weights_follow_tianshous_formula_and_new_items_get_the_max(tmp_path):
    alpha, beta = 0.5, 0.4
    buf = ts.PrioritizedReplayBuffer(8, alpha, beta, path=str(tmp_path / "p"))
    with pytest.raises(ValueError):  # as Tianshou: np.random.choice(0, n) on an empty ring
        buf.sample(4)
    for t in range(5):
        buf.add(step(t))
    # Every priority starts at 1: every weight is 1.
    b, idx = buf.sample(0)
    assert idx.tolist() == [0, 1, 2, 3, 4] and b["weight"].tolist() == [1.0] * 5
    buf.update_weight([1, 3], np.array([-4.0, 0.25]))
    eps = np.finfo(np.float32).eps
    prio = {0: 1.0, 1: 4.0 + eps, 2: 1.0, 3: 0.25 + eps, 4: 1.0}
    min_prio = 0.25 + eps
    raw = np.array([(prio[i] ** alpha / min_prio) ** -beta for i in range(5)])
    np.testing.assert_allclose(buf.get_weight(np.arange(5)), raw)
    np.testing.assert_allclose(buf[np.arange(5)]["weight"], raw / raw.max())
    # A new transition gets the largest priority ever set.
    buf.add(step(5))
    np.testing.assert_allclose(buf.get_weight([5]), raw[1])
    # Draws follow priority ** alpha: position 1 and 5 hold 2 / (2 + 2 + 3 + 0.5) of it.
    buf.update_weight([0, 2, 3, 4], np.zeros(4))
    b, idx = buf.sample(2000)
    share = np.isin(idx, [1, 5]).mean()
    assert share > 0.99, share
    np.testing.assert_array_equal(b["obs"][:, 0], idx)  # rows are the drawn positions
    buf.set_beta(0.0)
    assert np.all(buf[np.arange(6)]["weight"] == 1.0)
    buf.close()


def test_prioritized_weights_without_norm_and_across_wrap_around(tmp_path):
    buf = ts.PrioritizedReplayBuffer(4, 1.0, 1.0, weight_norm=False, path=str(tmp_path / "p"))
    for t in range(6):  # positions 0 and 1 are overwritten by t = 4, 5
        buf.add(step(t))
    assert buf[np.arange(4)]["obs"][:, 0].tolist() == [4, 5, 2, 3]
    buf.update_weight([0], [2.0])
    eps = np.finfo(np.float32).eps
    np.testing.assert_allclose(buf[[0, 1]]["weight"], [1.0 / (2.0 + eps), 1.0])
    buf.update_weight([2], [0.5])
    np.testing.assert_allclose(buf[[0, 1, 2]]["weight"], [(0.5 + eps) / (2.0 + eps), 0.5 + eps, 1.0])
    buf.close()
