"""Event-loop lag on the endpoint, read from the broker's probe (``kbroker.loop_probe``,
``server.loop_probe``) at scrape time."""

from __future__ import annotations

import gc

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class LoopLagFamilies:
    def __init__(self, probe) -> None:
        self.probe = probe

    def families(self):
        s = self.probe.snapshot()
        lag = GaugeMetricFamily("kbroker_event_loop_lag_seconds",
                                "How late the loop ran a timer, over the probe's recent window", labels=["quantile"])
        for q, v in (("0.5", s.p50_ms), ("0.99", s.p99_ms), ("0.999", s.p999_ms)):
            lag.add_metric([q], v / 1000)
        yield lag
        yield GaugeMetricFamily("kbroker_event_loop_lag_window_max_seconds", "Largest lag in the recent window",
                                value=s.window_max_ms / 1000)
        yield GaugeMetricFamily("kbroker_event_loop_lag_max_seconds", "Largest lag since start", value=s.max_ms / 1000)
        yield CounterMetricFamily("kbroker_event_loop_stalls", f"Lags above {s.stall_ms:g} ms", value=s.stalls)
        yield CounterMetricFamily("kbroker_event_loop_lag_samples", "Probe samples taken", value=s.samples)
        yield GaugeMetricFamily("kbroker_gc_pause_max_seconds",
                                "Longest garbage-collector pause since start (any generation: every thread stops)",
                                value=s.gc_max_ms / 1000)
        yield CounterMetricFamily("kbroker_gc_pause_seconds", "Time spent in the garbage collector",
                                  value=s.gc_ms_total / 1000)
        # live objects the broker froze out of the collector's walk (kbroker.gc_policy): it
        # falls as they are freed, so growth while no partitions are created means frozen
        # objects in reference cycles, which nothing will ever free
        yield GaugeMetricFamily("kbroker_gc_frozen_objects", "Live objects frozen out of the collector's walk",
                                value=gc.get_freeze_count())
        t = self.probe.thread_seconds()
        if t is not None:   # rate(cpu) near 1: the one loop is the broker's ceiling
            yield CounterMetricFamily("kbroker_event_loop_cpu_seconds", "CPU time of the event loop's thread",
                                      value=t[0])
            yield CounterMetricFamily("kbroker_event_loop_core_wait_seconds",
                                      "Time the event loop's thread was runnable but had no core", value=t[1])
