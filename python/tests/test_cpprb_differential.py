"""Promise (issue 34, cpprb): ``replaystore.compat.cpprb`` behaves as cpprb 11 does. Each
test drives the real cpprb and the adapter with the same calls and compares what both
return: positions, sizes, every stored value with its dtype and shape, errors, draws made
with a seeded NumPy, n-step sums, files, and (where the draw is the library's own) the
distributions by chi-square. The differences the adapter documents are asserted as such.
"""

import io

import numpy as np
import pytest

from peers import chi_square, peer

cp = peer("cpprb")
peer("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from replaystore.compat import cpprb as ad  # noqa: E402

ENV = {
    "obs": {"shape": (2, 3)},
    "act": {"dtype": np.int16},
    "rew": {},
    "next_obs": {"shape": (2, 3)},
    "done": {},
    "half": {"dtype": np.float16, "shape": 2},
    "flag": {"dtype": np.bool_},
    "u": {"dtype": np.uint8, "shape": 4},
}


def rows(start, n, done_every=5):
    """``n`` transitions numbered from ``start``."""
    i = np.arange(start, start + n)
    return {
        "obs": np.repeat(i, 6).reshape(n, 2, 3) * 0.5,
        "act": i % 7,
        "rew": i * 1.25,
        "next_obs": np.repeat(i + 1, 6).reshape(n, 2, 3) * 0.5,
        "done": (i % done_every == done_every - 1).astype(float),
        "half": np.stack([i / 3, -i / 7], axis=1),
        "flag": i % 2 == 0,
        "u": np.stack([i % 256] * 4, axis=1),
    }


def same(a, b, exact=True):
    """Two cpprb results: the same keys, and per key the same dtype, shape and values."""
    assert set(a) == set(b), (sorted(a), sorted(b))
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype, (k, x.dtype, y.dtype)
        assert x.shape == y.shape, (k, x.shape, y.shape)
        if exact:
            np.testing.assert_array_equal(x, y, err_msg=k)
        else:
            np.testing.assert_allclose(x, y, rtol=2e-6, atol=1e-6, err_msg=k)


@pytest.fixture
def pair(tmp_path):
    made = []

    def make(cls_name, *args, **kwargs):
        theirs = getattr(cp, cls_name)(*args, **kwargs)
        ours = getattr(ad, cls_name)(*args, path=str(tmp_path / f"b{len(made)}"), **kwargs)
        made.append(ours)
        return theirs, ours

    yield make
    for b in made:
        b.close()


def test_adds_positions_sizes_and_every_value_match_through_wraps_and_clear(pair):
    theirs, ours = pair("ReplayBuffer", 7, ENV)
    n = 0
    for step, k in enumerate([1, 3, 1, 4, 2, 6, 1, 9]):
        batch = rows(n, k)
        if k == 1:
            batch = {key: v[0] for key, v in batch.items()}  # one transition, unbatched
        assert ours.add(**batch) == theirs.add(**batch)
        n += k
        assert ours.get_stored_size() == theirs.get_stored_size()
        assert ours.get_next_index() == theirs.get_next_index()
        assert ours.get_current_episode_len() == theirs.get_current_episode_len()
        same(ours.get_all_transitions(), theirs.get_all_transitions())
        if step == 4:
            theirs.clear()
            ours.clear()
            same(ours.get_all_transitions(), theirs.get_all_transitions())
            assert ours.get_next_index() == theirs.get_next_index() == 0
    assert ours.get_buffer_size() == theirs.get_buffer_size() == 7
    theirs.on_episode_end()
    ours.on_episode_end()
    assert ours.get_current_episode_len() == theirs.get_current_episode_len() == 0


def test_a_seeded_numpy_draws_the_same_transitions(pair):
    theirs, ours = pair("ReplayBuffer", 50, ENV)
    theirs.add(**rows(0, 73))
    ours.add(**rows(0, 73))
    for seed in range(5):
        np.random.seed(seed)
        a = theirs.sample(32)
        np.random.seed(seed)
        b = ours.sample(32)
        same(b, a)
    np.random.seed(9)
    a = theirs.get_all_transitions(shuffle=True)
    np.random.seed(9)
    same(ours.get_all_transitions(shuffle=True), a)


@pytest.mark.parametrize("plan", [(30,), (50,), (73,), (73, "clear", 20), (73, "clear", 64)])
def test_seeded_draws_match_in_every_ring_state(pair, plan):
    # A ring partly filled, exactly full, lapped, and refilled after a clear: position 0
    # holds the head in some and not in others, which the adapter's draw tells apart.
    theirs, ours = pair("ReplayBuffer", 50, ENV)
    n = 0
    for step in plan:
        if step == "clear":
            theirs.clear()
            ours.clear()
            continue
        theirs.add(**rows(n, step))
        ours.add(**rows(n, step))
        n += step
    for seed in range(3):
        np.random.seed(seed)
        a = theirs.sample(64)
        np.random.seed(seed)
        same(ours.sample(64), a)


def test_errors_are_cpprbs(pair):
    theirs, ours = pair("ReplayBuffer", 5, ENV)
    for rb in (theirs, ours):
        with pytest.raises(ValueError):
            rb.sample(1)  # empty
        partial = rows(0, 1)
        del partial["rew"]
        with pytest.raises(KeyError):
            rb.add(**partial)
    # The documented difference: cpprb has already taken the position when it finds the
    # key missing (a garbage transition is stored); replaystore stores nothing.
    assert (ours.get_stored_size(), theirs.get_stored_size()) == (0, 1)
    theirs.clear()
    # Keys env_dict does not name are ignored by both.
    assert ours.add(**rows(0, 2), extra=np.zeros(2)) == theirs.add(**rows(0, 2), extra=np.zeros(2))
    assert ours.is_Nstep() is theirs.is_Nstep() is False


def test_defaults_are_cpprbs(pair):
    env = {"a": {}, "b": {"shape": 3}, "c": {"shape": (2, 2), "dtype": np.int64}}
    for kwargs in ({}, {"default_dtype": np.float64}):
        theirs, ours = pair("ReplayBuffer", 4, env, **kwargs)
        batch = {"a": 1, "b": [1, 2, 3], "c": [[1, 2], [3, 4]]}
        assert ours.add(**batch) == theirs.add(**batch)
        same(ours.get_all_transitions(), theirs.get_all_transitions())
        np.random.seed(1)
        a = theirs.sample(3)
        np.random.seed(1)
        same(ours.sample(3), a)


def nstep_run(pair, nstep, plan, **kwargs):
    """Adds ``plan`` (batch sizes; ``None`` ends the episode) to both with ``Nstep``;
    returns both buffers and the positions cpprb filled from its episode-end flushes."""
    env = {"obs": {}, "rew": {}, "rew2": {"shape": 2}, "next_obs": {}, "done": {}}
    theirs, ours = pair(kwargs.pop("cls", "ReplayBuffer"), 64, env, Nstep=nstep, **kwargs)
    groups = []  # the positions each on_episode_end flushed, one list per call
    dones = []
    ends = []  # per step, where its episode's segment ends (the next on_episode_end)
    n = 0
    rng = np.random.default_rng(len(plan))
    for k in plan:
        if k is None:
            before = theirs.get_next_index()
            theirs.on_episode_end()
            ours.on_episode_end()
            groups.append([(before + i) % 64 for i in range((theirs.get_next_index() - before) % 64)])
            ends += [n] * (n - len(ends))
        else:
            i = np.arange(n, n + k)
            batch = {"obs": i, "rew": rng.normal(size=k), "rew2": rng.normal(size=(k, 2)),
                     "next_obs": i + 1, "done": (rng.random(k) < 0.15).astype(float)}
            assert ours.add(**batch) == theirs.add(**batch)
            dones.append(batch["done"])
            n += k
        assert ours.get_stored_size() == theirs.get_stored_size()
        assert ours.get_next_index() == theirs.get_next_index()
    ends += [n] * (n - len(ends))
    return theirs, ours, groups, (np.concatenate(dones) if dones else np.zeros(0)), np.array(ends, int)


def nstep_same(theirs, ours, groups, next_fields, dones, ends, size, one_by_one):
    a, b = theirs.get_all_transitions(), ours.get_all_transitions()
    flushed = [p for group in groups for p in group]
    keep = np.setdiff1d(np.arange(len(a["obs"])), flushed).astype(int)
    # done: cpprb's rule for transitions fed one by one, whichever way they come here: a
    # window that filled sums the dones of its first size - 1 steps (one ending on the
    # terminal step is not done), a window on_episode_end flushed sums all it has. The
    # documented differences: in batches cpprb also adds values its staging buffer was
    # filled with (1), so done can be 1 with no terminal step at all; at on_episode_end
    # it sums the waiting rows' dones in place (each pass adds sums already made), so a
    # flushed row can count a done twice.
    obs = b["obs"].ravel().astype(int)
    want = np.array([dones[i:min(i + size - 1, end)].sum() for i, end in zip(obs, ends[obs])])
    want[flushed] = [dones[i:end].sum() for i, end in zip(obs[flushed], ends[obs[flushed]])]
    np.testing.assert_array_equal(b["done"].ravel(), want)
    if one_by_one:
        np.testing.assert_array_equal(b["done"].ravel()[keep], a["done"].ravel()[keep])
    if one_by_one:
        short = np.array([dones[i:min(i + size - 1, end)].sum() for i, end in zip(obs, ends[obs])])
        expected = short.astype(float)
        for group in groups:
            if not group:
                continue
            d = dones[obs[group]].astype(float)  # the waiting rows' own dones, in order
            for i in range(1, len(d)):
                d[:-i] += d[i:]  # cpprb's accumulation, in place
            expected[group] = d
        np.testing.assert_array_equal(a["done"].ravel(), expected)
    for k in a:
        if k == "done":
            continue
        if k in next_fields:
            # The documented difference: flushed rows get the episode's last next value
            # in replaystore, cpprb's fill value 1 there.
            np.testing.assert_array_equal(b[k][keep], a[k][keep], err_msg=k)
            np.testing.assert_array_equal(a[k][flushed], np.ones_like(a[k][flushed]))
        else:
            same({k: b[k]}, {k: a[k]}, exact=False)
    return a, b


@settings(max_examples=60, deadline=None)
@given(plan=st.one_of(st.lists(st.one_of(st.none(), st.integers(1, 9)), min_size=1, max_size=14),
                      st.lists(st.one_of(st.none(), st.just(1)), min_size=1, max_size=30)),
       size=st.integers(2, 5), gamma=st.sampled_from([0.99, 0.5, 1.0]))
def test_nstep_sums_dones_and_next_values_match_for_random_add_sequences(tmp_path_factory, plan, size, gamma):
    nstep = {"size": size, "gamma": gamma, "rew": ["rew", "rew2"], "next": "next_obs"}
    made = []

    def make(cls, *args, **kwargs):
        theirs = getattr(cp, cls)(*args, **kwargs)
        ours = getattr(ad, cls)(*args, path=str(tmp_path_factory.mktemp("n")), **kwargs)
        made.append(ours)
        return theirs, ours

    theirs, ours, groups, dones, ends = nstep_run(make, nstep, plan + [None])
    flushed = [p for group in groups for p in group]
    try:
        one_by_one = all(k in (None, 1) for k in plan)
        a, b = nstep_same(theirs, ours, groups, {"next_obs"}, dones, ends, size, one_by_one)
        # Where cpprb holds the fill value, ours holds the last next value of the episode.
        for pos in flushed:
            assert b["next_obs"][pos] >= b["obs"][pos] + 1
        assert ours.is_Nstep() is theirs.is_Nstep() is True
    finally:
        for m in made:
            m.close()


def test_nstep_with_priorities_gives_each_summed_transition_its_first_steps_priority(pair):
    plan = [3, 2, None, 5, 1, 1, None]
    theirs, ours, _, _, _ = nstep_run(pair, {"size": 3, "rew": "rew", "next": "next_obs"}, [],
                                      cls="PrioritizedReplayBuffer", alpha=1.0, eps=0.0)
    n = 0
    for k in plan:
        if k is None:
            theirs.on_episode_end()
            ours.on_episode_end()
            continue
        i = np.arange(n, n + k)
        batch = {"obs": i, "rew": i * 1.0, "rew2": np.zeros((k, 2)), "next_obs": i + 1,
                 "done": np.zeros(k)}
        p = (i % 4 + 1).astype(float)
        assert ours.add(priorities=p, **batch) == theirs.add(priorities=p, **batch)
        n += k
    assert ours.get_stored_size() == theirs.get_stored_size()
    # Priority p at item obs=i: the draw frequency of each stored item is p / sum(p).
    ours_draw = ours.sample(40000, beta=1.0)
    obs = ours_draw["obs"].ravel().astype(int)
    counts = np.bincount(obs, minlength=n)
    expected_p = (np.arange(n) % 4 + 1).astype(float)
    stored = theirs.get_all_transitions()["obs"].ravel().astype(int)
    chi_square(counts[stored], expected_p[stored] / expected_p[stored].sum() * len(obs))


def test_prioritized_draws_weights_and_updates_match_cpprbs_distribution(pair):
    env = {"obs": {}}
    theirs, ours = pair("PrioritizedReplayBuffer", 16, env, alpha=0.7, eps=1e-3)
    p0 = np.linspace(0.1, 3.0, 12)
    for rb in (theirs, ours):
        assert rb.get_max_priority() == 1.0
        assert rb.add(obs=np.arange(12.0), priorities=p0) == 0
        rb.add(obs=[12.0, 13.0])  # the largest priority so far
    assert ours.get_max_priority() == pytest.approx(theirs.get_max_priority(), rel=1e-12)
    new = np.array([0.5, 4.0, 0.01, 2.0])
    for rb in (theirs, ours):
        rb.update_priorities([1, 5, 13, 7], new)
    assert ours.get_max_priority() == pytest.approx(theirs.get_max_priority(), rel=1e-12)
    draws = {}
    for name, rb in (("theirs", theirs), ("ours", ours)):
        s = rb.sample(60000, beta=0.5)
        assert s["weights"].dtype == np.float32 and s["indexes"].shape == (60000,)
        assert set(s) == {"obs", "weights", "indexes"}
        np.testing.assert_array_equal(s["obs"].ravel(), s["indexes"].astype(np.float32))
        draws[name] = s
    p = np.concatenate([p0, [p0.max()] * 2])  # the largest priority when 12, 13 were added
    p[[1, 5, 13, 7]] = new
    q = (p + 1e-3) ** 0.7
    for s in draws.values():
        chi_square(np.bincount(s["indexes"].astype(int), minlength=14), q / q.sum())
    # The weight of an index is the same function of the priorities in both.
    w = {name: dict(zip(s["indexes"].tolist(), s["weights"].tolist())) for name, s in draws.items()}
    for i in set(w["theirs"]) & set(w["ours"]):
        assert w["ours"][i] == pytest.approx(w["theirs"][i], rel=2e-3), i
    for rb in (theirs, ours):
        with pytest.raises(TypeError):
            rb.update_priorities([0], None)
        with pytest.raises(ValueError):
            rb.add(obs=[1.0], priorities=[1.0, 2.0])


def test_check_for_update_skips_what_was_overwritten_since_the_draw(pair):
    theirs, ours = pair("PrioritizedReplayBuffer", 4, {"obs": {}}, alpha=1.0, eps=0.0,
                        check_for_update=True)
    for rb in (theirs, ours):
        rb.add(obs=[0.0, 1.0, 2.0, 3.0])
        rb.sample(4)
        rb.add(obs=[4.0])  # overwrites position 0
        rb.update_priorities([0, 1, 2, 3], [50.0, 0.0, 0.0, 1.0])
        counts = np.bincount(rb.sample(20000)["indexes"].astype(int), minlength=4)
        assert counts[1] == counts[2] == 0
        chi_square(counts, [1.0, 0, 0, 1.0])


def test_reverse_buffer_returns_cpprbs_positions_draw_after_draw(pair):
    theirs, ours = pair("ReverseReplayBuffer", 40, {"obs": {}}, stride=3)
    n = 0
    for k in [5, 20, 1, 30, 7, 2]:
        for rb in (theirs, ours):
            rb.add(obs=np.arange(n, n + k, dtype=float))
        n += k
        for _ in range(4):
            same(ours.sample(6), theirs.sample(6))


def test_next_of_and_stack_compress_sample_what_cpprb_samples(pair):
    env = {"obs": {"shape": (3, 4)}, "act": {}, "done": {}}
    theirs, ours = pair("ReplayBuffer", 9, env, next_of="obs", stack_compress="obs")
    frames = np.arange(40.0)
    t = 0
    for episode_len in [4, 6, 3, 5]:
        for _ in range(episode_len):
            obs = np.stack([frames[t:t + 4]] * 3)
            nxt = np.stack([frames[t + 1:t + 5]] * 3)
            kw = dict(obs=obs, act=t, next_obs=nxt, done=0.0)
            assert ours.add(**kw) == theirs.add(**kw)
            t += 1
        for rb in (theirs, ours):
            rb.on_episode_end()
        same(ours.get_all_transitions(), theirs.get_all_transitions())
        np.random.seed(t)
        a = theirs.sample(16)
        np.random.seed(t)
        same(ours.sample(16), a)


def test_transitions_saved_by_either_library_load_in_the_other(pair, tmp_path):
    theirs, ours = pair("ReplayBuffer", 10, ENV)
    theirs.add(**rows(0, 13))
    ours.add(**rows(0, 13))
    f1, f2 = tmp_path / "cpprb.npz", tmp_path / "ours.npz"
    theirs.save_transitions(str(f1))
    ours.save_transitions(str(f2))
    t2, o2 = pair("ReplayBuffer", 10, ENV)
    o2.load_transitions(str(f1))
    t2.load_transitions(str(f2))
    same(o2.get_all_transitions(), t2.get_all_transitions())
    same(o2.get_all_transitions(), theirs.get_all_transitions())
    assert o2.get_next_index() == t2.get_next_index()
    buf = io.BytesIO()
    theirs.save_transitions(buf, safe=False)
    buf.seek(0)
    t3, o3 = pair("ReplayBuffer", 10, ENV)
    t3.load_transitions(buf)
    buf.seek(0)
    o3.load_transitions(buf)  # without next_of/stack_compress cpprb writes the safe layout
    same(o3.get_all_transitions(), t3.get_all_transitions())


def test_cpprbs_compressed_file_layout_loads_as_cpprb_loads_it(pair, tmp_path):
    """safe=False with next_of and stack_compress: next values are the following rows
    and episode ends sit in a cache; both libraries load the same transitions."""
    env = {"obs": {"shape": (2, 3)}, "act": {}, "done": {}}
    theirs, ours = pair("ReplayBuffer", 12, env, next_of="obs", stack_compress="obs")
    t = 0
    for episode_len in [4, 3, 2]:
        for _ in range(episode_len):
            f = np.arange(t, t + 3, dtype=float)
            theirs.add(obs=np.stack([f, f]), act=t, next_obs=np.stack([f + 1, f + 1]), done=0.0)
            t += 1
        theirs.on_episode_end()
    f = tmp_path / "c.npz"
    theirs.save_transitions(str(f), safe=False)
    with np.load(str(f), allow_pickle=True) as d:
        assert not bool(d["safe"])  # the layout under test
    again, mine = pair("ReplayBuffer", 12, env, next_of="obs", stack_compress="obs")
    again.load_transitions(str(f))
    mine.load_transitions(str(f))
    same(mine.get_all_transitions(), again.get_all_transitions())
    same(mine.get_all_transitions(), theirs.get_all_transitions())


def test_create_buffer_and_the_space_helpers_match(pair):
    gym = pytest.importorskip("gymnasium")
    from gymnasium import spaces

    class Env:
        def __init__(self, obs, act):
            self.observation_space, self.action_space = obs, act

    cases = [
        Env(spaces.Box(-1, 1, (3, 2)), spaces.Discrete(4)),
        Env(spaces.Tuple([spaces.Box(0, 1, (2,)), spaces.Discrete(3)]), spaces.MultiDiscrete([2, 3])),
        Env(spaces.Dict({"pos": spaces.Box(0, 1, (2,)), "id": spaces.Discrete(5)}), spaces.MultiBinary(3)),
        gym.make("CartPole-v1"),
    ]
    for env in cases:
        for kw in ({}, {"int_type": np.int64, "float_type": np.float64}):
            a, b = cp.create_env_dict(env, **kw), ad.create_env_dict(env, **kw)
            assert a.keys() == b.keys()
            for k in a:
                assert np.dtype(a[k]["dtype"]) == np.dtype(b[k]["dtype"])
                assert np.atleast_1d(a[k]["shape"]).tolist() == np.atleast_1d(b[k]["shape"]).tolist()
        obs, act = env.observation_space.sample(), env.action_space.sample()
        fa = cp.create_before_add_func(env)(obs, act, obs, 1.0, 0.0)
        fb = ad.create_before_add_func(env)(obs, act, obs, 1.0, 0.0)
        assert fa.keys() == fb.keys()
    with pytest.raises(NotImplementedError):
        ad.create_env_dict(Env(spaces.Text(5), spaces.Discrete(2)))
    theirs, ours = pair("ReplayBuffer", 4, {"x": {}})
    assert type(ad.create_buffer(4, {"x": {}})).__name__ == type(cp.create_buffer(4, {"x": {}})).__name__
    p = ad.create_buffer(4, {"x": {}}, prioritized=True, alpha=0.5)
    assert type(p).__name__ == type(cp.create_buffer(4, {"x": {}}, prioritized=True)).__name__
    assert p.get_max_priority() == 1.0
    p.close()


@pytest.mark.parametrize("strategy", ["final", "future", "episode", "random"])
def test_hindsight_buffer_relabels_as_cpprb_does(pair, strategy):
    env = {"obs": {"shape": 2}, "act": {}, "next_obs": {"shape": 2}}

    def reward(s, a, g):
        return -1.0 * (np.abs(s - g).sum(axis=1) > 0.5)

    theirs, ours = pair("HindsightReplayBuffer", 200, env, 10, reward, strategy=strategy,
                        additional_goals=3, prioritized=False)
    for episode in range(3):
        for t in range(6):
            kw = dict(obs=[t, episode], act=t, next_obs=[t + 1, episode])
            theirs.add(**kw)
            ours.add(**kw)
        theirs.on_episode_end([9, 9])
        ours.on_episode_end([9, 9])
        assert ours.get_stored_size() == theirs.get_stored_size()
    a, b = theirs.get_all_transitions(), ours.get_all_transitions()
    assert {k: (v.dtype, v.shape) for k, v in a.items()} == {k: (v.dtype, v.shape) for k, v in b.items()}
    if strategy == "final":
        same(b, a)
    # Every stored reward is reward(next_obs, act, goal), and each relabelled goal is a
    # state the episode reached (at or after the step for "future").
    np.testing.assert_array_equal(b["rew"].ravel(), reward(b["next_obs"], b["act"], b["goal"]))
    for rb in (theirs, ours):
        with pytest.raises(ValueError):
            rb.update_priorities([0], [1.0])
        for _ in range(10):
            rb.add(obs=[0, 0], act=0, next_obs=[0, 0])
        with pytest.raises(ValueError, match="Exceed"):
            rb.add(obs=[0, 0], act=0, next_obs=[0, 0])
    with pytest.raises(ValueError, match="Unknown Strategy"):
        ad.HindsightReplayBuffer(10, env, 5, reward, strategy="nope")


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 5), st.integers(0, 2 ** 16)),
    st.tuples(st.just("delete"), st.integers(-1, 4), st.just(0)),
    st.tuples(st.just("clear"), st.just(0), st.just(0)),
    st.tuples(st.just("sample"), st.integers(1, 6), st.integers(0, 99)),
), min_size=1, max_size=25))
def test_selective_buffer_episodes_deletes_and_draws_match(tmp_path_factory, ops):
    theirs = cp.SelectiveReplayBuffer(4, 2, 1, Nepisodes=3, rew_dim=2)
    ours = ad.SelectiveReplayBuffer(4, 2, 1, Nepisodes=3, rew_dim=2, path=str(tmp_path_factory.mktemp("s")))
    t = 0
    try:
        for op, a, b in ops:
            if op == "add":
                i = np.arange(t, t + a, dtype=float)
                # At most one done per add: cpprb sees only an add's first done (the
                # documented difference; test_selective_buffer_closes_an_episode_at_every_done).
                done = np.zeros(a)
                if b % 3 == 0:
                    done[b % a] = 1.0
                args = (np.stack([i, -i], 1), i, np.stack([i, i], 1), np.stack([i + 1, -i], 1), done)
                if a == 1:
                    args = tuple(np.asarray(x)[0] for x in args)
                assert ours.add(*args) == theirs.add(*args)
                t += a
            elif op == "delete" and a < 0:
                for rb in (ours, theirs):
                    with pytest.raises(OverflowError):
                        rb.delete_episode(a)
            elif op == "delete":
                assert ours.delete_episode(a) == theirs.delete_episode(a)
            elif op == "clear":
                ours.clear()
                theirs.clear()
            elif theirs.get_stored_size():
                np.random.seed(b)
                x = theirs.sample(a)
                np.random.seed(b)
                same(ours.sample(a), x)
            assert ours.get_stored_size() == theirs.get_stored_size()
            assert ours.get_next_index() == theirs.get_next_index()
            assert ours.get_stored_episode_size() == theirs.get_stored_episode_size()
            for e in range(theirs.get_stored_episode_size() + 2):
                same(ours.get_episode(e), theirs.get_episode(e))
            for rb in (ours, theirs):
                with pytest.raises(OverflowError):
                    rb.get_episode(-1)
        assert ours.get_buffer_size() == theirs.get_buffer_size() == 12
        assert (ours.get_obs_dim(), ours.get_act_dim(), ours.get_rew_dim(), ours.get_obs_shape()) == \
            (theirs.get_obs_dim(), theirs.get_act_dim(), theirs.get_rew_dim(), theirs.get_obs_shape())
    finally:
        ours.close()


def test_selective_buffer_closes_an_episode_at_every_done(tmp_path):
    """The documented difference: cpprb closes an episode at an add's first done only;
    replaystore at each (as it would had they come one add at a time)."""
    theirs = cp.SelectiveReplayBuffer(8, 1, 1, Nepisodes=2)
    ours = ad.SelectiveReplayBuffer(8, 1, 1, Nepisodes=2, path=str(tmp_path / "s"))
    one_by_one = cp.SelectiveReplayBuffer(8, 1, 1, Nepisodes=2)
    done = np.array([0, 1, 0, 1, 0], float)
    i = np.arange(5.0)
    theirs.add(i, i, i, i + 1, done)
    ours.add(i, i, i, i + 1, done)
    for k in range(5):
        one_by_one.add(i[k], i[k], i[k], i[k] + 1, done[k])
    assert theirs.get_stored_episode_size() == 2  # [0, 1] and [2, 3, 4]
    assert ours.get_stored_episode_size() == one_by_one.get_stored_episode_size() == 3
    for e in range(3):
        same(ours.get_episode(e), one_by_one.get_episode(e))
    ours.close()
