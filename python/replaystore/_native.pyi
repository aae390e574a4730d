"""Type stubs of the native module (re-exported by ``replaystore``)."""

from os import PathLike
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

#: The newest format version this package reads and writes (a buffer's MANIFEST is at 1,
#: 2 with variable-length fields, or 3 with item states; ``replaystore info`` says which).
FORMAT_VERSION: int
__version__: str
#: How the extension was built (profile, opt-level, LTO, target CPU) and the row check
#: this CPU runs: the line benchmarks print beside their figures.
BUILD: str
#: Whether ``export`` and the command read and write Parquet: the wheel does; built from
#: source, only with ``MATURIN_PEP517_ARGS="--features parquet" pip install ./python``.
HAS_PARQUET: bool

def set_index_dtype(dtype: str) -> None:
    """``"int64"`` (default: NumPy's, PyTorch's and JAX's index type; exact below 2**63)
    or ``"uint64"``: the dtype every draw's ``indices`` have."""
def index_dtype() -> str: ...
def nest(batch: Mapping[str, Any]) -> Dict[str, Any]:
    """``{"obs.pos": a}`` as ``{"obs": {"pos": a}}``, the same arrays."""
def cli(argv: Sequence[Union[str, bytes]]) -> int:
    """Runs the ``replaystore`` command on ``argv`` (program name first); its exit status."""

_Path = Union[str, PathLike[str]]
_DTypeLike = Any
_FieldSpec = Union[_DTypeLike, Tuple[_DTypeLike, Tuple[int, ...]]]
_Batch = Dict[str, np.ndarray]

class Error(Exception):
    """Base class of every replaystore error."""

class NotABufferError(Error):
    """The folder holds no buffer (no MANIFEST), or a lane set where one ring was asked for."""

class VersionError(Error):
    """The files were written by a newer replaystore: upgrade to read them."""

class LockedError(Error):
    """Another process writes the buffer (or owns its priorities); the message names it."""

class CorruptError(Error):
    """A file failed a check: the message names the file, the offset and the check."""

class ForeignFileError(CorruptError):
    """A path in the buffer is not one replaystore made (a symbolic link, a FIFO, a device,
    a stray folder): refused before anything is read, written or removed through it."""

class DiskFullError(Error):
    """The disk could not hold the buffer's files (reserved before any write, never mid-write)."""

class ValueSpaceFullError(Error):
    """An add whose values need room the value space (``heap_bytes=``) has not while the
    buffer holds fewer than its capacity: refused, nothing stored (``evict_for_room=True``
    at create lets such an add evict the oldest items instead)."""

class SchemaError(Error):
    """Arrays that do not fit the schema: missing or unknown field, dtype, shape, length, layout."""

class EmptyError(Error):
    """Nothing to draw from: the buffer is empty, or every priority is 0."""

class EvictedError(Error):
    """An index that is no longer (or not yet) live."""

class RemovedError(EvictedError):
    """An item removed before the ring overwrote it (``remove``,
    ``sample(remove=True)``, ``max_use``): no draw or read returns it."""

class RateLimitedError(Error):
    """The buffer's rate limiter holds the call back (Reverb's model)."""

class NoItemStatesError(Error):
    """A call on item states on a buffer created without ``item_states`` / ``max_use``."""

class StateError(Error):
    """A state of another schema or geometry, or naming a snapshot that is no longer kept."""

class ClosedError(Error):
    """A call on a handle after its close()."""

class ReadOnlyError(Error):
    """A write through a read-only handle, on a closed buffer, or after a failed sync."""

