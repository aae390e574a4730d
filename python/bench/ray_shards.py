"""Sharded replay on a local Ray cluster (issue 36): replaystore's ``ShardedBuffer``
against RLlib's replay actors (``ray.remote(PrioritizedReplayBuffer)``, one per shard,
drawn round-robin as Ape-X drew them) and TorchRL's ``RayReplayBuffer``.

Figures, each the median of ``--runs`` runs:

- ``sample``: batches/s of one learner actor drawing 256-item W1 batches (uniform);
- ``per``: the same by priority, each batch followed by its priority update;
- ``add8``: items/s of 8 writer tasks adding 1,000-row W1 batches at once;
- ``restart``: seconds from a ``kill -9`` of a shard holding ``--restart-gib`` GiB to
  its first answered call (replaystore only: the others come back empty).

    target/py-venv/bin/python python/bench/ray_shards.py --shards 2 4 --runs 3

The cluster is ``ray.cluster_utils.Cluster`` with one simulated node per shard (one
CPU each) on this machine: every actor call crosses processes, none a network.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import tempfile
import time

import numpy as np

W1 = {"obs": ("<f4", (17,)), "next_obs": ("<f4", (17,)), "action": ("<f4", (6,)),
      "reward": ("<f4", ()), "done": ("|b1", ())}
BATCH = 256
#: Draws a replaystore learner keeps in flight (--prefetch), and whether each batch
#: comes from one shard (--one-shard).
PREFETCH = 0
ONE_SHARD = False


def w1(n, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for k, (dt, shape) in W1.items():
        if np.dtype(dt) == np.bool_:
            out[k] = rng.random((n, *shape)) < 0.01
        else:
            out[k] = rng.standard_normal((n, *shape), dtype=np.float32)
    return out


def timed_loop(step, seconds):
    step()  # warm
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n / (time.perf_counter() - t0)


# -- the three systems, each: fill(items), learner(seconds, per) -> batches/s, add8 --------

class Replaystore:
    name = "replaystore"

    def __init__(self, nodes, root, capacity):
        from replaystore.ray import ShardedBuffer

        schema = {k: (dt, shape) for k, (dt, shape) in W1.items()}
        self.buf = ShardedBuffer.create(f"bench-{time.time_ns()}", schema, capacity,
                                        root=root, nodes=nodes, alpha=0.6,
                                        prefetch=PREFETCH, one_shard=ONE_SHARD)

    def fill(self, items):
        data = w1(items)
        per = items // self.buf.num_shards
        for s in range(self.buf.num_shards):
            for lo in range(0, per, 50_000):
                part = {k: v[s * per + lo: s * per + min(lo + 50_000, per)] for k, v in data.items()}
                self.buf.add_batch(part, shard=s)

    def writer(self):
        import ray

        @ray.remote(num_cpus=0)
        def write(buf, batches):
            data = w1(1000)
            for _ in range(batches):
                buf.add_batch(data)
            return batches * 1000

        return lambda batches: write.remote(self.buf, batches)

    def learner(self):
        import ray

        @ray.remote(num_cpus=0)
        class Learner:
            def __init__(self, buf):
                self.buf = buf

            def run(self, seconds, per):
                if per:
                    def step():
                        b = self.buf.sample(BATCH, beta=0.4)
                        self.buf.update_priorities(b["shard"], b["indices"],
                                                   np.random.random(BATCH) + 0.1,
                                                   block=PREFETCH == 0)
                else:
                    def step():
                        self.buf.sample(BATCH)
                return timed_loop(step, seconds)

        return Learner.remote(self.buf)

    def close(self):
        self.buf.close()


class RLlib:
    """Replay actors as RLlib's Ape-X made them: one ``ray.remote`` buffer per node, a
    uniform ``ReplayBuffer`` set for ``sample`` and a ``PrioritizedReplayBuffer`` set
    for ``per``; a learner asks one actor per batch, round-robin."""

    name = "rllib-replay-actors"

    def __init__(self, nodes, root, capacity):
        import ray
        from ray.rllib.utils.replay_buffers import PrioritizedReplayBuffer, ReplayBuffer
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        def on(n):
            return NodeAffinitySchedulingStrategy(n, soft=False)

        uni = ray.remote(num_cpus=0)(ReplayBuffer)
        per = ray.remote(num_cpus=0)(PrioritizedReplayBuffer)
        self.uniform = [uni.options(scheduling_strategy=on(n)).remote(capacity=capacity)
                        for n in nodes]
        self.actors = [per.options(scheduling_strategy=on(n)).remote(capacity=capacity,
                                                                      alpha=0.6)
                       for n in nodes]

    def fill(self, items):
        import ray
        from ray.rllib.policy.sample_batch import SampleBatch

        data = w1(items)
        per = items // len(self.actors)
        refs = []
        for s in range(len(self.actors)):
            for lo in range(0, per, 50_000):
                part = SampleBatch({k: v[s * per + lo: s * per + min(lo + 50_000, per)]
                                    for k, v in data.items()})
                refs += [self.actors[s].add.remote(part), self.uniform[s].add.remote(part)]
        ray.get(refs)

    def writer(self):
        import ray

        @ray.remote(num_cpus=0)
        def write(actors, batches):
            from ray.rllib.policy.sample_batch import SampleBatch

            data = SampleBatch(w1(1000))
            for b in range(batches):
                ray.get(actors[b % len(actors)].add.remote(data))
            return batches * 1000

        return lambda batches: write.remote(self.actors, batches)

    def learner(self):
        import ray

        @ray.remote(num_cpus=0)
        class Learner:
            def __init__(self, actors, uniform):
                self.actors, self.uniform, self.turn = actors, uniform, 0

            def run(self, seconds, per):
                def step():
                    self.turn += 1
                    if per:
                        a = self.actors[self.turn % len(self.actors)]
                        b = ray.get(a.sample.remote(BATCH, beta=0.4))
                        ray.get(a.update_priorities.remote(b["batch_indexes"],
                                                           np.random.random(BATCH) + 0.1))
                    else:
                        ray.get(self.uniform[self.turn % len(self.uniform)].sample.remote(BATCH))
                return timed_loop(step, seconds)

        return Learner.remote(self.actors, self.uniform)

    def close(self):
        import ray

        for a in self.actors + self.uniform:
            ray.kill(a)


class TorchRL:
    """TorchRL's ``RayReplayBuffer``: one remote buffer (TorchRL does not shard it)."""

    name = "torchrl-RayReplayBuffer"

    def __init__(self, nodes, root, capacity):
        from torchrl.data import LazyTensorStorage, PrioritizedSampler, RayReplayBuffer

        total = capacity * len(nodes)
        self.rb = RayReplayBuffer(storage=LazyTensorStorage(total),
                                  sampler=PrioritizedSampler(total, alpha=0.6, beta=0.4),
                                  batch_size=BATCH, remote_config={"num_cpus": 0})

    def _td(self, data):
        import torch
        from tensordict import TensorDict

        n = len(data["reward"])
        return TensorDict({k: torch.from_numpy(v) for k, v in data.items()}, batch_size=[n])

    def fill(self, items):
        data = w1(items)
        for lo in range(0, items, 50_000):
            self.rb.extend(self._td({k: v[lo:lo + 50_000] for k, v in data.items()}))

    def writer(self):
        import ray

        @ray.remote(num_cpus=0)
        def write(rb, batches):
            import torch
            from tensordict import TensorDict

            d = w1(1000)
            td = TensorDict({k: torch.from_numpy(v) for k, v in d.items()}, batch_size=[1000])
            for _ in range(batches):
                rb.extend(td)
            return batches * 1000

        client = self.rb.client()
        return lambda batches: write.remote(client, batches)

    def learner(self):
        import ray

        @ray.remote(num_cpus=0)
        class Learner:
            def __init__(self, rb):
                self.rb = rb

            def run(self, seconds, per):
                import torch

                def step():
                    if per:
                        _, info = self.rb.sample(return_info=True)
                        self.rb.update_priority(info["index"], torch.rand(BATCH) + 0.1)
                    else:
                        self.rb.sample()
                return timed_loop(step, seconds)

        return Learner.remote(self.rb.client())

    def close(self):
        try:
            self.rb.close()
        except Exception:
            pass


