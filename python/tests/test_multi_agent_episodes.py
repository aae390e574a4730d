"""Promise (issue 32, point 1, RLlib's new stack): multi-agent episodes whose agents act
at different environment steps are stored per module and drawn per module
(independent) or by environment step (synchronized: the agents that acted at a drawn
step, each with its own transition from there), with n-step returns over each agent's
own steps, uniform frequencies (chi-square), one checkpoint for everything, and
reopening that keeps the agents' slots."""

import numpy as np
import pytest

import replaystore as rs
from replaystore.multi_agent import MultiAgentEpisodeBuffer

SCHEMA = {"obs": ("float32", (2,)), "action": "int64", "reward": "float32"}
GAMMA = 0.5


def chi2_ok(counts, expected):
    """Chi-square at p = 0.001 by the Wilson-Hilferty approximation of its quantile."""
    counts, expected = np.asarray(counts, float), np.asarray(expected, float)
    stat = ((counts - expected) ** 2 / expected).sum()
    k = len(counts) - 1
    z = 3.09
    crit = k * (1 - 2 / (9 * k) + z * np.sqrt(2 / (9 * k))) ** 3
    return stat < crit, (stat, crit)


def turn_game(ep, length, *, split=None):
    """A turn-based game: "x" observes and acts at even env steps, "o" at odd ones, and
    both observe the last step. An agent's obs row is [episode, env_t]; its reward for
    the action at env step t is t + 100 * episode. ``split`` cuts the episode into two
    chunks at that env step (the second chunk starts from the agent's observation at or
    before it, as RLlib's lookback does)."""
    agents = {}
    for agent, first, module in (("x", 0, "px"), ("o", 1, "po")):
        obs_t = list(range(first, length, 2)) + [length]
        acts_t = obs_t[:-1]
        agents[agent] = {
            "obs": np.array([[ep, t] for t in obs_t], np.float32),
            "action": np.array(acts_t, np.int64),
            "reward": np.array([t + 100 * ep for t in acts_t], np.float32),
            "env_t": obs_t,
            "module": module,
            "terminated": True,
        }
    if split is None:
        return [{"id": ep, "agents": agents}]
    chunks = [{"id": ep, "agents": {}}, {"id": ep, "agents": {}}]
    for agent, a in agents.items():
        t = np.asarray(a["env_t"])
        cut = int(np.searchsorted(t, split, side="right")) - 1  # last obs at or before
        first = {k: v[: cut + 1] for k, v in a.items() if k in ("obs", "env_t")}
        first.update({k: a[k][:cut] for k in ("action", "reward")}, module=a["module"])
        second = {k: np.asarray(v)[cut:] for k, v in a.items() if k in ("obs", "env_t")}
        second.update({k: a[k][cut:] for k in ("action", "reward")}, module=a["module"],
                      terminated=True)
        chunks[0]["agents"][agent] = first
        chunks[1]["agents"][agent] = second
    return chunks


@pytest.fixture
def buf(tmp_path):
    b = MultiAgentEpisodeBuffer(str(tmp_path / "ma"), SCHEMA, 4096, seed=3)
    yield b
    b.close()


def test_independent_draws_give_each_agent_its_own_next_observation_and_nstep_return(buf):
    for ep in range(20):
        buf.add(turn_game(ep, 9))
    assert buf.get_module_ids() == ["px", "po"]
    assert buf.agent_ids == ["x", "o"] and buf.module_of("o") == "po"
    out = buf.sample(2000, n_step=2, gamma=GAMMA)
    assert sorted(out) == ["po", "px"]
    for module, step in (("px", 0), ("po", 1)):
        b = out[module]
        ep, t = b["obs"][:, 0], b["obs"][:, 1]
        assert (t % 2 == step).all(), "an agent observes only at its own env steps"
        assert (b["env_t"] == t).all()
        assert (b["action"] == t).all()
        # Two of the agent's own steps (2 env steps each), cut at the end (env step 9).
        nxt = np.minimum(t + 4, 9)
        assert (b["next_obs"][:, 1] == nxt).all() and (b["next_env_t"] == nxt).all()
        assert (b["next_obs"][:, 0] == ep).all()
        r0 = t + 100 * ep
        two = t + 2 < 9
        want = np.where(two, r0 + GAMMA * (r0 + 2), r0)
        np.testing.assert_allclose(b["returns"], want)
        # No bootstrap from a terminal observation.
        np.testing.assert_allclose(b["discounts"], np.where(nxt == 9, 0.0, GAMMA**2))
        assert (b["terminated"] == (nxt == 9)).all()
        assert set(b["agent"].tolist()) == {step}
    # Uniform over each module's agent steps: x has 5 steps per episode, o has 4.
    b = buf.sample(20000, modules_to_sample=["px"])
    assert list(b) == ["px"]
    keys = (b["px"]["obs"][:, 0] * 10 + b["px"]["obs"][:, 1]).astype(int)
    _, counts = np.unique(keys, return_counts=True)
    assert len(counts) == 100
    ok, why = chi2_ok(counts, np.full(100, 200.0))
    assert ok, why


