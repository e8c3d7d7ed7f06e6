from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from compat_tests.clients import Consumed, Rec


class KafkaPythonDriver:
    name = "kafka-python"
    null_header_values = False

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap)

    def create_topic(self, name, partitions, configs=None):
        self.admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])

    def delete_topic(self, name):
        self.admin.delete_topics([name])

    def produce(self, topic, records: list[Rec], compression="none", **conf):
        p = KafkaProducer(bootstrap_servers=self.bootstrap,
                          compression_type=None if compression == "none" else compression,
                          linger_ms=5, **conf)
        try:
            futs = [p.send(topic, key=r.key, value=r.value, timestamp_ms=r.timestamp,
                           headers=list(r.headers)) for r in records]
            p.flush(30)
            return [(m.partition, m.offset) for m in (f.get(30) for f in futs)]
        finally:
            p.close(10)

    def consume(self, topic, count, **conf):
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                          auto_offset_reset="earliest", **conf)
        try:
            tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
            c.assign(tps)
            c.seek_to_beginning(*tps)
            out = []
            idle = 0
            while len(out) < count and idle < 20:
                batch = c.poll(timeout_ms=500)
                idle = 0 if batch else idle + 1
                for msgs in batch.values():
                    out += [Consumed(m.partition, m.offset, m.timestamp, m.key, m.value,
                                     tuple(m.headers)) for m in msgs]
            return out
        finally:
            c.close()

    def latest_offsets(self, topic):
        c = KafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            tps = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
            return {tp.partition: off for tp, off in c.end_offsets(tps).items()}
        finally:
            c.close()

    def describe_configs(self, topic):
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        try:    # kafka-python 3: {type: {name: {key: {...}}}}, only modified keys unless asked
            res = self.admin.describe_configs([resource], config_filter="all")
            return {k: c["value"] for k, c in res["topic"][topic].items()}
        except TypeError:
            res = self.admin.describe_configs([resource])
        resp = res[0] if isinstance(res, list) else res
        (resource,) = resp.resources
        # (error_code, error_message, resource_type, resource_name, config_entries)
        entries = resource[4]
        return {e[0]: e[1] for e in entries}

    def alter_config(self, topic, name, value):
        self.admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                 configs={name: value})])
