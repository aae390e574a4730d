"""JAX on top of the buffer: draws as ``jax.Array``, and flashbax's buffers kept in a
replaystore folder. ``import replaystore.jax`` needs jax; flashbax is not needed.

- ``as_jax(batch, device=None)``: every array of a draw as a ``jax.Array``. On the CPU
  it is the same memory (DLPack: a draw's arrays start 64-byte aligned, which JAX takes
  without a copy); 64-bit arrays become 32-bit copies unless ``jax_enable_x64`` is set,
  as ``jnp.asarray`` makes them. With ``device`` (a ``jax.Device`` or a platform name
  such as ``"gpu"``) each is put there. ``indices`` stay NumPy: ``update_priorities``
  takes them back, and a lane's indices pass 2**31. Text values (lists) stay as they
  are.
- ``make_item_buffer``, ``make_flat_buffer``, ``make_trajectory_buffer``: flashbax's
  makers and calls (``init``, ``add``, ``sample``, ``can_sample``), the same pytrees in
  and the same shapes out, with the experience in the folder ``path`` instead of on the
  device: it survives a crash (``init`` in a folder that holds the buffer opens it with
  its experience), it may be larger than the device's memory, and other processes can
  read it. They read and write files, so they are called outside ``jax.jit``; the
  sampled batch is put on the device (``device=``) for the jitted update.

>>> import jax, jax.numpy as jnp, os, tempfile
>>> import replaystore.jax as rsj
>>> buffer = rsj.make_flat_buffer(os.path.join(tempfile.mkdtemp(), "fb"), max_length=1000,
...                               min_length=2, sample_batch_size=4)
>>> state = buffer.init({"obs": jnp.zeros(3), "reward": jnp.float32(0)})
>>> for t in range(5):
...     state = buffer.add(state, {"obs": jnp.full(3, t, jnp.float32), "reward": jnp.float32(t)})
>>> batch = buffer.sample(state, jax.random.PRNGKey(0)).experience
>>> batch.first["obs"].shape, bool((batch.second["reward"] == batch.first["reward"] + 1).all())
((4, 3), True)
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Union

import jax
import numpy as np

from ._native import ReplayBuffer

__all__ = [
    "as_jax",
    "BufferState",
    "ExperiencePair",
    "TrajectoryBuffer",
    "TrajectoryBufferSample",
    "TransitionSample",
    "make_flat_buffer",
    "make_item_buffer",
    "make_trajectory_buffer",
]

_Device = Union[str, "jax.Device", None]


def _device(device: _Device) -> Optional["jax.Device"]:
    if device is None or not isinstance(device, str):
        return device
    return jax.devices(device)[0]


def _array(value: Any, name: str, device: Optional["jax.Device"]) -> Any:
    if isinstance(value, dict):
        return {k: _array(v, f"{name}.{k}", device) for k, v in value.items()}
    if not isinstance(value, np.ndarray) or name == "indices" or name.endswith("_indices"):
        return value
    # DLPack takes a C-contiguous array as it is (a draw's arrays are); jnp.asarray
    # copies any other.
    if value.flags.c_contiguous:
        x = jax.dlpack.from_dlpack(value)
    else:
        x = jax.numpy.asarray(value)
    return x if device is None else jax.device_put(x, device)


def as_jax(batch: Dict[str, Any], device: _Device = None) -> Dict[str, Any]:
    """A draw's arrays as ``jax.Array`` (see the module).

    >>> import numpy as np, jax, replaystore as rs, replaystore.jax as rsj, tempfile, os
    >>> b = rs.ReplayBuffer.create(os.path.join(tempfile.mkdtemp(), "b"),
    ...                            {"obs": ("float32", (4,)), "reward": "float32"}, 100)
    >>> _ = b.add_batch({"obs": np.ones((10, 4), np.float32), "reward": np.arange(10, dtype=np.float32)})
    >>> drawn = b.sample(8)
    >>> x = rsj.as_jax(drawn)
    >>> type(x["obs"]).__name__, x["obs"].shape, type(x["indices"]).__name__
    ('ArrayImpl', (8, 4), 'ndarray')
    >>> x["obs"].unsafe_buffer_pointer() == drawn["obs"].ctypes.data   # no copy
    True
    """
    dev = _device(device)
    return {k: _array(v, k, dev) for k, v in batch.items()}


class TrajectoryBufferSample(NamedTuple):
    """What a trajectory or item buffer's ``sample`` returns, as flashbax's does."""

    experience: Any


class ExperiencePair(NamedTuple):
    """A flat buffer's transitions: each sampled step and the step after it."""

    first: Any
    second: Any


