"""How much client work one event-loop iteration may do.

The loop runs every callback made ready by one ``select`` before it looks at its timers
again. When hundreds of connections become readable together (500 group members joining,
1,000 new connections each sending ApiVersions, then closing), handling all of them in that
one iteration holds the loop for tens to hundreds of milliseconds: timers fire late and every
other client waits (issue 15: nothing may hold the loop above 10 ms).

So connections share a per-loop budget of ``BUDGET_S`` seconds of work per iteration. A
connection that finds it spent waits its turn: it stops reading (the frames it already
decoded are kept, in order) and joins a FIFO queue. At the start of the next iteration the
queue is served first, again within the budget; a connection that becomes readable while
others are queued joins the queue behind them, so nobody is starved. Each connection still
handles its frames strictly in order, one at a time, and its responses leave in request
order (the outbox): only *when* a request is handled moves, never its order.

The budget is measured from the first connection work of an iteration (a ``call_soon``
scheduled then marks the iteration's end), so it counts what the connections do, not the
loop's other callbacks. A request whose handler is a coroutine does its work in the first
step of its task, which asyncio runs in the *next* iteration: each such request reserves the
measured average cost of a first step (``task_cost``), counted against this iteration (so no
more are started than the next one can run) and against the next (where they run).
"""

from __future__ import annotations

import asyncio
import collections
import collections.abc
import time
import weakref
from typing import Any, Callable

BUDGET_S = 0.003

_per_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, IterationBudget]" = weakref.WeakKeyDictionary()


class IterationBudget:
    __slots__ = ("loop", "budget_s", "_clock", "_started", "_queue", "_serving", "_reserved", "_carried",
                 "task_cost", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop, budget_s: float = BUDGET_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.loop = loop
        self.budget_s = budget_s
        self._clock = clock
        self._started: float | None = None   # when this iteration's connection work began
        self._queue: collections.deque = collections.deque()   # connections waiting their turn
        self._serving = False
        self._reserved = 0.0     # first steps of request tasks started in this iteration
        self._carried = 0.0      # ... started in the previous one: they run in this one
        self.task_cost = 0.0001  # average first step of a request task (s), measured

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "IterationBudget":
        """The budget every connection of ``loop`` shares."""
        b = _per_loop.get(loop)
        if b is None:
            b = _per_loop[loop] = cls(loop)
        return b

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def spent(self) -> bool:
        """True once this iteration's connection work has used the budget (the first call of
        an iteration starts the clock and is always False: every iteration makes progress)."""
        now = self._clock()
        if self._started is None:
            self._start(now)
            return False
        return now - self._started + self._reserved + self._carried > self.budget_s

    def _start(self, now: float) -> None:
        self._started = now
        self.loop.call_soon(self._next_iteration)

    def starting_task(self, coro) -> "collections.abc.Coroutine":
        """A connection starts a request task for ``coro``: reserve its first step's cost,
        and measure that step when the task runs it."""
        if self._started is None:
            self._start(self._clock())
        self._reserved += self.task_cost
        return _FirstStepTimed(coro, self)

    def _first_step_took(self, seconds: float) -> None:
        self.task_cost += (seconds - self.task_cost) * 0.1

    def may_start(self) -> bool:
        """May a connection that just became readable work now? Not while others wait their
        turn (they go first), nor once the budget is spent."""
        if self._queue and not self._serving:
            return False
        return not self.spent()

    def wait_turn(self, conn) -> None:
        """Queue ``conn``: its ``_take_turn()`` runs in a later iteration, in FIFO order."""
        self._queue.append(conn)
        if self._started is None:      # nothing started the clock: make sure an iteration ends
            self._start(self._clock())

    def _next_iteration(self) -> None:
        # runs first in the iteration after the one that started the clock
        self._started = None
        self._carried, self._reserved = self._reserved, 0.0
        if self._carried:
            self._start(self._clock())   # the next iteration sets _carried again
        q = self._queue
        if not q:
            return
        self._serving = True
        try:
            while q and not self.spent():
                q.popleft()._take_turn()
        finally:
            self._serving = False


class _FirstStepTimed(collections.abc.Coroutine):
    """A request's coroutine whose first step (the handler's work, run by its task in the
    next iteration) is timed for ``IterationBudget.task_cost``; the later steps pass through."""

    __slots__ = ("_coro", "_budget", "_first")

    def __init__(self, coro, budget: IterationBudget) -> None:
        self._coro = coro
        self._budget = budget
        self._first = True

    def send(self, value: Any) -> Any:
        if not self._first:
            return self._coro.send(value)
        self._first = False
        clock = self._budget._clock
        t0 = clock()
        try:
            return self._coro.send(value)
        finally:
            self._budget._first_step_took(clock() - t0)

    def throw(self, typ, val=None, tb=None):
        self._first = False
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._coro.close()

    @property
    def wrapped(self):
        """The request's coroutine (diagnostics name a task by it)."""
        return self._coro

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)
