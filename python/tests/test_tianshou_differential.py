"""Promise (issue 34, Tianshou): ``replaystore.compat.tianshou``'s buffers behave as
Tianshou 2.0's. Each test drives Tianshou's buffer and the adapter with the same calls
and compares what Tianshou's code sees: ``add``'s ``(ptr, ep_rew, ep_len, ep_idx)``,
``len``, every stored transition as a ``Batch`` (nested observations and info
included), draws (both start from the buffer's ``RandomState(42)``), ``prev``/``next``,
stacked ``get``, ``unfinished_index``, sub-buffer edges; a Collector fills the adapter
and a DQN trains from it; a reopened folder resumes."""

import numpy as np
import pytest

from peers import peer

peer("tianshou")
peer("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tianshou import data as tsd  # noqa: E402
from tianshou.data import Batch  # noqa: E402

from replaystore.compat import tianshou as ad  # noqa: E402


def same(a, b):
    """Two Tianshou results (Batch, arrays or tuples of them) hold the same values."""
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
        return
    if isinstance(a, Batch):
        assert isinstance(b, Batch), type(b)
        assert sorted(a.get_keys()) == sorted(b.get_keys()), (sorted(a.get_keys()), sorted(b.get_keys()))
        for k in a.get_keys():
            same(a[k], b[k])
        return
    x, y = np.asarray(a), np.asarray(b)
    assert x.shape == y.shape, (x.shape, y.shape)
    if x.dtype != object:
        assert x.dtype == y.dtype, (x.dtype, y.dtype)
    np.testing.assert_array_equal(x, y)


def transition(t, rng, nested=False):
    obs = {"pos": np.array([t, -t], np.float32), "id": np.int64(t)} if nested else np.array([t, t + 0.5], np.float32)
    nxt = {"pos": np.array([t + 1, -t - 1], np.float32), "id": np.int64(t + 1)} if nested else np.array([t + 1, t + 1.5], np.float32)
    return Batch(obs=obs, act=np.int64(t % 3), rew=float(rng.normal()), terminated=bool(rng.random() < 0.2),
                 truncated=bool(rng.random() < 0.05), obs_next=nxt, info={"step": t, "x": float(t) / 2})


def compare(theirs, ours, positions):
    assert len(ours) == len(theirs)
    same(ours[positions], theirs[positions])
    same(ours[:], theirs[:])
    same(ours.prev(positions), theirs.prev(positions))
    same(ours.next(positions), theirs.next(positions))
    same(ours.unfinished_index(), theirs.unfinished_index())
    same(ours.sample_indices(0), theirs.sample_indices(0))


@settings(max_examples=25, deadline=None)
@given(steps=st.integers(1, 30), size=st.integers(1, 9), stack=st.sampled_from([1, 3]),
       nested=st.booleans(), draws=st.lists(st.integers(0, 20), max_size=4), seed=st.integers(0, 99))
def test_replay_buffer_adds_reads_and_draws_match(tmp_path_factory, steps, size, stack, nested, draws, seed):
    kw = dict(stack_num=stack, ignore_obs_next=stack > 1)
    if nested and stack > 1:
        stack, kw = 1, {}
    theirs = tsd.ReplayBuffer(size, **kw)
    ours = ad.ReplayBuffer(size, path=str(tmp_path_factory.mktemp("t")), **kw)
    rng = np.random.default_rng(seed)
    try:
        for t in range(steps):
            b = transition(t, rng, nested)
            same(ours.add(b), theirs.add(b))
        positions = np.arange(len(theirs))
        compare(theirs, ours, positions)
        for n in draws:
            a, ia = theirs.sample(n)
            o, io = ours.sample(n)
            same(io, ia)
            same(o, a)
        if stack > 1:
            same(ours.get(positions, "obs"), theirs.get(positions, "obs"))
    finally:
        ours.close()


def test_vector_buffer_with_buffer_ids_matches(tmp_path):
    theirs = tsd.VectorReplayBuffer(20, 4)
    ours = ad.VectorReplayBuffer(20, 4, path=str(tmp_path / "v"))
    rng = np.random.default_rng(3)
    t = 0
    for round_ in range(12):
        ids = np.array([0, 1, 2, 3]) if round_ % 3 else np.array([2, 0])
        rows = [transition(t + i, rng) for i in range(len(ids))]
        t += len(ids)
        b = Batch.stack(rows)
        same(ours.add(b, buffer_ids=ids), theirs.add(b, buffer_ids=ids))
    same(ours.subbuffer_edges, theirs.subbuffer_edges)
    positions = theirs.sample_indices(0)
    compare(theirs, ours, positions)
    for n in (0, 5, 17):
        a, ia = theirs.sample(n)
        o, io = ours.sample(n)
        same(io, ia)
        same(o, a)
    ours.close()


def test_prioritized_buffers_draw_and_weigh_as_tianshou(tmp_path):
    for vector in (False, True):
        if vector:
            theirs = tsd.PrioritizedVectorReplayBuffer(12, 3, alpha=0.6, beta=0.4)
            ours = ad.PrioritizedVectorReplayBuffer(12, 3, alpha=0.6, beta=0.4, path=str(tmp_path / "pv"))
        else:
            theirs = tsd.PrioritizedReplayBuffer(8, alpha=0.6, beta=0.4)
            ours = ad.PrioritizedReplayBuffer(8, alpha=0.6, beta=0.4, path=str(tmp_path / "p"))
        rng = np.random.default_rng(5)
        for t in range(10):
            if vector:
                b = Batch.stack([transition(3 * t + i, rng) for i in range(3)])
                same(ours.add(b, buffer_ids=[0, 1, 2]), theirs.add(b, buffer_ids=[0, 1, 2]))
            else:
                b = transition(t, rng)
                same(ours.add(b), theirs.add(b))
        for seed in range(3):
            np.random.seed(seed)
            a, ia = theirs.sample(16)
            np.random.seed(seed)
            o, io = ours.sample(16)
            same(io, ia)
            same(o, a)
            new = np.abs(np.random.default_rng(seed).normal(size=16)) + 0.1
            theirs.update_weight(ia, new)
            ours.update_weight(io, new)
        same(ours.get_weight(np.arange(len(theirs))), theirs.get_weight(np.arange(len(theirs))))
        ours.close()


def test_a_reopened_folder_resumes_positions_episodes_and_draws(tmp_path):
    path = str(tmp_path / "r")
    theirs = tsd.VectorReplayBuffer(16, 2)
    ours = ad.VectorReplayBuffer(16, 2, path=path)
    rng = np.random.default_rng(7)
    for t in range(11):
        b = Batch.stack([transition(2 * t, rng, nested=True), transition(2 * t + 1, rng, nested=True)])
        same(ours.add(b), theirs.add(b))
    ours.close()
    again = ad.VectorReplayBuffer(16, 2, path=path)
    positions = theirs.sample_indices(0)
    compare(theirs, again, positions)
    same(again.last_index, theirs.last_index)
    # The running episodes' statistics come back too: the next adds report the same.
    for t in range(11, 20):
        b = Batch.stack([transition(2 * t, rng, nested=True), transition(2 * t + 1, rng, nested=True)])
        same(again.add(b), theirs.add(b))
    compare(theirs, again, theirs.sample_indices(0))
    with pytest.raises(ValueError, match="sizes"):
        ad.VectorReplayBuffer(16, 4, path=path)
    again.close()


def test_reset_starts_positions_again_in_both(tmp_path):
    theirs = tsd.ReplayBuffer(6)
    ours = ad.ReplayBuffer(6, path=str(tmp_path / "z"))
    rng = np.random.default_rng(1)
    for t in range(8):
        b = transition(t, rng)
        same(ours.add(b), theirs.add(b))
    theirs.reset()
    ours.reset()
    for t in range(8, 11):
        b = transition(t, rng)
        same(ours.add(b), theirs.add(b))
    compare(theirs, ours, np.arange(len(theirs)))
    ours.close()


def test_a_collector_fills_the_adapter_and_dqn_trains_from_it(tmp_path):
    import gymnasium as gym
    import torch
    from tianshou.algorithm.modelfree.dqn import DQN, DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net

    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    train_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    net = Net(state_shape=env.observation_space.shape, action_shape=env.action_space.n, hidden_sizes=[32])
    policy = DiscreteQLearningPolicy(model=net, action_space=env.action_space, eps_training=0.2)
    algo = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.9, n_step_return_horizon=3,
               target_update_freq=50)
    buf = ad.VectorReplayBuffer(2000, 4, path=str(tmp_path / "dqn"))
    collector = Collector(algo, train_envs, buf, exploration_noise=True)
    collector.reset()
    collector.collect(n_step=200)
    assert len(buf) >= 200
    stats = algo.run_training(OffPolicyTrainerParams(
        training_collector=collector, max_epochs=1, epoch_num_steps=400,
        collection_step_num_env_steps=20, batch_size=32, test_collector=None, test_in_training=False))
    assert stats is not None and len(buf) >= 600
    # Everything the Collector added is in the rings: a fresh object on the folder sees it.
    n = len(buf)
    buf.close()
    again = ad.VectorReplayBuffer(2000, 4, path=str(tmp_path / "dqn"))
    assert len(again) == n
    b, _ = again.sample(8)
    assert b.obs.shape == (8, 4) and b.obs_next.shape == (8, 4)
    again.close()


