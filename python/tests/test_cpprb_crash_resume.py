"""Promise (issue 34, cpprb): a trainer that adds through a cpprb adapter and is killed
with ``kill -9`` mid-add resumes through the same adapter class on the same folder with
every transition it was told was stored, at the positions cpprb would give them, and goes
on adding from there."""

import ast
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kill import run_until_killed

from replaystore.compat import cpprb

ENV = {"obs": {"dtype": np.int64}, "rew": {}, "done": {}}
SIZE = 64


@pytest.mark.parametrize("cls", ["ReplayBuffer", "PrioritizedReplayBuffer", "ReverseReplayBuffer"])
def test_a_killed_trainer_resumes_with_every_acknowledged_transition(tmp_path, cls):
    path = str(tmp_path / "rb")
    code = f"""
        import numpy as np
        from replaystore.compat import cpprb
        rb = cpprb.{cls}({SIZE}, {{"obs": {{"dtype": np.int64}}, "rew": {{}}, "done": {{}}}},
                          path={path!r})
        i = rb.get_stored_size()
        while True:
            k = 1 + i % 3
            rb.add(obs=np.arange(i, i + k), rew=np.arange(i, i + k) * 0.5, done=np.zeros(k))
            i += k
            print(i, flush=True)
    """
    acked = run_until_killed(code, 200)[-1]
    rb = getattr(cpprb, cls)(SIZE, ENV, path=path)
    stored = rb.get_stored_size()
    # A full ring: the add the kill cut had begun writing over the oldest transitions'
    # slots (up to its 3), and those are gone with the torn writes, as in cpprb's ring;
    # every other acknowledged one is there.
    assert SIZE - 3 <= stored <= SIZE
    total = rb.get_next_index()
    # Every acknowledged add, and a prefix of the one the kill cut (each transition
    # lands whole or not at all).
    assert total in {(acked + k) % SIZE for k in range(4)}
    got = rb.get_all_transitions()
    obs = got["obs"].ravel()
    newest = obs.max()
    assert newest >= acked - 1
    # The newest transitions, consecutive, each at position obs % SIZE.
    np.testing.assert_array_equal(np.sort(obs), np.arange(newest - stored + 1, newest + 1))
    np.testing.assert_array_equal(rb._encode_sample(obs % SIZE)["obs"].ravel(), obs)
    np.testing.assert_array_equal(got["rew"].ravel(), obs * 0.5)
    # And it goes on: the next add takes the next position.
    at = rb.add(obs=newest + 1, rew=(newest + 1) * 0.5, done=0.0)
    assert at == (newest + 1) % SIZE
    rb.close()


def test_a_cleared_buffer_keeps_its_renumbered_positions_across_a_reopen(tmp_path):
    path = str(tmp_path / "rb")
    rb = cpprb.ReplayBuffer(8, ENV, path=path)
    rb.add(obs=np.arange(5), rew=np.zeros(5), done=np.zeros(5))
    rb.clear()
    assert rb.add(obs=np.arange(3), rew=np.zeros(3), done=np.zeros(3)) == 0
    rb.close()
    rb = cpprb.ReplayBuffer(8, ENV, path=path)
    assert (rb.get_stored_size(), rb.get_next_index()) == (3, 3)
    assert rb.get_all_transitions()["obs"].ravel().tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="size"):
        cpprb.ReplayBuffer(16, ENV, path=path)
    with pytest.raises(ValueError, match="made by cpprb.ReplayBuffer"):
        cpprb.PrioritizedReplayBuffer(8, ENV, path=path)
    rb.close()


