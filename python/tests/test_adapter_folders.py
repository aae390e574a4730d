"""Promise: nothing an adapter does escapes its folder. Every file a drop-in (cpprb, SB3,
Tianshou, RLlib, DI-engine, UnstableBaselines, TorchRL) keeps beside its buffer -- its settings
file, that file's temporary name, its generation and sub-buffer folders, Tianshou's extra
columns -- is read, written, renamed and removed without following a link, without
blocking on a FIFO, and without touching a folder of the user's beside it.

The sweep: each adapter's calls run once in a clean folder; then, for every name that
folder holds (and every temporary or next-generation name the adapter may write), the
folder is copied, the name replaced by a link to a decoy file, a link to a decoy folder,
a FIFO, a folder or a hard link to a decoy file, and the calls run again. The decoys and
everything outside the folder must be unchanged, no call may hang, and a call that
refuses must say so with a typed error (replaystore's, or a ``ValueError`` naming the
settings)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
from typing import Callable, Dict, List

import numpy as np
import pytest

import replaystore as rs

from peers import peer

HANG_SECONDS = 20
HOSTILE = ("link-file", "link-dir", "fifo", "dir", "hardlink")


# -- what each adapter does with its folder ------------------------------------------------

def cpprb_plain(path: str) -> None:
    from replaystore.compat import cpprb
    rb = cpprb.ReplayBuffer(16, {"obs": {"shape": 2}, "rew": {}}, path=path)
    rb.add(obs=np.ones((3, 2)), rew=np.arange(3.0))
    rb.sample(2)
    rb.close()


def cpprb_mp(path: str) -> None:
    from replaystore.compat import cpprb
    rb = cpprb.MPPrioritizedReplayBuffer(16, {"obs": {"shape": 2}}, writers=1, path=path)
    rb.add(obs=np.ones((20, 2)), priorities=np.ones(20))
    s = rb.sample(4)
    rb.update_priorities(s["indexes"], np.full(4, 2.0))
    rb.clear()
    rb.close()


def cpprb_selective(path: str) -> None:
    from replaystore.compat import cpprb
    rb = cpprb.SelectiveReplayBuffer(3, obs_dim=2, Nepisodes=4, path=path)
    rb.add([[0, 0], [1, 1]], [0, 1], [0, 1], [[1, 1], [2, 2]], [0, 1])
    rb.add([2, 2], 2, 2, [3, 3], 1.0)
    rb.delete_episode(0)
    rb.close()


def cpprb_her(path: str) -> None:
    from replaystore.compat import cpprb
    rb = cpprb.HindsightReplayBuffer(
        16, {"obs": {"shape": 2}, "act": {}, "next_obs": {"shape": 2}}, max_episode_len=4,
        reward_func=lambda s, a, g: -np.sum((s - g) ** 2, axis=1), goal_func=lambda s: s,
        goal_shape=2, path=path)
    for t in range(3):
        rb.add(obs=[t, t], act=t, next_obs=[t + 1, t + 1])
    rb.on_episode_end([3, 3])
    rb.sample(2)
    rb.close()


def sb3_plain(path: str) -> None:
    peer("stable_baselines3")
    from gymnasium import spaces

    from replaystore.compat import sb3
    rb = sb3.ReplayBuffer(16, spaces.Box(-1, 1, (2,)), spaces.Discrete(3), device="cpu",
                          path=path)
    for t in range(3):
        rb.add(np.zeros((1, 2)), np.ones((1, 2)), np.array([[t % 3]]), np.array([1.0]),
               np.array([False]), [{}])
    rb.sample(2)
    rb.close()


def tianshou_rings(path: str) -> None:
    peer("tianshou")
    from tianshou.data import Batch

    from replaystore.compat import tianshou
    buf = tianshou.ReplayBuffer(8, path=path)
    for t in range(3):
        buf.add(Batch(obs=np.array([t, t], np.float32), act=t, rew=1.0, terminated=t == 2,
                      truncated=False, obs_next=np.array([t + 1, t + 1], np.float32), info={}))
    buf.set_array_at_key(np.arange(3.0), "returns", index=np.arange(3), default_value=0.0)
    buf.sample(2)
    buf.close()


def tianshou_plain(path: str) -> None:
    from replaystore.compat.tianshou import _plain
    buf = _plain.VectorReplayBuffer(8, 2, path=path)
    for t in range(3):
        buf.add({"obs": np.full((2, 2), t, np.float32), "act": np.array([t, t]),
                 "rew": np.ones(2), "terminated": np.array([t == 2, False]),
                 "truncated": np.zeros(2, bool), "obs_next": np.full((2, 2), t + 1, np.float32)})
    buf.sample(2)
    buf.close()


def rllib_fragments(path: str) -> None:
    peer("ray.rllib")
    from ray.rllib.policy.sample_batch import SampleBatch

    from replaystore.compat import rllib
    buf = rllib.ReplayBuffer(8, storage_unit="fragments", path=path)
    for t in range(12):  # past capacity: the chunk ring grows a generation
        buf.add(SampleBatch({"obs": np.full((2, 2), t, np.float32), "t": np.array([t, t])}))
    buf.sample(2)
    buf.close()


def rllib_rows(path: str) -> None:
    peer("ray.rllib")
    from ray.rllib.policy.sample_batch import SampleBatch

    from replaystore.compat import rllib
    buf = rllib.ReplayBuffer(8, storage_unit="timesteps", path=path)
    buf.add(SampleBatch({"obs": np.ones((3, 2), np.float32), "t": np.arange(3)}))
    state = buf.get_state()
    buf.set_state(state)
    buf.sample(2)
    buf.close()


def chunk_generations(path: str) -> None:
    """The chunk ring RLlib's and DI-engine's adapters keep objects in, grown past its
    size so that it writes a next generation and retires the one before."""
    from replaystore.compat._chunks import ChunkStore
    os.makedirs(path, exist_ok=True)
    store = ChunkStore(path, {"items": 8, "heap": 1 << 12}, "chunks.json")
    start = store.next_seq
    for t in range(start, start + 60):
        store.put("k", {"t": t, "pad": "x" * 100})
    assert store.load([start])[0]["t"] == start
    store.close()


def ding_deque(path: str) -> None:
    peer("ding")
    from replaystore.compat import ding
    buf = ding.DequeBuffer(8, path=path)
    for t in range(12):
        buf.push({"obs": np.full(2, t)}, meta={"t": t})
    buf.sample(2)
    buf.close()


def unstable_steps(path: str) -> None:
    from replaystore.compat import unstable
    buf = unstable.LocalStepBuffer(8, None, None, None, None, path=path, capacity=64,
                                   heap_bytes=1 << 16)
    buf.close()


def torchrl_storage(path: str) -> None:
    torch = peer("torch")
    from tensordict import TensorDict
    from torchrl.data import TensorDictReplayBuffer

    from replaystore.compat.torchrl import ReplayStorePrioritizedSampler, ReplayStoreStorage
    storage = ReplayStoreStorage(8, path)
    rb = TensorDictReplayBuffer(storage=storage, batch_size=2,
                                sampler=ReplayStorePrioritizedSampler(8, 0.6, 0.4))
    try:
        rb.extend(TensorDict({"obs": torch.arange(10.0)[:, None]}, batch_size=[10]))
        _, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], torch.ones(2))
        rb.load_state_dict(rb.state_dict())
        rb.empty()
    finally:
        storage.close()


SCENARIOS: Dict[str, Callable[[str], None]] = {
    f.__name__: f for f in (cpprb_plain, cpprb_mp, cpprb_selective, cpprb_her, sb3_plain, tianshou_rings,
                           tianshou_plain, rllib_fragments, rllib_rows, chunk_generations, ding_deque,
                           unstable_steps, torchrl_storage)
}


# -- the folder and what lies outside it ---------------------------------------------------

def tree(root: str) -> Dict[str, str]:
    """Every entry below ``root``: kind, and the bytes' hash for a file (no link followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = "file " + hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                out[os.path.relpath(p, root)] = "link " + os.readlink(p)
            else:
                out[os.path.relpath(p, root)] = "dir" if stat.S_ISDIR(st.st_mode) else "other"
    return out


