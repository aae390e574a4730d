"""Promise: the Python package stores and returns exactly what it was given, refuses bad
arrays before writing anything, keeps everything acknowledged across reopen and kill -9,
checkpoints into a small picklable state, and lets other processes read while it writes
(issue 9)."""

import multiprocessing as mp
import logging
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"obs": ("float32", (3,)), "action": "int64", "done": "bool", "frame": ("uint8", (2, 2))}


def item(i):
    """Item i's values: every field is derived from its index, so any row can be checked."""
    return {
        "obs": np.array([i, i + 0.5, -i], np.float32),
        "action": np.int64(3 * i - 7),
        "done": bool(i % 3 == 0),
        "frame": (np.arange(4, dtype=np.uint8) + np.uint8(i % 256)).reshape(2, 2),
    }


def items(lo, hi):
    rows = [item(i) for i in range(lo, hi)]
    return {k: np.stack([r[k] for r in rows]) for k in SCHEMA}


def check_batch(batch, base=0):
    """Every row equals the item its index names (index - base is the item number)."""
    for r, idx in enumerate(batch["indices"]):
        want = item(int(idx) - base)
        for k in SCHEMA:
            np.testing.assert_array_equal(batch[k][r], want[k], err_msg=f"{k} of {idx}")


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "buf")


def test_add_and_add_batch_store_exactly_what_sample_returns(path):
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=50, seed=0) as buf:
        assert buf.add(**item(0)) == 0
        idx = buf.add_batch(items(1, 80))  # wraps: live 30..80
        assert idx.tolist() == list(range(1, 80))
        assert len(buf) == 50
        batch = buf.sample(256)
        assert batch["obs"].shape == (256, 3) and batch["obs"].dtype == np.float32
        assert batch["frame"].shape == (256, 2, 2) and batch["done"].dtype == np.bool_
        assert batch["indices"].dtype == np.int64
        assert set(batch["indices"].tolist()) <= set(range(30, 80))
        check_batch(batch)
        every = buf.sample(50, replace=False)
        assert sorted(every["indices"].tolist()) == list(range(30, 80))
        assert all(a.flags["C_CONTIGUOUS"] and a.flags["WRITEABLE"] for a in every.values())
        stats = buf.stats()
        assert (stats["added"], stats["evicted"], stats["len"]) == (80, 30, 50)


def test_sample_fragments_returns_whole_calls_row_by_row_with_offsets_and_weights(path):
    buf = rs.ReplayBuffer.create(path, SCHEMA, 40, alpha=1.0, seed=3, fragments=True)
    for lo, hi in [(0, 3), (3, 4), (4, 9), (9, 11)]:
        buf.add_batch(items(lo, hi))
    b = buf.sample_fragments(6, seed=1)
    starts = b["offsets"]
    assert starts[0] == 0 and starts[-1] == len(b["indices"]) and len(starts) == 7
    calls = {0: 3, 3: 4, 4: 9, 9: 11}
    for a, z in zip(starts[:-1], starts[1:]):
        first = int(b["indices"][a])
        assert b["indices"][a:z].tolist() == list(range(first, calls[first]))
    check_batch(b)
    assert b["obs"].dtype == np.float32 and b["obs"].shape == (len(b["indices"]), 3)
    assert b["frame"].shape == (len(b["indices"]), 2, 2) and "weights" not in b
    buf.update_priorities(np.arange(11), [0.0] * 9 + [1.0, 1.0])
    w = buf.sample_fragments(5, beta=0.4)
    assert w["indices"].tolist() == [9, 10] * 5 and len(w["weights"]) == 5
    check_batch(w)
    buf.close()


def test_reopen_gives_the_same_items_and_the_same_next_batch(path):
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=100, seed=7)
    buf.add_batch(items(0, 60))
    buf.close()
    with rs.ReplayBuffer.open(path) as a:
        first = a.sample(16)
        check_batch(first)
        state = a.get_state()
        after = a.sample(16)
    with rs.ReplayBuffer.open(path) as b:
        b.set_state(state)
        again = b.sample(16)
    np.testing.assert_array_equal(after["indices"], again["indices"])


