"""A three-node cluster of real processes on loopback (combined broker + controller, one
cluster id, static voters): controller failover under kill -9, no metadata change without a
majority, a restarted node catching up from a snapshot after the log was cleaned, and stock
admin clients (confluent-kafka, the Java client) against every node."""

import logging
import time

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from compat_tests.brokers import KBrokerCluster
from compat_tests.clients import java as java_client

pytestmark = pytest.mark.timeout(300)


_quiet = logging.getLogger("compat.cluster.librdkafka")
_quiet.setLevel(logging.CRITICAL)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet})


def create(a: AdminClient, name: str, partitions: int = 1, timeout: float = 30.0):
    """Create a topic; returns None on success, else the error."""
    fs = a.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout, operation_timeout=timeout)
    try:
        fs[name].result(timeout=timeout + 10)
        return None
    except Exception as e:       # noqa: BLE001 - the error is the result
        return e


def topics_on(node_port: int) -> set:
    md = admin(f"127.0.0.1:{node_port}").list_topics(timeout=10)
    return set(md.topics)


def has_topics(node_port: int, names: set, timeout: float = 30.0) -> bool:
    """Whether the node's metadata shows ``names`` within ``timeout`` (brokers learn
    metadata by fetching the committed log, so a node may be a moment behind)."""
    deadline = time.monotonic() + timeout
    while True:
        if names <= topics_on(node_port):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path):
    with KBrokerCluster(tmp_path, 3) as c:
        yield c


def test_kill_active_controller_new_one_is_elected_and_create_topics_meanwhile_succeeds(cluster):
    first = cluster.active_controller()
    survivor = next(n for n in cluster.nodes.values() if n.node_id != first)
    a = admin(f"127.0.0.1:{survivor.port}")
    assert create(a, "before") is None
    cluster.kill(first)
    assert create(a, "during", partitions=3) is None          # sent while there is no leader
    second = cluster.active_controller()
    assert second != first
    for n in cluster.nodes.values():
        if n.node_id != first:
            assert has_topics(n.port, {"before", "during"})
    cluster.restart(first)
    assert has_topics(cluster.nodes[first].port, {"before", "during"})


def test_no_metadata_change_is_acknowledged_without_a_majority(cluster):
    lead = cluster.active_controller()
    others = [i for i in cluster.nodes if i != lead]
    cluster.kill(others[0])
    cluster.kill(others[1])
    a = admin(f"127.0.0.1:{cluster.nodes[lead].port}")
    err = create(a, "lonely", timeout=8.0)
    assert err is not None                                   # not acknowledged
    cluster.restart(others[0], wait=False)
    cluster.nodes[others[0]].wait_ready(90)
    deadline = time.monotonic() + 60
    while True:
        err = create(a, "lonely", timeout=15.0)
        if err is None or "already exists" in str(err).lower():
            break
        assert time.monotonic() < deadline, err
    assert has_topics(cluster.nodes[others[0]].port, {"lonely"})


def test_restarted_node_catches_up_from_a_snapshot_after_the_log_was_cleaned(tmp_path):
    small = {"metadata.log.max.record.bytes.between.snapshots": "2000",
             "metadata.log.segment.bytes": "4096", "metadata.log.max.snapshot.interval.ms": "1000"}
    with KBrokerCluster(tmp_path, 3, overrides=small) as c:
        lead = c.active_controller()
        behind = next(i for i in c.nodes if i != lead)
        c.nodes[behind].stop()
        a = admin(f"127.0.0.1:{c.nodes[lead].port}")
        fs = a.create_topics([NewTopic(f"snap{i}", 2, 1) for i in range(40)], request_timeout=60)
        for f in fs.values():
            f.result(timeout=90)
        # the leader snapshotted and cleaned its log below the snapshot
        meta = c.nodes[lead].data_dir / "logs" / "__cluster_metadata-0"
        deadline = time.monotonic() + 30
        while not any(p.name.endswith(".checkpoint") and not p.name.startswith("0000000000000000000000")
                      for p in meta.iterdir()):
            assert time.monotonic() < deadline, sorted(p.name for p in meta.iterdir())
            time.sleep(0.2)
        c.restart(behind)
        assert has_topics(c.nodes[behind].port, {f"snap{i}" for i in range(40)}, timeout=60)
        assert "loaded metadata snapshot" in c.nodes[behind].log_path.read_text()