def plant(path: str, kind: str, outside: str) -> None:
    """Replaces whatever is at ``path`` by a hostile entry pointing ``outside``."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    if kind == "link-file":
        os.symlink(os.path.join(outside, "victim"), path)
    elif kind == "link-dir":
        os.symlink(os.path.join(outside, "vdir"), path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
        with open(os.path.join(path, "mine.txt"), "w") as f:
            f.write("a folder of the user's")
    elif kind == "hardlink":
        os.link(os.path.join(outside, "victim"), path)


def names_to_try(folder: str) -> List[str]:
    """The top-level names the adapter made, the temporary name of each settings file,
    and the next generation after the newest."""
    names = sorted(os.listdir(folder))
    extra = [n + ".tmp" for n in names if n.endswith(".json")]
    gens = [int(n[4:]) for n in names if n.startswith("gen-") and n[4:].isdigit()]
    if gens:
        extra.append(f"gen-{max(gens) + 1}")
    return names + extra


class Hung(Exception):
    pass


def _alarm(signum, frame):
    raise Hung(f"a call blocked for {HANG_SECONDS} s")


def run_bounded(scenario: Callable[[str], None], path: str):
    """Runs the scenario; returns the exception it raised (``None`` if none). A call that
    blocks is interrupted and reported as ``Hung``."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_SECONDS)
    try:
        scenario(path)
        return None
    except Hung as e:
        return e
    except (rs.Error, ValueError, OSError, TypeError, KeyError, RuntimeError) as e:
        return e
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_adapter_file_ignores_links_fifos_and_the_users_folders(name, tmp_path):
    scenario = SCENARIOS[name]
    outside = tmp_path / "outside"
    (outside / "vdir").mkdir(parents=True)
    (outside / "victim").write_text("precious")
    (outside / "vdir" / "notes.txt").write_text("mine")
    clean = str(tmp_path / "clean")
    scenario(clean)
    before = tree(str(outside))
    refused = {}
    tried = 0
    for entry in names_to_try(clean):
        for kind in HOSTILE:
            if kind == "hardlink" and os.path.isdir(os.path.join(clean, entry)):
                continue  # a folder cannot be hard-linked
            case = str(tmp_path / f"case-{tried}")
            shutil.copytree(clean, case, symlinks=True)
            plant(os.path.join(case, entry), kind, str(outside))
            err = run_bounded(scenario, case)
            tried += 1
            assert not isinstance(err, Hung), f"{name}: {kind} at {entry}: {err}"
            after = tree(str(outside))
            assert after == before, f"{name}: {kind} at {entry} changed what is outside: {err!r}"
            if kind == "dir" and not os.path.lexists(os.path.join(clean, entry)):
                # A name the buffer had not made yet: the folder there is the user's. (At
                # a name it made, its record may say remove it: the entry is its own.)
                mine = os.path.join(case, entry, "mine.txt")
                assert os.path.isfile(mine), f"{name}: the user's folder at {entry} was removed"
            if err is not None:
                # Refused: by a typed error of replaystore's, or a ValueError saying why.
                assert isinstance(err, (rs.Error, ValueError)), \
                    f"{name}: {kind} at {entry}: untyped {type(err).__name__}: {err}"
                refused[(entry, kind)] = type(err).__name__
            shutil.rmtree(case, ignore_errors=True)
    assert tried >= 2 * 4  # at least two names, each with four kinds


