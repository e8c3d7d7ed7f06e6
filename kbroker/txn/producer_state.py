"""Per-partition idempotent producer state (Apache Kafka's ProducerStateManager).

One ``ProducerStateManager`` per partition log. It maps producer id -> ``ProducerStateEntry``
(epoch, metadata of the last five appended batches, coordinator epoch, first offset of the
transaction in progress, last timestamp) and decides, before an append, whether each batch of
a produce request is new, a retried duplicate, or an error.

The produce path is check, log append, commit, with no ``await`` in between (or the
partition's append lock held across the three); commit() raises StaleAppendError if the
state changed after the check::

    res = psm.check_batches(batches, now_ms)          # RecordBatch views of one partition's records
    if res.is_duplicate:   # retried batch: answer NONE with the ORIGINAL offsets, append nothing
        respond(NONE, base_offset=res.duplicate.first_offset,
                log_append_time=res.duplicate.timestamp if LogAppendTime topic else -1)
    elif res.error:        # OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH / INVALID_TXN_STATE / INVALID_RECORD
        respond(res.error)
    else:
        info = log.append(buf, now_ms)                 # assigns offsets
        psm.commit(res.pending, info.first_offset, log_append_time_ms=...)

The partition log drives the rest::

    psm = ProducerStateManager(partition_dir, producer_id_expiration_ms=...)
    start = psm.truncate_and_reload(log_start_offset, log_end_offset, now_ms)  # open / truncation
    psm.load_from_batches(batches from offset <= start up to the log end)    # replay
    psm.take_snapshot(new_segment_base_offset)    # at each segment roll, and at close
    psm.delete_snapshots_before(offset)           # with segments deleted by retention
    psm.remove_expired(now_ms)                    # periodically (Kafka: every 10 minutes)

Kafka semantics kept (storage/.../ProducerAppendInfo.java, ProducerStateEntry.java):

* duplicate = same epoch and exactly the (first_seq, last_seq) range of one of the last five
  batches; checked against committed state before anything else;
* epoch lower than the current one -> INVALID_PRODUCER_EPOCH;
* new (higher) epoch -> sequence must be 0, unless the producer is unknown;
* same epoch -> sequence must follow the last one (wrapping after Int32.MAX to 0);
* unknown producer (never seen, expired, or its state was lost) -> any sequence is accepted;
* batches with producer id -1 are not tracked.

One deliberate difference: within a single request, a second batch of the same producer must
follow the first one's sequence even when the producer was unknown (Kafka skips that check).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterable

from kbroker.txn.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    list_snapshots,
    read_snapshot_file,
    snapshot_path,
    write_snapshot_file,
)

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1
NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

# Kafka error codes (same values as kbroker.wire.errors.Errors; IntEnum members compare equal).
NONE = 0
CORRUPT_MESSAGE = 2
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_RECORD = 87


def increment_sequence(seq: int, increment: int) -> int:
    """seq + increment, wrapping from Int32.MAX to 0 (DefaultRecordBatch.incrementSequence)."""
    if seq > INT32_MAX - increment:
        return increment - (INT32_MAX - seq) - 1
    return seq + increment


def decrement_sequence(seq: int, decrement: int) -> int:
    if seq < decrement:
        return INT32_MAX - (decrement - seq) + 1
    return seq - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


# --------------------------------------------------------------------------------------------
# State


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch (Kafka's BatchMetadata)."""

    last_seq: int
    last_offset: int
    offset_delta: int  # last_offset - first_offset == last_seq - first_seq (mod wrap)
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """State of one producer id on one partition."""

    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batch_metadata")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH,
                 coordinator_epoch: int = -1, last_timestamp: int = NO_TIMESTAMP,
                 current_txn_first_offset: int | None = None,
                 batches: Iterable[BatchMetadata] = ()):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)

    # Kafka's accessors
    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def maybe_update_epoch(self, epoch: int) -> bool:
        if self.producer_epoch != epoch:
            self.batch_metadata.clear()
            self.producer_epoch = epoch
            return True
        return False

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batch_metadata:
            if b.last_seq == last_seq and b.first_seq == first_seq:
                return b
        return None

    def to_snapshot_entry(self) -> SnapshotEntry:
        return SnapshotEntry(
            producer_id=self.producer_id, epoch=self.producer_epoch, last_sequence=self.last_seq,
            last_offset=self.last_data_offset, offset_delta=self.last_offset_delta,
            timestamp=self.last_timestamp, coordinator_epoch=self.coordinator_epoch,
            current_txn_first_offset=(-1 if self.current_txn_first_offset is None
                                      else self.current_txn_first_offset),
        )

    @classmethod
    def from_snapshot_entry(cls, e: SnapshotEntry) -> "ProducerStateEntry":
        batches = ([BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)]
                   if e.last_offset >= 0 else [])
        return cls(e.producer_id, e.epoch, e.coordinator_epoch, e.timestamp,
                   e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
                   batches)

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset,
                                  self.batch_metadata)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return (self.producer_id, self.producer_epoch, self.coordinator_epoch,
                self.last_timestamp, self.current_txn_first_offset,
                list(self.batch_metadata)) == (
                other.producer_id, other.producer_epoch, other.coordinator_epoch,
                other.last_timestamp, other.current_txn_first_offset,
                list(other.batch_metadata))

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, "
                f"producer_epoch={self.producer_epoch}, "
                f"current_txn_first_offset={self.current_txn_first_offset}, "
                f"coordinator_epoch={self.coordinator_epoch}, "
                f"last_timestamp={self.last_timestamp}, batches={list(self.batch_metadata)})")


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a COMMIT/ABORT marker (for the transaction index, later)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


