"""Many clients at once: 1,000 open connections, then crowds of producers and consumers up
to 100 + 100, kbroker next to Apache Kafka 4.0 and Tansu in the same run.

    python benchmarks/bench_many_clients.py [--connections 1000] [--crowds 10,30,100]
                                            [--records 2000] [--brokers kbroker,kafka,tansu]
                                            [--out ...md] [--plot ...png]

All brokers run side by side. On each in turn, ``--connections`` extra connections are
opened at once (each sends ApiVersions, then stays open and idle for the whole run). Then,
for every crowd size N, on each broker in turn (the order rotates from one size to the
next): N producers (confluent-kafka instances in their own threads, acks=1, 1 KiB records)
each write ``--records`` to their own partition of a fresh N-partition topic while N
consumers (each assigned one partition, from the beginning) read them back, all at once.
Reported per crowd size: produce and consume MB/s of the whole crowd, p50/p99 acknowledgement
latency, the broker's resident memory and, for kbroker, the longest event-loop lag its probe
logged; per broker: the time to accept and answer the connection burst. ``--plot`` draws the
crowd-size curves.
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
from bench_stalls import probe_held, probe_lags  # noqa: E402
from peers import NAMES, axis_table, make_broker, plot_axis, rss_mb, write_report  # noqa: E402

VALUE = os.urandom(1024)


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


def run_crowd(bootstrap: str, topic: str, producers: int, consumers: int, records: int) -> dict:
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
                    p.produce(topic, VALUE, partition=i,
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
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{i}", "enable.auto.commit": False,
                      "fetch.queue.backoff.ms": 5})
        c.assign([TopicPartition(topic, i % producers, OFFSET_BEGINNING)])
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
    ap.add_argument("--brokers", default="kbroker,kafka,tansu")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--crowds", default="10,30,100", help="producers (= consumers) per run")
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--out", default="")
    ap.add_argument("--plot", default="")
    args = ap.parse_args()
    kinds = args.brokers.split(",")
    crowds = [int(x) for x in args.crowds.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-crowd-"))
    os.environ["KBROKER_LOOP_LOG_MS"] = "10"   # kbroker's probe logs every lag above 10 ms
    bursts: dict[str, dict] = {k: {} for k in kinds}
    rows: dict[int, dict[str, dict]] = {n: {} for n in crowds}
    brokers, idle = {}, {}
    try:
        for k in kinds:
            brokers[k] = make_broker(k, tmp).start(timeout=180)
        for k, b in brokers.items():
            try:
                idle[k] = IdleConnections(b.bootstrap, args.connections)
                w0 = time.time()
                bursts[k]["burst_s"] = idle[k].open()
                bursts[k]["burst_loop_ms"] = probe_lags(b.log_path, w0, time.time()) if k == "kbroker" else None
                bursts[k]["burst_held_ms"] = probe_held(b.log_path, w0, time.time()) if k == "kbroker" else None
            except Exception as e:  # noqa: BLE001 - reported in the table
                bursts[k]["error"] = f"{type(e).__name__}: {e}"[:200]
            print(NAMES[k], bursts[k], flush=True)
        for step, n in enumerate(crowds):
            for k in kinds[step % len(kinds):] + kinds[:step % len(kinds)]:
                b, r = brokers[k], {}
                try:
                    create(b.bootstrap, [(f"crowd{n}", n)])
                    w1 = time.time()
                    r.update(run_crowd(b.bootstrap, f"crowd{n}", n, n, args.records))
                    r["run_loop_ms"] = probe_lags(b.log_path, w1, time.time()) if k == "kbroker" else None
                    r["run_held_ms"] = probe_held(b.log_path, w1, time.time()) if k == "kbroker" else None
                    r["rss_mb"] = rss_mb(b.proc.pid)
                except Exception as e:  # noqa: BLE001 - reported in the table
                    r["error"] = f"{type(e).__name__}: {e}"[:200]
                rows[n][k] = r
                print(n, NAMES[k], r, flush=True)
    finally:
        for c in idle.values():
            c.close()
        for b in brokers.values():
            b.stop(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    report(bursts, rows, kinds, crowds, args)


def report(bursts, rows, kinds, crowds, args) -> None:
    L = [f"# Many clients ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
         f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; shared with "
         f"other jobs (compare within a run). {args.connections} idle connections opened at once on each broker and "
         f"kept; then, per crowd size N, N producers (one partition each, {args.records} x 1 KiB, acks=1) and N "
         "consumers at the same time, all confluent-kafka in one client process.", "",
         f"The burst of {args.connections} connections:", ""]
    L += axis_table({args.connections: bursts}, kinds, [args.connections], "connections", [
        ("burst_s", "accept + answer every connection, s", "{:.2f}", False),
        ("burst_loop_ms", "longest loop lag during the burst, ms", "{:.0f}", False),
        ("burst_held_ms", "longest loop lag less its wait for a core, ms", "{:.0f}", False)])
    L += ["", f"Crowds (producers = consumers = N), with the {args.connections} idle connections open:", ""]
    L += axis_table(rows, kinds, crowds, "N", [
        ("produce_mbs", "produce MB/s (all producers)", "{:.1f}", True),
        ("consume_mbs", "consume MB/s (all consumers)", "{:.1f}", True),
        ("p50_ms", "produce p50 ms", "{:.1f}", False), ("p99_ms", "produce p99 ms", "{:.1f}", False),
        ("run_loop_ms", "longest loop lag during the run, ms", "{:.0f}", False),
        ("run_held_ms", "longest loop lag less its wait for a core, ms", "{:.0f}", False),
        ("rss_mb", "RSS MB", "{:.0f}", False)])
    L += ["", "Ratios above 1.0 mean kbroker is better (throughput: ours / Kafka's; times and memory: Kafka's / ours).", ""]
    errs = [f"- {NAMES[k]}: {r['error']}" for k, r in bursts.items() if "error" in r]
    errs += [f"- N={n}, {NAMES[k]}: {r['error']}" for n in crowds for k, r in rows[n].items() if "error" in r]
    if errs:
        L += ["Errors:", ""] + errs + [""]
    write_report(L, args.out)
    if args.plot:
        plot_axis(args.plot, rows, kinds, crowds, "producers = consumers",
                  [("produce_mbs", "produce MB/s", False), ("consume_mbs", "consume MB/s", False),
                   ("p99_ms", "produce p99 ms", True), ("rss_mb", "RSS MB", False)])


if __name__ == "__main__":
    main()
