"""Producer/consumer throughput and produce->consume latency with confluent-kafka, for kbroker,
Apache Kafka 4.0 (../shared/reference-kafka) and the Tansu peer (a Rust broker) in the same
run, printed as a table of ratios.

    python benchmarks/bench_clients.py [--quick] [--repeat 3] [--brokers kbroker,kafka,tansu]
                                       [--out benchmarks/results/clients.md]
                                       [--plot benchmarks/results/clients.png] [--only SUBSTRING]

Rows (issue 4): 200k x 1 KiB and 1M x 100 B, acks 1 and all, compression none and lz4,
linger 5 ms; consumer throughput reading the same data back; latency at 2,000 msg/s
(p50 / p99 / p99.9).

How it measures, so that the numbers are about the brokers and not about Python:

* All brokers run for the whole benchmark and every measurement alternates between them
  (kbroker, Kafka, Tansu, then Kafka, Tansu, kbroker on the next repeat...), so a noisy
  neighbour on a shared machine hits every side alike. Throughput rows report the median of ``--repeat``
  runs; latency pools the samples of every repeat.
* Client start-up is not timed: producer and consumer fetch the topic's metadata first
  (librdkafka would otherwise wait for its 500 ms offset-query timer before the first fetch).
* Producer: one ``produce()`` call per record and nothing else in the loop; delivery reports
  only for errors (``delivery.report.only.error``), which fail the run. The clock stops when
  ``flush()`` returns: every record acknowledged.
* Consumer: ``consume()`` in batches of 10,000; the messages are not inspected one by one
  (that would time the Python loop). Completeness is checked once at the end from the
  consumer's positions: they must add up to the number of records produced. librdkafka's
  ``fetch.queue.backoff.ms`` is 5 ms instead of 1 s (see ``consume``).
* Latency: a consumer thread blocks in ``poll()`` (woken by librdkafka when a message
  arrives), the producer thread paces 2,000 msg/s with sleeps, so neither client spins a
  CPU that the brokers need; 200 warm-up messages make the round trip before the measured
  ones are sent (connections, fetch session, group coordinator, first appends).
* "broker CPU" is the broker process's user+system CPU time during the measurement
  (all threads, and children: Kafka runs under a shell wrapper), from /proc: the cost of
  the work, independent of the wall clock.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import NAMES, cpu_seconds, make_broker  # noqa: E402

PARTITIONS = 3
KINDS = ("kbroker", "kafka", "tansu")


def create(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})   # must outlive the future
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def delete(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic])[topic].result(30)
    except Exception as e:  # cleanup only: a failure here does not change any number
        print(f"  (deleting {topic}: {e})", file=sys.stderr)


def produce(bootstrap, topic, count, size, acks, codec):
    errors = []

    def on_delivery(err, _msg):
        errors.append(err)   # delivery.report.only.error: called for failures only

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": codec,
                  "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1_048_576, "delivery.report.only.error": True,
                  "on_delivery": on_delivery})
    p.list_topics(topic, timeout=10)            # connected, metadata known: not timed
    # 1,024 distinct values, each half random and half repeated text: compressible about 2:1
    # like real payloads. (One repeated value would let lz4 shrink a whole batch to nothing
    # and leave the broker with no work to measure.)
    pool = [(os.urandom(size // 2) + (b"%08d-payload " % i) * size)[:size] for i in range(1024)]
    send = p.produce
    t0 = time.perf_counter()
    for i in range(count):
        value = pool[i & 1023]
        try:
            send(topic, value)
        except BufferError:
            p.poll(0.001)
            send(topic, value)
        if not i % 10_000:
            p.poll(0)
    left = p.flush(120)
    dt = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"produce: {left} unflushed, errors {errors[:3]}")
    return dt


def consume(bootstrap, topic, count):
    # fetch.queue.backoff.ms: when its pre-fetch queue passes queued.min.messages (100k)
    # librdkafka postpones the next fetch by this much, 1 s by default; a fast broker fills
    # the queue sooner and then waits for that timer (consume took 0.4 s or 1.4 s, bimodal).
    # Fetch sizes stay at the client's defaults: what users run.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 5})
    c.list_topics(topic, timeout=10)            # connected, leaders known: not timed
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    got = 0
    t0 = time.perf_counter()
    c.assign(parts)
    deadline = t0 + 120
    while got < count and time.perf_counter() < deadline:
        got += len(c.consume(10000, timeout=1))
    dt = time.perf_counter() - t0
    positions = sum(max(tp.offset, 0) for tp in c.position([TopicPartition(topic, p) for p in range(PARTITIONS)]))
    c.close()
    if got < count or positions != count:
        raise RuntimeError(f"consume: got {got} messages, positions at {positions}, of {count}")
    return dt


def latency(bootstrap, topic, rate=2000, seconds=5, warmup=200):
    """Produce->consume latency samples (seconds) of ``rate * seconds`` messages, after
    ``warmup`` messages have made the whole round trip (connections, fetch session, group
    coordinator lookup, first appends to each partition are then behind us)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    p.list_topics(topic, timeout=10)
    total = rate * seconds
    samples = []
    warm = threading.Event()
    done = threading.Event()

    def consumer():
        seen_warm = seen = 0
        while seen < total and not done.is_set():
            m = c.poll(0.1)
            now = time.perf_counter()
            if m is None or m.error():
                continue
            v = m.value()
            if v[:1] == b"w":
                seen_warm += 1
                if seen_warm == warmup:
                    warm.set()
                continue
            seen += 1
            samples.append(now - float(v))

    th = threading.Thread(target=consumer, daemon=True)
    th.start()

    def paced(n, prefix=b""):
        t0 = time.perf_counter()
        for i in range(n):
            due = t0 + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            p.produce(topic, prefix + repr(time.perf_counter()).encode())
            if not i % 64:
                p.poll(0)

    paced(warmup, b"w")
    p.flush(10)
    if not warm.wait(30):
        raise RuntimeError("latency: the warm-up messages did not come back")
    paced(total)
    p.flush(10)
    th.join(seconds + 20)
    done.set()
    th.join()
    c.close()
    if len(samples) < total:
        raise RuntimeError(f"latency: {len(samples)} of {total} messages came back")
    return samples


