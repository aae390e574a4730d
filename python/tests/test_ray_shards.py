"""Promise (issue 36): one buffer over many machines on Ray. A shard per node, each a
restartable actor over a folder on its node; adds go to the caller's node; draws cover
every shard as one buffer (by size, or by global priority with Ape-X's weights); a
kill -9 of a shard, or the loss of its node, loses nothing acknowledged; one
checkpoint restores every shard, all or nothing.

The multi-node cases run on ``ray.cluster_utils.Cluster``: three simulated nodes on this
machine, each with its own shard folder."""

import os
import signal
import sys
import time

import numpy as np
import pytest

import peers
import replaystore as rs

ray = peers.peer("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from replaystore.ray import ShardedBuffer, ShardUnavailableError  # noqa: E402

SCHEMA = {"id": "int64", "obs": ("float32", (4,))}


@pytest.fixture(scope="module")
def cluster():
    """A head node and two more, one CPU each; shard folders under a temporary root."""
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    for _ in range(2):
        c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    # Workers cannot import this test module: its tasks and actors travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def nodes():
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])


def batch_of(ids):
    ids = np.asarray(ids, np.int64)
    return {"id": ids, "obs": np.repeat(ids[:, None].astype(np.float32), 4, axis=1)}


@ray.remote(num_cpus=0)
def writer(buf, task, batches, per):
    """A remote task on some node: adds ``batches`` batches of ``per`` items numbered
    ``task * 10**6 + i`` and says where it ran and which shards took them."""
    me = ray.get_runtime_context().get_node_id()
    acks = []
    for b in range(batches):
        ids = task * 10**6 + b * per + np.arange(per)
        shard, idx = buf.add_batch(batch_of(ids))
        acks.append((shard, len(idx)))
    return me, acks, buf.where()


@ray.remote(num_cpus=0)
class Learner:
    """Draws from the sharded buffer as a learner would, on the node it was put on."""

    def __init__(self, buf):
        self.buf = buf

    def draw_ids(self, draws, n, beta=None):
        ids, shards, weights = [], [], []
        for _ in range(draws):
            b = self.buf.sample(n, beta=beta)
            ids.append(b["id"])
            shards.append(b["shard"])
            if beta is not None:
                weights.append(b["weights"])
        out = {"id": np.concatenate(ids), "shard": np.concatenate(shards)}
        if beta is not None:
            out["weights"] = np.concatenate(weights)
        out["local"] = sorted(i for i, r in self.buf._readers.items() if r is not None)
        return out


def test_adds_from_eight_tasks_across_nodes_are_all_drawn_and_counted(cluster, tmp_path):
    all_nodes = nodes()
    assert len(all_nodes) == 3
    buf = ShardedBuffer.create("eight", SCHEMA, 10_000, root=str(tmp_path), seed=1)
    assert [w["node"] for w in buf.where()] == all_nodes
    tasks = [
        writer.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(all_nodes[t % 3], soft=False)
        ).remote(buf, t, 5, 40)
        for t in range(8)
    ]
    results = ray.get(tasks, timeout=120)
    by_shard = {}
    for me, acks, where in results:
        node_of = {w["index"]: w["node"] for w in where}
        for shard, count in acks:
            # Every add went to the shard on the writer's own node.
            assert node_of[shard] == me
            by_shard[shard] = by_shard.get(shard, 0) + count
    assert len(buf) == 8 * 5 * 40
    assert [f["len"] for f in buf.figures()] == [by_shard.get(i, 0) for i in range(3)]
    learner = Learner.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(all_nodes[1], soft=False)
    ).remote(buf)
    got = ray.get(learner.draw_ids.remote(200, 256), timeout=120)
    expected = {t * 10**6 + i for t in range(8) for i in range(200)}
    assert set(got["id"].tolist()) == expected
    # The learner read the shard on its own node through a Reader, the others by call.
    assert got["local"] == [1]
    # Uniform over the union: every item about equally often, shards by their sizes.
    _, counts = np.unique(got["id"], return_counts=True)
    peers.chi_square(counts, np.ones(len(counts)))
    share = np.bincount(got["shard"], minlength=3)
    peers.chi_square(share, np.array([by_shard[i] for i in range(3)]))
    buf.close()


