"""Promise (issue 34, Stable-Baselines3): ``replaystore.compat.sb3``'s buffers behave as
SB3 2.9's do. Each test drives SB3's buffer and the adapter with the same calls and a
NumPy seeded the same, and compares what SB3's algorithms see: ``pos``, ``full``,
``size()``, every sampled tensor (observations, actions, next observations, dones,
rewards, n-step discounts) and the stored arrays; they are used as ``replay_buffer_class``
by DQN and SAC, and ``save_replay_buffer`` / ``load_replay_buffer`` round-trip."""

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from peers import peer

peer("stable_baselines3")
peer("hypothesis")

import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from stable_baselines3.common import buffers as sb  # noqa: E402

from replaystore.compat import sb3 as ad  # noqa: E402

SPACES = {
    "box": (spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-2, 2, (2,), np.float64)),
    "discrete": (spaces.Discrete(7), spaces.Discrete(3)),
    "image": (spaces.Box(0, 255, (2, 4, 4), np.uint8), spaces.MultiDiscrete([3, 4])),
}


def step_values(obs_space, act_space, n_envs, rng, t):
    def draw(space):
        if isinstance(space, spaces.Discrete):
            return rng.integers(0, space.n, size=n_envs)
        if isinstance(space, spaces.MultiDiscrete):
            return rng.integers(0, space.nvec, size=(n_envs, len(space.nvec)))
        if isinstance(space, spaces.Dict):
            return {k: draw(s) for k, s in space.spaces.items()}
        return (rng.random((n_envs, *space.shape)) * 10).astype(space.dtype)

    done = rng.random(n_envs) < 0.2
    infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
    return draw(obs_space), draw(obs_space), draw(act_space), rng.normal(size=n_envs).astype(np.float32), done, infos


def same_samples(a, b):
    assert type(a).__name__ == type(b).__name__
    for name, x, y in zip(a._fields, a, b):
        if x is None:
            assert y is None, name
            continue
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, (name, k)
                assert torch.equal(x[k], y[k]), (name, k)
            continue
        assert x.dtype == y.dtype and x.shape == y.shape, (name, x.dtype, y.dtype, x.shape, y.shape)
        assert torch.allclose(x, y, rtol=1e-6, atol=1e-6) if x.is_floating_point() else torch.equal(x, y), name


def drive(theirs, ours, obs_space, act_space, n_envs, plan, seed=0):
    rng = np.random.default_rng(seed)
    t = 0
    for op in plan:
        if op == "reset":
            theirs.reset()
            ours.reset()
        elif isinstance(op, int):
            for _ in range(op):
                args = step_values(obs_space, act_space, n_envs, rng, t)
                theirs.add(*pickle.loads(pickle.dumps(args)))
                ours.add(*args)
                t += 1
        else:  # ("sample", n, seed)
            _, n, s = op
            if theirs.size() == 0:
                continue
            np.random.seed(s)
            a = theirs.sample(n)
            np.random.seed(s)
            same_samples(a, ours.sample(n))
        assert (ours.pos, ours.full, ours.size()) == (theirs.pos, theirs.full, theirs.size())


@pytest.mark.parametrize("kind", sorted(SPACES))
@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("optimize", [False, True])
def test_adds_and_seeded_draws_match(tmp_path, kind, n_envs, optimize):
    obs_space, act_space = SPACES[kind]
    kw = dict(n_envs=n_envs, optimize_memory_usage=optimize, handle_timeout_termination=not optimize)
    theirs = sb.ReplayBuffer(10 * n_envs, obs_space, act_space, **kw)
    ours = ad.ReplayBuffer(10 * n_envs, obs_space, act_space, path=str(tmp_path / "b"), **kw)
    plan = [3, ("sample", 16, 1), 9, ("sample", 32, 2), 14, ("sample", 64, 3), "reset", 2,
            ("sample", 8, 4), 25, ("sample", 64, 5)]
    drive(theirs, ours, obs_space, act_space, n_envs, plan, seed=n_envs)
    for name in ("actions", "rewards", "dones", "timeouts") + (() if optimize else ("observations", "next_observations")):
        np.testing.assert_array_equal(np.asarray(getattr(ours, name)), getattr(theirs, name), err_msg=name)
    ours.close()


@settings(max_examples=30, deadline=None)
@given(plan=st.lists(st.one_of(st.integers(1, 7), st.just("reset"),
                               st.tuples(st.just("sample"), st.integers(1, 40), st.integers(0, 999))),
                     max_size=12),
       n_steps=st.integers(1, 4), n_envs=st.sampled_from([1, 2]))
