"""One partition hosted on this node: the only writer of its log, producer state,
transaction index and high watermark.

Every write goes through one of these methods, so producer state, the aborted-transaction
index and the high watermark can never drift from the log:

* ``append_as_leader``  client produces and coordinator writes (offsets, txn log, groups);
* ``append_marker``     COMMIT/ABORT control batches (WriteTxnMarkers, the local coordinator);
* ``append_as_follower`` batches fetched from the leader, offsets and epochs kept;
* ``truncate_to``       a follower dropping a divergent tail (producer state and the txn
                        index are rebuilt from the last snapshot below the cut);
* ``advance_high_watermark``  the only place the high watermark moves (never backwards).

While this node leads with no replication tracking (``leader_state is None``: a one-replica
partition), every append is committed at once: the high watermark follows the log end.
"""

from __future__ import annotations

import logging
import os
import uuid
import weakref
from typing import Any

from kbroker.log.errors import LogError
from kbroker.txn.partition_txns import MarkerResult, PartitionTxns
from kbroker.txn.producer_state import ProducerStateManager
from kbroker.wire.errors import Errors
from kbroker.wire.records import CodecError as RecordsCodecError
from kbroker.wire.records import iter_batches

log = logging.getLogger("kbroker.partition")

_PID_OFFSET = 43
ORIGIN_COORDINATOR = "coordinator"


def _first_producer_id(buf) -> int:
    """The first batch's producerId (-1 for non-idempotent producers, who skip the producer
    state check); -1 for anything too short to hold one (the log reports the corruption)."""
    if len(buf) < _PID_OFFSET + 8:
        return -1
    return int.from_bytes(buf[_PID_OFFSET:_PID_OFFSET + 8], "big", signed=True)


class AppendResult:
    __slots__ = ("error", "message", "base_offset", "log_append_time", "log_start_offset",
                 "record_errors", "last_offset", "records_count")

    def __init__(self, error: int, base_offset: int = -1, log_append_time: int = -1,
                 log_start_offset: int = -1, message: str | None = None,
                 record_errors: list | None = None, last_offset: int = -1,
                 records_count: int = 0) -> None:
        self.error = error
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.message = message
        self.record_errors = record_errors  # [(record index, message | None)] (Produce v8+)
        self.last_offset = last_offset      # the append is committed once the HW passes it
        self.records_count = records_count  # records in the request (MessagesInPerSec)


