"""What an ``env_dict`` becomes on disk, and the settings file that lets a folder be
reopened through the same adapter class after a crash."""

from __future__ import annotations

import warnings
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from .._folder import read_sidecar, write_sidecar

SIDECAR = "cpprb.json"
#: Bumped when the settings file changes meaning; older files are read or refused.
SIDECAR_VERSION = 2


def names(value: Any) -> List[str]:
    """cpprb's "str or array-like of str" arguments, as a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def ignore_unknown(kind: str, kwargs: Dict[str, Any]) -> None:
    """cpprb's constructors take any keyword and ignore those they do not know (its
    ``create_buffer`` passes its callers' ``obs_shape=``/``act_dim=`` on to them): so do
    these, with a warning naming them, since a misspelt argument is then lost."""
    if kwargs:
        warnings.warn(f"cpprb.{kind} ignores arguments it does not know (as cpprb does): "
                      f"{', '.join(sorted(kwargs))}", stacklevel=3)


class Fields:
    """The fields of an ``env_dict``: each name's NumPy dtype and per-item shape, with
    cpprb's defaults (shape ``1``, dtype ``default_dtype``). A dtype the engine does not
    store as such is kept as its bytes and viewed back: float16 as its 16 bits
    (``<u2``), others (complex, extended precision, big-endian) as ``itemsize`` bytes
    (``u1``, one more axis).

    >>> f = Fields({"z": {"dtype": np.complex64, "shape": 2}}, None)
    >>> f.schema()
    {'z': ('|u1', (2, 8))}
    >>> v = np.array([[1 + 2j, 3 - 4j]], np.complex64)
    >>> back = f.from_stored({"z": f.to_stored("z", v)})["z"]
    >>> back.dtype, bool((back == v).all())
    (dtype('complex64'), True)
    """

    def __init__(self, env_dict: Optional[Dict[str, Dict[str, Any]]], default_dtype: Any,
                 next_of: Iterable[str] = ()) -> None:
        default = np.dtype(default_dtype or np.single)
        env = dict(env_dict or {})
        for name in next_of:
            if name not in env:
                raise KeyError(f"next_of names {name!r}, which env_dict does not define")
            env[f"next_{name}"] = env[name]
        self.spec: Dict[str, Tuple[np.dtype, Tuple[int, ...]]] = {}
        for name, defs in env.items():
            shape = tuple(int(d) for d in np.atleast_1d(np.asarray(defs.get("shape", 1))))
            self.spec[name] = (np.dtype(defs.get("dtype", default)), shape)

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "Fields":
        f = cls.__new__(cls)
        f.spec = {n: (np.dtype(d), tuple(s)) for n, (d, s) in config.items()}
        return f

    def config(self) -> Dict[str, Any]:
        return {n: [d.str, list(s)] for n, (d, s) in self.spec.items()}

    def schema(self) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
        """The engine's schema: each field in the dtype and shape it is stored as (a
        placeholder byte when ``env_dict`` has none: cpprb makes such buffers, the
        engine needs a field)."""
        return {n: _stored(d, s) for n, (d, s) in self.spec.items()} or {_NO_FIELD: ("|u1", (1,))}

    def to_stored(self, name: str, values: Any, n: Optional[int] = None) -> np.ndarray:
        """``values`` as ``n`` (or however many) items of field ``name``, cast as cpprb's
        assignment casts, in the dtype the engine stores."""
        dtype, shape = self.spec[name]
        a = values
        # What an add has already prepared (the dtype, items of the shape, contiguous)
        # passes as it is: three NumPy calls per field cost half of a one-row add.
        if not (type(a) is np.ndarray and a.dtype == dtype and a.shape[1:] == shape
                and a.ndim == len(shape) + 1 and a.flags.c_contiguous):
            a = np.ascontiguousarray(np.asarray(values, dtype=dtype).reshape((-1, *shape)))
        if dtype.str in _ENGINE:  # every add: one set lookup for the common dtypes
            return a
        if dtype == np.float16:
            return a.view("<u2")
        return a.view(np.uint8).reshape((len(a), *shape, dtype.itemsize))

    def from_stored(self, got: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The engine's arrays as cpprb returns them (bytes viewed back as the dtype)."""
        out = {}
        for name, (dtype, shape) in self.spec.items():
            a = got[name]
            if a.dtype != dtype:
                a = np.ascontiguousarray(a).view(dtype).reshape((len(a), *shape))
            out[name] = a
        return out

    def empty(self) -> Dict[str, np.ndarray]:
        return {n: np.zeros((0, *s), d) for n, (d, s) in self.spec.items()}


#: The one field of a buffer whose ``env_dict`` names none; never returned.
_NO_FIELD = "__no_field__"
#: The dtypes the engine stores as such (replaystore.Schema's), little-endian.
_ENGINE = {np.dtype(t).str for t in ("?", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "<f4",
                                      "<f8")}


def _stored(dtype: np.dtype, shape: Tuple[int, ...]) -> Tuple[str, Tuple[int, ...]]:
    """The engine dtype and shape a field of ``dtype`` and ``shape`` is stored as."""
    if dtype.str in _ENGINE:
        return dtype.str, shape
    if dtype == np.float16:
        return "<u2", shape
    return "|u1", (*shape, dtype.itemsize)


def load_settings(folder: str, kind: str) -> Optional[Dict[str, Any]]:
    """The settings saved in ``folder`` for adapter class ``kind``; ``ValueError`` if the
    folder was made by another class or a newer replaystore."""
    saved = read_sidecar(folder, SIDECAR)
    if saved is None:
        return None
    if saved.get("version", 0) > SIDECAR_VERSION:
        raise ValueError(
            f"{folder}/{SIDECAR}: version {saved.get('version')}, this replaystore reads "
            f"up to {SIDECAR_VERSION}")
    if saved.get("kind") != kind:
        raise ValueError(
            f"{folder}: made by cpprb.{saved.get('kind')}, opened as cpprb.{kind}")
    return saved


def save_settings(folder: str, kind: str, settings: Dict[str, Any], version: int = 1) -> None:
    """Writes the settings; ``version`` 2 for a folder builds reading only 1 would misread
    (MP buffers' one ring over lanes of ``size``), so they refuse it."""
    write_sidecar(folder, SIDECAR, {**settings, "kind": kind, "version": version})


def check_same(folder: str, what: str, saved: Any, given: Any) -> None:
    """Refuses to reopen a folder with settings other than those it was made with."""
    if saved != given:
        raise ValueError(f"{folder}: {what} is {saved!r} on disk, {given!r} given")