# --------------------------------------------------------------------------------------------
# The check / commit protocol


class CheckOutcome(Enum):
    OK = "ok"
    DUPLICATE = "duplicate"
    ERROR = "error"


@dataclass(slots=True)
class _Batch:
    producer_id: int  # -1: not tracked, still occupies offsets
    epoch: int
    last_seq: int
    offset_delta: int
    max_timestamp: int
    is_transactional: bool


@dataclass(slots=True)
class _Working:
    """Per-producer state as validated so far within one pending append."""

    epoch: int
    last_seq: int
    in_txn: bool


class StaleAppendError(RuntimeError):
    """commit() of a PendingAppend whose check ran against state that has changed since."""


class PendingAppend:
    """The validated batches of one produce request, waiting for the log to assign offsets."""

    __slots__ = ("_manager", "_generation", "now_ms", "_batches", "_working", "_done")

    def __init__(self, manager: "ProducerStateManager", now_ms: int):
        self._manager = manager
        self._generation = manager._generation
        self.now_ms = now_ms
        self._batches: list[_Batch] = []
        self._working: dict[int, _Working] = {}
        self._done = False

    @property
    def record_offsets(self) -> int:
        """How many offsets the checked batches span (sum of last_offset_delta + 1)."""
        return sum(b.offset_delta + 1 for b in self._batches)

    @property
    def producer_ids(self) -> set[int]:
        return {b.producer_id for b in self._batches if b.producer_id >= 0}

    def __len__(self) -> int:
        return len(self._batches)

    def __repr__(self) -> str:
        return f"PendingAppend(batches={len(self._batches)}, producers={sorted(self.producer_ids)})"


@dataclass(frozen=True, slots=True)
class CheckResult:
    outcome: CheckOutcome
    error: int = NONE  # Kafka error code; NONE for OK and DUPLICATE
    message: str = ""
    duplicate: BatchMetadata | None = None  # the original batch, for DUPLICATE
    pending: PendingAppend | None = None  # for OK: pass to commit()

    @property
    def ok(self) -> bool:
        return self.outcome is CheckOutcome.OK

    @property
    def is_duplicate(self) -> bool:
        return self.outcome is CheckOutcome.DUPLICATE


def _error(code: int, message: str) -> CheckResult:
    return CheckResult(CheckOutcome.ERROR, code, message)


# --------------------------------------------------------------------------------------------


