"""Replication under real faults: three combined kbroker nodes, each on its own loopback
address (compat_tests/cluster_faults/harness.py), an RF=3 topic
with min.insync.replicas=2, idempotent acks=all load recorded in a Jepsen-style history, every
partition read back and checked (lost, duplicated, unexpected, reordered). Each scenario runs
with the load from confluent-kafka and from the Java client (kafka-clients 4.3, the ``load``
command of compat_tests/java/KafkaTool.java). ``--duration`` (seconds of load around each
fault) makes them longer."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster_faults.checker import History, check
from compat_tests.cluster_faults.harness import FaultCluster
from compat_tests.cluster_faults.workload import JavaProducerLoad, ProducerLoad, partitions_of, read_all, wait_until
from kbroker.net.client import ClientError, KafkaClient
from kbroker.tools.client import one_batch_produce
from kbroker.wire.records import BatchBuilder

TOPIC = "faults"
PARTITIONS = 2
OVERRIDES = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "5000",
             "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1"}


@pytest.fixture
def cluster(tmp_path):
    c = FaultCluster(tmp_path, 3, overrides=OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            f.result(60)
        wait_until(lambda: all(len(p.isrs) == 3 for p in _partitions(c).values()), 60, "a full ISR")
        yield c
    finally:
        c.close()


# The producer loads each scenario runs with: classes with ProducerLoad's interface. The
# Java client also in its 3.9 version (Spark's) for the rolling restart (CI time).
LOADS = [pytest.param(ProducerLoad, id="confluent"), pytest.param(JavaProducerLoad, id="java")]
WITH_JAVA_39 = LOADS + [pytest.param(functools.partial(JavaProducerLoad, version="3.9.0"), id="java-3.9")]


@contextlib.contextmanager
def _running(load):
    """``load`` started; killed if the block fails before it was stopped."""
    load.start()
    try:
        yield load
    except BaseException:
        load.kill()
        raise


class _VictimTail:
    """Writes ``tail-<seq>`` (acks=all) to partition 0 on one node only, ``rate_per_s``
    requests a second, each one record, without waiting for earlier answers; every answer
    goes into ``history`` (error 0: ok, else info). A stock client cannot be kept on one
    node: once its requests time out, librdkafka asks the other brokers for metadata and
    goes on at the new leader, which acknowledges it (seen with --duration 120: 6,155 tail
    records acknowledged, each at its acknowledged offset in the final log). Written with
    kbroker's own client, which talks to the one address it is given."""

    def __init__(self, addr: tuple[str, int], history: History, rate_per_s: float = 50.0,
                 timeout_ms: int = 5000) -> None:
        self.addr, self.history, self.rate, self.timeout_ms = addr, history, rate_per_s, timeout_ms
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        client = KafkaClient(*self.addr, client_id="tail", request_timeout_ms=self.timeout_ms + 10000)
        pending: set[asyncio.Task] = set()
        try:
            while not self._stop.is_set():
                value = f"tail-{self.sent}"
                self.history.invoke(value, "tail", 0)
                t = asyncio.ensure_future(self._send(client, value))
                pending.add(t)
                t.add_done_callback(pending.discard)
                self.sent += 1
                await asyncio.sleep(1.0 / self.rate)
        finally:
            for t in list(pending):
                t.cancel()      # abandoned: the answer, if any, is never seen (indeterminate)
            await asyncio.gather(*pending, return_exceptions=True)
            await client.close()

    async def _send(self, client: KafkaClient, value: str) -> None:
        b = BatchBuilder()
        b.append(value=value.encode())
        req = one_batch_produce(TOPIC, 0, b.build(), acks=-1, timeout_ms=self.timeout_ms)
        try:
            r = (await client.send(req, 9)).responses[0].partition_responses[0]
        except ClientError as e:
            self.history.info(value, type(e).__name__)
            return
        if r.error_code == 0:
            self.history.ok(value, 0, r.base_offset)
        else:
            self.history.info(value, f"error {r.error_code}")

    def __enter__(self) -> "_VictimTail":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _partitions(c, bootstrap=None):
    """The topic's partitions as a broker that knows all of them reports them."""
    return partitions_of(bootstrap or c.bootstrap, TOPIC, count=PARTITIONS)