def test_a_checkpoint_restores_in_a_fresh_process(tmp_path):
    path = str(tmp_path / "rb")
    rb = cpprb.ReplayBuffer(8, ENV, path=path, Nstep={"size": 3, "rew": "rew"})
    rb.add(obs=np.arange(4), rew=np.ones(4), done=np.zeros(4))
    state = rb.get_state()
    rb.add(obs=np.arange(4, 9), rew=np.ones(5), done=np.zeros(5))
    rb.close()
    import pickle

    blob = pickle.dumps(state)
    code = f"""
        import pickle, numpy as np
        from replaystore.compat import cpprb
        rb = cpprb.ReplayBuffer(8, {{"obs": {{"dtype": np.int64}}, "rew": {{}}, "done": {{}}}},
                                path={path!r}, Nstep={{"size": 3, "rew": "rew"}})
        rb.set_state(pickle.loads({blob!r}))
        rb.on_episode_end()
        print(rb.get_all_transitions()["obs"].ravel().tolist())
        print(rb.get_all_transitions()["rew"].ravel().tolist())
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    # 0 and 1 were stored at the checkpoint; 2 and 3 waited in the n-step queue, saved
    # in the state, and are summed by the episode's end after the restore.
    assert out[0] == "[0, 1, 2, 3]"
    g = float(np.float32(0.99))
    assert ast.literal_eval(out[1]) == pytest.approx([1 + g + g * g] * 2 + [1 + g, 1.0], rel=1e-6)


def test_a_killed_explorer_loses_nothing_it_added_and_its_lane_is_taken_again(tmp_path):
    path = str(tmp_path / "mp")
    # One lane: a restarted explorer can only go on in the dead one's.
    learner = cpprb.MPReplayBuffer(4096, ENV, writers=1, path=path)
    import pickle

    def explorer(start):
        return f"""
            import pickle, numpy as np
            rb = pickle.loads({pickle.dumps(learner)!r})
            i = {start}
            while True:
                rb.add(obs=np.arange(i, i + 10), rew=np.zeros(10), done=np.zeros(10))
                i += 10
                print(i, flush=True)
        """

    def holds_the_newest(acked):
        # Every acknowledged transition the ring still has room for, and a prefix of
        # the add the kill cut (each transition lands whole or not at all).
        obs = np.sort(learner.get_all_transitions()["obs"].ravel())
        newest = int(obs[-1])
        assert acked - 1 <= newest <= acked + 9
        assert learner.get_stored_size() == min(newest + 1, 4096)
        np.testing.assert_array_equal(obs, np.arange(newest + 1 - len(obs), newest + 1))
        return newest

    newest = holds_the_newest(run_until_killed(explorer(0), 100)[-1])
    # Restarted, an explorer takes the lane again (the kernel dropped the dead one's
    # lock) and its transitions follow the ones before.
    holds_the_newest(run_until_killed(explorer(newest + 1), 50)[-1])
    learner.close()


def test_a_hindsight_episode_cut_by_a_kill_is_stored_whole_after_the_restart(tmp_path):
    path = str(tmp_path / "her")
    env = {"obs": {"shape": 2}, "act": {}, "next_obs": {"shape": 2}}
    code = f"""
        import numpy as np
        from replaystore.compat import cpprb
        rew = lambda s, a, g: -1.0 * (np.abs(s - g).sum(axis=1) > 0.5)
        rb = cpprb.HindsightReplayBuffer(100, {env!r}, 50, rew, strategy="final",
                                         prioritized=False, path={path!r})
        for t in range(40):
            rb.add(obs=[t, 0], act=t, next_obs=[t + 1, 0])
            print(t, flush=True)
    """
    acked = run_until_killed(code, 7)[-1]
    rb = cpprb.HindsightReplayBuffer(100, env, 50, lambda s, a, g: -1.0 * (np.abs(s - g).sum(axis=1) > 0.5),
                                     strategy="final", prioritized=False, path=path)
    rb.on_episode_end([9, 9])
    n = rb.get_stored_size() // 2
    assert n >= acked + 1
    got = rb.get_all_transitions()
    np.testing.assert_array_equal(got["act"].ravel()[:n], np.arange(n))
    rb.close()
