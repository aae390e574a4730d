"""Promise (issue 29): text, bytes and ragged arrays are stored and returned exactly, in
each of the three layouts a draw offers, bad values are refused with nothing stored, and
LLM self-play steps shaped as UnstableBaselines keeps them (``Step(pid, obs, act,
reward, env_id, step_info)``) survive a kill -9 of the writer."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {
    "obs": "str",
    "act": ("str", (None,), 4096),
    "tokens": ("int32", (None,)),
    "reward": "float32",
    "pid": "int8",
    "env_id": "str",
    "step_info": "bytes",
}


# The shape of ``unstable._types.Step``: the adapter's stand-in, which has its fields.
from replaystore.compat.unstable import Step  # noqa: E402


def step(i):
    """Step i: every value derived from its index (lengths too, some empty, some not
    ASCII), so any row can be checked."""
    return Step(
        pid=i % 2,
        obs=("<obs> " + "é" * (i % 7) + "x" * (i * 37 % 900)),
        act=f"[move {i}]" * (i % 4),
        reward=float(i % 5) - 2.0,
        env_id=f"TicTacToe-v{i % 8}",
        step_info={"raw_reward": i % 3, "step": i},
    )


def tokens(i):
    return np.arange(i * 13 % 300, dtype=np.int32) ^ np.int32(i)


def columns(lo, hi):
    steps = [step(i) for i in range(lo, hi)]
    return {
        "obs": [s.obs for s in steps],
        "act": [s.act for s in steps],
        "tokens": [tokens(i) for i in range(lo, hi)],
        "reward": np.array([s.reward for s in steps], np.float32),
        "pid": np.array([s.pid for s in steps], np.int8),
        "env_id": [s.env_id for s in steps],
        "step_info": [json.dumps(s.step_info).encode() for s in steps],
    }


def check(batch, layout="list"):
    """Every row of a draw equals the step its index names."""
    for r, i in enumerate(batch["indices"].tolist()):
        s = step(i)
        assert batch["reward"][r] == np.float32(s.reward)
        assert batch["pid"][r] == s.pid
        if layout == "list":
            assert batch["obs"][r] == s.obs
            assert batch["act"][r] == s.act
            assert batch["env_id"][r] == s.env_id
            assert json.loads(batch["step_info"][r]) == s.step_info
            np.testing.assert_array_equal(batch["tokens"][r], tokens(i))
        elif layout == "flat":
            o = batch["obs_offsets"]
            assert bytes(batch["obs"][o[r] : o[r + 1]]).decode() == s.obs
            t = batch["tokens_offsets"]
            np.testing.assert_array_equal(batch["tokens"][t[r] : t[r + 1]], tokens(i))
        else:
            n = batch["tokens_lengths"][r]
            np.testing.assert_array_equal(batch["tokens"][r, :n], tokens(i))
            assert (batch["tokens"][r, n:] == -100).all()
            m = batch["obs_lengths"][r]
            assert bytes(batch["obs"][r, :m]).decode() == s.obs


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "buf")


def test_values_round_trip_in_every_layout_and_after_a_reopen(path):
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=500)
    for i in range(10):
        s = step(i)
        assert (
            buf.add(
                obs=s.obs,
                act=s.act,
                tokens=tokens(i),
                reward=s.reward,
                pid=s.pid,
                env_id=s.env_id,
                step_info=json.dumps(s.step_info).encode(),
            )
            == i
        )
    assert buf.add_batch(columns(10, 200)).tolist() == list(range(10, 200))
    everything = list(range(200))
    check(buf.get(everything))
    check(buf.get(everything, values="flat"), "flat")
    check(buf.get(everything, values="padded", pad=-100), "padded")
    check(buf.sample(64))
    check(buf.sample(64, values="padded", pad=-100), "padded")
    buf.close()
    with rs.ReplayBuffer.open(path) as buf:
        check(buf.get(everything))
        buf.add_batch(columns(200, 210))
        check(buf.get(list(range(200, 210))))


def test_the_schema_declares_lengths_and_pickles(path):
    import pickle

    s = rs.Schema(SCHEMA)
    assert ("act", "str", (None,), 4096) in s.fields
    assert pickle.loads(pickle.dumps(s)) == s
    assert "tokens" in s.names and len(s) == len(SCHEMA)
    with pytest.raises(rs.SchemaError, match="maximum length"):
        rs.Schema({"x": ("float32", (3,), 10)})


def test_bad_values_are_refused_with_nothing_stored(path):
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=50)
    buf.add_batch(columns(0, 3))
    good = dict(obs="o", act="a", tokens=tokens(1), reward=0.0, pid=0, env_id="e", step_info=b"{}")
    cases = [
        (dict(act="x" * 4097), ValueError, "at most 4096"),
        (dict(obs=b"ok\xff"), ValueError, "UTF-8"),
        (dict(tokens=np.arange(3, dtype=np.float64)), rs.SchemaError, "wrong dtype"),
        (dict(tokens=[1, 2.5]), rs.SchemaError, "truncated"),
        (dict(tokens=np.zeros((2, 2), np.int32)), rs.SchemaError, "1-D"),
        (dict(step_info="text"), rs.SchemaError, "bytes"),
        (dict(obs=3), rs.SchemaError, "str"),
    ]
    for change, error, match in cases:
        with pytest.raises(error, match=match):
            buf.add(**{**good, **change})
    with pytest.raises(rs.SchemaError, match="one per row"):
        buf.add_batch({**columns(3, 5), "obs": "not a list"})
    with pytest.raises(rs.SchemaError):
        buf.add_batch({**columns(3, 5), "obs": ["only one"]})
    assert len(buf) == 3
    check(buf.get([0, 1, 2]))


WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    import replaystore as rs
    from test_variable import columns
    buf = rs.ReplayBuffer.open(sys.argv[1])
    i = buf.stats()["tail"]
    while True:
        n = 1 + i % 7
        buf.add_batch(columns(i, i + n))
        i += n
        print(i, flush=True)
    """
)


