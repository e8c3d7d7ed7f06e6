"""The opt-in stall diagnosis names what held the loop: the stack it was held in, and the
callback that ran too long."""

import asyncio
import logging
import sys
import time

from kbroker.loop_probe import LoopLagProbe
from kbroker.net.iteration_budget import IterationBudget


def _hold_the_loop_in_a_named_function(seconds: float, clock=time.perf_counter) -> None:
    end = clock() + seconds
    while clock() < end:   # busy: the GIL is released only at switch intervals
        pass


def _probe_a_hold(caplog, seconds: float) -> None:
    async def main():
        p = LoopLagProbe(interval_s=0.002, log_ms=20).start()
        await asyncio.sleep(0.01)
        _hold_the_loop_in_a_named_function(seconds)
        await asyncio.sleep(0.01)
        p.stop()
    with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
        asyncio.run(main())


def test_a_logged_lag_names_the_function_that_held_the_loop(monkeypatch, caplog):
    monkeypatch.setenv("KBROKER_LOOP_STACKS", "1")
    # The sampler needs the GIL (and, on a busy 2-core CI machine, a core) while the loop
    # holds it: with the broker's 1 ms switch interval and a 0.25 s hold it gets many turns
    # (an 0.08 s hold at Python's 5 ms default once got none in CI).
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        _probe_a_hold(caplog, 0.25)
    finally:
        sys.setswitchinterval(switch)
    held = [r.getMessage() for r in caplog.records if r.getMessage().startswith("held in")]
    assert any("_hold_the_loop_in_a_named_function" in m for m in held), held


def test_no_stacks_unless_asked(monkeypatch, caplog):
    monkeypatch.delenv("KBROKER_LOOP_STACKS", raising=False)
    _probe_a_hold(caplog, 0.05)
    assert any("event loop held" in r.getMessage() for r in caplog.records)
    assert not any(r.getMessage().startswith("held in") for r in caplog.records)


def test_slow_callbacks_are_logged_with_their_cpu_time_and_untimed_after_stop(monkeypatch, caplog):
    monkeypatch.setenv("KBROKER_SLOW_CALLBACK_MS", "20")
    original = asyncio.events.Handle._run

    def busy():   # 40 ms of this thread's CPU (a loaded machine stretches it in wall time)
        _hold_the_loop_in_a_named_function(0.04, time.thread_time)

    def asleep():
        time.sleep(0.04)        # wall time without CPU: not work of the loop's thread

    async def main():
        p = LoopLagProbe(interval_s=0.005, log_ms=1e9).start()
        loop = asyncio.get_running_loop()
        loop.call_soon(busy)
        loop.call_soon(asleep)
        await asyncio.sleep(0.1)
        p.stop()
        loop.call_soon(busy)     # untimed now
        await asyncio.sleep(0.06)
    with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
        asyncio.run(main())
    slow = [r.getMessage() for r in caplog.records if r.getMessage().startswith("callback took")]
    assert len(slow) == 2, slow
    by_name = {m.split(": ", 1)[1].split()[0].split(".")[-1]: m for m in slow}
    cpu = {k: float(m.split("CPU ")[1].split(" ms")[0]) for k, m in by_name.items()}
    assert cpu["busy"] >= 30 and cpu["asleep"] < 10, slow
    assert asyncio.events.Handle._run is original


def test_an_iteration_of_many_short_callbacks_is_logged_with_its_total_and_untimed_after_stop(monkeypatch, caplog):
    monkeypatch.setenv("KBROKER_SLOW_ITERATION_MS", "20")
    monkeypatch.setenv("KBROKER_SLOW_CALLBACK_MS", "20")   # both on: stop must undo both
    original_run = asyncio.events.Handle._run
    original_run_once = asyncio.base_events.BaseEventLoop._run_once

    def short():
        _hold_the_loop_in_a_named_function(0.006)

    async def a_request_handler():
        short()

    async def main():
        p = LoopLagProbe(interval_s=0.005, log_ms=1e9).start()
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.02)
        budget = IterationBudget.of(loop)
        for _ in range(4):          # one iteration: 30 ms, no callback over 20 ms
            loop.call_soon(short)
        loop.create_task(budget.starting_task(a_request_handler()))   # its first step, timed
        await asyncio.sleep(0.05)
        p.stop()
        for _ in range(5):          # untimed now
            loop.call_soon(short)
        await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
        asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert not any(m.startswith("callback took") for m in messages), messages
    slow = [m for m in messages if m.startswith("loop iteration took")]
    assert len(slow) == 1, slow
    assert float(slow[0].split()[3]) >= 25 and "short" in slow[0], slow
    assert "task " in slow[0] and "a_request_handler" in slow[0], slow   # a task: by its coroutine
    assert int(slow[0].split(" in ")[1].split()[0]) >= 5, slow
    assert asyncio.events.Handle._run is original_run
    assert asyncio.base_events.BaseEventLoop._run_once is original_run_once


def test_a_slow_slice_names_the_sliced_job_and_where_it_paused(monkeypatch, caplog):
    from kbroker.slices import run_in_slices
    monkeypatch.setenv("KBROKER_SLOW_ITERATION_MS", "20")

    def a_walk_with_one_long_step():
        yield
        _hold_the_loop_in_a_named_function(0.03)
        yield            # the slice ends here: its time is up
        yield

    async def main():
        p = LoopLagProbe(interval_s=0.005, log_ms=1e9).start()
        await asyncio.sleep(0.01)
        await run_in_slices(a_walk_with_one_long_step())
        await asyncio.sleep(0.01)
        p.stop()
    with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
        asyncio.run(main())
    slow = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loop iteration took")]
    assert any("_Turns._run" in m and "a_walk_with_one_long_step test_loop_diagnostics.py:" in m for m in slow), slow


class _NamedForTheCollectionLog:
    """Objects in cycles that a full collection walks; their type is named in its log line."""

    def __init__(self) -> None:
        self.me = self


def test_a_slow_collection_is_logged_with_what_it_walked_and_unlogged_after_stop(monkeypatch, caplog):
    import gc
    monkeypatch.setenv("KBROKER_GC_LOG_MS", "0")

    async def main():
        p = LoopLagProbe(interval_s=0.002).start()
        keep = [_NamedForTheCollectionLog() for _ in range(50_000)]
        gc.collect()
        p.stop()
        gc.collect()   # after stop: not logged
        return keep
    gc.disable()   # only the two collections asked for run
    try:
        with caplog.at_level(logging.WARNING, logger="kbroker.loop"):
            asyncio.run(main())
    finally:
        gc.enable()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("garbage collection")]
    assert len(logged) == 1, logged
    assert "generation 2" in logged[0] and "on thread MainThread" in logged[0]
    walked = int(logged[0].split(": ", 1)[1].split(" objects walked")[0])
    assert walked >= 50_000
    assert "_NamedForTheCollectionLog 50000" in logged[0]
