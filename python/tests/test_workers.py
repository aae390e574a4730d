"""Promise: a sampler in a data-loader worker or a multiprocessing child reads the same
files through a `Reader`, never a pickled copy of the data (issue 9): a Reader pickles
as its path and options and reopens in the process that unpickles it; the one writer
refuses to be pickled, naming the way that works; and readers in different processes
(forked from one parent, or opened after such a fork) draw different batches."""

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"x": "int64", "obs": ("float32", (2,))}
N = 1000


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "buf")
    with rs.ReplayBuffer.create(p, SCHEMA, capacity=N, seed=1) as buf:
        x = np.arange(N, dtype=np.int64)
        buf.add_batch({"x": x, "obs": np.stack([x, -x], axis=1).astype(np.float32)})
        buf.get_state("first")
    return p


def _rows_match(batch):
    x = batch["x"]
    return bool(
        np.array_equal(x, batch["indices"].astype(np.int64))
        and np.array_equal(batch["obs"][:, 0], x.astype(np.float32))
        and np.array_equal(batch["obs"][:, 1], -x.astype(np.float32))
    )


def test_a_reader_pickles_as_its_path_and_reopens_the_same_files(path):
    for reader in (rs.Reader.open(path), rs.Reader.open(path, pread=True)):
        data = pickle.dumps(reader)
        assert len(data) < 1024, "a pickled reader carries no rows"
        again = pickle.loads(data)
        assert isinstance(again, rs.Reader)
        assert again.pread is reader.pread
        assert len(again) == N
        assert _rows_match(again.sample(64))


def test_a_reader_opened_by_a_relative_path_reopens_from_another_directory(path, monkeypatch):
    folder, name = os.path.split(path)
    monkeypatch.chdir(folder)
    data = pickle.dumps(rs.Reader.open(name))
    monkeypatch.chdir(os.path.dirname(folder))  # a worker started elsewhere
    assert len(pickle.loads(data)) == N


def test_a_snapshot_reader_pickles_with_its_snapshot(path):
    with rs.ReplayBuffer.open(path) as buf:
        buf.add_batch({"x": np.array([N], np.int64), "obs": np.array([[N, -N]], np.float32)})
    snap = pickle.loads(pickle.dumps(rs.Reader.open(path, snapshot="first")))
    assert len(snap) == N
    assert snap.sample(256)["indices"].max() < N
    assert len(rs.Reader.open(path)) == N  # the live buffer moved on; capacity N


def test_a_lanes_reader_pickles_and_a_lanes_writer_refuses(tmp_path):
    p = str(tmp_path / "lanes")
    lanes = rs.Lanes.create(p, SCHEMA, 64, 2)
    lanes.add_batch({"x": np.arange(8, dtype=np.int64), "obs": np.zeros((8, 2), np.float32)},
                    np.array([0, 1] * 4))
    with pytest.raises(TypeError, match="reader=True"):
        pickle.dumps(lanes)
    lanes.close()
    reader = pickle.loads(pickle.dumps(rs.Lanes.open(p, reader=True)))
    assert len(reader) == 8
    with pytest.raises(rs.ReadOnlyError):
        reader.add(0, x=1, obs=np.zeros(2, np.float32))


def test_the_writer_refuses_to_be_pickled_and_names_the_reader(path):
    with rs.ReplayBuffer.open(path) as buf:
        with pytest.raises(TypeError, match="Reader.open"):
            pickle.dumps(buf)


def _draw(reader):
    b = reader.sample(64)
    return b["indices"].tolist(), _rows_match(b)


def _open_and_draw(path):
    return _draw(rs.Reader.open(path))


def test_spawned_workers_get_readers_by_pickle_and_sample_the_same_files(path):
    reader = rs.Reader.open(path)
    with mp.get_context("spawn").Pool(2) as pool:
        got = pool.map(_draw, [reader, reader])
    assert all(ok for _, ok in got)
    assert got[0][0] != got[1][0], "two workers drew the same batch"


def _in_two_forks(fn, arg):
    """`fn(arg)` in two forked processes at once; `arg` is inherited, not pickled."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    kids = [ctx.Process(target=lambda: out.put(fn(arg))) for _ in range(2)]
    for k in kids:
        k.start()
    got = [out.get(timeout=60) for _ in kids]
    for k in kids:
        k.join(timeout=30)
        assert k.exitcode == 0
    return got


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_copies_of_one_reader_draw_different_batches(path):
    # A Reader made before the workers fork (the default DataLoader on Linux): each
    # copy must notice it is in another process and draw its own batches.
    reader = rs.Reader.open(path)
    reader.sample(1)
    got = _in_two_forks(_draw, reader)
    assert all(ok for _, ok in got)
    assert got[0][0] != got[1][0], "forked readers drew the same batch"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_readers_opened_after_a_fork_draw_different_batches(path):
    # Each worker opens its own Reader after the fork, as the docs advise. The parent
    # used the engine's randomness on this thread first, so a seed taken from a
    # per-thread generator (inherited by every fork) would repeat in every worker.
    rs.Reader.open(path).sample(1)
    got = _in_two_forks(_open_and_draw, path)
    assert all(ok for _, ok in got)
    assert got[0][0] != got[1][0], "readers opened in forked workers drew the same batch"


def _fetch_newest(reader, rounds, out):
    """Fetches the 32 newest indices `rounds` times; counts whole, evicted and wrong rows."""
    whole = evicted = wrong = 0
    for _ in range(rounds):
        tail = reader.stats()["tail"]
        try:
            b = reader.get(np.arange(max(0, tail - 32), tail, dtype=np.uint64))
        except rs.EvictedError:
            evicted += 1
            continue
        whole += 1
        wrong += 0 if _rows_match(b) else 1
    out.put((whole, evicted, wrong))


def test_a_worker_gets_rows_by_index_while_the_writer_laps_and_never_a_wrong_one(tmp_path):
    p = str(tmp_path / "ring")
    buf = rs.ReplayBuffer.create(p, SCHEMA, capacity=64)

    def rows(lo, hi):
        x = np.arange(lo, hi, dtype=np.int64)
        return {"x": x, "obs": np.stack([x, -x], axis=1).astype(np.float32)}

    buf.add_batch(rows(0, 64))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    worker = ctx.Process(target=_fetch_newest, args=(rs.Reader.open(p), 3000, out))
    worker.start()
    i = 64
    while worker.is_alive() and i < 2_000_000:
        buf.add_batch(rows(i, i + 16))
        i += 16
    whole, evicted, wrong = out.get(timeout=60)
    worker.join(timeout=30)
    buf.close()
    assert wrong == 0
    assert whole > 0, (whole, evicted)
    assert i > 64 * 10, "the writer lapped the ring while the worker read"
