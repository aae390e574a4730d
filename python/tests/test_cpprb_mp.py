"""Promise (issues 34, 53, cpprb): ``MPReplayBuffer`` and ``MPPrioritizedReplayBuffer``
are handed to explorer processes as cpprb's are (pickled by ``multiprocessing``), each
explorer's adds land in a lane of its own but take positions of one ring every process
sees (cpprb's counts, positions and clear), the learner samples and sets priorities
meanwhile, nothing is lost or counted twice, a displaced transition is never drawn, and
the priorities explorers give are the ones the learner draws by."""

import multiprocessing as mp

import numpy as np
import pytest

from peers import chi_square, peer

from replaystore.compat import cpprb as ad

ENV = {"obs": {"dtype": np.int64}, "rew": {}}
PER_EXPLORER = 300


def explorer(rb, k, barrier):
    barrier.wait()
    for start in range(0, PER_EXPLORER, 30):
        i = np.arange(start, start + 30) + k * 100_000
        rb.add(obs=i, rew=np.zeros(30), priorities=(i % 3 + 1).astype(float))


def test_explorer_processes_add_while_the_learner_samples_and_updates(tmp_path):
    ctx = mp.get_context("spawn")
    rb = ad.MPPrioritizedReplayBuffer(3 * 1024, ENV, alpha=1.0, eps=0.0, writers=3,
                                     path=str(tmp_path / "mp"))
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=explorer, args=(rb, k, barrier)) for k in range(3)]
    for p in procs:
        p.start()
    barrier.wait()
    drawn = set()
    while any(p.is_alive() for p in procs):
        if rb.get_stored_size():
            drawn.update(rb.sample(64)["obs"].ravel().tolist())
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert rb.get_stored_size() == 3 * PER_EXPLORER
    got = np.sort(rb.get_all_transitions()["obs"].ravel())
    want = np.sort(np.concatenate([np.arange(PER_EXPLORER) + k * 100_000 for k in range(3)]))
    np.testing.assert_array_equal(got, want)
    # Every transition carries the priority its explorer gave (i % 3 + 1).
    s = rb.sample(30_000)
    chi_square(np.bincount(s["obs"].ravel() % 3, minlength=3), [1.0, 2.0, 3.0])
    assert s["weights"].dtype == np.float32 and (s["weights"] <= 1.0).all()
    # The learner's updates land: priority 0 for every obs % 3 == 0 ends their draws.
    s = rb.sample(3000)
    rb.update_priorities(s["indexes"], np.where(s["obs"].ravel() % 3 == 0, 0.0, 1.0))
    drawn_after = rb.sample(3000)["obs"].ravel()
    zeroed = set(s["obs"].ravel()[s["obs"].ravel() % 3 == 0].tolist())
    assert not zeroed & set(drawn_after.tolist())
    rb.close()


