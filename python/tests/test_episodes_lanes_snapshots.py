"""Promise: the engine's episode draws (n-step and stacked transitions, sequences, whole
episodes), its lanes and its snapshots reach Python with their meaning intact: every
array a draw returns agrees with the steps that were added (issue 9)."""

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"obs": ("float32", (2,)), "action": "int64", "reward": "float32"}
# Episode e has STEPS[e] steps and ends as ENDS[e] ("term", "trunc" or None: still open).
STEPS = [3, 2, 4, 2]
ENDS = ["term", "trunc", "term", None]


def obs(ep, t):
    """The observation at step t of episode ep: its position, so any row can be checked."""
    return np.array([t, ep], np.float32)


def fill(buf):
    """Adds the episodes; returns what each add reported."""
    reports = []
    for ep, (steps, end) in enumerate(zip(STEPS, ENDS)):
        reports.append(buf.add_reset(obs=obs(ep, 0)))
        for t in range(1, steps + 1):
            last = t == steps
            reports.append(
                buf.add_step(
                    obs=obs(ep, t),
                    action=10 * ep + t,
                    reward=float(t),
                    terminated=last and end == "term",
                    truncated=last and end == "trunc",
                )
            )
    return reports


@pytest.fixture
def episodic(tmp_path):
    with rs.ReplayBuffer.create(str(tmp_path / "ep"), SCHEMA, 64, episodic=True, seed=5) as buf:
        reports = fill(buf)
        yield buf, reports


def test_steps_report_their_episode_and_the_return_when_it_ends(episodic):
    buf, reports = episodic
    assert reports[0] == {"index": 0, "episode": 0, "t": 0, "ended": None}
    assert reports[3] == {"index": 3, "episode": 0, "t": 3, "ended": (6.0, 3, 0)}
    assert reports[6]["ended"] == (3.0, 2, 4)  # truncated episodes report too
    assert reports[-1]["ended"] is None
    eps = buf.episodes()
    assert [e["id"] for e in eps] == [0, 1, 2, 3]
    assert [(e["steps"], e["terminated"], e["truncated"]) for e in eps] == [
        (3, True, False), (2, False, True), (4, True, False), (2, False, False)]
    assert [e["id"] for e in buf.unfinished_episodes()] == [3]
    assert buf.episode(5) == eps[1]


def test_prev_and_next_stay_inside_episodes(episodic):
    buf, _ = episodic
    # Episode 1 is rows 4..6 (reset, two steps): edges stay put.
    assert buf.prev(4) == 4 and buf.next(6) == 6
    assert buf.prev(5) == 4 and buf.next(5) == 6
    np.testing.assert_array_equal(buf.prev(np.array([3, 7, 8])), [2, 7, 7])
    np.testing.assert_array_equal(buf.next([3, 7, 12]), [3, 8, 13])


@pytest.mark.parametrize("nstep,gamma", [(1, 1.0), (3, 0.5)])
def test_transitions_carry_nstep_returns_discounts_and_next_observations(episodic, nstep, gamma):
    buf, _ = episodic
    d = buf.sample_transitions(256, "obs", nstep=nstep, gamma=gamma, seed=1)
    assert set(d) == {"obs", "next_obs", "action", "reward", "returns", "discounts",
                      "terminated", "truncated", "indices"}
    assert d["obs"].shape == (256, 2) and d["obs"].dtype == np.float32
    seen = set()
    for r in range(256):
        t, ep = (int(x) for x in d["obs"][r])
        seen.add((ep, t))
        steps, end = STEPS[ep], ENDS[ep]
        assert d["action"][r] == 10 * ep + t + 1
        k = min(nstep, steps - t)
        np.testing.assert_array_equal(d["next_obs"][r], obs(ep, t + k))
        want = sum(gamma ** j * (t + 1 + j) for j in range(k))
        assert d["returns"][r] == pytest.approx(want)
        at_end = t + k == steps
        assert d["terminated"][r] == (at_end and end == "term")
        assert d["truncated"][r] == (at_end and end == "trunc")
        assert d["discounts"][r] == pytest.approx(0.0 if d["terminated"][r] else gamma ** k)
    # Every step of every episode can be drawn (256 draws over 11 steps).
    assert seen == {(ep, t) for ep, s in enumerate(STEPS) for t in range(s)}


