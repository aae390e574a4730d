"""cpprb's ``Nstep``: transitions are stored already summed over ``size`` steps.

A transition reaches the buffer once the ``size - 1`` after it have been added (or the
episode ends): its reward fields become ``sum_k gamma^k r_{t+k}``, each term cut off
after the first ``done`` in the window; its ``done`` cpprb's: the sum of the dones of
the window's first ``size - 1`` steps when the window filled (so a window whose last
step ends the episode is not done, as cpprb's own tests assert), of all of them when
the episode's end flushed it; its ``next`` fields those of the window's last step. The ``size - 1`` waiting transitions
are held in memory, as cpprb holds them: a crash loses them (they were never stored),
and they are saved in ``get_state``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from ._layout import names


class NstepQueue:
    """The transitions waiting for their ``size - 1`` successors."""

    def __init__(self, nstep: Dict[str, Any]) -> None:
        if "size" not in nstep:
            raise KeyError("Nstep needs 'size', the number of steps summed")
        self.size = int(nstep["size"])
        if self.size < 1:
            raise ValueError(f"Nstep['size'] must be at least 1, got {self.size}")
        # cpprb keeps gamma as a C float; the same rounding gives the same sums.
        self.gamma = np.float32(nstep.get("gamma", 0.99))
        self.rew = names(nstep.get("rew"))
        self.next = names(nstep.get("next"))
        self.waiting: Optional[Dict[str, np.ndarray]] = None

    def config(self) -> Dict[str, Any]:
        return {"size": self.size, "gamma": float(self.gamma), "rew": self.rew, "next": self.next}

    def __len__(self) -> int:
        return 0 if self.waiting is None else len(self.waiting["done"])

    def push(self, batch: Dict[str, np.ndarray]) -> Optional[Dict[str, np.ndarray]]:
        """Takes ``batch`` (with ``done``); returns the transitions whose windows are now
        complete, summed, or ``None``."""
        if "done" not in batch:
            raise KeyError("done: Nstep needs a 'done' field to cut the sums at episode ends")
        rows = batch if self.waiting is None else {
            k: np.concatenate([self.waiting[k], v]) for k, v in batch.items()}
        ready = len(rows["done"]) - (self.size - 1)
        if ready <= 0:
            self.waiting = rows
            return None
        self.waiting = {k: v[ready:] for k, v in rows.items()}
        return self._summed(rows, ready, complete=True)

    def flush(self) -> Optional[Dict[str, np.ndarray]]:
        """The waiting transitions, summed over what the episode had left."""
        if not len(self):
            self.waiting = None
            return None
        rows, self.waiting = self.waiting, None
        return self._summed(rows, len(rows["done"]), complete=False)

    def _summed(self, rows: Dict[str, np.ndarray], count: int, complete: bool) -> Dict[str, np.ndarray]:
        total = len(rows["done"])
        out = {k: v[:count].copy() for k, v in rows.items()}
        done = rows["done"].reshape(total, -1)[:, 0].astype(np.float32)
        first = np.arange(count)
        live = np.ones(count, np.float32)  # prod over the window so far of gamma (1 - done)
        sums = {k: rows[k][:count].astype(np.float32) for k in self.rew}
        dones = done[:count].copy()
        for k in range(1, self.size):
            # Row i's window reaches i + k only if i + k exists (a flush has fewer).
            reach = first + k < total
            if not reach.any():
                break
            at = np.minimum(first + k, total - 1)
            live = np.where(reach, live * self.gamma * (1.0 - done[at - 1]), 0.0).astype(np.float32)
            for name in self.rew:
                r = rows[name][at].astype(np.float32)
                sums[name] += live.reshape((count,) + (1,) * (r.ndim - 1)) * r
            if k < self.size - 1 or not complete:
                dones += np.where(reach, done[at], 0.0).astype(np.float32)
        for name in self.rew:
            out[name] = sums[name].astype(rows[name].dtype)
        out["done"] = dones.reshape(rows["done"][:count].shape).astype(rows["done"].dtype)
        # The window's last step gives the next fields: size - 1 on, or the episode's end.
        last = np.minimum(first + self.size - 1, total - 1) if complete else np.full(count, total - 1)
        for name in self.next:
            out[name] = rows[name][last].copy()
        return out
