"""Promise: readers in other processes sample a text buffer while its writer adds,
flushes, checkpoints (``get_state``) and restores (``set_state``) every few calls, and
never get an error nor a wrong value: a value the writer rewrote under a read is a race
the reader draws again, not damage. (Before, readers of such buffers raised dozens of
``CorruptError: chunk N holds ..., expected stamp ...`` per run, with 0 wrong values.)"""

import multiprocessing as mp
import time

import numpy as np

import replaystore as rs

#: Rows the readers read in all before the writer stops (the issue's bar: a million).
ROWS = 1_000_000
#: The longest the run may take, for a machine far slower than CI's.
SECONDS = 300


def text(i):
    """Item ``i``'s value: 23 to 63 bytes, a function of the index alone."""
    return f"v{i}-" + "x" * (20 + i % 41)


def _read(path, stop, rows, out):
    reader = rs.Reader.open(path)
    errors, wrong, first = 0, 0, None
    while not stop.is_set():
        try:
            batch = reader.sample(64)
        except rs.EmptyError:
            continue
        except rs.Error as e:
            errors += 1
            first = first or f"{type(e).__name__}: {e}"
            continue
        # A restore moves the tail back and the writer adds the same indices again: an
        # item's field "i" is its index, and its text a function of it.
        for index, i, t in zip(batch["indices"], batch["i"], batch["t"]):
            wrong += int(index) != int(i) or t != text(int(i))
        with rows.get_lock():
            rows.value += len(batch["indices"])
    out.put((errors, wrong, first))


def test_text_readers_in_other_processes_never_fail_while_the_writer_checkpoints(tmp_path):
    path = str(tmp_path / "b")
    # Row segments of 256 items, a chunk ring that laps every ~30 calls: after each
    # checkpoint the readers read old rows from segments the snapshot still links while
    # chunks, already copied, are rewritten in place.
    buf = rs.ReplayBuffer.create(path, {"i": "int64", "t": "str"}, 4096, segment_slots=256,
                                 heap_bytes=64 * 1008, evict_for_room=True)
    n = 0

    def add():
        nonlocal n
        idx = np.arange(n, n + 30)
        buf.add_batch({"i": idx, "t": [text(int(i)) for i in idx]})
        n += 30

    add()
    buf.flush()
    ctx = mp.get_context("spawn")
    stop, rows, out = ctx.Event(), ctx.Value("q", 0), ctx.Queue()
    readers = [ctx.Process(target=_read, args=(path, stop, rows, out)) for _ in range(2)]
    for r in readers:
        r.start()
    calls, checkpoints, restores, state = 0, 0, 0, None
    deadline = time.monotonic() + SECONDS
    try:
        # All three bars, not the rows alone: where the readers outrun the writer (CI's
        # two cores), a million rows come before ten checkpoints.
        while (rows.value < ROWS or checkpoints < 10 or restores < 3) \
                and time.monotonic() < deadline:
            add()
            buf.flush()
            calls += 1
            if calls % 40 == 0:
                state = buf.get_state()
                checkpoints += 1
            if calls % 100 == 60 and state is not None:
                buf.set_state(state)
                restores += 1
                n = int(buf.stats()["tail"])
    finally:
        stop.set()
        results = [out.get(timeout=60) for _ in readers]
        for r in readers:
            r.join(timeout=60)
        buf.close()
    errors = sum(e for e, _, _ in results)
    wrong = sum(w for _, w, _ in results)
    firsts = [f for _, _, f in results if f]
    print(f"{rows.value} rows read by 2 readers over {calls} adds, {checkpoints} get_state, "
          f"{restores} set_state: {errors} errors, {wrong} wrong values")
    assert (errors, wrong) == (0, 0), firsts
    assert rows.value >= ROWS, f"only {rows.value} rows in {SECONDS} s"
    assert checkpoints >= 10 and restores >= 3