SYSTEMS = {"replaystore": Replaystore, "rllib": RLlib, "torchrl": TorchRL}


def restart_seconds(nodes, root, gib):
    """Seconds from a kill -9 of a shard holding ``gib`` GiB to its first answer."""
    from replaystore.ray import ShardedBuffer
    from replaystore.ray._client import DEFAULT_FLUSH_ITEMS

    row = 4 * (17 + 17 + 6 + 1) + 1
    capacity = int(gib * 2**30 / row)
    buf = ShardedBuffer.create(f"restart-{time.time_ns()}", W1, capacity, root=root,
                               nodes=nodes[:1])
    chunk = w1(200_000)
    for _ in range(capacity // 200_000):
        buf.add_batch(chunk, shard=0)
    # The worst case: one item short of the shard's next flush, all to be checked.
    tail = {k: v[: DEFAULT_FLUSH_ITEMS - 1] for k, v in chunk.items()}
    buf.add_batch(tail, shard=0)
    before = buf.where()[0]
    os.kill(before["pid"], signal.SIGKILL)
    t0 = time.perf_counter()
    after = buf.where()[0]
    ready = time.perf_counter() - t0
    buf.sample(BATCH)
    first_draw = time.perf_counter() - t0
    assert after["pid"] != before["pid"] and after["len"] == before["len"], (before, after)
    buf.close()
    return {"restart_s": ready, "restart_then_draw_s": first_draw,
            "reopen_s": after["open_seconds"],
            "rows": after["len"], "gib": after["len"] * row / 2**30}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--systems", nargs="*", default=list(SYSTEMS))
    ap.add_argument("--items", type=int, default=200_000, help="items in all shards")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--restart-gib", type=float, default=1.0)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--death-info-ms", type=int,
                    help="Ray's timeout_ms_task_wait_for_death_info for the cluster (default"
                         " 1000): how long a call to a dead actor waits to learn why")
    ap.add_argument("--prefetch", type=int, nargs="+", default=[0, 2],
                    help="replaystore's draws in flight, one row per value")
    ap.add_argument("--one-shard", type=int, nargs="+", default=[0],
                    help="replaystore rows with each batch from one shard (1) or split (0)")
    args = ap.parse_args()
    global PREFETCH, ONE_SHARD

    import ray
    from ray.cluster_utils import Cluster

    results = []
    for shards in args.shards:
        head = {"num_cpus": 1, "include_dashboard": False}
        if args.death_info_ms is not None:
            head["_system_config"] = {"timeout_ms_task_wait_for_death_info": args.death_info_ms}
        cluster = Cluster(initialize_head=True, head_node_args=head)
        for _ in range(shards - 1):
            cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        ray.cloudpickle.register_pickle_by_value(__import__(__name__))
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        root = tempfile.mkdtemp(prefix="rs-bench-")
        runs = [(name, p, o) for name in args.systems
                for p in (args.prefetch if name == "replaystore" else [None])
                for o in (args.one_shard if name == "replaystore" else [None])]
        for name, prefetch, one in runs:
            PREFETCH, ONE_SHARD = prefetch or 0, bool(one)
            figures = {"sample": [], "per": [], "add8": []}
            for _ in range(args.runs):
                sys_ = SYSTEMS[name](nodes, root, 2 * args.items // shards + 100_000)
                sys_.fill(args.items)
                learner = sys_.learner()
                figures["sample"].append(ray.get(learner.run.remote(args.seconds, False)))
                figures["per"].append(ray.get(learner.run.remote(args.seconds, True)))
                ray.kill(learner)
                write = sys_.writer()
                t0 = time.perf_counter()
                added = sum(ray.get([write(25) for _ in range(8)]))
                figures["add8"].append(added / (time.perf_counter() - t0))
                sys_.close()
            row = {"system": name, "shards": shards, "prefetch": prefetch, "one_shard": one,
                   **{k: statistics.median(v) for k, v in figures.items()},
                   "spread": {k: [min(v), max(v)] for k, v in figures.items()}}
            print(json.dumps(row), flush=True)
            results.append(row)
        if args.restart_gib and shards == args.shards[0]:
            for _ in range(args.runs):
                r = restart_seconds(nodes, root, args.restart_gib)
                r["death_info_ms"] = args.death_info_ms
                print(json.dumps(r), flush=True)
                results.append(r)
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
