"""Shared pieces of the Spark compat tests: one SparkSession per module, small Kafka helpers.

Spark's built-in Kafka source and sink (spark-sql-kafka-0-10, kafka-clients 3.9.0 inside) talk
to a real kbroker process; these helpers only set up data with confluent-kafka and read it back.
"""
from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions, NewTopic, ResourceType)

from compat_tests.clients.confluent import TIMEOUT, produce  # noqa: F401  (the tests import produce from here)


def start_spark(app_name: str):
    """A local SparkSession with the connector from local jars (CI cannot reach Maven)."""
    from examples.spark_env import session
    return session(app_name, require_local=True)


def stop_spark(spark) -> None:
    """Stop the session and its JVM (the gateway exits when its stdin closes)."""
    from pyspark import SparkContext
    spark.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        proc = getattr(gateway, "proc", None)
        gateway.shutdown()
        if proc is not None:
            proc.stdin.close()
            try:
                proc.wait(30)
            except Exception:
                proc.kill()
        SparkContext._gateway = None
        SparkContext._jvm = None


def admin(bootstrap: str) -> AdminClient:
    """Keep the returned client referenced until its futures resolve (a dropped one aborts them)."""
    return AdminClient({"bootstrap.servers": bootstrap})


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    a = admin(bootstrap)
    a.incremental_alter_configs([res])[res].result(TIMEOUT)


def log_start_offset(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT)[0]
    finally:
        c.close()


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None):
    a = admin(bootstrap)  # kept alive until the futures resolve
    a.create_topics([NewTopic(name, partitions, 1, config=configs or {})])[name].result(TIMEOUT)


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    a = admin(bootstrap)
    a.create_partitions([NewPartitions(name, total)])[name].result(TIMEOUT)


def delete_records(bootstrap: str, topic: str, before: dict[int, int]) -> None:
    a = admin(bootstrap)
    fs = a.delete_records([TopicPartition(topic, p, o) for p, o in before.items()])
    for f in fs.values():
        f.result(TIMEOUT)


def wait_for(predicate, timeout: float = 90, what: str = "condition", interval: float = 0.5):
    """Poll until predicate() is truthy; returns its value. Generous: the machine is shared."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