class Partition:
    __slots__ = ("topic", "index", "topic_id", "log", "producer_state", "leader_epoch",
                 "waiters", "config", "txns", "leader_id", "partition_epoch", "replicas",
                 "isr", "leader_state", "hw_listeners", "__weakref__")

    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, plog: Any,
                 producer_state: ProducerStateManager, leader_epoch: int, config: Any) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = plog
        self.producer_state = producer_state
        self.leader_epoch = leader_epoch
        # futures of waiting fetches, AppendWatch (replica manager) and parked fetch-session
        # partitions (fetch_sessions._Watch):
        # wake() calls done() and set_result() on each
        self.waiters: set = set()
        self.config = config
        self.txns: PartitionTxns | None = None  # LSO, aborted-txn index, markers (kbroker.txn)
        # role, as the metadata image says (kbroker.replication.roles)
        self.leader_id = -1
        self.partition_epoch = 0
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.leader_state = None   # kbroker.replication.leader_state.LeaderState while leading
        self.hw_listeners: list = []  # called with the partition after the HW moves
        # a new log start is news for parked fetch sessions; weakly held, so that a deleted
        # partition and its log are no cycle: frozen out of the collector's reach
        # (kbroker.gc_policy), a cycle would never be freed
        plog.on_start_moved = weakref.WeakMethod(self.wake)

    # -- reads -------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        if self.txns is not None:
            return self.txns.last_stable_offset(self.log.high_watermark)
        first = self.producer_state.first_undecided_offset()
        hw = self.log.high_watermark
        return hw if first is None else min(first, hw)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def latest_epoch(self) -> int:
        return self.log.latest_epoch

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in this log, its end offset); (-1, -1) if none."""
        return self.log.leader_epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """This replica leads from ``start_offset`` in ``epoch`` (leader-epoch cache)."""
        self.log.leader_epoch_cache.assign(epoch, start_offset)

    def set_config(self, config: Any) -> None:
        """A new effective topic config (ConfigRecord, or broker defaults changed)."""
        self.config = config
        self.log.update_config(config)

    # -- the high watermark ------------------------------------------------------------------

    def advance_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (capped at the log end); never back.
        Wakes fetches waiting on the partition when it moves."""
        plog = self.log
        old = plog.high_watermark
        new = min(offset, plog.log_end_offset)
        if new <= old:
            return False
        plog.high_watermark = new
        if self.txns is not None:
            self.txns.on_high_watermark(new)
        self.wake()
        for listener in self.hw_listeners:
            listener(self)
        return True

    def _after_leader_append(self) -> None:
        ls = self.leader_state
        if ls is None:  # one replica: committed on append
            self.advance_high_watermark(self.log.log_end_offset)
        else:
            self.advance_high_watermark(ls.high_watermark(self.log.log_end_offset))
        if self.waiters:
            self.wake()  # replica fetches wait for the log end, not the high watermark

    # -- writes ------------------------------------------------------------------------------

    def append_as_leader(self, buf, now_ms: int, *, origin: str = "client") -> AppendResult:
        """Check producer state, append (the log validates headers and CRCs), commit producer
        state, advance the high watermark. Never awaits. ``buf`` must be writable: the log
        rewrites base offsets in place. Coordinator batches are trusted: their producer
        state is loaded from the appended batches instead of checked."""
        plog = self.log
        psm = self.producer_state
        check = None
        trusted = origin == ORIGIN_COORDINATOR
        if not trusted and _first_producer_id(buf) >= 0:
            try:
                check = psm.check_batches(iter_batches(buf), now_ms)
            except RecordsCodecError as e:
                return AppendResult(getattr(e, "error_code", Errors.CORRUPT_MESSAGE), message=str(e),
                                    log_start_offset=plog.log_start_offset)
            if not check.ok:
                if check.is_duplicate:
                    dup = check.duplicate
                    lat = dup.timestamp if self.config.log_append_time else -1
                    return AppendResult(0, dup.first_offset, lat, plog.log_start_offset,
                                        last_offset=dup.last_offset,
                                        records_count=dup.offset_delta + 1)
                return AppendResult(check.error, message=check.message, log_start_offset=plog.log_start_offset)
        try:
            info = plog.append(buf, now_ms, leader_epoch=self.leader_epoch, origin=origin)
        except LogError as e:
            return AppendResult(e.error_code, message=str(e), log_start_offset=plog.log_start_offset,
                                record_errors=getattr(e, "record_errors", None))
        if info.rolled:
            self._snapshot_at_roll(info.first_offset)
        if check is not None:
            psm.commit(check.pending, info.first_offset,
                       log_append_time_ms=info.log_append_time if info.log_append_time >= 0 else None)
        elif trusted and _first_producer_id(buf) >= 0:
            psm.load_from_batches(info.batches)
        if info.flush_required:
            plog.sync_soon(info.last_offset + 1)   # group commit; the produce handler awaits it
        self._after_leader_append()
        return AppendResult(0, info.first_offset, info.log_append_time, info.log_start_offset,
                            last_offset=info.last_offset, records_count=info.records_count)

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, now_ms: int) -> MarkerResult:
        """One COMMIT/ABORT marker, validated against producer state (kbroker.txn)."""
        r = self.txns.append_marker(self.log, producer_id, producer_epoch, coordinator_epoch,
                                    commit, now_ms, leader_epoch=self.leader_epoch)
        if not r.error:
            self._after_leader_append()
        return r

    def append_as_follower(self, buf, now_ms: int):
        """Batches fetched from the leader (offsets and epochs kept), applied to producer
        state and the txn index. Returns the log's AppendInfo."""
        info = self.log.append_as_follower(buf, now_ms)
        if not info.batches:
            return info
        if info.rolled:
            self._snapshot_at_roll(info.first_offset)
        if self.txns is not None:
            self.txns.apply_batches(self.log, info.batches)
        else:
            self.producer_state.load_from_batches(info.batches)
        if info.flush_required:
            # off the loop, as a leader's: the fetcher's next Fetch waits for it (durable_wait)
            self.log.sync_soon(info.last_offset + 1)
        return info

    def durable_wait(self):
        """An awaitable for the fsync ``append_as_follower`` started (flush.messages
        reached), or None when nothing it appended waits for one."""
        end = self.log.log_end_offset
        return self.log.sync(end) if self.log.awaits_sync(end) else None

    def truncate_to(self, offset: int, now_ms: int) -> bool:
        """Drop everything at and after ``offset`` (a follower's divergent tail); producer
        state and the aborted-txn index are rebuilt from the last snapshot below the cut."""
        plog = self.log
        if not plog.truncate_to(offset, now_ms):
            # Nothing to cut, but an epoch this replica began as leader and never wrote in
            # must go, or the next fetch reports it and diverges again (Kafka does the same).
            plog.leader_epoch_cache.truncate_from_end(plog.log_end_offset)
            return False
        log.info("%s truncated to %d", self, offset)
        if self.txns is not None:
            self.txns.truncate_to(plog.log_end_offset)
            self.txns.recover(plog, now_ms)
        self.wake()
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        """The leader's log starts above everything here: restart empty at ``offset``."""
        self.log.truncate_fully_and_start_at(offset, now_ms)
        self.producer_state.truncate_fully_and_start_at(offset)
        if self.txns is not None:
            self.txns.truncate_to(-1)
            self.txns.indexes.retain_segments(s.base_offset for s in self.log.segments)
        self.wake()

    def _snapshot_at_roll(self, first_offset: int) -> None:
        psm = self.producer_state
        io = self.log.io
        if io is None:
            psm.take_snapshot(first_offset)
        else:
            # Kafka: takeSnapshot(sync=false) at roll, the fsync from its scheduler. The IO
            # thread runs it before the rolled segment's fsync (FIFO), so the recovery
            # point never passes a snapshot that is not on disk.
            path = psm.take_snapshot(first_offset, sync=False)
            if path is not None:
                io.fsync_file(self.log.dir, os.path.basename(path))

    # -- waiters -----------------------------------------------------------------------------

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"
