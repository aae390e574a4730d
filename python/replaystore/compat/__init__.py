"""Drop-in stand-ins for the replay buffers RL code already uses, backed by replaystore:
switch with one import and keep the buffer on disk, crash-safe and shareable.

- ``replaystore.compat.cpprb``: every cpprb buffer (``ReplayBuffer``,
  ``PrioritizedReplayBuffer``, ``ReverseReplayBuffer``, the MP, Hindsight and Selective
  buffers) with ``Nstep``, ``next_of``, files and the space helpers; checked against
  cpprb itself.
- ``replaystore.compat.sb3``: Stable-Baselines3's ``ReplayBuffer``,
  ``DictReplayBuffer``, ``NStepReplayBuffer`` and ``HerReplayBuffer`` as
  ``replay_buffer_class=``, subclassing SB3's own; checked against SB3 itself.
- ``replaystore.compat.tianshou``: with Tianshou installed, its ``ReplayBuffer``,
  ``VectorReplayBuffer`` and the prioritized ones, subclassing Tianshou's (``Batch`` in
  and out, a ``Collector`` fills them); checked against Tianshou itself. Without it,
  stand-ins on dicts of arrays.
- ``replaystore.compat.rllib``: with Ray installed, RLlib's buffers of both API stacks
  (``EpisodeReplayBuffer`` and its prioritized and multi-agent kin; ``ReplayBuffer``,
  prioritized, reservoir, FIFO and multi-agent), subclassing RLlib's own: DQN and SAC
  take them as ``replay_buffer_config["type"]``; checked against RLlib itself. Without
  Ray, stand-ins for ``ReplayBuffer`` and ``PrioritizedReplayBuffer`` on dicts of arrays.
- ``replaystore.compat.ding``: DI-engine's ``DequeBuffer`` with its middleware and the
  legacy Naive, Advanced and Episode buffers, subclassing DI-engine's own; checked
  against DI-engine itself.
- ``replaystore.compat.unstable``: UnstableBaselines' ``StepBuffer`` and
  ``EpisodeBuffer``, Ray actors as in the library (restarted after a kill, their text
  steps in a folder); checked against ``unstable-rl`` itself.
- ``replaystore.compat.torchrl``: a storage and a prioritized sampler for TorchRL's own
  ``ReplayBuffer`` in place of ``LazyMemmapStorage`` and ``PrioritizedSampler`` (also
  under those names): items, cursor and priorities in a folder; checked against
  TorchRL's own tests and beside TorchRL.

Each module's docstring lists where it follows the library and where it cannot.
"""
