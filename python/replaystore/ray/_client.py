"""The client of a sharded buffer: what a Ray task, actor or driver holds to add to and
draw from all shards as one buffer.

A client is small and picklable (the shards' actor handles and where they run): hand it
to remote tasks as an argument. Each process that unpickles one routes its adds to a
shard on its own node when there is one, and draws from such a shard through a local
``Reader`` (the page cache), not an actor call.
"""

import time
import uuid
import zlib

import numpy as np

import replaystore as rs

from . import _place

#: Draw methods a client spreads over shards (each returns one row per item).
DRAWS = ("sample", "sample_transitions")
# A draw's keywords that say how its arrays come back, not what it draws.
OUTPUT = ("values", "pad", "nested")


def _request(method, n, beta, kwargs):
    """The ``Request`` a client's ``sample(n, method=..., **kwargs)`` asks for: rows, or
    transitions (``obs`` among the keywords); refused here, before any shard is asked,
    when the keywords do not go together."""
    if method == "sample":
        return rs.Request.rows(n, beta=beta, **kwargs)
    kwargs = dict(kwargs)
    try:
        obs = kwargs.pop("obs")
    except KeyError:
        raise TypeError("method='sample_transitions' needs obs=") from None
    return rs.Request.transitions(n, obs, beta=beta, **kwargs)

#: How long a call waits for a shard that is restarting before it gives up (seconds).
DEFAULT_WAIT = 120.0

#: Items a shard adds between flushes (see ``ShardedBuffer.create``).
DEFAULT_FLUSH_ITEMS = 1 << 16


class ShardUnavailableError(rs.Error):
    """A shard's actor died during the call, or did not come back in time.

    For an add it means *not acknowledged*: the batch may or may not be stored (the
    process may have died after storing it, before answering)."""


