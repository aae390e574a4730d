"""Promise: without Ray, replaystore.compat.rllib's stand-ins store and sample items as RLlib's
says for each storage unit (timesteps, sequences, episodes, fragments), counts
timesteps in stats, weights and batch_indexes per timestep when prioritized, and saves
and restores its state."""

import pickle

import numpy as np
import pytest

from replaystore.compat.rllib import _plain as rllib  # the stand-ins used where Ray is not installed


def batch(lo, hi, eps_len=None, ended=True):
    t = np.arange(lo, hi)
    b = {"obs": np.stack([t, -t], 1).astype(np.float32), "actions": t.astype(np.int64),
         "rewards": t.astype(np.float32)}
    if eps_len:
        b["eps_id"] = t // eps_len
        b["t"] = t % eps_len
        done = (t % eps_len) == eps_len - 1
        if not ended:
            done[-1] = False
        b["terminateds"] = done
    return b


def test_timesteps_are_items_and_capacity_counts_them(tmp_path):
    rb = rllib.ReplayBuffer(capacity=10, storage_unit="timesteps", path=str(tmp_path / "b"))
    with pytest.raises(ValueError):
        rb.sample(1)
    rb.add(batch(0, 4))
    assert len(rb) == 4
    s = rb.sample(5)
    assert s["obs"].shape == (5, 2) and set(s) == {"obs", "actions", "rewards"}
    np.testing.assert_array_equal(s["obs"][:, 0], s["actions"])
    rb.add(batch(4, 15))
    st = rb.stats()
    assert (len(rb), st["added_count"], st["num_entries"]) == (10, 15, 10)
    assert st["eviction_started"] is True and st["sampled_count"] == 5
    assert rb.sample(0) == {}
    assert set(rb.sample(200)["actions"].tolist()) == set(range(5, 15))
    with pytest.raises(ValueError):
        rllib.ReplayBuffer(capacity=0)
    with pytest.raises(ValueError):
        rllib.ReplayBuffer(storage_unit="minutes")
    rb.close()


def test_episodes_are_split_by_eps_id_and_incomplete_ones_dropped(tmp_path):
    rb = rllib.ReplayBuffer(capacity=100, storage_unit="episodes", path=str(tmp_path / "b"))
    rb.add(batch(0, 12, eps_len=4))        # episodes 0, 1, 2
    rb.add(batch(12, 18, eps_len=4, ended=False))  # episode 3 whole; 4 cut (t starts 0, no end)
    assert len(rb) == 4
    s = rb.sample(8)
    assert len(s["actions"]) == 32  # 8 episodes of 4 steps, concatenated
    for ep in s["actions"].reshape(8, 4):
        assert ep.tolist() == list(range(ep[0], ep[0] + 4)) and ep[0] % 4 == 0
    rb.add(batch(2, 4, eps_len=4))  # starts mid-episode (t == 2): dropped
    assert len(rb) == 4
    rb.close()


def test_sequences_follow_seq_lens_and_come_back_with_them(tmp_path):
    rb = rllib.ReplayBuffer(capacity=100, storage_unit="sequences", path=str(tmp_path / "b"))
    b = batch(0, 10)
    b["seq_lens"] = np.array([3, 5, 2])
    rb.add(b)
    assert len(rb) == 3
    s = rb.sample(20)
    assert s["seq_lens"].sum() == len(s["actions"])
    at = 0
    for n in s["seq_lens"]:
        seq = s["actions"][at:at + n].tolist()
        assert seq in ([0, 1, 2], [3, 4, 5, 6, 7], [8, 9])
        at += n
    rb.close()


def test_fragments_keep_each_add_whole_and_eviction_drops_cut_ones(tmp_path):
    rb = rllib.ReplayBuffer(capacity=10, storage_unit="fragments", path=str(tmp_path / "b"))
    for lo in range(0, 16, 4):
        rb.add(batch(lo, lo + 4))
    # 16 timesteps into 10: fragments [8,12) and [12,16) are whole, [4,8) was cut.
    assert len(rb) == 2
    s = rb.sample(10)
    assert set(s["actions"].reshape(-1, 4)[:, 0].tolist()) == {8, 12}
    rb.close()


def test_prioritized_weights_and_indexes_per_timestep_and_updates_by_item(tmp_path):
    rb = rllib.PrioritizedReplayBuffer(capacity=100, storage_unit="fragments", alpha=1.0, path=str(tmp_path / "b"))
    rb.add(batch(0, 3))
    rb.add(batch(3, 5), weight=1.0)
    s = rb.sample(6, beta=0.5)
    assert len(s["weights"]) == len(s["batch_indexes"]) == len(s["actions"])
    assert set(s["batch_indexes"].tolist()) <= {0, 3}
    rb.update_priorities([0, 3], [1e-6, 10.0])
    s = rb.sample(50, beta=0.5)
    assert (s["batch_indexes"] == 3).mean() > 0.9
    with pytest.raises(AssertionError):
        rb.update_priorities([0], [-1.0])
    rb.close()
    t = rllib.PrioritizedReplayBuffer(capacity=10, alpha=1.0, path=str(tmp_path / "t"))
    t.add(batch(0, 10))
    t.update_priorities(np.arange(10), [1e-9] * 9 + [1.0])
    s = t.sample(32, beta=0.4)
    assert set(s["batch_indexes"].tolist()) == {9} and (s["weights"] <= 1).all()
    t.close()


def test_state_round_trips_through_pickle_in_milliseconds(tmp_path):
    rb = rllib.ReplayBuffer(capacity=50, path=str(tmp_path / "b"))
    rb.add(batch(0, 30))
    state = pickle.loads(pickle.dumps(rb.get_state()))
    assert len(pickle.dumps(state)) < 2048
    rb.add(batch(30, 60))
    rb.set_state(state)
    assert len(rb) == 30 and rb.stats()["added_count"] == 30
    assert set(rb.sample(100)["actions"].tolist()) <= set(range(30))
    rb.close()
