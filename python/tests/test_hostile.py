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


def _damage_one_item(path):
    """A sealed buffer of 40 items whose item 17 has one flipped bit on disk."""
    with rs.ReplayBuffer.create(str(path), SCHEMA, capacity=64) as buf:
        obs = np.arange(160, dtype=np.float32).reshape(40, 4)
        obs[17] = 12345.5
        buf.add_batch({"obs": obs, "reward": np.zeros(40, np.float32)})
        buf.flush()
    seg = path / "lane-0" / "seg-00000000.dat"
    data = bytearray(seg.read_bytes())
    at = data.find(np.full(4, 12345.5, np.float32).tobytes())
    assert at > 0
    data[at + 2] ^= 0x10
    seg.write_bytes(bytes(data))
    return seg


@pytest.mark.parametrize("pread", [False, True])
def test_a_flipped_bit_in_a_sealed_row_is_never_served(tmp_path, pread):
    seg = _damage_one_item(tmp_path / "b")
    with rs.ReplayBuffer.open(str(tmp_path / "b")) as buf:
        assert buf.read_checks
        with pytest.raises(rs.CorruptError, match="checksum mismatch") as e:
            buf.get([17])
        assert str(seg) in str(e.value) and "17" in str(e.value)
        assert buf.get([16])["obs"][0][0] == 64.0
        saw = 0
        for _ in range(300):
            try:
                assert 17 not in buf.sample(16)["indices"]
            except rs.CorruptError as err:
                assert "checksum mismatch" in str(err)
                saw += 1
        assert saw > 0
        # The opt-out serves the flipped bit as data.
        buf.read_checks = False
        assert not np.array_equal(buf.get([17])["obs"][0], np.full(4, 12345.5, np.float32))
    reader = rs.Reader.open(str(tmp_path / "b"), pread=pread)
    with pytest.raises(rs.CorruptError, match="checksum mismatch"):
        reader.get([17])
    reader.read_checks = False
    assert reader.get([17])["obs"].shape == (1, 4)


@pytest.mark.parametrize(
    "field,value,says",
    [
        ("done", "yes", "expected bool values"),
        ("done", 2, "a bool field takes True/False"),
        ("done", [0, 1, 2], "a bool field takes True/False"),
        ("done", 0.5, "a bool field takes True/False"),
        ("reward", 1e300, "too large for float32"),
        ("reward", [1.0, -1e300], "too large for float32"),
        ("action", 1.5, "would be truncated"),
        ("action", [1, 2**40], "does not fit int32"),
        ("action", "3", "expected int32 values"),
        ("reward", [1, 2**24 + 1], "would be rounded in float32"),
        ("reward", 2**24 + 1, "would be rounded in float32"),
    ],
)
def test_a_python_value_that_would_change_on_conversion_is_refused(tmp_path, field, value, says):
    schema = {"done": "bool", "reward": "float32", "action": "int32"}
    with rs.ReplayBuffer.create(str(tmp_path / "b"), schema, capacity=8) as buf:
        good = {"done": True, "reward": 0.5, "action": 3}
        buf.add(**good)
        with pytest.raises(rs.SchemaError, match=says):
            if np.ndim(value) == 0:
                buf.add(**{**good, field: value})
            else:
                n = len(value)
                batch = {k: np.full(n, v, dtype=schema[k]) for k, v in good.items()}
                buf.add_batch({**batch, field: value})
        assert len(buf) == 1
        # The values Python users write every day still convert.
        buf.add(done=1, reward=1, action=np.int64(7))
        buf.add(done=np.bool_(False), reward=float("inf"), action=True)
        buf.add(done=0.0, reward=np.float64(0.25), action=4.0)
        got = buf.get([1, 2, 3])
        assert got["done"].tolist() == [True, False, False]
        assert got["reward"].tolist() == [1.0, float("inf"), 0.25]
        assert got["action"].tolist() == [7, 1, 4]


