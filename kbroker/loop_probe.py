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
It also gives the process's other threads' CPU time and run-queue delay in the lag, by name:
the loop's thread may have slept on the GIL while the thread holding it waited for a core.
That delay is an upper bound of such waits (a runnable thread holds the GIL or runs without
it; one waiting for the GIL sleeps), so the lag less both delays is a lower bound of the
broker's own hold.

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


def read_schedstat(fd: int) -> tuple[int, int]:
    """(run time ns, run-queue delay ns) from a thread's schedstat descriptor:
    "<run time ns> <run-queue delay ns> <timeslices>"."""
    run, wait = os.pread(fd, 96, 0).split()[:2]
    return int(run), int(wait)


class OtherThreads:
    """The CPU time and run-queue delay of this process's Python threads other than the
    loop's, from each one's ``/proc/self/task/<tid>/schedstat``, read at every tick (one pread
    a thread); the thread list is refreshed every ``refresh_s``."""

    def __init__(self, loop_tid: int, refresh_s: float = 1.0) -> None:
        self._loop_tid = loop_tid
        self._refresh_s = refresh_s
        self._threads: dict[int, list] = {}   # native id -> [schedstat fd, name, run ns, run-queue delay ns]
        self._refreshed = float("-inf")

    def sample(self, now: float) -> dict[str, tuple[float, float]]:
        """{thread name: (ms of CPU, ms waiting for a core)} since the last sample (threads of
        one name summed; those with neither left out)."""
        if now - self._refreshed >= self._refresh_s:
            self._refresh(now)
        spent: dict[str, tuple[float, float]] = {}
        for tid, entry in list(self._threads.items()):
            try:
                run, delay = read_schedstat(entry[0])
            except (OSError, ValueError):   # the thread ended
                self._drop(tid)
                continue
            if run > entry[2] or delay > entry[3]:
                cpu, wait = spent.get(entry[1], (0.0, 0.0))
                spent[entry[1]] = (cpu + (run - entry[2]) / 1e6, wait + (delay - entry[3]) / 1e6)
            entry[2], entry[3] = run, delay
        return spent

    def _refresh(self, now: float) -> None:
        self._refreshed = now
        live = {t.native_id: t.name for t in threading.enumerate()
                if t.native_id is not None and t.native_id != self._loop_tid}
        for tid in [tid for tid in self._threads if tid not in live]:
            self._drop(tid)
        for tid, name in live.items():
            if tid in self._threads:
                continue
            try:
                fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                continue
            try:
                run, delay = read_schedstat(fd)
            except (OSError, ValueError):
                os.close(fd)
                continue
            self._threads[tid] = [fd, name, run, delay]

    def _drop(self, tid: int) -> None:
        os.close(self._threads.pop(tid)[0])

    def close(self) -> None:
        for tid in list(self._threads):
            self._drop(tid)


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
        self._others: OtherThreads | None = None   # the other threads' CPU and run-queue delay
        # diagnosis, off by default (kbroker.loop_diagnostics): KBROKER_LOOP_STACKS=1 names
        # where a logged lag was held; KBROKER_SLOW_CALLBACK_MS=N logs callbacks over N ms;
        # KBROKER_SLOW_ITERATION_MS=N logs loop iterations whose callbacks took over N ms;
        # KBROKER_GC_LOG_MS=N logs garbage collections over N ms with what they walked
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
            self._others = OtherThreads(threading.get_native_id())
            self._others.sample(self._loop.time())
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
        if self._others is not None:
            self._others.close()
            self._others = None
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

    def _read_run_delay(self) -> int:
        return read_schedstat(self._sched_fd)[1]

    def thread_seconds(self) -> tuple[float, float] | None:
        """The loop thread's CPU time and its time runnable without a core, since it
        started (seconds), or None where the kernel does not say (no schedstat)."""
        if self._sched_fd is None:
            return None
        run, wait = read_schedstat(self._sched_fd)
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
        wait_ms = others = None
        if self._sched_fd is not None:
            delay = self._read_run_delay()
            wait_ms, self._run_delay = (delay - self._run_delay) / 1e6, delay
        now = self._loop.time()
        if self._others is not None:
            others = self._others.sample(now)
        lag_ms = (now - self._due) * 1000.0
        self.record(lag_ms, gc_ms, cpu_ms, wait_ms, others)
        if self._sampler is not None:
            self._sampler.report(lag_ms >= self.log_ms)
        self._schedule()

    # -- readings ---------------------------------------------------------------------------

    def record(self, lag_ms: float, gc_ms: float = 0.0, cpu_ms: float | None = None,
               wait_ms: float | None = None, others: dict[str, tuple[float, float]] | None = None) -> None:
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
                            "waiting for a core: %s ms%s)", lag_ms, gc_ms,
                            "?" if cpu_ms is None else f"{cpu_ms:.0f}", "?" if wait_ms is None else f"{wait_ms:.0f}",
                            "" if others is None else _others_text(others))

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


def _others_text(others: dict[str, tuple[float, float]], top: int = 3) -> str:
    """', other threads without a core: 41 ms (log-admin_0 38, log-io_0 3), running: 2 ms
    (log-io_0 2)': a thread that ran held the GIL or ran without it; one waiting for a core may
    have held it"""
    def part(i: int) -> str:
        total = sum(v[i] for v in others.values())
        most = sorted(others.items(), key=lambda kv: -kv[1][i])[:top]
        named = ", ".join(f"{name} {v[i]:.0f}" for name, v in most if v[i] >= 0.5)
        return f"{total:.0f} ms" + (f" ({named})" if named else "")
    return f", other threads without a core: {part(1)}, running: {part(0)}"
