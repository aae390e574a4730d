"""RLlib's replay buffers, backed by replaystore.

With Ray installed, each class subclasses RLlib's own and keeps all of its logic, so
RLlib's algorithms take them (``config.training(replay_buffer_config={"type":
EpisodeReplayBuffer, "path": ...})`` in DQN and SAC) and every draw is RLlib's, from
the same random state:

- new stack: ``EpisodeReplayBuffer``, ``PrioritizedEpisodeReplayBuffer``,
  ``MultiAgentEpisodeReplayBuffer``, ``MultiAgentPrioritizedEpisodeReplayBuffer``, over
  ``SingleAgentEpisode`` / ``MultiAgentEpisode`` (``_new``, ``_episodes``);
- old stack: ``ReplayBuffer``, ``PrioritizedReplayBuffer``, ``ReservoirReplayBuffer``,
  ``FifoReplayBuffer``, ``MultiAgentReplayBuffer``, ``MultiAgentPrioritizedReplayBuffer``,
  ``MultiAgentMixInReplayBuffer``, over ``SampleBatch`` / ``MultiAgentBatch`` (``_old``).

Their items live pickled in a replaystore ring in the folder ``path`` (a temporary one
when ``None``, removed at ``close``); a folder that holds a buffer is reopened with
every item it had, after a kill -9 too. The ring grows with what is held (never
dropping an item RLlib keeps) up to ``heap_bytes=`` bytes of value space, a keyword of
every class (each policy's, for the multi-agent ones; default ``None``: the disk's
room); a put past it raises ``replaystore.ValueSpaceFullError`` with nothing added.
Checked against RLlib by
``python/tests/test_rllib_differential.py``. Without Ray, ``ReplayBuffer`` and
``PrioritizedReplayBuffer`` are stand-ins on plain dicts of arrays (``_plain``).

Where they differ from RLlib, and why:

- ``get_state`` with a folder of the caller's is an O(1) snapshot of the ring (plus
  RLlib's index, a copy of its lists); ``set_state`` restores it on a buffer opened on
  that folder, in this process or another. With a temporary folder (it ends with the
  process) the state holds the items, in RLlib's own form (RLlib's classes take it).
- A reopened folder restores what its ring holds: the items, slots and episodes, the
  timesteps added, the next slot and eviction flag, the evicted-episode count. It
  cannot restore what RLlib keeps only in memory and changes on a draw: sampled counts,
  hit counts, metrics, and priorities (a reopened prioritized buffer starts every item
  at one priority: the old stack's largest as of its last add, the new stack's 1.0;
  ``get_state`` keeps them all).
  ``MultiAgentMixInReplayBuffer``'s batches held back for mixing start empty.
- Items read back are copies down to the last object: an ``infos`` dict of a drawn
  batch is a copy too (RLlib's draws copy arrays but share such objects with the
  stored item).
- ``_storage[i]`` (old stack) is the item's header (``count``, ``size_bytes()``, the
  sequence flags), not the item: ``_storage.load([i])`` reads it. ``episodes[i]`` (new
  stack) is a ``StoredEpisode`` handle: ``len``, ids, flags, spaces, getters and
  ``slice`` are answered from the chunks it spans, any other attribute from the whole
  episode (joined by RLlib's ``concat_episode``, cached); it is not an instance of
  ``SingleAgentEpisode``.
- The adapter classes answer ``"EpisodeReplayBuffer" in cls`` and ``cls ==
  "PrioritizedEpisodeReplayBuffer"`` by their names: RLlib's ``Algorithm`` and SAC test
  ``replay_buffer_config["type"]`` that way, which fails for any class, RLlib's own too.
- ``set_state`` on a buffer that holds episodes replaces them (RLlib's keeps the old
  ones and takes the new index: its ``_set_episodes`` fills an empty buffer only).
  ``MultiAgentMixInReplayBuffer.set_state`` restores (RLlib's raises ``TypeError``: it
  calls its parent's unbound).
- Multi-agent old-stack buffers keep one folder per policy (``policy-<id>``): a kill
  mid-add of a ``MultiAgentBatch`` can leave one policy with its part and another
  without. A policy RLlib only looked up (an empty buffer) has no folder, so a reopen
  does not list it until it holds an item.
- Cost: timesteps of the FIFO old-stack buffers (``storage_unit="timesteps"``, and the
  multi-agent ones' policies) are rows of columns: written a batch at a time and drawn
  in one read, faster than RLlib's list. Every other item and episode chunk is pickled
  into the ring as it is added and unpickled when read: the old stack's other units
  add and draw slower than RLlib, the new stack about as fast
  (docs/decisions/24-adapters-rllib-ding.md has the figures). A timesteps buffer keeps its first batch's columns: a batch with
  other columns or dtypes is refused with a ``ValueError`` naming them (RLlib would
  take it).
"""

try:
    import ray.rllib  # noqa: F401
except ImportError:
    from ._plain import PrioritizedReplayBuffer, ReplayBuffer, StorageUnit  # noqa: F401

    __all__ = ["PrioritizedReplayBuffer", "ReplayBuffer", "StorageUnit"]
else:
    from ._new import (  # noqa: F401
        EpisodeReplayBuffer,
        MultiAgentEpisodeReplayBuffer,
        MultiAgentPrioritizedEpisodeReplayBuffer,
        PrioritizedEpisodeReplayBuffer,
    )
    from ._old import (  # noqa: F401
        FifoReplayBuffer,
        MultiAgentMixInReplayBuffer,
        MultiAgentPrioritizedReplayBuffer,
        MultiAgentReplayBuffer,
        PrioritizedReplayBuffer,
        ReplayBuffer,
        ReservoirReplayBuffer,
        StorageUnit,
    )

    __all__ = [
        "EpisodeReplayBuffer",
        "FifoReplayBuffer",
        "MultiAgentEpisodeReplayBuffer",
        "MultiAgentMixInReplayBuffer",
        "MultiAgentPrioritizedEpisodeReplayBuffer",
        "MultiAgentPrioritizedReplayBuffer",
        "MultiAgentReplayBuffer",
        "PrioritizedEpisodeReplayBuffer",
        "PrioritizedReplayBuffer",
        "ReplayBuffer",
        "ReservoirReplayBuffer",
        "StorageUnit",
    ]