class ProducerStateManager:
    """Producer state of one partition; optionally owns the partition directory's snapshots."""

    def __init__(self, log_dir: str | os.PathLike | None = None, *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 topic_partition: str = "", scan: bool = True):
        # scan=False: log_dir is new (a fresh partition log), so it holds no snapshots
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.topic_partition = topic_partition
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset of each transaction in progress -> producer id (for the LSO, later)
        self.ongoing_txns: dict[int, int] = {}
        self._generation = 0
        self.map_end_offset = 0  # state reflects every batch below this offset
        self._last_snap_offset = 0
        self._snapshots: dict[int, Path] = list_snapshots(self.log_dir) if self.log_dir and scan else {}

    # ---- read access ------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """The live map; do not mutate."""
        return self._producers

    @property
    def producer_id_count(self) -> int:
        return len(self._producers)

    def is_empty(self) -> bool:
        return not self._producers

    def first_undecided_offset(self) -> int | None:
        return min(self.ongoing_txns) if self.ongoing_txns else None

    # ---- check --------------------------------------------------------------------------

    def check(self, producer_id: int, producer_epoch: int, base_sequence: int,
              last_offset_delta: int, max_timestamp: int, *, now_ms: int,
              is_transactional: bool = False, is_control: bool = False,
              pending: PendingAppend | None = None) -> CheckResult:
        """Validate one client batch. To check several batches of one request, pass the
        previous OK result's ``pending`` back in; the returned pending holds them all.

        The caller must check every batch of a request and append only if all are OK.
        """
        if pending is None:
            pending = PendingAppend(self, now_ms)
        elif pending._manager is not self or pending._done:
            raise ValueError("pending append belongs to another manager or was committed")
        if last_offset_delta < 0:
            return _error(INVALID_RECORD, f"negative last offset delta {last_offset_delta}")
        if is_control:
            return _error(INVALID_RECORD, "clients are not allowed to write control records")
        if producer_id < 0:
            if is_transactional:
                return _error(INVALID_RECORD, "transactional batch without a producer id")
            pending._batches.append(_Batch(NO_PRODUCER_ID, producer_epoch, NO_SEQUENCE,
                                           last_offset_delta, max_timestamp, False))
            return CheckResult(CheckOutcome.OK, pending=pending)
        if base_sequence < 0:
            return _error(INVALID_RECORD, f"invalid sequence number {base_sequence} in record "
                                          f"batch with producerId {producer_id}")

        last_seq = increment_sequence(base_sequence, last_offset_delta)
        current = self._producers.get(producer_id)

        # A retry of one of the last five batches: answer with its original offsets.
        if current is not None:
            dup = current.find_duplicate(producer_epoch, base_sequence, last_seq)
            if dup is not None:
                return CheckResult(CheckOutcome.DUPLICATE, duplicate=dup)

        working = pending._working.get(producer_id)
        if working is not None:
            known_epoch, in_txn = working.epoch, working.in_txn
        elif current is not None:
            known_epoch = current.producer_epoch
            in_txn = current.current_txn_first_offset is not None
        else:
            known_epoch, in_txn = NO_PRODUCER_EPOCH, False

        if producer_epoch < known_epoch:
            return _error(INVALID_PRODUCER_EPOCH,
                          f"epoch of producer {producer_id} is {producer_epoch}, which is smaller "
                          f"than the last seen epoch {known_epoch}")
        if producer_epoch != known_epoch:
            if base_sequence != 0 and known_epoch != NO_PRODUCER_EPOCH:
                return _error(OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"invalid sequence number for new epoch of producer {producer_id}: "
                              f"{producer_epoch} (request epoch), {base_sequence} (seq. number), "
                              f"{known_epoch} (current producer epoch)")
        elif working is not None and working.last_seq != NO_SEQUENCE:
            if not in_sequence(working.last_seq, base_sequence):
                return _error(OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"out of order sequence number for producer {producer_id} within "
                              f"one request: {base_sequence} (incoming seq. number), "
                              f"{working.last_seq} (previous batch's last sequence)")
        elif current is not None and current.producer_epoch != NO_PRODUCER_EPOCH:
            if not in_sequence(current.last_seq, base_sequence):
                return _error(OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"out of order sequence number for producer {producer_id}: "
                              f"{base_sequence} (incoming seq. number), {current.last_seq} "
                              f"(current end sequence number)")
        # else: unknown producer (or known with no epoch): accept any sequence.

        if in_txn and not is_transactional:
            return _error(INVALID_TXN_STATE, f"expected transactional write from producer "
                                             f"{producer_id}")

        pending._batches.append(_Batch(producer_id, producer_epoch, last_seq, last_offset_delta,
                                       max_timestamp, is_transactional))
        pending._working[producer_id] = _Working(producer_epoch, last_seq,
                                                 in_txn or is_transactional)
        return CheckResult(CheckOutcome.OK, pending=pending)

    def check_batch(self, batch, now_ms: int, pending: PendingAppend | None = None) -> CheckResult:
        """check() for a kbroker.wire.records.RecordBatch view (or any object with its fields)."""
        return self.check(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                          batch.last_offset_delta, batch.max_timestamp, now_ms=now_ms,
                          is_transactional=batch.is_transactional, is_control=batch.is_control,
                          pending=pending)

    def check_batches(self, batches: Iterable, now_ms: int) -> CheckResult:
        """Check every batch of one partition's produce data. Returns the first non-OK result
        (DUPLICATE or ERROR: append nothing), else OK with the pending append of them all."""
        pending = PendingAppend(self, now_ms)
        result = CheckResult(CheckOutcome.OK, pending=pending)
        for batch in batches:
            result = self.check_batch(batch, now_ms, pending)
            if not result.ok:
                return result
        return result

    # ---- commit -------------------------------------------------------------------------

    def commit(self, pending: PendingAppend, first_offset: int, *,
               log_append_time_ms: int | None = None) -> list[int]:
        """Record the batches of ``pending`` after the log appended them from ``first_offset``
        (batches occupy consecutive offsets in the order they were checked). With
        ``log_append_time_ms`` (LogAppendTime topics) it replaces each batch's max timestamp.
        Call it for every OK result that was appended, even one with no idempotent batch (it
        advances map_end_offset). Returns the started transactions' first offsets."""
        if pending._manager is not self:
            raise ValueError("pending append belongs to another manager")
        if pending._done:
            raise ValueError("pending append already committed")
        if pending._generation != self._generation:
            raise StaleAppendError("producer state changed between check() and commit()")
        pending._done = True
        started: list[int] = []
        offset = first_offset
        for b in pending._batches:
            last_offset = offset + b.offset_delta
            if b.producer_id >= 0:
                ts = b.max_timestamp if log_append_time_ms is None else log_append_time_ms
                if self._append_data(b.producer_id, b.epoch, b.last_seq, offset, last_offset,
                                     ts, b.is_transactional):
                    started.append(offset)
            offset = last_offset + 1
        if pending._batches:
            self.map_end_offset = max(self.map_end_offset, offset)
        self._generation += 1
        return started

    def _append_data(self, producer_id: int, epoch: int, last_seq: int, first_offset: int,
                     last_offset: int, timestamp: int, is_transactional: bool) -> bool:
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        entry.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, timestamp)
        if is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self.ongoing_txns[first_offset] = producer_id
            return True
        return False

    # ---- transactions (groundwork; the coordinator path comes later) ----------------------

    def apply_end_txn_marker(self, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int, is_abort: bool, marker_offset: int,
                             timestamp: int) -> CompletedTxn | None:
        """Apply a COMMIT/ABORT marker already in the log (replay/replication: no fencing
        checks). Returns the completed transaction if one was in progress."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        completed = None
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, marker_offset,
                                     is_abort)
            self.ongoing_txns.pop(entry.current_txn_first_offset, None)
        entry.maybe_update_epoch(producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_timestamp = timestamp
        self._generation += 1
        return completed

    # ---- replay (restart, and replication followers) -----------------------------------------

    def load_from_batches(self, batches: Iterable) -> list[CompletedTxn]:
        """Apply batches already in the log, in offset order (Kafka's REPLICATION origin: no
        sequence or epoch validation). Each needs base_offset/last_offset_delta/producer
        fields; control batches need records() to read the marker.

        Batches wholly below ``map_end_offset`` (already reflected by the loaded snapshot)
        are not applied again; they only serve as history: each loaded producer's cache of
        recent batches is filled back up to five with its same-epoch batches that precede
        the ones it knows. Kafka's snapshot keeps only a producer's last batch, so replaying
        from, say, the start of the segment holding the snapshot offset (instead of from
        the snapshot offset) lets a restarted broker still recognise retries of the last
        five batches."""
        completed: list[CompletedTxn] = []
        history: dict[int, list] | None = {}
        for batch in batches:
            last_offset = batch.base_offset + batch.last_offset_delta
            pid = batch.producer_id
            if last_offset < self.map_end_offset:
                if (history is not None and pid >= 0 and not batch.is_control
                        and batch.base_sequence >= 0):
                    history.setdefault(pid, []).append(
                        (batch.producer_epoch, batch.base_sequence, batch.last_offset_delta,
                         last_offset, batch.max_timestamp))
                continue
            if history:
                self._prefill(history)
            history = None
            if pid >= 0:
                if batch.is_control:
                    marker = _read_end_txn_marker(batch)
                    if marker is not None:
                        is_abort, coordinator_epoch, ts = marker
                        c = self.apply_end_txn_marker(pid, batch.producer_epoch,
                                                      coordinator_epoch, is_abort,
                                                      batch.base_offset, ts)
                        if c is not None:
                            completed.append(c)
                else:
                    entry = self._producers.get(pid)
                    if entry is not None and batch.producer_epoch < entry.producer_epoch:
                        log.warning("%s: producer %d epoch %d at offset %d is below the last "
                                    "seen epoch %d", self.topic_partition, pid,
                                    batch.producer_epoch, batch.base_offset,
                                    entry.producer_epoch)
                    last_seq = (NO_SEQUENCE if batch.base_sequence < 0 else
                                increment_sequence(batch.base_sequence, batch.last_offset_delta))
                    self._append_data(pid, batch.producer_epoch, last_seq, batch.base_offset,
                                      last_offset, batch.max_timestamp,
                                      batch.is_transactional)
            self.map_end_offset = last_offset + 1
        if history:
            self._prefill(history)
        self._generation += 1
        return completed

    def _prefill(self, history: dict[int, list]) -> None:
        for pid, rows in history.items():
            entry = self._producers.get(pid)
            if entry is None or entry.is_empty:
                continue  # expired, or nothing to anchor the history to
            room = NUM_BATCHES_TO_RETAIN - len(entry.batch_metadata)
            if room <= 0:
                continue
            earliest = entry.first_data_offset
            older = [BatchMetadata(increment_sequence(seq, delta), last_offset, delta, ts)
                     for epoch, seq, delta, last_offset, ts in rows
                     if epoch == entry.producer_epoch and last_offset < earliest]
            if older:
                entry.batch_metadata.extendleft(reversed(older[-room:]))

    # ---- expiration ---------------------------------------------------------------------------

    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired(self, now_ms: int) -> list[int]:
        """Drop producers idle for producer.id.expiration.ms (not those in a transaction).
        Returns the removed producer ids."""
        gone = [pid for pid, e in self._producers.items() if self.is_producer_expired(now_ms, e)]
        for pid in gone:
            del self._producers[pid]
        if gone:
            self._generation += 1
        return gone

    # ---- snapshots ----------------------------------------------------------------------------

    def _require_dir(self) -> Path:
        if self.log_dir is None:
            raise ValueError("this ProducerStateManager has no log_dir")
        return self.log_dir

    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def latest_snapshot_offset(self) -> int | None:
        return next(reversed(self._snapshots), None) if self._snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        return next(iter(self._snapshots), None)

    def snapshot_entries(self) -> list[SnapshotEntry]:
        return [self._producers[pid].to_snapshot_entry() for pid in sorted(self._producers)]

    def take_snapshot(self, log_end_offset: int | None = None, *, sync: bool = True) -> Path | None:
        """Write ``{offset:020d}.snapshot`` of the current state. ``log_end_offset`` (default:
        the map end offset) must be the offset every applied batch lies below. Kafka takes one
        at each segment roll (the new segment's base offset) and at close. Skipped if not past
        the last snapshot taken or loaded."""
        d = self._require_dir()
        if log_end_offset is not None:
            self.map_end_offset = log_end_offset
        offset = self.map_end_offset
        if offset <= self._last_snap_offset:
            return None
        path = snapshot_path(d, offset)
        write_snapshot_file(path, self.snapshot_entries(), sync=sync)
        self._snapshots[offset] = path
        self._snapshots = dict(sorted(self._snapshots.items()))
        self._last_snap_offset = offset
        return path

    def _delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def delete_snapshots_before(self, offset: int, unlink=None) -> None:
        """Delete snapshots below ``offset`` (segments deleted by retention). ``unlink(paths)``
        removes the files elsewhere (the broker's IO thread) instead of here."""
        if unlink is None:
            for off in [o for o in self._snapshots if o < offset]:
                self._delete_snapshot(off)
            return
        paths = [self._snapshots.pop(o) for o in [o for o in self._snapshots if o < offset]]
        if paths:
            unlink(paths)

    def delete_snapshots_above(self, offset: int) -> None:
        """Delete snapshots above ``offset`` (log truncated to ``offset``)."""
        for off in [o for o in self._snapshots if o > offset]:
            self._delete_snapshot(off)
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else 0

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """At log load: delete snapshots with no segment of the same base offset, except the
        largest such stray when it lies above every segment's base offset (the one written
        at clean shutdown). Also removes leftover ``.snapshot.tmp`` files."""
        d = self._require_dir()
        for tmp in d.glob("*.snapshot.tmp"):
            tmp.unlink(missing_ok=True)
        self._snapshots = list_snapshots(d)
        bases = set(segment_base_offsets)
        strays = [o for o in self._snapshots if o not in bases]
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        for off in strays:
            if off != keep:
                self._delete_snapshot(off)

    def _clear(self) -> None:
        self._producers.clear()
        self.ongoing_txns.clear()
        self._generation += 1

    def load_snapshot(self, offset: int, now_ms: int) -> None:
        """Replace the state with the snapshot at exactly ``offset`` (expired producers
        dropped). Raises CorruptSnapshotError / FileNotFoundError."""
        path = self._snapshots.get(offset) or snapshot_path(self._require_dir(), offset)
        entries = read_snapshot_file(path)
        self._clear()
        for e in entries:
            entry = ProducerStateEntry.from_snapshot_entry(e)
            if self.is_producer_expired(now_ms, entry):
                continue
            self._producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id
        self.map_end_offset = offset
        self._last_snap_offset = offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int,
                            now_ms: int) -> int:
        """Open or truncate: delete snapshots outside (log_start_offset, log_end_offset], and,
        unless the state already ends at log_end_offset, reload the latest valid snapshot
        (corrupt ones are deleted). Returns the offset from which the caller must replay the
        log's batches into load_from_batches() up to log_end_offset."""
        if self.log_dir is not None:
            self._snapshots = list_snapshots(self.log_dir)
        for off in [o for o in self._snapshots
                    if o > log_end_offset or o <= log_start_offset]:
            self._delete_snapshot(off)
        if log_end_offset == self.map_end_offset:
            self.on_log_start_offset_incremented(log_start_offset)
            return log_end_offset
        self._clear()
        while self._snapshots:
            offset = next(reversed(self._snapshots))
            try:
                self.load_snapshot(offset, now_ms)
                return offset
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: failed to load producer snapshot %s: %s",
                            self.topic_partition, self._snapshots[offset], exc)
                self._delete_snapshot(offset)
        self.map_end_offset = log_start_offset
        self._last_snap_offset = log_start_offset
        return log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything and delete every snapshot (log truncated fully / replaced)."""
        self._clear()
        for off in list(self._snapshots):
            self._delete_snapshot(off)
        self._last_snap_offset = 0
        self.map_end_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else log_start_offset


def _read_end_txn_marker(batch) -> tuple[bool, int, int] | None:
    """(is_abort, coordinator_epoch, timestamp) of a control batch's marker, or None if it
    is empty (cleaned) or not a COMMIT/ABORT marker."""
    from kbroker.wire.records import ControlRecordType, control_record_type, end_txn_marker

    record = next(iter(batch.records()), None)
    if record is None:
        return None
    ctype = control_record_type(record.key)
    if ctype not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    return ctype == ControlRecordType.ABORT, end_txn_marker(record.value), record.timestamp
