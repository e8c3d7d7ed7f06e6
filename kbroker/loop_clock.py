"""How long the event loop has been busy in its current iteration, so that kinds of work
bounded each on its own do not add up in one iteration.

Sliced work runs a slice per turn (kbroker.slices), connections share a budget per
iteration (kbroker.net.iteration_budget), and a few steps run whole (building one
1,000-partition topic's records: ~4 ms). Each stays under its bound, but they add up when
they meet in one iteration: creating nine 1,000-partition topics ran a 4 ms slice of one
group's encoding in the iteration of another's 4 ms build, 8-10 ms in all.

The broker's loop uses a selector that notes when each ``select`` returned; every callback
of the iteration runs after that. ``elapsed()`` is the time since, and ``left(budget_s)``
what a piece of work may still take of ``ITERATION_S``. A loop made elsewhere (a test's own)
has no clock: ``elapsed()`` is 0 there and every bound is its own again.
"""

from __future__ import annotations

import asyncio
import selectors
import time
import weakref

# What one iteration's callbacks should take in all. The lag probe's tick runs after the
# callbacks already queued when it fell due, so its lag can span two iterations: two of
# these stay under issue 15's 10 ms.
ITERATION_S = 0.005


class _ClockedSelector(selectors.DefaultSelector):
    """The platform's selector, noting when each ``select`` returned."""

    iteration_started = 0.0

    def select(self, timeout=None):
        try:
            return super().select(timeout)
        finally:
            self.iteration_started = time.perf_counter()


_selectors: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ClockedSelector]" = weakref.WeakKeyDictionary()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop whose iterations are timed (``asyncio.Runner(loop_factory=)``)."""
    selector = _ClockedSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _selectors[loop] = selector
    return loop


def elapsed(loop: asyncio.AbstractEventLoop) -> float:
    """Seconds since ``loop``'s current iteration began (0 for a loop without a clock)."""
    selector = _selectors.get(loop)
    return 0.0 if selector is None else time.perf_counter() - selector.iteration_started


def left(loop: asyncio.AbstractEventLoop, budget_s: float) -> float:
    """``budget_s``, or less when the iteration has already used most of ``ITERATION_S``
    (0 when it used all of it: the caller then does one step, so it still progresses)."""
    return max(min(budget_s, ITERATION_S - elapsed(loop)), 0.0)