def test_a_selective_buffer_leaves_the_users_generation_folder_and_a_planted_link_alone(tmp_path):
    """The trial's reproduction: a link at ``cpprb.json.tmp`` to a file outside, and a
    folder of the user's named ``gen-backup``; a delete must overwrite neither."""
    from replaystore.compat import cpprb
    f1, victim = str(tmp_path / "f1"), tmp_path / "victim1"
    cpprb_selective(f1)
    victim.write_text("precious\n")
    os.symlink(victim, os.path.join(f1, "cpprb.json.tmp"))
    os.makedirs(os.path.join(f1, "gen-backup", "sub"))
    with open(os.path.join(f1, "gen-backup", "notes.txt"), "w") as f:
        f.write("mine\n")
    rb = cpprb.SelectiveReplayBuffer(3, obs_dim=2, Nepisodes=4, path=f1)
    rb.add([[5, 5]], [5], [5], [[6, 6]], [1])
    rb.delete_episode(0)
    rb.close()
    assert victim.read_text() == "precious\n"
    assert open(os.path.join(f1, "gen-backup", "notes.txt")).read() == "mine\n"
    assert os.path.isdir(os.path.join(f1, "gen-backup", "sub"))
    reopened = cpprb.SelectiveReplayBuffer(3, obs_dim=2, Nepisodes=4, path=f1)
    assert reopened.get_stored_size() == 1
    reopened.close()


