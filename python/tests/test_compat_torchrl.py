"""replaystore.compat.torchrl beside TorchRL itself: the same indices and items from
TorchRL's own samplers over either storage (same seeds), the same distribution and
weights from the prioritized sampler, and what LazyMemmapStorage does not have: a
kill -9 resumed with items, cursor and priorities, O(1) checkpoints, a reader in another
process."""

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from peers import chi_square, chi_square_two, peer
from readme_blocks import block, run_twice

torch = peer("torch")
peer("torchrl.data")
from tensordict import TensorDict, tensorclass  # noqa: E402
from torchrl.data import (LazyMemmapStorage, PrioritizedSampler, RandomSampler,  # noqa: E402
                          ReplayBuffer, SamplerWithoutReplacement, SliceSampler,
                          TensorDictReplayBuffer)

import replaystore as rs  # noqa: E402
from replaystore.compat.torchrl import (ReplayStorePrioritizedSampler,  # noqa: E402
                                        ReplayStoreStorage)


@tensorclass
class Step:
    obs: torch.Tensor
    reward: torch.Tensor


def steps(first, n):
    """``n`` steps whose every leaf says its step number (nested keys, three dtypes)."""
    i = torch.arange(first, first + n)
    return TensorDict({"obs": i[:, None].float().expand(n, 3).clone(),
                       ("next", "obs"): (i[:, None] + 1).float().expand(n, 3).clone(),
                       "action": i % 4, "done": (i % 10 == 9)[:, None],
                       "episode": (i // 10).int()}, batch_size=[n])


def both(tmp_path, size, **rb):
    """The same buffer on LazyMemmapStorage and on ReplayStoreStorage."""
    theirs = TensorDictReplayBuffer(storage=LazyMemmapStorage(size, scratch_dir=tmp_path / "m"), **rb)
    ours = TensorDictReplayBuffer(storage=ReplayStoreStorage(size, tmp_path / "r"),
                                  **{k: (v() if callable(v) else v) for k, v in rb.items()})
    return theirs, ours


@pytest.mark.parametrize("make", [RandomSampler, SamplerWithoutReplacement,
                                  lambda: SliceSampler(num_slices=4, traj_key="episode")],
                         ids=["random", "without-replacement", "slice"])
def test_torchrls_own_samplers_draw_the_same_items_from_either_storage(tmp_path, make):
    theirs = TensorDictReplayBuffer(storage=LazyMemmapStorage(64, scratch_dir=tmp_path / "m"),
                                    sampler=make(), batch_size=16)
    ours = TensorDictReplayBuffer(storage=ReplayStoreStorage(64, tmp_path / "r"),
                                  sampler=make(), batch_size=16)
    for first, n in [(0, 40), (40, 40), (80, 10)]:     # wraps past 64
        assert (theirs.extend(steps(first, n)) == ours.extend(steps(first, n))).all()
    assert len(theirs) == len(ours) == 64
    for seed in range(5):
        torch.manual_seed(seed)
        a = theirs.sample()
        torch.manual_seed(seed)
        b = ours.sample()
        for key in a.keys(include_nested=True, leaves_only=True):
            assert torch.equal(a[key], b[key]), (seed, key)
    ours.storage.close()


def test_items_come_back_as_stored_tensordict_tensorclass_and_tensor(tmp_path):
    s = ReplayStoreStorage(8, tmp_path / "td")
    rb = ReplayBuffer(storage=s)
    rb.extend(steps(0, 5))
    got = s.get(torch.tensor([4, 0]))
    assert got.batch_size == torch.Size([2]) and got["done"].dtype == torch.bool
    assert torch.equal(got["next", "obs"][:, 0], torch.tensor([5.0, 1.0]))
    assert s[3]["action"].item() == 3 and s[1:3]["episode"].tolist() == [0, 0]
    s.close()

    s = ReplayStoreStorage(8, tmp_path / "tc")
    ReplayBuffer(storage=s).extend(Step(obs=torch.ones(3, 2), reward=torch.arange(3.0),
                                        batch_size=[3]))
    s.close()
    s = ReplayStoreStorage(8, tmp_path / "tc")
    got = s.get([2])   # reopened: still a Step
    assert isinstance(got, Step) and got.reward.tolist() == [2.0]
    s.close()

    s = ReplayStoreStorage(8, tmp_path / "t")
    rb = ReplayBuffer(storage=s, batch_size=4)
    rb.extend(torch.arange(12).reshape(6, 2))
    assert torch.equal(s.get(slice(None)), torch.arange(12).reshape(6, 2))
    s.close()


def test_a_tensorclass_defined_in_a_function_comes_back_where_it_was_stored(tmp_path):
    @tensorclass
    class Local:
        obs: torch.Tensor

    s = ReplayStoreStorage(10, tmp_path / "rb")
    rb = ReplayBuffer(storage=s)
    rb.extend(Local(obs=torch.arange(4.0)[:, None], batch_size=[4]))
    assert type(rb[2]) is Local and rb[2].obs.tolist() == [2.0]
    copy = pickle.loads(pickle.dumps(s))   # it has only the class's name to go by
    with pytest.raises(TypeError, match="Local .*defined inside a function"):
        copy.get([0])
    s.close()


def test_text_values_are_refused_not_dropped(tmp_path):
    @tensorclass
    class Said:
        obs: torch.Tensor
        text: str

    rb = ReplayBuffer(storage=ReplayStoreStorage(10, tmp_path / "rb"))
    with pytest.raises(TypeError, match="'text' is NonTensorData"):
        rb.extend(Said(obs=torch.zeros(2, 3), text="hi", batch_size=[2]))
    rb.extend(TensorDict({"obs": torch.zeros(2, 3)}, batch_size=[2]))
    with pytest.raises(TypeError, match="'note' is NonTensorData"):
        rb.extend(TensorDict({"obs": torch.ones(2, 3), "note": "lost?"}, batch_size=[2]))
    assert len(rb) == 2 and rb[:]["obs"].sum() == 0
    rb.storage.close()


def test_prioritized_draws_follow_torchrls_distribution_and_weights(tmp_path):
    n, draws = 32, 20_000
    prio = torch.linspace(0.1, 3.0, n)
    theirs = ReplayBuffer(storage=LazyMemmapStorage(n, scratch_dir=tmp_path / "m"),
                          sampler=PrioritizedSampler(n, alpha=0.7, beta=0.5), batch_size=500)
    ours = ReplayBuffer(storage=ReplayStoreStorage(n, tmp_path / "r"),
                        sampler=ReplayStorePrioritizedSampler(n, alpha=0.7, beta=0.5),
                        batch_size=500)
    for rb in (theirs, ours):
        rb.extend(steps(0, n))
        rb.update_priority(torch.arange(n), prio)
    counts = {}
    for name, rb in (("theirs", theirs), ("ours", ours)):
        c = np.zeros(n)
        for _ in range(draws // 500):
            td, info = rb.sample(return_info=True)
            idx = info["index"].numpy()
            np.add.at(c, idx, 1)
            # The items are the ones the index names, and the weights TorchRL's formula.
            assert (td["action"].numpy() == idx % 4).all()
            p = (prio[idx].double() + 1e-8) ** 0.7
            pmin = (prio.min().double() + 1e-8) ** 0.7
            np.testing.assert_allclose(info["priority_weight"].numpy(),
                                       ((p / pmin) ** -0.5).numpy(), rtol=1e-4)
        counts[name] = c
    chi_square_two(counts["ours"], counts["theirs"])
    ours.storage.close()


def test_a_killed_buffer_resumes_with_items_cursor_and_priorities(tmp_path):
    path = tmp_path / "rb"
    child = textwrap.dedent(f"""
        import os, torch
        from tensordict import TensorDict
        from torchrl.data import TensorDictReplayBuffer
        from replaystore.compat.torchrl import ReplayStoreStorage, ReplayStorePrioritizedSampler
        rb = TensorDictReplayBuffer(storage=ReplayStoreStorage(100, {str(path)!r}),
                                    sampler=ReplayStorePrioritizedSampler(100, 0.8, 0.4))
        i = torch.arange(130)
        rb.extend(TensorDict({{"x": i.float()[:, None], "i": i}}, batch_size=[130]))
        rb.update_priority(torch.arange(100), (torch.arange(100) % 7 + 1).float())
        print("acknowledged", flush=True)
        os.kill(os.getpid(), 9)
    """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert run.returncode == -9 and "acknowledged" in run.stdout, run.stderr
    storage = ReplayStoreStorage(100, path)
    sampler = ReplayStorePrioritizedSampler(100, 0.8, 0.4)
    rb = TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=64)
    assert len(rb) == 100
    # Slot k holds the newest item written there: 100 + k below 30, k above.
    held = storage.get(torch.arange(100))["i"]
    assert held.tolist() == [100 + k if k < 30 else k for k in range(100)]
    # The priorities came back: the draws follow them.
    counts = np.zeros(100)
    for _ in range(100):
        np.add.at(counts, rb.sample(return_info=True)[1]["index"].numpy(), 1)
    want = ((np.arange(100) % 7 + 1) + 1e-8) ** 0.8
    chi_square(counts, want / want.sum())
    # The writer goes on at the cursor the folder had.
    assert rb.extend(TensorDict({"x": torch.zeros(2, 1), "i": torch.tensor([130, 131])},
                                batch_size=[2])).tolist() == [30, 31]
    assert storage.get(torch.tensor([30, 31]))["i"].tolist() == [130, 131]
    storage.close()


def test_a_write_elsewhere_than_the_next_slots_is_refused_and_loses_nothing(tmp_path):
    s = ReplayStoreStorage(10, tmp_path / "rb")
    rb = ReplayBuffer(storage=s)
    rb.extend(steps(0, 4))
    with pytest.raises(NotImplementedError, match=r"should go to slots \[4\], not \[2\]"):
        s.set(2, steps(9, 1)[0])
    with pytest.raises(ValueError, match=r"'obs' has shape \(2, 4\), expected \(2, 3\)"):
        rb.extend(TensorDict({**steps(4, 2).to_dict(), "obs": torch.zeros(2, 4)}, [2]))
    with pytest.raises(KeyError, match="lacks key"):
        rb.extend(steps(4, 2).exclude("action"))
    assert len(rb) == 4 and s.get(slice(None))["action"].tolist() == [0, 1, 2, 3]
    # empty() starts again at slot 0, as TorchRL's does.
    rb.empty()
    assert len(rb) == 0 and rb.extend(steps(7, 2)).tolist() == [0, 1]
    assert s[0]["action"].item() == 3
    s.close()


def test_an_update_in_place_is_refused_and_loses_nothing(tmp_path):
    from torchrl.data import TensorDictRoundRobinWriter
    rb = TensorDictReplayBuffer(storage=ReplayStoreStorage(10, tmp_path / "rb"),
                                writer=TensorDictRoundRobinWriter(track_generations=True))
    index = rb.extend(steps(0, 4))
    with pytest.raises(RuntimeError, match="Conditional updates are not supported by "
                                           "ReplayStoreStorage"):
        rb.update_if_present(index=index, generation=rb._writer.generations_of(index),
                             patch={"action": torch.zeros(4, dtype=torch.int64)})
    assert rb[:]["action"].tolist() == [0, 1, 2, 3]
    rb.storage.close()


def test_a_checkpoint_is_a_snapshot_and_going_back_restores_it(tmp_path):
    s = ReplayStoreStorage(50, tmp_path / "rb")
    rb = TensorDictReplayBuffer(storage=s, sampler=ReplayStorePrioritizedSampler(50, 0.6, 0.4))
    rb.extend(steps(0, 30))
    rb.update_priority(torch.arange(30), torch.arange(30).float() + 1)
    state = rb.state_dict()
    # Small: a snapshot's name, not the items.
    assert len(pickle.dumps(state)) < 4096
    rb.extend(steps(30, 40))
    rb.update_priority(torch.arange(50), torch.ones(50))
    rb.load_state_dict(state)
    assert len(rb) == 30 and s.get(torch.arange(30))["action"].tolist() == [k % 4 for k in range(30)]
    np.testing.assert_allclose(s._buffer.priorities(np.arange(30, dtype=np.uint64)),
                               np.arange(30) + 1 + 1e-8, rtol=1e-5)
    assert rb.extend(steps(30, 1)).tolist() == [30]
    # dumps/loads through TorchRL's own calls, to a new folder: the same.
    rb.dumps(tmp_path / "ckpt")
    rb.extend(steps(31, 5))
    rb.loads(tmp_path / "ckpt")
    assert len(rb) == 31
    s.close()
    # A fresh storage in another folder resumes from the checkpoint (TorchRL's
    # test_sampler_without_rep_dumps_loads does this): items, priorities, cursor.
    fresh = TensorDictReplayBuffer(storage=ReplayStoreStorage(50, tmp_path / "other"),
                                   sampler=ReplayStorePrioritizedSampler(50, 0.6, 0.4))
    fresh.loads(tmp_path / "ckpt")
    assert len(fresh) == 31
    assert fresh.storage.get(torch.arange(31))["action"].tolist() == [k % 4 for k in range(31)]
    np.testing.assert_allclose(fresh.storage._buffer.priorities(np.arange(30, dtype=np.uint64)),
                               np.arange(30) + 1 + 1e-8, rtol=1e-5)
    assert fresh.extend(steps(31, 1)).tolist() == [31]
    fresh.storage.close()
    with pytest.raises(ValueError, match="max_size 50, this one has 40"):
        ReplayStoreStorage(40, tmp_path / "third").loads(tmp_path / "ckpt" / "storage")


def test_dumps_refuses_save_hooks_and_checkpointers_it_cannot_apply(tmp_path):
    from torchrl.data.replay_buffers.checkpointers import FlatStorageCheckpointer
    from torchrl.data.replay_buffers.utils import TED2Flat
    rb = TensorDictReplayBuffer(storage=ReplayStoreStorage(20, tmp_path / "rb"))
    rb.extend(steps(0, 5))
    rb.register_save_hook(TED2Flat())
    with pytest.raises(NotImplementedError, match="TED2Flat reshape a full copy"):
        rb.storage.dumps(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()
    rb.storage.checkpointer = FlatStorageCheckpointer()
    with pytest.raises(NotImplementedError, match="FlatStorageCheckpointer"):
        rb.storage.dumps(tmp_path / "ckpt")
    rb.storage.checkpointer = None  # TorchRL's default again: the snapshot
    rb.storage.dumps(tmp_path / "ckpt")
    assert len(rb) == 5
    rb.storage.close()


def test_over_another_storage_the_sampler_is_torchrls_through_dumps_and_loads(tmp_path):
    from torchrl.data import LazyTensorStorage
    made = {}
    for name, cls in (("theirs", PrioritizedSampler), ("ours", ReplayStorePrioritizedSampler)):
        rb = ReplayBuffer(storage=LazyTensorStorage(10),
                          sampler=cls(10, alpha=0.6, beta=1.0, max_priority_within_buffer=True))
        rb.update_priority(rb.extend(torch.arange(6)), torch.arange(1.0, 7.0))
        rb.sampler.dumps(tmp_path / name)
        fresh = cls(10, alpha=0.6, beta=1.0, max_priority_within_buffer=True)
        fresh.loads(tmp_path / name)   # its trees are made while it loads
        made[name] = (tuple(float(x) for x in fresh._max_priority),
                      [fresh._sum_tree[i] for i in range(10)])
    assert made["ours"] == made["theirs"] and made["ours"][0][1] == 5


def test_a_pickled_storage_reads_the_folder_in_another_process(tmp_path):
    s = ReplayStoreStorage(20, tmp_path / "rb")
    ReplayBuffer(storage=s).extend(steps(0, 12))
    code = textwrap.dedent("""
        import pickle, sys
        s = pickle.load(sys.stdin.buffer)
        print(len(s), s.get([11, 0])["action"].tolist())
        try:
            s.set(12, s.get(0))
        except Exception as e:
            print(type(e).__name__)
    """)
    run = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(s),
                         capture_output=True)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.decode().split("\n")[:2] == ["12 [3, 0]", "ReadOnlyError"], run.stdout
    s.close()


def test_cleanup_removes_only_what_the_storage_wrote(tmp_path):
    assert ReplayStoreStorage(10)._auto_cleanup is True
    assert ReplayStoreStorage(10, tmp_path / "kept")._auto_cleanup is False
    folder = tmp_path / "rb"
    folder.mkdir()
    (folder / "notes.txt").write_text("the user's")
    s = ReplayStoreStorage(10, folder, auto_cleanup=True)
    ReplayBuffer(storage=s).extend(steps(0, 3))
    assert s.cleanup() is True and s.cleanup() is False
    assert sorted(os.listdir(folder)) == ["notes.txt"], "TorchRL's would remove the folder"
    with pytest.raises(RuntimeError, match="cleaned up"):
        ReplayBuffer(storage=s).extend(steps(0, 3))
    (folder / "notes.txt").unlink()
    s = ReplayStoreStorage(10, folder, auto_cleanup=True)
    ReplayBuffer(storage=s).extend(steps(0, 3))
    assert s.cleanup() is True and not folder.exists()
    # Never written: nothing of its own to remove, and its temporary folder goes.
    s = ReplayStoreStorage(10)
    assert s.cleanup() is False and not os.path.exists(s.path)
    # Kept (auto_cleanup=False) but never written: no empty folder is left behind.
    s = ReplayStoreStorage(10, auto_cleanup=False)
    path = s.path
    s.close()
    assert not os.path.exists(path)


@pytest.mark.parametrize("end", ["exit", "sigint", "reader-exits", "kept"])
def test_auto_cleanup_at_exit_and_on_sigint_never_in_a_reader(tmp_path, end):
    folder = tmp_path / "rb"
    args = ("auto_cleanup=False" if end == "kept"   # a temporary folder, kept
            else f"scratch_dir={str(folder)!r}, auto_cleanup=True")
    code = textwrap.dedent(f"""
        import os, pickle, signal, subprocess, sys, torch
        from tensordict import TensorDict
        from torchrl.data import ReplayBuffer
        from replaystore.compat.torchrl import LazyMemmapStorage
        s = LazyMemmapStorage(10, {args})
        ReplayBuffer(storage=s).extend(TensorDict(a=torch.zeros(3), batch_size=[3]))
        print(s.path, flush=True)
        if {end!r} == "reader-exits":
            run = subprocess.run([sys.executable, "-c", "import pickle, sys; "
                                  "print(len(pickle.load(sys.stdin.buffer)))"],
                                 input=pickle.dumps(s), capture_output=True)
            print(run.stdout.decode().strip(), os.path.isdir(os.path.join(s.path, "items")))
        if {end!r} == "sigint":
            os.kill(os.getpid(), signal.SIGINT)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True)
    out = run.stdout.decode().split()
    path = out[0]
    if end == "sigint":  # TorchRL's handler cleans, then interrupts as Python would
        assert b"KeyboardInterrupt" in run.stderr and run.returncode != 0, run.stderr.decode()
    else:
        assert run.returncode == 0, run.stderr.decode()
    if end == "reader-exits":
        assert out[1:] == ["3", "True"], "a copy in another process removed nothing"
    assert os.path.exists(path) == (end == "kept")
    if end == "kept":  # a temporary folder the caller chose to keep: it reopens
        s = ReplayStoreStorage(10, path)
        assert len(s) == 3
        assert s.cleanup() is True and not os.path.exists(path)


def test_a_copy_pickled_before_the_first_write_reads_and_never_writes(tmp_path):
    s = ReplayStoreStorage(20, tmp_path / "rb")
    copy = pickle.loads(pickle.dumps(s))     # as a worker gets it, before anything is added
    assert len(copy) == 0
    with pytest.raises(rs.ReadOnlyError, match="pickled"):
        ReplayBuffer(storage=copy).extend(steps(0, 2))
    assert not (tmp_path / "rb" / "items" / "MANIFEST").exists(), "the copy made no buffer"
    ReplayBuffer(storage=s).extend(steps(0, 7))
    assert copy.get([6])["action"].tolist() == [2]    # a read first, then len
    assert len(copy) == 7
    s.close()


def test_a_folder_of_another_size_is_refused(tmp_path):
    s = ReplayStoreStorage(10, tmp_path / "rb")
    ReplayBuffer(storage=s).extend(steps(0, 3))
    s.close()
    with pytest.raises(ValueError, match="max_size 10, not 20"):
        ReplayStoreStorage(20, tmp_path / "rb")
    assert not os.path.exists(tmp_path / "rb" / "torchrl.json.tmp")


def test_the_readme_torchrl_block_runs_and_resumes(tmp_path):
    check = ("\nassert td['next', 'obs'].shape == (256, 4) and 'priority_weight' in td.keys()\n"
             "print(len(rb), int(rb.extend(td[:1])[0]))\n")
    # The second run reopens the folder the first left.
    assert run_twice(block("torchrl") + check, tmp_path) == [["512", "512"], ["1025", "1025"]]
