"""Promise: keywords of one draw that do not go together are refused by name, before
anything is drawn or removed, never one of them silently ignored. (The engine's
requests cannot be built in such shapes; the Python keywords are checked where they
become one.)"""

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"x": "int64", "env": "int64", "goal": "float32", "reached": "float32", "reward": "float32"}


@pytest.fixture
def flat(tmp_path):
    buf = rs.ReplayBuffer.create(
        str(tmp_path / "b"), SCHEMA, 100, alpha=0.6, item_states=True, fragments=True, seed=1
    )
    for k in range(4):
        n = 3 + k
        buf.add_batch({
            "x": np.arange(n, dtype=np.int64), "env": np.full(n, k % 2, np.int64),
            "goal": np.zeros(n, np.float32), "reached": np.zeros(n, np.float32),
            "reward": np.zeros(n, np.float32),
        })
    yield buf
    buf.close()


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda b: b.sample(4, beta=0.4, remove=True), "not rows drawn by priority"),
        (lambda b: b.sample(4, beta=0.4, replace=False), "replace=False"),
        (lambda b: b.sample(4, beta=0.4, by_group=["env"]), "by_group="),
        (lambda b: b.sample_fragments(2, beta=0.4, remove=True), "remove=True"),
        (lambda b: b.sample_fragments(2, beta=0.4, replace=False), "replace=False"),
        (lambda b: b.sample_fragments(covering=5, beta=0.4), "covering="),
    ],
)
def test_keywords_of_rows_and_fragments_that_exclude_each_other_are_refused(flat, call, says):
    before = (len(flat), flat.stats()["sampled"])
    with pytest.raises(rs.Error, match=says):
        call(flat)
    assert (len(flat), flat.stats()["sampled"]) == before


def test_a_relabeled_draw_of_more_than_one_step_is_refused_naming_the_keywords(tmp_path):
    buf = rs.ReplayBuffer.create(str(tmp_path / "e"), SCHEMA, 100, episodic=True, seed=2)
    buf.add_reset(goal=1.0, reached=0.0)
    for t in range(1, 6):
        buf.add_step(x=t, env=0, goal=1.0, reached=float(t), reward=0.0, terminated=t == 5)
    her = {"goal": "goal", "achieved": "reached"}
    for shape in ({"nstep": 3}, {"stack": 2}):
        with pytest.raises(rs.Error, match="one step without stacking"):
            buf.sample_transitions(4, ["goal", "reached"], **her, **shape)
    # One step, with a discount: what a relabeled draw is.
    b = buf.sample_transitions(4, ["goal", "reached"], **her, gamma=0.9, strategy="final")
    assert b["relabeled"].sum() == 3  # round(4 * 4 / 5): n_sampled_goal=4
    assert np.all(b["goal"][b["relabeled"]] == 5.0)
    assert np.all(np.isin(b["discounts"], [0.0, 0.9]))


def test_a_group_read_at_given_steps_takes_no_beta(tmp_path):
    g = rs.BufferGroup.create(str(tmp_path / "g"), SCHEMA, 64, episodic=True, seed=3)
    t = np.arange(4, dtype=np.float32)
    g.add_episode("p", {"goal": np.zeros(4, np.float32), "reached": t, "x": np.arange(3),
                        "env": np.zeros(3, np.int64), "reward": np.ones(3, np.float32)},
                  terminated=True)
    with pytest.raises(rs.Error, match="at= reads"):
        g.sample_transitions(2, "p", ["reached"], at=[1, 2], beta=0.4)
    assert list(g.sample_transitions(2, "p", ["reached"], at=[3, 1])["reached"]) == [2.0, 0.0]