def test_prioritized_draws_follow_global_priorities_with_single_buffer_weights(cluster, tmp_path):
    alpha, beta, eps = 0.6, 0.4, 1e-6
    buf = ShardedBuffer.create("per", SCHEMA, 1000, root=str(tmp_path), alpha=alpha, eps=eps,
                               seed=2)
    rng = np.random.default_rng(0)
    prio_of = {}
    for s in range(3):
        ids = s * 1000 + np.arange(40)
        _, idx = buf.add_batch(batch_of(ids), shard=s)
        # Skewed per shard, so that shard masses differ and the smallest leaf is on one.
        p = rng.uniform(0.1, 2.0, 40) * (s + 1)
        buf.update_priorities(np.full(40, s), idx, p)
        prio_of.update(zip(ids.tolist(), p.tolist()))
    learner = Learner.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(nodes()[1], soft=False)
    ).remote(buf)
    got = ray.get(learner.draw_ids.remote(100, 256, beta), timeout=120)
    # Shard 1 was read through a Reader on the learner's node, weighed like the others.
    assert got["local"] == [1]
    ids = sorted(prio_of)
    leaf = np.array([(prio_of[i] + eps) ** alpha for i in ids])
    _, counts = np.unique(got["id"], return_counts=True)
    peers.chi_square(counts, leaf)
    # One buffer holding the union, with the same priorities: its weight for each item.
    one = rs.ReplayBuffer.create(str(tmp_path / "union"), SCHEMA, 1000, alpha=alpha, eps=eps,
                                 seed=3)
    idx = one.add_batch(batch_of(ids))
    one.update_priorities(idx, np.array([prio_of[i] for i in ids]))
    single = {}
    while len(single) < len(ids):
        b = one.sample(512, beta=beta)
        single.update(zip(b["id"].tolist(), b["weights"].tolist()))
    want = np.array([single[i] for i in got["id"].tolist()], np.float32)
    np.testing.assert_allclose(got["weights"], want, rtol=1e-6)
    one.close()
    buf.close()


def test_stale_priority_updates_are_skipped_by_the_owning_shard(cluster, tmp_path):
    buf = ShardedBuffer.create("stale", SCHEMA, 8, root=str(tmp_path), alpha=0.6, seed=4)
    _, first = buf.add_batch(batch_of(np.arange(8)), shard=2)
    b = buf.sample(4, beta=0.4, seed=1)
    assert set(b["shard"].tolist()) == {2}
    buf.add_batch(batch_of(np.arange(8, 16)), shard=2)  # overwrites every drawn item
    assert buf.update_priorities(b["shard"], b["indices"], np.ones(4)) == {"applied": 0,
                                                                          "stale": 4}
    with pytest.raises(ValueError, match="shard 7"):
        buf.update_priorities([7], [0], [1.0])
    buf.close()


def test_a_shard_killed_during_adds_restarts_with_everything_acknowledged(cluster, tmp_path):
    buf = ShardedBuffer.create("kill", SCHEMA, 100_000, root=str(tmp_path), seed=5,
                               flush_items=500)
    victim = buf.where()[0]
    acked, refused, n = [], 0, 0
    killed_at = None
    while n < 120:
        ids = n * 50 + np.arange(50)
        try:
            _, idx = buf.add_batch(batch_of(ids), shard=0)
            acked.extend(ids.tolist())
        except ShardUnavailableError as e:
            assert "not acknowledged" in str(e)
            refused += 1
        n += 1
        if n == 40:
            os.kill(victim["pid"], signal.SIGKILL)
            killed_at = time.monotonic()
    after = buf.where()[0]
    assert after["pid"] != victim["pid"] and after["node"] == victim["node"]
    # The shard flushed every 500 items: its reopen checked at most 499 past the last
    # flush, and the 50 of an add the kill may have cut.
    recovered = buf.stats()[0]["recovered"]
    assert recovered is not None and recovered["rolled_forward"] < 500 + 50
    assert after["len"] >= len(acked)
    reader = rs.Reader.open(victim["path"])
    stored = reader.get(np.arange(reader.stats()["head"], reader.stats()["tail"]))["id"]
    assert set(acked) <= set(stored.tolist())
    assert len(stored) == len(set(stored.tolist()))  # nothing stored twice
    reader.close()
    assert killed_at is not None and refused <= 2
    b = buf.sample(64, seed=1)  # sampling resumes
    assert len(b["id"]) == 64
    buf.close()


