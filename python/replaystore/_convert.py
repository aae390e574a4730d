"""Python values (scalars, lists) converted to a field's dtype, never changing a value.

NumPy's own conversion is lenient: ``numpy.asarray("yes", bool)`` is True, ``2`` and
``0.5`` are True too, ``1.5`` becomes the integer 1 and ``1e300`` float32 infinity. A
replay buffer that stored those would hand a learner values nobody wrote, so every
such conversion is a ``SchemaError`` naming the field. What converts without changing
(``1.0`` into a bool or an integer field, ``3`` into a float field) still does.
Arrays must already have the field's dtype (see ``ReplayBuffer.add``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._native import SchemaError


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_array(value: Any, dtype: str, name: str) -> np.ndarray:
    """``value`` as an array of ``dtype`` for field ``name``; SchemaError if converting
    it would change a value or it is not a number at all."""
    target = np.dtype(dtype)
    source = np.asarray(value)
    kind = source.dtype.kind
    if kind not in "biuf":
        raise SchemaError(
            f"field {name!r}: expected {target} values, got {source.dtype} ({_shown(value)})"
        )
    if target.kind == "b":
        if kind != "b" and not np.isin(source, (0, 1)).all():
            raise SchemaError(
                f"field {name!r}: a bool field takes True/False (or the numbers 0 and 1), "
                f"got {_shown(value)}"
            )
    elif target.kind in "iu":
        if kind == "f" and not (np.isfinite(source) & (source == np.round(source))).all():
            raise SchemaError(
                f"field {name!r}: float values for a {target} field would be truncated "
                f"({_shown(value)}): round them first"
            )
        info = np.iinfo(target)
        if source.size and (source.min() < info.min or source.max() > info.max):
            raise SchemaError(
                f"field {name!r}: {_shown(value)} does not fit {target} "
                f"({info.min}..{info.max})"
            )
    elif target.kind == "f":
        with np.errstate(over="ignore"):
            out = source.astype(target)
        if (np.isinf(out) & np.isfinite(source)).any():
            raise SchemaError(
                f"field {name!r}: {_shown(value)} is too large for {target} "
                f"(it would be stored as infinity)"
            )
        if kind in "iu" and not (out.astype(np.float64) == source).all():
            raise SchemaError(
                f"field {name!r}: the integers {_shown(value)} would be rounded in {target} "
                f"(convert them yourself if that is meant)"
            )
        return out
    return source.astype(target)


def ragged_array(value: Any, dtype: str, name: str) -> np.ndarray:
    """One value of ragged field ``name``: a 1-D C-contiguous array of ``dtype``. An
    array of another dtype is refused as fixed fields' arrays are; a list (or another
    sequence) converts only where no value changes (``field_array``)."""
    target = np.dtype(dtype)
    if isinstance(value, np.ndarray):
        if value.dtype != target:
            raise SchemaError(
                f"field {name!r}: wrong dtype: expected {target.str} ({target}), got "
                f"{value.dtype.str} (no silent cast: convert with .astype({target.str!r}))"
            )
        out = value
    else:
        out = field_array(value if len(value) else np.empty(0, target), dtype, name)
    if out.ndim != 1:
        raise SchemaError(
            f"field {name!r}: a ragged value is 1-D, got shape {tuple(out.shape)}"
        )
    return np.ascontiguousarray(out)
