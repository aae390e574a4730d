"""W1 and W2 (docs/WORKLOADS.md) through replaystore's Python API and, when they are
installed, through cpprb, TorchRL (LazyMemmapStorage) and Tianshou, side by side in one
run, with ratios (how many times better replaystore is than each); and W5 (LLM
self-play steps of text and token arrays) beside what UnstableBaselines' StepBuffer
keeps (a Python list of dataclasses) and TorchRL (ListStorage, padded with
pad_sequence).

    python python/bench/compare.py [--quick] [--runs 3] [--only replaystore,cpprb,torchrl,tianshou]
    python python/bench/compare.py --only cpprb,cpprb-compat      # cpprb's calls on both
    python python/bench/compare.py --only torchrl,torchrl-compat  # TorchRL's buffer, either storage
    python python/bench/compare.py --workloads W1 --only rllib,rllib-compat   # RLlib's old stack
    python python/bench/compare.py --workloads W1 --only rllib-episodes,rllib-episodes-compat  # new stack
    python python/bench/compare.py --workloads W1 --only ding,ding-compat     # DI-engine (its venv)
    python python/bench/compare.py --workloads W5 [--only replaystore,torchrl]   # the list always runs
    python python/bench/compare.py --workloads W6 --only replaystore,rllib            # multi-agent (w6.py)
    python python/bench/compare.py --workloads W7 --only replaystore,sb3,cpprb,tianshou  # HER (w7.py)
    python python/bench/compare.py --workloads W8 --only replaystore,list,torchrl   # text games (w8.py)

W5 figures: addB (batches of 64 into a new buffer) and addB_lap (into a full one) in
steps/s and GB/s of payload, add1 (one step per call), sample_padded (256 steps, every
variable-length field padded, as a trainer feeds a model) and, for replaystore,
sample_flat (values end to end with offsets) beside memcpy_floor: the same payload bytes
per batch at this host's memcpy rate, the floor the issue sets "within 3x" of.
W5-pop: sample-and-remove 256 (UnstableBaselines' get_batch: random.sample, then
list.remove of each step) from a full buffer of 100,000 steps, in batches/s; replaystore
pops until fewer than 256 are left (sample(remove=True), padded), the list's get_batch runs
$W5_POP_LIST_BATCHES times (default 3: each costs seconds, as it scans the list once per
step removed), both from the same full state.

Each (library, workload) runs in its own child process, so peak memory is its own and
one library's page cache use does not tilt the next one's figures more than the machine
already does. Medians of --runs runs with min-max; --quick divides capacities and
iteration counts by 16.

What is timed: addB makes the buffer inside the timed fill (a library that allocates and
touches its whole ring in its constructor, as cpprb does, pays for it there); addB_lap is
one more capacity's worth added to the full ring; sample drops each batch before the
next, sample_out draws into the arrays of one kept batch (replaystore's out=), and
sample_kept keeps every batch alive (W2: ~9 GB of new memory per run); W2-sample_stack4
is W2 stored one frame per step and stacked 4 at sample time (replaystore only). Beside
replaystore's figures, the floor of this host (`replaystore-bench --floors`, found as
$REPLAYSTORE_BENCH_BIN, target/dist/replaystore-bench, target/release/replaystore-bench or on PATH) and ours
as a share of it.
After each workload, the disk's write rate measured in the same run (the ring's bytes,
written and fdatasynced in the scratch folder): a ring larger than the kernel's dirty
thresholds cannot be added to durably faster than that, so the add figures are given
as a share of it too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import w6  # noqa: E402  (W6, multi-agent: its own libraries)
import w7  # noqa: E402  (W7, HER: its own libraries)
import w8  # noqa: E402  (W8, multi-turn text games: its own libraries)

W1 = {"obs": ("<f4", (17,)), "next_obs": ("<f4", (17,)), "action": ("<f4", (6,)),
      "reward": ("<f4", ()), "done": ("|b1", ())}
W2 = {"obs": ("|u1", (4, 84, 84)), "action": ("<i8", ()), "reward": ("<f4", ()), "done": ("|b1", ())}
SPEC = {"W1": (W1, 1_000_000, 256), "W2": (W2, 100_000, 32)}


def data(fields, n, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for k, (dt, shape) in fields.items():
        dt = np.dtype(dt)
        if dt == np.bool_:
            out[k] = rng.random((n, *shape)) < 0.01
        elif dt.kind == "f":
            out[k] = rng.standard_normal((n, *shape), dtype=np.float32)
        else:
            out[k] = rng.integers(0, 200, (n, *shape), dtype=dt)
    return out


def status_mib(key):
    """A memory figure of this process from /proc/self/status, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


# -- the libraries, each behind the same few calls --------------------------------------

class Replaystore:
    name = "replaystore"

    def __init__(self, fields, capacity, path, prioritized):
        import replaystore as rs
        self.rs = rs
        self.path = path
        self.buf = rs.ReplayBuffer.create(path, fields, capacity, alpha=0.6 if prioritized else None, seed=0)

    def add1(self, row):
        self.buf.add(**row)

    def add_batch(self, batch):
        self.buf.add_batch(batch)

    def sample(self, n):
        return self.buf.sample(n)

    def sample_out(self, n, iters):
        # A training loop that keeps one batch's arrays and draws into them.
        out = self.buf.sample(n)
        for _ in range(iters):
            self.buf.sample(n, out=out)

    def settle(self):
        # Sealed, as after a trainer's first checkpoint: every sampled row is then
        # checked against its checksum, the cost a user pays
        # (docs/decisions/11-hostile-folders.md, "Checked reads"); rows added since the last flush are read on their stamps.
        self.buf.flush()

    def per(self, n, new):
        b = self.buf.sample(n, beta=0.4)
        self.buf.update_priorities(b["indices"], new)

    def save(self, where):
        state = self.buf.get_state()
        with open(where, "wb") as f:
            import pickle
            pickle.dump(state, f)

    IMPORTS = "import pickle, replaystore as rs\n"
    LOAD = ("state = pickle.load(open(STATE, 'rb'))\n"
            "buf = rs.ReplayBuffer.open(PATH); buf.set_state(state); buf.sample(1)\n")

    def close(self):
        self.buf.close()

    def reopen(self):
        self.buf = self.rs.ReplayBuffer.open(self.path)


class Cpprb:
    name = "cpprb"

    def __init__(self, fields, capacity, path, prioritized):
        import cpprb
        env = {k: {"shape": shape or 1, "dtype": np.dtype(dt)} for k, (dt, shape) in fields.items()}
        cls = cpprb.PrioritizedReplayBuffer if prioritized else cpprb.ReplayBuffer
        self.rb = cls(capacity, env, **({"alpha": 0.6} if prioritized else {}))
        self.env = env
        self.capacity = capacity

    def add1(self, row):
        self.rb.add(**row)

    def add_batch(self, batch):
        self.rb.add(**batch)

    def sample(self, n):
        return self.rb.sample(n)

    def per(self, n, new):
        b = self.rb.sample(n, beta=0.4)
        self.rb.update_priorities(b["indexes"], new)

    def save(self, where):
        self.rb.save_transitions(where)

    IMPORTS = "import cpprb, numpy as np, json\n"
    LOAD = ("env = {k: {'shape': tuple(v['shape']) or 1, 'dtype': np.dtype(v['dtype'])} for k, v in json.loads(ENV).items()}\n"
            "rb = cpprb.ReplayBuffer(CAP, env); rb.load_transitions(STATE); rb.sample(1)\n")

    def close(self):
        pass

    def reopen(self):
        pass


