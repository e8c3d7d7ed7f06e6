"""Producer id allocation: blocks from the controller (ProducerIdsRecord in the metadata log),
handed out one by one. Ids are never reused across restarts: a restart takes a new block."""

from __future__ import annotations


class ProducerIdManager:
    def __init__(self, runtime, broker_id: int, broker_epoch: int = -1, allocate=None) -> None:
        """``allocate``: coroutine function -> (first id, size) asking the active controller
        over the network (AllocateProducerIds); without it, the local controller runtime."""
        self.runtime = runtime
        self.allocate = allocate
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self._next = 0
        self._end = 0          # exclusive

    def _op(self, c, now_ms):
        return c.allocate_producer_ids(self.broker_id, self.broker_epoch, now_ms)

    def _take(self, block) -> int:
        start, size = block
        self._next, self._end = start + 1, start + size
        return start

    def next_id_nowait(self) -> int | None:
        """An id from the current block, or None when a new block is needed."""
        if self._next < self._end:
            pid = self._next
            self._next += 1
            return pid
        return None

    async def next_id(self) -> int:
        pid = self.next_id_nowait()
        if pid is not None:
            return pid
        if self.allocate is not None:
            block = await self.allocate(self.broker_id, self.broker_epoch)
        else:
            block = await self.runtime.submit(self._op)
        return self._take(block)
