"""Replication benchmarks (not tests): real broker processes on loopback, each number next to
a reference measured in the same run. Results: benchmarks/results/replication.md.

    python benchmarks/bench_replication.py produce [--messages 200000] [--size 200] [--rounds 5]
        produce throughput (confluent-kafka, as fast as it goes) and acknowledgement latency
        (paced at --rate msg/s, linger 0: p50/p99 from produce() to the delivery report) on
        a 3-node cluster, RF=3, min.insync.replicas=2, acks=all, beside a 1-node cluster,
        RF=1, acks=1, both up at once and measured in alternation for --rounds rounds
        (medians; the machine is shared): ratios 3-node / 1-node. ``--flush-messages 1``
        fsyncs every append (leaders and followers). ``--peer kafka`` runs the
        same two shapes on Apache Kafka 4.0 (../shared/reference-kafka) in the same rotation
        and adds kbroker / Kafka ratios.
    python benchmarks/bench_replication.py failover [--trials 10] [--peer kafka]
        a 3-node cluster, RF=3, an acks=all producer sending every 10 ms: kill -9 the
        partition leader, time until the first write acknowledged after the kill (so by its
        successor); restart it, wait for the full ISR, again. p50/p99 over the trials, as a
        ratio to broker.session.timeout.ms (the time the controller waits before it fences a
        silent broker and elects a successor), and with ``--peer kafka`` to a 3-node Kafka 4.0
        cluster with the same configs, measured after it.
    python benchmarks/bench_replication.py follower [--seconds 20] [--flush-messages 1]
        what replication costs a follower's other clients: a 3-node cluster, a topic whose
        partitions all lead on node 1 and follow on nodes 2 and 3 (RF=3, acks=all, as fast as
        one producer goes), and on node 2 a topic of its own that a producer in a process of
        its own writes one record to every 2 ms (acks=1): that producer's acknowledgement
        latency (p50, p99, max) with node 2 idle, then while it follows the load. With
        ``--flush-messages 1`` the followers fsync every append.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchmarks.bench_stalls import HB_TOPIC, HeartbeatProcess  # noqa: E402
from benchmarks.peers import KafkaCluster, produce_waiting  # noqa: E402
from compat_tests.brokers import KBrokerCluster  # noqa: E402
from compat_tests.cluster_faults.workload import wait_until  # noqa: E402

TOPIC = "bench"
SESSION_TIMEOUT_MS = 4000          # KBrokerCluster's broker.session.timeout.ms
OVERRIDES = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
             "replica.lag.time.max.ms": "5000"}
# what KBrokerCluster sets for every node, given to the Kafka peer as well
CLUSTER_TIMINGS = {"controller.quorum.election.timeout.ms": "500", "controller.quorum.fetch.timeout.ms": "1000",
                   "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), "broker.heartbeat.interval.ms": "500"}


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def _cluster(base: Path, kind: str, n: int, overrides: dict | None = None):
    cfg = {**OVERRIDES, **(overrides or {})}
    if kind == "kafka":
        return KafkaCluster(base / f"kafka-n{n}", n, overrides={**CLUSTER_TIMINGS, **cfg}).start()
    return KBrokerCluster(base / f"n{n}", n, overrides=cfg).start()


def _create(c: KBrokerCluster, partitions: int, rf: int, min_isr: int, flush_messages: int | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    config = {"min.insync.replicas": str(min_isr)}
    if flush_messages:
        config["flush.messages"] = str(flush_messages)
    topic = NewTopic(TOPIC, partitions, rf, config=config)
    for f in admin.create_topics([topic]).values():
        f.result(60)
    wait_until(lambda: all(len(p.isrs) == rf for p in
                           admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()),
               60, "a full ISR")


def _fast_producer(bootstrap: str, acks: str) -> Producer:
    """A producer for throughput: linger 5 ms, a large local queue, idempotent with acks=all."""
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                     "enable.idempotence": acks == "all", "queue.buffering.max.messages": 1000000})


def _throughput(bootstrap: str, acks: str, messages: int, size: int) -> float:
    p = _fast_producer(bootstrap, acks)
    value = b"x" * size
    done = [0]

    def ack(err, msg):
        if err is None:
            done[0] += 1
    p.produce(TOPIC, value, on_delivery=ack)      # warm up: metadata, connections
    p.flush(30)
    t0 = time.monotonic()
    for _ in range(messages):
        produce_waiting(p, TOPIC, value, on_delivery=ack)
        p.poll(0)
    p.flush(120)
    took = time.monotonic() - t0
    assert done[0] == messages + 1, f"{done[0] - 1} of {messages} acknowledged"
    return messages / took


def _latency(bootstrap: str, acks: str, seconds: float, rate: float, size: int) -> list[float]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                  "enable.idempotence": acks == "all"})
    value = b"x" * size
    lat = []
    sent = [0]

    def ack(err, msg, t0):
        if err is None:
            lat.append((time.monotonic() - t0) * 1000)
        else:
            print(f"latency run: delivery failed: {err}", flush=True)
    p.produce(TOPIC, value)
    p.flush(30)
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    while time.monotonic() < end:
        t0 = time.monotonic()
        p.produce(TOPIC, value, on_delivery=lambda e, m, t0=t0: ack(e, m, t0))
        sent[0] += 1
        nxt += 1 / rate
        while time.monotonic() < nxt:
            p.poll(max(0.0, nxt - time.monotonic()))
    left = p.flush(120)
    if left or len(lat) < sent[0]:
        print(f"latency run: {sent[0] - len(lat)} of {sent[0]} not acknowledged ({left} still queued)", flush=True)
    return lat


def produce(args) -> None:
    """Both clusters up at once and measured in alternation, round after round, so that the
    shared machine's load swings hit both alike; medians over the rounds."""
    base = Path(tempfile.mkdtemp(prefix="bench-repl-"))
    shapes = {1: (1, 1, "1"), 3: (3, 2, "all")}      # nodes: (rf, min.insync.replicas, acks)
    setups = [("kbroker", n) for n in shapes] + ([(args.peer, n) for n in shapes] if args.peer else [])
    clusters = {}
    try:
        for kind, n in setups:
            rf, min_isr, _ = shapes[n]
            clusters[kind, n] = _cluster(base, kind, n)
            _create(clusters[kind, n], args.partitions, rf, min_isr, args.flush_messages)
        tput = {s: [] for s in setups}
        lat = {s: [] for s in setups}
        for r in range(args.rounds):
            for kind, n in setups:
                rf, _, acks = shapes[n]
                tput[kind, n].append(_throughput(clusters[kind, n].bootstrap, acks, args.messages, args.size))
                lat[kind, n] += _latency(clusters[kind, n].bootstrap, acks, args.seconds, args.rate, args.size)
                print(f"round {r + 1}: {kind} {n}-node RF={rf} acks={acks}: {tput[kind, n][-1]:,.0f} msg/s", flush=True)
    finally:
        for c in clusters.values():
            c.close()
        shutil.rmtree(base, ignore_errors=True)
    res = {}
    for kind, n in setups:
        rf, _, acks = shapes[n]
        t = statistics.median(tput[kind, n])
        res[kind, n] = (t, _pct(lat[kind, n], 50), _pct(lat[kind, n], 99))
        print(f"{kind} {n}-node RF={rf} acks={acks}: median {t:,.0f} msg/s ({t * args.size / 1e6:.2f} MB/s) over "
              f"{args.rounds} rounds (min {min(tput[kind, n]):,.0f}, max {max(tput[kind, n]):,.0f}); latency at "
              f"{args.rate:.0f} msg/s p50 {res[kind, n][1]:.1f} ms, p99 {res[kind, n][2]:.1f} ms, "
              f"p99.9 {_pct(lat[kind, n], 99.9):.1f} ms, max {max(lat[kind, n]):.1f} ms ({len(lat[kind, n])} acks)")
    print()
    for kind in dict.fromkeys(k for k, _ in setups):
        a, b = res[kind, 3], res[kind, 1]
        print(f"{kind}: 3-node acks=all / 1-node acks=1: throughput {a[0] / b[0]:.2f}x, "
              f"p50 latency {a[1] / b[1]:.2f}x, p99 latency {a[2] / b[2]:.2f}x")
    if args.peer:
        for n in shapes:
            a, b = res["kbroker", n], res[args.peer, n]
            print(f"kbroker / {args.peer}, {n}-node acks={shapes[n][2]}: throughput {a[0] / b[0]:.2f}x, "
                  f"p50 latency {a[1] / b[1]:.2f}x, p99 latency {a[2] / b[2]:.2f}x")


