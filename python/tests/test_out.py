"""`sample(..., out=...)`: a training loop draws every batch into arrays it keeps, so no
draw allocates. The arrays come back as given, filled exactly as a fresh draw with the same
seed would be; an array that does not fit the draw is refused by name, and nothing stored
is touched."""

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"obs": ("float32", (3,)), "action": "int64", "done": "bool", "frame": ("uint8", (2, 2))}


def items(lo, hi):
    i = np.arange(lo, hi)
    return {
        "obs": np.stack([i, i + 0.5, -i], axis=1).astype(np.float32),
        "action": (3 * i - 7).astype(np.int64),
        "done": i % 3 == 0,
        "frame": ((np.arange(4)[None, :] + i[:, None]) % 256).astype(np.uint8).reshape(-1, 2, 2),
    }


@pytest.fixture
def buf(tmp_path):
    with rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, capacity=64, alpha=0.6, seed=0) as b:
        b.add_batch(items(0, 100))  # wraps: live 36..100
        yield b


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("beta", [None, 0.4])
def test_a_draw_into_out_fills_the_callers_arrays_as_a_fresh_draw_would(buf, beta):
    fresh = buf.sample(32, beta=beta, seed=5)
    out = {k: np.full_like(v, 7) for k, v in fresh.items()}
    held = dict(out)
    got = buf.sample(32, beta=beta, seed=5, out=out)
    # The caller's own objects, in the draw's order, filled in place.
    assert list(got) == list(fresh)
    assert all(got[k] is held[k] for k in got)
    same(got, fresh)
    # And again: the next draw reuses the same memory and matches its fresh twin.
    again = buf.sample(32, beta=beta, seed=9, out=got)
    assert all(again[k] is held[k] for k in again)
    same(again, buf.sample(32, beta=beta, seed=9))


def test_out_keys_the_draw_does_not_fill_are_left_alone_and_not_returned(buf):
    out = {k: v.copy() for k, v in buf.sample(8, beta=0.4, seed=1).items()}
    weights = out["weights"].copy()
    got = buf.sample(8, seed=2, out=out)  # uniform: no weights
    assert "weights" not in got
    np.testing.assert_array_equal(out["weights"], weights)


def test_every_draw_kind_and_handle_takes_out(tmp_path):
    schema = {"obs": ("float32", (2,)), "reward": "float32"}
    path = str(tmp_path / "e")
    with rs.ReplayBuffer.create(path, schema, capacity=100, episodic=True, seed=0) as buf:
        for ep in range(4):
            buf.add_reset(obs=np.array([0, ep], np.float32))
            for t in range(5):
                buf.add_step(obs=np.array([t + 1, ep], np.float32), reward=float(t),
                             terminated=t == 4)
        buf.flush()
        for call in (lambda **k: buf.sample_transitions(16, "obs", stack=2, nstep=2, gamma=0.9, **k),
                     lambda **k: buf.sample_sequences(4, 3, "obs", burn_in=1, **k),
                     lambda **k: buf.sample(16, **k)):
            fresh = call(seed=3)
            out = {k: np.empty_like(v) for k, v in fresh.items()}
            same(call(seed=3, out=out), fresh)
        r = rs.Reader.open(path)
        fresh = r.sample(16, seed=4)
        same(r.sample(16, seed=4, out={k: np.empty_like(v) for k, v in fresh.items()}), fresh)
    with rs.Lanes.create(str(tmp_path / "l"), {"x": "int64"}, 30, 3, seed=7) as lanes:
        lanes.add_batch({"x": np.arange(9, dtype=np.int64)}, [0, 1, 2] * 3)
        fresh = lanes.sample(12, seed=1)
        same(lanes.sample(12, seed=1, out={k: np.empty_like(v) for k, v in fresh.items()}), fresh)


def wrong(buf, match, **change):
    out = {k: np.empty_like(v) for k, v in buf.sample(16, seed=0).items()}
    for k, v in change.items():
        if v is None:
            del out[k]
        else:
            out[k] = v
    before = buf.stats()
    with pytest.raises(rs.SchemaError, match=match):
        buf.sample(16, out=out)
    # Nothing stored moved: the buffer draws and holds what it held.
    assert buf.stats()["len"] == before["len"] == 64
    assert buf.sample(4)["obs"].shape == (4, 3)


def test_an_array_that_does_not_fit_the_draw_is_refused_by_name(buf):
    wrong(buf, r'out\["obs"\]: expected <f4 \[16, 3\], got <f4 \[8, 3\]', obs=np.empty((8, 3), np.float32))
    wrong(buf, r'out\["action"\]: expected <i8 \[16\], got <i4 \[16\]', action=np.empty(16, np.int32))
    wrong(buf, r'out\["frame"\]: expected \|u1 \[16, 2, 2\], got no such array', frame=None)
    wrong(buf, r'out\["obs"\]: the array is not C-contiguous', obs=np.empty((3, 16), np.float32).T)
    wrong(buf, r'out\["obs"\]: expected a numpy array, got list', obs=[[0.0] * 3] * 16)
    wrong(buf, r'out\["obs"\]: dtype "<f2" has no replaystore equivalent', obs=np.empty((16, 3), np.float16))
    wrong(buf, r'out\["obs"\]: .*>f4', obs=np.empty((16, 3), ">f4"))
    ro = np.empty((16, 3), np.float32)
    ro.flags.writeable = False
    wrong(buf, r'out\["obs"\]: cannot write into it', obs=ro)


def test_two_out_keys_sharing_memory_are_refused(buf):
    shared = np.empty(16, np.uint64)
    with pytest.raises(rs.SchemaError, match="share no memory"):
        buf.sample(16, out={"indices": shared, "alias": shared})


def test_a_bool_out_array_holds_only_true_and_false(buf):
    fresh = buf.sample(64, seed=8)
    out = {k: np.empty_like(v) for k, v in fresh.items()}
    out["done"] = np.full(64, True)
    got = buf.sample(64, seed=8, out=out)
    assert got["done"].dtype == np.bool_
    assert set(got["done"].view(np.uint8).tolist()) <= {0, 1}
    np.testing.assert_array_equal(got["done"], fresh["done"])
