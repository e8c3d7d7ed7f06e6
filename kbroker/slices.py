"""Long work on the event loop, cut into slices: the work is a generator that yields at
points where it may pause (after each batch it read) and returns its result. ``run_to_end``
runs it in one go (start-up, tests); ``run_in_slices`` hands the loop back every
``slice_s`` seconds of work, so clients keep being served while it runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Generator, TypeVar

T = TypeVar("T")

# Work between two hand-backs of the loop (tests set 0: yield at every step). 2 ms: with the
# connections' budget (net/iteration_budget.py) an iteration stays well under the 10 ms of
# issue 15 even when a loaded machine stretches it.
SLICE_S = 0.002


def run_to_end(steps: Generator[None, None, T]) -> T:
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def each(items, fn: Callable[[Any], object]) -> Generator[None, None, None]:
    """Steps calling ``fn(item)`` for each of ``items``, one item per step (a walk over
    every partition, for ``run_in_slices``)."""
    for item in items:
        fn(item)
        yield


async def run_in_slices(steps: Generator[None, None, T], slice_s: float | None = None) -> T:
    if slice_s is None:
        slice_s = SLICE_S
    t0 = time.perf_counter()
    try:
        while True:
            next(steps)
            if time.perf_counter() - t0 > slice_s:
                await asyncio.sleep(0)
                t0 = time.perf_counter()
    except StopIteration as done:
        return done.value
