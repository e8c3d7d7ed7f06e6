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
loop's other callbacks.
"""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from typing import Callable

BUDGET_S = 0.003

_per_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, IterationBudget]" = weakref.WeakKeyDictionary()


class IterationBudget:
    __slots__ = ("loop", "budget_s", "_clock", "_started", "_queue", "_serving", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop, budget_s: float = BUDGET_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.loop = loop
        self.budget_s = budget_s
        self._clock = clock
        self._started: float | None = None   # when this iteration's connection work began
        self._queue: collections.deque = collections.deque()   # connections waiting their turn
        self._serving = False

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
            self._started = now
            self.loop.call_soon(self._next_iteration)
            return False
        return now - self._started > self.budget_s

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
            self._started = self._clock()
            self.loop.call_soon(self._next_iteration)

    def _next_iteration(self) -> None:
        # runs first in the iteration after the one that started the clock
        self._started = None
        q = self._queue
        if not q:
            return
        self._serving = True
        try:
            while q and not self.spent():
                q.popleft()._take_turn()
        finally:
            self._serving = False
