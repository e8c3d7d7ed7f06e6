"""Kafka's segment index files, read and written with pread/pwrite.

``.index``: 8-byte entries (int32 offset relative to the segment's base offset, int32 file
position), ``.timeindex``: 12-byte entries (int64 timestamp, int32 relative offset); both
big-endian, sorted, preallocated to ``segment.index.bytes`` while the segment is active and
trimmed to their entries when it rolls or the log closes (exactly Kafka's layout, so
``kafka-dump-log.sh`` reads them).

No memory maps: Python's mmap keeps a duplicate descriptor per mapping, which made every
active segment cost five descriptors and ran a 20,000-descriptor process out at ~4,000
partitions. The file is a ``FileHandle`` of the bounded descriptor cache (``fd_cache``):
opened on first use, closed when the cache needs room, re-opened by path. The entry count
and capacity live here, so the append path's checks (``is_full``) touch no file; a lookup is
a binary search of a few 8/12-byte preads, served from the page cache.
"""

from __future__ import annotations

import os
import struct
from typing import Callable

from .errors import KafkaStorageError
from .fd_cache import FileHandle

_OFF = struct.Struct(">ii")
_TIME = struct.Struct(">qi")


class _Index:
    entry_size = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int = -1,
                 writable: bool = False, *, new: bool = False) -> None:
        self._h = FileHandle(path, create=True)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._entries = 0
        self._capacity = 0  # bytes of the file (entries beyond _entries are zeros)
        self._loaded = False  # _entries/_capacity known
        self._writable = writable
        # (entry count, the last entry unpacked): appends check the last entry without a
        # pread (two per produce request, offset and time index). Keyed by the count, so a
        # truncation invalidates it; dropped when the file is re-read (close, reset).
        self._last: tuple | None = None
        if new and writable and max_index_size > 0:
            # a new segment's index: known empty. The file exists from the start, as Kafka's
            # does (tools list and dump it), but is opened and preallocated on first use only.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            self._entries = 0
            self._capacity = max_index_size - max_index_size % self.entry_size
            self._loaded = True
            self._prealloc = True
        else:
            self._prealloc = False
            if writable:
                self._load()

    @property
    def path(self) -> str:
        return self._h.path

    @path.setter
    def path(self, value: str) -> None:
        self._h.path = value

    # -- file management -----------------------------------------------------------------
    def _fd(self) -> int:
        fd = self._h.fileno()
        if self._prealloc:
            self._prealloc = False
            if os.fstat(fd).st_size < self._capacity:
                os.ftruncate(fd, self._capacity)  # Kafka preallocates (sparse zeros)
        return fd

    def _load(self) -> None:
        if self._loaded:
            return
        exists = os.path.exists(self.path)
        fd = self._fd()
        size = os.fstat(fd).st_size
        es = self.entry_size
        if not exists or size == 0:
            if self._writable and self.max_index_size > 0:
                size = self.max_index_size - self.max_index_size % es
                os.ftruncate(fd, size)
            self._entries = 0
        else:
            # a file we did not create: its entries fill it (Kafka does the same; a crash
            # can leave preallocated zeros which sanity_check()/recovery deal with)
            self._entries = size // es
        self._capacity = size
        self._loaded = True
        if self._writable and self.max_index_size > 0 and exists:
            self.resize(self.max_index_size)

    def _read_last(self, fmt: struct.Struct) -> tuple:
        n = self._entries
        cached = self._last
        if cached is not None and cached[0] == n:
            return cached[1]
        value = self._read(n - 1, fmt)
        self._last = (n, value)
        return value

    def _read(self, i: int, fmt: struct.Struct) -> tuple:
        es = self.entry_size
        data = os.pread(self._fd(), es, i * es)
        if len(data) < es:   # inside the capacity but past the end of the file: zeros
            data = data.ljust(es, b"\0")
        return fmt.unpack(data)

    @property
    def entries(self) -> int:
        self._load()
        return self._entries

    def is_full(self) -> bool:
        if not self._loaded:
            self._load()
        return self._entries * self.entry_size >= self._capacity

    def resize(self, new_size: int) -> None:
        self._load()
        es = self.entry_size
        new_size = max(new_size - new_size % es, self._entries * es)
        if new_size == self._capacity:
            return
        os.ftruncate(self._fd(), new_size)
        self._capacity = new_size

    def make_writable(self, max_index_size: int) -> None:
        """The segment became active again (reopen): grow back to the preallocated size."""
        self._writable = True
        self.max_index_size = max_index_size
        self._load()
        self.resize(max_index_size)

    def trim_to_valid_size(self) -> None:
        if not self._loaded:
            return
        if self._prealloc:   # never created: nothing to trim
            self._capacity = self._entries * self.entry_size
        else:
            self.resize(self._entries * self.entry_size)
        self._writable = False

    def flush(self) -> None:
        if self._loaded and not self._prealloc:
            os.fsync(self._fd())   # an evicted file's dirty pages are still the inode's

    @property
    def fd(self) -> int:
        """A descriptor for fsync (valid until other handles are touched)."""
        return self._fd()

    def close(self) -> None:
        """Release the descriptor and forget the sizes (a later use re-reads the file)."""
        self._h.release()
        self._h.pinned = False
        self._loaded = False
        self._prealloc = False
        self._last = None

    def close_for_delete(self) -> None:
        """``close`` for a file unlinked or about to be: the descriptor goes to the closer
        thread (kbroker.log.fd_cache.CLOSER), since its close may be the one that frees
        the blocks (a compaction's rename onto an older ``.deleted`` unlinks that file)."""
        self._h.doomed = True
        self.close()

    def close_and_trim(self) -> None:
        try:
            if self._loaded:
                self.trim_to_valid_size()
        except KafkaStorageError:
            pass   # the directory is gone (a partition deleted while it was created)
        self.close()

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds the index)."""
        self._load()
        self._entries = 0
        self._last = None
        if self._capacity:
            # truncate and re-extend: a sparse file of zeros at once (writing 10 MB of zeros
            # took ~35 ms per index: over a minute of recovery with a thousand partitions)
            fd = self._fd()
            os.ftruncate(fd, 0)
            os.ftruncate(fd, self._capacity)

    # -- search ------------------------------------------------------------------------
    def _key(self, i: int) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def _largest_lower(self, target: int, strict: bool) -> int:
        """Slot of the largest entry with key <= target (key < target if strict); -1 if none."""
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        key = self._key
        ok: Callable[[int], bool] = (lambda k: k < target) if strict else (lambda k: k <= target)
        if not ok(key(0)):
            return -1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if ok(key(mid)):
                lo = mid
            else:
                hi = mid - 1
        return lo


class OffsetIndex(_Index):
    """relative offset -> file position; lookups return the entry at or below a target."""

    entry_size = 8

    def _key(self, i: int) -> int:
        return self._read(i, _OFF)[0]

    def entry(self, i: int) -> tuple[int, int]:
        self._load()
        rel, pos = self._read(i, _OFF)
        return self.base_offset + rel, pos

    def last_entry(self) -> tuple[int, int]:
        self._load()
        if self._entries == 0:
            return self.base_offset, 0
        rel, pos = self._read_last(_OFF)
        return self.base_offset + rel, pos

    @property
    def last_offset(self) -> int:
        return self.last_entry()[0]

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest indexed offset <= ``offset``; (base, 0) if none."""
        self._load()
        slot = self._largest_lower(offset - self.base_offset, strict=False)
        if slot < 0:
            return self.base_offset, 0
        return self.entry(slot)

    def append(self, offset: int, position: int) -> bool:
        if not self._loaded:
            self._load()
        n = self._entries
        rel = offset - self.base_offset
        if n and rel <= self._read_last(_OFF)[0]:
            return False  # Kafka only appends increasing offsets
        if (n + 1) * 8 > self._capacity:
            return False
        # pwrite (no mapping): a store into a mapped page of a new sparse file cost a
        # write fault that allocates the block (~1 ms here); the write path allocates lazily
        os.pwrite(self._fd(), _OFF.pack(rel, position), n * 8)
        self._entries = n + 1
        self._last = (n + 1, (rel, position))
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        self._load()
        slot = self._largest_lower(offset - self.base_offset, strict=True)
        self._entries = slot + 1

    def sanity_check(self, log_size: int) -> bool:
        """Cheap structural check of an index we did not rebuild: length multiple of the
        entry size, last entry beyond the previous one and inside the log file."""
        self._load()
        if self._capacity % 8:
            return False
        n = self._entries
        if n == 0:
            return True
        last_rel, last_pos = self._read(n - 1, _OFF)
        if last_rel < 0 or last_pos < 0 or last_pos >= max(log_size, 1):
            return False
        if n > 1:
            prev_rel, prev_pos = self._read(n - 2, _OFF)
            if last_rel <= prev_rel or last_pos <= prev_pos:
                return False
        return True


