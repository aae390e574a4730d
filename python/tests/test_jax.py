"""JAX output and the flashbax-shaped buffers (replaystore.jax), beside flashbax itself:
the same pytrees out, the same shapes and dtypes, the same distribution of sequence
starts; draws over the same memory on the CPU; the experience kept across a kill."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from peers import chi_square_two, peer
from readme_blocks import block, run_twice

jax = peer("jax")
fbx = peer("flashbax")
import jax.numpy as jnp  # noqa: E402

import replaystore as rs  # noqa: E402
import replaystore.jax as rsj  # noqa: E402


def example():
    """One step of one row: nested dicts, a tuple, scalars and arrays of three dtypes."""
    return {"obs": jnp.zeros((2, 3), jnp.float32), "id": jnp.int32(0),
            "extras": {"done": jnp.bool_(False), "pair": (jnp.zeros(2, jnp.uint8), jnp.float32(0))}}


def steps(rows, time, first=0):
    """Experience ``[rows, time, ...]`` whose ``id`` says row and time: ``row * 1000 + t``."""
    ids = (np.arange(rows)[:, None] * 1000 + first + np.arange(time)[None, :]).astype(np.int32)
    return {"obs": np.broadcast_to(ids[..., None, None], (rows, time, 2, 3)).astype(np.float32),
            "id": ids,
            "extras": {"done": ids % 7 == 0,
                       "pair": (np.broadcast_to((ids % 256)[..., None], (rows, time, 2)).astype(np.uint8),
                                (ids * 0.5).astype(np.float32))}}


def shaped(batch, sequences, batches):
    """``batch`` ``[rows, time, ...]`` as an add takes it: without the time axis (its first
    step) unless adding sequences, without the rows axis (the first row) unless adding
    batches."""
    if not sequences:
        batch = jax.tree_util.tree_map(lambda x: x[:, 0], batch)
    if not batches:
        batch = jax.tree_util.tree_map(lambda x: x[0], batch)
    return batch


def described(tree):
    """Structure, shapes and dtypes: what must agree with flashbax's."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, [(tuple(x.shape), np.dtype(x.dtype)) for x in leaves]


def check_consistent(tree):
    """Every leaf of a step was made from that step's id."""
    ids = np.asarray(tree["id"])
    assert (np.asarray(tree["obs"]) == ids[..., None, None]).all()
    assert (np.asarray(tree["extras"]["done"]) == (ids % 7 == 0)).all()
    assert (np.asarray(tree["extras"]["pair"][0]) == (ids % 256)[..., None]).all()
    assert (np.asarray(tree["extras"]["pair"][1]) == ids * 0.5).all()


def test_as_jax_is_the_draws_memory_on_the_cpu(tmp_path):
    b = rs.ReplayBuffer.create(tmp_path / "b", {"obs": ("float32", (4,)), "a": "int32",
                                                "done": "bool", "r": "float64"}, 100)
    b.add_batch({"obs": np.arange(40, dtype=np.float32).reshape(10, 4),
                 "a": np.arange(10, dtype=np.int32), "done": np.arange(10) % 2 == 0,
                 "r": np.arange(10, dtype=np.float64)})
    for _ in range(20):
        drawn = b.sample(16)
        x = rsj.as_jax(drawn)
        for name in ("obs", "a", "done"):
            assert isinstance(x[name], jax.Array)
            assert x[name].unsafe_buffer_pointer() == drawn[name].ctypes.data, name
            np.testing.assert_array_equal(np.asarray(x[name]), drawn[name])
        # 64-bit arrays as jnp.asarray has them (32-bit unless jax_enable_x64).
        assert x["r"].dtype == jnp.asarray(drawn["r"]).dtype
        np.testing.assert_allclose(np.asarray(x["r"]), drawn["r"])
        assert isinstance(x["indices"], np.ndarray) and x["indices"].dtype == np.int64
        np.testing.assert_array_equal(np.asarray(x["a"]), x["indices"])
    cpu = jax.devices("cpu")[0]
    for device in (cpu, "cpu"):
        y = rsj.as_jax(b.sample(8), device=device)
        assert y["obs"].devices() == {cpu}


def test_as_jax_keeps_nested_dicts_and_text(tmp_path):
    b = rs.ReplayBuffer.create(tmp_path / "b", {"pos": ("float32", (2,)), "note": "str"}, 10)
    b.add(pos=np.ones(2, np.float32), note="a")
    x = rsj.as_jax({"o": b.sample(3)})
    assert isinstance(x["o"]["pos"], jax.Array) and x["o"]["note"] == ["a", "a", "a"]


