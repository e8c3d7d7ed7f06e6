"""Compaction in a running broker (issue 3): the log cleaner keeps the latest record per key at
its original offset, and tombstones disappear after delete.retention.ms."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING

from compat_tests.brokers import BrokerProcess
from compat_tests.clients.confluent import ConfluentDriver

TOPIC = "compacted"


def produce(bootstrap, records):
    """records: [(key, value)]; returns {key: acknowledged offset}."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    acks = {}
    for key, value in records:
        p.produce(TOPIC, key=key, value=value,
                  on_delivery=lambda e, m: acks.__setitem__(m.key(), m.offset()))
    assert p.flush(30) == 0
    return acks


def read_all(bootstrap):
    """Every record from the log start to the high watermark: [(offset, key, value)]."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-check"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 20
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if not m.error():
                    out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def test_cleaner_keeps_latest_per_key_at_its_offset(tmp_path):
    broker = BrokerProcess(tmp_path / "b", overrides={"log.cleaner.backoff.ms": "200"}).start()
    try:
        bs = broker.bootstrap
        ConfluentDriver(bs).create_topic(TOPIC, 1, {
            "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "1000"})
        keys = [b"k%02d" % i for i in range(40)]
        produce(bs, [(k, b"v1") for k in keys])
        time.sleep(0.3)
        # Wave 2: tombstones for k00-k09, new values for the rest.
        v2 = produce(bs, [(k, None if i < 10 else b"v2") for i, k in enumerate(keys)])
        time.sleep(0.3)
        # Wave 3 (k30-k39) rolls the wave-2 segment. The active segment is never cleaned, so
        # one more record rolls wave 3 too, letting it supersede wave 2's k30-k39.
        v3 = produce(bs, [(k, b"v3") for k in keys[30:]])
        time.sleep(0.3)
        last = produce(bs, [(b"roll", b"x")])

        expected = sorted([(v2[k], k, b"v2") for k in keys[10:30]] +
                          [(v3[k], k, b"v3") for k in keys[30:]] + [(last[b"roll"], b"roll", b"x")])
        deadline = time.monotonic() + 40
        while (got := read_all(bs)) != expected:
            # Until then the log may only hold older versions of the same keys, never less.
            assert {k for _, k, _ in expected} <= {k for _, k, v in got if v}
            assert time.monotonic() < deadline, f"not compacted: {len(got)} records, e.g. {got[:3]}"
            time.sleep(0.5)
    finally:
        broker.stop()
