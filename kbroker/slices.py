"""Long work on the event loop, cut into slices: the work is a generator that yields at
points where it may pause (after each batch it read) and returns its result. ``run_to_end``
runs it in one go (start-up, tests); ``run_in_slices`` hands the loop back every
``slice_s`` seconds of work, so clients keep being served while it runs; ``run_for`` runs
one slice here and says whether anything is left (short work then needs no task)."""

from __future__ import annotations

import asyncio
import time
from typing import Generator, TypeVar

T = TypeVar("T")


def run_to_end(steps: Generator[None, None, T]) -> T:
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def run_for(steps: Generator[None, None, T], slice_s: float = 0.004) -> bool:
    """Run ``steps`` here for up to ``slice_s``; True if it finished, False if the rest is
    left for ``run_in_slices`` (the caller hands the same generator on)."""
    t0 = time.perf_counter()
    try:
        while True:
            next(steps)
            if time.perf_counter() - t0 > slice_s:
                return False
    except StopIteration:
        return True


async def run_in_slices(steps: Generator[None, None, T], slice_s: float = 0.004) -> T:
    t0 = time.perf_counter()
    try:
        while True:
            next(steps)
            if time.perf_counter() - t0 > slice_s:
                await asyncio.sleep(0)
                t0 = time.perf_counter()
    except StopIteration as done:
        return done.value