class Request:
    """What a draw asks for: which units, how they are picked, how many, with the options
    of their unit. Built by one of the class methods; drawn by any handle's
    ``sample(request, seed=..., out=...)``. It pickles (a Ray shard receives one), and
    keywords that do not go together are refused where it is built."""
    @staticmethod
    def rows(n: int, *, beta: Optional[float] = None, replace: bool = True,
             remove: bool = False, by_group: Optional[Sequence[str]] = None) -> Request: ...
    @staticmethod
    def oldest(n: int, *, remove: bool = False) -> Request: ...
    @staticmethod
    def at(indices: npt.ArrayLike, *, drawn: bool = False, remove: bool = False,
           including_removed: bool = False) -> Request: ...
    @staticmethod
    def transitions(n: int, obs: Union[str, Sequence[str]], *, beta: Optional[float] = None,
                    stack: int = 1, nstep: int = 1, gamma: float = 1.0,
                    goal: Optional[str] = None, achieved: Optional[str] = None,
                    strategy: str = "future", n_sampled_goal: int = 4,
                    compute_reward: Optional[Any] = None, info: Optional[str] = None) -> Request: ...
    @staticmethod
    def transitions_at(indices: npt.ArrayLike, obs: Union[str, Sequence[str]], *, stack: int = 1,
                       nstep: int = 1, gamma: float = 1.0) -> Request: ...
    @staticmethod
    def sequences(n: int, length: int, obs: Union[str, Sequence[str]], *, burn_in: int = 0,
                  beta: Optional[float] = None) -> Request: ...
    @staticmethod
    def episodes(n: Optional[int] = None, *, covering: Optional[int] = None,
                 beta: Optional[float] = None, replace: bool = True,
                 remove: bool = False) -> Request: ...
    @staticmethod
    def fragments(n: Optional[int] = None, *, covering: Optional[int] = None,
                  beta: Optional[float] = None, replace: bool = True,
                  remove: bool = False) -> Request: ...
    @staticmethod
    def groups(n: int, by: Union[str, Sequence[str]], *, unroll: int = 0, replace: bool = True,
               remove: bool = False) -> Request: ...
    @property
    def n(self) -> Optional[int]:
        """Units asked for (``None`` for ``fragments(covering=)``)."""
    def with_n(self, n: int) -> Request:
        """The same request for ``n`` units."""

class Schema:
    """The fields every item has: ``Schema({"obs": ("float32", (17,)), "reward": "float32"})``
    or a list of ``(name, dtype, shape)``. ``indices``, ``weights`` and ``offsets`` are
    reserved."""

    def __init__(
        self, fields: Union[Mapping[str, _FieldSpec], Iterable[Tuple[Any, ...]], "Schema"]
    ) -> None: ...
    @staticmethod
    def from_spaces(observation_space: Any, action_space: Any = None) -> "Schema":
        """The schema of a transition for Gymnasium spaces."""
    @property
    def fields(self) -> list[Tuple[str, str, Tuple[int, ...]]]:
        """``[(name, dtype str, shape), ...]`` in order."""
    @property
    def names(self) -> list[str]:
        """Field names in order."""
    def __len__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...

class _UnitDraws:
    """The draws of a unit by name, each ``sample(Request.<unit>(...))`` (written once in
    ``replaystore/_draws.py`` for ``ReplayBuffer`` and ``Reader``); ``out_type`` as
    ``sample`` takes it."""
    def sample_transitions(
        self, n: int, obs: Union[str, Sequence[str]], *, beta: Optional[float] = None,
        stack: int = 1, nstep: int = 1, gamma: float = 1.0, seed: Optional[int] = None,
        out: Optional[_Batch] = None, goal: Optional[str] = None, achieved: Optional[str] = None,
        strategy: str = "future", n_sampled_goal: int = 4, compute_reward: Optional[Any] = None,
        info: Optional[str] = None, nested: bool = False, out_type: Optional[str] = None,
    ) -> _Batch:
        """Transitions: ``obs``/``next_<obs>``, ``returns`` over ``nstep``, stacked frames,
        ``weights`` with ``beta``; HER with ``goal``/``achieved``."""
    def sample_sequences(
        self, n: int, length: int, obs: Union[str, Sequence[str]], *, burn_in: int = 0,
        beta: Optional[float] = None, seed: Optional[int] = None, out: Optional[_Batch] = None,
        out_type: Optional[str] = None,
    ) -> _Batch:
        """``[n, burn_in + length, ...]`` arrays with ``mask``."""
    def sample_episodes(
        self, n: int, *, beta: Optional[float] = None, seed: Optional[int] = None,
        out: Optional[_Batch] = None, out_type: Optional[str] = None,
    ) -> _Batch:
        """Whole episodes: rows, ``offsets``, ``episodes``."""
    def sample_fragments(
        self, n: Optional[int] = None, *, beta: Optional[float] = None, seed: Optional[int] = None,
        replace: bool = True, remove: bool = False, covering: Optional[int] = None,
        out: Optional[_Batch] = None, values: str = "list", pad: float = 0.0,
        out_type: Optional[str] = None,
    ) -> _Batch:
        """Whole fragments (one ``add_batch`` each): rows and ``offsets``."""
    def sample_groups(
        self, n: int, by: Union[str, Sequence[str]], *, unroll: int = 0, replace: bool = True,
        remove: bool = False, seed: Optional[int] = None, out: Optional[_Batch] = None,
        values: str = "list", pad: float = 0.0, out_type: Optional[str] = None,
    ) -> _Batch:
        """Groups of items sharing ``by``'s values: rows and ``offsets``."""

