"""The asyncio side of the group coordinator: one GroupShard per __consumer_offsets partition
this node leads, and the loop that turns their Results into appends and answers.

Shards follow leadership (kbroker.broker.coordinator_partitions): a partition is replayed
into a shard when this broker becomes its leader, with the leader epoch as coordinator
epoch (its groups answer COORDINATOR_LOAD_IN_PROGRESS while a large one replays), and
dropped when leadership leaves, failing whatever waits on it with NOT_COORDINATOR.

For every operation: run the state machine with ``now_ms`` (it applies its own records at
once, so the next operation sees them), append the records to the shard's partition as one
batch, and release the replies only once the partition's high watermark has passed the
shard's last write (with RF=3: once the in-sync followers have it), so no answer ever rests
on a write that a new leader may not have. An operation without records waits for the
writes before it the same way. An append that fails is undone in memory by rebuilding the
shard from its log. Timers (sessions, join/sync deadlines, offset expiry) run in one task
that sleeps until the earliest shard deadline.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from kbroker.broker.coordinator_partitions import CoordinatorPartitions, coordinator_write_error
from kbroker.groups import errors, latest_commits, record_codec
from kbroker.groups.config import GroupConfig
from kbroker.groups.partitioning import OFFSETS_TOPIC, offsets_partition_for
from kbroker.groups.result import Result
from kbroker.groups.shard import GroupShard, OffsetCommitRequest
from kbroker.replication.delayed_produce import check_before_append
from kbroker.slices import batches_to_the_end, run_in_slices, run_to_end
from kbroker.wire.records import BatchBuilder

log = logging.getLogger("kbroker.groups.runtime")


# A partition smaller than this is replayed at once when this node becomes its leader (a
# few ms); a larger one in slices (kbroker.groups.runtime._load_in_slices).
LOAD_IN_ONE_GO_BYTES = 1 << 20
RECORDS_PER_STEP = 32          # a sliced load may pause after this many records of a batch
_CAUGHT_UP = object()          # a sliced load reached the log end (kbroker.slices.batches_to_the_end)


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
        self._parked: dict[int, set[asyncio.Future]] = {}   # JoinGroup/SyncGroup answers owed
        self.load_slice_s = None                         # work per slice before yielding (None: slices.SLICE_S)
        self.leadership = CoordinatorPartitions(broker, OFFSETS_TOPIC, self)

    # ------------------------------------------------------------------------------------------
    # Lifecycle

    def start(self) -> None:
        self.leadership.start()     # replays (or starts replaying) what this node leads now
        self._task = asyncio.get_running_loop().create_task(self._timer_loop(), name="group-coordinator-timers")

    async def shutdown(self) -> None:
        self._stopped = True
        self.leadership.stop()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        loading = list(self._loading.values())
        for p in list(self.shards) + list(self._loading):
            self._drop(p, errors.NOT_COORDINATOR)
        await asyncio.gather(*loading, return_exceptions=True)

    # ------------------------------------------------------------------------------------------
    # Leadership of __consumer_offsets partitions (kbroker.broker.coordinator_partitions)

    def load(self, partition: int, coordinator_epoch: int) -> None:
        part = self.broker.replicas.get(OFFSETS_TOPIC, partition)
        self._drop(partition, errors.NOT_COORDINATOR)
        if part is None or self._stopped:
            return
        plog = part.log
        if plog.size_in_bytes < LOAD_IN_ONE_GO_BYTES:
            self._install(partition, self._load(partition, plog), coordinator_epoch)
            return
        # A large partition, at start-up too (a node that holds its loop for seconds misses
        # its heartbeats and its fetches): replay it in slices that yield to the loop; its
        # groups answer COORDINATOR_LOAD_IN_PROGRESS until done, as Kafka's do.
        self._loading[partition] = asyncio.get_running_loop().create_task(
            self._load_in_slices(partition, plog, coordinator_epoch), name=f"load-{OFFSETS_TOPIC}-{partition}")

    def epoch_changed(self, partition: int, coordinator_epoch: int) -> None:
        shard = self.shards.get(partition)
        if shard is not None:
            shard.coordinator_epoch = coordinator_epoch

    def unload(self, partition: int, coordinator_epoch: int) -> None:
        self._drop(partition, errors.NOT_COORDINATOR)

    def _drop(self, partition: int, code: int) -> None:
        """Forget the shard of ``partition``; whoever waits on it gets ``code``."""
        had = self.shards.pop(partition, None) is not None
        task = self._loading.pop(partition, None)
        if task is not None:
            task.cancel()
        for fut in self._parked.pop(partition, ()):
            if not fut.done():
                fut.set_exception(CoordinatorError(code))
        if had:
            log.info("unloaded %s-%d", OFFSETS_TOPIC, partition)

    def _install(self, partition: int, shard: GroupShard, coordinator_epoch: int) -> None:
        part = self.broker.replicas.get(OFFSETS_TOPIC, partition)
        shard.coordinator_epoch = coordinator_epoch
        # The loaded tail may not be committed yet (a new leader's log): answers wait for it.
        shard.last_written = (part.log_end_offset - 1) if part is not None else -1
        self.shards[partition] = shard
        self._wake.set()

    async def _load_in_slices(self, partition: int, plog, coordinator_epoch: int) -> None:
        me = asyncio.current_task()

        def load_then_install():
            shard = yield from self._load_steps(partition, plog)
            # In the slice that reached the log end: nothing can append in between. (A drop
            # cancels this task, whose cancelled wait ends the job before it gets here.)
            if self._loading.get(partition) is me:
                del self._loading[partition]
                self._install(partition, shard, coordinator_epoch)
        try:
            await run_in_slices(load_then_install(), self.load_slice_s)
        except Exception:   # noqa: BLE001 - the log went away (topic deleted, leadership lost)
            if self._loading.get(partition) is asyncio.current_task():
                del self._loading[partition]
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, partition)

    def _load(self, partition: int, plog) -> GroupShard:
        return run_to_end(self._load_steps(partition, plog))

    def _load_steps(self, partition: int, plog):
        """Generator: replays the partition, yielding after each batch; returns the shard.
        Records appended while it replays (transaction markers written for this partition's
        offsets find no shard to apply to yet) are replayed too: it ends only once it has
        reached the log end without yielding in between. Plain offset commits are replayed
        latest-wins (kbroker.groups.latest_commits)."""
        shard = GroupShard(partition, self.config, topics=self.topics)
        latest = latest_commits.LatestCommits(shard, partition)
        held = latest.held
        is_offset_commit = record_codec.is_offset_commit_key
        n = 0
        for batch in batches_to_the_end(plog, caught_up=_CAUGHT_UP):
            if batch is _CAUGHT_UP or batch.is_transactional or len(held) > latest_commits.MAX_HELD:
                # (transaction markers are transactional batches too)
                yield from latest.replay_steps()
                if batch is _CAUGHT_UP:
                    continue
            yield
            if batch.is_control:
                ctype = batch.control_type()
                shard.offsets.complete_transaction(batch.producer_id, committed=int(ctype or 0) == 1)
                continue
            pid = batch.producer_id if batch.is_transactional else -1
            n += batch.records_count
            for i, (key, value) in enumerate(batch.keys_and_values()):
                if i % RECORDS_PER_STEP == RECORDS_PER_STEP - 1:
                    yield            # one commit of 1,000 partitions is one batch
                if pid < 0 and is_offset_commit(key):     # a plain offset commit
                    held.pop(key, None)          # to the end: the order of last writes
                    held[key] = value
                    continue
                yield from latest.replay_steps()
                try:
                    rec = record_codec.decode(key, value)
                except Exception:   # noqa: BLE001 - one bad record must not stop the load
                    log.exception("%s-%d: record %d of the batch at offset %d undecodable, skipped",
                                  OFFSETS_TOPIC, partition, i, batch.base_offset)
                    continue
                if rec is not None:
                    shard.replay(rec, producer_id=pid)
        shard.on_loaded(self.now_ms())
        if n:
            log.info("loaded %s-%d: %d records (%d offset commits left after latest-wins), %d groups",
                     OFFSETS_TOPIC, partition, n, latest.replayed, len(shard.groups))
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
        from kbroker.kraft.partition_change import internal_topic_replication_factor
        rf, why = internal_topic_replication_factor(int(cfg.get("offsets.topic.replication.factor", 3) or 3),
                                                    len(self.broker.image.live_brokers()))
        if why:   # never silently fewer replicas: FindCoordinator answers COORDINATOR_NOT_AVAILABLE
            log.warning("not creating %s yet: %s", OFFSETS_TOPIC, why)
            return
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
        """Run ``op(shard, now_ms)``; returns its response once its records are committed
        (raises CoordinatorError if they could not be)."""
        shard = self.shard_for(group_id)
        res = op(shard, self.now_ms())
        code = await self._write(shard, res)
        if code:
            raise CoordinatorError(code)
        return res.response

    async def run_parked(self, group_id: str, op: Callable[[GroupShard, Any, int], Result]):
        """Run ``op(shard, token, now_ms)`` for a request that may be answered later (JoinGroup,
        SyncGroup); returns whatever is eventually replied to ``token``."""
        shard = self.shard_for(group_id)
        token = asyncio.get_running_loop().create_future()
        parked = self._parked.setdefault(shard.partition, set())
        parked.add(token)
        token.add_done_callback(parked.discard)
        res = op(shard, token, self.now_ms())
        await self._write(shard, res)
        return await token

    async def commit_transactional_offsets(self, req: OffsetCommitRequest, producer_id: int,
                                           producer_epoch: int, transactional_id: str | None):
        """TxnOffsetCommit: (error, [(topic, [(partition, error)])]). The offsets are written as
        one transactional batch of the producer, so its COMMIT/ABORT marker decides them; they
        stay pending in the group's offset store until then. With ``transactional_id`` the
        group's partition must be in the producer's transaction (KIP-890 part 1)."""
        from kbroker.txn.offsets_append import verify_offsets_partition
        from kbroker.txn.errors import TxnErrors as E

        shard = self.shard_for(req.group_id)
        part = self.broker.replicas.get(OFFSETS_TOPIC, shard.partition)
        if part is None:
            raise CoordinatorError(errors.NOT_COORDINATOR)
        if transactional_id is not None:
            err = await verify_offsets_partition(self.broker, shard.partition, transactional_id,
                                                 producer_id, producer_epoch)
            if err:
                return err, []
        entry = part.producer_state.last_entry(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            return E.INVALID_PRODUCER_EPOCH, []
        res = shard.commit_transactional_offsets(req, producer_id, self.now_ms())
        res.producer = (producer_id, producer_epoch)
        code = await self._write(shard, res)
        if code:
            raise CoordinatorError(code)
        return res.response

    def _write(self, shard: GroupShard, res: Result) -> asyncio.Future:
        """Append ``res.records`` and release ``res.replies`` once the shard's writes so far
        are committed. A future of the error code (0 once committed)."""
        done = asyncio.get_running_loop().create_future()
        self._wake.set()   # the operation may have set a timer due sooner than the loop sleeps
        part = self.broker.replicas.get(OFFSETS_TOPIC, shard.partition)
        code = 0
        if self.shards.get(shard.partition) is not shard or part is None:
            code = errors.NOT_COORDINATOR          # unloaded while the operation ran
        elif res.records:
            code = self._append(shard, part, res)
        if code:
            self._release(res, code)
            done.set_result(code)
            return done
        target = shard.last_written
        if target < part.high_watermark:
            self._release(res, 0)
            done.set_result(0)
            return done

        def committed(f: asyncio.Future) -> None:
            err = errors.NOT_COORDINATOR if f.cancelled() else next(iter(f.result().values()), 0)
            code = coordinator_write_error(err) if err else 0
            if code:
                log.warning("group write to %s-%d up to offset %d not committed: error %s",
                            OFFSETS_TOPIC, shard.partition, target, err)
            self._release(res, code)
            if not done.done():
                done.set_result(code)
        self.broker.replicas.await_replication([(part, target)], self.config.commit_timeout_ms) \
            .add_done_callback(committed)
        return done

    def _append(self, shard: GroupShard, part, res: Result) -> int:
        """Append the records as one batch; 0, or the client's error after undoing them."""
        now = self.now_ms()
        ls = part.leader_state
        err = check_before_append(-1, len(ls.isr), self.broker.replicas.min_insync_replicas(part)) \
            if ls is not None else 0
        if not err:
            pid, epoch = res.producer or (-1, -1)
            builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, is_transactional=pid >= 0)
            for rec in res.records:
                key, value = record_codec.encode(rec)
                builder.append(key=key, value=value, timestamp=now)
            # coordinator origin: no sequence checks (a transaction's offsets carry none)
            result = self.broker.replicas.append(part, bytearray(builder.build()), now, origin="coordinator")
            err = result.error
            if not err:
                shard.last_written = result.last_offset
                return 0
        log.warning("appending %d group records to %s-%d failed (error %s): undoing them",
                    len(res.records), OFFSETS_TOPIC, shard.partition, err)
        self._undo(shard)
        return coordinator_write_error(err)

    def _undo(self, shard: GroupShard) -> None:
        """The state machines applied records the log refused: rebuild the shard from the log
        (Kafka reverts its timeline to the last written offset; parked requests are answered
        with an error and their members rejoin)."""
        p = shard.partition
        epoch = self.leadership.epochs.get(p)
        self._drop(p, errors.NOT_COORDINATOR)
        if epoch is not None:
            self.load(p, epoch)

    # Replies released per loop iteration: a rebalance of 500 members answers 500 parked
    # JoinGroups at once, and each answer resumes a request task (~0.1-0.2 ms to finish and
    # encode): all in one iteration held the loop for tens of milliseconds.
    RELEASE_PER_ITERATION = 16

    @classmethod
    def _release(cls, res: Result, code: int, start: int = 0) -> None:
        replies = res.replies
        end = start + cls.RELEASE_PER_ITERATION
        for token, response in replies[start:end]:
            if isinstance(token, asyncio.Future) and not token.done():
                if code:
                    token.set_exception(CoordinatorError(code))
                else:
                    token.set_result(response)
        if end < len(replies):
            asyncio.get_running_loop().call_soon(cls._release, res, code, end)

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
                        self._write(shard, shard.poll(now))   # answers follow the commit
                    except Exception:   # noqa: BLE001 - the loop must survive a bad timer
                        log.exception("group coordinator timer failed in %s-%d", OFFSETS_TOPIC, shard.partition)
            await asyncio.sleep(0)
