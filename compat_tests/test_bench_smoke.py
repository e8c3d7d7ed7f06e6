"""Smoke runs of the scale benchmarks (tiny sizes, kbroker only): each script starts its
brokers, runs every step and writes a report without errors. Timings are not checked."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

RUNS = {
    "bench_clients": ["--kbroker-only", "--quick", "--repeat", "1", "--only", "1024 B, acks=1, none"],
    "bench_fsync": ["--brokers", "kbroker", "--records", "400", "--producers", "1,2", "--trials", "1", "--warmup"],
    "bench_many_clients": ["--brokers", "kbroker", "--connections", "30", "--crowds", "2,3", "--records", "50"],
    "bench_offsets_load": ["--brokers", "kbroker", "--commits", "20", "--partitions", "20", "--groups", "3"],
    "bench_cores": ["--partitions", "6", "--records", "300", "--trials", "1"],
    # (the heartbeat producer in a process of its own, the quiet gate with no other broker)
    "bench_stalls": ["--brokers", "kbroker", "--only", "first consumer group|another process", "--burst-dirs", "200"],
    "bench_scale": ["--brokers", "kbroker", "--partitions", "3", "--records", "300", "--rows-only",
                    "--from-beginning", "--client-stats-ms", "250"],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(RUNS))
def test_benchmark_runs_and_reports(script, tmp_path):
    out = tmp_path / "report.md"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / f"{script}.py"), *RUNS[script], "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    text = out.read_text()
    assert "| kbroker" in text or "| 1 process" in text or "| produce" in text
    assert "Errors:" not in text and "n/a" not in text, text
    if script == "bench_stalls":
        assert "loop over the whole run" in text, text