def test_synchronized_draws_are_uniform_over_env_steps_with_every_agent_that_acted(tmp_path):
    buf = MultiAgentEpisodeBuffer(str(tmp_path / "ma"), SCHEMA, 4096, seed=5)
    for ep in range(10):
        g = turn_game(ep, 9)
        # A third agent, sharing x's module, acts at env steps 0, 3 and 6 only.
        g[0]["agents"]["z"] = {
            "obs": np.array([[ep, t] for t in (0, 3, 6, 9)], np.float32),
            "action": np.array([0, 3, 6]), "reward": np.zeros(3, np.float32),
            "env_t": [0, 3, 6, 9], "module": "px", "terminated": True}
        buf.add(g)
    assert len(buf) == 90  # env steps 0..8 of 10 episodes: someone acted at each
    out = buf.sample(9000, replay_mode="synchronized")
    joint = {}  # env row -> the (episode, env step, agent) of each transition drawn there
    for b in out.values():
        assert (b["obs"][:, 1] == b["env_t"]).all()
        for e, ep, t, a in zip(b["env_row"], b["obs"][:, 0], b["env_t"], b["agent"]):
            joint.setdefault(int(e), []).append((int(ep), int(t), buf.agent_ids[a]))
    assert len(joint) == 90
    draws = []
    for e, rows in joint.items():
        steps = {(ep, t) for ep, t, _ in rows}
        assert len(steps) == 1, f"env row {e} is one joint step, not {steps}"
        ep, t = steps.pop()
        acted = {"x" if t % 2 == 0 else "o"} | ({"z"} if t % 3 == 0 else set())
        per_agent = {a: sum(1 for *_, x in rows if x == a) for a in acted}
        assert {a for *_, a in rows} == acted, (t, per_agent)
        assert len(set(per_agent.values())) == 1, f"every agent of step {t} in each draw"
        draws.append(next(iter(per_agent.values())))
    # Uniform over the 90 env steps.
    assert sum(draws) == 9000
    ok, why = chi2_ok(draws, np.full(90, 100.0))
    assert ok, why
    buf.close()


