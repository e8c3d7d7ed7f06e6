"""BackgroundIO: one worker thread for the log layer's blocking fsyncs and checkpoint writes,
so the event loop never waits on the disk for them (Kafka runs the same work on its
scheduler threads: the flush of a rolled segment, ``PartitionMetadataFile.maybeFlush``,
checkpoint files).

Rules that keep the durability guarantees:

- One thread, jobs run in submission order. A caller that advances a recovery point after
  awaiting its own job knows every earlier job (a new partition directory's fsync, a
  leader-epoch checkpoint, a producer-state snapshot's fsync) has completed too.
- Checkpoint contents are snapshotted on the event loop; the thread writes them atomically
  (tmp, fsync, rename, dir fsync). Pending writes of one file coalesce: a queued job writes
  the newest text, so each file has at most one writer at a time.
- A job names its directory by path and inode (taken on the loop when it is queued) and
  opens it when it runs: if the partition directory was renamed for deletion, removed, or
  created again meanwhile, the late write is dropped (the partition it was for is gone), and
  never lands in a new directory of the same name. Queued jobs hold no descriptor: creating
  10,000 partitions queued 20,000 checkpoint writes, and holding a directory descriptor for
  each ran the process out of descriptors.
- Segment data is fsynced through ``os.dup`` copies of the descriptors, so retention closing
  the segment meanwhile cannot pull the descriptor from under the fsync.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class BackgroundIO:
    def __init__(self, name: str = "log-io") -> None:
        self._ex = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._texts: dict[tuple, str] = {}   # (dir, name, dir inode) -> newest text
        self._queued: dict[tuple, concurrent.futures.Future] = {}
        self._dir_syncs: dict[str, concurrent.futures.Future] = {}
        self.jobs_run = 0
        self.closed = False

    # ------------------------------------------------------------------ generic
    def submit(self, fn: Callable, *args) -> concurrent.futures.Future:
        return self._ex.submit(self._run, fn, *args)

    def _run(self, fn, *args):
        self.jobs_run += 1
        return fn(*args)

    def drain(self) -> None:
        """Block until every job queued so far has run (shutdown, tests)."""
        if not self.closed:
            self._ex.submit(lambda: None).result()

    def close(self) -> None:
        """Run what is queued, then stop the thread."""
        if not self.closed:
            self.closed = True
            self._ex.shutdown(wait=True)

    # ------------------------------------------------------------------ segments
    def fsync_and_close(self, dups: list[int]) -> concurrent.futures.Future:
        """fsync and close ``dups``: duplicates the caller took (LogSegment.dup_fds). The
        future's result is the time the fsyncs took, ms."""
        return self.submit(_fsync_and_close, dups)

    # ------------------------------------------------------------------ files
    def write_file(self, directory: str, name: str, text: str | Callable[[], str]) -> concurrent.futures.Future | None:
        """Atomically replace ``directory/name`` with ``text`` (fsynced) in the thread.
        ``text`` may be a function that renders it, called in the thread (an offsets
        checkpoint of 10,000 partitions takes ~4 ms to sort and format). None if the
        directory is gone already."""
        try:  # the inode tells a re-created directory of the same name from the old one
            key = (directory, name, os.stat(directory).st_ino)
        except FileNotFoundError:
            return None
        with self._lock:
            fut = self._queued.get(key)
            if fut is not None and not fut.running() and not fut.done():
                self._texts[key] = text   # the queued job writes the newest text
                return fut
            self._texts[key] = text
            fut = self.submit(self._write_job, key)
            self._queued[key] = fut
            return fut

    def _write_job(self, key) -> None:
        with self._lock:
            text = self._texts.pop(key, None)
            if self._queued.get(key) is not None and self._queued[key].running():
                del self._queued[key]
            batch = []
            if text is not None and key[1] in BATCHED_FILES and _syncfs is not None:
                # Per-partition files queued behind this one are written now too, with two
                # file-system syncs for the lot instead of three fsyncs each: creating
                # 10,000 partitions queued 20,000 of them (minutes of fsyncs, and every
                # flush.messages fsync waited behind them). Writing them early is safe: they
                # never claim that other data is durable. Their own jobs find nothing to do.
                for k in list(self._texts):
                    if k[1] in BATCHED_FILES and len(batch) < _BATCH_MAX:
                        batch.append((k, self._texts.pop(k)))
        if text is None:
            return
        text = _rendered(text)   # (outside the lock: the loop queues texts under it)
        if batch:
            _write_batch([(key, text)] + [(k, _rendered(t)) for k, t in batch])
            return
        dfd = _open_dir(key[0], key[2])
        if dfd is None:
            return   # the directory was deleted (or replaced) meanwhile
        try:
            write_atomic_at(dfd, key[1], text)
        except FileNotFoundError:
            pass  # the directory was deleted meanwhile
        except OSError as e:  # pragma: no cover - disk trouble
            log.error("writing %s/%s failed: %s", key[0], key[1], e)
            raise
        finally:
            os.close(dfd)

    def fsync_file(self, directory: str, name: str) -> concurrent.futures.Future | None:
        """fsync ``directory/name`` and the directory (a file written without fsync)."""
        try:
            ino = os.stat(directory).st_ino
        except FileNotFoundError:
            return None
        return self.submit(_fsync_file_in, directory, ino, name)

    def fsync_dir(self, directory: str) -> concurrent.futures.Future | None:
        """fsync a directory (new entries in it); requests queued together share one fsync."""
        with self._lock:
            fut = self._dir_syncs.get(directory)
            if fut is not None and not fut.running() and not fut.done():
                return fut
            try:
                dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                return None
            fut = self.submit(self._dir_job, directory, dfd)
            self._dir_syncs[directory] = fut
            return fut

    def _dir_job(self, directory: str, dfd: int) -> None:
        with self._lock:
            if self._dir_syncs.get(directory) is not None and self._dir_syncs[directory].running():
                del self._dir_syncs[directory]
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _fsync_and_close(fds: list[int]) -> float:
    """Returns the milliseconds the fsyncs took (kbroker.log.flush_stats)."""
    started = time.monotonic_ns()
    err = None
    for fd in fds:
        try:
            os.fsync(fd)
        except OSError as e:  # pragma: no cover - disk trouble
            err = err or e
        finally:
            os.close(fd)
    if err is not None:  # pragma: no cover
        raise err
    return (time.monotonic_ns() - started) / 1e6


