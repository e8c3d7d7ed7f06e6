"""A 3-node cluster (every node broker + controller) in which every listener is SASL_SSL
(SASL/PLAIN over TLS): clients on CLIENT, replica fetchers on CLIENT (the inter-broker
listener), Raft between the controllers and every broker's registration, heartbeats,
AlterPartition and forwarded admin writes on CONTROLLER (sasl.mechanism.controller.protocol
=PLAIN, User:ctl, a super user; StandardAuthorizer, nobody else may act as a cluster node).

Shows: clients produce with acks=all and consume; after the active controller is killed a new
one is elected and the cluster keeps working through it (a new topic, forwarded to it, takes
acks=all writes) and the old leader rejoins; a broker with a wrong controller password and one
that does not trust the controllers' certificate never join; an authenticated user who is not a
cluster node is refused BrokerRegistration with CLUSTER_AUTHORIZATION_FAILED."""
from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import REPO, KBrokerCluster
from compat_tests.security_certs import make_certs
from kbroker.net.client import AuthenticationFailed, ClientError, KafkaClient
from kbroker.security.client_auth import SaslCredentials
from kbroker.wire import registry as wire

USERS = 'user_ctl="ctl-secret" user_admin="admin-secret" user_alice="alice-secret"'
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="ctl" password="{pw}" ' + USERS + ';'


def _overrides(certs, pw="ctl-secret", truststore=None) -> dict:
    jaas = JAAS.format(pw=pw)
    return {
        "listener.security.protocol.map": "CLIENT:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "CLIENT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": jaas,
        "listener.name.controller.plain.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(truststore or certs.ca),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ctl;User:admin",
        "replica.lag.time.max.ms": "5000",
    }