def test_out_type_jax_is_as_jax_of_the_same_draw_on_every_handle(tmp_path):
    """``out_type="jax"`` on ``sample``, a reader's and a unit draw's: the arrays
    ``as_jax`` makes of the same draw (same seed), over the draw's own memory."""
    b = rs.ReplayBuffer.create(tmp_path / "b", {"obs": ("float32", (4,)), "a": "int32"}, 100)
    b.add_batch({"obs": np.arange(40, dtype=np.float32).reshape(10, 4),
                 "a": np.arange(10, dtype=np.int32)})
    reader = rs.Reader.open(tmp_path / "b")
    for handle in (b, reader):
        x = handle.sample(16, seed=5, out_type="jax")
        want = handle.sample(16, seed=5)
        assert isinstance(x["obs"], jax.Array) and isinstance(x["indices"], np.ndarray)
        np.testing.assert_array_equal(np.asarray(x["obs"]), want["obs"])
        np.testing.assert_array_equal(x["indices"], want["indices"])
    schema = {"obs.pos": ("float32", (3,)), "action": "int64", "reward": "float32"}
    e = rs.ReplayBuffer.create(tmp_path / "e", schema, 64, episodic=True)
    t = np.arange(6, dtype=np.float32)
    e.add_episode({"obs": {"pos": np.repeat(t[:, None], 3, 1)}, "action": np.arange(5),
                   "reward": np.ones(5, np.float32)}, terminated=True)
    tr = e.sample_transitions(8, "obs", nstep=2, seed=1, nested=True, out_type="jax")
    assert isinstance(tr["next_obs"]["pos"], jax.Array)
    np.testing.assert_array_equal(np.asarray(tr["next_obs"]["pos"][:, 0]),
                                  np.minimum(np.asarray(tr["obs"]["pos"][:, 0]) + 2, 5))
    assert isinstance(e.sample_episodes(1, out_type="jax")["obs.pos"], jax.Array)


def test_out_type_refuses_unknown_types_and_jax_into_out(tmp_path):
    b = rs.ReplayBuffer.create(tmp_path / "b", {"obs": ("float32", (4,))}, 10)
    b.add(obs=np.ones(4, np.float32))
    with pytest.raises(ValueError, match='out_type must be "numpy", "torch" or "jax", got \'tf\''):
        b.sample(2, out_type="tf")
    kept = b.sample(2)
    # out= is filled again by the next draw; a jax.Array must never change.
    with pytest.raises(TypeError, match="out="):
        b.sample(2, out=kept, out_type="jax")
    assert b.sample(2, out=kept, out_type="numpy")["obs"] is kept["obs"]


@pytest.mark.parametrize("add_batches", [False, True])
@pytest.mark.parametrize("add_sequences", [False, True])
def test_item_buffer_matches_flashbax(tmp_path, add_batches, add_sequences):
    kw = dict(max_length=64, min_length=4, sample_batch_size=16,
              add_sequences=add_sequences, add_batches=add_batches)
    theirs, ours = fbx.make_item_buffer(**kw), rsj.make_item_buffer(tmp_path / "items", **kw)
    ts, os_ = theirs.init(example()), ours.init(example())
    added = set()
    for k in range(4):
        batch = shaped(steps(3, 5, first=10 * k), add_sequences, add_batches)
        added.update(np.asarray(batch["id"]).ravel().tolist())
        ts, os_ = theirs.add(ts, batch), ours.add(os_, batch)
    assert ours.can_sample(os_) == bool(theirs.can_sample(ts))
    key = jax.random.PRNGKey(3)
    mine, real = ours.sample(os_, key), theirs.sample(ts, key)
    assert described(mine.experience) == described(real.experience)
    check_consistent(mine.experience)
    assert set(np.asarray(mine.experience["id"]).tolist()) <= added


@pytest.mark.parametrize("add_batch_size", [None, 4])
@pytest.mark.parametrize("add_sequences", [False, True])
def test_flat_buffer_matches_flashbax(tmp_path, add_batch_size, add_sequences):
    kw = dict(max_length=128, min_length=8, sample_batch_size=32,
              add_sequences=add_sequences, add_batch_size=add_batch_size)
    theirs, ours = fbx.make_flat_buffer(**kw), rsj.make_flat_buffer(tmp_path / "flat", **kw)
    ts, os_ = theirs.init(example()), ours.init(example())
    rows = add_batch_size or 1
    for k in range(12):
        batch = steps(rows, 3, first=3 * k) if add_sequences else steps(rows, 1, first=k)
        batch = shaped(batch, add_sequences, add_batch_size is not None)
        ts, os_ = theirs.add(ts, batch), ours.add(os_, batch)
        assert ours.can_sample(os_) == bool(theirs.can_sample(ts)), k
    key = jax.random.PRNGKey(5)
    mine, real = ours.sample(os_, key), theirs.sample(ts, key)
    assert type(mine.experience).__name__ == type(real.experience).__name__ == "ExperiencePair"
    assert described(mine.experience.first) == described(real.experience.first)
    assert described(mine.experience.second) == described(real.experience.second)
    first, second = mine.experience
    check_consistent(first)
    check_consistent(second)
    # Each transition: a step and the next step of the same row.
    np.testing.assert_array_equal(np.asarray(second["id"]), np.asarray(first["id"]) + 1)


