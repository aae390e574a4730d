"""The ``replaystore`` command, from the package: ``python -m replaystore info DIR``, and
the ``replaystore`` console script a ``pip install`` puts on ``PATH``. The same command as
the Rust binary (``cargo run --release -- …``), run by the extension: a built wheel needs
no Rust toolchain for it.

>>> import subprocess, sys, tempfile
>>> out = subprocess.run([sys.executable, "-m", "replaystore", "info", tempfile.mkdtemp()],
...                      capture_output=True, text=True)
>>> out.returncode, "MANIFEST" in out.stderr
(3, True)
"""

import signal
import sys


def main() -> int:
    """Runs the command on this process's arguments; returns its exit status."""
    from replaystore._native import cli

    # The command runs in Rust with the GIL released: Ctrl-C stops it as it stops the
    # binary (Python's handler would only set a flag nobody reads until it returns).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    return cli(["replaystore", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
