"""Runs each library's own buffer tests twice, on the library and on the adapter, and
prints ``LIB: N of M upstream cases pass on the adapter``: M the cases passing on the
real library, N those of them that also pass with the buffer classes the tests import
taken from ``replaystore.compat.<lib>`` (``swap/sitecustomize.py``).

The tests are third-party files: ``sources.toml`` lists, per library, the repository,
the release tag of the pinned version, its commit and the paths; ``fetch`` puts them in
``target/upstream/<lib>/`` (ignored by git). A suite that is absent (CI has no network)
is named and skipped. An entry with ``watch`` (class names) counts only the cases
that make one of those classes on the library (``exercised``): a suite that tests
much else besides the swapped classes is measured on what it asks of them. An entry
without ``tag`` names a commit only (the release's tag out of reach here, said in
``sources.toml``). ``by_design.toml`` lists cases that cannot pass by design, with
the reason: they still count as failing.

    python python/conformance/run.py fetch [--git LIB=GITDIR ...] [LIB ...]
    python python/conformance/run.py run [--python VENV=PYTHON ...] [--min PERCENT] [LIB ...]

``--git`` takes the files from a clone already on the machine instead of the network;
``--python main=... --python ding=...`` names the interpreter of each virtualenv a
library is installed in (``sources.toml``'s ``venv``); ``--min`` fails the run when a
library present falls below that share.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
UPSTREAM = ROOT / "target" / "upstream"
#: A case that runs longer than this fails (a hang costs the case, not the suite).
CASE_SECONDS = 300
#: A whole run of one suite stops here; the cases it did not reach count as failing.
RUN_SECONDS = 3600


def sources():
    with open(HERE / "sources.toml", "rb") as f:
        return tomllib.load(f)


def by_design():
    with open(HERE / "by_design.toml", "rb") as f:
        return tomllib.load(f)


def _git(*args, cwd=None):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


def fetch(lib, entry, git_dir=None):
    """Puts the entry's paths at its commit (or tag) into target/upstream/<lib>/."""
    dest = UPSTREAM / lib
    tag = entry.get("tag")
    with tempfile.TemporaryDirectory() as tmp:
        if git_dir is None:
            git_dir = Path(tmp) / "clone"
            _git("init", "-q", str(git_dir))
            _git("remote", "add", "origin", entry["repo"], cwd=git_dir)
            what = ["tag", tag] if tag else [entry["commit"]]
            _git("fetch", "-q", "--depth", "1", "--filter=blob:none", "origin", *what,
                 "--no-tags", cwd=git_dir)
            if tag:
                _git("update-ref", f"refs/tags/{tag}", "FETCH_HEAD", cwd=git_dir)
        ref = tag or entry["commit"]
        commit = _git("rev-parse", f"{ref}^{{commit}}", cwd=git_dir).decode().strip()
        if entry["commit"] and commit != entry["commit"]:
            raise SystemExit(f"{lib}: {ref} names {commit}, sources.toml says "
                             f"{entry['commit']}: refusing files from another commit")
        archive = Path(tmp) / "files.tar"
        with open(archive, "wb") as out:
            subprocess.run(["git", "archive", commit, *entry["paths"]], cwd=git_dir, check=True,
                           stdout=out)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        subprocess.run(["tar", "-xf", str(archive), "-C", str(dest)], check=True)
        (dest / ".commit").write_text(commit + "\n")
    print(f"{lib}: {len(entry['paths'])} paths of {entry['repo']} at {tag or 'commit'} ({commit}) "
          f"in {dest}")