def test_numpy_scalars_of_the_fields_dtype_are_stored_bit_for_bit(tmp_path):
    # What `batch[k][i]` gives: NumPy scalars of the field's own dtype, at the edges of
    # each type. They take a fast path; these must come back exactly.
    kinds = ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
             "int64", "float32", "float64"]
    schema = {k: k for k in kinds}
    rows = []
    for pick in (min, max):
        row = {}
        for k in kinds:
            t = np.dtype(k)
            if t.kind == "b":
                row[k] = np.bool_(pick is max)
            elif t.kind == "f":
                row[k] = t.type(np.finfo(t).max if pick is max else np.finfo(t).tiny)
            else:
                row[k] = t.type(np.iinfo(t).max if pick is max else np.iinfo(t).min)
        rows.append(row)
    rows.append({**rows[0], "float32": np.float32(-0.0), "float64": np.float64(np.nan)})
    with rs.ReplayBuffer.create(str(tmp_path / "b"), schema, capacity=8) as buf:
        for r in rows:
            buf.add(**r)
        got = buf.get([0, 1, 2])
        for i, r in enumerate(rows):
            for k in kinds:
                want = np.array([r[k]], dtype=k)
                assert got[k][i : i + 1].tobytes() == want.tobytes(), (k, i)
        # A NumPy scalar of another dtype still goes the checked way.
        with pytest.raises(rs.SchemaError, match="does not fit"):
            buf.add(**{**rows[0], "uint8": np.int64(300)})
        with pytest.raises(rs.SchemaError, match="would be truncated"):
            buf.add(**{**rows[0], "int32": np.float32(1.5)})
        with pytest.raises(rs.SchemaError, match="too large for float32"):
            buf.add(**{**rows[0], "float32": np.float64(1e300)})
        assert len(buf) == 3


GIANT = r'''
import resource, sys
import numpy as np
import replaystore as rs

path = sys.argv[1]
buf = rs.ReplayBuffer.create(path + "/t", {"t": "str", "tok": ("int32", (None,))}, 16,
                             heap_bytes=1 << 20)
buf.add(t="ok", tok=np.arange(3, dtype=np.int32))
buf.flush()
# The address space this process has now, and 1.5 GiB more: room for a 1 GiB argument,
# none for a copy of it.
with open("/proc/self/status") as f:
    vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
cap = vm + (3 << 29)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
said = []
giant = "a" * (1 << 30)
try:
    buf.add(t=giant, tok=np.arange(3, dtype=np.int32))
except ValueError as e:
    said.append("str: " + type(e).__name__)
try:
    buf.add_batch({"t": ["x", giant], "tok": [np.arange(2, dtype=np.int32)] * 2})
except ValueError as e:
    said.append("batch: " + type(e).__name__)
del giant
tokens = np.zeros(1 << 28, np.int32)  # 1 GiB of token ids
try:
    buf.add(t="x", tok=tokens)
except ValueError as e:
    said.append("ragged: " + type(e).__name__)
del tokens
reader = rs.Reader.open(path + "/t")
idx = np.arange(1 << 27, dtype=np.uint64)  # 1 GiB of indices
try:
    reader.get(idx)
except MemoryError as e:
    said.append("get: MemoryError")
except rs.EvictedError:
    said.append("get: EvictedError")
del idx
assert buf.get(np.array([0], np.uint64))["t"] == ["ok"] and len(buf) == 1
print(";".join(said))
'''


def test_giant_values_and_reads_are_refused_before_they_are_copied_under_a_memory_cap(tmp_path):
    """A 1 GiB string for a 1 MiB chunk ring, 1 GiB of token ids, and 2^27 indices to a
    reader, in a process whose address space leaves no room for a copy of either: each
    is an exception (ValueError for a value too long, MemoryError or EvictedError for the
    read), never an abort, and the buffer goes on. Before, the add copied the string
    twice over before its bound was checked, and the read copied the indices: both
    aborted the interpreter."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", GIANT, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    said = done.stdout.strip().split(";")
    assert said[:3] == ["str: ValueError", "batch: ValueError", "ragged: ValueError"], said
    assert said[3] in ("get: MemoryError", "get: EvictedError"), said
