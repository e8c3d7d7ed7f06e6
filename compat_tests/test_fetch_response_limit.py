"""A fetch whose response byte limit (the consumer's fetch.max.bytes) runs out inside a later
partition's first batch: Kafka answers that partition with no records (it gets its turn in
the next fetch), never the cut batch alone, which the Java consumer refuses ("Failed to make
progress reading messages"); librdkafka skips it. Every partition holds one batch larger than
what is left of the limit after the first partition's batch."""
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.clients.java import JavaDriver

PARTITIONS, PER_PARTITION, VALUE_BYTES = 6, 8, 500


@pytest.mark.timeout(180)
def test_java_consumer_reads_partitions_a_small_fetch_max_bytes_would_cut(shared_broker):
    topic = "response-limit"
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 50, "batch.size": 1 << 20})
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):     # one batch per partition (~4.2 KB)
            p.produce(topic, b"%d-%d-" % (part, i) + b"x" * VALUE_BYTES, partition=part)
        p.flush(30)
    want = PARTITIONS * PER_PARTITION
    # room for one partition's batch and a part of the next one's
    got = JavaDriver(shared_broker.bootstrap, "4.3.0").consume(topic, want, **{"fetch.max.bytes": "6000"})
    assert sorted((c.partition, c.offset) for c in got) == [
        (part, i) for part in range(PARTITIONS) for i in range(PER_PARTITION)]
    assert all(c.value.startswith(b"%d-%d-" % (c.partition, c.offset)) for c in got)
