"""W6 of docs/WORKLOADS.md, multi-agent replay, for compare.py: 8 policies, W1 shapes per
agent step, 1,000,000 steps spread evenly (125,000 per policy; --quick: a sixteenth),
added in chunks of 1,000 steps per policy (a rollout fragment each).

- replaystore: a `BufferGroup` whose members (one per policy) its first add creates;
  `sample(256)` draws 256 from every member (RLlib's independent mode),
  `sample_lockstep(256)` 256 joint steps.
- RLlib's `MultiAgentReplayBuffer` (old stack), `replay_mode="independent"` and, for the
  lockstep figure, a second buffer with `replay_mode="lockstep"`, fed `MultiAgentBatch`es.

Figures: `fill` (agent steps added per second), `sample` (independent draws: one call,
256 from each policy, per second) and `lockstep` (joint draws of 256 per second).
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np

POLICIES = [f"policy_{k}" for k in range(8)]
CHUNK = 1000
FIELDS = {"obs": (17,), "new_obs": (17,), "actions": (6,), "rewards": (), "terminateds": ()}


def chunks(per_policy, seed=3):
    """Each policy's steps, in chunks of 1,000: a dict of arrays per chunk."""
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, per_policy, CHUNK):
        n = min(CHUNK, per_policy - start)
        out.append({
            k: (rng.standard_normal((n, *shape), np.float32) if k != "terminateds"
                else np.zeros(n, bool))
            for k, shape in FIELDS.items()
        })
    return out


class Replaystore:
    def __init__(self, per_policy, path):
        import replaystore as rs

        schema = {k: ("bool" if k == "terminateds" else ("float32", shape))
                  for k, shape in FIELDS.items()}
        self.group = rs.BufferGroup.create(path, schema, per_policy, seed=1)

    def add(self, policy, chunk):
        self.group.add_batch(policy, chunk)

    def sample(self, n):
        return self.group.sample(n)

    def lockstep(self, n):
        return self.group.sample_lockstep(n)

    def close(self):
        self.group.close()


class RLlib:
    def __init__(self, per_policy, path):
        from ray.rllib.utils.replay_buffers.multi_agent_replay_buffer import (
            MultiAgentReplayBuffer,
        )

        self.independent = MultiAgentReplayBuffer(capacity=per_policy, replay_mode="independent")
        self.joint = MultiAgentReplayBuffer(capacity=per_policy, replay_mode="lockstep")
        self.pending = {}
        self.fragments = 0

    def add(self, policy, chunk):
        from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

        n = len(chunk["rewards"])
        # RLlib splits what it stores by episode id: one fragment, one id.
        self.fragments += 1
        chunk = {**chunk, "eps_id": np.full(n, self.fragments, np.int64),
                 "t": np.arange(n, dtype=np.int64), "agent_index": np.zeros(n, np.int64)}
        self.independent.add(MultiAgentBatch({policy: SampleBatch(chunk)}, n))
        # Lockstep stores joint steps: one add per round of every policy's chunk.
        self.pending[policy] = chunk
        if len(self.pending) == len(POLICIES):
            joint = {p: SampleBatch(c) for p, c in self.pending.items()}
            self.joint.add(MultiAgentBatch(joint, n))
            self.pending = {}

    def sample(self, n):
        return self.independent.sample(n)

    def lockstep(self, n):
        return self.joint.sample(n, policy_id=None)

    def close(self):
        pass


LIBS = {"replaystore": Replaystore, "rllib": RLlib}
AVAILABLE = {"rllib": "ray.rllib"}


def child(lib_name, quick, runs, scratch, put):
    """W6's figures for one library, each put as soon as measured."""
    per_policy = 1_000_000 // len(POLICIES) // (16 if quick else 1)
    draws = 400 // (4 if quick else 1)
    data = chunks(per_policy)
    fill, sample, lockstep = [], [], []
    for r in range(runs):
        path = os.path.join(scratch, f"{lib_name}-W6-{r}")
        t = time.perf_counter()
        b = LIBS[lib_name](per_policy, path)
        for chunk in data:
            for policy in POLICIES:
                b.add(policy, chunk)
        fill.append(per_policy * len(POLICIES) / (time.perf_counter() - t))
        b.sample(256)
        t = time.perf_counter()
        for _ in range(draws):
            b.sample(256)
        sample.append(draws / (time.perf_counter() - t))
        b.lockstep(256)
        t = time.perf_counter()
        for _ in range(draws):
            b.lockstep(256)
        lockstep.append(draws / (time.perf_counter() - t))
        b.close()
        del b
        shutil.rmtree(path, ignore_errors=True)
    put("fill", fill)
    put("sample", sample)
    put("lockstep", lockstep)
