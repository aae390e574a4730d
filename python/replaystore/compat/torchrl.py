"""TorchRL's storage and prioritized sampler on replaystore: a ``ReplayBuffer`` whose
items, cursor, length and priorities live in a folder and survive ``kill -9``.

>>> import tempfile, torch
>>> from tensordict import TensorDict
>>> from torchrl.data import ReplayBuffer
>>> from replaystore.compat.torchrl import ReplayStorePrioritizedSampler, ReplayStoreStorage
>>> folder = tempfile.mkdtemp()
>>> rb = ReplayBuffer(storage=ReplayStoreStorage(1000, path=folder),
...                   sampler=ReplayStorePrioritizedSampler(1000, alpha=0.6, beta=0.4),
...                   batch_size=32)
>>> index = rb.extend(TensorDict({"obs": torch.randn(100, 4),
...                               ("next", "obs"): torch.randn(100, 4)}, batch_size=[100]))
>>> td, info = rb.sample(return_info=True)
>>> rb.update_priority(info["index"], torch.rand(32))
>>> td["next", "obs"].shape
torch.Size([32, 4])
>>> rb.storage.close()
>>> rb = ReplayBuffer(storage=ReplayStoreStorage(1000, path=folder),     # after a kill too
...                   sampler=ReplayStorePrioritizedSampler(1000, alpha=0.6, beta=0.4))
>>> len(rb), int(rb.extend(td)[0])                       # the writer goes on at slot 100
(100, 100)
>>> rb.storage.close()

``ReplayStoreStorage(max_size, path)`` is a TorchRL ``TensorStorage`` (``isinstance``
checks and TorchRL's writers, samplers, transforms and ``TensorDictReplayBuffer`` see
one): it holds a ``TensorDict``'s leaves (nested keys, any shape, the numeric dtypes and
``bool``), a tensorclass's, a pytree's (dicts, tuples, lists of tensors) or one tensor, one replaystore item per index along the first
dimension. A folder that holds one reopens with its items; the ``ReplayBuffer`` it is
given to gets its ``RoundRobinWriter`` set to the cursor the folder had, so adds go on
where they stopped. ``state_dict()`` and ``dumps`` name an O(1) snapshot of the folder
(milliseconds at any size); ``load_state_dict`` / ``loads`` go back to it. Pickled (to a
``DataLoader`` worker, a ``multiprocessing`` child) it opens a ``Reader`` of the same
folder: the worker reads what the writer adds, and writing there is refused.

``ReplayStorePrioritizedSampler`` is TorchRL's ``PrioritizedSampler`` on the engine's
sum tree in that folder: the priorities survive a crash and a restart, and a second
process draws by priority from the same tree (``Reader.sample(n, beta=...)``). Same
weights as TorchRL's, ``(p_i / p_min) ** -beta``, from leaves ``(p + eps) ** alpha``;
the draw is seeded from ``torch``'s generator, so a seeded run repeats.

``LazyMemmapStorage`` and ``PrioritizedSampler`` are the same two classes under
TorchRL's names, for code that changes one import.

Where it differs from ``LazyMemmapStorage``, and why:

- Items are appended, never rewritten in place: a write must go to the slots that
  follow the last write (what ``RoundRobinWriter`` does, and ``empty()`` starts again
  at 0). A write elsewhere (``TensorDictMaxValueWriter``, ``storage[3] = x``,
  ``write_at``) raises ``NotImplementedError`` naming the slots it expected: a stored
  row is sealed with its checksum, and a torn rewrite would be a damaged row.
- ``ndim`` is 1, and non-tensor leaves (strings) are refused with ``TypeError`` at the
  first write; a ``bfloat16`` or complex leaf too.
- ``len`` counts the items held; after out-of-order writes TorchRL's counts writes.
- ``storage._storage`` is a copy of what is held (reading it costs a full read), not a
  preallocated ``max_size`` memmap; ``update_if_present`` (a patch in place) raises
  TorchRL's ``RuntimeError`` for a storage without conditional updates.
- One process writes a folder: a copy pickled to a worker or a ``.share(True)`` child
  reads it, and its writes raise ``ReadOnlyError`` (TorchRL's shared storages take
  writes from every process).
- ``cleanup()`` / ``auto_cleanup`` remove only what the storage wrote in a folder the
  caller named (TorchRL removes the whole folder); ``dumps`` with a save hook or
  another checkpointer raises ``NotImplementedError`` (there is no full copy to
  reshape); ``loads`` into a storage never written works (TorchRL refuses a tensor or
  pytree one).

``python/conformance/by_design.toml`` lists each of TorchRL's own test cases that these
make fail, with the reason.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

try:
    import torch
    from torch.utils._pytree import (tree_flatten, tree_map, tree_unflatten, treespec_dumps,
                                     treespec_loads)
    from tensordict import TensorDict, is_non_tensor, is_tensor_collection
    from tensordict.utils import is_tensorclass
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler as _TorchRLPrioritizedSampler
    from torchrl.data.replay_buffers.storages import Storage, TensorStorage
    from torchrl.data.replay_buffers.storages.tensor import (_MEMMAP_STORAGE_REGISTRY,
                                                             _ensure_cleanup_handlers, _flip_list)
    from torchrl.data.replay_buffers.writers import RoundRobinWriter, Writer
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("replaystore.compat.torchrl needs TorchRL: pip install torchrl") from e

from .._native import ReadOnlyError
from .._native import Reader as _Reader
from .._native import ReplayBuffer as _Buffer
from .._confined import Confined
from ._folder import Folder, holds_buffer, read_sidecar, remove_own_folder, write_sidecar

__all__ = ["ReplayStoreStorage", "ReplayStorePrioritizedSampler", "LazyMemmapStorage",
           "PrioritizedSampler"]

SIDECAR = "torchrl.json"
#: The buffer's own folder, beside the sidecar (the sidecar is written first).
ITEMS = "items"
#: torch dtypes a leaf may have, by the name replaystore's schema gives them.
_DTYPES = {torch.float16: "float16", torch.float32: "float32", torch.float64: "float64",
           torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
           torch.uint8: "uint8", torch.bool: "bool"}
_SEP = "/"


def _field(key: Any) -> str:
    return _SEP.join(key) if isinstance(key, tuple) else key


def _key(field: str) -> Any:
    parts = tuple(field.split(_SEP))
    return parts if len(parts) > 1 else parts[0]


class _Layout:
    """What one item is: the leaves' fields, the item's own batch shape, and the kind of
    object handed back (a ``TensorDict``, a tensorclass, or one tensor). Kept in the
    sidecar, so a reopened folder hands back what was stored."""

    def __init__(self, kind: str, fields: Dict[str, Tuple[str, List[int]]],
                 batch: List[int], cls: Optional[str] = None) -> None:
        # cls: a tensorclass's import path, or a pytree's structure (treespec_dumps).
        self.kind, self.fields, self.batch, self.cls = kind, fields, batch, cls
        #: The tensorclass itself, in the process that stored it or once imported: a
        #: class defined inside a function has no import path, and is read back here.
        self.type: Optional[type] = None

    def __getstate__(self) -> dict:
        # A pickled copy imports the class by its path (a local class cannot travel).
        return {k: v for k, v in self.__dict__.items() if k != "type"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, type=None)

    @classmethod
    def of(cls, item: Any) -> "_Layout":
        """The layout of one item (no storage batch dimension)."""
        if isinstance(item, torch.Tensor):
            return cls("tensor", {"data": (_dtype_name("data", item), list(item.shape))}, [])
        if is_tensorclass(item):
            name = f"{type(item).__module__}:{type(item).__qualname__}"
            inner = cls.of(item._tensordict)
            layout = cls("tensorclass", inner.fields, inner.batch, name)
            layout.type = type(item)
            return layout
        if is_tensor_collection(item):
            fields = {name: (_dtype_name(name, leaf), list(leaf.shape))
                      for name, leaf in _tensor_leaves(item).items()}
            if not fields:
                raise TypeError("ReplayStoreStorage: the first item has no tensor leaves")
            return cls("tensordict", fields, list(item.batch_size))
        leaves, spec = tree_flatten(item)
        if not leaves or not all(isinstance(x, torch.Tensor) for x in leaves):
            raise TypeError(f"ReplayStoreStorage keeps tensors, TensorDicts, tensorclasses and "
                            f"pytrees of tensors; got {type(item).__name__}")
        fields = {str(i): (_dtype_name(str(i), x), list(x.shape)) for i, x in enumerate(leaves)}
        return cls("pytree", fields, [], treespec_dumps(spec))

    def to_json(self) -> dict:
        return {"kind": self.kind, "fields": self.fields, "batch": self.batch, "cls": self.cls}

    @classmethod
    def from_json(cls, d: dict) -> "_Layout":
        return cls(d["kind"], {k: (v[0], list(v[1])) for k, v in d["fields"].items()},
                   list(d["batch"]), d.get("cls"))

    def schema(self) -> Dict[str, Any]:
        return {name: (dtype, tuple(shape)) for name, (dtype, shape) in self.fields.items()}

    def rows(self, data: Any, n: int) -> Dict[str, np.ndarray]:
        """The fields of ``n`` items (batch dimension first), checked against the layout."""
        if self.kind == "tensor":
            leaves = {"data": data}
        elif self.kind == "pytree":
            flat, spec = tree_flatten(data)
            if treespec_dumps(spec) != self.cls:
                raise ValueError(f"ReplayStoreStorage: the data's structure {spec} is not the "
                                 "stored items' structure")
            leaves = {str(i): x for i, x in enumerate(flat)}
        else:
            td = data._tensordict if is_tensorclass(data) else data
            if not is_tensor_collection(td):
                raise TypeError(f"ReplayStoreStorage holds {self.kind} items; got "
                                f"{type(data).__name__}")
            leaves = _tensor_leaves(td)
            missing = sorted(set(self.fields) - set(leaves))
            if missing:
                raise KeyError(f"ReplayStoreStorage: the data lacks key(s) {missing} the "
                               f"stored items have")
        out = {}
        for name, (dtype, shape) in self.fields.items():
            leaf = leaves[name]
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(f"ReplayStoreStorage: {name!r} is a {type(leaf).__name__}, "
                                f"expected a tensor")
            want = (n, *shape)
            if tuple(leaf.shape) != want:
                raise ValueError(f"ReplayStoreStorage: {name!r} has shape {tuple(leaf.shape)}, "
                                 f"expected {want}")
            if _DTYPES.get(leaf.dtype) != dtype:
                leaf = leaf.to(_torch_dtype(dtype))
            out[name] = leaf.detach().cpu().contiguous().numpy()
        return out

    def build(self, batch: Dict[str, np.ndarray], n: Optional[int], device: Any) -> Any:
        """What a read hands back: ``n`` items, or one when ``n`` is ``None``."""
        def tensor(name: str) -> torch.Tensor:
            t = torch.from_numpy(batch[name])
            t = t[0] if n is None else t
            return t if device is None or t.device == device else t.to(device)

        if self.kind == "tensor":
            return tensor("data")
        if self.kind == "pytree":
            return tree_unflatten([tensor(str(i)) for i in range(len(self.fields))],
                                  treespec_loads(self.cls))
        size = self.batch if n is None else [n, *self.batch]
        td = TensorDict({_key(name): tensor(name) for name in self.fields}, batch_size=size)
        if self.kind == "tensorclass":
            if self.type is None:
                self.type = _load_class(self.cls)
            return self.type._from_tensordict(td)
        return td


def _tensor_leaves(td: Any) -> Dict[str, torch.Tensor]:
    """A TensorDict's leaves by field name; ``TypeError`` for a non-tensor one (a string,
    ``NonTensorData``), which ``leaves_only`` would pass over and a write then lose."""
    leaves = {}
    for key, value in td.items(include_nested=True):
        if isinstance(value, torch.Tensor):     # the common case first: one C check
            leaves[_field(key)] = value
        elif is_non_tensor(value) or not is_tensor_collection(value):
            raise TypeError(f"ReplayStoreStorage keeps tensors: {key!r} is "
                            f"{type(value).__name__}, and non-tensor values are not stored")
    return leaves


def _dtype_name(key: Any, leaf: torch.Tensor) -> str:
    name = _DTYPES.get(leaf.dtype)
    if name is None:
        raise TypeError(f"ReplayStoreStorage: leaf {key!r} has dtype {leaf.dtype}; it keeps "
                        f"{', '.join(str(d) for d in _DTYPES)}")
    return name


def _torch_dtype(name: str) -> torch.dtype:
    return next(d for d, n in _DTYPES.items() if n == name)


def _load_class(path: str) -> Any:
    import importlib

    module, _, qual = path.partition(":")
    if "<locals>" in qual:
        raise TypeError(f"the items are tensorclass {qual} of {module}, defined inside a "
                        "function: only the storage that stored them can rebuild them. "
                        "Define it at module level to read them elsewhere or after a restart")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _slots_of(cursor: Any, size: int) -> Tuple[np.ndarray, bool]:
    """The slots a ``set`` or ``get`` names, as int64, and whether it named one item."""
    if isinstance(cursor, tuple) and len(cursor) == 1:    # TorchRL's index along ndim=1
        cursor = cursor[0]
    if isinstance(cursor, (int, np.integer)) or (
            isinstance(cursor, torch.Tensor) and cursor.ndim == 0):
        i = int(cursor)
        return np.array([i + size if i < 0 else i], np.int64), True
    if isinstance(cursor, slice):
        return np.arange(size, dtype=np.int64)[cursor], False
    if isinstance(cursor, tuple):
        raise NotImplementedError("ReplayStoreStorage has ndim=1: index it with one index, "
                                  f"not a tuple of {len(cursor)}")
    a = cursor.detach().cpu().numpy() if isinstance(cursor, torch.Tensor) else np.asarray(cursor)
    if a.dtype == bool:
        a = np.flatnonzero(a)
    a = a.astype(np.int64).reshape(-1)
    return np.where(a < 0, a + size, a), False


class ReplayStoreStorage(Folder, TensorStorage):
    """A TorchRL ``TensorStorage`` in the folder ``path``; see the module.

    ``scratch_dir`` is ``LazyMemmapStorage``'s name for ``path``; without either the
    storage lives in a temporary folder. ``auto_cleanup`` is ``LazyMemmapStorage``'s: when
    true (the default for a temporary folder) the storage's files are removed at
    ``close``, when it is collected, at exit and on SIGINT or SIGTERM (through TorchRL's
    own handlers); ``cleanup()`` removes them at once. In a folder the caller named, only
    what the storage wrote goes (``items/``, ``torchrl.json``), and the folder itself if
    that leaves it empty: TorchRL removes the whole folder, the caller's files in it too.

    >>> import os, tempfile, torch
    >>> from tensordict import TensorDict
    >>> from torchrl.data import ReplayBuffer
    >>> folder = os.path.join(tempfile.mkdtemp(), "scratch")
    >>> s = ReplayStoreStorage(10, scratch_dir=folder, auto_cleanup=True)
    >>> _ = ReplayBuffer(storage=s).extend(TensorDict(a=torch.zeros(3), batch_size=[3]))
    >>> s.cleanup(), os.path.exists(folder), s.cleanup()
    (True, False, False)
    """

    #: ``ReplayBuffer.update_if_present`` patches stored items in place, which this
    #: storage does not do (see the module): TorchRL then raises its RuntimeError,
    #: where TensorStorage's patch would go to a copy and be lost.
    supports_conditional_update = False

    def __init__(self, max_size: int, path: Optional[str] = None, *, scratch_dir: Any = None,
                 device: Any = "cpu", ndim: int = 1, existsok: bool = False,
                 compilable: bool = False, shared_init: bool = False,
                 auto_cleanup: Optional[bool] = None) -> None:
        if ndim != 1:
            raise NotImplementedError(f"ReplayStoreStorage has ndim=1 (got ndim={ndim})")
        if path is not None and scratch_dir is not None and str(path) != str(scratch_dir):
            raise ValueError(f"give path or scratch_dir, not both ({path!r}, {scratch_dir!r})")
        TensorStorage.__init__(self, storage=None, max_size=int(max_size), device=device,
                               ndim=1, compilable=compilable)
        self.shared_init = shared_init
        self.existsok = existsok
        target = path if path is not None else scratch_dir
        self._take_folder(None if target is None else os.fspath(target), "replaystore-torchrl-")
        self._auto_cleanup = self._own_dir if auto_cleanup is None else bool(auto_cleanup)
        self._cleaned_up = False
        if self._remove_dir is not None and not self._auto_cleanup:
            # The caller keeps the temporary folder, once it holds items: one never
            # written (TorchRL makes no files until then) is still removed.
            self._remove_dir.detach()
            self._remove_dir = weakref.finalize(self, _remove_if_unused, self._path)
        elif self._auto_cleanup and not self._own_dir:
            # Holds the path, not the storage: runs once, at close, collection or exit.
            self._remove_dir = weakref.finalize(self, _remove_files, self._path)
        if self._auto_cleanup:
            # TorchRL's registry: its SIGINT/SIGTERM handlers clean what it holds.
            _ensure_cleanup_handlers()
            _MEMMAP_STORAGE_REGISTRY.add(self)
        os.makedirs(self._path, exist_ok=True)
        self._items_dir = Confined(self._path).subdir(ITEMS, create=True)
        self._rs: Any = None
        self._tail_value: Optional[int] = None
        self._layout: Optional[_Layout] = None
        self._origin = 0
        self._alpha: Optional[Tuple[float, float]] = None
        self._stash: Optional[Tuple[torch.Tensor, Dict[str, np.ndarray]]] = None
        self._rb_ref: Optional[weakref.ref] = None
        #: A copy pickled to another process: it reads, never writes (``ReadOnlyError``).
        self._reader_copy = False
        self._reopen()

    # --- the folder ------------------------------------------------------------------

    def _reopen(self) -> None:
        config = read_sidecar(self._path, SIDECAR)
        if config is None:
            return
        if config["max_size"] != self.max_size:
            raise ValueError(f"{self._path} holds a TorchRL storage of max_size "
                             f"{config['max_size']}, not {self.max_size}")
        self._layout = _Layout.from_json(config["layout"])
        self._origin = config["origin"]
        if holds_buffer(self._items_dir):
            self._rs = (_Reader if self._reader_copy else _Buffer).open(self._items_dir)
            if len(self._rs) == 0:
                # A kill after ``clear`` and before the sidecar named the new origin.
                self._origin = self._rs.stats()["tail"]
        self.initialized = self._rs is not None

    def _write_config(self) -> None:
        write_sidecar(self._path, SIDECAR, {"max_size": self.max_size, "origin": self._origin,
                                            "layout": self._layout.to_json()})

    def _create(self, layout: "_Layout") -> None:
        if self._cleaned_up:
            raise RuntimeError(f"{self._path}: this storage was cleaned up (cleanup()); "
                               "make a new one")
        self._layout = layout
        # The sidecar first: a kill before the buffer exists leaves a layout and no
        # buffer, and the next write creates it.
        self._write_config()
        options = {}
        if self._alpha is None:
            self._alpha = self._sampler_alpha()
        if self._alpha is not None:
            options = {"alpha": self._alpha[0], "eps": self._alpha[1]}
        self._rs = _Buffer.create(self._items_dir, self._layout.schema(), self.max_size, **options)
        self.initialized = True

    def _sampler_alpha(self) -> Optional[Tuple[float, float]]:
        rb = self._rb_ref() if self._rb_ref is not None else None
        sampler = getattr(rb, "_sampler", None)
        if isinstance(sampler, ReplayStorePrioritizedSampler):
            return (sampler.alpha, sampler._eps)
        return None

    def _want_priorities(self, alpha: float, eps: float) -> None:
        """Called by the prioritized sampler: the buffer gets a sum tree (when created),
        or must have one (when it exists)."""
        if self._rs is None:
            self._alpha = (alpha, eps)
        elif self._rs.max_priority is None:
            raise ValueError(f"{self._path} holds a buffer without priorities: a "
                             "ReplayStorePrioritizedSampler needs a folder created with it")

    @property
    def _scratch_dir_is_temp(self) -> bool:
        """``LazyMemmapStorage``'s name for a storage in a folder it made itself."""
        return self._own_dir

    def _follow(self) -> None:
        """A reader copy made before the writer's first write opens the buffer once the
        writer has made it."""
        if self._rs is None and self._reader_copy:
            self._reopen()

    @property
    def _buffer(self) -> Any:
        self._follow()
        if self._rs is None:
            raise RuntimeError("Cannot get elements out of a non-initialized storage.")
        return self._rs

    def _open_buffers(self) -> list:
        return [self._rs] if self._rs is not None else []

    # --- positions ---------------------------------------------------------------------

    def _tail(self) -> int:
        """The index the next item gets: kept here for the writer (each add returns it),
        asked of the folder by a reader (another process adds)."""
        self._follow()
        if self._rs is None:
            return self._origin
        if self._tail_value is None or self._reader_copy:
            self._tail_value = self._rs.stats()["tail"]
        return self._tail_value

    def _cursor(self) -> int:
        """The slot the next append goes to."""
        return (self._tail() - self._origin) % self.max_size

    def _items(self, slots: np.ndarray) -> np.ndarray:
        """The replaystore items that hold ``slots`` (each below ``len``)."""
        n = len(self)
        bad = (slots < 0) | (slots >= n)
        if bad.any():
            raise IndexError(f"index {int(slots[bad][0])} is out of bounds for a storage "
                             f"holding {n} items")
        last = self._tail() - 1
        return (last - (last - self._origin - slots) % self.max_size).astype(np.uint64)

    def _slots(self, items: np.ndarray) -> np.ndarray:
        return ((items.astype(np.int64) - self._origin) % self.max_size).astype(np.int64)

    # --- TensorStorage -----------------------------------------------------------------

    @property
    def _len(self) -> int:
        self._follow()
        return len(self._rs) if self._rs is not None else 0

    @_len.setter
    def _len(self, value: int) -> None:
        # The length is the buffer's: what TorchRL's writers set is what it already is.
        pass

    @property
    def _total_shape(self) -> Optional[torch.Size]:
        return torch.Size([self.max_size]) if self._layout is not None else None

    @property
    def _storage(self) -> Any:
        """What is held, read out (a copy): for TorchRL code that reads ``_storage``."""
        if self._rs is None or self._layout is None:
            return None
        return self.get(slice(None))

    @_storage.setter
    def _storage(self, value: Any) -> None:
        if value is not None:
            raise TypeError("ReplayStoreStorage keeps its items in its folder: set them "
                            "through set() or a writer")

    def attach(self, buffer: Any) -> None:
        super().attach(buffer)
        if hasattr(buffer, "_init_writer"):
            self._rb_ref = weakref.ref(buffer)
            self._hand_cursor(buffer)

    def _hand_cursor(self, rb: Any) -> None:
        """A reopened folder's cursor, handed to the writer the buffer is about to make
        (``_init_writer``: an instance, a factory, or ``None`` for TorchRL's default)."""
        if len(self) == 0:
            return
        cursor, count = self._cursor(), len(self)

        def preset(writer: Any) -> Any:
            if isinstance(writer, RoundRobinWriter) and writer._cursor == 0:
                writer._cursor, writer._write_count = cursor, count
            return writer

        made = rb._init_writer
        if made is None:
            rb._init_writer = preset(RoundRobinWriter())
        elif isinstance(made, Writer):
            preset(made)
        elif callable(made):
            rb._init_writer = lambda: preset(made())

    def _resync_writer(self) -> None:
        """After a refused write: a ``RoundRobinWriter`` moves its cursor before it
        writes, so it is put back where the items end."""
        rb = self._rb_ref() if self._rb_ref is not None else None
        writer = getattr(rb, "_writer", None)
        if isinstance(writer, RoundRobinWriter):
            writer._cursor = self._cursor()

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        if isinstance(data, list):      # items one by one: TorchRL stacks them
            data = _flip_list(data)
        slots, one = _slots_of(cursor, self.max_size)
        if one:
            data = data.unsqueeze(0) if hasattr(data, "unsqueeze") else \
                tree_map(lambda x: x.unsqueeze(0), data)
        if self._reader_copy:
            raise ReadOnlyError(f"this copy of the storage reads {self._path} (it was pickled "
                                "to another process); the process that made it writes")
        try:
            if self._rs is None:
                first = data[0] if hasattr(data, "unsqueeze") else \
                    tree_map(lambda x: x[0], data)
                self._create(_Layout.of(first))
            expected = (self._cursor() + np.arange(len(slots))) % self.max_size
            if not np.array_equal(slots, expected):
                raise NotImplementedError(
                    f"ReplayStoreStorage appends: this write should go to slots "
                    f"{_show(expected)}, not {_show(slots)} (a stored item is not rewritten "
                    "in place)")
            if len(slots) == 0:
                return
            added = self._buffer.add_batch(self._layout.rows(data, len(slots)))
            self._tail_value = int(added[-1]) + 1
        except Exception:
            self._resync_writer()
            raise
        if set_cursor:
            self._set_last_cursor(cursor)
        self._stash = None
        self._bump_mutation_revision()

    def get(self, index: Any) -> Any:
        buffer = self._buffer      # raises for a storage nothing was written to
        stash, self._stash = self._stash, None
        if stash is not None and stash[0] is index:
            return self._layout.build(stash[1], len(index), self._out_device())
        slots, one = _slots_of(index, len(self))
        batch = buffer.get(self._items(slots))
        return self._layout.build(batch, None if one else len(slots), self._out_device())

    def _out_device(self) -> Any:
        return None if self.device in ("auto", torch.device("cpu")) else self.device

    def __len__(self) -> int:
        return self._len

    def _empty(self) -> None:
        if self._rs is not None:
            self._buffer.clear()
            self._tail_value = None
            self._origin = self._tail()
            self._write_config()
        self._stash = None
        self._bump_mutation_revision()

    def _init(self, data: Any = None) -> None:
        if data is not None and self._rs is None:
            self._create(_Layout.of(data))

    def close(self) -> None:
        Folder.close(self)
        self._rs = None

    def cleanup(self) -> bool:
        """Closes the storage and removes its files (``LazyMemmapStorage.cleanup``; see
        the class); whether it removed any. Once only: later calls return ``False``, and
        the storage takes no more writes."""
        if self._cleaned_up:
            return False
        self._cleaned_up = True
        wrote = self._rs is not None
        if self._remove_dir is not None:   # removed here, whatever auto_cleanup said
            self._remove_dir.detach()
            self._remove_dir = None
        self.close()
        self.initialized = False
        if self._own_dir:
            remove_own_folder(self._path)
            return wrote
        return _remove_files(self._path) and wrote

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(path={self._path!r}, len={len(self)}, "
                f"max_size={self.max_size})")

    # --- checkpoints -------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """An O(1) snapshot of the folder: its name, the state to go back to, and what a
        fresh storage needs to take it (the layout, the priorities' alpha and eps)."""
        if self._rs is None:
            return {"path": self._path, "state": None, "origin": self._origin}
        summary = self._buffer.priority_summary()
        return {"path": self._path, "state": self._buffer.get_state(), "origin": self._origin,
                "max_size": self.max_size, "layout": self._layout.to_json(),
                "priorities": None if summary is None else [summary["alpha"], summary["eps"]]}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Goes back to a snapshot ``state_dict()`` took: of this folder, or of another
        storage's of the same ``max_size`` (a fresh storage resuming from a checkpoint:
        the engine brings the snapshot into this folder, linked where it can be)."""
        if state_dict.get("state") is None:
            self._empty()
            return
        if self._rs is None:
            # Nothing written here yet: made as the snapshot's storage was, then filled.
            if "layout" not in state_dict:
                raise ValueError("this snapshot (from an older replaystore) does not say "
                                 "what its items are: load it into the storage it was "
                                 f"taken of, in {state_dict.get('path')}")
            if state_dict["max_size"] != self.max_size:
                raise ValueError(f"the snapshot is of a storage of max_size "
                                 f"{state_dict['max_size']}, this one has {self.max_size}")
            if state_dict.get("priorities") is not None:
                self._alpha = tuple(state_dict["priorities"])
            self._create(_Layout.from_json(state_dict["layout"]))
        self._buffer.set_state(state_dict["state"])
        self._tail_value = None
        self._origin = state_dict["origin"]
        self._write_config()
        self._stash = None
        self._bump_mutation_revision()

    def dumps(self, path: Any) -> None:
        """Writes the snapshot's name to ``path`` (a folder), not the items. TorchRL's
        save hooks (``TED2Flat``) and other checkpointers (``H5StorageCheckpointer``)
        reshape a full copy of the items, which this does not write: with one set it
        raises ``NotImplementedError`` rather than leave it unused."""
        import pickle

        checkpointer = self._checkpointer
        used = [type(h).__name__ for h in checkpointer._save_hooks]
        if type(checkpointer) is not self._default_checkpointer:
            used.insert(0, type(checkpointer).__name__)
        if used:
            raise NotImplementedError(
                f"ReplayStoreStorage.dumps writes an O(1) snapshot of its folder, and "
                f"{', '.join(used)} reshape a full copy of the items: copy them out with "
                "storage.get(range(len(storage))) (or `replaystore export`), or use a "
                "LazyMemmapStorage for this checkpoint")
        os.makedirs(path, exist_ok=True)
        state = self.state_dict()
        # confined: the checkpoint folder the caller names, outside the buffer's folder.
        with open(os.path.join(path, "replaystore_state.pkl"), "wb") as f:
            pickle.dump(state, f)

    def loads(self, path: Any) -> None:
        import pickle

        with open(os.path.join(path, "replaystore_state.pkl"), "rb") as f:
            self.load_state_dict(pickle.load(f))

    # --- other processes ---------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        if self._rs is not None:
            self._rs.flush()
        state = Storage.__getstate__(self)
        for k in ("_rs", "_rb_ref", "_remove_dir", "_stash", "_len_value", "_tail_value"):
            state.pop(k, None)
        # A copy in another process reads the writer's folder, even one pickled before
        # the first write made the buffer, and never writes or removes it.
        state.update(_own_dir=False, _auto_cleanup=False, _reader_copy=True,
                     _attached_entities_list=[])
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        Storage.__setstate__(self, state)
        self._rb_ref, self._stash, self._remove_dir, self._tail_value = None, None, None, None
        self._rs = None
        self._follow()


def _remove_if_unused(folder: str) -> None:
    """Removes a temporary folder the storage made if no buffer was made in it."""
    if not holds_buffer(os.path.join(folder, ITEMS)):
        remove_own_folder(folder)


def _remove_files(folder: str) -> bool:
    """Removes what a storage wrote in a folder the caller named, then the folder if
    that left it empty; whether the folder was there."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        return False
    d = Confined(folder)
    d.remove_tree(ITEMS)
    d.remove_tree(SIDECAR)
    try:
        os.rmdir(folder)
    except OSError:
        pass  # the caller's own files are in it: they stay, and so does the folder
    return True


