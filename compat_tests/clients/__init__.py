"""One driver per real Kafka client, all with the same small interface, so each compat
scenario is written once and run with every client.

A driver's methods:
  create_topic(name, partitions, configs={})   delete_topic(name)
  produce(topic, records, compression) -> [(partition, offset)] in input order
  consume(topic, count) -> [Consumed] from the beginning of every partition
  latest_offsets(topic) -> {partition: offset}   (ListOffsets latest)
  describe_configs(topic) -> {name: value}       alter_config(topic, name, value)
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple = field(default_factory=tuple)   # ((name, bytes|None), ...)


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple

    def rec(self) -> Rec:
        return Rec(self.key, self.value, self.timestamp, self.headers)


CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def driver(name: str, bootstrap: str):
    if name == "confluent-kafka":
        from compat_tests.clients.confluent import ConfluentDriver
        return ConfluentDriver(bootstrap)
    if name == "kafka-python":
        from compat_tests.clients.kafka_python import KafkaPythonDriver
        return KafkaPythonDriver(bootstrap)
    if name == "aiokafka":
        from compat_tests.clients.aiokafka_driver import AiokafkaDriver
        return AiokafkaDriver(bootstrap)
    if name == "kcat":
        from compat_tests.clients.kcat import KcatDriver
        return KcatDriver(bootstrap)
    if name.startswith("java-"):
        from compat_tests.clients.java import JavaDriver
        return JavaDriver(bootstrap, name.removeprefix("java-"))
    raise ValueError(name)
