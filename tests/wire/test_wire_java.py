"""Byte-for-byte cross-check against Kafka's own generated Java message classes.

For every message the kafka-clients jar has, at every version both sides support: random
objects (from the schema model) encoded by us -> decoded by Java's XxxData class -> encoded by
Java must give our bytes back. Runs one JVM per jar (tests/wire/java/WireCheck.java) for all
cases. Skipped without java or the jars (scripts/fetch-java-clients.sh).
"""

import random
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from wire_strategies import all_versions, messages, protocol_available, random_struct

REPO = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).parent / "java" / "WireCheck.java"
JARS = {v: REPO / ".deps" / "java" / v for v in ("4.3.0", "3.9.0")}
CASES_PER_VERSION = 4
# Schemas that changed after the 4.0 snapshot we generate from, in APIs that were still early
# access (KIP-932 share groups): kafka-clients 4.3 added LeaderEpoch to this v0.
SCHEMA_DRIFT = {("4.3.0", "ReadShareGroupStateSummaryResponse")}

pytestmark = [
    pytest.mark.skipif(not protocol_available(), reason="kafka-protocol schemas not found"),
    pytest.mark.skipif(shutil.which("java") is None, reason="java not installed"),
    pytest.mark.timeout(240),
]


class JavaCheck:
    """One JVM per jar: ask for version ranges first, then send every case."""

    def __init__(self, jar_dir: Path):
        self.proc = subprocess.Popen(["java", "-cp", str(jar_dir / "*"), str(HELPER)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def ask(self, lines: list[str]) -> list[str]:
        def feed():   # a thread: Java answers while we write, and both pipes are finite
            self.proc.stdin.write("\n".join(lines) + "\n")
            self.proc.stdin.flush()
        t = threading.Thread(target=feed, daemon=True)
        t.start()
        out = [self.proc.stdout.readline().rstrip("\n") for _ in lines]
        t.join()
        assert all(out), self.proc.stderr.read()[-2000:] if self.proc.poll() is not None else out
        return out

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.mark.parametrize("jar", list(JARS), ids=lambda v: f"kafka-clients-{v}")
def test_same_bytes_as_kafka_java(jar):
    jar_dir = JARS[jar]
    if not (jar_dir / f"kafka-clients-{jar}.jar").exists():
        pytest.skip(f"{jar_dir} missing (scripts/fetch-java-clients.sh)")
    msgs = [m for m in messages()]
    java = JavaCheck(jar_dir)
    ranges = java.ask([f"RANGE {m.name}" for m in msgs])
    rng = random.Random(20240607)
    cases, lines = [], []
    covered = set()
    for m, r in zip(msgs, ranges):
        if not r.startswith("RANGE") or (jar, m.name) in SCHEMA_DRIFT:
            continue
        _, lo, hi = r.split()
        ours = all_versions(m)
        if m.latest_unstable:   # an unreleased version may have changed before Java's release
            ours = ours[:-1]
        for v in ours:
            if not int(lo) <= v <= int(hi):
                continue
            covered.add(m.name)
            for _ in range(CASES_PER_VERSION):
                obj = random_struct(m, m.struct, v, rng)
                data = obj.encode(v)
                cases.append((m.name, v, obj, data))
                lines.append(f"{m.name} {v} {data.hex()}")
    assert len(covered) > 150
    results = java.ask(lines)
    java.close()
    failures = []
    for (name, v, obj, data), res in zip(cases, results):
        kind, _, rest = res.partition(" ")
        if kind != "OK" or rest != data.hex():
            failures.append(f"{name} v{v}: {res[:300]}\n  ours {data.hex()[:300]}\n  obj  {obj!r:.600}")
    assert not failures, f"{len(failures)} of {len(cases)} differ:\n" + "\n".join(failures[:10])