class CpprbCompat(Cpprb):
    """replaystore.compat.cpprb: cpprb's calls, replaystore's storage (the adapter's cost
    over the engine, beside cpprb itself). Its save is the O(1) get_state, pickled."""

    name = "cpprb-compat"

    def __init__(self, fields, capacity, path, prioritized):
        from replaystore.compat import cpprb as compat
        env = {k: {"shape": shape or 1, "dtype": np.dtype(dt)} for k, (dt, shape) in fields.items()}
        cls = compat.PrioritizedReplayBuffer if prioritized else compat.ReplayBuffer
        self.cls, self.env, self.capacity, self.path = cls, env, capacity, path
        self.kw = {"alpha": 0.6} if prioritized else {}
        self.rb = cls(capacity, env, path=path, **self.kw)

    def settle(self):
        self.rb._buf.flush()

    def save(self, where):
        import pickle
        with open(where, "wb") as f:
            pickle.dump(self.rb.get_state(), f)

    IMPORTS = "import pickle, json, numpy as np\nfrom replaystore.compat import cpprb\n"
    LOAD = ("env = {k: {'shape': tuple(v['shape']) or 1, 'dtype': np.dtype(v['dtype'])} for k, v in json.loads(ENV).items()}\n"
            "rb = cpprb.PrioritizedReplayBuffer(CAP, env, alpha=0.6, path=PATH)\n"
            "rb.set_state(pickle.load(open(STATE, 'rb'))); rb.sample(1)\n")

    def close(self):
        self.rb.close()

    def reopen(self):
        self.rb = self.cls(self.capacity, self.env, path=self.path, **self.kw)


class SB3:
    """Stable-Baselines3's ReplayBuffer (n_envs=1: one add per step, no batch add, no
    PER); its save is save_replay_buffer's pickle of the arrays."""

    name = "sb3"
    NO_BATCH_ADD = True
    NO_PER = True

    def _spaces(self, fields):
        from gymnasium import spaces
        obs = spaces.Box(-np.inf, np.inf, fields["obs"][1], np.dtype(fields["obs"][0]))
        act = spaces.Box(-1, 1, fields["action"][1], np.dtype(fields["action"][0]))
        return obs, act

    def _make(self, fields, capacity, path):
        from stable_baselines3.common.buffers import ReplayBuffer
        return ReplayBuffer(capacity, *self._spaces(fields), device="cpu")

    def __init__(self, fields, capacity, path, prioritized):
        self.fields, self.capacity, self.path = fields, capacity, path
        self.rb = self._make(fields, capacity, path)
        self.infos = [{}]

    def add1(self, row):
        self.rb.add(row["obs"], row["next_obs"], row["action"], row["reward"], row["done"], self.infos)

    def add_batch(self, batch):
        for i in range(len(batch["obs"])):
            self.add1({k: v[i] for k, v in batch.items()})

    def sample(self, n):
        return self.rb.sample(n)

    def save(self, where):
        from stable_baselines3.common.save_util import save_to_pkl
        save_to_pkl(where, self.rb)

    IMPORTS = "from stable_baselines3.common.save_util import load_from_pkl\n"
    LOAD = "rb = load_from_pkl(STATE); rb.sample(1)\n"

    def close(self):
        pass

    def reopen(self):
        pass


class SB3Compat(SB3):
    """replaystore.compat.sb3.ReplayBuffer with a folder: the same calls; its save is
    the O(1) pickle of the folder's name and a snapshot."""

    name = "sb3-compat"

    def _make(self, fields, capacity, path):
        from replaystore.compat import sb3
        return sb3.ReplayBuffer(capacity, *self._spaces(fields), device="cpu", path=path)

    def settle(self):
        self.rb._buf.flush()

    IMPORTS = ("import pickle\nfrom stable_baselines3.common.save_util import load_from_pkl\n"
               "from replaystore.compat import sb3\n")

    def close(self):
        self.rb.close()

    def reopen(self):
        self.rb = self._make(self.fields, self.capacity, self.path)


def _td(torch, TensorDict, rows, batch_size):
    return TensorDict({k: torch.as_tensor(v) for k, v in rows.items()}, batch_size=batch_size)


class TorchRL:
    """TorchRL's TensorDictReplayBuffer over LazyMemmapStorage (memory-mapped files, the
    closest to replaystore), with a PrioritizedSampler for PER; dumps/loads to save."""

    name = "torchrl"

    def __init__(self, fields, capacity, path, prioritized):
        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyMemmapStorage, PrioritizedSampler, TensorDictReplayBuffer
        self.torch, self.TensorDict = torch, TensorDict
        kw = {}
        if prioritized:
            kw = {"sampler": PrioritizedSampler(capacity, alpha=0.6, beta=0.4), "priority_key": "td_error"}
        self.rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(capacity, scratch_dir=path), **kw)
        self.path = path

    def add1(self, row):
        self.rb.add(_td(self.torch, self.TensorDict, row, []))

    def add_batch(self, batch):
        n = len(next(iter(batch.values())))
        self.rb.extend(_td(self.torch, self.TensorDict, batch, [n]))

    def sample(self, n):
        return self.rb.sample(n)

    def per(self, n, new):
        s = self.rb.sample(n)
        self.rb.update_priority(s["index"], self.torch.as_tensor(new, dtype=self.torch.float32))

    def save(self, where):
        self.rb.dumps(where)

    IMPORTS = ("import torch\nfrom torchrl.data import LazyMemmapStorage, PrioritizedSampler, "
               "TensorDictReplayBuffer\n")
    # A fresh scratch folder per load: TorchRL refuses to memmap over existing files.
    LOAD = ("rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(CAP, scratch_dir=f'{PATH}-load-{time.monotonic_ns()}'), "
            "sampler=PrioritizedSampler(CAP, alpha=0.6, beta=0.4), priority_key='td_error')\n"
            "rb.loads(STATE); rb.sample(1)\n")

    def close(self):
        pass

    def reopen(self):
        pass


class TorchRLCompat(TorchRL):
    """The same TorchRL TensorDictReplayBuffer over replaystore.compat.torchrl's storage
    and prioritized sampler (TorchRL's own writer and RandomSampler for uniform draws);
    dumps/loads name a snapshot of the folder."""

    name = "torchrl-compat"

    def __init__(self, fields, capacity, path, prioritized):
        import torch
        from tensordict import TensorDict
        from torchrl.data import TensorDictReplayBuffer

        from replaystore.compat.torchrl import ReplayStorePrioritizedSampler, ReplayStoreStorage
        self.torch, self.TensorDict = torch, TensorDict
        self.capacity, self.path, self.prioritized = capacity, path, prioritized
        self._make = lambda: TensorDictReplayBuffer(
            storage=ReplayStoreStorage(capacity, path),
            **({"sampler": ReplayStorePrioritizedSampler(capacity, alpha=0.6, beta=0.4),
                "priority_key": "td_error"} if prioritized else {}))
        self.rb = self._make()

    IMPORTS = ("import torch\nfrom torchrl.data import TensorDictReplayBuffer\n"
               "from replaystore.compat.torchrl import ReplayStorePrioritizedSampler, "
               "ReplayStoreStorage\n")
    LOAD = ("rb = TensorDictReplayBuffer(storage=ReplayStoreStorage(CAP, PATH), "
            "sampler=ReplayStorePrioritizedSampler(CAP, alpha=0.6, beta=0.4), priority_key='td_error')\n"
            "rb.loads(STATE); rb.sample(1); rb.storage.close()\n")

    def close(self):
        self.rb.storage.close()

    def reopen(self):
        self.rb = self._make()


