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


def test_a_logged_stall_says_how_long_the_loop_waited_for_a_core(caplog):
    """A lag in which the loop's thread was runnable but another process held its only core
    is reported as core-wait, not as work on the loop."""
    import logging
    import multiprocessing
    import os

    if not os.path.exists("/proc/thread-self/schedstat"):
        import pytest
        pytest.skip("no /proc/thread-self/schedstat (not Linux): the run-queue delay is unknown")
    cpu = sorted(os.sched_getaffinity(0))[0]
    ctx = multiprocessing.get_context("fork")
    hog = ctx.Process(target=_hog_one_core, args=(cpu, 1.0), daemon=True)
    before = os.sched_getaffinity(0)

    async def main():
        p = LoopLagProbe(interval_s=0.001, log_ms=30).start()
        await asyncio.sleep(0.2)          # the hog is spinning by now
        t = time.perf_counter()
        while time.perf_counter() - t < 0.15:   # runnable all along, sharing one core
            pass
        await asyncio.sleep(0.01)
        p.stop()
    hog.start()
    try:
        os.sched_setaffinity(0, {cpu})    # this (the loop's) thread only
        with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
            asyncio.run(main())
    finally:
        os.sched_setaffinity(0, before)
        hog.terminate()
        hog.join()
    waits = [float(m.rsplit("waiting for a core: ", 1)[1].split()[0])
             for m in (r.getMessage() for r in caplog.records) if "event loop held" in m]
    assert any(w >= 30 for w in waits), waits


def _hog_one_core(cpu: int, seconds: float) -> None:
    import os
    os.sched_setaffinity(0, {cpu})
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def test_the_loop_threads_cpu_and_core_wait_are_exported():
    """kbroker_event_loop_cpu_seconds_total grows by the CPU the loop's thread burns; the
    families are read from the thread's schedstat, so they count that thread only."""
    import threading

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from kbroker.metrics.loop_lag import LoopLagFamilies

    class _Fam:
        def __init__(self, probe):
            self.f = LoopLagFamilies(probe)

        def collect(self):
            return self.f.families()

    def scrape(probe):
        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Fam(probe))
        return {s.name: s.value for f in text_string_to_metric_families(generate_latest(reg).decode())
                for s in f.samples}

    async def main():
        p = LoopLagProbe(interval_s=0.001, log_ms=1e9).start()
        before = scrape(p)
        end = time.thread_time() + 0.05
        while time.thread_time() < end:     # 50 ms of CPU on the loop's thread
            pass
        def burn():
            stop = time.thread_time() + 0.25
            while time.thread_time() < stop:
                pass
        other = threading.Thread(target=burn)   # 250 ms of CPU, not the loop's
        other.start()
        other.join()
        after = scrape(p)
        p.stop()
        return before, after

    before, after = asyncio.run(main())
    if "kbroker_event_loop_cpu_seconds_total" not in before:
        import pytest
        pytest.skip("no /proc/thread-self/schedstat on this kernel")
    grew = after["kbroker_event_loop_cpu_seconds_total"] - before["kbroker_event_loop_cpu_seconds_total"]
    assert 0.045 <= grew < 0.2, grew
    assert after["kbroker_event_loop_core_wait_seconds_total"] >= before["kbroker_event_loop_core_wait_seconds_total"] >= 0


def test_a_logged_lag_names_the_other_threads_that_waited_for_a_core(caplog):
    """Two threads hashing without the GIL, pinned to one core, wait for it in turn; a lag
    logged meanwhile gives that wait by thread name (Linux schedstat)."""
    import hashlib
    import logging
    import os
    import re
    import threading

    import pytest
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("no /proc/thread-self/schedstat (Linux with schedstats) to read run-queue delays from")
    stop = threading.Event()
    cpu = min(os.sched_getaffinity(0))
    data = bytes(1 << 20)

    def hash_on_one_core():
        os.sched_setaffinity(threading.get_native_id(), {cpu})
        while not stop.is_set():
            hashlib.sha256(data).digest()   # releases the GIL: the two threads share a core, not the GIL

    async def main():
        p = LoopLagProbe(interval_s=0.002, log_ms=20).start()
        await asyncio.sleep(0.01)
        threads = [threading.Thread(target=hash_on_one_core, name=f"hasher-{i}") for i in range(2)]
        for t in threads:
            t.start()
        await asyncio.sleep(1.5)     # the probe's thread list is refreshed every second
        time.sleep(0.2)              # hold the loop while they run
        await asyncio.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
        p.stop()
    with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "other threads without a core" in r.getMessage()]
    held = [m for m in lines if int(re.search(r"held for (\d+) ms", m).group(1)) >= 150]
    assert held, lines
    waited = re.search(r"other threads without a core: (\d+) ms \((.*)\)", held[0])
    assert waited and int(waited.group(1)) >= 50, held[0]
    assert "hasher-" in waited.group(2)
