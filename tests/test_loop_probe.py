import asyncio
import time

from kbroker.loop_probe import LoopLagProbe


def test_readings_from_samples():
    p = LoopLagProbe(window=100, stall_ms=10, log_ms=1e9)
    for v in [1.0] * 98 + [50.0, -3.0]:
        p.record(v)
    s = p.snapshot()
    assert s.samples == 100 and s.max_ms == 50.0 and s.window_max_ms == 50.0
    assert s.p50_ms == 1.0 and s.stalls == 1 and s.p999_ms == 50.0
    assert p.reset_max() == 50.0 and p.snapshot().max_ms == 0.0


def test_probe_sees_a_blocking_callback():
    async def main():
        p = LoopLagProbe(interval_s=0.001, log_ms=1e9).start()
        await asyncio.sleep(0.02)
        time.sleep(0.08)          # hold the loop, as a stall-prone operation would
        await asyncio.sleep(0.02)
        p.stop()
        return p.snapshot()
    s = asyncio.run(main())
    assert s.max_ms >= 50 and s.stalls >= 1 and not LoopLagProbe().running


def test_probe_times_the_garbage_collector():
    import gc

    async def main():
        p = LoopLagProbe(interval_s=0.001, log_ms=1e9).start()
        junk = [[i] for i in range(200_000)]
        gc.collect()
        await asyncio.sleep(0.01)
        p.stop()
        del junk
        return p
    p = asyncio.run(main())
    assert p.snapshot().gc_max_ms > 0 and p._on_gc not in gc.callbacks


def test_a_logged_stall_says_how_much_of_it_was_cpu_on_the_loop(caplog):
    """A lag the loop's thread spent computing reports its CPU time; a lag it spent waiting
    (here a sleep, on a loaded machine a wait for a core) reports little."""
    import logging

    def spin(s):
        t = time.thread_time()
        while time.thread_time() - t < s:
            pass

    async def main():
        p = LoopLagProbe(interval_s=0.001, log_ms=30).start()
        await asyncio.sleep(0.01)
        spin(0.06)                # work on the loop
        await asyncio.sleep(0.01)
        time.sleep(0.06)          # no work: waiting
        await asyncio.sleep(0.01)
        p.stop()
    with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
        asyncio.run(main())
    lags = [(float(m.split("held for ")[1].split()[0]), float(m.rsplit("CPU: ", 1)[1].split()[0]))
            for m in (r.getMessage() for r in caplog.records) if "event loop held" in m]
    # (a loaded machine may add lags of its own: look for the two, not at a count)
    assert any(lag >= 50 and cpu >= 50 for lag, cpu in lags), lags      # the spin
    assert any(lag >= 50 and cpu < 20 for lag, cpu in lags), lags       # the sleep
