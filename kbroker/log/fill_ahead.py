"""Space made ahead of the active segment's appends by a worker thread, so that an append on
the event loop writes into a file that already has room for it.

An append into a hole of its file reserves a block for delayed allocation, under the inode's
block-map lock (ext4's ``i_data_sem``, taken for writing in ``ext4_da_get_block_prep``).
The kernel's write-back holds that lock while it allocates the file's earlier blocks, and
that allocation waits for the filesystem's metadata I/O, which another process's bulk
creations and syncs keep busy. Appends run on the event loop, so one that waits there holds
every client: a plain loop of 16 KiB appends, beside another process creating 9,000
partition directories on the same ext4, saw single appends take 9.6-19 ms, asleep on that
lock (traced in session 28); with blocks allocated ahead, 0.1-4.4 ms
(``benchmarks/results/stalls.md``, sessions 27-28). Two kinds of space, by the log's flush
policy:

- **Allocated** (every log): ``fallocate`` with ``FALLOC_FL_KEEP_SIZE`` allocates blocks from
  64 KiB up to 8 MiB past the log's end (a quarter of what the segment holds), and the next
  allocation starts when half of one is left. The file's length stays the log's, so readers,
  tools and recovery see nothing of it; appends then grow the length into blocks already
  there, which in the measurement above does not wait. (Setting the length alone, as Kafka's
  ``preallocate`` does, left the appends' waits as they were.) ``fallocate`` never changes
  bytes already written, so it needs no coordination with the appends. Blocks past the end
  stay allocated until the file is truncated, so a roll or close truncates the file to its
  length, which releases them.
- **Zeros** (logs that fsync every append, flush.messages=1): an fdatasync after an append
  that grew the file also commits the new size and the blocks allocated for it. Over blocks
  already written it only writes the data: a 16 KiB append + fdatasync took 113 us instead
  of 166-215, 1 MiB 0.38-0.49 ms instead of 0.69-0.72 (``benchmarks/results/fsync.md``).
  Group commit puts that fdatasync in every acknowledgement's path, so these logs get zeros
  written ahead and fsynced, off that path; appends then overwrite zeros. Each job writes as
  much as the file holds already, from 256 KiB up to 8 MiB, into blocks it allocates first.
  Each 1 MiB step is fsynced as soon as it is written: an append's fdatasync writes out every
  dirty page of the file, the zeros ahead included.

With zeros the file is longer than the log until a roll or close trims it (LogSegment);
recovery after a crash stops at the zeros as it does for a preallocated file (a zero-filled
tail is not damage).

The zero filler and the appends never write the same bytes: the filler writes in steps under
``lock``, each from at least ``claimed`` (the end of what the log has written or is about to
write); an append that reaches into the range being filled raises ``claimed`` under the same
lock before it writes, so it waits at most one step (~0.1-0.3 ms for 1 MiB).

One state object per active file; the segment replaces it after a truncation and stops it
before a trim, close or delete. Loop-owned except ``claimed`` and ``stopped`` (under ``lock``
while a job runs). Jobs run on one shared thread; the loop learns a job finished at its next
append (``Future.done()``), so a job costs the loop no wake-up.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import errno
import logging
import os
import threading

log = logging.getLogger(__name__)

CHUNK = 8 << 20     # the largest job
MIN_CHUNK = 256 << 10   # the first job of zeros: a job is as large as the log written so far,
                        # so a quiet partition's file stays near its size (thousands of them)
ALLOCATE_MIN_CHUNK = 64 << 10   # the first allocation: 10,000 quiet partitions hold 640 MB ahead
_KEEP_SIZE = 1      # FALLOC_FL_KEEP_SIZE
STEP = 1 << 20      # one pwrite (what an append reaching into a running job may wait for)
ZEROS = True        # the broker's log.zero.fill.ahead; tests that count a log's fsyncs turn it off
ALLOCATE = True     # the broker's log.allocate.ahead

_zeros = b""         # a step's worth, made on first use (a broker without such partitions pays nothing)
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    if _executor is None:   # (the event loop thread only)
        _executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbroker-fill-ahead")
    return _executor


def _load_fallocate():
    """glibc's fallocate(2) wrapper, or None. Not ``os.posix_fallocate``: where the
    filesystem lacks fallocate, glibc emulates it by writing a byte into every block, which
    could land on bytes an append wrote meanwhile."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate   # (CDLL: the GIL is released in it)
    except (AttributeError, OSError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fn.restype = ctypes.c_int
    return fn


_fallocate = _load_fallocate()
_refusals_logged: set[int] = set()   # errnos already reported


class FillAhead:
    __slots__ = ("zeros", "lock", "claimed", "filled", "stopped", "_job", "_job_start")

    def __init__(self, size: int, zeros: bool) -> None:
        self.zeros = zeros      # zeros written and fsynced; else blocks allocated
        self.lock = threading.Lock()
        self.claimed = size     # [0, claimed): the log's bytes
        self.filled = size      # [0, filled): in the file as zeros (fsynced) or allocated blocks
        self.stopped = False
        self._job: concurrent.futures.Future | None = None
        self._job_start = 0

    def claim(self, end: int) -> None:
        """Event loop, before the log writes up to ``end``."""
        job = self._job
        if self.zeros and job is not None and end > self._job_start and not job.done():
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
                self.stopped = True
                _report(err, self.zeros)
                return
            self.filled = max(self.filled, job.result())
        start = max(self.filled, self.claimed)
        if self.zeros:
            chunk = min(CHUNK, max(MIN_CHUNK, self.claimed))
        else:
            chunk = min(CHUNK, max(ALLOCATE_MIN_CHUNK, self.claimed // 4))
        if self.stopped or start - self.claimed >= chunk // 2 or start >= limit:
            return
        end = min(start + chunk, limit)
        dup = os.dup(fd)
        try:
            self._job = _pool().submit(self._fill if self.zeros else self._allocate, dup, start, end)
        except RuntimeError:   # the interpreter is exiting: no new threads
            os.close(dup)
            self.stopped = True
            return
        self._job_start = start

    def stop(self) -> None:
        """Event loop: no more zeros or allocations from now on (before the file is
        trimmed, truncated, closed or deleted). Waits for a step or allocation in progress."""
        with self.lock:
            self.stopped = True

    def retire(self) -> None:
        """Event loop, at a roll: no more zeros or allocations, without waiting for one in
        progress (``truncate_later`` queues the trim behind it on the same thread)."""
        self.stopped = True

    def _fill(self, fd: int, start: int, end: int) -> int:
        """Worker thread: zeros over [start, end) where the log has not claimed it, each
        step followed by an fdatasync (the size and the blocks become durable before
        appends rely on them). Returns the end filled (``start`` if stopped before any
        step)."""
        pos = start
        try:
            # the job's blocks first, outside the lock: a step that allocated its own held
            # the lock (and an append that reached into it) while the allocator waited for
            # the disk.
            # (Stopped meanwhile, this leaves at most one job's blocks past the end until
            # the file is truncated or deleted.)
            if not self.stopped and _fallocate is not None:
                _fallocate(fd, _KEEP_SIZE, start, end - start)   # (refused: the steps allocate)
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

    def _allocate(self, fd: int, start: int, end: int) -> int:
        """Worker thread: blocks allocated for [start, end), the file's length unchanged
        (bytes already written stay as they are). Under ``lock``, so that once ``stop``
        returns no allocation adds blocks after the segment released them. Returns the end
        allocated (``start`` if stopped first)."""
        try:
            with self.lock:
                if self.stopped:
                    return start
                if _fallocate is None:
                    raise OSError(errno.EOPNOTSUPP, "fallocate is not available here")
                if _fallocate(fd, _KEEP_SIZE, start, end - start) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"fallocate: {os.strerror(e)}")
            return end
        finally:
            os.close(fd)


def truncate_later(fd: int, size: int) -> concurrent.futures.Future | None:
    """Event loop: the file of ``fd`` (duplicated) truncated to ``size`` on the fill-ahead
    thread, after every job queued before it. A truncation that releases blocks waits for
    the device where the filesystem is mounted with ``discard`` (2-6 ms a roll of 8 MiB
    segments on this machine's disk), so a roll does not do it on the loop. None: done
    here (the interpreter is exiting)."""
    dup = os.dup(fd)
    try:
        return _pool().submit(_truncate, dup, size)
    except RuntimeError:   # no new threads at exit
        _truncate(dup, size)
        return None


def _truncate(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError as e:   # (the blocks stay allocated until the file is deleted)
        log.warning("trimming a rolled segment failed: %s", e)
    finally:
        os.close(fd)


def _report(err: BaseException, zeros: bool) -> None:
    """A job failed: this file gets no more (its appends grow it themselves). A filesystem
    without fallocate is named once per broker, anything else every time."""
    if not zeros and isinstance(err, OSError) and err.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
        if err.errno in _refusals_logged:
            return
        _refusals_logged.add(err.errno)
        log.info("no space allocated ahead of appends on this filesystem (turn off "
                 "log.allocate.ahead to skip trying): %s", err)
        return
    what = "writing zeros" if zeros else "allocating space"
    log.warning("%s ahead of the log failed, not retried for this file: %s", what, err)


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