def test_write_behind_window_is_a_property_that_keeps_every_item(path):
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=1000, seed=1) as buf:
        # 1000 small rows: well inside the default window, so it is not in use.
        assert buf.write_behind == 0
        buf.write_behind = 4096
        assert buf.write_behind == 4096
        for i in range(2500):
            buf.add(**item(i))
        buf.flush()
        buf.write_behind = 0
        assert buf.write_behind == 0
    with rs.ReplayBuffer.open(path) as buf:
        assert len(buf) == 1000
        for i in range(1500, 2500, 97):
            row = buf.get([i])
            for name, value in item(i).items():
                np.testing.assert_array_equal(row[name][0], value)
    buf.close()
    with pytest.raises(rs.ClosedError):
        buf.write_behind = 1


def test_bad_arrays_raise_before_anything_is_written(path):
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=10) as buf:
        good = items(0, 4)
        cases = {
            "wrong dtype": dict(good, obs=good["obs"].astype(np.float64)),
            "non-contiguous": dict(good, frame=np.zeros((4, 2, 2, 2), np.uint8)[..., 0]),
            "wrong shape": dict(good, obs=np.zeros((4, 4), np.float32)),
            "ragged": dict(good, action=np.zeros(3, np.int64)),
            "missing": {k: v for k, v in good.items() if k != "done"},
            "unknown": dict(good, extra=np.zeros(4, np.float32)),
        }
        for what, batch in cases.items():
            with pytest.raises(rs.SchemaError) as e:
                buf.add_batch(batch)
            assert len(buf) == 0, what
            assert isinstance(e.value, rs.Error)
        msg = str(pytest.raises(rs.SchemaError, buf.add_batch, cases["wrong dtype"]).value)
        assert "obs" in msg and "<f8" in msg and "<f4" in msg, msg
        msg = str(pytest.raises(rs.SchemaError, buf.add_batch, cases["ragged"]).value)
        assert "action" in msg, msg
        with pytest.raises(rs.SchemaError, match="reserved"):
            rs.Schema({"indices": "int64"})
        with pytest.raises(rs.SchemaError, match="no replaystore equivalent"):
            rs.Schema({"x": "complex64"})
        buf.add_batch(good)
        assert len(buf) == 4


def test_errors_name_the_problem_and_share_one_base_class(path, tmp_path):
    with pytest.raises(rs.NotABufferError, match="nothing: no such folder"):
        rs.ReplayBuffer.open(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(rs.NotABufferError, match="no MANIFEST"):
        rs.ReplayBuffer.open(str(tmp_path / "empty"))
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=10)
    with pytest.raises(rs.LockedError, match="LOCK"):
        rs.ReplayBuffer.open(path)
    with pytest.raises(rs.EmptyError):
        buf.sample(1)
    with pytest.raises(rs.Error, match="no priorities") as e:
        buf.sample(1, beta=0.4)
    # Python spellings, not the engine's Rust names.
    assert "alpha=" in str(e.value) and "Config::" not in str(e.value)
    with pytest.raises(ValueError, match="0 or more, got -1"):
        buf.sample(-1)
    with pytest.raises(ValueError, match="got -5"):
        rs.ReplayBuffer.create(str(tmp_path / "neg"), SCHEMA, capacity=-5)
    buf.close()
    with pytest.raises(rs.ClosedError, match="closed"):
        buf.add(**item(0))
    with pytest.raises(rs.ClosedError, match="closed"):
        len(buf)
    buf.close()  # twice is fine
    manifest = os.path.join(path, "MANIFEST")
    data = bytearray(open(manifest, "rb").read())
    data[40] ^= 0xFF
    open(manifest, "wb").write(bytes(data))
    with pytest.raises(rs.CorruptError, match="MANIFEST"):
        rs.ReplayBuffer.open(path)
    for cls in (rs.NotABufferError, rs.LockedError, rs.CorruptError, rs.SchemaError,
                rs.EmptyError, rs.EvictedError, rs.StateError, rs.ReadOnlyError, rs.ClosedError,
                rs.DiskFullError, rs.VersionError):
        assert issubclass(cls, rs.Error)


