"""What stands in for Tianshou's ``_meta`` (the ``Batch`` every line of its buffer code
reads and writes): one replaystore ring per sub-buffer, in ``path/ring-K``.

Tianshou writes a transition at its sub-buffer's insertion position, which moves around
the ring in order, so each write is the ring's next add. The keys Tianshou requires
(``obs``, ``obs_next``, ``act`` with nested ``Batch`` observations flattened to dotted
fields) are fixed fields; every other key (``info``, ``policy``, whatever a Collector
adds) is pickled per transition into one variable-length field, since such keys appear
and change as episodes go on. ``rew``, ``terminated``, ``truncated`` and ``done`` are
also kept in memory, as Tianshou keeps them: its n-step returns and ``prev``/``next``
(compiled with numba) read those whole columns on every update.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from tianshou.data import Batch

from ..._confined import Confined
from ..._native import ReplayBuffer as _Buffer
from .._folder import value_space

#: Keys stored as fields of their own; the rest ride pickled in ``REST``.
FIXED = ("obs", "obs_next", "act")
SCALARS = ("rew", "terminated", "truncated", "done")
REST = "__rest__"
_ONE = np.zeros(1, np.int64)  # the row index of a one-row write


def flatten(template: Batch, prefix: str = "") -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
    """The numeric leaves of a ``create_value`` template, as ``{dotted name: (dtype,
    shape per row)}``; ``None`` for a leaf that is not numeric (it is pickled)."""
    out: Dict[str, Any] = {}
    for key, value in template.items():
        name = f"{prefix}{key}"
        if isinstance(value, Batch):
            if len(value.get_keys()) == 0:
                continue
            inner = flatten(value, name + ".")
            if inner is None:
                return None  # type: ignore[return-value]
            out.update(inner)
        elif isinstance(value, np.ndarray) and value.dtype != object:
            out[name] = (value.dtype, tuple(value.shape[1:]))
        else:
            return None  # type: ignore[return-value]
    return out


def schema_of(template: Batch) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
    """The fixed fields for a first ``Batch``: each required key whose values are
    numeric arrays (nested ``Batch``es flattened); the others are pickled."""
    fields: Dict[str, Tuple[np.dtype, Tuple[int, ...]]] = {}
    for key in FIXED + SCALARS:
        if key not in template.get_keys():
            continue
        value = template[key]
        if isinstance(value, Batch):
            inner = flatten(value, key + ".")
            if inner:
                fields.update(inner)
        elif isinstance(value, np.ndarray) and value.dtype != object:
            fields[key] = (value.dtype, tuple(value.shape[1:]))
    return fields


class _NoRows:
    """The rows of a ring of size 0: none, ever (what Tianshou's ``ReplayBuffer(0)``
    stores)."""

    def __len__(self) -> int:
        return 0

    def stats(self) -> Dict[str, int]:
        return {"head": 0, "tail": 0}

    def get(self, indices: Any) -> Dict[str, Any]:
        if len(np.atleast_1d(indices)):
            raise IndexError("a ring of size 0 holds no transition")
        return {}

    def add_batch(self, rows: Dict[str, Any]) -> np.ndarray:
        raise ValueError("a ring of size 0 holds no transition")

    def get_state(self) -> None:
        return None

    def set_state(self, state: Any) -> None:
        """Nothing to restore: the ring holds nothing."""

    def clear(self) -> None:
        """Nothing to drop."""

    def flush(self) -> None:
        """Nothing to make durable."""

    def close(self) -> None:
        """Nothing to let go of."""


#: The largest ring whose rows a reset keeps readable in memory (``Store.keep_stale``).
STALE_ROWS = 1 << 16


class Ring:
    """One sub-buffer's replaystore ring: ring positions ``[0, size)`` to logical indices,
    as the adapter is its only writer."""

    def __init__(self, path: str, fields: Dict[str, Tuple[np.dtype, Tuple[int, ...]]], size: int,
                 base: int, heap_bytes: Optional[int] = None) -> None:
        schema: Dict[str, Any] = {k: (d.str, s) for k, (d, s) in fields.items()}
        schema[REST] = "bytes"
        self.size = size
        # Tianshou takes a main buffer of size 0 (a CachedReplayBuffer that only caches):
        # no folder is made for a ring that holds nothing.
        heap = heap_bytes or value_space(size)
        self.buf = _Buffer.open_or_create(path, schema, size, heap_bytes=heap) if size else _NoRows()
        self.tail = int(self.buf.stats()["tail"])
        self.base = base

    def __len__(self) -> int:
        return len(self.buf)

    def next_position(self) -> int:
        return (self.tail - self.base) % self.size

    def logical(self, positions: np.ndarray) -> np.ndarray:
        head = self.tail - len(self.buf)
        start = (head - self.base) % self.size
        return (head + (np.asarray(positions, np.int64) - start) % self.size).astype(np.uint64)

    def append(self, rows: Dict[str, Any]) -> None:
        idx = self.buf.add_batch(rows)
        self.tail = int(idx[-1]) + 1

    def clear(self) -> None:
        self.buf.clear()
        self.base = self.tail


class Store:
    """A ``Batch`` look-alike over the rings, for the calls Tianshou's buffers make on
    ``_meta``: ``store[key]``, ``store[index]``, ``store[index] = batch``, ``len``,
    ``get_keys``, slices for sub-buffers. Positions are global (``offsets`` split them
    into rings)."""

    def __init__(self, rings: List[Ring], offsets: np.ndarray,
                 fields: Dict[str, Tuple[np.dtype, Tuple[int, ...]]], scalars: Dict[str, np.ndarray],
                 rest_keys: List[str], folder: str = "", extras: Optional[Dict[str, np.ndarray]] = None) -> None:
        self.folder = folder
        # Columns added to stored transitions afterwards (Collector's episode hooks, via
        # set_array_at_key): one NumPy file each, mapped, written in place.
        self.extras: Dict[str, np.ndarray] = extras if extras is not None else {}
        #: Values written into stored transitions in place (``buf.info.n[0] = v``, through
        #: a :class:`Column`), ``{dotted key: {position: row}}``: Tianshou's columns are
        #: its storage, so such a write is what later reads of that position give, until
        #: a transition is written there. In memory only: the rings keep what was added.
        self.written: Dict[str, Dict[int, Any]] = {}
        #: HER's relabelled goals, laid over the above the same way while Tianshou's HER
        #: samples, and lifted at its next call (Tianshou restores its storage then).
        self.relabelled: Dict[str, Dict[int, Any]] = {}
        self.rings = rings
        self.offsets = np.asarray(offsets)  # start of each ring, and the total at the end
        self.fields = fields
        self.scalars = scalars
        self.rest_keys = rest_keys  # keys seen in the pickled part, in first-seen order
        self.lo, self.hi = 0, int(self.offsets[-1])
        #: State every view of this store shares (the read cache).
        self.shared: Dict[str, Any] = {"last": None}
        #: Called after a ring restarts at position 0 (its buffer was reset), so the
        #: owner can save the ring's new base.
        self.on_restart: Any = None
        self.__dict__["_ready"] = True

    def __setattr__(self, name: str, value: Any) -> None:
        # ``buf._meta.info = np.ones(buf.maxsize)`` adds a key to Tianshou's Batch (its
        # own tests do, before set_batch): here, a column of its own, as
        # set_array_at_key makes. The store's own attributes are set as usual.
        if self.__dict__.get("_ready") and name not in self.__dict__ and not name.startswith("_"):
            self.set_array_at_key(np.asarray(value), name)
            return
        object.__setattr__(self, name, value)

    # -- Batch's surface ------------------------------------------------------------------

    def __len__(self) -> int:
        return self.hi - self.lo

    def get_keys(self):
        # Asked for several times per draw: computed again only when a key was added.
        stamp = (len(self.rest_keys), len(self.extras))
        cached = self.shared.get("keys")
        if cached is not None and cached[0] == stamp:
            return list(cached[1])
        tops: List[str] = []
        for name in list(self.fields) + list(self.scalars) + self.rest_keys + list(self.extras):
            top = name.split(".", 1)[0]
            if top not in tops:
                tops.append(top)
        self.shared["keys"] = (stamp, tops)
        return list(tops)

    def keys(self):
        return self.get_keys()

    def __contains__(self, key: str) -> bool:
        return key in self.get_keys()

    def __repr__(self) -> str:
        return f"Batch(replaystore rings={len(self.rings)}, keys={self.get_keys()})"

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):
            if index in self.scalars:
                return self.scalars[index][self.lo:self.hi]
            if index in self.extras:
                return self.extras[index][self.lo:self.hi]
            if index not in self.get_keys():
                raise KeyError(index)
            return (NestedColumn if self._nested(index) else Column)(self, index)
        if isinstance(index, slice) and index.step in (None, 1):
            start, stop, _ = index.indices(len(self))
            view = Store(self.rings, self.offsets, self.fields, self.scalars, self.rest_keys,
                         self.folder, self.extras)
            view.on_restart = self.on_restart
            view.written, view.relabelled = self.written, self.relabelled
            view.shared = self.shared
            view.lo, view.hi = self.lo + start, self.lo + stop
            return view
        return self.rows(index)

    def restart(self, numbers: List[int]) -> None:
        """Empties rings ``numbers`` as Tianshou's reset of their sub-buffers does: what
        they hold stays readable until rewritten (``keep_stale``); their new bases are
        saved (``on_restart``) before they are cleared, so a kill between leaves the
        transitions renumbered, never a position that names nothing."""
        for r in numbers:
            self.keep_stale(r)
            self.rings[r].base = self.rings[r].tail
        if self.on_restart is not None:
            self.on_restart()
        for r in numbers:
            self.rings[r].clear()

    def keep_stale(self, r: int) -> None:
        """Before ring ``r`` is emptied by a reset: keeps what its positions hold, in
        memory, to read until they are written again, as Tianshou's storage keeps a
        reset sub-buffer's rows (a CachedReplayBuffer's cache after each episode).
        Rings of more than ``STALE_ROWS`` positions keep nothing (their positions read
        as never written)."""
        stales = self.shared.setdefault("stale", {})
        ring = self.rings[r]
        if ring.size > STALE_ROWS:
            stales.pop(r, None)
            return
        now = np.arange(min(len(ring), ring.size))
        self.hold_stale(r, now, ring.buf.get(ring.logical(now)) if len(now) else {})

    def hold_stale(self, r: int, positions: np.ndarray, values: Dict[str, Any]) -> None:
        """What ring ``r``'s ``positions`` read while nothing is stored there: ``values``
        as a ring gives them (fixed fields, the pickled ``REST``). Besides a reset, a
        pickle or an HDF5 file brings them (Tianshou's storage keeps every position)."""
        ring = self.rings[r]
        stales = self.shared.setdefault("stale", {})
        held, fixed, rest = stales.get(r) or (
            np.zeros(ring.size, bool),
            {k: np.zeros((ring.size, *shape), dtype) for k, (dtype, shape) in self.fields.items()},
            [{} for _ in range(ring.size)])
        if len(positions):
            held[positions] = True
            for k in self.fields:
                fixed[k][positions] = values[k]
            for p, blob in zip(positions.tolist(), values.get(REST, []) if self.rest_keys else []):
                rest[p] = pickle.loads(blob)  # (no pickled key: each row's blob is {})
        stales[r] = (held, fixed, rest)

    def in_memory(self) -> Dict[str, Any]:
        """What this store holds beyond its rings and flag columns, for a pickle: rows
        kept from resets and values written in place."""
        return {"stale": self.shared.get("stale", {}), "written": self.written}

    def take_in_memory(self, state: Dict[str, Any]) -> None:
        """``in_memory()``'s state, on a store rebuilt from the rings."""
        self.shared["stale"] = dict(state.get("stale", {}))
        self.written.clear()
        self.written.update(state.get("written", {}))
        self.shared["last"] = None

    def _nested(self, key: str) -> bool:
        """Whether ``key``'s values are nested (a dict observation, an info): its
        column is then a ``Batch`` to Tianshou, as its storage's is."""
        if any(name.startswith(key + ".") for name in self.fields):
            return True
        return key in self.rest_keys and isinstance(self._template(key), (dict, Batch))

    def __setitem__(self, index: Any, batch: Any) -> None:
        if isinstance(index, str):
            raise ValueError(f"replaystore keeps {index!r} in its rings: a whole column is not rewritten")
        self.write(np.atleast_1d(np.asarray(index)) + self.lo, batch)

    # -- rows --------------------------------------------------------------------------------

    def _locate(self, positions: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        ring = np.searchsorted(self.offsets, positions, side="right") - 1
        return ring, positions - self.offsets[ring]

    def write(self, positions: np.ndarray, batch: Any) -> None:
        """Writes row ``i`` of ``batch`` at ``positions[i]``: each ring's rows must be its
        next positions (``ValueError`` otherwise, as Tianshou's Batch raises when it
        cannot). One add per ring: ``update`` and ``set_batch`` write many rows at once."""
        self.shared["last"] = None
        for laid in self.written.values():
            for p in positions.tolist() if laid else ():
                laid.pop(p, None)  # a new transition there: what was written in place goes
        batch = batch if isinstance(batch, Batch) else Batch(batch)
        # One row without a leading axis (Tianshou's single add): read as row 0, not
        # stacked into a copy (a Batch.stack per add cost two thirds of add's time).
        stacked = len(positions) > 1 or _is_stacked(batch, self.fields)
        ring_no, local = self._locate(positions)
        if len(positions) == 1:  # every add: no grouping, integer checks
            groups = [(int(ring_no[0]), _ONE)]
        else:
            groups = [(r, np.flatnonzero(ring_no == r)) for r in dict.fromkeys(ring_no.tolist())]
        for r, at in groups:
            ring = self.rings[r]
            first = int(local[at[0]])
            if first == 0 and ring.next_position() != 0 and len(ring):
                # Tianshou reset this sub-buffer (a CachedReplayBuffer does after each
                # episode it moves): positions start again, so does the ring.
                self.restart([r])
            nxt = ring.next_position()
            if len(at) == 1:
                bad = None if first == nxt else 0
            else:
                wrong = np.flatnonzero(local[at] != (nxt + np.arange(len(at))) % ring.size)
                bad = int(wrong[0]) if len(wrong) else None
            if bad is not None:
                raise ValueError(
                    f"position {positions[at[bad]]} is not ring {r}'s next "
                    f"({(nxt + bad) % ring.size}): replaystore appends, and rewrites no "
                    "stored transition")
            ring.append(self._encode(batch, at, stacked))
            # One row (every add) by integer index: a fancy index per flag cost more.
            one = len(at) == 1
            where = int(positions[at[0]]) if one else positions[at]
            pick = int(at[0]) if one else at
            for key, column in self.scalars.items():
                value = batch[key]
                column[where] = np.asarray(value)[pick] if stacked else value

    def _encode(self, batch: Batch, at: np.ndarray, stacked: bool) -> Dict[str, Any]:
        """Rows ``at`` of ``batch`` (one row without a leading axis when not
        ``stacked``) as the ring's fields: the fixed ones as arrays, every other key
        pickled per row."""
        out: Dict[str, Any] = {}
        for name, (dtype, shape) in self.fields.items():
            value = np.asarray(_dig(batch, name), dtype)
            out[name] = np.ascontiguousarray((value[at] if stacked else value).reshape((len(at), *shape)))
        rest_keys = []
        for key in batch.get_keys():
            if key in self.scalars or (key in FIXED and any(
                    n == key or n.startswith(key + ".") for n in self.fields)):
                continue  # stored as fields
            value = batch[key]
            if isinstance(value, Batch) and len(value.get_keys()) == 0:
                continue
            rest_keys.append(key)
            if key not in self.rest_keys:
                self.rest_keys.append(key)
        rows = ([{k: _plain(batch[k][i]) for k in rest_keys} for i in at.tolist()] if stacked
                else [{k: _plain(batch[k]) for k in rest_keys}])
        templates = self.shared.setdefault("templates", {})
        for row in rows:
            for k, v in row.items():
                templates[k] = _merged(templates.get(k), v)
        out[REST] = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in rows]
        return out

    def read(self, positions: np.ndarray) -> Tuple[Dict[str, np.ndarray], List[Dict[str, Any]]]:
        """The fixed fields and the pickled rest of each position, in order."""
        positions = np.asarray(positions, np.int64).ravel() + self.lo
        n = len(positions)
        fixed = {k: np.zeros((n, *s), d) for k, (d, s) in self.fields.items()}
        rest: List[Dict[str, Any]] = [{} for _ in range(n)]
        ring_no, local = self._locate(positions)
        for r in np.unique(ring_no).tolist():
            at = np.flatnonzero(ring_no == r)
            ring = self.rings[r]
            stored = local[at] < len(ring)
            stale = self.shared.get("stale", {}).get(r)
            if stale is not None and not stored.all():
                # Positions a reset emptied and nothing rewrote since: what they held,
                # as Tianshou's storage still holds it.
                held, old_fixed, old_rest = stale
                miss = at[~stored]
                pos = local[miss]
                keep = held[pos]
                for k in self.fields:
                    fixed[k][miss[keep]] = old_fixed[k][pos[keep]]
                for j, p in zip(miss[keep].tolist(), pos[keep].tolist()):
                    rest[j] = old_rest[p]
            if not stored.any():
                continue
            sel = at[stored]
            got = ring.buf.get(ring.logical(local[sel]))
            for k in self.fields:
                fixed[k][sel] = got[k]
            if self.rest_keys:
                for j, blob in zip(sel.tolist(), got[REST]):
                    rest[j] = pickle.loads(blob)
        for layer in (self.written, self.relabelled):  # HER's goals over what was written
            for name, laid in layer.items():
                if not laid:
                    continue
                at = [(j, p) for j, p in enumerate(positions.tolist()) if p in laid]
                if name in fixed:
                    for j, p in at:
                        fixed[name][j] = laid[p]
                else:  # a leaf of a pickled key (info.number.n)
                    path = name.split(".")
                    for j, p in at:
                        rest[j] = _with(rest[j], path, laid[p])
        return fixed, rest

    def lay_over(self, positions: np.ndarray, values: Dict[str, np.ndarray]) -> None:
        """``values`` (``{dotted field: array with one row per position}``) laid over the
        stored transitions at ``positions``, in memory; scalar columns are written in
        their in-memory mirror."""
        self.shared["last"] = None
        flat = np.asarray(positions, np.int64).ravel() + self.lo
        for name, value in values.items():
            rows = np.asarray(value).reshape((len(flat), *np.asarray(value).shape[np.ndim(positions):]))
            if name in self.scalars:
                self.scalars[name][flat] = rows
                continue
            laid = self.relabelled.setdefault(name, {})
            for p, row in zip(flat.tolist(), rows):
                laid[p] = np.array(row)

    def lift(self) -> None:
        """Drops the values laid over this view's positions (what was stored or written
        in place shows again); other sub-buffers' stay."""
        self.shared["last"] = None
        for laid in self.relabelled.values():
            for p in [p for p in laid if self.lo <= p < self.hi]:
                del laid[p]

    def write_in_place(self, key: str, index: Any, value: Any) -> None:
        """``buf.KEY[index] = value`` for a key the rings hold (``index`` may go into each
        row: ``buf.obs[0, 1] = v``): the rows' values with ``value`` written into them,
        laid over those positions in memory (``written``). Nested keys are written
        through their leaves (``buf.info.env_id[0] = 3``), as in Tianshou's ``Batch``."""
        rows, inner = (index[0], index[1:]) if isinstance(index, tuple) and index else (index, ())
        positions = np.arange(len(self))[rows]
        current = self.column(key, rows)
        if isinstance(current, Batch):
            raise TypeError(f"{key!r} holds nested keys {sorted(current.get_keys())}: write into "
                            f"one of them (buf.{key}.<key>[i] = value)")
        current = np.array(current)
        current[(slice(None),) * np.ndim(positions) + inner] = value
        laid = self.written.setdefault(key, {})
        for p, row in zip((np.ravel(positions) + self.lo).tolist(),
                          current.reshape((-1, *current.shape[np.ndim(positions):]))):
            laid[p] = row
        self.shared["last"] = None

    def rows(self, index: Any) -> Batch:
        """The transitions at ``index`` as a ``Batch`` of their own (the caller may
        change it)."""
        return copy.deepcopy(self._cached(index))

    def _cached(self, index: Any) -> Batch:
        """The transitions at ``index``, read once for consecutive reads of the same
        positions; never handed out (callers get copies)."""
        positions = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index)
        key = (positions.tobytes(), positions.shape, positions.dtype.str, self.lo)
        last = self.shared["last"]
        if last is not None and last[0] == key:
            return last[1]
        b = self._rows(positions)
        self.shared["last"] = (key, b)
        return b

    def _rows(self, positions: np.ndarray) -> Batch:
        scalar_index = positions.ndim == 0
        positions = np.atleast_1d(positions)
        lead = positions.shape  # Tianshou indexes with 2-D arrays too (HER's episodes)
        fixed, rest = self.read(positions)
        if len(lead) > 1:
            fixed = {k: v.reshape((*lead, *v.shape[1:])) for k, v in fixed.items()}
        out: Dict[str, Any] = {}
        for name, values in fixed.items():
            _put(out, name, values)
        for key, column in self.scalars.items():
            out[key] = column[positions + self.lo]
        for key in self.rest_keys:
            values = [r.get(key) for r in rest]
            stacked = _stack_rest(values, self._template(key))
            out[key] = stacked.reshape((*lead, *stacked.shape[1:])) \
                if len(lead) > 1 and isinstance(stacked, np.ndarray) else stacked
        for key, column in self.extras.items():
            out[key] = np.asarray(column[positions + self.lo])
        b = Batch(out)
        return b[0] if scalar_index else b

    def _template(self, key: str) -> Any:
        """The layout of pickled key ``key``: every nested key any row added through
        this store had (after a reopen, the first stored row's), each with its first
        value. Tianshou's storage grows a key for every position when one row brings
        it, so rows without it read as zeros of that layout."""
        templates = self.shared.setdefault("templates", {})
        if key not in templates:
            # Read once per key and store, a miss too (None): this runs on every draw.
            templates[key] = None
            for ring in self.rings:
                if len(ring):
                    oldest = np.array([ring.tail - len(ring)], np.uint64)
                    row = pickle.loads(ring.buf.get(oldest)[REST][0])
                    if key in row:
                        templates[key] = row[key]
                        break
        return templates[key]

    def set_array_at_key(self, seq: np.ndarray, key: str, index: Any = None,
                         default_value: Optional[float] = None) -> None:
        """Tianshou's ``Batch.set_array_at_key``: ``key``'s values at ``index`` (all
        positions when ``None``). Keys the rings hold are refused (stored transitions
        are not rewritten); others become a column of their own, a mapped NumPy file in
        the folder (``extra-KEY.npy``) that survives a kill and a reopen."""
        seq = np.asarray(seq)
        self.shared["last"] = None
        if key in self.get_keys() and key not in self.extras:
            raise ValueError(f"replaystore keeps {key!r} in its rings: stored transitions are not rewritten")
        if key not in self.extras:
            total = int(self.offsets[-1])
            try:
                fill = np.array([default_value], dtype=seq.dtype)
            except TypeError as e:
                raise TypeError(
                    f"Cannot create a sequence of dtype {seq.dtype} with default value {default_value}. "
                    "Pass an array with the right dtype or another default value.") from e
            column = create_extra(self.folder, key, seq.dtype, (total, *seq.shape[1:]))
            column[:] = fill[0]
            self.extras[key] = column
        column = self.extras[key]
        if index is None:
            column[self.lo:self.hi] = seq
        else:
            column[np.asarray(np.arange(len(self))[index]) + self.lo] = seq
        column.flush()

    def column(self, key: str, index: Any) -> Any:
        """Key ``key`` of the rows at ``index`` (a dotted key digs into nested ones:
        ``info.env_id``), a copy."""
        value = self._cached(index)
        for part in key.split("."):
            if not isinstance(value, Batch) or part not in value.get_keys():
                return Batch()
            value = value[part]
        return copy.deepcopy(value) if isinstance(value, Batch) else np.array(value, copy=True)


