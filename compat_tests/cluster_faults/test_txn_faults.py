"""Transactions under real faults: three combined kbroker nodes on loopback, RF=3 everywhere
(__transaction_state and __consumer_offsets too, min ISR 2), confluent-kafka clients.

* Producer ids from InitProducerId on every broker, across a broker's kill -9 and restart and
  a failover of the active controller, are never handed out twice.
* KIP-890 verification reaches a coordinator on another broker: a transactional batch for a
  partition its transaction never added is refused by that partition's leader.
* The transaction coordinator is killed (-9) after PrepareCommit is durable and before any
  marker went out (the window is held open by the test hook ``kbroker.test.txn.marker.delay.ms``
  and checked: DescribeTransactions says PrepareCommit and read_committed sees nothing): the
  new coordinator loads the partition, sends the markers and completes the transaction;
  read_committed sees every record once.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import KBrokerCluster
from compat_tests.cluster_faults.txn_support import coordinator_of, read_topic, txn_state
from compat_tests.cluster_faults.workload import wait_until
from kbroker.txn.runtime import MARKER_DELAY_KEY

OUT = "txn-out"
PARTITIONS = 3
BASE = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "5000",
        "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "6",
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "6"}


def _start(tmp_path, overrides, topics):
    c = KBrokerCluster(tmp_path, 3, overrides={**BASE, **overrides}).start()
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 3) for t, n in topics]).values():
        f.result(60)

    def full_isr():
        md = admin.list_topics(timeout=10)
        return all(len(md.topics[t].partitions) == n and
                   all(len(p.isrs) == 3 for p in md.topics[t].partitions.values())
                   for t, n in topics)
    wait_until(full_isr, 60, "a full ISR")
    return c


@pytest.fixture(scope="module")
def delayed_markers_cluster(tmp_path_factory):
    """One cluster for the tests below (each leaves every node running)."""
    c = _start(tmp_path_factory.mktemp("txn"), {MARKER_DELAY_KEY: "10000"}, [(OUT, PARTITIONS)])
    try:
        yield c
    finally:
        c.close()


def test_kill9_coordinator_between_prepare_commit_and_markers(delayed_markers_cluster):
    c = delayed_markers_cluster
    txn_id = "crash-between-prepare-and-markers"
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
    p.init_transactions(60)
    p.begin_transaction()
    sent = {part: [f"v-{part}-{i}".encode() for i in range(10)] for part in range(PARTITIONS)}
    for part, values in sent.items():
        for v in values:
            p.produce(OUT, key=b"k%d" % part, value=v, partition=part)
    p.commit_transaction(60)      # answered once PrepareCommit is committed; markers held
    coordinator = coordinator_of(c, txn_id)
    assert coordinator > 0
    assert txn_state(c, txn_id) == "PrepareCommit"
    assert all(v == [] for v in read_topic(c.bootstrap, OUT, PARTITIONS, "read_committed").values())
    assert txn_state(c, txn_id) == "PrepareCommit", "the window closed before the kill"

    c.kill(coordinator)
    wait_until(lambda: coordinator_of(c, txn_id) not in (-1, coordinator), 60,
               "a new transaction coordinator")
    wait_until(lambda: txn_state(c, txn_id) == "CompleteCommit", 60,
               "the new coordinator to complete the transaction")
    got = read_topic(c.bootstrap, OUT, PARTITIONS, "read_committed")
    assert {part: [v for _, v in recs] for part, recs in got.items()} == sent

    # the old coordinator comes back as a follower: it neither completes nor repeats anything
    c.restart(coordinator)
    p2 = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": txn_id})
    p2.init_transactions(60)          # fences the old producer; the id is usable again
    p2.begin_transaction()
    p2.produce(OUT, key=b"k0", value=b"after", partition=0)
    p2.commit_transaction(60)
    wait_until(lambda: txn_state(c, txn_id) == "CompleteCommit", 60, "the second transaction")
    got = read_topic(c.bootstrap, OUT, PARTITIONS, "read_committed")
    assert [v for _, v in got[0]] == sent[0] + [b"after"]
    assert {part: [v for _, v in recs] for part, recs in got.items() if part} == \
        {part: v for part, v in sent.items() if part}



def _init_pid(port: int, txn_id: str | None = None) -> tuple[int, int, int]:
    """(error, producer id, epoch) of an InitProducerId sent to the broker on ``port``."""
    from kbroker.wire.generated.init_producer_id_request import InitProducerIdRequest

    r = asyncio.run(_ask_all(port, [InitProducerIdRequest(transactional_id=txn_id,
                                                           transaction_timeout_ms=60000)]))[0]
    return r.error_code, r.producer_id, r.producer_epoch


async def _ask_all(port: int, requests, version: int | None = None):
    """Send ``requests`` pipelined on one connection; their responses in order."""
    from kbroker.net.client import KafkaClient

    c = KafkaClient("127.0.0.1", port, request_timeout_ms=60000)
    try:
        return await asyncio.gather(*(c.send(r, version) for r in requests))
    finally:
        await c.close()


def _pids(c, node_id: int, n: int) -> list[int]:
    from kbroker.wire.generated.init_producer_id_request import InitProducerIdRequest

    rs = asyncio.run(_ask_all(c.nodes[node_id].port,
                              [InitProducerIdRequest(transactional_id=None,
                                                     transaction_timeout_ms=60000)
                               for _ in range(n)]))
    assert all(r.error_code == 0 for r in rs), {r.error_code for r in rs}
    return [r.producer_id for r in rs]


def test_producer_ids_unique_across_brokers_restarts_and_controller_failover(delayed_markers_cluster):
    c = delayed_markers_cluster
    got: dict[tuple[str, int], list[int]] = {}
    for n in c.nodes:                        # node 1: 1100 ids, past its first block
        got[("first", n)] = _pids(c, n, 1100 if n == 1 else 50)
    victim = next(n for n in c.nodes if n != c.active_controller())
    c.kill(victim)
    c.restart(victim)
    for n in c.nodes:
        got[("after a broker restart", n)] = _pids(c, n, 50)
    controller = c.active_controller()
    c.kill(controller)
    wait_until(lambda: c.active_controller() != controller, 60, "a new active controller")
    c.restart(controller)
    for n in c.nodes:
        got[("after a controller failover", n)] = _pids(c, n, 50)
    every = sum(got.values(), [])
    assert len(every) == len(set(every)), {k: len(v) for k, v in got.items()}
    # the restarted broker took a new block: nothing it handed out again lies in an old block
    blocks_before = {pid // 1000 for n in c.nodes for pid in got[("first", n)]}
    assert not {pid // 1000 for pid in got[("after a broker restart", victim)]} & blocks_before


def test_produce_verification_asks_a_coordinator_on_another_broker(delayed_markers_cluster):
    from kbroker.tools.client import one_batch_produce
    from kbroker.wire.generated.add_partitions_to_txn_request import AddPartitionsToTxnRequest
    from kbroker.wire.generated.end_txn_request import EndTxnRequest
    from kbroker.wire.records import BatchBuilder

    c = delayed_markers_cluster
    leader = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(OUT, timeout=10) \
        .topics[OUT].partitions[0].leader
    txn_id = next(t for t in (f"verify-remote-{i}" for i in range(100))
                  if coordinator_of(c, t) not in (-1, leader))
    coord_port = c.nodes[coordinator_of(c, txn_id)].port
    err, pid, epoch = _init_pid(coord_port, txn_id)
    assert err == 0

    def produce(seq: int) -> int:
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         is_transactional=True)
        b.append(key=b"k", value=b"unverified-%d" % seq, timestamp=int(time.time() * 1000))
        req = one_batch_produce(OUT, 0, b.build(), acks=-1, timeout_ms=30000, transactional_id=txn_id)
        r = asyncio.run(_ask_all(c.nodes[leader].port, [req]))[0]
        return r.responses[0].partition_responses[0].error_code

    assert produce(0) == 48            # INVALID_TXN_STATE: partition 0 was never added
    add = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=OUT, partitions=[0])])
    r = asyncio.run(_ask_all(coord_port, [add], version=3))[0]   # a client's version
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce(0) == 0             # now part of the transaction: the leader accepts it
    r = asyncio.run(_ask_all(coord_port, [EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                        producer_epoch=epoch, committed=False)]))[0]
    assert r.error_code == 0
    wait_until(lambda: txn_state(c, txn_id) == "CompleteAbort", 60, "the abort to complete")
    visible = read_topic(c.bootstrap, OUT, PARTITIONS, "read_committed")[0]
    assert not [v for _, v in visible if v.startswith(b"unverified")]


def test_txn_offset_commit_verification_asks_a_coordinator_on_another_broker(delayed_markers_cluster):
    """KIP-890 part 1 for TxnOffsetCommit: the group coordinator asks the transaction's
    coordinator, on another broker, whether the group's __consumer_offsets partition is in the
    transaction; offsets committed before AddOffsetsToTxn are refused."""
    from kbroker.wire.generated.add_offsets_to_txn_request import AddOffsetsToTxnRequest
    from kbroker.wire.generated.end_txn_request import EndTxnRequest
    from kbroker.wire.generated.txn_offset_commit_request import TxnOffsetCommitRequest as T

    c = delayed_markers_cluster
    txn_id = "verify-remote-offsets"
    tcoord = wait_until(lambda: (n := coordinator_of(c, txn_id)) > 0 and n, 60, "a transaction coordinator")
    group = next(g for g in (f"verify-remote-offsets-{i}" for i in range(200))
                 if coordinator_of(c, g, key_type=0) not in (-1, tcoord))
    gport = c.nodes[coordinator_of(c, group, key_type=0)].port
    err, pid, epoch = _init_pid(c.nodes[tcoord].port, txn_id)
    assert err == 0

    def commit() -> int:
        req = T(transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
                topics=[T.TxnOffsetCommitRequestTopic(name=OUT, partitions=[
                    T.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5)])])
        return asyncio.run(_ask_all(gport, [req], version=3))[0].topics[0].partitions[0].error_code

    assert commit() == 48              # INVALID_TXN_STATE: the group was never added
    add = AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id=group)
    assert asyncio.run(_ask_all(c.nodes[tcoord].port, [add]))[0].error_code == 0
    assert commit() == 0               # its partition is in the transaction now
    r = asyncio.run(_ask_all(c.nodes[tcoord].port, [EndTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=False)]))[0]
    assert r.error_code == 0


# ---- consume-transform-produce while brokers die ---------------------------------------------

SRC, DST = "eos-in", "eos-out"
JSRC, JDST = "jeos-in", "jeos-out"        # the Java client's pipeline, run alongside
JAVA = "4.3.0"
KEYS = 30
CI_RECORDS = 3000
KILL_EVERY_S = 10
ABORT_EVERY = 5          # every 5th transaction is flushed, then aborted on purpose and redone


class BrokerKiller:
    """kill -9 a random broker every ~``every_s`` seconds and restart it, one at a time
    (min ISR 2 of 3 keeps everything writable); the next kill waits for the full ISR (a
    restarted broker catching up under load may take a while)."""

    def __init__(self, cluster, topics, every_s: float, seed: int) -> None:
        import random
        import threading
        self.c, self.topics, self.every = cluster, topics, every_s
        self.rng = random.Random(seed)
        self.kills: list[int] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None
        self.t0 = time.monotonic()

    def _full_isr(self) -> bool:
        try:
            md = AdminClient({"bootstrap.servers": self.c.bootstrap}).list_topics(timeout=10)
        except Exception:       # (metadata while a broker restarts): not yet
            return False
        return all(len(p.isrs) == 3 for t in self.topics for p in md.topics[t].partitions.values())

    def _run(self) -> None:
        try:
            while not self.stop_event.wait(self.rng.uniform(0.7, 1.3) * self.every):
                wait_until(lambda: self.stop_event.is_set() or self._full_isr(), 300,
                           "every broker back in every ISR")
                if self.stop_event.is_set():
                    return
                victim = self.rng.choice(sorted(self.c.nodes))
                self.c.kill(victim)
                self.kills.append((victim, round(time.monotonic() - self.t0, 1)))
                time.sleep(self.rng.uniform(1, 3))
                self.c.restart(victim, timeout=90)
        except BaseException as e:
            self.error = e

    def start(self) -> "BrokerKiller":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(400)
        if self.error is not None:
            raise self.error


@pytest.fixture
def eos_cluster(tmp_path):
    c = _start(tmp_path, {}, [(SRC, PARTITIONS), (DST, PARTITIONS), (JSRC, PARTITIONS),
                              (JDST, PARTITIONS)])
    try:
        yield c
    finally:
        c.close()


@pytest.mark.timeout(0)   # bounded by its own joins (run time + 10 min), whatever --duration says
def test_consume_transform_produce_exactly_once_while_brokers_are_killed(eos_cluster, duration,
                                                                         request):
    """confluent-kafka and the Java client (kafka-clients 4.3.0), each its own pipeline, at
    the same time, while brokers die, each aborting every ``ABORT_EVERY``-th transaction on
    purpose after its records are in the log: read_committed must never show one of them (and
    read_uncommitted must, or that check could not fail). The issue's run:
    ``--txn-records 100000 --duration 600``."""
    import threading

    from compat_tests.cluster_faults.eos import (
        Attempts, Transformer, check_exactly_once, fill_input)
    from compat_tests.clients import java as java_client

    c = eos_cluster
    if not java_client.available(JAVA):
        pytest.fail("Java client jars missing: run scripts/fetch-java-clients.sh")
    total = request.config.getoption("--txn-records") or CI_RECORDS
    run_s = max(35.0, duration)          # long enough for three kills at the least
    fill_input(c.bootstrap, SRC, total, KEYS)
    fill_input(c.bootstrap, JSRC, total, KEYS)
    java = {}

    def run_java():
        try:
            java["out"] = java_client.JavaDriver(c.bootstrap, JAVA).txn_copy(
                JSRC, JDST, "jeos-group", "jeos-transformer", total, ABORT_EVERY,
                timeout=run_s + 660,
                **{"tool.deadline.ms": str(int((run_s + 600) * 1000)),
                   "tool.records.per.s": str(total / run_s), "consumer.max.poll.records": "100"})
        except BaseException as e:
            java["error"] = e
    jthread = threading.Thread(target=run_java, daemon=True)
    killer = BrokerKiller(c, [SRC, DST, JSRC, JDST], KILL_EVERY_S, seed=total).start()
    t = Transformer(c.bootstrap, SRC, DST, total, group="eos-group", txn_id="eos-transformer",
                    batch=100, rate_per_s=total / run_s, abort_every=ABORT_EVERY).start()
    jthread.start()
    try:
        t.join(run_s + 600)
        jthread.join(run_s + 700)
    finally:
        killer.stop()
    assert len(killer.kills) >= 2, f"only {len(killer.kills)} brokers were killed during the run"
    out = read_topic(c.bootstrap, DST, PARTITIONS, "read_committed", timeout_s=120)
    report = check_exactly_once(total, KEYS, out, t.attempts)
    print(f"kills {killer.kills}; restarts of the transformer {t.restarts}; "
          f"confluent: {report.summary()}")
    print("timeline:", [x for x in t.timeline if x[2] != "commit"],
          "commits at", [x[0] for x in t.timeline if x[2] == "commit"])
    assert report.ok, report.summary()
    assert _aborted_in_log(c.bootstrap, DST, t.attempts), "no aborted record in the log"

    if "error" in java:
        raise java["error"]
    j = java["out"]
    assert j["done"] == total, f"the Java pipeline committed {j['done']} of {total}"
    attempts = Attempts(committed={n for n, _ in j["committed"]},
                        aborted={n for n, _ in j["aborted"]})
    jout = _java_output(c.bootstrap, "read_committed")
    jreport = check_exactly_once(total, KEYS, jout, attempts)
    print(f"java: {jreport.summary()}")
    assert jreport.ok, jreport.summary()
    assert _aborted_in_log(c.bootstrap, JDST, attempts, _java_output(c.bootstrap,
                                                                     "read_uncommitted")), \
        "no aborted record of the Java pipeline in the log"


def _java_output(bootstrap: str, isolation: str) -> dict:
    """JDST as the checker reads it: ``<input>|<txn header>`` values."""
    return {part: [(k, v + b"|" + dict(h)["txn"]) for k, v, h in recs]
            for part, recs in read_topic(bootstrap, JDST, PARTITIONS, isolation,
                                         timeout_s=120, headers=True).items()}


def _aborted_in_log(bootstrap: str, topic: str, attempts, output: dict | None = None) -> int:
    """How many records of aborted attempts read_uncommitted sees (``output``: already read)."""
    if output is None:
        output = read_topic(bootstrap, topic, PARTITIONS, "read_uncommitted", timeout_s=120)
    assert attempts.aborted, "no transaction was aborted"
    return sum(1 for recs in output.values() for _, v in recs
               if int(v.rpartition(b"|")[2]) in attempts.aborted)
