"""Where shards run: one Ray actor per shard, kept on the node that has its folder.

Two ways to pin a shard, both Ray's own:

- ``node=<node id>``: hard node affinity (``NodeAffinitySchedulingStrategy(soft=False)``).
  A killed process is restarted on that node. If the node itself is gone, the actor
  cannot come back there; :meth:`ShardedBuffer.move` starts it on another node that
  has (a copy of) its folder.
- ``resource=<name>``: the shard asks for a sliver of a custom resource that only the
  node holding its disk declares (``ray start --resources='{"<name>": 1}'``). When that
  node dies, Ray keeps the actor restarting until a node with the resource joins, and
  starts it there: a machine replaced with its disk reattaches its shard unattended.
"""

import dataclasses
from typing import Optional

from ._shard import ShardCore

#: Ray's namespace for shard actors, so that any job can connect by buffer name.
NAMESPACE = "replaystore"


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one shard's actor runs and which folder it owns."""

    path: str
    node: Optional[str] = None
    resource: Optional[str] = None

    def __post_init__(self):
        if (self.node is None) == (self.resource is None):
            raise ValueError(
                f"shard folder {self.path!r}: give exactly one of node= (a Ray node id) "
                f"or resource= (a custom resource its node declares)"
            )


def actor_name(buffer_name, index):
    """The Ray name of shard ``index`` of buffer ``buffer_name``."""
    return f"{buffer_name}/shard-{index}"


def start(buffer_name, index, place, kind, schema, capacity, options, *, detached, num_cpus,
          flush_items):
    """Starts shard ``index`` as a named, restartable actor at ``place``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    opts = dict(
        name=actor_name(buffer_name, index),
        namespace=NAMESPACE,
        max_restarts=-1,
        # A call in flight when the process dies is not run again: an add might have
        # been stored before the kill, and running it twice would store it twice. The
        # caller gets the error (not acknowledged); later calls wait for the restart.
        max_task_retries=0,
        num_cpus=num_cpus,
    )
    if detached:
        opts["lifetime"] = "detached"
    if place.node is not None:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(place.node, soft=False)
    else:
        opts["resources"] = {place.resource: 0.001}
    cls = ray.remote(ShardCore)
    return cls.options(**opts).remote(index, place.path, kind, schema, capacity, options,
                                      flush_items)
