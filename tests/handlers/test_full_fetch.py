"""Full sessionless fetches (librdkafka sends nothing else): the per-partition shortcuts of the
handler give the answers the plain path gives. Partition entries share their default tagged
sub-structs (diverging epoch, current leader, snapshot id); topics are looked up once per run
of partitions of the same topic."""

import uuid

from kbroker.handlers import fetch as fetch_handler
from kbroker.replication import leader_hints
from kbroker.replication.roles import apply_partition_state
from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.fetch_response import FetchResponse
from kbroker.wire.primitives import Reader, Writer

from tests.handlers.test_handlers import batch, create, produce

T = FetchRequest.FetchTopic
_Part = FetchResponse.FetchableTopicResponse.PartitionData


def full_fetch(broker, topics, version=16):
    """``topics``: [(topic id, [(partition, fetch offset[, current leader epoch]), ...]), ...]
    in request order."""
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                       topics=[T(topic_id=tid, partitions=[T.FetchPartition(
                           partition=p[0], fetch_offset=p[1], current_leader_epoch=p[2] if len(p) > 2 else -1,
                           partition_max_bytes=1 << 20) for p in parts]) for tid, parts in topics],
                       forgotten_topics_data=[], rack_id="")
    return broker.call(1, version, req)


def encoded(resp, version=16) -> bytes:
    for t in resp.responses:
        for p in t.partitions:
            if hasattr(p.records, "to_bytes"):
                p.records = p.records.to_bytes()
    w = Writer()
    resp.encode_into(w, version)
    return w.getvalue()


def rebuilt_with_fresh_defaults(resp) -> FetchResponse:
    """The same response, each partition entry built by the generated constructor alone."""
    topics = []
    for t in resp.responses:
        parts = []
        for p in t.partitions:
            kw = {f: getattr(p, f) for f in _Part._FIELDS if f not in ("diverging_epoch", "current_leader", "snapshot_id")}
            if p.current_leader.leader_id != -1 or p.current_leader.leader_epoch != -1:
                kw["current_leader"] = _Part.LeaderIdAndEpoch(leader_id=p.current_leader.leader_id,
                                                              leader_epoch=p.current_leader.leader_epoch)
            parts.append(_Part(**kw))
        topics.append(FetchResponse.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=parts))
    return FetchResponse(throttle_time_ms=resp.throttle_time_ms, error_code=resp.error_code,
                         session_id=resp.session_id, responses=topics, node_endpoints=resp.node_endpoints)


def test_shared_default_substructs_encode_as_fresh_ones_and_stay_default(broker):
    tid = create(broker, "moved", 3).topics[0].topic_id
    for p in range(3):
        produce(broker, "moved", p, batch(2))
    part0 = broker.server.replicas.get("moved", 0)
    old_epoch = part0.leader_epoch
    # partition 0 has a new leader epoch the client has not seen: its entry is fenced and
    # carries the current leader (v16, KIP-951)
    apply_partition_state(part0, 1, 1, old_epoch + 1, part0.partition_epoch + 1, [1], [1], 0)
    resp = full_fetch(broker, [(tid, [(0, 0, old_epoch), (1, 0), (2, 2)])])
    p0, p1, p2 = resp.responses[0].partitions
    assert p0.error_code == Errors.FENCED_LEADER_EPOCH
    lid, lep = leader_hints.current_leader(broker.server.image, "moved", 0)
    assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (lid, lep)
    assert p1.error_code == 0 and p1.records.size > 0 and p2.error_code == 0 and p2.high_watermark == 2
    for p in (p1, p2):
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (-1, -1)
    # the shared defaults were not changed by the partition that got a leader
    assert fetch_handler._NO_LEADER._is_default() and fetch_handler._NO_DIVERGING._is_default()
    assert fetch_handler._NO_SNAPSHOT._is_default()
    expected = encoded(rebuilt_with_fresh_defaults(resp))
    assert encoded(resp) == expected
    back = FetchResponse.read(Reader(memoryview(expected), 0), 16)
    assert [(p.partition_index, p.current_leader.leader_id) for p in back.responses[0].partitions] == [
        (0, lid), (1, -1), (2, -1)]


def test_partitions_of_topics_named_in_any_order_get_their_own_answers(broker):
    a = create(broker, "a", 2).topics[0].topic_id
    b = create(broker, "b", 2).topics[0].topic_id
    produce(broker, "a", 0, batch(3))
    produce(broker, "a", 1, batch(1))
    produce(broker, "b", 1, batch(2))
    unknown = uuid.UUID(int=99)
    # a topic named twice, an unknown id between, a partition that does not exist
    resp = full_fetch(broker, [(a, [(0, 0)]), (unknown, [(0, 0)]), (b, [(1, 0), (5, 0)]), (a, [(1, 1), (0, 3)])])
    got = [(t.topic_id, p.partition_index, p.error_code, p.high_watermark, getattr(p.records, "size", 0) > 0)
           for t in resp.responses for p in t.partitions]
    assert got == [
        (a, 0, 0, 3, True),
        (unknown, 0, Errors.UNKNOWN_TOPIC_ID, -1, False),
        (b, 1, 0, 2, True),
        (b, 5, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, False),
        (a, 1, 0, 1, False),        # caught up
        (a, 0, 0, 3, False),        # caught up
    ]


def test_a_partition_the_response_limit_would_cut_gets_no_records(broker):
    # as Kafka: the response's byte limit may cut a trailing batch, never a partition's first
    # (the Java consumer fails on a partition answered with no whole batch)
    tid = create(broker, "cut", 2).topics[0].topic_id
    size = len(batch(3))
    for p in range(2):
        produce(broker, "cut", p, batch(3))
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=size + 10, session_id=0, session_epoch=-1,
                       topics=[T(topic_id=tid, partitions=[T.FetchPartition(
                           partition=p, fetch_offset=0, current_leader_epoch=-1, partition_max_bytes=1 << 20)
                           for p in range(2)])], forgotten_topics_data=[], rack_id="")
    p0, p1 = broker.call(1, 16, req).responses[0].partitions
    assert p0.error_code == 0 and p0.records.size == size
    assert p1.error_code == 0 and p1.high_watermark == 3 and getattr(p1.records, "size", 0) == 0
