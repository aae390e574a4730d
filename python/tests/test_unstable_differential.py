"""Promise (issue 36, point 4): ``replaystore.compat.unstable`` is UnstableBaselines'
``StepBuffer`` and ``EpisodeBuffer``. Driven beside the library's own classes
(``unstable-rl`` 0.2.2, run in this process) with the same trajectories and the
library's own transforms: sizes after every call, every stored step (text, rewards,
``step_info`` with its int/float types), the CSV of a batch and errors are equal; which
steps a draw or the downsampling picks (the engine's RNG, not ``random``) follows the
library's distribution by chi-square. As Ray actors they lose nothing acknowledged to
a kill -9, and a generation worker killed mid-trajectory leaves nothing of it."""

import dataclasses
import logging
import os
import random
import shutil
import signal
import time

import numpy as np
import pytest

import peers

ub = peers.unstable_buffers()
ray = peers.peer("ray")

from unstable._types import PlayerTrajectory  # noqa: E402
from unstable.reward_transformations import (  # noqa: E402
    ComposeFinalRewardTransforms,
    ComposeSamplingRewardTransforms,
    ComposeStepRewardTransforms,
    NormalizeRewardsByEnv,
    PenaltyForInvalidMove,
    RewardForFormat,
    RoleAdvantageByEnvFormatter,
)

import replaystore as rs  # noqa: E402
from replaystore.compat import unstable as ours  # noqa: E402

THEIR_STEP = ub.StepBuffer.__ray_actor_class__
THEIR_EPISODE = ub.EpisodeBuffer.__ray_actor_class__
ENVS = ["TicTacToe-v0", "Kuhn-Poker-v0", "SimpleNegotiation-v0"]


@pytest.fixture(scope="module", autouse=True)
def ray_up():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


class _Remote:
    def __init__(self, value):
        self.value = value

    def remote(self):
        return ray.put(self.value)


class Tracker:
    """The two calls the buffers make of UnstableBaselines' ``Tracker``."""

    def __init__(self, root):
        self.get_train_dir = _Remote(str(root / "training_data"))
        self.get_log_dir = _Remote(str(root / "logs"))
        os.makedirs(root / "training_data", exist_ok=True)


def transforms(sampling=True):
    """The library's own transforms, new (they keep state per buffer)."""
    return (
        ComposeFinalRewardTransforms([RoleAdvantageByEnvFormatter(tau=0.1)]),
        ComposeStepRewardTransforms([RewardForFormat(1.5, -1), PenaltyForInvalidMove(0, -2)]),
        ComposeSamplingRewardTransforms([NormalizeRewardsByEnv(True)]) if sampling else None,
    )


def trajectories(seed, count, lengths=(1, 5)):
    rng = random.Random(seed)
    out = []
    for t in range(count):
        n = rng.randint(*lengths)
        out.append((PlayerTrajectory(
            pid=rng.randint(0, 1),
            final_reward=rng.choice([1, -1, 0, 0.5]),
            obs=[f"[traj {t} step {i}] " + "ok ⚑ " * rng.randint(0, 60) for i in range(n)],
            actions=[f"[move {rng.randint(0, 8)}]" for _ in range(n)],
            format_feedbacks=[{"correct_answer_format": rng.random() < 0.7,
                               "invalid_move": rng.random() < 0.2} for _ in range(n)],
        ), rng.choice(ENVS)))
    return out


def pair(tmp_path, cls_theirs, cls_ours, max_size, *, sampling=False, strategy="random"):
    their = cls_theirs(max_size, Tracker(tmp_path / "theirs"), *transforms(sampling),
                       buffer_strategy=strategy)
    mine = cls_ours(max_size, Tracker(tmp_path / "ours"), *transforms(sampling),
                    buffer_strategy=strategy)
    return their, mine


def key(step):
    """Everything observable of a step, with the types of its rewards."""
    return (step.pid, step.obs, step.act, repr(step.reward), step.env_id, repr(step.step_info))


def drained(buf):
    return sorted(key(s) for s in buf.get_batch(buf.size()))