def test_confluent_admin_against_every_node(cluster):
    cluster.wait_brokers_known()
    for n in cluster.nodes.values():
        a = admin(f"127.0.0.1:{n.port}")
        assert create(a, f"from{n.node_id}", partitions=2) is None
        d = a.describe_cluster(request_timeout=30).result(timeout=40)
        assert sorted(x.id for x in d.nodes) == [1, 2, 3]
    for n in cluster.nodes.values():
        assert has_topics(n.port, {"from1", "from2", "from3"})


@pytest.mark.parametrize("version", ["4.3.0", "3.9.0"])
def test_java_admin_describe_cluster_and_metadata_quorum_against_every_node(cluster, version):
    if not java_client.available(version):
        pytest.skip(f"kafka-clients {version} jars missing (scripts/fetch-java-clients.sh installs them)")
    cluster.wait_brokers_known()
    lead = cluster.active_controller()
    for n in cluster.nodes.values():
        drv = java_client.JavaDriver(f"127.0.0.1:{n.port}", version)
        d = drv.describe_cluster()
        assert sorted(d["nodes"]) == [1, 2, 3] and d["cluster"] == cluster.cluster_id
        leader, epoch, hw = d["quorum"]
        assert leader == lead and epoch >= 1 and hw > 0
        assert sorted(d["voters"]) == [1, 2, 3]
        drv.create_topic(f"java{n.node_id}", 1)
    assert has_topics(cluster.nodes[1].port, {"java1", "java2", "java3"})


def raw_create(port: int, name: str, partitions: int = 1) -> int:
    """CreateTopics over kbroker's own client; the error code."""
    import asyncio

    from kbroker.net.client import KafkaClient
    from kbroker.wire import registry as wire

    async def go():
        c = KafkaClient("127.0.0.1", port, request_timeout_ms=60000)
        R = wire.REQUESTS[19]
        try:
            r = await c.send(R(timeout_ms=30000, topics=[R.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1)]))
            return r.topics[0].error_code
        finally:
            await c.close()
    return asyncio.run(go())


def test_separate_controller_processes_and_a_broker_only_node(tmp_path):
    # librdkafka's admin client sends CreateTopics to Metadata's controller_id: a broker-only
    # node must name a live broker there (controllers are no client endpoints) and forward.
    roles = {1: "controller", 2: "controller", 3: "controller", 4: "broker"}
    with KBrokerCluster(tmp_path, 4, roles=roles) as c:
        broker = c.nodes[4]
        a = admin(f"127.0.0.1:{broker.port}")
        assert create(a, "on-broker", partitions=2) is None
        assert has_topics(broker.port, {"on-broker"})
        md = a.list_topics(timeout=10)
        assert sorted(md.brokers) == [4]                     # controllers are not brokers
        assert md.controller_id == 4
        assert {p.leader for p in md.topics["on-broker"].partitions.values()} == {4}
        # CreatePartitions forwarded by the broker-only node: answered once that node's own
        # metadata shows the new partition (asked at once, no polling)
        fs = a.create_partitions([NewPartitions("on-broker", 3)], request_timeout=30)
        fs["on-broker"].result(timeout=40)
        assert len(a.list_topics("on-broker", timeout=10).topics["on-broker"].partitions) == 3
        # UpdateFeatures through the broker-only node reaches the active controller
        # (kbroker's metadata.version is Kafka 3.9's, level 21)
        up = kafka_features(f"127.0.0.1:{broker.port}", tmp_path, ["upgrade", "--metadata", "3.9"],
                            ["upgrade", "--metadata", "4.0"])
        assert up[0][0] == 0 and up[0][1].endswith("metadata.version was upgraded to 21.\n"), up
        assert up[1][0] == 1 and "Invalid update version 25 for feature metadata.version" in up[1][1], up
        lead = c.active_controller()
        c.kill(lead)
        assert create(a, "after-failover") is None
        assert c.active_controller() != lead


def kafka_features(bootstrap: str, tmp, *commands: list) -> list:
    """Run Kafka 4.0's kafka-features.sh commands in parallel; [(exit code, output)]."""
    import os
    import subprocess

    from compat_tests.test_ops_kafka_tools import KAFKA
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp / "kafka-tool-logs"),
           "KAFKA_OPTS": "-XX:TieredStopAtLevel=1 -Xshare:auto"}
    procs = [subprocess.Popen([str(KAFKA / "bin" / "kafka-features.sh"), "--bootstrap-server", bootstrap, *cmd],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for cmd in commands]
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=180)
        out.append((p.returncode, text))
    return out