def _leader(c, partition: int) -> int:
    return _partitions(c)[partition].leader


def _fault_round(cluster, duration, fault, heal, what, load_class) -> object:
    """Load; ``fault(victim)`` on the leader of partition 0; writes to partition 0 must go on
    (so a new leader took over: partition 1's writes alone could be done before the fault
    even took effect); ``heal``; the victim back in every ISR; more writes; read everything
    back and check it."""
    history = History()
    with _running(load_class(cluster.bootstrap, TOPIC, PARTITIONS, history)) as load:
        wait_until(lambda: load.acked() >= 100, 60, "acknowledged writes before the fault")
        victim = _leader(cluster, 0)
        fault(victim)
        try:
            before = load.acked(0)
            wait_until(lambda: load.acked(0) >= before + 100, 60 + duration,
                       f"writes to partition 0 while {what}")
            time.sleep(duration)
        finally:
            heal(victim)
        wait_until(lambda: cluster.converged(TOPIC, PARTITIONS), 90,
                   f"broker {victim} back in the ISR, every node agreeing")
        after = load.acked()
        wait_until(lambda: load.acked() >= after + 100, 60, "writes after healing")
        load.stop()
    report = check(history, read_all(cluster.bootstrap, TOPIC, PARTITIONS))
    print(report.summary())     # shown with -rP: the numbers of a passing run
    assert report.ok, report.summary()
    assert report.acked >= 400, report.summary()
    return report


@pytest.mark.parametrize("load_class", LOADS)
def test_kill9_leader_then_restart_loses_nothing(cluster, duration, load_class):
    _fault_round(cluster, duration, cluster.kill, cluster.restart, "the leader is dead", load_class)
    assert _leader(cluster, 0) != -1