class Column(np.lib.mixins.NDArrayOperatorsMixin):
    """``store[key]`` for a key kept in the rings: indexing reads the positions, and
    everything else an array does (``dtype``, ``shape``, ``==``, ``np.allclose``) is
    the array of every position, as Tianshou's ``buf.obs`` is its stored array."""

    def __init__(self, store: Store, key: str) -> None:
        # Underscored: a stored key may be named "store" or "key" (Tianshou's own tests
        # keep info["key"]), and attribute access gives stored keys.
        self._store, self._key = store, key

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple) and index:
            # buf.obs[rows, ...]: the rows read, the rest applied to what they give.
            rows, rest = index[0], index[1:]
            got = self._store.column(self._key, rows)
            if isinstance(got, Batch) or not rest:
                return got
            lead = () if np.ndim(rows) == 0 and not isinstance(rows, slice) else (slice(None),)
            return got[lead + rest]
        return self._store.column(self._key, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        # Tianshou's buf.info.env_id[0] = 3 writes its storage: here, in memory over the
        # stored transition until one is written at that position (Store.written).
        self._store.write_in_place(self._key, index, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_store", "_key"):
            raise AttributeError(name)
        fixed = self._store.fields.get(self._key)
        if fixed is not None and name in ("dtype", "shape", "ndim"):
            # A ring field's layout is known: no read of every position for it.
            shape = (len(self._store), *fixed[1])
            return {"dtype": fixed[0], "shape": shape, "ndim": len(shape)}[name]
        whole = self._store.column(self._key, slice(None))
        if isinstance(whole, Batch):
            # A nested key (buf.info.env_id): its own column, as Tianshou's Batch has.
            if name in whole.get_keys():
                return Column(self._store, f"{self._key}.{name}")
            return getattr(whole, name)
        return getattr(np.asarray(whole), name)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        inputs = tuple(np.asarray(x) if isinstance(x, Column) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __len__(self) -> int:
        return len(self._store)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = np.asarray(self._store.column(self._key, slice(None)))
        return a if dtype is None else a.astype(dtype)


class NestedColumn(Column, Batch):
    """``store[key]`` for a nested key: a :class:`Column` that is also a ``Batch`` to
    Tianshou's type checks (its ``get`` stacks frames of a nested observation with
    ``Batch.stack`` only when the column is one). Its rows are read when indexed; its
    own keys stay empty (the store and key are slots, not Batch keys)."""

    __slots__ = ("_store", "_key")

    def __init__(self, store: Store, key: str) -> None:  # no Batch.__init__: it holds no keys
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_key", key)


def _is_stacked(batch: Batch, fields: Dict[str, Any]) -> bool:
    """Whether ``batch`` holds one row per position (Tianshou writes a single row at a
    one-element index with or without a leading axis)."""
    for name, (_, shape) in fields.items():
        value = np.asarray(_dig(batch, name))
        return value.ndim == len(shape) + 1
    return False


def _dig(batch: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        batch = batch[part]
    return batch


def _with(row: Dict[str, Any], path: List[str], value: Any) -> Dict[str, Any]:
    """``row`` (a pickled key's dicts) with ``value`` at ``path``, copied along the path:
    the stored dict may be a reset ring's kept row, read again later."""
    out = dict(row)
    if len(path) == 1:
        out[path[0]] = value
    else:
        inner = out.get(path[0])
        out[path[0]] = _with(inner if isinstance(inner, dict) else {}, path[1:], value)
    return out


def _put(out: Dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        out = out.setdefault(part, {})
    out[parts[-1]] = value


def _plain(value: Any) -> Any:
    """A row's value as plain Python and NumPy (a ``Batch`` as a dict), for pickling."""
    if isinstance(value, Batch):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _stack_rest(values: List[Any], template: Any = None) -> Any:
    """One key's pickled values of several rows, as Tianshou's column would hold them:
    dicts as a ``Batch`` of stacked leaves, arrays stacked, anything else an object
    array. Rows without the key take zeros of the first value's layout (or of
    ``template``'s, when no row has it), as positions Tianshou never wrote; text and
    objects, ``None``."""
    present = [v for v in values if v is not None]
    like = present[0] if present else template
    if isinstance(like, dict) and all(isinstance(v, dict) for v in present):
        keys: List[str] = []
        layouts = [template] if isinstance(template, dict) else []
        for v in present + layouts:
            keys += [k for k in v if k not in keys]

        def layout(k: str) -> Any:
            return next((v[k] for v in present + layouts if k in v), None)

        return Batch({k: _stack_rest([(v or {}).get(k) for v in values], layout(k)) for k in keys})
    numeric = like is not None and np.asarray(like).dtype.kind in "biufc"
    try:
        filled = [np.zeros_like(np.asarray(like)) if v is None else v for v in values] if numeric else values
        arr = np.asarray(filled)
        if arr.dtype != object:
            return arr
    except (ValueError, TypeError):
        pass
    out = np.empty(len(values), object)
    out[:] = values
    return out


def _merged(layout: Any, value: Any) -> Any:
    """``layout`` with the keys of ``value`` it lacks (dicts, at every depth); a leaf
    keeps the first value it had."""
    if layout is None:
        return value
    if isinstance(layout, dict) and isinstance(value, dict):
        missing = [k for k in value if k not in layout]
        nested = [k for k in value if k in layout and isinstance(layout[k], dict)]
        if not missing and not nested:
            return layout
        out = dict(layout)
        for k in missing:
            out[k] = value[k]
        for k in nested:
            out[k] = _merged(layout[k], value[k])
        return out
    return layout


def ring_path(folder: str, k: int) -> str:
    return Confined(folder).subdir(f"ring-{k}")


def _extra_name(key: str) -> str:
    return f"extra-{key}.npy"


def create_extra(folder: str, key: str, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
    """A new ``.npy`` column mapped for writing, made inside ``folder`` only (``Confined``:
    a link or a FIFO at its name is refused, never written through)."""
    if dtype.hasobject:
        raise ValueError("Array can't be memory-mapped: Python objects in dtype.")
    with Confined(folder).open_in_place(_extra_name(key), create=True) as fh:
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": tuple(shape)}
        np.lib.format.write_array_header_2_0(fh, header)
        fh.flush()
        return np.memmap(fh, dtype=dtype, mode="r+", offset=fh.tell(), shape=tuple(shape))


def _map_extra(folder: str, name: str) -> np.ndarray:
    with Confined(folder).open_in_place(name) as fh:
        try:
            major, _ = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(fh)
        except ValueError as e:
            raise ValueError(f"{folder}/{name}: not the .npy column set_array_at_key writes ({e})") from None
        return np.memmap(fh, dtype=dtype, mode="r+", offset=fh.tell(), shape=shape,
                         order="F" if fortran else "C")


def open_extras(folder: str) -> Dict[str, np.ndarray]:
    """The columns ``set_array_at_key`` added, mapped again."""
    out = {}
    for name in Confined(folder).names():
        if name.startswith("extra-") and name.endswith(".npy"):
            out[name[len("extra-"):-len(".npy")]] = _map_extra(folder, name)
    return out