def _client_conf(certs, user="admin") -> dict:
    return {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret", "ssl.ca.location": str(certs.ca)}


def _secure(c: KBrokerCluster, certs, per_node: dict | None = None) -> KBrokerCluster:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    for n in c.nodes.values():
        extra = (per_node or {}).get(n.node_id, {})

        def props(base=n.properties, extra=extra):
            p = base()
            p["listeners"] = p["listeners"].replace("PLAINTEXT://", "CLIENT://")
            p.update(extra)
            return p
        n.properties = props
        n.probe_ssl = ctx      # ApiVersions readiness probe over TLS (allowed before SASL)
    return c


def _wait(cond, timeout: float, step: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # the cluster is still settling
            last = e
        time.sleep(step)
    return last


def _controller_call(certs, port, request, user="ctl", pw="ctl-secret", cafile=None):
    async def go():
        ctx = ssl.create_default_context(cafile=str(cafile or certs.ca))
        c = KafkaClient("127.0.0.1", port, ssl=ctx, sasl=SaslCredentials("PLAIN", user, pw),
                        request_timeout_ms=5000, connect_timeout_ms=5000)
        try:
            return await c.send(request)
        finally:
            await c.close()
    return asyncio.run(go())


SEEN: list = []   # the last DescribeQuorum answers (failure messages)


def _leader(certs, c: KBrokerCluster, skip=()) -> int | None:
    Req = wire.REQUESTS[55]   # DescribeQuorum on a controller listener, as User:ctl
    req = Req(topics=[Req.TopicData(topic_name="__cluster_metadata",
                                    partitions=[Req.TopicData.PartitionData(partition_index=0)])])
    for n in c.nodes.values():
        if n.node_id in skip or not n.controller_port or n.pid is None:
            continue
        try:
            r = _controller_call(certs, n.controller_port, req)
        except ClientError as e:
            SEEN[:] = SEEN[-5:] + [(n.node_id, repr(e))]
            continue
        p = r.topics[0].partitions[0] if r.topics else None
        SEEN[:] = SEEN[-5:] + [(n.node_id, p.error_code if p else r.error_code, p.leader_id if p else None)]
        if p is not None and p.error_code == 0 and p.leader_id >= 0 and p.leader_id not in skip:
            return p.leader_id
    return None


def _produce(certs, bootstrap, topic, n) -> list:
    acked = []
    p = Producer({**_client_conf(certs), "bootstrap.servers": bootstrap, "acks": "all",
                  "message.timeout.ms": 60000})
    for i in range(n):
        p.produce(topic, f"{topic}-{i}".encode(), on_delivery=lambda err, msg: acked.append(err))
    p.flush(90)
    return acked


def _consume(certs, bootstrap, topic, n, partitions=None, **conf) -> list[bytes]:
    """Up to ``n`` values of ``topic`` within 60 s: as a group member, or with ``partitions``
    assigned from their start."""
    cons = Consumer({**_client_conf(certs), "bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                     "auto.offset.reset": "earliest", **conf})
    if partitions is None:
        cons.subscribe([topic])
    else:
        cons.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
    got = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = cons.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        cons.close()
    return got


def _transaction(certs, bootstrap, topic, n, partitions) -> list[bytes]:
    """``n`` records in one committed transaction over ``partitions`` partitions (led by
    different brokers than the transaction's coordinator, so its markers and KIP-890
    verification go broker to broker), then what a read_committed consumer reads back."""
    p = Producer({**_client_conf(certs), "bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}",
                  "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, f"{topic}-{i}".encode(), partition=i % partitions)
    p.commit_transaction(60)
    return _consume(certs, bootstrap, topic, n, partitions, **{"isolation.level": "read_committed",
                                                              "enable.auto.commit": False})


def _create(certs, bootstrap, topic, rf=3, partitions=1):
    admin = AdminClient({**_client_conf(certs), "bootstrap.servers": bootstrap})

    def attempt():
        try:
            admin.create_topics([NewTopic(topic, partitions, rf, config={"min.insync.replicas": "2"})])[topic].result(30)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
        return True
    assert _wait(attempt, 90) is True, f"could not create {topic}"


def _brokers(certs, bootstrap) -> set[int]:
    md = AdminClient({**_client_conf(certs), "bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return set(md.brokers)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_cluster_with_sasl_ssl_controller_listeners(tmp_path, certs):
    roles = {1: "broker,controller", 2: "broker,controller", 3: "broker,controller", 4: "broker", 5: "broker"}
    c = KBrokerCluster(tmp_path, 5, roles=roles, overrides=_overrides(certs))
    _secure(c, certs, per_node={
        4: {"listener.name.controller.plain.sasl.jaas.config": JAAS.format(pw="wrong")},
        5: {"ssl.truststore.location": str(certs.rogue_cert)},   # does not trust the cluster's CA
    })
    try:
        c.format_all()
        for i in (1, 2, 3):
            c.nodes[i].start(wait=False)
        for i in (1, 2, 3):
            c.nodes[i].wait_ready(120)
        good = ",".join(c.nodes[i].bootstrap for i in (1, 2, 3))
        for i in (4, 5):
            c.nodes[i].start(wait=False)

        # clients over SASL_SSL, acks=all on an RF=3 topic (followers fetch over SASL_SSL)
        _create(certs, good, "sec-a")
        assert _produce(certs, good, "sec-a", 50) == [None] * 50
        assert len(_consume(certs, good, "sec-a", 50)) == 50
        # a transaction across brokers: WriteTxnMarkers and AddPartitionsToTxn(verify_only)
        # between brokers ride the inter-broker listener, SASL_SSL too
        _create(certs, good, "sec-txn", partitions=3)
        assert sorted(_transaction(certs, good, "sec-txn", 30, 3)) == sorted(f"sec-txn-{i}".encode() for i in range(30))

        # kafka-metadata-quorum.sh's --command-config: the tool reaches the active controller as ctl
        old = _wait(lambda: _leader(certs, c), 60)
        assert old in (1, 2, 3), (old, SEEN)
        props = tmp_path / "ctl.properties"
        props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                         f"sasl.jaas.config={JAAS.format(pw='ctl-secret')}\nssl.truststore.location={certs.ca}\n")
        out = subprocess.run([sys.executable, "-m", "kbroker", "metadata-quorum", "--bootstrap-controller",
                              f"127.0.0.1:{c.nodes[old].controller_port}", "--command-config", str(props),
                              "describe", "--status"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert "LeaderId:" in out.stdout and "CurrentVoters:" in out.stdout, out.stdout + out.stderr

        # an authenticated user that is not a cluster node may not register a broker
        Reg = wire.REQUESTS[62]
        ctrl_port = c.nodes[1].controller_port
        r = _controller_call(certs, ctrl_port, Reg(broker_id=9, cluster_id=c.cluster_id, listeners=[], features=[],
                                                   rack=None, log_dirs=[]), user="alice", pw="alice-secret")
        assert r.error_code == 31, r   # CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(AuthenticationFailed):
            _controller_call(certs, ctrl_port, Reg(broker_id=9, cluster_id=c.cluster_id), pw="wrong")
        with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
            _controller_call(certs, ctrl_port, Reg(broker_id=9, cluster_id=c.cluster_id), cafile=certs.rogue_cert)

        # the active controller dies: another one takes over, and the cluster works through it
        old = _wait(lambda: _leader(certs, c), 60)   # (still the same one, unless an election ran)
        assert old in (1, 2, 3), (old, SEEN)
        c.kill(old)
        new = _wait(lambda: _leader(certs, c, skip=(old,)), 60)
        assert new in (1, 2, 3) and new != old, (old, new, SEEN)
        rest = ",".join(c.nodes[i].bootstrap for i in (1, 2, 3) if i != old)
        live = {1, 2, 3} - {old}     # the new controller fences the dead broker (heartbeats stop)
        assert _wait(lambda: _brokers(certs, rest) == live, 60) is True, _brokers(certs, rest)
        _create(certs, rest, "sec-b", rf=2)      # CreateTopics forwarded to the new controller
        assert _produce(certs, rest, "sec-b", 30) == [None] * 30
        assert _produce(certs, rest, "sec-a", 20) == [None] * 20

        # the old leader comes back and registers with the new controller
        c.nodes[old].start(wait=True, timeout=120)
        assert _wait(lambda: _brokers(certs, good) == {1, 2, 3}, 60) is True, _brokers(certs, good)

        # nodes 4 (wrong controller password) and 5 (untrusted certificate) never joined
        for i in (4, 5):
            n = c.nodes[i]
            assert n.proc.poll() is None, n.tail()            # still trying, not serving
            assert "registered broker" not in n.log_path.read_text(errors="replace"), n.tail()
        assert "SASL authentication failed" in c.nodes[4].log_path.read_text(errors="replace"), c.nodes[4].tail()
        assert "CERTIFICATE_VERIFY_FAILED" in c.nodes[5].log_path.read_text(errors="replace"), c.nodes[5].tail()
    finally:
        for i in (4, 5):   # refused nodes still wait for the quorum: no orderly shutdown to wait for
            c.nodes[i].kill()
        c.close()
