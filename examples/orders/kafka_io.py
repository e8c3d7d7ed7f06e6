"""Plain-Kafka side of the pipeline (confluent-kafka): topics, producing, reading results."""
from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient, NewTopic

from examples.orders.model import AGGREGATES_TOPIC, DEAD_LETTER_TOPIC, TOPIC, Event

TIMEOUT = 30


def create_topics(bootstrap: str, partitions: int = 3, aggregates_config: dict | None = None,
                  replication_factor: int = 1, config: dict | None = None) -> None:
    """The pipeline's three topics; ``config`` applies to all of them (e.g. min.insync.replicas)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    rf, common = replication_factor, dict(config or {})
    topics = [NewTopic(TOPIC, partitions, rf, config=common),
              NewTopic(DEAD_LETTER_TOPIC, 1, rf, config=common),
              # One value per window and category: a rewritten row replaces the older one.
              NewTopic(AGGREGATES_TOPIC, 2, rf,
                       config={**common, "cleanup.policy": "compact", **(aggregates_config or {})})]
    for name, f in admin.create_topics(topics).items():
        try:
            f.result(TIMEOUT)
        except Exception as e:  # already there from an earlier run: fine
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise


def produce(bootstrap: str, events: list[Event], rate: float | None = None) -> list[tuple[int, int]]:
    """Produce the events (at `rate` per second if given); returns each one's (partition, offset)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    acks: list = [None] * len(events)

    def on_ack(i):
        def cb(err, msg):
            acks[i] = err or (msg.partition(), msg.offset())
        return cb

    started = time.monotonic()
    for i, e in enumerate(events):
        if rate:
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                p.poll(delay)
        p.produce(TOPIC, key=e.key, value=e.value, timestamp=e.timestamp_ms, on_delivery=on_ack(i))
        p.poll(0)
    if p.flush(TIMEOUT) != 0 or any(not isinstance(a, tuple) for a in acks):
        raise RuntimeError(f"orders left unacknowledged: {[a for a in acks if not isinstance(a, tuple)][:3]}")
    return acks


def read_topic(bootstrap: str, topic: str, idle_s: float = 3.0) -> list:
    """Every record of the topic from the start to its current end (confluent Message objects)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "orders-check",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1] for p in parts}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out, pos = [], {p: -1 for p in parts}
        deadline = time.monotonic() + TIMEOUT
        while any(pos[p] < ends[p] - 1 for p in parts) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=idle_s):
                if m.error():
                    raise RuntimeError(m.error())
                out.append(m)
                pos[m.partition()] = m.offset()
        return out
    finally:
        c.close()


def latest_aggregates(bootstrap: str) -> dict[str, dict]:
    """The output topic as a table: the latest value per key (what compaction keeps); a
    tombstone (null value) removes its key."""
    table = {}
    for m in sorted(read_topic(bootstrap, AGGREGATES_TOPIC), key=lambda m: (m.partition(), m.offset())):
        if m.value() is None:
            table.pop(m.key().decode(), None)
        else:
            table[m.key().decode()] = json.loads(m.value())
    return table


def dead_letters(bootstrap: str) -> list[dict]:
    """The dead-letter topic: key, value and headers of each record."""
    return [{"key": m.key(), "value": m.value(),
             "headers": {k: v.decode() for k, v in (m.headers() or [])}}
            for m in read_topic(bootstrap, DEAD_LETTER_TOPIC)]
