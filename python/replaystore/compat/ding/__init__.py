"""DI-engine's replay buffers, backed by replaystore (needs DI-engine: ``pip install
DI-engine``; docstring completed below)."""

from ._deque import DequeBuffer  # noqa: F401
from ._legacy import AdvancedReplayBuffer, EpisodeReplayBuffer, NaiveReplayBuffer, create_buffer  # noqa: F401

__all__ = ["AdvancedReplayBuffer", "DequeBuffer", "EpisodeReplayBuffer", "NaiveReplayBuffer", "create_buffer"]
