"""One replay buffer over many machines, on Ray: a shard per node, sampled as one.

Each shard is a replaystore folder on one node's disk, served by one Ray actor started
with ``max_restarts=-1`` and pinned to that node. When the actor's process dies
(``kill -9``, an out-of-memory kill), Ray starts it again, it reopens its folder and
has every item it acknowledged. A restarted replay actor of RLlib, TorchRL or
UnstableBaselines comes back empty; a shard comes back whole.

:class:`ShardedBuffer` is the client: picklable, held by any task or actor. It adds to
the shard on the caller's node (no network hop for the data), draws from all shards as
one buffer (uniformly by size, or by global priority with Ape-X's importance weights),
sends priority updates to the shard that owns each item, and checkpoints every shard
under one name (:meth:`ShardedBuffer.get_state`, ``set_state``). Install with
``pip install replaystore[ray]``.
"""

from ._client import DRAWS, ShardedBuffer, ShardUnavailableError
from ._place import NAMESPACE, Placement, actor_name
from ._shard import ShardCore

__all__ = [
    "DRAWS",
    "NAMESPACE",
    "Placement",
    "ShardCore",
    "ShardUnavailableError",
    "ShardedBuffer",
    "actor_name",
]
