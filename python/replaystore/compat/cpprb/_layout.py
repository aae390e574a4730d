"""What an ``env_dict`` becomes on disk, and the settings file that lets a folder be
reopened through the same adapter class after a crash."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from .._folder import read_sidecar, write_sidecar

SIDECAR = "cpprb.json"
#: Bumped when the settings file changes meaning; older files are read or refused.
SIDECAR_VERSION = 1


def names(value: Any) -> List[str]:
    """cpprb's "str or array-like of str" arguments, as a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


class Fields:
    """The fields of an ``env_dict``: each name's NumPy dtype and per-item shape, with
    cpprb's defaults (shape ``1``, dtype ``default_dtype``). float16, which the engine
    does not store as such, is kept as its 16 bits (``<u2``) and viewed back."""

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
        """The engine's schema: float16 stored as ``<u2``."""
        return {n: (_stored(d).str, s) for n, (d, s) in self.spec.items()}

    def to_stored(self, name: str, values: Any, n: Optional[int] = None) -> np.ndarray:
        """``values`` as ``n`` (or however many) items of field ``name``, cast as cpprb's
        assignment casts, in the dtype the engine stores."""
        dtype, shape = self.spec[name]
        a = np.asarray(values, dtype=dtype).reshape((-1, *shape))
        if dtype == np.float16:
            a = a.view("<u2")
        return np.ascontiguousarray(a)

    def from_stored(self, got: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The engine's arrays as cpprb returns them (float16 viewed back)."""
        out = {}
        for name, (dtype, _) in self.spec.items():
            a = got[name]
            out[name] = a.view(np.float16) if dtype == np.float16 else a
        return out

    def empty(self) -> Dict[str, np.ndarray]:
        return {n: np.zeros((0, *s), d) for n, (d, s) in self.spec.items()}


def _stored(dtype: np.dtype) -> np.dtype:
    return np.dtype("<u2") if dtype == np.float16 else dtype


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


def save_settings(folder: str, kind: str, settings: Dict[str, Any]) -> None:
    write_sidecar(folder, SIDECAR, {**settings, "kind": kind, "version": SIDECAR_VERSION})


def check_same(folder: str, what: str, saved: Any, given: Any) -> None:
    """Refuses to reopen a folder with settings other than those it was made with."""
    if saved != given:
        raise ValueError(f"{folder}: {what} is {saved!r} on disk, {given!r} given")
