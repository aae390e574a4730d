"""TorchRL's ``RayReplayBuffer`` replaced by shards: the same calls over a
:class:`~replaystore.ray.ShardedBuffer`, with ``TensorDict`` in and out.

A ``RayReplayBuffer`` is one remote buffer; a restarted one is empty. This one is a
shard per node, each a restartable actor over its own folder::

    from replaystore.ray.torchrl import ShardedReplayBuffer   # was: RayReplayBuffer
    rb = ShardedReplayBuffer(name="rb", root="/data/replay", capacity=1_000_000,
                             alpha=0.6, beta=0.4, batch_size=256)
    rb.extend(td)                                   # the shard on this node
    td, info = rb.sample(return_info=True)          # info: index, priority_weight
    rb.update_priority(info["index"], td_error.abs())
    len(rb); state = rb.state_dict(); rb.load_state_dict(state)

``extend`` creates the shards with the first ``TensorDict``'s keys (flat keys, CPU
tensors) or finds them by ``name``; ``index`` values name shard and item
(``shard << 48 | index``). ``rb.client()`` is the object to hand to remote tasks (the
buffer itself pickles as one too). ``capacity`` is per shard.
"""

import numpy as np

import replaystore as rs

from ._client import pack, unpack
from ._lazy import LazyShards


class ShardedReplayBuffer(LazyShards):
    """``RayReplayBuffer``'s calls over shards on every node; see the module."""

    def __init__(self, *, name, root=None, capacity=None, alpha=None, beta=None, eps=1e-6,
                 batch_size=None, nodes=None, resources=None, prefetch=0):
        self._settings(name=name, root=root, capacity=capacity, alpha=alpha, eps=eps,
                       nodes=nodes, resources=resources, prefetch=prefetch)
        self.beta, self.batch_size = beta, batch_size

    def client(self):
        """A picklable handle to the same shards (this object pickles as one too)."""
        return self

    def _schema(self, data):
        return {k: (v.dtype.str, v.shape[1:]) for k, v in data.items()}

    @staticmethod
    def _numpy(td):
        return {k: v.detach().cpu().numpy() for k, v in td.items()}

    def extend(self, data):
        """Adds a ``TensorDict`` (batch dimension first); returns the items' ``index``."""
        import torch

        rows = self._numpy(data)
        shard, idx = self._shards(rows).add_batch(rows)
        return torch.from_numpy(pack(np.full(len(idx), shard), idx))

    def add(self, data):
        """Adds one item (a ``TensorDict`` without a batch dimension)."""
        return self.extend(data.unsqueeze(0))[0]

    def sample(self, batch_size=None, *, return_info=False):
        """A ``TensorDict`` of ``batch_size`` items (the constructor's by default); by
        priority when the buffer has ``alpha``. ``return_info`` adds TorchRL's info:
        ``index`` and, by priority, ``priority_weight``."""
        import torch
        from tensordict import TensorDict

        n = batch_size or self.batch_size
        if n is None:
            raise RuntimeError("give sample a batch_size (or the buffer one)")
        beta = (self.beta if self.beta is not None else 1.0) if self.alpha is not None else None
        got = self._shards().sample(n, beta=beta)
        shard, idx = got.pop("shard"), got.pop("indices")
        weights = got.pop("weights", None)
        td = TensorDict({k: torch.from_numpy(v) for k, v in got.items()}, batch_size=[n])
        if not return_info:
            return td
        info = {"index": torch.from_numpy(pack(shard, idx))}
        if weights is not None:
            info["priority_weight"] = torch.from_numpy(weights)
        return td, info

    def update_priority(self, index, priority):
        """Sets the priorities of the items ``index`` names, on their shards."""
        shards, idx = unpack(np.asarray(index))
        p = priority.detach().cpu().numpy() if hasattr(priority, "detach") else priority
        return self._shards().update_priorities(shards, idx, np.asarray(p, np.float64))

    def __len__(self):
        try:
            return len(self._shards())
        except rs.EmptyError:
            return 0

    def state_dict(self):
        """One checkpoint of every shard (small; names their snapshots)."""
        return self._shards().get_state()

    def load_state_dict(self, state):
        self._shards().set_state(state)

    def close(self):
        if self._client is not None:
            self._client.close()
