#!/usr/bin/env python3
"""Where the time of kbroker's group-commit fsync rounds goes, from the kernel's tracepoints.

    python benchmarks/trace_fsync_rounds.py [--seconds 3] [--perf-data FILE]

Run it while a broker serves a ``flush.messages=1`` load (for example beside
``bench_fsync.py --client java --producers 1``). It records, machine-wide, the AIO
submissions and reaps (``io_submit``, ``io_getevents``), the kernel worker that runs each
fdatasync (``workqueue_execute_start/end`` of ``aio_fsync_work``), the disk requests it
issues (a write, then a cache flush) and the scheduler's switches. Each round is then split
into its phases, and for the phases that wait for a CPU it says who had that CPU.

Needs root, ``perf`` (Debian: ``linux-perf``) and tracefs (mounted here if it is not). A
diagnosis, not a benchmark: it reports microseconds of one run, no ratios.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

EVENTS = ("syscalls:sys_enter_io_submit", "syscalls:sys_exit_io_submit",
          "syscalls:sys_enter_io_getevents", "workqueue:workqueue_execute_start",
          "workqueue:workqueue_execute_end", "block:block_rq_issue", "block:block_rq_complete",
          "sched:sched_switch")

# (label, from, to): the marks of a round, in the order they happen
PHASES = (("submit -> kernel worker starts", "submit", "work_start"),
          ("worker starts -> data write issued", "work_start", "write_issue"),
          ("data write on the disk", "write_issue", "write_done"),
          ("write done -> cache flush issued", "write_done", "flush_issue"),
          ("cache flush on the disk", "flush_issue", "flush_done"),
          ("flush done -> worker ends", "flush_done", "work_end"),
          ("worker ends -> loop reaps", "work_end", "reaped"),
          ("whole round (submit -> reaped)", "submit", "reaped"))
WAITS = (("flush done -> worker ends", "flush_done", "work_end"),
         ("write done -> cache flush issued", "write_done", "flush_issue"),
         ("worker ends -> loop reaps", "work_end", "reaped"))

_LINE = re.compile(r"\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
_NEXT = re.compile(r"next_comm=(.+?) next_pid=(\d+)")


def parse(lines) -> list[tuple[float, str, int, int, str, str]]:
    """``perf script`` lines -> (time us, comm, tid, cpu, event, rest)."""
    out = []
    for line in lines:
        m = _LINE.match(line)
        if m:
            comm, tid, cpu, t, name, rest = m.groups()
            out.append((float(t) * 1e6, comm, int(tid), int(cpu), name, rest))
    return out


def rounds_of(events) -> list[dict]:
    """One dict of marks (microseconds) per round that ran from io_submit to the reap."""
    done, cur = [], None
    for t, _comm, _tid, cpu, name, rest in events:
        if name == "syscalls:sys_enter_io_submit":
            cur = {"submit": t, "cpu": cpu}
            continue
        if cur is None:
            continue
        if name == "workqueue:workqueue_execute_start" and "aio_fsync_work" in rest:
            cur.setdefault("work_start", t)
            cur.setdefault("work_cpu", cpu)
        elif "work_start" not in cur:
            continue
        elif name == "block:block_rq_issue" and " WS " in rest:
            cur.setdefault("write_issue", t)
        elif name == "block:block_rq_complete" and " WS " in rest and "write_issue" in cur:
            cur.setdefault("write_done", t)
        elif name == "block:block_rq_issue" and " FF " in rest:
            cur.setdefault("flush_issue", t)
        elif name == "block:block_rq_complete" and " FF " in rest and "flush_issue" in cur:
            cur.setdefault("flush_done", t)
        elif name == "workqueue:workqueue_execute_end" and "aio_fsync_work" in rest:
            cur.setdefault("work_end", t)
        elif name == "syscalls:sys_enter_io_getevents" and "work_end" in cur:
            cur["reaped"] = t
            done.append(cur)
            cur = None
    return done


class Timeline:
    """Who ran on each CPU when, from the scheduler's switches."""

    def __init__(self, events) -> None:
        self._runs: dict[int, list[tuple[float, str]]] = collections.defaultdict(list)
        for t, _comm, _tid, cpu, name, rest in events:
            if name == "sched:sched_switch":
                m = _NEXT.search(rest)
                if m:
                    self._runs[cpu].append((t, f"{m.group(1)} ({m.group(2)})"))
        self._times = {cpu: [t for t, _ in runs] for cpu, runs in self._runs.items()}

    def add(self, cpu: int, start: float, end: float, acc: collections.Counter) -> None:
        """Add to ``acc`` how long each task ran on ``cpu`` between ``start`` and ``end``."""
        runs, times = self._runs.get(cpu, []), self._times.get(cpu, [])
        i = bisect.bisect_right(times, start) - 1
        who, t = (runs[i][1] if i >= 0 else "?"), start
        for j in range(i + 1, len(runs)):
            if runs[j][0] >= end:
                break
            acc[who] += runs[j][0] - t
            who, t = runs[j][1], runs[j][0]
        acc[who] += end - t