def test_chunks_of_one_episode_bootstrap_at_the_chunk_end(buf):
    for c in turn_game(0, 9, split=5):
        buf.add(c)
    b = buf.sample(500, n_step=3, gamma=GAMMA, modules_to_sample=["px"])["px"]
    t = b["obs"][:, 1]
    # x observes at 0, 2, 4 | 4, 6, 8, 9: the first chunk ends (truncated) at 4.
    first = t < 4
    assert (b["next_env_t"][first] == 4).all() and not b["terminated"][first].any()
    assert b["truncated"][first].all(), "the next chunk's add ends this one, truncated"
    # It bootstraps there: gamma ** (the steps it got).
    np.testing.assert_allclose(b["discounts"][first], GAMMA ** ((4 - t[first]) // 2))
    later = t >= 4
    assert (b["next_env_t"][later] == np.minimum(t[later] + 6, 9)).all()


def test_one_checkpoint_and_reopening_keep_every_module_and_agent(tmp_path):
    path = str(tmp_path / "ma")
    buf = MultiAgentEpisodeBuffer(path, SCHEMA, 4096, seed=1)
    for ep in range(3):
        buf.add(turn_game(ep, 9))
    state = buf.get_state()
    lens = {m: buf.get_num_timesteps(m) for m in buf.get_module_ids()}
    for ep in range(3, 6):
        buf.add(turn_game(ep, 9))
    buf.add({"id": 9, "agents": {"late": {
        "obs": np.zeros((2, 2), np.float32), "action": [1], "reward": np.ones(1, np.float32),
        "env_t": [4, 5], "module": "pl"}}})
    assert buf.agent_ids == ["x", "o", "late"]
    buf.set_state(state)
    assert {m: buf.get_num_timesteps(m) for m in lens} == lens
    assert buf.get_num_timesteps("pl") == 0, "a module created since comes back empty"
    assert buf.agent_ids == ["x", "o"], "and so do the agents"
    assert len(buf) == 27
    buf.close()
    again = MultiAgentEpisodeBuffer(path)
    assert again.agent_ids == ["x", "o"] and again.get_module_ids() == ["px", "po", "pl"]
    again.add(turn_game(7, 9))
    again.add({"id": 8, "agents": {"new": {
        "obs": np.zeros((2, 2), np.float32), "action": [1], "reward": np.ones(1, np.float32),
        "env_t": [0, 1]}}})
    assert again.agent_ids == ["x", "o", "new"] and "default_policy" in again.get_module_ids()
    out = again.sample(64, replay_mode="synchronized")
    assert set(out) <= {"px", "po", "default_policy"}
    again.close()
    with pytest.raises(rs.NotABufferError):
        MultiAgentEpisodeBuffer(str(tmp_path))  # no buffer there
    rs.BufferGroup.create(str(tmp_path / "plain")).close()
    with pytest.raises(ValueError, match="not a multi-agent episode buffer"):
        MultiAgentEpisodeBuffer(str(tmp_path / "plain"))


def test_rings_that_wrap_draw_only_live_transitions(tmp_path):
    buf = MultiAgentEpisodeBuffer(str(tmp_path / "ma"), SCHEMA, 64, env_capacity=256, seed=2)
    for ep in range(40):
        buf.add(turn_game(ep, 9))
    out = buf.sample(500, replay_mode="synchronized", n_step=2, gamma=GAMMA)
    for m, b in out.items():
        # 64 rows per module keep x's last 10-11 episodes (6 rows each), o's last 12-13
        # (5 rows each): nothing older than episode 27 is drawn.
        oldest = {"px": 29, "po": 27}[m]
        assert (b["obs"][:, 0] >= oldest).all() and (b["obs"][:, 0] == 39).any()
        assert (b["next_obs"][:, 0] == b["obs"][:, 0]).all()
    buf.close()


def test_per_module_schemas_and_priorities(tmp_path):
    schemas = {"big": {"obs": ("float32", (4,)), "action": "int64", "reward": "float32"},
               "small": SCHEMA}
    buf = MultiAgentEpisodeBuffer(str(tmp_path / "ma"), schemas, 256, alpha=1.0, seed=4)
    assert buf.get_module_ids() == ["big", "small"]
    buf.add({"id": 0, "agents": {
        "a": {"obs": np.zeros((4, 4), np.float32), "action": [0, 1, 2],
              "reward": np.zeros(3, np.float32), "env_t": [0, 1, 2, 3], "module": "big"},
        "b": {"obs": np.zeros((2, 2), np.float32), "action": [0],
              "reward": np.zeros(1, np.float32), "env_t": [0, 3], "module": "small"}}})
    b = buf.sample(64, beta=0.4, modules_to_sample=["big"])["big"]
    assert b["obs"].shape == (64, 4) and "weights" in b
    idx = np.unique(b["indices"])
    assert buf.update_priorities("big", idx, np.where(idx == idx.max(), 1000.0, 1e-3)) == {
        "applied": len(idx), "stale": 0}
    b = buf.sample(200, beta=0.4, modules_to_sample=["big"])["big"]
    assert (b["indices"] == idx.max()).mean() > 0.9
    with pytest.raises(ValueError, match="not one of"):
        buf.add({"id": 1, "agents": {"c": {
            "obs": np.zeros((2, 2), np.float32), "action": [0],
            "reward": np.zeros(1, np.float32), "env_t": [0, 1], "module": "other"}}})
    buf.close()


def test_bad_episodes_are_refused_before_anything_is_stored(buf):
    buf.add(turn_game(0, 9))
    before = {m: buf.get_num_timesteps(m) for m in buf.get_module_ids()}, len(buf)
    good = turn_game(1, 9)[0]["agents"]["x"]
    other = dict(good, module="po")
    bad_t = dict(other, env_t=[0, 2, 2, 6, 8, 9])
    with pytest.raises(ValueError, match="does not increase"):
        buf.add({"id": 1, "agents": {"x": good, "o": bad_t}})
    short = dict(other, obs=good["obs"][:3])
    with pytest.raises(ValueError, match="needs 6 rows"):
        buf.add({"id": 1, "agents": {"x": good, "o": short}})
    moved = dict(good, module="elsewhere")
    with pytest.raises(ValueError, match="maps to module"):
        buf.add({"id": 1, "agents": {"x": moved}})
    with pytest.raises(ValueError, match="keeps for itself"):
        buf.add({"id": 1, "agents": {"x": dict(good, module="__agents__")}})
    assert ({m: buf.get_num_timesteps(m) for m in buf.get_module_ids()}, len(buf)) == before
    with pytest.raises(ValueError, match="independent or synchronized"):
        buf.sample(4, replay_mode="sideways")
    with pytest.raises(ValueError, match="not both"):
        buf.sample(4, batch_size_B=4)


def test_more_agents_than_max_agents_are_refused(tmp_path):
    buf = MultiAgentEpisodeBuffer(str(tmp_path / "ma"), SCHEMA, 64, max_agents=2)
    one = {"obs": np.zeros((2, 2), np.float32), "action": [0],
           "reward": np.zeros(1, np.float32), "env_t": [0, 1]}
    with pytest.raises(ValueError, match="max_agents=2"):
        buf.add({"id": 0, "agents": {"a": one, "b": one, "c": one}})
    assert buf.agent_ids == [] and len(buf) == 0
    buf.close()
