"""One log segment: ``{base_offset:020d}.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` file is the concatenation of record batches exactly as stored (Kafka's format).
A segment never loads its data into memory: appends are one ``pwrite`` of the request's
records, reads hand out ``FileRegion``s for ``sendfile``, and scans (offset translation,
recovery, timestamp search) read bounded windows with ``pread``.

Walking from batch to batch uses only the log framing every batch starts with (baseOffset
int64 + batchLength int32, Kafka's ``LOG_OVERHEAD``) as Kafka's FileLogInputStream does;
everything else about a batch comes from ``kbroker.wire.records.RecordBatch``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from kbroker.wire import records as _records
from kbroker.wire.records import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, RecordBatch

from . import fill_ahead
from .config import INT_MAX, LogConfig
from .errors import KafkaStorageError
from .fd_cache import FileHandle
from .index import OffsetIndex, TimeIndex

log = logging.getLogger(__name__)

_FRAME = struct.Struct(">qi")  # baseOffset, batchLength: the log framing (LOG_OVERHEAD)
MIN_BATCH_SIZE = RECORD_BATCH_OVERHEAD
_SCAN_CHUNK = 8192
_RECOVER_CHUNK = 1 << 20

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def filename_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


def log_file(d: str, base: int, suffix: str = "") -> str:
    return os.path.join(d, filename_prefix(base) + LOG_SUFFIX + suffix)


def index_file(d: str, base: int, suffix: str = "") -> str:
    return os.path.join(d, filename_prefix(base) + INDEX_SUFFIX + suffix)


def time_index_file(d: str, base: int, suffix: str = "") -> str:
    return os.path.join(d, filename_prefix(base) + TIMEINDEX_SUFFIX + suffix)


class FileRegion(NamedTuple):
    """``size`` bytes of ``file`` from ``position``, for ``os.sendfile(out, file.fileno(), position, size)``."""

    file: FileHandle
    position: int
    size: int

    @property
    def fd(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        """The bytes (for TLS connections and tests; the data path uses sendfile)."""
        return pread_exact(self.file.fileno(), self.size, self.position)


def pread_exact(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def pwrite_all(fd: int, buf, position: int) -> int:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    n = os.pwrite(fd, mv, position)
    total = len(mv)
    while n < total:  # short writes happen only near ENOSPC or on signals
        w = os.pwrite(fd, mv[n:], position + n)
        if w <= 0:
            raise OSError("short write")
        n += w
    return n


@dataclass
class SegmentRecovery:
    """What recovering one segment found."""

    base_offset: int
    valid_bytes: int
    truncated_bytes: int
    batches: int
    next_offset: int
    reason: str | None = None  # why the scan stopped early (None: clean end)
    position: int | None = None  # where the damage starts
    zero_tail: bool = False  # what was cut looked like zeros (preallocated, never written)


class LogSegment:
    """A segment; owned by its PartitionLog (not thread-safe, like the rest of the log)."""

    def __init__(self, directory: str, base_offset: int, config: LogConfig, now_ms: int,
                 *, suffix: str = "", create: bool = False, active: bool = False, fresh: bool = False) -> None:
        # fresh (with create): the directory was made for this log, so it holds no stale files
        self.dir = directory
        self.base_offset = base_offset
        self.config = config
        self.suffix = suffix
        self.created_ms = now_ms
        path = log_file(directory, base_offset, suffix)
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            self.handle = FileHandle(path, fd, pinned=active)
        else:
            # an old segment opens on first read (descriptor cache); the active one at once
            self.handle = FileHandle(path, pinned=active)
            fd = self.handle.fileno() if active else -1
        if create and not fresh:
            for p in (index_file(directory, base_offset, suffix),
                      time_index_file(directory, base_offset, suffix)):
                try:  # stale index files of an earlier segment at this offset
                    os.unlink(p)
                except FileNotFoundError:
                    pass
        if create and config.preallocate:
            try:
                os.ftruncate(fd, config.segment_bytes)  # Kafka: setLength (sparse zeros)
            except OSError:  # pragma: no cover
                pass
            self.size = 0
        elif create:
            self.size = 0   # made by this O_EXCL open
        else:
            self.size = os.fstat(fd).st_size if fd >= 0 else os.stat(path).st_size
        self.offset_index = OffsetIndex(index_file(directory, base_offset, suffix), base_offset,
                                        config.segment_index_bytes, writable=active, new=create)
        self.time_index = TimeIndex(time_index_file(directory, base_offset, suffix), base_offset,
                                    config.segment_index_bytes, writable=active, new=create)
        self.active = active
        self.bytes_since_last_index_entry = 0
        self._next_offset: int | None = base_offset if create else None
        self._max_ts: int | None = -1 if create else None
        self._offset_of_max_ts: int = base_offset
        self._rolling_ts: int | None = None  # max timestamp of the first batch
        self._rolling_ts_known = create
        self.deleted_at_ms: int | None = None
        # True when every batch starts right after the previous one (no compaction gaps),
        # so offset translation never needs a batch header; known for what we wrote/scanned
        self.contiguous = create
        self._fill: fill_ahead.FillAhead | None = None   # space made ahead of the appends
        self._trim_job: concurrent.futures.Future | None = None   # the roll's, on the fill-ahead thread

    # -- identity -----------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.handle.path

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, suffix={self.suffix!r})"

    # -- derived state, lazily computed for segments we did not write ---------------------
    @property
    def next_offset(self) -> int:
        """One past the last offset stored in this segment (base_offset when empty)."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    def _read_next_offset(self) -> int:
        if self.size == 0:
            return self.base_offset
        _off, pos = self.offset_index.lookup(1 << 62)
        last_pos = None
        for p, _base, _size in self.iter_frames(pos if pos < self.size else 0):
            last_pos = p
        if last_pos is None:
            return self.base_offset
        b = self.batch_at(last_pos)
        return b.next_offset

    def _load_max_ts(self) -> None:
        ts, off = self.time_index.last_entry()
        self._max_ts = ts
        self._offset_of_max_ts = off

    @property
    def max_timestamp(self) -> int:
        """Largest batch maxTimestamp seen in this segment (-1: none)."""
        if self._max_ts is None:
            self._load_max_ts()
        return self._max_ts  # type: ignore[return-value]

    @property
    def offset_of_max_timestamp(self) -> int:
        if self._max_ts is None:
            self._load_max_ts()
        return self._offset_of_max_ts

    def largest_timestamp(self) -> int:
        """Kafka's segment.largestTimestamp: max timestamp, or the file's mtime if none."""
        ts = self.max_timestamp
        if ts >= 0:
            return ts
        return self.last_modified_ms()

    def last_modified_ms(self) -> int:
        try:
            return int(os.fstat(self.handle.fileno()).st_mtime * 1000)
        except (OSError, KafkaStorageError):
            return 0

    def rolling_based_timestamp(self) -> int | None:
        """Timestamp segment.ms is measured from: the first batch's maxTimestamp."""
        if not self._rolling_ts_known:
            self._rolling_ts_known = True
            if self.size > 0:
                try:
                    ts = self.batch_at(0).max_timestamp
                    self._rolling_ts = ts if ts >= 0 else None
                except Exception:  # pragma: no cover - damaged data, roll check only
                    self._rolling_ts = None
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, largest_ts: int) -> int:
        rts = self.rolling_based_timestamp()
        if rts is not None and rts >= 0:
            return largest_ts - rts  # Kafka measures in message time
        return now_ms - self.created_ms

    # -- reading batches ----------------------------------------------------------------
    def read_bytes(self, position: int, size: int) -> bytes:
        return pread_exact(self.handle.fileno(), size, position)

    def frame_at(self, position: int) -> tuple[int, int]:
        """(base_offset, batch size) of the batch at ``position``; reads 12 bytes."""
        data = os.pread(self.handle.fileno(), LOG_OVERHEAD, position)
        if len(data) < LOG_OVERHEAD:
            raise KafkaStorageError(f"{self.path}: short read at {position}")
        base, length = _FRAME.unpack(data)
        return base, LOG_OVERHEAD + length

    def batch_at(self, position: int, size: int | None = None) -> RecordBatch:
        """The whole batch at ``position`` as a RecordBatch over a private buffer."""
        if size is None:
            _base, size = self.frame_at(position)
        data = self.read_bytes(position, size)
        return RecordBatch(bytearray(data), 0)

    def iter_frames(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int]]:
        """(position, base_offset, size) of each batch from ``start`` (a batch boundary) up
        to ``end``, reading the framing in small windows."""
        end = self.size if end is None else min(end, self.size)
        h = self.handle  # the descriptor is asked for at each read: the caller may pause us
        pos = start
        buf = b""
        buf_pos = pos
        while pos + LOG_OVERHEAD <= end:
            rel = pos - buf_pos
            if rel < 0 or rel + LOG_OVERHEAD > len(buf):
                buf = os.pread(h.fileno(), min(_SCAN_CHUNK, end - pos), pos)
                buf_pos = pos
                rel = 0
                if len(buf) < LOG_OVERHEAD:
                    return
            base, length = _FRAME.unpack_from(buf, rel)
            size = LOG_OVERHEAD + length
            if length < MIN_BATCH_SIZE - LOG_OVERHEAD or pos + size > end:
                return
            yield pos, base, size
            pos += size

    def iter_batches(self, start: int = 0, end: int | None = None,
                     chunk: int = _RECOVER_CHUNK) -> Iterator[tuple[int, RecordBatch]]:
        """(position, RecordBatch) for whole batches from ``start`` (a batch boundary), read
        in windows of ``chunk`` bytes (or one batch, if larger). Views are read-only and
        stay valid after the iteration moves on."""
        end = self.size if end is None else min(end, self.size)
        h = self.handle  # the descriptor is asked for at each read: the caller may pause us
        pos = start
        while pos + LOG_OVERHEAD <= end:
            buf = pread_exact(h.fileno(), min(chunk, end - pos), pos)
            if len(buf) < LOG_OVERHEAD:
                return
            _b, length = _FRAME.unpack_from(buf, 0)
            size = LOG_OVERHEAD + length
            if size > len(buf):
                if length < 0 or pos + size > end:
                    return
                buf = pread_exact(h.fileno(), size, pos)
                if len(buf) < size:
                    return
            off = 0
            n = len(buf)
            while off + LOG_OVERHEAD <= n:
                _b, length = _FRAME.unpack_from(buf, off)
                size = LOG_OVERHEAD + length
                if off + size > n:
                    break
                yield pos + off, RecordBatch(buf, off)
                off += size
            if off == 0:
                return
            pos += off

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, int, int] | None:
        """(position, base_offset, size) of the first batch whose last offset >= ``offset``,
        or None if this segment holds no such batch."""
        if offset >= self.next_offset:
            return None
        if offset <= self.base_offset:
            pos = start_position   # (the index could only say position 0: no index read)
        else:
            _o, pos = self.offset_index.lookup(offset)
            pos = max(pos, start_position)
        prev: tuple[int, int, int] | None = None
        for frame in self.iter_frames(pos):
            base = frame[1]
            if base == offset:
                return frame
            if base > offset:
                if prev is None:
                    return frame
                # prev starts below offset: it holds it unless compaction removed the
                # offsets after its last record (only then is its header read)
                if self.contiguous or self._batch_last(prev) >= offset:
                    return prev
                return frame
            prev = frame
        return prev

    def _batch_last(self, frame: tuple[int, int, int]) -> int:
        return self.batch_at(frame[0], frame[2]).last_offset

    # -- writing ------------------------------------------------------------------------
    def append(self, buf, batches: list, largest_offset: int) -> None:
        """Write ``buf`` (the concatenation of ``batches``, offsets assigned) at the end.
        One pwrite; then the index entries Kafka would write for these batches."""
        if not self.active:
            raise RuntimeError(f"append to inactive segment {self}")
        position = self.size
        if self.contiguous and batches and position and batches[0].base_offset != self._next_offset:
            self.contiguous = False
        if self._fill is not None:
            self._fill.claim(position + (buf.nbytes if isinstance(buf, memoryview) else len(buf)))
        pwrite_all(self.handle.fileno(), buf, position)
        self._after_write(batches, position)
        self._next_offset = largest_offset + 1
        if not self.suffix:
            # (not a .cleaned file the cleaner writes: it is not on the loop, and it is
            # fsynced once, at its end)
            self._fill_ahead()

    def _fill_ahead(self) -> None:
        """After an append: keep space made ahead of the log's end, up to segment.bytes
        (kbroker.log.fill_ahead): zeros for a log that fsyncs every append, allocated
        blocks for any other."""
        fill = self._fill
        if fill is None:
            zeros = self.config.group_commit
            if self.handle.closed or not (fill_ahead.ZEROS if zeros else fill_ahead.ALLOCATE):
                return
            fill = self._fill = fill_ahead.FillAhead(self.size, zeros)
        fill.ahead(self.config.segment_bytes, self.handle.fileno())

    def _stop_fill(self) -> None:
        """Before the file is trimmed, truncated, closed or deleted: no more space after this."""
        if self._fill is not None:
            self._fill.stop()
            self._fill = None

    def _after_write(self, batches, position: int) -> None:
        interval = self.config.index_interval_bytes
        max_ts = self.max_timestamp
        off_max = self._offset_of_max_ts
        since = self.bytes_since_last_index_entry
        oi, ti = self.offset_index, self.time_index
        first = position == 0
        for b in batches:
            bts = b.max_timestamp
            last = b.last_offset
            if bts > max_ts:
                max_ts, off_max = bts, last
            if since > interval:
                oi.append(last, position)
                ti.maybe_append(max_ts, off_max)
                since = 0
            size = b.size
            position += size
            since += size
        self.bytes_since_last_index_entry = since
        self._max_ts, self._offset_of_max_ts = max_ts, off_max
        self.size = position
        if first and batches:
            ts = batches[0].max_timestamp
            self._rolling_ts = ts if ts >= 0 else None
            self._rolling_ts_known = True

    # -- recovery -----------------------------------------------------------------------
    def recover(self, max_batch_size: int, limit_offset: int | None = None) -> SegmentRecovery:
        """Re-scan the whole file: validate every batch (framing, magic, CRC, offsets),
        rebuild both indexes, and truncate at the first torn or corrupt batch.

        baseOffset lies outside the CRC, so a damaged one shows only as an offset going
        backwards; when the batch before jumped ahead (a gap), that batch is the damaged
        one and the cut is made before it. ``limit_offset`` (the next segment's base) bounds
        the offsets this segment may hold."""
        self.offset_index.make_writable(self.config.segment_index_bytes)
        self.time_index.make_writable(self.config.segment_index_bytes)
        self.offset_index.reset()
        self.time_index.reset()
        self.bytes_since_last_index_entry = 0
        self._max_ts, self._offset_of_max_ts = -1, self.base_offset
        self._rolling_ts, self._rolling_ts_known = None, True
        fd = self.handle.fileno()
        file_size = os.fstat(fd).st_size
        pos = 0
        count = 0
        contiguous = True
        next_offset = self.base_offset
        reason: str | None = None
        self.size = 0
        pending = None  # (position, batch, jumped ahead?, next offset before it)
        zero_tail = False

        def commit(p):
            nonlocal count, contiguous
            ppos, pb, pgap, _prev = p
            self._after_write((pb,), ppos)
            count += 1
            if pgap:
                contiguous = False

        while pos < file_size:
            head = os.pread(fd, LOG_OVERHEAD, pos)
            if len(head) < LOG_OVERHEAD:
                # a preallocated file whose last batch ends a few bytes short of its end
                zero_tail = not head.strip(b"\0")
                reason = ("zero-filled tail (preallocated or never written)" if zero_tail
                          else f"torn batch: {file_size - pos} trailing bytes")
                break
            base, length = _FRAME.unpack(head)
            if base == 0 and length == 0:
                sample = os.pread(fd, min(file_size - pos, 65536), pos)
                if not sample.strip(b"\0"):
                    zero_tail = True
                    reason = "zero-filled tail (preallocated or never written)"
                else:
                    reason = "zeroed batch header"
                break
            size = LOG_OVERHEAD + length
            if length < MIN_BATCH_SIZE - LOG_OVERHEAD:
                reason = f"corrupt batch length {length}"
                break
            if size > max_batch_size:
                reason = f"batch length {length} above the {max_batch_size} byte limit"
                break
            if pos + size > file_size:
                reason = f"torn batch: {size} bytes announced, {file_size - pos} present"
                break
            data = bytearray(pread_exact(fd, size, pos))
            try:
                b = RecordBatch(data, 0)
            except _records.CorruptRecordError as e:
                reason = f"corrupt batch: {e}"
                break
            if not b.verify_crc():
                reason = "corrupt batch: CRC mismatch"
                break
            if base < next_offset or b.last_offset_delta < 0:
                reason = f"offset going backwards: {base} after {next_offset - 1}"
                if pending is not None and pending[2]:
                    pos = pending[0]
                    next_offset = pending[3]
                    reason = (f"corrupt baseOffset {pending[1].base_offset} (offsets jump "
                              f"ahead, then back to {base})")
                    pending = None
                break
            if limit_offset is not None and b.last_offset >= limit_offset:
                reason = f"offset {b.last_offset} at or past the next segment ({limit_offset})"
                break
            if b.last_offset - self.base_offset > INT_MAX:
                reason = f"offset {b.last_offset} does not fit segment {self.base_offset}"
                break
            if pending is not None:
                commit(pending)
            gap = base != next_offset
            pending = (pos, b, gap, next_offset)
            next_offset = b.next_offset
            pos += size
        if pending is not None:
            commit(pending)
        valid = pos
        self.size = valid
        truncated = file_size - valid
        if truncated > 0:
            os.ftruncate(fd, valid)
        self._next_offset = next_offset
        self.contiguous = contiguous
        return SegmentRecovery(self.base_offset, valid, truncated, count, next_offset,
                               reason if truncated > 0 else None,
                               valid if truncated > 0 else None,
                               zero_tail and truncated > 0)

    def sanity_check_indexes(self) -> bool:
        return (self.offset_index.sanity_check(self.size)
                and self.time_index.sanity_check(self.size))

    def rebuild_indexes(self) -> SegmentRecovery:
        active = self.active
        r = self.recover(max_batch_size=1 << 62)
        if not active:
            self.on_become_inactive()
        return r

    # -- truncation ---------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop batches whose last offset >= ``offset``; returns the bytes removed."""
        if offset <= self.base_offset:
            pos = 0
        else:
            t = self.translate_offset(offset)
            if t is None:
                return 0
            pos = t[0]
        if pos >= self.size:
            return 0
        removed = self.size - pos
        self._stop_fill()   # (the next append starts a new one from ``pos``)
        self.await_trim()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        os.ftruncate(self.handle.fileno(), pos)
        self.size = pos
        # rebuild derived state from what is left
        self._next_offset = None
        self.bytes_since_last_index_entry = 0
        self._max_ts = None
        if pos == 0:
            self._next_offset = self.base_offset
            self._max_ts, self._offset_of_max_ts = -1, self.base_offset
            self._rolling_ts, self._rolling_ts_known = None, True
        else:
            self._recompute_max_ts()
            if self.active:
                self._recompute_bytes_since_index()
        return removed

    def _recompute_max_ts(self) -> None:
        ts, off = self.time_index.last_entry()
        _o, pos = self.offset_index.lookup(off) if ts >= 0 else (self.base_offset, 0)
        for _p, b in self.iter_batches(pos):
            if b.max_timestamp > ts:
                ts, off = b.max_timestamp, b.last_offset
        self._max_ts, self._offset_of_max_ts = ts, off

    def _recompute_bytes_since_index(self) -> None:
        _o, pos = self.offset_index.last_entry()
        self.bytes_since_last_index_entry = self.size - pos if self.offset_index.entries else self.size

    # -- lifecycle ----------------------------------------------------------------------
    def make_active(self) -> None:
        """A reopened last segment becomes appendable: grow the indexes back."""
        self.await_trim()   # (a rolled segment again the last after a truncation)
        self.active = True
        self.handle.pin()   # Kafka-like: the active segment's log stays open
        self.offset_index.make_writable(self.config.segment_index_bytes)
        self.time_index.make_writable(self.config.segment_index_bytes)
        if self.size and self.bytes_since_last_index_entry == 0:
            self._recompute_bytes_since_index()

    def on_become_inactive(self, trim_later: bool = True) -> None:
        """Roll: record the segment's max timestamp in the time index (so retention and
        ListOffsets find it after a restart), trim indexes and a preallocated file (the
        file on the fill-ahead thread unless ``trim_later`` is False)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        if trim_later and self._fill is not None and not self._fill.zeros:
            self._fill.retire()   # (an allocation never changes the file's length)
            self._fill = None
        else:
            self._stop_fill()     # zeros lengthen the file: none may land after the trim
        self._trim_file(trim_later)
        self.active = False
        self.handle.unpin()

    def _trim_file(self, later: bool = False) -> None:
        """The file to the log's length: cuts zeros written ahead, and releases blocks
        allocated past the end (kbroker.log.fill_ahead; a truncation to the same length does,
        also those a crash left behind). ``later``: blocks past an end the file already has
        are released on the fill-ahead thread (a roll)."""
        self.await_trim()
        if self.handle.closed:
            return
        fd = self.handle.fileno()
        if os.fstat(fd).st_size != self.size:
            # zeros or a preallocated length past the log: cut now, before the next segment
            # takes appends, or a crash in between leaves a segment that ends in zeros ahead
            # of the log's end, and recovery stops the log there
            os.ftruncate(fd, self.size)
        elif fill_ahead.ALLOCATE:
            if later:
                self._trim_job = fill_ahead.truncate_later(fd, self.size)
            else:
                os.ftruncate(fd, self.size)

    def await_trim(self) -> None:
        """Before the file is truncated again: the roll's trim has run (else it could
        lengthen the file back over the new end)."""
        job, self._trim_job = self._trim_job, None
        if job is not None:
            job.result()

    def flush(self) -> None:
        if not self.handle.closed:
            os.fsync(self.handle.fileno())  # also when evicted: dirty pages are the inode's
        self.offset_index.flush()
        self.time_index.flush()

    def dup_fds(self, with_indexes: bool) -> list[int]:
        """Duplicates of the descriptors to fsync from another thread (group commit); the
        caller closes them. Duplicates, because the cache may close the originals at once."""
        if self.handle.closed:
            return []
        fds = [os.dup(self.handle.fileno())]
        try:
            if with_indexes:
                for idx in (self.offset_index, self.time_index):
                    if idx._loaded and not idx._prealloc:
                        fds.append(os.dup(idx.fd))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def close(self) -> None:
        """Clean close: trims like a roll (the time index keeps its final entry)."""
        self._stop_fill()
        if self.active:
            try:
                self.on_become_inactive(trim_later=False)
            except OSError:  # pragma: no cover
                pass
        self.await_trim()
        self.offset_index.close_and_trim()
        self.time_index.close_and_trim()
        self.handle.close()

    def detach_descriptors(self) -> None:
        """Before another thread closes this segment: out of the descriptor cache."""
        self._stop_fill()
        for h in (self.handle, self.offset_index._h, self.time_index._h):
            h.detach()

    def close_handles_only(self) -> None:
        self._stop_fill()
        self.offset_index.close()
        self.time_index.close()
        self.handle.close()

    def change_suffix(self, new_suffix: str, defer=None) -> None:
        """Rename the three files (e.g. to ``.deleted`` or from ``.cleaned``). Open
        descriptors stay valid. ``defer(renames)``: the renames [(old, new)] run later
        (a worker thread, in order) instead of now; the paths change at once."""
        d, b = self.dir, self.base_offset
        if defer is not None:
            # the files move later, in another thread: re-opening by path would miss them
            # (the log's regions may still be sent; nothing reads a doomed segment's indexes)
            self.handle.pin()
            self.offset_index.close()
            self.time_index.close()
        renames = [(log_file(d, b, self.suffix), log_file(d, b, new_suffix))]
        self.handle.path = log_file(d, b, new_suffix)
        for idx, fn in ((self.offset_index, index_file), (self.time_index, time_index_file)):
            old, new = fn(d, b, self.suffix), fn(d, b, new_suffix)
            renames.append((old, new))
            idx.path = new
        self.suffix = new_suffix
        if defer is not None:
            defer(renames)
            return
        os.replace(*renames[0])
        for old, new in renames[1:]:
            if os.path.exists(old):
                os.replace(old, new)

    def delete_files(self, defer=None) -> None:
        """Unlink the files. The log descriptor is left to the FileHandle's last reference
        (regions in flight keep reading the unlinked file), which hands it to a thread of its
        own (``fd_cache.CLOSER``: that close frees the blocks); the indexes' descriptors go
        there now.
        ``defer(paths)``: the unlinks run later (a worker thread) instead of now."""
        self._stop_fill()
        self.offset_index.close_for_delete()
        self.time_index.close_for_delete()
        if not self.handle.closed:
            self.handle.doom()   # regions in flight keep reading the unlinked file
        d, b, s = self.dir, self.base_offset, self.suffix
        paths = (log_file(d, b, s), index_file(d, b, s), time_index_file(d, b, s))
        if defer is not None:
            defer(paths)
            return
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
