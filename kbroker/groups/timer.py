"""Deadlines keyed by name, driven by the caller's clock (no asyncio here).

Scheduling a key again replaces its deadline, as Kafka's coordinator timer does, so a
heartbeat simply pushes its member's expiry forward.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable


class Timer:
    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, int, Callable[[int], Any]]] = {}
        self._heap: list[tuple[int, int, str]] = []
        self._seq = itertools.count()

    def schedule(self, key: str, deadline_ms: int, fn: Callable[[int], Any]) -> None:
        seq = next(self._seq)
        self._entries[key] = (deadline_ms, seq, fn)
        heapq.heappush(self._heap, (deadline_ms, seq, key))

    def cancel(self, key: str) -> None:
        self._entries.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._entries

    def deadline(self, key: str) -> int | None:
        e = self._entries.get(key)
        return e[0] if e else None

    def _drop_stale(self) -> None:
        while self._heap:
            deadline, seq, key = self._heap[0]
            e = self._entries.get(key)
            if e is not None and e[1] == seq:
                return
            heapq.heappop(self._heap)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_expired(self, now_ms: int) -> list[tuple[str, Callable[[int], Any]]]:
        """Remove and return the (key, fn) whose deadline has passed, earliest first.

        Only those due at call time: callbacks that schedule new, already-due work get it on
        the next call, so one poll cannot loop forever.
        """
        due = []
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                return due
            _, _, key = heapq.heappop(self._heap)
            due.append((key, self._entries.pop(key)[2]))
