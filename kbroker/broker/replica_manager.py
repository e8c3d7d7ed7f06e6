"""Partitions this node hosts: their logs, producer state, appends and fetch wake-ups.

Built from the metadata image: the controller runtime publishes each committed record
(``on_metadata_record``), and a PartitionRecord naming this node as a replica opens (or
creates) the partition's log through ``kbroker.log.LogManager``; RemoveTopicRecord deletes the
logs. Each hosted partition is a ``kbroker.replication.partition.Partition``, the one writer
of its log, producer state, transaction index and high watermark; this class is the registry.

``append`` is the leader's write path for client produces and coordinators' internal
partitions (``Partition.append_as_leader``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Iterable

from kbroker.broker.storage import uuid_to_str
from kbroker.kraft.image import TOPIC_RESOURCE
from kbroker.replication.partition import AppendResult, Partition  # noqa: F401 (re-export)
from kbroker.txn.partition_txns import PartitionTxns
from kbroker.txn.producer_state import ProducerStateManager

log = logging.getLogger("kbroker.replicas")


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: Any, image: Any, log_config_for, now_ms,
                 *, producer_id_expiration_ms: int = 86_400_000) -> None:
        """``log_config_for(topic_name) -> LogConfig`` gives a topic's effective config;
        ``now_ms()`` is the clock (for start-up work only: appends get now_ms passed in)."""
        self.node_id = node_id
        self.now_ms = now_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.log_manager = log_manager
        self.image = image
        self.log_config_for = log_config_for
        self.topics: dict[str, dict[int, Partition]] = {}

    # -- lookup ------------------------------------------------------------------------------

    def get(self, topic: str, index: int) -> Partition | None:
        parts = self.topics.get(topic)
        return parts.get(index) if parts is not None else None

    def all_partitions(self) -> Iterable[Partition]:
        for parts in self.topics.values():
            yield from parts.values()

    # -- metadata ----------------------------------------------------------------------------

    def load_from_image(self, image) -> None:
        for t in image.topics_by_name.values():
            for p in t.partitions.values():
                if self.node_id in p.replicas:
                    self._open(t.name, t.topic_id, p.partition_id, p.leader_epoch)

    def on_metadata_record(self, rec: Any, change: Any, offset: int) -> None:
        kind = type(rec).__name__
        if kind == "PartitionRecord":
            if self.node_id in rec.replicas:
                t = self.image.topics_by_id.get(rec.topic_id)
                if t is not None:
                    self._open(t.name, t.topic_id, rec.partition_id, rec.leader_epoch)
        elif kind == "RemoveTopicRecord":
            if change is not None:
                self._remove_topic(change.name)
        elif kind == "ConfigRecord" and rec.resource_type == TOPIC_RESOURCE:
            parts = self.topics.get(rec.resource_name)
            if parts:
                cfg = self.log_config_for(rec.resource_name)
                for p in parts.values():
                    p.set_config(cfg)

    def _open(self, topic: str, topic_id: uuid.UUID, index: int, leader_epoch: int) -> Partition | None:
        existing = self.get(topic, index)
        if existing is not None:
            existing.leader_epoch = leader_epoch
            return existing
        cfg = self.log_config_for(topic)
        now = self.now_ms()

        def prepare(plog):
            # Producer state lives beside the log (Kafka's .snapshot files): reload the latest
            # snapshot, then replay the batches after it.
            psm = ProducerStateManager(plog.dir, producer_id_expiration_ms=self.producer_id_expiration_ms,
                                       topic_partition=f"{topic}-{index}")
            # The replay also rebuilds the aborted-transaction index entries of the replayed range.
            txns = PartitionTxns(plog.dir, psm)
            txns.recover(plog, now)
            return psm, txns

        def install(plog, psm, txns) -> Partition:
            part = Partition(topic, index, topic_id, plog, psm, leader_epoch, cfg)
            part.txns = txns
            part.advance_high_watermark(plog.log_end_offset)  # one replica: all of it committed
            self.topics.setdefault(topic, {})[index] = part
            return part

        # A new partition's files are created in the log manager's admin thread (creating a
        # thousand of them on the event loop held every client for seconds); the partition
        # appears here when they exist. CreateTopics answers after that (server.create_topics).
        fut = None
        if self.log_manager.get(topic, index) is None:
            fut = self.log_manager.create_in_background(topic, index, cfg, now_ms=now,
                                                        topic_id=uuid_to_str(topic_id), prepare=prepare)
        if fut is None:
            plog = self.log_manager.get_or_create(topic, index, cfg, now_ms=now, topic_id=uuid_to_str(topic_id))
            return install(plog, *prepare(plog))

        def created(f) -> None:
            if f.cancelled() or f.exception() is not None:
                return   # deleted meanwhile, or the disk failed (logged by the log manager)
            plog, (psm, txns) = f.result()
            t = self.image.topics_by_id.get(topic_id)
            if t is None or t.name != topic or self.get(topic, index) is not None:
                self.log_manager.delete(topic, index, self.now_ms())   # the topic went meanwhile
                return
            install(plog, psm, txns)
        fut.add_done_callback(created)
        return None

    def _remove_topic(self, topic: str) -> None:
        parts = self.topics.pop(topic, None)
        if not parts:
            return
        for p in parts.values():
            self._wake(p)
        try:
            # one checkpoint for all; renames in the log manager's admin thread
            self.log_manager.delete_many([(topic, p.index) for p in parts.values()], self.now_ms())
        except Exception:
            log.exception("deleting the logs of %s failed", topic)
        log.info("deleted topic %s (%d partitions)", topic, len(parts))

    # -- the write path ----------------------------------------------------------------------

    def append(self, part: Partition, buf, now_ms: int, *, origin: str = "client") -> AppendResult:
        """The leader's write path (``Partition.append_as_leader``). Never awaits."""
        return part.append_as_leader(buf, now_ms, origin=origin)

    # -- fetch wake-ups ----------------------------------------------------------------------

    @staticmethod
    def _wake(part: Partition) -> None:
        part.wake()

    async def wait_for_append(self, parts: list[Partition], timeout_s: float) -> None:
        """Return when any of ``parts`` is appended to (or deleted), or after ``timeout_s``.

        One future and one timer handle (``asyncio.wait_for`` would add a second future,
        callbacks and, before 3.12, a task hop to every long poll)."""
        if not parts or timeout_s <= 0:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        for p in parts:
            p.waiters.add(fut)
        timer = loop.call_later(timeout_s, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            for p in parts:
                p.waiters.discard(fut)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Wake every waiter and snapshot producer state at each log end (the LogManager
        then flushes and closes the logs)."""
        for p in self.all_partitions():
            self._wake(p)
            try:
                p.producer_state.take_snapshot(p.log.log_end_offset)
                if p.txns is not None:
                    p.txns.flush()
                    p.txns.close()
            except Exception:
                log.exception("producer state snapshot of %s failed", p)
