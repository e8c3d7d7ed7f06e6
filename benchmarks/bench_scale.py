"""Scaling with partitions: kbroker, Apache Kafka 4.0 and Tansu in the same run.

    python benchmarks/bench_scale.py [--partitions 1,100,1000] [--records 50000]
                                     [--brokers kbroker,kafka,tansu] [--out ...md] [--plot ...png]
                                     [--rows-only]

For each partition count P (topics of at most 1,000 partitions, Kafka's per-request limit),
each broker in turn (the order rotates with P, so load noise hits all of them):

* idle memory: the broker's resident memory after the topics exist minus before, per
  partition, and its open file descriptors;
* produce throughput: ``--records`` 1 KiB records spread round-robin over all P partitions
  (acks=1, linger 5 ms, confluent-kafka), MB/s until every record is acknowledged;
* produce latency: 1,000 records paced 1 ms apart over the P partitions, acks=1, p50/p99 of
  the acknowledgement latency;
* consume throughput: one consumer assigned all P partitions reads everything back from
  their earliest offsets (librdkafka sends full sessionless fetches naming every partition).
  The earliest offsets are asked for in one batched ListOffsets (AdminClient.list_offsets,
  as the Java consumer's seekToBeginning batches them) and assigned as concrete offsets,
  inside the timed section. ``--from-beginning`` assigns OFFSET_BEGINNING instead: librdkafka
  then sends one ListOffsets per partition and, at 10,000 partitions, now and then leaves the
  last ~1,000 of them unsent for 10-100 s (seen against kbroker and Kafka alike: a client-side
  stall, see benchmarks/results/scale.md), which made this row swing 0.2-25 MB/s.
  ``--client-stats-ms N`` reads librdkafka's statistics every N ms and reports the seconds it
  held its own requests back (every 250 ms, the reading itself makes the hold go away).

Then, with every topic still there: restart time after a clean stop and after kill -9
(kbroker and Kafka; Tansu runs from memory), measured until the broker answers a Metadata
request listing all partitions. (fsync durability is ``bench_fsync.py``'s: a run long enough
to measure it.)

The machine may be shared: compare the brokers of one run, not runs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

from peers import axis_table, plot_axis, NAMES, make_broker, open_fds, produce_waiting, rss_mb, write_report  # noqa: E402

VALUE = os.urandom(1024)


def topics_for(p: int, tag: str) -> list[tuple[str, int]]:
    out, left, j = [], p, 0
    while left > 0:
        n = min(left, 1000)
        out.append((f"s{tag}-{j}", n))
        left -= n
        j += 1
    return out


def create(b, topics, configs=None):
    a = AdminClient({"bootstrap.servers": b})
    for name, n in topics:
        a.create_topics([NewTopic(name, n, 1, config=configs or {})])[name].result(600)
    deadline = time.time() + 300
    while time.time() < deadline:
        md = a.list_topics(timeout=30)
        if all(name in md.topics and len(md.topics[name].partitions) == n for name, n in topics):
            return
        time.sleep(0.2)
    raise RuntimeError("topics did not appear")


def delete(b, topics):
    a = AdminClient({"bootstrap.servers": b})
    for f in a.delete_topics([t for t, _ in topics]).values():
        try:
            f.result(600)
        except Exception:
            pass


def targets(topics):
    return [(t, i) for t, n in topics for i in range(n)]


def produce(b, topics, count, acks="1", extra: dict | None = None):
    tps = targets(topics)
    p = Producer({"bootstrap.servers": b, "acks": acks, "linger.ms": 5, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "delivery.report.only.error": True, **(extra or {})})
    p.list_topics(timeout=30)
    t0 = time.perf_counter()
    for i in range(count):
        t, part = tps[i % len(tps)]
        produce_waiting(p, t, VALUE, partition=part, wait_s=0.001)
        if not i % 10000:
            p.poll(0)
    left = p.flush(300)
    dt = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} records not acknowledged")
    return count * len(VALUE) / dt / 1e6


def latency(b, topics, n=1000):
    tps = targets(topics)
    p = Producer({"bootstrap.servers": b, "acks": "1", "linger.ms": 0})
    p.list_topics(timeout=30)
    lat = []
    t0 = time.perf_counter()
    for i in range(n):
        due = t0 + i * 0.001
        while (w := due - time.perf_counter()) > 0:
            p.poll(w)
        sent = time.perf_counter()
        t, part = tps[(i * 7919) % len(tps)]
        p.produce(t, VALUE, partition=part, on_delivery=lambda e, m, s=sent: lat.append(time.perf_counter() - s))
        p.poll(0)
    p.flush(60)
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000


class HeldListOffsets:
    """From librdkafka's statistics: how long it had partitions waiting for their ListOffsets
    answer (fetch_state offset-wait) while its connection had nothing queued to send and at
    most one request (the Fetch) in flight, i.e. the client itself held the requests back.
    Opt-in: statistics every 250 ms made the hold disappear against both brokers (every
    second, it still happens and is seen)."""

    def __init__(self, interval_ms: int):
        self.interval_ms = interval_ms
        self.held_s = 0.0
        self.max_waiting = 0

    def __call__(self, stats_json: str) -> None:
        d = json.loads(stats_json)
        nodes = [br for br in d["brokers"].values() if br["nodeid"] >= 0]
        waiting = sum(1 for t in d["topics"].values() for q in t["partitions"].values()
                      if q["partition"] >= 0 and q["fetch_state"] == "offset-wait")
        if waiting and all(br["outbuf_cnt"] == 0 and br["waitresp_cnt"] <= 1 for br in nodes):
            self.held_s += self.interval_ms / 1000
            self.max_waiting = max(self.max_waiting, waiting)


def consume(b, topics, count, from_beginning=False, probe=None):
    conf = {"bootstrap.servers": b, "group.id": "scale", "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 5}
    if probe is not None:
        conf.update({"statistics.interval.ms": probe.interval_ms, "stats_cb": probe})
    c = Consumer(conf)
    c.list_topics(timeout=30)
    admin = AdminClient({"bootstrap.servers": b})
    admin.list_topics(timeout=30)   # (connected before the clock starts, like the consumer)
    got = 0
    t0 = time.perf_counter()
    if from_beginning:
        c.assign([TopicPartition(t, i, OFFSET_BEGINNING) for t, i in targets(topics)])
    else:
        found = admin.list_offsets({TopicPartition(t, i): OffsetSpec.earliest() for t, i in targets(topics)},
                                   request_timeout=120)
        c.assign([TopicPartition(tp.topic, tp.partition, f.result().offset) for tp, f in found.items()])
    deadline = t0 + 300
    while got < count and time.perf_counter() < deadline:
        # (no more than are left: consume() waits its whole timeout for a batch it cannot fill)
        got += sum(1 for m in c.consume(min(10000, count - got), timeout=1) if not m.error())
    dt = time.perf_counter() - t0
    c.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return count * len(VALUE) / dt / 1e6


def wait_metadata(b, partitions, timeout=600):
    """Seconds until the broker lists ``partitions`` partitions."""
    t0 = time.perf_counter()
    a = AdminClient({"bootstrap.servers": b})
    while time.perf_counter() - t0 < timeout:
        try:
            md = a.list_topics(timeout=5)
            if sum(len(t.partitions) for n, t in md.topics.items() if n.startswith("s")) >= partitions:
                return time.perf_counter() - t0
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError("metadata incomplete after restart")


def restart(broker, kill: bool):
    t0 = time.perf_counter()
    if kill:
        broker.kill()
    else:
        # a clean stop of 10,000 partitions takes longer than the helpers' default wait, and
        # a SIGKILL after it would turn the "clean" row into a second crash
        if broker.stop(timeout=600) is None:
            raise RuntimeError("did not stop cleanly within 600 s")
    t1 = time.perf_counter()
    if broker.kind == "kafka":
        broker.start(fresh=False, timeout=600)
    else:
        broker.start(timeout=600)
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="kbroker,kafka,tansu")
    ap.add_argument("--partitions", default="1,100,1000")
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--out", default="")
    ap.add_argument("--plot", default="")
    ap.add_argument("--rows-only", action="store_true",
                    help="only the per-partition-count rows (no restart section)")
    ap.add_argument("--from-beginning", action="store_true",
                    help="consume rows: assign OFFSET_BEGINNING (one ListOffsets per partition) "
                         "instead of the earliest offsets from one batched ListOffsets")
    ap.add_argument("--client-stats-ms", type=int, default=0,
                    help="consume rows: read librdkafka's statistics this often and report how long "
                         "it held its own ListOffsets requests back (0: off, the default; the "
                         "statistics timer changes the client's timing)")
    args = ap.parse_args()
    kinds = args.brokers.split(",")
    counts = [int(x) for x in args.partitions.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    brokers = {}
    rows: dict[int, dict[str, dict]] = {}
    extra: dict[str, dict] = {}
    try:
        for k in kinds:
            brokers[k] = make_broker(k, tmp, kafka_overrides={"num.partitions": "1"}).start()
        for step, p in enumerate(counts):
            rows[p] = {}
            order = kinds[step % len(kinds):] + kinds[:step % len(kinds)]
            for k in order:
                b = brokers[k]
                topics = topics_for(p, str(p))
                r = {}
                try:
                    m0 = rss_mb(b.proc.pid)
                    create(b.bootstrap, topics)
                    time.sleep(2)
                    r["mem_mb"] = rss_mb(b.proc.pid)
                    r["kb_per_partition"] = (r["mem_mb"] - m0) * 1024 / p
                    r["fds"] = open_fds(b.proc.pid)
                    r["produce_mbs"] = produce(b.bootstrap, topics, args.records)
                    r["p50_ms"], r["p99_ms"] = latency(b.bootstrap, topics)
                    probe = HeldListOffsets(args.client_stats_ms) if args.client_stats_ms else None
                    r["consume_mbs"] = consume(b.bootstrap, topics, args.records + 1000, args.from_beginning, probe)
                    if probe is not None:
                        r["client_held_s"], r["client_held_partitions"] = probe.held_s, probe.max_waiting
                except Exception as e:
                    r["error"] = f"{type(e).__name__}: {e}"[:150]
                rows[p][k] = r
                print(f"P={p:6d} {NAMES[k]:8s} {r}", flush=True)
        total = sum(counts)   # the benchmark's own topics (their names start with 's')
        for k in ([] if args.rows_only else kinds):
            if k == "tansu":
                continue
            b = brokers[k]
            res = {}
            try:
                for kill in (False, True):
                    _stop_s, up_s = restart(b, kill)
                    res["kill9" if kill else "clean"] = up_s + wait_metadata(b.bootstrap, total)
            except Exception as e:
                res["error"] = f"{type(e).__name__}: {e}"[:150]
            extra.setdefault("restart", {})[k] = res
            print("restart", NAMES[k], res, flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(rows, extra, kinds, counts, args)


def report(rows, extra, kinds, counts, args) -> None:
    L = [f"# Scaling with partitions ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
         f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; shared with "
         "other jobs while it ran (compare brokers within this run, not across runs). "
         f"{args.records} x 1 KiB records per produce row, acks=1, confluent-kafka; consume from "
         + ("OFFSET_BEGINNING." if args.from_beginning else "the earliest offsets (one batched ListOffsets)."), ""]
    metrics = [("produce_mbs", "produce MB/s", "{:.1f}", True), ("consume_mbs", "consume MB/s", "{:.1f}", True),
               ("p50_ms", "produce p50 ms", "{:.2f}", False), ("p99_ms", "produce p99 ms", "{:.2f}", False),
               ("kb_per_partition", "idle KiB / partition", "{:.0f}", False), ("mem_mb", "RSS MB", "{:.0f}", False),
               ("fds", "open fds", "{:d}", False)]
    L += axis_table(rows, kinds, counts, "partitions", metrics)
    L += ["", "Ratios: above 1.0 means kbroker is better (throughput: ours / Kafka's; latency, memory, "
          "descriptors: Kafka's / ours).", ""]
    if "restart" in extra:
        L += [f"Restart with {sum(counts)} partitions (+ internal topics), seconds until Metadata lists them all:", "",
              "| broker | after a clean stop | after kill -9 |", "|---|---:|---:|"]
        for k, r in extra["restart"].items():
            L.append(f"| {NAMES[k]} | {r.get('clean', float('nan')):.1f} | {r.get('kill9', float('nan')):.1f} |"
                     + (f" {r['error']}" if "error" in r else ""))
        L.append("")
    if args.client_stats_ms:
        L += ["Seconds in which librdkafka held its own ListOffsets requests back (partitions "
              "waiting for an offset, nothing queued on the connection, at most the Fetch in flight; "
              f"from its statistics every {args.client_stats_ms} ms), and how many partitions waited:", "",
              "| partitions | " + " | ".join(NAMES[k] for k in kinds) + " |",
              "|---:|" + "---:|" * len(kinds)]
        for p in counts:
            cells = [f"{rows[p][k]['client_held_s']:.2f} s ({rows[p][k]['client_held_partitions']})"
                     if "client_held_s" in rows[p].get(k, {}) else "-" for k in kinds]
            L.append(f"| {p} | " + " | ".join(cells) + " |")
        L.append("")
    errs = [f"- P={p}, {NAMES[k]}: {r['error']}" for p in counts for k, r in rows[p].items() if "error" in r]
    if errs:
        L += ["Errors:", ""] + errs + [""]
    write_report(L, args.out)
    if args.plot:
        plot_axis(args.plot, rows, kinds, counts, "partitions",
                  [("produce_mbs", "produce MB/s", False), ("consume_mbs", "consume MB/s", False),
                   ("p50_ms", "produce p50 ms", True), ("p99_ms", "produce p99 ms", True),
                   ("mem_mb", "RSS MB", False), ("fds", "open descriptors", True)])

if __name__ == "__main__":
    main()
