"""Event-loop lag probe: how late the loop runs a timer, i.e. how long something held it.

A Python broker's event loop is one thread: any step that holds it (a big Metadata response
built in one go, a thousand partition directories created in one callback) delays every
client, and in a cluster also heartbeats and fetches, so a stalled node looks dead. The probe
schedules a callback every ``interval_s`` and records how much later than asked it ran.

Readings are a plain object (``snapshot()``) for the metrics endpoint and benchmarks:
the largest lag ever and in the current window, percentiles over the last ``window``
samples, and a count of lags above ``stall_ms`` (Kafka-style ``*-max``/``*-avg`` metrics can
be derived from it). A lag above ``log_ms`` is logged as a warning with its size, so a stall
in the field leaves a trace in the broker log, with the CPU time the loop's thread used
since the previous sample: in a lag with little CPU the loop's thread was not running at all
(waiting for a core on a loaded machine, or for the GIL held by another thread), which is
not work on the loop. On Linux the log also gives the part of the lag the thread spent
runnable but without a core (the scheduler's run-queue delay, from
``/proc/thread-self/schedstat``): what is left after CPU and that is the GIL or a blocking call.

It reads ``loop.time()`` (the loop's own monotonic clock): it measures the runtime, it is not
logic that schedules anything for clients.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass

from kbroker.loop_diagnostics import StallSampler, log_slow_callbacks, log_slow_collections, log_slow_iterations

log = logging.getLogger("kbroker.loop")


@dataclass(frozen=True)
class LagSnapshot:
    samples: int          # samples taken since start
    max_ms: float         # largest lag since start (or since reset_max)
    window_max_ms: float  # largest lag among the last `window` samples
    p50_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    stalls: int           # lags above stall_ms since start
    stall_ms: float
    gc_max_ms: float      # longest garbage-collector pause seen (any generation)
    gc_ms_total: float    # time spent in the collector since start


def _pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return 0.0
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


class LoopLagProbe:
    def __init__(self, interval_s: float = 0.005, window: int = 2000, stall_ms: float = 10.0,
                 log_ms: float | None = None) -> None:
        self.interval_s = interval_s
        self.stall_ms = stall_ms
        # KBROKER_LOOP_LOG_MS: benchmarks lower it to see every stall in the broker log
        self.log_ms = log_ms if log_ms is not None else float(os.environ.get("KBROKER_LOOP_LOG_MS", "100"))
        self._recent: deque[float] = deque(maxlen=window)
        self.samples = 0
        self.max_ms = 0.0
        self.stalls = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._gc_start = 0.0
        self._gc_since_tick = 0.0   # collector time inside the current interval (ms)
        self.gc_max_ms = 0.0
        self.gc_ms_total = 0.0
        self._cpu = 0.0             # the loop thread's CPU time at the previous sample
        self._sched_fd: int | None = None   # the loop thread's schedstat (Linux), read with pread
        self._run_delay = 0         # its run-queue delay (ns) at the previous sample
        # diagnosis, off by default (kbroker.loop_diagnostics): KBROKER_LOOP_STACKS=1 names
        # where a logged lag was held; KBROKER_SLOW_CALLBACK_MS=N logs callbacks over N ms;
        # KBROKER_SLOW_ITERATION_MS=N logs loop iterations whose callbacks took over N ms
        self._sampler: StallSampler | None = (
            StallSampler(self.overdue_ms) if os.environ.get("KBROKER_LOOP_STACKS") == "1" else None)
        self._untime = None         # stops the slow-callback timing
        self._untime_iterations = None   # ... the slow-iteration timing
        self._untime_collections = None  # ... the slow-collection log

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> "LoopLagProbe":
        self._loop = loop or asyncio.get_running_loop()
        self._cpu = time.thread_time()
        try:
            self._sched_fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            self._run_delay = self._read_run_delay()
        except OSError:
            self._sched_fd = None
        self._schedule()
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        if self._sampler is not None:
            self._sampler.start(threading.get_ident())
        slow_ms = os.environ.get("KBROKER_SLOW_CALLBACK_MS")
        if slow_ms and self._untime is None:
            self._untime = log_slow_callbacks(float(slow_ms))
        slow_iteration_ms = os.environ.get("KBROKER_SLOW_ITERATION_MS")
        if slow_iteration_ms and self._untime_iterations is None:
            self._untime_iterations = log_slow_iterations(float(slow_iteration_ms))
        gc_log_ms = os.environ.get("KBROKER_GC_LOG_MS")
        if gc_log_ms and self._untime_collections is None:
            self._untime_collections = log_slow_collections(float(gc_log_ms))
        return self

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._sched_fd is not None:
            os.close(self._sched_fd)
            self._sched_fd = None
        if self._sampler is not None:
            self._sampler.stop()
        if self._untime_collections is not None:
            self._untime_collections()
            self._untime_collections = None
        if self._untime_iterations is not None:   # undone in the reverse order of start
            self._untime_iterations()
            self._untime_iterations = None
        if self._untime is not None:
            self._untime()
            self._untime = None

    def _schedstat(self) -> tuple[int, int]:
        # "<run time ns> <run-queue delay ns> <timeslices>"
        run, wait = os.pread(self._sched_fd, 96, 0).split()[:2]
        return int(run), int(wait)

    def _read_run_delay(self) -> int:
        return self._schedstat()[1]

    def thread_seconds(self) -> tuple[float, float] | None:
        """The loop thread's CPU time and its time runnable without a core, since it
        started (seconds), or None where the kernel does not say (no schedstat)."""
        if self._sched_fd is None:
            return None
        run, wait = self._schedstat()
        return run / 1e9, wait / 1e9

    def _on_gc(self, phase: str, info: dict) -> None:
        # the collector runs on whichever thread allocates: a pause of every thread
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self._gc_start:
            ms = (time.perf_counter() - self._gc_start) * 1000.0
            self._gc_start = 0.0
            self._gc_since_tick += ms
            self.gc_ms_total += ms
            if ms > self.gc_max_ms:
                self.gc_max_ms = ms

    def overdue_ms(self) -> float:
        """How late the next tick is now (read by the stall sampler's thread too)."""
        return (self._loop.time() - self._due) * 1000.0 if self._loop is not None else 0.0

    @property
    def running(self) -> bool:
        return self._handle is not None

    def _schedule(self) -> None:
        self._due = self._loop.time() + self.interval_s
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        gc_ms, self._gc_since_tick = self._gc_since_tick, 0.0
        cpu = time.thread_time()
        cpu_ms, self._cpu = (cpu - self._cpu) * 1000.0, cpu
        wait_ms = None
        if self._sched_fd is not None:
            delay = self._read_run_delay()
            wait_ms, self._run_delay = (delay - self._run_delay) / 1e6, delay
        lag_ms = (self._loop.time() - self._due) * 1000.0
        self.record(lag_ms, gc_ms, cpu_ms, wait_ms)
        if self._sampler is not None:
            self._sampler.report(lag_ms >= self.log_ms)
        self._schedule()

    # -- readings ---------------------------------------------------------------------------

    def record(self, lag_ms: float, gc_ms: float = 0.0, cpu_ms: float | None = None,
               wait_ms: float | None = None) -> None:
        """One sample (public so tests can feed it without a loop)."""
        lag_ms = max(0.0, lag_ms)
        self.samples += 1
        self._recent.append(lag_ms)
        if lag_ms > self.max_ms:
            self.max_ms = lag_ms
        if lag_ms > self.stall_ms:
            self.stalls += 1
            if lag_ms > self.log_ms:
                log.warning("event loop held for %.0f ms (garbage collector: %.0f ms, loop thread CPU: %s ms, "
                            "waiting for a core: %s ms)", lag_ms, gc_ms,
                            "?" if cpu_ms is None else f"{cpu_ms:.0f}", "?" if wait_ms is None else f"{wait_ms:.0f}")

    def reset_max(self) -> float:
        """Return the largest lag so far and start over (per-operation measurements)."""
        m, self.max_ms = self.max_ms, 0.0
        return m

    def snapshot(self) -> LagSnapshot:
        vals = sorted(self._recent)
        return LagSnapshot(
            samples=self.samples, max_ms=self.max_ms, window_max_ms=vals[-1] if vals else 0.0,
            p50_ms=_pct(vals, 0.50), p99_ms=_pct(vals, 0.99), p999_ms=_pct(vals, 0.999),
            mean_ms=sum(vals) / len(vals) if vals else 0.0, stalls=self.stalls, stall_ms=self.stall_ms,
            gc_max_ms=self.gc_max_ms, gc_ms_total=self.gc_ms_total)