def test_state_is_small_picklable_and_restores_exactly(path):
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=100, alpha=0.6, seed=3) as buf:
        buf.add_batch(items(0, 40))
        b = buf.sample(8, beta=0.4)
        buf.update_priorities(b["indices"], np.arange(1, 9))
        state = pickle.loads(pickle.dumps(buf.get_state()))
        assert len(pickle.dumps(state)) < 1024
        expect = buf.sample(32, beta=0.4)
        buf.add_batch(items(40, 70))
        buf.update_priorities(np.arange(40), np.full(40, 5.0))
        buf.set_state(state)
        assert len(buf) == 40
        got = buf.sample(32, beta=0.4)
        np.testing.assert_array_equal(got["indices"], expect["indices"])
        np.testing.assert_array_equal(got["weights"], expect["weights"])
        with pytest.raises(rs.StateError):
            buf.set_state({"something": b"else"})


def test_priorities_steer_draws_and_weights_come_back(path):
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=100, alpha=1.0, eps=0.0, seed=1) as buf:
        buf.add_batch(items(0, 10))
        done = buf.update_priorities(np.arange(10), [0] * 9 + [1.0])
        assert done == {"applied": 10, "stale": 0}
        b = buf.sample(64, beta=0.5)
        assert set(b["indices"].tolist()) == {9}
        assert b["weights"].dtype == np.float32 and b["weights"].shape == (64,)
        check_batch(b)


def test_an_actor_adds_and_checkpoints_but_leaves_priorities_to_their_owner(path):
    """`open(path, actor=True)` (Ape-X): adds, flushes and get_state as the writer;
    every priority call raises LockedError naming the owner's lock, and nothing is
    changed by it."""
    rs.ReplayBuffer.create(path, SCHEMA, capacity=100, alpha=0.6, seed=1).close()
    with rs.ReplayBuffer.open(path, actor=True) as actor:
        assert actor.add_batch(items(0, 5)).tolist() == list(range(5))
        actor.flush()
        assert actor.max_priority is None
        for call in (
            lambda: actor.update_priorities([0], [2.0]),
            lambda: actor.priorities([0]),
            lambda: actor.sample(4, beta=0.4),
            lambda: actor.add_batch(items(5, 6), priorities=[1.0]),
        ):
            with pytest.raises(rs.LockedError, match="priorities.lock"):
                call()
        assert len(actor) == 5
        check_batch(actor.sample(8))
        assert actor.get_state()["len"] == 5
    with rs.ReplayBuffer.open(path) as buf:
        # The writer catches the actor's items up to the largest priority seen.
        assert buf.priorities(np.arange(5)).tolist() == pytest.approx([1.0] * 5)


def _reader(path, n, out, pread=False):
    r = rs.Reader.open(path, pread=pread)
    assert r.pread is pread
    bad = draws = 0
    deadline = time.time() + 20
    while draws < n and time.time() < deadline:
        if len(r) == 0:
            continue
        b = r.sample(64)
        for row, idx in enumerate(b["indices"]):
            want = item(int(idx))
            if any(not np.array_equal(b[k][row], want[k]) for k in SCHEMA):
                bad += 1
        draws += 64
    out.put((draws, bad))


@pytest.mark.parametrize("pread", [False, True], ids=["mapped", "pread"])
def test_a_reader_process_samples_while_the_writer_adds_and_never_sees_a_torn_item(path, pread):
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=256)
    buf.add_batch(items(0, 256))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_reader, args=(path, 20_000, out, pread))
    child.start()
    i = 256
    while child.is_alive() and i < 200_000:
        buf.add_batch(items(i, i + 64))
        i += 64
    draws, bad = out.get(timeout=60)
    child.join(timeout=30)
    buf.close()
    assert draws >= 20_000, draws
    assert bad == 0
    assert i > 512, "the ring lapped while the reader read"


