"""Long work on the event loop, cut into slices: the work is a generator that yields at
points where it may pause (after each batch it read) and returns its result. ``run_to_end``
runs it in one go (tests, tools); ``run_in_slices`` hands the loop back after every
``slice_s`` seconds of work, so clients keep being served while it runs; ``run_for`` runs
one slice here and says whether anything is left (short work then needs no task).

A step may yield a ``concurrent.futures.Future`` (an fsync queued on an IO thread): the job
then sits out until it is done, and the loop and the other jobs go on meanwhile; the step
after it reads the future's result. ``run_to_end`` blocks on it.

All sliced work of one loop takes turns in one runner: one slice per loop iteration, round
robin. Fifty partitions loading at once as fifty tasks that each ran 4 ms per iteration
held the loop for 200-300 ms per iteration; taking turns keeps it to one slice. On the
broker's loop a slice takes only what the iteration's other work left of
``loop_clock.ITERATION_S`` (at least one step).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
import weakref
from typing import Any, Callable, Generator, TypeVar

from kbroker import loop_clock

T = TypeVar("T")

# Work between two hand-backs of the loop (tests set 0: yield at every step). 2 ms: with the
# connections' budget (net/iteration_budget.py) an iteration stays well under the 10 ms of
# issue 15 even when a loaded machine stretches it.
SLICE_S = 0.002

# A read loop run in one go (a fetch's reads: each partition's records cost a few us to tens
# of us) stops after this long, as it stops at the response's byte budget; what it did not
# reach is read by the client's next request.
READ_WHOLE_S = 0.003


def run_to_end(steps: Generator[None, None, T]) -> T:
    try:
        while True:
            wait = next(steps)
            if wait is not None:
                concurrent.futures.wait([wait])
    except StopIteration as done:
        return done.value


LEFT = object()   # run_for: the work is not finished


def run_for(steps: Generator[None, None, T], slice_s: float = 0.004) -> T | object:
    """Run ``steps`` here for up to ``slice_s``: what it returned if it finished, else
    ``LEFT``, the rest left for ``run_in_slices`` (the caller hands the same generator on).
    For steps that never yield a future."""
    t0 = time.perf_counter()
    try:
        while True:
            if next(steps) is not None:
                raise TypeError("run_for: a step yielded a future (use run_in_slices)")
            if time.perf_counter() - t0 > slice_s:
                return LEFT
    except StopIteration as done:
        return done.value


def each(items, fn: Callable[[Any], object]) -> Generator[None, None, None]:
    """Steps calling ``fn(item)`` for each of ``items``, one item per step (a walk over
    every partition, for ``run_in_slices``)."""
    for item in items:
        fn(item)
        yield


def emptied(*lists: list, step: int = 1024) -> Generator[None, None, None]:
    """Steps clearing ``lists`` from their ends, ``step`` items a step: the last references
    to 10,000 objects of a request, let go at once, held the loop 1-2 ms to free them."""
    for items in lists:
        while len(items) > step:
            del items[-step:]
            yield
        items.clear()


def batches_to_the_end(plog, caught_up=None):
    """Every batch of ``plog`` from its start, for a replay that pauses between them: batches
    appended meanwhile are read too, and it stops only at the log end, so the caller's code
    after the loop runs in the same slice as the check that nothing is left.

    With ``caught_up``, that object is yielded each time the reader reaches the log end, for
    a caller that defers work to finish it there (and may pause while it does): the reader
    then reads what was appended meanwhile, or stops."""
    done = None                   # next offset to read (None: the log start)
    while done is None or done < plog.log_end_offset:
        start = done
        for batch in plog.batches(start, plog.log_end_offset):
            yield batch
            done = batch.last_offset + 1
        if done == start:         # nothing readable below the log end
            return
        if caught_up is not None:
            yield caught_up


class _Turns:
    """The jobs of one loop, each run for one slice per loop iteration, in turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.jobs: collections.deque = collections.deque()   # (steps, future, slice_s)
        self.task: asyncio.Task | None = None
        self.last_job = None   # the generator that had the latest slice (loop diagnostics)

    def add(self, steps, slice_s: float) -> asyncio.Future:
        fut = self.loop.create_future()
        self.jobs.append((steps, fut, slice_s))
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run(), name="sliced-work")
        return fut

    async def _run(self) -> None:
        jobs = self.jobs
        while jobs:
            steps, fut, slice_s = jobs[0]
            if fut.done():                      # its caller was cancelled
                jobs.popleft()
                steps.close()
                continue
            self.last_job = steps
            t0 = time.perf_counter()
            budget = loop_clock.left(self.loop, slice_s)   # (what other work left of this iteration)
            wait = None
            try:
                while wait is None:
                    wait = next(steps)
                    if time.perf_counter() - t0 > budget:
                        break
            except StopIteration as done:
                jobs.popleft()
                fut.set_result(done.value)
            except BaseException as e:   # noqa: BLE001 - handed to the job's caller
                jobs.popleft()
                fut.set_exception(e)
            else:
                if wait is None:
                    jobs.rotate(-1)
                else:   # sits out until its future is done
                    job = jobs.popleft()
                    asyncio.wrap_future(wait, loop=self.loop).add_done_callback(
                        lambda f, job=job: self._resume(job, f))
            await asyncio.sleep(0)

    def discard(self, fut: asyncio.Future) -> None:
        """The job of ``fut`` is closed now, its caller cancelled: not at its next turn, when
        what its frames hold (a fetch's 10,000 partitions) would have lived on meanwhile. (A
        job parked on a future is not in the queue: it is closed when it comes back.)"""
        for job in self.jobs:
            if job[1] is fut:
                self.jobs.remove(job)
                job[0].close()
                return

    def _resume(self, job, waited: asyncio.Future) -> None:
        if not waited.cancelled():
            waited.exception()   # the job's next step reads the outcome (marked seen here)
        self.jobs.append(job)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run(), name="sliced-work")


_turns: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns]" = weakref.WeakKeyDictionary()


async def run_in_slices(steps: Generator[None, None, T], slice_s: float | None = None) -> T:
    """Run ``steps`` in turn with the loop's other sliced work, ``slice_s`` (default
    ``SLICE_S``) of work per turn; returns what the generator returns."""
    loop = asyncio.get_running_loop()
    turns = _turns.get(loop)
    if turns is None:
        turns = _turns[loop] = _Turns(loop)
    fut = turns.add(steps, SLICE_S if slice_s is None else slice_s)
    try:
        return await fut
    except asyncio.CancelledError:
        turns.discard(fut)
        raise