def failover(args) -> None:
    base = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    try:
        result = {"kbroker": _failover_trials(base, "kbroker", args.trials)}
        if args.peer:
            result[args.peer] = _failover_trials(base, args.peer, args.trials)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    for kind, times in result.items():
        print(f"{kind}: kill -9 of the leader -> first acks=all write acknowledged by its successor, "
              f"{len(times)} trials: p50 {_pct(times, 50):.0f} ms, p99 {_pct(times, 99):.0f} ms "
              f"(min {min(times):.0f}, max {max(times):.0f}); "
              f"{_pct(times, 50) / SESSION_TIMEOUT_MS:.2f}x / {_pct(times, 99) / SESSION_TIMEOUT_MS:.2f}x "
              f"broker.session.timeout.ms ({SESSION_TIMEOUT_MS} ms)")
    if args.peer:
        a, b = result["kbroker"], result[args.peer]
        print(f"kbroker / {args.peer}: p50 {_pct(a, 50) / _pct(b, 50):.2f}x, p99 {_pct(a, 99) / _pct(b, 99):.2f}x")


def _failover_trials(base: Path, kind: str, trials: int) -> list[float]:
    c = _cluster(base, kind, 3, {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    try:
        _create(c, 1, 3, 2)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 0, "retry.backoff.ms": 20, "retry.backoff.max.ms": 200,
                      "topic.metadata.refresh.fast.interval.ms": 50, "message.timeout.ms": 120000})
        acked: list[tuple[float, float]] = []   # (sent, acknowledged)
        lock = threading.Lock()
        stop = threading.Event()

        def ack(err, msg, sent):
            if err is None:
                with lock:
                    acked.append((sent, time.monotonic()))

        def run():
            while not stop.is_set():
                sent = time.monotonic()
                p.produce(TOPIC, b"v", partition=0, on_delivery=lambda e, m, s=sent: ack(e, m, s))
                p.poll(0.01)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        times = []
        for trial in range(trials):
            wait_until(lambda: len(acked) > 0, 60, "writes before the kill")
            leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
            t0 = time.monotonic()
            c.kill(leader)
            # the first write sent after the kill to be acknowledged (an answer to an earlier
            # one may still arrive from the old leader's socket buffer)
            first = wait_until(lambda: next((a for s, a in list(acked) if s > t0), None), 120,
                               "an acknowledged write on the successor")
            times.append((first - t0) * 1000)
            print(f"{kind} trial {trial + 1}: killed leader {leader}, first ack after {times[-1]:.0f} ms", flush=True)
            c.restart(leader)
            wait_until(lambda: len(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].isrs) == 3,
                       120, "the full ISR again")
        stop.set()
        t.join()
        p.flush(60)
        return times
    finally:
        c.close()