# Tianshou's reserved keys for the workloads' fields.
_TIANSHOU_KEYS = {"obs": "obs", "next_obs": "obs_next", "action": "act", "reward": "rew", "done": "terminated"}


class Tianshou:
    """Tianshou's ReplayBuffer / PrioritizedReplayBuffer (NumPy arrays in the process);
    pickle is how Tianshou saves a buffer. A single ring has no batched add, so addB
    is left out."""

    name = "tianshou"
    NO_BATCH_ADD = True

    def __init__(self, fields, capacity, path, prioritized):
        from tianshou.data import Batch, PrioritizedReplayBuffer, ReplayBuffer
        self.Batch = Batch
        kw = {"ignore_obs_next": "next_obs" not in fields}
        self.rb = (PrioritizedReplayBuffer(capacity, alpha=0.6, beta=0.4, **kw) if prioritized
                   else ReplayBuffer(capacity, **kw))

    def _batch(self, row):
        b = {_TIANSHOU_KEYS[k]: v for k, v in row.items()}
        b["truncated"] = np.zeros_like(b["terminated"])
        return self.Batch(**b)

    def add1(self, row):
        self.rb.add(self._batch(row))

    def add_batch(self, batch):
        n = len(next(iter(batch.values())))
        for i in range(n):
            self.rb.add(self._batch({k: v[i] for k, v in batch.items()}))

    def sample(self, n):
        return self.rb.sample(n)

    def per(self, n, new):
        _, idx = self.rb.sample(n)
        self.rb.update_weight(idx, new)

    def save(self, where):
        import pickle
        with open(where, "wb") as f:
            pickle.dump(self.rb, f)

    IMPORTS = "import pickle\nimport tianshou.data\n"
    LOAD = "rb = pickle.load(open(STATE, 'rb')); rb.sample(1)\n"

    def close(self):
        pass

    def reopen(self):
        pass


class TianshouCompat(Tianshou):
    """replaystore.compat.tianshou's ReplayBuffer / PrioritizedReplayBuffer (Tianshou's
    classes over replaystore rings) in a folder; its save is pickle as Tianshou's, which
    with a folder is O(1) (the folder's name and ring snapshots)."""

    name = "tianshou-compat"

    def __init__(self, fields, capacity, path, prioritized):
        from tianshou.data import Batch
        from replaystore.compat import tianshou as compat
        self.Batch = Batch
        kw = {"ignore_obs_next": "next_obs" not in fields, "path": path}
        self.args = (compat, capacity, prioritized, kw)
        self.rb = self._make()

    def _make(self):
        compat, capacity, prioritized, kw = self.args
        return (compat.PrioritizedReplayBuffer(capacity, alpha=0.6, beta=0.4, **kw) if prioritized
                else compat.ReplayBuffer(capacity, **kw))

    def settle(self):
        self.rb.flush()

    IMPORTS = "import pickle\nimport replaystore.compat.tianshou\n"

    def close(self):
        self.rb.close()

    def reopen(self):
        self.rb = self._make()


class RLlib:
    """RLlib's old-stack ReplayBuffer / PrioritizedReplayBuffer, storage_unit timesteps
    (RLlib slices each added SampleBatch into one item per timestep); its save is
    get_state pickled (the items themselves)."""

    name = "rllib"

    def _make(self, capacity, prioritized, path):
        from ray.rllib.utils.replay_buffers import PrioritizedReplayBuffer, ReplayBuffer
        return PrioritizedReplayBuffer(capacity, alpha=0.6) if prioritized else ReplayBuffer(capacity)

    def __init__(self, fields, capacity, path, prioritized):
        from ray.rllib.policy.sample_batch import SampleBatch
        self.SampleBatch = SampleBatch
        self.args = (capacity, prioritized, path)
        self.path = path
        self.rb = self._make(*self.args)

    def add1(self, row):
        self.rb.add(self.SampleBatch({k: np.asarray(v)[None] for k, v in row.items()}))

    def add_batch(self, batch):
        self.rb.add(self.SampleBatch(batch))

    def sample(self, n):
        return self.rb.sample(n)

    def per(self, n, new):
        b = self.rb.sample(n, beta=0.4)
        self.rb.update_priorities(b["batch_indexes"], new)

    def save(self, where):
        import pickle
        with open(where, "wb") as f:
            pickle.dump(self.rb.get_state(), f)

    IMPORTS = "import pickle\nfrom ray.rllib.utils.replay_buffers import PrioritizedReplayBuffer\n"
    LOAD = ("rb = PrioritizedReplayBuffer(CAP, alpha=0.6)\n"
            "rb.set_state(pickle.load(open(STATE, 'rb'))); rb.sample(1, beta=0.4)\n")

    def close(self):
        pass

    def reopen(self):
        pass


class RLlibCompat(RLlib):
    """replaystore.compat.rllib's ReplayBuffer / PrioritizedReplayBuffer (RLlib's classes
    over a replaystore ring of items) in a folder; its save is get_state, which with a
    folder is O(1) (a snapshot and the slots)."""

    name = "rllib-compat"

    def _make(self, capacity, prioritized, path):
        from replaystore.compat import rllib
        return (rllib.PrioritizedReplayBuffer(capacity, alpha=0.6, path=path) if prioritized
                else rllib.ReplayBuffer(capacity, path=path))

    def settle(self):
        self.rb.flush()

    IMPORTS = "import pickle\nfrom replaystore.compat import rllib\n"
    LOAD = ("rb = rllib.PrioritizedReplayBuffer(CAP, alpha=0.6, path=PATH)\n"
            "rb.set_state(pickle.load(open(STATE, 'rb'))); rb.sample(1, beta=0.4)\n")

    def close(self):
        self.rb.close()

    def reopen(self):
        self.rb = self._make(*self.args)


