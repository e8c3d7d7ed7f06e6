"""The transaction coordinator's runtime: the asyncio side of ``TransactionCoordinator``.

* creates __transaction_state on first use (compacted, ``transaction.state.log.*``) and loads
  its partitions by replaying them; transactions found in a Prepare state are completed;
* persists every ``TxnWrite`` (one uncompressed record, key + value, Kafka's format) through
  the broker's append path and answers only once it is committed;
* writes COMMIT/ABORT markers: to partitions of this node directly, through the replica
  manager's append path for markers; then appends CompleteCommit/CompleteAbort;
* aborts timed-out transactions and expires idle transactional ids on Kafka's schedules.

Every coordinator call and the append that follows it run without an await in between, so the
pending state set by the call is what concurrent requests see (CONCURRENT_TRANSACTIONS).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kbroker.txn.coordinator import (
    MarkerJob,
    ProducerIdAllocationError,
    Reply,
    TransactionCoordinator,
    TxnConfig,
    TxnWrite,
    WriteKind,
    WriteOutcome,
)
from kbroker.txn.errors import TxnErrors as E
from kbroker.txn.txn_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger("kbroker.txn")

OFFSETS_TOPIC = "__consumer_offsets"
MARKER_RETRY_S = 0.1
# errors after which a partition's marker is retried (Kafka's completion handler)
_RETRIABLE_MARKER_ERRORS = {E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, 20,
                            E.REQUEST_TIMED_OUT, E.KAFKA_STORAGE_ERROR}
_FENCED_MARKER_ERRORS = {E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED}


def txn_config_from(broker_config) -> TxnConfig:
    return TxnConfig(
        transaction_max_timeout_ms=broker_config["transaction.max.timeout.ms"],
        transactional_id_expiration_ms=broker_config["transactional.id.expiration.ms"],
        num_partitions=broker_config["transaction.state.log.num.partitions"],
        abort_timed_out_interval_ms=broker_config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
        remove_expired_interval_ms=broker_config[
            "transaction.remove.expired.transaction.cleanup.interval.ms"],
    )


def encode_txn_log_batch(key: bytes, value: bytes | None, now_ms: int) -> bytearray:
    from kbroker.wire.records import BatchBuilder

    b = BatchBuilder()
    b.append(key=key, value=value, timestamp=now_ms)
    return bytearray(b.build())


class TxnRuntime:
    def __init__(self, broker: Any, config: TxnConfig | None = None):
        self.broker = broker
        self.config = config or txn_config_from(broker.config)
        self._spare_pid: int | None = None
        self.coordinator = TransactionCoordinator(self.config, self._take_producer_id)
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._timer: asyncio.Task | None = None
        # listeners told about markers written to __consumer_offsets (the group coordinator)
        self.offsets_marker_listeners: list = []

    # ---- producer ids ---------------------------------------------------------------------

    def _take_producer_id(self) -> int:
        pid = self._spare_pid
        if pid is None:
            pid = self.broker.producer_ids.next_id_nowait()
        else:
            self._spare_pid = None
        if pid is None:
            raise ProducerIdAllocationError("no producer id block", E.COORDINATOR_LOAD_IN_PROGRESS)
        return pid

    async def _ensure_spare_pid(self) -> None:
        if self._spare_pid is None:
            self._spare_pid = self.broker.producer_ids.next_id_nowait()
            if self._spare_pid is None:
                self._spare_pid = await self.broker.producer_ids.next_id()

    # ---- lifecycle ------------------------------------------------------------------------

    def _now(self) -> int:
        return self.broker.clock.now_ms()

    def start(self) -> None:
        """Load __transaction_state if it exists (a restart) and start the timers."""
        if self.broker.replicas.topics.get(TRANSACTION_STATE_TOPIC):
            self._load_partitions()
        self._timer = asyncio.create_task(self._timers(), name="txn-timers")

    async def stop(self) -> None:
        tasks = list(self._tasks) + ([self._timer] if self._timer else [])
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def ensure_ready(self) -> int:
        """Create and load __transaction_state if needed (FindCoordinator does this)."""
        if self._loaded:
            return E.NONE
        async with self._load_lock:
            if self._loaded:
                return E.NONE
            replicas = self.broker.replicas
            if not replicas.topics.get(TRANSACTION_STATE_TOPIC):
                from kbroker.kraft.controller import NewTopic

                from kbroker.kraft.partition_change import internal_topic_replication_factor

                cfg = self.broker.config
                rf, why = internal_topic_replication_factor(
                    cfg["transaction.state.log.replication.factor"],
                    len(list(self.broker.image.live_brokers())))
                if why:   # never silently fewer replicas
                    log.warning("not creating %s yet: %s", TRANSACTION_STATE_TOPIC, why)
                    return E.COORDINATOR_NOT_AVAILABLE
                topic = NewTopic(TRANSACTION_STATE_TOPIC, self.config.num_partitions, rf,
                                 configs={"cleanup.policy": "compact",
                                          "compression.type": "uncompressed",
                                          "segment.bytes":
                                              str(cfg["transaction.state.log.segment.bytes"]),
                                          "unclean.leader.election.enable": "false"})
                results = await self.broker.create_topics([topic])
                err = results[0].error
                if err and err != 36:  # TOPIC_ALREADY_EXISTS: someone else won the race
                    log.warning("creating %s failed: %s %s", TRANSACTION_STATE_TOPIC, err,
                                results[0].message)
                    return E.COORDINATOR_NOT_AVAILABLE
            if len(replicas.topics.get(TRANSACTION_STATE_TOPIC, {})) < self.config.num_partitions:
                return E.COORDINATOR_NOT_AVAILABLE
            self._load_partitions()
            return E.NONE

    def _load_partitions(self) -> None:
        now = self._now()
        parts = self.broker.replicas.topics.get(TRANSACTION_STATE_TOPIC, {})
        jobs = []
        for index, part in sorted(parts.items()):
            epoch = part.leader_epoch
            self.coordinator.begin_loading(index, epoch)
            records = ((r.key, r.value) for b in part.log.batches() if not b.is_control
                       for r in b.records())
            jobs += self.coordinator.load_partition(index, epoch, records, now)
        self._loaded = len(parts) >= self.config.num_partitions
        log.info("transaction coordinator loaded %d partitions of %s; completing %d "
                 "transactions", len(parts), TRANSACTION_STATE_TOPIC, len(jobs))
        for job in jobs:
            self._spawn(self._send_markers(job))

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction task failed", exc_info=task.exception())

    # ---- writes ---------------------------------------------------------------------------

    def _append(self, write: TxnWrite) -> tuple[int, Any, int]:
        part = self.broker.replicas.get(TRANSACTION_STATE_TOPIC, write.txn_partition)
        if part is None:
            return E.NOT_LEADER_OR_FOLLOWER, None, -1
        buf = encode_txn_log_batch(write.key, write.value, self._now())
        res = self.broker.replicas.append(part, buf, self._now(), origin="coordinator")
        return res.error, part, res.base_offset

    async def _persist(self, write: TxnWrite, will_retry: bool = False) -> WriteOutcome:
        err, part, offset = self._append(write)
        if not err:
            try:
                await self.broker.wait_for_commit(part, offset)
            except Exception:
                log.exception("waiting for %s to commit failed", write.kind)
                err = E.REQUEST_TIMED_OUT
        if err:
            return self.coordinator.write_failed(write, err, will_retry)
        outcome = self.coordinator.write_succeeded(write, self._now())
        if outcome.markers is not None:
            self._spawn(self._send_markers(outcome.markers))
        return outcome

    async def complete(self, reply: Reply) -> Reply | WriteOutcome:
        """The client's answer to a coordinator reply: immediate, or after its write."""
        if reply.write is None:
            return reply
        return await self._persist(reply.write)

    # ---- client operations ------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                               producer_epoch: int):
        await self._ensure_spare_pid()
        reply = self.coordinator.init_producer_id(transactional_id, timeout_ms, self._now(),
                                                  producer_id, producer_epoch)
        return await self.complete(reply)

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions):
        reply = self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch,
                                                partitions, self._now())
        return await self.complete(reply)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool):
        reply = self.coordinator.end_txn(transactional_id, producer_id, producer_epoch, commit,
                                         self._now())
        return await self.complete(reply)

    # ---- markers ----------------------------------------------------------------------------

    def write_marker_locally(self, topic: str, partition: int, producer_id: int,
                             producer_epoch: int, coordinator_epoch: int, commit: bool) -> int:
        """One marker to a partition of this node (also the WriteTxnMarkers handler's path)."""
        replicas = self.broker.replicas
        part = replicas.get(topic, partition)
        if part is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        now = self._now()
        r = part.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, now)
        if r.error:
            return r.error
        if topic == OFFSETS_TOPIC:
            from kbroker.txn.offsets_append import complete_offsets_transaction
            complete_offsets_transaction(self.broker, partition, producer_id, commit)
            for listener in self.offsets_marker_listeners:
                try:
                    listener(partition, producer_id, commit)
                except Exception:
                    log.exception("offsets marker listener failed")
        return E.NONE

    async def _send_markers(self, job: MarkerJob) -> None:
        remaining = set(job.partitions)
        while remaining:
            if not self.coordinator.still_current(job):
                return
            for topic, partition in sorted(remaining):
                err = self.write_marker_locally(topic, partition, job.producer_id,
                                                job.producer_epoch, job.coordinator_epoch,
                                                job.commit)
                if err == E.NONE:
                    remaining.discard((topic, partition))
                elif err == E.UNKNOWN_TOPIC_OR_PARTITION:
                    if self.broker.image.topics_by_name.get(topic) is None:
                        remaining.discard((topic, partition))  # deleted: nothing to mark
                elif err in _FENCED_MARKER_ERRORS:
                    log.info("markers of %s cancelled: %s on %s-%d", job.transactional_id,
                             E(err).name, topic, partition)
                    self.coordinator.markers_abandoned(job)
                    return
                elif err not in _RETRIABLE_MARKER_ERRORS:
                    log.error("marker for %s on %s-%d failed with %s; retrying",
                              job.transactional_id, topic, partition, err)
            if remaining:
                await asyncio.sleep(MARKER_RETRY_S)
        write = self.coordinator.markers_written(job)
        while write is not None:
            outcome = await self._persist(write, will_retry=True)
            if outcome.error != E.COORDINATOR_NOT_AVAILABLE:
                if outcome.error:
                    log.info("completing %s: %s", job.transactional_id, outcome.error)
                return
            await asyncio.sleep(MARKER_RETRY_S)
            if not self.coordinator.still_current(write):
                return

    # ---- timers ------------------------------------------------------------------------------

    async def _timers(self) -> None:
        abort_every = self.config.abort_timed_out_interval_ms / 1000
        expire_every_ms = self.config.remove_expired_interval_ms
        last_expire = self._now()
        while True:
            await asyncio.sleep(abort_every)
            try:
                now = self._now()
                for write in self.coordinator.abort_timed_out(now):
                    self._spawn(self._persist(write))
                if now - last_expire >= expire_every_ms:
                    last_expire = now
                    for write in self.coordinator.expire_transactional_ids(now):
                        self._spawn(self._persist(write))
            except Exception:
                log.exception("transaction timers failed")