WRITER = textwrap.dedent(
    """
    import sys, numpy as np, replaystore as rs
    sys.path.insert(0, sys.argv[2])
    from test_core import items, SCHEMA
    buf = rs.ReplayBuffer.open(sys.argv[1])
    i = len(buf)
    while True:
        buf.add_batch(items(i, i + 10))
        i += 10
        print(i, flush=True)
    """
)


def test_kill_9_of_a_python_writer_loses_nothing_acknowledged(path, caplog):
    rs.ReplayBuffer.create(path, SCHEMA, capacity=100_000).close()
    here = os.path.dirname(__file__)
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-c", WRITER, path, here], stdout=subprocess.PIPE, text=True)
        start = len(rs.Reader.open(path))
        acked = 0
        for line in p.stdout:
            acked = int(line)
            if acked >= start + 2_000:
                break
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        with caplog.at_level(logging.WARNING, logger="replaystore"):
            caplog.clear()
            buf = rs.ReplayBuffer.open(path)
        with buf:
            # The open says what it recovered: on the logger and in stats().
            recovered = buf.stats()["recovered"]
            assert recovered is not None and recovered["tail"] == len(buf) >= acked
            assert recovered["rolled_forward"] > 0
            assert any("did not close the buffer" in r.getMessage() for r in caplog.records)
            check_batch(buf.sample(512))
            got = buf.sample(len(buf), replace=False)
            assert sorted(got["indices"].tolist()) == list(range(len(buf)))


class Box:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)


class Discrete:
    n = 4


class Dict:
    def __init__(self, spaces):
        self.spaces = spaces


def test_schema_from_gymnasium_like_spaces():
    s = rs.Schema.from_spaces(Box((4, 84, 84), np.uint8), Discrete())
    assert s.fields == [
        ("obs", "|u1", (4, 84, 84)),
        ("action", "<i8", ()),
        ("reward", "<f4", ()),
        ("next_obs", "|u1", (4, 84, 84)),
        ("terminated", "|b1", ()),
        ("truncated", "|b1", ()),
    ]
    d = rs.Schema.from_spaces(Dict({"pos": Box((2,), np.float32), "img": Box((3, 3), np.uint8)}), Box((6,), np.float32))
    # One name for it (issue 55): the module-level alias is gone.
    assert not hasattr(rs, "schema_from_spaces") and "schema_from_spaces" not in rs.__all__
    assert d.names[:3] == ["obs.pos", "obs.img", "action"]
    assert pickle.loads(pickle.dumps(d)) == d
    gym = pytest.importorskip("gymnasium")
    g = rs.Schema.from_spaces(gym.spaces.Box(-1, 1, (17,)), gym.spaces.MultiDiscrete([3, 4]))
    assert g.fields[1] == ("action", "<i8", (2,))


def test_schema_from_real_gymnasium_spaces_stores_what_the_spaces_sample(path):
    gym = pytest.importorskip("gymnasium")
    sp = gym.spaces
    obs_space = sp.Dict({"pos": sp.Box(-1, 1, (3,)), "flags": sp.MultiBinary(5),
                         "room": sp.Discrete(9), "keys": sp.MultiDiscrete([2, 3])})
    act_space = sp.MultiBinary((2, 3))
    schema = rs.Schema.from_spaces(obs_space, act_space)
    assert dict((n, (d, s)) for n, d, s in schema.fields) == {
        "obs.pos": ("<f4", (3,)), "obs.flags": ("|i1", (5,)), "obs.room": ("<i8", ()),
        "obs.keys": ("<i8", (2,)), "action": ("|i1", (2, 3)), "reward": ("<f4", ()),
        "next_obs.pos": ("<f4", (3,)), "next_obs.flags": ("|i1", (5,)),
        "next_obs.room": ("<i8", ()), "next_obs.keys": ("<i8", (2,)),
        "terminated": ("|b1", ()), "truncated": ("|b1", ()),
    }
    obs_space.seed(0)
    act_space.seed(0)
    steps = []
    with rs.ReplayBuffer.create(path, schema, capacity=16, seed=0) as buf:
        for _ in range(8):
            o, o2, a = obs_space.sample(), obs_space.sample(), act_space.sample()
            row = {f"obs.{k}": v for k, v in o.items()}
            row.update({f"next_obs.{k}": v for k, v in o2.items()})
            row.update(action=a, reward=0.5, terminated=False, truncated=False)
            buf.add(**row)  # the spaces' own dtypes, no cast
            steps.append(row)
        got = buf.get(np.arange(8))
    for i, row in enumerate(steps):
        for k, v in row.items():
            np.testing.assert_array_equal(got[k][i], v, err_msg=f"{k} of step {i}")


