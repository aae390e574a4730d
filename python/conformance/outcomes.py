"""A pytest plugin of ``run.py``: writes each case's outcome as it ends, one JSON line
per case (``{"case": nodeid, "outcome": "passed" | "failed" | "skipped"}``) to the
file ``REPLAYSTORE_UPSTREAM_OUT`` names, so a run cut short by its time limit still
counts the cases it finished; and fails a case that runs longer than
``REPLAYSTORE_UPSTREAM_CASE_SECONDS`` (a hang in one case costs that case, not the
suite)."""

import json
import os
import signal
import sys

import pytest

_results = {}


class CaseTimeout(Exception):
    """A case ran past its time."""


def _alarm(signum, frame):
    raise CaseTimeout(f"longer than {os.environ.get('REPLAYSTORE_UPSTREAM_CASE_SECONDS')} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    seconds = int(os.environ.get("REPLAYSTORE_UPSTREAM_CASE_SECONDS", "0"))
    watched = _watched()
    if watched is not None:
        watched.exercised = False
    if seconds:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(seconds)
    try:
        yield
    finally:
        if seconds:
            signal.alarm(0)
    outcome = _results.pop(item.nodeid, "failed")
    record = {"case": item.nodeid, "outcome": outcome}
    if watched is not None:
        record["exercised"] = watched.exercised
    with open(os.environ["REPLAYSTORE_UPSTREAM_OUT"], "a") as out:
        out.write(json.dumps(record) + "\n")


def _watched():
    """The module that records whether a watched class was made, when classes are watched."""
    if not os.environ.get("REPLAYSTORE_UPSTREAM_WATCH"):
        return None
    return sys.modules.get("sitecustomize")


def pytest_runtest_logreport(report):
    # A case passes when its setup, call and teardown all pass; a skip at any phase is
    # a skip, a failure at any phase a failure.
    now = _results.get(report.nodeid, "passed")
    if report.failed:
        now = "failed"
    elif report.skipped and now != "failed":
        now = "skipped"
    _results[report.nodeid] = now
