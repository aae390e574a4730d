"""How a pickled ``Request`` is built again: the constructor it names, called with the
arguments and keywords it was built with (``Request.__reduce__``)."""

from typing import Any, Dict, Tuple

from ._native import Request


def _rebuild(kind: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Request:
    """``Request.<kind>(*args, **kwargs)``."""
    return getattr(Request, kind)(*args, **kwargs)
