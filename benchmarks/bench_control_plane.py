"""Control-plane benchmarks (not tests): real processes on loopback, each number next to a
reference measured in the same run.

    python benchmarks/bench_control_plane.py failover [--trials 20] [--election-timeout-ms 1000]
        kill -9 the active controller of a 3-node combined cluster, time until a new active
        controller commits a CreateTopics sent right after the kill (p50/p99), as a ratio
        to the election timeout used.
    python benchmarks/bench_control_plane.py throughput [--topics 1000] [--partitions 10]
        CreateTopics of N topics x P partitions, one topic per request with 16 in flight,
        against a 3-node quorum and against a quorum of one (the same code, no replication
        round trip): topics/s and partitions/s, ratio 3 nodes / 1 node.
    python benchmarks/bench_control_plane.py snapshot [--partitions 100000]
        a metadata image of P partitions (100 per topic): time to load it from a snapshot
        file (what a broker that is far behind does) vs replaying the same records from
        the metadata log (what it would do otherwise), in one process.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat_tests.brokers import KBrokerCluster  # noqa: E402
from kbroker.net.client import ClientError, KafkaClient  # noqa: E402
from kbroker.wire import registry as wire  # noqa: E402


def _create_req(names, partitions, timeout_ms=30000):
    R = wire.REQUESTS[19]
    return R(timeout_ms=timeout_ms, topics=[R.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1)
                                             for n in names])


async def _create_until_ok(ports, name, deadline):
    """CreateTopics through any live broker until acknowledged; seconds taken."""
    t0 = time.monotonic()
    while time.monotonic() < deadline:
        for port in ports:
            c = KafkaClient("127.0.0.1", port, request_timeout_ms=5000, reconnect_backoff_ms=10)
            try:
                r = await c.send(_create_req([name], 1, 4000))
                if r.topics[0].error_code in (0, 36):
                    return time.monotonic() - t0
            except ClientError:
                pass
            finally:
                await c.close()
        await asyncio.sleep(0.01)
    raise TimeoutError(name)


def failover(args) -> None:
    et = args.election_timeout_ms
    base = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    times = []
    try:
        c = KBrokerCluster(base, 3, overrides={"controller.quorum.election.timeout.ms": str(et),
                                               "controller.quorum.fetch.timeout.ms": str(2 * et)})
        c.start()
        for trial in range(args.trials):
            lead = c.active_controller()
            ports = [n.port for i, n in c.nodes.items() if i != lead]
            c.kill(lead)
            took = asyncio.run(_create_until_ok(ports, f"fo{trial}", time.monotonic() + 60))
            times.append(took * 1000)
            print(f"trial {trial}: killed {lead}, CreateTopics committed after {took * 1000:.0f} ms", flush=True)
            c.restart(lead)
            time.sleep(1.0)
        c.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    times.sort()
    p50 = statistics.median(times)
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    print(f"\nfailover (kill -9 of the active controller -> a CreateTopics committed), {len(times)} trials, "
          f"controller.quorum.election.timeout.ms={et}:")
    print(f"  p50 {p50:.0f} ms ({p50 / et:.2f}x the election timeout), p99 {p99:.0f} ms ({p99 / et:.2f}x), "
          f"min {times[0]:.0f} ms, max {times[-1]:.0f} ms")


async def _throughput(port, topics, partitions, inflight=16):
    c = KafkaClient("127.0.0.1", port, request_timeout_ms=60000)
    names = [f"tp{i}-{uuid.uuid4().hex[:6]}" for i in range(topics)]
    sem = asyncio.Semaphore(inflight)
    errors = 0

    async def one(n):
        nonlocal errors
        async with sem:
            r = await c.send(_create_req([n], partitions))
            errors += r.topics[0].error_code != 0
    t0 = time.monotonic()
    await asyncio.gather(*(one(n) for n in names))
    took = time.monotonic() - t0
    await c.close()
    return took, errors


def throughput(args) -> None:
    results = {}
    for n in (1, 3):
        base = Path(tempfile.mkdtemp(prefix="bench-meta-"))
        try:
            with KBrokerCluster(base, n) as c:
                took, errors = asyncio.run(_throughput(c.nodes[1].port, args.topics, args.partitions))
            results[n] = took
            print(f"{n}-node quorum: {args.topics} topics x {args.partitions} partitions in {took:.1f} s: "
                  f"{args.topics / took:.0f} topics/s, {args.topics * args.partitions / took:.0f} partitions/s"
                  f"{f', {errors} errors' if errors else ''}", flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\nmetadata throughput, 3-node quorum / quorum of one: {results[1] / results[3]:.2f}x")


def snapshot(args) -> None:
    from kbroker.kraft.controller import Controller, NewTopic
    from kbroker.kraft.loader import MetadataLoader
    from kbroker.kraft.image import MetadataImage
    from kbroker.kraft.quorum_runtime import image_records
    from kbroker.kraft.records import decode_record, encode_record
    from kbroker.kraft.snapshots import build_snapshot, parse_snapshot
    from kbroker.kraft.cluster_control import ClusterControl, Registration
    from kbroker.kraft.controller import METADATA_VERSION

    c = Controller(1, {"num.partitions": 1, "default.replication.factor": 3, "delete.topic.enable": True})
    log_records = []

    def commit(res):
        for r in res.records:
            c.replay(r, c.next_offset)
            log_records.append(encode_record(r))
        return res.response
    commit(c.bootstrap(0))
    cc = ClusterControl(c, "cid", 9000)
    for b in (1, 2, 3):
        _, ep = commit(cc.register(Registration(b, "cid", uuid.uuid4(), [("PLAINTEXT", "h", 9092, 0)],
                                                {"metadata.version": (1, METADATA_VERSION)}, None), 0))
        commit(cc.heartbeat(b, ep, c.next_offset, False, False, 0))
    per_topic = 100
    for t in range(args.partitions // per_topic):
        commit(c.create_topics([NewTopic(f"t{t}", num_partitions=per_topic)], False, 0))
    data = build_snapshot([encode_record(r) for r in image_records(c.image)], 0)
    print(f"image: {sum(len(t.partitions) for t in c.image.topics_by_name.values())} partitions, "
          f"snapshot {len(data) / 1e6:.1f} MB, log {sum(map(len, log_records)) / 1e6:.1f} MB")
    tmp = tempfile.NamedTemporaryFile(delete=False)
    tmp.write(data)
    tmp.close()

    def load_snapshot():
        with open(tmp.name, "rb") as f:
            content = parse_snapshot(f.read())
        loader = MetadataLoader(MetadataImage())
        loader.load_snapshot([decode_record(v) for v in content.records], len(log_records))
        return loader.image

    def replay_log():
        loader = MetadataLoader(MetadataImage())
        loader.apply_batch(0, [decode_record(v) for v in log_records])
        return loader.image
    best = {}
    for name, fn in (("snapshot load", load_snapshot), ("log replay", replay_log)):
        runs = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            img = fn()
            runs.append(time.perf_counter() - t0)
        assert sum(len(t.partitions) for t in img.topics_by_name.values()) == args.partitions // per_topic * per_topic
        best[name] = min(runs)
        print(f"{name}: {best[name]:.2f} s (best of {args.rounds})")
    os.unlink(tmp.name)
    print(f"\nsnapshot load / log replay: {best['snapshot load'] / best['log replay']:.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    f = sub.add_parser("failover")
    f.add_argument("--trials", type=int, default=20)
    f.add_argument("--election-timeout-ms", type=int, default=1000)
    t = sub.add_parser("throughput")
    t.add_argument("--topics", type=int, default=1000)
    t.add_argument("--partitions", type=int, default=10)
    s = sub.add_parser("snapshot")
    s.add_argument("--partitions", type=int, default=100000)
    s.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    {"failover": failover, "throughput": throughput, "snapshot": snapshot}[args.what](args)


if __name__ == "__main__":
    main()
