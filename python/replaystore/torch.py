"""PyTorch on top of the buffer: draws as tensors, and a ``DataLoader`` over a buffer
another process fills. ``import replaystore.torch`` needs torch; ``replaystore`` does not.

- ``as_tensors(batch, device=None, pin_memory=False)``: every array of a draw as a
  tensor over the same memory (``torch.from_numpy``: no copy), nested dicts kept;
  ``indices`` as int64 (PyTorch does no arithmetic or indexing with uint64; a buffer's
  indices stay below 2**63, so the view is exact). With ``pin_memory`` the arrays are
  copied once into page-locked memory, and with a CUDA ``device`` moved there without
  blocking (``non_blocking=True``), so the copy overlaps the training step.
  ``indices`` stay on the CPU: ``update_priorities`` takes them (and GPU ``td_errors``)
  back as they are.
- ``ReplayDataset(path, batch_size, ...)``: an ``IterableDataset`` whose every worker
  opens its own ``Reader`` (no lock, no copy of the buffer) and yields batches forever:
  ``DataLoader(ReplayDataset(path, 256), batch_size=None, num_workers=2,
  pin_memory=True)``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Sequence, Union

import numpy as np
import torch

from ._native import Reader

__all__ = ["as_tensors", "ReplayDataset"]


def _tensor(value: Any, name: str, device: Optional[torch.device], pin: bool) -> Any:
    if isinstance(value, dict):
        return {k: _tensor(v, f"{name}.{k}", device, pin) for k, v in value.items()}
    if not isinstance(value, np.ndarray):
        return value  # text values (lists of str or bytes) stay as they are
    if name == "indices" or name.endswith("_indices"):
        return torch.from_numpy(value.view(np.int64))
    if value.dtype == np.uint64:
        value = value.view(np.int64) if (value < 2**63).all() else value.astype(np.float64)
    t = torch.from_numpy(value)
    if pin:
        t = t.pin_memory()
    if device is not None:
        t = t.to(device, non_blocking=pin)
    return t


def as_tensors(
    batch: Dict[str, Any],
    device: Union[str, torch.device, None] = None,
    pin_memory: bool = False,
) -> Dict[str, Any]:
    """A draw's arrays as tensors over the same memory (see the module)."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cpu":
        device = None
    return {k: _tensor(v, k, device, pin_memory) for k, v in batch.items()}


class ReplayDataset(torch.utils.data.IterableDataset):
    """Batches drawn forever from the buffer in ``path`` by each worker's own
    ``Reader``: ``sample(batch_size, **kwargs)``, or with ``obs`` set
    ``sample_transitions(batch_size, obs, **kwargs)`` (n-step, stacking, HER), as
    tensors (``as_tensors``: ``int64`` indices). Use ``batch_size=None`` in the
    ``DataLoader``: each item is already a batch. A worker's Reader reseeds from the
    worker's seed, so workers never draw the same batches."""

    def __init__(
        self,
        path: str,
        batch_size: int,
        *,
        obs: Union[str, Sequence[str], None] = None,
        nested: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.path, self.batch_size, self.obs = str(path), int(batch_size), obs
        self.nested, self.kwargs = nested, kwargs

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        reader = Reader.open(self.path)
        kwargs = dict(self.kwargs, nested=self.nested)
        seed = kwargs.pop("seed", None)
        info = torch.utils.data.get_worker_info()
        if seed is None and info is not None:
            seed = info.seed % 2**63  # the DataLoader's seed for this worker and epoch
        try:
            while True:
                kw = dict(kwargs) if seed is None else dict(kwargs, seed=seed)
                seed = None  # the first draw reseeds; the rest go on from there
                if self.obs is None:
                    batch = reader.sample(self.batch_size, **kw)
                else:
                    batch = reader.sample_transitions(self.batch_size, self.obs, **kw)
                yield as_tensors(batch)
        finally:
            reader.close()
