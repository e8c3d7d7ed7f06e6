"""Helpers for the operations tests: scraping the metrics endpoint, running kbroker tools."""
from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from compat_tests.brokers import REPO


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted label items): value} from GET /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(metrics, name: str, **labels) -> float | None:
    return metrics.get((name, tuple(sorted(labels.items()))))


def kbroker(*args: str, input: str | bytes | None = None, timeout: float = 60, check: bool = True):
    """Run ``python -m kbroker <args>`` as a user would; returns the CompletedProcess."""
    if isinstance(input, str):
        input = input.encode()
    p = subprocess.run([sys.executable, "-m", "kbroker", *args], input=input, capture_output=True,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})
    if check and p.returncode != 0:
        raise AssertionError(f"kbroker {' '.join(args)} exited {p.returncode}:\n{p.stdout.decode()}\n{p.stderr.decode()}")
    return p
