"""Promise (issue 33.5): one casting rule for every input kind. Arrays (NumPy, torch)
must have the field's dtype, and are refused with one message otherwise; single values
(Python, NumPy, 0-d tensors) and lists are stored when no value changes (a float into
an int field must be whole, a bool field takes 0/1, nothing may overflow into
infinity); cast="same_kind" opts into NumPy's same_kind conversion of arrays."""

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"action": "int64", "reward": "float32", "done": "bool", "v": ("float32", (2,)),
          "small": "int8"}


def base():
    return dict(action=0, reward=0.0, done=False, v=np.zeros(2, np.float32), small=0)


@pytest.fixture
def buf(tmp_path):
    with rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, 64) as b:
        yield b


def stored(buf, **change):
    i = buf.add(**dict(base(), **change))
    return {k: buf.get([i])[k][0].tolist() for k in change}


REFUSED = [
    (dict(action=1.7), "would be truncated"),
    (dict(reward=1e40), "too large for float32"),
    (dict(done=2), "takes True/False"),
    (dict(small=300), "does not fit int8"),
    (dict(v=np.array([0.1, 0.2])), "wrong dtype: expected <f4"),
    (dict(v=[1e40, 0.0]), "too large"),
    (dict(action=np.float64(2.5)), "would be truncated"),
]

STORED = [
    (dict(action=2.0), {"action": 2}),
    (dict(action=np.int32(5)), {"action": 5}),
    (dict(reward=1), {"reward": 1.0}),
    (dict(done=1), {"done": True}),
    (dict(v=[0.5, 0.25]), {"v": [0.5, 0.25]}),
    (dict(reward=np.float64(0.5)), {"reward": 0.5}),
]


@pytest.mark.parametrize("change, message", REFUSED)
def test_changed_values_are_refused_by_name_and_nothing_is_stored(buf, change, message):
    with pytest.raises(rs.SchemaError, match=message):
        buf.add(**dict(base(), **change))
    assert len(buf) == 0


@pytest.mark.parametrize("change, want", STORED)
def test_values_that_survive_are_stored(buf, change, want):
    assert stored(buf, **change) == want


def test_torch_tensors_follow_the_rule_of_arrays(buf):
    torch = pytest.importorskip("torch")
    with pytest.raises(rs.SchemaError, match="wrong dtype: expected <f4.*got <f8"):
        buf.add(**dict(base(), v=torch.tensor([0.1, 0.2], dtype=torch.float64)))
    with pytest.raises(rs.SchemaError) as array_error:
        buf.add(**dict(base(), v=np.array([0.1, 0.2])))
    with pytest.raises(rs.SchemaError) as tensor_error:
        buf.add(**dict(base(), v=torch.tensor([0.1, 0.2], dtype=torch.float64)))
    assert str(array_error.value) == str(tensor_error.value), "one message"
    assert stored(buf, v=torch.tensor([0.5, 0.25])) == {"v": [0.5, 0.25]}
    # A 0-d tensor is a single value: stored when it survives, refused when not.
    assert stored(buf, reward=torch.tensor(1.5, dtype=torch.float64)) == {"reward": 1.5}
    with pytest.raises(rs.SchemaError, match="would be truncated"):
        buf.add(**dict(base(), action=torch.tensor(1.5)))
    n = 3
    batch = {"action": torch.arange(n), "reward": torch.zeros(n), "done": torch.zeros(n, dtype=torch.bool),
             "v": torch.zeros(n, 2), "small": torch.zeros(n, dtype=torch.int8)}
    buf.add_batch(batch)
    with pytest.raises(rs.SchemaError, match="wrong dtype"):
        buf.add_batch(dict(batch, reward=torch.zeros(n, dtype=torch.float64)))


def test_same_kind_converts_arrays_of_the_same_kind_only(buf):
    assert buf.cast == "exact"
    buf.cast = "same_kind"
    assert stored(buf, v=np.array([0.1, 0.2]))["v"] == pytest.approx([0.1, 0.2], rel=1e-6)
    n = 2
    batch = {"action": np.arange(n, dtype=np.int32), "reward": np.zeros(n, np.float64),
             "done": np.zeros(n, bool), "v": np.zeros((n, 2)), "small": np.array([1, 2])}
    buf.add_batch(batch)
    with pytest.raises(rs.SchemaError, match="does not cast"):
        buf.add_batch(dict(batch, action=np.array([0.5, 1.0])))
    with pytest.raises(rs.SchemaError, match="do not fit int8"):
        buf.add_batch(dict(batch, small=np.array([1, 1000])))
    with pytest.raises(rs.SchemaError, match="infinity"):
        buf.add_batch(dict(batch, reward=np.array([1e300, 0.0])))
    with pytest.raises(ValueError, match="'exact' or 'same_kind'"):
        buf.cast = "unsafe"
    buf.cast = "exact"
    with pytest.raises(rs.SchemaError, match="wrong dtype"):
        buf.add_batch(batch)
