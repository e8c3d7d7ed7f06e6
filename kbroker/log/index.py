"""Kafka's segment index files, memory-mapped.

``.index``: 8-byte entries (int32 offset relative to the segment's base offset, int32 file
position), ``.timeindex``: 12-byte entries (int64 timestamp, int32 relative offset); both
big-endian, sorted, preallocated to ``segment.index.bytes`` while the segment is active and
trimmed to their entries when it rolls or the log closes (exactly Kafka's layout, so
``kafka-dump-log.sh`` reads them). The mapping is opened lazily on first use, so a log with
many segments keeps only the indexes it touches mapped; the kernel pages them.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Callable

_OFF = struct.Struct(">ii")
_TIME = struct.Struct(">qi")


class _Index:
    entry_size = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int = -1,
                 writable: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._mm: mmap.mmap | None = None
        self._fd = -1
        self._entries = 0
        self._capacity = 0  # bytes mapped
        self._loaded = False
        self._writable = writable
        if writable:
            self._load()

    # -- file / mapping management ----------------------------------------------------
    def _load(self) -> None:
        if self._loaded:
            return
        exists = os.path.exists(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        es = self.entry_size
        if not exists or size == 0:
            if self._writable and self.max_index_size > 0:
                size = self.max_index_size - self.max_index_size % es
                os.ftruncate(self._fd, size)
            self._entries = 0
        else:
            # a file we did not create: its entries fill it (Kafka does the same; a crash
            # can leave preallocated zeros which sanity_check()/recovery deal with)
            self._entries = size // es
        self._map(size)
        self._loaded = True
        if self._writable and self.max_index_size > 0 and exists:
            self.resize(self.max_index_size)

    def _map(self, size: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._capacity = size
        if size > 0:
            self._mm = mmap.mmap(self._fd, size)

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
        # no msync: a shared mapping is the page cache; durability is flush()'s job
        os.ftruncate(self._fd, new_size)
        self._map(new_size)

    def make_writable(self, max_index_size: int) -> None:
        """The segment became active again (reopen): grow back to the preallocated size."""
        self._writable = True
        self.max_index_size = max_index_size
        self._load()
        self.resize(max_index_size)

    def trim_to_valid_size(self) -> None:
        if not self._loaded:
            return
        self.resize(self._entries * self.entry_size)
        self._writable = False

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)  # writes the mapping's dirty pages too (shared mapping)

    @property
    def fd(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._loaded = False

    def close_and_trim(self) -> None:
        if self._loaded:
            self.trim_to_valid_size()
        self.close()

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds the index)."""
        self._load()
        self._entries = 0
        if self._mm is not None and self._capacity:
            # truncate and re-extend: a sparse file of zeros at once. Writing 10 MB of zeros
            # through the mapping took ~35 ms per index: over a minute of recovery after a
            # kill -9 with a thousand partitions.
            cap = self._capacity
            self._mm.close()
            self._mm = None
            os.ftruncate(self._fd, 0)
            os.ftruncate(self._fd, cap)
            self._map(cap)

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
        return _OFF.unpack_from(self._mm, i * 8)[0]  # type: ignore[arg-type]

    def entry(self, i: int) -> tuple[int, int]:
        self._load()
        rel, pos = _OFF.unpack_from(self._mm, i * 8)  # type: ignore[arg-type]
        return self.base_offset + rel, pos

    def last_entry(self) -> tuple[int, int]:
        self._load()
        if self._entries == 0:
            return self.base_offset, 0
        return self.entry(self._entries - 1)

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
        if n and rel <= _OFF.unpack_from(self._mm, (n - 1) * 8)[0]:  # type: ignore[arg-type]
            return False  # Kafka only appends increasing offsets
        if (n + 1) * 8 > self._capacity:
            return False
        # pwrite, not a store into the mapping: the mapping sees it (one page cache), and
        # the first store into each page of a new sparse index file costs a write fault
        # that allocates the block (~1 ms here), which made every new partition's first
        # appends slow; the write path allocates lazily (delayed allocation).
        os.pwrite(self._fd, _OFF.pack(rel, position), n * 8)
        self._entries = n + 1
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
        last_rel, last_pos = _OFF.unpack_from(self._mm, (n - 1) * 8)  # type: ignore[arg-type]
        if last_rel < 0 or last_pos < 0 or last_pos >= max(log_size, 1):
            return False
        if n > 1:
            prev_rel, prev_pos = _OFF.unpack_from(self._mm, (n - 2) * 8)  # type: ignore[arg-type]
            if last_rel <= prev_rel or last_pos <= prev_pos:
                return False
        return True


class TimeIndex(_Index):
    """timestamp -> relative offset; entries only where the timestamp grows."""

    entry_size = 12

    def _key(self, i: int) -> int:
        return _TIME.unpack_from(self._mm, i * 12)[0]  # type: ignore[arg-type]

    def entry(self, i: int) -> tuple[int, int]:
        self._load()
        ts, rel = _TIME.unpack_from(self._mm, i * 12)  # type: ignore[arg-type]
        return ts, self.base_offset + rel

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base_offset) when empty."""
        self._load()
        if self._entries == 0:
            return -1, self.base_offset
        return self.entry(self._entries - 1)

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
        os.pwrite(self._fd, _TIME.pack(timestamp, offset - self.base_offset), self._entries * 12)  # see OffsetIndex.append
        self._entries += 1
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset >= ``offset`` (entries are sorted by offset too)."""
        self._load()
        lo, hi = 0, self._entries
        rel = offset - self.base_offset
        while lo < hi:
            mid = (lo + hi) >> 1
            if _TIME.unpack_from(self._mm, mid * 12)[1] < rel:  # type: ignore[arg-type]
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
            t1, r1 = _TIME.unpack_from(self._mm, (n - 2) * 12)  # type: ignore[arg-type]
            t2, r2 = _TIME.unpack_from(self._mm, (n - 1) * 12)  # type: ignore[arg-type]
            if t2 <= t1 or r2 < r1:
                return False
        return True
