"""Zeros written ahead of the active segment's appends, for partitions that fsync every append
(flush.messages=1).

An fdatasync after an append that grew the file also commits the new size and the blocks the
filesystem allocated for it (a journal commit on ext4). Over blocks already allocated and
written it only writes the data. On this project's test machine (ext4 on virtio): a 16 KiB
append + fdatasync took 113 us instead of 166-215, 1 MiB 0.38-0.49 ms instead of 0.69-0.72,
with less kernel CPU (`benchmarks/results/fsync.md`). Group commit puts that fdatasync in
every acknowledgement's path, so a worker thread writes zeros ahead of the log's end and
fsyncs them, off that path; appends then overwrite zeros. Each job writes as much as the file
holds already, from 256 KiB up to 8 MiB, and the next starts when half of it is left. Each
1 MiB step is fsynced as soon as it is written: an append's fdatasync writes out every dirty
page of the file, the zeros ahead included.
(Kafka's ``preallocate`` only sets the file's length: the blocks stay unallocated, which
gains nothing here.)

The file is longer than the log until a roll or close trims it (LogSegment); recovery after a
crash stops at the zeros as it does for a preallocated file (a zero-filled tail is not damage).

The filler and the appends never write the same bytes: the filler writes in steps under
``lock``, each from at least ``claimed`` (the end of what the log has written or is about to
write); an append that reaches into the range being filled raises ``claimed`` under the same
lock before it writes, so it waits at most one step (~0.1-0.3 ms for 1 MiB).

One state object per active file; the segment replaces it after a truncation and stops it
before a trim, close or delete. Loop-owned except ``claimed`` and ``stopped`` (under ``lock``
while a job runs). Jobs run on one shared thread; the loop learns a job finished at its next
append (``Future.done()``), so a fill costs the loop no wake-up.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading

log = logging.getLogger(__name__)

CHUNK = 8 << 20     # the largest job
MIN_CHUNK = 256 << 10   # the first job of a file: a job is as large as the log written so far,
                        # so a quiet partition's file stays near its size (thousands of them)
STEP = 1 << 20      # one pwrite (what an append reaching into a running job may wait for)
ENABLED = True      # the broker's log.zero.fill.ahead; tests that count a log's fsyncs turn it off

_zeros = b""         # a step's worth, made on first use (a broker without such partitions pays nothing)
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    if _executor is None:   # (the event loop thread only)
        _executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbroker-zero-fill")
    return _executor


class ZeroFill:
    __slots__ = ("lock", "claimed", "filled", "stopped", "_job", "_job_start")

    def __init__(self, size: int) -> None:
        self.lock = threading.Lock()
        self.claimed = size     # [0, claimed): the log's bytes
        self.filled = size      # [0, filled): in the file as written blocks, fsynced
        self.stopped = False
        self._job: concurrent.futures.Future | None = None
        self._job_start = 0

    def claim(self, end: int) -> None:
        """Event loop, before the log writes up to ``end``."""
        job = self._job
        if job is not None and end > self._job_start and not job.done():
            with self.lock:
                self.claimed = end
        else:
            self.claimed = end

    def ahead(self, limit: int, fd: int) -> None:
        """Event loop, after an append: start a job when less than half a job is filled
        ahead of the log and the file (``fd``, duplicated for the job) has room below
        ``limit``."""
        job = self._job
        if job is not None:
            if not job.done():
                return
            self._job = None
            err = job.exception()
            if err is not None:   # (a full disk, say: the appends themselves report it)
                log.warning("writing zeros ahead of the log failed, not retried for this file: %s", err)
                self.stopped = True
                return
            self.filled = max(self.filled, job.result())
        start = max(self.filled, self.claimed)
        chunk = min(CHUNK, max(MIN_CHUNK, self.claimed))
        if self.stopped or start - self.claimed >= chunk // 2 or start >= limit:
            return
        end = min(start + chunk, limit)
        dup = os.dup(fd)
        try:
            self._job = _pool().submit(self._fill, dup, start, end)
        except RuntimeError:   # the interpreter is exiting: no new threads
            os.close(dup)
            self.stopped = True
            return
        self._job_start = start

    def stop(self) -> None:
        """Event loop: no more zeros from now on (before the file is trimmed, truncated,
        closed or deleted). Waits for a step in progress."""
        with self.lock:
            self.stopped = True

    def _fill(self, fd: int, start: int, end: int) -> int:
        """Worker thread: zeros over [start, end) where the log has not claimed it, each
        step followed by an fdatasync (the size and the blocks become durable before
        appends rely on them). Returns the end filled (``start`` if stopped before any
        step)."""
        pos = start
        try:
            while pos < end:
                nxt = min(pos + STEP, end)
                with self.lock:
                    if self.stopped:
                        break
                    at = max(pos, self.claimed)
                    wrote = at < nxt
                    if wrote:
                        _pwrite_zeros(fd, at, nxt - at)
                if wrote:   # (outside the lock: appends reaching here do not wait for it)
                    # at once, not at the job's end: an append's fdatasync writes out every
                    # dirty page of the file, and zeros left dirty for a whole 8 MiB job
                    # came with it (1 MiB appends: p90 4.6 ms instead of 0.9)
                    os.fdatasync(fd)
                pos = nxt
            return pos
        finally:
            os.close(fd)


def _pwrite_zeros(fd: int, position: int, size: int) -> None:
    global _zeros
    if len(_zeros) < size:   # (the filler thread only)
        _zeros = bytes(size)
    view = memoryview(_zeros)[:size]
    while view:
        n = os.pwrite(fd, view, position)
        if n <= 0:
            raise OSError("short write of zeros")
        view, position = view[n:], position + n
