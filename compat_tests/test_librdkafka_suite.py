"""librdkafka's own integration test suite against kbroker (scripts/librdkafka-conformance.sh).

The script fetches Debian's librdkafka source package, builds its test-runner once into
.deps/librdkafka-suite/ (a few minutes on 2 cores; later runs reuse it), starts kbroker on free
loopback ports and runs the curated list of suite tests that kbroker passes. One run for the
module; each suite test is then reported as its own pytest test.

Missing prerequisites (no deb-src entry, no compiler or compression headers, no
confluent_kafka) FAIL with the script's message naming what is missing: CI machines are like
developer machines, so scripts/install-librdkafka-suite-deps.sh must have run.
See compat_tests/LIBRDKAFKA_SUITE.md for every suite test's outcome.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "librdkafka-conformance.sh"
RESULTS = Path(os.environ.get("LIBRDKAFKA_SUITE_RUN") or Path(
    os.environ.get("LIBRDKAFKA_SUITE_DIR", REPO / ".deps" / "librdkafka-suite")) / "runs" / "last") / "results.tsv"

# Build (~1-6 min on 2 cores, once) + the curated run (~5 min in three lanes); each suite test has its own
# timeout inside the script.
TIMEOUT_S = 1500


def _curated() -> list[str]:
    out = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    tags = []
    for line in out.splitlines():
        num, scenario = line.split()
        tags.append(num if scenario == "default" else f"{num}@{scenario}")
    return tags


CURATED = _curated()


@pytest.fixture(scope="module")
def suite_run():
    try:
        proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                              timeout=TIMEOUT_S, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"scripts/librdkafka-conformance.sh did not finish in {TIMEOUT_S}s:\n"
                    f"{(e.stdout or b'')[-3000:]!r}")
    if proc.returncode == 2:
        pytest.fail("librdkafka suite prerequisites missing (run "
                    "scripts/install-librdkafka-suite-deps.sh):\n" + proc.stderr[-3000:])
    results = {}
    if RESULTS.exists():
        for line in RESULTS.read_text().splitlines():
            tag, result, secs, _mode, tests, reason = (line.split("\t") + [""] * 6)[:6]
            results[tag] = (result, secs, tests, reason)
    if not results:
        pytest.fail(f"scripts/librdkafka-conformance.sh exited {proc.returncode} without "
                    f"results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc, results


@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("tag", CURATED)
def test_librdkafka_suite(suite_run, tag):
    proc, results = suite_run
    assert tag in results, f"{tag} was not run:\n{proc.stdout[-2000:]}"
    result, secs, tests, reason = results[tag]
    log = RESULTS.parent / f"{tag}.log"
    assert result == "PASS", f"librdkafka test {tag} ({tests}) {result} after {secs}: {reason}\nlog: {log}"
