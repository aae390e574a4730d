"""The README's code blocks the tests run: each between ``<!-- name -->`` and
``<!-- /name -->``, run as written in a fresh interpreter."""

import os
import re
import subprocess
import sys

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def block(name):
    """The Python code of the README's block ``name`` (a failed assert if it has none)."""
    found = re.search(rf"<!-- {name} -->\s*```python\n(.*?)```\s*<!-- /{name} -->",
                      open(README).read(), re.S)
    assert found, f"README.md has no {name} block"
    return found.group(1)


def run_twice(code, cwd):
    """Runs ``code`` twice in ``cwd`` (the second run finds what the first left); returns
    each run's stdout, split into words."""
    said = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        said.append(run.stdout.split())
    return said
