"""A Java consumer (incremental fetch sessions, KIP-227) reads records that arrive, a few at a
time, on partitions it had caught up on: kbroker parks such partitions and only a wake-up from
the append brings them back into the session's fetches, so a lost wake-up loses records here
(the consumer stops at its 60 s deadline short of the count)."""
import random
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.clients.java import JavaDriver

PARTITIONS = 100
ROUNDS, PER_ROUND = 30, 40


@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", ["4.3.0", "3.9.0"])
def test_java_consumer_gets_records_appended_to_parked_partitions(shared_broker, version):
    topic = f"parked-{version}"
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    want = ROUNDS * PER_ROUND
    out = {}
    consumer = threading.Thread(target=lambda: out.setdefault(
        "got", JavaDriver(shared_broker.bootstrap, version).consume(topic, want)))
    consumer.start()
    time.sleep(4)   # the JVM starts and its session goes quiet on every partition
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0})
    rng = random.Random(7)
    for r in range(ROUNDS):
        for i in range(PER_ROUND):
            p.produce(topic, b"v%d-%d" % (r, i), partition=rng.randrange(PARTITIONS))
        p.flush(30)
        time.sleep(0.1)
    consumer.join(120)
    got = out.get("got", [])
    assert len({(c.partition, c.offset) for c in got}) == want, f"{len(got)} of {want} records consumed"
