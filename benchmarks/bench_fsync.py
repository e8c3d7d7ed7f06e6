"""fsync durability: produce throughput with ``flush.messages=1`` (every append fsynced before
its acknowledgement) as a ratio of the same without it, kbroker next to Apache Kafka 4.0.

    python benchmarks/bench_fsync.py [--records 1000000] [--producers 1,4] [--trials 3]
                                     [--idempotence] [--client librdkafka|java]
                                     [--brokers kbroker,kafka] [--out ...md]

kbroker groups the fsyncs (group commit): the append starts an fsync in a thread, produces
that arrive while it runs are covered by the next single fsync, and each answer waits for
the fsync covering it. Kafka fsyncs inside each append. Each row: one topic of one
partition, acks=all, 1 KiB records, ``--producers`` confluent-kafka producers in threads
sending together (librdkafka's defaults but a large local queue; ``--idempotence`` turns
it on, which keeps at most 5 requests in flight); the brokers and the with/without topics
alternate, median of ``--trials``. A run must last long enough to be more than start-up:
one producer sends 1 GB in about a second here. The machine may be shared: compare within
a run; each trial's with/without pair ran back to back, so their ratios are listed too, and
the broker's CPU time per GB (what a loaded 2-core machine turns into throughput). For
kbroker the report also lists, from its ``/metrics`` around each run with fsync, how many
appends each group-commit round answered and the mean time of its fsyncs.

``--pin``: the brokers run on core 0 and the producers on core 1, as when clients run on
other machines. On two shared cores the producers need about all of the CPU, so an fsync's
kernel work comes out of their share; pinned, it comes out of the broker's.

``--client java``: the producers are Kafka's own ``kafka-producer-perf-test.sh`` (from
reference-kafka, the Java client at its defaults: idempotence on, up to 5 requests in flight
per connection, 16 KiB batches, linger 5 ms), one process per producer, their MB/s summed.
librdkafka with idempotence keeps one request in flight per partition (it counts in-flight
messages against its limit of 5 requests), so there it leaves nothing to group; the Java
client keeps several. Give the Java client 1,000,000 records or more: in a ~10 s run its JVM
spends 40-50 % of a core compiling, and the rate is then the compiler's (session 16,
``benchmarks/results/fsync.md``).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import create, produce  # noqa: E402
from compat_tests.brokers import free_port  # noqa: E402
from compat_tests.ops_util import scrape  # noqa: E402
from peers import KAFKA_HOME, NAMES, cpu_seconds, make_broker, pin, write_report  # noqa: E402

_COMMIT = ("kbroker_log_group_commit_rounds_total", "kbroker_log_group_commit_answers_total",
           "kafka_log_logflushstats_logflushrateandtimems_count", "kafka_log_logflushstats_logflushrateandtimems_sum")


def group_commit(port: int | None) -> tuple[float, ...] | None:
    """kbroker's counters of group-commit rounds, the appends they answered, and all log
    fsyncs with their summed ms (its /metrics), or None without a metrics port."""
    if port is None:
        return None
    try:
        m = scrape(port)
    except OSError:   # the run's rate still counts; only this table misses it
        return None
    return tuple(m.get((name, ()), 0.0) for name in _COMMIT)


def produce_parallel(bootstrap: str, topic: str, records: int, producers: int, extra: dict) -> float:
    """MB/s of ``producers`` producers sending ``records`` in all, together."""
    rates: list[float] = []
    errors: list[BaseException] = []

    def one():
        try:
            rates.append(produce(bootstrap, [(topic, 1)], records // producers, acks="all", extra=extra))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(rates)


def produce_java(bootstrap: str, topic: str, records: int, producers: int) -> float:
    """MB/s of ``producers`` kafka-producer-perf-test.sh processes sending ``records`` in all,
    together (each reports its own rate, from its first send: JVM start-up is not in it)."""
    cmd = [str(KAFKA_HOME / "bin/kafka-producer-perf-test.sh"), "--topic", topic,
           "--num-records", str(records // producers), "--record-size", "1024", "--throughput", "-1",
           "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(producers)]
    total = 0.0
    for p in procs:
        out, _ = p.communicate(timeout=600)
        # the summary line: "N records sent, R records/sec (M MB/sec), ..."
        m = re.findall(r"records sent, [0-9.]+ records/sec \(([0-9.]+) MB/sec\)", out)
        if p.returncode != 0 or not m:
            raise RuntimeError(f"kafka-producer-perf-test failed: {out[-300:]}")
        total += float(m[-1]) * 1.048576   # its MB is MiB; the tables here are in 10^6 bytes
    return total


def _topic(mode: str, producers: int) -> str:
    """The topic a run with (flush.messages=1) or without fsync writes to."""
    return f"{'fs' if mode == 'with' else 'nofs'}-{producers}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="kbroker,kafka")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--producers", default="1,4")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--idempotence", action="store_true", help="enable.idempotence=true")
    ap.add_argument("--client", default="librdkafka", choices=("librdkafka", "java"))
    ap.add_argument("--pin", action="store_true",
                    help="brokers on core 0, the producers on core 1 (as when clients run elsewhere)")
    ap.add_argument("--warmup", action="store_true",
                    help="one untimed run per broker, producer count and mode before the trials "
                         "(the first writes of a run go into a fresh page cache and a cold JVM)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs two cores")
    kinds = args.brokers.split(",")
    extra = {"enable.idempotence": True} if args.idempotence else {}
    counts = [int(x) for x in args.producers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-fsync-"))
    brokers = {}
    res: dict[tuple[str, int, str], list[float]] = {}
    pairs: dict[tuple[str, int, int], dict[str, float]] = {}   # one trial's back-to-back runs
    cpu: dict[tuple[str, int, str], list[float]] = {}   # broker CPU seconds per GB produced
    errors: list[str] = []

    def run(bootstrap: str, topic: str, producers: int) -> float:
        if args.client == "java":
            return produce_java(bootstrap, topic, args.records, producers)
        return produce_parallel(bootstrap, topic, args.records, producers, extra)

    rounds: dict[tuple[str, int], list[tuple[float, float]]] = {}   # kbroker: (appends/round, ms/fsync)
    mports: dict[str, int] = {}
    try:
        for k in kinds:
            if k.startswith("kbroker"):
                mports[k] = free_port()
            brokers[k] = make_broker(k, tmp, kbroker_overrides={"metrics.port": mports[k]} if k in mports
                                     else None).start(timeout=180)
            if args.pin:
                pin(brokers[k].proc.pid, {0})
        if args.pin:
            os.sched_setaffinity(0, {1})   # this process, its producer threads and the JVMs it starts
        for k, b in brokers.items():
            for n in counts:
                create(b.bootstrap, [(_topic("with", n), 1)], {"flush.messages": "1"})
                create(b.bootstrap, [(_topic("without", n), 1)])
        if args.warmup:
            for n in counts:
                for k in kinds:
                    for mode in ("with", "without"):
                        r = run(brokers[k].bootstrap, _topic(mode, n), n)
                        print(f"warm-up {NAMES[k]:8s} producers={n} {mode:7s} fsync: {r:.1f} MB/s (not counted)",
                              flush=True)
        for trial in range(args.trials):
            for n in counts:
                for k in kinds if trial % 2 == 0 else kinds[::-1]:
                    for mode in ("with", "without") if trial % 2 == 0 else ("without", "with"):
                        try:
                            c0 = cpu_seconds(brokers[k].proc.pid)
                            g0 = group_commit(mports.get(k)) if mode == "with" else None
                            r = run(brokers[k].bootstrap, _topic(mode, n), n)
                            gb = args.records * 1024 / 1e9
                            cpu.setdefault((k, n, mode), []).append((cpu_seconds(brokers[k].proc.pid) - c0) / gb)
                            g1 = group_commit(mports[k]) if g0 is not None else None
                            if g1 is not None:
                                d = [b - a for a, b in zip(g0, g1)]
                                if d[0] and d[2]:
                                    rounds.setdefault((k, n), []).append((d[1] / d[0], d[3] / d[2]))
                        except Exception as e:  # noqa: BLE001 - reported in the table
                            errors.append(f"{NAMES[k]}, {n} producers, {mode}: {type(e).__name__}: {e}"[:200])
                            continue
                        res.setdefault((k, n, mode), []).append(r)
                        pairs.setdefault((k, n, trial), {})[mode] = r
                        print(f"trial {trial} {NAMES[k]:8s} producers={n} {mode:7s} fsync: {r:.1f} MB/s", flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(res, pairs, cpu, rounds, errors, kinds, counts, args)


def report(res, pairs, cpu, rounds, errors, kinds, counts, args) -> None:
    L = [f"# fsync durability: flush.messages=1 against no fsync "
         f"({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
         f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; shared "
         f"with other jobs. One partition, acks=all, {args.records} x 1 KiB records per run"
         f"{', enable.idempotence=true' if args.idempotence else ''}"
         f"{', the Java producer (kafka-producer-perf-test.sh, defaults)' if args.client == 'java' else ''}"
         f"{'; each broker pinned to core 0 and the producers to core 1' if args.pin else ''}"
         f"{'; one untimed warm-up run of each first' if args.warmup else ''}, median of "
         f"{args.trials} alternating trials (MB/s); each trial's ratio; the broker process's CPU "
         f"seconds per GB produced (median; less sensitive to the machine's load than MB/s).", "",
         "| producers | broker | flush.messages=1 | no fsync | with / without | per trial "
         "| CPU s/GB with | CPU s/GB without |",
         "|---:|---|---:|---:|---:|---|---:|---:|"]
    for n in counts:
        for k in kinds:
            w, wo = res.get((k, n, "with")), res.get((k, n, "without"))
            if not w or not wo:
                L.append(f"| {n} | {NAMES[k]} | n/a | n/a | n/a | | | |")
                continue
            mw, mwo = statistics.median(w), statistics.median(wo)
            trials = [pairs.get((k, n, t), {}) for t in range(args.trials)]
            per = " ".join(f"{p['with'] / p['without']:.2f}" for p in trials if len(p) == 2)
            cw, cwo = statistics.median(cpu[(k, n, "with")]), statistics.median(cpu[(k, n, "without")])
            L.append(f"| {n} | {NAMES[k]} | {mw:.1f} | {mwo:.1f} | {mw / mwo:.2f} | {per} | {cw:.2f} | {cwo:.2f} |")
    L.append("")
    if rounds:
        L += ["kbroker's group commit in the flush.messages=1 runs (its /metrics, per trial): appends "
              "each fsync round answered, and the mean time of its log fsyncs.", "",
              "| producers | broker | appends per round | fsync ms |", "|---:|---|---|---|"]
        for (k, n), per in sorted(rounds.items()):
            L.append(f"| {n} | {NAMES[k]} | {' '.join(f'{a:.2f}' for a, _ in per)} "
                     f"| {' '.join(f'{t:.2f}' for _, t in per)} |")
        L.append("")
    if errors:
        L += ["Errors:", ""] + [f"- {e}" for e in errors] + [""]
    write_report(L, args.out)


if __name__ == "__main__":
    main()
