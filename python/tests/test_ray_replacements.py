"""Promise (issue 36, point 5): an RLlib replay actor and a TorchRL ``RayReplayBuffer``
are replaced by shards with the calls their users already make. Each is driven beside
the library's own with the same traffic: lengths, the columns (names, dtypes, shapes)
of every draw, draws holding only added rows, priority updates accepted (and steering
later draws), and a checkpoint restored; RLlib's ``from_config`` builds ours from a
``replay_buffer_config`` as it builds its own."""

import sys

import numpy as np
import pytest

import peers

ray = peers.peer("ray")
peers.peer("ray.rllib")

from ray.rllib.policy.sample_batch import SampleBatch  # noqa: E402
from ray.rllib.utils.from_config import from_config  # noqa: E402
from ray.rllib.utils.replay_buffers import PrioritizedReplayBuffer  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ray_up():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # Workers cannot import this test module: its functions travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    if started:
        ray.shutdown()


def rollout(start, n):
    ids = np.arange(start, start + n)
    return SampleBatch({
        "obs": np.repeat(ids[:, None], 4, axis=1).astype(np.float32),
        "actions": (ids % 3).astype(np.int64),
        "rewards": ids.astype(np.float32) / 10,
        "terminateds": ids % 7 == 0,
        "t": ids.astype(np.int64),
        "infos": np.array([{"id": int(i)} for i in ids], dtype=object),
    })


def columns(batch):
    return {k: (np.asarray(v).dtype.str, np.asarray(v).shape[1:]) for k, v in batch.items()}


def test_an_rllib_replay_actor_is_replaced_by_shards_from_its_config(tmp_path):
    from replaystore.ray.rllib import ShardedReplayBuffer

    theirs = ray.remote(num_cpus=0)(PrioritizedReplayBuffer).remote(capacity=1000, alpha=0.6)
    config = {"type": ShardedReplayBuffer, "capacity": 1000, "alpha": 0.6,
              "name": "rllib-apex", "root": str(tmp_path)}
    ours = from_config(config.pop("type"), config)
    assert isinstance(ours, ShardedReplayBuffer)
    assert len(ours) == 0
    for start in range(0, 300, 50):
        ray.get(theirs.add.remote(rollout(start, 50)))
        ours.add(rollout(start, 50))
    assert ray.get(theirs.stats.remote())["num_entries"] == len(ours) == 300
    t = ray.get(theirs.sample.remote(64, beta=0.4))
    m = ours.sample(64, beta=0.4)
    assert columns(m) == columns(t)
    assert list(m.keys()) == list(t.keys())
    for row in range(64):  # every drawn row is one that was added, whole
        i = int(m["t"][row])
        assert m["infos"][row] == {"id": i} and m["obs"][row][0] == i
    assert ((0 < m["weights"]) & (m["weights"] <= 1)).all()
    ray.get(theirs.update_priorities.remote(t["batch_indexes"], np.ones(64)))
    # One item's priority far above the rest: later draws are nearly all of it.
    favourite = int(m["t"][0])
    prios = np.where(m["t"] == favourite, 1e6, 1e-6)
    assert ours.update_priorities(m["batch_indexes"], prios)["applied"] == 64
    # 3981 (1e6^0.6) against about 250 items left at 1: 0.94 of the draws.
    again = ours.sample(2000, beta=0.4)
    assert (again["t"] == favourite).mean() > 0.9
    # A worker holds a copy (it pickles small) and adds through it.
    copy = ray.get(ray.remote(num_cpus=0)(lambda b: (b.add(rollout(300, 10)), b)[1]).remote(ours))
    assert len(copy) == len(ours) == 310
    state = ours.get_state()
    ours.add(rollout(400, 20))
    ours.set_state(state)
    assert len(ours) == 310 and ours.stats()["added_count"] == 300
    ours._shards().close()


def test_torchrl_ray_replay_buffer_calls_run_on_shards(tmp_path):
    torch = peers.peer("torch")
    tdict = peers.peer("tensordict")
    trl = peers.peer("torchrl.data")
    from replaystore.ray.torchrl import ShardedReplayBuffer

    theirs = trl.RayReplayBuffer(storage=trl.LazyTensorStorage(1000),
                                 sampler=trl.PrioritizedSampler(1000, alpha=0.6, beta=0.4),
                                 batch_size=32, remote_config={"num_cpus": 0})
    ours = ShardedReplayBuffer(name="torchrl", root=str(tmp_path), capacity=1000, alpha=0.6,
                               beta=0.4, batch_size=32)
    assert len(ours) == 0
    for start in range(0, 200, 40):
        ids = torch.arange(start, start + 40)
        td = tdict.TensorDict({"obs": ids[:, None].repeat(1, 3).float(), "id": ids},
                              batch_size=[40])
        t_idx, m_idx = theirs.extend(td), ours.extend(td)
        assert t_idx.shape == m_idx.shape and m_idx.dtype == torch.int64
    assert len(theirs) == len(ours) == 200
    t, t_info = theirs.sample(return_info=True)
    m, m_info = ours.sample(return_info=True)
    assert m.batch_size == t.batch_size
    assert {k: (v.dtype, v.shape) for k, v in m.items()} == {k: (v.dtype, v.shape)
                                                            for k, v in t.items()}
    assert set(m_info) == set(t_info)
    assert (m["obs"][:, 0] == m["id"].float()).all()
    theirs.update_priority(t_info["index"], torch.ones(32))
    favourite = int(m["id"][0])
    ours.update_priority(m_info["index"],
                         torch.where(m["id"] == favourite, 1e6, 1e-6).double())
    # 3981 (1e6^0.6) against about 170 items left at 1: 0.96 of the draws.
    assert (ours.sample(2000)["id"] == favourite).float().mean() > 0.92
    state = ours.state_dict()
    ours.extend(tdict.TensorDict({"obs": torch.zeros(5, 3), "id": torch.arange(5)},
                                 batch_size=[5]))
    ours.load_state_dict(state)
    assert len(ours) == 200
    ours.close()
    theirs.close()
