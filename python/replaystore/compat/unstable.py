"""UnstableBaselines' ``StepBuffer`` and ``EpisodeBuffer`` (``unstable-rl``), on replaystore.

Switch one import::

    from replaystore.compat.unstable import StepBuffer, EpisodeBuffer   # was: from unstable import ...

Both are Ray actor classes with the library's constructor and calls
(``add_player_trajectory(player_traj, env_id)``, ``get_batch(batch_size)``, ``stop``,
``continue_collection``, ``size``, ``clear``), started with ``max_restarts=-1``. Their
steps live in a replaystore folder, not in a Python list: text ``obs`` / ``act`` /
``env_id`` as variable-length fields, the three rewards as ``float64`` fields. So:

- a buffer actor killed with ``kill -9`` is restarted by Ray, reopens its folder and
  has every trajectory an ``add_player_trajectory`` call acknowledged. A trajectory is
  one call; the one in flight at the kill (not acknowledged) may be kept in part in a
  ``StepBuffer`` (some of its first steps), and is removed by the restarted
  ``EpisodeBuffer`` (an episode never ended);
- a generation worker killed mid-trajectory loses that trajectory only: it had not
  been sent.

The folder is ``<tracker's train dir>/replaystore-step-buffer`` (``-episode-buffer``)
unless ``path=`` says where; ``capacity=`` and ``heap_bytes=`` size it (default: twice
``max_buffer_size`` rows, at least 1,024, and 8 KiB of text per row, so 16 KiB for
each kept step; disk is reserved as steps arrive, a segment at a time, not when
the buffer is made: a million-step buffer holding a hundred takes under 64 MiB). A
trajectory whose text does not fit beside the steps held raises
``replaystore.ValueSpaceFullError`` with nothing added, as the library never drops a
step before it downsamples; a ring of too few rows for what ``max_buffer_size`` keeps
would push stored steps out: each such add warns (``RuntimeWarning``) and logs how
many.

What each call does, as UnstableBaselines does it:

- ``add_player_trajectory``: the final transform once per trajectory
  (``reward=, pid=, env_id=``), the step transform once per step
  (``player_traj=, step_index=, reward=``); each step keeps ``step_info``
  (``raw_reward``, ``env_reward``, ``step_reward``). Past ``max_buffer_size`` steps,
  uniformly random steps (``StepBuffer``) or whole episodes (``EpisodeBuffer``) are
  removed, the new ones among the candidates: the engine's downsampling.
- ``StepBuffer.get_batch(n)``: ``n`` distinct steps drawn uniformly and removed, the
  sampling transform applied to the list of ``Step`` objects, the batch written to
  ``train_data_step_<k>.csv`` in the tracker's train dir. ``buffer_strategy`` is
  taken and ignored, as 0.2.2 ignores it (it always draws at random). Stratified draws
  are this module's option: ``stratify="env"`` / ``"env_role"`` draws an even share of
  every env (or env and player) first, then the rest uniformly; asked for more than it
  holds, it raises as the random draw does.
- ``EpisodeBuffer.get_batch(n)``: whole episodes in random order until they hold ``n``
  steps, removed; a list of lists of ``Step``.

Differences, each deliberate:

- Draws and downsampling use the engine's RNG (and NumPy's for where empty episodes
  fall among them), not Python's ``random``: the same distributions (``python/tests/test_unstable_differential.py`` checks them by
  chi-square against the library), not the same items for the same ``random.seed``.
- ``Step`` is UnstableBaselines' own class when ``unstable._types`` imports in the
  actor, else a dataclass of the same fields (``replaystore.compat.unstable.Step``).
- A reward is kept as a float, an int or a ``np.float32`` (as given, value and repr);
  ``None``, a ``bool``, a ``str`` or any other type raises ``TypeError`` naming it, where
  the library keeps the object (and its sampling transforms or CSV then see it as is).
- Observations and actions are text (``str``): another type raises ``SchemaError``
  naming the field, where the library keeps any object.
- An empty trajectory: ``StepBuffer`` keeps nothing of it, as the library; an
  ``EpisodeBuffer`` keeps it as the library does, an episode of no steps that
  ``get_batch`` returns as ``[]`` where the shuffle puts it (``get_batch(0)`` of a buffer
  holding only that returns ``[[]]``) and downsampling may drop. ``size()`` after a
  downsampling or a restart lists the episodes once to count them (O(episodes)).
- An ``EpisodeBuffer`` folder holds an episodic buffer (a reset row per episode, with
  the player id, before its steps); a folder an earlier version made of fragments is
  refused by name (``SchemaError``).
- ``stop()`` is a flag in the actor's memory, as in the library: a restarted actor
  collects again.

>>> import tempfile
>>> buf = LocalStepBuffer(100, None, None, None, None, path=tempfile.mkdtemp() + "/steps")
>>> traj = PlayerTrajectory(pid=0, final_reward=1.0, obs=["o1", "o2"], actions=["a1", "a2"])
>>> buf.add_player_trajectory(traj, env_id="TicTacToe-v0")
>>> buf.size()
2
>>> sorted(s.act for s in buf.get_batch(2)), buf.size()
(['a1', 'a2'], 0)
"""

