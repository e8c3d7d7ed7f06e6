"""The transaction coordinator as a pure state machine (Kafka's TransactionCoordinator).

No I/O and no clock: every call takes ``now_ms`` and answers with a ``Reply``. A reply either
answers at once (``write`` is None) or carries a ``TxnWrite``: one record for a partition of
__transaction_state. The runtime appends it and then calls ``write_succeeded`` (or
``write_failed``), which applies the change and gives the client's final answer, plus a
``MarkerJob`` when a transaction has reached PrepareCommit/PrepareAbort. After the runtime has
written the job's COMMIT/ABORT markers to every partition it calls ``markers_written``, which
returns the CompleteCommit/CompleteAbort write.

State lives per __transaction_state partition, tagged with the coordinator epoch (the
partition's leader epoch) it was loaded at; it is rebuilt by replaying that partition
(``load_partition``), which also hands back marker jobs for transactions caught in a Prepare
state by a crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable

from kbroker.slices import run_to_end
from kbroker.txn.errors import TxnErrors
from kbroker.txn.txn_log import (
    DEFAULT_NUM_PARTITIONS,
    TxnLogDecodeError,
    decode_key,
    decode_value,
    encode_record,
    partition_for,
)
from kbroker.txn.txn_state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
    TxnTransit,
    is_epoch_exhausted,
)

log = logging.getLogger(__name__)

E = TxnErrors


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """Kafka's broker properties of the same names."""

    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    num_partitions: int = DEFAULT_NUM_PARTITIONS  # transaction.state.log.num.partitions
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000


class ProducerIdAllocationError(RuntimeError):
    """Raised by the producer id allocator; ``error`` is the code to answer with."""

    def __init__(self, message: str, error: int = E.COORDINATOR_NOT_AVAILABLE):
        super().__init__(message)
        self.error = error


class WriteKind(Enum):
    INIT_PRODUCER_ID = "init_producer_id"  # Empty with a new epoch or producer id
    ADD_PARTITIONS = "add_partitions"  # Ongoing
    END_TXN = "end_txn"  # PrepareCommit / PrepareAbort asked by the client
    FENCE_ABORT = "fence_abort"  # PrepareAbort with a bumped epoch: InitProducerId fenced it
    TIMEOUT_ABORT = "timeout_abort"  # PrepareAbort with a bumped epoch: the txn timed out
    COMPLETE = "complete"  # CompleteCommit / CompleteAbort after the markers
    EXPIRE = "expire"  # tombstone: transactional.id.expiration.ms passed


@dataclass(frozen=True, slots=True, eq=False)
class TxnWrite:
    """One record to append to __transaction_state-<txn_partition>."""

    kind: WriteKind
    transactional_id: str
    txn_partition: int
    coordinator_epoch: int
    transit: TxnTransit
    key: bytes
    value: bytes | None  # None: tombstone

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True, eq=False)
class MarkerJob:
    """COMMIT/ABORT markers to write to every partition of a transaction, then complete it."""

    transactional_id: str
    txn_partition: int
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    complete: TxnTransit  # the CompleteCommit/CompleteAbort transition, already pending


@dataclass(frozen=True, slots=True)
class Reply:
    error: int = E.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    write: TxnWrite | None = None  # append first, then write_succeeded/write_failed answers


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    error: int = E.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    markers: MarkerJob | None = None


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """DescribeTransactions' view of one id."""

    transactional_id: str
    error: int
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnListResult:
    error: int
    transactions: list[TxnListing] = field(default_factory=list)
    unknown_state_filters: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _PartitionCache:
    coordinator_epoch: int
    txns: dict[str, TxnMetadata] = field(default_factory=dict)


