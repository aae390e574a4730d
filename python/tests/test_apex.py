"""Promise (issue 31, point 2): the Ape-X layout from Python. Each of four actor
processes owns one lane and adds to it (``Lanes.open_lane(path, k, actor=True)``); one
learner owns the priorities of every lane (``Lanes.open(path, owner=True)``), draws by
priority and updates priorities while the actors add; a reader samples beside them.
Nothing an actor added is lost or counted twice, every update lands in the lane that
holds its item, and the single-buffer ``PriorityOwner`` does the same for one actor."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"id": "int64", "obs": ("float32", (4,))}
ACTORS, PER_ACTOR, BATCH = 4, 3000, 50


def actor_code(path, lane, per_actor=PER_ACTOR, lanes=True):
    """One actor process: adds `per_actor` items numbered `lane * 10**6 + i` in
    batches, flushing now and then, then says how many it added."""
    opener = (
        f"rs.Lanes.open_lane({path!r}, {lane}, actor=True)"
        if lanes
        else f"rs.ReplayBuffer.open({path!r}, actor=True)"
    )
    return textwrap.dedent(
        f"""
        import numpy as np
        import replaystore as rs
        buf = {opener}
        for start in range(0, {per_actor}, {BATCH}):
            ids = np.arange(start, start + {BATCH}, dtype=np.int64) + {lane} * 10**6
            obs = np.repeat(ids[:, None].astype(np.float32), 4, axis=1)
            buf.add_batch({{"id": ids, "obs": obs}})
            if start % 500 == 0:
                buf.flush()
        buf.close()
        print("added", {per_actor}, flush=True)
        """
    )


def test_four_actor_processes_and_a_learner_lose_nothing_and_count_nothing_twice(tmp_path):
    path = str(tmp_path / "apex")
    # A tiny eps: an item given priority 0 is (nearly) never drawn beside one of 5.
    rs.Lanes.create(path, SCHEMA, ACTORS * PER_ACTOR, ACTORS, alpha=0.6, eps=1e-12, seed=1).close()
    owner = rs.Lanes.open(path, owner=True)
    reader = rs.Lanes.open(path, reader=True)
    procs = [
        subprocess.Popen([sys.executable, "-c", actor_code(path, k)], stdout=subprocess.PIPE, text=True)
        for k in range(ACTORS)
    ]
    updates = 0
    while any(p.poll() is None for p in procs):
        if len(owner) < 64:
            continue
        b = owner.sample(64, beta=0.4)
        # Each row is the item its index names, in the lane the index says.
        assert np.array_equal(b["obs"][:, 0], b["id"].astype(np.float32))
        lanes = b["indices"] >> 56
        assert np.array_equal(lanes, b["id"] // 10**6)
        assert (b["weights"] > 0).all() and (b["weights"] <= 1.0 + 1e-6).all()
        done = owner.update_priorities(b["indices"], (b["id"] % 7 + 1).astype(np.float64))
        assert done["applied"] + done["stale"] == 64
        updates += done["applied"]
        r = reader.sample(32)
        assert np.array_equal(r["obs"][:, 0], r["id"].astype(np.float32))
    for p in procs:
        out, _ = p.communicate()
        assert p.returncode == 0 and out.strip() == f"added {PER_ACTOR}"
    assert updates > 0
    # Every item once: the lanes hold exactly what the actors added.
    assert len(owner) == ACTORS * PER_ACTOR
    for view in (owner, reader):
        assert [s["len"] for s in view.stats()] == [PER_ACTOR] * ACTORS
    seen = []
    for start, stop in owner.lane_edges():
        seen += owner.get(np.arange(start, stop, dtype=np.uint64))["id"].tolist()
    want = [k * 10**6 + i for k in range(ACTORS) for i in range(PER_ACTOR)]
    assert sorted(seen) == want
    # Updates land in the lane of their item: all but lane 2 set to 0, so draws by
    # priority come from lane 2 alone (a chance of 1e-7 per draw otherwise).
    edges = owner.lane_edges()
    for k, (start, stop) in enumerate(edges):
        idx = np.arange(start, stop, dtype=np.uint64)
        p = np.full(len(idx), 0.0 if k != 2 else 5.0)
        assert owner.update_priorities(idx, p)["applied"] == len(idx)
    b = owner.sample(256, beta=0.4)
    assert ((b["indices"] >> 56) == 2).all()
    owner.close()
    # The priorities are the owner's, and durable: a new owner draws the same way.
    again = rs.Lanes.open(path, owner=True)
    assert ((again.sample(64, beta=0.4)["indices"] >> 56) == 2).all()
    with pytest.raises(rs.LockedError):
        rs.Lanes.open(path, owner=True)
    with pytest.raises(rs.ReadOnlyError, match="actors"):
        again.add(0, id=1, obs=np.zeros(4, np.float32))
    again.close()


def test_a_priority_owner_learns_beside_one_actor_process(tmp_path):
    path = str(tmp_path / "one")
    rs.ReplayBuffer.create(path, SCHEMA, PER_ACTOR, alpha=0.6, eps=1e-12, seed=2).close()
    with rs.PriorityOwner.open(path) as owner:
        proc = subprocess.Popen(
            [sys.executable, "-c", actor_code(path, 0, lanes=False)],
            stdout=subprocess.PIPE,
            text=True,
        )
        while proc.poll() is None:
            if len(owner) >= 16:
                b = owner.sample(16, beta=0.4)
                owner.update_priorities(b["indices"], np.full(16, 3.0))
        assert proc.communicate()[0].strip() == f"added {PER_ACTOR}"
        assert len(owner) == PER_ACTOR
        ids = owner.sample(PER_ACTOR, replace=False)["id"]
        assert sorted(ids.tolist()) == list(range(PER_ACTOR))
        owner.update_priorities(np.arange(PER_ACTOR, dtype=np.uint64), np.zeros(PER_ACTOR))
        owner.update_priorities(np.array([7], dtype=np.uint64), np.array([1e6]))
        assert owner.priorities([7])[0] == pytest.approx(1e6, rel=1e-9)
        assert (owner.sample(32, beta=1.0)["indices"] == 7).all()
        assert owner.stats()["len"] == PER_ACTOR
        with pytest.raises(rs.LockedError):
            rs.PriorityOwner.open(path)
    # Closed: the writer may open again, and keeps the owner's priorities.
    buf = rs.ReplayBuffer.open(path)
    assert (buf.sample(32, beta=1.0)["indices"] == 7).all()
    buf.close()