def test_stacked_observations_repeat_the_first_frame_of_an_episode(episodic):
    buf, _ = episodic
    d = buf.sample_transitions(64, "obs", stack=3, seed=2)
    assert d["obs"].shape == (64, 3, 2) and d["next_obs"].shape == (64, 3, 2)
    for r in range(64):
        t, ep = (int(x) for x in d["obs"][r, -1])
        want = [obs(ep, max(t - 2 + j, 0)) for j in range(3)]
        np.testing.assert_array_equal(d["obs"][r], want)


def test_sequences_are_consecutive_steps_masked_past_the_episode_end(episodic):
    buf, _ = episodic
    d = buf.sample_sequences(32, 3, "obs", burn_in=1, seed=3)
    assert d["obs"].shape == (32, 4, 2) and d["mask"].shape == (32, 4)
    assert d["action"].shape == (32, 4)
    for r in range(32):
        live = d["mask"][r]
        rows = d["obs"][r][live]
        assert len(rows) >= 1
        assert len({int(e) for e in rows[:, 1]}) == 1, "a sequence crossed episodes"
        np.testing.assert_array_equal(np.diff(rows[:, 0]), np.ones(len(rows) - 1))
        np.testing.assert_array_equal(d["action"][r][live], 10 * rows[:, 1] + rows[:, 0] + 1)


def test_whole_episodes_come_back_whole_and_only_when_ended(episodic):
    buf, _ = episodic
    d = buf.sample_episodes(20, seed=4)
    off = d["offsets"]
    assert len(off) == 21 and off[0] == 0 and off[-1] == len(d["indices"])
    assert set(d["episodes"].tolist()) <= {0, 1, 2}
    for i, ep in enumerate(d["episodes"]):
        rows = d["obs"][off[i]:off[i + 1]]
        np.testing.assert_array_equal(rows, [obs(ep, t) for t in range(STEPS[ep] + 1)])


def test_a_field_named_like_a_key_of_the_draw_is_refused_not_overwritten(tmp_path):
    """A field called `returns` would have been replaced by the draw's own `returns` in
    the dict: the draw raises SchemaError naming the key instead, and rows are still
    drawn."""
    schema = rs.Schema({"obs": "float32", "returns": "float32"})
    with rs.ReplayBuffer.create(tmp_path / "b", schema, 50, episodic=True) as buf:
        buf.add_reset(obs=0.0)
        for t in range(1, 6):
            buf.add_step(obs=float(t), returns=10.0 * t, terminated=t == 5)
        with pytest.raises(rs.SchemaError, match="returns"):
            buf.sample_transitions(4, "obs")
        rows = buf.sample(8)
        assert set(rows) == {"obs", "returns", "indices"}
        assert np.all(rows["returns"] == 10.0 * rows["obs"])


def test_a_plain_buffer_refuses_episode_calls(tmp_path):
    with rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, 8) as buf:
        with pytest.raises(rs.Error, match="episod"):
            buf.add_reset(obs=obs(0, 0))
        with pytest.raises(rs.Error, match="episod"):
            buf.sample_transitions(4, "obs")


def test_named_snapshots_are_listed_read_and_deleted(tmp_path):
    path = str(tmp_path / "s")
    schema = {"x": "int64"}
    with rs.ReplayBuffer.create(path, schema, 100, seed=0) as buf:
        buf.add_batch({"x": np.arange(10, dtype=np.int64)})
        state = buf.get_state("epoch-1")
        assert state["name"] == "epoch-1"
        buf.add_batch({"x": np.arange(10, 30, dtype=np.int64)})
        buf.get_state("epoch-2")
        listed = buf.snapshots()
        assert [(s["name"], s["len"], s["problem"]) for s in listed] == [
            ("epoch-1", 10, None), ("epoch-2", 30, None)]
        # The snapshot reads as it was while the writer has moved on.
        old = rs.Reader.open(path, snapshot="epoch-1")
        assert len(old) == 10 and len(buf) == 30
        assert set(old.sample(50, seed=1)["x"].tolist()) <= set(range(10))
        with pytest.raises(rs.Error):
            buf.get_state("epoch-1")  # names are not reused
        assert buf.keep_last(1) == ["epoch-1"]
        buf.delete_snapshot("epoch-2")
        assert buf.snapshots() == []
        with pytest.raises(rs.StateError):
            buf.set_state(state)


