"""Promise: one handle may be shared by threads (a collector thread adding while learner
threads sample, as async trainers do). Calls take the handle in turn, with the GIL
released while they wait, so none fails with PyO3's "Already borrowed", none sees
another half done, and nothing deadlocks (issue 26, point 5; issue 31, point 3)."""

import threading

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"x": "int64", "y": ("float32", (3,))}


def rows(start, n):
    x = np.arange(start, start + n, dtype=np.int64)
    return {"x": x, "y": np.repeat(x[:, None], 3, axis=1).astype(np.float32)}


def run_threads(targets, seconds=120):
    errors = []

    def guarded(f):
        def run():
            try:
                f()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
        return run

    threads = [threading.Thread(target=guarded(f)) for f in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds)
    assert not any(t.is_alive() for t in threads), "a thread never finished: deadlock"
    assert errors == [], errors[:3]


def check_batch(b):
    assert np.array_equal(b["x"], b["indices"].astype(np.int64))
    assert np.array_equal(b["y"], np.repeat(b["x"][:, None], 3, axis=1).astype(np.float32))


def test_a_writer_thread_and_two_sampler_threads_share_one_buffer(tmp_path):
    buf = rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, capacity=256, alpha=0.6)
    buf.add_batch(rows(0, 64))
    done = threading.Event()
    sampled = [0, 0]

    def writer():
        try:
            for i in range(64, 4000):
                r = rows(i, 1)
                assert buf.add(x=int(r["x"][0]), y=r["y"][0]) == i
                if i % 500 == 0:
                    buf.flush()
                if i % 1500 == 0:
                    buf.get_state()
        finally:
            done.set()

    def sampler(k, beta):
        def run():
            while not done.is_set():
                b = buf.sample(32, beta=beta)
                check_batch(b)
                if beta is not None:
                    buf.update_priorities(b["indices"], np.full(32, 2.0))
                assert "ReplayBuffer(" in repr(buf)
                assert len(buf) <= 256
                sampled[k] += 1
        return run

    run_threads([writer, sampler(0, None), sampler(1, 0.4)])
    assert min(sampled) > 0
    assert len(buf) == 256
    buf.close()


def test_two_threads_share_one_reader_and_one_closes_the_buffer_under_the_other(tmp_path):
    path = str(tmp_path / "b")
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=128)
    buf.add_batch(rows(0, 128))
    buf.flush()
    reader = rs.Reader.open(path)

    def sample():
        for _ in range(2000):
            check_batch(reader.sample(16))
            check_batch(reader.get(reader.sample(4)["indices"]))

    run_threads([sample, sample])
    # A thread that closes the writer while another adds: the adder sees a closed
    # buffer (ClosedError), never a crash or a half-made item.
    outcomes = []

    def adder():
        try:
            for i in range(128, 100_000):
                r = rows(i, 1)
                buf.add(x=int(r["x"][0]), y=r["y"][0])
            outcomes.append("finished")
        except rs.ClosedError:
            outcomes.append("closed")

    def closer():
        buf.close()

    run_threads([adder, closer])
    assert outcomes in (["closed"], ["finished"])
    with rs.ReplayBuffer.open(path) as again:
        s = again.stats()
        check_batch(again.get(list(range(s["head"], s["tail"]))))


def test_lanes_shared_by_threads(tmp_path):
    lanes = rs.Lanes.create(str(tmp_path / "l"), SCHEMA, 256, 4)
    done = threading.Event()

    def writer():
        try:
            for i in range(2000):
                r = rows(i, 1)
                lanes.add(i % 4, x=int(r["x"][0]), y=r["y"][0])
        finally:
            done.set()

    def sampler():
        while not done.is_set():
            if len(lanes) >= 8:
                b = lanes.sample(8)
                # Lane k's indices start at k << 56; x is what the writer counted.
                assert b["x"].shape == (8,)

    run_threads([writer, sampler, sampler])
    assert len(lanes) == 256
    lanes.close()
