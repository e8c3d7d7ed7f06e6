"""A follower's fetcher for one source broker, as a pure state machine.

``build_request(now_ms)`` gives the next Fetch (or None while every partition backs off);
the caller sends it however it likes and hands the answer to ``handle_response``, which
appends to, truncates and advances the follower partitions it was given. No socket, no
clock, no awaits: the asyncio driver and the simulations in tests/replication/ both drive it.

Per partition, as Kafka's AbstractFetcherThread:

* Fetch carries the replica's id and broker epoch (ReplicaState, v15+; ReplicaId before),
  the current leader epoch, the fetch offset (= local log end) and the epoch of the last
  local batch (``last_fetched_epoch``, KIP-320);
* a ``diverging_epoch`` answer means the local tail was written under an epoch the leader
  does not have up to that offset: truncate to min(its end offset, the local end offset of
  that epoch) and fetch again (repeats until the logs agree, KIP-101/KIP-279);
* OFFSET_OUT_OF_RANGE: below the leader's log start, restart empty at it; above the
  leader's log end, truncate to the leader's high watermark (nothing above it is committed);
* FENCED_LEADER_EPOCH: stop fetching the partition until metadata gives it a newer epoch;
  other errors (the leader is behind on metadata, still creating the partition) back off;
* the follower's high watermark = min(leader's high watermark, local log end).

A follower partition is any object with ``log_end_offset``, ``latest_epoch``,
``end_offset_for(epoch) -> (epoch, end)``, ``log_start_offset``, ``append_as_follower(records,
now_ms)``, ``truncate_to(offset, now_ms)``, ``truncate_fully_and_start_at(offset, now_ms)``
and ``advance_high_watermark(offset)``: ``kbroker.replication.partition.Partition``, or the
in-memory log of the simulations.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_request import FetchRequest

FETCH_VERSION = 15            # ReplicaState, topic ids, diverging epochs
REPLICA_FETCH_WAIT_MAX_MS = 500
REPLICA_FETCH_MIN_BYTES = 1
REPLICA_FETCH_MAX_BYTES = 10 * 1024 * 1024
REPLICA_FETCH_RESPONSE_MAX_BYTES = 10 * 1024 * 1024
REPLICA_FETCH_BACKOFF_MS = 1000

# Our epoch is older than the leader's: wait for metadata. Anything else (the leader has not
# applied the same metadata yet: UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, a partition
# it is still creating) is retried after the backoff.
_STALE = (Errors.FENCED_LEADER_EPOCH,)


@dataclass(slots=True)
class FollowedPartition:
    topic: str
    partition: int
    topic_id: uuid.UUID
    leader_epoch: int
    replica: Any                 # the local follower partition
    backoff_until_ms: int = 0
    stale: bool = False          # waiting for metadata about a new leader


@dataclass(frozen=True, slots=True)
class Truncation:
    topic: str
    partition: int
    offset: int
    reason: str


class ReplicaFetcher:
    def __init__(self, replica_id: int, leader_id: int, *, broker_epoch: int = -1,
                 max_wait_ms: int = REPLICA_FETCH_WAIT_MAX_MS,
                 min_bytes: int = REPLICA_FETCH_MIN_BYTES,
                 partition_max_bytes: int = REPLICA_FETCH_MAX_BYTES,
                 max_bytes: int = REPLICA_FETCH_RESPONSE_MAX_BYTES,
                 backoff_ms: int = REPLICA_FETCH_BACKOFF_MS, throttle: Any = None) -> None:
        self.replica_id = replica_id
        # the follower's replication quota (kbroker.replication.throttle.ReplicationQuota):
        # an out-of-sync partition it throttles stays out of the Fetch while it is used up
        self.throttle = throttle
        self.leader_id = leader_id
        self.broker_epoch = broker_epoch
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.partition_max_bytes = partition_max_bytes
        self.max_bytes = max_bytes
        self.backoff_ms = backoff_ms
        self.partitions: dict[tuple[str, int], FollowedPartition] = {}
        self.truncations: list[Truncation] = []   # what handle_response cut (for logs/tests)

    # -- membership (from metadata) --------------------------------------------------------

    def add(self, topic: str, partition: int, topic_id: uuid.UUID, leader_epoch: int,
            replica: Any) -> None:
        self.partitions[(topic, partition)] = FollowedPartition(topic, partition, topic_id,
                                                                leader_epoch, replica)

    def remove(self, topic: str, partition: int) -> None:
        self.partitions.pop((topic, partition), None)

    def __len__(self) -> int:
        return len(self.partitions)

    # -- requests ------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """When a backed-off partition may be fetched again (None: nothing waits)."""
        times = [p.backoff_until_ms for p in self.partitions.values() if not p.stale]
        return min(times) if times else None

    def build_request(self, now_ms: int) -> FetchRequest | None:
        by_topic: dict[tuple, FetchRequest.FetchTopic] = {}
        throttle = self.throttle
        # (the quota is one for all partitions: asked once, not per partition of thousands)
        over_quota = throttle is not None and throttle.exceeded(now_ms)
        for p in self.partitions.values():
            if p.stale or p.backoff_until_ms > now_ms:
                continue
            r = p.replica
            if over_quota and throttle.holds(p.topic, p.partition, self.replica_id in r.isr):
                continue
            # by id too: a partition of a same-named topic's other incarnation is never
            # fetched under this one's id
            t = by_topic.get((p.topic, p.topic_id))
            if t is None:
                t = by_topic[(p.topic, p.topic_id)] = FetchRequest.FetchTopic(topic=p.topic, topic_id=p.topic_id)
            t.partitions.append(FetchRequest.FetchTopic.FetchPartition(
                partition=p.partition, current_leader_epoch=p.leader_epoch,
                fetch_offset=r.log_end_offset, last_fetched_epoch=r.latest_epoch,
                log_start_offset=r.log_start_offset, partition_max_bytes=self.partition_max_bytes))
        if not by_topic:
            return None
        # (ReplicaState from v15; the top-level ReplicaId field of older versions stays -1:
        # brokers of this project talk v15+ to each other)
        return FetchRequest(
            replica_state=FetchRequest.ReplicaState(replica_id=self.replica_id,
                                                    replica_epoch=self.broker_epoch),
            max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
            isolation_level=0, session_id=0, session_epoch=-1, topics=list(by_topic.values()))

    # -- responses -----------------------------------------------------------------------

    def handle_response(self, request: FetchRequest, response, now_ms: int) -> list:
        """Apply a Fetch answer. ``request`` is the one it answers: a partition whose
        epoch or offset changed since (a newer role, a truncation) ignores stale data.
        Returns the partitions it appended to (whose fsyncs, if flush.messages started any,
        the next Fetch waits for: its offsets count toward the leader's high watermark)."""
        asked = {(t.topic, p.partition): p for t in request.topics for p in t.partitions}
        appended: list = []
        if response.error_code:
            self.backoff_all(now_ms)
            return appended
        names = {p.topic_id: p.topic for p in self.partitions.values()}
        for t in response.responses:
            topic = t.topic or names.get(t.topic_id, "")   # v13+ names topics by id only
            for pd in t.partitions:
                key = (topic, pd.partition_index)
                fp = self.partitions.get(key)
                sent = asked.get(key)
                if fp is None or sent is None or sent.current_leader_epoch != fp.leader_epoch \
                        or sent.fetch_offset != fp.replica.log_end_offset:
                    continue
                if self._apply(fp, pd, now_ms):
                    appended.append(fp)
        return appended

    def backoff_all(self, now_ms: int) -> None:
        """The request failed as a whole (connection lost, timeout)."""
        for p in self.partitions.values():
            p.backoff_until_ms = now_ms + self.backoff_ms

    def _apply(self, fp: FollowedPartition, pd, now_ms: int) -> bool:
        """One partition's answer; True if it appended records."""
        r = fp.replica
        err = pd.error_code
        appended = False
        if err == Errors.NONE:
            de = pd.diverging_epoch
            if de is not None and de.epoch >= 0 and de.end_offset >= 0:
                self._truncate_diverging(fp, de.epoch, de.end_offset, now_ms)
                return False
            if pd.records is not None and len(pd.records):
                r.append_as_follower(pd.records, now_ms)
                appended = True
                if self.throttle is not None and self.throttle.is_throttled(fp.topic, fp.partition):
                    self.throttle.record(len(pd.records), now_ms)
            r.advance_high_watermark(min(pd.high_watermark, r.log_end_offset))
        elif err == Errors.OFFSET_OUT_OF_RANGE:
            leo = r.log_end_offset
            if pd.log_start_offset >= 0 and leo < pd.log_start_offset:
                r.truncate_fully_and_start_at(pd.log_start_offset, now_ms)
                self.truncations.append(Truncation(fp.topic, fp.partition, pd.log_start_offset,
                                                   "below the leader's log start"))
            elif pd.high_watermark >= 0 and pd.high_watermark < leo:
                r.truncate_to(pd.high_watermark, now_ms)
                self.truncations.append(Truncation(fp.topic, fp.partition, pd.high_watermark,
                                                   "above the leader's log end"))
            else:
                fp.backoff_until_ms = now_ms + self.backoff_ms
        elif err in _STALE:
            fp.stale = True
        else:
            fp.backoff_until_ms = now_ms + self.backoff_ms
        return appended

    def _truncate_diverging(self, fp: FollowedPartition, epoch: int, end_offset: int,
                            now_ms: int) -> None:
        r = fp.replica
        leo = r.log_end_offset
        _, local_end = r.end_offset_for(epoch)
        target = min(end_offset, leo if local_end < 0 else local_end, leo)
        # At the log end this still drops an epoch this replica started as leader but never
        # wrote in, which the leader does not have (Kafka's truncateTo does the same).
        r.truncate_to(target, now_ms)
        self.truncations.append(Truncation(fp.topic, fp.partition, target,
                                           f"diverging epoch {epoch} ends at {end_offset}"))

    # -- metadata ------------------------------------------------------------------------

    def set_leader_epoch(self, topic: str, partition: int, leader_epoch: int) -> None:
        fp = self.partitions.get((topic, partition))
        if fp is not None:
            fp.leader_epoch = leader_epoch
            fp.stale = False
            fp.backoff_until_ms = 0
