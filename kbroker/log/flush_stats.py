"""Broker-wide counts of the log's fsyncs, for the metrics endpoint: Kafka's
``kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs`` (how many flushes, how long
they took), and, for ``flush.messages=1`` topics, how many appends each group-commit round
answered (a round covers every append written while the one before it ran).

One instance per LogManager, shared by its logs; a log opened alone keeps its own. Updated
on the event loop only (rounds run in a thread or native AIO, but are counted when the loop
learns they ended), so plain integers need no lock."""

from __future__ import annotations

import time


class FlushStats:
    __slots__ = ("flushes", "flush_ms", "commit_rounds", "commit_answers")

    def __init__(self) -> None:
        self.flushes = 0          # every fsync of log data: group-commit rounds, flush.ms, rolls
        self.flush_ms = 0.0       # their summed wall time
        self.commit_rounds = 0    # group-commit rounds (of the flushes above)
        self.commit_answers = 0   # appends those rounds made durable and answered

    def flushed(self, started_ns: int) -> None:
        """A flush that began at ``started_ns`` (time.monotonic_ns) just ended."""
        self.add((time.monotonic_ns() - started_ns) / 1e6)

    def add(self, took_ms: float) -> None:
        self.flushes += 1
        self.flush_ms += took_ms

    def commit_round(self, started_ns: int, answered: int) -> None:
        self.flushed(started_ns)
        self.commit_rounds += 1
        self.commit_answers += answered
