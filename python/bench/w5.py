"""W5 (docs/WORKLOADS.md: LLM self-play steps with text and token arrays) through
replaystore's Python API, beside what UnstableBaselines' StepBuffer keeps (a Python
list of dataclasses), in one run.

    python python/bench/w5.py [--steps 100000] [--runs 3]

Figures (medians of --runs, min-max beside):
- addB / addB_lap: batches of 64 into a new buffer (its chunk ring's pages are new to
  the page cache: the kernel zeroes each on first touch) and into one whose rings have
  lapped once (steady state), in steps/s and GB/s of payload;
- add1: one step per call into the lapped buffer;
- sample: 256 steps with every variable-length field padded (values="padded"), and
  flat (values="flat"); beside it, the same bytes per batch at this host's memcpy rate
  (512 MiB arrays, far larger than the caches), the floor the issue sets "within 3x" of;
- the list: append one step, extend by 64, and a batch of 256 padded the way a trainer
  pads it from Python (``random.sample`` then NumPy per field).
Sample-and-remove (W5-pop) needs item lifecycles (issue 30) and is not measured yet.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import statistics
import tempfile
import time

import numpy as np

import replaystore as rs

SCHEMA = {
    "obs": "str",
    "act": "str",
    "tokens": ("int32", (None,)),
    "logprobs": ("float32", (None,)),
    "reward": "float32",
    "pid": "int8",
    "env_id": "str",
}


@dataclasses.dataclass
class Step:
    pid: int
    obs: str
    act: str
    reward: float
    env_id: str
    tokens: np.ndarray
    logprobs: np.ndarray


def workload(n: int, seed: int = 5):
    """W5's steps: text of log-normal lengths, token arrays of 128-2048, 8 env ids."""
    rng = np.random.default_rng(seed)

    def lengths(lo, hi, median):
        return np.clip(rng.lognormal(np.log(median), 0.6, n), lo, hi).astype(int)

    text = bytes(rng.choice(np.frombuffer(b"abcdefghijklmnopqrstuvwxyz .,", np.uint8), 4 << 20))
    starts = rng.integers(0, (4 << 20) - 8192, n)
    obs = [text[s : s + k].decode() for s, k in zip(starts, lengths(500, 8000, 2000))]
    act = [text[s : s + k].decode() for s, k in zip(starts[::-1], lengths(100, 2000, 400))]
    tok_len = rng.integers(128, 2049, n)
    tokens = [rng.integers(0, 50_000, k, dtype=np.int32) for k in tok_len]
    logprobs = [(-rng.random(k)).astype(np.float32) for k in tok_len]
    envs = [f"TicTacToe-v{i % 8}-train" for i in range(n)]
    payload = sum(len(o) + len(a) + 8 * len(t) + len(e) + 5 for o, a, t, e in zip(obs, act, tokens, envs))
    return obs, act, tokens, logprobs, envs, payload


def batch_dict(w, i, j):
    obs, act, tokens, logprobs, envs, _ = w
    return {
        "obs": obs[i:j],
        "act": act[i:j],
        "tokens": tokens[i:j],
        "logprobs": logprobs[i:j],
        "reward": np.zeros(j - i, np.float32),
        "pid": (np.arange(i, j) % 2).astype(np.int8),
        "env_id": envs[i:j],
    }


