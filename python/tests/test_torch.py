"""Promise (issue 33.4): draws as tensors over the same memory with int64 indices,
GPU-side tensors taken back by update_priorities, and a DataLoader of ReplayDataset
whose workers draw distinct batches."""

import os

import numpy as np
import pytest

import replaystore as rs

if os.environ.get("REPLAYSTORE_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")

from replaystore.torch import ReplayDataset, as_tensors  # noqa: E402

SCHEMA = {"obs": ("float32", (3,)), "action": "int64", "done": "bool", "tag": "uint64"}


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "b")
    with rs.ReplayBuffer.create(p, SCHEMA, 1000, alpha=0.6, seed=1) as b:
        n = 500
        b.add_batch({"obs": np.repeat(np.arange(n, dtype=np.float32)[:, None], 3, 1),
                     "action": np.arange(n), "done": np.arange(n) % 2 == 0,
                     "tag": np.arange(n, dtype=np.uint64)})
    return p


def test_draws_become_tensors_over_the_same_memory(path):
    with rs.ReplayBuffer.open(path) as buf:
        batch = buf.sample(64, beta=0.4)
        t = as_tensors(batch)
        assert t["indices"].dtype == torch.int64 and t["tag"].dtype == torch.int64
        assert t["obs"].dtype == torch.float32 and t["done"].dtype == torch.bool
        assert (t["indices"] + 1 - 1).equal(t["indices"]), "arithmetic works on int64"
        batch["obs"][0, 0] = -7.0
        assert t["obs"][0, 0].item() == -7.0, "no copy"
        assert (t["obs"][:, 1] == t["indices"].float()).all()
        # What a GPU training step hands back: tensors, with grad, int64 indices.
        td = torch.rand(64, requires_grad=True)
        assert buf.update_priorities(t["indices"], td.abs() + 0.1)["applied"] == 64
        nested = as_tensors(rs.nest({"obs.x": batch["obs"], "indices": batch["indices"]}))
        assert nested["obs"]["x"].shape == (64, 3)


def test_out_type_torch_is_as_tensors_of_the_same_draw(path):
    with rs.ReplayBuffer.open(path) as buf, rs.Reader.open(path) as reader:
        for handle in (buf, reader):
            t = handle.sample(32, beta=0.4, seed=9, out_type="torch")
            want = as_tensors(handle.sample(32, beta=0.4, seed=9))
            assert set(t) == set(want)
            for name in want:
                assert t[name].dtype == want[name].dtype and t[name].equal(want[name]), name
        # With out=, the tensors are over out's arrays: the next draw refills both.
        kept = buf.sample(16)
        t = buf.sample(16, out=kept, out_type="torch")
        assert t["obs"].data_ptr() == kept["obs"].ctypes.data


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs a GPU")
def test_pinned_and_moved_to_the_gpu(path):
    with rs.ReplayBuffer.open(path) as buf:
        t = as_tensors(buf.sample(8), device="cuda", pin_memory=True)
        assert t["obs"].is_cuda and not t["indices"].is_cuda


def test_a_dataloader_of_replay_datasets_draws_distinct_batches(path):
    ds = ReplayDataset(path, 32)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    seen = []
    for k, batch in enumerate(loader):
        assert batch["indices"].dtype == torch.int64 and batch["obs"].shape == (32, 3)
        assert (batch["obs"][:, 0] == batch["indices"].float()).all()
        seen.append(tuple(batch["indices"].tolist()))
        if k == 7:
            break
    assert len(set(seen)) == len(seen), "workers draw their own batches"

