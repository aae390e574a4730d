"""Promise (issue 30): items can be removed before the ring overwrites them, from
Python: ``remove``, ``sample(remove=True)`` (UnstableBaselines'
``get_batch``), ``max_use`` (DI-engine's ``use_time_check``); removed items never come
back from any draw or read of the writer or a Reader; ``len``, ``stats`` and
``item_states`` say so; and a removal survives a kill -9 of the writer."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"x": "int64", "obs": "str", "reward": "float32"}


def steps(n, start=0):
    return {
        "x": np.arange(start, start + n, dtype=np.int64),
        "obs": [f"step {i}" for i in range(start, start + n)],
        "reward": np.ones(n, np.float32),
    }


def test_sample_remove_returns_distinct_items_once_and_removes_them(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 1000, item_states=True, seed=1)
    buf.add_batch(steps(100))
    seen = []
    while len(buf) > 0:
        b = buf.sample(min(32, len(buf)), remove=True)
        assert [int(x) for x in b["x"]] == b["indices"].tolist()
        assert b["obs"] == [f"step {i}" for i in b["x"]]
        seen += b["indices"].tolist()
    assert sorted(seen) == list(range(100))
    s = buf.stats()
    assert (s["len"], s["removed"], s["removals"]["sampled"]) == (0, 100, 100)
    with pytest.raises(rs.EmptyError):
        buf.sample(1)
    with pytest.raises(rs.RemovedError, match="item 5 was removed"):
        buf.get([5])
    # RemovedError is an EvictedError: code that catches evictions catches it.
    assert issubclass(rs.RemovedError, rs.EvictedError)
    buf.add_batch(steps(3, 100))
    with pytest.raises(rs.Error, match="only 3 are in range"):
        buf.sample(4, remove=True)
    assert len(buf) == 3


def test_remove_and_item_states_name_the_cause_and_count_uses(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 100, max_use=2, seed=3)
    buf.add_batch(steps(10))
    assert buf.remove([1, 2, 2]) == 2
    assert buf.remove(np.array([1], np.uint64)) == 0
    buf.get([0])  # a read: no use
    while len(buf) > 0:
        buf.sample(4)
    with pytest.raises(rs.EmptyError):
        buf.sample(4)
    st = buf.item_states(np.arange(10))
    assert st["removed"].dtype == np.bool_ and st["uses"].dtype == np.int64
    assert st["cause"][1] == "explicit" and st["cause"][2] == "explicit"
    # Drawn until nothing was left: every item not removed by hand was used up.
    assert all(c in ("explicit", "used_up") for c in st["cause"])
    assert all(u == 2 for u, c in zip(st["uses"], st["cause"]) if c == "used_up")
    assert buf.stats()["removals"]["used_up"] == 8
    with pytest.raises(rs.EvictedError):
        buf.remove([10])


def test_a_reader_never_draws_what_the_writer_removed(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 256, item_states=True, alpha=0.6)
    buf.add_batch(steps(200))
    reader = rs.Reader.open(tmp_path / "b")
    gone = set()
    for r in range(40):
        doomed = [(r * 13 + k * 37) % 200 for k in range(3)]
        buf.remove(doomed)
        gone.update(doomed)
        for beta in (None, 0.4):
            b = reader.sample(16, beta=beta)
            assert not gone & set(b["indices"].tolist())
        assert len(reader) == 200 - len(gone)
    st = reader.item_states(sorted(gone)[:3])
    assert st["removed"].all()
    assert reader.stats()["removed"] == len(gone)
    # A reader's draw by group skips removed items too, an even share each first.
    g = reader.sample(20, by_group=["reward"])
    assert len(set(g["indices"].tolist())) == 20 and not gone & set(g["indices"].tolist())


def test_calls_on_item_states_are_refused_by_name(tmp_path):
    plain = rs.ReplayBuffer.create(tmp_path / "p", SCHEMA, 10)
    plain.add_batch(steps(2))
    for call in (lambda: plain.remove([0]), lambda: plain.sample(1, remove=True),
                 lambda: plain.item_states([0])):
        with pytest.raises(rs.NoItemStatesError, match="item_states=True or max_use=N"):
            call()
    buf = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 10, item_states=True, alpha=0.6)
    buf.add_batch(steps(4))
    with pytest.raises(rs.Error, match="not rows drawn by priority"):
        buf.sample(2, beta=0.4, remove=True)
    assert len(buf) == 4


def test_a_pop_acknowledged_survives_kill_9_of_the_writer(tmp_path):
    path = str(tmp_path / "b")
    child = textwrap.dedent(
        f"""
        import sys, time, numpy as np, replaystore as rs
        buf = rs.ReplayBuffer.create({path!r}, {SCHEMA!r}, 500, item_states=True, seed=5)
        buf.add_batch({{"x": np.arange(300, dtype=np.int64),
                        "obs": [str(i) for i in range(300)],
                        "reward": np.zeros(300, np.float32)}})
        for _ in range(20):
            b = buf.sample(7, remove=True)
            print(" ".join(map(str, b["indices"].tolist())), flush=True)
        print("done", flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    popped = []
    for line in proc.stdout:
        if line.strip() == "done":
            break
        popped += [int(i) for i in line.split()]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(popped) == 140
    buf = rs.ReplayBuffer.open(path)
    assert len(buf) == 300 - 140
    assert buf.item_states(popped)["removed"].all()
    rest = buf.sample(160, remove=True)
    assert sorted(rest["indices"].tolist() + popped) == list(range(300))


def test_lanes_remove_and_pop_across_lanes(tmp_path):
    fixed = {"x": "int64", "reward": "float32"}
    lanes = rs.Lanes.create(tmp_path / "v", fixed, 200, 2, item_states=True, seed=2)
    batch = {"x": np.arange(40, dtype=np.int64), "reward": np.ones(40, np.float32)}
    idx = lanes.add_batch(batch, lanes=np.arange(40) % 2)
    assert lanes.remove(idx[:10]) == 10
    assert len(lanes) == 30
    seen = []
    while len(lanes):
        seen += lanes.sample(min(7, len(lanes)), remove=True)["indices"].tolist()
    assert sorted(seen) == sorted(idx[10:].tolist())
    assert sum(s["removals"]["sampled"] for s in lanes.stats()) == 30


def test_lanes_take_every_item_state_option_and_draw_by_group_over_lanes(tmp_path):
    fixed = {"x": "int64", "env": "uint8"}
    # Each lane keeps at most 30 items (downsampling per lane, moves past the lap).
    lanes = rs.Lanes.create(tmp_path / "v", fixed, 100, 2, max_size=30, seed=3)
    for k in range(10):
        n = 20
        batch = {"x": np.arange(k * n, (k + 1) * n, dtype=np.int64),
                 "env": (np.arange(n) % 3).astype(np.uint8)}
        lanes.add_batch(batch, lanes=np.arange(n) % 2)
    assert len(lanes) == 60
    stats = lanes.stats()
    assert all(s["len"] == 30 for s in stats)
    assert sum(s["removals"]["downsampled"] for s in stats) == 140
    assert sum(s["moved"] for s in stats) > 0
    b = lanes.sample(12, by_group=["env"], remove=True)
    assert sorted(np.bincount(b["env"], minlength=3).tolist())[0] >= 4
    states = lanes.item_states(b["indices"])
    assert list(states["cause"]) == ["sampled"] * 12
    assert len(lanes) == 48
    # A rate limiter per lane: MinSize refuses a draw before the lane has enough.
    limited = rs.Lanes.create(tmp_path / "w", fixed, 100, 2, min_size_to_sample=5)
    limited.add_batch({"x": np.arange(4, dtype=np.int64), "env": np.zeros(4, np.uint8)},
                      lanes=np.zeros(4, dtype=np.int64))
    with pytest.raises(rs.RateLimitedError):
        limited.sample(1)


def test_consume_is_a_queue_and_remove_stale_goes_by_tag(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 100, item_states=True)
    buf.add_batch(steps(10))
    buf.remove([1])
    assert buf.consume(3)["indices"].tolist() == [0, 2, 3]
    assert buf.consume(100)["x"].tolist() == [4, 5, 6, 7, 8, 9]
    with pytest.raises(rs.EmptyError):
        buf.consume(1)
    buf.add_batch(steps(10, 10))
    # The tag is `x`: items 10..14 are more than 3 behind 18.
    assert buf.remove_stale("x", 18, 3) == 5
    assert buf.stats()["removals"] == {
        "explicit": 1, "sampled": 0, "used_up": 0, "stale": 5, "consumed": 9,
        "downsampled": 0, "reservoir": 0,
    }


def test_max_size_downsamples_at_random_past_it(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 1000, max_size=50, seed=4)
    for i in range(0, 300, 30):
        buf.add_batch(steps(30, i))
        assert len(buf) == min(i + 30, 50)
    s = buf.stats()
    assert s["removals"]["downsampled"] == 250
    kept = [i for i, r in zip(range(300), buf.item_states(np.arange(300))["removed"]) if not r]
    # Random, not FIFO: some of the first 250 survive.
    assert len(kept) == 50 and min(kept) < 250


def test_pop_batch_is_sample_remove_behind_a_deprecation_warning(tmp_path):
    """``pop_batch`` is kept one release (the README showed it): it warns, naming the
    call that replaces it, and draws as ``sample(n, remove=True)`` does."""
    a = rs.ReplayBuffer.create(tmp_path / "a", SCHEMA, 100, item_states=True, seed=5)
    b = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 100, item_states=True, seed=5)
    for buf in (a, b):
        buf.add_batch(steps(40))
    with pytest.warns(DeprecationWarning, match=r"pop_batch\(n\) is sample\(n, remove=True\)"):
        old = a.pop_batch(10, by_group=["obs"])
    new = b.sample(10, remove=True, by_group=["obs"])
    assert old["indices"].tolist() == new["indices"].tolist()
    assert len(a) == len(b) == 30
    fixed = {"x": "int64", "reward": "float32"}
    lanes = rs.Lanes.create(tmp_path / "l", fixed, 64, 2, item_states=True, seed=2)
    batch = {"x": np.arange(20, dtype=np.int64), "reward": np.ones(20, np.float32)}
    lanes.add_batch(batch, lanes=np.arange(20) % 2)
    with pytest.warns(DeprecationWarning, match=r"Lanes.pop_batch"):
        assert len(lanes.pop_batch(6)["indices"]) == 6
    assert len(lanes) == 14
    assert not hasattr(rs.ReplayBuffer, "open_actor")


