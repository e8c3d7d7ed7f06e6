"""Opt-in diagnosis of event-loop stalls, for benchmarks and for an operator chasing one.
The lag probe (kbroker.loop_probe) says how long the loop was held; these say by what.

* ``StallSampler`` (``KBROKER_LOOP_STACKS=1``): a thread samples the loop thread's stack
  while the probe's tick is overdue; a logged lag is followed by the stacks it was held in.
* ``log_slow_callbacks`` (``KBROKER_SLOW_CALLBACK_MS=N``): every loop callback is timed
  (wall and the thread's CPU), and those over N ms are logged with what they ran: a lag that
  is mostly waiting for a core shows low CPU. asyncio's debug mode logs slow callbacks too,
  but slows every coroutine and task it tracks.
* ``log_slow_iterations`` (``KBROKER_SLOW_ITERATION_MS=N``): every loop iteration's callbacks
  are timed together, and an iteration whose callbacks ran longer than N ms in all is logged
  with how many ran and the longest few. A lag is often no one callback but many middling
  ones in one iteration (a slice of sliced work, the connections' budget, woken requests).
* ``log_slow_collections`` (``KBROKER_GC_LOG_MS=N``): every garbage collection longer than N ms
  is logged with its generation, the objects it walked, the most common types among them and
  the thread it ran on. Every collection's objects are counted as it starts, outside the time
  it reports but not outside the loop's lags: a diagnosis, not for measuring runs.
"""

from __future__ import annotations

import asyncio.base_events
import asyncio.events
import gc
import logging
import sys
import threading
import time
import traceback
from collections import Counter

log = logging.getLogger("kbroker.loop")


class StallSampler:
    """Samples the loop thread's stack every millisecond while the probe's tick is overdue.
    The GIL hands the sampling thread a turn at least every switch interval (5 ms), so a
    long hold gets a few samples: enough to name the code that held it."""

    def __init__(self, overdue_ms, every_s: float = 0.001, late_ms: float = 3.0) -> None:
        self.overdue_ms = overdue_ms   # () -> how late the probe's tick is now (ms)
        self.every_s = every_s
        self.late_ms = late_ms
        self._stacks: Counter[str] = Counter()   # shared with the sampling thread
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop_thread: int) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(loop_thread,), daemon=True,
                                        name="loop-stall-sampler")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self, loop_thread: int) -> None:
        while not self._stop.wait(self.every_s):
            if self.overdue_ms() < self.late_ms:
                continue
            frame = sys._current_frames().get(loop_thread)
            if frame is None:
                continue
            where = "".join(traceback.format_stack(frame, limit=10))   # the innermost ten
            with self._lock:
                self._stacks[where] += 1

    def report(self, log_it: bool) -> None:
        with self._lock:
            stacks, self._stacks = self._stacks, Counter()
        if log_it and stacks:
            for where, n in stacks.most_common(3):
                log.warning("held in (%d samples):\n%s", n, where)


def log_slow_callbacks(limit_ms: float):
    """Time every callback of every asyncio loop in this process from now on; returns the
    function that stops it."""
    limit = limit_ms / 1000
    run = asyncio.events.Handle._run

    def timed_run(handle) -> None:
        dt, cpu, cb = _timed(run, handle)
        if dt > limit:
            owner = getattr(cb, "__self__", None)
            log.warning("callback took %.1f ms (loop thread CPU %.1f ms): %s %s", dt * 1e3,
                        cpu * 1e3, getattr(cb, "__qualname__", cb),
                        "" if owner is None else repr(owner)[:160])

    def undo() -> None:
        asyncio.events.Handle._run = run
    asyncio.events.Handle._run = timed_run
    return undo


