"""RLlib's replay actors replaced by shards: an old-stack ``ReplayBuffer`` whose
storage is a :class:`~replaystore.ray.ShardedBuffer`.

RLlib users who ran replay actors (``ray.remote(PrioritizedReplayBuffer)`` built from
``replay_buffer_config``, one per shard, as Ape-X did) give the same config this type::

    from replaystore.ray.rllib import ShardedReplayBuffer
    replay_buffer_config = {"type": ShardedReplayBuffer, "capacity": 1_000_000,
                            "alpha": 0.6, "name": "apex", "root": "/data/replay"}
    buf = from_config(replay_buffer_config.pop("type"), replay_buffer_config)

and call it as they called their actors, without ``.remote``: ``add(batch)``,
``sample(num_items, beta=...)`` (a ``SampleBatch`` with ``weights`` and
``batch_indexes``), ``update_priorities(batch_indexes, priorities)``, ``len``,
``get_state`` / ``set_state``. The object is a client: it pickles small, so every
rollout worker and learner holds one; adds go to the shard on the caller's node.
Shards are created by the first add (their columns are that batch's) or found by
``name`` when another process made them. ``capacity`` is per shard.

Columns are stored as fields ``c.NAME``; object columns (``infos``) ride pickled in one
bytes field per row. Without ``alpha`` the draws are uniform (RLlib's ``ReplayBuffer``).
"""

import pickle

import numpy as np
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.replay_buffers.replay_buffer import ReplayBuffer

import replaystore as rs

from ._client import pack, unpack
from ._lazy import LazyShards

COLUMN = "c."
REST = "__rest__"


class ShardedReplayBuffer(LazyShards, ReplayBuffer):
    """RLlib's ``ReplayBuffer`` (or, with ``alpha``, ``PrioritizedReplayBuffer``) calls
    over shards on every node. See the module's documentation."""

    def __init__(self, capacity=10_000, storage_unit="timesteps", *, name, root=None,
                 alpha=None, eps=1e-6, nodes=None, resources=None, prefetch=0, **kwargs):
        if storage_unit != "timesteps":
            raise ValueError(f"storage_unit {storage_unit!r}: shards store timesteps")
        ReplayBuffer.__init__(self, capacity=capacity, storage_unit=storage_unit)
        self._settings(name=name, root=root, capacity=capacity, alpha=alpha, eps=eps,
                       nodes=nodes, resources=resources, prefetch=prefetch)
        self._columns = None

    def __getstate__(self):
        return {"name": self.name, "root": self.root, "alpha": self.alpha, "eps": self.eps,
                "where": self._where, "capacity": self.capacity, "client": self._client,
                "columns": self._columns}

    def __setstate__(self, state):
        ReplayBuffer.__init__(self, capacity=state["capacity"])
        self.name, self.root, self.alpha = state["name"], state["root"], state["alpha"]
        self.eps, self._where = state["eps"], state["where"]
        self._client, self._columns = state["client"], state["columns"]

    # -- the shards ------------------------------------------------------------------

    def _schema(self, batch):
        schema = {COLUMN + k: (v.dtype.str, v.shape[1:]) for k, v in batch.items()
                  if v.dtype != object}
        schema[REST] = "bytes"
        return schema

    # -- RLlib's calls ---------------------------------------------------------------

    def add(self, batch, **kwargs):
        """Adds a ``SampleBatch`` (or a one-policy ``MultiAgentBatch``) as timesteps."""
        if isinstance(batch, MultiAgentBatch):
            if len(batch.policy_batches) != 1:
                raise ValueError("a ShardedReplayBuffer holds one policy's batches: give "
                                 "each policy a buffer of its own")
            batch = next(iter(batch.policy_batches.values()))
        if batch.count == 0:
            return
        rows = {}
        objects = [k for k, v in batch.items() if v.dtype == object]
        for k, v in batch.items():
            if v.dtype != object:
                rows[COLUMN + k] = np.ascontiguousarray(v)
        rows[REST] = ([pickle.dumps({k: batch[k][i] for k in objects}, pickle.HIGHEST_PROTOCOL)
                       for i in range(batch.count)] if objects else [b""] * batch.count)
        self._columns = self._columns or [(k, v.dtype == object) for k, v in batch.items()]
        self._shards(batch).add_batch(rows)
        self._num_timesteps_added += batch.count

    def sample(self, num_items, beta=None, **kwargs):
        """``num_items`` timesteps from all shards; by global priority with ``beta``
        (then ``weights`` and ``batch_indexes``, as ``PrioritizedReplayBuffer``)."""
        if self.alpha is None:
            beta = None
        elif beta is None:
            beta = 0.0
        got = self._shards().sample(num_items, beta=beta)
        out = {}
        rest = [pickle.loads(b) if b else {} for b in got[REST]]
        for k, v in got.items():
            if k.startswith(COLUMN):
                out[k[len(COLUMN):]] = v
        if rest and rest[0]:
            for k in rest[0]:
                col = np.empty(len(rest), dtype=object)
                col[:] = [r[k] for r in rest]
                out[k] = col
        if self._columns:
            out = {k: out[k] for k, _ in self._columns if k in out} | out
        if beta is not None:
            out["weights"] = got["weights"].astype(np.float64)
            out["batch_indexes"] = pack(got["shard"], got["indices"])
        self._num_timesteps_sampled += num_items
        return SampleBatch(out)

    def update_priorities(self, idxes, priorities):
        """Sets priorities of the items ``batch_indexes`` named, on their shards."""
        shards, indices = unpack(idxes)
        return self._shards().update_priorities(shards, indices, priorities)

    def __len__(self):
        try:
            return len(self._shards())
        except rs.EmptyError:  # nothing added anywhere yet
            return 0

    def stats(self, debug=False):
        return {"added_count": self._num_timesteps_added,
                "sampled_count": self._num_timesteps_sampled,
                "num_entries": len(self), "num_shards": self._shards().num_shards}

    def get_state(self):
        """One checkpoint of every shard (small; names their snapshots)."""
        return {"shards": self._shards().get_state(),
                "added_count": self._num_timesteps_added,
                "sampled_count": self._num_timesteps_sampled}

    def set_state(self, state):
        self._shards().set_state(state["shards"])
        self._num_timesteps_added = state["added_count"]
        self._num_timesteps_sampled = state["sampled_count"]