import csv
import dataclasses
import logging
import logging.handlers
import os
import re
import warnings
from typing import Dict, List, Optional

import numpy as np

import replaystore as rs
from replaystore._confined import Confined
from replaystore.compat._folder import read_sidecar, write_sidecar


@dataclasses.dataclass
class Step:
    """UnstableBaselines' ``Step``, for when its own class does not import here."""

    pid: int
    obs: str
    act: str
    reward: float
    env_id: str
    step_info: Optional[Dict]


@dataclasses.dataclass
class PlayerTrajectory:
    """The fields of UnstableBaselines' ``PlayerTrajectory`` a buffer reads (its own
    objects work as they are: only ``pid``, ``final_reward``, ``obs`` and ``actions``
    are read, and the object is handed to the step transform)."""

    pid: int = 0
    final_reward: float = 0.0
    obs: List[str] = dataclasses.field(default_factory=list)
    actions: List[str] = dataclasses.field(default_factory=list)
    extracted_actions: List[str] = dataclasses.field(default_factory=list)
    format_feedbacks: List[Dict] = dataclasses.field(default_factory=list)
    step_infos: List[Dict] = dataclasses.field(default_factory=list)
    game_info: Dict = dataclasses.field(default_factory=dict)
    num_turns: int = 0


def _step_class():
    """UnstableBaselines' ``Step`` if it imports in this process, else ours."""
    try:
        from unstable._types import Step as TheirStep  # noqa: PLC0415

        return TheirStep
    except Exception:  # not installed, or its package's imports fail here
        return Step


SCHEMA = {
    "pid": "int64",
    "obs": "str",
    "act": "str",
    "env_id": "str",
    "reward": "float64",
    "raw_reward": "float64",
    "env_reward": "float64",
    # Bit 0: raw_reward was an int, bit 1: env_reward, bit 2: the step reward. The
    # library keeps the Python objects it was given; a CSV row shows `1`, not `1.0`.
    "ints": "uint8",
    "step_index": "int32",
}

#: ``stratify=``: the fields each draws an even share of (UnstableBaselines names the
#: strategies "stratified_env" / "stratified_env_role" but 0.2.2 never applies them).
STRATIFY = {None: None, "env": ["env_id"], "env_role": ["env_id", "pid"]}


def _number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what}: {value!r} ({type(value).__name__}): expected an int or a float")
    return isinstance(value, (int, np.integer))