def test_sample_remove_by_group_draws_every_env_evenly(tmp_path):
    """UnstableBaselines' stratified_env: an even share of every env, then the rest."""
    buf = rs.ReplayBuffer.create(tmp_path / "b", SCHEMA, 1000, item_states=True, seed=1)
    envs = ["chess"] * 300 + ["go"] * 40 + ["poker"] * 12
    buf.add_batch({"x": np.arange(352, dtype=np.int64), "obs": envs,
                   "reward": np.zeros(352, np.float32)})
    b = buf.sample(30, by_group=["obs"], remove=True)
    got = {e: b["obs"].count(e) for e in ("chess", "go", "poker")}
    assert got == {"chess": 10, "go": 10, "poker": 10}
    b = buf.sample(8, by_group=["obs"])
    assert len(set(b["indices"].tolist())) == 8
    assert len(buf) == 322


def test_rate_limits_hold_calls_back_or_wait_for_the_other_process(tmp_path):
    buf = rs.ReplayBuffer.create(tmp_path / "m", SCHEMA, 100, min_size_to_sample=3)
    buf.add_batch(steps(2))
    with pytest.raises(rs.RateLimitedError, match="draws wait for 3 live"):
        buf.sample(1)
    buf.add_batch(steps(1, 2))
    assert len(buf.sample(8)["indices"]) == 8
    with pytest.raises(ValueError):
        buf.rate_limit_wait = -1.0
    # One draw per add: a reader in another process draws 20, waiting for the adds.
    path = str(tmp_path / "r")
    buf = rs.ReplayBuffer.create(path, SCHEMA, 100, samples_per_insert=1.0,
                                 min_size_to_sample=1, error_buffer=2.0)
    child = textwrap.dedent(
        f"""
        import replaystore as rs
        r = rs.Reader.open({path!r})
        r.rate_limit_wait = 20.0
        for _ in range(20):
            r.sample(1)
        print("done", flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    buf.rate_limit_wait = 20.0
    for i in range(21):
        buf.add_batch(steps(1, i))
    assert proc.stdout.readline().strip() == "done"
    assert proc.wait() == 0
    buf.rate_limit_wait = None
    # 21 added, 20 drawn: one more draw is within the buffer of 2; five more are not.
    with pytest.raises(rs.RateLimitedError):
        buf.sample(5)


def test_a_reservoir_keeps_old_items_as_often_as_new_ones(tmp_path):
    kept_old = 0
    for seed in range(40):
        buf = rs.ReplayBuffer.create(tmp_path / f"r{seed}", {"x": "int64"}, 40,
                                     reservoir=10, seed=seed)
        for i in range(200):
            buf.add(x=i)
        assert len(buf) == 10
        live = np.arange(buf.stats()["head"], buf.stats()["tail"])
        states = buf.item_states(live)
        xs = buf.get(live[~states["removed"]])["x"]
        kept_old += int((xs < 100).sum())
        assert buf.stats()["removals"]["reservoir"] == 190
    # Half the 200 items are older than 100: about half of the 400 kept.
    assert 150 < kept_old < 250, kept_old


class EpisodeBufferModel:
    """UnstableBaselines' ``EpisodeBuffer`` as its source reads: whole episodes, random
    ones dropped past ``max_buffer_size`` steps, ``get_batch`` shuffles them and pops
    whole ones until it has ``batch_size`` steps."""

    def __init__(self, max_buffer_size, rng):
        self.max, self.rng, self.episodes = max_buffer_size, rng, []

    def add(self, episode):
        self.episodes.append(episode)
        while sum(map(len, self.episodes)) > self.max:
            self.episodes.remove(self.rng.choice(self.episodes))

    def get_batch(self, batch_size):
        assert sum(map(len, self.episodes)) >= batch_size
        self.rng.shuffle(self.episodes)
        out, steps = [], 0
        for ep in self.episodes:
            out.append(ep)
            steps += len(ep)
            if steps >= batch_size:
                break
        for ep in out:
            self.episodes.remove(ep)
        return out

    def size(self):
        return sum(map(len, self.episodes))


def test_fragments_behave_as_unstable_baselines_episode_buffer(tmp_path):
    import random

    schema = {"episode": "int64", "obs": "str", "reward": "float32"}
    buf = rs.ReplayBuffer.create(
        tmp_path / "b", schema, 2000, fragments=True, max_size=60, seed=4
    )
    model = EpisodeBufferModel(60, random.Random(4))
    popped = set()
    for e in range(120):
        n = 3  # equal lengths: the sizes of model and buffer match step for step
        ep = [f"episode {e} step {t}" for t in range(n)]
        buf.add_batch({"episode": np.full(n, e), "obs": ep, "reward": np.ones(n, np.float32)})
        model.add(ep)
        assert len(buf) == model.size() <= 60
        if e % 10 == 9:
            b = buf.sample_fragments(covering=10, remove=True)
            want = model.get_batch(10)
            offsets = b["offsets"].tolist()
            assert len(offsets) - 1 == len(want) == 4  # 3 + 3 + 3 < 10 <= 12
            for a, z in zip(offsets, offsets[1:]):
                eps = set(b["episode"][a:z].tolist())
                assert len(eps) == 1 and z - a == 3
                (k,) = eps
                assert b["obs"][a:z] == [f"episode {k} step {t}" for t in range(3)]
                assert k not in popped
                popped.add(k)
            assert len(buf) == model.size()
    s = buf.stats()
    assert s["removals"]["sampled"] == 3 * len(popped)
    assert s["removals"]["downsampled"] == 360 - len(buf) - 3 * len(popped)
    # A popped episode never comes back, whole or as rows.
    for _ in range(20):
        b = buf.sample_fragments(8)
        assert not set(b["episode"].tolist()) & popped
        assert not set(buf.sample(32)["episode"].tolist()) & popped
    with pytest.raises(ValueError, match="not both"):
        buf.sample_fragments(2, covering=3)
    with pytest.raises(rs.Error, match="whole fragments hold"):
        buf.sample_fragments(covering=10_000)


def test_sample_groups_draws_whole_groups_and_windows_as_di_engine_groupby(tmp_path):
    schema = {"env": "str", "t": "int64"}
    buf = rs.ReplayBuffer.create(tmp_path / "b", schema, 500, item_states=True, seed=2)
    envs = ["a", "b", "c", "d"]
    model = {e: [] for e in envs}
    for t in range(60):
        e = envs[(t * 7) % 4 if t % 5 else 0]
        buf.add(env=e, t=t)
        model[e].append(t)
    g = buf.sample_groups(4, "env", replace=False)
    offsets = g["offsets"].tolist()
    got = {}
    for a, z in zip(offsets, offsets[1:]):
        (e,) = set(g["env"][a:z])
        got[e] = g["t"][a:z].tolist()
    assert got == model
    w = buf.sample_groups(200, ["env"], unroll=3)
    assert len(w["offsets"]) == 201 and len(w["t"]) == 600
    for k in range(200):
        ts = w["t"][3 * k : 3 * k + 3].tolist()
        items = model[w["env"][3 * k]]
        s = items.index(ts[0])
        assert ts == items[s : s + 3]
    popped = buf.sample_groups(1, "env", remove=True)
    assert len(buf) == 60 - len(popped["t"])
    left = buf.sample_groups(3, "env", replace=False)
    assert popped["env"][0] not in set(left["env"])
    with pytest.raises(rs.Error, match="groups"):
        buf.sample_groups(4, "env", replace=False)


def test_max_size_and_reservoir_together_are_refused_not_one_silently_replacing_the_other(tmp_path):
    with pytest.raises(ValueError, match="give one"):
        rs.ReplayBuffer.create(str(tmp_path / "b"), {"x": "int64"}, 100, max_size=10, reservoir=10)
    assert not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match="give one"):
        rs.BufferGroup.create(str(tmp_path / "g"), {"x": "int64"}, 100, max_size=10, reservoir=10)
    with pytest.raises(rs.Error, match="min_size_to_sample"):
        rs.ReplayBuffer.create(str(tmp_path / "c"), {"x": "int64"}, 100, min_size_to_sample=2**63)
    assert not (tmp_path / "c").exists()