class RLlibEpisodes:
    """RLlib's new-stack EpisodeReplayBuffer / PrioritizedEpisodeReplayBuffer (what DQN
    and SAC use): W1's rows as episodes of 1,000 steps (add_batch: one 1,000-step
    chunk; add1: a one-step chunk continuing the episode), drawn as DQN draws them
    (sample_episodes=True, n_step=1); its save is get_state pickled."""

    name = "rllib-episodes"

    def _make(self, capacity, prioritized, path):
        from ray.rllib.utils.replay_buffers import EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer
        return (PrioritizedEpisodeReplayBuffer(capacity, alpha=0.6) if prioritized
                else EpisodeReplayBuffer(capacity))

    def __init__(self, fields, capacity, path, prioritized):
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode
        self.Episode = SingleAgentEpisode
        self.args = (capacity, prioritized, path)
        self.path = path
        self.rb = self._make(*self.args)
        self.steps = 0  # steps added: episode steps // 1000, t steps % 1000
        self.last = None

    def _chunk(self, obs, next_obs, action, reward):
        # A chunk of n steps has n + 1 observations; one that continues its episode
        # starts with the observation the previous chunk ended with, as RLlib checks.
        n = len(action)
        t = self.steps % 1000
        observations = ([self.last] + list(obs) if t else list(obs) + [next_obs[-1]])
        self.last = observations[-1]
        ep = self.Episode(id_=str(self.steps // 1000), observations=observations,
                          actions=list(action), rewards=list(reward), t_started=t,
                          terminated=t + n == 1000, len_lookback_buffer=0)
        ep.to_numpy()
        self.steps += n
        self.rb.add(ep)

    def add1(self, row):
        self._chunk([row["obs"]], [row["next_obs"]], [row["action"]], [row["reward"]])

    def add_batch(self, batch):
        n = len(batch["obs"])
        at = 0
        while at < n:  # split where an episode ends
            k = min(n - at, 1000 - self.steps % 1000)
            self._chunk(batch["obs"][at:at + k], batch["next_obs"][at:at + k],
                        batch["action"][at:at + k], batch["reward"][at:at + k])
            at += k

    def sample(self, n):
        return self.rb.sample(num_items=n, n_step=1, sample_episodes=True)

    def per(self, n, new):
        self.rb.sample(num_items=n, n_step=1, beta=0.4, sample_episodes=True)
        self.rb.update_priorities(new[:len(self.rb._last_sampled_indices)])

    def save(self, where):
        import pickle
        with open(where, "wb") as f:
            pickle.dump(self.rb.get_state(), f)

    IMPORTS = "import pickle\nfrom ray.rllib.utils.replay_buffers import PrioritizedEpisodeReplayBuffer\n"
    LOAD = ("rb = PrioritizedEpisodeReplayBuffer(CAP, alpha=0.6)\n"
            "rb.set_state(pickle.load(open(STATE, 'rb'))); rb.sample(num_items=1, n_step=1, beta=0.4, sample_episodes=True)\n")

    def close(self):
        pass

    def reopen(self):
        pass


class RLlibEpisodesCompat(RLlibEpisodes):
    """replaystore.compat.rllib's episode buffers (RLlib's classes over a ring of
    episode chunks) in a folder; its save is get_state, O(1) in the ring."""

    name = "rllib-episodes-compat"

    def _make(self, capacity, prioritized, path):
        from replaystore.compat import rllib
        return (rllib.PrioritizedEpisodeReplayBuffer(capacity, alpha=0.6, path=path) if prioritized
                else rllib.EpisodeReplayBuffer(capacity, path=path))

    def settle(self):
        self.rb.flush()

    IMPORTS = "import pickle\nfrom replaystore.compat import rllib\n"
    LOAD = ("rb = rllib.PrioritizedEpisodeReplayBuffer(CAP, alpha=0.6, path=PATH)\n"
            "rb.set_state(pickle.load(open(STATE, 'rb'))); rb.sample(num_items=1, n_step=1, beta=0.4, sample_episodes=True)\n")

    def close(self):
        self.rb.close()

    def reopen(self):
        self.rb = self._make(*self.args)


class Ding:
    """DI-engine's DequeBuffer (PriorityExperienceReplay middleware for PER), one record
    per transition (DI-engine pushes one at a time); its save is save_data (hickle).
    Runs in DI-engine's own virtualenv ($DING_PYTHON, default target/di-venv/bin/python:
    DI-engine pins numpy<2): build replaystore there with --release for these figures."""

    name = "ding"
    NO_BATCH_ADD = True
    PYTHON = "ding"
    # DI-engine's PER middleware takes one Python call per updated record: 20-40 draws
    # of 256 a second, so the other libraries' 10,000 took W1's run past 14 minutes.
    PER_DRAWS = 500

    def _make(self, size, path):
        from ding.data.buffer import DequeBuffer
        return DequeBuffer(size=size)

    def __init__(self, fields, capacity, path, prioritized):
        from ding.data.buffer.middleware import PriorityExperienceReplay
        self.args = (capacity, path, prioritized)
        self.path = path
        self.rb = self._make(capacity, path)
        if prioritized:
            self.rb.use(PriorityExperienceReplay(self.rb, IS_weight=True))

    def add1(self, row):
        self.rb.push(dict(row))

    def add_batch(self, batch):
        for i in range(len(batch["obs"])):
            self.rb.push({k: v[i] for k, v in batch.items()})

    def sample(self, n):
        return self.rb.sample(n)

    def per(self, n, new):
        # As DI-engine's own pipeline updates priorities (data=None: the meta only).
        for record, p in zip(self.rb.sample(n), new):
            self.rb.update(record.index, None, dict(record.meta, priority=float(p)))

    def save(self, where):
        self.rb.save_data(where)

    IMPORTS = "from ding.data.buffer import DequeBuffer\n"
    LOAD = "rb = DequeBuffer(size=CAP); rb.load_data(STATE); rb.sample(1)\n"

    def close(self):
        pass

    def reopen(self):
        pass


class DingCompat(Ding):
    """replaystore.compat.ding's DequeBuffer (DI-engine's class and middleware over a
    replaystore ring) in a folder; its save_data is O(1) (a snapshot and the metas)."""

    name = "ding-compat"

    def _make(self, size, path):
        from replaystore.compat.ding import DequeBuffer
        return DequeBuffer(size=size, path=path)

    def settle(self):
        self.rb.flush()

    IMPORTS = "from replaystore.compat.ding import DequeBuffer\n"
    LOAD = "rb = DequeBuffer(size=CAP, path=PATH); rb.load_data(STATE); rb.sample(1)\n"

    def close(self):
        self.rb.close()

    def reopen(self):
        from ding.data.buffer.middleware import PriorityExperienceReplay
        capacity, path, prioritized = self.args
        self.rb = self._make(capacity, path)
        if prioritized:
            self.rb.use(PriorityExperienceReplay(self.rb, IS_weight=True))


def python_of(lib_name):
    """The interpreter a library's child runs in: DI-engine's own virtualenv for the
    DI-engine libraries, this one for the rest."""
    if getattr(LIBS.get(lib_name), "PYTHON", None) == "ding":
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return os.environ.get("DING_PYTHON", os.path.join(root, "target", "di-venv", "bin", "python"))
    return sys.executable


LIBS = {"replaystore": Replaystore, "cpprb": Cpprb, "torchrl": TorchRL,
        "torchrl-compat": TorchRLCompat, "tianshou": Tianshou,
        "cpprb-compat": CpprbCompat, "sb3": SB3, "sb3-compat": SB3Compat,
        "tianshou-compat": TianshouCompat, "rllib": RLlib, "rllib-compat": RLlibCompat,
        "ding": Ding, "ding-compat": DingCompat, "rllib-episodes": RLlibEpisodes,
        "rllib-episodes-compat": RLlibEpisodesCompat}
#: Adapters and peers, importable under these modules' names.
ADAPTERS = {"cpprb-compat": "replaystore.compat.cpprb", "torchrl-compat": "replaystore.compat.torchrl", "sb3": "stable_baselines3",
            "sb3-compat": "replaystore.compat.sb3", "tianshou-compat": "replaystore.compat.tianshou",
            "rllib": "ray.rllib", "rllib-compat": "replaystore.compat.rllib",
            "ding": "ding", "ding-compat": "replaystore.compat.ding",
            "rllib-episodes": "ray.rllib", "rllib-episodes-compat": "replaystore.compat.rllib"}

# -- W5: LLM self-play steps (text and token arrays), its own libraries ----------------

W5_SCHEMA = {
    "obs": "str",
    "act": "str",
    "tokens": ("int32", (None,)),
    "logprobs": ("float32", (None,)),
    "reward": "float32",
    "pid": "int8",
    "env_id": "str",
}


def w5_steps(n, seed=5):
    """W5's steps: text of log-normal lengths (obs median 2 KB in 0.5-8 KB, act 400 B in
    0.1-2 KB), token arrays of 128-2,048 with log-probs of the same length, 8 env ids;
    and the payload bytes of all of them."""
    rng = np.random.default_rng(seed)

    def lengths(lo, hi, median):
        return np.clip(rng.lognormal(np.log(median), 0.6, n), lo, hi).astype(int)

    text = bytes(rng.choice(np.frombuffer(b"abcdefghijklmnopqrstuvwxyz .,", np.uint8), 4 << 20))
    starts = rng.integers(0, (4 << 20) - 8192, n)
    obs = [text[s:s + k].decode() for s, k in zip(starts, lengths(500, 8000, 2000))]
    act = [text[s:s + k].decode() for s, k in zip(starts[::-1], lengths(100, 2000, 400))]
    tok_len = rng.integers(128, 2049, n)
    tokens = [rng.integers(0, 50_000, k, dtype=np.int32) for k in tok_len]
    logprobs = [(-rng.random(k)).astype(np.float32) for k in tok_len]
    envs = [f"TicTacToe-v{i % 8}-train" for i in range(n)]
    payload = sum(len(o) + len(a) + 8 * len(t) + len(e) + 5 for o, a, t, e in zip(obs, act, tokens, envs))
    return {"obs": obs, "act": act, "tokens": tokens, "logprobs": logprobs, "env_id": envs}, payload


class W5Replaystore:
    """replaystore: add_batch of 64 and add, sample 256 padded (and flat)."""

    def __init__(self, n, path):
        import replaystore as rs
        # The chunk ring holds as many steps as the rows: about 12 KiB each.
        self.buf = rs.ReplayBuffer.create(path, W5_SCHEMA, n, heap_bytes=n * 12 * 1024)

    def add_batch(self, steps, i, j):
        self.buf.add_batch({
            "obs": steps["obs"][i:j], "act": steps["act"][i:j], "tokens": steps["tokens"][i:j],
            "logprobs": steps["logprobs"][i:j], "env_id": steps["env_id"][i:j],
            "reward": np.zeros(j - i, np.float32), "pid": (np.arange(i, j) % 2).astype(np.int8)})

    def add1(self, steps, i):
        self.buf.add(obs=steps["obs"][i], act=steps["act"][i], tokens=steps["tokens"][i],
                     logprobs=steps["logprobs"][i], reward=0.0, pid=i % 2, env_id=steps["env_id"][i])

    def settle(self):
        # Sealed, as after a checkpoint: every value drawn is checked against its crc.
        self.buf.flush()

    def sample_padded(self, n):
        return self.buf.sample(n, values="padded")

    def sample_flat(self, n):
        return self.buf.sample(n, values="flat")

    def close(self):
        self.buf.close()

    @classmethod
    def for_pops(cls, n, path):
        """A buffer that keeps item states, so it can remove what it draws."""
        import replaystore as rs
        b = cls.__new__(cls)
        b.buf = rs.ReplayBuffer.create(path, W5_SCHEMA, n, heap_bytes=n * 12 * 1024, item_states=True)
        return b

    def pop(self, n):
        return self.buf.sample(n, remove=True, values="padded")

    def left(self):
        return len(self.buf)


@dataclasses.dataclass
class Step:
    """``unstable._types.Step`` with the step's tokens and log-probs beside it."""

    pid: int
    obs: str
    act: str
    reward: float
    env_id: str
    tokens: np.ndarray
    logprobs: np.ndarray


class W5List:
    """What ``unstable.buffers.StepBuffer`` keeps: a Python list of dataclasses, padded
    from Python for a batch (``random.sample``, then NumPy per field)."""

    def __init__(self, n, path):
        self.steps = []

    @staticmethod
    def _step(steps, i):
        return Step(i % 2, steps["obs"][i], steps["act"][i], 0.0, steps["env_id"][i],
                    steps["tokens"][i], steps["logprobs"][i])

    def add_batch(self, steps, i, j):
        self.steps.extend(self._step(steps, k) for k in range(i, j))

    def add1(self, steps, i):
        self.steps.append(self._step(steps, i))

    def sample_padded(self, n):
        import random
        picked = random.sample(self.steps, n)
        width = max(len(s.tokens) for s in picked)
        tok = np.zeros((n, width), np.int32)
        lp = np.zeros((n, width), np.float32)
        for r, s in enumerate(picked):
            tok[r, :len(s.tokens)] = s.tokens
            lp[r, :len(s.logprobs)] = s.logprobs
        return tok, lp, [s.obs for s in picked], [s.act for s in picked]

    @classmethod
    def for_pops(cls, n, path):
        return cls(n, path)

    def pop(self, n):
        """UnstableBaselines' ``StepBuffer.get_batch`` (without its reward transform and
        CSV log): ``random.sample`` of the steps, then ``list.remove`` of each."""
        import random
        batch = random.sample(self.steps, n)
        for step in batch:
            self.steps.remove(step)
        return batch

    def left(self):
        return len(self.steps)

    def close(self):
        pass


class W5TorchRL:
    """TorchRL's ReplayBuffer over ListStorage (any Python object per item: a dict of
    text and tensors), batches padded with ``pad_sequence``, as a TorchRL user pads."""

    def __init__(self, n, path):
        import torch
        from torch.nn.utils.rnn import pad_sequence
        from torchrl.data import ListStorage, ReplayBuffer
        self.torch, self.pad = torch, pad_sequence
        self.rb = ReplayBuffer(storage=ListStorage(max_size=n), collate_fn=lambda x: x)

    def _item(self, steps, i):
        t = self.torch
        return {"obs": steps["obs"][i], "act": steps["act"][i], "env_id": steps["env_id"][i],
                "tokens": t.from_numpy(steps["tokens"][i]), "logprobs": t.from_numpy(steps["logprobs"][i]),
                "reward": 0.0, "pid": i % 2}

    def add_batch(self, steps, i, j):
        self.rb.extend([self._item(steps, k) for k in range(i, j)])

    def add1(self, steps, i):
        self.rb.add(self._item(steps, i))

    def sample_padded(self, n):
        items = self.rb.sample(n)
        tok = self.pad([x["tokens"] for x in items], batch_first=True)
        lp = self.pad([x["logprobs"] for x in items], batch_first=True)
        return tok, lp, [x["obs"] for x in items], [x["act"] for x in items]

    def close(self):
        pass


W5_LIBS = {"replaystore": W5Replaystore, "list": W5List, "torchrl": W5TorchRL}


def child_w5(lib_name, quick, runs, scratch):
    """W5's figures for one library: addB (batches of 64 into a new buffer, then a lap
    of a full one), add1, and sample 256 padded; for replaystore also flat, and the
    memcpy floor of the same payload bytes per batch."""
    n = 100_000 // (16 if quick else 1)
    draws = 200 // (4 if quick else 1)
    steps, payload = w5_steps(n)
    lib = W5_LIBS[lib_name]
    results = {}

    def put(key, vals):
        results[key] = vals
        print(json.dumps(results), flush=True)

    add_b, lap, add1, padded, flat = [], [], [], [], []
    for r in range(runs):
        path = os.path.join(scratch, f"{lib_name}-W5-{r}")
        # The previous run's writeback done first: a new ring fills the page cache at
        # memory speed until the kernel's dirty limits, then at the disk's, so run N
        # would otherwise pay for run N - 1's gigabytes.
        os.sync()
        t = time.perf_counter()
        b = lib(n, path)
        for i in range(0, n, 64):
            b.add_batch(steps, i, min(i + 64, n))
        add_b.append(n / (time.perf_counter() - t))
        # A lap until every ring has wrapped, then one timed: the steady state.
        for i in range(0, n, 64):
            b.add_batch(steps, i, min(i + 64, n))
        t = time.perf_counter()
        for i in range(0, n, 64):
            b.add_batch(steps, i, min(i + 64, n))
        lap.append(n / (time.perf_counter() - t))
        m = n // 5
        t = time.perf_counter()
        for i in range(m):
            b.add1(steps, i)
        add1.append(m / (time.perf_counter() - t))
        getattr(b, "settle", lambda: None)()
        t = time.perf_counter()
        for _ in range(draws):
            b.sample_padded(256)
        padded.append(draws / (time.perf_counter() - t))
        if hasattr(b, "sample_flat"):
            t = time.perf_counter()
            for _ in range(draws):
                b.sample_flat(256)
            flat.append(draws / (time.perf_counter() - t))
        b.close()
        del b
        shutil.rmtree(path, ignore_errors=True)
    put("addB", add_b)
    put("addB_lap", lap)
    put("add1", add1)
    put("addB_GBps", [x * payload / n / 1e9 for x in add_b])
    put("addB_lap_GBps", [x * payload / n / 1e9 for x in lap])
    put("sample_padded", padded)
    if hasattr(lib, "for_pops"):
        put("pop", w5_pops(lib, lib_name, n, steps, runs, scratch))
    if flat:
        put("sample_flat", flat)
        # The same payload bytes per batch at this host's memcpy rate, over arrays far
        # larger than the caches (a batch's values lie anywhere in the ring).
        big = np.ones(64 << 20, np.uint64)
        dst = np.empty_like(big)
        np.copyto(dst, big)
        best = 0.0
        for _ in range(3):
            t = time.perf_counter()
            np.copyto(dst, big)
            best = max(best, big.nbytes / (time.perf_counter() - t))
        put("memcpy_floor", [best / (payload / n * 256)])
    results["peak_rss_mib"] = [status_mib("VmHWM")]
    print(json.dumps(results))



def w5_pops(lib, lib_name, n, steps, runs, scratch):
    """Batches of 256 popped per second from a full buffer of `n` steps: replaystore
    until fewer than 256 are left, the list $W5_POP_LIST_BATCHES times (its get_batch
    scans the list once per step it removes)."""
    limit = int(os.environ.get("W5_POP_LIST_BATCHES", "3")) if lib_name == "list" else None
    rates = []
    for r in range(runs):
        path = os.path.join(scratch, f"{lib_name}-W5-pop-{r}")
        os.sync()
        b = lib.for_pops(n, path)
        for i in range(0, n, 64):
            b.add_batch(steps, i, min(i + 64, n))
        getattr(b, "settle", lambda: None)()
        done = 0
        t = time.perf_counter()
        while b.left() >= 256 and (limit is None or done < limit):
            b.pop(256)
            done += 1
        rates.append(done / (time.perf_counter() - t))
        b.close()
        del b
        shutil.rmtree(path, ignore_errors=True)
    return rates


def available(name):
    if name == "list":
        return True
    python = python_of(name)
    if python != sys.executable:
        module = ADAPTERS.get(name, name)
        return os.path.exists(python) and subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True).returncode == 0
    try:
        __import__({**w6.AVAILABLE, **w7.AVAILABLE, **w8.AVAILABLE, **ADAPTERS}.get(name, name))
        return True
    except ImportError:
        return False