# files whose early write is harmless (see _write_job); recovery-point and log-start
# checkpoints are not: they claim the data they name is on disk, so they keep their turn
BATCHED_FILES = frozenset({"leader-epoch-checkpoint", "partition.metadata"})
_BATCH_MAX = 2048


def _load_syncfs():
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    fn.argtypes = [ctypes.c_int]

    def syncfs(fd: int) -> None:
        if fn(fd) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    return syncfs


_syncfs = _load_syncfs()


def _write_batch(items) -> None:
    """Atomic replacement of many small files: every tmp file written, one syncfs per file
    system (their data on disk), every rename, one syncfs again (the renames on disk)."""
    written = []
    devices: dict[int, int] = {}   # st_dev -> a directory descriptor on it, for syncfs
    try:
        for item in items:
            (directory, name, ino), text = item
            dfd = _open_dir(directory, ino)
            if dfd is None:
                continue   # deleted (or replaced) meanwhile: the write is moot
            try:
                fd = os.open(name + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dfd)
                try:
                    view = memoryview(text.encode("utf-8"))
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
            except FileNotFoundError:
                os.close(dfd)
                continue
            dev = os.fstat(dfd).st_dev
            if dev in devices:
                os.close(dfd)
            else:
                devices[dev] = dfd
            written.append(item)
        for dfd in devices.values():
            _syncfs(dfd)
        for (directory, name, ino), _text in written:
            dfd = _open_dir(directory, ino)
            if dfd is None:
                continue
            try:
                os.replace(name + ".tmp", name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except FileNotFoundError:
                pass
            finally:
                os.close(dfd)
        for dfd in devices.values():
            _syncfs(dfd)
    finally:
        for dfd in devices.values():
            os.close(dfd)


def _open_dir(directory: str, ino: int) -> int | None:
    """A descriptor of ``directory`` if it is still the one with inode ``ino``."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    if os.fstat(dfd).st_ino != ino:
        os.close(dfd)
        return None
    return dfd


def _fsync_file_in(directory: str, ino: int, name: str) -> None:
    dfd = _open_dir(directory, ino)
    if dfd is None:
        return
    try:
        try:
            fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
        except FileNotFoundError:
            return  # deleted meanwhile (a snapshot below the log start, a deleted partition)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_atomic_at(dfd: int, name: str, text: str) -> None:
    """tmp + fsync + rename + dir fsync, relative to the directory descriptor ``dfd``."""
    tmp = name + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dfd)
    try:
        view = memoryview(text.encode("utf-8"))
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    os.fsync(dfd)


def _rendered(text: str | Callable[[], str]) -> str:
    return text() if callable(text) else text