def test_steps_rewards_sizes_and_the_batch_csv_are_unstable_baselines_own(tmp_path):
    their, mine = pair(tmp_path, THEIR_STEP, ours.LocalStepBuffer, 1_000)
    for traj, env in trajectories(1, 40):
        their.add_player_trajectory(traj, env)
        mine.add_player_trajectory(traj, env)
        assert mine.size() == their.size()
    assert type(mine.get_batch(0)) is list and mine.size() == their.size()
    their.get_batch(0)
    b_theirs, b_mine = their.get_batch(their.size()), mine.get_batch(mine.size())
    assert sorted(map(key, b_mine)) == sorted(map(key, b_theirs))
    assert mine.size() == their.size() == 0
    # The CSV of a batch: the same header and rows (the rows in draw order).
    for k in (0, 1):
        with open(tmp_path / "theirs" / "training_data" / f"train_data_step_{k}.csv") as f:
            t_lines = f.read().splitlines()
        with open(tmp_path / "ours" / "training_data" / f"train_data_step_{k}.csv") as f:
            m_lines = f.read().splitlines()
        assert m_lines[0] == t_lines[0] and sorted(m_lines) == sorted(t_lines)
    with pytest.raises(ValueError, match="Sample larger than population"):
        their.get_batch(1)
    with pytest.raises(ValueError, match="Sample larger than population"):
        mine.get_batch(1)
    with pytest.raises(TypeError, match="final_reward"):
        mine.add_player_trajectory(PlayerTrajectory(final_reward="won", obs=["o"],
                                                    actions=["a"]), "x")
    assert mine.size() == 0


def test_the_sampling_transform_runs_on_the_drawn_steps_as_the_library_runs_it(tmp_path):
    their, mine = pair(tmp_path, THEIR_STEP, ours.LocalStepBuffer, 1_000, sampling=True)
    for traj, env in trajectories(2, 30):
        their.add_player_trajectory(traj, env)
        mine.add_player_trajectory(traj, env)
    b_t = sorted(their.get_batch(their.size()), key=lambda s: s.obs)
    b_m = sorted(mine.get_batch(mine.size()), key=lambda s: s.obs)
    assert [s.obs for s in b_m] == [s.obs for s in b_t]
    np.testing.assert_allclose([s.reward for s in b_m], [s.reward for s in b_t], atol=1e-5)
    assert [s.step_info for s in b_m] == [s.step_info for s in b_t]


def test_a_draw_picks_steps_as_the_library_does(tmp_path):
    """12 steps, ``get_batch(3)`` and the drawn ones added back as new steps, 600
    times: how old (rank by insertion among the 12) each drawn step was, ours against
    the library's, and against uniform (a FIFO or LIFO draw would fail both)."""
    counts = {}
    for name, cls in (("theirs", THEIR_STEP), ("ours", ours.LocalStepBuffer)):
        buf = cls(1_000, Tracker(tmp_path / name), None, None, None)
        live, made = [], 0

        def add(env):
            nonlocal made
            buf.add_player_trajectory(PlayerTrajectory(final_reward=1.0, obs=[f"{made}"],
                                                       actions=["a"]), env)
            live.append(made)
            made += 1

        for i in range(12):
            add(ENVS[i % 3])
        c = np.zeros(12)
        for _ in range(600):
            batch = buf.get_batch(3)
            for s in batch:
                c[sorted(live).index(int(s.obs))] += 1
            for s in batch:
                live.remove(int(s.obs))
                add(s.env_id)
        counts[name] = c
    peers.chi_square_two(counts["ours"], counts["theirs"])
    peers.chi_square(counts["ours"], np.ones(12))


def survivors(tmp_path, cls, rounds, max_size, lengths):
    """How often each (trajectory, step) survives downsampling, over ``rounds`` buffers."""
    cells = {}
    for r in range(rounds):
        mine = cls in (ours.LocalStepBuffer, ours.LocalEpisodeBuffer)
        # Ours: a small text heap, and the folder removed after its round.
        buf = cls(max_size, None if mine else Tracker(tmp_path / f"t{r}"), None, None, None,
                  **({"path": str(tmp_path / f"o{r}"), "heap_bytes": 1 << 16} if mine else {}))
        for t, n in enumerate(lengths):
            buf.add_player_trajectory(PlayerTrajectory(
                final_reward=1.0, obs=[f"{t}/{i}" for i in range(n)], actions=["a"] * n), "e")
            assert buf.size() <= max_size
        got = buf.get_batch(buf.size())
        for s in (x for ep in got for x in ep) if cls in (THEIR_EPISODE,
                                                           ours.LocalEpisodeBuffer) else got:
            cells[s.obs] = cells.get(s.obs, 0) + 1
        if mine:
            buf.close()
            shutil.rmtree(tmp_path / f"o{r}")
        else:
            # The library adds a file handler to its logger per buffer: drop them, or
            # each later log line is written to every earlier round's file.
            for h in logging.getLogger("step_buffer").handlers:
                h.close()
            logging.getLogger("step_buffer").handlers.clear()
    return cells


