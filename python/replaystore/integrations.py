"""The buffer's figures where trainers look: SB3's logger, TensorBoard, wandb.

``ReplayStats`` reads a buffer's ``stats()`` and turns it into one row of numbers named
``replay/...``: how full it is, adds and draws per second since the last row, evictions
and removals, priorities, staleness, disk. Each sink takes that row as it takes any
other scalar, so the buffer shows up beside the losses::

    stats = ReplayStats(buf)
    stats.to_tensorboard(writer, step)           # torch.utils.tensorboard.SummaryWriter
    stats.to_wandb(step)                         # the current wandb run
    model.learn(..., callback=sb3_callback())    # Stable-Baselines3's own logger

>>> import replaystore as rs, tempfile
>>> buf = rs.ReplayBuffer.create(tempfile.mkdtemp() + "/b", {"x": "int64"}, 100)
>>> _ = buf.add_batch({"x": list(range(10))})
>>> row = ReplayStats(buf).row()
>>> row["replay/size"], row["replay/capacity"], row["replay/fill"]
(10, 100, 0.1)
>>> row["replay/bytes_on_disk"] <= row["replay/bytes_at_most"]
True
"""

import time
from typing import Any, Callable, Dict, Optional

__all__ = ["ReplayStats", "handle_of", "sb3_callback"]


def handle_of(source: Any) -> Any:
    """The replaystore handle behind ``source``: a handle itself (anything with
    ``stats()``), an adapter that names its handle (``.replaystore``: the SB3 buffers), or
    an SB3 model whose ``replay_buffer`` is such an adapter."""
    for candidate in (source, getattr(source, "replaystore", None),
                      getattr(getattr(source, "replay_buffer", None), "replaystore", None)):
        if candidate is not None and callable(getattr(candidate, "stats", None)):
            return candidate
    raise TypeError(
        f"{type(source).__name__} is not a replaystore buffer: give a ReplayBuffer, Reader "
        "or Lanes, an adapter with a .replaystore handle, or an SB3 model whose "
        "replay_buffer is one (replaystore.compat.sb3)")


class ReplayStats:
    """One buffer's figures as a row of scalars; rates are per second of ``clock`` since
    the previous row (0 in the first).

    Keys (each behind ``prefix``, default ``"replay/"``): ``size``, ``capacity``,
    ``fill`` (size / capacity), ``added``, ``sampled`` and ``evicted`` (counts since the
    buffer was made), ``adds_per_s``, ``draws_per_s``, ``removed`` (items taken out before
    the ring overwrote them), ``oldest_age`` (adds since the oldest live item came in: the
    most stale item a draw can return), ``stale_updates`` (priority updates that found
    their item gone), ``bytes_on_disk`` and ``bytes_at_most``; with priorities also
    ``priority_max`` and ``priority_mean`` (of the live items' sampling weights).
    """

    def __init__(self, source: Any, prefix: str = "replay/",
                 clock: Callable[[], float] = time.monotonic):
        self.buffer = handle_of(source)
        self.prefix = prefix
        self.clock = clock
        self._last: Optional[tuple] = None

    def row(self) -> Dict[str, float]:
        """The figures now, as ``{prefix + name: number}``. For ``Lanes`` (one dict per
        lane) and a ``BufferGroup`` (one per member) the counts are summed and the
        oldest age is the largest."""
        s = _totals(self.buffer.stats())
        now = self.clock()
        adds_per_s = draws_per_s = 0.0
        if self._last is not None:
            then, added, sampled = self._last
            if now > then:
                adds_per_s = (s["added"] - added) / (now - then)
                draws_per_s = (s["sampled"] - sampled) / (now - then)
        self._last = (now, s["added"], s["sampled"])
        size, capacity = s["len"], s["capacity"]
        row = {
            "size": size, "capacity": capacity, "fill": size / capacity if capacity else 0.0,
            "added": s["added"], "sampled": s["sampled"], "evicted": s["evicted"],
            "adds_per_s": adds_per_s, "draws_per_s": draws_per_s,
            "removed": s.get("removed", 0), "oldest_age": s["tail"] - s["head"],
            "stale_updates": s.get("stale_updates", 0),
            "bytes_on_disk": s["bytes_on_disk"], "bytes_at_most": s["bytes_at_most"],
        }
        summary = getattr(self.buffer, "priority_summary", lambda: None)()
        if summary is not None:
            row["priority_max"] = summary["max_priority"]
            row["priority_mean"] = summary["total"] / size if size else 0.0
        return {self.prefix + k: v for k, v in row.items()}

    def to_logger(self, logger: Any) -> Dict[str, float]:
        """Records the row on an SB3 ``Logger`` (``logger.record``): it is written with
        the trainer's next dump, to every output the logger has (stdout, CSV,
        TensorBoard, ...). Returns the row."""
        row = self.row()
        for key, value in row.items():
            logger.record(key, value)
        return row

    def to_tensorboard(self, writer: Any, step: int) -> Dict[str, float]:
        """Adds the row to a TensorBoard ``SummaryWriter`` (``add_scalar``) at ``step``.
        Returns the row."""
        row = self.row()
        for key, value in row.items():
            writer.add_scalar(key, value, step)
        return row

    def to_wandb(self, step: Optional[int] = None, run: Any = None) -> Dict[str, float]:
        """Logs the row to ``run`` (default: the current ``wandb.run``) at ``step``; with
        no run (wandb absent or not started) only returns the row."""
        row = self.row()
        if run is None:
            try:
                import wandb
            except ImportError:
                return row
            run = wandb.run
        if run is not None:
            run.log(row, step=step)
        return row


def _totals(stats: Any) -> Dict[str, Any]:
    """One buffer's stats as they are; a lane set's list or a group's dict of per-member
    stats as one: counts summed, ``head``/``tail`` spanning the oldest item's age."""
    if isinstance(stats, dict) and "len" in stats:
        return stats
    parts = list(stats.values()) if isinstance(stats, dict) else list(stats)
    keys = ("len", "capacity", "added", "sampled", "evicted", "removed", "stale_updates",
            "bytes_on_disk", "bytes_at_most")
    total = {k: sum(p.get(k, 0) for p in parts) for k in keys}
    total["head"], total["tail"] = 0, max((p["tail"] - p["head"] for p in parts), default=0)
    return total


_callback_class = None


def sb3_callback(source: Any = None, *, prefix: str = "replay/") -> Any:
    """A Stable-Baselines3 callback that records the buffer's row on the model's logger
    at the end of every rollout, so it is written with the trainer's own figures (its
    stdout table, ``progress.csv``, TensorBoard). ``source`` defaults to the model's
    ``replay_buffer`` (a ``replaystore.compat.sb3`` buffer)."""
    global _callback_class
    if _callback_class is None:
        from stable_baselines3.common.callbacks import BaseCallback

        class ReplayStatsCallback(BaseCallback):
            """Records ``ReplayStats(...).row()`` on ``self.logger`` at each rollout's end."""

            def __init__(self, source: Any = None, prefix: str = "replay/"):
                super().__init__()
                self.source, self.prefix, self.stats = source, prefix, None

            def _on_training_start(self) -> None:
                self.stats = ReplayStats(self.source if self.source is not None else self.model,
                                         self.prefix)

            def _on_step(self) -> bool:
                return True

            def _on_rollout_end(self) -> None:
                self.stats.to_logger(self.logger)

        _callback_class = ReplayStatsCallback
    return _callback_class(source, prefix)