def test_a_lost_node_brought_back_with_its_folder_continues_its_shard(cluster, tmp_path):
    disk = cluster.add_node(num_cpus=0, resources={"rs-disk-7": 1})
    cluster.wait_for_nodes()
    buf = ShardedBuffer.create("lost", SCHEMA, 1000, root=str(tmp_path),
                               resources=["rs-disk-7"], seed=6)
    first = buf.where()[0]
    buf.add_batch(batch_of(np.arange(300)))
    cluster.remove_node(disk, allow_graceful=False)
    again = cluster.add_node(num_cpus=0, resources={"rs-disk-7": 1})  # the machine, replaced
    cluster.wait_for_nodes()
    back = buf.where()[0]
    assert back["node"] != first["node"] and back["path"] == first["path"]
    assert back["len"] == 300
    assert sorted(set(buf.sample(8000, seed=2)["id"].tolist())) == list(range(300))
    buf.add_batch(batch_of(np.arange(300, 310)))
    assert len(buf) == 310
    buf.close()
    cluster.remove_node(again)  # the other tests run on the three first nodes


def test_one_checkpoint_restores_every_shard_to_the_same_draws(cluster, tmp_path):
    buf = ShardedBuffer.create("ckpt", SCHEMA, 1000, root=str(tmp_path), alpha=0.6, seed=7)
    for s in range(3):
        buf.add_batch(batch_of(s * 1000 + np.arange(50 + 10 * s)), shard=s)
    state = buf.get_state("cp1")
    assert len(pickle_size := __import__("pickle").dumps(state)) < 4096, pickle_size
    before = buf.sample(300, seed=11)
    before_p = buf.sample(300, beta=0.4, seed=12)
    for s in range(3):
        buf.add_batch(batch_of(s * 1000 + 500 + np.arange(30)), shard=s)
    os.kill(buf.where()[1]["pid"], signal.SIGKILL)  # a shard restarted in between
    buf.set_state(state)
    assert [f["len"] for f in buf.figures()] == [50, 60, 70]
    for key in before:
        np.testing.assert_array_equal(buf.sample(300, seed=11)[key], before[key])
    again = buf.sample(300, beta=0.4, seed=12)
    for key in before_p:
        np.testing.assert_array_equal(again[key], before_p[key])
    buf.close()


def test_a_state_a_shard_cannot_restore_changes_no_shard(cluster, tmp_path):
    buf = ShardedBuffer.create("refuse", SCHEMA, 1000, root=str(tmp_path), seed=8)
    for s in range(3):
        buf.add_batch(batch_of(s * 1000 + np.arange(20)), shard=s)
    state = buf.get_state("cp")
    for s in range(3):
        buf.add_batch(batch_of(s * 1000 + 100 + np.arange(5)), shard=s)
    ray.get(buf._shards[1].delete_snapshot.remote("cp"))
    draw = buf.sample(100, seed=3)
    with pytest.raises(rs.StateError, match=r"shard 1: no snapshot 'cp'.*|nothing was changed"):
        buf.set_state(state)
    assert [f["len"] for f in buf.figures()] == [25, 25, 25]
    np.testing.assert_array_equal(buf.sample(100, seed=3)["id"], draw["id"])
    buf.close()


def test_a_restore_failing_on_one_shard_puts_the_others_back(cluster, tmp_path):
    buf = ShardedBuffer.create("undo", SCHEMA, 1000, root=str(tmp_path), seed=9)
    for s in range(3):
        buf.add_batch(batch_of(s * 1000 + np.arange(20)), shard=s)
    state = buf.get_state("cp")
    for s in range(3):
        buf.add_batch(batch_of(s * 1000 + 100 + np.arange(5)), shard=s)
    # The state handed to shard 2 is another buffer's, of the shard's capacity (it
    # passes the check) but of another schema (one of the same layout would restore:
    # its snapshot is brought in): its restore fails after shards 0 and 1 restored theirs.
    other = rs.ReplayBuffer.create(str(tmp_path / "other"), {"other": "float64"}, 1000)
    other.add_batch({"other": np.arange(3, dtype=np.float64)})
    forged = {**state, "shards": list(state["shards"])}
    forged["shards"][2] = {**state["shards"][2], "state": other.get_state("cp")}
    draw = buf.sample(100, seed=3)
    with pytest.raises(rs.StateError, match="shard 2 could not restore.*put back"):
        buf.set_state(forged)
    assert [f["len"] for f in buf.figures()] == [25, 25, 25]
    np.testing.assert_array_equal(buf.sample(100, seed=3)["id"], draw["id"])
    # The undo snapshots are gone; the checkpoint's stays.
    assert buf._call_all("snapshot_names") == [["cp"], ["cp"], ["cp"]]
    buf.set_state(state)  # the real state still restores
    assert [f["len"] for f in buf.figures()] == [20, 20, 20]
    other.close()
    buf.close()


