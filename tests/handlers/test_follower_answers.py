"""ListOffsets and OffsetForLeaderEpoch are answered by a partition's leader only (as in Kafka):
a follower's high watermark and epoch cache lag the leader's, so a client with stale metadata
gets NOT_LEADER_OR_FOLLOWER and asks again, never an offset that goes backwards. The debugging
replica id (-2, tools) may still read a follower's offsets."""

from kbroker.replication.roles import apply_partition_state
from kbroker.wire.records import RecordBatch
from kbroker.wire.errors import Errors
from kbroker.wire.generated.list_offsets_request import ListOffsetsRequest
from kbroker.wire.generated.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest

from tests.handlers.test_handlers import batch, create, produce


def list_latest(broker, replica_id=-1):
    L = ListOffsetsRequest.ListOffsetsTopic
    r = broker.call(2, 7, ListOffsetsRequest(replica_id=replica_id, topics=[L(name="p", partitions=[
        L.ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=-1)])]))
    return r.topics[0].partitions[0]


def epoch_end(broker, epoch):
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    r = broker.call(23, 4, OffsetForLeaderEpochRequest(replica_id=-1, topics=[T(topic="p", partitions=[
        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=epoch)])]))
    return r.topics[0].partitions[0]


def test_a_follower_refers_offset_queries_to_the_leader(broker):
    create(broker, "p")
    produce(broker, "p", 0, batch(3))
    part = broker.server.replicas.get("p", 0)
    epoch = part.leader_epoch
    leader_answer = list_latest(broker)
    assert (leader_answer.error_code, leader_answer.offset) == (0, 3)
    assert (epoch_end(broker, epoch).error_code, epoch_end(broker, epoch).end_offset) == (0, 3)

    # the controller moves leadership to broker 2: this node follows
    apply_partition_state(part, 1, 2, epoch + 1, part.partition_epoch + 1, [1, 2], [1, 2], 0)
    assert list_latest(broker).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert epoch_end(broker, epoch).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    debug = list_latest(broker, replica_id=-2)
    assert (debug.error_code, debug.offset) == (0, 3)


def test_only_a_client_is_held_to_the_high_watermark(broker):
    """ListOffsets latest from a client is the high watermark; from anyone else (a replica
    id, the debugging id -2) it is the replica's own log end, as in Kafka: fault tests use it
    to compare replicas' logs, a follower's fetched tail included."""
    create(broker, "p")
    produce(broker, "p", 0, batch(3))
    part = broker.server.replicas.get("p", 0)
    apply_partition_state(part, 1, 2, part.leader_epoch + 1, part.partition_epoch + 1, [1, 2], [1, 2], 0)
    tail = bytearray(batch(2))
    RecordBatch(tail).base_offset = 3
    RecordBatch(tail).partition_leader_epoch = part.leader_epoch
    part.append_as_follower(tail, 0)
    assert (part.log_end_offset, part.high_watermark) == (5, 3)
    debug = list_latest(broker, replica_id=-2)
    assert (debug.error_code, debug.offset) == (0, 5)
