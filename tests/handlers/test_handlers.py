import asyncio

from kbroker.wire.errors import Errors
from kbroker.wire.generated.api_versions_request import ApiVersionsRequest
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.delete_topics_request import DeleteTopicsRequest
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.init_producer_id_request import InitProducerIdRequest
from kbroker.wire.generated.list_offsets_request import ListOffsetsRequest
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.records import BatchBuilder, iter_batches


def create(h, name, partitions=1, configs=None, version=7, validate_only=False):
    T = CreateTopicsRequest.CreatableTopic
    cfgs = [T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()]
    return h.call(19, version, CreateTopicsRequest(topics=[T(name=name, num_partitions=partitions, replication_factor=-1,
                                                               assignments=[], configs=cfgs)],
                                                   validate_only=validate_only))


def batch(n=3, pid=-1, seq=-1, ts=None):
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    for i in range(n):
        b.append(key=b"k%d" % i, value=b"v%d" % i, timestamp=ts if ts is not None else 1_700_000_000_000 + i)
    return b.build()


def produce(h, topic, part, records, acks=-1, version=9):
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(acks=acks, timeout_ms=1000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=part, records=records)])])
    return h.call(0, version, req)


def fetch(h, topic, part, offset, version=12, max_wait=0, min_bytes=0, session_id=0, epoch=-1, topic_id=None):
    T = FetchRequest.FetchTopic
    req = FetchRequest(max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=1 << 20, session_id=session_id,
                       session_epoch=epoch, topics=[T(topic=topic, topic_id=topic_id or T().topic_id, partitions=[
                           T.FetchPartition(partition=part, fetch_offset=offset, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[])
    return h.call(1, version, req)


def test_api_versions_from_registry(broker):
    r = broker.call(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert keys[0] == (0, 11) and keys[1] == (4, 17) and keys[3] == (0, 12) and keys[18] == (0, 4)
    assert r.finalized_features[0].name == "metadata.version"


def test_create_describe_delete(broker):
    r = create(broker, "t1", 3, {"retention.ms": "1000"})
    res = r.topics[0]
    assert res.error_code == 0 and res.num_partitions == 3
    assert {c.name: c.value for c in res.configs}["retention.ms"] == "1000"
    assert create(broker, "t1").topics[0].error_code == Errors.TOPIC_ALREADY_EXISTS
    assert create(broker, "t2", configs={"no.such": "1"}).topics[0].error_code == Errors.INVALID_CONFIG
    assert create(broker, "t2", configs={"retention.ms": "abc"}).topics[0].error_code == Errors.INVALID_CONFIG
    assert create(broker, "t3", validate_only=True).topics[0].error_code == 0
    md = broker.call(3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False))
    assert [t.name for t in md.topics] == ["t1"]
    assert md.topics[0].topic_id == res.topic_id
    assert md.topics[0].topic_authorized_operations == -2147483648
    assert md.cluster_id == broker.server.cluster_id and md.controller_id == 1
    d = broker.call(20, 6, DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=res.topic_id)]))
    assert d.responses[0].error_code == 0 and d.responses[0].name == "t1"
    assert broker.server.replicas.get("t1", 0) is None


def test_metadata_auto_create_and_v0_all_topics(broker):
    Topic = MetadataRequest.MetadataRequestTopic
    r = broker.call(3, 9, MetadataRequest(topics=[Topic(name="auto")], allow_auto_topic_creation=True))
    assert r.topics[0].error_code == 0 and len(r.topics[0].partitions) == 1
    r = broker.call(3, 9, MetadataRequest(topics=[Topic(name="nope")], allow_auto_topic_creation=False))
    assert r.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    r = broker.call(3, 0, MetadataRequest(topics=[]))
    assert [t.name for t in r.topics] == ["auto"]
    r = broker.call(3, 1, MetadataRequest(topics=[]))
    assert r.topics == []


def test_produce_fetch_roundtrip_and_errors(broker):
    create(broker, "p", 2)
    r = produce(broker, "p", 0, batch(3))
    pr = r.responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset) == (0, 0)
    r = produce(broker, "p", 0, batch(2))
    assert r.responses[0].partition_responses[0].base_offset == 3
    assert produce(broker, "p", 5, batch(1)).responses[0].partition_responses[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    bad = bytearray(batch(1))
    bad[-1] ^= 0xFF
    assert produce(broker, "p", 0, bytes(bad)).responses[0].partition_responses[0].error_code == Errors.CORRUPT_MESSAGE
    assert produce(broker, "p", 0, batch(1), acks=0) is None
    f = fetch(broker, "p", 0, 0)
    part = f.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 6
    data = part.records.to_bytes()
    assert [b.base_offset for b in iter_batches(data)] == [0, 3, 5]
    f = fetch(broker, "p", 0, 100)
    assert f.responses[0].partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE
    L = ListOffsetsRequest.ListOffsetsTopic
    lo = broker.call(2, 7, ListOffsetsRequest(replica_id=-1, topics=[L(name="p", partitions=[
        L.ListOffsetsPartition(partition_index=0, timestamp=-1),
        L.ListOffsetsPartition(partition_index=1, timestamp=-2)])]))
    assert [p.offset for p in lo.topics[0].partitions] == [6, 0]
    lo = broker.call(2, 1, ListOffsetsRequest(replica_id=-1, topics=[L(name="p", partitions=[
        L.ListOffsetsPartition(partition_index=0, timestamp=1_700_000_000_001)])]))
    assert lo.topics[0].partitions[0].offset == 1


def test_message_too_large(broker):
    create(broker, "big", configs={"max.message.bytes": "200"})
    b = BatchBuilder()
    b.append(value=b"x" * 500, timestamp=1_700_000_000_000)
    assert produce(broker, "big", 0, b.build()).responses[0].partition_responses[0].error_code == Errors.MESSAGE_TOO_LARGE


def test_idempotent_producer_dedup_and_sequence(broker):
    create(broker, "i")
    pid = broker.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000)).producer_id
    assert pid >= 0
    b0 = batch(2, pid=pid, seq=0)
    first = produce(broker, "i", 0, b0).responses[0].partition_responses[0]
    dup = produce(broker, "i", 0, b0).responses[0].partition_responses[0]
    assert (first.error_code, dup.error_code, dup.base_offset) == (0, 0, first.base_offset)
    gap = produce(broker, "i", 0, batch(1, pid=pid, seq=5)).responses[0].partition_responses[0]
    assert gap.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    ok = produce(broker, "i", 0, batch(1, pid=pid, seq=2)).responses[0].partition_responses[0]
    assert (ok.error_code, ok.base_offset) == (0, 2)
    pid2 = broker.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000)).producer_id
    assert pid2 != pid


