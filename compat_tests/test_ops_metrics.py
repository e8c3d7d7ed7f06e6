"""The Prometheus endpoint under real traffic (issue 14): per-topic bytes and messages in
match what the log holds on disk, bytes out match what consumers fetched, consumer-group lag
matches what is left unconsumed, and the request metrics count what the clients sent."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import BrokerProcess, free_port
from compat_tests.ops_util import sample, scrape

T = 30


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("mbroker"), overrides={
        "metrics.port": str(port), "client.telemetry.metrics": "org.apache.kafka.producer.",
        "client.telemetry.push.interval.ms": "300"}).start()
    b.metrics_port = port
    yield b
    b.stop()


def _log_bytes_on_disk(broker, topic: str) -> int:
    logs = Path(broker.data_dir) / "logs"
    return sum(f.stat().st_size for d in logs.glob(f"{topic}-*") for f in d.glob("*.log"))


def test_metrics_during_produce_and_consume(mbroker):
    topic, n = "m-orders", 600
    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(T)
    p = Producer({"bootstrap.servers": mbroker.bootstrap, "linger.ms": 5})

    def produce():
        for i in range(n):
            p.produce(topic, key=b"k%d" % i, value=b"v" * (50 + i % 100), partition=i % 2)
            if i % 50 == 0:
                p.poll(0)
                time.sleep(0.01)
        assert p.flush(T) == 0

    th = threading.Thread(target=produce)
    th.start()
    # scrapes while records flow: counters only go up
    last = 0
    while th.is_alive():
        v = sample(scrape(mbroker.metrics_port), "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) or 0
        assert v >= last
        last = v
        time.sleep(0.05)
    th.join()
    m = scrape(mbroker.metrics_port)
    assert sample(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    on_disk = _log_bytes_on_disk(mbroker, topic)
    assert on_disk > n * 50
    assert sample(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == on_disk
    sizes = [sample(m, "kafka_log_log_size", topic=topic, partition=str(i)) for i in (0, 1)]
    assert sum(sizes) == on_disk
    assert sample(m, "kafka_log_log_logendoffset", topic=topic, partition="0") == n // 2
    produce_reqs = sum(v for (name, lbl), v in m.items()
                       if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in lbl)
    assert produce_reqs == sample(m, "kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 1
    assert sample(m, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) >= 1
    assert sample(m, "kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 1

    # a group reads everything, then commits part of partition 0 and all of partition 1
    c = Consumer({"bootstrap.servers": mbroker.bootstrap, "group.id": "m-group", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got = {0: 0, 1: 0}
    fetched = 0
    deadline = time.monotonic() + T
    while fetched < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None or msg.error():
            continue
        got[msg.partition()] += 1
        fetched += 1
    assert got == {0: n // 2, 1: n // 2}
    c.commit(offsets=[TopicPartition(topic, 0, 100), TopicPartition(topic, 1, n // 2)], asynchronous=False)
    c.close()
    m = scrape(mbroker.metrics_port)
    assert sample(m, "kafka_consumergroup_lag", consumergroup="m-group", topic=topic, partition="0") == n // 2 - 100
    assert sample(m, "kafka_consumergroup_lag", consumergroup="m-group", topic=topic, partition="1") == 0
    assert sample(m, "kafka_consumergroup_lag_sum", consumergroup="m-group") == n // 2 - 100
    assert sample(m, "kafka_consumergroup_current_offset", consumergroup="m-group", topic=topic, partition="0") == 100
    # every record was fetched at least once: bytes out covers the log (whole batches)
    assert sample(m, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= on_disk
    assert sample(m, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic) >= 1


def test_metrics_errors_partitions_and_quorum(mbroker):
    from confluent_kafka import KafkaException
    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
    with pytest.raises(KafkaException):
        admin.create_topics([NewTopic("m-bad", 1, 1, config={"no.such.config": "1"})])["m-bad"].result(T)
    m = scrape(mbroker.metrics_port)
    # CreateTopics answers with per-topic codes; the request still counts
    assert any(k[0] == "kafka_network_requestmetrics_requests_total" and ("request", "CreateTopics") in k[1] for k in m)
    assert sample(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert sample(m, "kafka_server_raft_metrics_current_leader") == 1
    assert sample(m, "kafka_server_raft_metrics_current_state", state="leader") == 1
    parts = sample(m, "kafka_controller_kafkacontroller_globalpartitioncount")
    assert parts == sample(m, "kafka_server_replicamanager_partitioncount") >= 1
    assert sample(m, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sample(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert sample(m, "kafka_server_replicamanager_isrshrinks_total") == 0
    assert sample(m, "kbroker_event_loop_lag_samples_total") > 0
    # the quantiles come from the probe's window: ordered, and bounded by the window's maximum
    lag = [sample(m, "kbroker_event_loop_lag_seconds", quantile=q) for q in ("0.5", "0.99", "0.999")]
    assert 0 <= lag[0] <= lag[1] <= lag[2] <= sample(m, "kbroker_event_loop_lag_window_max_seconds") \
        <= sample(m, "kbroker_event_loop_lag_max_seconds"), lag


def test_client_telemetry_kip714(mbroker):
    """librdkafka pushes its metrics (KIP-714) and they appear on the endpoint."""
    p = Producer({"bootstrap.servers": mbroker.bootstrap, "client.id": "telemetry-app"})
    deadline = time.monotonic() + T
    found = None
    while found is None and time.monotonic() < deadline:
        p.produce("m-telemetry", b"x")
        p.poll(0.1)
        m = scrape(mbroker.metrics_port)
        found = next(((k, v) for k, v in m.items() if k[0] == "org_apache_kafka_producer_connection_creation_total"), None)
    assert p.flush(T) == 0
    assert found is not None, "no pushed client metrics on the endpoint"
    labels = dict(found[0][1])
    assert len(labels["client_instance_id"]) == 36
    assert found[1] >= 1   # the producer opened at least its bootstrap connection
    m = scrape(mbroker.metrics_port)
    assert sample(m, "kbroker_client_telemetry_clients") >= 1
    # only the subscribed prefix is kept
    assert not any(k[0].startswith("org_apache_kafka_consumer_") for k in m)


def test_flush_connection_and_loop_metrics(mbroker):
    """flush.messages=1: every produce request waits for a group-commit round, so the rounds
    answered exactly as many appends as the topic took requests; LogFlushRateAndTimeMs counts
    at least those rounds. The producer's connection is counted while it is open, and the
    loop's thread has used CPU."""
    topic, n = "m-durable", 300
    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"flush.messages": "1"})])[topic].result(T)
    before = scrape(mbroker.metrics_port)
    p = Producer({"bootstrap.servers": mbroker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"d" * 100)
        if i % 20 == 0:
            p.poll(0)
    assert p.flush(T) == 0
    m = scrape(mbroker.metrics_port)

    def grew(name):
        return (sample(m, name) or 0) - (sample(before, name) or 0)

    requests = sample(m, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic)
    rounds = grew("kbroker_log_group_commit_rounds_total")
    assert requests >= 1 and grew("kbroker_log_group_commit_answers_total") == requests
    assert 1 <= rounds <= requests
    assert grew("kafka_log_logflushstats_logflushrateandtimems_count") >= rounds
    assert grew("kafka_log_logflushstats_logflushrateandtimems_sum") > 0
    assert sample(m, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1
    assert sample(m, "kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") \
        >= sample(m, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT")
    assert sample(m, "kbroker_event_loop_cpu_seconds_total") > sample(before, "kbroker_event_loop_cpu_seconds_total") > 0
    del p


def test_deleted_topics_leave_the_frozen_set(mbroker):
    """The serving broker freezes new partitions out of the collector's walk
    (kbroker.gc_policy); a deleted topic's partitions must leave that set again, freed by
    reference counting: in a cycle they would stay frozen, and in memory, for good (16 MB per
    2,000 partitions created and deleted, until session 29)."""
    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})

    def frozen() -> float:
        return sample(scrape(mbroker.metrics_port), "kbroker_gc_frozen_objects")

    def churn(name: str) -> None:
        admin.create_topics([NewTopic(name, 500, 1)])[name].result(T)
        admin.delete_topics([name])[name].result(T)

    churn("frozen-warm-up")   # what the first topic makes for good (caches, code paths)
    time.sleep(1.0)
    before = frozen()
    admin.create_topics([NewTopic("frozen-a", 500, 1)])["frozen-a"].result(T)
    deadline = time.time() + T
    while frozen() < before + 500 * 10 and time.time() < deadline:   # the new partitions, frozen
        time.sleep(0.1)
    grown = frozen() - before
    assert grown >= 500 * 10, grown
    admin.delete_topics(["frozen-a"])["frozen-a"].result(T)
    for i in range(3):
        churn(f"frozen-{i}")
    deadline = time.time() + T
    while frozen() > before + grown * 0.1 and time.time() < deadline:
        time.sleep(0.2)
    assert frozen() <= before + grown * 0.1, (before, grown, frozen())
