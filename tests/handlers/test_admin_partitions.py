"""CreatePartitions, DescribeTopicPartitions, DeleteRecords, DescribeCluster, DescribeLogDirs
and OffsetForLeaderEpoch driven directly (the ``broker`` fixture of conftest.py)."""

import pytest

from kbroker.handlers import registry
from kbroker.wire.errors import Errors
from kbroker.wire.generated.create_partitions_request import CreatePartitionsRequest
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.delete_records_request import DeleteRecordsRequest
from kbroker.wire.generated.describe_cluster_request import DescribeClusterRequest
from kbroker.wire.generated.describe_log_dirs_request import DescribeLogDirsRequest
from kbroker.wire.generated.describe_topic_partitions_request import DescribeTopicPartitionsRequest
from kbroker.wire.generated.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.records import BatchBuilder

MODULES = ("create_partitions", "describe_topic_partitions", "delete_records", "describe_cluster",
           "describe_log_dirs", "offset_for_leader_epoch")


@pytest.fixture
def admin(broker):
    broker.server.api_specs.update(registry.load(MODULES))
    return broker


def create(h, name, partitions=1, configs=None):
    T = CreateTopicsRequest.CreatableTopic
    r = h.call(19, 7, CreateTopicsRequest(topics=[T(
        name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
        configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])]))
    assert r.topics[0].error_code == 0
    return r.topics[0]


def produce(h, topic, part, n):
    b = BatchBuilder()
    for i in range(n):
        b.append(key=b"k", value=b"v%d" % i, timestamp=1_700_000_000_000 + i)
    T = ProduceRequest.TopicProduceData
    r = h.call(0, 9, ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=part, records=b.build())])]))
    assert r.responses[0].partition_responses[0].error_code == 0


def grow(h, topics, validate_only=False, version=3):
    T = CreatePartitionsRequest.CreatePartitionsTopic
    req = CreatePartitionsRequest(topics=[
        T(name=n, count=c, assignments=None if a is None else [T.CreatePartitionsAssignment(broker_ids=x) for x in a])
        for n, c, a in topics], timeout_ms=1000, validate_only=validate_only)
    return [(r.name, r.error_code, r.error_message) for r in h.call(37, version, req).results]


def describe_partitions(h, names, limit=2000, cursor=None):
    C = DescribeTopicPartitionsRequest.Cursor
    return h.call(75, 0, DescribeTopicPartitionsRequest(
        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in names],
        response_partition_limit=limit, cursor=None if cursor is None else C(topic_name=cursor[0], partition_index=cursor[1])))


def delete_records(h, topic, offsets, version=2):
    T = DeleteRecordsRequest.DeleteRecordsTopic
    r = h.call(21, version, DeleteRecordsRequest(topics=[T(name=topic, partitions=[
        T.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items()])], timeout_ms=1000))
    return {p.partition_index: (p.error_code, p.low_watermark) for p in r.topics[0].partitions}


def test_create_partitions(admin):
    create(admin, "t", 2)
    assert grow(admin, [("t", 4, None)], validate_only=True) == [("t", 0, None)]
    assert len(admin.server.image.topic("t").partitions) == 2
    assert grow(admin, [("t", 4, None)]) == [("t", 0, None)]
    assert sorted(admin.server.image.topic("t").partitions) == [0, 1, 2, 3]
    assert admin.server.replicas.get("t", 3) is not None      # the broker opened the new logs
    produce(admin, "t", 3, 2)
    r = grow(admin, [("t", 4, None)])
    assert r[0][1] == Errors.INVALID_PARTITIONS and r[0][2] == "Topic already has 4 partition(s)."
    assert grow(admin, [("t", 3, None)])[0][1] == Errors.INVALID_PARTITIONS
    assert grow(admin, [("missing", 3, None)])[0][1] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert grow(admin, [("t", 6, [[1]])])[0][1] == Errors.INVALID_REPLICA_ASSIGNMENT
    assert grow(admin, [("t", 5, [[2]])])[0][1] == Errors.INVALID_REPLICA_ASSIGNMENT
    assert grow(admin, [("t", 5, [[1, 1]])])[0][1] == Errors.INVALID_REPLICA_ASSIGNMENT
    assert grow(admin, [("t", 5, [[1]])], version=0) == [("t", 0, None)]
    assert [c for _, c, _ in grow(admin, [("t", 9, None), ("t", 9, None)])] == [Errors.INVALID_REQUEST] * 2


