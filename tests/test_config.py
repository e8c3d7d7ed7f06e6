import pytest

from kbroker.config import BrokerConfig, ConfigError, parse_properties, parse_endpoints


def test_parse_properties_java_syntax():
    text = "# comment\n! also\na=1\nb : 2\nc 3\nd=x\\\n   y\ne=C:\\\\dir\nf=\n  g = spaced value \n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "C:\\dir", "f": "", "g": "spaced value "}


def test_embedded_defaults():
    cfg = BrokerConfig.load()
    assert cfg.node_id == 1
    assert cfg.is_broker and cfg.is_controller
    assert [str(e) for e in cfg.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert cfg.log_dirs == ["./data"]
    assert cfg["num.partitions"] == 1
    assert cfg["auto.create.topics.enable"] is True
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["offsets.topic.num.partitions"] == 50
    assert cfg["offsets.topic.replication.factor"] == 1        # the node is the whole cluster


def test_embedded_defaults_in_a_larger_cluster_keep_three_internal_replicas():
    voters = "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"
    cfg = BrokerConfig.load(None, [voters, "controller.listener.names=CONTROLLER",
                                   "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"])
    assert cfg["offsets.topic.replication.factor"] == 3
    assert cfg["transaction.state.log.replication.factor"] == 3
    assert cfg["transaction.state.log.min.isr"] == 2
    cfg = BrokerConfig.load(None, [voters, "offsets.topic.replication.factor=1", "controller.listener.names=CONTROLLER",
                                   "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"])
    assert cfg["offsets.topic.replication.factor"] == 1          # an explicit override stays
    assert cfg["transaction.state.log.replication.factor"] == 3


def test_file_and_overrides(tmp_path, caplog):
    p = tmp_path / "server.properties"
    p.write_text(
        "process.roles=broker,controller\nnode.id=3\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n"
        "controller.quorum.voters=3@localhost:9093\nlog.dirs=/a,/b\nlog.retention.hours=2\n"
        "some.plugin.key=x\n"
    )
    cfg = BrokerConfig.load(str(p), ["num.partitions=4", "log.segment.bytes=1048576"])
    assert cfg.node_id == 3
    assert cfg["num.partitions"] == 4
    assert cfg.log_dirs == ["/a", "/b"]
    assert cfg.metadata_log_dir == "/a"
    assert [e.listener_name for e in cfg.broker_listeners] == ["PLAINTEXT"]
    assert [(e.host, e.port) for e in cfg.advertised_listeners] == [("localhost", 9092)]
    assert cfg.voters[0].node_id == 3 and cfg.voters[0].port == 9093
    assert cfg.unknown == {"some.plugin.key": "x"}
    assert "some.plugin.key" in caplog.text
    lc = cfg.log_config()
    assert lc.retention_ms == 2 * 3600_000
    assert lc.segment_bytes == 1048576


def test_validation_errors():
    with pytest.raises(ConfigError):
        BrokerConfig({"process.roles": "broker", "listeners": "PLAINTEXT://:9092"})  # no node.id
    with pytest.raises(ConfigError):
        BrokerConfig({"node.id": "1", "process.roles": "broker,zk", "listeners": "PLAINTEXT://:9092"})
    with pytest.raises(ConfigError):
        BrokerConfig({"node.id": "1", "process.roles": "broker", "num.partitions": "0"})
    with pytest.raises(ConfigError):
        BrokerConfig({"node.id": "x", "process.roles": "broker"})
    with pytest.raises(ConfigError):
        BrokerConfig({"node.id": "1", "process.roles": "broker", "auto.create.topics.enable": "yes"})
    with pytest.raises(ConfigError):
        BrokerConfig({"node.id": "1", "process.roles": "broker", "listeners": "nonsense"})
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, ["novalue"])


def test_endpoints():
    eps = parse_endpoints(["PLAINTEXT://[::1]:9092", "SSL://host:9093"], {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"})
    assert eps[0].host == "::1" and eps[0].port == 9092
    assert eps[1].security_protocol == "SSL"


def test_controller_listener_inferred():
    cfg = BrokerConfig.load(None, ["listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"])
    assert cfg.controller_listener_names == ["CONTROLLER"]
    assert [e.port for e in cfg.broker_listeners] == [9092]
    assert [e.port for e in cfg.advertised_listeners] == [9092]