class ShardedBuffer:
    """One replay buffer made of shards, one per node, each a restartable Ray actor
    that owns a replaystore folder on its node's disk.

    ``create`` starts the shards; ``connect(name)`` finds them from any job. Adds go to
    a shard on the caller's node when there is one (``prefer_local``), else by
    ``policy``: ``"round_robin"``, or ``"hash"`` of the ``key`` given to the add (an
    env id keeps an env's items together). Draws split ``n`` over the shards: in
    proportion to their sizes, or, with ``beta``, to their total priority mass, with
    importance weights against the smallest priority of all shards (Ape-X's global
    priorities). A drawn batch has ``shard`` beside ``indices``: hand both back to
    ``update_priorities``.

    >>> import ray, tempfile, numpy as np
    >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    >>> buf = ShardedBuffer.create("doc", {"obs": ("float32", (4,))}, 1000,
    ...                            root=tempfile.mkdtemp(), alpha=0.6)
    >>> shard, idx = buf.add_batch({"obs": np.zeros((8, 4), np.float32)})
    >>> batch = buf.sample(32, beta=0.4)
    >>> batch["obs"].shape, sorted(set(batch["shard"].tolist())), len(buf)
    ((32, 4), [0], 8)
    >>> buf.update_priorities(batch["shard"], batch["indices"], np.ones(32))
    {'applied': 32, 'stale': 0}
    >>> buf.close(); ray.shutdown()
    """

    def __init__(self, name, shards, places, *, kind="buffer", prefer_local=True,
                 policy="round_robin", wait=DEFAULT_WAIT, prefetch=0, one_shard=False):
        if policy not in ("round_robin", "hash"):
            raise ValueError(f"policy {policy!r}: expected 'round_robin' or 'hash'")
        self.name = name
        self._shards = list(shards)
        self._places = list(places)
        self.kind = kind
        self.prefer_local = prefer_local
        self.policy = policy
        self.wait = wait
        self.prefetch = prefetch
        self.one_shard = one_shard
        self._after_unpickle()

    def _after_unpickle(self):
        self._turn = 0
        self._figures = None
        self._rng = np.random.default_rng()
        self._readers = {}
        self._node = None
        self._where = None
        self._ahead = {}
        self._held = {}  # shard -> priority updates sent with its next call

    def __getstate__(self):
        return {
            "name": self.name, "shards": self._shards, "places": self._places,
            "kind": self.kind, "prefer_local": self.prefer_local, "policy": self.policy,
            "wait": self.wait, "where": self._where, "prefetch": self.prefetch,
            "one_shard": self.one_shard,
        }

    def __setstate__(self, state):
        self.name, self._shards, self._places = state["name"], state["shards"], state["places"]
        self.kind, self.prefer_local = state["kind"], state["prefer_local"]
        self.policy, self.wait = state["policy"], state["wait"]
        self._after_unpickle()
        self._where = state["where"]
        self.prefetch = state["prefetch"]
        self.one_shard = state["one_shard"]

    # -- making and finding ----------------------------------------------------------

    @classmethod
    def create(cls, name, schema=None, capacity=None, *, root=None, paths=None, nodes=None,
               resources=None, kind="buffer", detached=False, num_cpus=0, prefer_local=True,
               policy="round_robin", wait=DEFAULT_WAIT, prefetch=0, one_shard=False,
               flush_items=DEFAULT_FLUSH_ITEMS, **options):
        """Starts one shard per node (every alive node unless ``nodes`` lists Ray node
        ids, or ``resources`` lists custom resources that pin shards to the nodes
        declaring them), each owning the folder ``{root}/{name}-{i}`` (or ``paths[i]``)
        made with ``ReplayBuffer.create``'s ``schema``, ``capacity`` (per shard) and
        ``options``. A folder that is already there is reopened: creating again after a
        cluster restart continues the buffer. ``detached`` shards outlive this job.
        Each shard flushes after every ``flush_items`` items it adds (0: never): the
        items past the last flush are what a reopen after a kill checks one by one,
        and what a power cut may take."""
        import ray

        if resources is not None and nodes is not None:
            raise ValueError("give nodes= or resources=, not both")
        if resources is not None:
            where = [{"resource": r} for r in resources]
        else:
            if nodes is None:
                nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
            where = [{"node": n} for n in nodes]
        if paths is None:
            if root is None:
                raise ValueError("give root= (a folder on every node) or paths=")
            paths = [f"{root}/{name}-{i}" for i in range(len(where))]
        if len(paths) != len(where):
            raise ValueError(f"{len(paths)} paths for {len(where)} shards")
        places = [_place.Placement(path=p, **w) for p, w in zip(paths, where)]
        shards = [
            _place.start(name, i, p, kind, schema, capacity, options, detached=detached,
                         num_cpus=num_cpus, flush_items=flush_items)
            for i, p in enumerate(places)
        ]
        buf = cls(name, shards, places, kind=kind, prefer_local=prefer_local, policy=policy,
                  wait=wait, prefetch=prefetch, one_shard=one_shard)
        buf._refresh_where()
        return buf

    @classmethod
    def connect(cls, name, **kwargs):
        """The client of buffer ``name``, whose shards another job created."""
        import ray

        shards = []
        while True:
            try:
                shards.append(ray.get_actor(_place.actor_name(name, len(shards)),
                                            namespace=_place.NAMESPACE))
            except ValueError:
                break
        if not shards:
            raise rs.NotABufferError(f"no shards of a buffer named {name!r} in Ray")
        where = ray.get([s.where.remote() for s in shards])
        places = [_place.Placement(path=w["path"], node=w["node"]) for w in where]
        buf = cls(name, shards, places, kind=where[0]["kind"], **kwargs)
        buf._where = where
        return buf

    @classmethod
    def open_or_create(cls, name, schema=None, capacity=None, **kwargs):
        """The client of buffer ``name``: its shards found by name, else started with
        :meth:`create`'s arguments (``schema=None``: found, or ``NotABufferError``).
        Two processes racing to create the same buffer both end up with its shards."""
        client = {k: kwargs[k] for k in ("prefer_local", "policy", "wait", "prefetch",
                                         "one_shard") if k in kwargs}
        try:
            return cls.connect(name, **client)
        except rs.NotABufferError:
            if schema is None:
                raise
        from ray.exceptions import ActorAlreadyExistsError

        try:
            return cls.create(name, schema, capacity, **kwargs)
        except ActorAlreadyExistsError:
            return cls.connect(name, **client)  # another process created them first

    def _refresh_where(self):
        self._where = self._call_all("where")
        return self._where

    def where(self):
        """Each shard's node, process id, folder and figures, asked now."""
        return self._refresh_where()

    @property
    def num_shards(self):
        return len(self._shards)

    def move(self, index, node, path=None, *, flush_items=None):
        """Starts shard ``index`` again on ``node`` (a Ray node id) over ``path`` (its
        folder there; the same path by default): for a node that died and came back
        under a new id, or a folder copied to another machine. The old actor is
        killed first, so two processes never write one folder. ``flush_items`` is the
        shard's as last seen, unless given."""
        import ray

        old = self._places[index]
        if flush_items is None:
            seen = self._where[index] if self._where else {}
            flush_items = seen.get("flush_items", DEFAULT_FLUSH_ITEMS)
        try:
            ray.kill(self._shards[index], no_restart=True)
        except Exception:
            pass  # gone with its node
        place = _place.Placement(path=path or old.path, node=node)
        # A reopen needs no schema or options: the folder has them.
        self._shards[index] = _place.start(self.name, index, place, self.kind, None, None, {},
                                           detached=False, num_cpus=0,
                                           flush_items=flush_items)
        self._places[index] = place
        self._readers.pop(index, None)
        self._figures = None
        return self._refresh_where()[index]

    # -- calls -----------------------------------------------------------------------

    def _call(self, i, method, *args, idempotent=True, **kwargs):
        """Calls shard ``i``; an idempotent call that meets a restarting shard is sent
        again until it answers or ``wait`` runs out."""
        return self._gather({i: (method, args, kwargs)}, idempotent=idempotent)[i]

    def _call_all(self, method, *args, **kwargs):
        got = self._gather({i: (method, args, kwargs) for i in range(len(self._shards))})
        return [got[i] for i in range(len(self._shards))]

    def _gather(self, calls, *, idempotent=True):
        """Sends every ``{shard: (method, args, kwargs)}`` at once and waits for all;
        retries what a shard's death interrupted (idempotent calls only)."""
        return self._collect(calls, self._send(calls), idempotent=idempotent)

    def _send(self, calls):
        refs = {}
        for i, (m, a, k) in calls.items():
            held = self._held.pop(i, None)
            if held and m == "draw":
                # One actor call for the updates and the draw.
                k = {**k, "updates": [(idx, prio) for idx, prio, _ in held]}
            elif held:
                self._send_updates(i, held)  # before the call: the shard runs them first
            refs[i] = getattr(self._shards[i], m).remote(*a, **k)
        return refs

    def _send_updates(self, i, held):
        for indices, priorities, member in held:
            self._shards[i].update_priorities.remote(indices, priorities, member)

    def _collect(self, calls, refs, *, idempotent=True):
        import ray
        from ray.exceptions import (
            ActorUnavailableError,
            RayActorError,
            RayTaskError,
        )

        deadline = time.monotonic() + self.wait
        pending = dict(calls)
        out = {}
        while True:
            failed = {}
            for i, ref in refs.items():
                try:
                    out[i] = ray.get(ref)
                except (RayActorError, ActorUnavailableError) as e:
                    failed[i] = e
                except RayTaskError as e:
                    # The shard's own error (a SchemaError, an EmptyError...): raised as
                    # itself, as a local buffer would, not wrapped in Ray's.
                    cause = getattr(e, "cause", None)
                    if isinstance(cause, BaseException):
                        raise cause from None
                    raise
            if not failed:
                return out
            i, err = next(iter(failed.items()))
            if "creation task" in str(err):
                # Its __init__ raised (a folder that does not open): no restart helps.
                raise ShardUnavailableError(
                    f"shard {i} of {self.name!r} ({self._places[i].path}) could not "
                    f"start: {err}"
                ) from err
            if not idempotent or time.monotonic() > deadline:
                raise ShardUnavailableError(
                    f"shard {i} of {self.name!r} ({self._places[i].path}) died during "
                    f"{pending[i][0]}"
                    + (" (not acknowledged: it may or may not be stored)" if not idempotent
                       else f" and did not answer within {self.wait} s")
                    + f": {err}"
                ) from err
            pending = {i: pending[i] for i in failed}
            time.sleep(0.05)
            refs = self._send(pending)

    # -- adds ------------------------------------------------------------------------

    def _my_node(self):
        if self._node is None:
            import ray

            self._node = ray.get_runtime_context().get_node_id()
        return self._node

    def _local_shards(self):
        if self._where is None:
            return []
        me = self._my_node()
        return [w["index"] for w in self._where if w["node"] == me]

    def route(self, key=None):
        """The shard an add with ``key`` goes to: one on this node when there is one
        (and ``prefer_local``), else by ``policy``."""
        if self.prefer_local:
            local = self._local_shards()
            if local:
                self._turn += 1
                return local[self._turn % len(local)]
        if self.policy == "hash":
            if key is None:
                raise ValueError("policy='hash' routes by key: give key= to the add")
            return zlib.crc32(repr(key).encode()) % len(self._shards)
        self._turn += 1
        return self._turn % len(self._shards)

    def add_batch(self, batch, *, priorities=None, key=None, member=None, shard=None):
        """Adds a batch to one shard (``shard``, or the one :meth:`route` picks);
        returns ``(shard, indices)`` once the shard acknowledged it."""
        i = self.route(key) if shard is None else shard
        idx = self._call(i, "add_batch", batch, priorities, member, idempotent=False)
        return i, idx

    def add(self, *, key=None, member=None, shard=None, **fields):
        """Adds one item; returns ``(shard, index)``."""
        batch = {k: _one_row(v) for k, v in fields.items()}
        i, idx = self.add_batch(batch, key=key, member=member, shard=shard)
        return i, int(idx[0])

    def add_episode(self, batch, *, terminated=False, truncated=False, key=None, member=None,
                    shard=None):
        """Adds a whole episode to one shard; returns ``(shard, what add_episode returns)``."""
        i = self.route(key) if shard is None else shard
        return i, self._call(i, "add_episode", batch, terminated, truncated, member,
                             idempotent=False)

    # -- draws -----------------------------------------------------------------------

    def _local_reader(self, i):
        if i in self._readers:
            return self._readers[i]
        reader = None
        if self.kind == "buffer" and i in self._local_shards():
            try:
                reader = rs.Reader.open(self._places[i].path)
            except rs.Error:
                reader = None
        self._readers[i] = reader
        return reader

    def figures(self, member=None):
        """Each shard's ``len`` (and ``total``, ``min_leaf`` when prioritized), asked now."""
        self._figures = self._call_all("figures", member)
        return self._figures

    def __len__(self):
        return sum(f["len"] for f in self.figures())

    def sample(self, n, *, beta=None, seed=None, member=None, method="sample", prefetch=None,
               one_shard=None, **kwargs):
        """``n`` items from all shards as one batch (rows grouped by shard), with
        ``shard`` and ``indices``; with ``beta``, drawn by global priority with
        ``weights`` (``(N * P(i))^-beta`` over their largest value across all shards).

        Shards are chosen for the ``n`` items by a multinomial draw over their sizes
        (or priority masses): the items are then i.i.d. from the union, as one buffer's
        draws with replacement. The split uses the figures the shards returned with the
        last draw; with ``seed`` it asks them first, so that the same seed over the same
        contents draws the same batch. ``method="sample_transitions"`` (with its
        keywords) draws n-step transitions the same way.

        ``prefetch=k`` (or the client's ``prefetch``) keeps ``k`` more draws of the same
        kind in flight: the call returns a batch the shards drew while the caller
        trained on the last one. Such a batch does not see items added, nor priorities
        updated, after it was sent (Ape-X's learners drew from shards the same way);
        a call with ``seed`` never uses one.

        ``one_shard=True`` (or the client's ``one_shard``) draws each batch from one
        shard, chosen by size (or priority mass): one actor call per batch, none for a
        shard on this node, as Ape-X's learners drew. Each item still has the
        probability it has in the union, and the weights are the same; but the items
        of one batch are no longer independent (they share a shard)."""
        if method not in DRAWS:
            raise ValueError(f"method {method!r}: expected one of {DRAWS}")
        prefetch = self.prefetch if prefetch is None else prefetch
        one = self.one_shard if one_shard is None else one_shard
        if seed is not None or prefetch <= 0:
            return self._finish(self._start(n, beta, seed, member, method, kwargs, one))
        # Draws sent ahead: while the caller trains on this batch, the shards draw the
        # next ones. Each was split by the figures known when it was sent.
        key = (n, beta, member, method, one, repr(sorted(kwargs.items())))
        queue = self._ahead.setdefault(key, [])
        while len(queue) < prefetch + 1:
            queue.append(self._start(n, beta, None, member, method, kwargs, one))
        return self._finish(queue.pop(0))

    def _start(self, n, beta, seed, member, method, kwargs, one_shard=False):
        """Splits a draw over the shards and sends the shards' parts; a part of a
        shard on this node is read at ``_finish``, through its ``Reader``."""
        figures = self._figures
        if figures is None or seed is not None:
            figures = self.figures(member)
        rng = np.random.default_rng(seed) if seed is not None else self._rng
        if beta is not None and any("total" not in f for f in figures):
            raise rs.Error(f"{self.name!r}: beta given, but its shards keep no priorities")
        mass = np.array([f["total"] if beta is not None else f["len"] for f in figures],
                        dtype=np.float64)
        if not mass.sum() > 0:
            raise rs.EmptyError(f"{self.name!r}: every shard is empty")
        if one_shard:
            counts = np.zeros(len(mass), np.int64)
            counts[rng.choice(len(mass), p=mass / mass.sum())] = n
        else:
            counts = rng.multinomial(n, mass / mass.sum())
        calls, local = {}, {}
        output = {k: kwargs[k] for k in OUTPUT if k in kwargs}
        asked = _request(method, n, beta, {k: v for k, v in kwargs.items() if k not in OUTPUT})
        for i, k in enumerate(counts):
            if k == 0:
                continue
            shard_seed = None
            if seed is not None:
                shard_seed = int(np.random.SeedSequence([seed, i]).generate_state(1, np.uint64)[0])
            request = asked.with_n(int(k))
            reader = self._local_reader(i) if member is None else None
            if reader is not None:
                local[i] = (reader, request, shard_seed, output)
            else:
                calls[i] = ("draw", (request, shard_seed, member), output)
        return {"counts": counts, "figures": figures, "calls": calls,
                "refs": self._send(calls), "local": local, "beta": beta, "method": method}

    def _finish(self, d):
        """Waits for a draw ``_start`` sent and joins its parts into one batch."""
        beta = d["beta"]
        parts, figures = {}, list(self._figures or d["figures"])
        for i, (reader, request, seed, output) in d["local"].items():
            parts[i] = reader.sample(request, seed=seed, **output)
            figures[i] = {**figures[i], "len": len(reader)}
            if beta is not None:
                # Read right after the draw: the minimum its weights were taken against
                # (a writer updating priorities in between moves it slightly).
                figures[i].update(reader.priority_summary())
        for i, part in self._collect(d["calls"], d["refs"]).items():
            figures[i] = part.pop("__figures__")
            parts[i] = part
        self._figures = figures
        if beta is not None and beta != 0:
            # Each shard weighed its items against its own smallest leaf:
            # (min_i / leaf)^beta. Against the smallest of all shards it is that times
            # (min / min_i)^beta: Ape-X's weights over the union.
            smallest = min(f["min_leaf"] for f in figures if f["len"] > 0)
            for i, part in parts.items():
                scale = np.float32((smallest / figures[i]["min_leaf"]) ** beta)
                part["weights"] = part["weights"] * scale
        order = sorted(parts)
        batch = _concat([parts[i] for i in order])
        batch["shard"] = np.repeat(np.array(order, np.int32), [d["counts"][i] for i in order])
        return batch

    def update_priorities(self, shards, indices, priorities, *, member=None, block=True):
        """Sends each priority to the shard that holds its item (``shards`` and
        ``indices`` as a draw returned them); returns ``{"applied", "stale"}`` summed:
        an item overwritten since it was drawn is skipped, never given another's
        priority. ``block=False`` returns at once (None), as Ape-X's learner did: the
        updates ride with this client's next call to their shard (a draw carries them
        in the same actor call), or go alone once four are waiting, or at once to a
        shard this client reads through a local ``Reader``. A shard runs one caller's
        calls in order, so any later call of this client that goes to the shard
        (``figures()``, ``len``, ``flush()``, a draw through the actor) comes after
        them; a draw through a local ``Reader`` may come first. An error is then only
        in the shard's log."""
        shards = np.asarray(shards)
        indices = np.asarray(indices, np.uint64)
        priorities = np.asarray(priorities, np.float64)
        if not (len(shards) == len(indices) == len(priorities)):
            raise ValueError(
                f"update_priorities: {len(shards)} shards, {len(indices)} indices and "
                f"{len(priorities)} priorities: expected one of each per item"
            )
        calls = {}
        for i in np.unique(shards):
            if not 0 <= i < len(self._shards):
                raise ValueError(f"update_priorities: shard {i}: this buffer has "
                                 f"{len(self._shards)}")
            mine = shards == i
            calls[int(i)] = ("update_priorities", (indices[mine], priorities[mine], member), {})
        if not block:
            # Held for the shard's next call (a draw carries them), unless the shard is
            # read here through a Reader (no call goes to it) or four are waiting.
            for i, (_, (idx, prio, mem), _) in calls.items():
                held = self._held.setdefault(i, [])
                held.append((idx, prio, mem))
                if self._readers.get(i) is not None or len(held) >= 4 or mem is not None:
                    self._send_updates(i, self._held.pop(i))
            return None
        got = self._gather(calls)
        return {
            "applied": sum(g["applied"] for g in got.values()),
            "stale": sum(g["stale"] for g in got.values()),
        }

    def get(self, shards, indices):
        """The items at ``indices`` of ``shards`` (one of each per item), in that order."""
        shards = np.asarray(shards)
        indices = np.asarray(indices, np.uint64)
        got = self._gather({int(i): ("get", (indices[shards == i],), {})
                            for i in np.unique(shards)})
        order = np.argsort(shards, kind="stable")
        joined = _concat([got[int(i)] for i in np.unique(shards)])
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        return {k: _take(v, back) for k, v in joined.items()}

    def stats(self):
        """Every shard's ``stats()`` (with its node and folder), asked now."""
        return self._call_all("stats")

    def flush(self):
        """Makes every shard's acknowledged items survive power loss too."""
        self._call_all("flush")

    # -- one checkpoint for all shards -----------------------------------------------

    def get_state(self, name=None):
        """One small picklable checkpoint of every shard: a snapshot of each, all under
        one ``name``, taken at once (each shard's in O(1)). Shards keep taking adds
        while it is taken: each shard's snapshot is a consistent cut of that shard;
        pause the writers for one cut across all."""
        name = name or f"{self.name}-{uuid.uuid4().hex[:12]}"
        try:
            states = self._call_all("get_state", name)
        except Exception:
            self._try_all("delete_snapshot", name)
            raise
        return {
            "replaystore_sharded": 1,
            "buffer": self.name,
            "name": name,
            "shards": [
                {"path": p.path, "state": s} for p, s in zip(self._places, states)
            ],
        }

    def set_state(self, state):
        """Restores every shard to ``state`` (from :meth:`get_state`), wherever the
        shards run now (after restarts or moves: a shard is its folder).

        All or nothing: first every shard checks that it has the state's snapshot and
        that it opens; if one cannot, ``StateError`` names it and nothing has changed.
        Then each shard takes an undo snapshot and restores; if one restore fails, the
        shards already restored are put back to their undo snapshots, and
        ``StateError`` names the shard that failed: every shard then holds what it held
        before the call."""
        if not isinstance(state, dict) or state.get("replaystore_sharded") != 1:
            raise rs.StateError("not a sharded buffer's state (from ShardedBuffer.get_state)")
        parts = state["shards"]
        if len(parts) != len(self._shards):
            raise rs.StateError(
                f"a state of {len(parts)} shards, for {self.name!r} of {len(self._shards)}"
            )
        problems = self._call_all_each("check_state", [p["state"] for p in parts])
        refused = [(i, why) for i, why in enumerate(problems) if why is not None]
        if refused:
            raise rs.StateError(
                f"{self.name!r}: state {state['name']!r} cannot be restored, nothing was "
                "changed: " + "; ".join(f"shard {i}: {why}" for i, why in refused)
            )
        undo = f"{state['name']}.undo-{uuid.uuid4().hex[:8]}"
        undo_states = self._call_all("get_state", undo)
        keep_undo = False
        try:
            calls = {i: ("set_state", (p["state"],), {}) for i, p in enumerate(parts)}
            outcome = self._gather_each(calls)
            failed = [(i, r) for i, r in outcome.items() if isinstance(r, BaseException)]
            if failed:
                done = [i for i, r in outcome.items() if not isinstance(r, BaseException)]
                back = self._gather_each({i: ("set_state", (undo_states[i],), {}) for i in done})
                stuck = [i for i, r in back.items() if isinstance(r, BaseException)]
                keep_undo = bool(stuck)
                i, err = failed[0]
                raise rs.StateError(
                    f"{self.name!r}: shard {i} could not restore state "
                    f"{state['name']!r} ({err}); "
                    + (f"shards {stuck} could not be put back either: their snapshot "
                       f"{undo!r} holds what they held before the call" if stuck else
                       "the other shards were put back to what they held before the call")
                ) from err
        finally:
            self._figures = None
            self._ahead.clear()  # drawn from what the shards held before
            self._readers.clear()
            if not keep_undo:
                self._try_all("delete_snapshot", undo)

    def _call_all_each(self, method, args):
        got = self._gather({i: (method, (a,), {}) for i, a in enumerate(args)})
        return [got[i] for i in range(len(args))]

    def _gather_each(self, calls):
        """Like ``_gather``, but a call's own error is returned in its place, not
        raised, so that the caller sees every shard's outcome."""
        out = {}
        for i, call in calls.items():
            try:
                out[i] = self._gather({i: call})[i]
            except Exception as e:  # the shard's error, whatever it is
                out[i] = e
        return out

    def _try_all(self, method, *args):
        for i in range(len(self._shards)):
            try:
                self._call(i, method, *args)
            except Exception:
                pass  # cleanup is best effort: a leftover snapshot costs only its name

    def delete_snapshot(self, name):
        """Deletes every shard's snapshot ``name`` (a checkpoint no longer needed)."""
        self._call_all("delete_snapshot", name)

    def close(self):
        """Closes every shard's buffer and ends its actor (the folders stay)."""
        import ray

        self._try_all("close")
        for s in self._shards:
            try:
                ray.kill(s, no_restart=True)
            except Exception:
                pass
        for r in self._readers.values():
            if r is not None:
                r.close()
        self._readers.clear()


