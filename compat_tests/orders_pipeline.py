"""Shared steps of the orders-pipeline tests (examples/orders on Spark against real brokers):
feed generated orders, run a Spark driver as its own process, check the dead-letter topic."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from compat_tests.brokers import REPO
from examples.orders.kafka_io import dead_letters, produce
from examples.orders.model import MALFORMED, TOPIC, WINDOW_MS, Event, generate, reference_aggregates
from examples.spark_env import local_jar_dirs, local_jars

N = 600


@dataclass
class Orders:
    events: list[Event]
    start_ms: int
    reference: dict                 # the aggregates computed in plain Python
    malformed: dict                 # (partition, offset) -> the malformed event produced there


def feed_orders(bootstrap: str, n: int = N) -> Orders:
    """n orders spread over five minutes of event time ending a minute ago, produced and
    acknowledged, with the reference the pipeline's output must equal."""
    span_ms = 5 * WINDOW_MS
    start_ms = int(time.time() * 1000) - span_ms - WINDOW_MS
    events = generate(n, seed=7, start_ms=start_ms, spacing_ms=span_ms / n)
    acks = produce(bootstrap, events)
    orders = Orders(events, start_ms, reference_aggregates(events),
                    {acks[i]: e for i, e in enumerate(events) if e.malformed})
    assert len(orders.reference) > 20 and 5 <= len(orders.malformed) < n // 10
    return orders


def spark_job(module: str, args: list[str], log) -> subprocess.Popen:
    """A Spark driver in its own process group, so SIGKILL takes its JVM down with it."""
    assert local_jars(), f"Spark's Kafka connector jars not found in {local_jar_dirs()}"
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def kill_job(job: subprocess.Popen | None) -> None:
    if job is not None and job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)


def commits(checkpoint, query: str = "aggregates") -> int:
    """Micro-batches the query has committed to its checkpoint."""
    d = checkpoint / query / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0


def dead_letter_sources(bootstrap: str, orders: Orders) -> set:
    """Check every dead letter against the malformed order it came from; return the sources
    seen. The Kafka sink is at-least-once, so a batch rewritten after a failure may repeat
    one, never alter it; a good order in the topic fails the check."""
    seen = set()
    for d in dead_letters(bootstrap):
        h = d["headers"]
        assert h["source.topic"] == TOPIC
        where = (int(h["source.partition"]), int(h["source.offset"]))
        assert where in orders.malformed, f"a good order in the dead-letter topic: {d}"
        e = orders.malformed[where]
        assert (d["key"], d["value"]) == (e.key, e.value)
        assert int(h["source.timestamp"]) == e.timestamp_ms
        assert h["error"] == MALFORMED[e.malformed]
        seen.add(where)
    return seen