def _run_suite(lib, entry, python, swap):
    """One pytest run of the suite: {case: outcome}."""
    where = UPSTREAM / lib
    out = UPSTREAM / f"{lib}.{'adapter' if swap else 'library'}.jsonl"
    out.unlink(missing_ok=True)
    env = dict(os.environ)
    env["REPLAYSTORE_UPSTREAM_OUT"] = str(out)
    env["REPLAYSTORE_UPSTREAM_CASE_SECONDS"] = str(CASE_SECONDS)
    paths = [str(HERE)]
    watch = entry.get("watch", [])
    if swap or watch:
        paths.insert(0, str(HERE / "swap"))
        adapter = entry.get("adapter", f"replaystore.compat.{lib}") if swap else ""
        env["REPLAYSTORE_UPSTREAM_SWAP"] = f"{adapter}:{','.join(entry['swap'])}"
    if watch:
        env["REPLAYSTORE_UPSTREAM_WATCH"] = ",".join(watch)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    # -P: the suite's folder is not put first on sys.path by Python (a fetched
    # ``ding/`` would hide the installed package); pytest adds what the tests import.
    env["REPLAYSTORE_UPSTREAM_ROOT"] = str(where)
    # A module that fails to import costs its own cases, not the suite's.
    cmd = [python, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "outcomes",
           "-p", "overlay", "--continue-on-collection-errors", "--rootdir", str(where),
           *entry["run"]]
    log = UPSTREAM / f"{lib}.{'adapter' if swap else 'library'}.log"
    with open(log, "w") as f:
        try:
            subprocess.run(cmd, cwd=where, env=env, stdout=f, stderr=subprocess.STDOUT,
                           timeout=RUN_SECONDS)
        except subprocess.TimeoutExpired:
            f.write(f"\nstopped after {RUN_SECONDS} s\n")
    results = {}
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            results[r["case"]] = (r["outcome"], r.get("exercised", True))
    return results


def run(lib, entry, python, reasons):
    """Runs the suite twice; prints and returns (N, M)."""
    real = _run_suite(lib, entry, python, swap=False)
    ours = _run_suite(lib, entry, python, swap=True)
    counted = {c: o for c, (o, exercised) in real.items() if exercised}
    passing = sorted(c for c, o in counted.items() if o == "passed")
    failing = [c for c in passing if ours.get(c, ("failed",))[0] != "passed"]
    n, m = len(passing) - len(failing), len(passing)
    share = 100.0 * n / m if m else 0.0
    watched = (f" (the {len(counted)} of {len(real)} that make "
               f"{' or '.join(entry['watch'])})") if entry.get("watch") else ""
    print(f"{lib}: {n} of {m} upstream cases pass on the adapter ({share:.1f}%); "
          f"{len(counted) - m} of the library's {len(counted)}{watched} do not pass on the "
          f"library itself")
    for case in failing:
        why = reasons.get(case)
        print(f"  fails: {case}" + (f"  (by design: {why})" if why else ""))
    return n, m


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("--git", action="append", default=[], metavar="LIB=GITDIR")
    f.add_argument("libs", nargs="*")
    r = sub.add_parser("run")
    r.add_argument("--python", action="append", default=[], metavar="VENV=PYTHON")
    r.add_argument("--min", type=float, default=None, metavar="PERCENT")
    r.add_argument("libs", nargs="*")
    args = parser.parse_args(argv)
    known = sources()
    libs = args.libs or list(known)
    unknown = [lib for lib in libs if lib not in known]
    if unknown:
        parser.error(f"no library {', '.join(unknown)} in sources.toml (it has {', '.join(known)})")
    if args.command == "fetch":
        gits = dict(g.split("=", 1) for g in args.git)
        failed = []
        for lib in libs:
            # One library out of reach (no network, a repository too large to clone)
            # does not keep the others from being fetched.
            try:
                fetch(lib, known[lib], Path(gits[lib]) if lib in gits else None)
            except (subprocess.CalledProcessError, OSError) as e:
                detail = getattr(e, "stderr", b"") or b""
                print(f"{lib}: NOT FETCHED from {known[lib]['repo']} at {known[lib]['tag']}: {e}"
                      + (f": {detail.decode(errors='replace').strip()}" if detail else ""))
                failed.append(lib)
        return 1 if failed else 0
    # Absolute: each suite runs in its own folder.
    pythons = {venv: os.path.abspath(py) for venv, py in (p.split("=", 1) for p in args.python)}
    reasons = by_design()
    low = []
    for lib in libs:
        entry = known[lib]
        if not (UPSTREAM / lib / ".commit").exists():
            print(f"{lib}: upstream suite ABSENT (no target/upstream/{lib}/): skipped; "
                  f"`python python/conformance/run.py fetch {lib}` brings it")
            continue
        python = pythons.get(entry["venv"])
        if python is None:
            print(f"{lib}: no interpreter for virtualenv {entry['venv']!r} (--python "
                  f"{entry['venv']}=...): skipped")
            continue
        n, m = run(lib, entry, python, reasons.get(lib, {}))
        if args.min is not None and (m == 0 or 100.0 * n / m < args.min):
            low.append(lib)
    if low:
        print(f"below {args.min}%: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
