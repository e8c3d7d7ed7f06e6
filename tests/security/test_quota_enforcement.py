"""Quotas through the dispatcher (fake clock, no sockets): produce throttle_time_ms and the
connection muted for it, old versions held back, controller_mutation_rate refusing topic
creation with THROTTLING_QUOTA_EXCEEDED once exhausted (KIP-599)."""
from __future__ import annotations

import inspect

import pytest

from kbroker.handlers.dispatcher import Dispatcher
from kbroker.security.controller_ops import alter_client_quotas
from kbroker.wire.errors import Errors
from kbroker.wire.frame import decode_response, encode_request
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.records import BatchBuilder
from tests.offline_server import start_offline, stop_offline


class Conn:
    def __init__(self):
        self.state = {"principal": "User:alice"}
        self.peer = "127.0.0.1:5555"
        self.listener_name = "PLAINTEXT"
        self.muted = []

    def mute_for(self, s):
        self.muted.append(s)


@pytest.fixture
def broker(tmp_path):
    server = start_offline(tmp_path / "data")
    yield server
    stop_offline(server)


def call(server, conn, req, version, client_id="app"):
    frame = memoryview(encode_request(7, client_id, req, version))[4:]
    out = Dispatcher(server, server.api_specs).dispatch(conn, frame)
    if inspect.isawaitable(out):
        out = server.loop.run_until_complete(out)
    return decode_response(b"".join(bytes(c) for c in out)[4:], req.API_KEY, version)[1]


def set_quota(server, entity, key, value):
    server.loop.run_until_complete(server.controller.submit(alter_client_quotas([(entity, [(key, value, False)])], False)))


def create(server, conn, names, version=7, partitions=1):
    return call(server, conn, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]) for n in names],
        timeout_ms=10000), version)


def produce(server, conn, topic, size, version=9):
    batch = BatchBuilder(0)
    batch.append(value=b"x" * size, timestamp=server.clock.now_ms())
    return call(server, conn, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch.build())])]),
        version)


def test_produce_over_quota_is_answered_with_throttle_time_and_mutes_the_connection(broker):
    conn = Conn()
    assert create(broker, conn, ["t"]).topics[0].error_code == 0
    set_quota(broker, [("user", "alice")], "producer_byte_rate", 10_000)
    r = produce(broker, conn, "t", 5_000)
    assert r.throttle_time_ms == 0 and not conn.muted
    r = produce(broker, conn, "t", 20_000)       # 25 kB in one 1 s window of a 10 kB/s quota
    assert r.responses[0].partition_responses[0].error_code == 0
    assert r.throttle_time_ms > 1000
    assert conn.muted == [pytest.approx(r.throttle_time_ms / 1000)]
    assert broker.request_metrics.times[0].throttle >= r.throttle_time_ms    # ThrottleTimeMs metric
    other = Conn()                               # another user is not limited
    other.state["principal"] = "User:bob"
    assert produce(broker, other, "t", 50_000).throttle_time_ms == 0


def test_client_id_default_quota_applies_per_client(broker):
    conn = Conn()
    create(broker, conn, ["t"])
    set_quota(broker, [("client-id", None)], "producer_byte_rate", 10_000)
    assert call(broker, conn, _produce_req(broker, "t", 30_000), 9, client_id="a").throttle_time_ms > 0
    assert call(broker, conn, _produce_req(broker, "t", 5_000), 9, client_id="b").throttle_time_ms == 0


def _produce_req(server, topic, size):
    batch = BatchBuilder(0)
    batch.append(value=b"x" * size, timestamp=server.clock.now_ms())
    return ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch.build())])])


def test_old_produce_versions_get_their_answer_after_the_throttle(broker):
    conn = Conn()
    create(broker, conn, ["t"])
    set_quota(broker, [("user", "alice")], "producer_byte_rate", 100_000)
    frame = memoryview(encode_request(7, "app", _produce_req(broker, "t", 150_000), 5))[4:]
    out = Dispatcher(broker, broker.api_specs).dispatch(conn, frame)
    assert inspect.isawaitable(out)     # v5 clients do not back off themselves: the answer waits
    resp = decode_response(b"".join(bytes(c) for c in broker.loop.run_until_complete(out))[4:], 0, 5)[1]
    assert resp.throttle_time_ms > 0 and conn.muted


def test_controller_mutation_rate_refuses_once_exhausted(broker):
    conn = Conn()
    set_quota(broker, [("user", "alice")], "controller_mutation_rate", 2)
    first = create(broker, conn, ["a"], partitions=10)      # accepted, and over the quota now
    assert first.topics[0].error_code == 0 and first.throttle_time_ms > 0
    second = create(broker, conn, ["b", "c"])
    assert [t.error_code for t in second.topics] == [Errors.THROTTLING_QUOTA_EXCEEDED] * 2
    assert second.throttle_time_ms > 0
    assert "b" not in broker.image.topics_by_name
    old = create(broker, conn, ["d"], version=5)             # permissive before v6: done, throttled
    assert old.topics[0].error_code == 0 and old.throttle_time_ms > 0
    broker.clock.advance(20_000)
    assert create(broker, conn, ["e"]).topics[0].error_code == 0


def test_acks0_produce_counts_and_mutes_without_an_answer(broker):
    conn = Conn()
    create(broker, conn, ["t"])
    set_quota(broker, [("user", "alice")], "producer_byte_rate", 10_000)
    req = _produce_req(broker, "t", 30_000)
    req.acks = 0
    frame = memoryview(encode_request(7, "app", req, 9))[4:]
    assert Dispatcher(broker, broker.api_specs).dispatch(conn, frame) is None
    assert conn.muted and conn.muted[0] > 1.0