def test_downsampling_keeps_steps_as_the_library_does(tmp_path):
    lengths = [1, 2, 3] * 5  # 30 steps into 12
    t = survivors(tmp_path / "t", THEIR_STEP, 300, 12, lengths)
    m = survivors(tmp_path / "m", ours.LocalStepBuffer, 300, 12, lengths)
    assert sum(t.values()) == sum(m.values()) == 300 * 12
    cells = sorted(set(t) | set(m))
    peers.chi_square_two([m.get(c, 0) for c in cells], [t.get(c, 0) for c in cells])


def test_episode_buffer_drops_and_draws_whole_episodes_as_the_library_does(tmp_path):
    lengths = [1, 4, 2, 3] * 3  # 30 steps into at most 14, whole episodes
    t = survivors(tmp_path / "t", THEIR_EPISODE, 300, 14, lengths)
    m = survivors(tmp_path / "m", ours.LocalEpisodeBuffer, 300, 14, lengths)
    cells = sorted(set(t) | set(m))
    # Whole: every step of a trajectory survives as often as its first.
    for c in m:
        assert m[c] == m[c.split("/")[0] + "/0"]
    peers.chi_square_two([m.get(c, 0) for c in cells], [t.get(c, 0) for c in cells])
    # get_batch: shuffled whole episodes until they hold the batch size.
    drawn = {}
    for name, cls in (("theirs", THEIR_EPISODE), ("ours", ours.LocalEpisodeBuffer)):
        buf = cls(1_000, Tracker(tmp_path / name), None, None, None)
        c = np.zeros(8)
        for _ in range(300):
            for e, n in enumerate([1, 2, 3, 4] * 2):
                buf.add_player_trajectory(PlayerTrajectory(
                    final_reward=1.0, obs=[f"{e}/{i}" for i in range(n)], actions=["a"] * n),
                    "e")
            got = buf.get_batch(5)
            sizes = [len(ep) for ep in got]
            assert sum(sizes) >= 5 and sum(sizes) - sizes[-1] < 5
            for ep in got:
                assert [s.obs for s in ep] == [f"{ep[0].obs.split('/')[0]}/{i}"
                                               for i in range(len(ep))]
                c[int(ep[0].obs.split("/")[0])] += 1
            buf.clear()
            assert buf.size() == 0
        drawn[name] = c
        with pytest.raises(AssertionError):
            buf.get_batch(1)
    peers.chi_square_two(drawn["ours"], drawn["theirs"])


def test_buffer_strategy_is_ignored_as_0_2_2_ignores_it(tmp_path):
    """UnstableBaselines 0.2.2 keeps buffer_strategy and always draws at random (and
    raises when asked for more than it holds): so does the drop-in."""
    drawn = {"ours": [], "theirs": []}
    for name, cls in (("ours", ours.LocalStepBuffer), ("theirs", THEIR_STEP)):
        for rep in range(40):
            buf = cls(1_000, Tracker(tmp_path / f"{name}-{rep}"), None, None, None, "stratified_env")
            assert buf.buffer_strategy == "stratified_env"
            for i in range(20):
                buf.add_player_trajectory(PlayerTrajectory(obs=[f"a{i}"], actions=["x"]), "A")
            for i in range(4):
                buf.add_player_trajectory(PlayerTrajectory(obs=[f"b{i}"], actions=["x"]), "B")
            # Stratified would take all 4 of B in 8; random takes 8 * 4/24 on average.
            drawn[name].append(sum(s.env_id == "B" for s in buf.get_batch(8)))
            with pytest.raises(ValueError):
                buf.get_batch(500)
    assert np.mean(drawn["ours"]) < 2.5 and np.mean(drawn["theirs"]) < 2.5, drawn
    peers.chi_square_two(np.bincount(drawn["ours"], minlength=9), np.bincount(drawn["theirs"], minlength=9))


