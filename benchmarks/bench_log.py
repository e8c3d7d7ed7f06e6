#!/usr/bin/env python3
"""Segment log throughput next to dd on the same disk, in the same run.

    python benchmarks/bench_log.py [--dir DIR] [--mb 1024] [--fsync]

Append: 1 KiB records in 16 KiB and 1 MiB batches, one PartitionLog.append per request
(validation + CRC32C + offset assignment + one pwrite), default topic config (1 GiB
segments, no fsync: like Kafka, the OS writes back). Peer: ``dd if=/dev/zero bs=1M``
(write, page cache) over the same number of bytes in the same directory.
Read: PartitionLog.read (1 MiB fetches) + os.sendfile of the regions to /dev/null and to
a socket pair drained by a thread; peer: ``dd if=<segment> of=/dev/null bs=1M``.
With --fsync both sides end with an fsync (dd conv=fdatasync, log.flush()).

Prints a table with MB/s (10^6 bytes/s) and ratios. Not a test: numbers vary by machine.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kbroker.log.config import LogConfig  # noqa: E402
from kbroker.log.partition_log import PartitionLog  # noqa: E402
from kbroker.wire.records import BatchBuilder  # noqa: E402

MB = 1_000_000


def dd(args: list[str]) -> tuple[int, float]:
    """Run dd, return (bytes, seconds) as dd reports them."""
    p = subprocess.run(["dd", *args], capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) bytes.*copied, ([\d.e+-]+) s", p.stderr)
    if not m:
        raise RuntimeError(f"cannot parse dd output: {p.stderr!r}")
    return int(m.group(1)), float(m.group(2))


def drop_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def make_batch(records: int, record_size: int = 1024) -> bytearray:
    b = BatchBuilder()
    value = os.urandom(record_size - 24)
    for i in range(records):
        b.append(key=b"key-%08d" % i, value=value, timestamp=1_700_000_000_000)
    return bytearray(b.build())


def bench_append(d: str, batch_records: int, total_bytes: int, fsync: bool) -> tuple[float, PartitionLog]:
    path = os.path.join(d, f"bench-{batch_records}")
    shutil.rmtree(path, ignore_errors=True)
    log = PartitionLog.open(path, LogConfig(), 0)
    buf = make_batch(batch_records)
    n = max(1, total_bytes // len(buf))
    now = 1_700_000_000_000
    append = log.append
    t0 = time.perf_counter()
    for _ in range(n):
        append(buf, now)
    if fsync:
        log.flush()
    dt = time.perf_counter() - t0
    return n * len(buf) / dt / MB, log


def bench_read(log: PartitionLog, sink: str, batch_size: int, batch_records: int,
               fetch_bytes: int = 1 << 20) -> float:
    end = log.log_end_offset
    if sink == "devnull":
        out = os.open("/dev/null", os.O_WRONLY)
        reader = None
    else:
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        out = a.fileno()

        def drain() -> None:
            buf = bytearray(1 << 20)
            while b.recv_into(buf):
                pass

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
    total = 0
    offset = log.log_start_offset
    t0 = time.perf_counter()
    while offset < end:
        r = log.read(offset, fetch_bytes)
        total += r.sendfile(out)
        # a consumer continues after the last whole batch it got (batches are uniform here)
        offset += max(1, r.size // batch_size) * batch_records
    dt = time.perf_counter() - t0
    if reader is not None:
        a.close()
        reader.join()
        b.close()
    else:
        os.close(out)
    return total / dt / MB


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="directory on the disk to test (default: a temp dir)")
    ap.add_argument("--mb", type=int, default=1024, help="MiB written per case (default 1024)")
    ap.add_argument("--fsync", action="store_true", help="end each write with an fsync")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians shown")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="bench-log-")
    os.makedirs(base, exist_ok=True)
    total = args.mb << 20
    rows = []
    ddfile = os.path.join(base, "dd.bin")
    try:
        # alternate peer and log runs so both see the same disk state; report medians
        dd_w, app16, app1m, dd_r, rd_null, rd_sock = [], [], [], [], [], []
        for _round in range(args.rounds):
            dd_args = ["if=/dev/zero", f"of={ddfile}", "bs=1M", f"count={args.mb}"]
            if args.fsync:
                dd_args.append("conv=fdatasync")
            drop_file(ddfile)
            os.sync()  # every write case starts with no dirty pages queued
            nbytes, secs = dd(dd_args)
            dd_w.append(nbytes / secs / MB)
            os.sync()
            drop_file(ddfile)
            rate, log16 = bench_append(base, 16, total, args.fsync)
            app16.append(rate)
            log16.close()
            os.sync()
            shutil.rmtree(log16.dir, ignore_errors=True)
            os.sync()
            rate, log = bench_append(base, 1024, total, args.fsync)
            app1m.append(rate)
            seg_path = log.segments[0].path
            nbytes, secs = dd([f"if={seg_path}", "of=/dev/null", "bs=1M"])
            dd_r.append(nbytes / secs / MB)
            bsize = log.segments[0].frame_at(0)[1]
            rd_null.append(bench_read(log, "devnull", bsize, 1024))
            rd_sock.append(bench_read(log, "socketpair", bsize, 1024))
            log.close()
            shutil.rmtree(log.dir, ignore_errors=True)
        dw, dr = median(dd_w), median(dd_r)
        rows.append(("dd write bs=1M" + (" +fdatasync" if args.fsync else ""), dw, 1.0))
        rows.append(("append 16 KiB batches (16 x 1 KiB)", median(app16), median(app16) / dw))
        rows.append(("append 1 MiB batches (1024 x 1 KiB)", median(app1m), median(app1m) / dw))
        rows.append(("dd read bs=1M (page cache)", dr, 1.0))
        rows.append(("read+sendfile 1 MiB fetches -> /dev/null", median(rd_null), median(rd_null) / dr))
        rows.append(("read+sendfile 1 MiB fetches -> socketpair", median(rd_sock), median(rd_sock) / dr))
    finally:
        drop_file(ddfile)
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
        else:
            for n in os.listdir(base):
                if n.startswith("bench-"):
                    shutil.rmtree(os.path.join(base, n), ignore_errors=True)

    print(f"\nsegment log benchmark: {args.mb} MiB per case, median of {args.rounds} rounds, "
          f"dir {base}, "
          f"{'fsync at end' if args.fsync else 'no fsync (page cache)'}")
    w = max(len(r[0]) for r in rows)
    print(f"{'case'.ljust(w)}  {'MB/s':>9}  {'ratio vs dd':>11}")
    print("-" * (w + 24))
    for label, rate, ratio in rows:
        print(f"{label.ljust(w)}  {rate:9.1f}  {ratio:11.2f}")
    target = rows[2][2]
    print(f"\n1 MiB-batch append / dd write = {target:.2f} (target >= 0.60)")


if __name__ == "__main__":
    main()