def test_the_gil_is_released_while_the_engine_works(path):
    """Another Python thread runs during add_batch and sample: it stamps the clock in a
    loop, and some stamps fall well inside each call. Holding the GIL, none could."""
    import threading

    schema = {"frame": ("uint8", (64, 1024))}
    frames = np.ones((1024, 64, 1024), np.uint8)  # 64 MiB
    stamps, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    t = threading.Thread(target=spin)
    t.start()
    try:
        with rs.ReplayBuffer.create(path, schema, capacity=2048) as buf:
            for call in (lambda: buf.add_batch({"frame": frames}), lambda: buf.sample(1024)):
                time.sleep(0.01)
                a = time.perf_counter()
                call()
                b = time.perf_counter()
                inside = [x for x in stamps if a + 0.005 < x < b - 0.005]
                assert b - a > 0.02, f"the call took {b - a:.4f} s: too short to tell"
                assert inside, f"no other thread ran during a {b - a:.3f} s call"
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)


def test_get_reads_live_items_by_index_and_refuses_evicted_ones(path):
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=10, alpha=0.6) as buf:
        buf.add_batch(items(0, 15), priorities=np.arange(1, 16))
        got = buf.get([5, 14, 9])
        assert got["indices"].tolist() == [5, 14, 9]
        check_batch(got)
        with pytest.raises(rs.EvictedError, match="4"):
            buf.get([4])
        assert buf.max_priority == pytest.approx(15.0 + 1e-6)
        buf.clear()
        assert len(buf) == 0
        with pytest.raises(rs.EvictedError):
            buf.get([14])


def test_a_reader_fills_new_arrays_repeatably_and_by_priority(path):
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=100, alpha=1.0, eps=0.0) as buf:
        buf.add_batch(items(0, 50))
        buf.update_priorities(np.arange(50), [0.0] * 49 + [1.0])
        buf.flush()
        a, b = rs.Reader.open(path), rs.Reader.open(path)
        x, y = a.sample(32, seed=4), b.sample(32, seed=4)
        np.testing.assert_array_equal(x["indices"], y["indices"])
        check_batch(x)
        assert not np.shares_memory(x["obs"], a.sample(32)["obs"])
        p = a.sample(16, beta=0.5)
        assert set(p["indices"].tolist()) == {49} and p["weights"].shape == (16,)
        check_batch(p)
        assert len(a) == 50


def test_handles_are_made_by_their_class_methods_and_batches_are_dicts(path):
    """Issue 33.6: what a new user tries first gets an answer in Python's terms."""
    for cls, maker in ((rs.ReplayBuffer, "ReplayBuffer.create"), (rs.Reader, "Reader.open"),
                       (rs.Lanes, "Lanes.create"), (rs.BufferGroup, "BufferGroup.create"),
                       (rs.PriorityOwner, "PriorityOwner.open")):
        with pytest.raises(TypeError, match=maker.replace(".", r"\.")):
            cls(path, SCHEMA, 10)
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=10) as buf:
        rows = [item(0), item(1)]
        with pytest.raises(TypeError, match="a list of per-item dicts\\? stack it"):
            buf.add_batch(rows)
        buf.add_batch({k: np.stack([r[k] for r in rows]) for k in rows[0]})
        assert len(buf) == 2


