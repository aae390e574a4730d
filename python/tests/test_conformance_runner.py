"""Promise: the runner of the libraries' own tests (python/conformance/) counts what it
says. The swap gives code importing from a listed module the adapter's classes, in
worker processes too, while the library's own modules keep subclassing the library's;
a case passes only when it passes on both runs; a hanging case fails alone; a suite
not fetched is named and skipped."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def _runner():
    spec = importlib.util.spec_from_file_location("upstream_run", CONFORMANCE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(root: Path, files: dict) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


#: A stand-in library whose package subclasses its own buffer while it loads, and an
#: adapter for it.
LIBRARY = {
    "fakelib/__init__.py": """
        class Buffer:
            origin = "library"
        from .special import Special
        __all__ = ["Buffer", "Special"]
        """,
    "fakelib/special.py": """
        from fakelib import Buffer
        class Special(Buffer):
            pass
        """,
    "fakeadapter.py": """
        class Buffer:
            origin = "adapter"
        __all__ = ["Buffer"]
        """,
}


def test_the_swap_reaches_importers_and_workers_but_not_the_librarys_own_modules(tmp_path):
    _write(tmp_path, LIBRARY)
    _write(tmp_path, {"probe.py": """
        import multiprocessing as mp
        from fakelib import Buffer, Special

        def origin(_):
            from fakelib import Buffer
            return Buffer.origin

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(1) as pool:
                worker = pool.map(origin, [0])[0]
            print(Buffer.origin, Special.__mro__[1].origin, worker)
        """})
    env = {"PYTHONPATH": f"{CONFORMANCE / 'swap'}:{tmp_path}",
           "REPLAYSTORE_UPSTREAM_SWAP": "fakeadapter:fakelib"}
    out = subprocess.run([sys.executable, str(tmp_path / "probe.py")], env=env, check=True,
                         capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert out == ["adapter", "library", "adapter"]
    del env["REPLAYSTORE_UPSTREAM_SWAP"]
    out = subprocess.run([sys.executable, str(tmp_path / "probe.py")], env=env, check=True,
                         capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert out == ["library", "library", "library"]


def test_a_case_counts_only_when_it_passes_on_the_library_and_on_the_adapter(tmp_path, monkeypatch,
                                                                              capsys):
    run = _runner()
    monkeypatch.setattr(run, "UPSTREAM", tmp_path / "upstream")
    monkeypatch.setattr(run, "CASE_SECONDS", 3)
    suite = tmp_path / "upstream" / "fake"
    _write(tmp_path, LIBRARY)
    _write(suite, {".commit": "0" * 40, "tests/test_fake.py": """
        import time
        from fakelib import Buffer

        def test_both():
            assert Buffer.origin in ("library", "adapter")

        def test_library_only():
            assert Buffer.origin == "library"

        def test_hangs_on_the_adapter():
            while Buffer.origin == "adapter":
                time.sleep(0.1)

        def test_fails_everywhere():
            assert False
        """})
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    entry = {"run": ["tests"], "swap": ["fakelib"], "adapter": "fakeadapter"}
    n, m = run.run("fake", entry, sys.executable,
                   {"tests/test_fake.py::test_library_only": "the stand-in differs"})
    assert (n, m) == (1, 3)
    out = capsys.readouterr().out
    assert "fake: 1 of 3 upstream cases pass on the adapter" in out
    assert "1 of the library's 4 do not pass on the library itself" in out
    assert "fails: tests/test_fake.py::test_library_only  (by design: the stand-in differs)" in out
    assert "fails: tests/test_fake.py::test_hangs_on_the_adapter" in out


def test_a_suite_not_fetched_is_named_and_skipped(tmp_path, monkeypatch, capsys):
    run = _runner()
    monkeypatch.setattr(run, "UPSTREAM", tmp_path / "none")
    assert run.main(["run", "--python", f"main={sys.executable}", "cpprb"]) == 0
    assert "cpprb: upstream suite ABSENT" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        run.main(["run", "nosuchlib"])
