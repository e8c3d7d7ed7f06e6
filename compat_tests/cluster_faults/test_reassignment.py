"""Partition reassignment and leader elections on a real 3-node cluster (issue 10):

* a partition moves from 1 replica to 3 and then off its leader with ``kbroker
  reassign-partitions`` while confluent-kafka (or the Java client) writes to it with
  idempotent acks=all; the
  Jepsen-style checker finds nothing lost, duplicated or reordered, and the replica that left
  has its log deleted;
* a broker down while its replica moves away removes that log once it has caught up, keeps
  its other replicas, and moves aside (``-stray``) a log no metadata ever gave it;
* Apache Kafka's own kafka-reassign-partitions.sh (--execute / --verify / --list) and
  kafka-leader-election.sh (PREFERRED) work against kbroker, and ``kbroker leader-election``
  gives the same answers;
* its ``--throttle`` holds the new replica's copy to the throttled rate, and ``--verify``
  clears the throttles afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import REPO, KBrokerCluster
from compat_tests.cluster_faults.checker import History, check
from compat_tests.cluster_faults.workload import JavaProducerLoad, ProducerLoad, partitions_of, read_all, wait_until

pytestmark = pytest.mark.timeout(420)
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
OVERRIDES = {"replica.lag.time.max.ms": "5000", "auto.leader.rebalance.enable": "false",
             "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KBrokerCluster(tmp_path_factory.mktemp("reassign"), 3, overrides=OVERRIDES).start()
    try:
        yield c
    finally:
        c.close()


def kbroker(*args, timeout=120) -> str:
    p = subprocess.run([sys.executable, "-m", "kbroker", *args], capture_output=True, text=True,
                       env=ENV, timeout=timeout)
    assert p.returncode == 0, f"kbroker {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def partition(c, topic, p=0):
    return partitions_of(c.bootstrap, topic, until=lambda ps: p in ps)[p]


def plan_file(tmp_path, name, topic, replicas_by_partition) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in replicas_by_partition.items()]}))
    return str(path)


def _reassign_and_wait(c, tmp_path, topic, target, what):
    f = plan_file(tmp_path, f"{what}.json", topic, {0: target})
    out = kbroker("reassign-partitions", "--bootstrap-server", c.bootstrap, "--execute",
                  "--reassignment-json-file", f)
    assert f"Successfully started partition reassignment for {topic}-0" in out, out

    def completed():
        v = kbroker("reassign-partitions", "--bootstrap-server", c.bootstrap, "--verify",
                    "--reassignment-json-file", f)
        return f"Reassignment of partition {topic}-0 is completed." in v
    wait_until(completed, 120, f"{what} to complete", step=1.0)
    wait_until(lambda: sorted(partition(c, topic).isrs) == sorted(target), 60, f"ISR {target} after {what}")


@pytest.mark.parametrize("load_class", [ProducerLoad, JavaProducerLoad], ids=["confluent-kafka", "java"])
def test_reassign_one_to_three_replicas_then_off_the_leader_under_acks_all_load(cluster, tmp_path, duration,
                                                                                load_class):
    topic = f"moving-{load_class.__name__}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    first = wait_until(lambda: (p := partition(cluster, topic)).leader >= 0 and p.leader, 30, "a leader")
    others = [n for n in cluster.nodes if n != first]
    history = History()
    load = load_class(cluster.bootstrap, topic, 1, history).start()
    try:
        wait_until(lambda: load.acked() >= 200, 60, "writes before the reassignment")
        # 1 -> 3 replicas: the new ones catch up under load, join the ISR, the move completes
        _reassign_and_wait(cluster, tmp_path, topic, [first] + others, "growing to 3 replicas")
        assert kbroker("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--list").strip() \
            == "No partition reassignments found."
        before = load.acked()
        wait_until(lambda: load.acked() >= before + 200, 60, "writes on 3 replicas")
        time.sleep(duration)
        # then off the leader: leadership moves to a remaining replica, the old one deletes its log
        _reassign_and_wait(cluster, tmp_path, topic, others, "moving off the leader")
        # (brokers apply the change at slightly different times: ask until the one asked has it)
        wait_until(lambda: (p := partition(cluster, topic)).leader in others and sorted(p.replicas) == sorted(others),
                   30, f"a leader among {others} and replicas {others}")
        before = load.acked()
        wait_until(lambda: load.acked() >= before + 200, 60, "writes after the leader moved")
    finally:
        load.stop()
    report = check(history, read_all(cluster.bootstrap, topic, 1))
    assert report.ok, report.summary()
    assert report.acked >= 600, report.summary()
    logs = cluster.nodes[first].data_dir / "logs"
    wait_until(lambda: not (logs / f"{topic}-0").exists(), 30, f"the log of {topic}-0 leaving broker {first}")


def test_reassign_cancel_and_errors_through_the_kbroker_tool(cluster, tmp_path):
    topic = "cancelled"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    leader = wait_until(lambda: (p := partition(cluster, topic)).leader >= 0 and p.leader, 30, "a leader")
    for n in cluster.nodes.values():   # the tool may ask any node: each must know the topic
        if "broker" in n.roles and n.pid is not None:
            partitions_of(f"{n.host}:{n.port}", topic)
    bad = plan_file(tmp_path, "bad.json", topic, {0: [leader, 99]})
    p = subprocess.run([sys.executable, "-m", "kbroker", "reassign-partitions", "--bootstrap-server",
                        cluster.bootstrap, "--execute", "--reassignment-json-file", bad],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in p.stdout + p.stderr, p.stdout + p.stderr
    nothing = plan_file(tmp_path, "same.json", topic, {0: [leader]})
    out = kbroker("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--cancel",
                  "--reassignment-json-file", nothing)
    assert "None of the specified partition reassignments are active" in out, out


def _kafka_home():
    for base in (REPO.parent / "shared", REPO.parent.parent / "shared"):
        if (base / "reference-kafka" / "bin" / "kafka-reassign-partitions.sh").exists():
            return base / "reference-kafka"
    raise AssertionError("../shared/reference-kafka (Apache Kafka 4.0's bin/ tools) not found beside the repository")


def kafka_tool(tmp_path, script, *args) -> str:
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp_path / "kafka-tool-logs"),
           "KAFKA_OPTS": "-XX:TieredStopAtLevel=1 -Xshare:auto"}
    p = subprocess.run([str(_kafka_home() / "bin" / script), *args], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=180)
    assert p.returncode == 0, f"{script} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_kafka_reassign_and_leader_election_tools_against_kbroker(cluster, tmp_path):
    topic = "ktools"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(60)
    wait_until(lambda: all(len(partition(cluster, topic, i).isrs) == 3 for i in (0, 1)), 60, "full ISRs")
    old = {i: list(partition(cluster, topic, i).replicas) for i in (0, 1)}
    leaders = {i: partition(cluster, topic, i).leader for i in (0, 1)}
    assert all(leaders[i] == old[i][0] for i in (0, 1)), (old, leaders)
    new = {i: old[i][1:] + old[i][:1] for i in (0, 1)}    # the preferred replica changes
    bs = cluster.bootstrap.split(",")[0]
    # reorder the replicas (no data moves): Kafka's tool starts it, verifies it, lists nothing left
    f = plan_file(tmp_path, "reorder.json", topic, new)
    out = kafka_tool(tmp_path, "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--execute",
                     "--reassignment-json-file", f)
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in out, out
    for i in (0, 1):   # the rollback plan
        assert f'"partition":{i},"replicas":{json.dumps(old[i], separators=(",", ":"))}' in out, out
    wait_until(lambda: all(partition(cluster, topic, i).replicas == new[i] for i in (0, 1)), 60,
               "the new replica order")
    out = kafka_tool(tmp_path, "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--verify",
                     "--reassignment-json-file", f)
    assert f"Reassignment of partition {topic}-0 is completed." in out, out
    assert f"Reassignment of partition {topic}-1 is completed." in out, out
    out = kafka_tool(tmp_path, "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--list")
    assert "No partition reassignments found." in out, out
    # the leaders are no longer the preferred replicas: elect those
    assert {i: partition(cluster, topic, i).leader for i in (0, 1)} == leaders
    out = kafka_tool(tmp_path, "kafka-leader-election.sh", "--bootstrap-server", bs,
                     "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out, out
    wait_until(lambda: partition(cluster, topic, 0).leader == new[0][0], 30, "the preferred leader of partition 0")
    out = kbroker("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
                  "--topic", topic)
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-1" in out, out
    assert f"Valid replica already elected for partitions {topic}-0" in out, out
    wait_until(lambda: partition(cluster, topic, 1).leader == new[1][0], 30, "the preferred leader of partition 1")
    # nothing left to elect anywhere: Kafka's tool with --all-topic-partitions says nothing failed
    kafka_tool(tmp_path, "kafka-leader-election.sh", "--bootstrap-server", bs, "--election-type", "preferred",
               "--all-topic-partitions")
    # an unclean election where a leader exists is not needed
    out = kbroker("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "unclean",
                  "--topic", topic, "--partition", "0")
    assert f"Valid replica already elected for partitions {topic}-0" in out, out


def _segment_bytes(node, topic) -> int:
    d = node.data_dir / "logs" / f"{topic}-0"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.exists() else 0


def test_kafka_tool_throttle_limits_the_copy_and_verify_clears_it(cluster, tmp_path):
    """kafka-reassign-partitions.sh --throttle: the new replica fills at about the throttled
    rate (Kafka's rate is an average since its oldest sample window, so one fetch of up to
    replica.fetch.max.bytes may go first), it completes, and --verify clears every throttle."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import ConfigResource
    topic, rate, records = "throttled", 300_000, 3000
    _create_with_assignment(cluster, topic, [[1]])
    wait_until(lambda: partition(cluster, topic).leader == 1, 30, "broker 1 leading")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 5})
    for i in range(records):
        p.produce(topic, value=b"%08d" % i + b"x" * 1016, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    total = _segment_bytes(cluster.nodes[1], topic)
    assert total > 3_000_000
    bs = cluster.bootstrap.split(",")[0]
    f = plan_file(tmp_path, "throttled.json", topic, {0: [1, 2]})
    out = kafka_tool(tmp_path, "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--execute",
                     "--reassignment-json-file", f, "--throttle", str(rate))
    assert f"The inter-broker throttle limit was set to {rate} B/s" in out, out
    assert f"Successfully started partition reassignment for {topic}-0" in out, out
    start = time.monotonic()
    samples, in_sync = [], False
    while not in_sync and time.monotonic() - start < 120:
        samples.append((time.monotonic() - start, _segment_bytes(cluster.nodes[2], topic)))
        in_sync = sorted(partition(cluster, topic).isrs) == [1, 2]
        time.sleep(0.5)
    assert in_sync, samples
    # (1.5 s: the move began before the tool exited; 1.2 MiB: the first fetch)
    over = [(round(t, 1), n) for t, n in samples if n > rate * (t + 1.5) + 1.2 * 2**20]
    assert not over, f"faster than {rate} B/s: {over} of {samples}"
    assert samples[-1][0] > (total - 1.2 * 2**20) / rate - 2, samples     # it really was held back
    out = kafka_tool(tmp_path, "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--verify",
                     "--reassignment-json-file", f)
    assert f"Reassignment of partition {topic}-0 is completed." in out, out
    assert "Clearing broker-level throttles on brokers 1,2,3" in out, out
    assert f"Clearing topic-level throttles on topic {topic}" in out, out
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def described(rtype, name):
        return next(iter(admin.describe_configs([ConfigResource(rtype, name)]).values())).result(30)
    # (each broker answers from its own copy of the metadata: wait for the deletes to reach it)
    wait_until(lambda: described("topic", topic)["leader.replication.throttled.replicas"].value == ""
               and described("topic", topic)["follower.replication.throttled.replicas"].value == "",
               30, "the topic throttles cleared")
    for b in (1, 2):
        wait_until(lambda: not {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
                   & set(described("broker", str(b))), 30, f"broker {b}'s throttle rates cleared")


def test_kbroker_tool_sets_the_same_throttles_as_kafkas(cluster, tmp_path):
    from confluent_kafka.admin import ConfigResource
    topic = "throttled-kb"
    _create_with_assignment(cluster, topic, [[1, 2], [2, 3]])
    wait_until(lambda: all(len(partition(cluster, topic, i).isrs) == 2 for i in (0, 1)), 60, "full ISRs")
    f = plan_file(tmp_path, "kb-throttled.json", topic, {0: [1, 3], 1: [2, 3]})
    out = kbroker("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
                  "--reassignment-json-file", f, "--throttle", "50000000")
    assert "The inter-broker throttle limit was set to 50000000 B/s" in out, out
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def topic_cfg():
        c = next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result(30)
        return c["leader.replication.throttled.replicas"].value, c["follower.replication.throttled.replicas"].value
    # partition 0 moves from 1,2 to 1,3: 1 and 2 may send, 3 receives; partition 1 stays, and
    # its replicas are listed as senders too, as Kafka's tool lists every planned partition's
    wait_until(lambda: topic_cfg() == ("0:1,0:2,1:2,1:3", "0:3"), 30, "Kafka's throttled-replica lists")
    # a broker's own configs: the tools send them to that broker, whatever the bootstrap
    out = kbroker("configs", "--bootstrap-server", cluster.bootstrap, "--describe", "--entity-type", "brokers",
                  "--entity-name", "3")
    # (Kafka's broker config definitions do not know these dynamic-only names, so it describes
    # them as sensitive, without their values; kbroker answers the same)
    assert "leader.replication.throttled.rate=null sensitive=true" in out, out
    def verified():
        v = kbroker("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                    "--reassignment-json-file", f)
        return v if "Clearing broker-level throttles on brokers 1,2,3" in v else None
    out = wait_until(verified, 60, "the move to complete and --verify to clear the throttles", step=1.0)
    assert f"Clearing topic-level throttles on topic {topic}" in out, out
    wait_until(lambda: topic_cfg() == ("", ""), 30, "the topic throttles cleared")


def _create_with_assignment(c, topic, assignment, configs=None):
    import asyncio

    from kbroker.net.client import KafkaClient
    from kbroker.wire.generated.create_topics_request import CreateTopicsRequest as R
    T = R.CreatableTopic
    req = R(timeout_ms=30000, validate_only=False, topics=[T(
        name=topic, num_partitions=-1, replication_factor=-1,
        assignments=[T.CreatableReplicaAssignment(partition_index=p, broker_ids=r) for p, r in enumerate(assignment)],
        configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])

    async def send(port, request, version, timeout_ms=30000):
        k = KafkaClient("127.0.0.1", port, request_timeout_ms=timeout_ms)
        try:
            return await k.send(request, version)
        finally:
            await k.close()
    r = asyncio.run(send(c.nodes[3].port, req, 7)).topics[0]
    assert r.error_code == 0, r

    # Every broker that answers has applied the creation before the test goes on: the node
    # the creation went through knows it at once, a tool asking another one may otherwise
    # hear UNKNOWN_TOPIC_OR_PARTITION (CI saw it once). Kafka's own tests wait the same way.
    # (A node stopped or restarting by the test's design is not waited for.)
    from kbroker.wire.generated.metadata_request import MetadataRequest as M
    ask = M(topics=[M.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)

    def known_everywhere():
        for node in c.nodes.values():
            if "broker" not in node.roles or node.proc is None or node.proc.poll() is not None:
                continue
            try:
                t = asyncio.run(send(node.port, ask, 9, timeout_ms=2000)).topics[0]
            except Exception:   # noqa: BLE001 - not answering (stopped, restarting)
                continue
            if t.error_code or len(t.partitions) != len(assignment):
                return False
        return True
    wait_until(known_everywhere, 30, f"{topic} known to every broker")


def test_unclean_election_only_when_asked_or_allowed_and_a_move_stuck_on_a_dead_broker(cluster, tmp_path):
    """Broker 2 leaves the ISR, broker 1 takes more writes and dies: nobody in the ISR is
    alive. With unclean.leader.election.enable=false (the default) the partitions stay
    without a leader; ElectLeaders(UNCLEAN) elects broker 2 for one of them, turning the topic
    config on elects it for the other; what only broker 1 had is lost (and logged as such)."""
    from confluent_kafka import Producer
    topic = "unclean"
    _create_with_assignment(cluster, topic, [[1, 2], [1, 2]])
    wait_until(lambda: all(sorted(partition(cluster, topic, i).isrs) == [1, 2] for i in (0, 1)), 60, "ISR [1, 2]")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        p.produce(topic, value=f"both-{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    cluster.nodes[2].stop()                       # controlled shutdown: 2 leaves both ISRs
    wait_until(lambda: all(partition(cluster, topic, i).isrs == [1] for i in (0, 1)), 30, "ISR [1]")
    p1 = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
    for i in range(20):
        p1.produce(topic, value=f"only-1-{i}".encode(), partition=i % 2)
    assert p1.flush(30) == 0
    cluster.kill(1)
    cluster.restart(2)
    try:
        wait_until(lambda: all(partition(cluster, topic, i).leader == -1 for i in (0, 1)), 30,
                   "no leader (broker 1 fenced, 2 not in the ISR)")
        time.sleep(3)   # several controller checks later, still nobody: unclean is off by default
        assert all(partition(cluster, topic, i).leader == -1 for i in (0, 1))
        alive = f"127.0.0.1:{cluster.nodes[3].port}"    # (the kbroker tools use the first address)
        out = kbroker("leader-election", "--bootstrap-server", alive, "--election-type", "unclean",
                      "--topic", topic, "--partition", "0")
        assert f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0" in out, out
        wait_until(lambda: (partition(cluster, topic, 0).leader, partition(cluster, topic, 0).isrs) == (2, [2]),
                   30, "broker 2 leading partition 0 alone")
        assert partition(cluster, topic, 1).leader == -1
        kbroker("configs", "--bootstrap-server", alive, "--alter", "--entity-type", "topics",
                "--entity-name", topic, "--add-config", "unclean.leader.election.enable=true")
        wait_until(lambda: partition(cluster, topic, 1).leader == 2, 30, "broker 2 leading partition 1 (topic config)")
        got = wait_until(lambda: _read_or_none(alive, topic), 60, "reading both partitions back", step=1.0)
        assert sorted(v for rows in got.values() for _, v in rows) == sorted(f"both-{i}" for i in range(20))
        logs = "".join(n.log_path.read_text(errors="replace") for n in cluster.nodes.values())
        assert "unclean leader election for unclean-0" in logs and "unclean leader election for unclean-1" in logs
        _stuck_on_a_dead_broker(cluster, tmp_path, alive)
        # partition 1 moves off broker 1 while it is down: back up, it deletes that log
        f = plan_file(tmp_path, "off-1.json", topic, {1: [2, 3]})
        kbroker("reassign-partitions", "--bootstrap-server", alive, "--execute", "--reassignment-json-file", f)
        wait_until(lambda: sorted(partition(cluster, topic, 1).isrs) == [2, 3]
                   and partition(cluster, topic, 1).replicas == [2, 3], 60, "partition 1 on brokers 2 and 3")
        logs = cluster.nodes[1].data_dir / "logs"
        assert (logs / f"{topic}-1").exists() and (logs / f"{topic}-0").exists()
        cluster.restart(1)     # its metadata replay reaches the move (or its stray-log sweep does)
        wait_until(lambda: not (logs / f"{topic}-1").exists(), 30, f"broker 1 removing its {topic}-1")
        assert (logs / f"{topic}-0").exists()        # still a replica there
    finally:
        if cluster.nodes[1].pid is None:
            cluster.restart(1)


def test_a_replica_moved_away_while_its_broker_was_down_is_gone_after_restart(cluster, tmp_path):
    """Broker 2 is killed; a partition moves off it; broker 2 comes back. Once it has caught up
    with the metadata, its old log of that partition is gone from the partition's place (moved
    aside as ``-stray``, or deleted), while a partition only broker 2 holds is intact and
    readable from it. A log of a partition broker 2 never replicated, left in its log dir
    while it was down (Kafka's case of an offline log dir coming back), is moved aside by the
    start-up stray-log sweep: no metadata record ever names it for broker 2."""
    import shutil

    from confluent_kafka import Producer
    moved, stays, foreign = "moved-away", "stays-here", "elsewhere"
    _create_with_assignment(cluster, moved, [[2, 1]])
    _create_with_assignment(cluster, stays, [[2]])
    _create_with_assignment(cluster, foreign, [[1]])
    wait_until(lambda: sorted(partition(cluster, moved).isrs) == [1, 2], 60, "ISR [1, 2]")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    sent = {t: [f"{t}-{i}" for i in range(30)] for t in (moved, stays, foreign)}
    for t, values in sent.items():
        for v in values:
            p.produce(t, value=v.encode(), partition=0)
    assert p.flush(30) == 0
    logs = cluster.nodes[2].data_dir / "logs"
    assert (logs / f"{moved}-0").exists() and (logs / f"{stays}-0").exists()
    cluster.kill(2)
    restarted = False
    try:
        alive = f"127.0.0.1:{cluster.nodes[3].port}"
        f = plan_file(tmp_path, "moved-away.json", moved, {0: [1, 3]})
        kbroker("reassign-partitions", "--bootstrap-server", alive, "--execute", "--reassignment-json-file", f)
        wait_until(lambda: partition(cluster, moved).replicas == [1, 3]
                   and sorted(partition(cluster, moved).isrs) == [1, 3], 60, "the partition on brokers 1 and 3")
        assert (logs / f"{moved}-0").exists()     # broker 2 is down: nobody removed it yet
        shutil.copytree(cluster.nodes[1].data_dir / "logs" / f"{foreign}-0", logs / f"{foreign}-0")
        cluster.restart(2)
        restarted = True
        wait_until(lambda: not (logs / f"{moved}-0").exists(), 30, f"broker 2 removing its {moved}-0")
        wait_until(lambda: not (logs / f"{foreign}-0").exists(), 30, f"broker 2 moving aside {foreign}-0")
        assert [n.name for n in logs.iterdir() if n.name.startswith(f"{foreign}-0.") and n.name.endswith("-stray")]
        assert "stray log on broker 2" in cluster.nodes[2].log_path.read_text(errors="replace")
        wait_until(lambda: partition(cluster, stays).leader == 2, 30, f"broker 2 leading {stays} again")
        for t, values in sent.items():
            got = wait_until(lambda: _read_or_none(cluster.bootstrap, t, 1), 60, f"reading {t}", step=1.0)
            assert [v for _, v in got[0]] == values
        assert (logs / f"{stays}-0").exists()
    finally:
        if not restarted:
            cluster.restart(2)


def _read_or_none(bootstrap, topic, partitions=2):
    try:
        return read_all(bootstrap, topic, partitions, timeout_s=10)
    except Exception as e:   # (a fresh consumer may not know the partitions yet)
        print("read_all:", e)
        return None


def _stuck_on_a_dead_broker(cluster, tmp_path, alive):
    """(broker 1 is dead) A move onto it cannot finish: topics --describe and both tools'
    --list show it in progress, --cancel takes it back."""
    topic = "stuck"
    _create_with_assignment(cluster, topic, [[3]])
    f = plan_file(tmp_path, "stuck.json", topic, {0: [3, 1]})
    kbroker("reassign-partitions", "--bootstrap-server", alive, "--execute", "--reassignment-json-file", f)
    desc = kbroker("topics", "--bootstrap-server", alive, "--describe", "--topic", topic)
    assert "Replicas: 3,1\tIsr: 3\tAdding Replicas: 1\tRemoving Replicas: \t" in desc, desc
    assert "stuck-0: replicas: 3,1. adding: 1. removing: ." in kbroker(
        "reassign-partitions", "--bootstrap-server", alive, "--list")
    out = kafka_tool(tmp_path, "kafka-reassign-partitions.sh", "--bootstrap-server", alive, "--list")
    assert "stuck-0" in out and "adding: 1" in out, out
    out = kbroker("reassign-partitions", "--bootstrap-server", alive, "--verify", "--reassignment-json-file", f)
    assert "Reassignment of partition stuck-0 is still in progress." in out, out
    out = kbroker("reassign-partitions", "--bootstrap-server", alive, "--cancel", "--reassignment-json-file", f)
    assert "Successfully cancelled partition reassignment for: stuck-0" in out, out
    wait_until(lambda: partition(cluster, topic).replicas == [3], 30, "the move cancelled")
