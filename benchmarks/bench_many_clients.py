"""Many clients at once: 1,000 open connections, 100 producers and 100 consumers, kbroker
next to Apache Kafka 4.0 in the same run.

    python benchmarks/bench_many_clients.py [--connections 1000] [--producers 100]
                                            [--consumers 100] [--records 2000]
                                            [--brokers kbroker,kafka] [--out ...md]

Per broker (one after the other): a topic of ``--producers`` partitions; ``--connections``
extra connections opened at once (each sends ApiVersions, then stays open and idle for the
whole run); then every producer (a confluent-kafka instance in its own thread, acks=1,
1 KiB records) writes ``--records`` to its own partition while every consumer (each
assigned one partition, from the beginning) reads them back, all at the same time.
Reported: produce and consume MB/s of the whole crowd, p50/p99 acknowledgement latency, the
time to accept and answer the connection burst, the broker's resident memory and, for
kbroker, the longest event-loop lag its probe logged during the burst and during the run.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING  # noqa: E402

from bench_scale import create  # noqa: E402
from bench_stalls import probe_lags  # noqa: E402
from peers import NAMES, make_broker, rss_mb  # noqa: E402

VALUE = os.urandom(1024)
TOPIC = "crowd"


class IdleConnections:
    """``n`` connections opened together from an asyncio loop in a thread, each answered
    once (ApiVersions v0), then held open until ``close``."""

    def __init__(self, bootstrap: str, n: int) -> None:
        self.host, port = bootstrap.split(":")
        self.port = int(port)
        self.n = n
        self.loop = asyncio.new_event_loop()
        self.writers: list = []
        self.burst_s = 0.0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _one(self, i: int):
        body = struct.pack(">hhih", 18, 0, i, 5) + b"crowd"
        r, w = await asyncio.open_connection(self.host, self.port)
        w.write(struct.pack(">i", len(body)) + body)
        head = await r.readexactly(4)
        await r.readexactly(struct.unpack(">i", head)[0])
        return w

    async def _open(self):
        t0 = time.perf_counter()
        self.writers = await asyncio.gather(*(self._one(i) for i in range(self.n)))
        self.burst_s = time.perf_counter() - t0

    def open(self) -> float:
        asyncio.run_coroutine_threadsafe(self._open(), self.loop).result(300)
        return self.burst_s

    def close(self) -> None:
        async def close_all():
            for w in self.writers:
                w.close()
        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def run_crowd(bootstrap: str, producers: int, consumers: int, records: int) -> dict:
    lat: list[float] = []
    lat_lock = threading.Lock()
    errors: list[str] = []
    consumed = [0] * consumers
    start = threading.Barrier(producers + consumers + 1)

    def producer(i: int) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
        p.list_topics(timeout=60)
        mine: list[float] = []
        start.wait()
        for n in range(records):
            sent = time.perf_counter()
            while True:
                try:
                    p.produce(TOPIC, VALUE, partition=i,
                              on_delivery=lambda e, m, s=sent: mine.append(time.perf_counter() - s) if e is None
                              else errors.append(str(e)))
                    break
                except BufferError:
                    p.poll(0.001)
            if n % 100 == 0:
                p.poll(0)
        if p.flush(300):
            errors.append(f"producer {i}: records left unacknowledged")
        with lat_lock:
            lat.extend(mine)

    def consumer(i: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"crowd-{i}", "enable.auto.commit": False,
                      "fetch.queue.backoff.ms": 5})
        c.assign([TopicPartition(TOPIC, i % producers, OFFSET_BEGINNING)])
        start.wait()
        deadline = time.perf_counter() + 300
        while consumed[i] < records and time.perf_counter() < deadline:
            consumed[i] += sum(1 for m in c.consume(500, timeout=0.5) if not m.error())
        c.close()

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(producers)]
    threads += [threading.Thread(target=consumer, args=(i,)) for i in range(consumers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads[:producers]:
        t.join()
    t_prod = time.perf_counter() - t0
    for t in threads[producers:]:
        t.join()
    t_cons = time.perf_counter() - t0
    lat.sort()
    total = producers * records * len(VALUE) / 1e6
    out = {"produce_mbs": total / t_prod,
           "consume_mbs": consumers * records * len(VALUE) / 1e6 / t_cons,
           "p50_ms": lat[len(lat) // 2] * 1000 if lat else float("nan"),
           "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan")}
    short = sum(1 for n in consumed if n < records)
    if short:
        errors.append(f"{short} consumers did not read all {records} records")
    if errors:
        out["error"] = "; ".join(errors[:3])[:200]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="kbroker,kafka")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--producers", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=100)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    kinds = args.brokers.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="bench-crowd-"))
    os.environ["KBROKER_LOOP_LOG_MS"] = "10"   # kbroker's probe logs every lag above 10 ms
    rows: dict[str, dict] = {}
    try:
        for k in kinds:
            b = make_broker(k, tmp).start(timeout=180)
            r: dict = {}
            try:
                create(b.bootstrap, [(TOPIC, args.producers)])
                idle = IdleConnections(b.bootstrap, args.connections)
                w0 = time.time()
                r["burst_s"] = idle.open()
                w1 = time.time()
                r["burst_loop_ms"] = probe_lags(b.log_path, w0, w1) if k == "kbroker" else None
                r.update(run_crowd(b.bootstrap, args.producers, args.consumers, args.records))
                w2 = time.time()
                r["run_loop_ms"] = probe_lags(b.log_path, w1, w2) if k == "kbroker" else None
                r["rss_mb"] = rss_mb(b.proc.pid)
                idle.close()
            except Exception as e:  # noqa: BLE001 - reported in the table
                r["error"] = f"{type(e).__name__}: {e}"[:200]
            finally:
                b.stop(timeout=120)
            rows[k] = r
            print(NAMES[k], r, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(rows, kinds, args)


def report(rows, kinds, args) -> None:
    L = [f"# Many clients ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
         f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; shared with "
         f"other jobs (compare within a run). {args.connections} idle connections opened at once and kept, then "
         f"{args.producers} producers (one partition each, {args.records} x 1 KiB, acks=1) and {args.consumers} "
         "consumers at the same time, all confluent-kafka in one client process.", ""]
    metrics = [("burst_s", "accept + answer the connection burst, s", "{:.2f}", False),
               ("burst_loop_ms", "longest loop lag during the burst, ms", "{:.0f}", False),
               ("produce_mbs", "produce MB/s (all producers)", "{:.1f}", True),
               ("consume_mbs", "consume MB/s (all consumers)", "{:.1f}", True),
               ("p50_ms", "produce p50 ms", "{:.1f}", False), ("p99_ms", "produce p99 ms", "{:.1f}", False),
               ("run_loop_ms", "longest loop lag during the run, ms", "{:.0f}", False),
               ("rss_mb", "RSS MB", "{:.0f}", False)]
    L.append("| metric | " + " | ".join(NAMES[k] for k in kinds) + (" | kbroker / Kafka |" if len(kinds) > 1 else " |"))
    L.append("|---|" + "---:|" * (len(kinds) + (len(kinds) > 1)))
    for key, label, fmt, higher in metrics:
        cells = []
        for k in kinds:
            v = rows.get(k, {}).get(key)
            cells.append(fmt.format(v) if isinstance(v, (int, float)) else "n/a")
        if len(kinds) > 1:
            a, b = rows.get("kbroker", {}).get(key), rows.get("kafka", {}).get(key)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a and b:
                cells.append(f"{(a / b) if higher else (b / a):.2f}x")
            else:
                cells.append("n/a")
        L.append(f"| {label} | " + " | ".join(cells) + " |")
    L += ["", "Ratios above 1.0 mean kbroker is better (throughput: ours / Kafka's; times and memory: Kafka's / ours).", ""]
    errs = [f"- {NAMES[k]}: {r['error']}" for k, r in rows.items() if "error" in r]
    if errs:
        L += ["Errors:", ""] + errs + [""]
    text = "\n".join(L) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
