"""Promise: ``ReplayBuffer.export`` writes the files ``replaystore export`` writes (the
same code): ``.npz``, Parquet and JSON lines, the live items only unless
``include_removed=True`` (then with a ``removed`` column naming each cause), the count
of removed items left out in its answer, and refusals in Python's words. A buffer drawn
from with ``remove=True`` (every UnstableBaselines ``get_batch``) exports."""

import json

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"x": "int64", "obs": ("float32", (2,)), "text": "str"}


@pytest.fixture
def drawn(tmp_path):
    """10 items, 3 of them taken by a draw that removes and 1 removed by hand."""
    buf = rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, 32, item_states=True, seed=5)
    x = np.arange(10)
    buf.add_batch({"x": x, "obs": np.stack([x, -x], 1).astype(np.float32),
                   "text": [f"step {i}" for i in x]})
    taken = buf.sample(3, remove=True)["x"].tolist()
    buf.remove([9] if 9 not in taken else [0])
    gone = set(taken) | ({9} if 9 not in taken else {0})
    yield buf, sorted(set(range(10)) - gone), gone
    buf.close()


def test_npz_holds_the_live_items_and_counts_the_removed_ones(drawn, tmp_path):
    buf, kept, gone = drawn
    out = str(tmp_path / "x.npz")
    done = buf.export(out, fields=["x", "obs"], progress=False)
    assert str(done.pop("path")) == out
    assert done == {"items": len(kept), "fields": 2, "skipped_removed": len(gone)}
    with np.load(out) as z:
        assert z["x"].tolist() == kept
        assert z["obs"].tolist() == [[i, -i] for i in kept]
    done = buf.export(out, "npz", fields=["x"], include_removed=True, progress=False)
    assert done["items"] == 10 and done["skipped_removed"] == 0
    with np.load(out) as z:
        assert z["x"].tolist() == list(range(10))
        assert [i for i, c in enumerate(z["removed"].tolist()) if c] == sorted(gone)


def test_jsonl_and_parquet_hold_every_field_and_with_removed_items_their_cause(drawn, tmp_path):
    pa = pytest.importorskip("pyarrow.parquet")
    buf, kept, gone = drawn
    lines = tmp_path / "x.jsonl"
    assert buf.export(str(lines), progress=False)["items"] == len(kept)
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [r["x"] for r in rows] == kept and rows[0]["text"] == f"step {kept[0]}"
    table = tmp_path / "x.parquet"
    if not rs.HAS_PARQUET:
        # A source build without Parquet (what `pip install ./python` makes; ./test.sh
        # tests that one, .ci/run the wheel, which has it): refused, saying how to get
        # it, and no file or temporary file left behind.
        with pytest.raises(ValueError, match=r"--features parquet.*pip install ./python") as e:
            buf.export(str(table), include_removed=True, progress=False)
        assert ".jsonl" in str(e.value)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "x.jsonl"]
        return
    buf.export(str(table), include_removed=True, progress=False)
    t = pa.read_table(str(table)).to_pydict()
    assert t["x"] == list(range(10))
    assert [i for i, c in enumerate(t["removed"]) if c is not None] == sorted(gone)
    assert set(t["removed"]) - {None} <= {"sampled", "explicit"}


def test_refusals_name_python_keywords(drawn, tmp_path):
    buf, _, _ = drawn
    with pytest.raises(ValueError, match="fields=") as e:
        buf.export(str(tmp_path / "x.npz"), progress=False)  # a str field in an .npz
    assert "--" not in str(e.value)
    with pytest.raises(ValueError, match="format="):
        buf.export(str(tmp_path / "x.csv"), "csv", progress=False)
    with pytest.raises(rs.StateError):
        buf.export(str(tmp_path / "x.jsonl"), snapshot="nope", progress=False)
