"""The kill -9 step the adapters' crash-resume tests share."""

import os
import signal
import subprocess
import sys
import textwrap


def run_until_killed(code, acks):
    """Runs ``code``, which prints one line per acknowledged add, and kills it with
    SIGKILL once ``acks`` lines were read; returns every count it printed before it
    died (lines still in the pipe included: those adds were acknowledged too)."""
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in child.stdout:
        seen.append(int(line))
        if len(seen) >= acks:
            os.kill(child.pid, signal.SIGKILL)
            break
    seen += [int(line) for line in child.stdout if line.endswith("\n")]
    child.wait()
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    return seen
