"""Incremental fetch sessions (KIP-227).

A session remembers, per partition, the fetch position and what was last sent (high watermark,
log start offset, last stable offset), so an incremental fetch names only partitions that
changed and the response carries only partitions with news. Kafka's rules:

* session_id 0, epoch -1 (FINAL): a sessionless full fetch;
* session_id 0, epoch 0: full fetch that creates a session (when a cache slot is free);
* session_id N, epoch -1: close session N, then a sessionless full fetch;
* session_id N, epoch 0: close N, full fetch with a new session;
* session_id N, epoch E>0: incremental; E must be the session's next epoch
  (INVALID_FETCH_SESSION_EPOCH), N must exist (FETCH_SESSION_ID_NOT_FOUND).
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


class CachedPartition:
    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "max_bytes", "log_start_offset",
                 "current_leader_epoch", "sent_hw", "sent_lso", "sent_log_start")

    def __init__(self, topic, topic_id, partition, fetch_offset, max_bytes, log_start_offset,
                 current_leader_epoch: int = -1) -> None:
        self.current_leader_epoch = current_leader_epoch
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.log_start_offset = log_start_offset
        self.sent_hw = -1
        self.sent_lso = -1
        self.sent_log_start = -1


class FetchSession:
    __slots__ = ("id", "epoch", "partitions", "last_used_ms")

    def __init__(self, sid: int, now_ms: int) -> None:
        self.id = sid
        self.epoch = 1                         # the epoch the next incremental fetch must use
        self.partitions: OrderedDict = OrderedDict()   # (topic key, partition) -> CachedPartition
        self.last_used_ms = now_ms


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self._rand = random.Random()

    def _new_id(self) -> int:
        for _ in itertools.count():
            sid = self._rand.randint(1, 2**31 - 1)
            if sid not in self.sessions:
                return sid
        raise AssertionError

    def create(self, now_ms: int) -> FetchSession | None:
        if len(self.sessions) >= self.max_slots:
            self._evict(now_ms)
            if len(self.sessions) >= self.max_slots:
                return None
        s = FetchSession(self._new_id(), now_ms)
        self.sessions[s.id] = s
        return s

    def get(self, sid: int) -> FetchSession | None:
        return self.sessions.get(sid)

    def remove(self, sid: int) -> None:
        self.sessions.pop(sid, None)

    def _evict(self, now_ms: int) -> None:
        stale = [sid for sid, s in self.sessions.items() if now_ms - s.last_used_ms > self.eviction_ms]
        for sid in stale:
            del self.sessions[sid]
        if len(self.sessions) >= self.max_slots and self.sessions:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
            del self.sessions[oldest.id]