def test_nstep_returns_match_for_random_sequences(tmp_path_factory, plan, n_steps, n_envs):
    obs_space, act_space = SPACES["box"]
    kw = dict(n_envs=n_envs, n_steps=n_steps, gamma=0.9)
    theirs = sb.NStepReplayBuffer(6 * n_envs, obs_space, act_space, **kw)
    ours = ad.NStepReplayBuffer(6 * n_envs, obs_space, act_space, path=str(tmp_path_factory.mktemp("n")), **kw)
    try:
        drive(theirs, ours, obs_space, act_space, n_envs, plan + [("sample", 64, 7)], seed=len(plan))
    finally:
        ours.close()


@settings(max_examples=30, deadline=None)
@given(plan=st.lists(st.one_of(st.integers(1, 9), st.just("reset"),
                               st.tuples(st.just("sample"), st.integers(1, 40), st.integers(0, 999))),
                     max_size=12))
def test_random_sequences_on_every_layout_match(tmp_path_factory, plan):
    for kind in sorted(SPACES):
        obs_space, act_space = SPACES[kind]
        theirs = sb.ReplayBuffer(8, obs_space, act_space, n_envs=2)
        ours = ad.ReplayBuffer(8, obs_space, act_space, n_envs=2, path=str(tmp_path_factory.mktemp("r")))
        try:
            drive(theirs, ours, obs_space, act_space, 2, plan + [("sample", 32, 1)], seed=len(plan))
        finally:
            ours.close()


def test_dict_observations_match(tmp_path):
    obs_space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "id": spaces.Discrete(5),
                             "img": spaces.Box(0, 255, (3, 3), np.uint8)})
    act_space = spaces.Box(-1, 1, (2,), np.float32)
    theirs = sb.DictReplayBuffer(12, obs_space, act_space, n_envs=2)
    ours = ad.DictReplayBuffer(12, obs_space, act_space, n_envs=2, path=str(tmp_path / "d"))
    drive(theirs, ours, obs_space, act_space, 2, [4, ("sample", 10, 1), 9, ("sample", 50, 2), "reset", 3,
                                                  ("sample", 5, 3)])
    # Up to size(): past it SB3's arrays keep what was there before reset(), the
    # adapter's read zeros (the documented difference; no draw reaches there).
    n = theirs.size()
    for k in obs_space.spaces:
        np.testing.assert_array_equal(np.asarray(ours.observations[k])[:n], theirs.observations[k][:n])
        np.testing.assert_array_equal(np.asarray(ours.next_observations[k])[:n], theirs.next_observations[k][:n])
        assert not np.asarray(ours.observations[k])[n:].any()
    with pytest.raises(AssertionError):
        ad.DictReplayBuffer(4, obs_space, act_space, optimize_memory_usage=True,
                            handle_timeout_termination=False)
    with pytest.raises(AssertionError):
        ad.DictReplayBuffer(4, spaces.Box(0, 1, (2,)), act_space)
    ours.close()


def test_errors_are_sb3s(tmp_path):
    obs_space, act_space = SPACES["box"]
    for cls in (sb.ReplayBuffer, ad.ReplayBuffer):
        with pytest.raises(ValueError, match="optimize_memory_usage"):
            cls(4, obs_space, act_space, optimize_memory_usage=True)
    for cls in (sb.NStepReplayBuffer, ad.NStepReplayBuffer):
        with pytest.raises(NotImplementedError):
            cls(4, obs_space, act_space, optimize_memory_usage=True, handle_timeout_termination=False)
    ours = ad.ReplayBuffer(4, obs_space, act_space, path=str(tmp_path / "b"))
    with pytest.raises(TypeError, match="not rewritten"):
        ours.rewards[0] = 1.0
    ours.close()
    # A Dict space given to ReplayBuffer: a TypeError in both (ours names the class to use).
    dict_space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "id": spaces.Discrete(5)})
    with pytest.raises(TypeError):
        sb.ReplayBuffer(4, dict_space, act_space)
    with pytest.raises(TypeError, match="use DictReplayBuffer"):
        ad.ReplayBuffer(4, dict_space, act_space, path=str(tmp_path / "dict"))


