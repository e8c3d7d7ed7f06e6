"""The whole orders pipeline in one command: start a kbroker, run the streaming job, produce
orders into it live, wait until the output matches a plain-Python reference, replay a range
with the batch job, then stop everything.

    python -m examples.orders [--count 2000] [--rate 200] [--bootstrap HOST:PORT] [--keep]

Exit status 0 means every check held. Spark's Kafka connector comes from local jars when
they are there (see examples/spark_env.py), else from Maven Central via spark.jars.packages.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from examples.orders.kafka_io import create_topics, dead_letters, latest_aggregates, produce
from examples.orders.model import WINDOW_MS, generate, minute, reference_aggregates

REPO = Path(__file__).resolve().parent.parent.parent


def spark_job(module: str, args: list[str], log) -> subprocess.Popen:
    """A Spark driver in its own process group (its JVM is a child of it)."""
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_job(job: subprocess.Popen, timeout: float = 60) -> int | None:
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)  # the job stops its queries and exits
        try:
            job.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
    return job.returncode


def wait_until(check, timeout: float, interval: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def run(args, work: Path) -> int:
    t0 = time.monotonic()

    def say(text):
        print(f"[{time.monotonic() - t0:6.1f}s] {text}", flush=True)

    broker = None
    job = None
    log_path = work / "spark.log"
    log = open(log_path, "ab")
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            from compat_tests.brokers import BrokerProcess
            broker = BrokerProcess(work / "kbroker").start()
            bootstrap = broker.bootstrap
            say(f"kbroker on {bootstrap} (data in {work / 'kbroker'})")
        create_topics(bootstrap)
        job = spark_job("examples.orders.stream_job",
                        ["--bootstrap", bootstrap, "--checkpoint", str(work / "checkpoint")], log)
        say(f"streaming job started (pid {job.pid}, log {log_path})")

        span_ms = args.span_minutes * 60_000
        start_ms = int(time.time() * 1000 - span_ms)
        events = generate(args.count, seed=args.seed, start_ms=start_ms,
                          spacing_ms=span_ms / args.count)
        produce(bootstrap, events, rate=args.rate)
        reference = reference_aggregates(events)
        bad = sum(1 for e in events if e.malformed)
        say(f"produced {len(events)} orders ({bad} malformed) at {args.rate}/s")

        done = wait_until(lambda: job.poll() is not None or (
            latest_aggregates(bootstrap) == reference and len(dead_letters(bootstrap)) >= bad),
            timeout=args.timeout)
        if job.poll() is not None:
            say(f"streaming job exited early ({job.returncode}); see {log_path}")
            return 1
        code = stop_job(job)
        say(f"streaming job stopped (exit {code})")
        if not done:
            say("FAIL: the aggregates did not reach the reference in time")
            return 1
        letters = dead_letters(bootstrap)
        say(f"aggregates: {len(reference)} rows (category x minute) equal the reference; "
              f"dead letters: {len(letters)} for {bad} malformed orders")

        from_ms = start_ms - start_ms % WINDOW_MS + WINDOW_MS
        to_ms = from_ms + 2 * WINDOW_MS
        out = work / "batch.json"
        job = spark_job("examples.orders.batch_job",
                        ["--bootstrap", bootstrap, "--from", minute(from_ms), "--to", minute(to_ms),
                         "--out", str(out)], log)
        if job.wait(args.timeout) != 0:
            say(f"batch job failed; see {log_path}")
            return 1
        replayed = json.loads(out.read_text())
        ok = replayed == reference_aggregates(events, from_ms, to_ms)
        say(f"batch replay {minute(from_ms)} .. {minute(to_ms)}: {len(replayed)} rows, "
              f"{'equal to' if ok else 'DIFFERENT from'} the reference")
        return 0 if ok else 1
    finally:
        if job is not None:
            stop_job(job)
        log.close()
        if broker is not None:
            broker.stop()
            say("kbroker stopped")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="use this broker instead of starting a kbroker")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=200, help="orders per second")
    ap.add_argument("--span-minutes", type=float, default=5, help="event time the orders cover")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="orders-"))
    try:
        return run(args, work)
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            import shutil
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
