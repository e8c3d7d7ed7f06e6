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
import os
import uuid
from typing import Any, Iterable, Iterator

from kbroker.broker.storage import uuid_to_str
from kbroker.broker.stray_replicas import LocalLog, Stray, find_stray_logs
from kbroker.kraft.image import TOPIC_RESOURCE
from kbroker.kraft.raft_log import METADATA_TOPIC
from kbroker.replication.delayed_produce import DelayedProduces
from kbroker.replication.hw_checkpoint import HighWatermarkCheckpoints
from kbroker.replication.partition import AppendResult, Partition  # noqa: F401 (re-export)
from kbroker.replication.roles import RoleChange, apply_partition_state
from kbroker.slices import run_to_end
from kbroker.wire.errors import Errors
from kbroker.txn.partition_txns import PartitionTxns
from kbroker.txn.producer_state import ProducerStateManager

log = logging.getLogger("kbroker.replicas")


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class AppendWatch:
    """Stands in the waiters of the partitions it watches (``Partition.wake`` resolves it)
    from the moment a fetch decides to long-poll: records a wake-up before the fetch waits,
    and wakes the future the fetch then waits on (``fut``)."""
    __slots__ = ("fired", "fut")

    def __init__(self) -> None:
        self.fired = False
        self.fut: asyncio.Future | None = None

    def done(self) -> bool:
        return self.fired

    def set_result(self, _value) -> None:
        self.fired = True
        fut = self.fut
        if fut is not None and not fut.done():
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
        self.broker_epoch = -1
        self.delayed = DelayedProduces()           # acks=all produces awaiting the ISR
        self._expiry = None   # (deadline ms, timer handle) for the earliest of them
        self.role_listeners: list = []             # (part, RoleChange): the replica fetchers
        self.hw_checkpoints = HighWatermarkCheckpoints()
        # Until the image has caught up with the controller (``sweep_stray_logs``), a log on
        # disk of another topic id than the image names is left alone: the image may be the
        # stale one. The partitions that met one wait here.
        self.caught_up = False
        self._deferred: set[tuple[str, int]] = set()

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
                    self.sync_role(t.name, p.partition_id)

    def on_metadata_record(self, rec: Any, change: Any, offset: int) -> None:
        kind = type(rec).__name__
        if kind == "PartitionRecord":
            if self.node_id in rec.replicas:
                t = self.image.topics_by_id.get(rec.topic_id)
                if t is not None:
                    self._open(t.name, t.topic_id, rec.partition_id, rec.leader_epoch)
                    self.sync_role(t.name, rec.partition_id)
        elif kind == "PartitionChangeRecord":
            t = self.image.topics_by_id.get(rec.topic_id)
            st = t.partitions.get(rec.partition_id) if t is not None else None
            if st is not None and self.node_id in st.replicas and self.get(t.name, rec.partition_id) is None:
                self._open(t.name, t.topic_id, rec.partition_id, st.leader_epoch)  # reassigned here
            if t is not None:
                self.sync_role(t.name, rec.partition_id)
        elif kind == "RemoveTopicRecord":
            if change is not None:
                return self._remove_topic(change.name)   # the loader runs it in slices
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
        on_disk = self.log_manager.get(topic, index)
        if on_disk is not None and on_disk.topic_id not in (None, uuid_to_str(topic_id)):
            # the log of another incarnation of a same-named topic (deleted and re-created)
            if not self.caught_up:
                self._deferred.add((topic, index))
                log.info("%s-%d: the log on disk has topic id %s, the metadata so far %s; "
                         "opening it once caught up", topic, index, on_disk.topic_id, uuid_to_str(topic_id))
                return None
            self._move_aside([Stray(topic, index, f"topic id {on_disk.topic_id} is not {topic} any more")])
        cfg = self.log_config_for(topic)
        now = self.now_ms()

        def prepare(plog):
            # Producer state lives beside the log (Kafka's .snapshot files): reload the latest
            # snapshot, then replay the batches after it.
            psm = ProducerStateManager(plog.dir, producer_id_expiration_ms=self.producer_id_expiration_ms,
                                       topic_partition=f"{topic}-{index}", scan=not plog.fresh)
            # The replay also rebuilds the aborted-transaction index entries of the replayed range.
            txns = PartitionTxns(plog.dir, psm, scan=not plog.fresh)
            if plog.fresh:      # a directory made for it: no snapshot, no batch, nothing to replay
                txns.attach(plog)
            else:
                txns.recover(plog, now)
            return psm, txns

        def install(plog, psm, txns) -> Partition:
            part = Partition(topic, index, topic_id, plog, psm, leader_epoch, cfg)
            part.txns = txns
            part.advance_high_watermark(self._recovered_high_watermark(topic, index, plog))
            self.topics.setdefault(topic, {})[index] = part
            return part

        # A new partition's files are created in the log manager's admin thread (creating a
        # thousand of them on the event loop held every client for seconds); the partition
        # appears here when they exist. CreateTopics answers after that (server.create_topics).
        fut = None
        if self.log_manager.get(topic, index) is None:
            if self.log_manager.opening(topic, index) is not None:
                # Already being created (a PartitionChangeRecord came before the files): its
                # callback installs it and syncs the role from the image as it is then. A second
                # callback on the same future would find it installed and delete its log.
                return None
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
            self.sync_role(topic, index)   # the metadata record's sync_role ran before it existed
        fut.add_done_callback(created)
        return None

    # -- stray logs ----------------------------------------------------------------------------

    def sweep_stray_logs(self) -> list[Stray]:
        """Run once the image has caught up with the controller's committed metadata (the
        broker's registration is in it): move aside every log on disk this broker is not a
        replica of (``kbroker.broker.stray_replicas``), then open the replicas still closed
        (deferred above, or whose records were applied before this manager listened).
        Partitions already open are never touched. Returns the strays."""
        hosted = {(p.topic, p.index) for p in self.all_partitions()}
        local = [LocalLog(t, i, plog.topic_id) for (t, i), plog in self.log_manager.logs().items()
                 if (t, i) not in hosted and t != METADATA_TOPIC]
        strays = find_stray_logs(self.node_id, self.image, local)
        self._move_aside(strays)
        self.caught_up = True
        stray_keys = {(s.topic, s.partition) for s in strays}
        pending = self._deferred | ({(lg.topic, lg.partition) for lg in local} - stray_keys)
        self._deferred = set()
        for topic, index in sorted(pending):
            t = self.image.topics_by_name.get(topic)
            st = t.partitions.get(index) if t is not None else None
            if st is not None and self.node_id in st.replicas and self.get(topic, index) is None:
                if self._open(t.name, t.topic_id, index, st.leader_epoch) is not None:
                    self.sync_role(topic, index)
        return strays

    def _move_aside(self, strays: list[Stray]) -> None:
        for s in strays:
            log.warning("%s-%d is a stray log on broker %d (%s): moving it aside (-stray)",
                        s.topic, s.partition, self.node_id, s.reason)
        if strays:
            self.log_manager.delete_many([(s.topic, s.partition) for s in strays], self.now_ms(), stray=True)

    DELETED_PER_STEP = 100     # logs handed to the log manager per step of a topic's removal

    def _remove_topic(self, topic: str) -> Iterator[None]:
        """Steps (kbroker.slices) that drop a deleted topic's replicas: a 1,000-partition
        topic took ~15 ms in one go. The topic leaves ``topics`` in the first step, so
        nothing reaches its partitions while the rest runs."""
        parts = self.topics.pop(topic, None)
        if not parts:
            return
        for p in parts.values():
            # (Kafka's StopReplica with delete): acks=all produces waiting on it fail now rather
            # than at their timeout, and the replica fetchers drop it, so a same-named topic
            # created next is not fetched under this one's topic id.
            p.leader_state = None
            self._complete(self.delayed.fail(p, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            self._tell_role_listeners(p, RoleChange.REMOVED)
            self._wake(p)
            yield
        keys = [(topic, p.index) for p in parts.values()]
        for i in range(0, len(keys), self.DELETED_PER_STEP):
            try:
                # renames in the log manager's admin thread; one checkpoint, after the last
                self.log_manager.delete_many(keys[i:i + self.DELETED_PER_STEP], self.now_ms(), checkpoint=False)
            except Exception:
                log.exception("deleting the logs of %s failed", topic)
            yield
        self.log_manager.checkpoint_after_deletes()
        log.info("deleted topic %s (%d partitions)", topic, len(parts))

    # -- roles -------------------------------------------------------------------------------

    def sync_role(self, topic: str, index: int) -> RoleChange:
        """Make the local replica of ``topic-index`` what the image says: leader (tracking
        followers, serving produce and fetch) or follower (fetching from the leader)."""
        part = self.get(topic, index)
        t = self.image.topics_by_name.get(topic)
        st = t.partitions.get(index) if t is not None else None
        if part is None or st is None:
            return RoleChange.NONE
        if self._on_hw not in part.hw_listeners:
            part.hw_listeners.append(self._on_hw)
        removed = self.node_id not in st.replicas
        if removed:   # reassigned away: stop leading or following, then delete the replica
            change = RoleChange.BECAME_FOLLOWER
            part.leader_state = None
            part.leader_id = st.leader
            part.replicas, part.isr = list(st.replicas), list(st.isr)
        else:
            change = apply_partition_state(part, self.node_id, st.leader, st.leader_epoch,
                                           st.partition_epoch, st.replicas, st.isr, self.now_ms())
        if change is RoleChange.BECAME_FOLLOWER:
            self._complete(self.delayed.fail(part, Errors.NOT_LEADER_OR_FOLLOWER))
        elif change is RoleChange.ISR_CHANGED:
            self._on_hw(part)
        if change is not RoleChange.NONE and change is not RoleChange.STALE:
            self._tell_role_listeners(part, change)
        if removed:
            self._delete_replica(part)
        return change

    def _tell_role_listeners(self, part: Partition, change: RoleChange) -> None:
        for listener in self.role_listeners:
            try:
                listener(part, change)
            except Exception:
                log.exception("role listener failed for %s", part)

    def _delete_replica(self, part: Partition) -> None:
        """This broker is no longer a replica (a reassignment moved the partition away):
        Kafka's StopReplica with delete."""
        parts = self.topics.get(part.topic)
        if parts is None or parts.get(part.index) is not part:
            return
        del parts[part.index]
        if not parts:
            del self.topics[part.topic]
        self._wake(part)
        try:
            self.log_manager.delete(part.topic, part.index, self.now_ms())
        except Exception:
            log.exception("deleting the replica %s failed", part)
        log.info("%s: no longer a replica here (reassigned); its log is deleted", part)

    def on_partition_change(self, rec) -> None:
        """(Its presence tells the control plane that this manager follows leader epochs
        itself, through ``on_metadata_record``.)"""

    def is_leader(self, part: Partition) -> bool:
        return part.leader_state is not None

    # -- acks=all ------------------------------------------------------------------------------

    def min_insync_replicas(self, part: Partition) -> int:
        return getattr(part.config, "min_insync_replicas", 1)

    def await_replication(self, waits: list[tuple[Partition, int]], timeout_ms: int,
                          on_done=None) -> "asyncio.Future | None":
        """A future of {partition: error} once every (partition, last offset) is below its
        high watermark (or the partition's ISR fell under min.insync.replicas, it lost
        leadership, or ``timeout_ms`` passed); with ``on_done``, no future: it is called
        with that dict instead."""
        done = asyncio.get_running_loop().create_future() if on_done is None else None
        results: dict = {}
        left = len(waits)

        def one(part, err):
            nonlocal left
            results[part] = err
            left -= 1
            if left == 0:
                if on_done is not None:
                    on_done(results)
                elif not done.done():
                    done.set_result(results)

        deadline = self.now_ms() + timeout_ms
        for part, last in waits:
            self.delayed.add(part, last, deadline, (one, part))
            self._on_hw(part)
        self._expire_by(deadline)
        return done

    def _expire_by(self, deadline_ms: int) -> None:
        """One timer, for the earliest deadline of a waiting produce. A timer per request
        (30 s each, the deadlines only grow) kept a handle per acks=all request of the last
        30 s in the loop's heap."""
        if self._expiry is not None:
            if self._expiry[0] <= deadline_ms:
                return
            self._expiry[1].cancel()
        delay = max(1, deadline_ms - self.now_ms()) / 1000 + 0.001
        self._expiry = (deadline_ms, asyncio.get_running_loop().call_later(delay, self._expire))

    def _expire(self) -> None:
        self._expiry = None
        self._complete(self.delayed.expire(self.now_ms()))
        nxt = self.delayed.next_deadline()
        if nxt is not None:   # timer fired a hair early, or later deadlines remain
            self._expire_by(nxt)

    def _on_hw(self, part: Partition) -> None:
        ls = part.leader_state
        if ls is None or part not in self.delayed.by_key:
            return
        self._complete(self.delayed.on_high_watermark(part, part.high_watermark, len(ls.isr),
                                                      self.min_insync_replicas(part)))

    @staticmethod
    def _complete(done) -> None:
        for (cb, part), err in done:
            cb(part, err)

    # -- high watermark checkpoints ----------------------------------------------------------

    def _recovered_high_watermark(self, topic: str, index: int, plog) -> int:
        """A partition only this node replicates has all of its log committed; otherwise the
        last checkpointed high watermark (the leader's answers move it on)."""
        t = self.image.topics_by_name.get(topic)
        st = t.partitions.get(index) if t is not None else None
        if st is None or list(st.replicas) == [self.node_id]:
            return plog.log_end_offset
        return self.hw_checkpoints.recovered(os.path.dirname(plog.dir), topic, index)

    HW_ROWS_PER_STEP = 256

    def checkpoint_high_watermarks(self) -> None:
        """Write ``replication-offset-checkpoint`` in every log dir (Kafka: every
        replica.high.watermark.checkpoint.interval.ms, and at shutdown)."""
        run_to_end(self.checkpoint_high_watermarks_steps())

    def checkpoint_high_watermarks_steps(self) -> Iterator[None]:
        """The same in steps (kbroker.slices): at 10,000 partitions the walk took ~10 ms.
        Each row is the partition's high watermark when its step ran, which is what a
        restarted follower may start from; a partition deleted meanwhile is left out. Rows are
        grouped by log dir in the steps too (grouping 10,000 at the end held the loop ~3 ms)."""
        by_dir: dict[str, dict[tuple[str, int], int]] = {}
        for i, p in enumerate(list(self.all_partitions())):
            if i % self.HW_ROWS_PER_STEP == self.HW_ROWS_PER_STEP - 1:
                yield
            if not p.log.closed:
                d = os.path.dirname(p.log.dir)
                rows = by_dir.get(d)
                if rows is None:
                    rows = by_dir[d] = {}
                rows[(p.topic, p.index)] = p.high_watermark
        self.hw_checkpoints.write(by_dir)

    # -- the write path ----------------------------------------------------------------------

    def append(self, part: Partition, buf, now_ms: int, *, origin: str = "client") -> AppendResult:
        """The leader's write path (``Partition.append_as_leader``). Never awaits."""
        return part.append_as_leader(buf, now_ms, origin=origin)

    # -- fetch wake-ups ----------------------------------------------------------------------

    @staticmethod
    def _wake(part: Partition) -> None:
        part.wake()

    @staticmethod
    def watch_appends(parts: list[Partition]) -> "AppendWatch":
        """Start watching ``parts`` for an append (or deletion) now; hand the watch to
        ``wait_for_append``. A handler that decides to long-poll takes one before returning
        its coroutine: the coroutine runs later as a task, and an append in between must
        still wake it (else the fetch sleeps its whole max wait with data waiting)."""
        w = AppendWatch()
        for p in parts:
            p.waiters.add(w)
        return w

    @staticmethod
    def watch_steps(parts: list[Partition], step: int = 128):
        """Generator (kbroker.slices): ``watch_appends`` a step of partitions at a time (a
        watch on 10,000 partitions is ~1.3 ms whole); returns the watch."""
        w = AppendWatch()
        for i, p in enumerate(parts):
            if i and not i % step:
                yield
            p.waiters.add(w)
        return w

    @staticmethod
    def unwatch_steps(parts: list[Partition], watch: "AppendWatch", step: int = 128):
        """Generator: take ``watch`` back from ``parts``, a step at a time (partitions that see
        no append would keep it)."""
        for i, p in enumerate(parts):
            if i and not i % step:
                yield
            p.waiters.discard(watch)

    async def wait_for_append(self, parts: list[Partition], timeout_s: float,
                              watch: "AppendWatch | None" = None, fut: asyncio.Future | None = None,
                              take_back: bool = True) -> None:
        """Return when any of ``parts`` is appended to (or deleted), or after ``timeout_s``;
        at once if ``watch`` (from ``watch_appends(parts)``) saw one already. ``fut``: a
        future others may resolve too (a fetch session's parked partitions).
        ``take_back=False``: the caller takes ``watch`` back from ``parts`` (in slices).

        One future and one timer handle (``asyncio.wait_for`` would add a second future,
        callbacks and, before 3.12, a task hop to every long poll); the watch stays in the
        partitions' waiters and resolves the future, so nothing is added per partition."""
        if watch is None:
            if (not parts and fut is None) or timeout_s <= 0:
                return
            watch, take_back = self.watch_appends(parts), True
        try:
            if watch.fired or (not parts and fut is None) or timeout_s <= 0:
                return
            loop = asyncio.get_running_loop()
            fut = watch.fut = fut if fut is not None else loop.create_future()
            timer = loop.call_later(timeout_s, _resolve, fut)
            try:
                await fut
            finally:
                timer.cancel()
                watch.fut = None
        finally:
            if take_back:
                for p in parts:
                    p.waiters.discard(watch)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Wake every waiter and snapshot producer state at each log end (the LogManager
        then flushes and closes the logs)."""
        try:
            self.checkpoint_high_watermarks()
        except Exception:
            log.exception("writing the high watermark checkpoints failed")
        for p in self.all_partitions():
            self._wake(p)
            try:
                p.producer_state.take_snapshot(p.log.log_end_offset)
                if p.txns is not None:
                    p.txns.flush()
                    p.txns.close()
            except Exception:
                log.exception("producer state snapshot of %s failed", p)
