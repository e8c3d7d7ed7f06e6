"""Aborted-transaction index, one ``.txnindex`` file per log segment (Kafka's TransactionIndex).

An entry is written to the index of the segment that holds the transaction's ABORT marker:
34 bytes, big-endian, ``version int16 (0) | producerId int64 | firstOffset int64 |
lastOffset int64 (the marker's offset) | lastStableOffset int64`` (the LSO right after the
abort). A read_committed fetch collects the entries overlapping its range; the LSO field lets
the search stop early: once an entry's LSO is at or past the fetch's upper bound, every
transaction that overlaps the range and was aborted is already behind it.

Entries are few (only aborts), so each index keeps them in memory as well as in the file.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from dataclasses import dataclass

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class CorruptTxnIndexError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset,
                           self.last_offset, self.last_stable_offset)


def txn_index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{TXN_INDEX_SUFFIX}")


class TransactionIndex:
    """The index of one segment. The file is created on the first append."""

    def __init__(self, path: str, start_offset: int):
        self.path = path
        self.start_offset = start_offset
        self.entries: list[AbortedTxn] = []
        self._fd: int | None = None
        if os.path.exists(path):
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            data = f.read()
        whole = len(data) - len(data) % ENTRY_SIZE
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version > CURRENT_VERSION:
                raise CorruptTxnIndexError(
                    f"unexpected aborted transaction version {version} in {self.path}")
            self.entries.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):  # a torn trailing entry from a crash: drop it
            log.warning("%s: dropping %d trailing bytes", self.path, len(data) - whole)
            os.truncate(self.path, whole)

    @property
    def last_offset(self) -> int | None:
        return self.entries[-1].last_offset if self.entries else None

    def _channel(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, txn: AbortedTxn) -> None:
        last = self.last_offset
        if last is not None and last >= txn.last_offset:
            raise ValueError(f"aborted transactions must be appended in order of last offset: "
                             f"{txn.last_offset} after {last} in {self.path}")
        os.write(self._channel(), txn.to_bytes())
        self.entries.append(txn)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or past ``offset``."""
        keep = bisect.bisect_left([e.last_offset for e in self.entries], offset)
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        if os.path.exists(self.path):
            os.truncate(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        self.truncate_to(-(1 << 63))

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound); True when the search is complete
        (no later segment can hold an overlapping abort)."""
        out = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def sanity_check(self) -> None:
        for e in self.entries:
            if e.last_offset < self.start_offset:
                raise CorruptTxnIndexError(
                    f"last offset of {e} in {self.path} is below the start offset "
                    f"{self.start_offset}")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.entries.clear()


class TxnIndexes:
    """The transaction indexes of one partition directory, keyed by segment base offset."""

    def __init__(self, directory: str, scan: bool = True):
        """``scan=False``: the directory is new (a fresh partition log) and holds no indexes."""
        self.directory = directory
        self._by_base: dict[int, TransactionIndex] = {}
        for name in os.listdir(directory) if scan and os.path.isdir(directory) else ():
            stem = name[:-len(TXN_INDEX_SUFFIX)]
            if name.endswith(TXN_INDEX_SUFFIX) and stem.isdigit():
                base = int(stem)
                self._by_base[base] = TransactionIndex(os.path.join(directory, name), base)
        self._bases = sorted(self._by_base)

    @property
    def bases(self) -> list[int]:
        return list(self._bases)

    def index(self, base: int) -> TransactionIndex | None:
        return self._by_base.get(base)

    def all_aborted(self) -> list[AbortedTxn]:
        return [e for b in self._bases for e in self._by_base[b].entries]

    def append(self, segment_base: int, txn: AbortedTxn) -> None:
        """Record an abort whose marker lies in the segment starting at ``segment_base``."""
        idx = self._by_base.get(segment_base)
        if idx is None:
            if self._bases and segment_base < self._bases[-1]:
                raise ValueError(f"abort appended to segment {segment_base} below the latest "
                                 f"indexed segment {self._bases[-1]}")
            idx = self._by_base[segment_base] = TransactionIndex(
                txn_index_path(self.directory, segment_base), segment_base)
            self._bases.append(segment_base)
        idx.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), searching from the
        segment at or below ``fetch_offset`` forward (markers come after their data)."""
        start = bisect.bisect_right(self._bases, fetch_offset) - 1
        out: list[AbortedTxn] = []
        for base in self._bases[max(start, 0):]:
            found, complete = self._by_base[base].collect(fetch_offset, upper_bound)
            out += found
            if complete:
                break
        return out

    def truncate_to(self, offset: int) -> None:
        """The log was truncated to ``offset``: forget aborts whose marker is at or past it."""
        for base in [b for b in self._bases if b >= offset]:
            self._by_base.pop(base).delete()
        self._bases = sorted(self._by_base)
        if self._bases:
            self._by_base[self._bases[-1]].truncate_to(offset)

    def retain_segments(self, segment_bases) -> None:
        """Delete the indexes of segments that no longer exist (retention, truncation)."""
        live = set(segment_bases)
        for base in [b for b in self._bases if b not in live]:
            self._by_base.pop(base).delete()
        self._bases = sorted(self._by_base)

    def replace_range(self, low: int, high: int, new_base: int, entries) -> None:
        """Compaction replaced the segments with bases in [low, high) by one segment at
        ``new_base``: its index holds ``entries`` (the aborts whose markers the cleaner kept),
        written to a temporary file and renamed into place."""
        for base in [b for b in self._bases if low <= b < high]:
            self._by_base.pop(base).delete()
        entries = sorted(entries, key=lambda e: e.last_offset)
        path = txn_index_path(self.directory, new_base)
        if entries:
            tmp = path + ".cleaned"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, b"".join(e.to_bytes() for e in entries))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            self._by_base[new_base] = TransactionIndex(path, new_base)
        self._bases = sorted(self._by_base)

    def flush(self) -> None:
        for idx in self._by_base.values():
            idx.flush()

    def close(self) -> None:
        for idx in self._by_base.values():
            idx.close()