class TransitionSample(NamedTuple):
    """What a flat buffer's ``sample`` returns, as flashbax's does."""

    experience: ExperiencePair


def _names(paths: List[Any]) -> List[str]:
    """A field name per leaf: its path in the pytree (``['obs']``, ``.first``, ...)."""
    return [jax.tree_util.keystr(path) or "leaf" for path in paths]


class BufferState:
    """What ``init`` returns and ``add`` and ``sample`` take: the buffer in its folder
    (the experience is there, not in this object), and the structure of an item.
    ``add`` returns the same object. ``current_index`` and ``is_full`` are flashbax's:
    the time index the next add writes, and whether the ring has wrapped."""

    def __init__(self, buffer: ReplayBuffer, treedef: Any, names: List[str],
                 shapes: List[tuple]) -> None:
        self.buffer, self.treedef, self.names, self.shapes = buffer, treedef, names, shapes

    @property
    def current_index(self) -> int:
        return int(self.buffer.stats()["tail"] % self.buffer.capacity)

    @property
    def is_full(self) -> bool:
        return len(self.buffer) == self.buffer.capacity

    def close(self) -> None:
        """Closes the buffer (every add is already in its folder)."""
        self.buffer.close()


def _seed(rng_key: Any) -> int:
    """A NumPy seed from a JAX key (a raw ``uint32[2]`` key or a typed one)."""
    data = rng_key
    if jax.dtypes.issubdtype(getattr(rng_key, "dtype", None), jax.dtypes.prng_key):
        data = jax.random.key_data(rng_key)
    words = np.asarray(data, dtype=np.uint32).ravel()
    return int(sum(int(w) << (32 * i) for i, w in enumerate(words)))