def test_more_explorers_than_lanes_is_refused_with_the_fix(tmp_path):
    rb = ad.MPReplayBuffer(8, ENV, writers=1, path=str(tmp_path / "mp"))
    rb.add(obs=1, rew=0.0)
    code = (
        "import pickle, sys, numpy as np\n"
        f"rb = pickle.loads({__import__('pickle').dumps(rb)!r})\n"
        "try:\n    rb.add(obs=2, rew=0.0)\nexcept RuntimeError as e:\n    print(e)\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "all 1 lanes are held" in out.stdout and "writers=" in out.stdout, out
    rb.close()


def test_one_explorer_stores_and_returns_what_cpprb_does(tmp_path):
    cp = peer("cpprb")
    theirs = cp.MPReplayBuffer(12, ENV)
    ours = ad.MPReplayBuffer(12, ENV, writers=1, path=str(tmp_path / "mp"))
    for k in (1, 4, 2):
        i = np.arange(k) + ours.get_stored_size()
        assert ours.add(obs=i, rew=i * 0.5) == theirs.add(obs=i, rew=i * 0.5)
        assert ours.get_stored_size() == theirs.get_stored_size()
        assert ours.get_next_index() == theirs.get_next_index()
        a, b = theirs.get_all_transitions(), ours.get_all_transitions()
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape
            np.testing.assert_array_equal(a[key], b[key])
    assert ours.sample(5)["obs"].shape == theirs.sample(5)["obs"].shape == (5, 1)
    assert ours.get_buffer_size() == theirs.get_buffer_size() == 12
    assert ours.is_Nstep() is theirs.is_Nstep() is False
    ours.close()


def test_a_learner_reopens_the_lanes_after_a_crash(tmp_path):
    path = str(tmp_path / "mp")
    rb = ad.MPReplayBuffer(16, ENV, writers=2, path=path)
    rb.add(obs=np.arange(5), rew=np.zeros(5))
    rb.close()
    again = ad.MPReplayBuffer(16, ENV, writers=2, path=path)
    assert again.get_stored_size() == 5
    with pytest.raises(ValueError, match="writers"):
        ad.MPReplayBuffer(16, ENV, writers=4, path=path)
    again.close()


def test_contexts_backends_and_a_one_transition_buffer_are_taken_as_cpprb_takes_them(tmp_path):
    """cpprb's checks of ctx and backend, and size=1 with the default lane count (one
    lane per CPU, never more than transitions)."""
    from multiprocessing.context import ProcessError
    from multiprocessing.managers import SyncManager

    with SyncManager() as m:
        pass
    for cls in (ad.MPReplayBuffer, ad.MPPrioritizedReplayBuffer):
        with pytest.raises(ProcessError):
            cls(10, {"done": {}}, ctx=m)
        with pytest.raises(ValueError, match="Unknown backend"):
            cls(10, {"done": {}}, backend="UNKNOWN_BACKEND")
        cls(10, {"done": {}}, ctx=SyncManager()).close()  # unstarted: fine, as cpprb
        one = cls(1, {"done": {}})
        one.add(done=1.0)
        assert one.get_stored_size() == 1
        one.close()


def test_only_drawn_transitions_take_new_priorities_and_the_max_follows_them():
    """cpprb's unsampled mask: update_priorities of a transition never drawn is
    ignored; get_max_priority is the largest priority given or set so far."""
    rb = ad.MPPrioritizedReplayBuffer(4, {"done": {}}, writers=1)
    rb.add(done=[0.0, 1.0])
    assert rb.get_max_priority() == 1.0
    rb.update_priorities([0], [2.0])
    assert rb.get_max_priority() == 1.0
    drawn = rb.sample(8)["indexes"]
    rb.update_priorities(drawn[:1], [3.0])
    assert rb.get_max_priority() == 3.0
    rb.add(done=[1.0], priorities=[5.0])
    assert rb.get_max_priority() == 5.0
    rb.close()


def test_encode_sample_reads_ring_positions_and_zeros_where_nothing_was_written():
    cp = peer("cpprb")
    theirs = cp.MPReplayBuffer(8, {"obs": {"dtype": np.int64}})
    ours = ad.MPReplayBuffer(8, {"obs": {"dtype": np.int64}}, writers=2)
    for rb in (theirs, ours):
        rb.add(obs=np.arange(6))
    # cpprb's never-written positions hold whatever its memory held; ours read as zeros.
    assert ours._encode_sample(range(8))["obs"].ravel().tolist() == [0, 1, 2, 3, 4, 5, 0, 0]
    assert theirs._encode_sample(range(6))["obs"].ravel().tolist() == [0, 1, 2, 3, 4, 5]
    for rb in (theirs, ours):
        rb.add(obs=np.arange(6, 11))  # the ring wraps: positions 0..2 hold 8, 9, 10
    assert ours._encode_sample(range(8))["obs"].ravel().tolist() == \
        theirs._encode_sample(range(8))["obs"].ravel().tolist() == [8, 9, 10, 3, 4, 5, 6, 7]
    ours.close()


def _explore(rb, start, n):
    for i in range(start, start + n):
        rb.add(obs=np.array([i]))


def test_explorers_share_one_ring_of_positions_as_in_cpprb():
    """Two explorer processes fill one ring: the learner counts every add, the ring
    wraps over both, and a clear empties it for all, as cpprb's shared ring does."""
    ctx = mp.get_context("fork")
    rb = ad.MPReplayBuffer(64, {"obs": {"dtype": np.int64}}, writers=2)
    procs = [ctx.Process(target=_explore, args=(rb, k * 1000, 50)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert (rb.get_next_index(), rb.get_stored_size()) == (100 % 64, 64)
    got = rb.get_all_transitions()["obs"].ravel()
    # The 64 newest of the 100, each once; each explorer's in the order it added them.
    assert len(set(got.tolist())) == 64
    for k in range(2):
        mine = got[(got >= k * 1000) & (got < k * 1000 + 50)]
        assert sorted(mine.tolist()) == sorted(set(mine.tolist()))
    # One explorer alone may fill the whole ring.
    p = ctx.Process(target=_explore, args=(rb, 5000, 64))
    p.start()
    p.join()
    assert sorted(rb.get_all_transitions()["obs"].ravel().tolist()) == list(range(5000, 5064))
    rb.clear()
    assert (rb.get_next_index(), rb.get_stored_size()) == (0, 0)
    rb.add(obs=np.array([7]))
    assert rb.get_all_transitions()["obs"].ravel().tolist() == [7]
    rb.close()


def test_a_displaced_transition_is_never_drawn_by_priority():
    """Positions an add took again end the draws of what they held: the learner draws
    only transitions at positions, with cpprb's priorities."""
    rb = ad.MPPrioritizedReplayBuffer(8, {"obs": {"dtype": np.int64}}, alpha=1.0, eps=0.0, writers=2)
    rb.add(obs=np.arange(8), priorities=np.full(8, 100.0))
    rb.sample(1)  # this process owns the priorities from here
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_explore, args=(rb, 100, 5))  # another lane displaces 0..4
    p.start()
    p.join()
    s = rb.sample(2000)
    obs = s["obs"].ravel()
    assert set(obs.tolist()) <= set(range(5, 8)) | set(range(100, 105))
    assert set(obs.tolist()) & set(range(100, 105))
    assert (rb._encode_sample(s["indexes"])["obs"].ravel() == obs).all()
    rb.close()


def _second_reader(rb, out):
    s = rb.sample(4)
    try:
        rb.update_priorities(s["indexes"], np.ones(4))
        err = ""
    except RuntimeError as e:
        err = str(e)
    out.put((sorted(s.keys()), rb.get_all_transitions()["done"].ravel().tolist(), rb.get_stored_size(), err))


def test_a_second_process_reads_and_draws_by_priority_while_the_learner_owns_them():
    """cpprb lets any process sample a prioritized MP buffer (its Ray test samples in a
    worker while the driver holds the buffer): here the first reader owns the
    priorities and the others draw by them as they stand; updates belong to the owner."""
    rb = ad.MPPrioritizedReplayBuffer(10, {"done": {}}, writers=2)
    rb.add(done=[0.0, 1.0], priorities=[1.0, 0.1])
    assert rb.get_max_priority() == 1.0  # this process now owns the priorities
    out = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_second_reader, args=(rb, out))
    p.start()
    keys, done, stored, err = out.get(timeout=60)
    p.join(60)
    assert {"done", "weights", "indexes"} <= set(keys)
    assert (done, stored) == ([0.0, 1.0], 2)
    assert "owns this buffer's priorities" in err
    rb.update_priorities(rb.sample(2)["indexes"], [0.5, 0.5])  # the owner may
    rb.close()


def test_a_folder_of_lanes_without_a_position_table_is_refused_by_name(tmp_path):
    import json

    path = tmp_path / "mp"
    ad.MPReplayBuffer(16, ENV, writers=2, path=str(path)).close()
    settings = json.loads((path / "cpprb.json").read_text())
    del settings["layout"]
    settings["version"] = 1
    (path / "cpprb.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="earlier replaystore"):
        ad.MPReplayBuffer(16, ENV, writers=2, path=str(path))
