"""Admin APIs with real clients: DescribeConfigs, (Incremental)AlterConfigs, CreatePartitions,
DeleteRecords, DescribeCluster, DescribeTopicPartitions, DescribeLogDirs (issue 4)."""
from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewPartitions, NewTopic, OffsetSpec, ResourceType)

from compat_tests.clients import java as java_client

T = 30


def _produce(bootstrap, topic, per_partition: dict[int, int]):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, partition=part)
    assert p.flush(T) == 0


def _wait_partitions(admin, topic, n):
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if len(md.partitions) == n:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} never reached {n} partitions")


# -- confluent-kafka (librdkafka) ------------------------------------------------------------


@pytest.fixture(scope="module")
def cadmin(shared_broker):
    return AdminClient({"bootstrap.servers": shared_broker.bootstrap})


def test_confluent_describe_and_alter_topic_configs(cadmin):
    cadmin.create_topics([NewTopic("cf-cfg", 1, 1, config={"segment.bytes": "1048576"})])["cf-cfg"].result(T)
    res = ConfigResource(ResourceType.TOPIC, "cf-cfg")
    entries = cadmin.describe_configs([res])[res].result(T)
    assert entries["cleanup.policy"].value == "delete"
    assert entries["retention.ms"].value == "604800000"
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["segment.bytes"].value == "1048576"
    assert entries["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not entries["retention.ms"].is_read_only and not entries["retention.ms"].is_sensitive

    inc = ConfigResource(ResourceType.TOPIC, "cf-cfg", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    cadmin.incremental_alter_configs([inc])[inc].result(T)
    entries = cadmin.describe_configs([res])[res].result(T)
    assert entries["retention.ms"].value == "3600000"
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["segment.bytes"].value == "1073741824"

    bad = ConfigResource(ResourceType.TOPIC, "cf-cfg", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as e:
        cadmin.incremental_alter_configs([bad])[bad].result(T)
    assert "INVALID_CONFIG" in str(e.value) or "retention.ms" in str(e.value)

    # legacy AlterConfigs replaces the topic's whole set
    legacy = ConfigResource(ResourceType.TOPIC, "cf-cfg", set_config={"max.message.bytes": "20000"})
    cadmin.alter_configs([legacy])[legacy].result(T)
    entries = cadmin.describe_configs([res])[res].result(T)
    assert entries["max.message.bytes"].value == "20000"
    assert entries["retention.ms"].value == "604800000" and entries["cleanup.policy"].value == "delete"

    missing = ConfigResource(ResourceType.TOPIC, "cf-none")
    with pytest.raises(Exception) as e:
        cadmin.describe_configs([missing])[missing].result(T)
    assert "UNKNOWN_TOPIC_OR_PART" in str(e.value)


def test_confluent_broker_configs(cadmin):
    res = ConfigResource(ResourceType.BROKER, "1")
    entries = cadmin.describe_configs([res])[res].result(T)
    assert entries["num.partitions"].value == "1"
    assert entries["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["log.retention.hours"].is_read_only
    ro = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.hours", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as e:
        cadmin.incremental_alter_configs([ro])[ro].result(T)
    assert "INVALID_REQUEST" in str(e.value) or "dynamically" in str(e.value)
    dyn = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.cleaner.threads", "2", incremental_operation=AlterConfigOpType.SET)])
    cadmin.incremental_alter_configs([dyn])[dyn].result(T)
    entries = cadmin.describe_configs([res])[res].result(T)
    assert entries["log.cleaner.threads"].value == "2"
    assert entries["log.cleaner.threads"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_confluent_create_partitions_and_produce(cadmin, shared_broker):
    cadmin.create_topics([NewTopic("cf-grow", 2, 1)])["cf-grow"].result(T)
    cadmin.create_partitions([NewPartitions("cf-grow", 4)], validate_only=True)["cf-grow"].result(T)
    assert len(cadmin.list_topics("cf-grow", timeout=10).topics["cf-grow"].partitions) == 2
    cadmin.create_partitions([NewPartitions("cf-grow", 4)])["cf-grow"].result(T)
    _wait_partitions(cadmin, "cf-grow", 4)
    with pytest.raises(Exception) as e:
        cadmin.create_partitions([NewPartitions("cf-grow", 3)])["cf-grow"].result(T)
    assert "INVALID_PARTITIONS" in str(e.value) or "increase" in str(e.value)
    _produce(shared_broker.bootstrap, "cf-grow", {3: 5})
    tp = TopicPartition("cf-grow", 3)
    assert cadmin.list_offsets({tp: OffsetSpec.latest()})[tp].result(T).offset == 5


def test_confluent_delete_records(cadmin, shared_broker):
    cadmin.create_topics([NewTopic("cf-del", 2, 1)])["cf-del"].result(T)
    _produce(shared_broker.bootstrap, "cf-del", {0: 10, 1: 4})
    res = cadmin.delete_records([TopicPartition("cf-del", 0, 6), TopicPartition("cf-del", 1, -1)])
    lows = {tp.partition: f.result(T).low_watermark for tp, f in res.items()}
    assert lows == {0: 6, 1: 4}
    tp = TopicPartition("cf-del", 0)
    assert cadmin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(T).offset == 6
    with pytest.raises(Exception) as e:
        cadmin.delete_records([TopicPartition("cf-del", 0, 50)])[TopicPartition("cf-del", 0, 50)].result(T)
    assert "OFFSET_OUT_OF_RANGE" in str(e.value) or "out of range" in str(e.value).lower()
    # a consumer from the beginning starts at the new log start
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "cf-del",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("cf-del", 0, -2)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                got.append(m.offset())
        assert got == [6, 7, 8, 9]
    finally:
        c.close()


def test_confluent_describe_cluster_and_topics(cadmin, shared_broker):
    from confluent_kafka import TopicCollection
    cl = cadmin.describe_cluster(include_authorized_operations=True).result(T)
    assert [n.id for n in cl.nodes] == [1] and cl.controller.id == 1 and cl.cluster_id
    assert cl.nodes[0].port == shared_broker.port
    cadmin.create_topics([NewTopic("cf-desc", 3, 1)])["cf-desc"].result(T)
    d = cadmin.describe_topics(TopicCollection(["cf-desc"]))["cf-desc"].result(T)
    assert [p.id for p in d.partitions] == [0, 1, 2] and d.partitions[0].leader.id == 1
    assert not d.is_internal and d.topic_id is not None


# -- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_admin(shared_broker):
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource as KRes, ConfigResourceType, KafkaAdminClient, NewPartitions as KNP
    from kafka.admin import NewTopic as KNewTopic
    from kafka.structs import TopicPartition as KTP

    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        admin.create_topics([KNewTopic("kp-admin", 1, 1)])
        admin.create_partitions({"kp-admin": KNP(3)})
        _wait_partitions(AdminClient({"bootstrap.servers": shared_broker.bootstrap}), "kp-admin", 3)
        res = KRes(ConfigResourceType.TOPIC, "kp-admin")
        cfg = admin.describe_configs([res], config_filter="all")["topic"]["kp-admin"]
        assert cfg["retention.ms"]["value"] == "604800000"
        admin.alter_configs([KRes(ConfigResourceType.TOPIC, "kp-admin", configs={"retention.ms": "5000"})])
        cfg = admin.describe_configs([res])["topic"]["kp-admin"]     # modified keys only
        assert {k: v["value"] for k, v in cfg.items()} == {"retention.ms": "5000"}
        admin.alter_configs([KRes(ConfigResourceType.TOPIC, "kp-admin", configs={"retention.ms": "6000"})],
                            incremental=False)          # legacy AlterConfigs
        assert admin.describe_configs([res])["topic"]["kp-admin"]["retention.ms"]["value"] == "6000"

        p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
        for i in range(5):
            p.send("kp-admin", b"x", partition=2)
        p.flush(T)
        p.close(5)
        out = admin.delete_records({KTP("kp-admin", 2): 3})
        assert out[KTP("kp-admin", 2)]["low_watermark"] == 3 and out[KTP("kp-admin", 2)]["error_code"] == 0
        cl = admin.describe_cluster()
        assert cl["cluster_id"] == AdminClient({"bootstrap.servers": shared_broker.bootstrap}).describe_cluster().result(T).cluster_id
        (d,) = admin.describe_log_dirs()[0]["log_dirs"]
        sizes = {p["partition_index"]: p["partition_size"] for t in d["topics"] if t["name"] == "kp-admin"
                 for p in t["partitions"]}
        assert sizes[0] == 0 and sizes[2] > 0 and 0 < d["usable_bytes"] <= d["total_bytes"]
    finally:
        admin.close()


# -- aiokafka --------------------------------------------------------------------------------


def test_aiokafka_admin(shared_broker):
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions as ANP, NewTopic as ANewTopic
    from aiokafka.admin.config_resource import ConfigResource as ARes, ConfigResourceType as AType

    async def go():
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([ANewTopic("aio-admin", 1, 1)])
            await admin.create_partitions({"aio-admin": ANP(2)})
            (resp,) = await admin.describe_configs([ARes(AType.TOPIC, "aio-admin")])
            entries = {e[0]: e[1] for e in resp.resources[0][4]}
            assert entries["cleanup.policy"] == "delete"
            await admin.alter_configs([ARes(AType.TOPIC, "aio-admin", configs={"retention.ms": "7000"})])
            (resp,) = await admin.describe_configs([ARes(AType.TOPIC, "aio-admin")])
            assert {e[0]: e[1] for e in resp.resources[0][4]}["retention.ms"] == "7000"
            cl = await admin.describe_cluster()
            assert cl["cluster_id"]
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(go(), 60))
    _wait_partitions(AdminClient({"bootstrap.servers": shared_broker.bootstrap}), "aio-admin", 2)


# -- the Java client (3.9 and 4.x) -----------------------------------------------------------


@pytest.mark.parametrize("version", ["4.3.0", "3.9.0"])
def test_java_admin(shared_broker, version):
    if not java_client.available(version):
        pytest.fail("Java client jars missing: run scripts/fetch-java-clients.sh")
    from compat_tests.clients.java import JavaDriver
    topic = f"java-admin-{version.replace('.', '-')}"
    out = JavaDriver(shared_broker.bootstrap, version).run("admin-suite", topic)
    lines = {}
    for line in out.splitlines():
        f = line.split("\t")
        lines.setdefault(f[0], []).append(f[1:])
    parts = lines["partitions"][0]
    assert parts[:2] == ["4", "1"] and parts[2] != "AAAAAAAAAAAAAAAAAAAAAA"
    assert lines["shrink"] == [["InvalidPartitionsException"]]
    cfg = {c[0]: c[1:] for c in lines["config"]}
    assert cfg["retention.ms"][:3] == ["3600000", "DYNAMIC_TOPIC_CONFIG", "LONG"]
    assert cfg["retention.ms"][3].startswith("retention.ms=3600000:DYNAMIC_TOPIC_CONFIG,log.retention.hours=168:DEFAULT_CONFIG")
    assert cfg["cleanup.policy"][:3] == ["delete,compact", "DYNAMIC_TOPIC_CONFIG", "LIST"]
    assert cfg["segment.bytes"][:3] == ["1073741824", "DEFAULT_CONFIG", "INT"]
    assert lines["badconfig"] == [["InvalidConfigurationException"]]
    assert lines["broker"] == [["1", "DEFAULT_CONFIG", "true"]]
    assert lines["deleted"] == [["4", "4"]]
    assert lines["beyond"] == [["OffsetOutOfRangeException"]]
    assert lines["cluster"][0][1:] == ["1", "1"]
    assert lines["logdir"][0][1] == "true" and int(lines["logdir"][0][0]) > 0
    assert lines["seek"] == [["6"]]