def test_a_client_connects_by_name_and_a_group_shard_takes_members(cluster, tmp_path):
    buf = ShardedBuffer.create("groups", SCHEMA, 100, root=str(tmp_path), kind="group",
                               detached=False, seed=10)
    for s in range(3):
        buf.add_batch(batch_of(s * 100 + np.arange(10)), member=f"policy-{s % 2}", shard=s)
    other = ShardedBuffer.connect("groups")
    assert other.num_shards == 3 and other.kind == "group"
    b = other.sample(200, member="policy-0", seed=1)
    assert set(b["id"].tolist()) == set(range(10)) | set(range(200, 210))
    with pytest.raises(ValueError, match="name a member"):
        buf.add_batch(batch_of([1]), shard=0)
    buf.close()


def test_a_shard_pinned_to_a_node_that_died_moves_to_the_node_with_its_folder(cluster, tmp_path):
    gone = cluster.add_node(num_cpus=0)
    cluster.wait_for_nodes()
    buf = ShardedBuffer.create("moved", SCHEMA, 1000, root=str(tmp_path),
                               nodes=[gone.node_id], seed=11)
    buf.add_batch(batch_of(np.arange(100)))
    cluster.remove_node(gone, allow_graceful=False)
    back = cluster.add_node(num_cpus=0)  # the same disk, under a new node id
    cluster.wait_for_nodes()
    where = buf.move(0, back.node_id)
    assert where["node"] == back.node_id and where["len"] == 100
    assert sorted(set(buf.sample(3000, seed=1)["id"].tolist())) == list(range(100))
    buf.close()
    cluster.remove_node(back)


def test_prefetched_draws_and_unblocked_updates_reach_the_shards_in_order(cluster, tmp_path):
    buf = ShardedBuffer.create("ahead", SCHEMA, 1000, root=str(tmp_path), alpha=1.0, eps=1e-9,
                               seed=12, prefetch=2)
    for s in range(3):
        buf.add_batch(batch_of(s * 100 + np.arange(20)), shard=s)
    seen = set()
    for _ in range(40):
        b = buf.sample(64)
        assert len(b["id"]) == 64
        seen |= set(b["id"].tolist())
    assert seen == {s * 100 + i for s in range(3) for i in range(20)}
    b = buf.sample(500, beta=0.5, prefetch=0)
    keep = b["id"] == 207
    assert keep.any()
    # Every item but 207 to (nearly) nothing, sent without waiting.
    assert buf.update_priorities(b["shard"], b["indices"],
                                 np.where(keep, 1.0, 1e-12), block=False) is None
    # A shard runs one caller's calls in order: figures() returns after the updates.
    buf.figures()
    after = buf.sample(64, beta=0.5)
    assert (after["id"] == 207).all()
    # Held back for a shard this client calls (not one it reads through a Reader):
    # the next draw sent to it carries them. Item 207 is in shard 2; every draw goes there.
    local = 2 in buf._local_shards()
    before = ray.get(buf._shards[2].stats.remote())["priority_updates"]
    assert buf.update_priorities([2], after["indices"][:1], [1.0], block=False) is None
    assert (2 in buf._held) == (not local)
    buf.sample(64, beta=0.5, prefetch=0)
    assert 2 not in buf._held
    buf.figures()
    assert ray.get(buf._shards[2].stats.remote())["priority_updates"] == before + 1
    with pytest.raises(ValueError, match="method"):
        buf.sample(4, method="sample_episodes")
    buf.close()


def test_one_shard_batches_come_from_shards_by_mass_with_union_weights(cluster, tmp_path):
    buf = ShardedBuffer.create("one", SCHEMA, 1000, root=str(tmp_path), alpha=1.0, eps=1e-9,
                               seed=13, one_shard=True)
    sizes = [10, 30, 60]
    for s, n in enumerate(sizes):
        buf.add_batch(batch_of(s * 100 + np.arange(n)), shard=s)
    picked = np.zeros(3)
    for _ in range(300):
        b = buf.sample(16)
        assert len(set(b["shard"].tolist())) == 1  # a whole batch from one shard
        picked[b["shard"][0]] += 1
    peers.chi_square(picked, np.array(sizes, float))
    # By priority: shard masses decide, weights are the union's.
    b = buf.sample(400, beta=1.0, one_shard=False)
    buf.update_priorities(b["shard"], b["indices"], 1.0 + b["id"] % 7)
    union = {}
    for _ in range(150):
        d = buf.sample(64, beta=1.0, one_shard=False)
        union.update(zip(d["id"].tolist(), d["weights"].tolist()))
    for _ in range(50):
        d = buf.sample(64, beta=1.0)
        assert len(set(d["shard"].tolist())) == 1
        np.testing.assert_allclose(d["weights"], [union[i] for i in d["id"].tolist()],
                                   rtol=1e-6)
    buf.close()