#: Bits of a packed id that hold the index; the shard number sits above them.
INDEX_BITS = 48


def pack(shards, indices):
    """One int64 per item naming its shard and index (``shard << 48 | index``): for
    libraries whose priority update takes one index array (RLlib's ``batch_indexes``,
    TorchRL's ``index``)."""
    shards = np.asarray(shards, np.int64)
    indices = np.asarray(indices, np.int64)
    if (indices >> INDEX_BITS).any():
        raise ValueError(f"an index of {INDEX_BITS} bits or more cannot be packed")
    return (shards << INDEX_BITS) | indices


def unpack(ids):
    """``(shards, indices)`` of ids from :func:`pack`."""
    ids = np.asarray(ids, np.int64)
    return ids >> INDEX_BITS, (ids & ((1 << INDEX_BITS) - 1)).astype(np.uint64)


def _one_row(v):
    if isinstance(v, (str, bytes)):
        return [v]
    a = np.asarray(v)
    return a[None]


def _concat(parts):
    if len(parts) == 1:
        return dict(parts[0])
    out = {}
    for key in parts[0]:
        vals = [p[key] for p in parts]
        if isinstance(vals[0], np.ndarray):
            out[key] = np.concatenate(vals)
        elif isinstance(vals[0], list):
            out[key] = [x for v in vals for x in v]
        else:
            out[key] = vals
    return out


def _take(v, order):
    if isinstance(v, np.ndarray):
        return v[order]
    if isinstance(v, list):
        return [v[j] for j in order]
    return v
