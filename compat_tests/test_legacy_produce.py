"""Old producers: kafka-python pinned to api_version (0, 10) sends Produce v2 with magic 1
message sets, (0, 9) Produce v1 with magic 0. The broker up-converts them to v2 batches
(kbroker.broker.legacy_produce), keeping the producer's codec; modern consumers read them.
"""
from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from compat_tests.clients import Consumed, driver
from compat_tests.test_client_batches import CODEC_IDS, stored_batches

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")  # what magic 0/1 allowed
OLD = {(0, 10): "v2-magic1", (0, 9): "v1-magic0"}
N = 50


def records(codec: str, base_ts: int):
    out = []
    for i in range(N):
        key = f"key{i % 3}".encode() if i % 10 != 7 else None
        value = (f"{codec}-{i}-" * 30).encode() if i % 10 != 4 else None
        out.append((key, value, base_ts + i))
    return out


def produce_old(bootstrap, api_version, topic, recs, codec):
    p = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, linger_ms=20,
                      compression_type=None if codec == "none" else codec)
    try:
        futs = [p.send(topic, key=k, value=v, timestamp_ms=ts) for k, v, ts in recs]
        p.flush(30)
        return [f.get(30).offset for f in futs]
    finally:
        p.close(10)


def consume_librdkafka(bootstrap, topic, count):
    """confluent-kafka, returning as soon as ``count`` records are in (the driver's consume
    waits for 500 or 10 s)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "legacy", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(count - len(out), timeout=1):
                assert not m.error(), m.error()
                out.append(Consumed(m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
                                    tuple(m.headers() or ())))
        return out
    finally:
        c.close()


def consume(name, bootstrap, topic, count):
    if name == "confluent-kafka":
        return consume_librdkafka(bootstrap, topic, count)
    return driver(name, bootstrap).consume(topic, count)


@pytest.mark.parametrize("api_version", list(OLD), ids=list(OLD.values()))
def test_old_kafka_python_produces_modern_clients_consume(shared_broker, api_version):
    magic = 1 if api_version >= (0, 10) else 0
    modern = driver("confluent-kafka", shared_broker.bootstrap)
    for codec in LEGACY_CODECS:
        topic = f"legacy-{OLD[api_version]}-{codec}"
        modern.create_topic(topic, 1)
        base_ts = int(time.time() * 1000) - 10_000
        sent = records(codec, base_ts)
        offsets = produce_old(shared_broker.bootstrap, api_version, topic, sent, codec)
        assert offsets == list(range(N))

        # on disk: v2 batches with the producer's codec
        batches = list(stored_batches(shared_broker, topic))
        assert {b.magic for b in batches} == {2}
        assert {b.compression for b in batches} == {CODEC_IDS[codec]}, f"{codec} not kept"
        want_ts = [ts if magic else -1 for _, _, ts in sent]  # magic 0 has no timestamps
        on_disk = [r for b in batches for r in b.records()]
        assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in on_disk] == \
            [(i, k, v, t, []) for i, ((k, v, _), t) in enumerate(zip(sent, want_ts))]

        # modern consumers: confluent-kafka (librdkafka) and kafka-python (Fetch v2 batches)
        for name in ("confluent-kafka", "kafka-python"):
            got = consume(name, shared_broker.bootstrap, topic, N)
            assert [(c.offset, c.key, c.value, c.headers) for c in got] == \
                [(i, k, v, ()) for i, (k, v, _) in enumerate(sent)], name
            if magic:
                assert [c.timestamp for c in got] == want_ts, name
            else:
                assert {c.timestamp for c in got} == {-1}, name


def test_old_kafka_python_log_append_time_topic(shared_broker):
    modern = driver("confluent-kafka", shared_broker.bootstrap)
    for api_version in OLD:
        topic = f"legacy-lat-{OLD[api_version]}"
        modern.create_topic(topic, 1, {"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        produce_old(shared_broker.bootstrap, api_version, topic, records("gzip", 1000), "gzip")
        after = int(time.time() * 1000)
        batches = list(stored_batches(shared_broker, topic))
        assert all(b.timestamp_type == 1 and before <= b.max_timestamp <= after for b in batches)
        got = consume_librdkafka(shared_broker.bootstrap, topic, N)
        assert len(got) == N and all(before <= c.timestamp <= after for c in got)