def test_self_play_steps_survive_a_kill_9_of_the_writer(path):
    # A value space that fills before the 2,000 rows do: the ring evicts for room.
    rs.ReplayBuffer.create(path, SCHEMA, capacity=2_000, heap_bytes=2 << 20, evict_for_room=True).close()
    here = os.path.dirname(__file__)
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-c", WRITER, path, here], stdout=subprocess.PIPE, text=True)
        acked = 0
        for line in p.stdout:
            acked = int(line)
            if acked >= 1_500 + _ * 1_000:
                break
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        with rs.ReplayBuffer.open(path) as buf:
            stats = buf.stats()
            assert stats["tail"] >= acked
            live = list(range(stats["head"], stats["tail"]))
            check(buf.get(live))
            assert stats["evicted"] > 0 or _ == 0


def test_text_and_sequence_spaces_become_variable_length_fields_that_store_their_samples(path):
    gym = pytest.importorskip("gymnasium")
    obs = gym.spaces.Text(max_length=50)
    act = gym.spaces.Sequence(gym.spaces.Discrete(10))
    s = rs.Schema.from_spaces(obs, act)
    fields = {f[0]: f for f in s.fields}
    assert fields["obs"][1:3] == ("str", (None,)) and fields["obs"][3] >= 50
    assert fields["action"][1:] == ("<i8", (None,))
    buf = rs.ReplayBuffer.create(path, s, capacity=20)
    obs.seed(1), act.seed(2)
    added = []
    for _ in range(10):
        o, a, n = obs.sample(), np.asarray(act.sample(), np.int64), obs.sample()
        buf.add(obs=o, action=a, reward=1.0, next_obs=n, terminated=False, truncated=False)
        added.append((o, a, n))
    got = buf.get(list(range(10)))
    for r, (o, a, n) in enumerate(added):
        assert got["obs"][r] == o and got["next_obs"][r] == n
        np.testing.assert_array_equal(got["action"][r], a)
    with pytest.raises(rs.SchemaError, match="Sequence of Box"):
        rs.Schema.from_spaces(gym.spaces.Sequence(gym.spaces.Box(0, 1, (3,))), gym.spaces.Discrete(2))


