"""The replicated log under a RaftNode: v2 record batches with offsets and epochs set.

Framing is the metadata log's (``kbroker.kraft.runtime.MetadataLog``): one RecordBatch per
append, partition leader epoch = the Raft epoch, null keys, values = framed records; Raft's
own records (LeaderChangeMessage, VotersRecord, KRaftVersionRecord) are control batches.
``build_batch`` / ``build_control_batch`` make them; only the leader builds batches, followers
store the leader's bytes unchanged.

``RaftLog`` (protocol):
    start_offset, end_offset       log start (moves up when cleaned below a snapshot) and end
    start_epoch                    epoch of the snapshot the log starts after (0 at offset 0)
    flushed_offset                 below it the log survives a crash
    last_epoch                     epoch of the last batch (start_epoch if empty)
    append(data)                   batches whose base offset is end_offset, epochs set
    read(offset, max_bytes)        whole batches from the one holding offset (>= 1 batch)
    end_offset_for_epoch(epoch)    (epoch, end offset) of the largest epoch <= epoch
    epoch_for_offset(offset)       epoch of the batch holding offset
    truncate_to(offset), reset_to(offset, epoch) (empty, starting after a snapshot),
    advance_start(offset) (cleaning below a snapshot), batches(from_offset)
    flush()                        make everything below end_offset durable, now or later:
                                   flushed_offset rises when it is done, and then
                                   ``on_flushed()`` (if set) is called
``MemoryRaftLog`` keeps the batches in a list (and can lose what was not flushed, for the
simulation's crashes; with ``later_flushes`` a flush completes when the simulation says);
``DiskRaftLog`` is ``kbroker.log.PartitionLog`` for ``__cluster_metadata-0``: on an event
loop its fsync runs off the loop (an fsync of the metadata log held the loop for 35 ms
while thousands of partition directories were being created), elsewhere at once.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
from typing import Callable, Iterator, Protocol

from kbroker.log.checkpoint import LeaderEpochCache
from kbroker.wire.records import BatchBuilder, RecordBatch, control_key, iter_batches

log = logging.getLogger("kbroker.kraft")

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = METADATA_TOPIC + "-0"


def build_batch(base_offset: int, epoch: int, values: list[bytes], now_ms: int) -> bytes:
    b = BatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for v in values:
        b.append(key=None, value=v, timestamp=now_ms)
    return b.build()


def build_control_batch(base_offset: int, epoch: int, records: list[tuple[int, bytes]],
                        now_ms: int) -> bytes:
    """A control batch of (ControlRecordType, value) records, as Kafka writes Raft's own."""
    b = BatchBuilder(is_control=True, base_offset=base_offset, partition_leader_epoch=epoch)
    for ctype, value in records:
        b.append(key=control_key(ctype), value=value, timestamp=now_ms)
    return b.build()


def control_type(key) -> int:
    return int.from_bytes(bytes(key[2:4]), "big", signed=True)


class RaftLog(Protocol):
    start_offset: int
    start_epoch: int
    end_offset: int
    flushed_offset: int
    on_flushed: Callable[[], None] | None

    @property
    def last_epoch(self) -> int: ...
    def append(self, data: bytes) -> None: ...
    def read(self, offset: int, max_bytes: int) -> bytes: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...
    def epoch_for_offset(self, offset: int) -> int: ...
    def truncate_to(self, offset: int) -> None: ...
    def flush(self) -> None: ...
    def reset_to(self, offset: int, epoch: int) -> None: ...
    def advance_start(self, offset: int) -> None: ...
    def batches(self, from_offset: int) -> Iterator[RecordBatch]: ...


class _EpochIndex:
    """The epoch bookkeeping both logs share (LeaderEpochCache + the snapshot start)."""

    cache: LeaderEpochCache
    start_offset: int
    start_epoch: int
    end_offset: int

    @property
    def last_epoch(self) -> int:
        e = self.cache.latest_epoch
        return e if e >= 0 else self.start_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        if epoch == self.last_epoch:
            return epoch, self.end_offset
        if epoch < self.start_epoch or not self.cache.entries:
            return self.start_epoch, self.start_offset
        e, off = self.cache.end_offset_for(epoch, self.end_offset)
        if e < 0:                      # epoch above everything here
            return self.last_epoch, self.end_offset
        if e < self.start_epoch or off < self.start_offset:
            return self.start_epoch, self.start_offset
        return e, off

    def epoch_for_offset(self, offset: int) -> int:
        if offset < self.start_offset or not self.cache.entries:
            return self.start_epoch
        return self.cache.epoch_for_offset(offset)