def test_the_one_write_sb3_makes_ends_the_last_trajectory_in_both(tmp_path):
    obs_space, act_space = SPACES["box"]
    kw = dict(optimize_memory_usage=True, handle_timeout_termination=False)
    theirs = sb.ReplayBuffer(6, obs_space, act_space, **kw)
    ours = ad.ReplayBuffer(6, obs_space, act_space, path=str(tmp_path / "b"), **kw)
    drive(theirs, ours, obs_space, act_space, 1, [4])
    for rb in (theirs, ours):
        rb.dones[(rb.pos - 1) % rb.buffer_size] = True  # OffPolicyAlgorithm._setup_learn
    np.testing.assert_array_equal(np.asarray(ours.dones), theirs.dones)
    drive(theirs, ours, obs_space, act_space, 1, [3, ("sample", 40, 3)])
    ours.close()
    again = ad.ReplayBuffer(6, obs_space, act_space, path=str(tmp_path / "b"), **kw)
    np.testing.assert_array_equal(np.asarray(again.dones), theirs.dones)
    again.close()


@pytest.fixture(autouse=True)
def sb3_logs_in_tmp_path(tmp_path, monkeypatch):
    """SB3's logger makes a folder in the temporary directory for each learn(); here
    it goes under the test's own folder."""
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "sb3-logs"))


@pytest.mark.parametrize("keep", [None, 2])
def test_every_buffer_a_checkpoint_callback_saves_loads_unless_told_to_keep_fewer(tmp_path, keep):
    """Issue 54.4: SB3's CheckpointCallback with save_replay_buffer=True keeps every
    file it writes; every one of them loads (the snapshots it names are all kept). With
    keep_states=K only the newest K do, and an older one's error says the rule and the
    setting."""
    import gymnasium as gym
    import stable_baselines3 as sb3lib
    from stable_baselines3.common.callbacks import CheckpointCallback

    import replaystore as rs

    kwargs = {"path": str(tmp_path / "rb"), **({"keep_states": keep} if keep else {})}
    model = sb3lib.DQN("MlpPolicy", gym.make("CartPole-v1"), buffer_size=300, learning_starts=50,
                       batch_size=16, replay_buffer_class=ad.ReplayBuffer,
                       replay_buffer_kwargs=kwargs, seed=0, device="cpu")
    ckpt = CheckpointCallback(save_freq=100, save_path=str(tmp_path / "ckpt"), save_replay_buffer=True)
    model.learn(500, callback=ckpt)  # 5 checkpoints; the ring laps after 300 steps
    saved = sorted((tmp_path / "ckpt").glob("*replay_buffer_*.pkl"),
                   key=lambda p: int(p.stem.rsplit("_", 2)[-2]))
    assert len(saved) == 5
    for k, pkl in enumerate(saved):
        # SB3 calls the callback before it stores that step's transition.
        held = 100 * (k + 1) - 1
        if keep is None or k >= len(saved) - keep:
            model.load_replay_buffer(str(pkl))
            assert model.replay_buffer.size() == min(held, 300), pkl
        else:
            with pytest.raises(rs.StateError, match="keep_states") as e:
                model.load_replay_buffer(str(pkl))
            assert "buf.keep_states = None" in str(e.value), e.value
    model.replay_buffer.close()
    import gc

    gc.collect()


def test_an_evaluation_loads_the_model_while_training_holds_the_buffer(tmp_path, caplog):
    """Issue 54.5: DQN.load of a saved model in a second process, while the trainer
    holds the buffer's folder, opens the buffer to read (a warning, the trainer's steps
    visible, adds refused) rather than failing with LockedError."""
    import gymnasium as gym
    import stable_baselines3 as sb3lib

    import replaystore as rs

    path, zip_path = str(tmp_path / "rb"), str(tmp_path / "model.zip")
    trainer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, gymnasium as gym, stable_baselines3 as sb3lib
        from replaystore.compat import sb3
        model = sb3lib.DQN("MlpPolicy", gym.make("CartPole-v1"), buffer_size=500, learning_starts=50,
                           replay_buffer_class=sb3.ReplayBuffer, replay_buffer_kwargs={{"path": {path!r}}},
                           seed=0, device="cpu")
        model.learn(120)
        model.save({zip_path!r})
        print("saved", flush=True)
        sys.stdin.read()  # holds the folder until told
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ,
                                                                        "SB3_LOGDIR": str(tmp_path)})
    try:
        assert trainer.stdout.readline().strip() == "saved"
        with caplog.at_level("WARNING"):
            model = sb3lib.DQN.load(zip_path, env=gym.make("CartPole-v1"), device="cpu")
        assert "another process writes this replay buffer" in caplog.text
        assert isinstance(model.replay_buffer, ad.ReplayBuffer)
        assert model.replay_buffer.size() == 120
        model.predict(np.zeros(4, np.float32))
        with pytest.raises(rs.ReadOnlyError):
            model.learn(10)
        model.replay_buffer.close()
    finally:
        trainer.stdin.close()
        assert trainer.wait(timeout=120) == 0