def test_stratify_takes_an_even_share_of_each_env_first(tmp_path):
    buf = ours.LocalStepBuffer(1_000, None, None, None, None, path=str(tmp_path / "env"), stratify="env")
    for i in range(100):
        buf.add_player_trajectory(PlayerTrajectory(obs=[f"a{i}"], actions=["x"]), "A")
    for i in range(10):
        buf.add_player_trajectory(PlayerTrajectory(obs=[f"b{i}"], actions=["x"]), "B")
    batch = buf.get_batch(40)  # 20 each, B has 10: all of B, then 30 of A
    assert sorted(s.env_id for s in batch).count("B") == 10 and len(batch) == 40
    assert buf.size() == 70
    with pytest.raises(ValueError, match="larger than population"):
        buf.get_batch(500)  # as the random draw
    assert buf.size() == 70
    roles = ours.LocalStepBuffer(1_000, None, None, None, None, path=str(tmp_path / "roles"),
                                 stratify="env_role")
    for pid, n in ((0, 50), (1, 5)):
        roles.add_player_trajectory(PlayerTrajectory(pid=pid, obs=["o"] * n,
                                                     actions=["x"] * n), "A")
    batch = roles.get_batch(20)
    assert sum(s.pid == 1 for s in batch) == 5 and len(batch) == 20
    with pytest.raises(ValueError, match="stratify"):
        ours.LocalStepBuffer(10, None, None, None, None, path=str(tmp_path / "bad"), stratify="stratified_env")


#: What a call to an actor killed under it raises (it may or may not have run).
GONE = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)


