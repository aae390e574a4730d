"""cpprb's replay buffers, backed by replaystore: ``from replaystore.compat import cpprb``
in place of ``import cpprb``.

Every class takes cpprb's arguments with cpprb's defaults and returns what cpprb returns
(dicts of arrays in the ``env_dict``'s dtypes and shapes, ring positions as indexes,
cpprb's errors). Checked against cpprb 11 by ``python/tests/test_cpprb_differential.py``,
which drives both with the same calls.

What each buffer gains: it lives in a folder (``path=``, or cpprb's ``mmap_prefix``:
``{mmap_prefix}_replaystore``; a temporary folder removed by ``close`` when neither is
given). Opening an existing folder through the same class reopens it with everything it
held, so a trainer killed with ``kill -9`` resumes; ``get_state``/``set_state`` are the
engine's O(1) checkpoint; ``replaystore.Reader`` samples it from other processes and the
``replaystore`` command inspects it.

Where it differs from cpprb, and why:

- ``sample`` of the prioritized buffers draws with replaystore's seeded generator, not
  cpprb's (the uniform buffers draw with ``np.random`` as cpprb does, so a seeded NumPy
  reproduces cpprb's draw position for position). Distributions match (chi-square tests).
- ``Nstep`` ``done``, fed one transition at a time, is cpprb's: a window that fills sums
  the dones of its first ``size - 1`` steps (one ending on the terminal step is not
  done), a window the episode's end flushes sums all of them. Fed several at a time,
  cpprb also adds the fill value (1) of its staging buffer, so ``done`` can be 1 with no
  terminal step in the window; at ``on_episode_end`` it sums the waiting transitions'
  dones in place, so one can count a done twice (2): those two are cpprb's bugs, not
  kept. Rewards and ``next`` values match.
- ``Nstep``: on ``on_episode_end`` the waiting transitions get the episode's last ``next``
  values; cpprb 11 gives them its buffer's fill value (1), which is a bug there.
  Waiting transitions are in memory in both: a crash loses them (they were never stored).
- ``next_of`` and ``stack_compress`` store the values whole: the memory cpprb saves by
  sharing rows is disk here (pages of a file, not RAM). Sampled values are the same.
- float16 fields are stored as their 16 bits (dtype ``u16`` to the ``replaystore``
  command), other dtypes the engine lacks (complex, extended precision, big-endian) as
  their bytes (``u8`` with one more axis); the adapter views them back as the dtype.
- ``add`` with a key missing raises ``KeyError`` and stores nothing; cpprb has already
  taken the positions and keeps whatever they held as new transitions.
- ``update_priorities`` at a position that holds no transition yet is skipped (cpprb sets
  a priority the next add there overwrites).
- ``save_transitions`` always writes cpprb's ``safe=True`` layout (cpprb reads it, and
  ``safe=False`` would save nothing here: the values are stored whole);
  ``load_transitions`` reads both of cpprb's layouts.
- ``MPReplayBuffer``/``MPPrioritizedReplayBuffer`` are one ring of ``size`` positions,
  as cpprb's: every process sees the same ``get_next_index``, ``get_stored_size`` and
  positions (``indexes``), and ``clear`` empties the ring for all. The transitions live
  in one lane per adding process (``writers=``, default the CPU count, at most 4), each
  of ``size`` transitions so one explorer may fill the ring: the disk holds up to
  ``writers`` times cpprb's memory. A shared table in the folder names the transition at each position;
  adds take the next positions under a lock on it, as cpprb's adds take its lock.
  Explorer-given priorities reach the learner at its next ``sample``/``update_priorities``
  (until then those transitions have the largest priority so far). They have no
  ``get_state``: a checkpoint of lanes needs their writers, which are the explorer
  processes (cpprb's MP buffers have none either); each lane reopens after a crash.
- ``SelectiveReplayBuffer`` closes an episode at every ``done``; cpprb closes one at the
  first ``done`` of each ``add`` call only, so steps after a second ``done`` in one call
  join the episode before (its episodes then depend on how steps were batched).
- Constructor keywords a class does not know are ignored, as cpprb ignores them, with a
  ``UserWarning`` naming them (a misspelt argument would otherwise be lost unseen).
- ``train`` is cpprb's loop, taking any of these buffers (cpprb's refuses all but its
  own class); it does not warn that it is a beta, as cpprb's does.
- The LaBER buffers (``LaBERmean``/``LaBERlazy``/``LaBERmax``) are not provided: they
  re-rank a batch the caller already drew and hold no data, so cpprb's own work on
  batches this module returns.
"""

from ._buffer import PrioritizedReplayBuffer, ReplayBuffer, ReverseReplayBuffer, create_buffer
from ._her import HindsightReplayBuffer
from ._mp import MPPrioritizedReplayBuffer, MPReplayBuffer
from ._selective import SelectiveReplayBuffer
from ._spaces import create_before_add_func, create_env_dict
from ._train import train

__all__ = [
    "ReplayBuffer",
    "PrioritizedReplayBuffer",
    "ReverseReplayBuffer",
    "MPReplayBuffer",
    "MPPrioritizedReplayBuffer",
    "HindsightReplayBuffer",
    "SelectiveReplayBuffer",
    "create_buffer",
    "create_env_dict",
    "create_before_add_func",
    "train",
]
