"""Swaps a library's buffer classes for replaystore's drop-ins in every Python process
started with this folder on ``PYTHONPATH``: what a user who changes one import gets,
here without editing the code that imports (a library's own tests, run by
``python/conformance/run.py``).

``REPLAYSTORE_UPSTREAM_SWAP=<adapter module>:<module>,<module>...`` names the adapter
(``replaystore.compat.<lib>``) and the library modules whose names it replaces: each
name in the adapter's ``__all__`` that the module also has. A module is changed only
once no module of the list is still executing, so the library's own modules, which
import and subclass each other while a package loads, keep the library's classes; only
code importing from the listed modules afterwards (the tests) gets the adapter's.
Child processes inherit the environment, so worker processes swap the same way.

``REPLAYSTORE_UPSTREAM_WATCH=<name>,<name>...`` (with or without a swap) wraps the
``__init__`` of the classes those names hold in the listed modules once they are loaded
(the adapter's after a swap, the library's without): ``exercised`` turns true when one
is made, and ``outcomes.py`` records it per case, so a suite whose cases mostly test
other classes is counted over the cases that make the watched ones."""

import importlib
import importlib.abc
import os
import sys


#: Whether a watched class was made since ``outcomes.py`` last reset it.
exercised = False


def _watch(cls):
    """Wraps ``cls.__init__`` (once) to set ``exercised``."""
    if not isinstance(cls, type) or cls.__dict__.get("_upstream_watched"):
        return
    inner = cls.__init__

    def __init__(self, *args, **kwargs):
        global exercised
        exercised = True
        inner(self, *args, **kwargs)

    __init__.__wrapped__ = inner
    cls.__init__ = __init__
    cls._upstream_watched = True


class _Swap(importlib.abc.MetaPathFinder):
    def __init__(self, adapter, modules, watch=()):
        self.adapter = adapter
        self.modules = modules
        self.watch = set(watch)
        self.executing = set()
        self.swapped = set()
        self.busy = False

    def find_spec(self, name, path, target=None):
        if name not in self.modules or self.busy:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self)
                return spec
        return None

    def swap_ready(self):
        """Replaces the names of every listed module loaded and no longer executing."""
        if self.executing or self.busy:
            return
        self.busy = True
        try:
            adapter = importlib.import_module(self.adapter) if self.adapter else None
            for name in self.modules - self.swapped:
                module = sys.modules.get(name)
                if module is None:
                    continue
                for attr in getattr(adapter, "__all__", ()):
                    if hasattr(module, attr):
                        setattr(module, attr, getattr(adapter, attr))
                for attr in self.watch:
                    if hasattr(module, attr):
                        _watch(getattr(module, attr))
                self.swapped.add(name)
        finally:
            self.busy = False


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, swap):
        self.inner = inner
        self.swap = swap

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.swap.executing.add(module.__name__)
        try:
            self.inner.exec_module(module)
        finally:
            self.swap.executing.discard(module.__name__)
        self.swap.swap_ready()


def _chain():
    """Runs the ``sitecustomize`` this one hides, if the interpreter has one (some
    distributions ship theirs)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _install():
    spec = os.environ.get("REPLAYSTORE_UPSTREAM_SWAP", "")
    adapter, _, modules = spec.partition(":")
    watch = [w for w in os.environ.get("REPLAYSTORE_UPSTREAM_WATCH", "").split(",") if w]
    if modules and (adapter or watch):
        sys.meta_path.insert(0, _Swap(adapter, set(modules.split(",")), watch))


_chain()
_install()
