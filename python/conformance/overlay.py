"""A pytest plugin of ``run.py``: makes the fetched test folders part of the installed
library's packages, where they sit in its repository. Wheels leave the tests out, and
some import their siblings through the package (DI-engine's
``from ding.worker.replay_buffer.tests.conftest import ...``): each folder under
``REPLAYSTORE_UPSTREAM_ROOT`` whose path names an installed package gets that folder
appended to the package's ``__path__``, before any test module is collected."""

import importlib
import os
from pathlib import Path


def pytest_configure(config):
    root = Path(os.environ.get("REPLAYSTORE_UPSTREAM_ROOT", ""))
    if not root.is_dir():
        return
    for folder in sorted(p for p in root.rglob("*") if p.is_dir()):
        name = ".".join(folder.relative_to(root).parts)
        try:
            package = importlib.import_module(name)
        except Exception:
            continue
        paths = getattr(package, "__path__", None)
        if paths is not None and str(folder) not in list(paths):
            paths.append(str(folder))
