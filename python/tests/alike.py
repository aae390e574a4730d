"""One recursive comparison for the differential tests: a library's result against an
adapter's, container by container, down to dtypes and values."""

import numpy as np


def alike(x, y, path="", skip=(), leaf=None, strict_dicts=True):
    """Asserts ``x`` (the library's) and ``y`` (the adapter's) hold the same: dicts by
    keys (not those in ``skip``; of the same type when ``strict_dicts``), lists and
    tuples item by item, arrays by dtype and values, NaN equal to NaN. ``leaf(x, y,
    path)`` goes first and returns True for what it compared itself (library types)."""
    if leaf is not None and leaf(x, y, path):
        return
    if isinstance(x, dict):
        assert (type(x) is type(y)) if strict_dicts else isinstance(y, dict), (path, type(x), type(y))
        assert set(x) == set(y), (path, set(x) ^ set(y))
        for k in x:
            if not (isinstance(k, str) and k in skip):
                alike(x[k], y[k], f"{path}/{k}", skip, leaf, strict_dicts)
        return
    if isinstance(x, (list, tuple)):
        assert type(x) is type(y) and len(x) == len(y), (path, x, y)
        for i, (a, b) in enumerate(zip(x, y)):
            alike(a, b, f"{path}[{i}]", skip, leaf, strict_dicts)
        return
    if isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray) and x.dtype == y.dtype, (path, x, y)
        np.testing.assert_array_equal(x, y, err_msg=path)
        return
    assert x == y or (x != x and y != y), (path, x, y)