# -- one child: one library, one workload, all its figures -----------------------------

def timed_draws(quick):
    """How many draws each sample and per figure is timed over (--quick: a sixteenth)."""
    return 10_000 // (16 if quick else 1)


def child(lib_name, workload, quick, runs, scratch):
    fields, capacity, batch_n = SPEC[workload]
    div = 16 if quick else 1
    capacity //= div
    iters = timed_draws(quick)
    lib = LIBS[lib_name]
    rows = data(fields, capacity)
    one = [{k: v[i] for k, v in rows.items()} for i in range(min(capacity, 200_000 // div))]
    results = {}

    def fresh(prioritized):
        path = os.path.join(scratch, f"{lib_name}-{workload}-{time.monotonic_ns()}")
        return lib(fields, capacity, path, prioritized)

    def timed(key, fn, units):
        vals = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            vals.append(units / (time.perf_counter() - t))
        results[key] = vals
        # Every figure so far, at once: a library killed later (cpprb's W2 save runs out
        # of memory) keeps the figures it did finish.
        print(json.dumps(results), flush=True)

    b = fresh(False)
    # A rate: 100k single adds say it as well as a full ring (TorchRL adds ~2.5k/s).
    n1 = min(capacity, 100_000 // div)
    timed("add1", lambda: [b.add1(one[i % len(one)]) for i in range(n1)], n1)
    b.close()
    chunk = 1000
    made = []

    def fill():
        # The buffer is made inside the timed fill: a library that allocates (and
        # touches) its whole ring in its constructor, as cpprb does, pays for it here
        # as one that maps its files lazily pays in its adds.
        made.append(fresh(False))
        for i in range(0, capacity, chunk):
            made[-1].add_batch({k: v[i:i + chunk] for k, v in rows.items()})

    if getattr(lib, "NO_BATCH_ADD", False):
        fill()  # filled row by row for the sampling figures, not timed as a batch add
    else:
        for _ in range(runs):
            t = time.perf_counter()
            fill()
            results.setdefault("addB", []).append(capacity / (time.perf_counter() - t))
            if len(made) > 1:
                old = made.pop(0)
                old.close()
                if getattr(old, "path", None):
                    shutil.rmtree(old.path, ignore_errors=True)
        print(json.dumps(results), flush=True)
    b = made[-1]
    if not getattr(lib, "NO_BATCH_ADD", False):
        # A lap over the full ring: what a long run adds at, every page already there.
        timed("addB_lap", lambda: [b.add_batch({k: v[i:i + chunk] for k, v in rows.items()})
                                   for i in range(0, capacity, chunk)], capacity)
    getattr(b, "settle", lambda: None)()

    def sample_dropped():
        # Each batch dropped before the next, as a training step does: what is timed is
        # the draw, not the growth of the process by a batch per call.
        for _ in range(iters):
            b.sample(batch_n)

    timed("sample", sample_dropped, iters)
    if hasattr(b, "sample_out"):
        timed("sample_out", lambda: b.sample_out(batch_n, iters), iters)
    # Every batch kept alive, as the first version of this script did (W2: ~9 GB of
    # new memory per run, a page fault per 4 KiB): a figure of the allocator and the
    # kernel as much as of the library.
    timed("sample_kept", lambda: [b.sample(batch_n) for _ in range(iters)], iters)
    b.close()
    # Only one buffer and no source rows alive from here on: a library's save may need
    # memory of its own (cpprb's and Tianshou's W2 saves were killed for want of it
    # while the uniform buffer and 2.8 GB of source rows were still held).
    del b, fill, made
    # No prioritized buffer (SB3): the save figures come from a uniform one.
    no_per = getattr(lib, "NO_PER", False)
    p = fresh(not no_per)
    for i in range(0, capacity, chunk):
        p.add_batch({k: v[i:i + chunk] for k, v in rows.items()})
    getattr(p, "settle", lambda: None)()
    del rows, one
    new = np.random.default_rng(1).random(batch_n)
    if not no_per:
        per_draws = min(iters, getattr(lib, "PER_DRAWS", iters))
        timed("per", lambda: [p.per(batch_n, new) for _ in range(per_draws)], per_draws)
    saves, loads = [], []
    for r in range(runs):
        where = os.path.join(scratch, f"state-{lib_name}-{workload}-{r}.npz")
        t = time.perf_counter()
        p.save(where)
        saves.append(time.perf_counter() - t)
        env = json.dumps({k: {"shape": list(s), "dtype": d} for k, (d, s) in fields.items()})
        # Timed from after the imports (a trainer has them loaded already) to ready to sample.
        code = (lib.IMPORTS + f"import time\nSTATE = {where!r}\nPATH = {getattr(p, 'path', '')!r}\n"
                f"ENV = {env!r}\nCAP = {capacity}\nt = time.perf_counter()\n" + lib.LOAD
                + "print(time.perf_counter() - t)")
        # The process that saved is gone when a run resumes: the writer's lock with it.
        p.close()
        out = subprocess.run([python_of(lib_name), "-c", code], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        loads.append(float(out.stdout.strip().splitlines()[-1]))
        p.reopen()
    results["save"] = saves
    results["load"] = loads
    if lib_name == "replaystore" and workload == "W2":
        results.update(frame_stacks(capacity, iters, runs, scratch))
        print(json.dumps(results), flush=True)
    if lib_name == "replaystore":
        # Another process sampling the same files: its own memory, not the buffer's.
        # Rows copied with pread (nothing mapped, so RSS stays flat) and through the
        # mappings (every page touched stays mapped and counts in RSS, though shared).
        p.close()
        for mode in ("pread", "mapped"):
            code = ("import time, replaystore as rs\n"
                    f"r = rs.Reader.open({p.path!r}, pread={mode == 'pread'})\n"
                    "t = time.perf_counter()\n"
                    f"for _ in range({iters}): r.sample({batch_n})\n"
                    f"rate = {iters} / (time.perf_counter() - t)\n"
                    "status = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
                    "print(rate, int(status['VmHWM'].split()[0]) / 1024)")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(out.stderr)
            rate, hwm = (float(x) for x in out.stdout.split())
            results[f"reader_{mode}_sample"] = [rate]
            results[f"reader_{mode}_peak_mib"] = [hwm]
        p.reopen()
    p.close()
    # VmHWM, not ru_maxrss: ru_maxrss survives exec, so a child would report its
    # parent's peak when that is higher.
    results["peak_rss_mib"] = [status_mib("VmHWM")]
    print(json.dumps(results))


def frame_stacks(capacity, iters, runs, scratch):
    """W2 stored as Atari emulators produce it, one 84x84 frame per step in episodes of
    1,000, and stacked at sample time: `sample_transitions(32, "obs", stack=4)` returns
    obs and next_obs as [32, 4, 84, 84] (twice W2-sample's frames) from a ring a quarter
    of W2's size. A replaystore-only figure: the others keep stacked observations."""
    import replaystore as rs
    fields = {"obs": ("|u1", (84, 84)), "action": ("<i8", ()), "reward": ("<f4", ())}
    path = os.path.join(scratch, f"replaystore-W2-frames-{time.monotonic_ns()}")
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 255, (64, 84, 84), dtype=np.uint8)
    out = {}
    with rs.ReplayBuffer.create(path, fields, capacity, episodic=True, seed=0) as buf:
        step = 0
        while step < capacity:
            buf.add_reset(obs=frames[step % 64])
            step += 1
            for t in range(min(999, capacity - step)):
                buf.add_step(obs=frames[step % 64], action=t % 6, reward=1.0,
                             terminated=t == 998)
                step += 1
        buf.flush()

        def draws():
            for _ in range(iters):
                buf.sample_transitions(32, "obs", stack=4)

        vals = []
        for _ in range(runs):
            t = time.perf_counter()
            draws()
            vals.append(iters / (time.perf_counter() - t))
        out["sample_stack4"] = vals
    # The files' size on disk (a ring of stacked W2 observations is capacity x 28 KB).
    out["stack4_ring_mib"] = [sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path)
                                  for f in fs) / 2**20]
    shutil.rmtree(path, ignore_errors=True)
    return out


UNITS = {"add1": "items/s", "add1_first": "items/s", "addB": "items/s", "addB_lap": "items/s",
         "addB_GBps": "GB/s", "addB_lap_GBps": "GB/s", "sample_padded": "batches/s",
         "sample_flat": "batches/s", "memcpy_floor": "batches/s", "pop": "batches/s",
         "sample": "batches/s", "sample_out": "batches/s", "fill": "steps/s",
         "lockstep": "batches/s", "sample_episodes": "batches/s",
         "sample_transitions": "batches/s",
         "sample_kept": "batches/s", "sample_stack4": "batches/s", "stack4_ring_mib": "MiB",
         "per": "it/s",
         "save": "s", "load": "s", "peak_rss_mib": "MiB",
         "reader_pread_sample": "batches/s", "reader_pread_peak_mib": "MiB",
         "reader_mapped_sample": "batches/s", "reader_mapped_peak_mib": "MiB"}


# Which floor (`replaystore-bench --floors`) bounds each figure, and the factor from the
# floor's unit (M items/s, k batches/s, k it/s) to this script's.
FLOOR_OF = {"add1": ("add1", 1e6), "addB": ("addB", 1e6), "addB_lap": ("addB", 1e6),
            "sample": ("sample", 1e3), "sample_out": ("sample", 1e3), "sample_kept": ("sample", 1e3),
            "per": ("per", 1e3), "reader_pread_sample": ("sample", 1e3),
            "reader_mapped_sample": ("sample", 1e3)}


def replaystore_bench():
    """The benchmark workloads' binary: $REPLAYSTORE_BENCH_BIN, the checkout's dist or
    release build (`cargo build --release -p replaystore-bench`), or PATH."""
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target")
    builds = [os.path.join(target, p, "replaystore-bench") for p in ("dist", "release")]
    for c in (os.environ.get("REPLAYSTORE_BENCH_BIN"), *builds, shutil.which("replaystore-bench")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def floors(workload, quick, runs):
    """This host's floors for `workload`, measured now by `replaystore-bench --floors`
    (plain Rust kernels over memory of the buffer's size: docs/WORKLOADS.md, "Floors"),
    as {figure: [values in this script's units]}; {} without the command."""
    bench = replaystore_bench()
    if bench is None:
        print("floors: no replaystore-bench binary (cargo build --release -p replaystore-bench, "
              "or REPLAYSTORE_BENCH_BIN): figures without their floors", file=sys.stderr)
        return {}
    cmd = [bench, "--workload", workload, "--floors", "--json", "--runs", str(runs)]
    if quick:
        cmd.append("--quick")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"floors of {workload}: {out.stderr.strip()[-500:]}", file=sys.stderr)
        return {}
    # The best run: a floor is what the host can do (`replaystore-bench` takes the same).
    best = {r["workload"].split("-", 1)[1]: r["max"] for r in json.loads(out.stdout)["results"]}
    return {key: [best[f] * scale] for key, (f, scale) in FLOOR_OF.items() if f in best}


def item_bytes(fields):
    """Bytes of one item of a workload's fields."""
    return sum(np.dtype(dt).itemsize * int(np.prod(shape, dtype=np.int64)) for dt, shape in fields.values())


def disk_rate(scratch, nbytes, runs):
    """The disk's write rate in bytes/s, best of `runs`: `nbytes` written in 4 MiB
    blocks and fdatasynced, in the folder the libraries write to."""
    block = os.urandom(4 << 20)
    best = 0.0
    for _ in range(runs):
        path = os.path.join(scratch, "disk-rate")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            t = time.perf_counter()
            left = nbytes
            while left > 0:
                left -= os.write(fd, block[: min(left, len(block))])
            os.fdatasync(fd)
            best = max(best, nbytes / (time.perf_counter() - t))
        finally:
            os.close(fd)
            os.unlink(path)
    return best


def fmt(vals):
    med = statistics.median(vals)
    return f"{med:.4g} ({min(vals):.3g}-{max(vals):.3g})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="replaystore,cpprb,torchrl,tianshou")
    ap.add_argument("--workloads", default="W1,W2")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
    args = ap.parse_args()
    # None of the workloads calls BLAS, but NumPy's OpenBLAS starts a thread per core at
    # import that spins waiting for work: on a 2-core machine it takes a core from the
    # library being measured (18% of a W1 load's samples in perf). One thread, for every
    # library alike; the grandchildren (load, reader) inherit it. Torch's own thread
    # pools are left as they are.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.child:
        if args.child[1] == "W5":
            child_w5(args.child[0], args.quick, args.runs, args.scratch)
        elif args.child[1] in ("W6", "W7", "W8"):
            results = {}

            def put(key, vals):
                results[key] = vals
                print(json.dumps(results), flush=True)

            own = {"W6": w6, "W7": w7, "W8": w8}[args.child[1]]
            own.child(args.child[0], args.quick, args.runs, args.scratch, put)
        else:
            child(args.child[0], args.child[1], args.quick, args.runs, args.scratch)
        return
    workloads = args.workloads.split(",")
    known = set(LIBS) | (set(W5_LIBS) if "W5" in workloads else set())
    known |= set(w6.LIBS) if "W6" in workloads else set()
    known |= set(w7.LIBS) if "W7" in workloads else set()
    known |= set(w8.LIBS) if "W8" in workloads else set()
    only = args.only.split(",") + (["list"] if {"W5", "W8"} & set(workloads) and "list" not in args.only else [])
    libs = [n for n in only if n in known and available(n)]
    skipped = [n for n in only if n not in libs]
    scratch = tempfile.mkdtemp(prefix="replaystore-compare-")
    table = {}
    failed = {}
    floor = {}
    disk = {}
    try:
        for w in workloads:
            if w not in ("W5", "W6", "W7", "W8"):
                # Measured in the same run as the libraries, before them.
                floor[w] = floors(w, args.quick, args.runs)
                fields, capacity, _ = SPEC[w]
                ring = item_bytes(fields) * (capacity // (16 if args.quick else 1))
                disk[w] = disk_rate(scratch, ring, args.runs) / item_bytes(fields)
            for lib in libs:
                if lib not in {"W5": W5_LIBS, "W6": w6.LIBS, "W7": w7.LIBS, "W8": w8.LIBS}.get(w, LIBS):
                    continue
                cmd = [python_of(lib), __file__, "--child", lib, w, "--runs", str(args.runs), "--scratch", scratch]
                if args.quick:
                    cmd.append("--quick")
                out = subprocess.run(cmd, capture_output=True, text=True)
                lines = out.stdout.strip().splitlines()
                table[(w, lib)] = json.loads(lines[-1]) if lines else {}
                if w == "W5" and lib == "replaystore" and table[(w, lib)].get("memcpy_floor"):
                    # The floor of a W5 draw: a memcpy of its payload bytes (measured by
                    # replaystore's child, in the same run).
                    mem = table[(w, lib)]["memcpy_floor"]
                    floor[w] = {"sample_padded": mem, "sample_flat": mem}
                if w == "W8" and lib == "replaystore" and table[(w, lib)].get("memcpy_floor"):
                    # An episode draw's floor: a memcpy of 32 games' payload bytes.
                    floor[w] = {"sample_episodes": table[(w, lib)]["memcpy_floor"]}
                if out.returncode != 0:
                    # A library that cannot run a workload here is a result too (cpprb's
                    # save of W2 runs out of memory on a 24 GB machine); the figures it
                    # finished before stay in the table.
                    why = "killed (out of memory?)" if out.returncode == -9 else f"exit {out.returncode}"
                    failed[(w, lib)] = why
                    print(f"{lib} {w}: {why}\n{out.stderr[-2000:]}", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        out = {f"{w}/{lib}": r for (w, lib), r in table.items()}
        out.update({f"{w}/floor": f for w, f in floor.items()})
        out.update({f"{w}/disk_items_per_s": d for w, d in disk.items()})
        print(json.dumps(out))
        return
    # The ratios: replaystore's against each library; without it, an adapter's against
    # its library (torchrl-compat against torchrl: TorchRL's calls on either storage).
    base = "replaystore" if "replaystore" in libs else next(
        (lib for lib in libs if lib.endswith("-compat") and lib[:-7] in libs), None)
    others = [lib for lib in libs if lib != base]
    if base is not None and base != "replaystore":
        others = [base[:-7]]
    ratio_cols = [f"vs {lib}" for lib in others] if base is not None else []
    floor_cols = ["floor", "ours/floor"] if "replaystore" in libs and any(floor.values()) else []
    print(f"{'figure':<20} {'unit':<10}" + "".join(f"{lib:>31}" for lib in libs)
          + "".join(f"{c:>13}" for c in ratio_cols + floor_cols))
    for w in workloads:
        for key, unit in UNITS.items():
            cells = [table.get((w, lib), {}).get(key) for lib in libs]
            if not any(cells):
                continue
            shown = [fmt(c) if c else ("failed" if (w, lib) in failed else "-") for c, lib in zip(cells, libs)]
            line = f"{w + '-' + key:<20} {unit:<10}" + "".join(f"{c:>31}" for c in shown)
            ours = table.get((w, base), {}).get(key) if base is not None else None
            for lib in others if ratio_cols else []:
                theirs = table.get((w, lib), {}).get(key)
                if ours and theirs:
                    a, b = statistics.median(ours), statistics.median(theirs)
                    ratio = (b / a) if unit in ("s", "MiB") else (a / b)
                    line += f"{ratio:>12.2f}x"
                else:
                    line += f"{'-':>13}"
            if floor_cols:
                f = floor.get(w, {}).get(key)
                if f and ours:
                    line += f"{f[0]:>13.4g}{100 * statistics.median(ours) / f[0]:>12.0f}%"
                else:
                    line += f"{'-':>13}{'-':>13}"
            print(line)
        if "replaystore" in libs and disk.get(w):
            ours = table[(w, "replaystore")]
            shares = ", ".join(f"{k} {100 * statistics.median(ours[k]) / disk[w]:.0f}%"
                               for k in ("add1", "addB", "addB_lap") if ours.get(k))
            print(f"{w} disk: {disk[w]:.4g} items/s written and fdatasynced ({disk[w] * item_bytes(SPEC[w][0]) / 1e9:.2f} GB/s);"
                  f" replaystore {shares} of it")
    if skipped:
        print(f"(not installed, left out: {', '.join(skipped)})")
    for (w, lib), why in failed.items():
        print(f"({lib} could not run {w}: {why})")
    iters = timed_draws(args.quick)
    fewer = [f"{name} {LIBS[name].PER_DRAWS}" for name in libs
             if name in LIBS and getattr(LIBS[name], "PER_DRAWS", iters) < iters]
    if fewer and any(w in SPEC for w in workloads):
        print(f"(per timed over fewer draws than the others' {iters}: {', '.join(fewer)};"
              " rates, not totals, so they still compare)")
    print(f"ratio: how many times better {base or 'replaystore'} is (speed: ours/theirs; time and "
          "memory: theirs/ours)")
    if "replaystore" in libs:
        import replaystore._native as native

        print(f"replaystore's extension {native.BUILD} "
              "(the quoted figures: profile dist; `maturin develop --profile dist`)")
    if floor_cols:
        print("floor: the best of --runs runs of the same work by a plain Rust kernel over memory of the same size, this host, "
              "this run (replaystore-bench --floors; W5's: memcpy_floor, a NumPy copy of the same payload bytes); "
              "ours/floor: replaystore's median as a share of it")


if __name__ == "__main__":
    main()
