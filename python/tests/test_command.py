"""Promise (issue 54, point 1): installing the package puts the ``replaystore`` command on
``PATH`` (a console script beside the interpreter) and ``python -m replaystore`` runs the
same command: the Rust CLI's subcommands, output and exit statuses, from the extension,
with no Rust toolchain. The benchmark workloads are not in it: they are a developer's
tool, the ``replaystore-bench`` binary of the source tree."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import replaystore as rs

SCRIPT = os.path.join(os.path.dirname(sys.executable), "replaystore")
WAYS = {"console script": [SCRIPT], "python -m": [sys.executable, "-m", "replaystore"]}


def run(way, *args, timeout=120):
    return subprocess.run([*WAYS[way], *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_the_console_script_is_installed_beside_the_interpreter():
    assert os.access(SCRIPT, os.X_OK), f"no replaystore command at {SCRIPT}"


@pytest.fixture
def buffer(tmp_path):
    path = tmp_path / "b"
    buf = rs.ReplayBuffer.create(path, {"obs": ("float32", (3,)), "note": "str"}, 64, alpha=0.6)
    buf.add_batch({"obs": np.arange(30, dtype=np.float32).reshape(10, 3),
                   "note": [f"step {i}" for i in range(10)]})
    buf.flush()
    buf.close()
    return path


@pytest.mark.parametrize("way", WAYS)
def test_both_entry_points_run_the_commands_with_their_exit_statuses(way, buffer, tmp_path):
    out = run(way, "--version")
    assert out.returncode == 0 and out.stdout.startswith("replaystore "), out
    info = run(way, "info", buffer, "--json")
    assert info.returncode == 0, info.stderr
    doc = json.loads(info.stdout)
    assert doc["len"] == 10 and doc["capacity"] == 64
    verify = run(way, "verify", buffer)
    assert verify.returncode == 0, verify.stderr
    dump = run(way, "dump", buffer, "--last", "2", "--format", "jsonl")
    assert dump.returncode == 0, dump.stderr
    rows = [json.loads(line) for line in dump.stdout.splitlines()]
    assert [r["note"] for r in rows] == ["step 8", "step 9"]
    # A folder that is not a buffer: status 3, the message on standard error.
    missing = run(way, "info", tmp_path)
    assert missing.returncode == 3 and "MANIFEST" in missing.stderr, missing
    # A bad option: status 2, naming it.
    bad = run(way, "info", buffer, "--no-such-option")
    assert bad.returncode == 2 and "--no-such-option" in bad.stderr, bad
    # --help prints and succeeds (it does not end an interpreter with an error).
    assert run(way, "--help").returncode == 0


def test_the_installed_command_has_no_benchmarks_and_says_where_they_are(tmp_path):
    # The workloads are a developer's tool (the replaystore-bench binary of the source
    # tree): the command pip installs names it and runs nothing.
    for way in ("python -m", "console script"):
        out = run(way, "bench", "--workload", "W3", "--quick", "--dir", tmp_path)
        assert out.returncode == 2, out
        assert "cargo run --release -p replaystore-bench" in out.stderr, out.stderr
        assert list(tmp_path.iterdir()) == []


def test_the_commands_parquet_is_the_builds_and_a_build_without_it_says_how_to_get_it(buffer, tmp_path):
    out = tmp_path / "b.parquet"
    done = run("console script", "export", buffer, out)
    if rs.HAS_PARQUET:  # the wheel, or a source build with --features parquet
        assert done.returncode == 0, done.stderr
        pq = pytest.importorskip("pyarrow.parquet")
        assert pq.read_table(out).column("note").to_pylist() == [f"step {i}" for i in range(10)]
    else:  # `pip install ./python`: usage status, the remedy named, nothing written
        assert done.returncode == 2, done
        assert 'MATURIN_PEP517_ARGS="--features parquet" pip install ./python' in done.stderr
        assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["b"]
