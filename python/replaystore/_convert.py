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


def wrong_dtype(name: str, target: Any, got: Any) -> SchemaError:
    """The one message for an array (NumPy, torch, JAX) of another dtype."""
    target, got = np.dtype(target), np.dtype(got)
    return SchemaError(
        f"field {name!r}: wrong dtype: expected {target.str} ({target}), got {got.str} "
        f"(no silent cast: convert with .astype({target.str!r}), or set the buffer's "
        f"cast = 'same_kind')"
    )


def same_kind(value: Any, dtype: str, name: str) -> np.ndarray:
    """An array converted to ``dtype`` under NumPy's ``same_kind`` rule (float64 to
    float32, int64 to int32, never float to int), refusing what would overflow:
    ``cast = 'same_kind'`` of a buffer."""
    target = np.dtype(dtype)
    source = np.asarray(value)
    if not np.can_cast(source.dtype, target, "same_kind"):
        raise SchemaError(
            f"field {name!r}: {source.dtype} does not cast to {target} under same_kind "
            f"(a float into an integer field needs rounding first)"
        )
    if target.kind in "iu" and source.dtype.kind in "iu" and source.size:
        info = np.iinfo(target)
        if source.min() < info.min or source.max() > info.max:
            raise SchemaError(
                f"field {name!r}: values {source.min()}..{source.max()} do not fit {target}"
            )
    with np.errstate(over="ignore"):
        out = source.astype(target)
    if target.kind == "f" and (np.isinf(out) & np.isfinite(source)).any():
        raise SchemaError(
            f"field {name!r}: values too large for {target} (they would be stored as infinity)"
        )
    return np.ascontiguousarray(out)


def field_array(value: Any, dtype: str, name: str, cast: bool = False) -> np.ndarray:
    """``value`` as an array of ``dtype`` for field ``name``. An array of another
    library (torch, JAX: anything with a dtype and dimensions) follows NumPy arrays'
    rule: its dtype must be the field's (or, with ``cast``, convert under same_kind).
    Single values and lists convert when no value changes; SchemaError if converting
    would change a value or it is not a number at all."""
    target = np.dtype(dtype)
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu()  # a torch tensor on any device: NumPy reads the CPU one
    source = np.asarray(value)
    if not isinstance(value, (list, tuple)) and hasattr(value, "dtype") and source.ndim:
        if source.dtype == target:
            return source
        if cast:
            return same_kind(source, dtype, name)
        raise wrong_dtype(name, target, source.dtype)
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
