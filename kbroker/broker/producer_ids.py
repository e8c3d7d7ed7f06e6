"""Producer id allocation: blocks from the controller, handed out one by one (Kafka's
RPCProducerIdManager).

The active controller hands out blocks of ``PRODUCER_ID_BLOCK_SIZE`` (1000) ids through
AllocateProducerIds; each block is a ProducerIdsRecord committed to the metadata log before
the broker hears of it, so no two brokers ever get the same block, across controller
failovers too. A broker keeps its blocks in memory only: a restart asks for a new one, and the
ids left in the old block are never used. When 90% of the current block is gone the next one
is fetched in the background, so InitProducerId rarely waits for the controller.

``ProducerIdBlocks`` is the pure state (a simulation drives it); ``ProducerIdManager`` runs it
with the network.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("kbroker.producer_ids")

PREFETCH_PERCENT = 90   # of the current block used before the next is fetched


class ProducerIdBlocks:
    """The current block, at most one prefetched block, and whether a request is out."""

    def __init__(self) -> None:
        self._next = 0
        self._end = 0                       # exclusive
        self._block_size = 0
        self.prefetched: tuple[int, int] | None = None   # (first id, size)
        self.requesting = False

    def take(self) -> int | None:
        """The next id, or None until a block arrives."""
        if self._next >= self._end and self.prefetched is not None:
            start, size = self.prefetched
            self.prefetched = None
            self._next, self._end, self._block_size = start, start + size, size
        if self._next < self._end:
            pid = self._next
            self._next += 1
            return pid
        return None

    def wants_block(self) -> bool:
        """Whether to ask the controller for a block now (none asked yet, none in reserve,
        and the current one is exhausted or ``PREFETCH_PERCENT`` used)."""
        if self.requesting or self.prefetched is not None:
            return False
        left = self._end - self._next
        return left <= 0 or left * 100 <= self._block_size * (100 - PREFETCH_PERCENT)

    def on_block(self, start: int, size: int) -> None:
        self.requesting = False
        if size <= 0:
            return
        if self._next >= self._end:
            self._next, self._end, self._block_size = start, start + size, size
        else:
            self.prefetched = (start, size)


class ProducerIdManager:
    def __init__(self, runtime, broker_id: int, broker_epoch: int = -1, allocate=None) -> None:
        """``allocate``: coroutine function -> (first id, size) asking the active controller
        over the network (AllocateProducerIds); without it, the local controller runtime."""
        self.runtime = runtime
        self.allocate = allocate
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.blocks = ProducerIdBlocks()
        self._fetch: asyncio.Task | None = None

    def _op(self, c, now_ms):
        return c.allocate_producer_ids(self.broker_id, self.broker_epoch, now_ms)

    async def _request(self) -> None:
        try:
            if self.allocate is not None:
                start, size = await self.allocate(self.broker_id, self.broker_epoch)
            else:
                start, size = await self.runtime.submit(self._op)
        except BaseException:
            self.blocks.requesting = False
            raise
        self.blocks.on_block(start, size)

    def _maybe_fetch(self) -> None:
        if not self.blocks.wants_block():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:   # no running loop (synchronous callers): next_id fetches
            return
        self.blocks.requesting = True
        self._fetch = loop.create_task(self._request(), name="producer-id-block")
        self._fetch.add_done_callback(_log_failure)

    def next_id_nowait(self) -> int | None:
        """An id from the blocks at hand, or None when a new block is needed (it is then
        being fetched). Starts the prefetch of the next block when due."""
        pid = self.blocks.take()
        self._maybe_fetch()
        return pid

    async def next_id(self) -> int:
        while True:
            pid = self.next_id_nowait()
            if pid is not None:
                return pid
            await asyncio.shield(self._fetch)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("fetching a producer id block failed: %s", task.exception())