def _row(label: str, xs: list[float]) -> str:
    xs = sorted(xs)
    return (f"| {label} | {len(xs)} | {xs[len(xs) // 2]:.0f} | {xs[int(len(xs) * 0.9)]:.0f} "
            f"| {statistics.mean(xs):.0f} |")


def report(events) -> str:
    rounds = rounds_of(events)
    if not rounds:
        return "no fsync rounds through native AIO in the trace (is a flush.messages=1 load running?)"
    on_cpu = sum(1 for r in rounds if r.get("work_cpu") == r["cpu"])
    lines = [f"{len(rounds)} rounds; the kernel worker ran on the CPU that submitted the round "
             f"in {on_cpu} of them.", "",
             "| phase | rounds | p50 us | p90 us | mean us |", "|---|---:|---:|---:|---:|"]
    for label, a, b in PHASES:
        xs = [r[b] - r[a] for r in rounds if a in r and b in r]
        if xs:
            lines.append(_row(label, xs))
    submits = []
    start = None
    for t, _comm, _tid, cpu, name, _rest in events:
        if name == "syscalls:sys_enter_io_submit":
            start = t
        elif name == "syscalls:sys_exit_io_submit" and start is not None:
            submits.append(t - start)
            start = None
    if submits:
        lines.append(_row("the io_submit call itself", submits))
    timeline = Timeline(events)
    lines += ["", "Who had the worker's CPU while a phase waited (share of the phase's time):", ""]
    for label, a, b in WAITS:
        acc: collections.Counter = collections.Counter()
        for r in rounds:
            if a in r and b in r:
                cpu = r["work_cpu"] if b != "reaped" else r["cpu"]
                timeline.add(cpu, r[a], r[b], acc)
        total = sum(acc.values()) or 1
        top = ", ".join(f"{who} {v / total:.0%}" for who, v in acc.most_common(4))
        lines.append(f"- {label}: {top}")
    return "\n".join(lines)


def _ensure_tracefs() -> None:
    if not os.path.isdir("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
    if not os.path.isdir("/sys/kernel/tracing/events/workqueue"):
        sys.exit("tracefs is not available at /sys/kernel/tracing (needs root)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--perf-data", default=None, help="parse this perf.data instead of recording")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is missing (Debian: apt-get install linux-perf)")
    with tempfile.TemporaryDirectory() as tmp:
        data = args.perf_data
        if data is None:
            _ensure_tracefs()
            data = os.path.join(tmp, "perf.data")
            subprocess.run(["perf", "record", "-q", "-a", "-o", data, "-e", ",".join(EVENTS),
                            "--", "sleep", str(args.seconds)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        script = subprocess.run(["perf", "script", "-i", data], check=True, text=True,
                                capture_output=True).stdout
    print(report(parse(script.splitlines())))


if __name__ == "__main__":
    main()