def _load_for(bootstrap: str, seconds: float, size: int) -> float:
    """acks=all records as fast as one producer goes for ``seconds``; acknowledged per second."""
    p = _fast_producer(bootstrap, "all")
    value = b"x" * size
    done = [0]

    def ack(err, msg):
        if err is None:
            done[0] += 1
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        produce_waiting(p, TOPIC, value, on_delivery=ack)
        p.poll(0)
    p.flush(120)
    return done[0] / (time.monotonic() - t0)


def follower(args) -> None:
    base = Path(tempfile.mkdtemp(prefix="bench-follower-"))
    c = _cluster(base, "kbroker", 3)
    hb = None
    try:
        ids = sorted(c.nodes)
        leader, probed = ids[0], ids[1]
        config = {"min.insync.replicas": "2"}
        if args.flush_messages:
            config["flush.messages"] = str(args.flush_messages)
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        order = [leader] + [i for i in ids if i != leader]
        for f in admin.create_topics([
                NewTopic(TOPIC, num_partitions=args.partitions, replica_assignment=[order] * args.partitions, config=config),
                NewTopic(HB_TOPIC, num_partitions=1, replica_assignment=[[probed]])]).values():
            f.result(60)
        wait_until(lambda: all(len(p.isrs) == 3 for p in
                               admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()),
                   60, "a full ISR")
        hb = HeartbeatProcess(c.nodes[probed].bootstrap).start()
        time.sleep(2)
        t0 = time.perf_counter()
        time.sleep(args.seconds)
        idle = hb.latencies(t0, time.perf_counter())
        t0 = time.perf_counter()
        rate = _load_for(c.nodes[leader].bootstrap, args.seconds, args.size)
        loaded = hb.latencies(t0, time.perf_counter())
    finally:
        if hb is not None:
            hb.stop()
        c.close()
        shutil.rmtree(base, ignore_errors=True)
    fm = f"flush.messages={args.flush_messages}" if args.flush_messages else "no fsync"
    print(f"load on node {leader} ({fm}): {rate:,.0f} msg/s of {args.size} B, acks=all, RF=3")
    for name, lat in (("idle", idle), ("following the load", loaded)):
        print(f"node {probed} {name}: its own producer's acks p50 {_pct(lat, 50):.2f} ms, "
              f"p99 {_pct(lat, 99):.2f} ms, max {max(lat):.1f} ms ({len(lat)} records)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("--messages", type=int, default=200000)
    pr.add_argument("--size", type=int, default=200)
    pr.add_argument("--partitions", type=int, default=3)
    pr.add_argument("--seconds", type=float, default=5.0)
    pr.add_argument("--rounds", type=int, default=5)
    pr.add_argument("--rate", type=float, default=200.0)
    pr.add_argument("--flush-messages", type=int, help="the topic's flush.messages (1: fsync every append, "
                    "on leaders and followers)")
    pr.add_argument("--peer", choices=["kafka"], help="also measure Apache Kafka 4.0 (reference-kafka)")
    fo = sub.add_parser("failover")
    fo.add_argument("--trials", type=int, default=10)
    fo.add_argument("--peer", choices=["kafka"], help="also measure Apache Kafka 4.0 (reference-kafka)")
    fl = sub.add_parser("follower")
    fl.add_argument("--seconds", type=float, default=20.0)
    fl.add_argument("--size", type=int, default=1024)
    fl.add_argument("--partitions", type=int, default=3)
    fl.add_argument("--flush-messages", type=int, help="the loaded topic's flush.messages")
    args = ap.parse_args()
    {"produce": produce, "failover": failover, "follower": follower}[args.cmd](args)


if __name__ == "__main__":
    main()
