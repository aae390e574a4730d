"""Session checks shared by every test module."""

import glob
import os
import tempfile

import pytest

# Under pytest-xdist (test.sh runs two workers): each worker gets a temporary folder of
# its own, so the check below sees only its own tests' folders, not the other worker's
# in flight; and one thread for torch's kernels in each, so two trainers do not each
# spread over both cores. Set before any test module imports torch or makes a folder;
# subprocesses the tests start inherit both.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    _own_tmp = os.path.join(tempfile.gettempdir(), f"rs-pytest-{_WORKER}-{os.getpid()}")
    os.makedirs(_own_tmp, exist_ok=True)
    os.environ["TMPDIR"] = _own_tmp
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _adapter_folders():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "replaystore-*")))


@pytest.fixture(scope="session", autouse=True)
def no_temporary_folder_is_left_behind():
    """Issue 33.8: adapters given no path remove their temporary folders; a test
    session that leaves one fails (420 were left before)."""
    before = _adapter_folders()
    yield
    import gc

    gc.collect()
    left = _adapter_folders() - before
    assert not left, f"temporary folders left behind: {sorted(left)}"
    if _WORKER:
        import shutil

        shutil.rmtree(_own_tmp, ignore_errors=True)
