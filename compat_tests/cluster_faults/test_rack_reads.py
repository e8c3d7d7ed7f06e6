"""Where clients are sent, on a real 3-node cluster whose brokers sit in three racks:

* KIP-392: with ``replica.selector.class`` = Kafka's RackAwareReplicaSelector, the leader
  answers a consumer Fetch carrying a follower's rack with that follower as
  ``preferred_read_replica`` (and no records); the follower serves the records up to its high
  watermark; confluent-kafka with ``client.rack`` reads everything that way;
* KIP-951: a broker that does not host a partition answers Produce (v10+) and Fetch (v16+)
  with NOT_LEADER_OR_FOLLOWER, the current leader and its endpoint;
* ``auto.leader.rebalance.enable``: a preferred leader that restarted gets its leadership
  back on the controller's next imbalance check (no ElectLeaders asked for).
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import KBrokerCluster
from compat_tests.cluster_faults.workload import partitions_of, wait_until
from kbroker.net.client import KafkaClient
from kbroker.tools.client import one_batch_produce
from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.records import BatchBuilder

pytestmark = pytest.mark.timeout(300)
OVERRIDES = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
             "leader.imbalance.check.interval.seconds": "2", "replica.lag.time.max.ms": "5000",
             "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KBrokerCluster(tmp_path_factory.mktemp("racks"), 3, overrides=OVERRIDES)
    for n in c.nodes.values():   # broker.rack per node
        n.properties = (lambda orig, rack: lambda: {**orig(), "broker.rack": rack})(n.properties, f"rack-{n.node_id}")
    c.start()
    try:
        yield c
    finally:
        c.close()


def _port(c, node_id):
    return c.nodes[node_id].port


async def _send(port, req, version):
    c = KafkaClient("127.0.0.1", port, request_timeout_ms=15000)
    try:
        return await c.send(req, version)
    finally:
        await c.close()


def send(port, req, version):
    return asyncio.run(_send(port, req, version))


def _fetch_req(topic, offset, rack, topic_id=None, max_wait_ms=0):
    F = FetchRequest.FetchTopic
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, rack_id=rack, forgotten_topics_data=[],
                        topics=[F(topic=topic, topic_id=topic_id or F().topic_id, partitions=[F.FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                            partition_max_bytes=1 << 20)])])


def _state(c, topic):
    return partitions_of(c.bootstrap, topic, until=lambda ps: 0 in ps and ps[0].leader >= 0)[0]


def test_consumers_read_from_a_follower_in_their_rack(cluster):
    topic = "racks"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
    wait_until(lambda: len(_state(cluster, topic).isrs) == 3, 60, "a full ISR")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(60) == 0
    st = _state(cluster, topic)
    leader = st.leader
    follower = next(r for r in st.replicas if r != leader)
    rack = f"rack-{follower}"
    # the leader points a consumer in the follower's rack at the follower, without records
    part = send(_port(cluster, leader), _fetch_req(topic, 0, rack), 12).responses[0].partitions[0]
    assert (part.error_code, part.preferred_read_replica) == (0, follower), part
    assert not part.records
    # a consumer in the leader's own rack (or none) reads from the leader
    part = send(_port(cluster, leader), _fetch_req(topic, 0, f"rack-{leader}"), 12).responses[0].partitions[0]
    assert part.preferred_read_replica == -1 and part.records
    # the follower serves reads up to the high watermark it knows (all 300, once replicated)
    def follower_has_all():
        r = send(_port(cluster, follower), _fetch_req(topic, 0, rack), 12).responses[0].partitions[0]
        return r if r.error_code == 0 and r.high_watermark == 300 else None
    part = wait_until(follower_has_all, 30, "the follower's high watermark at 300")
    assert part.records and part.preferred_read_replica == -1
    # and librdkafka with client.rack follows the leader's redirection and reads everything
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "rack-reader", "client.rack": rack,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        wait_until(lambda: got.extend(m.value().decode() for m in c.consume(500, 1.0) if m.error() is None)
                   or len(got) >= 300, 60, "300 records through the rack's follower")
        assert got == [f"v{i}" for i in range(300)]
    finally:
        c.close()


def test_not_leader_answers_name_the_leader_and_its_endpoint(cluster):
    topic = "elsewhere"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    leader = _state(cluster, topic).leader
    other = next(n for n in cluster.nodes if n != leader)
    M = MetadataRequest

    def known_there():   # (that broker's metadata may lag the creation by a moment)
        t = send(_port(cluster, other), M(topics=[M.MetadataRequestTopic(name=topic)],
                                          allow_auto_topic_creation=False), 12).topics[0]
        return t.topic_id if t.error_code == 0 else None
    topic_id = wait_until(known_there, 30, f"broker {other} knowing {topic}")
    resp = send(_port(cluster, other), _fetch_req(None, 0, "", topic_id=topic_id), 16)
    part = resp.responses[0].partitions[0]
    assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert part.current_leader.leader_id == leader and part.current_leader.leader_epoch >= 0
    assert [(e.node_id, e.port, e.rack) for e in resp.node_endpoints] == \
        [(leader, _port(cluster, leader), f"rack-{leader}")]
    b = BatchBuilder()
    b.append(value=b"x", timestamp=0)
    req = one_batch_produce(topic, 0, b.build(), acks=-1, timeout_ms=5000)
    resp = send(_port(cluster, other), req, 10)
    r = resp.responses[0].partition_responses[0]
    assert r.error_code == Errors.NOT_LEADER_OR_FOLLOWER and r.current_leader.leader_id == leader
    assert [e.node_id for e in resp.node_endpoints] == [leader]


def test_preferred_leader_comes_back_by_itself(cluster):
    topic = "rebalanced"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
    wait_until(lambda: len(_state(cluster, topic).isrs) == 3, 60, "a full ISR")
    preferred = _state(cluster, topic).replicas[0]
    assert _state(cluster, topic).leader == preferred
    cluster.nodes[preferred].stop()          # controlled shutdown: leadership moves away
    wait_until(lambda: _state(cluster, topic).leader != preferred, 30, "leadership off the stopped broker")
    cluster.restart(preferred)
    wait_until(lambda: preferred in _state(cluster, topic).isrs, 60, f"broker {preferred} back in the ISR")
    wait_until(lambda: _state(cluster, topic).leader == preferred, 30, "the preferred leader back by itself")
