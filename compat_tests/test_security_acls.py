"""ACLs end to end: a SASL_PLAINTEXT broker with the StandardAuthorizer, ACLs written with
Apache Kafka's own kafka-acls.sh, enforced on real clients (confluent-kafka): what a principal
may not describe is hidden, producing/consuming without the ACL gets Kafka's error codes, and
the super user needs none."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import BrokerProcess, free_port
from compat_tests.test_ops_kafka_tools import _wave

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"admin-secret\" "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("acl")
    sasl = free_port()
    b = BrokerProcess(d / "broker")
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{free_port()}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        # the broker reaches its controller as admin (as Kafka, the controller listener wants
        # CLUSTER_ACTION from its senders; User:ANONYMOUS over PLAINTEXT has none here)
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
    })
    b.start()
    b.sasl = f"127.0.0.1:{sasl}"
    b.dir = d
    yield b
    b.stop()


def conf(b, user):
    return {"bootstrap.servers": b.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


def produce(b, user, topic, n=5):
    errors, acks = [], []
    p = Producer({**conf(b, user), "message.timeout.ms": 8000, "error_cb": errors.append})
    for i in range(n):
        p.produce(topic, f"{user}-{i}".encode(), on_delivery=lambda e, m: acks.append(e))
    p.flush(15)
    return acks


def consume(b, user, topic, group, n):
    c = Consumer({**conf(b, user), "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                return m.error()
            out.append(m.value())
        if out:
            c.commit(asynchronous=False)
        return out
    finally:
        c.close()


def test_kafka_acls_tool_and_enforcement(acl_broker, tmp_path):
    b = acl_broker
    admin = AdminClient(conf(b, "admin"))
    for t in ("orders", "orders-eu", "secret"):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f"sasl.jaas.config={JAAS.split(' user_')[0]};\n")
    base = ["kafka-acls.sh", "--bootstrap-server", b.sasl, "--command-config", str(props)]
    _wave({"add": base + ["--add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
                          "--topic", "orders", "--resource-pattern-type", "prefixed"],
           "group": base + ["--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "g-alice"],
           "deny": base + ["--add", "--deny-principal", "User:alice", "--operation", "Read", "--topic", "orders-eu"]},
          tmp_path)
    out = _wave({"list": base + ["--list"]}, tmp_path)["list"]
    assert "User:alice" in out and "PREFIXED" in out and "orders-eu" in out and "DENY" in out, out

    # alice: write/read the prefixed topics, but the DENY on orders-eu wins for Read
    assert produce(b, "alice", "orders") == [None] * 5
    assert produce(b, "alice", "orders-eu") == [None] * 5
    assert consume(b, "alice", "orders", "g-alice", 5) == [f"alice-{i}".encode() for i in range(5)]
    err = consume(b, "alice", "orders-eu", "g-alice", 5)
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    # no ACL on "secret": refused, and invisible in metadata
    acks = produce(b, "alice", "secret", 1)
    assert acks and acks[0] is not None and acks[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, acks
    names = set(AdminClient(conf(b, "alice")).list_topics(timeout=20).topics)
    assert {"orders", "orders-eu"} <= names and "secret" not in names
    # bob has nothing at all: sees no topic, may not read
    bob_sees = set(AdminClient(conf(b, "bob")).list_topics(timeout=20).topics)
    assert not bob_sees & {"orders", "orders-eu", "secret"}, (bob_sees, b.log_path)
    err = consume(b, "bob", "orders", "g-bob", 1)
    assert isinstance(err, KafkaError) and err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                          KafkaError.GROUP_AUTHORIZATION_FAILED), err
    # the super user needs no ACL
    assert produce(b, "admin", "secret") == [None] * 5

    _wave({"remove": base + ["--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write",
                             "--topic", "orders", "--resource-pattern-type", "prefixed"]}, tmp_path)
    acks = produce(b, "alice", "orders", 1)
    assert acks[0] is not None and acks[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafka_configs_tool_users_and_clients(acl_broker, tmp_path):
    """Kafka's kafka-configs.sh manages SCRAM credentials (AlterUserScramCredentials) and client
    quotas (AlterClientQuotas/DescribeClientQuotas) on kbroker; the new SCRAM user is stored
    (enforcement: compat_tests/test_security_quotas.py)."""
    b = acl_broker
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f"sasl.jaas.config={JAAS.split(' user_')[0]};\n")
    base = ["kafka-configs.sh", "--bootstrap-server", b.sasl, "--command-config", str(props)]
    _wave({"scram": base + ["--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
                            "SCRAM-SHA-512=[iterations=8192,password=carol-pw]"],
           "user": base + ["--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
                           "producer_byte_rate=1024"],
           "client": base + ["--alter", "--entity-type", "clients", "--entity-default", "--add-config",
                             "consumer_byte_rate=2048"]}, tmp_path)
    out = _wave({"user": base + ["--describe", "--entity-type", "users", "--entity-name", "carol"],
                 "client": base + ["--describe", "--entity-type", "clients", "--entity-default"]}, tmp_path)
    assert "producer_byte_rate=1024" in out["user"] and "SCRAM-SHA-512=iterations=8192" in out["user"], out["user"]
    assert "consumer_byte_rate=2048" in out["client"], out["client"]