def test_a_killed_collector_process_resumes_with_every_transition_it_added(tmp_path):
    import textwrap

    from kill import run_until_killed

    path = str(tmp_path / "k")
    code = textwrap.dedent(f"""
        import numpy as np
        from tianshou.data import Batch
        from replaystore.compat import tianshou as ts
        buf = ts.VectorReplayBuffer(64, 2, path={path!r})
        t = 0
        while True:
            b = Batch(obs=np.array([[t, 0], [t, 1]], np.float32), act=np.array([t % 2, 1]),
                      rew=np.array([1.0, 2.0]), terminated=np.array([t % 7 == 6, False]),
                      truncated=np.array([False, t % 5 == 4]), obs_next=np.array([[t + 1, 0], [t + 1, 1]], np.float32),
                      info={{"t": np.array([t, t])}})
            buf.add(b)
            t += 1
            print(t, flush=True)
    """)
    seen = run_until_killed(code, 120)
    acked = seen[-1]
    buf = ad.VectorReplayBuffer(64, 2, path=path)
    # Each ring holds its newest 32 steps: every acknowledged one, and at most the step
    # the kill cut (whose rows land whole or not at all, ring by ring).
    b = buf[buf.sample_indices(0)]
    for env in (0, 1):
        rows = b.obs[:, 1] == env
        steps = np.sort(b.obs[rows, 0].astype(int))
        assert steps[-1] in (acked - 1, acked)
        np.testing.assert_array_equal(steps, np.arange(steps[-1] - 31, steps[-1] + 1))
    np.testing.assert_array_equal(b.info.t, b.obs[:, 0].astype(int))
    # The running episode's statistics resume: ring 0's episodes end at steps 6, 13, ...
    ring0 = buf.buffers[0]
    newest = int(ring0[ring0.last_index[0]].obs[0])
    running = 0 if newest % 7 == 6 else newest % 7 + 1
    assert (ring0._ep_len, ring0._ep_return) == (running, float(running))
    assert ring0._ep_start_idx == (ring0.last_index[0] + 1 - running) % 32
    buf.close()