def coordinator_error_for_append_error(error: int) -> int:
    """The error a client gets when a transaction state write failed (shared with the group
    coordinator: kbroker.broker.coordinator_partitions)."""
    from kbroker.broker.coordinator_partitions import coordinator_write_error
    return coordinator_write_error(error)


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, allocate_producer_id: Callable[[], int]):
        self.config = config
        self._allocate_producer_id = allocate_producer_id
        self._partitions: dict[int, _PartitionCache] = {}
        self._loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded

    # ---- ownership ----------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def begin_loading(self, txn_partition: int, coordinator_epoch: int) -> None:
        self._loading[txn_partition] = coordinator_epoch

    def load_partition(self, txn_partition: int, coordinator_epoch: int,
                       records: Iterable[tuple[bytes, bytes | None]], now_ms: int
                       ) -> list[MarkerJob]:
        """Become coordinator for a partition by replaying its records (key, value) in offset
        order. Returns marker jobs for transactions left in PrepareCommit/PrepareAbort."""
        return run_to_end(self.load_partition_steps(txn_partition, coordinator_epoch, records, now_ms))

    def load_partition_steps(self, txn_partition: int, coordinator_epoch: int,
                             records: Iterable[tuple[bytes, bytes | None]], now_ms: int):
        """``load_partition`` as a generator that may pause between records (kbroker.slices);
        a load superseded or unloaded while it paused installs nothing."""
        if self._loading.get(txn_partition, coordinator_epoch) != coordinator_epoch:
            return []  # a newer election superseded this load
        begun = txn_partition in self._loading
        loaded: dict[str, TxnMetadata] = {}
        for i, (key, value) in enumerate(records):
            if i % 32 == 31:
                yield
            if key is None:
                raise TxnLogDecodeError("transaction log record without a key")
            txn_id = decode_key(key)
            if txn_id is None:
                log.warning("__transaction_state-%d: skipping a record with an unknown key "
                            "version", txn_partition)
                continue
            decoded = decode_value(value)
            if decoded is None:
                loaded.pop(txn_id, None)
            else:
                loaded[txn_id] = TxnMetadata.from_transit(txn_id, decoded.transit)
        if begun and self._loading.get(txn_partition) != coordinator_epoch:
            return []  # unloaded, or a newer election began, while this load paused
        self._loading.pop(txn_partition, None)
        self._partitions[txn_partition] = _PartitionCache(coordinator_epoch, loaded)
        jobs = []
        for md in loaded.values():
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                jobs.append(self._marker_job(md, txn_partition, coordinator_epoch, now_ms))
        return jobs

    def unload_partition(self, txn_partition: int) -> None:
        self._loading.pop(txn_partition, None)
        self._partitions.pop(txn_partition, None)

    def owned_partitions(self) -> dict[int, int]:
        """Loaded partitions -> coordinator epoch."""
        return {p: c.coordinator_epoch for p, c in self._partitions.items()}

    def _lookup(self, transactional_id: str) -> tuple[int, _PartitionCache | None]:
        """(error, cache of the id's partition); NOT_COORDINATOR / LOAD_IN_PROGRESS."""
        p = self.partition_for(transactional_id)
        if p in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        cache = self._partitions.get(p)
        if cache is None:
            return E.NOT_COORDINATOR, None
        return E.NONE, cache

    def get(self, transactional_id: str) -> TxnMetadata | None:
        """The metadata (read-only use: tests, admin)."""
        _, cache = self._lookup(transactional_id)
        return cache.txns.get(transactional_id) if cache else None

    def _write(self, kind: WriteKind, md: TxnMetadata, cache: _PartitionCache,
               transit: TxnTransit, tombstone: bool = False) -> TxnWrite:
        key, value = encode_record(md.transactional_id, None if tombstone else transit)
        return TxnWrite(kind, md.transactional_id, self.partition_for(md.transactional_id),
                        cache.coordinator_epoch, transit, key, value)

    def _new_producer_id(self) -> tuple[int, int]:
        try:
            return E.NONE, self._allocate_producer_id()
        except ProducerIdAllocationError as e:
            return e.error, NO_PRODUCER_ID

    # ---- InitProducerId -----------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int, now_ms: int,
                         producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = NO_PRODUCER_EPOCH) -> Reply:
        """InitProducerId with a transactional id (v3+ may name the caller's current
        producer id and epoch, to resume after an epoch error)."""
        if not transactional_id:
            return Reply(E.INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return Reply(E.INVALID_TRANSACTION_TIMEOUT)
        err, cache = self._lookup(transactional_id)
        if cache is None:
            return Reply(err)
        md = cache.txns.get(transactional_id)
        if md is None:
            err, pid = self._new_producer_id()
            if err:
                return Reply(err)
            md = cache.txns[transactional_id] = TxnMetadata(
                transactional_id, pid, txn_timeout_ms=transaction_timeout_ms,
                txn_last_update_ms=now_ms)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)

        if md.pending_transition_in_progress:
            return Reply(E.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (
                md.producer_epoch == NO_PRODUCER_EPOCH
                or expected[0] == md.producer_id
                or (expected[0] == md.prev_producer_id and is_epoch_exhausted(expected[1]))):
            return Reply(E.PRODUCER_FENCED)

        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Reply(E.CONCURRENT_TRANSACTIONS)
        if md.state == TxnState.ONGOING:
            # Abort the open transaction under a bumped epoch (fencing its producer) and let
            # the new one retry: its retry bumps the epoch again (or rotates the id).
            return self._fence_and_abort(md, cache, WriteKind.FENCE_ABORT, now_ms)
        if md.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if md.epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                err, new_pid = self._new_producer_id()
                if err:
                    return Reply(err)
                transit = md.prepare_producer_id_rotation(new_pid, transaction_timeout_ms,
                                                          now_ms, expected is not None)
            else:
                transit = md.prepare_increment_epoch(
                    transaction_timeout_ms, None if expected is None else expected[1], now_ms)
                if transit is None:
                    return Reply(E.PRODUCER_FENCED)
            return Reply(write=self._write(WriteKind.INIT_PRODUCER_ID, md, cache, transit))
        raise AssertionError(f"{transactional_id}: InitProducerId in state {md.state!r}")

    def _fence_and_abort(self, md: TxnMetadata, cache: _PartitionCache, kind: WriteKind,
                         now_ms: int) -> Reply:
        fence = md.prepare_fence_epoch(now_ms)
        # Kafka moves straight on to PrepareAbort: the bumped epoch is installed in memory
        # now, so the old producer is fenced even before the record is durable.
        md.pending_state = None
        md.producer_epoch = fence.producer_epoch
        md.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = md.prepare_abort_or_commit(TxnState.PREPARE_ABORT, now_ms)
        return Reply(write=self._write(kind, md, cache, transit))

    # ---- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> tuple[int, TxnMetadata | None, _PartitionCache | None]:
        if not transactional_id:
            return E.INVALID_REQUEST, None, None
        err, cache = self._lookup(transactional_id)
        if cache is None:
            return err, None, None
        md = cache.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None, None
        if md.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED, None, None
        return E.NONE, md, cache

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int) -> Reply:
        """One error for all the partitions, or the Ongoing write."""
        partitions = set(partitions)
        err, md, cache = self._check_producer(transactional_id, producer_id, producer_epoch)
        if md is None:
            return Reply(err)
        if md.pending_transition_in_progress:
            return Reply(E.CONCURRENT_TRANSACTIONS)
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Reply(E.CONCURRENT_TRANSACTIONS)
        if md.state == TxnState.ONGOING and partitions <= md.partitions:
            return Reply(E.NONE)
        transit = md.prepare_add_partitions(partitions, now_ms)
        return Reply(write=self._write(WriteKind.ADD_PARTITIONS, md, cache, transit))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ verify_only: is each partition part of the transaction?"""
        partitions = list(partitions)
        if not transactional_id:
            return {tp: E.INVALID_REQUEST for tp in partitions}
        err, md, _ = self._check_producer(transactional_id, producer_id, producer_epoch)
        if md is not None and md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            err = E.CONCURRENT_TRANSACTIONS
        if err:
            return {tp: err for tp in partitions}
        return {tp: (E.NONE if tp in md.partitions else E.TRANSACTION_ABORTABLE)
                for tp in partitions}

    # ---- EndTxn ------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, now_ms: int) -> Reply:
        if not transactional_id:
            return Reply(E.INVALID_REQUEST)
        err, cache = self._lookup(transactional_id)
        if cache is None:
            return Reply(err)
        md = cache.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return Reply(E.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != producer_epoch:
            return Reply(E.PRODUCER_FENCED)
        if md.pending_transition_in_progress:
            return Reply(E.CONCURRENT_TRANSACTIONS)
        state = md.state
        if state == TxnState.ONGOING:
            transit = md.prepare_abort_or_commit(
                TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now_ms)
            return Reply(write=self._write(WriteKind.END_TXN, md, cache, transit))
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state == done:  # a retry of an EndTxn that completed
            return Reply(E.NONE, md.producer_id, md.producer_epoch)
        if state == preparing:
            return Reply(E.CONCURRENT_TRANSACTIONS)
        # Empty, or the opposite outcome already chosen.
        return Reply(E.INVALID_TXN_STATE)

    # ---- completing writes -------------------------------------------------------------------

    def _still_owner(self, write: TxnWrite) -> tuple[int, TxnMetadata | None]:
        err, cache = self._lookup(write.transactional_id)
        if cache is None:
            return err, None
        if cache.coordinator_epoch != write.coordinator_epoch:
            return E.NOT_COORDINATOR, None
        md = cache.txns.get(write.transactional_id)
        if md is None:
            return E.NOT_COORDINATOR, None
        return E.NONE, md

    def write_succeeded(self, write: TxnWrite, now_ms: int) -> WriteOutcome:
        err, md = self._still_owner(write)
        if md is None:
            return WriteOutcome(err)
        if write.kind is WriteKind.EXPIRE:
            if md.pending_state == TxnState.DEAD and md.producer_epoch == write.transit.producer_epoch:
                del self._partitions[write.txn_partition].txns[write.transactional_id]
            else:
                md.pending_state = None
            return WriteOutcome()
        md.complete_transition(write.transit)
        if write.kind is WriteKind.INIT_PRODUCER_ID:
            return WriteOutcome(E.NONE, md.producer_id, md.producer_epoch)
        if write.kind in (WriteKind.ADD_PARTITIONS, WriteKind.COMPLETE):
            return WriteOutcome()
        # A Prepare state is durable: the outcome is decided; markers go out now.
        job = self._marker_job(md, write.txn_partition, write.coordinator_epoch, now_ms)
        if write.kind is WriteKind.FENCE_ABORT:
            # The new producer retries InitProducerId once the abort has completed.
            return WriteOutcome(E.CONCURRENT_TRANSACTIONS, markers=job)
        return WriteOutcome(E.NONE, md.producer_id, md.producer_epoch, markers=job)

    def write_failed(self, write: TxnWrite, append_error: int, will_retry: bool = False
                     ) -> WriteOutcome:
        """The append failed with a log error. With ``will_retry`` the pending state stays (the
        runtime appends the same write again, as Kafka does for completion records)."""
        error = coordinator_error_for_append_error(append_error)
        if error == E.NONE:
            error = E.UNKNOWN_SERVER_ERROR
        _, md = self._still_owner(write)
        if md is not None and not will_retry:
            md.pending_state = None
            if write.kind in (WriteKind.FENCE_ABORT, WriteKind.TIMEOUT_ABORT):
                md.has_failed_epoch_fence = True
        return WriteOutcome(error)

    def still_current(self, write_or_job: TxnWrite | MarkerJob) -> bool:
        """Whether this coordinator still owns the id at the write's coordinator epoch."""
        err, cache = self._lookup(write_or_job.transactional_id)
        return cache is not None and cache.coordinator_epoch == write_or_job.coordinator_epoch

    # ---- markers ------------------------------------------------------------------------------

    def _marker_job(self, md: TxnMetadata, txn_partition: int, coordinator_epoch: int,
                    now_ms: int) -> MarkerJob:
        commit = md.state == TxnState.PREPARE_COMMIT
        partitions = frozenset(md.partitions)
        complete = md.prepare_complete(now_ms)
        return MarkerJob(md.transactional_id, txn_partition, coordinator_epoch, md.producer_id,
                         md.producer_epoch, commit, partitions, complete)

    def markers_written(self, job: MarkerJob) -> TxnWrite | None:
        """Every partition has its marker: the CompleteCommit/CompleteAbort write (None if the
        coordinator moved on meanwhile)."""
        err, cache = self._lookup(job.transactional_id)
        if cache is None or cache.coordinator_epoch != job.coordinator_epoch:
            return None
        md = cache.txns.get(job.transactional_id)
        if md is None or md.pending_state != job.complete.state:
            return None
        return self._write(WriteKind.COMPLETE, md, cache, job.complete)

    def markers_abandoned(self, job: MarkerJob) -> None:
        """A partition answered that the producer or coordinator epoch moved on: stop, leaving
        the transaction to whoever fenced it (Kafka drops the pending completion)."""
        if self.still_current(job):
            md = self._partitions[job.txn_partition].txns.get(job.transactional_id)
            if md is not None and md.pending_state == job.complete.state:
                md.pending_state = None

    # ---- timers --------------------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int) -> list[TxnWrite]:
        """PrepareAbort writes (with a bumped epoch) for transactions open longer than their
        timeout. Complete each with write_succeeded, then write the markers."""
        writes = []
        for cache in self._partitions.values():
            for md in cache.txns.values():
                if (md.state == TxnState.ONGOING and not md.pending_transition_in_progress
                        and md.txn_start_ms + md.txn_timeout_ms < now_ms):
                    log.info("aborting transaction of %s (producer %d): timed out after %d ms",
                             md.transactional_id, md.producer_id, md.txn_timeout_ms)
                    reply = self._fence_and_abort(md, cache, WriteKind.TIMEOUT_ABORT, now_ms)
                    writes.append(reply.write)
        return writes

    def expire_transactional_ids(self, now_ms: int) -> list[TxnWrite]:
        """Tombstones for ids idle longer than transactional.id.expiration.ms."""
        writes = []
        horizon = now_ms - self.config.transactional_id_expiration_ms
        for cache in self._partitions.values():
            for md in cache.txns.values():
                if (md.pending_state is None and md.state.expiration_allowed
                        and md.txn_last_update_ms <= horizon):
                    transit = md.prepare_dead()
                    writes.append(self._write(WriteKind.EXPIRE, md, cache, transit,
                                              tombstone=True))
        return writes

    # ---- admin ----------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnDescription:
        if not transactional_id:
            return TxnDescription(transactional_id, E.INVALID_REQUEST)
        err, cache = self._lookup(transactional_id)
        if cache is None:
            return TxnDescription(transactional_id, err)
        md = cache.txns.get(transactional_id)
        if md is None or md.state == TxnState.DEAD:
            return TxnDescription(transactional_id, E.TRANSACTIONAL_ID_NOT_FOUND)
        return TxnDescription(transactional_id, E.NONE, md.state.display_name, md.producer_id,
                              md.producer_epoch, md.txn_timeout_ms, md.txn_start_ms,
                              tuple(sorted(md.partitions)))

    def list_transactions(self, now_ms: int, producer_ids: Iterable[int] = (),
                          states: Iterable[str] = (), duration_ms: int = -1) -> TxnListResult:
        if self._loading:
            return TxnListResult(E.COORDINATOR_LOAD_IN_PROGRESS)
        pids = set(producer_ids)
        wanted: set[TxnState] = set()
        unknown = []
        states = list(states)
        for name in states:
            st = TxnState.from_name(name)
            if st is None:
                unknown.append(name)
            else:
                wanted.add(st)
        out = []
        for cache in self._partitions.values():
            for md in cache.txns.values():
                if md.state == TxnState.DEAD:
                    continue
                if pids and md.producer_id not in pids:
                    continue
                if states and md.state not in wanted:
                    continue
                if duration_ms >= 0 and now_ms - md.txn_start_ms <= duration_ms:
                    continue
                out.append(TxnListing(md.transactional_id, md.producer_id,
                                      md.state.display_name))
        return TxnListResult(E.NONE, out, unknown)