def pct(samples, f):
    s = sorted(samples)
    return s[min(len(s) - 1, int(f * len(s)))] * 1000


class Run:
    """Every broker, started once; measurements alternate between them."""

    def __init__(self, kinds, quick, repeat):
        self.kinds = kinds
        self.scale = 10 if quick else 1
        self.repeat = repeat
        self.lat_seconds = 2 if quick else 10
        self.tmp = tempfile.TemporaryDirectory()
        self.brokers = {}
        self.values = {}   # row -> kind -> [values]
        self.cpu = {}      # row -> kind -> [cpu seconds]
        self.units = {}
        self._n = 0

    def __enter__(self):
        for k in self.kinds:
            self.brokers[k] = make_broker(k, Path(self.tmp.name)).start(timeout=180)
        return self

    def __exit__(self, *exc):
        for b in self.brokers.values():
            b.stop()
        self.tmp.cleanup()

    def order(self, r):
        n = r % len(self.kinds)
        return self.kinds[n:] + self.kinds[:n]

    def record(self, row, unit, kind, value, cpu):
        self.units[row] = unit
        self.values.setdefault(row, {}).setdefault(kind, []).append(value)
        self.cpu.setdefault(row, {}).setdefault(kind, []).append(cpu)

    def measure(self, kind, fn, *args):
        b = self.brokers[kind]
        c0 = cpu_seconds(b.proc.pid)
        out = fn(b.bootstrap, *args)
        return out, cpu_seconds(b.proc.pid) - c0

    def throughput_rows(self, only):
        for count, size in ((200_000 // self.scale, 1024), (1_000_000 // self.scale, 100)):
            for acks in ("1", "all"):
                for codec in ("none", "lz4"):
                    label = f"{count // 1000}k x {size} B, acks={acks}, {codec}"
                    prow, crow = f"produce {label}", f"consume {label}"
                    if only and only not in prow and only not in crow:
                        continue
                    for r in range(self.repeat):
                        for kind in self.order(r):
                            self._n += 1
                            topic = f"bench{self._n}"
                            bs = self.brokers[kind].bootstrap
                            create(bs, topic)
                            dt, cpu = self.measure(kind, produce, topic, count, size, acks, codec)
                            self.record(prow, "MB/s", kind, count * size / dt / 1e6, cpu)
                            if acks == "1":
                                dt, cpu = self.measure(kind, consume, topic, count)
                                self.record(crow, "MB/s", kind, count * size / dt / 1e6, cpu)
                            delete(bs, topic)
                    self.report_progress(prow, crow)

    def latency_rows(self, only):
        if only and only not in "latency p50 p99 p99.9 @2k msg/s":
            return
        pooled = {k: [] for k in self.kinds}
        cpu = {k: 0.0 for k in self.kinds}
        for r in range(self.repeat):
            for kind in self.order(r):
                self._n += 1
                topic = f"latency{self._n}"
                create(self.brokers[kind].bootstrap, topic)
                s, c = self.measure(kind, latency, topic, 2000, self.lat_seconds)
                pooled[kind] += s
                cpu[kind] += c
                delete(self.brokers[kind].bootstrap, topic)
        for name, f in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)):
            row = f"latency {name} @2k msg/s"
            for k in self.kinds:
                self.record(row, "ms", k, pct(pooled[k], f), cpu[k] / self.repeat)
            self.report_progress(row)

    def report_progress(self, *rows):
        for row in rows:
            if row in self.values:
                vals = "  ".join(f"{NAMES[k]} {', '.join(f'{v:.1f}' for v in vs)}"
                                 for k, vs in self.values[row].items())
                print(f"  {row}: {vals}", file=sys.stderr, flush=True)

    def table(self) -> str:
        peers = [k for k in self.kinds if k != "kbroker"]
        lines = ["| benchmark (confluent-kafka) | unit | " + " | ".join(NAMES[k] for k in self.kinds) + " | "
                 + "".join(f"kbroker / {NAMES[k]} | " for k in peers)
                 + "broker CPU s, " + " / ".join(NAMES[k] for k in self.kinds) + " |",
                 "|---|---|" + "---:|" * (len(self.kinds) + len(peers) + 1)]
        nan = float("nan")
        for row, per in self.values.items():
            unit = self.units[row]
            digits = 2 if unit == "ms" else 1
            med = {k: statistics.median(per[k]) if k in per else nan for k in self.kinds}
            # Higher is better for MB/s; for latency the ratio is peer/ours so >1 still means better.
            ratios = [(med["kbroker"] / med[k] if unit == "MB/s" else med[k] / med["kbroker"])
                      if med.get("kbroker") and med[k] else nan for k in peers]
            cpu = " / ".join(f"{statistics.median(self.cpu[row][k]):.2f}" if k in self.cpu[row] else "n/a"
                             for k in self.kinds)
            if row.startswith("latency") and not row.startswith("latency p50"):
                cpu = "(as p50)"
            lines.append(f"| {row} | {unit} | " + " | ".join(f"{med[k]:.{digits}f}" for k in self.kinds) + " | "
                         + "".join(f"{r:.2f}x | " for r in ratios) + f"{cpu} |")
        return "\n".join(lines)

    def plot(self, path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = [r for r in self.values if self.units[r] == "MB/s"]
        lat = [r for r in self.values if self.units[r] == "ms"]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [3, 1]})
        y = range(len(rows))
        w = 0.8 / len(self.kinds)
        for i, k in enumerate(self.kinds):
            a1.barh([j + w * i for j in y], [statistics.median(self.values[r].get(k, [0])) for r in rows],
                    height=w, label=NAMES[k])
        a1.set_yticks([j + w * (len(self.kinds) - 1) / 2 for j in y], rows, fontsize=8)
        a1.invert_yaxis()
        a1.set_xlabel("MB/s (higher is better)")
        a1.legend()
        x = range(len(lat))
        for i, k in enumerate(self.kinds):
            a2.bar([j + w * i for j in x], [statistics.median(self.values[r].get(k, [0])) for r in lat],
                   width=w, label=NAMES[k])
        a2.set_xticks([j + w * (len(self.kinds) - 1) / 2 for j in x], [r.split()[1] for r in lat])
        a2.set_yscale("log")
        a2.set_ylabel("produce->consume latency at 2k msg/s, ms (lower is better)")
        fig.suptitle(" vs ".join(NAMES[k] for k in self.kinds) + ", confluent-kafka clients, same run")
        fig.tight_layout()
        fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a tenth of the records, 2 s of latency")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row and broker (median reported)")
    ap.add_argument("--only", default=None, help="only rows whose name contains this")
    ap.add_argument("--brokers", default=",".join(KINDS), help="which brokers, kbroker first")
    ap.add_argument("--kbroker-only", action="store_true", help="skip the peers (development)")
    ap.add_argument("--out", default=None, help="also write the markdown table here")
    ap.add_argument("--plot", default=None, help="also draw the numbers into this PNG (matplotlib)")
    args = ap.parse_args()
    kinds = ("kbroker",) if args.kbroker_only else tuple(args.brokers.split(","))
    if kinds[0] != "kbroker":
        sys.exit("--brokers: kbroker comes first (the ratios are against it)")
    started = datetime.datetime.now()
    with Run(kinds, args.quick, args.repeat) as run:
        run.throughput_rows(args.only)
        run.latency_rows(args.only)
        table = run.table()
        if args.plot:
            run.plot(args.plot)
    print(table)
    if args.out:
        import confluent_kafka
        head = (f"Run {started:%Y-%m-%d %H:%M}, {os.cpu_count()} cores ({platform.machine()}), "
                f"Python {platform.python_version()}, confluent-kafka {confluent_kafka.__version__} "
                f"(librdkafka {confluent_kafka.libversion()[0]}), median of {args.repeat} runs per row"
                f"{' (quick: a tenth of the records)' if args.quick else ''}.\n\n")
        Path(args.out).write_text(head + table + "\n\nRatios above 1.0 mean kbroker is better "
                                  "(for latency: the peer's latency / kbroker's).\n")


if __name__ == "__main__":
    main()
