"""Loading a large ``__consumer_offsets`` at start-up: does the broker keep acknowledging
other clients' records while its group coordinator reads the offsets back? kbroker next to
Apache Kafka 4.0 in the same run.

    python benchmarks/bench_offsets_load.py [--commits 1000] [--partitions 1000] [--groups 50]
                                            [--brokers kbroker,kafka] [--out ...md]

Per broker, one after the other: ``--commits`` OffsetCommits of ``--partitions`` partitions
each (spread over ``--groups`` groups, every commit a new offset, so nothing is compacted
away: commits x partitions offset records), then a clean stop and a start on the same data.
As soon as the broker serves again, a producer sends one record every 2 ms to another topic
(the stall benchmark's heartbeat) while a consumer asks for the committed offsets of the last
group written, which answers only once that group's offsets are loaded. Reported: the time
from serving to the offsets answered, the longest acknowledgement latency of the heartbeat
records sent in that window (and in the idle second after it, for scale), and kbroker's
longest event-loop lag logged by its probe. The machine may be shared: compare within a run.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from bench_scale import create  # noqa: E402
from bench_stalls import HB_TOPIC, IDLE_S, Heartbeat, probe_held, probe_lags  # noqa: E402
from peers import NAMES, make_broker, write_report  # noqa: E402

TOPIC = "committed"


def fill(bootstrap: str, commits: int, partitions: int, groups: int) -> None:
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"load-{g}",
                           "enable.auto.commit": False}) for g in range(groups)]
    try:
        for i in range(commits):
            c = consumers[i % groups]
            c.commit(offsets=[TopicPartition(TOPIC, p, i + 1) for p in range(partitions)], asynchronous=False)
    finally:
        for c in consumers:
            c.close()


def wait_loaded(bootstrap: str, group: str, partitions: int, expect: int, timeout: float = 300) -> None:
    """Until ``group``'s committed offsets come back (COORDINATOR_LOAD_IN_PROGRESS is retried
    by the client; we retry anything else until ``timeout``)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.perf_counter() + timeout
    try:
        while True:
            try:
                got = c.committed([TopicPartition(TOPIC, p) for p in range(partitions)], timeout=30)
                if all(tp.offset == expect for tp in got):
                    return
                raise RuntimeError(f"offsets {sorted({tp.offset for tp in got})[:5]}, expected {expect}")
            except Exception:  # noqa: BLE001 - retried until the deadline, then raised
                if time.perf_counter() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        c.close()


def run_one(kind: str, tmp: Path, args) -> dict:
    b = make_broker(kind, tmp)
    b.start(timeout=180)
    r: dict = {}
    try:
        create(b.bootstrap, [(TOPIC, args.partitions), (HB_TOPIC, 1)])
        t = time.perf_counter()
        fill(b.bootstrap, args.commits, args.partitions, args.groups)
        r["fill_s"] = time.perf_counter() - t
        b.stop(timeout=300)
        w0 = time.time()
        if kind == "kafka":
            b.start(fresh=False, timeout=300)
        else:
            b.start(timeout=300)
        hb = Heartbeat(b.bootstrap).start()
        t0 = time.perf_counter()
        last = args.commits - 1          # the last commit went to this group
        wait_loaded(b.bootstrap, f"load-{last % args.groups}", args.partitions, last + 1)
        t1 = time.perf_counter()
        r["load_s"] = t1 - t0
        time.sleep(IDLE_S + 0.2)
        hb.wait_acked()
        r["stall_ms"] = hb.worst(t0, t1)
        r["idle_ms"] = hb.worst(t1, t1 + IDLE_S)
        hb.stop()
        if kind == "kbroker":
            r["loop_ms"] = probe_lags(b.log_path, w0, time.time())
            r["held_ms"] = probe_held(b.log_path, w0, time.time())
    except Exception as e:  # noqa: BLE001 - reported in the table
        r["error"] = f"{type(e).__name__}: {e}"[:200]
    finally:
        b.stop(timeout=300)
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="kbroker,kafka")
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    kinds = args.brokers.split(",")
    os.environ["KBROKER_LOOP_LOG_MS"] = "10"   # kbroker's probe logs every lag above 10 ms
    tmp = Path(tempfile.mkdtemp(prefix="bench-offload-"))
    rows = {}
    try:
        for k in kinds:
            rows[k] = run_one(k, tmp, args)
            print(NAMES[k], rows[k], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    L = [f"# Loading a large __consumer_offsets at start-up ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
         "", f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; shared "
         f"with other jobs (compare within a run). {args.commits} commits x {args.partitions} partitions = "
         f"{args.commits * args.partitions:,} offset records in {args.groups} groups, then a clean restart; a "
         "producer sends one record every 2 ms to another topic while the offsets load.", "",
         "| broker | fill s | serving -> offsets answered, s | ack stall during the load, ms | idle after, ms | loop lag, ms "
         "| loop lag less its wait for a core, ms |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    for k in kinds:
        r = rows[k]
        cell = lambda key, f: f.format(r[key]) if isinstance(r.get(key), (int, float)) else "n/a"  # noqa: E731
        L.append(f"| {NAMES[k]} | {cell('fill_s', '{:.1f}')} | {cell('load_s', '{:.2f}')} | {cell('stall_ms', '{:.0f}')} "
                 f"| {cell('idle_ms', '{:.0f}')} | {cell('loop_ms', '{:.0f}')} | {cell('held_ms', '{:.0f}')} |")
    errs = [f"- {NAMES[k]}: {r['error']}" for k, r in rows.items() if "error" in r]
    if errs:
        L += ["", "Errors:", ""] + errs
    write_report(L + [""], args.out)


if __name__ == "__main__":
    main()
