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

import asyncio
import itertools
import random

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


class CachedPartition:
    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "max_bytes", "log_start_offset",
                 "current_leader_epoch", "sent_hw", "sent_lso", "sent_log_start", "key", "parked")

    def __init__(self, topic, topic_id, partition, fetch_offset, max_bytes, log_start_offset,
                 current_leader_epoch: int = -1, key=None) -> None:
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
        self.key = key            # (topic name or id, partition): the session's key
        self.parked = None        # (Partition, _Watch) while nothing can have changed


class _Watch:
    """A parked partition's place among its Partition's waiters. ``Partition.wake()`` (high
    watermark moved, appended, truncated, log start moved, role changed, deleted) calls
    ``set_result`` on whatever waits there; this one marks the partition ready in its session
    at once, with no future or callback per partition."""
    __slots__ = ("session", "entry")

    def __init__(self, session: "FetchSession", entry: CachedPartition) -> None:
        self.session = session
        self.entry = entry

    def done(self) -> bool:
        return False

    def set_result(self, _value) -> None:
        self.session._woken(self)


def quiet(e: CachedPartition, error: int, has_records: bool, preferred: int, hw: int, lso: int,
          log_start: int, read_committed: bool) -> bool:
    """Nothing to send for this partition until its Partition wakes: no error, no records,
    caught up, and the client already has its high watermark, LSO and log start offset."""
    limit = lso if read_committed else hw
    return (not error and not has_records and preferred < 0 and e.fetch_offset == limit
            and log_start <= limit and hw == e.sent_hw and lso == e.sent_lso
            and log_start == e.sent_log_start)


class FetchSession:
    """``partitions``: every partition of the session. ``ready``: the ones an incremental
    fetch reads; the rest are parked on their Partition until it wakes, so a fetch costs the
    partitions with news (Kafka walks the whole session: fine in the JVM, 4-6 us a partition
    here, and 10,000-partition sessions re-read on every fetch ran at 0.12x Kafka)."""
    __slots__ = ("id", "epoch", "partitions", "ready", "last_used_ms", "news", "_waiter")

    def __init__(self, sid: int, now_ms: int) -> None:
        self.id = sid
        self.epoch = 1                         # the epoch the next incremental fetch must use
        self.partitions: dict = {}             # (topic key, partition) -> CachedPartition
        self.ready: dict = {}                  # the same keys, those with possible news
        self.last_used_ms = now_ms
        self.news = False                      # a parked partition woke since the last settle
        self._waiter: asyncio.Future | None = None

    def add(self, e: CachedPartition) -> None:
        """A partition the client named (new, or with a new position): read it next."""
        self._unpark(e)
        self.partitions[e.key] = e
        self.ready[e.key] = e

    def forget(self, key) -> None:
        e = self.partitions.pop(key, None)
        self.ready.pop(key, None)
        if e is not None:
            self._unpark(e)

    def clear(self) -> None:
        for e in self.partitions.values():
            self._unpark(e)
        self.partitions.clear()
        self.ready.clear()

    def close(self) -> None:
        """Evicted or closed: leave no watch behind on the partitions."""
        self.clear()

    def settle(self, results, read_committed: bool) -> None:
        """After a read: park the quiet partitions on their Partition; move those that sent
        records to the end of ``ready`` (Kafka's rotation, so a response budget cannot starve
        the partitions behind them). ``results``: ``_Result``-like (entry, part, error,
        records, preferred, hw, lso, log_start)."""
        ready = self.ready
        self.news = False
        for r in results:
            e = r.entry
            if ready.get(e.key) is not e:
                continue
            sent = getattr(r.records, "size", 0) > 0      # a log ReadResult, or b"" for none
            if r.part is not None and quiet(e, r.error, sent, r.preferred, r.hw, r.lso, r.log_start,
                                            read_committed):
                del ready[e.key]
                w = _Watch(self, e)
                e.parked = (r.part, w)
                r.part.waiters.add(w)
            elif sent:
                del ready[e.key]
                ready[e.key] = e

    async def wait_for_news(self, replicas, parts, timeout_s: float, watch=None) -> None:
        """Until a parked partition wakes (or woke since the last settle), one of ``parts``
        (still ready) is appended to (``watch``: since ``replicas.watch_appends(parts)``),
        or ``timeout_s`` passes."""
        fut = self._waiter = asyncio.get_running_loop().create_future()
        if self.news:
            fut.set_result(None)
        try:
            await replicas.wait_for_append(parts, timeout_s, watch, fut)
        finally:
            if self._waiter is fut:
                self._waiter = None

    def _woken(self, w: _Watch) -> None:
        e = w.entry
        if e.parked is None or e.parked[1] is not w:
            return
        e.parked = None
        if self.partitions.get(e.key) is e:
            self.ready[e.key] = e
            self.news = True
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)

    @staticmethod
    def _unpark(e: CachedPartition) -> None:
        if e.parked is not None:
            part, w = e.parked
            part.waiters.discard(w)
            e.parked = None


def wake_on_role_change(part, _change) -> None:
    """Replica manager role listener: a new leader, epoch or role is news for the sessions
    parked on the partition (they answer NOT_LEADER_OR_FOLLOWER or the new epoch)."""
    part.wake()


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0   # sessions dropped to make room (IncrementalFetchSessionEvictionsPerSec)
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
        s = self.sessions.pop(sid, None)
        if s is not None:
            s.close()

    def _evict(self, now_ms: int) -> None:
        stale = [sid for sid, s in self.sessions.items() if now_ms - s.last_used_ms > self.eviction_ms]
        for sid in stale:
            self.remove(sid)
        self.evictions += len(stale)
        if len(self.sessions) >= self.max_slots and self.sessions:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
            self.remove(oldest.id)
            self.evictions += 1

    def partitions_cached(self) -> int:
        """Partitions held by all sessions (NumIncrementalFetchPartitionsCached)."""
        return sum(len(s.partitions) for s in list(self.sessions.values()))