def test_lanes_route_rows_sample_as_one_and_update_priorities(tmp_path):
    path = str(tmp_path / "v")
    schema = {"x": "int64"}
    with rs.Lanes.create(path, schema, 30, 3, alpha=1.0, seed=7) as lanes:
        assert lanes.lane_count == 3 and lanes.capacity == 30
        idx = lanes.add_batch({"x": np.array([100, 101, 102, 103], np.int64)}, [0, 1, 2, 2])
        assert [int(i) >> 56 for i in idx] == [0, 1, 2, 2]
        one = lanes.add(1, x=104)
        assert one >> 56 == 1 and len(lanes) == 5
        assert [b - a for a, b in lanes.lane_edges()] == [1, 2, 2]
        d = lanes.sample(64, seed=3)
        np.testing.assert_array_equal(lanes.get(d["indices"])["x"], d["x"])
        assert set(d["x"].tolist()) == {100, 101, 102, 103, 104}
        # All priority on one item of lane 2: every prioritized draw is it.
        # NumPy makes uint64 + Python int float64, which cannot hold these indices:
        # refused rather than rounded onto other items.
        with pytest.raises(rs.SchemaError, match="integers"):
            lanes.update_priorities(np.concatenate([idx, [one]]), np.ones(5))
        every = np.concatenate([idx, np.array([one], np.uint64)])
        pr = np.where(every == idx[3], 1.0, 0.0)
        lanes.update_priorities(every, pr)
        p = lanes.sample(16, beta=0.4, seed=4)
        assert p["x"].tolist() == [103] * 16 and p["weights"].shape == (16,)
        reader = rs.Lanes.open(path, reader=True)
        assert len(reader) == 5
        np.testing.assert_array_equal(reader.get(idx)["x"], [100, 101, 102, 103])
        with pytest.raises(rs.ReadOnlyError):
            reader.add(0, x=1)
        with pytest.raises(rs.Error, match="lane"):
            lanes.add_batch({"x": np.array([1], np.int64)}, [3])
        assert len(lanes) == 5
    with rs.Lanes.open(path) as again:
        assert len(again) == 5 and [s["len"] for s in again.stats()] == [1, 2, 2]


def test_lanes_checkpoint_as_one_and_come_back_exactly(tmp_path):
    import pickle

    schema = {"x": "int64", "r": "float32"}
    lanes = rs.Lanes.create(tmp_path / "v", schema, 300, 3, alpha=0.6, seed=5)
    batch = {"x": np.arange(30, dtype=np.int64), "r": np.ones(30, np.float32)}
    lanes.add_batch(batch, lanes=np.arange(30) % 3)
    state = pickle.loads(pickle.dumps(lanes.get_state("epoch-1")))
    assert state["name"] == "epoch-1" and len(state["lanes"]) == 3
    after = lanes.sample(16, beta=0.4)
    lanes.update_priorities(after["indices"], np.full(16, 9.0))
    lanes.add_batch(batch, lanes=np.zeros(30, dtype=np.int64))
    assert len(lanes) == 60
    lanes.set_state(state)
    assert len(lanes) == 30
    again = lanes.sample(16, beta=0.4)
    assert again["indices"].tolist() == after["indices"].tolist()
    assert np.allclose(again["weights"], after["weights"])
    lanes.get_state()
    lanes.get_state("epoch-3")
    assert lanes.snapshots()[0] == "epoch-1" and len(lanes.snapshots()) == 3
    deleted = lanes.keep_last(1)
    assert deleted[0] == "epoch-1" and len(deleted) == 2
    assert lanes.snapshots() == ["epoch-3"]
    lanes.close()
    lanes = rs.Lanes.open(tmp_path / "v")
    assert lanes.snapshots() == ["epoch-3"]
    lanes.delete_snapshot("epoch-3")
    assert lanes.snapshots() == []
    with pytest.raises(rs.Error):
        lanes.set_state(state)  # its snapshot was pruned
    with pytest.raises(rs.StateError):
        lanes.set_state({"name": "x"})
    lanes.close()


def test_per_lane_counters_count_items_not_the_lane_index_offset(tmp_path):
    """Issue 33.7: lane K's indices start at K << 56; its counters count items."""
    schema = {"x": "int64"}
    with rs.Lanes.create(tmp_path / "l", schema, 30, 3) as lanes:
        lanes.add_batch({"x": np.arange(14)}, lanes=[2] * 14)
        lanes.add_batch({"x": np.arange(3)}, lanes=[0] * 3)
        stats = lanes.stats()
        assert [s["added"] for s in stats] == [3, 0, 14]
        assert [s["evicted"] for s in stats] == [0, 0, 4]  # lanes of 10
        assert [s["len"] for s in stats] == [3, 0, 10]
        assert stats[2]["tail"] == (2 << 56) + 14, "indices keep their lane's base"
