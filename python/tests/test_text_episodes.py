"""Promise (issue 57): an episodic buffer keeps text and token fields. Multi-turn games
are added step by step (``add_reset``, ``add_step``) or whole (``add_episode``), and
every episodic draw returns each position's value from the row its fixed fields came
from, in every layout (``list``, ``padded``, ``flat``), shaped per unit as the fixed
arrays are; values survive a reopen and a reader in another process sees the same."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import replaystore as rs

SCHEMA = {
    "turn": "int64",  # the row's own number: an observation, drawn beside the text
    "reward": "float32",  # the step row's number, so step fields can be matched
    "obs": "str",
    "act": ("str", (None,), 400),
    "tokens": ("int32", (None,)),
}
OBS = ["turn", "obs"]


def obs(k):
    return f"<board {k}> " + "é" * (k % 5) + "x" * (k * 389 % 3000)


def act(k):
    return f"[move {k}]" * (1 + k % 7)


def tokens(k):
    return np.arange(64 + k * 97 % 900, dtype=np.int32) ^ np.int32(k)


def fill(buf, games, first=1000):
    """``games`` games of 4..12 turns; odd ones step by step, even ones whole."""
    k = first
    for g in range(games):
        turns = 4 + g * 5 % 9
        ks = list(range(k, k + turns + 1))
        if g % 2:
            buf.add_reset(turn=ks[0], obs=obs(ks[0]))
            for t, j in enumerate(ks[1:], 1):
                buf.add_step(turn=j, obs=obs(j), reward=float(j), act=act(j),
                             tokens=tokens(j), terminated=t == turns)
        else:
            buf.add_episode({
                "turn": np.array(ks, np.int64),
                "obs": [obs(j) for j in ks],
                "reward": np.array(ks[1:], np.float32),
                "act": [act(j) for j in ks[1:]],
                "tokens": [tokens(j) for j in ks[1:]],
            }, terminated=True)
        k += turns + 1


@pytest.fixture
def buf(tmp_path):
    b = rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, capacity=2000, episodic=True,
                               seed=3, heap_bytes=64 << 20)
    fill(b, 30)
    yield b
    b.close()


def test_transitions_return_text_from_the_rows_their_fixed_fields_came_from(buf):
    t = buf.sample_transitions(64, OBS, nstep=2, gamma=0.9)
    for i in range(64):
        assert t["obs"][i] == obs(int(t["turn"][i]))
        assert t["next_obs"][i] == obs(int(t["next_turn"][i]))
        assert t["act"][i] == act(int(t["reward"][i]))
        np.testing.assert_array_equal(t["tokens"][i], tokens(int(t["reward"][i])))
    p = buf.sample_transitions(32, OBS, values="padded", pad=-1)
    for i in range(32):
        n = p["tokens_lengths"][i]
        np.testing.assert_array_equal(p["tokens"][i, :n], tokens(int(p["reward"][i])))
        assert (p["tokens"][i, n:] == -1).all()
        m = p["next_obs_lengths"][i]
        assert bytes(p["next_obs"][i, :m]).decode() == obs(int(p["next_turn"][i]))
    s = buf.sample_transitions(16, OBS, stack=3)
    assert len(s["obs"]) == 16 and all(len(frames) == 3 for frames in s["obs"])
    for i in range(16):
        assert [obs(int(k)) for k in s["turn"][i]] == s["obs"][i]
        assert [obs(int(k)) for k in s["next_turn"][i]] == s["next_obs"][i]


def test_sequences_pad_text_per_position_and_leave_padding_empty(buf):
    s = buf.sample_sequences(16, 6, OBS, burn_in=3, values="padded")
    mask, turn = s["mask"], s["turn"]
    assert s["act"].shape[:2] == (16, 9) and s["act_lengths"].shape == (16, 9)
    assert s["tokens"].shape[:2] == (16, 9)
    assert not mask.all(), "some sequence reaches past its episode"
    for i in range(16):
        for p in range(9):
            n = s["obs_lengths"][i, p]
            if mask[i, p]:
                assert bytes(s["obs"][i, p, :n]).decode() == obs(int(turn[i, p]))
                k = int(s["reward"][i, p])
                m = s["act_lengths"][i, p]
                assert bytes(s["act"][i, p, :m]).decode() == act(k)
            else:
                assert n == 0 and s["act_lengths"][i, p] == 0
    lists = buf.sample_sequences(4, 2, OBS)
    assert len(lists["obs"]) == 4 and all(len(x) == 2 for x in lists["obs"])


def test_whole_episodes_return_every_turn_in_every_layout(buf):
    for values in ["list", "flat", "padded"]:
        e = buf.sample_episodes(5, values=values)
        for r, k in enumerate(e["turn"].tolist()):
            reset = r in e["offsets"].tolist()
            if values == "list":
                assert e["obs"][r] == obs(k)
                assert e["act"][r] == ("" if reset else act(k))
            elif values == "flat":
                o = e["obs_offsets"]
                assert bytes(e["obs"][o[r]:o[r + 1]]).decode() == obs(k)
            else:
                n = e["tokens_lengths"][r]
                want = np.zeros(0, np.int32) if reset else tokens(k)
                np.testing.assert_array_equal(e["tokens"][r, :n], want)


def test_text_episodes_survive_a_reopen_and_a_reader_in_another_process_sees_them(tmp_path):
    path = str(tmp_path / "b")
    b = rs.ReplayBuffer.create(path, SCHEMA, capacity=500, episodic=True, seed=1)
    fill(b, 10)
    b.close()
    b = rs.ReplayBuffer.open(path)
    fill(b, 5, first=9000)
    t = b.sample_transitions(128, OBS, seed=11)
    code = textwrap.dedent(f"""
        import json, replaystore as rs
        r = rs.Reader.open({path!r})
        t = r.sample_transitions(128, {OBS!r}, seed=11)
        print(json.dumps([t["next_obs"], t["act"], t["indices"].tolist()]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    import json
    next_obs, acts, indices = json.loads(out)
    assert indices == t["indices"].tolist()
    assert next_obs == t["next_obs"] and acts == t["act"]
    b.close()


def test_a_reset_may_leave_out_any_field_and_a_step_may_not(tmp_path):
    b = rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, capacity=50, episodic=True)
    b.add_reset(obs="start")
    with pytest.raises(rs.SchemaError, match="act"):
        b.add_step(turn=1, obs="o", reward=1.0, tokens=np.zeros(2, np.int32))
    with pytest.raises(ValueError):
        b.add_step(turn=1, obs="o", reward=1.0, act="a" * 401, tokens=np.zeros(2, np.int32))
    b.add_step(turn=1, obs="o", reward=1.0, act="a", tokens=np.zeros(2, np.int32),
               terminated=True)
    e = b.sample_episodes(1)
    assert e["obs"] == ["start", "o"] and e["act"] == ["", "a"] and len(b) == 2


def test_one_lane_per_game_writer_keeps_its_text_and_the_lanes_are_drawn_as_one(tmp_path):
    path = str(tmp_path / "v")
    rs.Lanes.create(path, SCHEMA, capacity=4000, lanes=4, episodic=True, seed=2,
                    heap_bytes=4 * (8 << 20)).close()
    for k in range(4):
        lane = rs.Lanes.open_lane(path, k)
        fill(lane, 6, first=(k + 1) * 100_000)
        t = lane.sample_transitions(16, OBS)
        assert all(t["next_obs"][i] == obs(int(t["next_turn"][i])) for i in range(16))
        lane.close()
    reader = rs.Lanes.open(path, reader=True)
    d = reader.sample(256, values="padded")
    lanes = d["indices"] >> 56
    assert set(lanes.tolist()) == {0, 1, 2, 3}
    for r in range(256):
        k = int(d["turn"][r])
        assert k // 100_000 == lanes[r] + 1
        n = d["obs_lengths"][r]
        assert bytes(d["obs"][r, :n]).decode() == obs(k)
    reader.close()


def test_lanes_of_text_items_route_each_row_and_its_values_to_its_lane(tmp_path):
    schema = {"turn": "int64", "obs": "str", "tokens": ("int32", (None,))}
    lanes = rs.Lanes.create(str(tmp_path / "v"), schema, capacity=300, lanes=3, seed=4)
    ks = list(range(1, 61))
    idx = lanes.add_batch({
        "turn": np.array(ks, np.int64),
        "obs": [obs(k) for k in ks],
        "tokens": [tokens(k) for k in ks],
    }, lanes=[k % 3 for k in ks])
    assert ((idx >> 56) == np.array([k % 3 for k in ks])).all()
    lanes.add(1, turn=61, obs=obs(61), tokens=tokens(61))
    d = lanes.sample(128, values="flat")
    o, t = d["obs_offsets"], d["tokens_offsets"]
    for r in range(128):
        k = int(d["turn"][r])
        assert bytes(d["obs"][o[r]:o[r + 1]]).decode() == obs(k)
        np.testing.assert_array_equal(d["tokens"][t[r]:t[r + 1]], tokens(k))
    lanes.close()


def test_an_episode_view_reads_text_and_token_entries_as_rllib_getters_do(tmp_path):
    b = rs.ReplayBuffer.create(str(tmp_path / "b"), SCHEMA, capacity=200, episodic=True)
    fill(b, 1)  # one game of 4 turns, rows 1000..1004
    (e,) = b.episodes()
    view = b.get_episode(e["id"], obs="obs", action="act", reward="reward", info="tokens")
    assert view.get_observations(-1) == obs(1004)
    assert view.get_observations([0, 1]) == [obs(1000), obs(1001)]
    assert view.get_actions(slice(1, 3)) == [act(1002), act(1003)]
    np.testing.assert_array_equal(view.get_infos(0), tokens(1001))
    assert view.get_observations([5, -6], fill=0) == ["", ""]
    assert view.get_rewards(-1) == np.float32(1004)
    b.close()
