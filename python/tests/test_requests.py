"""Promise (issue 55, point 1): a draw is one ``replaystore.Request``, which every
handle's ``sample`` takes and draws as its keyword form draws (the same batch for the
same seed); a request pickles (a Ray shard receives one) and draws the same after; its
options go inside it, never beside it; keywords that do not go together are refused
where it is built."""

import pickle

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"x": "int64", "obs": "float32", "reward": "float32"}


def filled(tmp_path, **options):
    buf = rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, 200, seed=1, **options)
    for e in range(6):
        t = np.arange(9, dtype=np.float32)
        buf.add_episode({"obs": 10 * e + t, "x": np.arange(8), "reward": np.ones(8, np.float32)},
                        terminated=True)
    return buf


def same(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


def reward(achieved, desired, info):
    return -(np.abs(achieved - desired) > 0.5).astype(np.float32)


REQUESTS = [
    (rs.Request.rows(16, beta=0.4), lambda h: h.sample(16, beta=0.4, seed=5)),
    (rs.Request.rows(8, replace=False), lambda h: h.sample(8, replace=False, seed=5)),
    (rs.Request.transitions(12, "obs", nstep=3, gamma=0.9, stack=2),
     lambda h: h.sample_transitions(12, "obs", nstep=3, gamma=0.9, stack=2, seed=5)),
    (rs.Request.sequences(4, 3, "obs", burn_in=1),
     lambda h: h.sample_sequences(4, 3, "obs", burn_in=1, seed=5)),
    (rs.Request.episodes(3, beta=0.5), lambda h: h.sample_episodes(3, beta=0.5, seed=5)),
    (rs.Request.groups(2, "x", unroll=2), lambda h: h.sample_groups(2, "x", unroll=2, seed=5)),
]


@pytest.mark.parametrize(("request_", "keywords"), REQUESTS,
                         ids=["rows-beta", "rows-distinct", "transitions", "sequences", "episodes",
                              "groups"])
def test_a_request_draws_what_the_keyword_form_draws_from_a_writer_and_a_reader(
        tmp_path, request_, keywords):
    buf = filled(tmp_path, episodic=True, alpha=0.6)
    reader = rs.Reader.open(str(tmp_path / "b"))
    for handle in (buf, reader):
        same(handle.sample(request_, seed=5), keywords(handle))
        # Pickled (as a Ray shard receives it), it draws the same again.
        same(handle.sample(pickle.loads(pickle.dumps(request_)), seed=5), keywords(handle))
    buf.close()


def test_lanes_an_owner_and_a_group_take_a_request_of_rows(tmp_path):
    lanes = rs.Lanes.create(str(tmp_path / "l"), SCHEMA, 40, 2, alpha=0.6, seed=2)
    lanes.add_batch({"x": np.arange(20), "obs": np.zeros(20, np.float32),
                     "reward": np.zeros(20, np.float32)}, np.arange(20) % 2)
    same(lanes.sample(rs.Request.rows(8, beta=0.4), seed=1), lanes.sample(8, beta=0.4, seed=1))
    assert lanes.sample(rs.Request.at([0, 1 << 56]))["x"].tolist() == [0, 1]
    g = rs.BufferGroup.create(str(tmp_path / "g"), SCHEMA, 40, seed=3)
    g.add_batch("p", {"x": np.arange(10), "obs": np.zeros(10, np.float32),
                      "reward": np.zeros(10, np.float32)})
    same(g.sample(rs.Request.rows(6, replace=False), "p", seed=4), g.sample(6, "p", replace=False, seed=4))
    with pytest.raises(TypeError, match="replay_ratio="):
        g.sample(rs.Request.rows(2), "p", replay_ratio=0.5)
    g.close()
    lanes.close()


def test_options_go_inside_a_request_never_beside_it(tmp_path):
    buf = filled(tmp_path, episodic=True)
    for keyword in ({"beta": 0.4}, {"replace": False}, {"remove": True}, {"by_group": ["x"]}):
        with pytest.raises(TypeError, match=f"{next(iter(keyword))}= goes into the Request"):
            buf.sample(rs.Request.rows(4), **keyword)
    buf.close()


def test_keywords_that_do_not_go_together_are_refused_where_the_request_is_built():
    for build, says in [
        (lambda: rs.Request.rows(4, beta=0.4, remove=True), "not rows drawn by priority"),
        (lambda: rs.Request.rows(4, beta=0.4, replace=False), "replace=False"),
        (lambda: rs.Request.transitions(4, ["g", "a"], goal="g", achieved="a", nstep=3), "one step"),
        (lambda: rs.Request.fragments(2, covering=4), "not both"),
        (lambda: rs.Request.fragments(covering=4, beta=0.4), "covering="),
    ]:
        with pytest.raises((rs.Error, ValueError), match=says):
            build()
    with pytest.raises(TypeError, match="one of drawn=, remove= and including_removed="):
        rs.Request.at([1], drawn=True, remove=True)


def test_a_request_pickles_with_every_option_and_names_itself_as_its_call():
    made = [
        rs.Request.rows(3, beta=0.5, replace=True, by_group=None),
        rs.Request.oldest(4, remove=True),
        rs.Request.at([3, 1], including_removed=True),
        rs.Request.transitions(5, ["a", "g"], goal="g", achieved="a", strategy="final",
                               n_sampled_goal=2, compute_reward=reward, gamma=0.9),
        rs.Request.transitions_at([4, 2], "obs", nstep=2, gamma=0.5),
        rs.Request.sequences(2, 5, "obs", burn_in=2, beta=0.1),
        rs.Request.episodes(1),
        rs.Request.fragments(covering=9, remove=True),
        rs.Request.groups(2, ["env", "pid"], unroll=3, replace=False),
    ]
    for r in made:
        again = pickle.loads(pickle.dumps(r))
        assert repr(again) == repr(r)
        assert repr(r).startswith("Request.")
        if "compute_reward" not in repr(r):
            # The repr is the call: evaluated, it builds the same request.
            assert repr(eval(repr(r), {"Request": rs.Request})) == repr(r)
    assert rs.Request.rows(3, beta=0.5).with_n(7).n == 7
    assert rs.Request.at([1, 2]).n == 2
    with pytest.raises(TypeError, match="no count to change"):
        rs.Request.at([1, 2]).with_n(3)


def test_a_relabeling_request_gives_relabeled_rows_the_rewards_of_its_function(tmp_path):
    schema = {"a": "float32", "g": "float32", "reward": "float32"}
    buf = rs.ReplayBuffer.create(str(tmp_path / "h"), schema, 100, episodic=True, seed=2)
    buf.add_episode({"a": np.arange(6, dtype=np.float32), "g": np.full(6, 9, np.float32),
                     "reward": np.full(5, -1, np.float32)}, terminated=True)
    r = rs.Request.transitions(8, ["a", "g"], goal="g", achieved="a", strategy="final",
                               n_sampled_goal=1, compute_reward=reward)
    b = buf.sample(pickle.loads(pickle.dumps(r)))
    relabeled = b["relabeled"]
    assert relabeled.sum() == 4  # round(8 * 1 / 2)
    # A final goal is reached by the last step: reward 0 where next_a == g.
    assert np.all(b["reward"][relabeled] == reward(b["next_a"][relabeled], b["g"][relabeled], None))
    buf.close()
