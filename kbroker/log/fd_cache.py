"""A bounded cache of open segment and index files, so 10,000 partitions fit in the
process's descriptor limit.

Kafka keeps every segment's log open and memory-maps every index; it asks for a descriptor
limit of 100,000+. Here only the active segment's log stays open (appends, fetches of the
tail); every other segment log and every index file is a ``FileHandle`` that opens on first
use and is closed again when it falls off the end of this LRU. Re-opening is by path, so a
handle whose file is about to be renamed or unlinked is pinned first (``pin``): its
descriptor then follows the file until the handle's last reference goes.

Threads: only the thread that owns the cache (the event loop's, which is the main thread)
tracks and evicts. A handle opened in another thread (the admin thread creating a
partition) stays open and untracked until the owner touches it, and a log handed to another
thread (closing a deleted partition) is pinned first. Code that keeps a descriptor number
across a point where other handles may be touched (a generator that yields, a queued
sendfile) asks the handle again each time instead.
"""

from __future__ import annotations

import os
import queue
import resource
import threading
from collections import OrderedDict

from .errors import KafkaStorageError

MIN_CAPACITY = 16
DEFAULT_CAPACITY = 4096
MAX_CAPACITY = 16384
TABLE_RESERVE_MAX = 1 << 16   # descriptor table slots reserved at start-up (8 bytes each, in the kernel)


class DescriptorCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(MIN_CAPACITY, capacity)
        self.owner = threading.main_thread().ident
        self._lru: OrderedDict[FileHandle, None] = OrderedDict()
        self.opens = 0       # descriptors opened (first opens and re-opens)
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, h: "FileHandle") -> None:
        if threading.get_ident() != self.owner:
            return
        lru = self._lru
        if h in lru:
            lru.move_to_end(h)
            return
        lru[h] = None
        while len(lru) > self.capacity:
            old, _ = lru.popitem(last=False)
            old._evict()
            self.evictions += 1

    def forget(self, h: "FileHandle") -> None:
        if threading.get_ident() == self.owner:
            self._lru.pop(h, None)


DESCRIPTORS = DescriptorCache()


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:  # pragma: no cover
        pass


class _Closer:
    """Closes the descriptors of unlinked files in a thread of its own. The close that drops
    an unlinked file's last reference frees its blocks, and on a filesystem mounted with
    ``discard`` it waits for the device to discard them: 66-228 ms for a few MB on this
    machine's disk, which on the event loop held every client."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()   # put() is safe in __del__
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def close(self, fd: int) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    try:
                        t = threading.Thread(target=self._run, name="kbroker-fd-closer", daemon=True)
                        t.start()
                    except RuntimeError:   # the interpreter is exiting: no new threads
                        _close_fd(fd)
                        return
                    self._thread = t
        self._queue.put(fd)

    def _run(self) -> None:
        while True:
            _close_fd(self._queue.get())


CLOSER = _Closer()


class FileHandle:
    """An open-on-demand segment or index file. Regions keep a reference to it; a pinned
    handle's descriptor is closed only by ``close`` or when its last reference goes (a
    region handed to a fetch stays valid across a roll, a rename to ``.deleted`` or a
    compaction swap); an unpinned one may be closed by the cache at any time and is
    re-opened by ``fileno``. A doomed handle's file is unlinked (or about to be): its last
    reference hands the descriptor to ``CLOSER``."""

    __slots__ = ("fd", "path", "pinned", "create", "doomed", "_closed", "__weakref__")

    def __init__(self, path: str, fd: int = -1, *, pinned: bool = False, create: bool = False) -> None:
        self.fd = fd
        self.path = path
        self.pinned = pinned
        self.create = create   # index files: re-created if missing (recovery rebuilds them)
        self.doomed = False
        self._closed = False
        if fd >= 0 and not pinned:
            DESCRIPTORS.touch(self)

    def __del__(self, _close=os.close) -> None:
        # the last reference (a segment, or a region a fetch still holds) closes it, so a
        # descriptor number is never reused while a region might still send from it
        try:
            fd, self.fd = self.fd, -1
            if fd >= 0:
                if self.doomed:
                    CLOSER.close(fd)
                else:
                    _close(fd)   # (bound early: at interpreter exit the os module may be gone)
        except OSError:  # pragma: no cover
            pass

    def fileno(self) -> int:
        fd = self.fd
        if fd >= 0:
            if not self.pinned:
                DESCRIPTORS.touch(self)
            return fd
        if self._closed:
            raise KafkaStorageError(f"segment file {self.path} is closed")
        flags = os.O_RDWR | (os.O_CREAT if self.create else 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            raise KafkaStorageError(f"segment file {self.path} is missing") from None
        DESCRIPTORS.opens += 1
        self.fd = fd
        if not self.pinned:
            DESCRIPTORS.touch(self)
        return fd

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def is_open(self) -> bool:
        return self.fd >= 0

    def pin(self) -> None:
        """Keep the descriptor open from now on (the file is about to be renamed or
        unlinked, or the handle goes to another thread): opens it if needed."""
        if not self._closed:
            self.fileno()
        self.pinned = True
        DESCRIPTORS.forget(self)

    def doom(self) -> None:
        """The file is unlinked or about to be: keep the descriptor (regions in flight read
        on) and let the last reference close it in the closer's thread."""
        self.pin()
        self.doomed = True

    def detach(self) -> None:
        """Another thread takes the handle over (closing a deleted log): the cache lets go
        of it without opening it."""
        self.pinned = True
        DESCRIPTORS.forget(self)

    def unpin(self) -> None:
        """The path is right again (a rename finished): the cache may close it."""
        self.pinned = False
        if self.fd >= 0:
            DESCRIPTORS.touch(self)

    def _evict(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            if self.doomed:
                CLOSER.close(fd)
            else:
                os.close(fd)

    def release(self) -> None:
        """Close the descriptor now; the handle re-opens on next use (index ``close``)."""
        DESCRIPTORS.forget(self)
        self._evict()

    def close(self) -> None:
        """Final close: later use raises KafkaStorageError."""
        self._closed = True
        DESCRIPTORS.forget(self)
        self._evict()

    def __repr__(self) -> str:
        return f"FileHandle({self.path!r}, fd={self.fd})"


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (what Kafka's start scripts expect of
    ``ulimit -n``) and size the cache to a quarter of it. Returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # pragma: no cover - a container may refuse
            pass
    DESCRIPTORS.capacity = max(MIN_CAPACITY, min(MAX_CAPACITY, soft // 4))
    reserve_descriptor_table(min(soft, TABLE_RESERVE_MAX))
    return soft, hard


def reserve_descriptor_table(slots: int) -> None:
    """Grow the process's descriptor table to ``slots`` now, once.

    Linux doubles the table when a new descriptor does not fit, and in a multi-threaded
    process each doubling waits for an RCU grace period (10-20 ms) inside the call that
    opened the descriptor: a burst of new connections stalled the event loop in ``accept``
    at descriptors 256, 512, 1024... Placing one descriptor at the top grows the table in one
    step, before clients arrive; the table never shrinks."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # pragma: no cover
        return
    try:
        if slots - 1 > fd:
            os.dup2(fd, slots - 1, inheritable=False)
            os.close(slots - 1)
    except OSError:  # the limit is lower than we were told: the table grows as it goes
        pass
    finally:
        os.close(fd)
