"""Producer/consumer throughput and produce->consume latency with confluent-kafka, for kbroker
and the Tansu peer (a Rust broker) in the same run, printed as a table of ratios.

    python benchmarks/bench_clients.py [--quick] [--out benchmarks/results/clients.md]

Rows (issue 4): 200k x 1 KiB and 1M x 100 B, acks 1 and all, compression none and lz4,
linger 5 ms; consumer throughput reading the same data back; latency at 2,000 msg/s.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from compat_tests.brokers import TANSU, BrokerProcess  # noqa: E402

PARTITIONS = 3


def create(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})   # must outlive the future
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def produce(bootstrap, topic, count, size, acks, codec):
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": codec,
                  "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1_048_576})
    value = (os.urandom(size // 2) * 2)[:size]   # half-compressible, like real payloads
    errors = []

    def cb(err, _msg):
        if err:
            errors.append(err)

    t0 = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, value, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.001)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    dt = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"produce: {left} unflushed, errors {errors[:3]}")
    return dt


def consume(bootstrap, topic, count):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = 0
    t0 = time.perf_counter()
    deadline = t0 + 120
    while got < count and time.perf_counter() < deadline:
        for m in c.consume(10000, timeout=1):
            if not m.error():
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    if got < count:
        raise RuntimeError(f"consume: got {got} of {count}")
    return dt


def latency(bootstrap, topic, rate=2000, seconds=5):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    c.consume(1, timeout=2)   # connected and fetching before the clock starts
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    total = rate * seconds
    lat = []
    t0 = time.perf_counter()
    sent = 0
    while len(lat) < total and time.perf_counter() - t0 < seconds + 10:
        due = min(total, int((time.perf_counter() - t0) * rate))
        while sent < due:
            p.produce(topic, str(time.perf_counter()).encode())
            sent += 1
        p.poll(0)
        for m in c.consume(1000, timeout=0.0005):
            if not m.error():
                lat.append(time.perf_counter() - float(m.value()))
    p.flush(10)
    c.close()
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1000  # noqa: E731
    return q(0.5), q(0.99), q(0.999)


def run_suite(kind, quick):
    scale = 10 if quick else 1
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d), kind=kind).start()
        try:
            n = 0
            for count, size in ((200_000 // scale, 1024), (1_000_000 // scale, 100)):
                for acks in ("1", "all"):
                    for codec in ("none", "lz4"):
                        n += 1
                        topic = f"bench{n}"
                        create(b.bootstrap, topic)
                        dt = produce(b.bootstrap, topic, count, size, acks, codec)
                        label = f"{count // 1000}k x {size} B, acks={acks}, {codec}"
                        rows[f"produce {label}"] = ("MB/s", count * size / dt / 1e6)
                        if acks == "1":
                            dt = consume(b.bootstrap, topic, count)
                            rows[f"consume {label}"] = ("MB/s", count * size / dt / 1e6)
            create(b.bootstrap, "latency")
            p50, p99, p999 = latency(b.bootstrap, "latency", seconds=2 if quick else 5)
            rows["latency p50 @2k msg/s"] = ("ms", p50)
            rows["latency p99 @2k msg/s"] = ("ms", p99)
            rows["latency p99.9 @2k msg/s"] = ("ms", p999)
        finally:
            b.stop()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a tenth of the records")
    ap.add_argument("--out", default=None, help="also write the markdown table here")
    args = ap.parse_args()
    if not TANSU.exists():
        sys.exit("Tansu peer missing: run scripts/fetch-peer.sh")
    ours = run_suite("kbroker", args.quick)
    peer = run_suite("tansu", args.quick)
    lines = ["| benchmark (confluent-kafka) | unit | kbroker | Tansu | kbroker / Tansu |",
             "|---|---|---:|---:|---:|"]
    for name, (unit, v) in ours.items():
        pv = peer.get(name, (unit, float("nan")))[1]
        # Higher is better for MB/s; for latency the ratio is peer/ours so >1 still means better.
        ratio = v / pv if unit == "MB/s" else pv / v
        lines.append(f"| {name} | {unit} | {v:.1f} | {pv:.1f} | {ratio:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n\nRatios above 1.0 mean kbroker is better "
                                  "(for latency: Tansu's latency / kbroker's).\n")


if __name__ == "__main__":
    main()