def test_describe_topic_partitions_pages(admin):
    a = create(admin, "a", 3)
    create(admin, "b", 2)
    r = describe_partitions(admin, [])
    assert [(t.name, len(t.partitions)) for t in r.topics] == [("a", 3), ("b", 2)]
    assert r.topics[0].topic_id == a.topic_id and r.next_cursor is None
    p = r.topics[0].partitions[0]
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.offline_replicas) == (1, 0, [1], [1], [])
    assert p.eligible_leader_replicas == [] and p.last_known_elr == []   # Java's admin client needs lists
    r = describe_partitions(admin, [], limit=2)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics] == [("a", [0, 1])]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("a", 2)
    r = describe_partitions(admin, [], limit=2, cursor=("a", 2))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics] == [("a", [2]), ("b", [0])]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("b", 1)
    r = describe_partitions(admin, ["a"], limit=3)
    assert r.next_cursor is None and len(r.topics[0].partitions) == 3
    r = describe_partitions(admin, ["a", "b"], limit=3)
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("b", 0)
    r = describe_partitions(admin, ["nope", "bad/name"])
    assert {t.name: t.error_code for t in r.topics} == {
        "nope": Errors.UNKNOWN_TOPIC_OR_PARTITION, "bad/name": Errors.INVALID_TOPIC_EXCEPTION}
    r = describe_partitions(admin, ["a"], cursor=("b", 0))
    assert r.topics[0].error_code == Errors.INVALID_REQUEST


def test_delete_records(admin):
    create(admin, "t", 2)
    produce(admin, "t", 0, 10)
    assert delete_records(admin, "t", {0: 4}) == {0: (0, 4)}
    assert admin.server.replicas.get("t", 0).log.log_start_offset == 4
    assert delete_records(admin, "t", {0: 2}) == {0: (0, 4)}          # never moves back
    assert delete_records(admin, "t", {0: 11})[0][0] == Errors.OFFSET_OUT_OF_RANGE
    assert delete_records(admin, "t", {0: -1}, version=0) == {0: (0, 10)}
    assert delete_records(admin, "t", {1: -1}) == {1: (0, 0)}
    assert delete_records(admin, "t", {0: -5})[0][0] == Errors.OFFSET_OUT_OF_RANGE
    assert delete_records(admin, "t", {7: 0})[7][0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    create(admin, "c", 1, {"cleanup.policy": "compact"})
    assert delete_records(admin, "c", {0: 0})[0][0] == Errors.POLICY_VIOLATION


def test_describe_cluster(admin):
    r = admin.call(60, 1, DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1))
    assert r.error_code == 0 and r.cluster_id == admin.server.cluster_id and r.controller_id == 1
    assert [(b.broker_id, b.port) for b in r.brokers] == [(1, 9092)]
    assert r.cluster_authorized_operations > 0
    r = admin.call(60, 0, DescribeClusterRequest())
    assert r.error_code == 0 and r.cluster_authorized_operations == -2147483648
    assert admin.call(60, 1, DescribeClusterRequest(endpoint_type=2)).error_code == Errors.MISMATCHED_ENDPOINT_TYPE
    assert admin.call(60, 1, DescribeClusterRequest(endpoint_type=7)).error_code == Errors.UNSUPPORTED_ENDPOINT_TYPE


def test_describe_log_dirs(admin):
    create(admin, "t", 2)
    produce(admin, "t", 1, 5)
    for v in (0, 4):
        r = admin.call(35, v, DescribeLogDirsRequest(topics=None))
        (d,) = r.results
        assert d.error_code == 0 and d.log_dir == admin.server.log_manager.log_dirs[0]
        topics = {t.name: {p.partition_index: p.partition_size for p in t.partitions} for t in d.topics}
        assert set(topics) == {"t"} and topics["t"][0] == 0 and topics["t"][1] > 0
    assert d.total_bytes > 0 and 0 <= d.usable_bytes <= d.total_bytes
    T = DescribeLogDirsRequest.DescribableLogDirTopic
    r = admin.call(35, 4, DescribeLogDirsRequest(topics=[T(topic="t", partitions=[1])]))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in r.results[0].topics] == [("t", [1])]


def test_offset_for_leader_epoch(admin):
    create(admin, "t")
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic

    def ask(epoch, current=-1, version=4, part=0, topic="t"):
        r = admin.call(23, version, OffsetForLeaderEpochRequest(replica_id=-1, topics=[T(topic=topic, partitions=[
            T.OffsetForLeaderPartition(partition=part, current_leader_epoch=current, leader_epoch=epoch)])]))
        p = r.topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    # nothing written yet, but the leader started epoch 0 at offset 0 when it was elected
    # (Kafka's makeLeader assigns the epoch start offset in the leader-epoch cache)
    assert ask(0) == (0, 0, 0)
    produce(admin, "t", 0, 3)
    assert ask(0) == (0, 0, 3)
    assert ask(0, current=0) == (0, 0, 3)
    assert ask(0, current=1)[0] == Errors.UNKNOWN_LEADER_EPOCH
    assert ask(5) == (0, -1, -1)
    assert ask(0, version=0) == (0, -1, 3)
    assert ask(0, part=4)[0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