class _Buffer:
    """What both buffers share: the folder, the transforms, the tracker's folders."""

    KIND = "step"

    def __init__(self, max_buffer_size, tracker, final_reward_transformation,
                 step_reward_transformation, sampling_reward_transformation,
                 buffer_strategy="random", *, path=None, capacity=None, heap_bytes=None,
                 stratify=None):
        # Kept, and ignored, as UnstableBaselines 0.2.2 keeps and ignores it.
        self.max_buffer_size, self.buffer_strategy = max_buffer_size, buffer_strategy
        if stratify not in STRATIFY:
            raise ValueError(f"stratify={stratify!r}: one of {sorted(k for k in STRATIFY if k)} or None")
        self.stratify = stratify
        self.final_reward_transformation = final_reward_transformation
        self.step_reward_transformation = step_reward_transformation
        self.sampling_reward_transformation = sampling_reward_transformation
        # Where the final and step transforms run, as in the library (the sampling one
        # runs on the drawn Step objects in get_batch).
        self.transforms = rs.rewards.RewardTransforms(final_reward_transformation,
                                                      step_reward_transformation)
        self.collect = True
        self.tracker = tracker
        train_dir = log_dir = None
        if tracker is not None:
            import ray

            train_dir = ray.get(tracker.get_train_dir.remote())
            log_dir = ray.get(tracker.get_log_dir.remote())
        if path is None:
            if train_dir is None:
                raise ValueError(f"{type(self).__name__}: give a tracker or path=")
            path = Confined(train_dir).subdir(f"replaystore-{self.KIND}-buffer")
        self.local_storage_dir = train_dir
        self.logger = _logger(f"{self.KIND}_buffer", log_dir)
        capacity = capacity or max(2 * int(max_buffer_size), 1024)
        self.heap_bytes = heap_bytes or capacity * 8192
        reopened = bool(Confined(path).names())
        # Row segments of 65,536 steps (6.5 MiB): disk is reserved a segment at a time
        # as steps arrive, so a buffer made for a million steps holding a hundred takes
        # one row segment and one 32 MiB text segment, not its 16 GB.
        episodic = self.KIND == "episode"
        self.buf = rs.ReplayBuffer.open_or_create(
            path, SCHEMA, capacity, item_states=True, max_size=int(max_buffer_size),
            episodic=episodic, whole_episodes=episodic, heap_bytes=self.heap_bytes,
            segment_slots=min(1 << 16, 1 << max(capacity - 1, 1).bit_length()),
        )
        self.path = path
        self.Step = _step_class()
        self.training_steps = self._csv_count() if reopened else 0

    def _csv_count(self):
        """After a restart, the batches written so far: numbering goes on after them."""
        if self.local_storage_dir is None or not os.path.isdir(self.local_storage_dir):
            return 0
        taken = [int(m.group(1)) for f in os.listdir(self.local_storage_dir)
                 if (m := re.fullmatch(r"train_data_step_(\d+)\.csv", f))]
        return max(taken) + 1 if taken else 0

    def _rows(self, player_traj, env_id):
        """The trajectory's steps as one batch of columns, transforms applied."""
        raw = player_traj.final_reward
        raw_int = _number(raw, "final_reward")
        n = len(player_traj.obs)
        if len(player_traj.actions) < n:
            raise ValueError(f"add_player_trajectory: {n} observations but "
                             f"{len(player_traj.actions)} actions")
        reward, steps = self.transforms.apply(raw, pid=player_traj.pid, env_id=env_id,
                                              steps=n, trajectory=player_traj)
        # Bits 0-2: the reward was an int; bits 3-5: a np.float32 (its value and repr kept,
        # as the library keeps the object it was given).
        ints = (raw_int | (_number(reward, "final transform") << 1)
                | (_f32(raw) << 3) | (_f32(reward) << 4))
        step_ints = [(_number(s, f"step transform (step {i})") << 2) | (_f32(s) << 5)
                     for i, s in enumerate(steps)]
        return {
            "pid": np.full(n, player_traj.pid, np.int64),
            "obs": list(player_traj.obs),
            "act": list(player_traj.actions[:n]),
            "env_id": [env_id] * n,
            "reward": np.asarray(steps, np.float64),
            "raw_reward": np.full(n, raw, np.float64),
            "env_reward": np.full(n, reward, np.float64),
            "ints": np.asarray([ints | s for s in step_ints], np.uint8),
            "step_index": np.arange(n, dtype=np.int32),
        }

    def _steps(self, rows, lo=0, hi=None):
        """``Step`` objects of rows ``lo..hi`` of a drawn batch."""
        hi = len(rows["obs"]) if hi is None else hi
        out = []
        for j in range(lo, hi):
            ints = int(rows["ints"][j])
            raw = _as(rows["raw_reward"][j], ints & 1, ints & 8)
            env = _as(rows["env_reward"][j], ints & 2, ints & 16)
            step = _as(rows["reward"][j], ints & 4, ints & 32)
            out.append(self.Step(
                pid=int(rows["pid"][j]), obs=rows["obs"][j], act=rows["act"][j], reward=step,
                env_id=rows["env_id"][j],
                step_info={"raw_reward": raw, "env_reward": env, "step_reward": step},
            ))
        return out

    def add_player_trajectory(self, player_traj, env_id):
        rows = self._rows(player_traj, env_id)
        n = len(rows["obs"])
        if n:
            self._add(rows, n)
        else:
            self._add_empty()
        self.logger.info(f"Buffer size: {len(self.buf)}, added {n} steps")

    def _add(self, rows, n):
        """Stores a trajectory's ``n`` steps as one ``add_batch``."""
        before = self.size()
        try:
            self._store(rows)  # acknowledged: kept through a kill -9 from here
        except rs.ValueSpaceFullError as e:
            # The library keeps every step until it downsamples: refused, said why.
            raise rs.ValueSpaceFullError(
                f"{self.path}: the text of this trajectory ({n} steps) does not fit beside "
                f"the {self.size()} steps held, and nothing was added: give heap_bytes= "
                f"(text bytes, now {self.heap_bytes}) room for {self.max_buffer_size} steps "
                f"and a trajectory. {e}") from None
        self._check_kept(before, n)

    def _store(self, rows):
        """A trajectory's steps as one call: one ``add_batch`` of steps."""
        self.buf.add_batch(rows)

    def _add_empty(self):
        """A trajectory without steps: the library's ``StepBuffer`` keeps nothing of it."""

    def _check_kept(self, before, n):
        """Warns when the ring pushed out stored steps: the library only ever drops
        steps by downsampling, so a ring (or text heap) too small for what
        ``max_buffer_size`` keeps is an error of sizing, said loudly."""
        if self.KIND == "step":
            want = min(before + n, int(self.max_buffer_size))
        elif before + n <= self.max_buffer_size:
            want = before + n
        else:
            return  # whole episodes were dropped: any count up to max_buffer_size
        have = self.size()
        if have < want:
            message = (
                f"{self.path}: {want - have} stored steps were pushed out by the ring, "
                f"not by downsampling: give capacity= (rows, now {self.buf.capacity}) or "
                f"heap_bytes= (text bytes, now {self.heap_bytes}) room for "
                f"{self.max_buffer_size} steps and a trajectory"
            )
            self.logger.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def stop(self):
        self.collect = False

    def size(self) -> int:
        return len(self.buf)

    def continue_collection(self):
        return self.collect

    def clear(self):
        self.buf.clear()

    def close(self):
        self.buf.close()


