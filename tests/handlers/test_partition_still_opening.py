"""A partition the metadata has but whose log is still being created in the admin thread is
answered NOT_LEADER_OR_FOLLOWER by ListOffsets and OffsetForLeaderEpoch, which clients retry
after a metadata refresh, as Kafka answers for a partition it knows but does not host; only a
partition the metadata does not have is UNKNOWN_TOPIC_OR_PARTITION. (librdkafka's 0085 failed
in CI with the latter: its consumer's offset reset queried a partition auto-created a moment
before, and gave up.)"""
import asyncio
from types import SimpleNamespace

from kbroker.broker.replica_manager import ReplicaManager
from kbroker.broker.storage import random_uuid
from kbroker.handlers import list_offsets, offset_for_leader_epoch
from kbroker.kraft.image import MetadataImage
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager
from kbroker.wire.errors import Errors
from kbroker.wire.generated.list_offsets_request import ListOffsetsRequest
from kbroker.wire.generated.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.topic_record import TopicRecord
from tests.replication.test_topic_removal import _apply


def _list_offsets(ctx, topic, indexes):
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[T(name=topic, partitions=[
        T.ListOffsetsPartition(partition_index=i, timestamp=-1, current_leader_epoch=-1) for i in indexes])])
    return [p.error_code for p in list_offsets.handle(ctx, req).topics[0].partitions]


def _epochs(ctx, topic, indexes):
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[T(topic=topic, partitions=[
        T.OffsetForLeaderPartition(partition=i, current_leader_epoch=-1, leader_epoch=0) for i in indexes])])
    return [p.error_code for p in offset_for_leader_epoch.handle(ctx, req).topics[0].partitions]


def test_a_partition_still_opening_is_retriable_and_served_once_open(tmp_path):
    async def run():
        lm = LogManager([str(tmp_path)], LogConfig())
        lm.start_background_io()   # new logs are created in the admin thread, as when serving
        image = MetadataImage()
        rm = ReplicaManager(1, lm, image, lambda t: LogConfig(), lambda: 1000)
        tid = random_uuid()
        _apply(image, rm, TopicRecord(name="t", topic_id=tid))
        _apply(image, rm, PartitionRecord(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1,
                                          leader_epoch=0, partition_epoch=0, removing_replicas=[],
                                          adding_replicas=[]))
        assert rm.get("t", 0) is None and lm.opening("t", 0) is not None   # its log: in the admin thread
        ctx = SimpleNamespace(broker=SimpleNamespace(replicas=rm), api_version=7)
        # partition 0 is opening; partition 1 and topic "nope" the metadata does not have
        assert _list_offsets(ctx, "t", [0, 1]) == [Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION]
        assert _list_offsets(ctx, "nope", [0]) == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
        ctx.api_version = 4
        assert _epochs(ctx, "t", [0, 1]) == [Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION]
        await lm.wait_opening()
        await asyncio.sleep(0)
        assert rm.get("t", 0) is not None
        assert _epochs(ctx, "t", [0]) == [Errors.NONE]
        ctx.api_version = 7
        assert _list_offsets(ctx, "t", [0]) == [Errors.NONE]
        lm.shutdown()
    asyncio.run(run())
