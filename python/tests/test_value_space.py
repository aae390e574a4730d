"""Promise (issue 53, point 2): no item is dropped before capacity. The values of
variable-length fields take up to ``heap_bytes`` (reserved on disk as they arrive); an
add that would need the room of items the ring does not replace anyway raises
``ValueSpaceFullError`` with nothing stored, unless the buffer was created with
``evict_for_room=True``. Tianshou's buffers, whose non-array keys are pickled into such
a field, keep every transition until they hold their size, as Tianshou does, and say
what to raise when a sub-buffer's value space is full."""

import os
import pickle

import numpy as np
import pytest

import replaystore as rs
from peers import peer


def test_an_add_the_value_space_cannot_hold_is_refused_and_nothing_is_lost(tmp_path):
    # 16 chunk rows of 1 KiB; each item's value takes 3 of them.
    buf = rs.ReplayBuffer.create(tmp_path / "b", {"x": "int64", "blob": "bytes"}, 100,
                                 heap_bytes=16 * 1024)
    for i in range(5):
        buf.add(x=i, blob=bytes([i]) * 2500)
    with pytest.raises(rs.ValueSpaceFullError, match="heap_bytes=") as e:
        buf.add(x=5, blob=b"z" * 2500)
    assert "Config::" not in str(e.value)
    assert len(buf) == 5
    got = buf.get(np.arange(5))
    assert got["x"].tolist() == list(range(5))
    assert [bytes(b) for b in got["blob"]] == [bytes([i]) * 2500 for i in range(5)]
    # A small value still fits beside them.
    buf.add(x=5, blob=b"s")
    assert len(buf) == 6
    buf.close()


def test_evict_for_room_lets_an_add_evict_the_oldest_early(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "b", {"x": "int64", "blob": "bytes"}, 100,
                                 heap_bytes=16 * 1024, evict_for_room=True)
    for i in range(8):
        buf.add(x=i, blob=bytes([i]) * 2500)
    assert len(buf) < 8
    assert buf.get(np.array([7]))["x"].tolist() == [7]
    buf.close()
    # The choice is the buffer's: a reopen keeps it.
    buf = rs.ReplayBuffer.open(tmp_path / "b")
    buf.add(x=8, blob=b"q" * 2500)
    assert buf.get(np.array([8]))["x"].tolist() == [8]
    buf.close()


def test_a_large_value_space_takes_disk_only_as_values_arrive(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "b", {"text": "str"}, 1_000_000, heap_bytes=8 << 30)
    for i in range(100):
        buf.add(text=f"step {i} " * 100)
    buf.flush()
    used = sum(os.stat(os.path.join(root, f)).st_blocks * 512
               for root, _, files in os.walk(tmp_path / "b") for f in files)
    # The rows of a million items are reserved whole (about 32 MiB here); the 8 GiB of
    # value space (256 segment files) is not.
    assert used < 128 << 20, used
    buf.close()


class EnvLike:
    """What some envs put in ``info``: an object whose pickle is ~226 KB."""

    def __init__(self, k):
        self.k = k
        self.state = np.full(28_000, k, np.float64)

    def __eq__(self, other):
        return isinstance(other, EnvLike) and self.k == other.k and np.array_equal(self.state, other.state)


def _step(t):
    from tianshou.data import Batch
    return Batch(obs=np.array([t, t], np.float32), act=np.int64(t % 2), rew=1.0, terminated=False,
                 truncated=t % 4 == 3, obs_next=np.array([t + 1, t + 1], np.float32),
                 info={"env": EnvLike(t)})


def test_tianshou_keeps_every_transition_whose_info_holds_an_env_object(tmp_path):
    peer("tianshou")
    from tianshou import data as tsd
    from replaystore.compat import tianshou as ad
    assert len(pickle.dumps(EnvLike(0))) > 220_000
    theirs, ours = tsd.ReplayBuffer(size=100), ad.ReplayBuffer(size=100, path=str(tmp_path / "t"))
    for t in range(5):
        assert [np.asarray(a).tolist() for a in theirs.add(_step(t))] == \
            [np.asarray(a).tolist() for a in ours.add(_step(t))]
    assert len(ours) == len(theirs) == 5
    for i in range(5):
        assert ours[i].info.env == theirs[i].info.env == EnvLike(i)
    ours.close()


