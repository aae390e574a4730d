"""RLlib's replay buffers, backed by replaystore (docstring completed below)."""

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
