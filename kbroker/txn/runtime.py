"""The transaction coordinator's runtime: the asyncio side of ``TransactionCoordinator``.

* creates __transaction_state on first use (compacted, ``transaction.state.log.*``);
* loads a partition of it (replaying it, coordinator epoch = its leader epoch) when this
  broker becomes its leader and unloads it when leadership leaves (``load`` / ``unload``,
  called by ``kbroker.broker.coordinator_partitions``); in between requests for its
  ids get COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR; transactions found in a Prepare
  state are completed;
* persists every ``TxnWrite`` (one uncompressed record, key + value, Kafka's format) through
  the broker's append path, refused below ``min.insync.replicas`` (the topic gets
  ``transaction.state.log.min.isr``), and answers only once the high watermark passed it;
  a failed append or replication is undone in memory;
* writes COMMIT/ABORT markers to each partition's leader (``marker_sender``: locally or
  WriteTxnMarkers batched per broker, retried as leaders move), then appends
  CompleteCommit/CompleteAbort;
* aborts timed-out transactions and expires idle transactional ids on Kafka's schedules.

Every coordinator call and the append that follows it run without an await in between, so the
pending state set by the call is what concurrent requests see (CONCURRENT_TRANSACTIONS).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kbroker.replication.leader_hints import current_leader
from kbroker.slices import batches_to_the_end, run_in_slices
from kbroker.txn.coordinator import (
    MarkerJob,
    ProducerIdAllocationError,
    Reply,
    TransactionCoordinator,
    TxnConfig,
    TxnWrite,
    WriteOutcome,
)
from kbroker.txn.errors import TxnErrors as E
from kbroker.txn.txn_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger("kbroker.txn")

OFFSETS_TOPIC = "__consumer_offsets"
MARKER_RETRY_S = 0.1
# Test hook (not a Kafka config): hold a decided transaction's markers this long, so a fault
# test can kill the coordinator between PrepareCommit and the markers. Not applied to
# transactions completed after a load.
MARKER_DELAY_KEY = "kbroker.test.txn.marker.delay.ms"


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
        self._create_lock = asyncio.Lock()
        self._loads: dict[int, asyncio.Event] = {}   # partition -> set once its load ended
        self._tasks: set[asyncio.Task] = set()
        self._timer: asyncio.Task | None = None
        self.leadership = None   # CoordinatorPartitions: calls load / unload / epoch_changed
        # listeners told about markers written to __consumer_offsets (the group coordinator)
        self.offsets_marker_listeners: list = []
        from kbroker.net.peers import PeerClients
        from kbroker.txn.marker_sender import MarkerSender
        self.peers = PeerClients(broker, f"txn-coordinator-{broker.node_id}")
        self.markers = MarkerSender(broker.node_id, self._leader_of, self._topic_exists,
                                    self.write_marker, self.peers.send, MARKER_RETRY_S)
        self._marker_delay_s = int(getattr(broker.config, "unknown", {}).get(MARKER_DELAY_KEY, 0)) / 1000

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
        """Follow leadership of __transaction_state (loading what this broker leads now: a
        restart) and start the timers."""
        from kbroker.broker.coordinator_partitions import CoordinatorPartitions

        self.leadership = CoordinatorPartitions(self.broker, TRANSACTION_STATE_TOPIC, self)
        self.leadership.start()
        self._timer = asyncio.create_task(self._timers(), name="txn-timers")

    async def stop(self) -> None:
        tasks = list(self._tasks) + ([self._timer] if self._timer else [])
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.leadership is not None:
            self.leadership.stop()
        await self.markers.close()
        await self.peers.close()

    # ---- leadership of __transaction_state partitions -----------------------------------------

    def load(self, index: int, leader_epoch: int) -> None:
        """This broker leads __transaction_state-<index> at ``leader_epoch`` (= the
        coordinator epoch): load it. Requests for its ids get COORDINATOR_LOAD_IN_PROGRESS
        until the replay is done."""
        owned = self.coordinator.owned_partitions().get(index)
        if owned is not None and owned >= leader_epoch:
            return
        self.coordinator.begin_loading(index, leader_epoch)
        ev = self._loads[index] = asyncio.Event()
        self._spawn(self._load(index, leader_epoch, ev))

    def epoch_changed(self, index: int, leader_epoch: int) -> None:
        """Still the leader, at a newer epoch: reload, so markers carry the new coordinator
        epoch (Kafka reloads on every election)."""
        self.unload(index)
        self.load(index, leader_epoch)

    def unload(self, index: int, leader_epoch: int = -1) -> None:
        """Leadership of __transaction_state-<index> left this broker: forget its state
        (requests for its ids get NOT_COORDINATOR; marker and write tasks see they are no
        longer current and stop)."""
        self.coordinator.unload_partition(index)
        ev = self._loads.pop(index, None)
        if ev is not None:
            ev.set()

    async def _load(self, index: int, epoch: int, ev: asyncio.Event) -> None:
        await asyncio.sleep(0)   # off the metadata publisher's call
        part = self.broker.replicas.get(TRANSACTION_STATE_TOPIC, index)
        try:
            if part is None:
                self.unload(index)
                return
            if part.leader_state is None or part.leader_epoch != epoch:
                return   # resigned meanwhile, or a newer load is on its way
            # In slices (a large __transaction_state held the loop), to the log end
            records = ((r.key, r.value) for b in batches_to_the_end(part.log) if not b.is_control
                       for r in b.records())
            jobs = await run_in_slices(self.coordinator.load_partition_steps(index, epoch, records, self._now()))
            if index in self.coordinator.owned_partitions():
                log.info("loaded %s-%d at coordinator epoch %d; completing %d transactions",
                         TRANSACTION_STATE_TOPIC, index, epoch, len(jobs))
            for job in jobs:
                self._spawn(self._send_markers(job))
        finally:
            ev.set()

    async def ensure_ready(self, transactional_id: str | None = None, wait_s: float = 5.0) -> int:
        """Create __transaction_state if needed (FindCoordinator does this, as Kafka does).
        With ``transactional_id`` and its partition led here, wait (up to ``wait_s``) for the
        load, so a client's first request after FindCoordinator finds it loaded."""
        replicas = self.broker.replicas
        if len(replicas.topics.get(TRANSACTION_STATE_TOPIC, {})) < self.config.num_partitions \
                and self.broker.image.topics_by_name.get(TRANSACTION_STATE_TOPIC) is None:
            err = await self._create_topic()
            if err:
                return err
        if transactional_id:
            index = self.coordinator.partition_for(transactional_id)
            if self._leader_of(TRANSACTION_STATE_TOPIC, index) == self.broker.node_id:
                loop = asyncio.get_running_loop()   # real time: a wait, not coordinator logic
                deadline = loop.time() + wait_s
                while index not in self.coordinator.owned_partitions() and loop.time() < deadline:
                    ev = self._loads.get(index)
                    try:
                        if ev is not None:
                            await asyncio.wait_for(ev.wait(), max(0.01, deadline - loop.time()))
                            break
                        await asyncio.sleep(0.01)   # the partition is still being opened
                    except asyncio.TimeoutError:
                        break
        return E.NONE

    async def _create_topic(self) -> int:
        async with self._create_lock:
            if self.broker.image.topics_by_name.get(TRANSACTION_STATE_TOPIC) is not None:
                return E.NONE
            from kbroker.kraft.controller import NewTopic
            from kbroker.kraft.partition_change import internal_topic_replication_factor

            cfg = self.broker.config
            rf, why = internal_topic_replication_factor(
                cfg["transaction.state.log.replication.factor"],
                len(list(self.broker.image.live_brokers())))
            if why:   # never silently fewer replicas
                log.warning("not creating %s yet: %s", TRANSACTION_STATE_TOPIC, why)
                return E.COORDINATOR_NOT_AVAILABLE
            min_isr = cfg["transaction.state.log.min.isr"]
            if min_isr > rf:
                # Kafka would create it so and refuse every write; say so and keep it usable
                log.warning("transaction.state.log.min.isr=%d exceeds its replication factor %d;"
                            " using %d", min_isr, rf, rf)
                min_isr = rf
            topic = NewTopic(TRANSACTION_STATE_TOPIC, self.config.num_partitions, rf,
                             configs={"cleanup.policy": "compact",
                                      "compression.type": "uncompressed",
                                      "min.insync.replicas": str(min_isr),
                                      "segment.bytes":
                                          str(cfg["transaction.state.log.segment.bytes"]),
                                      "unclean.leader.election.enable": "false"})
            results = await self.broker.create_topics([topic])
            err = results[0].error
            if err and err != 36:  # TOPIC_ALREADY_EXISTS: someone else won the race
                log.warning("creating %s failed: %s %s", TRANSACTION_STATE_TOPIC, err,
                            results[0].message)
                return E.COORDINATOR_NOT_AVAILABLE
            return E.NONE

    def coordinator_node(self, transactional_id: str) -> int:
        """The broker that coordinates ``transactional_id``: the leader of its partition of
        __transaction_state (-1 while it has none)."""
        return self._leader_of(TRANSACTION_STATE_TOPIC,
                               self.coordinator.partition_for(transactional_id))

    def _leader_of(self, topic: str, partition: int) -> int:
        return current_leader(self.broker.image, topic, partition)[0]

    def _topic_exists(self, topic: str) -> bool:
        return self.broker.image.topics_by_name.get(topic) is not None

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction task failed", exc_info=task.exception())

    # ---- writes ---------------------------------------------------------------------------

    def _timeout_ms(self) -> int:
        return self.broker.config["request.timeout.ms"]

    def _append(self, write: TxnWrite) -> tuple[int, Any, int]:
        """Append ``write`` as the partition's leader: (error, partition, last offset)."""
        from kbroker.replication.delayed_produce import check_before_append

        replicas = self.broker.replicas
        part = replicas.get(TRANSACTION_STATE_TOPIC, write.txn_partition)
        if part is None or part.leader_state is None:
            return E.NOT_LEADER_OR_FOLLOWER, None, -1
        err = check_before_append(-1, len(part.leader_state.isr),
                                  replicas.min_insync_replicas(part))
        if err:
            return err, part, -1
        buf = encode_txn_log_batch(write.key, write.value, self._now())
        res = replicas.append(part, buf, self._now(), origin="coordinator")
        return res.error, part, res.last_offset

    async def _replicated(self, part, last_offset: int) -> int:
        """Until ``last_offset`` of ``part`` is below its high watermark: its error code."""
        if last_offset < part.high_watermark:
            return E.NONE
        errors = await self.broker.replicas.await_replication([(part, last_offset)],
                                                             self._timeout_ms())
        return errors.get(part, E.NONE)

    async def _persist(self, write: TxnWrite, will_retry: bool = False) -> WriteOutcome:
        err, part, last = self._append(write)
        if not err:
            err = await self._replicated(part, last)
        if err:
            return self.coordinator.write_failed(write, err, will_retry)
        outcome = self.coordinator.write_succeeded(write, self._now())
        if outcome.markers is not None:
            self._spawn(self._send_markers(outcome.markers, self._marker_delay_s))
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
                             producer_epoch: int, coordinator_epoch: int, commit: bool
                             ) -> tuple[int, Any, int]:
        """Append one marker to a partition this broker leads: (error, partition, offset).
        The caller waits for its replication (``write_marker``)."""
        from kbroker.replication.delayed_produce import check_before_append

        replicas = self.broker.replicas
        part = replicas.get(topic, partition)
        if part is None:
            return (E.NOT_LEADER_OR_FOLLOWER if self._topic_exists(topic)
                    else E.UNKNOWN_TOPIC_OR_PARTITION), None, -1
        if part.leader_state is None:
            return E.NOT_LEADER_OR_FOLLOWER, None, -1
        # Kafka appends markers with acks=all: the data partition's min.insync.replicas holds
        err = check_before_append(-1, len(part.leader_state.isr), replicas.min_insync_replicas(part))
        if err:
            return err, None, -1
        now = self._now()
        r = part.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, now)
        if r.error:
            return r.error, None, -1
        if topic == OFFSETS_TOPIC:
            from kbroker.txn.offsets_append import complete_offsets_transaction
            complete_offsets_transaction(self.broker, partition, producer_id, commit, r.offset)
            for listener in self.offsets_marker_listeners:
                try:
                    listener(partition, producer_id, commit)
                except Exception:
                    log.exception("offsets marker listener failed")
        return E.NONE, part, r.offset

    async def write_marker(self, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, commit: bool) -> int:
        """One marker to a partition of this node, answered once the in-sync replicas have
        it (the WriteTxnMarkers handler's path and the local coordinator's)."""
        err, part, offset = self.write_marker_locally(topic, partition, producer_id,
                                                      producer_epoch, coordinator_epoch, commit)
        if err:
            return err
        return await self._replicated(part, offset)

    async def _send_markers(self, job: MarkerJob, delay_s: float = 0) -> None:
        from kbroker.txn.marker_sender import DONE, FENCED

        if delay_s:
            await asyncio.sleep(delay_s)
        outcome = await self.markers.write(job, lambda: self.coordinator.still_current(job))
        if outcome == FENCED:
            self.coordinator.markers_abandoned(job)
        if outcome != DONE:
            return
        write = self.coordinator.markers_written(job)
        while write is not None:
            outcome = await self._persist(write, will_retry=True)
            if outcome.error not in (E.COORDINATOR_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS):
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