def _show(slots: np.ndarray) -> str:
    s = slots.tolist()
    return str(s) if len(s) <= 6 else f"[{s[0]}, {s[1]}, ..., {s[-1]}] ({len(s)} slots)"


class ReplayStorePrioritizedSampler(_TorchRLPrioritizedSampler):
    """TorchRL's ``PrioritizedSampler`` on the engine's sum tree in a
    :class:`ReplayStoreStorage`'s folder; see the module. It takes TorchRL's arguments;
    ``max_capacity`` must be the storage's ``max_size``.

    Over any other storage (``ListStorage``, ``LazyTensorStorage``) it is TorchRL's own
    sampler, its trees in this process's memory (made only then), so code that changes
    one import keeps working wherever it draws by priority."""

    def __init__(self, max_capacity: int, alpha: float, beta: float, eps: float = 1e-8,
                 dtype: Any = torch.float, reduction: str = "max",
                 max_priority_within_buffer: bool = False, device: Any = None) -> None:
        #: Whether it draws from a ReplayStoreStorage (None until it meets a storage).
        self._ours: Optional[bool] = None
        super().__init__(max_capacity, alpha, beta, eps=eps, dtype=dtype, reduction=reduction,
                         max_priority_within_buffer=max_priority_within_buffer, device=device)

    # TorchRL's trees, made when first used: over a ReplayStoreStorage they never are.
    def _init(self) -> None:
        self.__dict__.pop("_sum_tree", None)
        self.__dict__.pop("_min_tree", None)
        self._max_priority = None

    def __getattr__(self, name: str) -> Any:
        if name in ("_sum_tree", "_min_tree"):
            # New trees, not emptied ones: a largest priority set before them (loads
            # sets it, then fills the trees) stays, as with TorchRL's eager trees.
            kept = self.__dict__.get("_max_priority")
            _TorchRLPrioritizedSampler._init(self)
            self.__dict__["_max_priority"] = kept
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _meets(self, storage: Any) -> Optional[ReplayStoreStorage]:
        """The storage when it is a ReplayStoreStorage (checked, and told to keep
        priorities), else None."""
        if storage is None:
            return None
        if not isinstance(storage, ReplayStoreStorage):
            self._ours = False
            return None
        if storage.max_size != self._max_capacity:
            raise ValueError(f"max_capacity {self._max_capacity} is not the storage's "
                             f"max_size {storage.max_size}")
        storage._want_priorities(self._alpha, self._eps)
        self._ours = True
        return storage

    def sample(self, storage: Any, batch_size: int) -> Tuple[Any, Dict[str, Any]]:
        st = self._meets(storage)
        if st is None:
            return super().sample(storage, batch_size)
        if len(st) == 0:
            raise RuntimeError("Cannot sample from an empty storage.")
        seed = int(torch.randint(0, 2**62, (), generator=self._rng))
        batch = st._buffer.sample(int(batch_size), beta=self._beta, seed=seed)
        index = torch.from_numpy(st._slots(batch.pop("indices")))
        weight = torch.from_numpy(batch.pop("weights").astype(np.float64))
        st._stash = (index, batch)
        return index, {"priority_weight": weight}

    @torch.no_grad()
    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        first = self._ours is None
        st = self._meets(storage)
        if st is None:
            return super().update_priority(index, priority, storage=storage)
        slots, _ = _slots_of(index, st.max_size)
        p = torch.as_tensor(priority).detach().cpu().double().numpy().reshape(-1)
        if first and np.array_equal(slots, np.arange(len(st))) and (p == 1.0).all():
            # TorchRL's buffer, as it starts over a storage that holds items, sets them
            # all to the default priority: the folder's own priorities are kept.
            return
        if p.size == 1:
            p = np.full(len(slots), float(p[0]))
        if p.size != len(slots):
            raise RuntimeError(f"priority should be a number or an iterable of the same length "
                               f"as index: got {p.size} priorities for {len(slots)} indices")
        keep = slots >= 0     # TensorDictMaxValueWriter's -1: not written
        if keep.any():
            st._buffer.update_priorities(st._items(slots[keep]), p[keep])

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        if self._meets(storage) is None:
            super().mark_update(index, storage=storage)
        # Over a ReplayStoreStorage new items already have the largest priority given so
        # far: the engine sets it as it adds them.

    def add(self, index: Any) -> None:
        if not self._ours:
            super().add(index)

    def extend(self, index: Any) -> None:
        if not self._ours:
            super().extend(index)

    def state_dict(self) -> Dict[str, Any]:
        """Over a ReplayStoreStorage, the draw's settings: the priorities are in the
        storage's snapshot."""
        if not self._ours:
            return super().state_dict()
        return {"_alpha": self._alpha, "_beta": self._beta, "_eps": self._eps,
                "replaystore": True}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        if not state_dict.get("replaystore"):
            return super().load_state_dict(state_dict)
        self._ours = True
        self._alpha, self._beta, self._eps = (state_dict["_alpha"], state_dict["_beta"],
                                              state_dict["_eps"])

    def dumps(self, path: Any) -> None:
        if not self._ours:
            return super().dumps(path)
        import json

        os.makedirs(path, exist_ok=True)
        # confined: the checkpoint folder the caller names, outside the buffer's folder.
        with open(os.path.join(path, "replaystore_sampler.json"), "w") as f:
            json.dump(self.state_dict(), f)

    def loads(self, path: Any) -> None:
        import json

        ours = os.path.join(path, "replaystore_sampler.json")
        if not os.path.exists(ours):
            return super().loads(path)
        with open(ours) as f:
            self.load_state_dict(json.load(f))


class LazyMemmapStorage(ReplayStoreStorage):
    """:class:`ReplayStoreStorage` under TorchRL's name, for code that changes one import
    (``scratch_dir`` is the folder)."""


class PrioritizedSampler(ReplayStorePrioritizedSampler):
    """:class:`ReplayStorePrioritizedSampler` under TorchRL's name, for code that changes
    one import."""