class MemoryRaftLog(_EpochIndex):
    def __init__(self, later_flushes: bool = False) -> None:
        self.cache = LeaderEpochCache(None)
        self._batches: list[bytes] = []
        self._bases: list[int] = []
        self.start_offset = 0
        self.start_epoch = 0
        self.end_offset = 0
        self.flushed_offset = 0
        self.on_flushed: Callable[[], None] | None = None
        # later_flushes: flush() only asks (flush_wanted); complete_flush() does it
        self.later_flushes = later_flushes
        self.flush_wanted = 0

    def append(self, data: bytes) -> None:
        for b in iter_batches(data):
            if b.base_offset != self.end_offset:
                raise ValueError(f"batch at {b.base_offset}, log end is {self.end_offset}")
            self._batches.append(bytes(b.buffer()))
            self._bases.append(b.base_offset)
            self.cache.assign(b.partition_leader_epoch, b.base_offset)
            self.end_offset = b.next_offset

    def _index(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset >= self.end_offset:
            return b""
        i = max(self._index(offset), 0)
        out = bytearray(self._batches[i])
        for data in self._batches[i + 1:]:
            if len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)

    def batches(self, from_offset: int) -> Iterator[RecordBatch]:
        i = max(self._index(from_offset), 0)
        for data in self._batches[i:]:
            yield RecordBatch(data)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        i = max(self._index(offset), 0)     # the whole batch holding offset goes, as on disk
        del self._batches[i:]
        del self._bases[i:]
        self.end_offset = max(self.start_offset, RecordBatch(self._batches[-1]).next_offset
                              if self._batches else self.start_offset)
        self.cache.truncate_from_end(self.end_offset)
        self.flushed_offset = min(self.flushed_offset, self.end_offset)
        # what is appended after a truncation is not in a flush asked for before it
        self.flush_wanted = min(self.flush_wanted, self.end_offset)

    def flush(self) -> None:
        if not self.later_flushes:
            self.flushed_offset = self.end_offset
        elif self.end_offset > self.flushed_offset:
            self.flush_wanted = max(self.flush_wanted, self.end_offset)

    def complete_flush(self) -> None:
        """(later_flushes) The flush asked for is done."""
        if self.flush_wanted > self.flushed_offset:
            self.flushed_offset = min(self.flush_wanted, self.end_offset)
            if self.on_flushed is not None:
                self.on_flushed()

    def lose_unflushed(self) -> None:
        """A crash: what was not flushed is gone, and so is a flush under way."""
        self.truncate_to(self.flushed_offset)
        self.flush_wanted = self.flushed_offset

    def reset_to(self, offset: int, epoch: int) -> None:
        self._batches.clear()
        self._bases.clear()
        self.cache.clear()
        self.start_offset = self.end_offset = self.flushed_offset = self.flush_wanted = offset
        self.start_epoch = epoch

    def advance_start(self, offset: int) -> None:
        """Drop whole batches below ``offset`` (a snapshot covers them)."""
        while self._batches and RecordBatch(self._batches[0]).next_offset <= offset:
            self._batches.pop(0)
            self._bases.pop(0)
        if offset > self.start_offset:
            self.start_epoch = self.epoch_for_offset(offset - 1)
            self.start_offset = offset
            self.cache.truncate_from_start(offset)


class DiskRaftLog(_EpochIndex):
    """``__cluster_metadata-0`` as a kbroker PartitionLog (Kafka's segment files)."""

    def __init__(self, plog, start_epoch: int = 0) -> None:
        self.plog = plog
        self.start_epoch = start_epoch
        # what a freshly opened log holds survived: it is as durable as it gets
        self.flushed_offset = plog.log_end_offset
        self.on_flushed: Callable[[], None] | None = None
        self._flush_asked = self.flushed_offset   # the end of the latest flush under way

    @classmethod
    def open(cls, metadata_dir: str, now_ms: int = 0, start_epoch: int = 0, config=None):
        from kbroker.log.partition_log import PartitionLog
        plog = PartitionLog.open(os.path.join(metadata_dir, METADATA_PARTITION_DIR), config, now_ms)
        return cls(plog, start_epoch)

    @property
    def cache(self) -> LeaderEpochCache:
        return self.plog.leader_epoch_cache

    @property
    def start_offset(self) -> int:
        return self.plog.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.plog.log_end_offset

    def append(self, data: bytes) -> None:
        if data:
            self.plog.append_as_follower(data, 0)

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset >= self.end_offset:
            return b""
        return self.plog.read(offset, max_bytes).to_bytes()

    def batches(self, from_offset: int) -> Iterator[RecordBatch]:
        return self.plog.batches(from_offset)

    def truncate_to(self, offset: int) -> None:
        self.plog.truncate_to(offset)
        self.flushed_offset = min(self.flushed_offset, self.end_offset)
        self._flush_asked = min(self._flush_asked, self.end_offset)

    def flush(self) -> None:
        end = self.end_offset
        if end <= max(self.flushed_offset, self._flush_asked):
            return                        # durable, or a flush under way covers it
        try:
            asyncio.get_running_loop()
        except RuntimeError:              # (tools, the simulation: no loop to keep free)
            self.plog.flush()
            self.flushed_offset = self._flush_asked = end
            return
        self._flush_asked = end
        # the partition log's group commit: native AIO or a worker thread, never this thread;
        # it answers once everything now below ``end`` is durable (a truncation meanwhile
        # makes it wait for what is appended in its place)
        self.plog.when_durable(end, lambda error: self._flushed(end, error))

    def _flushed(self, end: int, error: Exception | None) -> None:
        if error is not None:
            if end <= self.end_offset:    # (else truncated below it: nothing failed)
                log.error("flushing the metadata log to offset %d failed: %s", end, error)
            self._flush_asked = self.flushed_offset   # the next poll asks again
            return
        durable = min(end, self.end_offset)
        if durable > self.flushed_offset:
            self.flushed_offset = durable
            if self.on_flushed is not None:
                self.on_flushed()

    def reset_to(self, offset: int, epoch: int) -> None:
        self.plog.truncate_fully_and_start_at(offset)
        self.start_epoch = epoch
        self.flushed_offset = self._flush_asked = offset

    def advance_start(self, offset: int) -> None:
        if offset > self.start_offset:
            self.start_epoch = self.epoch_for_offset(offset - 1)
            self.plog.high_watermark = max(self.plog.high_watermark, min(offset, self.end_offset))
            self.plog.maybe_increment_log_start_offset(offset)
            self.plog.delete_old_segments(0)

    def close(self) -> None:
        if not self.plog.closed and self.end_offset > self.flushed_offset:
            self.plog.flush()             # (a flush may still be under way off the loop)
        self.plog.close()
