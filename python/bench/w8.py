"""W8 of docs/WORKLOADS.md, multi-turn self-play, for compare.py: 8 games played at once
(one per lane), 2 players taking turns, 4-12 turns a game; each step an observation of
0.5-8 KiB of text (log-normal, median 2 KiB), an action of 20-400 bytes, 64-2,048
int32 token ids, the player (int8) and a reward that is 0 but at the game's end.
100,000 steps (--quick: 6,250).

- replaystore: `add1` is `add_reset` / `add_step` one step per call, the 8 games
  interleaved over 8 lane writers of one lane set (`Lanes.open_lane`), as 8 env workers
  add, once the lanes' rings have lapped (`add1_first`: the first pass, into fresh
  sparse files, whose pages the kernel allocates and zeroes as they are first
  written); `fill` is `add_episode` of each finished game into one episodic buffer (how
  UnstableBaselines hands over a trajectory), and the draws come from it:
  `sample_episodes(32, values="padded")` and `sample_transitions(256, ["obs"],
  values="padded")` (text `next_obs` from the next step's row).
- list: what UnstableBaselines' `EpisodeBuffer` keeps, a list of games, each a list of
  `Step` dataclasses; a draw is `random.sample` of games (or of a game and a turn), then
  the same padded arrays built from Python.
- torchrl: `ReplayBuffer(ListStorage)` of games (a dict of lists and tensors per game),
  padded with `pad_sequence`; its transitions buffer keeps `next_obs` in each step, as
  TorchRL's `("next", ...)` keys do.

Figures: `add1_first`, `add1` and `fill` (steps/s), `sample_episodes` (batches of 32 games/s),
`sample_transitions` (batches of 256/s), and `memcpy_floor` (an episode batch's payload
bytes at this host's memcpy rate, the floor the issue sets "within 3x" of).
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time

import numpy as np

LANES = 8
SCHEMA = {"pid": "int8", "reward": "float32", "obs": "str", "act": "str",
          "tokens": ("int32", (None,))}


def games(n_steps, seed=8):
    """Games of 4-12 turns until `n_steps` steps: per game the turns' observations
    (one more than the turns: the board after the last move), actions, tokens, players
    and rewards; and the payload bytes of a step on average."""
    rng = np.random.default_rng(seed)
    text = bytes(rng.choice(np.frombuffer(b"abcdefghijklmnopqrstuvwxyz .,|XO", np.uint8), 8 << 20))
    out, steps = [], 0
    while steps < n_steps:
        turns = int(rng.integers(4, 13))
        olen = np.clip(rng.lognormal(np.log(2048), 0.6, turns + 1), 512, 8192).astype(int)
        alen = rng.integers(20, 401, turns)
        at = rng.integers(0, (8 << 20) - 8192, turns + 1)
        out.append({
            "obs": [text[s:s + k].decode() for s, k in zip(at, olen)],
            "act": [text[s:s + k].decode() for s, k in zip(at[1:], alen)],
            "tokens": [rng.integers(0, 50_000, int(k), dtype=np.int32)
                       for k in rng.integers(64, 2049, turns)],
            "pid": (np.arange(turns) % 2).astype(np.int8),
            "reward": np.concatenate([np.zeros(turns - 1, np.float32), [1.0]]).astype(np.float32),
        })
        steps += turns
    total = sum(sum(map(len, g["obs"])) + sum(map(len, g["act"]))
                + sum(4 * len(t) for t in g["tokens"]) + 5 * len(g["act"]) for g in out)
    return out, steps, total


class Replaystore:
    def __init__(self, steps, path):
        import replaystore as rs
        self.rs, self.path = rs, path
        # About 10 KiB of text and tokens a step.
        self.buf = rs.ReplayBuffer.create(path + "-episodes", SCHEMA, steps + 1024,
                                          episodic=True, heap_bytes=(steps + 1024) * 12 << 10)

    def add_steps(self, gs):
        """Every game step by step, the 8 games at a time interleaved over 8 lanes, twice:
        the first pass into fresh (sparse) files, the second once the rings have lapped
        (each lane holds half its games' steps and text), as a long run adds. Returns
        the steps/s of both."""
        rs = self.rs
        lanes_path = self.path + "-lanes"
        steps = sum(len(g["act"]) for g in gs)
        lane = steps // LANES // 2 + 64
        rs.Lanes.create(lanes_path, SCHEMA, lane, LANES, episodic=True,
                        heap_bytes=LANES * lane * 10 << 10, evict_for_room=True).close()
        writers = [rs.Lanes.open_lane(lanes_path, k) for k in range(LANES)]
        rates = []
        for _ in range(2):
            t = time.perf_counter()
            for first in range(0, len(gs), LANES):
                table = list(enumerate(gs[first:first + LANES]))
                for k, g in table:
                    writers[k].add_reset(obs=g["obs"][0])
                for turn in range(max(len(g["act"]) for _, g in table)):
                    for k, g in table:
                        if turn < len(g["act"]):
                            writers[k].add_step(
                                obs=g["obs"][turn + 1], act=g["act"][turn],
                                tokens=g["tokens"][turn], pid=int(g["pid"][turn]),
                                reward=float(g["reward"][turn]),
                                terminated=turn == len(g["act"]) - 1)
            rates.append(steps / (time.perf_counter() - t))
        for w in writers:
            w.close()
        shutil.rmtree(lanes_path, ignore_errors=True)
        return rates

    def add_game(self, g):
        self.buf.add_episode(
            {"obs": g["obs"], "act": g["act"], "tokens": g["tokens"], "pid": g["pid"],
             "reward": g["reward"]}, terminated=True)

    def settle(self):
        self.buf.flush()

    def sample_episodes(self, n):
        return self.buf.sample_episodes(n, values="padded")

    def sample_transitions(self, n):
        return self.buf.sample_transitions(n, ["obs"], values="padded")

    def close(self):
        self.buf.close()
        shutil.rmtree(self.path + "-episodes", ignore_errors=True)


@dataclasses.dataclass
class Step:
    """``unstable._types.Step`` with the step's tokens beside it."""

    pid: int
    obs: str
    act: str
    reward: float
    tokens: np.ndarray


def pad(arrays, dtype):
    width = max((len(a) for a in arrays), default=0)
    out = np.zeros((len(arrays), width), dtype)
    for r, a in enumerate(arrays):
        out[r, :len(a)] = a
    return out


def pad_text(texts):
    return pad([np.frombuffer(t.encode(), np.uint8) for t in texts], np.uint8)


class List:
    """UnstableBaselines' ``EpisodeBuffer``: a list of games, each a list of steps (its
    final board kept with the game, as the next observation of its last step)."""

    def __init__(self, steps, path):
        self.games, self.open = [], {}

    def add_steps(self, gs):
        t = time.perf_counter()
        for first in range(0, len(gs), LANES):
            table = list(enumerate(gs[first:first + LANES]))
            for k, g in table:
                self.open[k] = ([], [g["obs"][0]])
            for turn in range(max(len(g["act"]) for _, g in table)):
                for k, g in table:
                    if turn < len(g["act"]):
                        steps, boards = self.open[k]
                        steps.append(Step(int(g["pid"][turn]), boards[-1], g["act"][turn],
                                          float(g["reward"][turn]), g["tokens"][turn]))
                        boards.append(g["obs"][turn + 1])
                        if turn == len(g["act"]) - 1:
                            self.games.append(self.open.pop(k))
        took = time.perf_counter() - t
        self.games.clear()
        rate = sum(len(g["act"]) for g in gs) / took
        return [rate, rate]  # no files: the first pass is the steady state

    def add_game(self, g):
        boards = list(g["obs"])
        steps = [Step(int(g["pid"][i]), boards[i], g["act"][i], float(g["reward"][i]),
                      g["tokens"][i]) for i in range(len(g["act"]))]
        self.games.append((steps, boards))

    def sample_episodes(self, n):
        picked = [random.choice(self.games) for _ in range(n)]
        steps = [s for g, _ in picked for s in g]
        return (pad([s.tokens for s in steps], np.int32), pad_text([s.obs for s in steps]),
                pad_text([s.act for s in steps]), np.array([s.reward for s in steps], np.float32))

    def sample_transitions(self, n):
        obs, nxt, act, tok = [], [], [], []
        for _ in range(n):
            steps, boards = random.choice(self.games)
            i = random.randrange(len(steps))
            obs.append(boards[i])
            nxt.append(boards[i + 1])
            act.append(steps[i].act)
            tok.append(steps[i].tokens)
        return pad_text(obs), pad_text(nxt), pad_text(act), pad(tok, np.int32)

    def close(self):
        self.games.clear()


class TorchRL:
    """TorchRL's ``ReplayBuffer(ListStorage)``: one item per game (episodes) and one per
    step with its ``next_obs`` (transitions), padded with ``pad_sequence``."""

    def __init__(self, steps, path):
        import torch
        from torch.nn.utils.rnn import pad_sequence
        from torchrl.data import ListStorage, ReplayBuffer
        self.torch, self.pad_seq = torch, pad_sequence
        self.episodes = ReplayBuffer(storage=ListStorage(max_size=steps), collate_fn=lambda x: x)
        self.steps = ReplayBuffer(storage=ListStorage(max_size=steps), collate_fn=lambda x: x)

    def add_steps(self, gs):
        t = time.perf_counter()
        th = self.torch
        for first in range(0, len(gs), LANES):
            table = list(enumerate(gs[first:first + LANES]))
            for turn in range(max(len(g["act"]) for _, g in table)):
                for k, g in table:
                    if turn < len(g["act"]):
                        self.steps.add({
                            "obs": g["obs"][turn], "next_obs": g["obs"][turn + 1],
                            "act": g["act"][turn], "tokens": th.from_numpy(g["tokens"][turn]),
                            "pid": int(g["pid"][turn]), "reward": float(g["reward"][turn])})
        rate = sum(len(g["act"]) for g in gs) / (time.perf_counter() - t)
        return [rate, rate]  # in memory: the first pass is the steady state

    def add_game(self, g):
        th = self.torch
        self.episodes.add({"obs": list(g["obs"]), "act": list(g["act"]),
                           "tokens": [th.from_numpy(x) for x in g["tokens"]],
                           "reward": th.from_numpy(g["reward"]), "pid": th.from_numpy(g["pid"])})

    def _text(self, texts):
        th = self.torch
        return self.pad_seq([th.frombuffer(bytearray(t.encode()), dtype=th.uint8) for t in texts],
                            batch_first=True)

    def sample_episodes(self, n):
        items = self.episodes.sample(n)
        tokens = [t for e in items for t in e["tokens"]]
        return (self.pad_seq(tokens, batch_first=True),
                self._text([o for e in items for o in e["obs"][:-1]]),
                self._text([a for e in items for a in e["act"]]),
                self.torch.cat([e["reward"] for e in items]))

    def sample_transitions(self, n):
        items = self.steps.sample(n)
        return (self._text([x["obs"] for x in items]), self._text([x["next_obs"] for x in items]),
                self._text([x["act"] for x in items]),
                self.pad_seq([x["tokens"] for x in items], batch_first=True))

    def close(self):
        pass


LIBS = {"replaystore": Replaystore, "list": List, "torchrl": TorchRL}
AVAILABLE = {"replaystore": "replaystore", "list": "random", "torchrl": "torchrl"}


def child(lib_name, quick, runs, scratch, put):
    """W8's figures for one library, each put as soon as measured."""
    n_steps = 100_000 // (16 if quick else 1)
    draws = 200 // (4 if quick else 1)
    gs, steps, payload = games(n_steps)
    add1_first, add1, fill, episodes, transitions = [], [], [], [], []
    for r in range(runs):
        path = os.path.join(scratch, f"{lib_name}-W8-{r}")
        b = LIBS[lib_name](steps, path)
        # The previous run's writeback done first (as W5's figures): a library writing
        # files would otherwise pay for the last one's gigabytes.
        os.sync()
        first, steady = b.add_steps(gs)
        add1_first.append(first)
        add1.append(steady)
        os.sync()
        t = time.perf_counter()
        for g in gs:
            b.add_game(g)
        fill.append(steps / (time.perf_counter() - t))
        getattr(b, "settle", lambda: None)()
        b.sample_episodes(32)
        t = time.perf_counter()
        for _ in range(draws):
            b.sample_episodes(32)
        episodes.append(draws / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(draws):
            b.sample_transitions(256)
        transitions.append(draws / (time.perf_counter() - t))
        b.close()
        del b
    put("add1_first", add1_first)
    put("add1", add1)
    put("fill", fill)
    put("sample_episodes", episodes)
    put("sample_transitions", transitions)
    if lib_name == "replaystore":
        # 32 games' payload bytes (8 turns a game on average) at this host's memcpy
        # rate, over arrays far larger than the caches.
        big = np.ones(64 << 20, np.uint64)
        dst = np.empty_like(big)
        np.copyto(dst, big)
        best = 0.0
        for _ in range(3):
            t = time.perf_counter()
            np.copyto(dst, big)
            best = max(best, big.nbytes / (time.perf_counter() - t))
        per_game = payload / len(gs)
        put("memcpy_floor", [best / (per_game * 32)])