def _as(value, was_int, was_f32=False):
    if was_int:
        return int(value)
    return np.float32(value) if was_f32 else float(value)


def _f32(value):
    return int(isinstance(value, np.float32))


def _logger(name, log_dir):
    logger = logging.getLogger(f"replaystore.compat.unstable.{name}")
    if log_dir is not None and not logger.handlers:
        os.makedirs(log_dir, exist_ok=True)
        fh = logging.handlers.RotatingFileHandler(
            os.path.join(log_dir, f"{name}.log"), maxBytes=10_000_000, backupCount=5,
            encoding="utf-8")
        fh.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(name)s: %(message)s"))
        logger.addHandler(fh)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


class LocalStepBuffer(_Buffer):
    """``StepBuffer`` in this process (no Ray): the class the actor runs."""

    KIND = "step"

    def get_batch(self, batch_size: int):
        if not 0 <= batch_size <= len(self.buf):
            # As `random.sample` over the library's list.
            raise ValueError("Sample larger than population or is negative")
        by = STRATIFY[self.stratify]
        if not batch_size:
            rows = None
        elif by is None:
            rows = self.buf.sample(batch_size, remove=True)
        else:
            rows = self.buf.sample(batch_size, remove=True, by_group=by)
        batch = self._steps(rows) if rows is not None else []
        if self.sampling_reward_transformation is not None:
            batch = self.sampling_reward_transformation(batch)
        self.logger.info(f"Sampling {len(batch)} samples from buffer.")
        if self.local_storage_dir is not None:
            try:
                write_training_data_to_file(batch, os.path.join(
                    self.local_storage_dir, f"train_data_step_{self.training_steps}.csv"))
            except Exception as exc:  # as the library: a failed log does not fail the draw
                self.logger.error(f"Exception when trying to write training data to file: {exc}")
        self.training_steps += 1
        return batch


