"""A librdkafka consumer of 1,500 partitions: every Fetch it sends names all of them (no fetch
sessions), which kbroker reads, answers and encodes in slices (more than 1,000 partitions).
It must get every record once and in order: first those already there, then records
produced a few at a time while it long-polls caught up."""
import random
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 1500
FIRST = 2             # records per partition before the consumer starts
ROUNDS, PER_ROUND = 20, 25


def _drain(c, seen, want, deadline):
    while len(seen) < want and time.time() < deadline:
        for m in c.consume(5000, timeout=0.5):
            assert not m.error(), m.error()
            key = (m.partition(), m.offset())
            assert key not in seen, f"record {key} delivered twice"
            seen[key] = m.value()


@pytest.mark.timeout(240)
def test_librdkafka_consumer_of_1500_partitions_gets_every_record(shared_broker):
    topic = "wide-fetch"
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(120)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 5})
    expected = {}
    for part in range(PARTITIONS):
        for i in range(FIRST):
            p.produce(topic, b"first-%d-%d" % (part, i), partition=part)
            expected.setdefault(part, []).append(b"first-%d-%d" % (part, i))
        p.poll(0)
    assert p.flush(60) == 0

    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "wide-fetch",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, part, 0) for part in range(PARTITIONS)])
    seen = {}
    _drain(c, seen, PARTITIONS * FIRST, time.time() + 90)
    assert len(seen) == PARTITIONS * FIRST, f"{len(seen)} of {PARTITIONS * FIRST} first records"

    rng = random.Random(3)
    for r in range(ROUNDS):          # the consumer is caught up: each round wakes a long poll
        for i in range(PER_ROUND):
            part = rng.randrange(PARTITIONS)
            p.produce(topic, b"late-%d-%d" % (r, i), partition=part)
            expected[part].append(b"late-%d-%d" % (r, i))
        assert p.flush(30) == 0
        _drain(c, seen, PARTITIONS * FIRST + (r + 1) * PER_ROUND, time.time() + 30)
    c.close()
    want = PARTITIONS * FIRST + ROUNDS * PER_ROUND
    assert len(seen) == want, f"{len(seen)} of {want} records consumed"
    for part, values in expected.items():
        got = [seen[(part, o)] for o in range(len(values))]
        assert got == values, f"partition {part}"
