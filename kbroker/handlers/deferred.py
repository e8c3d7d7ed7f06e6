"""A response that a handler completes later from a callback, with no task behind it.

A produce answered after its fsync (flush.messages) or after the in-sync replicas caught up
(acks=all) used to be a coroutine: the dispatcher wrapped it in another, the connection in a
Task, and the answer took a Task wake-up and a done callback, a loop iteration each, after the
event that completed it. A Deferred is resolved by that event's own callback; the dispatcher
subscribes to it and encodes the answer there, so the connection sends it in the next
iteration. It can still be awaited (tools, tests, the authorization filters).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

log = logging.getLogger(__name__)


class Deferred:
    __slots__ = ("_callbacks", "_outcome")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Any, BaseException | None], None]] = []
        self._outcome: tuple[Any, BaseException | None] | None = None

    def done(self) -> bool:
        return self._outcome is not None

    def resolve(self, response: Any = None, error: BaseException | None = None) -> None:
        """Complete with ``response`` (or ``error``); the first completion wins. Callbacks run
        now, in the caller's stack: a failing one is logged and does not stop the others."""
        if self._outcome is not None:
            return
        self._outcome = (response, error)
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(response, error)
            except Exception:  # pragma: no cover - a subscriber's own bug
                log.exception("a deferred response's callback failed")

    def then(self, callback: Callable[[Any, BaseException | None], None]) -> None:
        """``callback(response, error)`` once resolved (at once if it is already)."""
        if self._outcome is not None:
            callback(*self._outcome)
        else:
            self._callbacks.append(callback)

    def __await__(self):
        fut = asyncio.get_running_loop().create_future()

        def settle(response, error) -> None:
            if fut.done():
                return
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(response)
        self.then(settle)
        return fut.__await__()
