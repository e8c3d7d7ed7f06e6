#!/usr/bin/env python3
"""How long a single append waits while another process keeps the filesystem's metadata
busy, with no broker in the way.

    python benchmarks/append_alloc_wait.py [--dir DIR] [--dirs 9000] [--rounds 2]

One thread appends 16 KiB every millisecond to a file, as kbroker's event loop appends to a
partition's active segment, and times each ``pwrite``. Meanwhile another process creates
``--dirs`` partition-like directories (four files each) on the same filesystem and syncs it
every 1,000, as a broker creating that many partitions does. Each file-space policy runs
``--rounds`` times, alternating:

- ``grow``: every append grows the file (kbroker before session 27, with
  ``log.allocate.ahead=false``);
- ``length ahead``: the file's length set 1 GiB ahead with ``ftruncate``, blocks left
  unallocated (Kafka's ``preallocate``);
- ``allocated ahead``: a worker thread ``fallocate``s 64 KiB to 8 MiB ahead of the appends, a
  quarter of what the file holds (``kbroker.log.fill_ahead``, the default since session 27).

An append into a hole of its file reserves a delayed-allocation block under the inode's
block-map lock (ext4's ``i_data_sem``), which the kernel's write-back holds while it allocates
the file's earlier blocks and waits for the metadata I/O the burst keeps busy (traced in
session 28 on this machine's ext4, which runs without a journal). A machine measurement, not
a comparison: ``bench_stalls.py`` measures the brokers side by side.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbroker.log import fill_ahead  # noqa: E402
from kbroker.log.segment import index_file, log_file, time_index_file  # noqa: E402

APPEND = 16 << 10
INTERVAL_S = 0.001
MAX_S = 120.0
POLICIES = ("grow", "length ahead", "allocated ahead")


def metadata_burst(root: str, dirs: int) -> None:
    """Partition-like directories under ``root`` (four files each, one with a few bytes),
    the filesystem synced every 1,000: what a broker creating that many partitions does to
    the filesystem's metadata. (Also bench_stalls.py's scenario.)"""
    for i in range(dirs):
        d = os.path.join(root, f"t-{i}")
        os.mkdir(d)
        for path in (log_file(d, 0), index_file(d, 0), time_index_file(d, 0),
                     os.path.join(d, "leader-epoch-checkpoint")):
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            if path.endswith("checkpoint"):
                os.write(fd, b"0\n0\n")
            os.close(fd)
        if i % 1000 == 999:
            os.sync()


def appends_during_burst(workdir: Path, policy: str, dirs: int) -> list[float]:
    """Seconds each append took while the burst ran."""
    root = workdir / "burst"
    root.mkdir()
    fd = os.open(workdir / "log", os.O_CREAT | os.O_WRONLY, 0o644)
    fill = fill_ahead.FillAhead(0, zeros=False) if policy == "allocated ahead" else None
    if policy == "length ahead":
        os.ftruncate(fd, 1 << 30)
    buf = os.urandom(APPEND)
    took, pos = [], 0
    child = multiprocessing.get_context("spawn").Process(target=metadata_burst, args=(str(root), dirs))
    child.start()
    try:
        end = time.monotonic() + MAX_S
        while child.is_alive() and time.monotonic() < end:
            if fill is not None:
                fill.claim(pos + APPEND)
            t = time.perf_counter()
            os.pwrite(fd, buf, pos)
            took.append(time.perf_counter() - t)
            pos += APPEND
            if fill is not None:
                fill.ahead(1 << 40, fd)
            time.sleep(INTERVAL_S)
    finally:
        child.join()
        if fill is not None:
            fill.stop()
        os.close(fd)
        shutil.rmtree(root, ignore_errors=True)
        os.unlink(workdir / "log")
        os.sync()
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="a directory on the filesystem to measure (default: the temp dir)")
    ap.add_argument("--dirs", type=int, default=9000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    results: dict[str, list[list[float]]] = {p: [] for p in POLICIES}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="alloc-wait-") as tmp:
        for _ in range(args.rounds):
            for policy in POLICIES:
                results[policy].append(appends_during_burst(Path(tmp), policy, args.dirs))
    print(f"{APPEND >> 10} KiB appends every {INTERVAL_S * 1000:.0f} ms beside {args.dirs:,} directories "
          f"created and synced every 1,000 ({args.rounds} rounds, alternating)\n")
    print("| file space | appends | p50 us | p99 us | max ms per round | appends over 10 ms |")
    print("|---|---:|---:|---:|---|---:|")
    for policy, runs in results.items():
        every = sorted(x for run in runs for x in run)
        if not every:
            continue
        print(f"| {policy} | {len(every):,} | {statistics.median(every) * 1e6:.0f} "
              f"| {every[int(len(every) * 0.99)] * 1e6:.0f} "
              f"| {', '.join(f'{max(run) * 1e3:.1f}' for run in runs)} "
              f"| {sum(x > 0.010 for x in every)} |")


if __name__ == "__main__":
    main()