class TrajectoryBuffer:
    """flashbax's ``TrajectoryBuffer`` over a replaystore buffer in ``path``: each time
    step of the ``add_batch_size`` rows added together is one item (every leaf with the
    rows as its first dimension), so the rows stay in step across a crash; ``sample``
    draws ``sample_batch_size`` sequences of ``sample_sequence_length`` steps of one row
    each, starting every ``period`` steps from the oldest step held, uniformly, as
    flashbax does. See ``make_trajectory_buffer``."""

    def __init__(self, path: str, *, add_batch_size: int, sample_batch_size: int,
                 sample_sequence_length: int, period: int, min_length_time_axis: int,
                 max_length_time_axis: int, device: _Device = None) -> None:
        if min(add_batch_size, sample_batch_size, sample_sequence_length, period) < 1:
            raise ValueError("add_batch_size, sample_batch_size, sample_sequence_length "
                             "and period must be at least 1")
        if sample_sequence_length > max_length_time_axis:
            raise ValueError(f"sample_sequence_length {sample_sequence_length} is longer "
                             f"than max_length_time_axis {max_length_time_axis}")
        if min_length_time_axis > max_length_time_axis:
            raise ValueError(f"min_length_time_axis {min_length_time_axis} is over "
                             f"max_length_time_axis {max_length_time_axis}")
        self.path, self.add_batch_size = str(path), add_batch_size
        self.sample_batch_size, self.period = sample_batch_size, period
        self.sample_sequence_length = sample_sequence_length
        self.min_length_time_axis = max(min_length_time_axis, sample_sequence_length)
        self.max_length_time_axis, self.device = max_length_time_axis, device

    def init(self, experience: Any) -> BufferState:
        """The buffer for items shaped as ``experience`` (one step of one row, no batch
        or time dimension): created in ``path``, or opened with what it holds when the
        folder already has it (``SchemaError`` when it was made for other items)."""
        paths, treedef = jax.tree_util.tree_flatten_with_path(experience)
        if not paths:
            raise ValueError("experience has no arrays")
        names = _names([p for p, _ in paths])
        leaves = [np.asarray(x) for _, x in paths]
        schema = {n: (x.dtype.name, (self.add_batch_size, *x.shape))
                  for n, x in zip(names, leaves)}
        buffer = ReplayBuffer.open_or_create(self.path, schema, self.max_length_time_axis)
        return BufferState(buffer, treedef, names, [x.shape for x in leaves])

    def add(self, state: BufferState, batch: Any) -> BufferState:
        """Adds ``batch``: every leaf ``[add_batch_size, steps, ...]``. All its steps
        or, on an error (named leaf, expected and got), none."""
        leaves, treedef = jax.tree_util.tree_flatten(batch)
        if treedef != state.treedef:
            raise ValueError(f"batch has structure {treedef}, the buffer's items "
                             f"{state.treedef}")
        columns, steps = {}, None
        for name, shape, leaf in zip(state.names, state.shapes, leaves):
            x = np.asarray(leaf)
            want = (self.add_batch_size, x.shape[1] if x.ndim > 1 else -1, *shape)
            if x.shape != want or (steps is not None and x.shape[1] != steps):
                raise ValueError(f"leaf {name}: expected shape [{self.add_batch_size}, "
                                 f"steps, {', '.join(map(str, shape))}], got {list(x.shape)}")
            steps = x.shape[1]
            columns[name] = np.ascontiguousarray(np.swapaxes(x, 0, 1))  # an item a step
        if steps:
            state.buffer.add_batch(columns)
        return state

    def can_sample(self, state: BufferState) -> bool:
        """Whether ``min_length_time_axis`` steps are held."""
        return len(state.buffer) >= self.min_length_time_axis

    def _draw(self, state: BufferState, rng_key: Any, length: int) -> List[np.ndarray]:
        """Each leaf ``[sample_batch_size, length, ...]``, as NumPy arrays."""
        if not self.can_sample(state):
            raise ValueError(f"{len(state.buffer)} steps are held; sampling needs "
                             f"{self.min_length_time_axis} (can_sample is False)")
        stats = state.buffer.stats()
        starts = (stats["tail"] - stats["head"] - length) // self.period + 1
        rng = np.random.default_rng(_seed(rng_key))
        n = self.sample_batch_size
        first = stats["head"] + rng.integers(0, starts, n) * self.period
        rows = rng.integers(0, self.add_batch_size, n)
        got = state.buffer.get((first[:, None] + np.arange(length)).ravel())
        pick = (np.arange(n)[:, None], np.arange(length)[None, :], rows[:, None])
        return [got[name].reshape(n, length, *got[name].shape[1:])[pick]
                for name in state.names]

    def _tree(self, state: BufferState, arrays: List[np.ndarray]) -> Any:
        dev = _device(self.device)
        return jax.tree_util.tree_unflatten(
            state.treedef, [_array(np.ascontiguousarray(a), "", dev) for a in arrays])

    def sample(self, state: BufferState, rng_key: Any) -> TrajectoryBufferSample:
        """``sample_batch_size`` sequences, every leaf ``[sample_batch_size,
        sample_sequence_length, ...]``, drawn with a NumPy generator seeded from
        ``rng_key`` (the same key draws the same sequences from the same steps)."""
        arrays = self._draw(state, rng_key, self.sample_sequence_length)
        return TrajectoryBufferSample(experience=self._tree(state, arrays))


class _ItemBuffer(TrajectoryBuffer):
    """flashbax's item buffer: items drawn independently, uniformly."""

    def __init__(self, path: str, *, add_sequences: bool, add_batches: bool, **kw: Any):
        super().__init__(path, add_batch_size=1, sample_sequence_length=1, period=1, **kw)
        self._lead = int(add_batches) + int(add_sequences)

    def add(self, state: BufferState, batch: Any) -> BufferState:
        """Adds one item, or ``[items, ...]`` with ``add_batches`` or
        ``add_sequences``, or ``[batch, steps, ...]`` with both."""
        def flat(x: Any) -> np.ndarray:
            x = np.asarray(x)
            lead = int(np.prod(x.shape[:self._lead], dtype=np.int64))
            return x.reshape(1, lead, *x.shape[self._lead:])
        return super().add(state, jax.tree_util.tree_map(flat, batch))

    def sample(self, state: BufferState, rng_key: Any) -> TrajectoryBufferSample:
        """``sample_batch_size`` items, every leaf ``[sample_batch_size, ...]``."""
        arrays = [a[:, 0] for a in self._draw(state, rng_key, 1)]
        return TrajectoryBufferSample(experience=self._tree(state, arrays))