def test_a_reader_in_another_process_returns_each_steps_values(path):
    buf = rs.ReplayBuffer.create(path, SCHEMA, capacity=100)
    buf.add_batch(columns(0, 40))
    buf.flush()
    code = textwrap.dedent(
        f"""
        import sys, json
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import replaystore as rs
        from test_variable import check
        r = rs.Reader.open({path!r})
        check(r.sample(64))
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def cli():
    """The ``replaystore`` command ``./test.sh`` builds before pytest runs."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.environ.get("REPLAYSTORE_BIN") or os.path.join(root, "target", "debug", "replaystore")
    if not os.path.exists(exe):
        pytest.fail(f"{exe} is missing: build it with `cargo build` (./test.sh does)")
    return exe


def test_an_exported_parquet_file_is_what_pyarrow_and_pandas_read(path, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    with rs.ReplayBuffer.create(path, SCHEMA, capacity=300) as buf:
        buf.add_batch(columns(0, 350))
    out = tmp_path / "steps.parquet"
    subprocess.run([cli(), "export", path, str(out)], check=True, capture_output=True)
    table = pq.read_table(out)
    assert [str(t) for t in table.schema.types] == [
        "float", "int8", "string", "string", "list<item: int32 not null>", "string", "binary"]
    df = table.to_pandas()
    assert len(df) == 300
    for r in (0, 1, 77, 299):
        s = step(50 + r)
        assert (df.obs[r], df.act[r], df.env_id[r]) == (s.obs, s.act, s.env_id)
        assert json.loads(df.step_info[r]) == s.step_info
        assert df.reward[r] == np.float32(s.reward) and df.pid[r] == s.pid
        np.testing.assert_array_equal(df.tokens[r], tokens(50 + r))
    # JSON lines too: pandas reads one object per item.
    jl = tmp_path / "steps.jsonl"
    subprocess.run([cli(), "export", path, str(jl), "--last", "5"], check=True, capture_output=True)
    import pandas as pd

    lines = pd.read_json(jl, lines=True)
    assert list(lines.obs) == [step(i).obs for i in range(345, 350)]


def test_a_parquet_file_pyarrow_wrote_imports_as_a_buffer(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    n = 2_500
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 40, n)
    tokens_ = [rng.integers(0, 50_000, k, dtype=np.int32) for k in lengths]
    table = pa.table({
        "prompt": pa.array([f"q{i} " * (i % 9) for i in range(n)], pa.large_string()),
        "tokens": pa.array(tokens_, pa.list_(pa.int32())),
        "logprobs": pa.array([(-t / 1e5).astype(np.float32) for t in tokens_], pa.large_list(pa.float32())),
        "obs": pa.array(list(rng.random((n, 3), np.float32)), pa.list_(pa.float32(), 3)),
        "reward": pa.array(rng.random(n)),
        "done": pa.array(lengths % 5 == 0),
    })
    src = tmp_path / "hf.parquet"
    pq.write_table(table, src, row_group_size=700)
    dst = str(tmp_path / "imported")
    r = subprocess.run([cli(), "import", str(src), dst], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with rs.ReplayBuffer.open(dst) as buf:
        assert len(buf) == n
        got = buf.get(list(range(n)))
    assert got["prompt"] == [f"q{i} " * (i % 9) for i in range(n)]
    for i in range(0, n, 97):
        np.testing.assert_array_equal(got["tokens"][i], tokens_[i])
        np.testing.assert_array_equal(got["logprobs"][i], (-tokens_[i] / 1e5).astype(np.float32))
    np.testing.assert_array_equal(got["obs"], np.stack(table.column("obs").to_numpy(zero_copy_only=False)))
    np.testing.assert_array_equal(got["reward"], table.column("reward").to_numpy())
    np.testing.assert_array_equal(got["done"], lengths % 5 == 0)
    # A null is refused, naming the column and row, and no buffer appears.
    bad = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"reward": pa.array([1.0, None, 3.0])}), bad)
    r = subprocess.run([cli(), "import", str(bad), str(tmp_path / "none")], capture_output=True, text=True)
    assert r.returncode == 2 and 'column "reward", row 1: null' in r.stderr, r.stderr
    assert not (tmp_path / "none").exists()