def test_kill9_leader_with_flush_messages_1(cluster, duration):
    """The same with ``flush.messages=1`` on the topic: leaders and followers fsync every
    append off their loops (group commit; a follower's next Fetch waits for its fsync),
    and failover and catch-up go on as without it."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource("topic", TOPIC, incremental_configs=[
        ConfigEntry("flush.messages", "1", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    _fault_round(cluster, duration, cluster.kill, cluster.restart, "the leader is dead", ProducerLoad)


@pytest.mark.parametrize("load_class", WITH_JAVA_39)
def test_rolling_restart_with_controlled_shutdown(cluster, duration, load_class):
    """Every node in turn: SIGTERM (controlled shutdown: it hands its leaderships over and
    leaves the ISRs before exiting), start again, wait until it is back in every ISR. The
    producer sees nothing beyond retriable errors (no delivery callback with a non-retriable
    error: RetriableException for Java, KafkaError.retriable() for librdkafka), and in fact
    every send is acknowledged, none lost or duplicated, order kept."""
    history = History()
    with _running(load_class(cluster.bootstrap, TOPIC, PARTITIONS, history)) as load:
        wait_until(lambda: load.acked() >= 100, 60, "acknowledged writes before the restarts")
        for node in list(cluster.nodes):
            assert cluster.nodes[node].stop() == 0, f"node {node} did not shut down cleanly"
            before = load.acked()
            wait_until(lambda: load.acked() >= before + 50, 60, f"writes while node {node} is down")
            cluster.nodes[node].start()
            wait_until(lambda: cluster.converged(TOPIC, PARTITIONS), 90,
                       f"node {node} back in every ISR, every node agreeing")
            time.sleep(duration / len(cluster.nodes))
        after = load.acked()
        wait_until(lambda: load.acked() >= after + 100, 60, "writes after the last restart")
        load.stop()
    assert not load.fatal, f"non-retriable errors during the rolling restart: {load.fatal[:10]}"
    report = check(history, read_all(cluster.bootstrap, TOPIC, PARTITIONS))
    print(report.summary())     # shown with -rP: the numbers of a passing run
    assert report.ok, report.summary()
    errors = {s.error for s in history.sends.values() if s.outcome != "ok"}
    assert report.failed == 0 and report.indeterminate == 0, f"{report.summary()}; errors {errors}"
    assert report.acked >= 400, report.summary()


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


@pytest.mark.parametrize("load_class", LOADS)
def test_pause_leader_past_the_session_timeout_then_resume(cluster, duration, load_class):
    """SIGSTOP the leader of partition 0 longer than broker.session.timeout.ms: it is fenced,
    a follower takes over and writes continue; SIGCONT: the old leader learns it was deposed,
    truncates whatever it had not replicated and catches up. Nothing acknowledged is lost."""
    _fault_round(cluster, duration, cluster.stop_signal, cluster.cont, "the leader is paused", load_class)


@pytest.mark.parametrize("load_class", LOADS)
def test_leader_cut_off_then_healed_truncates_its_unreplicated_tail(cluster, duration, load_class):
    """The leader of partition 0 loses its links to both other nodes (brokers and controllers)
    while clients still reach it. A producer that only talks to that node (_VictimTail) keeps
    writing acks=all there: the records land in its log but can never be replicated, so none
    is acknowledged.
    The other two fence it, elect a new leader and the main load goes on there. After healing,
    the old leader learns it was deposed and truncates that tail: its log end equals the new
    leader's, no tail record is in any log, nothing acknowledged is lost. (Only the main load
    changes client.)"""
    history = History()
    tail_history = History()
    with _running(load_class(cluster.bootstrap, TOPIC, PARTITIONS, history)) as load:
        wait_until(lambda: load.acked() >= 100, 60, "acknowledged writes before the cut")
        victim = _leader(cluster, 0)
        with cluster.isolate(victim):
            cut_end = wait_until(lambda: cluster.log_end(victim, TOPIC, 0), 10, "the victim's log end")
            host, port = cluster.nodes[victim].bootstrap.rsplit(":", 1)
            with _VictimTail((host, int(port)), tail_history) as tail:
                tail_end = wait_until(lambda: (e := cluster.log_end(victim, TOPIC, 0)) and e >= cut_end + 20 and e,
                                      30, "the tail on the cut-off leader")
                others = [n for n in cluster.nodes if n != victim]
                wait_until(lambda: cluster.leader_seen_by(others[0], TOPIC, 0) not in (-1, victim, None), 60,
                           "a new leader for partition 0 elected by the other two")
                before = load.acked(0)
                wait_until(lambda: load.acked(0) >= before + 100, 60 + duration,
                           "writes to partition 0 on the new leader")
                time.sleep(duration)
        answers = {s.error for s in tail_history.sends.values() if s.outcome == "info"}
        print(f"{tail.sent} tail records sent; the cut-off leader answered {sorted(answers)}")
        assert sum(1 for s in tail_history.sends.values() if s.outcome == "ok") == 0, \
            "a write acknowledged by a leader cut off from every follower"
        wait_until(lambda: cluster.converged(TOPIC, PARTITIONS), 90,
                   f"broker {victim} back in the ISR, every node agreeing")
        after = load.acked()
        wait_until(lambda: load.acked() >= after + 100, 60, "writes after healing")
        load.stop()
    new_leader = wait_until(lambda: cluster.converged(TOPIC, PARTITIONS), 30, "every node agreeing")[0]
    assert new_leader != victim
    leader_end = cluster.log_end(new_leader, TOPIC, 0)
    wait_until(lambda: cluster.log_end(victim, TOPIC, 0) == leader_end, 60,
               f"the old leader's log end to equal the new leader's ({leader_end})")
    reads = read_all(cluster.bootstrap, TOPIC, PARTITIONS)
    in_log = {v for rows in reads.values() for _, v in rows}
    tail_values = set(tail_history.sends)
    assert tail_end > cut_end and not (tail_values & in_log), \
        f"{len(tail_values & in_log)} of {len(tail_values)} tail records survived"
    report = check(history, reads)
    print(report.summary())     # shown with -rP: the numbers of a passing run
    assert report.ok, report.summary()
    assert report.acked >= 400, report.summary()