class _FlatBuffer(TrajectoryBuffer):
    """flashbax's flat buffer: transitions, each a step and the step after it."""

    def __init__(self, path: str, *, add_sequences: bool, add_batches: bool, **kw: Any):
        super().__init__(path, sample_sequence_length=2, period=1, **kw)
        self._batches, self._sequences = add_batches, add_sequences

    def add(self, state: BufferState, batch: Any) -> BufferState:
        """Adds one transition, or ``[add_batch_size, ...]`` with ``add_batch_size``,
        ``[steps, ...]`` with ``add_sequences``, ``[add_batch_size, steps, ...]``
        with both."""
        def shaped(x: Any) -> np.ndarray:
            x = np.asarray(x)
            if not self._batches:
                x = x[None]
            return x if self._sequences else x[:, None]
        return super().add(state, jax.tree_util.tree_map(shaped, batch))

    def sample(self, state: BufferState, rng_key: Any) -> TransitionSample:
        """``sample_batch_size`` transitions: ``experience.first`` and ``.second``,
        every leaf ``[sample_batch_size, ...]``."""
        arrays = self._draw(state, rng_key, 2)
        first = self._tree(state, [a[:, 0] for a in arrays])
        second = self._tree(state, [a[:, 1] for a in arrays])
        return TransitionSample(experience=ExperiencePair(first=first, second=second))


def make_trajectory_buffer(path: str, add_batch_size: int, sample_batch_size: int,
                           sample_sequence_length: int, period: int,
                           min_length_time_axis: int, max_size: Optional[int] = None,
                           max_length_time_axis: Optional[int] = None,
                           device: _Device = None) -> TrajectoryBuffer:
    """flashbax's ``make_trajectory_buffer`` in ``path``: ``max_size`` items in all, or
    ``max_length_time_axis`` steps of every row (one of the two)."""
    if (max_size is None) == (max_length_time_axis is None):
        raise ValueError("give one of max_size and max_length_time_axis")
    if max_length_time_axis is None:
        max_length_time_axis = max_size // add_batch_size
    return TrajectoryBuffer(path, add_batch_size=add_batch_size,
                            sample_batch_size=sample_batch_size,
                            sample_sequence_length=sample_sequence_length, period=period,
                            min_length_time_axis=min_length_time_axis,
                            max_length_time_axis=max_length_time_axis, device=device)


def make_item_buffer(path: str, max_length: int, min_length: int, sample_batch_size: int,
                     add_sequences: bool = False, add_batches: bool = False,
                     device: _Device = None) -> TrajectoryBuffer:
    """flashbax's ``make_item_buffer`` in ``path``: ``max_length`` items."""
    if sample_batch_size > max_length:
        raise ValueError("sample_batch_size must be less than or equal to max_length")
    return _ItemBuffer(path, add_sequences=add_sequences, add_batches=add_batches,
                       sample_batch_size=sample_batch_size, min_length_time_axis=min_length,
                       max_length_time_axis=max_length, device=device)


def make_flat_buffer(path: str, max_length: int, min_length: int, sample_batch_size: int,
                     add_sequences: bool = False, add_batch_size: Optional[int] = None,
                     device: _Device = None) -> TrajectoryBuffer:
    """flashbax's ``make_flat_buffer`` in ``path``: ``max_length`` transitions in all,
    ``max_length // add_batch_size`` steps of each row."""
    rows = add_batch_size or 1
    if max_length // rows < 2:
        raise ValueError(f"max_length // add_batch_size must be at least 2, got "
                         f"{max_length} // {rows}")
    if sample_batch_size > max_length:
        raise ValueError("sample_batch_size must be less than or equal to max_length")
    return _FlatBuffer(path, add_sequences=add_sequences, add_batches=add_batch_size is not None,
                       add_batch_size=rows, sample_batch_size=sample_batch_size,
                       min_length_time_axis=min_length // rows + 1,
                       max_length_time_axis=max_length // rows, device=device)