def test_a_fifo_at_the_settings_name_is_refused_without_blocking(tmp_path):
    from replaystore.compat import cpprb
    f2 = tmp_path / "f2"
    f2.mkdir()
    os.mkfifo(f2 / "cpprb.json")
    os.mkfifo(f2 / "MANIFEST")  # a reopen reads the settings before the engine's files
    err = run_bounded(lambda p: cpprb.ReplayBuffer(100, {"obs": {}}, path=p), str(f2))
    assert isinstance(err, rs.ForeignFileError), repr(err)
    assert "named pipe" in str(err) and "cpprb.json" in str(err)


def test_a_killed_generation_switch_leaves_only_recorded_generations_removed(tmp_path):
    """A kill between recording the next generation and naming it current: the reopen
    removes that half-written generation (the record names it) and nothing else."""
    from replaystore.compat import cpprb
    from replaystore.compat._folder import read_sidecar, write_sidecar
    f = str(tmp_path / "sel")
    cpprb_selective(f)
    saved = read_sidecar(f, "cpprb.json")
    gen = saved["generation"]
    shutil.copytree(os.path.join(f, f"gen-{gen}"), os.path.join(f, f"gen-{gen + 1}"))
    write_sidecar(f, "cpprb.json", {**saved, "making": gen + 1})
    os.mkdir(os.path.join(f, f"gen-{gen + 7}"))  # not recorded: the user's
    rb = cpprb.SelectiveReplayBuffer(3, obs_dim=2, Nepisodes=4, path=f)
    assert rb.get_stored_size() == 1
    rb.close()
    assert not os.path.exists(os.path.join(f, f"gen-{gen + 1}"))
    assert os.path.isdir(os.path.join(f, f"gen-{gen + 7}"))


def test_a_new_tianshou_column_at_a_hard_linked_name_leaves_the_other_name_whole(tmp_path):
    """``set_array_at_key`` makes ``extra-KEY.npy``: a hard link planted at that name
    (to a file outside) must be replaced, never truncated or written through."""
    peer("tianshou")
    from replaystore.compat import tianshou
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious" * 1000)
    folder = tmp_path / "b"
    tianshou_rings(str(folder))
    buf = tianshou.ReplayBuffer(8, path=str(folder))
    os.link(victim, folder / "extra-fresh.npy")  # planted while the buffer is open
    buf.set_array_at_key(np.ones(3), "fresh", index=np.arange(3), default_value=0.0)
    buf.close()
    assert victim.read_bytes() == b"precious" * 1000
    assert os.stat(folder / "extra-fresh.npy").st_nlink == 1
