"""A deleted topic stops at once on this broker (Kafka's StopReplica with delete): acks=all
produces waiting on its partitions fail with UNKNOWN_TOPIC_OR_PARTITION instead of timing out,
the role listeners (the replica fetchers) hear REMOVED, and a follower never fetches a
re-created same-named topic's partitions under the old topic id."""
import asyncio
import uuid

from kbroker.broker.replica_manager import ReplicaManager
from kbroker.broker.storage import random_uuid
from kbroker.kraft.image import MetadataImage
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager
from kbroker.replication.fetcher import ReplicaFetcher
from kbroker.replication.roles import RoleChange
from kbroker.wire.errors import Errors
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.remove_topic_record import RemoveTopicRecord
from kbroker.wire.generated.topic_record import TopicRecord
from kbroker.wire.records import BatchBuilder
from kbroker.slices import run_to_end


def _apply(image, rm, rec):
    change = image.apply(rec)
    more = rm.on_metadata_record(rec, change, 0)
    if more is not None:              # a publisher may hand back steps (the loader runs them)
        run_to_end(more)


def test_delete_fails_waiting_produces_and_tells_the_role_listeners(tmp_path):
    async def run():
        lm = LogManager([str(tmp_path)], LogConfig())
        image = MetadataImage()
        rm = ReplicaManager(1, lm, image, lambda t: LogConfig(), lambda: 1000)
        heard = []
        rm.role_listeners.append(lambda part, change: heard.append((part.topic, part.index, change)))
        tid = random_uuid()
        _apply(image, rm, TopicRecord(name="t", topic_id=tid))
        _apply(image, rm, PartitionRecord(partition_id=0, topic_id=tid, replicas=[1, 2], isr=[1, 2], leader=1,
                                          leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        part = rm.get("t", 0)
        assert part is not None and rm.is_leader(part)
        b = BatchBuilder(0)
        b.append(value=b"v", timestamp=1)
        res = rm.append(part, bytearray(b.build()), 1000)
        waiting = rm.await_replication([(part, res.last_offset)], 30_000)   # broker 2 never fetches
        await asyncio.sleep(0)
        assert not waiting.done()
        heard.clear()
        _apply(image, rm, RemoveTopicRecord(topic_id=tid))
        got = await asyncio.wait_for(waiting, 1.0)        # not after the 30 s timeout
        assert got == {part: Errors.UNKNOWN_TOPIC_OR_PARTITION}
        assert heard == [("t", 0, RoleChange.REMOVED)]
        assert rm.get("t", 0) is None
        lm.shutdown()
    asyncio.run(run())


class _Replica:
    log_end_offset = 0
    latest_epoch = -1
    log_start_offset = 0


def test_a_fetch_names_each_topic_incarnation_by_its_own_id():
    f = ReplicaFetcher(2, 1)
    old, new = uuid.UUID(int=7), uuid.UUID(int=9)
    f.add("t", 5, old, 0, _Replica())      # (a partition of a deleted incarnation, still followed)
    f.add("t", 0, new, 0, _Replica())
    req = f.build_request(0)
    by_id = {t.topic_id: sorted(p.partition for p in t.partitions) for t in req.topics}
    assert by_id == {old: [5], new: [0]}
    f.remove("t", 5)
    assert [t.topic_id for t in f.build_request(0).topics] == [new]


def test_high_watermark_checkpoint_walks_the_partitions_in_steps(tmp_path, monkeypatch):
    """The periodic replication-offset-checkpoint pauses between groups of partitions (at
    10,000 partitions one walk held the loop ~10 ms) and still writes every partition."""
    from kbroker.log.checkpoint import OffsetCheckpointFile
    from kbroker.replication.hw_checkpoint import HW_CHECKPOINT

    async def run():
        lm = LogManager([str(tmp_path)], LogConfig())
        image = MetadataImage()
        rm = ReplicaManager(1, lm, image, lambda t: LogConfig(), lambda: 1000)
        monkeypatch.setattr(ReplicaManager, "HW_ROWS_PER_STEP", 2)
        tid = random_uuid()
        _apply(image, rm, TopicRecord(name="t", topic_id=tid))
        for i in range(5):
            _apply(image, rm, PartitionRecord(partition_id=i, topic_id=tid, replicas=[1], isr=[1], leader=1,
                                              leader_epoch=0, partition_epoch=0, removing_replicas=[],
                                              adding_replicas=[]))
            b = BatchBuilder(0)
            for _ in range(i + 1):
                b.append(value=b"v", timestamp=1)
            rm.append(rm.get("t", i), bytearray(b.build()), 1000)
        steps = rm.checkpoint_high_watermarks_steps()
        pauses = 0
        try:
            while True:
                next(steps)
                pauses += 1
        except StopIteration:
            pass
        written = OffsetCheckpointFile(str(tmp_path / HW_CHECKPOINT)).read()
        lm.shutdown()
        return pauses, written
    pauses, written = asyncio.run(run())
    assert pauses == 2
    assert written == {("t", i): i + 1 for i in range(5)}



def test_removed_partitions_need_no_cycle_collection(tmp_path):
    """A removed leader (an acks=all produce waiting on it) and a removed follower are never
    left in reference cycles: the serving broker freezes partitions out of the collector's
    reach (kbroker.gc_policy), where one in a cycle would stay for good. The follower goes at
    once; the leader when the deadline heap lets go of its answered produce."""
    import gc
    import weakref

    async def run():
        lm = LogManager([str(tmp_path)], LogConfig())
        image = MetadataImage()
        rm = ReplicaManager(1, lm, image, lambda t: LogConfig(), lambda: 1000)
        tid = random_uuid()
        _apply(image, rm, TopicRecord(name="t", topic_id=tid))
        for index, leader in ((0, 1), (1, 2)):
            _apply(image, rm, PartitionRecord(partition_id=index, topic_id=tid, replicas=[1, 2], isr=[1, 2],
                                              leader=leader, leader_epoch=0, partition_epoch=0,
                                              removing_replicas=[], adding_replicas=[]))
        lead, follow = rm.get("t", 0), rm.get("t", 1)
        b = BatchBuilder(0)
        b.append(value=b"v", timestamp=1)
        res = rm.append(lead, bytearray(b.build()), 1000)
        waiting = rm.await_replication([(lead, res.last_offset)], 30_000)
        follower_log = weakref.ref(follow.log)
        del lead, follow, res
        gc.collect()
        gc.disable()
        try:
            _apply(image, rm, RemoveTopicRecord(topic_id=tid))
            await asyncio.wait_for(waiting, 1.0)
            del waiting
            await asyncio.sleep(0.05)
            assert follower_log() is None
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            cyclic = [type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("kbroker.")]
            assert not cyclic, cyclic
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        lm.shutdown()
    asyncio.run(run())