class ReplayBuffer(_UnitDraws):
    """A replay buffer in a folder, opened by the one process that writes it.

    It cannot be pickled (a copy would be a second writer): hand workers a ``Reader``.
    Threads of that process may share it: calls run one at a time."""

    @staticmethod
    def create(
        path: _Path,
        schema: Union[Schema, Mapping[str, _FieldSpec]],
        capacity: int,
        *,
        alpha: Optional[float] = None,
        eps: float = 1e-6,
        seed: Optional[int] = None,
        segment_slots: Optional[int] = None,
        fragments: bool = False,
        episodic: bool = False,
        whole_episodes: bool = False,
        heap_bytes: Optional[int] = None,
        chunk_bytes: Optional[int] = None,
        evict_for_room: bool = False,
        item_states: bool = False,
        max_use: Optional[int] = None,
        max_size: Optional[int] = None,
        reservoir: Optional[int] = None,
        min_size_to_sample: Optional[int] = None,
        samples_per_insert: Optional[float] = None,
        error_buffer: Optional[float] = None,
    ) -> "ReplayBuffer":
        """Creates a buffer of ``capacity`` items; ``alpha`` makes it prioritized;
        ``fragments`` keeps each ``add_batch`` call whole for ``sample_fragments``;
        ``heap_bytes`` is the most the values of variable-length fields (``"str"``,
        ``"bytes"``, ``(dtype, (None,))``) may take, reserved on disk as they arrive;
        ``chunk_bytes`` the rows of their ring. An add whose values need more while
        fewer than ``capacity`` items are held raises ``ValueSpaceFullError`` with
        nothing stored, unless ``evict_for_room=True`` lets it evict the oldest early.
        ``item_states`` keeps a state per item, so items can be removed (``remove``,
        ``sample(remove=True)``) and their uses counted; ``max_use=N``
        does too and removes an item on its N-th draw; ``max_size=M`` does too and,
        past M live items, removes random ones after each add (UnstableBaselines'
        downsampling; whole fragments with ``fragments=True``, as its
        ``EpisodeBuffer`` drops whole episodes); ``reservoir=M`` keeps a reservoir of M (RLlib's
        ``ReservoirReplayBuffer``: every item ever added kept with equal chance).
        ``min_size_to_sample`` alone is Reverb's ``MinSize`` rate
        limiter; with ``samples_per_insert`` (and ``error_buffer``) its
        ``SampleToInsertRatio``: held-back calls raise ``RateLimitedError`` or wait
        ``rate_limit_wait`` seconds for another process."""
    @classmethod
    def open_or_create(
        cls, path: _Path, schema: Any, capacity: int, **options: Any
    ) -> "ReplayBuffer":
        """Opens the buffer in ``path`` or creates it with ``create``'s arguments; an
        existing buffer of another schema or capacity is refused (``SchemaError``)."""
    @staticmethod
    def open(path: _Path, *, actor: bool = False) -> "ReplayBuffer":
        """Opens the buffer for writing (``actor=True``: beside a priority owner)."""
    def add(self, **fields: Any) -> int:
        """Adds one item; returns its index."""
    def add_batch(
        self, batch: Mapping[str, npt.ArrayLike], *, priorities: Optional[npt.ArrayLike] = None
    ) -> npt.NDArray[np.uint64]:
        """Adds ``n`` items (batch dimension first), with initial priorities if given;
        returns their indices."""
    def get(
        self, indices: npt.ArrayLike, *, values: str = "list", pad: float = 0.0,
        drawn: bool = False
    ) -> _Batch:
        """The live items at ``indices`` (``EvictedError`` for one that is not).
        ``drawn=True``: they are a draw the caller made with its own RNG, counted in
        ``stats()["sampled"]`` and ``replaystore info``.

        Variable-length fields: ``values="list"`` (a list of str, bytes or 1-D arrays),
        ``"flat"`` (end to end, plus ``<name>_offsets``) or ``"padded"`` (2-D, padded with
        ``pad``, plus ``<name>_lengths``)."""
    def clear(self) -> None:
        """Drops every item."""
    @property
    def read_checks(self) -> bool:
        """Whether every read checks each item a flush has sealed against its checksum
        (default True; a damaged row raises ``CorruptError``). False saves the check's
        cost and serves a flipped bit as data."""
    @read_checks.setter
    def read_checks(self, on: bool) -> None: ...
    @property
    def write_behind(self) -> int:
        """Bytes of added rows that may be under writeback before an add waits (0: off)."""
    @write_behind.setter
    def write_behind(self, window_bytes: int) -> None: ...
    @property
    def cast(self) -> str:
        """``"exact"`` (default) or ``"same_kind"``: how adds take arrays of another dtype."""
    @cast.setter
    def cast(self, mode: str) -> None: ...
    @property
    def keep_states(self) -> Optional[int]:
        """Unnamed checkpoints ``get_state()`` keeps (3 unless set; ``None``: all)."""
    @keep_states.setter
    def keep_states(self, k: Optional[int]) -> None: ...
    @property
    def max_priority(self) -> Optional[float]:
        """The ``priority + eps`` new items get (``None`` without priorities)."""
    def sample(
        self,
        n: Union[int, Request],
        *,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        replace: bool = True,
        out: Optional[_Batch] = None,
        values: str = "list",
        pad: float = 0.0,
        remove: bool = False,
        by_group: Optional[Sequence[str]] = None,
        nested: bool = False,
        out_type: str = "numpy",
    ) -> _Batch:
        """``n`` items as one array per field plus ``indices`` (and ``weights`` with ``beta``).
        Variable-length fields as ``values`` says (see ``get``). ``remove=True`` draws
        distinct items and removes them (item states). ``by_group=["env_id"]`` draws
        distinct items, an even share of every group of that key first.

        With ``out`` (a dict kept from an earlier draw of the same shape), the draw fills
        those arrays in place and returns them: a training loop then allocates nothing.
        ``out_type="torch"`` returns tensors (``replaystore.torch.as_tensors``),
        ``"jax"`` ``jax.Array``s (``replaystore.jax.as_jax``; not with ``out``): the
        same memory on the CPU.

        ``n`` may instead be a ``Request`` of any unit (``Request.transitions(32, "obs",
        nstep=3)``): it then holds the draw's options, and only ``seed``, ``out``,
        ``values``, ``pad``, ``nested`` and ``out_type`` go beside it."""
    def pop_batch(
        self,
        n: int,
        *,
        seed: Optional[int] = None,
        out: Optional[_Batch] = None,
        values: str = "list",
        pad: float = 0.0,
        by_group: Optional[Sequence[str]] = None,
    ) -> _Batch:
        """Deprecated (a ``DeprecationWarning``; goes next release): ``sample(n, remove=True)``."""
    def remove(self, indices: npt.ArrayLike) -> int:
        """Removes the live items at ``indices``; returns how many were removed now."""
    @property
    def rate_limit_wait(self) -> Optional[float]:
        """Seconds a call the rate limiter holds back waits (None: raises at once)."""
    @rate_limit_wait.setter
    def rate_limit_wait(self, seconds: Optional[float]) -> None: ...
    def remove_stale(self, field: str, now: int, max_staleness: int) -> int:
        """Removes items whose integer tag ``field`` is over ``max_staleness`` behind ``now``."""
    def consume(
        self, n: int, *, out: Optional[_Batch] = None, values: str = "list", pad: float = 0.0
    ) -> _Batch:
        """The ``n`` oldest items not removed, removed: a FIFO queue."""
    def item_states(self, indices: npt.ArrayLike) -> Dict[str, Any]:
        """``removed`` (bool array), ``cause`` (list of str or None) and ``uses`` (int64
        array) of the live items at ``indices``."""
    def update_priorities(
        self, indices: npt.ArrayLike, priorities: npt.ArrayLike
    ) -> Dict[str, int]:
        """Sets priorities; returns ``{"applied": .., "stale": ..}``."""
    def add_reset(self, **fields: Any) -> Dict[str, Any]:
        """Starts an episode with the observation fields `env.reset()` returned."""
    def add_step(
        self, *, terminated: bool = False, truncated: bool = False, **fields: Any
    ) -> Dict[str, Any]:
        """Adds one step to the open episode; `ended` is (return, steps, start) at its end."""
    def episode(self, index: int) -> Dict[str, Any]:
        """The episode holding item `index`."""
    def episodes(self) -> List[Dict[str, Any]]:
        """Episodes with a live row, oldest first."""
    def unfinished_episodes(self) -> List[Dict[str, Any]]:
        """Episodes not ended yet."""
    def get_episode(
        self, id: int, *, obs: str = "obs", action: str = "action", reward: str = "reward",
        info: str = "info",
    ) -> "Episode":
        """Episode ``id`` as a view with RLlib's ``SingleAgentEpisode`` getters."""
    def iter_episodes(
        self, *, obs: str = "obs", action: str = "action", reward: str = "reward",
        info: str = "info",
    ) -> List["Episode"]:
        """Every episode with a live row, oldest first, as views."""
    def add_episode(
        self, batch: Mapping[str, Any], *, terminated: bool = False, truncated: bool = False
    ) -> Dict[str, Any]:
        """A whole episode in one call: observation fields with one row more than the
        step fields (the reset's, then each step's)."""
    def prev(self, indices: Union[int, npt.ArrayLike]) -> Any:
        """The step before each index in its episode (an episode's first stays put)."""
    def next(self, indices: Union[int, npt.ArrayLike]) -> Any:
        """The step after each index in its episode (an episode's last stays put)."""
    def priorities(self, indices: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The stored priority (priority + eps) of each live item at `indices`."""
    def priority_summary(self) -> Optional[Dict[str, Any]]:
        """``alpha``, ``eps``, ``total`` (sum of the live items' ``(priority + eps)^alpha``),
        ``min_leaf`` (the smallest of those), ``max_priority``, ``updates`` and
        ``stale_updates``; ``None`` without priorities."""
    def snapshots(self) -> List[Dict[str, Any]]:
        """This buffer's snapshots, oldest first."""
    def delete_snapshot(self, name: str) -> None:
        """Deletes snapshot `name`."""
    def keep_last(self, k: int) -> List[str]:
        """Deletes all but the `k` newest snapshots; returns the names deleted."""
    def get_state(
        self, name: Optional[str] = None, *, keep_last: Optional[int] = None
    ) -> Dict[str, Any]:
        """A small picklable checkpoint of the buffer, taken in milliseconds."""
    def set_state(self, state: Union[Mapping[str, Any], bytes]) -> None:
        """Puts the buffer back to a state from ``get_state``: of this buffer, or of
        another of the same schema and geometry (a buffer built fresh resuming from a
        checkpoint), whose snapshot is first brought into this buffer's folder."""
    def stats(self) -> Dict[str, int]:
        """Counters and sizes; ``sampled`` counts this handle's draws and those of
        readers in any process (``Reader``, DataLoader workers)."""
    def flush(self) -> None:
        """Makes everything added so far survive power loss."""
    def close(self) -> None:
        """Flushes and closes (twice is fine)."""
    def export(
        self,
        out: str,
        format: Optional[str] = None,
        *,
        fields: Optional[Sequence[str]] = None,
        include_removed: bool = False,
        snapshot: Optional[str] = None,
        progress: bool = True,
    ) -> Dict[str, Any]:
        """Writes the live items to ``out`` (``.npz``, Parquet or JSON lines), as
        ``replaystore export`` does; removed items are left out unless
        ``include_removed``."""
    @property
    def schema(self) -> Schema: ...
    @property
    def path(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "ReplayBuffer": ...
    def __exit__(self, *args: Any) -> bool: ...

class Episode:
    """One stored episode (or a chunk: ``cut``, ``slice``) read as RLlib's
    ``SingleAgentEpisode``: observation ``k`` is the ``k``-th, step entry ``k`` what the
    step at observation ``k`` stored. Reads the buffer's rows on each call."""

    @property
    def id(self) -> int: ...
    @property
    def t_started(self) -> int: ...
    @property
    def is_done(self) -> bool: ...
    @property
    def is_terminated(self) -> bool: ...
    @property
    def is_truncated(self) -> bool: ...
    def __len__(self) -> int: ...
    def get_observations(
        self, indices: Any = None, *, neg_index_as_lookback: bool = False,
        fill: Optional[float] = None, field: Optional[str] = None,
    ) -> Any: ...
    def get_actions(
        self, indices: Any = None, *, neg_index_as_lookback: bool = False,
        fill: Optional[float] = None, one_hot_discrete: Optional[int] = None,
    ) -> Any: ...
    def get_rewards(
        self, indices: Any = None, *, neg_index_as_lookback: bool = False,
        fill: Optional[float] = None,
    ) -> Any: ...
    def get_infos(
        self, indices: Any = None, *, neg_index_as_lookback: bool = False,
        fill: Optional[float] = None,
    ) -> Any: ...
    def get_extra_model_outputs(
        self, key: str, indices: Any = None, *, neg_index_as_lookback: bool = False,
        fill: Optional[float] = None,
    ) -> Any: ...
    def cut(self, len_lookback_buffer: int = 0) -> "Episode": ...
    def slice(self, slice: slice, len_lookback_buffer: int = 0) -> "Episode": ...
    def to_numpy(self) -> Dict[str, npt.NDArray[Any]]: ...

class Reader(_UnitDraws):
    """A read-only view of a buffer another process writes: no lock, nothing written.

    A Reader pickles as its path and options: a ``torch.utils.data`` worker or a
    ``multiprocessing`` child that receives one opens the same files (one copy in the
    page cache), with a sampling RNG of its own. A Reader copied by ``fork`` reseeds
    itself in the child, so forked workers never draw the same batches (unless a seed
    was given to ``sample``, which then stays the caller's to vary per worker)."""

    @staticmethod
    def open(path: _Path, *, snapshot: Optional[str] = None, pread: bool = False) -> "Reader":
        """Opens the buffer (or its snapshot) for reading. ``pread=True`` copies rows
        with pread instead of through shared mappings, so the process's RSS stays flat
        however much of the buffer it samples (a system call or two more per row)."""
    @property
    def pread(self) -> bool:
        """Whether rows are copied out with pread."""
    @property
    def read_checks(self) -> bool:
        """Whether every read checks each sealed item against its checksum (default
        True; a pickled reader reopens with the checks on)."""
    @read_checks.setter
    def read_checks(self, on: bool) -> None: ...
    def sample(
        self,
        n: Union[int, Request],
        *,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        replace: bool = True,
        out: Optional[_Batch] = None,
        values: str = "list",
        pad: float = 0.0,
        by_group: Optional[Sequence[str]] = None,
        nested: bool = False,
        out_type: str = "numpy",
    ) -> _Batch:
        """``n`` of the items live now (or a ``Request`` of any unit), as
        ``ReplayBuffer.sample`` (``out``, ``values``, ``by_group`` and ``out_type`` too); never a
        removed one."""
    def get(self, indices: npt.ArrayLike, *, drawn: bool = False) -> _Batch:
        """The items at ``indices``, as ``ReplayBuffer.get`` (``drawn=True``: counted in
        this reader's ``stats()["sampled"]`` and ``replaystore info``): for a worker fetching rows
        that a sampler elsewhere chose. An index evicted (or overwritten while it was
        copied) raises ``EvictedError``; a returned row is always its index's item."""
    def item_states(self, indices: npt.ArrayLike) -> Dict[str, Any]:
        """``removed``, ``cause`` and ``uses`` of live items, as the writer left them."""
    def priority_summary(self) -> Optional[Dict[str, float]]:
        """``total`` and ``min_leaf`` of the priorities as they read now; ``None``
        without priorities."""
    def stats(self) -> Dict[str, int]:
        """Counters and sizes as this reader sees them; ``sampled`` counts its own
        draws (the commit's count when it opened, plus its draws since). Its draws also
        reach the buffer's count: ``replaystore info`` and the writer's ``stats()``."""
    @property
    def schema(self) -> Schema: ...
    def __len__(self) -> int: ...
    def close(self) -> None:
        """Lets the files go; later calls raise ``ClosedError``."""
    def __enter__(self) -> "Reader": ...
    def __exit__(self, *args: Any) -> bool: ...

class BufferGroup:
    """Named member buffers in one folder (one per policy or player), each created by
    its first add (with the group's template) or by ``add_member``; sampled one by
    one, all at once or in lockstep; checkpointed as one (kill-safe across members).

    A reader (``open(path, reader=True)``) pickles as its path; the writer refuses."""

    @staticmethod
    def create(
        path: _Path, schema: Any = None, capacity: Optional[int] = None, **options: Any
    ) -> "BufferGroup":
        """An empty group; ``schema``, ``capacity`` and ``ReplayBuffer.create``'s keywords
        are the template a member's first add creates it with."""
    @staticmethod
    def open(path: _Path, *, reader: bool = False) -> "BufferGroup":
        """Opens the group for writing (one process) or, with ``reader=True``, sampling."""
    def add_member(
        self, member: str, schema: Any = None, capacity: Optional[int] = None, **options: Any
    ) -> None:
        """Creates a member with a config of its own (or the template, given neither)."""
    def add(self, member: str, **fields: Any) -> int:
        """Adds one item to ``member`` (created by this add if new); returns its index."""
    def add_batch(self, member: str, batch: Mapping[str, Any]) -> npt.NDArray[np.uint64]:
        """Adds a batch to ``member`` (created if new); returns the indices."""
    @property
    def members(self) -> List[str]: ...
    def member_len(self, member: str) -> int: ...
    def sample(
        self,
        n: Union[int, Request],
        member: Optional[str] = None,
        *,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        replace: bool = True,
        replay_ratio: Optional[float] = None,
    ) -> Any:
        """``n`` items of ``member``; without it ``{name: batch}`` with ``n`` from each.
        With ``replay_ratio``, RLlib's MixIn: the items added since the last such draw,
        oldest first, topped up with replayed ones to that share (by priority with
        ``beta``: new items weighted 1, replayed ones by importance)."""
    def update_priorities(
        self, member: str, indices: npt.ArrayLike, priorities: npt.ArrayLike
    ) -> Dict[str, int]:
        """Sets ``member``'s priorities at ``indices``; returns ``{"applied", "stale"}``."""
    def add_episode(
        self, member: str, batch: Mapping[str, Any], *, terminated: bool = False,
        truncated: bool = False,
    ) -> Dict[str, Any]:
        """A whole episode into episodic ``member``, as ``ReplayBuffer.add_episode``."""
    def sample_transitions(
        self,
        n: int,
        member: str,
        obs: Union[str, Sequence[str]],
        *,
        nstep: int = 1,
        gamma: float = 1.0,
        stack: int = 1,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        at: Optional[npt.ArrayLike] = None,
    ) -> _Batch:
        """``n`` transitions of episodic ``member``; with ``at``, read at those step rows."""
    def sample_sequences(
        self,
        n: int,
        member: Optional[str],
        length: int,
        obs: Union[str, Sequence[str]],
        *,
        burn_in: int = 0,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
    ) -> Any:
        """Sequences of episodic ``member`` (RLlib's ``replay_sequence_length`` and
        ``replay_burn_in``); with ``member=None``, ``{name: batch}``."""
    def sample_episodes(
        self, n: int, member: Optional[str] = None, *, beta: Optional[float] = None,
        seed: Optional[int] = None,
    ) -> Any:
        """Whole episodes of episodic ``member``; without it, ``{name: batch}``."""
    def sample_lockstep(self, n: int, *, seed: Optional[int] = None) -> Dict[str, _Batch]:
        """``n`` joint steps: the same positions back from each member's newest row."""
    def stats(self) -> Dict[str, Dict[str, Any]]: ...
    def refresh(self) -> None:
        """A reader opens the members created since it opened."""
    def get_state(self, name: Optional[str] = None) -> Dict[str, Any]:
        """Checkpoints every member at once: a picklable dict for ``set_state``."""
    def set_state(self, state: Mapping[str, Any]) -> None:
        """Every member back to the checkpoint; members created since come back empty."""
    def snapshots(self) -> List[str]: ...
    def delete_snapshot(self, name: str) -> None: ...
    def keep_last(self, k: int) -> List[str]: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "BufferGroup": ...
    def __exit__(self, *args: Any) -> bool: ...

class Lanes:
    """Rings sampled as one buffer (Tianshou's VectorReplayBuffer); lane k's indices start at k << 56.

    Lanes opened with ``reader=True`` pickle as their path, like ``Reader``; the writer refuses."""

    @staticmethod
    def create(
        path: _Path,
        schema: Any,
        capacity: int,
        lanes: int,
        *,
        alpha: Optional[float] = None,
        eps: float = 1e-6,
        seed: Optional[int] = None,
        segment_slots: Optional[int] = None,
        episodic: bool = False,
        item_states: bool = False,
        max_use: Optional[int] = None,
        max_size: Optional[int] = None,
        reservoir: Optional[int] = None,
        min_size_to_sample: Optional[int] = None,
        samples_per_insert: Optional[float] = None,
        error_buffer: Optional[float] = None,
    ) -> "Lanes":
        """Creates `lanes` lanes of `capacity / lanes` items each; the item-state options
        are ``ReplayBuffer.create``'s and apply to each lane (``max_size`` and
        ``reservoir`` per lane, one rate limiter per lane)."""
    @staticmethod
    def open(path: _Path, *, reader: bool = False, owner: bool = False) -> "Lanes":
        """Opens every lane for writing; with `reader=True` for sampling only; with
        `owner=True` as the learner that draws and sets priorities while one actor
        process per lane adds (the Ape-X layout)."""
    @staticmethod
    def open_lane(path: _Path, lane: int, *, actor: bool = False) -> "ReplayBuffer":
        """Lane `lane` for writing, as a buffer of its own (one process per lane);
        `actor=True` beside the owner of the priorities."""
    def add(self, lane: int, **fields: Any) -> int:
        """Adds one item to lane `lane`."""
    def add_batch(self, batch: Mapping[str, npt.ArrayLike], lanes: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Adds row r of `batch` to lane `lanes[r]`."""
    def sample(
        self,
        n: Union[int, Request],
        *,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        replace: bool = True,
        out: Optional[_Batch] = None,
        remove: bool = False,
        by_group: Optional[Sequence[str]] = None,
    ) -> _Batch:
        """Draws over all lanes, grouped by lane (``out`` as ``ReplayBuffer.sample``);
        ``remove=True`` removes what it returns (item states); ``by_group`` draws an even
        share of every group of all lanes first."""
    def pop_batch(
        self,
        n: int,
        *,
        seed: Optional[int] = None,
        out: Optional[_Batch] = None,
        by_group: Optional[Sequence[str]] = None,
    ) -> _Batch:
        """Deprecated (a ``DeprecationWarning``; goes next release): ``sample(n, remove=True)``."""
    def item_states(self, indices: npt.ArrayLike) -> Dict[str, Any]:
        """``removed``, ``cause`` and ``uses`` of the live items at ``indices``."""
    def remove(self, indices: npt.ArrayLike) -> int:
        """Removes the live items at ``indices`` from whichever lanes hold them."""
    def get_state(self, name: Optional[str] = None) -> Dict[str, Any]:
        """Checkpoints every lane as one snapshot: a picklable dict for ``set_state``."""
    def set_state(self, state: Dict[str, Any]) -> None:
        """Every lane back to ``state``: all lanes or none, also across a kill."""
    def snapshots(self) -> List[str]:
        """The set's snapshots (held by every lane), oldest first."""
    def delete_snapshot(self, name: str) -> None:
        """Deletes the set's snapshot ``name`` from every lane."""
    def keep_last(self, k: int) -> List[str]:
        """Deletes all but the ``k`` newest of the set's snapshots."""
    def get(self, indices: npt.ArrayLike) -> _Batch:
        """The items at `indices`."""
    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> Dict[str, int]:
        """Sets priorities in whichever lanes hold `indices`."""
    def lane_edges(self) -> List[Tuple[int, int]]:
        """Each lane's live indices as (start, stop)."""
    @property
    def lane_count(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def schema(self) -> Schema: ...
    def stats(self) -> List[Dict[str, int]]:
        """Each lane's counters."""
    def flush(self) -> None:
        """Makes every lane durable."""
    def close(self) -> None:
        """Flushes and closes."""
    def __len__(self) -> int: ...
    def __enter__(self) -> "Lanes": ...
    def __exit__(self, *args: Any) -> bool: ...


class PriorityOwner:
    """The learner of the Ape-X layout: owns a prioritized buffer's priorities while an
    actor process adds (``ReplayBuffer.open(path, actor=True)``); one per buffer."""

    @staticmethod
    def open(path: _Path) -> "PriorityOwner":
        """Opens the prioritized buffer in `path` as the owner of its priorities."""
    def sample(
        self,
        n: Union[int, Request],
        *,
        beta: Optional[float] = None,
        seed: Optional[int] = None,
        replace: bool = True,
        out: Optional[_Batch] = None,
    ) -> _Batch:
        """``n`` items by priority (``beta``) or uniformly, as ``ReplayBuffer.sample``."""
    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> Dict[str, int]:
        """Sets priorities; items overwritten since they were drawn are skipped."""
    def priorities(self, indices: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``priority + eps`` of each live item at `indices`."""
    def stats(self) -> Dict[str, Any]:
        """Counters and sizes as the owner sees them."""
    @property
    def schema(self) -> Schema: ...
    def flush(self) -> None:
        """Makes the priorities durable."""
    def close(self) -> None:
        """Flushes and gives up ownership."""
    def __len__(self) -> int: ...
    def __enter__(self) -> "PriorityOwner": ...
    def __exit__(self, *args: Any) -> bool: ...