class TimeIndex(_Index):
    """timestamp -> relative offset; entries only where the timestamp grows."""

    entry_size = 12

    def _key(self, i: int) -> int:
        return self._read(i, _TIME)[0]

    def entry(self, i: int) -> tuple[int, int]:
        self._load()
        ts, rel = self._read(i, _TIME)
        return ts, self.base_offset + rel

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base_offset) when empty."""
        self._load()
        if self._entries == 0:
            return -1, self.base_offset
        ts, rel = self._read_last(_TIME)
        return ts, self.base_offset + rel

    def lookup_below(self, timestamp: int) -> tuple[int, int]:
        """Last entry with timestamp strictly below ``timestamp``: every record at or
        before its offset is older than ``timestamp``. (-1, base_offset) if none."""
        self._load()
        slot = self._largest_lower(timestamp, strict=True)
        if slot < 0:
            return -1, self.base_offset
        return self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        self._load()
        if self._entries:
            last_ts, last_off = self.last_entry()
            if timestamp <= last_ts or offset < last_off:
                return False
        if self._entries >= self._capacity // 12:
            if skip_full_check and self._capacity >= 0:
                # the final entry written on roll may need one more slot
                self.resize(self._capacity + 12)
            else:
                return False
        rel = offset - self.base_offset
        os.pwrite(self._fd(), _TIME.pack(timestamp, rel), self._entries * 12)  # see OffsetIndex.append
        self._entries += 1
        self._last = (self._entries, (timestamp, rel))
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset >= ``offset`` (entries are sorted by offset too)."""
        self._load()
        lo, hi = 0, self._entries
        rel = offset - self.base_offset
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._read(mid, _TIME)[1] < rel:
                lo = mid + 1
            else:
                hi = mid
        self._entries = lo

    def sanity_check(self, log_size: int) -> bool:
        self._load()
        if self._capacity % 12:
            return False
        n = self._entries
        if n > 1:
            t1, r1 = self._read(n - 2, _TIME)
            t2, r2 = self._read(n - 1, _TIME)
            if t2 <= t1 or r2 < r1:
                return False
        return True
