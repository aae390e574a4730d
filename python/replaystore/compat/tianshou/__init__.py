"""Tianshou's replay buffers, backed by replaystore.

With Tianshou installed, each class subclasses Tianshou's own and keeps all of its logic
(positions, ``add``'s ``(ptr, ep_rew, ep_len, ep_idx)``, ``prev``/``next``, stacking,
``sample`` from the buffer's own ``RandomState``, ``Batch`` in and out), so a
``Collector`` and Tianshou's algorithms take them; the transitions live in replaystore
rings in the folder ``path`` (one per sub-buffer) and a reopened folder resumes with them.
Checked against Tianshou by ``python/tests/test_tianshou_differential.py``.

Without Tianshou, the same names are stand-ins on plain dicts of arrays
(``replaystore.compat.tianshou._plain``).

Where the Tianshou-backed classes differ, and why:

- A transition, once stored, is not rewritten: writing at a position that is not its
  sub-buffer's next raises ``ValueError`` (Tianshou's own writes always are the next;
  ``set_batch``, ``update`` into a non-empty buffer and ``set_array_at_key`` are where a
  caller could ask otherwise).
- Keys other than ``obs``, ``obs_next``, ``act`` and the four flags (``info``,
  ``policy``, ...) are pickled per transition: keys that appear mid-run are kept without
  reallocating, and read back as Tianshou's column would hold them. Each sub-buffer's
  pickled keys may take up to ``heap_bytes=`` (a keyword of every class; default 16 KiB
  per transition and at least 256 MiB, reserved on disk only as they arrive); an add
  past it raises ``replaystore.ValueSpaceFullError`` with nothing added and Tianshou's
  counters as they were, where Tianshou would keep it in memory: no transition is
  dropped before the buffer holds its size.
- A column (``buf.act``, ``buf.info.env_id``) is every position, as Tianshou's storage
  is: a sub-buffer's rows from before its reset read as they were until rewritten (kept
  in memory for sub-buffers of up to 65,536 positions; larger ones read zeros there, where
  no draw reaches). A write into a column (``buf.info.env_id[0] = 3``) is read by every
  view of that position until a transition is written there; it lives in memory (and in
  a pickle or HDF5 file), not in the rings, so a reopened folder reads what was added.
- The prioritized buffers keep their priorities in Tianshou's segment tree in memory, as
  Tianshou does: a reopened folder starts every transition at the largest priority (a
  pickle or an HDF5 file keeps them, as Tianshou's does).
- ``set_array_at_key`` (a Collector's episode hooks) adds a column as a mapped NumPy file
  beside the rings (``extra-KEY.npy``); it refuses keys the rings hold.
- Pickling a buffer with a folder of the caller's (``path=``) pickles the folder's name,
  an O(1) snapshot of each ring, Tianshou's counters (and priority tree) and the
  in-memory flag columns (11 bytes a transition); unpickling restores them in another
  process (in the same one, after the buffer is closed: a folder has one writer) without
  reading the rings. Opening a folder (``path=`` again) rebuilds the flag columns by
  reading every stored transition: O(n). A temporary folder's buffer
  pickles its transitions. ``save_hdf5`` writes Tianshou's own file (Tianshou's
  ``load_hdf5`` reads it), ``load_hdf5`` reads Tianshou's (``folder=`` says where).
- A sub-buffer Tianshou resets (``CachedReplayBuffer`` does after each episode it moves
  to the main ring) restarts its ring.
- ``HERReplayBuffer``, ``HERVectorReplayBuffer``: Tianshou relabels by rewriting its storage in place during
  ``sample`` and restoring it at the next call; here the relabelled goals and rewards
  are an in-memory overlay over the rings, lifted then (the rings keep what was added).
"""

try:
    import tianshou  # noqa: F401
except ImportError:
    from ._plain import PrioritizedReplayBuffer, ReplayBuffer, VectorReplayBuffer  # noqa: F401

    __all__ = ["PrioritizedReplayBuffer", "ReplayBuffer", "VectorReplayBuffer"]
else:
    from tianshou.data import Batch  # noqa: F401

    from ._buffers import (  # noqa: F401
        CachedReplayBuffer,
        HERReplayBuffer,
        HERVectorReplayBuffer,
        PrioritizedReplayBuffer,
        PrioritizedVectorReplayBuffer,
        ReplayBuffer,
        VectorReplayBuffer,
    )

    __all__ = ["Batch", "CachedReplayBuffer", "HERReplayBuffer", "HERVectorReplayBuffer", "PrioritizedReplayBuffer", "PrioritizedVectorReplayBuffer", "ReplayBuffer",
               "VectorReplayBuffer"]