def test_trajectory_buffer_matches_flashbax_in_shapes_and_start_distribution(tmp_path):
    kw = dict(add_batch_size=3, sample_batch_size=64, sample_sequence_length=4, period=2,
              min_length_time_axis=6, max_length_time_axis=20)
    theirs = fbx.make_trajectory_buffer(**kw)
    ours = rsj.make_trajectory_buffer(tmp_path / "traj", **kw)
    ts, os_ = theirs.init(example()), ours.init(example())
    # 27 steps into a ring of 20: the 7 oldest are gone from both.
    for k in range(9):
        batch = steps(3, 3, first=3 * k)
        ts, os_ = theirs.add(ts, batch), ours.add(os_, batch)
    assert os_.is_full and bool(ts.is_full)
    assert os_.current_index == int(ts.current_index)
    counts = {"ours": np.zeros((3, 27), int), "theirs": np.zeros((3, 27), int)}
    for seed in range(60):
        key = jax.random.PRNGKey(seed)
        for name, got in (("ours", ours.sample(os_, key)), ("theirs", theirs.sample(ts, key))):
            tree = got.experience
            assert described(tree) == described(theirs.sample(ts, key).experience)
            check_consistent(tree)
            ids = np.asarray(tree["id"])
            row, t = ids // 1000, ids % 1000
            # One row, consecutive steps, from the steps held, every `period` from the oldest.
            assert (row == row[:, :1]).all() and (np.diff(t, axis=1) == 1).all()
            assert (t[:, 0] >= 7).all() and (t[:, -1] < 27).all() and ((t[:, 0] - 7) % 2 == 0).all()
            np.add.at(counts[name], (row[:, 0], t[:, 0]), 1)
    chi_square_two(counts["ours"].ravel(), counts["theirs"].ravel())


def test_an_item_buffer_keeps_its_experience_across_a_kill(tmp_path):
    path = tmp_path / "items"
    child = textwrap.dedent(f"""
        import os, numpy as np, jax.numpy as jnp, replaystore.jax as rsj
        b = rsj.make_item_buffer({str(path)!r}, max_length=100, min_length=1,
                                 sample_batch_size=4, add_batches=True)
        s = b.init({{"x": jnp.zeros(3), "id": jnp.int32(0)}})
        for k in range(5):
            s = b.add(s, {{"x": np.full((4, 3), k, np.float32),
                           "id": np.arange(4 * k, 4 * k + 4, dtype=np.int32)}})
        print("added", flush=True)
        os.kill(os.getpid(), 9)
    """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert run.returncode == -9 and "added" in run.stdout, run.stderr
    b = rsj.make_item_buffer(path, max_length=100, min_length=1, sample_batch_size=64,
                             add_batches=True)
    s = b.init({"x": jnp.zeros(3), "id": jnp.int32(0)})
    got = b.sample(s, jax.random.PRNGKey(0)).experience
    ids = np.asarray(got["id"])
    assert set(ids.tolist()) <= set(range(20)) and len(set(ids.tolist())) > 10
    np.testing.assert_array_equal(np.asarray(got["x"])[:, 0], ids // 4)
    # A Reader, as another process opens one, sees the same experience while it is open.
    reader = rs.Reader.open(path)
    assert len(reader) == 20 and sorted(reader.get(np.arange(20))["['id']"][:, 0]) == list(range(20))
    reader.close()
    # Another item shape in the same folder is refused, naming the difference.
    s.close()
    with pytest.raises(rs.SchemaError):
        b.init({"x": jnp.zeros(4), "id": jnp.int32(0)})


def test_bad_batches_are_refused_naming_the_leaf(tmp_path):
    b = rsj.make_trajectory_buffer(tmp_path / "t", add_batch_size=2, sample_batch_size=2,
                                   sample_sequence_length=2, period=1, min_length_time_axis=2,
                                   max_length_time_axis=10)
    s = b.init({"obs": jnp.zeros(3)})
    with pytest.raises(ValueError, match=r"leaf \['obs'\]: expected shape \[2, steps, 3\]"):
        b.add(s, {"obs": np.zeros((3, 4, 3), np.float32)})
    with pytest.raises(ValueError, match="structure"):
        b.add(s, {"obs": np.zeros((2, 4, 3), np.float32), "x": np.zeros((2, 4))})
    with pytest.raises(ValueError, match="can_sample is False"):
        b.sample(s, jax.random.PRNGKey(0))
    assert len(s.buffer) == 0


def test_the_readme_jax_block_runs_and_runs_again(tmp_path):
    check = ("\nassert x['obs'].shape == (256, 4) and isinstance(x['obs'], jax.Array)\n"
             "assert y['obs'].devices() == {jax.devices('cpu')[0]}\n"
             "assert pair.first['obs'].shape == (32, 4) and pair.second['r'].shape == (32,)\n"
             # The step after t is t + 1 (15 is followed by the next run's 0).
             "assert bool(((pair.second['obs'] - pair.first['obs']) % 16 == 1).all())\n"
             "print(len(buf), len(state.buffer))\n")
    # The second run opens both folders with what the first left.
    assert run_twice(block("jax") + check, tmp_path) == [["512", "16"], ["1024", "32"]]
