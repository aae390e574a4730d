"""replaystore: a replay buffer for reinforcement learning kept in memory-mapped files.

The buffer *is* its folder: nothing is pickled to checkpoint it, a ``kill -9`` of the
writer loses nothing ``add`` acknowledged, and any number of processes sample it from one
copy in the page cache.

>>> import numpy as np, replaystore, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "buf")
>>> schema = replaystore.Schema({"obs": ("float32", (3,)), "reward": "float32"})
>>> with replaystore.ReplayBuffer.create(path, schema, capacity=100, seed=0) as buf:
...     _ = buf.add(obs=np.zeros(3, np.float32), reward=1.0)
...     batch = buf.sample(4)
>>> batch["obs"].shape, batch["indices"].tolist()
((4, 3), [0, 0, 0, 0])
"""

from ._native import (
    FORMAT_VERSION,
    HAS_PARQUET,
    __version__,
    BufferGroup,
    ClosedError,
    CorruptError,
    DiskFullError,
    EmptyError,
    Episode,
    Error,
    EvictedError,
    ForeignFileError,
    Lanes,
    LockedError,
    NoItemStatesError,
    NotABufferError,
    PriorityOwner,
    Reader,
    RateLimitedError,
    ReadOnlyError,
    RemovedError,
    ReplayBuffer,
    Request,
    Schema,
    SchemaError,
    StateError,
    ValueSpaceFullError,
    VersionError,
    index_dtype,
    nest,
    set_index_dtype,
)
# The draws of a unit by name, written once over `sample(Request)` and attached here.
from . import _draws  # noqa: F401
from . import rewards
from .multi_agent import MultiAgentEpisodeBuffer

__all__ = [
    "FORMAT_VERSION",
    "HAS_PARQUET",
    "__version__",
    "BufferGroup",
    "ClosedError",
    "CorruptError",
    "DiskFullError",
    "EmptyError",
    "Episode",
    "Error",
    "EvictedError",
    "ForeignFileError",
    "Lanes",
    "LockedError",
    "MultiAgentEpisodeBuffer",
    "NoItemStatesError",
    "NotABufferError",
    "PriorityOwner",
    "Reader",
    "RateLimitedError",
    "ReadOnlyError",
    "RemovedError",
    "ReplayBuffer",
    "Request",
    "Schema",
    "SchemaError",
    "StateError",
    "ValueSpaceFullError",
    "VersionError",
    "index_dtype",
    "nest",
    "set_index_dtype",
]