def test_a_tianshou_buffer_past_its_value_space_refuses_the_add_and_counts_what_it_holds(tmp_path):
    peer("tianshou")
    from replaystore.compat import tianshou as ad
    buf = ad.ReplayBuffer(size=100, path=str(tmp_path / "t"), heap_bytes=1 << 20)
    for t in range(4):
        buf.add(_step(t))
    before = (len(buf), buf._insertion_idx, buf.last_index.tolist(), buf._ep_len, buf._ep_return)
    with pytest.raises(rs.ValueSpaceFullError, match="heap_bytes="):
        buf.add(_step(4))
    assert (len(buf), buf._insertion_idx, buf.last_index.tolist(), buf._ep_len, buf._ep_return) == before
    assert [buf[i].info.env for i in range(4)] == [EnvLike(i) for i in range(4)]
    buf.close()


def _infos_batch(start, n):
    from ray.rllib.policy.sample_batch import SampleBatch
    infos = np.empty(n, dtype=object)
    infos[:] = [{"env": EnvLike(start + i)} for i in range(n)]
    return SampleBatch({"obs": np.arange(start, start + n, dtype=np.float32)[:, None],
                        "actions": np.arange(start, start + n), "infos": infos})


@pytest.mark.parametrize("unit", ["timesteps", "fragments"])
def test_rllib_keeps_every_item_whose_infos_hold_large_objects_until_its_limit(tmp_path, unit):
    peer("ray")
    from ray.rllib.utils.replay_buffers import ReplayBuffer as TheirBuffer
    from replaystore.compat.rllib import ReplayBuffer
    theirs = TheirBuffer(capacity=100, storage_unit=unit)
    ours = ReplayBuffer(capacity=100, storage_unit=unit, path=str(tmp_path / "r"))
    for k in range(6):
        theirs.add(_infos_batch(3 * k, 3))
        ours.add(_infos_batch(3 * k, 3))
    assert len(ours) == len(theirs)
    assert ours._num_timesteps_added == theirs._num_timesteps_added == 18
    ours.close()
    # A limit the user sets: past it, refused whole, RLlib's counts as they were.
    small = ReplayBuffer(capacity=100, storage_unit=unit, path=str(tmp_path / "s"), heap_bytes=2 << 20)
    with pytest.raises(rs.ValueSpaceFullError, match="heap_bytes=") as e:
        for k in range(20):
            held = (len(small), small._num_timesteps_added)
            small.add(_infos_batch(3 * k, 3))
    assert "Config::" not in str(e.value)
    assert 0 < held[0] and (len(small), small._num_timesteps_added) == held
    small.close()


def test_a_first_object_larger_than_the_first_ring_is_stored(tmp_path):
    # The chunk rings start small (1 MiB for RLlib's old stack) and grow; the first put
    # of a larger object made a ring too small for it.
    peer("ray")
    from ray.rllib.policy.sample_batch import SampleBatch
    from replaystore.compat.rllib import ReplayBuffer
    big = np.empty(1, dtype=object)
    big[0] = {"frames": np.zeros(3 << 20, np.uint8)}
    buf = ReplayBuffer(capacity=10, storage_unit="fragments", path=str(tmp_path / "r"))
    buf.add(SampleBatch({"obs": np.zeros((1, 2), np.float32), "infos": big}))
    assert len(buf) == 1
    assert buf.sample(1)["infos"][0]["frames"].nbytes == 3 << 20
    buf.close()


def test_a_refused_add_leaves_a_tianshou_managers_counts_and_priorities_as_they_were(tmp_path):
    peer("tianshou")
    from tianshou.data import Batch
    from replaystore.compat import tianshou as ad
    vec = ad.PrioritizedVectorReplayBuffer(40, 2, alpha=0.6, beta=0.4, path=str(tmp_path / "v"),
                                           heap_bytes=1 << 20)
    for t in range(0, 4, 2):
        vec.add(Batch.stack([_step(t), _step(t + 1)]), buffer_ids=[0, 1])
    # Sub-buffer 0 holds positions 0, 1 and sub-buffer 1 positions 20, 21.
    vec.update_weight(np.array([0, 1, 20, 21]), np.array([5.0, 1.0, 2.0, 3.0]))
    seen = lambda: (len(vec), vec.last_index.tolist(), vec._lengths.tolist(),  # noqa: E731
                    [b._insertion_idx for b in vec.buffers], vec.weight[np.arange(40)].tolist())
    before = seen()
    with pytest.raises(rs.ValueSpaceFullError, match="heap_bytes="):
        for t in range(4, 40, 2):
            before = seen()
            vec.add(Batch.stack([_step(t), _step(t + 1)]), buffer_ids=[0, 1])
    assert seen() == before
    vec.close()
