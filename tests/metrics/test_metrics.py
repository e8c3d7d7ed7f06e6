"""Request counters and the scrape-time collector, driven through the real dispatcher and a
real (listener-less) broker: no sockets."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kbroker.handlers.dispatcher import Dispatcher
from kbroker.metrics.collector import BrokerCollector
from kbroker.wire.frame import encode_request
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.records import BatchBuilder
from tests.handlers.conftest import broker  # noqa: F401  (fixture)


def _batch(n: int, size: int = 10) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(key=b"k", value=b"x" * size, timestamp=1000 + i)
    return bytes(b.build())


def _dispatch(harness, req, version):
    d = Dispatcher(harness.server, harness.server.api_specs)
    frame = memoryview(encode_request(7, "t", req, version))[4:]
    out = d.dispatch(None, frame)
    if hasattr(out, "__await__"):
        out = harness.loop.run_until_complete(out)
    return out


def _scrape(server):
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BrokerCollector(server, server.request_metrics))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples}


def test_produce_counts_bytes_messages_and_errors(broker):  # noqa: F811
    T = CreateTopicsRequest.CreatableTopic
    _dispatch(broker, CreateTopicsRequest(topics=[T(name="mt", num_partitions=2, replication_factor=1)], timeout_ms=1000), 7)
    P = ProduceRequest.TopicProduceData
    good, bad = _batch(3, 20) + _batch(1, 20), _batch(2)   # every batch of a request counts
    req = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[P(name="mt", partition_data=[
        P.PartitionProduceData(index=0, records=good), P.PartitionProduceData(index=9, records=bad)])])
    _dispatch(broker, req, 9)
    m = _scrape(broker.server)
    assert m[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "mt"),))] == 4
    assert m[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "mt"),))] == len(good)
    assert m[("kafka_server_brokertopicmetrics_bytesrejected_total", (("topic", "mt"),))] == len(bad)
    assert m[("kafka_server_brokertopicmetrics_failedproducerequests_total", (("topic", "mt"),))] == 1
    assert m[("kafka_network_requestmetrics_errors_total",
              (("error", "UNKNOWN_TOPIC_OR_PARTITION"), ("request", "Produce")))] == 1
    assert m[("kafka_network_requestmetrics_requests_total", (("request", "Produce"), ("version", "9")))] == 1
    assert m[("kafka_log_log_size", (("partition", "0"), ("topic", "mt")))] == len(good)
    assert m[("kafka_log_log_logendoffset", (("partition", "0"), ("topic", "mt")))] == 4
    assert m[("kafka_controller_kafkacontroller_globaltopiccount", ())] == 1
    assert m[("kafka_server_replicamanager_partitioncount", ())] == 2


def test_nested_error_codes_are_counted(broker):  # noqa: F811
    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(topics=[T(name="ok1", num_partitions=1, replication_factor=1),
                                      T(name="bad", num_partitions=1, replication_factor=1,
                                        configs=[T.CreatableTopicConfig(name="no.such", value="1")])],
                              timeout_ms=1000)
    _dispatch(broker, req, 7)
    m = _scrape(broker.server)
    assert m[("kafka_network_requestmetrics_errors_total", (("error", "INVALID_CONFIG"), ("request", "CreateTopics")))] == 1


def test_replica_fetches_are_not_bytes_out():
    from kbroker.metrics.requests import FETCH, RequestMetrics
    from kbroker.wire.generated.fetch_request import FetchRequest
    from kbroker.wire.generated.fetch_response import FetchResponse

    T = FetchResponse.FetchableTopicResponse
    resp = FetchResponse(error_code=0, responses=[T(topic="ft", partitions=[
        T.PartitionData(partition_index=0, error_code=0, records=b"x" * 7)])])
    m = RequestMetrics()
    m.observe(FETCH, 12, FetchRequest(replica_id=-1), resp, 0, 0, 0)              # a consumer
    m.observe(FETCH, 12, FetchRequest(replica_id=2), resp, 0, 0, 0)               # a follower, v<15
    m.observe(FETCH, 15, FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=2)), resp, 0, 0, 0)
    assert m.topics["ft"].bytes_out == 7 and m.topics["ft"].fetch_requests == 3


def test_log_flushes_and_group_commit_rounds_are_counted(broker):  # noqa: F811
    """LogFlushRateAndTimeMs counts every log fsync; twenty produces to a flush.messages=1
    topic appended before the loop runs again share one group-commit round."""
    import asyncio

    from kbroker.handlers.dispatcher import Dispatcher
    from kbroker.wire.generated.create_topics_request import CreateTopicsRequest as C

    T = C.CreatableTopic
    req = C(topics=[T(name="fm", num_partitions=1, replication_factor=1,
                      configs=[T.CreatableTopicConfig(name="flush.messages", value="1")])], timeout_ms=1000)
    _dispatch(broker, req, 7)
    server = broker.server
    P = ProduceRequest.TopicProduceData
    d = Dispatcher(server, server.api_specs)
    before = _scrape(server)

    async def twenty():
        outs = []
        for i in range(20):
            r = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                P(name="fm", partition_data=[P.PartitionProduceData(index=0, records=_batch(1))])])
            outs.append(d.dispatch(None, memoryview(encode_request(i, "t", r, 9))[4:]))
        return await asyncio.gather(*(o for o in outs if hasattr(o, "__await__")))

    broker.loop.run_until_complete(twenty())
    m = _scrape(server)
    rounds = m[("kbroker_log_group_commit_rounds_total", ())] - before[("kbroker_log_group_commit_rounds_total", ())]
    answers = m[("kbroker_log_group_commit_answers_total", ())] - before[("kbroker_log_group_commit_answers_total", ())]
    assert (rounds, answers) == (1, 20)
    assert server.log_manager.get("fm", 0).sync_rounds == 1
    flushes = m[("kafka_log_logflushstats_logflushrateandtimems_count", ())]
    assert flushes - before[("kafka_log_logflushstats_logflushrateandtimems_count", ())] >= 1
    assert m[("kafka_log_logflushstats_logflushrateandtimems_sum", ())] > 0


def test_fetch_session_cache_metrics(broker):  # noqa: F811
    """FetchSessionCache's sessions, cached partitions and evictions, as a new session that
    finds the cache full evicts the oldest."""
    from tests.handlers.test_fetch_session_parking import full_fetch
    from tests.handlers.test_handlers import create

    create(broker, "fsm", 3)
    first = full_fetch(broker, "fsm", {0: 0, 1: 0, 2: 0})
    assert first.session_id > 0
    m = _scrape(broker.server)
    assert m[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())] == 1
    assert m[("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", ())] == 3
    assert m[("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", ())] == 0
    broker.server.fetch_sessions.max_slots = 1
    second = full_fetch(broker, "fsm", {1: 0})
    assert second.session_id not in (0, first.session_id)
    m = _scrape(broker.server)
    assert m[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())] == 1
    assert m[("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", ())] == 1
    assert m[("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", ())] == 1


def test_connection_counts_per_listener(broker):  # noqa: F811
    """socket-server-metrics: open connections, and accepted and closed since start, read
    from a real listener on loopback."""
    import asyncio
    import socket

    from kbroker.net.listener import Listener
    from kbroker.wire.frame import FrameDecoder

    server = broker.server
    lst = Listener("PLAINTEXT", "127.0.0.1", 0, None, lambda: FrameDecoder(1 << 20))
    server.listeners.append(lst)

    async def until(cond):
        for _ in range(500):
            if cond():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("timed out")

    async def main():
        lst.start()
        clients = [socket.create_connection(("127.0.0.1", lst.bound_port)) for _ in range(3)]
        await until(lambda: len(lst.connections) == 3)
        clients.pop().close()
        await until(lambda: len(lst.connections) == 2)
        m = _scrape(server)
        for c in clients:
            c.close()
        await lst.shutdown(1)
        return m

    try:
        m = broker.loop.run_until_complete(main())
    finally:
        server.listeners.remove(lst)
    label = (("listener", "PLAINTEXT"),)
    assert m[("kafka_server_socket_server_metrics_connection_count", label)] == 2
    assert m[("kafka_server_socket_server_metrics_connection_creation_total", label)] == 3
    assert m[("kafka_server_socket_server_metrics_connection_close_total", label)] == 1


def test_collector_pauses_and_frozen_objects_are_exported():
    import asyncio
    import gc

    from kbroker.loop_probe import LoopLagProbe
    from kbroker.metrics.loop_lag import LoopLagFamilies

    async def run():
        probe = LoopLagProbe().start()
        keep = [[i] for i in range(20_000)]
        gc.collect()
        gc.freeze()
        try:
            got = {f.name: f.samples[0].value for f in LoopLagFamilies(probe).families() if f.name.startswith("kbroker_gc")}
            frozen = gc.get_freeze_count()
        finally:
            gc.unfreeze()
            probe.stop()
        return got, frozen, keep
    got, frozen, _ = asyncio.run(run())
    assert got["kbroker_gc_frozen_objects"] == frozen >= 20_000
    assert 0 < got["kbroker_gc_pause_max_seconds"] <= got["kbroker_gc_pause_seconds"]