def run_replaystore(w, n, root):
    path = os.path.join(root, "w5")
    shutil.rmtree(path, ignore_errors=True)
    payload = w[5]
    out = {}
    t = time.perf_counter()
    # The chunk ring holds the same steps the rows do: about 12 KiB each here.
    buf = rs.ReplayBuffer.create(path, SCHEMA, n, heap_bytes=n * 12 * 1024)
    for i in range(0, n, 64):
        buf.add_batch(batch_dict(w, i, min(i + 64, n)))
    dt = time.perf_counter() - t
    out["addB"] = (n / dt, payload / dt / 1e9)
    # Lap until both rings have wrapped, then time a lap in steady state.
    for i in range(0, n, 64):
        buf.add_batch(batch_dict(w, i, min(i + 64, n)))
    t = time.perf_counter()
    for i in range(0, n, 64):
        buf.add_batch(batch_dict(w, i, min(i + 64, n)))
    dt = time.perf_counter() - t
    out["addB_lap"] = (n / dt, payload / dt / 1e9)
    obs, act, tokens, logprobs, envs, _ = w
    m = min(n, 20_000)
    t = time.perf_counter()
    for i in range(m):
        buf.add(obs=obs[i], act=act[i], tokens=tokens[i], logprobs=logprobs[i], reward=0.0, pid=i % 2, env_id=envs[i])
    out["add1"] = (m / (time.perf_counter() - t), None)
    buf.flush()
    k = 200
    t = time.perf_counter()
    for _ in range(k):
        buf.sample(256, values="padded")
    out["sample_padded"] = (k / (time.perf_counter() - t), None)
    t = time.perf_counter()
    for _ in range(k):
        s = buf.sample(256, values="flat")
    out["sample_flat"] = (k / (time.perf_counter() - t), None)
    # The floor: the same bytes per batch at this host's memcpy rate, measured on
    # arrays far larger than the caches (a batch's rows lie anywhere in the ring, so a
    # copy of one batch's arrays, hot in cache after the first, would flatter it).
    per_batch = sum(v.nbytes for v in s.values() if isinstance(v, np.ndarray))
    big = np.ones(64 << 20, np.uint64)
    dst = np.empty_like(big)
    np.copyto(dst, big)  # its pages faulted in first: the floor is the copy alone
    t = time.perf_counter()
    for _ in range(3):
        np.copyto(dst, big)
    rate = 3 * big.nbytes / (time.perf_counter() - t)
    out["memcpy_floor"] = (rate / per_batch, None)
    buf.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


def run_list(w, n):
    obs, act, tokens, logprobs, envs, payload = w
    out = {}
    steps = []
    t = time.perf_counter()
    for i in range(n):
        steps.append(Step(i % 2, obs[i], act[i], 0.0, envs[i], tokens[i], logprobs[i]))
    dt = time.perf_counter() - t
    out["add1"] = (n / dt, None)
    steps = []
    t = time.perf_counter()
    for i in range(0, n, 64):
        steps.extend(Step(j % 2, obs[j], act[j], 0.0, envs[j], tokens[j], logprobs[j]) for j in range(i, min(i + 64, n)))
    dt = time.perf_counter() - t
    out["addB"] = (n / dt, payload / dt / 1e9)
    k = 200
    t = time.perf_counter()
    for _ in range(k):
        picked = random.sample(steps, 256)
        width = max(len(s.tokens) for s in picked)
        tok = np.zeros((256, width), np.int32)
        lp = np.zeros((256, width), np.float32)
        for r, s in enumerate(picked):
            tok[r, : len(s.tokens)] = s.tokens
            lp[r, : len(s.logprobs)] = s.logprobs
        _ = [s.obs for s in picked], [s.act for s in picked]
    out["sample_padded"] = (k / (time.perf_counter() - t), None)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="scratch folder (default: the system's)")
    args = ap.parse_args()
    w = workload(args.steps)
    print(f"W5: {args.steps} steps, {w[5] / args.steps / 1024:.1f} KiB of payload per step")
    root = tempfile.mkdtemp(dir=args.dir)
    try:
        results = {"replaystore": [], "list": []}
        for _ in range(args.runs):
            results["replaystore"].append(run_replaystore(w, args.steps, root))
            results["list"].append(run_list(w, args.steps))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for lib, runs in results.items():
        for key in runs[0]:
            rates = [r[key][0] for r in runs]
            gbs = [r[key][1] for r in runs if r[key][1] is not None]
            unit = "batches/s" if key.startswith(("sample", "memcpy")) else "steps/s"
            extra = f"  {statistics.median(gbs):.2f} GB/s" if gbs else ""
            print(
                f"{lib:12} {key:14} {statistics.median(rates):12,.0f} {unit:9} "
                f"({min(rates):,.0f}-{max(rates):,.0f}){extra}"
            )


if __name__ == "__main__":
    main()
