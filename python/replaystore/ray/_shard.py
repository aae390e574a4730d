"""A shard: one replaystore buffer in one folder on one node, served by one Ray actor.

The actor is the folder's only writer. Ray restarts it (``max_restarts=-1``) when its
process dies; the restarted actor runs ``__init__`` again with the same arguments, which
reopens the folder and finds everything an earlier call acknowledged (the engine's
kill -9 guarantee: an acknowledged add is in the mapped files, which outlive the
process). Nothing of a shard's data lives in the actor's memory.
"""

import os
import time

import numpy as np

import replaystore as rs
from replaystore._confined import Confined

#: What a shard serves: a ``ReplayBuffer`` or a ``BufferGroup``.
KINDS = ("buffer", "group")


class ShardCore:
    """The body of a shard actor (``ray.remote`` wraps it in :mod:`._place`).

    ``kind="buffer"`` serves a ``ReplayBuffer`` (plain, prioritized, episodic or with
    variable-length fields: whatever ``options`` create); ``kind="group"`` a
    ``BufferGroup`` whose calls name a ``member``. The folder is created by the first
    start and reopened by every later one, so a restart (or a node brought back with
    its disk) continues it."""

    def __init__(self, index, path, kind, schema, capacity, options, flush_items=0):
        if kind not in KINDS:
            raise ValueError(f"shard {index}: kind {kind!r}: expected one of {KINDS}")
        started = time.perf_counter()
        self.index, self.path, self.kind = index, path, kind
        if kind == "group":
            made = bool(Confined(path).names())
            self.buf = (
                rs.BufferGroup.open(path)
                if made
                else rs.BufferGroup.create(path, schema, capacity, **options)
            )
        elif schema is None:
            self.buf = rs.ReplayBuffer.open(path)  # moved: the folder has its config
        else:
            self.buf = rs.ReplayBuffer.open_or_create(path, schema, capacity, **options)
        # What a restart costs replaystore (the rest of a restart is Ray's: noticing
        # the death, starting a process, importing).
        self.open_seconds = time.perf_counter() - started
        # A reopen after a kill checks every item past the last commit (0.78 s for 6.4
        # million W1 rows, 0.26 s for 800,000): flushing every `flush_items` items
        # bounds that work, and makes those items survive power loss too.
        self.flush_items, self._unflushed = flush_items, 0

    # -- where it runs ---------------------------------------------------------------

    def where(self):
        """The node, process and folder this shard runs with, and its size."""
        import ray

        return {
            "index": self.index,
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "path": self.path,
            "kind": self.kind,
            "open_seconds": self.open_seconds,
            "flush_items": self.flush_items,
            **self.figures(),
        }

    def figures(self, member=None):
        """``len`` and, for a prioritized buffer, ``total`` and ``min_leaf``: what the
        client splits a draw by."""
        if self.kind == "group":
            if member is None:
                return {"len": sum(self.buf.member_len(m) for m in self.buf.members)}
            n = self.buf.member_len(member) if member in self.buf.members else 0
            return {"len": n}
        out = {"len": len(self.buf)}
        summary = self.buf.priority_summary()
        if summary is not None:
            out["total"], out["min_leaf"] = summary["total"], summary["min_leaf"]
            out["alpha"] = summary["alpha"]
        return out

    # -- adds ------------------------------------------------------------------------

    def add_batch(self, batch, priorities=None, member=None):
        """Adds a batch; returns its indices (acknowledged: they survive a kill -9)."""
        if self.kind == "group":
            idx = self.buf.add_batch(self._member(member), batch)
        else:
            idx = self.buf.add_batch(batch, priorities=priorities)
        self._added(len(idx))
        return idx

    def _added(self, n):
        self._unflushed += n
        if self.flush_items and self._unflushed >= self.flush_items:
            self.buf.flush()
            self._unflushed = 0

    def add_episode(self, batch, terminated=False, truncated=False, member=None):
        """Adds a whole episode; returns what ``ReplayBuffer.add_episode`` returns."""
        if self.kind == "group":
            out = self.buf.add_episode(
                self._member(member), batch, terminated=terminated, truncated=truncated
            )
        else:
            out = self.buf.add_episode(batch, terminated=terminated, truncated=truncated)
        self._added(len(next(iter(batch.values()))))
        return out

    def _member(self, member):
        if member is None:
            raise ValueError(f"shard {self.index} holds a BufferGroup: name a member")
        return member

    # -- draws -----------------------------------------------------------------------

    def draw(self, request, seed=None, member=None, updates=(), **output):
        """``request`` (a ``replaystore.Request``, pickled to this actor) drawn after
        ``seed``, its arrays as ``output`` says (``values``, ``pad``, ``nested``), plus
        ``__figures__``: this shard's figures after the draw, whose ``min_leaf`` is the
        one its ``weights`` were computed against (this actor is the folder's only
        writer), so the client can weigh them against every shard's smallest leaf.
        ``updates`` are priority updates the client held back for this call
        (``(indices, priorities)`` pairs): applied first, in order, so one actor call
        carries both."""
        for indices, priorities in updates:
            self.update_priorities(indices, priorities, member)
        if self.kind == "group":
            batch = self.buf.sample(request, self._member(member), seed=seed)
        else:
            batch = self.buf.sample(request, seed=seed, **output)
        batch["__figures__"] = self.figures(member)
        return batch

    def update_priorities(self, indices, priorities, member=None):
        """Sets priorities; an item overwritten since its draw is skipped and counted
        as ``stale`` (the engine's check: indices are never reused)."""
        if self.kind == "group":
            return self.buf.update_priorities(self._member(member), indices, priorities)
        return self.buf.update_priorities(np.asarray(indices, np.uint64), priorities)

    def get(self, indices):
        """The live items at ``indices``."""
        return self.buf.get(np.asarray(indices, np.uint64))

    # -- checkpoints -----------------------------------------------------------------

    def get_state(self, name):
        """This shard's part of a checkpoint: an O(1) snapshot named ``name``."""
        return self.buf.get_state(name)

    def check_state(self, state):
        """Whether ``state`` can be restored here, without changing anything: its
        snapshot is listed and opens. Returns None, or the reason it cannot."""
        name = state.get("name")
        if self.kind == "group":
            return None if name in self.buf.snapshots() else f"no snapshot {name!r}"
        origin = state.get("path")
        if origin and os.path.realpath(origin) != os.path.realpath(self.path):
            # Another buffer's checkpoint (a sharded buffer built fresh resuming): its
            # snapshot is checked where it is; set_state brings it into this folder.
            try:
                frozen = rs.Reader.open(origin, snapshot=name)
            except rs.Error as e:
                return f"snapshot {name!r} in {origin} does not open: {e}"
            try:
                theirs = int(frozen.stats()["capacity"])
                if theirs != self.buf.capacity:
                    return (f"snapshot {name!r} in {origin} holds a ring of {theirs}, "
                            f"this shard's holds {self.buf.capacity}")
            finally:
                frozen.close()
            return None
        found = [s for s in self.buf.snapshots() if s["name"] == name]
        if not found:
            return f"no snapshot {name!r} in {self.path}"
        if found[0]["problem"]:
            return f"snapshot {name!r} in {self.path}: {found[0]['problem']}"
        try:
            rs.Reader.open(self.path, snapshot=name).close()
        except rs.Error as e:
            return f"snapshot {name!r} in {self.path} does not open: {e}"
        return None

    def set_state(self, state):
        """Restores this shard to ``state`` (from :meth:`get_state`)."""
        self.buf.set_state(state)
        return self.figures()

    def snapshot_names(self):
        """The names of this shard's snapshots, oldest first."""
        names = self.buf.snapshots()
        return names if self.kind == "group" else [s["name"] for s in names]

    def delete_snapshot(self, name):
        """Deletes snapshot ``name`` if it is there."""
        if name in self.snapshot_names():
            self.buf.delete_snapshot(name)

    def stats(self):
        """The buffer's ``stats()`` with ``node`` and ``path``."""
        import ray

        s = self.buf.stats()
        if self.kind == "group":
            s = {"members": s}
        return {**s, "node": ray.get_runtime_context().get_node_id(), "path": self.path}

    def flush(self):
        """Makes everything acknowledged survive power loss, not only a process kill."""
        self.buf.flush()

    def close(self):
        self.buf.close()
