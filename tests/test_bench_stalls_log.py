"""bench_stalls reads kbroker's logged lags: 'held' is a lag less its loop thread's wait for a
core; less the other threads' wait too, it is a lower bound of the broker's own hold."""
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from benchmarks.bench_stalls import held_lags  # noqa: E402

LOG = """\
[2026-12-08 00:37:19,549] WARNING event loop held for 61 ms (garbage collector: 10 ms, loop thread CPU: 14 ms, \
waiting for a core: 1 ms, other threads without a core: 40 ms (log-admin_0 40)) (kbroker.loop)
[2026-12-08 00:37:20,100] WARNING event loop held for 30 ms (garbage collector: 0 ms, loop thread CPU: 14 ms, \
waiting for a core: 25 ms) (kbroker.loop)
[2026-12-08 00:37:21,000] WARNING event loop held for 16 ms (garbage collector: 0 ms, loop thread CPU: 2 ms, \
waiting for a core: 0 ms) (kbroker.loop)
[2026-12-08 00:39:00,000] WARNING event loop held for 500 ms (garbage collector: 0 ms, loop thread CPU: 2 ms, \
waiting for a core: 0 ms) (kbroker.loop)
"""


def test_held_and_the_lower_bound_without_the_other_threads_core_wait(tmp_path):
    log = tmp_path / "kbroker.log"
    log.write_text(LOG)
    t0 = datetime.datetime(2026, 12, 8, 0, 37).timestamp()
    worst, at, over, own, own_over = held_lags(log, t0, t0 + 60)   # the last line is outside
    assert (worst, over) == (60.0, 2)                                # 61-1 and 16; 30-25 is 5
    assert at == datetime.datetime(2026, 12, 8, 0, 37, 19, 549000).timestamp()
    assert (own, own_over) == (20.0, 2)                              # 61-1-40 and 16
