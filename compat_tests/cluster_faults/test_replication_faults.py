"""Replication under real faults: three combined kbroker nodes on loopback, an RF=3 topic
with min.insync.replicas=2, idempotent acks=all load from confluent-kafka recorded in a
Jepsen-style history, every partition read back and checked (lost, duplicated, unexpected,
reordered). ``--duration`` (seconds of load around each fault) makes them longer."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import KBrokerCluster
from compat_tests.cluster_faults.checker import History, check
from compat_tests.cluster_faults.workload import ProducerLoad, read_all, wait_until

TOPIC = "faults"
PARTITIONS = 2
OVERRIDES = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "5000",
             "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1"}


@pytest.fixture
def cluster(tmp_path):
    c = KBrokerCluster(tmp_path, 3, overrides=OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            f.result(60)
        wait_until(lambda: all(len(p.isrs) == 3 for p in _partitions(c).values()), 60, "a full ISR")
        yield c
    finally:
        for n in c.nodes.values():
            try:
                n.stop()
            except Exception:
                n.kill()


def _partitions(c, bootstrap=None):
    """The topic's partitions as a broker that knows all of them reports them."""
    def ask():
        md = AdminClient({"bootstrap.servers": bootstrap or c.bootstrap}).list_topics(TOPIC, timeout=10)
        parts = md.topics[TOPIC].partitions
        return parts if len(parts) == PARTITIONS else None
    return wait_until(ask, 30, "metadata naming every partition")


def _leader(c, partition: int) -> int:
    return _partitions(c)[partition].leader


def _fault_round(cluster, duration, fault, heal, what) -> object:
    """Load; ``fault(victim)`` on the leader of partition 0; writes must go on; ``heal``;
    the victim back in every ISR; more writes; read everything back and check it."""
    history = History()
    load = ProducerLoad(cluster.bootstrap, TOPIC, PARTITIONS, history).start()
    wait_until(lambda: load.acked() >= 100, 60, "acknowledged writes before the fault")
    victim = _leader(cluster, 0)
    fault(victim)
    try:
        before = load.acked()
        wait_until(lambda: load.acked() >= before + 200, 60 + duration, f"writes while {what}")
        time.sleep(duration)
    finally:
        heal(victim)
    wait_until(lambda: all(len(p.isrs) == 3 for p in _partitions(cluster).values()), 90,
               f"broker {victim} back in the ISR")
    after = load.acked()
    wait_until(lambda: load.acked() >= after + 100, 60, "writes after healing")
    load.stop()
    report = check(history, read_all(cluster.bootstrap, TOPIC, PARTITIONS))
    assert report.ok, report.summary()
    assert report.acked >= 400, report.summary()
    return report


def test_kill9_leader_then_restart_loses_nothing(cluster, duration):
    _fault_round(cluster, duration, cluster.kill, cluster.restart, "the leader is dead")
    assert _leader(cluster, 0) != -1


def test_two_of_three_down_acks_all_refused_acks_one_works(cluster, duration):
    leader = _leader(cluster, 0)
    others = [n for n in cluster.nodes if n != leader]
    # controlled shutdowns: each leaves the ISRs before it exits (the quorum keeps a
    # majority until the second has gone)
    for n in others:
        cluster.nodes[n].stop()
    wait_until(lambda: _partitions_from(cluster, leader)[0].isrs == [leader], 60,
               "the ISR down to the leader")
    results = {}
    for acks in ("all", "1"):
        p = Producer({"bootstrap.servers": cluster.nodes[leader].bootstrap, "acks": acks,
                      "message.timeout.ms": 10000, "retries": 0})
        errs = []
        p.produce(TOPIC, value=f"acks-{acks}".encode(), partition=0,
                  on_delivery=lambda err, msg: errs.append(err))
        p.flush(30)
        results[acks] = errs[0]
    assert results["all"] is not None and results["all"].code() == KafkaError.NOT_ENOUGH_REPLICAS, results
    assert results["1"] is None, results


def _partitions_from(cluster, node_id):
    return _partitions(cluster, cluster.nodes[node_id].bootstrap)


def test_pause_leader_past_the_session_timeout_then_resume(cluster, duration):
    """SIGSTOP the leader of partition 0 longer than broker.session.timeout.ms: it is fenced,
    a follower takes over and writes continue; SIGCONT: the old leader learns it was deposed,
    truncates whatever it had not replicated and catches up. Nothing acknowledged is lost."""
    _fault_round(cluster, duration, cluster.stop_signal, cluster.cont, "the leader is paused")
