"""DI-engine's replay buffers, backed by replaystore (needs DI-engine: ``pip install
DI-engine``; it pins numpy<2).

Each class subclasses DI-engine's own and keeps all of its logic, so DI-engine's
middleware, pipelines and configs take them and every draw is DI-engine's, from the
same random state:

- ``DequeBuffer(size, sliced=False, *, path=None)`` with every middleware
  (``PriorityExperienceReplay``, ``use_time_check``, ``staleness_check``,
  ``clone_object``, ``padding``, ``group_sample``, ``sample_range_view``) (``_deque``);
- the legacy ``NaiveReplayBuffer``, ``AdvancedReplayBuffer`` and ``EpisodeReplayBuffer``
  with their ``EasyDict`` configs (``path=`` or ``cfg.path``), and ``create_buffer``
  (``_legacy``).

The records' data live pickled in a replaystore ring in the folder ``path`` (a
temporary one when ``None``); a folder that holds a buffer is reopened with every record
it had, after a kill -9 too. The ring grows with what is held (never dropping a record
DI-engine keeps) up to ``heap_bytes=`` bytes of value space (a keyword, or
``cfg.heap_bytes`` for the legacy buffers; default ``None``: the disk's room); a push
past it raises ``replaystore.ValueSpaceFullError`` with nothing added. Checked against
DI-engine by
``python/tests/test_ding_differential.py`` (in DI-engine's own virtualenv).

Where they differ from DI-engine, and why:

- Data read back is a copy: changing a sampled record's data (or a record's) never
  changes what is stored, as with DI-engine's ``clone_object`` middleware; ``update``
  stores new data. So ``PriorityExperienceReplay``'s ``priority_IS``, which DI-engine
  also writes into the stored data, is in the returned copy only.
- Metas live in memory, where DI-engine's middleware change them in place on every
  draw. The ring keeps the meta a record was pushed (or its data last updated) with;
  ``save_data`` keeps every current meta. After a crash, later meta changes (priority
  updates with ``data=None``, use counts, staleness) are gone, and a
  ``PriorityExperienceReplay`` ``use``d on the reopened buffer takes the metas'
  priorities (DI-engine adds 1e-5 to an updated priority in its tree only).
- ``DequeBuffer.save_data`` writes an O(1) snapshot of the folder (restored by
  ``load_data`` on a buffer opened on it), which DI-engine's ``load_data`` cannot read;
  ``load_data`` also reads DI-engine's own files. The legacy buffers' ``state_dict``
  with a folder of the caller's is the O(1) snapshot (with a temporary one, the items,
  as DI-engine's); their ``save_data`` writes DI-engine's file.
- Legacy buffers: reading ``_data[i]`` gives a copy of the stored dict; keys DI-engine
  (or its caller) sets on it are kept in an overlay per slot in memory (the buffer's
  priorities, ``use``, ``staleness``, ``IS``), changes inside its values are not.
  ``close`` keeps the items in the folder (DI-engine's empties its list).
- Cost: each record is pickled as it is pushed and unpickled when drawn, where
  DI-engine hands out the stored objects themselves: pushes and draws are slower than
  DI-engine's (docs/decisions/24-adapters-rllib-ding.md has the figures).
- Without DI-engine there is no stand-in: its middleware and records are DI-engine's.
"""

from ._deque import DequeBuffer  # noqa: F401
from ._legacy import AdvancedReplayBuffer, EpisodeReplayBuffer, NaiveReplayBuffer, create_buffer  # noqa: F401

__all__ = ["AdvancedReplayBuffer", "DequeBuffer", "EpisodeReplayBuffer", "NaiveReplayBuffer", "create_buffer"]