def test_fetch_long_poll_wakes_on_append(broker):
    import asyncio
    create(broker, "w")
    spec = broker.server.api_specs[1]
    from kbroker.handlers.context import RequestContext
    T = FetchRequest.FetchTopic
    req = FetchRequest(max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                       topics=[T(topic="w", partitions=[T.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[])

    async def main():
        ctx = RequestContext(broker.server, None, 1, 12, 1, "t", 0, "PLAINTEXT")
        pending = asyncio.ensure_future(spec.handle(ctx, req))
        await asyncio.sleep(0.05)
        assert not pending.done()
        produce(broker, "w", 0, batch(1))
        resp = await asyncio.wait_for(pending, 2)
        return resp
    resp = broker.loop.run_until_complete(main())
    assert resp.responses[0].partitions[0].records.size > 0


def test_incremental_fetch_session(broker):
    create(broker, "s")
    produce(broker, "s", 0, batch(1))
    full = fetch(broker, "s", 0, 0, epoch=0)
    sid = full.session_id
    assert sid != 0 and full.responses[0].partitions[0].records.size > 0
    # the client moved to offset 1; nothing new: the incremental response lists no partition
    T = FetchRequest.FetchTopic
    inc = broker.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=sid,
                                          session_epoch=1, topics=[T(topic="s", partitions=[
                                              T.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])],
                                          forgotten_topics_data=[]))
    assert inc.error_code == 0 and inc.responses == []
    produce(broker, "s", 0, batch(1))
    inc = broker.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=sid,
                                          session_epoch=2, topics=[], forgotten_topics_data=[]))
    assert inc.responses[0].partitions[0].high_watermark == 2
    assert inc.responses[0].partitions[0].records.size > 0
    bad = broker.call(1, 12, FetchRequest(max_wait_ms=0, min_bytes=0, session_id=sid, session_epoch=7, topics=[],
                                          forgotten_topics_data=[]))
    assert bad.error_code == Errors.INVALID_FETCH_SESSION_EPOCH


