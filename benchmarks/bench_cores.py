"""The second core: one kbroker process against two kbroker processes as nodes of one
cluster on the same machine, the same partitions spread over them.

    python benchmarks/bench_cores.py [--partitions 1000] [--records 50000] [--trials 3] [--out ...md]

A Python broker's request handling runs on one event loop, so one process uses one core for
it (the fsync, checkpoint and partition-creation threads, and the kernel's sendfile, use
others). The way to the second core for that work is a second broker process: a node of the
same cluster (KRaft), leading half of the partitions. Both setups run side by side and the
trials alternate: a 1-node cluster and a 2-node cluster (node 1 broker+controller, node 2
broker), each with a topic of ``--partitions`` partitions (replication factor 1, so the
controller spreads the leaders over both nodes in the second). The workload is
bench_scale's produce (1 KiB records round-robin over every partition, acks=1, one
confluent-kafka producer) and a consumer reading everything back; reported are MB/s and the
brokers' CPU seconds, summed over the nodes.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compat_tests.brokers import KBrokerCluster  # noqa: E402
from peers import cpu_seconds, write_report  # noqa: E402

from bench_scale import consume, create, produce  # noqa: E402


def cluster_cpu(c: KBrokerCluster) -> float:
    return sum(cpu_seconds(n.pid) for n in c.nodes.values() if n.pid)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cores-"))
    setups = {
        "1 process": KBrokerCluster(tmp / "one", 1),
        "2 processes": KBrokerCluster(tmp / "two", 2, roles={1: "broker,controller", 2: "broker"}),
    }
    res: dict[tuple[str, str], list[float]] = {}
    try:
        for c in setups.values():
            c.start(timeout=180)
        for name, c in setups.items():
            create(c.bootstrap, [("cores", args.partitions)])
        for trial in range(args.trials):
            order = list(setups) if trial % 2 == 0 else list(setups)[::-1]
            for name in order:
                c = setups[name]
                topic = [("cores", args.partitions)]
                cpu0 = cluster_cpu(c)
                mbs = produce(c.bootstrap, topic, args.records)
                cpu1 = cluster_cpu(c)
                cmbs = consume(c.bootstrap, topic, args.records * (trial + 1))
                cpu2 = cluster_cpu(c)
                res.setdefault((name, "produce"), []).append(mbs)
                res.setdefault((name, "consume"), []).append(cmbs)
                res.setdefault((name, "produce_cpu"), []).append(cpu1 - cpu0)
                res.setdefault((name, "consume_cpu"), []).append(cpu2 - cpu1)
                print(f"trial {trial} {name}: produce {mbs:.1f} MB/s ({cpu1 - cpu0:.1f} CPU s), "
                      f"consume {cmbs:.1f} MB/s ({cpu2 - cpu1:.1f} CPU s)", flush=True)
    finally:
        for c in setups.values():
            for n in c.nodes.values():
                n.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(res, setups, args)


def report(res, setups, args) -> None:
    med = {k: statistics.median(v) for k, v in res.items()}
    L = [f"# The second core: 1 vs 2 broker processes ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
         "", f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; shared with "
         f"other jobs. {args.partitions} partitions, {args.records} x 1 KiB records round-robin, acks=1, one "
         f"confluent-kafka producer then one consumer; median of {args.trials} alternating trials.", "",
         "| setup | produce MB/s | broker CPU s | consume MB/s | broker CPU s |", "|---|---:|---:|---:|---:|"]
    for name in setups:
        if (name, "produce") in med:
            L.append(f"| {name} | {med[(name, 'produce')]:.1f} | {med[(name, 'produce_cpu')]:.1f} | "
                     f"{med[(name, 'consume')]:.1f} | {med[(name, 'consume_cpu')]:.1f} |")
    a, b = "1 process", "2 processes"
    if (a, "produce") in med and (b, "produce") in med:
        L += ["", f"2 processes / 1 process: produce {med[(b, 'produce')] / med[(a, 'produce')]:.2f}x, "
              f"consume {med[(b, 'consume')] / med[(a, 'consume')]:.2f}x.", ""]
    write_report(L, args.out)


if __name__ == "__main__":
    main()
