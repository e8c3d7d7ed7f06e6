"""The asyncio side of the group coordinator: one GroupShard per __consumer_offsets partition
this node leads, and the loop that turns their Results into appends and answers.

For every operation: run the state machine with ``now_ms``, append its records to the
shard's partition (one batch), wait until they are committed, then release the replies.
Timers (sessions, join/sync deadlines, offset expiry) run in one task that sleeps until the
earliest shard deadline. Shards are rebuilt by replaying their partition when this node
becomes its leader (start-up, or the offsets topic being created).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from kbroker.groups import errors, record_codec
from kbroker.groups.config import GroupConfig
from kbroker.groups.partitioning import OFFSETS_TOPIC, offsets_partition_for
from kbroker.groups.result import Result
from kbroker.groups.shard import GroupShard
from kbroker.wire.records import BatchBuilder

log = logging.getLogger("kbroker.groups.runtime")


# A partition smaller than this is replayed at once when this node becomes its leader (a
# few ms); a larger one in slices (kbroker.groups.runtime._load_in_slices).
LOAD_IN_ONE_GO_BYTES = 1 << 20


class CoordinatorError(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class GroupCoordinatorRuntime:
    def __init__(self, broker: Any, config: GroupConfig, now_ms: Callable[[], int]):
        self.broker = broker
        self.config = config
        self.now_ms = now_ms
        self.shards: dict[int, GroupShard] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopped = False
        self._creating: asyncio.Future | None = None
        self._topics_cache: tuple[int, dict] = (-2, {})
        self._loading: dict[int, asyncio.Task] = {}   # partitions replayed in slices
        self.load_slice_s = 0.004                        # work per slice before yielding

    # ------------------------------------------------------------------------------------------
    # Lifecycle

    def start(self) -> None:
        controller = getattr(self.broker, "controller", None)
        if controller is not None:
            controller.publishers.append(self._on_metadata_record)
        topic = self.broker.image.topic(OFFSETS_TOPIC)
        if topic is not None:
            for p in topic.partitions:
                self._maybe_load(p, at_startup=True)
        self._task = asyncio.get_running_loop().create_task(self._timer_loop(), name="group-coordinator-timers")

    async def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        loading, self._loading = list(self._loading.values()), {}
        for task in loading:
            task.cancel()
        await asyncio.gather(*loading, return_exceptions=True)

    def _on_metadata_record(self, rec: Any, change: Any, offset: int) -> None:
        kind = type(rec).__name__
        if kind in ("PartitionRecord", "PartitionChangeRecord"):
            t = self.broker.image.topics_by_id.get(rec.topic_id)
            if t is not None and t.name == OFFSETS_TOPIC:
                self._maybe_load(rec.partition_id)
        elif kind == "RemoveTopicRecord" and change is not None and getattr(change, "name", None) == OFFSETS_TOPIC:
            self.shards.clear()
            for task in self._loading.values():
                task.cancel()
            self._loading.clear()

    def _maybe_load(self, partition: int, at_startup: bool = False) -> None:
        topic = self.broker.image.topic(OFFSETS_TOPIC)
        state = topic.partitions.get(partition) if topic else None
        if state is None or state.leader != self.broker.node_id:
            self.shards.pop(partition, None)
            task = self._loading.pop(partition, None)
            if task is not None:
                task.cancel()
            return
        if partition in self.shards or partition in self._loading:
            return
        part = self.broker.replicas.get(OFFSETS_TOPIC, partition)
        if part is None:
            # its files are still being created off the event loop: load once they exist
            opening = self.broker.log_manager.opening(OFFSETS_TOPIC, partition) if self.broker.log_manager else None
            if opening is not None:
                opening.add_done_callback(lambda _f: self._maybe_load(partition))
            return
        plog = part.log
        if at_startup or plog.size_in_bytes < LOAD_IN_ONE_GO_BYTES:
            # start-up (nothing is served yet) or a small partition: replay now
            self.shards[partition] = self._load(partition, plog)
            self._wake.set()
            return
        # Becoming the leader of a large partition while serving: replay it in slices that
        # yield to the loop; its groups answer COORDINATOR_LOAD_IN_PROGRESS until done
        # (Kafka's answer while it loads a partition).
        self._loading[partition] = asyncio.get_running_loop().create_task(
            self._load_in_slices(partition, plog), name=f"load-{OFFSETS_TOPIC}-{partition}")

    async def _load_in_slices(self, partition: int, plog) -> None:
        import time
        slice_s = self.load_slice_s
        steps = self._load_steps(partition, plog)
        t0 = time.perf_counter()
        try:
            while True:
                next(steps)
                if time.perf_counter() - t0 > slice_s:
                    await asyncio.sleep(0)
                    t0 = time.perf_counter()
        except StopIteration as done:
            if self._loading.get(partition) is asyncio.current_task():
                del self._loading[partition]
                self.shards[partition] = done.value
                self._wake.set()
        except Exception:   # noqa: BLE001 - the log went away (topic deleted, leadership lost)
            if self._loading.get(partition) is asyncio.current_task():
                del self._loading[partition]
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, partition)

    def _load(self, partition: int, plog) -> GroupShard:
        steps = self._load_steps(partition, plog)
        try:
            while True:
                next(steps)
        except StopIteration as done:
            return done.value

    def _load_steps(self, partition: int, plog):
        """Generator: replays the partition, yielding after each batch; returns the shard."""
        shard = GroupShard(partition, self.config, topics=self.topics)
        n = 0
        for batch in plog.batches():
            yield
            if batch.is_control:
                ctype = batch.control_type()
                shard.offsets.complete_transaction(batch.producer_id, committed=int(ctype or 0) == 1)
                continue
            pid = batch.producer_id if batch.is_transactional else -1
            for r in batch.records():
                try:
                    rec = record_codec.decode(r.key, r.value)
                except Exception:   # noqa: BLE001 - one bad record must not stop the load
                    log.exception("%s-%d offset %d: undecodable record skipped", OFFSETS_TOPIC, partition, r.offset)
                    continue
                if rec is not None:
                    shard.replay(rec, producer_id=pid)
                    n += 1
        shard.on_loaded(self.now_ms())
        if n:
            log.info("loaded %s-%d: %d records, %d groups", OFFSETS_TOPIC, partition, n, len(shard.groups))
        return shard

    # ------------------------------------------------------------------------------------------
    # The offsets topic and coordinator lookup

    def partition_for(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.config.num_partitions)

    async def ensure_offsets_topic(self) -> bool:
        """Create __consumer_offsets on first use, as Kafka does; True once it exists."""
        if self.broker.image.topic(OFFSETS_TOPIC) is not None:
            return True
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_offsets_topic())
        try:
            await asyncio.shield(self._creating)
        except Exception:   # noqa: BLE001
            log.exception("creating %s failed", OFFSETS_TOPIC)
        return self.broker.image.topic(OFFSETS_TOPIC) is not None

    async def _create_offsets_topic(self) -> None:
        from kbroker.kraft.controller import NewTopic
        cfg = self.broker.config
        live = max(1, len(self.broker.image.live_brokers()))
        rf = min(int(cfg.get("offsets.topic.replication.factor", 3) or 3), live)
        configs = {"cleanup.policy": "compact", "compression.type": "producer",
                   "segment.bytes": str(cfg.get("offsets.topic.segment.bytes", 104857600))}
        results = await self.broker.create_topics([NewTopic(OFFSETS_TOPIC, self.config.num_partitions, rf, None, configs)])
        for r in results:
            if r.error and r.error != 36:     # TOPIC_ALREADY_EXISTS: someone beat us to it
                log.warning("creating %s: error %s %s", OFFSETS_TOPIC, r.error, r.message)

    def coordinator_node(self, group_id: str) -> int | None:
        topic = self.broker.image.topic(OFFSETS_TOPIC)
        if topic is None:
            return None
        state = topic.partitions.get(self.partition_for(group_id))
        return None if state is None or state.leader < 0 else state.leader

    def shard_for(self, group_id: str) -> GroupShard:
        shard = self.shards.get(self.partition_for(group_id))
        if shard is None:
            if self.partition_for(group_id) in self._loading:
                raise CoordinatorError(errors.COORDINATOR_LOAD_IN_PROGRESS)
            topic = self.broker.image.topic(OFFSETS_TOPIC)
            raise CoordinatorError(errors.NOT_COORDINATOR if topic is not None else errors.COORDINATOR_NOT_AVAILABLE)
        return shard

    def topics(self) -> dict[str, tuple[Any, int]]:
        image = self.broker.image
        if self._topics_cache[0] != image.offset:
            self._topics_cache = (image.offset, {name: (t.topic_id, len(t.partitions))
                                                 for name, t in image.topics_by_name.items()})
        return self._topics_cache[1]

    # ------------------------------------------------------------------------------------------
    # Running operations

    async def run(self, group_id: str, op: Callable[[GroupShard, int], Result]):
        """Run ``op(shard, now_ms)``; returns its response once its records are committed."""
        shard = self.shard_for(group_id)
        res = op(shard, self.now_ms())
        await self._complete(shard, res)
        return res.response

    async def run_parked(self, group_id: str, op: Callable[[GroupShard, Any, int], Result]):
        """Run ``op(shard, token, now_ms)`` for a request that may be answered later (JoinGroup,
        SyncGroup); returns whatever is eventually replied to ``token``."""
        shard = self.shard_for(group_id)
        token = asyncio.get_running_loop().create_future()
        res = op(shard, token, self.now_ms())
        await self._complete(shard, res)
        return await token

    async def _complete(self, shard: GroupShard, res: Result) -> None:
        if res.records:
            self._append(shard, res.records)
        for token, response in res.replies:
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(response)
        # A new timer may be due sooner than the loop is sleeping for (e.g. a 0 ms join delay).
        self._wake.set()

    def _append(self, shard: GroupShard, records: list) -> None:
        part = self.broker.replicas.get(OFFSETS_TOPIC, shard.partition)
        if part is None:
            log.error("%s-%d is gone; %d records lost", OFFSETS_TOPIC, shard.partition, len(records))
            return
        now = self.now_ms()
        builder = BatchBuilder()
        for rec in records:
            key, value = record_codec.encode(rec)
            builder.append(key=key, value=value, timestamp=now)
        result = self.broker.replicas.append(part, bytearray(builder.build()), now, origin="coordinator")
        if result.error:
            # The state machines already moved on; the log will catch up on the next write of
            # the same keys. Kafka would revert; we log loudly instead.
            log.error("appending %d group records to %s-%d failed: error %s %s", len(records),
                      OFFSETS_TOPIC, shard.partition, result.error, result.message)

    async def _timer_loop(self) -> None:
        while not self._stopped:
            deadlines = [d for d in (s.next_deadline() for s in self.shards.values()) if d is not None]
            now = self.now_ms()
            timeout = None if not deadlines else max(0.0, (min(deadlines) - now) / 1000.0)
            if timeout is None or timeout > 0:
                # asyncio.wait, not wait_for: 3.11's wait_for can swallow a cancel that
                # races with the event being set, and shutdown would then wait forever.
                waiter = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait([waiter], timeout=timeout)
                finally:
                    waiter.cancel()
            if self._stopped:
                return
            self._wake.clear()
            now = self.now_ms()
            for shard in list(self.shards.values()):
                d = shard.next_deadline()
                if d is not None and d <= now:
                    try:
                        await self._complete(shard, shard.poll(now))
                    except Exception:   # noqa: BLE001 - the loop must survive a bad timer
                        log.exception("group coordinator timer failed in %s-%d", OFFSETS_TOPIC, shard.partition)
            await asyncio.sleep(0)
