"""Crash tests with real processes: a writer killed with SIGKILL mid-append.

Without fsync a killed process loses nothing (the page cache keeps its writes), so every
acknowledged append must be there after recovery, and the log must be exactly the prefix
the writer produced: contiguous offsets, each record's value its own offset.
"""

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_writer_and_kill(log_dir, prealloc, compression, acks_wanted, timeout=20.0):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_writer.py"), log_dir,
                          prealloc, str(compression)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    acked = -1
    buf = b""
    n = 0
    deadline = time.monotonic() + timeout
    try:
        while n < acks_wanted:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("writer too slow")
            r, _, _ = select.select([p.stdout], [], [], left)
            if not r:
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError("writer died: " + p.stderr.read().decode()[-2000:])
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                acked = int(line)
                n += 1
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        p.stdout.close()
        p.stderr.close()
    assert p.returncode == -signal.SIGKILL
    return acked


def check_log(log_dir, acked, torn=(": torn batch",)):
    lm = LogManager([log_dir], LogConfig.from_props({"segment.bytes": "32768"}))
    try:
        assert not lm.load_report.clean_dirs  # no clean-shutdown marker: recovery ran
        rep = lm.load_report.recovered[("crash", 0)]
        log = lm.get("crash", 0)
        assert log.log_end_offset >= acked + 1
        if rep.damaged:
            # SIGKILL can cut a pwrite between pages (the kernel checks for fatal signals per
            # page), leaving a torn batch that was never acknowledged. Only that may be cut:
            # one torn tail, nothing deleted, and every acknowledged offset still below it.
            assert any(t in rep.reason for t in torn), rep   # "segment N: torn batch: ..."
            assert not rep.deleted_segments, rep
            assert rep.truncated_at_offset == log.log_end_offset > acked, rep
        expect = 0
        for b in log.batches(0):
            assert b.verify_crc()
            assert b.base_offset == expect
            for r in b.records():
                assert r.offset == expect
                assert r.value.split(b".")[0] == b"%d" % expect
                expect += 1
        assert expect == log.log_end_offset
        return log.log_end_offset, rep.zero_tail_bytes
    finally:
        lm.abandon()


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("prealloc,compression", [("false", 0), ("true", 0), ("false", 4),
                                                  ("zerofill", 0)])
def test_sigkill_mid_append_keeps_every_acknowledged_batch(tmp_path, prealloc, compression):
    d = str(tmp_path / "logs")
    end = 0
    # over zeros written ahead, a batch cut short has its full length in the file: its CRC fails
    torn = (": torn batch", ": corrupt batch: CRC mismatch") if prealloc == "zerofill" else (": torn batch",)
    zeros = 0
    for round_, wanted in enumerate((300, 700, 150)):
        acked = run_writer_and_kill(d, prealloc, compression, wanted)
        assert acked >= end  # the writer resumed at the recovered log end
        end, z = check_log(d, acked, torn)
        zeros += z
    if prealloc != "false":
        assert zeros > 0     # the kills left zeros after the log, and recovery cut them
    segs = [n for n in os.listdir(os.path.join(d, "crash-0")) if n.endswith(".log")]
    assert len(segs) > 3  # the kills hit a log with several rolled segments
