"""The buffer's figures reach the trainer's own outputs: SB3's logger (its progress.csv),
TensorBoard's event files and a wandb run, each read back with the real package."""

import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from peers import peer

import replaystore as rs
from replaystore.integrations import ReplayStats, handle_of, sb3_callback


def buffer(tmp_path, n=10, prioritized=False):
    buf = rs.ReplayBuffer.create(tmp_path / "b", {"x": "int64"}, 100,
                                 **({"alpha": 0.6} if prioritized else {}))
    buf.add_batch({"x": np.arange(n)})
    return buf


def test_rates_are_per_second_of_the_clock_since_the_last_row(tmp_path):
    buf = buffer(tmp_path, prioritized=True)
    now = [100.0]
    stats = ReplayStats(buf, prefix="rb/", clock=lambda: now[0])
    first = stats.row()
    assert first["rb/adds_per_s"] == 0 and first["rb/draws_per_s"] == 0
    assert first["rb/size"] == 10 and first["rb/oldest_age"] == 10
    assert first["rb/priority_max"] == pytest.approx(1.0)
    buf.add_batch({"x": np.arange(30)})
    buf.sample(8)
    now[0] += 2.0
    second = stats.row()
    assert second["rb/adds_per_s"] == pytest.approx(15.0)
    assert second["rb/draws_per_s"] == pytest.approx(4.0)
    assert second["rb/added"] == 40 and second["rb/sampled"] == 8


def test_a_lane_set_is_one_row_of_its_lanes_summed(tmp_path):
    lanes = rs.Lanes.create(tmp_path / "lanes", {"x": "int64"}, 100, 4)
    for lane in range(4):
        for i in range(lane + 1):
            lanes.add(lane, x=i)
    lanes.sample(6)
    row = ReplayStats(lanes).row()
    assert row["replay/size"] == 10 and row["replay/capacity"] == sum(s["capacity"] for s in lanes.stats()) == 100
    assert row["replay/added"] == 10 and row["replay/sampled"] == 6
    assert row["replay/oldest_age"] == 4
    assert row["replay/bytes_on_disk"] == sum(s["bytes_on_disk"] for s in lanes.stats())
    lanes.close()


def test_a_read_is_not_a_draw_unless_the_caller_drew_it(tmp_path):
    buf = buffer(tmp_path)
    buf.get(np.array([1, 2, 3], np.uint64))
    assert buf.stats()["sampled"] == 0
    buf.get(np.array([1, 2, 3], np.uint64), drawn=True)
    assert buf.stats()["sampled"] == 3
    buf.close()
    # The count is in the commit: `replaystore info` sees it from another process.
    out = subprocess.run([sys.executable, "-m", "replaystore", "info", "--json", str(tmp_path / "b")],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out)["sampled"] == 3


def test_handle_of_names_what_it_takes(tmp_path):
    buf = buffer(tmp_path)
    assert handle_of(buf) is buf
    with pytest.raises(TypeError, match="replaystore.compat.sb3"):
        handle_of(object())


def test_stats_reach_tensorboard_event_files(tmp_path):
    peer("torch")
    peer("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    buf = buffer(tmp_path)
    stats = ReplayStats(buf)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    for step in range(3):
        buf.add_batch({"x": np.arange(5)})
        stats.to_tensorboard(writer, step)
    writer.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert "replay/size" in events.Tags()["scalars"]
    assert [e.value for e in events.Scalars("replay/size")] == [15, 20, 25]
    assert [e.step for e in events.Scalars("replay/bytes_on_disk")] == [0, 1, 2]


def test_stats_reach_an_sb3_trainers_logger_and_count_its_draws(tmp_path):
    peer("stable_baselines3")
    import gymnasium as gym
    import stable_baselines3 as sb3lib
    from stable_baselines3.common.logger import configure

    from replaystore.compat import sb3

    model = sb3lib.DQN("MlpPolicy", gym.make("CartPole-v1"), buffer_size=1_000, learning_starts=50,
                       batch_size=16, train_freq=4, replay_buffer_class=sb3.ReplayBuffer,
                       replay_buffer_kwargs={"path": str(tmp_path / "rb")}, seed=0, device="cpu")
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    model.learn(400, callback=sb3_callback(), log_interval=1)
    with open(tmp_path / "log" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and "replay/size" in rows[0], rows[:1]
    last = rows[-1]
    assert 0 < float(last["replay/size"]) <= 400
    assert float(last["replay/capacity"]) == 1_000
    # SB3's draws are its own (NumPy's RNG), read with drawn=True: they count.
    assert float(last["replay/sampled"]) > 0
    assert model.replay_buffer.replaystore.stats()["sampled"] >= float(last["replay/sampled"])
    model.replay_buffer.close()


def test_stats_reach_a_wandb_run(tmp_path, monkeypatch):
    wandb = peer("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(mode="offline", dir=str(tmp_path), project="replaystore-test")
    try:
        buf = buffer(tmp_path)
        row = ReplayStats(buf).to_wandb(step=5)
        assert row["replay/size"] == 10
    finally:
        run.finish()
    # An offline run is kept as one .wandb file (its records, for `wandb sync`); wandb
    # reads it back only in its Go core, so the test looks for the row's keys in it.
    # That core may still be writing it when finish() returns: the test waits for it.
    missing = sorted(row)
    for _ in range(100):
        files = [os.path.join(d, n) for d, _, names in os.walk(tmp_path) for n in names
                 if n.endswith(".wandb")]
        data = b"".join(open(f, "rb").read() for f in files)
        missing = [key for key in row if key.encode() not in data]
        if not missing:
            break
        time.sleep(0.1)
    assert not missing, (files, missing)
