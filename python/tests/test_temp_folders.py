"""Promise (issue 33.8): an adapter given no path keeps its buffer in a temporary
folder that is removed at close, when the adapter is collected without close, and when
the process exits; and this test suite leaves no such folder behind."""

import gc
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from replaystore.compat import cpprb, rllib, tianshou


def made(prefix):
    return set(glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")))


@pytest.mark.parametrize("make, prefix", [
    (lambda: cpprb.ReplayBuffer(8, {"x": {}}), "replaystore-cpprb-"),
    (lambda: rllib.ReplayBuffer(8), "replaystore-rllib-"),
    (lambda: tianshou.ReplayBuffer(8), "replaystore-tianshou-"),
])
def test_a_temporary_folder_goes_at_close_or_collection(make, prefix):
    before = made(prefix)
    a = make()
    (folder,) = made(prefix) - before
    a.close()
    assert not os.path.exists(folder)
    a.close()  # twice is fine
    b = make()
    (folder,) = made(prefix) - before
    del b
    gc.collect()
    assert not os.path.exists(folder), "collected without close"


def test_a_temporary_folder_goes_when_the_process_exits():
    code = (
        "import os, sys, numpy as np\n"
        "from replaystore.compat import cpprb\n"
        "rb = cpprb.ReplayBuffer(8, {'x': {}})\n"
        "rb.add(x=np.ones(1))\n"
        "print(rb.path, flush=True)\n"
        "sys.exit(0)  # rb is still referenced: only the exit hook removes it\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    folder = out.stdout.strip()
    assert folder and not os.path.exists(folder), out


def test_a_given_path_is_kept(tmp_path):
    rb = cpprb.ReplayBuffer(8, {"x": {}}, path=str(tmp_path / "b"))
    rb.add(x=np.ones(1))
    rb.close()
    assert os.path.isdir(tmp_path / "b")
