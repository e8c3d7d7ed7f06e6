"""A 3-node cluster whose inter-broker listener is SASL_SSL (SASL/PLAIN as User:broker, a super
user, over TLS): followers replicate over it, so an RF=3 topic with min.insync.replicas=3
takes acks=all writes only if every follower authenticated; clients use the PLAINTEXT
listener. A broker with a wrong inter-broker password is kept out of the ISR.
(The controller listeners stay PLAINTEXT: securing them is not built yet.)"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import KBrokerCluster, free_port
from compat_tests.security_certs import make_certs

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="{pw}" user_broker="broker-secret";')


def _cluster(tmp_path, certs, bad_password_node: int | None = None) -> KBrokerCluster:
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:ANONYMOUS",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "replica.lag.time.max.ms": "5000",
    }
    c = KBrokerCluster(tmp_path, 3, overrides=overrides)
    for n in c.nodes.values():
        n.internal_port = free_port()
        pw = "wrong" if n.node_id == bad_password_node else "broker-secret"

        def props(base=n.properties, n=n, pw=pw):
            p = base()
            p["listeners"] += f",INTERNAL://127.0.0.1:{n.internal_port}"
            p["listener.name.internal.plain.sasl.jaas.config"] = JAAS.format(pw=pw)
            return p
        n.properties = props
    return c


def _isr_sizes(bootstrap: str, topic: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return [len(p.isrs) for p in md.topics[topic].partitions.values()]


def _wait(cond, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return True
        except Exception:
            pass
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def _create(admin, topic, assignment, config):
    """Create with an explicit assignment, retrying while the brokers are still registering."""
    errors = []

    def attempt():
        try:
            admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config=config)])[topic].result(30)
        except Exception as e:
            errors.append(e)
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return True
            raise
        return True
    assert _wait(attempt, 60), f"could not create {topic}: {errors[-3:]}"


def test_replication_over_a_sasl_ssl_inter_broker_listener(tmp_path, certs):
    """Nodes 1 and 2 know the inter-broker password, node 3 does not: a topic on 1 and 2
    takes acks=all writes (its follower fetches over SASL_SSL); on a topic led by 1 with a
    follower on 3, node 3 is dropped from the ISR and fails to authenticate."""
    c = _cluster(tmp_path, certs, bad_password_node=3).start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        _create(admin, "secgood", [[1, 2]], {"min.insync.replicas": "2"})
        _create(admin, "secbad", [[1, 3]], {})
        assert _wait(lambda: _isr_sizes(c.bootstrap, "secgood") == [2], 60), _isr_sizes(c.bootstrap, "secgood")
        acked = []
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "message.timeout.ms": 30000})
        for i in range(50):
            p.produce("secgood", f"v{i}".encode(), on_delivery=lambda err, msg: acked.append(err))
        p.flush(60)
        assert acked == [None] * 50, acked[:3]
        assert _wait(lambda: _isr_sizes(c.bootstrap, "secbad") == [1], 60), _isr_sizes(c.bootstrap, "secbad")
        log3 = c.nodes[3].log_path.read_text(errors="replace")
        assert "authentication failed" in log3.lower(), log3[-3000:]
    finally:
        for n in c.nodes.values():
            n.stop()
