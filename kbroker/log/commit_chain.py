"""Group commit's follow-on rounds, run by the worker thread that did the round.

The event loop starts an fsync round in a thread and answers the appends it covers when it
finishes. Appends that arrived meanwhile need the next round; if the loop had to start it,
the disk would idle for as long as the loop takes to notice (it is busy reading and
appending the next requests: ~1 ms a round on a 2-core machine, as long as the fsync
itself). So the thread goes on by itself: after each fdatasync it asks ``probe`` for the end
of what has been written since, and if there is more, it tells the loop the finished round's
end (``notify``, thread-safe) and fdatasyncs again. It stops when nothing new was written,
when ``probe`` says the file may have changed under it (roll, truncation, close, a leader
epoch checkpoint still being written), or after ``max_rounds`` (the loop then starts a new
round: a busy partition does not keep the worker forever). Its last round's end is returned.
"""

from __future__ import annotations

import os
from typing import Callable

MAX_ROUNDS = 32


def follow_rounds(fd: int, covered: int, probe: Callable[[int], int | None],
                  notify: Callable[[int], None], max_rounds: int = MAX_ROUNDS) -> int:
    """Worker thread. ``fd``: a duplicate of the active log file's descriptor (closed here);
    ``covered``: the end the round just finished made durable."""
    try:
        for _ in range(max_rounds):
            nxt = probe(covered)
            if nxt is None:
                break
            notify(covered)
            os.fdatasync(fd)
            covered = nxt
        return covered
    finally:
        os.close(fd)