def when_back(call, seconds=60):
    """``call()`` once the actor it calls answers again after a restart."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except GONE:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# Ray workers here cannot import the library's package (its __init__ needs vLLM):
# the actors get replaystore's PlayerTrajectory, which has the same fields.
@ray.remote(num_cpus=0)
class TrackerActor:
    def __init__(self, root):
        self.root = root
        os.makedirs(f"{root}/training_data", exist_ok=True)

    def get_train_dir(self):
        return f"{self.root}/training_data"

    def get_log_dir(self):
        return f"{self.root}/logs"


@ray.remote(num_cpus=0, max_restarts=0)
class Generator:
    """A generation worker: plays trajectories turn by turn and sends each at its end."""

    def __init__(self, buf, worker):
        self.buf, self.worker = buf, worker

    def pid(self):
        return os.getpid()

    def play(self, games, turn_seconds=0.0):
        sent = []
        for g in range(games):
            obs = []
            for turn in range(4):
                time.sleep(turn_seconds)
                obs.append(f"w{self.worker} g{g} t{turn}")
            ray.get(self.buf.add_player_trajectory.remote(
                ours.PlayerTrajectory(pid=g % 2, final_reward=1, obs=obs, actions=["m"] * 4),
                ENVS[g % 3]))
            sent.append(g)
        return sent


def test_buffer_actors_killed_lose_nothing_acknowledged_and_workers_no_partial_game(tmp_path):
    tracker = TrackerActor.remote(str(tmp_path / "run"))
    buf = ours.StepBuffer.remote(2_000, tracker, None, None, None)
    assert ray.get(buf.size.remote()) == 0
    buf_pid = ray.get(buf.__ray_call__.remote(lambda self: os.getpid()))
    acked = []
    for g in range(60):
        traj = ours.PlayerTrajectory(pid=0, final_reward=1, obs=[f"g{g} t{i}" for i in range(3)],
                                actions=["m"] * 3)
        try:
            ray.get(buf.add_player_trajectory.remote(traj, "E"))
            acked.append(g)
        except GONE:
            pass  # in flight at the kill: not acknowledged
        if g == 30:
            os.kill(buf_pid, signal.SIGKILL)
    assert when_back(lambda: ray.get(buf.size.remote())) >= 3 * len(acked)
    steps = ray.get(buf.get_batch.remote(ray.get(buf.size.remote())))
    games = {}
    for s in steps:
        games.setdefault(s.obs.split()[0], []).append(s.obs)
    assert {f"g{g}" for g in acked} <= set(games)
    for g, obs in games.items():  # acknowledged ones whole; the one cut, a prefix
        if int(g[1:]) in acked:
            assert len(obs) == 3, (g, obs)
        else:
            obs = sorted(obs, key=lambda o: int(o.split()[1][1:]))
            assert obs == [f"{g} t{i}" for i in range(len(obs))], (g, obs)
    # The folder is in the tracker's train dir, and the batch's CSV beside it.
    train = tmp_path / "run" / "training_data"
    assert (train / "replaystore-step-buffer").is_dir()
    assert (train / "train_data_step_0.csv").is_file()

    # Generation workers: one killed mid-game leaves nothing of that game.
    workers = [Generator.remote(buf, w) for w in range(2)]
    slow_pid = ray.get(workers[1].pid.remote())
    done = workers[0].play.remote(5)
    slow = workers[1].play.remote(50, turn_seconds=0.05)
    assert ray.get(done) == list(range(5))
    time.sleep(0.6)
    os.kill(slow_pid, signal.SIGKILL)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(slow)
    steps = ray.get(buf.get_batch.remote(ray.get(buf.size.remote())))
    by_game = {}
    for s in steps:
        by_game.setdefault(" ".join(s.obs.split()[:2]), []).append(s.obs)
    assert all(len(v) == 4 for v in by_game.values())
    assert {f"w0 g{g}" for g in range(5)} <= set(by_game)
    assert any(k.startswith("w1 ") for k in by_game)

    ep = ours.EpisodeBuffer.remote(1000, tracker, None, None, None)
    ray.get(ep.add_player_trajectory.remote(
        ours.PlayerTrajectory(final_reward=0.5, obs=["a", "b"], actions=["x", "y"]), "E"))
    os.kill(ray.get(ep.__ray_call__.remote(lambda self: os.getpid())), signal.SIGKILL)
    assert when_back(lambda: ray.get(ep.size.remote())) == 2
    got = ray.get(ep.get_batch.remote(2))
    assert [[dataclasses.astuple(s)[1:3] for s in e] for e in got] == [[("a", "x"), ("b", "y")]]


def test_a_text_heap_too_small_for_the_kept_steps_refuses_the_add_whole(tmp_path):
    long = PlayerTrajectory(final_reward=1.0, obs=["x" * 6000] * 4, actions=["a"] * 4)
    # Too little text room: the add that would push a kept step out is refused whole.
    buf = ours.LocalStepBuffer(50, None, None, None, None, path=str(tmp_path / "small"),
                               heap_bytes=1 << 16)
    with pytest.raises(rs.ValueSpaceFullError, match="heap_bytes=") as e:
        for _ in range(10):
            held = buf.size()
            buf.add_player_trajectory(long, "E")
    assert "Config::" not in str(e.value)
    assert 0 < held == buf.size() < 50
    # Rows as few as the kept steps plus one: the ring moves kept steps on, and neither
    # refuses nor pushes any out.
    tight = ours.LocalStepBuffer(50, None, None, None, None, path=str(tmp_path / "rows"), capacity=51)
    import warnings as w

    with w.catch_warnings():
        w.simplefilter("error")
        for _ in range(20):
            tight.add_player_trajectory(long, "E")
    assert tight.size() == 50
    roomy = ours.LocalStepBuffer(50, None, None, None, None, path=str(tmp_path / "roomy"))
    with w.catch_warnings():
        w.simplefilter("error")
        for _ in range(40):  # downsampling alone: no warning
            roomy.add_player_trajectory(long, "E")
    assert roomy.size() == 50


def test_a_float32_reward_keeps_its_value_and_repr_as_the_library_keeps_the_object(tmp_path):
    their = THEIR_STEP(1_000, Tracker(tmp_path / "theirs"), None, None, None)
    mine = ours.LocalStepBuffer(1_000, Tracker(tmp_path / "ours"), None, None, None)
    for buf in (their, mine):
        buf.add_player_trajectory(PlayerTrajectory(final_reward=np.float32(0.1), obs=["a", "b"],
                                                   actions=["x", "y"]), "A")
        buf.add_player_trajectory(PlayerTrajectory(final_reward=np.float32(-1.0), obs=["c"],
                                                   actions=["z"]), "B")
    assert drained(their) == drained(mine)


def _episode_pair(tmp_path, max_size):
    their = THEIR_EPISODE(max_size, Tracker(tmp_path / "theirs"), None, None, None)
    mine = ours.LocalEpisodeBuffer(max_size, None, None, None, None, path=str(tmp_path / "ours"),
                                   heap_bytes=1 << 16)
    return their, mine


def _traj(n, tag="t"):
    return PlayerTrajectory(final_reward=1.0, obs=[f"{tag}/{i}" for i in range(n)], actions=["a"] * n)


def test_an_empty_trajectory_is_an_episode_of_no_steps_as_the_library_keeps_it(tmp_path):
    """0.2.2's EpisodeBuffer keeps an empty trajectory as an episode: ``size()`` does not
    count it, ``get_batch`` shuffles it in with the others (``[]`` in the batch, and
    ``get_batch(0)`` of a buffer holding only it is ``[[]]``), downsampling may drop it;
    a reopened folder still holds it. Which ones a draw takes follows the library's
    distribution (chi-square over 400 rounds)."""
    random.seed(11)
    their, mine = _episode_pair(tmp_path, 1_000)
    for buf in (their, mine):
        buf.add_player_trajectory(_traj(0), "e")
        assert buf.size() == 0
    assert mine.get_batch(0) == their.get_batch(0) == [[]]
    assert mine.get_batch(0) == their.get_batch(0) == []
    with pytest.raises(AssertionError):
        mine.get_batch(1)
    # Kept across a restart of the actor (its folder reopened).
    mine.add_player_trajectory(_traj(0), "e")
    mine.close()
    mine = ours.LocalEpisodeBuffer(1_000, None, None, None, None, path=str(tmp_path / "ours"))
    assert mine.get_batch(0) == [[]]

    def shape(batch):
        return "|".join(str(len(ep)) for ep in batch)

    cells = {"theirs": {}, "ours": {}}
    for name, buf in (("theirs", their), ("ours", mine)):
        for _ in range(400):
            buf.clear()
            for n in (2, 0, 3, 0, 1):
                buf.add_player_trajectory(_traj(n), "e")
            first = shape(buf.get_batch(4))
            rest = shape(buf.get_batch(0))
            c = cells[name]
            c[first] = c.get(first, 0) + 1
            c["0:" + rest] = c.get("0:" + rest, 0) + 1
    keys = sorted(set(cells["theirs"]) | set(cells["ours"]))
    assert len(keys) > 10
    peers.chi_square_two([cells["ours"].get(k, 0) for k in keys],
                         [cells["theirs"].get(k, 0) for k in keys])
    mine.close()


def test_downsampling_drops_empty_episodes_as_the_library_does(tmp_path):
    random.seed(12)
    their, mine = _episode_pair(tmp_path, 5)
    cells = {"theirs": {}, "ours": {}}
    for name, buf in (("theirs", their), ("ours", mine)):
        for _ in range(400):
            buf.clear()
            for n in (0, 3, 0, 2, 3):  # 8 steps into 5: whole episodes, empty ones among them
                buf.add_player_trajectory(_traj(n), "e")
            got = buf.get_batch(buf.size())
            empties = sum(1 for ep in got if not ep) + (mine.empties if buf is mine else
                                                         sum(1 for ep in their.episodes if not ep))
            cell = (empties, shape := "|".join(sorted(str(len(ep)) for ep in got if ep)))
            cells[name][cell] = cells[name].get(cell, 0) + 1
            assert shape
    keys = sorted(set(cells["theirs"]) | set(cells["ours"]))
    assert len({e for e, _ in keys}) == 3  # 0, 1 or 2 empty episodes survive
    peers.chi_square_two([cells["ours"].get(k, 0) for k in keys],
                         [cells["theirs"].get(k, 0) for k in keys])
    mine.close()


def test_size_stays_the_steps_held_when_a_small_ring_pushes_episodes_out(tmp_path):
    """A ring too small for ``max_buffer_size`` drops whole episodes (and warns): the
    step count ``size()`` reports is still what the folder holds, add after add."""
    # 16 steps kept, in 16 rows: with a reset row an episode, the ring fills first.
    mine = ours.LocalEpisodeBuffer(16, None, None, None, None, path=str(tmp_path / "ours"),
                                   capacity=16, heap_bytes=1 << 16)
    with pytest.warns(RuntimeWarning, match="pushed out by the ring"):
        for k in range(12):
            mine.add_player_trajectory(_traj(3, tag=str(k)), "A")
            held = len(mine.buf) - len(mine.buf.episodes())
            assert mine.size() == held, k
    assert sum(map(len, mine.get_batch(held))) == held and mine.size() == 0