#: Beside an ``EpisodeBuffer``'s steps: how many empty episodes it holds.
EMPTIES = "unstable-empty-episodes.json"


class LocalEpisodeBuffer(_Buffer):
    """``EpisodeBuffer`` in this process (no Ray): the class the actor runs.

    Each trajectory is one episode of an episodic buffer with item states, added whole
    (``add_episode``: a reset row holding the player id, then one row per step), so
    ``get_batch`` is the engine's draw of distinct whole episodes until they cover the
    batch, removed as drawn, and downsampling its removal of random ended episodes past
    ``max_buffer_size`` steps. An empty trajectory is an episode of no steps, as the
    library keeps it: counted in a file beside the steps (an episode needs a step row
    to end it) and shuffled in with the others by ``get_batch`` (which returns it as
    ``[]``) and by downsampling."""

    KIND = "episode"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:
            cut = self.buf.unfinished_episodes()
        except rs.Error:
            self.buf.close()
            raise rs.SchemaError(
                f"{self.path}: not an episodic buffer (a folder an earlier version made "
                f"of fragments): give another path") from None
        # The trajectory in flight at a kill: never acknowledged, so not kept.
        for e in cut:
            self.buf.remove([e["start"]])
        saved = read_sidecar(self.path, EMPTIES)
        self.empties = int(saved["empty"]) if saved else 0
        #: Episodes with steps held, when known (None: counted when next needed).
        self.stored = None
        self._rng = np.random.default_rng()

    def _set_empties(self, k):
        if k != self.empties:
            write_sidecar(self.path, EMPTIES, {"empty": k})
            self.empties = k

    def _episodes(self):
        """Episodes with steps held (each has its reset row live: eviction is whole)."""
        if self.stored is None:
            self.stored = len(self.buf.episodes())
        return self.stored

    def size(self) -> int:
        """Steps held: rows less each episode's reset row."""
        return len(self.buf) - self._episodes()

    def _store(self, rows):
        """The trajectory as one episode, ended: its rows are the steps, after a reset
        row that holds the player id. An add the chunk ring refused part way leaves
        its open episode, which is removed: nothing of the trajectory is kept."""
        rows = dict(rows)
        n = len(rows["obs"])
        rows["pid"] = np.full(n + 1, rows["pid"][0], np.int64)
        before = len(self.buf)
        try:
            self.buf.add_episode(rows, terminated=True)
        except rs.Error:
            for e in self.buf.unfinished_episodes():
                self.buf.remove([e["start"]])
            raise
        # The count of episodes goes on with the add, unless episodes left with it
        # (downsampling, or a ring too small pushing them out): then counted again.
        grew = len(self.buf) == before + n + 1
        self.stored = self.stored + 1 if grew and self.stored is not None else None

    def _mixed(self, stored, empties, taken):
        """Where a shuffle of ``stored`` episodes with steps and ``empties`` empty ones
        puts the empty ones (True) among the others (False), up to the ``taken``-th with
        steps: the library walks its shuffled list (or draws from it) until then."""
        order = []
        while taken:
            empty = self._rng.random() * (stored + empties) < empties
            order.append(bool(empty))
            if empty:
                empties -= 1
            else:
                stored, taken = stored - 1, taken - 1
        return order

    def _add_empty(self):
        self._set_empties(self.empties + 1)

    def _add(self, rows, n):
        downsamples = self.size() + n > self.max_buffer_size
        before = self._episodes() if downsamples and self.empties else None
        super()._add(rows, n)
        if before is not None:
            # The library removes random episodes until the steps fit, empty ones among
            # them: the engine removed `gone` with steps; the empty ones drawn before.
            gone = before + 1 - self._episodes()
            self._set_empties(self.empties - sum(self._mixed(before + 1, self.empties, gone)))

    def _draw(self, steps):
        """Episodes with steps in random order until they hold ``steps``, removed."""
        rows = self.buf.sample_episodes(covering=steps, remove=True, values="list")
        off = rows["offsets"]
        if self.stored is not None:
            self.stored -= len(off) - 1
        # Each episode's first row is its reset row, no step.
        return [self._steps(rows, int(off[k]) + 1, int(off[k + 1])) for k in range(len(off) - 1)]

    def get_batch(self, batch_size: int):
        size = self.size()
        if size < batch_size:
            raise AssertionError(f"get_batch({batch_size}): the buffer holds {size} steps")
        if not self.empties:
            # The library's loop takes the first shuffled episode before it compares.
            episodes = self._draw(max(batch_size, 1)) if size else []
        elif batch_size <= 0:
            # Only the first of the shuffled episodes: an empty one, or one with steps.
            stored = self._episodes()
            first_empty = self._rng.random() * (stored + self.empties) < self.empties
            episodes = [[]] if first_empty else self._draw(1)
            self._set_empties(self.empties - int(first_empty))
        else:
            stored = self._episodes()
            drawn = self._draw(batch_size)
            order = self._mixed(stored, self.empties, len(drawn))
            it = iter(drawn)
            episodes = [[] if empty else next(it) for empty in order]
            self._set_empties(self.empties - sum(order))
        self.logger.info(f"Sampling {len(episodes)} episodes from buffer.")
        self.training_steps += 1
        return episodes

    def clear(self):
        super().clear()
        self._set_empties(0)
        self.stored = 0