def log_slow_iterations(limit_ms: float, top: int = 5):
    """Time every callback of every asyncio loop in this process, summed per loop iteration
    (from one ``select`` to the next), from now on; returns the function that stops it."""
    limit = limit_ms / 1000
    run = asyncio.events.Handle._run
    run_once = asyncio.base_events.BaseEventLoop._run_once
    spent: list = []     # this iteration's (seconds, CPU seconds, callback), one loop thread at a time

    def timed_run(handle) -> None:
        spent.append(_timed(run, handle))

    def timed_run_once(loop) -> None:
        if spent:
            total = sum(s[0] for s in spent)
            if total > limit:
                longest = sorted(spent, key=lambda s: -s[0])[:top]
                log.warning("loop iteration took %.1f ms (CPU %.1f ms) in %d callbacks; longest: %s",
                            total * 1e3, sum(s[1] for s in spent) * 1e3, len(spent),
                            "; ".join(f"{s[0] * 1e3:.1f} {_callback_name(s[2])}" for s in longest))
            spent.clear()
        run_once(loop)

    def undo() -> None:
        asyncio.events.Handle._run = run
        asyncio.base_events.BaseEventLoop._run_once = run_once
    asyncio.events.Handle._run = timed_run
    asyncio.base_events.BaseEventLoop._run_once = timed_run_once
    return undo


def log_slow_collections(limit_ms: float, top: int = 12):
    """Log every collection over ``limit_ms`` from now on; returns the function that stops it."""
    walked: list = []    # (objects, their type counts, start time) of the collection running

    def on_gc(phase: str, info: dict) -> None:
        gen = info["generation"]
        if phase == "start":
            objects = [o for g in range(gen + 1) for o in gc.get_objects(g)]
            types = Counter(type(o).__qualname__ for o in objects)
            walked[:] = [len(objects), types, time.perf_counter()]
            del objects
        elif walked:
            ms = (time.perf_counter() - walked[2]) * 1000.0
            if ms > limit_ms:
                n, types = walked[0], walked[1]
                log.warning("garbage collection of generation %d took %.1f ms on thread %s: %d objects "
                            "walked, %d collected, %d frozen%s", gen, ms, threading.current_thread().name,
                            n, info["collected"], gc.get_freeze_count(),
                            "; most: " + ", ".join(f"{t} {c}" for t, c in types.most_common(top)))
            walked.clear()

    def undo() -> None:
        if on_gc in gc.callbacks:
            gc.callbacks.remove(on_gc)
    gc.callbacks.insert(0, on_gc)   # first: the probe's own timing starts after the count
    return undo


def _timed(run, handle) -> tuple[float, float, object]:
    """Run ``handle`` with ``run``: (seconds, the loop thread's CPU seconds, its callback)."""
    cb = handle._callback        # (cleared if the callback cancels its own handle)
    t0, c0 = time.perf_counter(), time.thread_time()
    run(handle)
    return time.perf_counter() - t0, time.thread_time() - c0, cb


def _callback_name(cb) -> str:
    """A task step names its coroutine and where it stopped; the sliced-work runner's step
    names the job that had the slice and where that stopped; other callbacks their qualified
    name."""
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        coro = getattr(coro, "wrapped", coro)   # a request's first step, timed (net.iteration_budget)
        name = f"task {getattr(coro, '__qualname__', coro)}"
        if not owner.get_name().startswith("Task-"):
            name += f" [{owner.get_name()}]"
        frame = getattr(coro, "cr_frame", None)
        runner = frame.f_locals.get("self") if frame is not None else None
        job = getattr(runner, "last_job", None)   # kbroker.slices._Turns
        return f"{name} ({_stopped_at(job or coro)})"
    return str(getattr(cb, "__qualname__", cb))


def _stopped_at(coro) -> str:
    """The innermost frame a coroutine or generator is suspended in: 'function file:line'
    ('finished' once it returned)."""
    where = None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        where = frame
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    if where is None:
        return "finished"
    return f"{where.f_code.co_qualname} {where.f_code.co_filename.rsplit('/', 1)[-1]}:{where.f_lineno}"
