"""Promise (issue 35): replaystore.compat.ding behaves as DI-engine's own buffers: the
DequeBuffer with every middleware, and the legacy Naive, Advanced and Episode buffers
with their EasyDict configs and create_buffer. Driven with the same calls and the same
random state, each holds the same records, returns the same data and metas, counts the
same and raises the same errors; its state and files restore; a reopened folder (after
kill -9 too) holds every record it had.

DI-engine pins numpy<2 (Ray's pyarrow needs numpy>=2), so these tests run in their own
virtualenv, target/di-venv (test.sh)."""

import copy
import os
import random
import tempfile

import numpy as np
import pytest

from alike import alike
from peers import peer

peer("ding")

import torch  # noqa: E402
from ding.data.buffer import BufferedData  # noqa: E402
from ding.data.buffer import DequeBuffer as TheirDeque  # noqa: E402
from ding.data.buffer.middleware import (  # noqa: E402
    PriorityExperienceReplay,
    clone_object,
    group_sample,
    padding,
    sample_range_view,
    staleness_check,
    use_time_check,
)
from ding.worker.replay_buffer import AdvancedReplayBuffer as TheirAdvanced  # noqa: E402
from ding.worker.replay_buffer import EpisodeReplayBuffer as TheirEpisode  # noqa: E402
from ding.worker.replay_buffer import NaiveReplayBuffer as TheirNaive  # noqa: E402
from ding.worker.replay_buffer import create_buffer as their_create_buffer  # noqa: E402
from easydict import EasyDict  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import replaystore  # noqa: E402
from replaystore.compat import ding as ours  # noqa: E402
from replaystore.compat.ding import _deque  # noqa: E402


@pytest.fixture(autouse=True)
def small_rings(monkeypatch, tmp_path):
    monkeypatch.setattr(_deque, "START_HEAP", 1 << 13)
    # DI-engine's legacy buffers log under ./EXP_NAME/log (an absolute name too): in the
    # test's folder, not the checkout.
    monkeypatch.chdir(tmp_path)


def _ding_leaf(x, y, path):
    if isinstance(x, BufferedData):
        assert isinstance(y, BufferedData), (path, type(y))
        same(x.data, y.data, path + ".data")
        same(x.meta, y.meta, path + ".meta")
        return True
    if isinstance(x, torch.Tensor):
        assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), (path, x, y)
        return True
    return False


def same(x, y, path=""):
    """DI-engine's ``x`` equals the adapter's ``y`` in type, data and meta (a record's
    ``index`` and a legacy item's ``replay_unique_id`` are fresh in each buffer; the
    legacy adapter's stored dicts read back as a dict subclass)."""
    alike(x, y, path, skip=("replay_unique_id",), leaf=_ding_leaf, strict_dicts=False)


def both(a, b, call, seed):
    """``call`` on DI-engine's buffer and on the adapter, from the same random state;
    returns both results, or both exception types."""
    out = []
    for buf in (a, b):
        random.seed(seed)
        np.random.seed(seed)
        try:
            out.append(call(buf))
        except Exception as e:  # noqa: BLE001 - the type is what is compared
            out.append(type(e))
    if isinstance(out[0], type) or isinstance(out[1], type):
        assert out[0] == out[1], out
    return out


def records(buf):
    """A buffer's records (data without DI-engine's PER write-back, meta)."""
    return [({k: v for k, v in r.data.items() if k != "priority_IS"}, r.meta) for r in buf.storage]


MIDDLEWARE = {
    "none": lambda buf: [],
    "per": lambda buf: [PriorityExperienceReplay(buf, IS_weight=True)],
    "per-no-IS": lambda buf: [PriorityExperienceReplay(buf, IS_weight=False, priority_power_factor=0.8)],
    "use_time_check": lambda buf: [use_time_check(buf, max_use=2)],
    "clone_object": lambda buf: [clone_object()],
    "staleness_check": lambda buf: [staleness_check(buf, max_staleness=6)],
    "sample_range_view": lambda buf: [sample_range_view(buf, start=-8)],
    "padding": lambda buf: [padding()],
    "group_sample": lambda buf: [group_sample(size_in_group=2)],
}


