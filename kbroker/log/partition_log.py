"""PartitionLog: one partition's segmented log in Kafka's on-disk format.

Owned by one task (asyncio: no locks). Methods take ``now_ms``; nothing reads a clock.

- ``append``: validate each batch header + CRC32C (no per-record work), assign offsets by
  rewriting baseOffset (and partitionLeaderEpoch) in the caller's buffer, then ONE pwrite.
- ``read``: FileRegions for sendfile, from the whole batch holding the offset, at least one
  batch, never past ``max_offset``.
- recovery after an unclean shutdown: re-scan from the recovery point, truncate at the first
  torn/corrupt batch, rebuild indexes, report what was dropped.
- retention (time, size, log start offset) and roll (size, time, index full).
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from kbroker.wire import records as _records
from kbroker.wire.records import RecordBatch, iter_batches

from . import segment as _seg
from .checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    LeaderEpochCache,
    PartitionMetadataFile,
)
from . import aio_fsync
from .commit_chain import follow_rounds
from .config import INT_MAX, LogConfig
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedMessageFormatError,
)
from .flush_stats import FlushStats
from .segment import FileRegion, LogSegment, SegmentRecovery

log = logging.getLogger(__name__)

# ListOffsets special timestamps
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

ORIGIN_CLIENT = "client"          # a producer: all of Kafka's client rules apply
ORIGIN_COORDINATOR = "coordinator"  # group/txn coordinator: may write control batches
ORIGIN_REPLICATION = "replication"  # follower: offsets kept as sent


def parse_topic_partition(dirname: str) -> tuple[str, int]:
    """``my-topic-3`` -> (``my-topic``, 3)."""
    name = os.path.basename(os.path.normpath(dirname))
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a partition directory name: {name!r}")
    return topic, int(part)


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    batches: list  # RecordBatch views over the caller's buffer (offsets assigned)
    records_count: int = 0  # sum of lastOffsetDelta+1 over the batches
    valid_bytes: int = 0
    flush_required: bool = False  # flush.messages reached: schedule/await log.sync()
    rolled: bool = False


class ReadResult:
    """File regions to send. Has ``size`` and no buffer protocol, so the wire Writer treats
    it as a separate chunk (see DEVELOPERS.md)."""

    __slots__ = ("regions", "size", "fetch_offset", "first_batch_offset")

    def __init__(self, regions: list[FileRegion], fetch_offset: int,
                 first_batch_offset: int = -1) -> None:
        self.regions = regions
        self.size = sum(r.size for r in regions)
        self.fetch_offset = fetch_offset
        self.first_batch_offset = first_batch_offset

    def to_bytes(self) -> bytes:
        return b"".join(r.read() for r in self.regions)

    def sendfile(self, out_fd: int) -> int:
        """Blocking helper: send every region to ``out_fd``; returns bytes sent."""
        total = 0
        for r in self.regions:
            pos, left = r.position, r.size
            while left > 0:
                n = os.sendfile(out_fd, r.file.fileno(), pos, left)
                if n == 0:
                    raise KafkaStorageError("segment file shorter than the region")
                pos += n
                left -= n
                total += n
        return total

    def __repr__(self) -> str:
        return f"ReadResult(size={self.size}, regions={len(self.regions)}, offset={self.fetch_offset})"


EMPTY_REGIONS: list[FileRegion] = []


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int  # -1 when unknown


@dataclass
class RecoveryReport:
    """What opening the log found. ``dropped_bytes`` > 0 means data was cut."""

    clean_shutdown: bool
    recovered_segments: int = 0
    dropped_bytes: int = 0  # every byte cut, zero-filled tails included
    zero_tail_bytes: int = 0  # of which a zero-filled tail (preallocated, never written)
    truncated_at_offset: int | None = None  # log end offset after the cut
    deleted_segments: list[int] = field(default_factory=list)  # base offsets removed
    reason: str | None = None
    segment_reports: list[SegmentRecovery] = field(default_factory=list)
    rebuilt_indexes: list[int] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        """Data was lost: something other than a zero-filled tail was cut."""
        return self.dropped_bytes > self.zero_tail_bytes or bool(self.deleted_segments)


class _Validated(NamedTuple):
    batches: list
    records_count: int


class PartitionLog:
    """See module docstring. Build with ``PartitionLog.open``."""

    def __init__(self, directory: str, config: LogConfig, topic: str, partition: int) -> None:
        self.dir = directory
        self.config = config
        self.topic = topic
        self.partition = partition
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        # () -> callable or None (a weak method: its owner holds this log): called after
        # DeleteRecords / retention move the log start
        self.on_start_moved = None
        self._leo = 0
        self._recovery_point = 0
        self._high_watermark = 0
        self._pending_deletes: list[LogSegment] = []
        self._unflushed_messages = 0
        self.last_flush_ms = 0
        self._roll_flush_pending: list[LogSegment] = []
        self._roll_flush_in_flight: list[LogSegment] = []  # fsync running in the IO thread
        self._rolled_flushed: list[LogSegment] = []  # closed segments fsynced above the recovery point
        self.io = None  # kbroker.log.background.BackgroundIO (LogManager sets it), or None
        self._sync_waiters: list[tuple[int, asyncio.Future]] = []
        self._sync_task: asyncio.Task | None = None
        self.sync_rounds = 0  # fsync batches run by sync() (group commit)
        self._round_started_ns = 0  # when the group-commit round now running began
        self.flush_stats = FlushStats()   # the LogManager's shared one (open's flush_stats)
        self._durable_offset = 0  # below it, the log data is fsynced (group commit)
        self._sync_floor: int | None = None   # an fsync round in flight covers at most this
        self._sync_requested = 0  # the highest offset an append asked to be fsynced (sync_soon)
        # bumped when the active file may change under a worker thread's follow-on fsync
        # rounds (roll, truncation, close): they stop (kbroker.log.commit_chain)
        self._commit_gen = 0
        self._aio_refused = False   # this log's filesystem refused a native AIO fdatasync
        self.closed = False
        self.recovery: RecoveryReport = RecoveryReport(clean_shutdown=True)
        self.fresh = False   # opened as a new partition in a directory the open made (open(new=True))
        self.leader_epoch_cache = LeaderEpochCache(None)
        self.topic_id: str | None = None
        # set by the cleaner; where the uncleaned part starts (cleaner-offset-checkpoint)
        self.first_dirty_offset: int | None = None
        # set by the transaction layer: the cleaner never goes past an open transaction
        self.first_unstable_offset: int | None = None
        # set by the cleaner: when the earliest retained tombstone's delete horizon passes
        self.tombstone_horizon_ms: int | None = None

    # ====================================================================== open
    @classmethod
    def open(cls, dir_path: str, config: LogConfig | None = None, now_ms: int = 0, *,
             recovery_point: int = 0, log_start_offset: int | None = None,
             had_clean_shutdown: bool = False, high_watermark: int | None = None,
             topic: str | None = None, partition: int | None = None,
             topic_id: str | None = None, io=None, flush_stats: FlushStats | None = None,
             new: bool = False) -> "PartitionLog":
        """Open (creating if needed) the partition directory ``dir_path``.

        Without ``had_clean_shutdown``, every segment from the one holding
        ``recovery_point`` to the end is re-scanned; the result is in ``log.recovery``.
        ``high_watermark`` defaults to the log end offset (the replication layer owns it).
        ``new``: a new partition's log. If this call makes its directory, nothing is read
        from it (``log.fresh``; an empty directory holds nothing to recover, no epochs, no
        topic id): the directory scans and failed opens of a partition's files were ~30 of
        the ~40 system calls of creating one, each a GIL hand-over in the creating thread.
        If the directory exists it opens as any other.
        """
        config = config or LogConfig()
        if topic is None or partition is None:
            t, p = parse_topic_partition(dir_path)
            topic = t if topic is None else topic
            partition = p if partition is None else partition
        fresh = False
        if new:
            try:
                os.mkdir(dir_path)
                fresh = True
            except FileExistsError:
                pass
        if not fresh:
            os.makedirs(dir_path, exist_ok=True)
        self = cls(dir_path, config, topic, partition)
        self.fresh = fresh
        self.io = io
        if flush_stats is not None:
            self.flush_stats = flush_stats
        self.last_flush_ms = now_ms
        epochs = os.path.join(dir_path, LEADER_EPOCH_CHECKPOINT)
        if fresh:
            self._start_empty(now_ms, log_start_offset, recovery_point,
                              RecoveryReport(clean_shutdown=had_clean_shutdown), fresh=True)
            self.leader_epoch_cache = LeaderEpochCache(epochs, [])
            self.leader_epoch_cache.io = io
            self.topic_id = None
        else:
            self._load(now_ms, recovery_point, log_start_offset, had_clean_shutdown)
            self.leader_epoch_cache = LeaderEpochCache.load(epochs)
            self.leader_epoch_cache.io = io   # (before the trims below: they may write through it)
            # An epoch begun at the log end with nothing written yet (a leader of an idle
            # partition) is trimmed on every open; writing and fsyncing the file for it here cost
            # ~4 ms per partition at start-up (Kafka flushes this trim asynchronously).
            self.leader_epoch_cache.truncate_from_end(self._leo, flush=False)
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            md = PartitionMetadataFile(os.path.join(dir_path, PARTITION_METADATA))
            try:
                self.topic_id = md.read()
            except Exception:
                self.topic_id = None
        if topic_id is not None and topic_id != self.topic_id:
            self.set_topic_id(topic_id)
        hw = self._leo if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self._log_start_offset), self._leo)
        return self

    def set_topic_id(self, topic_id: str) -> None:
        md = PartitionMetadataFile(os.path.join(self.dir, PARTITION_METADATA))
        if self.io is not None:
            # Kafka records the id and flushes the file from its scheduler (maybeFlush)
            self.io.write_file(self.dir, PARTITION_METADATA, md.text(topic_id))
        else:
            md.write(topic_id)
        self.topic_id = topic_id

    def set_io(self, io) -> None:
        """Use ``io`` (a BackgroundIO, or None: synchronous) for checkpoint writes."""
        if io is None:
            self.leader_epoch_cache.wait_flushed()
        self.io = io
        self.leader_epoch_cache.io = io

    def _load(self, now_ms: int, recovery_point: int, log_start_offset: int | None,
              clean: bool) -> None:
        d = self.dir
        names = os.listdir(d)
        report = RecoveryReport(clean_shutdown=clean)
        # 1. leftovers of deletes and cleaning that a crash interrupted
        swaps = []
        for n in names:
            p = os.path.join(d, n)
            if n.endswith(_seg.DELETED_SUFFIX) or n.endswith(_seg.CLEANED_SUFFIX) or n.endswith(".tmp"):
                _unlink(p)
            elif n.endswith(_seg.LOG_SUFFIX + _seg.SWAP_SUFFIX):
                swaps.append(int(n.split(".")[0]))
            elif n.endswith(_seg.SWAP_SUFFIX):
                _unlink(p)  # index swaps: rebuilt below
        bases = sorted(int(n.split(".")[0]) for n in names
                       if n.endswith(_seg.LOG_SUFFIX) and n.split(".")[0].isdigit())
        rebuild: set[int] = set()
        for sb in sorted(swaps):
            # a cleaned segment that replaced [sb, end): finish the swap (Kafka does too)
            seg = LogSegment(d, sb, self.config, now_ms, suffix=_seg.SWAP_SUFFIX)
            r = seg.recover(self._max_batch_size())
            end = r.next_offset
            seg.offset_index.close()
            seg.time_index.close()
            for b in list(bases):
                if sb <= b < end or b == sb:
                    for fn in (_seg.log_file, _seg.index_file, _seg.time_index_file):
                        _unlink(fn(d, b))
                    bases.remove(b)
            seg.change_suffix("")
            seg.handle.close()
            bases.append(sb)
            rebuild.add(sb)
        bases.sort()
        # 2. index files without a log file
        live = {_seg.filename_prefix(b) for b in bases}
        for n in os.listdir(d):
            if (n.endswith(_seg.INDEX_SUFFIX) or n.endswith(_seg.TIMEINDEX_SUFFIX)) \
                    and n.split(".")[0] not in live:
                _unlink(os.path.join(d, n))
        # 3. open segments (indexes map lazily)
        for b in bases:
            seg = LogSegment(d, b, self.config, now_ms)
            self._segments.append(seg)
            self._bases.append(b)
        if not self._segments:
            self._start_empty(now_ms, log_start_offset, recovery_point, report)
            return
        # 4. recovery
        max_batch = self._max_batch_size()
        if not clean:
            i = max(bisect.bisect_right(self._bases, recovery_point) - 1, 0)
            stop_at: int | None = None
            for j in range(i, len(self._segments)):
                seg = self._segments[j]
                limit = self._bases[j + 1] if j + 1 < len(self._bases) else None
                r = seg.recover(max_batch, limit)
                report.recovered_segments += 1
                report.segment_reports.append(r)
                if j != len(self._segments) - 1:
                    seg.on_become_inactive()  # final time index entry, trimmed indexes
                if r.truncated_bytes:
                    report.dropped_bytes += r.truncated_bytes
                    if r.zero_tail:
                        report.zero_tail_bytes += r.truncated_bytes
                    report.reason = f"segment {seg.base_offset}: {r.reason} at position {r.position}"
                    stop_at = j
                    break
            if stop_at is not None:
                for seg in self._segments[stop_at + 1:]:
                    report.dropped_bytes += seg.size
                    report.deleted_segments.append(seg.base_offset)
                    seg.delete_files()
                del self._segments[stop_at + 1:]
                del self._bases[stop_at + 1:]
        # 5. segments whose indexes we did not rebuild: cheap sanity check
        recovered = {r.base_offset for r in report.segment_reports}
        for seg in self._segments:
            if seg.base_offset in recovered:
                continue
            if seg.base_offset in rebuild or not seg.sanity_check_indexes():
                seg.rebuild_indexes()
                report.rebuilt_indexes.append(seg.base_offset)
        # 6. the active segment
        last = self._segments[-1]
        last.make_active()
        self._leo = last.next_offset
        if len(self._segments) > 1 and last.size == 0:
            self._leo = max(self._leo, last.base_offset)
        first_base = self._segments[0].base_offset
        lso = first_base if log_start_offset is None else max(log_start_offset, first_base)
        self._log_start_offset = min(lso, self._leo)
        self._recovery_point = self._leo if clean else min(max(recovery_point, 0), self._leo)
        if report.dropped_bytes:
            report.truncated_at_offset = self._leo
        if report.dropped_bytes and not report.damaged:
            log.info("%s-%d: recovery trimmed a zero-filled tail of %d bytes; log end offset %d",
                     self.topic, self.partition, report.dropped_bytes, self._leo)
        elif report.dropped_bytes:
            log.warning(
                "%s-%d: recovery dropped %d bytes (%s); deleted segments %s; log end offset now %d",
                self.topic, self.partition, report.dropped_bytes, report.reason,
                report.deleted_segments, self._leo)
        elif not clean:
            log.info("%s-%d: recovered %d segment(s), nothing dropped, log end offset %d",
                     self.topic, self.partition, report.recovered_segments, self._leo)
        self.recovery = report

    def _max_batch_size(self) -> int:
        return max(self.config.max_message_bytes, 64 << 20)

    def _start_empty(self, now_ms: int, log_start_offset: int | None, recovery_point: int,
                     report: RecoveryReport, fresh: bool = False) -> None:
        """An empty log starting at ``log_start_offset`` (else the recovery point): one new
        active segment (``fresh``: in a directory this open made, where no stale index files
        can be)."""
        start = log_start_offset if log_start_offset is not None else max(recovery_point, 0)
        self._add_segment(LogSegment(self.dir, start, self.config, now_ms, create=True, active=True, fresh=fresh))
        self._log_start_offset = start
        self._leo = start
        self._recovery_point = start
        self.recovery = report

    def _add_segment(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        self._segments.insert(i, seg)
        self._bases.insert(i, seg.base_offset)

    # ====================================================================== state
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._high_watermark = min(max(value, self._log_start_offset), self._leo)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for s in self._segments:
            s.config = config

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self._log_start_offset}, "
                f"end={self._leo}, segments={len(self._segments)})")

    # ====================================================================== append
    def append(self, buf, now_ms: int, *, leader_epoch: int | None = None,
               origin: str = ORIGIN_CLIENT) -> AppendInfo:
        """Append the batches in ``buf`` as leader: offsets from the log end offset.

        ``buf`` should be writable (bytearray / writable memoryview): baseOffset,
        partitionLeaderEpoch (when ``leader_epoch`` is given) and, for LogAppendTime
        topics, maxTimestamp+CRC are rewritten in it before it is written, in one pwrite.
        (A read-only buffer is copied once.)
        """
        self._check_open()
        mv = _as_bytes_view(buf)
        if mv.readonly:
            mv = memoryview(bytearray(mv))
        v = self._validate(mv, now_ms, origin)
        batches = v.batches
        if not batches:
            return AppendInfo(self._leo, self._leo - 1, -1, -1, -1, self._log_start_offset, [])
        total = len(mv)
        cfg = self.config
        first = self._leo
        off = first
        lat = cfg.log_append_time
        max_ts = -1
        off_of_max = first
        for b in batches:
            b.base_offset = off
            if leader_epoch is not None:
                b.partition_leader_epoch = leader_epoch
            off += b.last_offset_delta + 1
            if lat:
                b.set_log_append_time(now_ms)
            elif b.timestamp_type == _records.LOG_APPEND_TIME:
                # a client may not claim LogAppendTime on a CreateTime topic
                b.set_max_timestamp(_records.CREATE_TIME, b.max_timestamp)
            if b.max_timestamp > max_ts:
                max_ts = b.max_timestamp
                off_of_max = off - 1
        last = off - 1
        rolled = self._maybe_roll(total, max_ts, first, last, now_ms)
        self._segments[-1].append(mv, batches, last)
        self._leo = off
        if leader_epoch is not None and leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first)
        self._unflushed_messages += v.records_count
        return AppendInfo(
            first_offset=first,
            last_offset=last,
            max_timestamp=now_ms if lat else max_ts,
            offset_of_max_timestamp=first if lat else off_of_max,
            log_append_time=now_ms if lat else -1,
            log_start_offset=self._log_start_offset,
            batches=batches,
            records_count=v.records_count,
            valid_bytes=total,
            flush_required=self._unflushed_messages >= cfg.flush_messages,
            rolled=rolled,
        )

    def append_as_follower(self, buf, now_ms: int) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs.
        A trailing partial batch is ignored (Kafka trims it); offsets must not go back."""
        self._check_open()
        mv = _as_bytes_view(buf)
        batches = []
        valid = 0
        try:
            for b in iter_batches(mv):
                if not b.verify_crc():
                    raise CorruptRecordError(f"CRC mismatch in batch at offset {b.base_offset}")
                batches.append(b)
                valid += b.size
        except _records.TruncatedRecordError:
            pass
        except _records.UnsupportedMagicError as e:
            raise UnsupportedMessageFormatError(str(e)) from None
        except _records.CorruptRecordError as e:
            raise CorruptRecordError(str(e)) from None
        if not batches:
            return AppendInfo(self._leo, self._leo - 1, -1, -1, -1, self._log_start_offset, [])
        prev_next = self._leo
        max_ts, off_of_max, count = -1, -1, 0
        for b in batches:
            if b.base_offset < prev_next:
                raise InvalidRecordError(
                    f"out of order offsets: batch at {b.base_offset} but log end is {prev_next}")
            prev_next = b.next_offset
            count += b.last_offset_delta + 1
            if b.max_timestamp > max_ts:
                max_ts, off_of_max = b.max_timestamp, b.last_offset
        first = batches[0].base_offset
        last = batches[-1].last_offset
        data = mv[:valid]
        rolled = self._maybe_roll(valid, max_ts, first, last, now_ms)
        self._segments[-1].append(data, batches, last)
        self._leo = last + 1
        for b in batches:
            e = b.partition_leader_epoch
            if e > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(e, b.base_offset)
        self._unflushed_messages += count
        return AppendInfo(first, last, max_ts, off_of_max, -1, self._log_start_offset, batches,
                          count, valid, self._unflushed_messages >= self.config.flush_messages,
                          rolled)

    def _validate(self, mv: memoryview, now_ms: int, origin: str) -> _Validated:
        cfg = self.config
        total = len(mv)
        client = origin == ORIGIN_CLIENT
        try:
            # framing, magic, CRC32C and (for clients) Kafka's header rules, per batch
            batches = _records.validate_produce_records(mv, from_client=client)
        except _records.InvalidRecordError as e:
            raise InvalidRecordError(str(e)) from None
        except _records.CorruptRecordError as e:
            raise CorruptRecordError(str(e)) from None
        count = 0
        check_ts = not cfg.log_append_time
        max_size = cfg.max_message_bytes
        for b in batches:
            if b.size > max_size:
                raise RecordTooLargeError(
                    f"The record batch size in the append to {self.topic}-{self.partition} is "
                    f"{b.size} bytes which exceeds the maximum configured value of {max_size}.")
            n = b.last_offset_delta + 1
            if n <= 0:
                raise InvalidRecordError(f"invalid lastOffsetDelta {b.last_offset_delta}")
            if check_ts:
                self._check_timestamps(b, now_ms)
            count += n
        if cfg.compact:
            self._check_keys(batches)
        if total > cfg.segment_bytes:
            raise RecordBatchTooLargeError(
                f"Message batch size is {total} bytes in append to partition "
                f"{self.topic}-{self.partition} which exceeds the maximum configured segment "
                f"size of {cfg.segment_bytes}.")
        return _Validated(batches, count)

    def _check_keys(self, batches: list) -> None:
        """Compacted topics: every record needs a key (Kafka's LogValidator.validateKey).
        The only per-record pass of a leader append, and only on compacted topics."""
        bad: list[int] = []
        i = 0
        for b in batches:
            if b.is_control:
                continue
            try:
                bad += [i + j for j in b.keyless_records()]
                i += b.records_count
            except _records.CorruptRecordError as e:
                raise CorruptRecordError(str(e)) from None
            except _records.CodecError as e:
                raise CorruptRecordError(f"invalid records in batch: {e}") from None
        if bad:
            msg = (f"Compacted topic cannot accept message without key in topic partition "
                   f"{self.topic}-{self.partition}.")
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(bad)} record errors in "
                f"total, and only showing the first three errors at most: "
                f"{[(j, msg) for j in bad[:3]]}",
                [(j, msg) for j in bad])

    def _check_timestamps(self, b: RecordBatch, now_ms: int) -> None:
        """Kafka checks every record's timestamp; we check the batch's first (base) and
        max timestamp, which is what a header-only validation can see."""
        cfg = self.config
        before, after = cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms
        for ts in (b.base_timestamp, b.max_timestamp):
            if ts == _records.NO_TIMESTAMP:
                continue
            if ts < now_ms - before or ts > now_ms + after:
                raise InvalidTimestampError(
                    f"Timestamp {ts} of message with offset {b.base_offset} is out of range. "
                    f"The timestamp should be within [{now_ms - before}, {now_ms + after}]")

    # ====================================================================== roll
    def _maybe_roll(self, size: int, max_ts: int, first_offset: int, last_offset: int,
                    now_ms: int) -> bool:
        seg = self._segments[-1]
        cfg = self.config
        if seg.size > 0 and (
            seg.size > cfg.segment_bytes - size
            or seg.time_waited_for_roll(now_ms, max_ts) > cfg.max_segment_ms - cfg.segment_jitter_ms
            or seg.offset_index.is_full()
            or seg.time_index.is_full()
            or last_offset - seg.base_offset > INT_MAX
        ):
            self.roll(now_ms, first_offset)
            return True
        if seg.size == 0 and last_offset - seg.base_offset > INT_MAX:
            self.roll(now_ms, first_offset)  # follower jumped far ahead: start there
            return True
        return False

    def roll(self, now_ms: int, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(log end offset, ``expected_next_offset``)."""
        self._check_open()
        new_base = max(self._leo, expected_next_offset or 0)
        seg = self._segments[-1]
        if seg.base_offset == new_base and seg.size == 0:
            return seg  # already rolled: the active segment is empty and starts there
        if seg.size == 0:
            # empty active segment at another offset (a follower jumped ahead): replace it
            self._segments.pop()
            self._bases.pop()
            seg.delete_files()
        else:
            seg.on_become_inactive()
            self._roll_flush_pending.append(seg)
        if _exists_segment(self.dir, new_base):
            # leftover files at that name (e.g. truncated earlier): never append to them
            for fn in (_seg.log_file, _seg.index_file, _seg.time_index_file):
                _unlink(fn(self.dir, new_base))
        self._commit_gen += 1
        new = LogSegment(self.dir, new_base, self.config, now_ms, create=True, active=True)
        self._add_segment(new)
        if self._leo < new_base:
            self._leo = new_base
        return new

    # ====================================================================== read
    def _floor_index(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> ReadResult:
        """Regions holding the batches from the one containing ``offset``.

        At most ``max_bytes`` (but the first batch whole when ``min_one_message``), never
        including a batch at or past ``max_offset`` (the high watermark or last stable
        offset; default: log end offset). A region may end inside a batch when max_bytes
        cuts it (as Kafka does; clients drop a partial trailing batch), but never inside the
        first: without ``min_one_message`` a first batch larger than max_bytes reads nothing."""
        self._check_open()
        leo = self._leo
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"Received request for offset {offset} for partition {self.topic}-"
                f"{self.partition}, but we only have log segments in the range "
                f"{self._log_start_offset} to {leo}.")
        limit = leo if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return ReadResult(EMPTY_REGIONS, offset)
        regions: list[FileRegion] = []
        remaining = max_bytes
        i = max(self._floor_index(offset), 0)
        segs = self._segments
        first_batch = -1
        target = offset
        while i < len(segs) and (remaining > 0 or (not regions and min_one_message)):
            seg = segs[i]
            if seg.base_offset >= limit:
                break
            t = seg.translate_offset(target)
            if t is None:
                i += 1
                continue
            pos, base, bsize = t
            if base >= limit:
                break
            end = seg.size
            if limit < seg.next_offset:
                lt = seg.translate_offset(limit, pos)
                if lt is not None:
                    end = lt[0]
            avail = end - pos
            if avail <= 0:
                break
            n = min(avail, remaining)
            if not regions:
                first_batch = base
                if min_one_message and bsize > remaining:
                    n = min(bsize, avail)  # the first batch whole, even past max_bytes (KIP-74)
                elif not min_one_message and n < bsize:
                    # a cut first batch alone is no progress (the Java consumer gives up on it):
                    # nothing, as Kafka's fetch answers (ReplicaManager, firstEntryIncomplete)
                    return ReadResult(EMPTY_REGIONS, offset)
            if n <= 0:
                break
            regions.append(FileRegion(seg.handle, pos, n))
            remaining -= n
            if n < avail or end < seg.size:
                break
            target = seg.next_offset
            i += 1
        return ReadResult(regions, offset, first_batch)

    # ====================================================================== timestamps
    def offset_for_timestamp(self, timestamp: int, max_offset: int | None = None
                             ) -> TimestampAndOffset | None:
        """ListOffsets: the first offset whose record timestamp >= ``timestamp``, or the
        special values EARLIEST (-2), LATEST (-1: the log end offset; the caller substitutes
        the high watermark / LSO), MAX_TIMESTAMP (-3), EARLIEST_LOCAL (-4).
        None when there is no such offset below ``max_offset``."""
        self._check_open()
        cache = self.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            o = self._log_start_offset
            return TimestampAndOffset(-1, o, cache.epoch_for_offset(o))
        if timestamp in (LATEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
            o = self._leo if max_offset is None else min(self._leo, max_offset)
            return TimestampAndOffset(-1, o, cache.latest_epoch)
        limit = self._leo if max_offset is None else min(self._leo, max_offset)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_offset(limit)
        if timestamp < 0:
            return None
        lso = self._log_start_offset
        for i, seg in enumerate(self._segments):
            if i + 1 < len(self._bases) and self._bases[i + 1] <= lso:
                continue
            if seg.max_timestamp < timestamp:
                continue
            ts, off = seg.time_index.lookup_below(timestamp)
            _o, pos = seg.offset_index.lookup(off)
            for _p, b in seg.iter_batches(pos, chunk=64 << 10):
                if b.base_offset >= limit:
                    return None
                if b.max_timestamp < timestamp or b.last_offset < self._log_start_offset:
                    continue
                for r in b.records():
                    if r.timestamp >= timestamp and r.offset >= self._log_start_offset:
                        if r.offset >= limit:
                            return None
                        return TimestampAndOffset(r.timestamp, r.offset, b.partition_leader_epoch)
            # max_timestamp said it is here; a stale index could bring us here: go on
        return None

    def _max_timestamp_offset(self, limit: int) -> TimestampAndOffset | None:
        best: LogSegment | None = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        target_ts = best.max_timestamp
        _o, pos = best.offset_index.lookup(best.offset_of_max_timestamp)
        for start in (pos, 0):
            for _p, b in best.iter_batches(start, chunk=64 << 10):
                if b.max_timestamp != target_ts:
                    continue
                if b.timestamp_type == _records.LOG_APPEND_TIME:
                    off = b.base_offset
                else:
                    off = next((r.offset for r in b.records() if r.timestamp == target_ts),
                               b.last_offset)
                if off >= limit or off < self._log_start_offset:
                    return None
                return TimestampAndOffset(target_ts, off, b.partition_leader_epoch)
        return None

    # ====================================================================== truncation
    def truncate_to(self, offset: int, now_ms: int = 0) -> bool:
        """Remove everything at and after ``offset`` (the whole batch containing it).
        Returns False when there was nothing to remove."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            return False
        if offset < self._segments[0].base_offset or offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        doomed = [s for s in self._segments if s.base_offset >= offset and s is not self._segments[0]]
        if doomed:
            self._fail_sync_waiters(offset)
            keep = len(self._segments) - len(doomed)
            del self._segments[keep:]
            del self._bases[keep:]
            self._delete_segments(doomed, now_ms, "truncation")
        seg = self._segments[-1]
        if not seg.active:
            seg.make_active()
        seg.truncate_to(offset)
        self._leo = seg.next_offset
        self._after_truncate()
        return True

    def _after_truncate(self) -> None:
        self._fail_sync_waiters(self._leo)
        self._durable_offset = min(self._durable_offset, self._leo)
        self._sync_requested = min(self._sync_requested, self._leo)
        self._recovery_point = min(self._recovery_point, self._leo)
        self._high_watermark = min(self._high_watermark, self._leo)
        self._log_start_offset = min(self._log_start_offset, self._leo)
        self.leader_epoch_cache.truncate_from_end(self._leo)
        if self.first_dirty_offset is not None:
            self.first_dirty_offset = min(self.first_dirty_offset, self._leo)
        self._roll_flush_pending = [s for s in self._roll_flush_pending if s in self._segments]
        self._rolled_flushed = []  # the last segment may be written again: no stale marks

    def truncate_fully_and_start_at(self, offset: int, now_ms: int = 0) -> None:
        """Delete every segment; the log restarts empty at ``offset``."""
        self._check_open()
        self._fail_sync_waiters(offset)
        old = self._segments
        self._segments, self._bases = [], []
        self._delete_segments(old, now_ms, "full truncation")
        self._add_segment(LogSegment(self.dir, offset, self.config, now_ms, create=True, active=True))
        self._leo = offset
        self._log_start_offset = offset
        self._recovery_point = offset
        self._durable_offset = offset
        self._sync_requested = offset
        self._high_watermark = offset
        self.leader_epoch_cache.clear()
        self.first_dirty_offset = None
        self._roll_flush_pending = []
        self._rolled_flushed = []
        self._unflushed_messages = 0

    # ====================================================================== retention
    def delete_records(self, before: int) -> int:
        """DeleteRecords: move the log start offset to ``before`` (<= high watermark).
        Segments below it go in the next ``delete_old_segments`` run. Returns the new
        log start offset."""
        self._check_open()
        if before < 0 or before > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {before} of partition "
                f"{self.topic}-{self.partition} since it is larger than the high watermark "
                f"{self._high_watermark}")
        self.maybe_increment_log_start_offset(before)
        return self._log_start_offset

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        if new_start <= self._log_start_offset:
            return False
        self._log_start_offset = min(new_start, self._leo)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        moved = self.on_start_moved() if self.on_start_moved is not None else None
        if moved is not None:
            moved()
        return True

    def delete_old_segments(self, now_ms: int, max_segments: int | None = None) -> int:
        """One retention pass (Kafka's deleteOldSegments): retention.ms and
        retention.bytes when cleanup.policy has delete, log-start-offset breach always.
        Segments are renamed ``.deleted`` and removed after file.delete.delay.ms (see
        ``delete_pending``). Returns the number of segments deleted. ``max_segments``
        bounds each rule's deletions (the sliced pass calls again while it returns that many)."""
        self._check_open()
        cfg = self.config
        n = 0
        if cfg.delete:
            if cfg.retention_ms >= 0:
                n += self._delete_while(
                    lambda s, nxt: now_ms - s.largest_timestamp() > cfg.retention_ms,
                    now_ms, "retention.ms", max_segments)
            if cfg.retention_bytes >= 0:
                diff = [self.size_in_bytes - cfg.retention_bytes]

                def size_pred(s: LogSegment, nxt) -> bool:
                    if diff[0] - s.size >= 0:
                        diff[0] -= s.size
                        return True
                    return False

                n += self._delete_while(size_pred, now_ms, "retention.bytes", max_segments)
        n += self._delete_while(
            lambda s, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset,
            now_ms, "log start offset", max_segments)
        return n

    def _delete_while(self, pred, now_ms: int, why: str, max_segments: int | None = None) -> int:
        segs = self._segments
        hw = self._high_watermark
        doomed = []
        for i, s in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            if nxt is None and s.size == 0:
                break
            if hw >= upper and pred(s, nxt):
                doomed.append(s)
                if len(doomed) == max_segments:
                    break
            else:
                break
        if not doomed:
            return 0
        if len(doomed) == len(segs):
            self.roll(now_ms)  # keep an active segment
        k = len(doomed)
        del self._segments[:k]
        del self._bases[:k]
        self._delete_segments(doomed, now_ms, why)
        self.maybe_increment_log_start_offset(self._segments[0].base_offset)
        gone = set(map(id, doomed))
        self._roll_flush_pending = [s for s in self._roll_flush_pending if id(s) not in gone]
        return k

    def _delete_segments(self, segs: Iterable[LogSegment], now_ms: int, why: str) -> None:
        segs = list(segs)
        # Retention renames in the IO thread (three renames per segment: hundreds of segments
        # held the loop for a quarter second). A compaction swap renames now: the cleaned
        # segment takes the old names right after.
        renames: list = []
        defer = renames.extend if self.io is not None and why != "compaction" else None
        for s in segs:
            if s.active:
                s.offset_index.trim_to_valid_size()
                s.time_index.trim_to_valid_size()
                s.active = False
            # its log stays open from now on, and its last close is the closer thread's: a
            # later compaction that renames a segment of the same base offset onto these
            # ``.deleted`` names unlinks them, and were the file closed, that rename would
            # free its blocks on the loop (with ``discard``, a wait for the device)
            if not s.handle.closed:
                s.handle.doom()
            try:
                s.change_suffix(_seg.DELETED_SUFFIX, defer=defer)
            except FileNotFoundError:  # pragma: no cover - already gone
                pass
            s.deleted_at_ms = now_ms
            self._pending_deletes.append(s)
        if renames:
            self.io.submit(_rename_files, renames)   # one job for the whole group
        if segs:
            log.info("%s-%d: deleting segments %s (%s)", self.topic, self.partition,
                     [s.base_offset for s in segs], why)
        if self.config.file_delete_delay_ms == 0:
            self.delete_pending(now_ms)

    def _replace_segments(self, old: list[LogSegment], new: LogSegment, now_ms: int) -> None:
        """Compaction swap: ``new`` (files ``.swap``) takes the place of the consecutive
        segments ``old``; they are renamed ``.deleted``, then ``new`` gets its real name
        (the order Kafka uses, so a crash in between is finished by ``open``)."""
        i = self._segments.index(old[0])
        assert self._segments[i:i + len(old)] == old, "segments to replace must be consecutive"
        del self._segments[i:i + len(old)]
        del self._bases[i:i + len(old)]
        self._delete_segments(old, now_ms, "compaction")
        new.change_suffix("")
        self._segments.insert(i, new)
        self._bases.insert(i, new.base_offset)
        self._roll_flush_pending = [s for s in self._roll_flush_pending if s not in old]

    def delete_pending(self, now_ms: int) -> int:
        """Remove ``.deleted`` files older than file.delete.delay.ms. Returns how many."""
        delay = self.config.file_delete_delay_ms
        due = [s for s in self._pending_deletes if now_ms - (s.deleted_at_ms or 0) >= delay]
        if not due:
            return 0
        gone = set(map(id, due))
        self._pending_deletes = [s for s in self._pending_deletes if id(s) not in gone]
        paths: list = []
        defer = paths.extend if self.io is not None else None
        for s in due:
            s.delete_files(defer=defer)
        if paths:
            self.io.submit(_unlink_files, paths)
        return len(due)

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_deletes)

    # ====================================================================== flush
    def _segments_from(self, offset: int) -> list[LogSegment]:
        i = max(self._floor_index(offset), 0)
        return self._segments[i:]

    def flush(self, offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync everything below ``offset`` (default: the log end) and move the recovery
        point there. Blocking; ``sync()`` is the asyncio group-commit version."""
        self._check_open()
        upto = self._leo if offset is None else min(offset, self._leo)
        if upto <= self._recovery_point:
            return
        started = time.monotonic_ns()
        for s in self._segments_from(self._recovery_point):
            if s.base_offset >= upto:
                break
            s.flush()
        self.flush_stats.flushed(started)
        self.leader_epoch_cache.wait_flushed()
        self._mark_flushed(upto, now_ms)

    def _mark_flushed(self, upto: int, now_ms: int | None) -> None:
        if upto > self._recovery_point:
            self._recovery_point = min(upto, self._leo)
        if upto >= self._leo:
            self._unflushed_messages = 0
        if now_ms is not None:
            self.last_flush_ms = now_ms
        rp = self._recovery_point
        self._roll_flush_pending = [s for s in self._roll_flush_pending if self._upper(s) > rp]

    def _upper(self, s: LogSegment) -> int:
        """End of ``s``'s offset range: the next segment's base (or the log end)."""
        i = bisect.bisect_right(self._bases, s.base_offset)
        return self._bases[i] if i < len(self._bases) else self._leo

    def flush_rolled(self) -> int:
        """fsync segments that rolled since the last call (Kafka flushes a segment when it
        rolls, asynchronously) and advance the recovery point to the active segment's base
        if everything before it is flushed. Returns the number of segments synced."""
        pending, self._roll_flush_pending = self._roll_flush_pending, []
        pending = [s for s in pending if s in self._segments]
        started = time.monotonic_ns()
        for s in pending:
            s.flush()
        if pending:
            self.flush_stats.flushed(started)
            self.leader_epoch_cache.wait_flushed()
            self._advance_after_rolled_flush(pending)
        return len(pending)

    def start_flush_rolled(self):
        """``flush_rolled`` off the event loop: queue the fsync of the segments rolled since
        the last call on ``self.io`` (through duplicated descriptors: retention may close a
        segment meanwhile). Returns (segments, concurrent future) or None; once the future
        is done, ``finish_flush_rolled(segments, ok)`` moves the recovery point."""
        pending, self._roll_flush_pending = self._roll_flush_pending, []
        pending = [s for s in pending if s in self._segments]
        if not pending:
            return None
        dups: list[int] = []
        try:
            for s in pending:
                dups += s.dup_fds(with_indexes=True)
            fut = self.io.fsync_and_close(dups)
        except OSError:
            for fd in dups:
                os.close(fd)
            self._roll_flush_pending = pending + self._roll_flush_pending
            raise
        self._roll_flush_in_flight += pending
        return pending, fut

    def finish_flush_rolled(self, segments: list, ok: bool, took_ms: float | None = None) -> None:
        """``took_ms``: the fsyncs' time, as the IO thread measured it."""
        self._roll_flush_in_flight = [s for s in self._roll_flush_in_flight if s not in segments]
        if ok and took_ms is not None:
            self.flush_stats.add(took_ms)
        if self.closed:
            return
        if not ok:  # try again next time
            self._roll_flush_pending = [s for s in segments if s in self._segments] + self._roll_flush_pending
            return
        # The IO thread ran every earlier job first: a queued leader-epoch checkpoint is on
        # disk too (FIFO), so the recovery point may pass its entries.
        fut = self.leader_epoch_cache.pending
        if fut is not None and fut.done():
            self.leader_epoch_cache.pending = None
        self._advance_after_rolled_flush(segments)

    def _advance_after_rolled_flush(self, flushed: list) -> None:
        """Move the recovery point over the closed segments above it that are fsynced:
        up to the first one that is not (or the active segment)."""
        self._rolled_flushed += flushed
        rp = self._recovery_point
        done = self._rolled_flushed
        upto = None
        for s in self._segments[:-1]:
            upper = self._upper(s)
            if upper <= rp:
                continue
            if not any(s is f for f in done):
                break
            upto = upper
        if upto is not None:
            self._mark_flushed(upto, None)
        rp = self._recovery_point
        self._rolled_flushed = [f for f in self._rolled_flushed
                                if any(f is x for x in self._segments) and self._upper(f) > rp]

    def maybe_flush(self, now_ms: int) -> bool:
        """flush.ms / flush.messages policy (defaults: never; the OS writes back)."""
        cfg = self.config
        if self._leo <= self._recovery_point:
            self.last_flush_ms = now_ms
            return False
        if (self._unflushed_messages >= cfg.flush_messages
                or now_ms - self.last_flush_ms >= cfg.flush_ms):
            self.flush(now_ms=now_ms)
            return True
        return False

    def sync_soon(self, offset: int) -> None:
        """flush.messages reached by an append: start a group-commit fsync covering
        everything below ``offset`` instead of fsyncing on the event loop; whoever answers
        the append awaits ``sync(offset)`` when ``awaits_sync(offset)`` says so. Without a
        running loop (tools, tests): flush now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        # (raised only after the bytes are written: a worker thread's follow-on round reads it)
        self._sync_requested = max(self._sync_requested, offset)
        self._start_sync_loop(loop)

    def _start_sync_loop(self, loop) -> None:
        if self._sync_task is None or self._sync_task.done():
            self._sync_task = loop.create_task(self._sync_loop())
            self._sync_task.add_done_callback(_retrieve)   # failures reach the waiters

    def awaits_sync(self, offset: int) -> bool:
        """True if an append ending below ``offset`` asked for an fsync (``sync_soon``)
        that has not completed: its acknowledgement waits for it (flush.messages=1)."""
        return offset <= self._sync_requested and offset > max(self._recovery_point, self._durable_offset)

    async def sync(self, offset: int | None = None) -> None:
        """Group commit: return once everything below ``offset`` (default: the current
        log end) is fsynced. Concurrent callers share fsyncs: while one fsync runs (in a
        thread), new appends queue up and the next fsync covers all of them."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if self._add_sync_waiter(self._leo if offset is None else offset, fut):
            await fut

    def when_durable(self, offset: int, callback) -> None:
        """``callback(None)`` once everything below ``offset`` is fsynced (group commit, as
        ``sync``), or ``callback(KafkaStorageError)`` if that cannot happen; at once if it
        already is. For answers completed without a task (kbroker.handlers.deferred)."""
        if not self._add_sync_waiter(offset, _SyncCallback(callback)):
            callback(None)

    def _add_sync_waiter(self, target: int, waiter) -> bool:
        """Queue ``waiter`` (a future, or a _SyncCallback) for the round that makes
        ``target`` durable; False if it already is."""
        self._check_open()
        if target <= max(self._recovery_point, self._durable_offset):
            return False
        self._sync_waiters.append((target, waiter))
        self._start_sync_loop(asyncio.get_running_loop())
        return True

    async def _sync_loop(self) -> None:
        """Run fsync rounds until every requested end is durable. (Starting the first round
        at once from ``sync_soon`` instead of a task's first step measured the same.)"""
        loop = asyncio.get_running_loop()
        while self._sync_waiters or self._sync_requested > max(self._durable_offset, self._recovery_point):
            epoch_write = self.leader_epoch_cache.pending
            if epoch_write is not None:
                # the leader-epoch checkpoint is durable before the data it describes
                try:
                    await asyncio.wrap_future(epoch_write)
                except Exception:  # pragma: no cover - reported by the IO thread
                    pass
                if self.leader_epoch_cache.pending is epoch_write:
                    self.leader_epoch_cache.pending = None
            running, active = self._begin_round(loop)
            try:
                covered = await running
            except Exception as e:  # pragma: no cover - disk failure
                self._sync_floor = None
                waiters, self._sync_waiters = self._sync_waiters, []
                for _t, f in waiters:
                    if not f.done():
                        f.set_exception(KafkaStorageError(f"fsync failed: {e}"))
                return
            if covered is None:   # AIO rounds that answered their appends themselves
                self._sync_floor = None
                continue
            # a truncation during the fsync lowered the floor: what was appended after it
            # (below the round's end again) may have missed this round
            covered, self._sync_floor = min(self._sync_floor, covered), None
            self._round_done(covered, active)

    def _begin_round(self, loop) -> tuple[asyncio.Future, LogSegment]:
        """Start a round over everything appended so far: log data of every segment since
        the recovery point, indexes of the closed ones (the active segment's are rebuilt by
        recovery, so the recovery point stops at its base), fdatasync for the active log (it
        still writes the size an append changed), through duplicated descriptors (the cache
        may close the originals meanwhile). The active log alone goes through native AIO;
        otherwise a worker thread runs the round and its follow-ons. Returns the round's
        future (its end, see ``_aio_rounds``) and the active segment."""
        upto = self._leo
        active = self._segments[-1]
        self._round_started_ns = time.monotonic_ns()
        segs = [s for s in self._segments_from(self._recovery_point) if s.base_offset < upto]
        self._sync_floor = _NO_FLOOR
        gen = self._commit_gen
        jobs = []
        try:
            for s in segs:
                fds = s.dup_fds(with_indexes=s is not active)
                jobs += [(fd, i == 0 and s is active) for i, fd in enumerate(fds)]
            follow = jobs and jobs[-1][1]   # the active log is in this round
            aio = aio_fsync.for_loop(loop) if len(jobs) == 1 and follow and not self._aio_refused else None
            rounds = self._aio_rounds(aio, jobs[0][0], upto, gen, active) if aio else None
            if rounds is not None:
                return rounds, active
            chain_fd = os.dup(jobs[-1][0]) if follow else None
            return loop.run_in_executor(
                None, _sync_rounds, jobs, upto, chain_fd,
                lambda c: self._next_round_end(gen, c),
                lambda c: loop.call_soon_threadsafe(self._follow_round_done, gen, c, active)), active
        except OSError as e:  # pragma: no cover - out of descriptors
            for fd, _ in jobs:
                os.close(fd)
            failed = loop.create_future()
            failed.set_exception(e)
            return failed, active

    def _aio_rounds(self, aio, fd: int, upto: int, gen: int, active: LogSegment) -> asyncio.Future | None:
        """The active log's rounds through native AIO (kbroker.log.aio_fsync): commit_chain's
        follow-on rounds, run by the completion callback on the loop instead of a thread. Each
        round's end answers its appends and starts the next round at once if more was written
        to the same file. ``fd`` (a duplicate) is closed once the rounds end. The future gets
        None if the last round answered its appends too, else the end it made durable for
        the round loop to settle (after a truncation), or the fsync's error. None instead of
        a future if the kernel refuses the first round (``fd`` still open)."""
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        covering = upto

        def finish(result=None, error=None) -> None:
            os.close(fd)
            if not done.done():
                if error is not None:
                    done.set_exception(error)
                else:
                    done.set_result(result)

        def ended(err: int) -> None:
            nonlocal covering
            if err:
                finish(error=OSError(err, f"fdatasync: {os.strerror(err)}"))
                return
            nxt = self._next_round_end(gen, covering) if not self.closed else None
            if nxt is not None:
                try:   # the next round first: the disk does not wait for the answers
                    aio.fdatasync(fd, ended)
                except OSError:  # pragma: no cover - the round loop starts it instead
                    finish(covering)
                    return
                covering, prev = nxt, covering
                self._follow_round_done(gen, prev, active)
            elif self._follow_round_done(gen, covering, active):
                finish(None)   # answered here, not an iteration later
            else:   # truncated meanwhile: the round loop settles it with the floor
                finish(covering)

        try:
            aio.fdatasync(fd, ended)
        except OSError as e:   # the thread does these rounds
            if e.errno != errno.EAGAIN:   # (EAGAIN: the loop's context is full just now)
                log.info("fsync rounds of %s run in a thread: %s", self.dir, e)
                self._aio_refused = True   # this file's filesystem refuses it: from now on
            return None
        return done

    def _next_round_end(self, gen: int, covered: int) -> int | None:
        """Worker thread (commit_chain), or an AIO round's end on the loop: the end of what
        was appended to the same active file since ``covered``, or None to stop. Reads
        loop-owned fields without a lock (atomic under the GIL), in this order: the loop
        raises ``_sync_requested`` only after the bytes are written, and bumps
        ``_commit_gen`` (or queues an epoch checkpoint) before it writes anywhere else, so a
        requested end read first is in this file if the generation read after it is
        unchanged."""
        want = self._sync_requested
        if self._commit_gen != gen or self.leader_epoch_cache.pending is not None:
            return None
        return want if want > covered else None

    def _follow_round_done(self, gen: int, covered: int, active: LogSegment) -> bool:
        """A follow-on round finished: answer its appends now, and say so. (After a roll
        or truncation the round loop settles it with the truncation floor.)"""
        if gen == self._commit_gen and not self.closed:
            self._round_done(covered, active)
            return True
        return False

    def _round_done(self, covered: int, active: LogSegment) -> None:
        """Everything below ``covered`` is fsynced: answer the waiters it covers. (A chained
        round began when the one before it ended, so each round's time runs from there.)"""
        self.sync_rounds += 1
        started, self._round_started_ns = self._round_started_ns, time.monotonic_ns()
        self._durable_offset = max(self._durable_offset, min(covered, self._leo))
        self._mark_flushed(min(covered, active.base_offset, self._leo), None)
        if covered >= self._leo:
            self._unflushed_messages = 0
        rp = max(self._durable_offset, self._recovery_point)
        still = []
        answered = 0
        for t, f in self._sync_waiters:
            if f.done():
                continue
            if t <= rp:
                f.set_result(None)
                answered += 1
            else:
                still.append((t, f))
        self._sync_waiters = still
        self.flush_stats.commit_round(started, answered)

    def _fail_sync_waiters(self, new_end: int) -> None:
        """The log was truncated to ``new_end``: waiters above it fail, and an fsync round
        in flight counts for nothing above it."""
        self._commit_gen += 1
        if self._sync_floor is not None:
            self._sync_floor = min(self._sync_floor, new_end)
        still = []
        for t, f in self._sync_waiters:
            if t > new_end and not f.done():
                f.set_exception(KafkaStorageError("log truncated before the append was flushed"))
            elif not f.done():
                still.append((t, f))
        self._sync_waiters = still

    # ====================================================================== lifecycle
    def close(self) -> None:
        """Clean close: trims the active segment's indexes. Does not fsync: call
        ``flush()`` first for a clean shutdown (LogManager.shutdown does)."""
        if self.closed:
            return
        for s in self._segments:
            s.close()
        for s in self._pending_deletes:
            s.delete_files()
        self._pending_deletes = []
        self.closed = True
        self._commit_gen += 1

    def detach_descriptors(self) -> None:
        """Before handing the log to another thread (which closes it): its files leave the
        descriptor cache, so the event loop's evictions never close one under that thread."""
        for s in self._segments + self._pending_deletes:
            s.detach_descriptors()

    def close_without_trim(self) -> None:
        """Drop everything without the clean-close work (tests: simulate a crash)."""
        for s in self._segments:
            s.close_handles_only()
        self.closed = True

    def delete_all_files(self) -> None:
        """Remove the partition directory's contents (the log must be closed)."""
        for n in os.listdir(self.dir):
            _unlink(os.path.join(self.dir, n))
        try:
            os.rmdir(self.dir)
        except OSError:  # pragma: no cover
            pass

    # ====================================================================== helpers
    def batches(self, start_offset: int | None = None, max_offset: int | None = None):
        """Iterate RecordBatch views from ``start_offset`` (debugging, tests, cleaner)."""
        start = self._log_start_offset if start_offset is None else start_offset
        limit = self._leo if max_offset is None else max_offset
        i = max(self._floor_index(start), 0)
        for seg in self._segments[i:]:
            t = seg.translate_offset(start)
            if t is None:
                continue
            for _p, b in seg.iter_batches(t[0]):
                if b.base_offset >= limit:
                    return
                yield b


def _as_bytes_view(buf) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    return mv


_NO_FLOOR = 1 << 63   # no truncation during the round in flight


class _SyncCallback:
    """A group-commit waiter that calls a function (``when_durable``) where the others are
    futures (``sync``): the same three methods the waiter list uses."""

    __slots__ = ("_fn",)

    def __init__(self, fn) -> None:
        self._fn = fn

    def done(self) -> bool:
        return self._fn is None

    def set_result(self, _value) -> None:
        self._call(None)

    def set_exception(self, error: BaseException) -> None:
        self._call(error)

    def _call(self, error) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            try:
                fn(error)
            except Exception:  # pragma: no cover - the caller's own bug
                log.exception("a group-commit callback failed")


def _retrieve(task) -> None:
    if not task.cancelled():
        task.exception()


def _sync_rounds(jobs, upto: int, chain_fd: int | None, probe, notify) -> int:
    """Worker thread: the round the loop started (``jobs``), then, with ``chain_fd`` (the
    active log), the follow-on rounds of commit_chain. Returns the end made durable."""
    try:
        _fsync_jobs(jobs)
    except BaseException:
        if chain_fd is not None:
            os.close(chain_fd)
        raise
    if chain_fd is None:
        return upto
    return follow_rounds(chain_fd, upto, probe, notify)


def _fsync_jobs(jobs) -> None:
    """fsync (fdatasync for the active log) and close duplicated descriptors."""
    err = None
    for fd, data_only in jobs:
        try:
            if data_only:
                os.fdatasync(fd)
            else:
                os.fsync(fd)
        except OSError as e:
            err = err or e
        finally:
            os.close(fd)
    if err is not None:
        raise err


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:  # pragma: no cover
        pass


def _exists_segment(d: str, base: int) -> bool:
    return os.path.exists(_seg.log_file(d, base))


__all__ = [
    "PartitionLog",
    "AppendInfo",
    "ReadResult",
    "FileRegion",
    "TimestampAndOffset",
    "RecoveryReport",
    "LogError",
    "parse_topic_partition",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
]


def _rename_files(renames) -> None:
    """IO thread: a segment's renames, in order (the index files may not exist)."""
    for old, new in renames:
        try:
            os.replace(old, new)
        except FileNotFoundError:
            pass


def _unlink_files(paths) -> None:
    for p in paths:
        _unlink(p)
