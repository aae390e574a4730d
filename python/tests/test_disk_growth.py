"""A buffer takes disk as data arrives, not all at create: what `du` sees of its folder.

The engine creates segment files (rows and text values) and the item state file sparse
and reserves each segment before its first store into it, so a large buffer holding
little takes little disk; `stats()` says what it takes now and the most it may take,
and `create` logs both.
"""

import logging
import os
import subprocess

import numpy as np

import replaystore as rs
from replaystore.compat import unstable

MiB = 1 << 20


def du(path):
    """Bytes `du` counts for the folder (allocated blocks, not lengths)."""
    out = subprocess.run(["du", "-sk", "--", str(path)], check=True, capture_output=True,
                         text=True).stdout
    return int(out.split()[0]) * 1024


def lengths(path):
    """Bytes the folder's files would hold written through: their lengths."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def trajectory(steps, pid=0):
    return unstable.PlayerTrajectory(
        pid=pid, obs=[f"observation {i}: " + "o" * 300 for i in range(steps)],
        actions=[f"action {i}: " + "a" * 60 for i in range(steps)],
        extracted_actions=[], format_feedbacks=[], step_infos=[], game_info={},
        final_reward=1.0, num_turns=steps)


def test_a_million_step_unstable_baselines_buffer_holding_100_steps_takes_at_most_64_mib(tmp_path):
    for cls in (unstable.LocalStepBuffer, unstable.LocalEpisodeBuffer):
        path = tmp_path / cls.__name__
        buf = cls(1_000_000, None, None, None, None, path=str(path))
        buf.add_player_trajectory(trajectory(100), "env")
        assert buf.size() == 100
        used, most = du(path), lengths(path)
        assert used <= 64 * MiB, f"{cls.__name__}: {used / MiB:.1f} MiB on disk"
        # The buffer is still the size asked for: 2M rows and 16 GB of text at most.
        assert most > 2_000_000 * 8192, f"{cls.__name__}: {most / MiB:.0f} MiB of files"
        print(f"{cls.__name__}: {used / MiB:.1f} MiB on disk of {most / MiB:.0f} MiB")
        stats = buf.buf.stats()
        assert stats["bytes_on_disk"] <= used and stats["bytes_at_most"] >= most
        buf.buf.close()


def test_disk_is_taken_as_items_arrive_and_never_past_what_create_said(tmp_path, caplog):
    path = tmp_path / "b"
    with caplog.at_level(logging.INFO, logger="replaystore"):
        buf = rs.ReplayBuffer.create(path, {"obs": ("float32", (256,)), "text": "str"}, 65_536,
                                     segment_slots=4096, item_states=True)
    created = buf.stats()
    said = [r.getMessage() for r in caplog.records if "created" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0] and "at most" in said[0], said
    assert created["bytes_on_disk"] < 1 * MiB < created["bytes_at_most"]
    seen = [created["bytes_on_disk"]]
    for _ in range(16):
        buf.add_batch({"obs": np.ones((4096, 256), np.float32), "text": ["t" * 100] * 4096})
        seen.append(buf.stats()["bytes_on_disk"])
    assert seen == sorted(seen) and seen[1] > seen[0], seen
    assert seen[-1] <= created["bytes_at_most"]
    # Past the first lap every segment is reserved: disk stays where it is.
    buf.add_batch({"obs": np.ones((4096, 256), np.float32), "text": ["t" * 100] * 4096})
    assert buf.stats()["bytes_on_disk"] == seen[-1]
    buf.close()
    # A reopened writer reserves again before its first store (a no-op on disk) and
    # reads back what was there.
    buf = rs.ReplayBuffer.open(path)
    newest = buf.add_batch({"obs": np.full((10, 256), 2, np.float32), "text": ["again"] * 10})
    assert buf.stats()["bytes_on_disk"] == seen[-1]
    assert list(buf.get(newest[-1:])["text"]) == ["again"]
    buf.close()
