"""Promise: a `Reader` draws what the writer draws — n-step and stacked transitions,
sequences with burn-in, whole episodes, fragments and groups — with the same arrays for
the same seed and rows (issue 31), through mappings or pread; the DataLoader recipe is
in in test_dataloader.py."""

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {"obs": ("float32", (2,)), "action": "int64", "reward": "float32"}


def add_episodes(buf, episodes, rng, first_tag=0):
    """Adds `episodes` episodes of 0..30 steps; row t of episode `tag` has obs [tag, t]."""
    for tag in range(first_tag, first_tag + episodes):
        steps = int(rng.integers(0, 30))
        end = int(rng.integers(0, 3))
        buf.add_reset(obs=np.array([tag, 0], np.float32))
        for t in range(1, steps + 1):
            last = t == steps
            buf.add_step(
                obs=np.array([tag, t], np.float32),
                action=t,
                reward=float((tag * 7 + t * 3) % 11 - 5),
                terminated=last and end == 0,
                truncated=last and end == 1,
            )
    return first_tag + episodes


@pytest.fixture
def episodic(tmp_path):
    path = str(tmp_path / "ep")
    buf = rs.ReplayBuffer.create(path, SCHEMA, 256, episodic=True, alpha=0.6, seed=3)
    rng = np.random.default_rng(0)
    add_episodes(buf, 40, rng)  # laps the ring of 256 rows
    stats = buf.stats()
    live = np.arange(stats["head"], stats["tail"], dtype=np.uint64)
    buf.update_priorities(live[1::3], rng.uniform(0.1, 5.0, len(live[1::3])))
    buf.flush()
    yield path, buf
    buf.close()


DRAWS = [
    ("sample_transitions", (64, "obs"), {"nstep": 3, "gamma": 0.9, "stack": 4}),
    ("sample_transitions", (64, "obs"), {"nstep": 2, "beta": 0.4}),
    ("sample_sequences", (16, 8, "obs"), {"burn_in": 4}),
    ("sample_sequences", (16, 4, "obs"), {"beta": 0.6}),
    ("sample_episodes", (8,), {}),
    ("sample_episodes", (8,), {"beta": 0.5}),
]


def assert_same(a, b, what):
    assert sorted(a) == sorted(b), what
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=f"{what}: {k}")


@pytest.mark.parametrize("pread", [False, True])
def test_a_reader_draws_what_the_writer_draws_for_the_same_seed(episodic, pread):
    path, buf = episodic
    reader = rs.Reader.open(path, pread=pread)
    for seed, (method, args, kwargs) in enumerate(DRAWS):
        w = getattr(buf, method)(*args, seed=seed, **kwargs)
        r = getattr(reader, method)(*args, seed=seed, **kwargs)
        assert_same(w, r, f"{method} {kwargs}")


def test_a_reader_follows_the_episodes_the_writer_adds(episodic):
    path, buf = episodic
    reader = rs.Reader.open(path)
    reader.sample_episodes(4)
    tag = add_episodes(buf, 5, np.random.default_rng(1), first_tag=1000)
    buf.add_reset(obs=np.array([tag, 0], np.float32))  # the last one ends or is cut
    newest = {e["id"] for e in buf.episodes()[-6:-1] if e["terminated"] or e["truncated"]}
    seen = set()
    for seed in range(50):
        seen.update(reader.sample_episodes(8, seed=seed)["episodes"].tolist())
    assert newest & seen, "the reader never drew an episode added after it opened"
    w = buf.sample_transitions(32, "obs", nstep=3, gamma=0.5, seed=9)
    r = reader.sample_transitions(32, "obs", nstep=3, gamma=0.5, seed=9)
    assert_same(w, r, "transitions after the writer went on")


def test_a_reader_draws_the_fragments_and_groups_the_writer_draws(tmp_path):
    path = str(tmp_path / "f")
    schema = {"x": "float32", "env": "int64", "text": "str"}
    with rs.ReplayBuffer.create(path, schema, 200, fragments=True, seed=2) as buf:
        for k in range(30):
            n = 1 + k % 7
            buf.add_batch(
                {
                    "x": np.arange(n, dtype=np.float32) + 100 * k,
                    "env": np.full(n, k % 3),
                    "text": [f"call {k} row {i}" for i in range(n)],
                }
            )
        reader = rs.Reader.open(path)
        for seed, (method, args, kwargs) in enumerate(
            [
                ("sample_fragments", (6,), {}),
                ("sample_fragments", (3,), {"replace": False}),
                ("sample_fragments", (), {"covering": 20}),
                ("sample_groups", (3, "env"), {"unroll": 2}),
            ]
        ):
            w = getattr(buf, method)(*args, seed=seed, **kwargs)
            r = getattr(reader, method)(*args, seed=seed, **kwargs)
            assert [list(map(str, w["text"]))] == [list(map(str, r["text"]))]
            w.pop("text"), r.pop("text")
            assert_same(w, r, f"{method} {kwargs}")
        # A reader's draws are the writer's, keywords and all; it removes nothing.
        with pytest.raises(rs.ReadOnlyError, match="remove through the writer"):
            reader.sample_fragments(2, remove=True)


def test_a_reader_of_a_plain_buffer_says_it_keeps_no_episodes(tmp_path):
    path = str(tmp_path / "p")
    with rs.ReplayBuffer.create(path, SCHEMA, 16) as buf:
        buf.add(obs=np.zeros(2, np.float32), action=1, reward=0.0)
        with pytest.raises(rs.Error, match="episod"):
            rs.Reader.open(path).sample_episodes(1)
