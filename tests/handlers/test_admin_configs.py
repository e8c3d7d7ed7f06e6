"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs driven directly (the ``broker``
fixture of conftest.py: a started KafkaServer without listeners)."""

import inspect

import pytest

from kbroker.handlers import registry
from kbroker.wire.errors import Errors
from kbroker.wire.generated.alter_configs_request import AlterConfigsRequest
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.describe_configs_request import DescribeConfigsRequest
from kbroker.wire.generated.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.records import BatchBuilder

ADMIN_MODULES = ("describe_configs", "alter_configs", "incremental_alter_configs")
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


@pytest.fixture
def admin(broker):
    broker.server.api_specs.update(registry.load(ADMIN_MODULES))
    return broker


def _call(server, loop, api_key, version, request):
    from kbroker.handlers.context import RequestContext
    ctx = RequestContext(server, None, api_key, version, 1, "test", server.clock.now_ms(), "PLAINTEXT")
    out = server.api_specs[api_key].handle(ctx, request)
    return loop.run_until_complete(out) if inspect.isawaitable(out) else out


def create(h, name, partitions=1, configs=None):
    T = CreateTopicsRequest.CreatableTopic
    r = h.call(19, 7, CreateTopicsRequest(topics=[T(
        name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
        configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])]))
    assert r.topics[0].error_code == 0, r.topics[0].error_message
    return r.topics[0]


def describe(h, rtype, name, keys=None, version=4, synonyms=False, docs=False):
    R = DescribeConfigsRequest.DescribeConfigsResource
    r = h.call(32, version, DescribeConfigsRequest(
        resources=[R(resource_type=rtype, resource_name=name, configuration_keys=keys)],
        include_synonyms=synonyms, include_documentation=docs))
    return r.results[0]


def configs(result):
    return {c.name: c for c in result.configs}


def incremental(h, rtype, name, ops, validate_only=False):
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    r = h.call(44, 1, IncrementalAlterConfigsRequest(resources=[R(
        resource_type=rtype, resource_name=name,
        configs=[C(name=n, config_operation=op, value=v) for n, op, v in ops])], validate_only=validate_only))
    return r.responses[0]


def legacy(h, rtype, name, cfg, validate_only=False, version=2):
    R = AlterConfigsRequest.AlterConfigsResource
    r = h.call(33, version, AlterConfigsRequest(resources=[R(
        resource_type=rtype, resource_name=name,
        configs=[R.AlterableConfig(name=n, value=v) for n, v in cfg.items()])], validate_only=validate_only))
    return r.responses[0]


def test_fresh_topic_shows_broker_defaults(admin):
    create(admin, "t")
    res = describe(admin, TOPIC, "t", synonyms=True, docs=True)
    assert res.error_code == 0
    c = configs(res)
    assert c["cleanup.policy"].value == "delete" and c["cleanup.policy"].config_source == DEFAULT
    assert c["retention.ms"].value == "604800000"
    assert c["retention.ms"].config_type == 5 and c["cleanup.policy"].config_type == 7
    assert [(s.name, s.value, s.source) for s in c["retention.ms"].synonyms] == [("log.retention.hours", "168", DEFAULT)]
    assert c["max.message.bytes"].value == "1048588"
    assert c["compression.gzip.level"].value == "-1"
    assert not any(x.read_only or x.is_sensitive for x in c.values())
    # named keys only; unknown names are left out
    assert set(configs(describe(admin, TOPIC, "t", keys=["retention.ms", "nope"]))) == {"retention.ms"}


def test_topic_override_and_static_broker_config(tmp_path):
    # a broker whose server.properties sets log.retention.hours: the topic default follows
    import asyncio
    from kbroker.clock import FakeClock
    from kbroker.config import BrokerConfig
    from kbroker.server import KafkaServer
    loop = asyncio.new_event_loop()
    cfg = BrokerConfig.load(None, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:9092",
                                   "log.retention.hours=24"])
    server = KafkaServer(cfg, FakeClock())
    loop.run_until_complete(server.start(listen=False))
    try:
        h = type("H", (), {"server": server, "call": lambda self, *a: _call(server, loop, *a)})()
        server.api_specs.update(registry.load(ADMIN_MODULES))
        create(h, "t", configs={"segment.bytes": "1048576"})
        c = configs(describe(h, TOPIC, "t", synonyms=True))
        assert c["retention.ms"].value == "86400000" and c["retention.ms"].config_source == STATIC
        assert [(s.name, s.value, s.source) for s in c["retention.ms"].synonyms] == [
            ("log.retention.hours", "24", STATIC), ("log.retention.hours", "168", DEFAULT)]
        assert c["segment.bytes"].value == "1048576" and c["segment.bytes"].config_source == DYNAMIC_TOPIC
        assert c["segment.bytes"].synonyms[0].source == DYNAMIC_TOPIC
        b = configs(describe(h, BROKER, "1"))
        assert b["log.retention.hours"].value == "24" and b["log.retention.hours"].config_source == STATIC
        assert b["log.retention.hours"].read_only
    finally:
        loop.run_until_complete(server.shutdown())
        loop.close()


def test_describe_errors(admin):
    assert describe(admin, TOPIC, "missing").error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert describe(admin, TOPIC, "bad/name").error_code == Errors.INVALID_TOPIC_EXCEPTION
    assert describe(admin, BROKER, "7").error_code == Errors.INVALID_REQUEST
    assert describe(admin, BROKER, "x").error_code == Errors.INVALID_REQUEST
    assert describe(admin, 99, "x").error_code == Errors.INVALID_REQUEST


def test_describe_old_versions(admin):
    create(admin, "t")
    for v in range(0, 5):
        res = describe(admin, TOPIC, "t", version=v, synonyms=True)
        assert configs(res)["retention.ms"].value == "604800000"
    assert configs(describe(admin, TOPIC, "t", version=0))["retention.ms"].is_default


def test_broker_configs_and_loggers(admin):
    b = configs(describe(admin, BROKER, "1", synonyms=True))
    assert b["num.partitions"].value == "1" and b["num.partitions"].config_source == DEFAULT
    assert b["log.dirs"].config_source == STATIC
    assert not b["log.retention.ms"].read_only and b["log.retention.ms"].value is None
    assert describe(admin, BROKER, "").configs == []      # no cluster-wide dynamic defaults yet
    logs = configs(describe(admin, BROKER_LOGGER, "1"))
    assert "root" in logs and logs["root"].config_source == 6
    assert incremental(admin, BROKER_LOGGER, "1", [("kbroker.test", SET, "DEBUG")]).error_code == 0
    assert configs(describe(admin, BROKER_LOGGER, "1"))["kbroker.test"].value == "DEBUG"
    assert incremental(admin, BROKER_LOGGER, "1", [("kbroker.test", SET, "LOUD")]).error_code == Errors.INVALID_CONFIG
    assert incremental(admin, BROKER_LOGGER, "1", [("root", DELETE, None)]).error_code == Errors.INVALID_REQUEST


def test_incremental_set_delete_append_subtract(admin):
    create(admin, "t", 2)
    assert incremental(admin, TOPIC, "t", [("retention.ms", SET, "3600000")]).error_code == 0
    c = configs(describe(admin, TOPIC, "t"))
    assert c["retention.ms"].value == "3600000" and c["retention.ms"].config_source == DYNAMIC_TOPIC
    # the live logs use it at once
    assert admin.server.replicas.get("t", 1).log.config.retention_ms == 3600000
    r = incremental(admin, TOPIC, "t", [("cleanup.policy", APPEND, "compact")])
    assert r.error_code == 0
    assert configs(describe(admin, TOPIC, "t"))["cleanup.policy"].value == "delete,compact"
    assert incremental(admin, TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete")]).error_code == 0
    assert configs(describe(admin, TOPIC, "t"))["cleanup.policy"].value == "compact"
    assert admin.server.replicas.get("t", 0).log.config.cleanup_policy == ("compact",)
    assert incremental(admin, TOPIC, "t", [("retention.ms", DELETE, None)]).error_code == 0
    c = configs(describe(admin, TOPIC, "t"))
    assert c["retention.ms"].value == "604800000" and c["retention.ms"].config_source == DEFAULT
    assert admin.server.image.topic_configs("t") == {"cleanup.policy": "compact"}


def test_incremental_validation(admin):
    create(admin, "t")
    r = incremental(admin, TOPIC, "t", [("retention.ms", SET, "abc")])
    assert r.error_code == Errors.INVALID_CONFIG and "retention.ms" in r.error_message
    r = incremental(admin, TOPIC, "t", [("no.such.config", SET, "1")])
    assert r.error_code == Errors.INVALID_CONFIG and r.error_message == "Unknown topic config name: no.such.config"
    r = incremental(admin, TOPIC, "t", [("retention.ms", APPEND, "1")])
    assert r.error_code == Errors.INVALID_CONFIG and "not LIST" in r.error_message
    r = incremental(admin, TOPIC, "t", [("cleanup.policy", SET, "sometimes")])
    assert r.error_code == Errors.INVALID_CONFIG
    r = incremental(admin, TOPIC, "t", [("compression.type", SET, "brotli")])
    assert r.error_code == Errors.INVALID_CONFIG
    r = incremental(admin, TOPIC, "t", [("retention.ms", SET, "1"), ("retention.ms", SET, "2")])
    assert r.error_code == Errors.INVALID_REQUEST
    r = incremental(admin, TOPIC, "t", [("retention.ms", SET, None)])
    assert r.error_code == Errors.INVALID_REQUEST
    r = incremental(admin, TOPIC, "t", [("min.compaction.lag.ms", SET, "10"), ("max.compaction.lag.ms", SET, "5")])
    assert r.error_code == Errors.INVALID_CONFIG
    assert incremental(admin, TOPIC, "missing", [("retention.ms", SET, "1")]).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert incremental(admin, TOPIC, "", [("retention.ms", SET, "1")]).error_code == Errors.INVALID_REQUEST
    # validate_only changes nothing; a failed resource changes nothing
    assert incremental(admin, TOPIC, "t", [("retention.ms", SET, "5000")], validate_only=True).error_code == 0
    assert admin.server.image.topic_configs("t") == {}


def test_legacy_alter_replaces_the_whole_set(admin):
    create(admin, "t", configs={"retention.ms": "1000", "segment.bytes": "1048576"})
    assert legacy(admin, TOPIC, "t", {"max.message.bytes": "2000"}).error_code == 0
    assert admin.server.image.topic_configs("t") == {"max.message.bytes": "2000"}
    assert admin.server.replicas.get("t", 0).log.config.max_message_bytes == 2000
    for v in (0, 1):
        assert legacy(admin, TOPIC, "t", {"retention.ms": "x"}, version=v).error_code == Errors.INVALID_CONFIG
    assert legacy(admin, TOPIC, "t", {"retention.ms": "5"}, validate_only=True).error_code == 0
    assert admin.server.image.topic_configs("t") == {"max.message.bytes": "2000"}
    assert legacy(admin, TOPIC, "t", {"retention.ms": None}).error_code == Errors.INVALID_REQUEST


def test_max_message_bytes_takes_effect_on_produce(admin):
    create(admin, "t")
    assert incremental(admin, TOPIC, "t", [("max.message.bytes", SET, "200")]).error_code == 0
    b = BatchBuilder()
    b.append(key=b"k", value=b"x" * 500, timestamp=1_700_000_000_000)
    T = ProduceRequest.TopicProduceData
    r = admin.call(0, 9, ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=0, records=b.build())])]))
    assert r.responses[0].partition_responses[0].error_code == Errors.MESSAGE_TOO_LARGE


def test_broker_dynamic_configs(admin):
    create(admin, "t")
    # read-only broker configs cannot change at runtime
    r = incremental(admin, BROKER, "1", [("log.retention.hours", SET, "1")])
    assert r.error_code == Errors.INVALID_REQUEST and "dynamically" in r.error_message
    assert incremental(admin, BROKER, "2", [("log.retention.ms", SET, "1")]).error_code == Errors.INVALID_REQUEST
    assert incremental(admin, BROKER, "1", [("log.retention.ms", SET, "x")]).error_code == Errors.INVALID_REQUEST
    # a dynamic one: cluster-wide default, then per broker; topics without their own value follow
    assert incremental(admin, BROKER, "", [("log.retention.ms", SET, "7200000")]).error_code == 0
    c = configs(describe(admin, TOPIC, "t", synonyms=True))
    assert c["retention.ms"].value == "7200000" and c["retention.ms"].config_source == DYNAMIC_DEFAULT
    assert admin.server.replicas.get("t", 0).log.config.retention_ms == 7200000
    assert [(x.name, x.config_source) for x in describe(admin, BROKER, "").configs] == [("log.retention.ms", DYNAMIC_DEFAULT)]
    assert incremental(admin, BROKER, "1", [("log.retention.ms", SET, "3600000")]).error_code == 0
    b = configs(describe(admin, BROKER, "1", synonyms=True))
    assert b["log.retention.ms"].value == "3600000" and b["log.retention.ms"].config_source == DYNAMIC_BROKER
    assert [s.source for s in b["log.retention.ms"].synonyms][:2] == [DYNAMIC_BROKER, DYNAMIC_DEFAULT]
    assert admin.server.replicas.get("t", 0).log.config.retention_ms == 3600000
    assert incremental(admin, BROKER, "1", [("log.retention.ms", DELETE, None)]).error_code == 0
    assert admin.server.replicas.get("t", 0).log.config.retention_ms == 7200000
    assert incremental(admin, BROKER, "1", [("log.cleanup.policy", APPEND, "compact")]).error_code == 0
    assert configs(describe(admin, BROKER, "1"))["log.cleanup.policy"].value == "delete,compact"


def test_catalog_covers_every_topic_config():
    from kbroker.broker.config_catalog import TOPIC_CONFIGS, TOPIC_SYNONYMS
    from kbroker.kraft.controller import EXTRA_TOPIC_CONFIGS
    from kbroker.log.config import LogConfig
    assert set(TOPIC_CONFIGS) == set(LogConfig.names()) | EXTRA_TOPIC_CONFIGS
    assert set(TOPIC_SYNONYMS) <= set(TOPIC_CONFIGS)


def test_changes_survive_restart(tmp_path):
    """Topic and dynamic broker configs, new partitions and a moved log start offset are all
    in the metadata log / checkpoints: a restarted broker comes back with them."""
    import asyncio
    from kbroker.clock import FakeClock
    from kbroker.config import BrokerConfig
    from kbroker.server import KafkaServer
    from kbroker.wire.generated.create_partitions_request import CreatePartitionsRequest
    from kbroker.wire.generated.delete_records_request import DeleteRecordsRequest

    def start():
        loop = asyncio.new_event_loop()
        cfg = BrokerConfig.load(None, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:9092"])
        server = KafkaServer(cfg, FakeClock())
        loop.run_until_complete(server.start(listen=False))
        server.api_specs.update(registry.load(ADMIN_MODULES + ("create_partitions", "delete_records")))
        return loop, server, type("H", (), {"server": server, "call": lambda self, *a: _call(server, loop, *a)})()

    loop, server, h = start()
    create(h, "t")
    assert incremental(h, TOPIC, "t", [("max.message.bytes", SET, "5000")]).error_code == 0
    assert incremental(h, BROKER, "", [("log.retention.ms", SET, "7200000")]).error_code == 0
    P = CreatePartitionsRequest.CreatePartitionsTopic
    assert h.call(37, 3, CreatePartitionsRequest(topics=[P(name="t", count=2, assignments=None)])).results[0].error_code == 0
    b = BatchBuilder()
    for i in range(5):
        b.append(key=None, value=b"v", timestamp=1_700_000_000_000)
    T = ProduceRequest.TopicProduceData
    h.call(0, 9, ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=1, records=b.build())])]))
    D = DeleteRecordsRequest.DeleteRecordsTopic
    h.call(21, 2, DeleteRecordsRequest(topics=[D(name="t", partitions=[D.DeleteRecordsPartition(partition_index=1, offset=3)])]))
    loop.run_until_complete(server.shutdown())
    loop.close()

    loop, server, h = start()
    try:
        c = configs(describe(h, TOPIC, "t"))
        assert c["max.message.bytes"].value == "5000" and c["retention.ms"].value == "7200000"
        assert c["retention.ms"].config_source == DYNAMIC_DEFAULT
        p1 = server.replicas.get("t", 1)
        assert p1 is not None and p1.log.config.retention_ms == 7200000 and p1.log.config.max_message_bytes == 5000
        assert (p1.log.log_start_offset, p1.log.log_end_offset) == (3, 5)
    finally:
        loop.run_until_complete(server.shutdown())
        loop.close()