def test_open_or_create_resumes_and_refuses_another_schema(tmp_path):
    path = str(tmp_path / "b")
    buf = rs.ReplayBuffer.open_or_create(path, SCHEMA, 100, alpha=0.6)
    buf.add(**item(0))
    buf.close()
    buf = rs.ReplayBuffer.open_or_create(path, SCHEMA, 100, alpha=0.6)
    assert len(buf) == 1 and buf.stats()["recovered"] is None
    buf.close()
    other = dict(SCHEMA, extra="float32")
    with pytest.raises(rs.SchemaError, match="holds a buffer of 100 items"):
        rs.ReplayBuffer.open_or_create(path, other, 100)
    with pytest.raises(rs.SchemaError, match="not the 50 items"):
        rs.ReplayBuffer.open_or_create(path, SCHEMA, 50)
    # Refused without keeping the writer lock: it opens again.
    rs.ReplayBuffer.open(path).close()


def test_a_reader_closes_and_says_what_it_reads(path):
    rs.ReplayBuffer.create(path, SCHEMA, capacity=10).close()
    reader = rs.Reader.open(path)
    assert repr(reader) == f"Reader({path!r}, 0 items live)"
    reader.close()
    reader.close()  # twice is fine
    assert repr(reader).endswith("closed)")
    with pytest.raises(rs.ClosedError):
        reader.sample(1)
    with rs.Reader.open(path) as r:
        assert len(r) == 0
    with pytest.raises(rs.ClosedError):
        len(r)


def test_the_package_says_its_version():
    import importlib.metadata

    assert rs.__version__ == importlib.metadata.version("replaystore")
    assert rs.__version__.count(".") == 2


def test_checkpoints_are_bounded_and_their_disk_counted(path):
    """Issue 33.2: ten get_state() calls of a training loop keep 3 unnamed snapshots,
    named ones stay, and stats() says what the snapshots alone hold."""
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=4096, alpha=0.6, segment_slots=256)
    best = buf.get_state("best")
    states = []
    for step in range(10):
        buf.add_batch(items(step * 300, step * 300 + 300))
        states.append(buf.get_state())
    names = [s["name"] for s in buf.snapshots()]
    assert names == ["best"] + [s["name"] for s in states[-3:]]
    assert buf.stats()["snapshot_bytes"] > 0
    with pytest.raises(rs.StateError, match="no snapshot"):
        buf.set_state(states[0])
    buf.set_state(states[-2])
    buf.keep_states = None
    for _ in range(4):
        buf.get_state()
    assert len(buf.snapshots()) == 1 + 3 + 4
    buf.get_state(keep_last=1)
    assert [s["name"] for s in buf.snapshots()][0] == "best" and len(buf.snapshots()) == 2
    with pytest.raises(ValueError, match="named one"):
        buf.get_state("x", keep_last=2)
    buf.set_state(best)
    buf.close()


def test_indices_come_as_int64_from_every_draw_unless_set_to_uint64(path):
    """No torch needed: every draw's indices are int64 (NumPy's index type; uint64 mixed
    with int64 arithmetic would give float64), every call that takes indices takes them
    back, and set_index_dtype("uint64") gives the engine's own type."""
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=100, alpha=0.6) as buf:
        buf.add_batch(items(0, 50))
    assert rs.index_dtype() == "int64"
    with rs.ReplayBuffer.open(path) as buf:
        b = buf.sample(16, beta=0.4)
        assert b["indices"].dtype == np.int64
        assert (b["indices"] - np.int64(1)).dtype == np.int64
        check_batch(buf.get(b["indices"]))
        assert buf.update_priorities(b["indices"], np.ones(16))["applied"] == 16
        r = rs.Reader.open(path)
        assert r.sample(4)["indices"].dtype == np.int64
        r.close()
    rs.set_index_dtype("uint64")
    try:
        with rs.ReplayBuffer.open(path) as buf:
            b = buf.sample(16, beta=0.4)
            assert b["indices"].dtype == np.uint64
            check_batch(buf.get(b["indices"]))
        with pytest.raises(ValueError, match="'uint64' or 'int64'"):
            rs.set_index_dtype("float64")
    finally:
        rs.set_index_dtype("int64")
    with rs.ReplayBuffer.open(path) as buf:
        assert buf.sample(2)["indices"].dtype == np.int64
