from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, OffsetSpec, ResourceType)

from compat_tests.clients import Consumed, Rec

TIMEOUT = 30


def produce(bootstrap: str, topic: str, records, **conf) -> list[tuple[int, int]]:
    """records: iterable of dicts with value and optional key/partition/timestamp/headers.
    Returns the acknowledged (partition, offset) of each, in order."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    records = list(records)
    acks: list = [None] * len(records)

    def on_ack(i):
        def cb(err, msg):
            acks[i] = err or (msg.partition(), msg.offset())
        return cb

    for i, r in enumerate(records):
        kw = {k: r[k] for k in ("key", "partition", "timestamp", "headers") if k in r}
        p.produce(topic, value=r["value"], on_delivery=on_ack(i), **kw)
        p.poll(0)
    assert p.flush(TIMEOUT) == 0, "records left unacknowledged"
    bad = [a for a in acks if not isinstance(a, tuple)]
    assert not bad, bad[:3]
    return acks


class ConfluentDriver:
    name = "confluent-kafka"

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(self, name, partitions, configs=None):
        fs = self.admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})])
        fs[name].result(TIMEOUT)

    def delete_topic(self, name):
        self.admin.delete_topics([name])[name].result(TIMEOUT)

    def produce(self, topic, records: list[Rec], compression="none", **conf):
        return produce(self.bootstrap, topic, [
            {"key": r.key, "value": r.value, "timestamp": r.timestamp, "headers": list(r.headers)} for r in records],
            **{"compression.type": compression, **conf})

    def consume(self, topic, count, **conf):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "compat-assign",
                      "enable.auto.commit": False, **conf})
        try:
            md = c.list_topics(topic, timeout=TIMEOUT).topics[topic]
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.partitions])
            out = []
            while len(out) < count:
                msgs = c.consume(min(500, count - len(out)), timeout=10)
                if not msgs:
                    break
                for m in msgs:
                    if m.error():
                        raise RuntimeError(m.error())
                    out.append(Consumed(m.partition(), m.offset(), m.timestamp()[1], m.key(),
                                        m.value(), tuple(m.headers() or ())))
            return out
        finally:
            c.close()

    def latest_offsets(self, topic):
        md = self.admin.list_topics(topic, timeout=TIMEOUT).topics[topic]
        req = {TopicPartition(topic, p): OffsetSpec.latest() for p in md.partitions}
        res = self.admin.list_offsets(req)
        return {tp.partition: f.result(TIMEOUT).offset for tp, f in res.items()}

    def describe_configs(self, topic):
        res = ConfigResource(ResourceType.TOPIC, topic)
        entries = self.admin.describe_configs([res])[res].result(TIMEOUT)
        return {k: e.value for k, e in entries.items()}

    def alter_config(self, topic, name, value):
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        self.admin.incremental_alter_configs([res])[res].result(TIMEOUT)
