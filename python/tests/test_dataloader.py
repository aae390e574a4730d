"""Promise: the README's DataLoader recipe works with the real
`torch.utils.data.DataLoader` (two workers, fork and spawn): each worker draws its own
batches, episodic draws (n-step stacked transitions, whole episodes) included, and every
row is its episode's (issue 31). Skipped without torch, unless
REPLAYSTORE_REQUIRE_TORCH=1 (test.sh sets it: there it must run)."""

import json
import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np
import pytest

import replaystore as rs

from test_reader_units import SCHEMA, add_episodes

if os.environ.get("REPLAYSTORE_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")


@pytest.fixture
def episodic(tmp_path):
    path = str(tmp_path / "ep")
    with rs.ReplayBuffer.create(path, SCHEMA, 256, episodic=True, seed=3) as buf:
        add_episodes(buf, 40, np.random.default_rng(0))
    return path


class EpisodicStream(torch.utils.data.IterableDataset):
    """The README recipe: each worker opens its own Reader (or gets this dataset's by
    pickle, which reopens the files) and yields batches of n-step stacked transitions
    and whole episodes forever."""

    def __init__(self, path, batches):
        self.path, self.batches = path, batches

    def __iter__(self):
        reader = rs.Reader.open(self.path)
        info = torch.utils.data.get_worker_info()
        for _ in range(self.batches):
            t = reader.sample_transitions(32, "obs", nstep=3, gamma=0.5, stack=2)
            e = reader.sample_episodes(2)
            yield {
                "worker": info.id if info else -1,
                "indices": torch.from_numpy(t["indices"].astype(np.int64)),
                "obs": torch.from_numpy(t["obs"]),
                "next_obs": torch.from_numpy(t["next_obs"]),
                "episode_obs": torch.from_numpy(e["obs"]),
                "episode_offsets": torch.from_numpy(e["offsets"].astype(np.int64)),
                # This worker's draws so far (its reader's own count).
                "sampled": reader.stats()["sampled"],
            }


def check_batch(b):
    """Every transition's frames and next frames are one episode's; every episode's
    rows are steps 0, 1, ... of one tag."""
    obs, nxt = b["obs"].numpy(), b["next_obs"].numpy()
    ok = (obs[:, :, 0] == obs[:, -1:, 0]).all() and (nxt[:, :, 0] == obs[:, -1:, 0]).all()
    ok &= ((nxt[:, -1, 1] - obs[:, -1, 1]) >= 1).all()
    eo, off = b["episode_obs"].numpy(), b["episode_offsets"].numpy()
    for s, e in zip(off[:-1], off[1:]):
        rows = eo[s:e]
        ok &= (rows[:, 0] == rows[0, 0]).all() and (rows[:, 1] == np.arange(e - s)).all()
    return bool(ok)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_dataloader_recipe_gives_each_worker_its_own_batches(episodic, context):
    path = episodic
    loader = torch.utils.data.DataLoader(
        EpisodicStream(path, batches=6),
        batch_size=None,
        num_workers=2,
        multiprocessing_context=mp.get_context(context),
    )
    batches = list(loader)
    assert len(batches) == 12
    assert {b["worker"] for b in batches} == {0, 1}
    assert all(check_batch(b) for b in batches)
    drawn = [tuple(b["indices"].tolist()) for b in batches]
    assert len(set(drawn)) == len(drawn), "two workers drew the same batch"
    # The workers' draws reach `replaystore info` and the next writer (issue 54): each
    # reader added its count to the buffer's progress page.
    workers = sum(max(b["sampled"] for b in batches if b["worker"] == w) for w in (0, 1))
    assert workers >= 12 * 32
    info = subprocess.run([sys.executable, "-m", "replaystore", "info", path, "--json"],
                          capture_output=True, text=True, check=True)
    doc = json.loads(info.stdout)
    assert (doc["sampled"], doc["sampled_by_readers_since_commit"]) == (workers, workers)
    with rs.ReplayBuffer.open(path) as buf:
        assert buf.stats()["sampled"] == workers