def test_episodic_and_text_shards_draw_transitions_and_strings_across_nodes(cluster, tmp_path):
    ep = ShardedBuffer.create("episodes", {"obs": ("float32", (2,)), "action": "int64",
                                           "reward": "float32"}, 1000, root=str(tmp_path),
                              episodic=True, seed=14)
    for s in range(3):
        n = 5 + s
        obs = (s * 100 + np.arange(n + 1, dtype=np.float32))[:, None].repeat(2, axis=1)
        ep.add_episode({"obs": obs, "action": np.arange(n), "reward": np.ones(n, np.float32)},
                       terminated=True, shard=s)
    t = ep.sample(300, method="sample_transitions", obs="obs", nstep=2, gamma=0.5, seed=3)
    assert set(t["shard"].tolist()) == {0, 1, 2}
    # next_obs is two steps on, or the episode's last observation.
    step = t["next_obs"][:, 0] - t["obs"][:, 0]
    assert ((step == 2) | ((step == 1) & (t["discounts"] == 0))).all(), step
    ep.close()
    text = ShardedBuffer.create("text", {"id": "int64", "prompt": "str"}, 100,
                                root=str(tmp_path), item_states=True, seed=15)
    for s in range(3):
        text.add_batch({"id": s * 10 + np.arange(3), "prompt": [f"p{s}-{i} ⚑" * (i + 1)
                                                                  for i in range(3)]}, shard=s)
    b = text.sample(200, seed=1)
    assert isinstance(b["prompt"], list) and len(b["prompt"]) == 200
    for i, p in zip(b["id"].tolist(), b["prompt"]):
        assert p == f"p{i // 10}-{i % 10} ⚑" * (i % 10 + 1)
    text.close()


def test_single_adds_hash_routing_reads_by_index_and_snapshot_deletion(cluster, tmp_path):
    buf = ShardedBuffer.create("calls", SCHEMA, 100, root=str(tmp_path), seed=16,
                               prefer_local=False, policy="hash")
    with pytest.raises(ValueError, match="give key="):
        buf.add(id=1, obs=np.zeros(4, np.float32))
    # The same key goes to the same shard, from any process (crc32, not Python's hash).
    spots = [buf.add(id=i, obs=np.full(4, i, np.float32), key=f"env-{i % 2}")
             for i in range(6)]
    assert len({s for s, _ in spots[0::2]}) == 1 and len({s for s, _ in spots[1::2]}) == 1
    shards, idx = zip(*reversed(spots))
    got = buf.get(list(shards), list(idx))
    assert got["id"].tolist() == [5, 4, 3, 2, 1, 0]  # in the order asked
    buf.get_state("keep")
    buf.flush()
    buf.delete_snapshot("keep")
    assert buf._call_all("snapshot_names") == [[], [], []]
    buf.close()


def test_a_sharded_state_restores_into_a_fresh_sharded_buffer(cluster, tmp_path):
    """Each shard's snapshot is brought into the same shard of a buffer built fresh
    elsewhere (a trainer resuming into a new folder): same items, same draws."""
    a = ShardedBuffer.create("from", SCHEMA, 1000, root=str(tmp_path / "a"), seed=4)
    for s in range(3):
        a.add_batch(batch_of(s * 1000 + np.arange(10 + s)), shard=s)
    state = a.get_state("cp")
    b = ShardedBuffer.create("into", SCHEMA, 1000, root=str(tmp_path / "b"), seed=4)
    b.set_state(state)
    assert [f["len"] for f in b.figures()] == [10, 11, 12]
    a.set_state(state)
    np.testing.assert_array_equal(b.sample(50, seed=7)["id"], a.sample(50, seed=7)["id"])
    # One of another capacity is refused before any shard changes.
    c = ShardedBuffer.create("small", SCHEMA, 500, root=str(tmp_path / "c"), seed=4)
    c.add_batch(batch_of(np.arange(4)), shard=0)
    with pytest.raises(rs.StateError, match="nothing was changed.*holds a ring of 1000"):
        c.set_state(state)
    assert [f["len"] for f in c.figures()] == [4, 0, 0]
    a.close()
    b.close()
    c.close()
