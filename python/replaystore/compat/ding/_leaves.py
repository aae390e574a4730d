"""DI-engine's records as rows of columns: each array leaf of a record's dict a fixed
field, the rest pickled.

DI-engine's data are dicts (``obs``, ``action``, ``reward``, ``done``, ...) whose values
are torch tensors, NumPy arrays or scalars, the same keys and shapes record after record.
The first record fixes the columns: one fixed field per such leaf (``d.KEY``), what kind
of value it was (to give the same kind back) and the key order. A record with those leaves
(and any other keys, pickled beside) is a row of them; any other record is pickled whole
(``__whole__`` set). Reading gives the dict back with values of the kinds put in.
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._chunks import dumps

WHOLE = "__whole__"


def _leaf(value: Any) -> Optional[Tuple[str, str, List[int]]]:
    """``(kind, dtype, shape)`` of a value a fixed field can hold, or ``None``."""
    if isinstance(value, np.ndarray):
        return None if value.dtype == object else ("np", value.dtype.str, list(value.shape))
    if isinstance(value, np.generic):
        return None if value.dtype == object else ("np0", value.dtype.str, [])
    if isinstance(value, bool):
        return ("bool", "|b1", [])
    if isinstance(value, int):
        return ("int", "<i8", []) if -(2**63) <= value < 2**63 else None
    if isinstance(value, float):
        return ("float", "<f8", [])
    if type(value).__module__ == "torch" and type(value).__name__ == "Tensor":
        if value.device.type != "cpu" or value.requires_grad or value.dtype.is_complex:
            return None
        try:
            dtype = value.numpy().dtype.str
        except (TypeError, RuntimeError):  # bfloat16 and the like have no NumPy dtype
            return None
        return ("torch", dtype, list(value.shape))
    return None


class LeafCodec:
    """The codec a DI-engine adapter's chunk store writes records with."""

    chunk_bytes = 240  # a record's values are a key, a meta and rarely more: small chunks

    def __init__(self) -> None:
        self.leaves: Dict[str, Tuple[str, str, List[int]]] = {}
        self.fields: Dict[str, Any] = {WHOLE: "uint8"}

    def ready(self, obj: Any) -> None:
        if isinstance(obj, dict):
            for key, value in obj.items():
                spec = _leaf(value) if isinstance(key, str) else None
                if spec is not None:
                    self.leaves[key] = spec
        self._fields()

    def _fields(self) -> None:
        self.fields = {WHOLE: "uint8"}
        for key, (_kind, dtype, shape) in self.leaves.items():
            self.fields["d." + key] = (dtype, tuple(shape))

    def describe(self) -> Dict[str, Any]:
        return {"kind": "leaves", "leaves": [[k, *v] for k, v in self.leaves.items()]}

    def restore(self, described: Dict[str, Any]) -> None:
        self.leaves = {k: (kind, dtype, list(shape)) for k, kind, dtype, shape in described["leaves"]}
        self._fields()

    def _zeros(self) -> Dict[str, Any]:
        return {"d." + k: np.zeros(shape, np.dtype(dtype)) for k, (_, dtype, shape) in self.leaves.items()}

    def encode(self, obj: Any) -> Tuple[Dict[str, Any], bytes]:
        if self.leaves and isinstance(obj, dict) and list(obj)[:len(self.leaves)] == list(self.leaves):
            fields: Dict[str, Any] = {WHOLE: 0}
            for key, spec in self.leaves.items():
                value = obj[key]
                if _leaf(value) != spec:
                    break
                fields["d." + key] = value.numpy() if spec[0] == "torch" else value
            else:
                rest = {k: v for k, v in obj.items() if k not in self.leaves}
                return fields, (dumps(rest) if rest else b"")
        return {**self._zeros(), WHOLE: 1}, dumps(obj)

    def decode(self, got: Dict[str, Any], i: int) -> Any:
        blob = got["chunk"][i]
        if got[WHOLE][i]:
            return pickle.loads(blob)
        out: Dict[str, Any] = {}
        for key, (kind, _dtype, _shape) in self.leaves.items():
            value = got["d." + key][i]
            # Rows of the arrays one read returned: each record's own rows, no copy.
            if kind == "np":
                out[key] = value
            elif kind == "np0":
                out[key] = value[()] if isinstance(value, np.ndarray) else value
            elif kind == "torch":
                import torch

                out[key] = torch.from_numpy(value if isinstance(value, np.ndarray) else np.array(value))
            else:
                out[key] = {"bool": bool, "int": int, "float": float}[kind](value)
        if blob:
            out.update(pickle.loads(blob))
        return out
