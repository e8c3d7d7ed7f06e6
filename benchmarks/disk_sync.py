#!/usr/bin/env python3
"""What a durable append costs on this disk, with no broker in the way.

    python benchmarks/disk_sync.py [--dir DIR] [--appends 400]

A file of zeros is written and synced first (as kbroker's zero fill does ahead of a
``flush.messages=1`` log), then appends of 16 KiB, 256 KiB and 1 MiB are each followed by
``fdatasync``. The fdatasync times bound what any broker can do for a producer that keeps one
request in flight (``benchmarks/results/fsync.md``, session 23). A machine measurement, not a
comparison: the broker benchmarks report ratios against peers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

SIZES = (16 << 10, 256 << 10, 1 << 20)


def durable_appends(fd: int, size: int, appends: int, start: int) -> tuple[list[float], float]:
    """``appends`` writes of ``size`` bytes from ``start``, each fdatasynced: (each
    fdatasync's seconds, seconds for all of it)."""
    buf = os.urandom(size)
    took = []
    t0 = time.perf_counter()
    for i in range(appends):
        os.pwrite(fd, buf, start + i * size)
        t = time.perf_counter()
        os.fdatasync(fd)
        took.append(time.perf_counter() - t)
    return took, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: the temp dir)")
    ap.add_argument("--appends", type=int, default=400)
    args = ap.parse_args()
    fd, path = tempfile.mkstemp(prefix="disk-sync-", dir=args.dir)
    try:
        total = sum(SIZES) * args.appends
        zeros = bytes(1 << 20)
        for _ in range(0, total, len(zeros)):
            os.write(fd, zeros)
        os.fdatasync(fd)
        print("| append | fdatasync p50 / p90 / mean (ms) | durable appends (MB/s) |")
        print("|---:|---:|---:|")
        start = 0
        for size in SIZES:
            took, seconds = durable_appends(fd, size, args.appends, start)
            start += size * args.appends
            took.sort()
            print(f"| {size >> 10} KiB | {took[len(took) // 2] * 1e3:.2f} / {took[int(len(took) * 0.9)] * 1e3:.2f}"
                  f" / {statistics.mean(took) * 1e3:.2f} | {args.appends * size / seconds / 1e6:,.0f} |")
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
