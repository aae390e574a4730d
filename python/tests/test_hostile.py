"""Promise: a buffer folder someone else prepared can make replaystore refuse, never make
it write outside the folder, and no size a caller asks for aborts the interpreter: both
are exceptions Python code can catch (issue 26)."""

import os

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"obs": ("float32", (4,)), "reward": "float32"}


def make(path, prioritized=False):
    buf = rs.ReplayBuffer.create(str(path), SCHEMA, capacity=64, alpha=0.6 if prioritized else None)
    buf.add_batch({"obs": np.ones((10, 4), np.float32), "reward": np.zeros(10, np.float32)})
    buf.flush()
    return buf


@pytest.mark.parametrize("n", [2**40, 2**45, 2**63, 2**64 - 1])
def test_a_draw_larger_than_memory_is_a_memory_error_and_the_buffer_goes_on(tmp_path, n):
    with make(tmp_path / "b", prioritized=True) as buf:
        with pytest.raises(MemoryError, match="rows"):
            buf.sample(n)
        with pytest.raises(MemoryError):
            buf.sample(n, beta=0.4)
        reader = rs.Reader.open(str(tmp_path / "b"))
        with pytest.raises(MemoryError):
            reader.sample(n)
        assert len(buf.sample(4)["indices"]) == 4


def test_a_linked_progress_page_is_refused_and_its_target_unchanged(tmp_path):
    make(tmp_path / "b").close()
    decoy = tmp_path / "decoy.txt"
    decoy.write_bytes(b"do not overwrite me" * 300)
    progress = tmp_path / "b" / "lane-0" / "progress"
    progress.unlink()
    os.symlink(decoy, progress)
    with pytest.raises(rs.ForeignFileError, match="symbolic link") as e:
        rs.ReplayBuffer.open(str(tmp_path / "b"))
    assert isinstance(e.value, rs.CorruptError)
    with pytest.raises(rs.ForeignFileError):
        rs.Reader.open(str(tmp_path / "b"))
    assert decoy.read_bytes() == b"do not overwrite me" * 300


def test_a_fifo_in_place_of_the_manifest_is_refused_without_hanging(tmp_path):
    make(tmp_path / "b").close()
    manifest = tmp_path / "b" / "MANIFEST"
    manifest.unlink()
    os.mkfifo(manifest)
    with pytest.raises(rs.ForeignFileError, match="FIFO"):
        rs.ReplayBuffer.open(str(tmp_path / "b"))
    with pytest.raises(rs.ForeignFileError):
        rs.Reader.open(str(tmp_path / "b"))
