"""Drop-in stand-ins for the replay buffers RL code already uses, backed by replaystore:
switch with one import and keep the buffer on disk, crash-safe and shareable.

- ``replaystore.compat.cpprb``: ``ReplayBuffer`` and ``PrioritizedReplayBuffer``.
"""