def test_set_array_at_key_adds_a_column_to_stored_transitions_as_tianshou(tmp_path):
    path = str(tmp_path / "s")
    theirs = tsd.VectorReplayBuffer(12, 2)
    ours = ad.VectorReplayBuffer(12, 2, path=path)
    rng = np.random.default_rng(2)
    for t in range(5):
        b = Batch.stack([transition(2 * t, rng), transition(2 * t + 1, rng)])
        same(ours.add(b), theirs.add(b))
    idx = theirs.get_buffer_indices(0, 4)
    same(ours.get_buffer_indices(0, 4), idx)
    for buf in (theirs, ours):
        buf.set_array_at_key(np.arange(len(idx), dtype=np.float64) * 1.5, "returns", index=idx, default_value=0.0)
    positions = theirs.sample_indices(0)
    same(ours[positions], theirs[positions])
    with pytest.raises(ValueError, match="not rewritten"):
        ours.set_array_at_key(np.zeros(2), "rew", index=[0, 1])
    ours.close()
    again = ad.VectorReplayBuffer(12, 2, path=path)
    same(again[positions], theirs[positions])
    again.close()


@pytest.mark.parametrize("vector", [False, True])
def test_pickles_and_hdf5_files_round_trip_with_tianshou(tmp_path, vector):
    import pickle
    import subprocess
    import sys
    import textwrap

    def make(cls_ts, cls_ad, path):
        args = (10, 2) if vector else (6,)
        return cls_ts(*args), cls_ad(*args, **({"path": path} if path else {}))

    ts_cls, ad_cls = (tsd.VectorReplayBuffer, ad.VectorReplayBuffer) if vector else (tsd.ReplayBuffer, ad.ReplayBuffer)
    rng = np.random.default_rng(4)

    def fill(theirs, ours):
        for t in range(9):
            b = Batch.stack([transition(2 * t, rng, True), transition(2 * t + 1, rng, True)]) if vector \
                else transition(t, rng, True)
            same(ours.add(b), theirs.add(b))

    # A temporary folder: the pickle carries the transitions, positions and counters.
    theirs, ours = make(ts_cls, ad_cls, None)
    fill(theirs, ours)
    back = pickle.loads(pickle.dumps(ours))
    ours.close()
    compare(theirs, back, theirs.sample_indices(0))
    more = transition(99, rng, True) if not vector else Batch.stack([transition(99, rng, True),
                                                                      transition(100, rng, True)])
    same(back.add(more), theirs.add(more))
    # HDF5 both ways: Tianshou reads what the adapter writes, and the other way round.
    f1, f2 = str(tmp_path / "ours.h5"), str(tmp_path / "theirs.h5")
    back.save_hdf5(f1)
    theirs.save_hdf5(f2)
    read_by_tianshou = ts_cls.load_hdf5(f1)
    compare(theirs, read_by_tianshou, theirs.sample_indices(0))
    read_by_us = ad_cls.load_hdf5(f2, folder=str(tmp_path / "from-h5"))
    compare(theirs, read_by_us, theirs.sample_indices(0))
    read_by_us.close()
    back.close()
    # A folder of the caller's: the pickle names it and holds O(1) snapshots; a fresh
    # process restores it.
    path = str(tmp_path / "named")
    theirs, ours = make(ts_cls, ad_cls, path)
    fill(theirs, ours)
    blob = pickle.dumps(ours)
    assert len(blob) < 64 * 1024
    expected = [int(x) for x in theirs.sample_indices(0)]
    for t in range(3):  # the buffer moves on past the pickle
        ours.add(Batch.stack([transition(t, rng, True), transition(t, rng, True)]) if vector
                 else transition(t, rng, True))
    ours.close()
    code = textwrap.dedent(f"""
        import pickle
        buf = pickle.loads({blob!r})
        print(len(buf), [int(x) for x in buf.sample_indices(0)])
        buf.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(" ", 1) == [str(len(theirs)), f"{expected}\n"]


def test_cached_buffer_moves_finished_episodes_as_tianshou(tmp_path):
    path = str(tmp_path / "c")
    theirs = tsd.CachedReplayBuffer(tsd.ReplayBuffer(20), 3, 8)
    ours = ad.CachedReplayBuffer(tsd.ReplayBuffer(20), 3, 8, path=path)
    rng = np.random.default_rng(8)
    for t in range(30):
        rows = [transition(3 * t + i, rng) for i in range(3)]
        for r in rows:  # episodes end within the cache's 8 steps
            r.terminated = r.terminated or (3 * t) % 7 == 0
        b = Batch.stack(rows)
        same(ours.add(b), theirs.add(b))
        compare(theirs, ours, theirs.sample_indices(0))
    same(ours.main_buffer[:], theirs.main_buffer[:])
    # A pickle and an HDF5 file keep the cache whole: its main and cached buffers are
    # its sub-buffers again after, as Tianshou binds them.
    import pickle
    h5 = str(tmp_path / "c.h5")
    ours.save_hdf5(h5)
    blob = pickle.dumps(ours)
    ours.close()  # a folder has one writer: the pickle restores into it after this
    for back in (pickle.loads(blob), ad.CachedReplayBuffer.load_hdf5(h5, folder=str(tmp_path / "h"))):
        compare(theirs, back, theirs.sample_indices(0))
        assert back.main_buffer is back.buffers[0]
        assert [id(b) for b in back.cached_buffers] == [id(b) for b in back.buffers[1:]]
        same(back.main_buffer[:], theirs.main_buffer[:])
        back.close()
    compare(theirs, tsd.CachedReplayBuffer.load_hdf5(h5), theirs.sample_indices(0))
    again = ad.CachedReplayBuffer(tsd.ReplayBuffer(20), 3, 8, path=path)
    compare(theirs, again, theirs.sample_indices(0))
    again.close()


def test_columns_are_every_position_and_take_writes_as_tianshou_storage(tmp_path):
    """Tianshou's columns are its storage: ``buf.KEY`` holds every position (a reset
    cache's old rows included), a write into one (``buf.info.step[i] = v``) is what the
    sub-buffers read until a transition lands there, and pickles and HDF5 files (either
    library's) keep both."""
    import pickle

    theirs = tsd.CachedReplayBuffer(tsd.ReplayBuffer(20), 3, 8)
    ours = ad.CachedReplayBuffer(tsd.ReplayBuffer(20), 3, 8, path=str(tmp_path / "c"))
    rng = np.random.default_rng(3)

    def columns(buf):
        return {"act": buf.act, "obs": buf.obs, "done": buf.done, "info.step": buf.info.step,
                "info.x": buf.info.x, **{f"kid {k}": kid.info.step for k, kid in enumerate(buf.buffers)}}

    def check(back):
        want = {k: np.asarray(v) for k, v in columns(theirs).items()}
        for k, v in columns(back).items():
            np.testing.assert_array_equal(np.asarray(v), want[k], err_msg=k)

    for t in range(14):
        rows = [transition(3 * t + i, rng) for i in range(3)]
        for r in rows:
            r.terminated = t % 4 == 3  # the caches move to the main buffer and restart
        b = Batch.stack(rows)
        same(ours.add(b), theirs.add(b))
        if t in (5, 9):
            for buf in (theirs, ours):
                buf.info.step[20] = -100 - t  # the first cache's position 0
                buf.info.x[[21, 30]] = [7.5, -1.0]
                buf.act[29] = 2
                buf.obs[31, 1] = 9.5
                buf.obs[3] = [4.0, 4.0]  # the main buffer's
        check(ours)
    blob = pickle.dumps(ours)  # snapshots of the rings, and what memory holds beside them
    h5 = str(tmp_path / "ours.h5")
    ours.save_hdf5(h5)
    ours.close()  # a folder has one writer: the pickle restores into it after this
    back = pickle.loads(blob)
    check(back)
    back.close()
    check(tsd.CachedReplayBuffer.load_hdf5(h5))
    theirs_h5 = str(tmp_path / "theirs.h5")
    theirs.save_hdf5(theirs_h5)
    back = ad.CachedReplayBuffer.load_hdf5(theirs_h5, folder=str(tmp_path / "h"))
    check(back)
    back.close()
    # A buffer in a temporary folder pickles its rows, the kept and written ones too.
    temp = ad.CachedReplayBuffer(tsd.ReplayBuffer(20), 3, 8)
    twin = tsd.CachedReplayBuffer(tsd.ReplayBuffer(20), 3, 8)
    for t in range(6):
        b = Batch.stack([transition(3 * t + i, rng) for i in range(3)])
        b.terminated[:] = t == 2
        same(temp.add(b), twin.add(b))
    for buf in (temp, twin):
        buf.info.step[21] = -7
    theirs = twin
    back = pickle.loads(pickle.dumps(temp))
    check(back)
    back.close()
    temp.close()


def goal_step(t, ep, rng):
    g = np.array([ep % 3, 1.0], np.float32)
    obs = {"observation": np.array([t, ep], np.float32), "achieved_goal": np.array([t % 4, ep % 2], np.float32),
           "desired_goal": g}
    nxt = {"observation": np.array([t + 1, ep], np.float32),
           "achieved_goal": np.array([(t + 1) % 4, ep % 2], np.float32), "desired_goal": g}
    return Batch(obs=obs, act=np.int64(t % 2), rew=float(rng.normal()), terminated=False,
                 truncated=t == 4, obs_next=nxt, info={})


def test_her_relabels_goals_as_tianshou_and_keeps_what_was_added(tmp_path):
    def reward(ag, g):
        return -(np.abs(ag - g).sum(axis=-1) > 0.5).astype(np.float32)

    theirs = tsd.HERReplayBuffer(40, reward, horizon=5, future_k=4.0)
    ours = ad.HERReplayBuffer(40, reward, horizon=5, future_k=4.0, path=str(tmp_path / "h"))
    rng = np.random.default_rng(9)
    for ep in range(6):
        for t in range(5):
            b = goal_step(t, ep, rng)
            same(ours.add(b), theirs.add(b))
    stored = theirs[np.arange(30)]  # plain reads; sample_indices would relabel
    for seed in range(4):
        np.random.seed(seed)
        a, ia = theirs.sample(12)
        np.random.seed(seed)
        o, io = ours.sample(12)
        same(io, ia)
        same(o, a)  # the relabelled goals and rewards, value for value
        same(ours.rew, theirs.rew)
    b = goal_step(0, 6, rng)
    same(ours.add(b), theirs.add(b))  # restores the storage before adding
    same(ours[np.arange(31)], theirs[np.arange(31)])
    same(ours[np.arange(30)], stored[np.arange(30)])
    # sample_indices relabels too (every episode when asked for all): seeded alike,
    # alike.
    np.random.seed(11)
    pa = theirs.sample_indices(0)
    np.random.seed(11)
    po = ours.sample_indices(0)
    same(po, pa)
    same(ours[po], theirs[pa])
    ours.close()


def test_her_vector_buffer_relabels_each_sub_buffer_as_tianshou(tmp_path):
    def reward(ag, g):
        return -(np.abs(ag - g).sum(axis=-1) > 0.5).astype(np.float32)

    kw = dict(compute_reward_fn=reward, horizon=5, future_k=4.0)
    theirs = tsd.HERVectorReplayBuffer(60, 2, **kw)
    ours = ad.HERVectorReplayBuffer(60, 2, path=str(tmp_path / "hv"), **kw)
    rng = np.random.default_rng(10)
    for ep in range(5):
        for t in range(5):
            b = Batch.stack([goal_step(t, 2 * ep, rng), goal_step(t, 2 * ep + 1, rng)])
            same(ours.add(b), theirs.add(b))
        for seed in range(2):
            np.random.seed(100 * ep + seed)
            a, ia = theirs.sample(10)
            np.random.seed(100 * ep + seed)
            o, io = ours.sample(10)
            same(io, ia)
            same(o, a)
    theirs._restore_cache()
    ours._restore_cache()
    same(ours[np.arange(60)], theirs[np.arange(60)])
    ours.close()


def test_from_data_set_batch_and_update_match(tmp_path):
    import h5py

    n = 6
    rng = np.random.default_rng(12)
    with h5py.File(str(tmp_path / "d.h5"), "w") as f:
        data = {"obs": rng.normal(size=(n, 3)).astype(np.float32), "act": np.arange(n),
                "rew": rng.normal(size=n), "terminated": np.arange(n) % 3 == 2,
                "truncated": np.zeros(n, bool), "obs_next": rng.normal(size=(n, 3)).astype(np.float32)}
        data["done"] = data["terminated"] | data["truncated"]
        for k, v in data.items():
            f.create_dataset(k, data=v)
        sets = {k: f[k] for k in data}
        theirs = tsd.ReplayBuffer.from_data(**sets)
        ours = ad.ReplayBuffer.from_data(**sets)
    compare(theirs, ours, np.arange(n))
    # update: another buffer's transitions, oldest first, into this one.
    t2, o2 = tsd.ReplayBuffer(4), ad.ReplayBuffer(4, path=str(tmp_path / "u"))
    for t in range(2):
        b = transition(t, rng)
        same(o2.add(b), t2.add(b))
    source = tsd.ReplayBuffer(5)
    for t in range(7):
        source.add(transition(10 + t, rng))
    same(o2.update(source), t2.update(source))
    compare(t2, o2, np.arange(len(t2)))
    ours.close()
    o2.close()


@pytest.mark.parametrize("vector", [False, True])
def test_a_reopened_prioritized_buffer_starts_every_transition_at_the_largest_priority(tmp_path, vector):
    path = str(tmp_path / "pr")
    make = (lambda: ad.PrioritizedVectorReplayBuffer(12, 2, alpha=1.0, beta=0.5, path=path)) if vector \
        else (lambda: ad.PrioritizedReplayBuffer(12, alpha=1.0, beta=0.5, path=path))
    ours = make()
    rng = np.random.default_rng(6)
    for t in range(5):
        ours.add(Batch.stack([transition(2 * t, rng), transition(2 * t + 1, rng)]) if vector else transition(t, rng))
    idx = ours.sample_indices(0)
    ours.update_weight(idx, np.linspace(0.5, 3.0, len(idx)))
    ours.close()
    again = make()
    # The documented difference: the priorities were Tianshou's, in memory; after the
    # reopen every stored transition has the largest one (1 in a fresh tree) and each is
    # drawn.
    idx = again.sample_indices(0)
    np.testing.assert_allclose(again.get_weight(idx), np.ones(len(idx)))
    np.random.seed(0)
    _, drawn = again.sample(2000)
    assert set(drawn.tolist()) == set(idx.tolist())
    again.close()


@settings(max_examples=15, deadline=None)
@given(steps=st.integers(1, 25), seed=st.integers(0, 99), draws=st.lists(st.integers(0, 12), max_size=3))
def test_atari_options_stack_last_frames_and_avail_draws_match(tmp_path_factory, steps, seed, draws):
    """save_only_last_obs keeps the newest of a stacked observation, stack_num rebuilds
    the stack at read time, sample_avail draws only transitions with a whole stack."""
    kw = dict(stack_num=4, ignore_obs_next=True, save_only_last_obs=True, sample_avail=True)
    theirs = tsd.ReplayBuffer(10, **kw)
    ours = ad.ReplayBuffer(10, path=str(tmp_path_factory.mktemp("a")), **kw)
    rng = np.random.default_rng(seed)
    try:
        for t in range(steps):
            frames = np.stack([np.full((2, 2), t + 3 - k, np.uint8) for k in (3, 2, 1, 0)])
            b = Batch(obs=frames, act=np.int64(t % 4), rew=1.0, terminated=bool(rng.random() < 0.2),
                      truncated=False, obs_next=frames, info={})
            same(ours.add(b), theirs.add(b))
        for n in draws + [0]:
            try:
                a, ia = theirs.sample(n)
            except ValueError:  # no transition has a whole stack yet: the same in both
                with pytest.raises(ValueError):
                    ours.sample(n)
                continue
            o, io = ours.sample(n)
            same(io, ia)
            same(o, a)
        same(ours.get(np.arange(len(theirs)), "obs"), theirs.get(np.arange(len(theirs)), "obs"))
    finally:
        ours.close()


@pytest.mark.parametrize("vector", [False, True])
def test_a_pickled_prioritized_buffer_keeps_its_priorities(tmp_path, vector):
    import pickle

    theirs = tsd.PrioritizedVectorReplayBuffer(12, 2, alpha=0.6, beta=0.4) if vector \
        else tsd.PrioritizedReplayBuffer(8, alpha=0.6, beta=0.4)
    ours = ad.PrioritizedVectorReplayBuffer(12, 2, alpha=0.6, beta=0.4) if vector \
        else ad.PrioritizedReplayBuffer(8, alpha=0.6, beta=0.4)
    rng = np.random.default_rng(13)
    for t in range(9):
        b = Batch.stack([transition(2 * t, rng), transition(2 * t + 1, rng)]) if vector else transition(t, rng)
        same(ours.add(b), theirs.add(b))
    idx = theirs.sample_indices(0)
    new = np.linspace(0.2, 4.0, len(idx))
    theirs.update_weight(idx, new)
    ours.update_weight(idx, new)
    back = pickle.loads(pickle.dumps(ours))  # a temporary folder: the transitions travel
    ours.close()
    same(back.get_weight(idx), theirs.get_weight(idx))
    np.random.seed(3)
    a, ia = theirs.sample(20)
    np.random.seed(3)
    o, io = back.sample(20)
    same(io, ia)
    same(o, a)
    back.close()


def test_a_stored_column_reads_as_tianshous_array_does(tmp_path):
    # buf.act.dtype, buf.obs[:4, 0], buf.act == 2 and np.allclose(buf.rew, ...) are what
    # Tianshou's own tests ask of its buffers' columns (the arrays of every position).
    bufs = [tsd.ReplayBuffer(6), ad.ReplayBuffer(6, path=str(tmp_path / "b"))]
    for buf in bufs:
        for i in range(4):
            buf.add(Batch(obs=np.full(3, i, np.float32), act=i, rew=float(i), terminated=False,
                          truncated=False, obs_next=np.zeros(3, np.float32), info={}))
    theirs, ours = bufs
    assert ours.act.dtype == theirs.act.dtype and ours.obs.shape == theirs.obs.shape
    np.testing.assert_array_equal(ours.obs[:4, 0], theirs.obs[:4, 0])
    np.testing.assert_array_equal(ours.obs[2, 1:], theirs.obs[2, 1:])
    np.testing.assert_array_equal(ours.act == 2, theirs.act == 2)
    np.testing.assert_array_equal(ours.rew + 1, theirs.rew + 1)
    assert np.allclose(ours.rew, theirs.rew) and ours.rew.tolist() == theirs.rew.tolist()


@pytest.mark.parametrize("filled", [0, 2])
def test_update_moves_another_buffers_transitions_in_as_tianshou_does(tmp_path, filled):
    # Into an empty buffer too (Tianshou's own test_update): the rings take the other
    # buffer's layout. Managers refuse update, as Tianshou's do.
    def row(i):
        return Batch(obs=np.array([i]), act=float(i), rew=i * i, terminated=i % 2 == 0,
                     truncated=False, info={"incident": "found"})

    pairs = []
    for k, lib in enumerate((tsd, ad)):
        kw = {"path": str(tmp_path / f"b{k}")} if lib is ad else {}
        src, dst = lib.ReplayBuffer(4, stack_num=2, **kw), lib.ReplayBuffer(
            4, stack_num=2, **({"path": str(tmp_path / f"d{k}")} if lib is ad else {}))
        for i in range(5):
            src.add(row(i))
        for i in range(filled):
            dst.add(row(100 + i))
        moved = dst.update(src)
        pairs.append((moved, dst))
    (moved_a, a), (moved_b, b) = pairs
    np.testing.assert_array_equal(moved_a, moved_b)
    assert len(a) == len(b)
    np.testing.assert_array_equal(np.asarray(a.obs), np.asarray(b.obs))
    np.testing.assert_array_equal(np.asarray(a.rew), np.asarray(b.rew))
    cached = ad.CachedReplayBuffer(ad.ReplayBuffer(10, path=str(tmp_path / "m")), 4, 5,
                                   path=str(tmp_path / "c"))
    with pytest.raises(NotImplementedError):
        cached.update(cached)


def test_nested_info_reads_as_tianshous_batch_of_columns_with_zeros_where_nothing_was_written(tmp_path):
    # buf.info.a[0], buf.info.b.c.dtype, np.all(buf.info.a[1:] == 0): Tianshou's own
    # test_replaybuffer; positions never written read as zeros of the first row's layout
    # (text as None).
    bufs = [tsd.ReplayBuffer(6), ad.ReplayBuffer(6, path=str(tmp_path / "b"))]
    for buf in bufs:
        buf.add(Batch(obs=1, act=1, rew=1, terminated=1, truncated=0, obs_next="str",
                      info={"a": 3, "b": {"c": 5.0}}))
    for buf in bufs:
        assert buf.info.a[0] == 3 and buf.info.a.dtype == int and np.all(buf.info.a[1:] == 0)
        assert buf.info.b.c[0] == 5.0 and buf.info.b.c.dtype == float
        assert np.all(buf.info.b.c[1:] == 0.0) and np.all(buf.obs_next[1:] == np.array(None))
    for buf in bufs:
        buf.add(Batch(obs=2, act=1, rew=1, terminated=0, truncated=0, obs_next="s2",
                      info={"a": 4, "b": {"c": 6.0}}))
    theirs, ours = bufs
    assert ours.info.a[:].tolist() == theirs.info.a[:].tolist()
    assert ours.info.b.c[:].tolist() == theirs.info.b.c[:].tolist()
    assert ours.obs_next[:].tolist() == theirs.obs_next[:].tolist()
    assert ours[np.array([0, 3])].info.a.tolist() == theirs[np.array([0, 3])].info.a.tolist()


def test_stored_keys_named_like_the_columns_own_attributes_read_as_stored(tmp_path):
    # Tianshou's test_prioritized_replaybuffer reads buf.info.key (its env's info has a
    # "key").
    bufs = [tsd.ReplayBuffer(5), ad.ReplayBuffer(5, path=str(tmp_path / "b"))]
    for buf in bufs:
        for i in range(3):
            buf.add(Batch(obs=i, act=1, rew=1.0, terminated=False, truncated=False, obs_next=i + 1,
                          info={"key": i, "store": 2.0}))
    theirs, ours = bufs
    assert ours.info.key.shape == theirs.info.key.shape == (5,)
    assert ours.info.key[:].tolist() == theirs.info.key[:].tolist()
    assert ours.info.store[:].tolist() == theirs.info.store[:].tolist()


@pytest.mark.parametrize("vector", [False, True])
def test_set_batch_again_with_a_new_key_takes_the_batch_as_tianshou_does(tmp_path, vector):
    # Tianshou's test_replaybuffermanager: set_batch of its own _meta with a new info
    # column. The second set_batch once met the first's rings still open (LockedError).
    bufs = [tsd.VectorReplayBuffer(20, 4) if vector else tsd.ReplayBuffer(20),
            ad.VectorReplayBuffer(20, 4, path=str(tmp_path / "v")) if vector
            else ad.ReplayBuffer(20, path=str(tmp_path / "r"))]
    for buf in bufs:
        for i in range(7):
            if vector:
                buf.add(Batch(obs=[i], act=[i], rew=[i], terminated=[0], truncated=[0]),
                        buffer_ids=[i % 4])
            else:
                buf.add(Batch(obs=i, act=i, rew=i, terminated=0, truncated=0))
    theirs, ours = bufs
    rows = theirs[np.arange(theirs.maxsize)]
    batch = Batch({k: np.asarray(rows[k]) for k in ("obs", "act", "rew", "terminated", "truncated",
                                                   "done")})
    batch.obs = np.asarray(theirs.obs)
    batch.info = np.ones(theirs.maxsize)
    for buf in bufs:
        buf.set_batch(batch)
        buf.set_batch(batch)
    assert np.asarray(ours.info).tolist() == np.asarray(theirs.info).tolist()
    assert np.asarray(ours.obs).tolist() == np.asarray(theirs.obs).tolist()
    assert len(ours) == len(theirs)


def test_a_key_set_on_the_buffers_own_storage_then_set_batch_as_tianshou_does(tmp_path):
    # Tianshou's test_replaybuffermanager: batch = buf._meta; batch.info = ...;
    # buf.set_batch(batch).
    bufs = [tsd.VectorReplayBuffer(20, 4), ad.VectorReplayBuffer(20, 4, path=str(tmp_path / "v"))]
    for buf in bufs:
        buf.add(Batch(obs=[1, 2, 3], act=[1, 2, 3], rew=[1, 2, 3], terminated=[0, 0, 1],
                      truncated=[0, 0, 0]), buffer_ids=[0, 1, 2])
        batch = buf._meta
        batch.info = np.arange(buf.maxsize) * 0.5
        buf.set_batch(batch)
    theirs, ours = bufs
    assert np.asarray(ours.buffers[-1].info).tolist() == np.asarray(theirs.buffers[-1].info).tolist()
    assert np.asarray(ours.obs).tolist() == np.asarray(theirs.obs).tolist() and len(ours) == len(theirs)
    assert ours.sample_indices(0).tolist() == theirs.sample_indices(0).tolist()


def test_a_columns_layout_is_tianshous_and_keys_first_seen_later_read_as_zeros_before(tmp_path):
    # dtype/shape/ndim of a ring field come from its layout (no read of every position);
    # a nested key that rows bring only later reads zeros at the positions before.
    bufs = [tsd.ReplayBuffer(6), ad.ReplayBuffer(6, path=str(tmp_path / "b"))]
    for buf in bufs:
        for i in range(8):
            buf.add(Batch(obs=np.full((2, 3), i, np.float32), act=i, rew=float(i), terminated=False,
                          truncated=False, obs_next=np.zeros((2, 3), np.float32),
                          info={"x": {"y": i}} if i > 3 else {}))
    theirs, ours = bufs
    for key in ("obs", "act"):
        a, b = getattr(theirs, key), getattr(ours, key)
        assert (b.dtype, b.shape, b.ndim) == (a.dtype, a.shape, a.ndim)
    assert ours.info.x.y[:].tolist() == theirs.info.x.y[:].tolist()


@pytest.mark.parametrize("marked", [[0, 1, 2], [1, 4], []], ids=["first-three", "two", "none"])
def test_dropnull_keeps_what_tianshou_keeps_and_a_reopen_holds_it(tmp_path, marked):
    """Tianshou's dropnull drops every position with a null in any key (unwritten ones
    too) and keeps the rest at positions 0 on; a column added with set_array_at_key
    is where the nulls usually are."""
    rng = np.random.default_rng(2)
    theirs = tsd.ReplayBuffer(10)
    ours = ad.ReplayBuffer(10, path=str(tmp_path / "d"))
    arrays = ad.ReplayBuffer(10, path=str(tmp_path / "a"))
    for t in range(6):
        # Scalars per row, as Tianshou's own dropnull test adds: its cat of the kept
        # rows flattens a field of more than one value per row (the adapter keeps the
        # row shape, checked on ``arrays``).
        b = Batch(obs={"x": t, "y": t + 0.5}, act=t % 3, rew=float(rng.normal()), terminated=t % 4 == 0,
                  truncated=False, info={"step": t})
        theirs.add(b)
        ours.add(b)
        arrays.add(transition(t, rng))
    arrays.set_array_at_key(np.arange(len(marked), dtype=float) + 1, "mark", marked)
    arrays.dropnull()
    assert len(arrays) == len(marked)
    if marked:
        assert arrays[:].obs.shape == (len(marked), 2)
        np.testing.assert_array_equal(arrays[:].obs[:, 0], np.array(marked, np.float32))
    arrays.close()
    for buf in (theirs, ours):
        buf.set_array_at_key(np.arange(len(marked), dtype=float) + 1, "mark", marked)
        assert buf.hasnull()
        buf.dropnull()
    assert len(ours) == len(theirs) == len(marked)
    if marked:
        compare(theirs, ours, np.arange(len(marked)))
        assert not ours.hasnull()
    ours.close()
    again = ad.ReplayBuffer(10, path=str(tmp_path / "d"))
    assert len(again) == len(marked)
    if marked:
        same(again[:], theirs[:])
    again.close()


def test_a_nested_info_with_a_none_leaf_reads_back_as_tianshous_batch(tmp_path):
    """An info whose nested dict has a None leaf is pickled whole; its column, a row
    of it and ``get`` give the Batch Tianshou's storage gives."""
    theirs = tsd.ReplayBuffer(8)
    ours = ad.ReplayBuffer(8, path=str(tmp_path / "n"))
    for i in range(3):
        b = Batch(obs=np.array([i, i]), act=i, rew=1.0, terminated=i == 2, truncated=False,
                  info={"number": {"n": i, "t": np.array([1.0])}, "extra": None})
        theirs.add(b)
        ours.add(b)
    for i in range(3):
        got, want = ours.get(i, "info"), theirs.get(i, "info")
        assert isinstance(got, Batch) and isinstance(want, Batch)
        same(got.number, want.number)
        assert got.extra is None and want.extra is None
    same(ours[:].info.number, theirs[:].info.number)
    ours.close()


def test_frames_of_a_dict_observation_stack_as_tianshous(tmp_path):
    """A nested observation with stack_num > 1: Tianshou's get() stacks its frames with
    Batch.stack because its column is a Batch; the adapter's column is one too, so the
    stacked obs and obs_next (ignore_obs_next) are Batches of the same values."""
    theirs = tsd.ReplayBuffer(9, stack_num=3, ignore_obs_next=True)
    ours = ad.ReplayBuffer(9, stack_num=3, ignore_obs_next=True, path=str(tmp_path / "f"))
    for t in range(12):
        b = Batch(obs={"mask": t, "pos": np.array([t, -t])}, act=t % 2, rew=float(t), terminated=t % 5 == 4,
                  truncated=False, info={})
        theirs.add(b)
        ours.add(b)
    assert isinstance(ours.obs, Batch) and isinstance(theirs.obs, Batch)
    idx = np.array([0, 3, 4, 8])
    for got, want in [(ours.get(idx, "obs"), theirs.get(idx, "obs")), (ours[idx].obs_next, theirs[idx].obs_next),
                      (ours[idx].obs, theirs[idx].obs)]:
        assert isinstance(got, Batch) and isinstance(want, Batch)
        same(got, want)
    ours.close()


@pytest.mark.parametrize("main_size", [10, 0], ids=["main-10", "main-0"])
def test_a_reset_cache_keeps_its_old_rows_until_rewritten_as_tianshous(tmp_path, main_size):
    """Tianshou's reset of a sub-buffer (a CachedReplayBuffer's cache once its episode
    moved to the main buffer, or reset()) leaves the rows where they are: the full
    columns show them until new steps overwrite them. A main buffer of size 0 (only
    caching) holds nothing and is taken as Tianshou takes it."""
    theirs = tsd.CachedReplayBuffer(tsd.ReplayBuffer(main_size), 2, 5)
    ours = ad.CachedReplayBuffer(tsd.ReplayBuffer(main_size), 2, 5, path=str(tmp_path / "c"))
    plan = [(0, 1, False), (0, 2, False), (1, 3, False), (0, 4, True), (0, 5, False), (1, 6, True), (1, 7, False)]
    for env, value, done in plan:
        b = Batch(obs=[value], act=[value], rew=[float(value)], terminated=[done], truncated=[False])
        got = ours.add(b, buffer_ids=[env])
        want = theirs.add(b, buffer_ids=[env])
        same(got, want)
        same(np.asarray(ours.obs), theirs.obs)
        same(np.asarray(ours.act), theirs.act)
        assert len(ours) == len(theirs)
    plain_theirs, plain_ours = tsd.ReplayBuffer(4), ad.ReplayBuffer(4, path=str(tmp_path / "p"))
    for buf in (plain_theirs, plain_ours):
        for t in range(3):
            buf.add(Batch(obs=t + 1, act=t, rew=1.0, terminated=False, truncated=False))
        buf.reset()
        buf.add(Batch(obs=9, act=9, rew=1.0, terminated=False, truncated=False))
    same(np.asarray(plain_ours.obs), plain_theirs.obs)
    ours.close()
    plain_ours.close()
