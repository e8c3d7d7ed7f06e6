"""Topics that Metadata requests create (``auto.create.topics.enable``): one creation per name
at a time, shared by every request that asks for the name meanwhile, and a bounded wait.

Kafka's broker answers such a request at once (UNKNOWN_TOPIC_OR_PARTITION) and creates the
topic in the background. kbroker waits for the creation, so the client's next request finds
the topic, but only for ``WAIT_S``: during a controller election a creation can take seconds,
and a client with its one Metadata request outstanding (librdkafka) sends nothing else for
the topic until it is answered. Past the wait the answer is LEADER_NOT_AVAILABLE (retriable)
and the creation goes on; the client's retry joins it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from kbroker.kraft.controller import NewTopic
from kbroker.wire.errors import Errors

log = logging.getLogger("kbroker.auto_create")

WAIT_S = 3.0

# A creation that did not finish in time, failed for want of a controller, or found the topic
# created by another broker but not yet in this broker's image: "not ready", retriable.
# (UNKNOWN_TOPIC_OR_PARTITION would tell a client that already saw the topic's partitions
# from another broker that the topic is gone; librdkafka then fails the records it queued.)
NOT_READY = Errors.LEADER_NOT_AVAILABLE

CreateTopics = Callable[[list], Awaitable[list]]   # broker.create_topics: [NewTopic] -> results


class AutoTopicCreator:
    def __init__(self, create_topics: CreateTopics) -> None:
        self._create_topics = create_topics
        self._inflight: dict[str, asyncio.Future] = {}   # name -> its creation's error code
        self._tasks: set[asyncio.Task] = set()

    async def create(self, names: list[str], wait_s: float | None = None) -> dict[str, int]:
        """{name: the error to answer with if this broker's image does not show the topic}:
        the creation's own error when it was refused (INVALID_REPLICATION_FACTOR, ...),
        NOT_READY otherwise (created, but not yet in this image; or still being created)."""
        new = [n for n in dict.fromkeys(names) if n not in self._inflight]
        if new:
            loop = asyncio.get_running_loop()
            for n in new:
                self._inflight[n] = loop.create_future()
            task = asyncio.ensure_future(self._run(new))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        waiting = {n: self._inflight[n] for n in names}
        await asyncio.wait(set(waiting.values()), timeout=WAIT_S if wait_s is None else wait_s)
        return {n: f.result() if f.done() and not f.cancelled() else NOT_READY for n, f in waiting.items()}

    async def _run(self, names: list[str]) -> None:
        codes = dict.fromkeys(names, NOT_READY)
        try:
            for r in await self._create_topics([NewTopic(n) for n in names]):
                if r.error not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                    codes[r.name] = r.error
        except asyncio.CancelledError:
            raise
        except Exception as e:   # noqa: BLE001 - no controller now: the client asks again
            log.info("auto-creating %s: %s", names, e)
        finally:
            for n in names:
                f = self._inflight.pop(n)
                if not f.done():
                    f.set_result(codes[n])

    def close(self) -> None:
        for t in self._tasks:
            t.cancel()
