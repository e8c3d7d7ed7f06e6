"""Time sources.

Logic never reads a clock: it receives ``now_ms`` (DESIGN.md, "State and time"). Only the
runtime edges (the server, the network layer, the asyncio drivers) hold a :class:`Clock` and
pass ``clock.now_ms()`` down. Tests use :class:`FakeClock`.
"""

from __future__ import annotations

import time


class Clock:
    """Wall-clock milliseconds (for timestamps) and a monotonic clock (for deadlines)."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


SYSTEM_CLOCK = Clock()


class FakeClock(Clock):
    """A clock that only moves when told to."""

    __slots__ = ("_now", "_mono")

    def __init__(self, now_ms: int = 1_700_000_000_000, monotonic_ms: int = 0) -> None:
        self._now = now_ms
        self._mono = monotonic_ms

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        self._now += ms
        self._mono += ms
