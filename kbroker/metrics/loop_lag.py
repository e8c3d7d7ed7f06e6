"""A minimal event-loop lag probe: a task sleeps ``interval`` and records how late it woke.

(The ``stall`` work may bring a finer probe; this one only feeds the metrics.)"""

from __future__ import annotations

import asyncio
import time

from prometheus_client.core import GaugeMetricFamily, SummaryMetricFamily


class LoopLagProbe:
    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval = interval_s
        self.last = 0.0
        self.max_since_scrape = 0.0
        self.count = 0
        self.total = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag-probe")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(self.interval)
            late = max(0.0, time.monotonic() - t - self.interval)
            self.last = late
            self.max_since_scrape = max(self.max_since_scrape, late)
            self.count += 1
            self.total += late

    def families(self):
        yield GaugeMetricFamily("kbroker_event_loop_lag_seconds", "How late the last probe woke", value=self.last)
        yield GaugeMetricFamily("kbroker_event_loop_lag_max_seconds", "Largest lag since the previous scrape",
                                value=self.max_since_scrape)
        self.max_since_scrape = 0.0
        s = SummaryMetricFamily("kbroker_event_loop_lag_probe_seconds", "Probe lateness", count_value=self.count,
                                sum_value=self.total)
        yield s