def test_sigterm_while_waiting_for_the_quorum_stops_the_node(tmp_path):
    """A broker whose controllers never answer waits for them at start-up; SIGTERM ends that
    wait and the process exits cleanly instead of ignoring the signal."""
    from compat_tests.brokers import free_port
    c = KBrokerCluster(tmp_path, 1, roles="broker")
    dead = free_port()
    c.voters = lambda: f"9@127.0.0.1:{dead}"             # nobody listens there
    node = c.nodes[1]
    node.format()
    node.start(wait=False)
    try:
        wait_for = time.monotonic() + 30
        while "waiting" not in node.log_path.read_text(errors="replace") and time.monotonic() < wait_for:
            time.sleep(0.2)
        time.sleep(1)
        assert node.stop(timeout=20) == 0, node.log_path.read_text(errors="replace")[-2000:]
        assert "stopping before start-up finished" in node.log_path.read_text(errors="replace")
    finally:
        node.kill()


def test_node_formatted_with_another_cluster_id_is_refused(tmp_path):
    with KBrokerCluster(tmp_path / "good", 1) as c:
        stranger = KBrokerCluster(tmp_path / "other", 1, roles="broker",
                                  cluster_id="otherclusterBBBBBBBBBBB")
        node = stranger.nodes[1]
        node.node_id = 2
        stranger.voters = c.voters                            # it points at the good quorum
        node.format()
        node.start(wait=False)
        try:
            assert node.proc.wait(60) != 0
            text = node.log_path.read_text()
            assert "INCONSISTENT_CLUSTER_ID" in text and stranger.cluster_id in text
        finally:
            stranger.close()


def test_format_release_version_then_upgrade_with_kafka_features(tmp_path):
    """A cluster formatted with ``--release-version 3.7`` (kafka-storage.sh's flag) starts at
    metadata.version 3.7-IV4, as Kafka's kafka-features.sh describes it, and upgrades to 3.9."""
    c = KBrokerCluster(tmp_path, 1)
    c.nodes[1].format("--release-version", "3.7")
    c.start(format=False)
    try:
        bs = c.bootstrap
        [(rc, out)] = kafka_features(bs, tmp_path, ["describe"])
        assert rc == 0 and "Feature: metadata.version" in out and "FinalizedVersionLevel: 3.7-IV4" in out, out
        [(rc, out)] = kafka_features(bs, tmp_path, ["upgrade", "--metadata", "3.9"])
        assert rc == 0 and out.endswith("metadata.version was upgraded to 21.\n"), out
        [(rc, out)] = kafka_features(bs, tmp_path, ["describe"])
        assert rc == 0 and "FinalizedVersionLevel: 3.9-IV0" in out, out
    finally:
        c.close()


def test_leader_shrinks_the_isr_of_a_stalled_follower_and_expands_it_again(tmp_path):
    """A follower that stops fetching (SIGSTOP) leaves the ISR through the leader's own check
    after replica.lag.time.max.ms (its session is long, so the controller never fences it) and
    rejoins once it fetches again (SIGCONT). The stalled follower is also the active
    controller, stopped right after the topic's creation: the leader's ISR change, and the
    producer's first Metadata (which may auto-create the topic, if the leader has not yet
    seen it), must reach the controller elected next instead of waiting on the stalled one
    (CI once saw both wait 30 s)."""
    from confluent_kafka import Producer
    from compat_tests.cluster_faults.workload import partitions_of

    with KBrokerCluster(tmp_path, 3, overrides={"broker.session.timeout.ms": "120000",
                                                "replica.lag.time.max.ms": "1500"}) as c:
        follower = c.active_controller()
        leader, other = [n for n in c.nodes if n != follower]
        a = admin(c.nodes[follower].bootstrap)
        a.create_topics([NewTopic("isr", num_partitions=1,
                                  replica_assignment=[[leader, follower, other]])])["isr"].result(30)
        others = ",".join(c.nodes[n].bootstrap for n in c.nodes if n != follower)
        c.stop_signal(follower)
        try:
            p = Producer({"bootstrap.servers": others, "acks": "1"})
            for i in range(20):
                p.produce("isr", value=b"%d" % i, partition=0)
            assert p.flush(30) == 0
            # The live follower may drop out too for a moment: it learns the topic was committed
            # only from the controller elected next, which can take longer than the lag time.
            # It must be back (and the stalled one still out) within the wait.
            expected = sorted([leader, other])
            shrunk = partitions_of(others, "isr", until=lambda ps: sorted(ps[0].isrs) == expected,
                                   timeout_s=20)[0]
            assert sorted(shrunk.isrs) == expected
            assert shrunk.leader == leader
        finally:
            c.cont(follower)
        partitions_of(c.bootstrap, "isr", until=lambda ps: len(ps[0].isrs) == 3, timeout_s=30)