def test_fetch_by_topic_id(broker):
    tid = create(broker, "id").topics[0].topic_id
    produce(broker, "id", 0, batch(1))
    f = fetch(broker, None, 0, 0, version=13, topic_id=tid)
    assert f.responses[0].topic_id == tid and f.responses[0].partitions[0].records.size > 0
    import uuid
    f = fetch(broker, None, 0, 0, version=13, topic_id=uuid.UUID(int=77))
    assert f.responses[0].partitions[0].error_code == Errors.UNKNOWN_TOPIC_ID


def test_produce_without_key_to_compacted_topic_reports_record_errors(broker):
    create(broker, "compacted", configs={"cleanup.policy": "compact"})
    b = BatchBuilder()
    for i, k in enumerate([b"k0", None, b"k2"]):
        b.append(key=k, value=b"v", timestamp=1_700_000_000_000 + i)
    for version in (8, 9):
        part = produce(broker, "compacted", 0, b.build(), version=version).responses[0].partition_responses[0]
        assert part.error_code == Errors.INVALID_RECORD
        assert [e.batch_index for e in part.record_errors] == [1]
        assert "without key" in part.record_errors[0].batch_index_error_message
        assert "without key" in part.error_message
    ok = produce(broker, "compacted", 0, batch(3)).responses[0].partition_responses[0]
    assert (ok.error_code, ok.base_offset) == (0, 0)


def test_metadata_auto_create_of_a_topic_not_yet_in_this_brokers_image(broker):
    """On a cluster, another broker may have created the topic (TOPIC_ALREADY_EXISTS) while
    this broker's image has not caught up yet: the answer is LEADER_NOT_AVAILABLE (retriable,
    as Kafka), never UNKNOWN_TOPIC_OR_PARTITION, which tells a client the topic is gone."""
    from types import SimpleNamespace

    async def created_elsewhere(topics, validate_only=False):
        return [SimpleNamespace(name=t.name, error=Errors.TOPIC_ALREADY_EXISTS) for t in topics]
    broker.server.create_topics = created_elsewhere
    Topic = MetadataRequest.MetadataRequestTopic
    r = broker.call(3, 9, MetadataRequest(topics=[Topic(name="lagging")], allow_auto_topic_creation=True))
    assert r.topics[0].error_code == Errors.LEADER_NOT_AVAILABLE and r.topics[0].partitions == []


def test_metadata_auto_create_answers_in_bounded_time_while_the_controller_is_unreachable(broker, monkeypatch):
    """A creation stuck on the controller (an election under way) is answered, after a bounded
    wait, with the retriable LEADER_NOT_AVAILABLE; the connection stays open and a retry joins
    the creation instead of starting another."""
    import time

    from kbroker.handlers import auto_create
    monkeypatch.setattr(auto_create, "WAIT_S", 0.3)
    calls = []

    async def unreachable(topics, validate_only=False):
        calls.append([t.name for t in topics])
        await asyncio.sleep(3600)
    broker.server.create_topics = unreachable
    Topic = MetadataRequest.MetadataRequestTopic
    for _ in range(2):
        t0 = time.monotonic()
        r = broker.call(3, 12, MetadataRequest(topics=[Topic(name="stuck")], allow_auto_topic_creation=True))
        assert time.monotonic() - t0 < 2
        assert r.topics[0].error_code == Errors.LEADER_NOT_AVAILABLE and r.topics[0].name == "stuck"
    assert calls == [["stuck"]]