def write_training_data_to_file(batch, filename):
    """The CSV UnstableBaselines writes per ``StepBuffer.get_batch``, the same bytes."""
    # The CSV goes to the tracker's train folder, as the library writes it there, not
    # into the buffer's folder; the name is the library's per-batch file.
    # confined: the tracker's file, outside the buffer's folder.
    with open(filename, mode="w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["pid", "obs", "act", "reward", "env_id", "step_info"])
        for s in batch:
            w.writerow([s.pid, s.obs, s.act, s.reward, s.env_id, s.step_info])


try:
    import ray as _ray
except ImportError:  # replaystore[ray] not installed: the local classes still work
    _ray = None

if _ray is not None:
    #: UnstableBaselines' ``StepBuffer``: a Ray actor class, restarted after a kill.
    StepBuffer = _ray.remote(max_restarts=-1)(LocalStepBuffer)
    #: UnstableBaselines' ``EpisodeBuffer``: a Ray actor class, restarted after a kill.
    EpisodeBuffer = _ray.remote(max_restarts=-1)(LocalEpisodeBuffer)

__all__ = ["EpisodeBuffer", "LocalEpisodeBuffer", "LocalStepBuffer", "PlayerTrajectory",
           "Step", "StepBuffer", "write_training_data_to_file"]