@pytest.mark.parametrize("algo", ["DQN", "SAC", "TD3", "DDPG"])
def test_algorithms_learn_save_and_load_through_the_adapter(tmp_path, algo):
    import gymnasium as gym
    import stable_baselines3 as sb3lib

    env = gym.make("CartPole-v1" if algo == "DQN" else "Pendulum-v1")
    path = str(tmp_path / "rb")
    model = getattr(sb3lib, algo)("MlpPolicy", env, buffer_size=500, learning_starts=64, batch_size=32,
                                  replay_buffer_class=ad.ReplayBuffer, replay_buffer_kwargs={"path": path},
                                  seed=0, device="cpu")
    model.learn(300)
    assert isinstance(model.replay_buffer, ad.ReplayBuffer)
    assert model.replay_buffer.size() == model.num_timesteps == 300
    saved = tmp_path / "buffer.pkl"
    model.save_replay_buffer(saved)
    # O(1): the pickle names the folder and a snapshot; it holds no transition.
    assert os.path.getsize(saved) < 64 * 1024
    before = np.asarray(model.replay_buffer.observations).copy()
    model.learn(200, reset_num_timesteps=False)
    assert model.replay_buffer.size() == 500
    model.load_replay_buffer(saved)
    assert isinstance(model.replay_buffer, ad.ReplayBuffer)
    assert model.replay_buffer.size() == 300
    np.testing.assert_array_equal(np.asarray(model.replay_buffer.observations), before)
    model.learn(100, reset_num_timesteps=False)
    model.replay_buffer.close()
    # The buffer load_replay_buffer replaced shares the folder's writer until it is
    # collected; a folder has one writer, so the fresh process needs it gone.
    import gc

    gc.collect()
    # A fresh process loads it (the folder holds the snapshot).
    code = textwrap.dedent(f"""
        import gymnasium as gym, stable_baselines3 as sb3lib
        from replaystore.compat import sb3
        env = gym.make({"'CartPole-v1'" if algo == "DQN" else "'Pendulum-v1'"})
        model = sb3lib.{algo}("MlpPolicy", env, buffer_size=500, replay_buffer_class=sb3.ReplayBuffer,
                              replay_buffer_kwargs={{"path": {path!r}}}, device="cpu")
        model.load_replay_buffer({str(saved)!r})
        print(model.replay_buffer.size(), model.replay_buffer.pos)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["300", "300"]


def test_a_buffer_without_a_folder_pickles_its_transitions(tmp_path):
    obs_space, act_space = SPACES["image"]
    theirs = sb.ReplayBuffer(5, obs_space, act_space, n_envs=1)
    ours = ad.ReplayBuffer(5, obs_space, act_space, n_envs=1)
    drive(theirs, ours, obs_space, act_space, 1, [7])
    back = pickle.loads(pickle.dumps(ours))
    ours.close()
    drive(theirs, back, obs_space, act_space, 1, [("sample", 20, 1), 2, ("sample", 20, 2)])
    np.testing.assert_array_equal(np.asarray(back.observations), theirs.observations)
    back.close()


def test_a_killed_run_resumes_with_every_step_it_added(tmp_path):
    from kill import run_until_killed

    path = str(tmp_path / "rb")
    code = textwrap.dedent(f"""
        import numpy as np
        from gymnasium import spaces
        from replaystore.compat import sb3
        rb = sb3.ReplayBuffer(64 * 2, spaces.Box(-1e9, 1e9, (3,), np.float32), spaces.Discrete(4),
                              n_envs=2, path={path!r})
        t = rb.pos + (64 if rb.full else 0)
        while True:
            obs = np.full((2, 3), t, np.float32)
            rb.add(obs, obs + 1, np.array([t % 4, (t + 1) % 4]), np.array([t, -t], np.float32),
                   np.array([False, t % 5 == 0]), [{{}}, {{}}])
            t += 1
            print(t, flush=True)
    """)
    seen = run_until_killed(code, 150)
    acked = seen[-1]
    obs_space, act_space = spaces.Box(-1e9, 1e9, (3,), np.float32), spaces.Discrete(4)
    rb = ad.ReplayBuffer(128, obs_space, act_space, n_envs=2, path=path)
    # Every acknowledged step, and at most the one the kill cut (a step lands whole).
    assert rb.full and rb.pos in (acked % 64, (acked + 1) % 64)
    obs = np.asarray(rb.observations)[:, 0, 0]
    newest = int(obs.max())
    assert newest in (acked - 1, acked)
    np.testing.assert_array_equal(np.sort(obs), np.arange(newest - 63, newest + 1))
    np.testing.assert_array_equal(np.asarray(rb.rewards)[:, 1], -obs)
    np.testing.assert_array_equal(np.asarray(rb.dones)[:, 1], (obs % 5 == 0).astype(np.float32))
    rb.close()


def her_env(n_envs=1):
    from stable_baselines3.common.envs import BitFlippingEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: BitFlippingEnv(n_bits=4, continuous=False, max_steps=6)] * n_envs)


def her_drive(theirs, ours, n_envs, plan, seed):
    rng = np.random.default_rng(seed)
    space = theirs.observation_space
    for op in plan:
        if isinstance(op, int):
            for _ in range(op):
                obs = {k: rng.integers(0, 2, size=(n_envs, *s.shape)).astype(s.dtype) for k, s in space.spaces.items()}
                nxt = {k: rng.integers(0, 2, size=(n_envs, *s.shape)).astype(s.dtype) for k, s in space.spaces.items()}
                act = rng.integers(0, 4, size=n_envs)
                rew = rng.normal(size=n_envs).astype(np.float32)
                done = rng.random(n_envs) < 0.3
                infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
                theirs.add(*pickle.loads(pickle.dumps((obs, nxt, act, rew, done, infos))))
                ours.add(obs, nxt, act, rew, done, infos)
        else:
            _, n, s = op
            if not (theirs.ep_length > 0).any():
                for rb in (theirs, ours):
                    with pytest.raises(RuntimeError, match="end of the first episode"):
                        rb.sample(n)
                continue
            np.random.seed(s)
            a = theirs.sample(n)
            np.random.seed(s)
            same_samples(a, ours.sample(n))
        assert (ours.pos, ours.full) == (theirs.pos, theirs.full)
        np.testing.assert_array_equal(ours.ep_start, theirs.ep_start)
        np.testing.assert_array_equal(ours.ep_length, theirs.ep_length)
        np.testing.assert_array_equal(ours._current_ep_start, theirs._current_ep_start)


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
@pytest.mark.parametrize("n_envs", [1, 2])
def test_her_relabels_and_keeps_episodes_as_sb3_and_after_a_reopen(tmp_path, strategy, n_envs):
    from stable_baselines3.her.her_replay_buffer import HerReplayBuffer as SB3Her

    env = her_env(n_envs)
    kw = dict(n_envs=n_envs, goal_selection_strategy=strategy, n_sampled_goal=3)
    bs = 9 * n_envs
    theirs = SB3Her(bs, env.observation_space, env.action_space, env, **kw)
    path = str(tmp_path / "her")
    ours = ad.HerReplayBuffer(bs, env.observation_space, env.action_space, env, path=path, **kw)
    plan = [2, ("sample", 8, 1), 5, ("sample", 30, 2), 11, ("sample", 64, 3), 4, ("sample", 64, 4)]
    her_drive(theirs, ours, n_envs, plan, seed=n_envs)
    ours.close()
    # Reopened, it knows the episodes from the stored steps alone.
    again = ad.HerReplayBuffer(bs, env.observation_space, env.action_space, env, path=path, **kw)
    her_drive(theirs, again, n_envs, [("sample", 64, 5), 7, ("sample", 64, 6)], seed=9)
    again.close()


def test_her_trains_dqn_and_its_saved_buffer_loads_with_truncation(tmp_path):
    from stable_baselines3 import DQN
    from stable_baselines3.common.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4, continuous=False, max_steps=6)
    path = str(tmp_path / "her")
    model = DQN("MultiInputPolicy", env, buffer_size=400, learning_starts=30, batch_size=16, device="cpu",
                replay_buffer_class=ad.HerReplayBuffer,
                replay_buffer_kwargs={"n_sampled_goal": 4, "goal_selection_strategy": "future", "path": path},
                seed=1)
    model.learn(150)
    rb = model.replay_buffer
    steps = model.num_timesteps  # whole collection rounds: 150 or a little more
    assert isinstance(rb, ad.HerReplayBuffer) and rb.size() == steps
    saved = tmp_path / "her.pkl"
    model.save_replay_buffer(saved)
    assert os.path.getsize(saved) < 64 * 1024
    model.learn(10, reset_num_timesteps=False)  # mid-episode, most likely
    model.load_replay_buffer(saved, truncate_last_traj=True)
    rb = model.replay_buffer
    assert rb.size() == steps and rb.env is not None
    # Truncated: every step belongs to a finished episode again, the newest one too.
    assert (rb._current_ep_start == rb.pos).all()
    assert rb.ep_length[(rb.pos - 1) % rb.buffer_size, 0] > 0
    model.learn(50, reset_num_timesteps=False)
    rb.close()
