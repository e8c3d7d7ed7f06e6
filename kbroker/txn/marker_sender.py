"""COMMIT/ABORT markers to each partition's leader, wherever it is (Kafka's
TransactionMarkerChannelManager).

``MarkerSender.write(job, still_current)`` writes one transaction's markers and returns once
every partition has its marker (``DONE``), a partition answered that the producer or the
coordinator moved on (``FENCED``), or this coordinator lost the transaction (``STALE``).

* A partition led here is written through ``write_local`` (the WriteTxnMarkers handler's own
  path, which waits for the in-sync replicas).
* Partitions led elsewhere queue per destination broker; one task per broker drains its queue
  into one WriteTxnMarkers request (every marker waiting for that broker, of every
  transaction) over ``kbroker.net.client.KafkaClient``, so markers are batched per broker.
* A partition whose leader is unknown, moved (NOT_LEADER_OR_FOLLOWER), has too few in-sync
  replicas, or whose broker did not answer is retried after ``retry_backoff_s``, each time
  asking the metadata image for its current leader: completion is tracked per partition.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from kbroker.txn.errors import TxnErrors as E
from kbroker.wire.generated.write_txn_markers_request import WriteTxnMarkersRequest

log = logging.getLogger("kbroker.txn.markers")

DONE, FENCED, STALE = "done", "fenced", "stale"

# errors after which a partition's marker is retried (Kafka's TransactionMarkerRequestCompletionHandler)
RETRIABLE_MARKER_ERRORS = frozenset({
    E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, 20, E.REQUEST_TIMED_OUT,
    E.KAFKA_STORAGE_ERROR, E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE,
    E.COORDINATOR_LOAD_IN_PROGRESS, E.UNKNOWN_SERVER_ERROR})
FENCED_MARKER_ERRORS = frozenset({E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED})

_Marker = WriteTxnMarkersRequest.WritableTxnMarker
_Topic = _Marker.WritableTxnMarkerTopic


@dataclass(frozen=True, slots=True)
class _Key:
    """What one WritableTxnMarker entry shares."""
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def build_request(entries: list[tuple[_Key, str, int]]) -> WriteTxnMarkersRequest:
    """One request for (marker key, topic, partition) entries: one marker per key."""
    by_key: dict[_Key, dict[str, list[int]]] = {}
    for key, topic, partition in entries:
        by_key.setdefault(key, {}).setdefault(topic, []).append(partition)
    markers = [_Marker(producer_id=k.producer_id, producer_epoch=k.producer_epoch,
                       transaction_result=k.commit, coordinator_epoch=k.coordinator_epoch,
                       topics=[_Topic(name=t, partition_indexes=sorted(ps))
                               for t, ps in sorted(topics.items())])
               for k, topics in by_key.items()]
    return WriteTxnMarkersRequest(markers=markers)


def response_codes(resp) -> dict[tuple[int, str, int], int]:
    """(producer id, topic, partition) -> error code of a WriteTxnMarkers response."""
    out = {}
    for m in resp.markers:
        for t in m.topics:
            for p in t.partitions:
                out[(m.producer_id, t.name, p.partition_index)] = p.error_code
    return out


class _Destination:
    """The queue and drain task of one remote broker."""

    def __init__(self) -> None:
        self.queue: list[tuple[_Key, str, int, asyncio.Future]] = []
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None


class MarkerSender:
    def __init__(self, local_id: int, leader_of: Callable[[str, int], int],
                 topic_exists: Callable[[str], bool],
                 write_local: Callable[..., Awaitable[int]],
                 send_to: Callable[[int, WriteTxnMarkersRequest], Awaitable[object]],
                 retry_backoff_s: float = 0.1) -> None:
        """``leader_of(topic, partition)`` -> leader id (-1: none); ``write_local(topic,
        partition, pid, epoch, coordinator epoch, commit)`` -> error code once replicated;
        ``send_to(broker, request)`` -> WriteTxnMarkersResponse, raising on a network
        failure."""
        self.local_id = local_id
        self.leader_of = leader_of
        self.topic_exists = topic_exists
        self.write_local = write_local
        self.send_to = send_to
        self.retry_backoff_s = retry_backoff_s
        self._dest: dict[int, _Destination] = {}
        self.requests_sent = 0          # WriteTxnMarkers requests (tests count batching)

    async def write(self, job, still_current: Callable[[], bool]) -> str:
        key = _Key(job.producer_id, job.producer_epoch, job.commit, job.coordinator_epoch)
        remaining = set(job.partitions)
        while remaining:
            if not still_current():
                return STALE
            order = sorted(remaining)
            codes = await asyncio.gather(*(self._one(key, tp) for tp in order))
            for tp, code in zip(order, codes):
                if code == E.NONE:
                    remaining.discard(tp)
                elif code == E.UNKNOWN_TOPIC_OR_PARTITION and not self.topic_exists(tp[0]):
                    remaining.discard(tp)     # deleted: nothing left to mark
                elif code in FENCED_MARKER_ERRORS:
                    log.info("markers of %s cancelled: %s on %s-%d", job.transactional_id,
                             E(code).name, *tp)
                    return FENCED
                elif code not in RETRIABLE_MARKER_ERRORS:
                    log.warning("marker for %s on %s-%d failed with %s; retrying",
                                job.transactional_id, tp[0], tp[1], code)
            if remaining:
                await asyncio.sleep(self.retry_backoff_s)
        return DONE

    async def _one(self, key: _Key, tp: tuple[str, int]) -> int:
        leader = self.leader_of(*tp)
        if leader < 0:
            return E.NOT_LEADER_OR_FOLLOWER
        if leader == self.local_id:
            return await self.write_local(tp[0], tp[1], key.producer_id, key.producer_epoch,
                                          key.coordinator_epoch, key.commit)
        d = self._dest.get(leader)
        if d is None:
            d = self._dest[leader] = _Destination()
        if d.task is None or d.task.done():
            d.task = asyncio.create_task(self._drain(leader, d), name=f"txn-markers-{leader}")
        fut = asyncio.get_running_loop().create_future()
        d.queue.append((key, tp[0], tp[1], fut))
        d.wake.set()
        return await fut

    async def _drain(self, broker: int, d: _Destination) -> None:
        while True:
            await d.wake.wait()
            d.wake.clear()
            batch, d.queue = d.queue, []
            if not batch:
                continue
            req = build_request([(k, t, p) for k, t, p, _ in batch])
            self.requests_sent += 1
            try:
                codes = response_codes(await self.send_to(broker, req))
            except asyncio.CancelledError:
                for *_, fut in batch:
                    if not fut.done():
                        fut.set_result(E.REQUEST_TIMED_OUT)
                raise
            except Exception as e:     # the broker is gone or did not answer: retry later
                log.info("WriteTxnMarkers to broker %d failed: %s", broker, e)
                codes = {}
            for k, t, p, fut in batch:
                if not fut.done():
                    fut.set_result(codes.get((k.producer_id, t, p), E.REQUEST_TIMED_OUT))

    async def close(self) -> None:
        tasks = [d.task for d in self._dest.values() if d.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