def draws(kind):
    if kind in ("padding", "group_sample"):
        return [dict(size=2, groupby="env"), dict(size=2, groupby="env", unroll_len=2, replace=True)]
    if kind.startswith("per"):
        return [dict(size=4), dict(size=6, replace=True)]
    if kind == "staleness_check":
        return [dict(size=3, train_iter_sample_data=0)]
    return [dict(size=4), dict(size=6, replace=True), dict(size=2, groupby="env"),
            dict(size=2, groupby="env", unroll_len=2), dict(size=30, ignore_insufficient=True),
            dict(size=3, sample_range=slice(2, 9))]


@pytest.mark.parametrize("kind", sorted(MIDDLEWARE))
def test_deque_buffer_with_each_middleware_is_di_engines(tmp_path, kind):
    a, b = TheirDeque(size=20), ours.DequeBuffer(size=20, path=str(tmp_path / "d"))
    for buf in (a, b):
        for mw in MIDDLEWARE[kind](buf):
            buf.use(mw)
    for i in range(40):
        data = {"obs": torch.full((3,), float(i)), "r": i}
        meta = {"env": i % 3, "train_iter_data_collected": i // 2}
        if kind.startswith("per"):
            meta["priority"] = 1.0 + i % 4
        same(*both(a, b, lambda buf: buf.push(dict(data), dict(meta)), i))
        assert a.count() == b.count()
        if a.count() >= 5:
            for k, args in enumerate(draws(kind)):
                if kind == "staleness_check":
                    args = dict(args, train_iter_sample_data=i // 2)
                x, y = both(a, b, lambda buf: buf.sample(**args), 100 * i + k)
                if not isinstance(x, type):
                    same(x, y)
            if kind.startswith("per") and not isinstance(x, type):
                for u, v in zip(x[:2], y[:2]):
                    for buf, rec in ((a, u), (b, v)):
                        meta = dict(rec.meta, priority=0.5 + i)
                        buf.update(rec.index, rec.data, meta)
        same(records(a), records(b))
    # delete: DI-engine's own (it rebuilds its index map from the first records only).
    for pick in (0, 3):
        if a.count() <= pick:
            continue
        x, y = a.get(pick).index, b.get(pick).index
        both(a, b, lambda buf: buf.delete(x if buf is a else y), pick)
        same(records(a), records(b))
    assert (a.count(), len(a.indices)) == (b.count(), len(b.indices))
    both(a, b, lambda buf: buf.clear(), 0)
    assert a.count() == b.count() == 0
    b.close()


def test_deque_buffer_calls_errors_and_lookups_are_di_engines(tmp_path):
    a, b = TheirDeque(size=5), ours.DequeBuffer(size=5, path=str(tmp_path / "e"))
    both(a, b, lambda buf: buf.sample(3), 0)  # empty: ValueError in both
    for i in range(7):
        both(a, b, lambda buf: buf.push({"i": i}, {"g": i % 2}), i)
    both(a, b, lambda buf: buf.sample(), 1)  # neither size nor indices: AssertionError
    both(a, b, lambda buf: buf.sample(9), 2)  # more than stored: ValueError
    both(a, b, lambda buf: buf.sample(2, indices=["x"]), 3)  # size and indices disagree
    same(*both(a, b, lambda buf: buf.sample(9, ignore_insufficient=True), 4))
    same(a.get(1), b.get(1))
    same(a.get_by_index(a.get(2).index), b.get_by_index(b.get(2).index))
    same(a.sample(indices=[a.get(4).index, a.get(0).index]), b.sample(indices=[b.get(4).index, b.get(0).index]))
    assert a.update("missing", {"x": 1}) is b.update("missing", {"x": 1}) is False
    assert a.update(a.get(0).index, {"i": 99}) is b.update(b.get(0).index, {"i": 99}) is True
    same(records(a), records(b))
    assert [r.data for r in a] == [r.data for r in b]
    view_a, view_b = a.view(), b.view()
    view_b.push({"i": 100})
    view_a.push({"i": 100})
    same(records(a), records(b))
    assert b.count() == 5 and view_b.storage is b.storage
    b.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_call_sequences_match_di_engine(data):
    """Property: any sequence of pushes, draws, updates and deletes, with or without
    priorities, leaves the adapter equal to DI-engine (or both raise alike)."""
    size = data.draw(st.integers(1, 12))
    kind = data.draw(st.sampled_from(["none", "per", "use_time_check"]))
    a, b = TheirDeque(size=size), ours.DequeBuffer(size=size, path=tempfile.mkdtemp() + "/p")
    for buf in (a, b):
        for mw in MIDDLEWARE[kind](buf):
            buf.use(mw)
    for step, op in enumerate(data.draw(st.lists(st.sampled_from("ppsud"), max_size=30))):
        if op == "p":
            meta = {"env": step % 3} | ({"priority": 0.5 + step % 3} if kind == "per" else {})
            both(a, b, lambda buf: buf.push({"step": step}, dict(meta)), step)
        elif op == "s" and a.count():
            n = data.draw(st.integers(1, 5))
            replace = data.draw(st.booleans())
            x, y = both(a, b, lambda buf: buf.sample(n, replace=replace, ignore_insufficient=True), step)
            if not isinstance(x, type):
                same(x, y)
        elif op == "u" and a.count():
            pick = data.draw(st.integers(0, a.count() - 1))
            both(a, b, lambda buf: buf.update(buf.get(pick).index, {"step": -step}, dict(buf.get(pick).meta)), step)
        elif op == "d" and a.count():
            pick = data.draw(st.integers(0, a.count() - 1))
            both(a, b, lambda buf: buf.delete(buf.get(pick).index), step)
        assert a.count() == b.count()
        same(records(a), records(b))
    b.close()


def test_save_data_is_a_snapshot_and_di_engines_files_load(tmp_path):
    path = str(tmp_path / "s")
    b = ours.DequeBuffer(size=8, path=path)
    for i in range(11):
        b.push({"i": torch.tensor([i])}, {"m": i})
    b.save_data(str(tmp_path / "state.bin"))
    before = records(b)
    for i in range(3):
        b.push({"i": torch.tensor([100 + i])}, {"m": -i})
    b.close()
    fresh = ours.DequeBuffer(size=8, path=path)
    assert len(records(fresh)) == 8
    fresh.load_data(str(tmp_path / "state.bin"))
    same(before, records(fresh))
    fresh.push({"i": torch.tensor([7])})  # and it goes on from there
    assert fresh.count() == 8
    fresh.close()
    # DI-engine's own file (hickle) loads into the adapter.
    theirs = TheirDeque(size=8)
    for i in range(5):
        theirs.push({"i": torch.tensor([i])}, {"m": i})
    theirs.save_data(str(tmp_path / "theirs.hkl"))
    other = ours.DequeBuffer(size=8, path=str(tmp_path / "o"))
    other.load_data(str(tmp_path / "theirs.hkl"))
    same(records(theirs), records(other))
    assert other.get_by_index(theirs.get(2).index).meta == {"m": 2}
    # A snapshot of another folder loads into this one (DI-engine's load_data on a new
    # buffer): the records of the state, and the buffer goes on from them.
    other.load_data(str(tmp_path / "state.bin"))
    same(before, records(other))
    other.push({"i": torch.tensor([9])})
    assert other.count() == 8
    other.close()
    reopened = ours.DequeBuffer(size=8, path=str(tmp_path / "o"))
    assert records(reopened)[-1][0]["i"].item() == 9
    reopened.close()


def test_a_reopened_buffer_gives_a_new_priority_middleware_its_priorities(tmp_path):
    path = str(tmp_path / "r")
    b = ours.DequeBuffer(size=6, path=path)
    per = PriorityExperienceReplay(b, IS_weight=True)
    b.use(per)
    for i in range(9):
        b.push({"i": i}, {"priority": float(i + 1)})
    for rec in list(b.storage)[:2]:
        b.update(rec.index, rec.data, dict(rec.meta, priority=50.0))
    tree = [per.sum_tree[i] for i in range(6)]
    b.close()
    b = ours.DequeBuffer(size=6, path=path)
    again = PriorityExperienceReplay(b, IS_weight=True)
    b.use(again)
    # The metas' priorities: DI-engine adds 1e-5 to an updated one in its tree only.
    np.testing.assert_allclose([again.sum_tree[i] for i in range(6)], tree, rtol=1e-6)
    assert again.pivot == per.pivot and again.max_priority == pytest.approx(per.max_priority)
    assert len(b.sample(4)) == 4
    b.close()


# -- legacy buffers -------------------------------------------------------------------------

def config(cls, **over):
    cfg = EasyDict(copy.deepcopy(cls.config))
    cfg.update(over)
    return cfg


LEGACY = [
    (TheirNaive, ours.NaiveReplayBuffer, {}),
    (TheirNaive, ours.NaiveReplayBuffer, {"deepcopy": True}),
    (TheirEpisode, ours.EpisodeReplayBuffer, {}),
    (TheirAdvanced, ours.AdvancedReplayBuffer, {"max_use": 3, "max_staleness": 40}),
    (TheirAdvanced, ours.AdvancedReplayBuffer, {"alpha": 0.0, "beta": 1.0, "anneal_step": 10}),
]


@pytest.mark.parametrize("theirs_cls,ours_cls,over", LEGACY, ids=["naive", "naive-deepcopy", "episode", "advanced", "advanced-anneal"])
def test_legacy_buffers_are_di_engines(tmp_path, theirs_cls, ours_cls, over):
    cfg = config(theirs_cls, replay_buffer_size=16, **over)
    log = str(tmp_path / "exp")
    a = theirs_cls(cfg, exp_name=log, instance_name="a")
    path = str(tmp_path / "l")
    b = ours_cls(copy.deepcopy(cfg), exp_name=log, instance_name="b", path=path)
    for i in range(30):
        items = [{"obs": torch.full((2,), float(10 * i + j)), "r": 10 * i + j, "collect_iter": i}
                 for j in range(1 + i % 3)]
        both(a, b, lambda buf: buf.push(copy.deepcopy(items) if i % 2 else copy.deepcopy(items[0]),
                                        cur_collector_envstep=i), i)
        assert (a.count(), a._tail, a.push_count) == (b.count(), b._tail, b.push_count)
        if a.count() >= 4:
            x, y = both(a, b, lambda buf: buf.sample(3, cur_learner_iter=i), 100 + i)
            same(x, y)
            if theirs_cls is TheirAdvanced and x is not None:
                info = {"replay_unique_id": [d["replay_unique_id"] for d in x],
                        "replay_buffer_idx": [d["replay_buffer_idx"] for d in x],
                        "priority": [0.5 + k for k in range(len(x))]}
                a.update(info)
                b.update(dict(info, replay_unique_id=[d["replay_unique_id"] for d in y]))
            elif theirs_cls is not TheirAdvanced:
                same(*both(a, b, lambda buf: buf.sample(5, cur_learner_iter=i, replace=True), 200 + i))
                same(*both(a, b, lambda buf: buf.sample(2, cur_learner_iter=i, sample_range=slice(-6, None)), 300 + i))
    if theirs_cls is TheirEpisode:
        assert a.episode_len == b.episode_len
    same(list(a._data), list(b._data))
    # A copy of _data is a list of the items, as DI-engine's list copies (its own tests
    # deepcopy it), and changing the copy changes nothing stored.
    copied = copy.deepcopy(b._data)
    assert type(copied) is list and type(copy.copy(b._data)) is list
    same(copy.deepcopy(a._data), copied)
    for d in copied:
        if d is not None:
            d["r"] = -1
    same(list(a._data), list(b._data))
    state = b.state_dict()
    assert "replaystore" in state["data"]
    b.close()

    b = ours_cls(copy.deepcopy(cfg), exp_name=log, instance_name="b", path=path)  # reopened
    assert (a.count(), a._tail, a.push_count) == (b.count(), b._tail, b.push_count)
    strip = ("staleness", "use", "IS", "priority") if theirs_cls is TheirAdvanced else ()
    plain = lambda data: [None if d is None else {k: v for k, v in d.items() if k not in strip} for d in data]  # noqa: E731
    same(plain(a._data), plain(b._data))
    b.load_state_dict(state)  # the snapshot, with DI-engine's counters and overlays
    same(list(a._data), list(b._data))
    same(*both(a, b, lambda buf: buf.sample(4, cur_learner_iter=40), 7))
    b.close()
    a.close()


def test_create_buffer_makes_the_adapter_of_each_type(tmp_path):
    for kind, cls, theirs_cls in (("naive", ours.NaiveReplayBuffer, TheirNaive),
                                  ("advanced", ours.AdvancedReplayBuffer, TheirAdvanced),
                                  ("episode", ours.EpisodeReplayBuffer, TheirEpisode)):
        cfg = config(theirs_cls, type=kind, replay_buffer_size=8, path=str(tmp_path / kind))
        buf = ours.create_buffer(cfg, exp_name=str(tmp_path / "exp"), instance_name=kind)
        theirs = their_create_buffer(config(theirs_cls, type=kind, replay_buffer_size=8),
                                     exp_name=str(tmp_path / "exp"), instance_name=kind)
        assert isinstance(buf, cls) and isinstance(buf, type(theirs))
        assert os.path.isdir(str(tmp_path / kind)) or buf.count() == 0
        buf.close()
        theirs.close()
    with pytest.raises(KeyError):
        ours.create_buffer(EasyDict(type="nope"))


# -- kill -9 ----------------------------------------------------------------------------------

KILLED = {
    "deque": ("""
        from replaystore.compat.ding import DequeBuffer
        buf = DequeBuffer(size=200, path={path!r})
        i = 0
        while True:
            buf.push({{"i": i}}, {{"m": i}})
            i += 1
            print(i, flush=True)
    """, lambda path: ours.DequeBuffer(size=200, path=path),
        lambda buf: [(r.data["i"], r.meta["m"]) for r in buf.storage]),
    "naive": ("""
        import copy
        from easydict import EasyDict
        from replaystore.compat.ding import NaiveReplayBuffer
        cfg = EasyDict(copy.deepcopy(NaiveReplayBuffer.config)); cfg.replay_buffer_size = 200
        import os
        os.chdir({log!r})
        buf = NaiveReplayBuffer(cfg, exp_name="exp", path={path!r})
        i = 0
        while True:
            buf.push({{"i": i}}, 0)
            i += 1
            print(i, flush=True)
    """, lambda path: ours.NaiveReplayBuffer(config(TheirNaive, replay_buffer_size=200), exp_name=path + "-log", path=path),
        lambda buf: [(d["i"], d["i"]) for d in buf._data if d is not None]),
}


@pytest.mark.parametrize("kind", sorted(KILLED))
def test_a_killed_trainer_resumes_with_every_record_it_pushed(tmp_path, kind):
    from kill import run_until_killed

    path = str(tmp_path / "k")
    code, reopen, held = KILLED[kind]
    os.makedirs(path + "-log", exist_ok=True)
    acked = run_until_killed(code.format(path=path, log=path + "-log"), 350)[-1]
    buf = reopen(path)
    got = sorted(held(buf))
    newest = got[-1][0] + 1
    assert newest in (acked, acked + 1)  # every acknowledged push, and the one cut at most
    assert [i for i, _ in got] == list(range(newest - 200, newest))
    assert all(i == m for i, m in got)
    if kind == "deque":
        buf.push({"i": newest}, {"m": newest})
        assert buf.count() == 200 and buf.storage[-1].data == {"i": newest}
    else:
        assert buf._tail == newest % 200 and buf.push_count == newest
    buf.close()


def test_save_data_restores_in_another_process(tmp_path):
    """A DequeBuffer's save_data and a legacy buffer's state_dict are O(1) snapshots:
    another process opens the folders, restores them and draws what this one draws."""
    import pickle
    import subprocess
    import sys
    import textwrap

    deque_buf = ours.DequeBuffer(size=30, path=str(tmp_path / "d"))
    naive = ours.NaiveReplayBuffer(config(TheirNaive, replay_buffer_size=30), exp_name=str(tmp_path / "x"),
                                   path=str(tmp_path / "n"))
    for i in range(40):
        deque_buf.push({"obs": torch.full((2,), float(i)), "i": i}, {"m": i})
        naive.push({"obs": np.full(2, i, np.float32), "i": i}, 0)
    deque_buf.save_data(str(tmp_path / "d.state"))
    with open(tmp_path / "n.state", "wb") as f:
        pickle.dump(naive.state_dict(), f)
    random.seed(5)
    np.random.seed(5)
    here = (deque_buf.sample(6), naive.sample(6, cur_learner_iter=0))
    for i in range(5):  # pushed after the snapshots: the restores drop them
        deque_buf.push({"obs": torch.zeros(2), "i": -i}, {"m": -i})
        naive.push({"obs": np.zeros(2, np.float32), "i": -i}, 0)
    deque_buf.close()
    naive.close()
    code = textwrap.dedent(f"""
        import copy, pickle, random, numpy as np
        from easydict import EasyDict
        from replaystore.compat import ding
        d = ding.DequeBuffer(size=30, path={str(tmp_path / "d")!r})
        d.load_data({str(tmp_path / "d.state")!r})
        cfg = EasyDict(copy.deepcopy(ding.NaiveReplayBuffer.config)); cfg.replay_buffer_size = 30
        n = ding.NaiveReplayBuffer(cfg, exp_name={str(tmp_path / "x")!r}, path={str(tmp_path / "n")!r})
        n.load_state_dict(pickle.load(open({str(tmp_path / "n.state")!r}, "rb")))
        random.seed(5)
        np.random.seed(5)
        there = ([(r.data, r.meta) for r in d.sample(6)], n.sample(6, cur_learner_iter=0))
        pickle.dump(there, open({str(tmp_path / "there.pkl")!r}, "wb"))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with open(tmp_path / "there.pkl", "rb") as f:
        there = pickle.load(f)
    same([(r.data, r.meta) for r in here[0]], there[0])
    same(here[1], there[1])


def test_drawn_records_read_their_data_once_used_and_keep_what_they_held(tmp_path):
    """A draw hands out records whose data is read from the ring when first used (a
    group draw of thousands costs no read until then): the data is what the records
    held when drawn, even after pushes evict them, and each is an object of its own."""
    import pickle

    b = ours.DequeBuffer(size=4, path=str(tmp_path / "d"))
    for i in range(4):
        b.push({"i": torch.tensor([i])}, {"m": i})
    random.seed(5)
    drawn = b.sample(3, replace=True)
    kept = [r.meta["m"] for r in drawn]
    for i in range(4, 9):  # every drawn record is evicted before its data is used
        b.push({"i": torch.tensor([i])}, {"m": i})
    assert [r.data["i"].item() for r in drawn] == kept
    # Each drawn record's data is its own: changing it changes nothing stored, and a
    # record drawn twice is two objects (DI-engine copies repeats).
    twice = b.sample(6, replace=True)
    assert len({id(r.data) for r in twice}) == 6
    twice[0].data["i"] += 100
    assert sorted(r.data["i"].item() for r in b.storage) == [5, 6, 7, 8]
    # Pickled or deep-copied, a drawn record is DI-engine's own BufferedData.
    back = pickle.loads(pickle.dumps(twice[1]))
    assert type(back) is BufferedData and back.index == twice[1].index
    assert type(copy.deepcopy(twice[2])) is BufferedData
    # With clone_object, each draw's data is a copy too.
    b.use(clone_object())
    x, y = b.sample(2, replace=False)
    x.data["i"] += 1
    assert sorted(r.data["i"].item() for r in b.storage) == [5, 6, 7, 8]
    b.close()


def test_a_legacy_slot_read_twice_while_held_is_the_same_dict_as_in_di_engine(tmp_path):
    """DI-engine's NaiveReplayBuffer hands out its stored dicts: a draw and ``_data[i]``
    are the same object (its own test compares them with ``==``, which holds by
    identity for array values). While the adapter's item is held, so is it."""
    theirs = TheirNaive(config(TheirNaive, replay_buffer_size=8), exp_name=str(tmp_path / "t"))
    ours_buf = ours.NaiveReplayBuffer(config(TheirNaive, replay_buffer_size=8), exp_name=str(tmp_path / "o"),
                                      path=str(tmp_path / "n"))
    for buf in (theirs, ours_buf):
        for i in range(8):
            buf.push({"obs": np.arange(4) + i, "data_id": str(i)}, 0)
        last = buf.sample(1, 0, sample_range=slice(-1, None))
        assert last[0] == buf._data[-1]
        assert last[0] is buf._data[-1]
        # A new item in that slot is another object.
        buf.push({"obs": np.zeros(4), "data_id": "new"}, 0)
        assert buf._data[0] is not last[0]
    ours_buf.close()


def test_a_state_of_other_records_is_refused_and_the_buffer_goes_on(tmp_path):
    """load_data of a snapshot whose records have another layout (other leaves) is a
    StateError naming it; the buffer keeps its records, pushes, grows and loads on."""
    import replaystore as rs

    a = ours.DequeBuffer(size=8, path=str(tmp_path / "a"))
    for i in range(5):
        a.push({"i": torch.tensor([i])}, {"m": i})
    a.save_data(str(tmp_path / "a.bin"))
    b = ours.DequeBuffer(size=8, path=str(tmp_path / "b"))
    for i in range(3):
        b.push({"x": np.zeros(3) + i}, {"m": i})
    before = records(b)
    with pytest.raises(rs.StateError, match="schema"):
        b.load_data(str(tmp_path / "a.bin"))
    same(before, records(b))
    for i in range(3, 40):  # past the first ring's heap (1 MiB): a new generation is made
        b.push({"x": np.zeros(3) + i, "big": np.zeros(20_000) + i}, {"m": i})
    assert [r[1]["m"] for r in records(b)] == list(range(32, 40))
    b.save_data(str(tmp_path / "b.bin"))
    fresh = ours.DequeBuffer(size=8, path=str(tmp_path / "c"))
    fresh.load_data(str(tmp_path / "b.bin"))
    same(records(b), records(fresh))
    for buf in (a, b, fresh):
        buf.close()


def test_records_larger_than_the_value_space_limit_are_refused_and_nothing_is_dropped(tmp_path):
    # DI-engine keeps every record until size; so does the adapter, its ring growing,
    # until heap_bytes: past it a push is refused with nothing added.
    big = lambda k: {"obs": torch.full((64_000,), float(k)), "k": k}  # ~256 KB pickled
    theirs, mine = TheirDeque(size=50), ours.DequeBuffer(size=50, path=str(tmp_path / "d"))
    for k in range(20):
        theirs.push(big(k))
        mine.push(big(k))
    assert mine.count() == theirs.count() == 20
    assert [d["k"] for d, _ in records(mine)] == [d["k"] for d, _ in records(theirs)] == list(range(20))
    mine.close()
    # Tensors are columns of their own; what is pickled (bytes here) takes value space.
    blob = lambda k: {"blob": bytes([k]) * 256_000, "k": k}  # noqa: E731
    small = ours.DequeBuffer(size=50, path=str(tmp_path / "s"), heap_bytes=2 << 20)
    with pytest.raises(replaystore.ValueSpaceFullError, match="heap_bytes=") as e:
        for k in range(20):
            held = small.count()
            small.push(blob(k))
    assert 0 < held == small.count() < 20
    assert [d["k"] for d, _ in records(small)] == list(range(held))
    assert "Config::" not in str(e.value)
    small.close()
