"""acks=all: produces waiting for the in-sync replicas, keyed by partition (Kafka's
DelayedProduce purgatory), and the min.insync.replicas rules around them.

Pure: the runtime adds an entry after the leader's local append, calls ``on_high_watermark``
whenever a partition's high watermark moves and ``expire(now_ms)`` at ``next_deadline()``;
each returns the entries now complete with their error code. Tokens are opaque (the runtime
keeps a future in them).

* Before appending: fewer in-sync replicas than ``min.insync.replicas`` refuses the write
  with NOT_ENOUGH_REPLICAS (nothing is appended).
* After appending: the produce completes once the high watermark passes its last offset
  (every maximal-ISR member has it); if the ISR has meanwhile shrunk below
  ``min.insync.replicas`` the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND (the records are in
  the log, but not as durable as asked); if ``request.timeout`` passes first, REQUEST_TIMED_OUT.
* acks=1 answers after the local append and acks=0 not at all: neither waits here.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from kbroker.wire.errors import Errors


def check_before_append(acks: int, isr_size: int, min_insync_replicas: int) -> int:
    """NOT_ENOUGH_REPLICAS for an acks=all write while the ISR is below min.insync.replicas."""
    if acks == -1 and isr_size < min_insync_replicas:
        return Errors.NOT_ENOUGH_REPLICAS
    return Errors.NONE


PURGE_SLACK = 1024   # completed heap entries tolerated beyond the live ones before a purge


@dataclass(slots=True)
class PendingProduce:
    key: Any                 # the partition
    last_offset: int         # committed once the high watermark is above it
    deadline_ms: int
    token: Any
    done: bool = False


@dataclass
class DelayedProduces:
    by_key: dict[Any, list[PendingProduce]] = field(default_factory=dict)
    _deadlines: list = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)
    _live: int = 0   # entries not done (completed entries stay in the heap until purged)

    def add(self, key: Any, last_offset: int, deadline_ms: int, token: Any) -> PendingProduce:
        p = PendingProduce(key, last_offset, deadline_ms, token)
        self.by_key.setdefault(key, []).append(p)
        heapq.heappush(self._deadlines, (deadline_ms, next(self._seq), p))
        self._live += 1
        if len(self._deadlines) > 2 * self._live + PURGE_SLACK:
            self._purge()
        return p

    def _purge(self) -> None:
        """Drop completed entries from the deadline heap. A produce answered in a few ms
        otherwise stayed there until its request timeout (30 s): at a few thousand acks=all
        requests a second, ~100,000 entries (Kafka's purgatory purges the same way)."""
        self._deadlines = [e for e in self._deadlines if not e[2].done]
        heapq.heapify(self._deadlines)

    def _completed(self, p: PendingProduce) -> Any:
        """Mark ``p`` done; its token, released here (the heap may keep ``p`` a while)."""
        p.done = True
        self._live -= 1
        token, p.token = p.token, None
        return token

    def on_high_watermark(self, key: Any, high_watermark: int, isr_size: int,
                          min_insync_replicas: int) -> list[tuple[Any, int]]:
        """Complete the produces of ``key`` below ``high_watermark``: [(token, error)]."""
        waiting = self.by_key.get(key)
        if not waiting:
            return []
        code = (Errors.NONE if isr_size >= min_insync_replicas
                else Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        out, keep = [], []
        for p in waiting:
            if p.last_offset < high_watermark:
                out.append((self._completed(p), code))
            else:
                keep.append(p)
        if keep:
            self.by_key[key] = keep
        else:
            del self.by_key[key]
        return out

    def fail(self, key: Any, error: int) -> list[tuple[Any, int]]:
        """The partition is no longer led here (NOT_LEADER_OR_FOLLOWER) or is gone."""
        return [(self._completed(p), error) for p in self.by_key.pop(key, [])]

    def next_deadline(self) -> int | None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def expire(self, now_ms: int) -> list[tuple[Any, int]]:
        out = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, p = heapq.heappop(self._deadlines)
            if p.done:
                continue
            rest = [q for q in self.by_key.get(p.key, []) if q is not p]
            if rest:
                self.by_key[p.key] = rest
            else:
                self.by_key.pop(p.key, None)
            out.append((self._completed(p), Errors.REQUEST_TIMED_OUT))
        return out

    def __len__(self) -> int:
        return self._live
