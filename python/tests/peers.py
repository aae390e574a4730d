"""The real libraries the differential tests drive beside the adapters.

A library that is not installed skips its tests with a message naming the install; with
REPLAYSTORE_REQUIRE_PEERS=1 (test.sh installs them and sets it) a missing one fails
instead, so CI cannot pass by skipping. A library whose pins conflict with the others'
is tested in a virtualenv of its own (DI-engine: numpy<2): REPLAYSTORE_PEERS_ELSEWHERE
names such libraries (comma-separated), which skip here, saying where they run."""

import importlib
import os

import pytest

#: What test.sh installs; the differential tests were written against these versions.
PINS = {"cpprb": "cpprb==11.0.0", "hypothesis": "hypothesis==6.170.15",
        "stable_baselines3": "stable-baselines3==2.9.2", "tianshou": "tianshou==2.0.1",
        "ray.rllib": "ray[rllib]==2.60.0", "ding": "DI-engine==0.5.3",
        "unstable": "--no-deps unstable-rl==0.2.2 trueskill dm-tree rich wandb",
        "torchrl.data": "torchrl==0.14.1", "tensordict": "torchrl==0.14.1", "torch": "torch==2.15.0",
        "ray": "ray[rllib]==2.60.0", "wandb": "wandb", "tensorboard": "tensorboard",
        "jax": "jax==0.10.2 jaxlib==0.10.2", "flashbax": "flashbax==0.1.3 flax==0.12.8"}


def peer(module: str):
    """The installed peer library ``module``, or a skip (a failure where required)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed (pip install {PINS.get(module, module)})"
        elsewhere = os.environ.get("REPLAYSTORE_PEERS_ELSEWHERE", "").split(",")
        if module in elsewhere:
            pytest.skip(f"{module} is tested in its own virtualenv (test.sh)", allow_module_level=True)
        if os.environ.get("REPLAYSTORE_REQUIRE_PEERS") == "1":
            pytest.fail(message + " and REPLAYSTORE_REQUIRE_PEERS=1", pytrace=False)
        pytest.skip(message, allow_module_level=True)


def unstable_buffers():
    """UnstableBaselines' ``unstable.buffers`` module, imported without its package's
    ``__init__``: that one imports vLLM, TextArena and the learners (GPU stacks these
    tests do not run). The buffer module and what it imports are the library's own."""
    import importlib.util
    import sys
    import types

    if "unstable.buffers" not in sys.modules:
        spec = importlib.util.find_spec("unstable")
        if spec is None:
            peer("unstable")  # skips, or fails where peers are required
        package = types.ModuleType("unstable")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        sys.modules["unstable"] = package
        try:
            importlib.import_module("unstable.buffers")
        except ImportError as e:
            del sys.modules["unstable"]
            message = f"unstable.buffers does not import ({e}): pip install {PINS['unstable']}"
            if os.environ.get("REPLAYSTORE_REQUIRE_PEERS") == "1":
                pytest.fail(message, pytrace=False)
            pytest.skip(message, allow_module_level=True)
    return sys.modules["unstable.buffers"]


def chi_square_two(a, b, z=3.72):
    """Asserts two samples of counts over the same cells come from one distribution:
    the two-sample chi-square statistic below its quantile at p = 1e-4 (as
    ``chi_square``). Cells empty in both are left out."""
    import numpy as np

    a, b = np.asarray(a, float), np.asarray(b, float)
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    ka, kb = np.sqrt(b.sum() / a.sum()), np.sqrt(a.sum() / b.sum())
    stat = ((ka * a - kb * b) ** 2 / (a + b)).sum()
    k = max(len(a) - 1, 1)
    crit = k * (1 - 2 / (9 * k) + z * np.sqrt(2 / (9 * k))) ** 3
    assert stat < crit, (stat, crit, a, b)


def chi_square(observed, expected, z=3.72):
    """Asserts draw counts fit expected probabilities: Pearson's chi-square below its
    quantile at p = 1e-4 (z = 3.72; Wilson-Hilferty's approximation of the quantile).
    Cells of probability 0 must not be drawn at all."""
    import numpy as np

    observed = np.asarray(observed, float)
    expected = np.asarray(expected, float)
    keep = expected > 0
    assert observed[~keep].sum() == 0, "drawn where the probability is 0"
    o, e = observed[keep], expected[keep] / expected[keep].sum() * observed.sum()
    stat = ((o - e) ** 2 / e).sum()
    k = max(len(o) - 1, 1)
    crit = k * (1 - 2 / (9 * k) + z * np.sqrt(2 / (9 * k))) ** 3
    assert stat < crit, (stat, crit, o, e)
