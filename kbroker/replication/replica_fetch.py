"""The leader's side of Fetch from follower replicas (ReplicaState / ReplicaId >= 0).

Per partition ``leader_state.answer_replica_fetch`` decides (fencing, diverging epoch, range)
and records the follower's progress, which may advance the high watermark and so complete
acks=all produces. Records are read up to the log end (not the high watermark) as file
regions, sent with sendfile like consumer fetches. With nothing to send the request waits up
to ``max_wait_ms`` for an append, as Kafka's replica fetch long poll does.
"""

from __future__ import annotations

import time

from kbroker import slices
from kbroker.log.errors import LogError
from kbroker.replication.leader_state import answer_replica_fetch
from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_response import FetchResponse
from kbroker.wire.primitives import ZERO_UUID

_Topic = FetchResponse.FetchableTopicResponse
_Part = _Topic.PartitionData


def replica_of(req, version: int) -> tuple[int, int]:
    """(replica id, broker epoch) of a Fetch; replica id -1 for consumers."""
    if version >= 15:
        return req.replica_state.replica_id, req.replica_state.replica_epoch
    return req.replica_id, -1


def handle_replica_fetch(ctx, req):
    replica_id, broker_epoch = replica_of(req, ctx.api_version)
    topics, total, settled = _answer(ctx, req, replica_id, broker_epoch, ctx.now_ms)
    if total or settled or req.max_wait_ms <= 0:
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
    broker = ctx.broker
    parts = [p for t in req.topics for fp in t.partitions
             if (p := _lookup(broker, t, fp, ctx.api_version)[0]) is not None]
    # watched from now, not from when the long poll's task first runs: a produce handled
    # in between would otherwise leave the follower (and that produce's acks=all answer)
    # waiting the whole replica.fetch.wait.max.ms
    return _long_poll(ctx, req, replica_id, broker_epoch, parts, broker.replicas.watch_appends(parts))


async def _long_poll(ctx, req, replica_id, broker_epoch, parts, watch):
    broker = ctx.broker
    await broker.replicas.wait_for_append(parts, req.max_wait_ms / 1000, watch)
    topics, _, _ = _answer(ctx, req, replica_id, broker_epoch, broker.clock.now_ms())
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def _lookup(broker, t, fp, version):
    if version >= 13:
        ti = broker.image.topics_by_id.get(t.topic_id)
        name = ti.name if ti is not None else None
    else:
        name = t.topic
    part = broker.replicas.get(name, fp.partition) if name is not None else None
    return part, name


def _answer(ctx, req, replica_id: int, broker_epoch: int, now_ms: int):
    """(topics, bytes of records, whether any partition has news other than records)."""
    broker = ctx.broker
    v = ctx.api_version
    budget = min(req.max_bytes, broker.config["replica.fetch.response.max.bytes"])
    quota = broker.replication_throttles.leader
    over_quota = quota.exceeded(now_ms)   # one quota for all partitions: asked once
    throttled_bytes = 0
    total = 0
    settled = False
    out = []
    # (a follower of thousands of partitions with records on all of them: reads stop after
    # READ_WHOLE_S, the rest answer without records and come in the next fetch)
    stop_at = time.perf_counter() + slices.READ_WHOLE_S
    for t in req.topics:
        parts = []
        for fp in t.partitions:
            part, name = _lookup(broker, t, fp, v)
            pd = _Part(partition_index=fp.partition, high_watermark=-1, last_stable_offset=-1,
                       log_start_offset=-1, records=b"")
            parts.append(pd)
            if part is None:
                pd.error_code = Errors.UNKNOWN_TOPIC_ID if v >= 13 and name is None else \
                    Errors.UNKNOWN_TOPIC_OR_PARTITION
                settled = True
                continue
            ans = answer_replica_fetch(part.leader_state, part, replica_id, fp.current_leader_epoch,
                                       fp.fetch_offset, fp.last_fetched_epoch, broker_epoch, now_ms)
            pd.error_code = ans.error
            pd.high_watermark = part.high_watermark
            pd.last_stable_offset = part.last_stable_offset
            pd.log_start_offset = part.log_start_offset
            if ans.diverging is not None:
                pd.diverging_epoch = _Part.EpochEndOffset(epoch=ans.diverging[0],
                                                          end_offset=ans.diverging[1])
                settled = True
            elif ans.error:
                settled = True
            elif ans.read_offset < part.log_end_offset and (
                    total == 0 or (budget > total and time.perf_counter() < stop_at)):
                if over_quota and quota.holds(part.topic, part.index, replica_id in part.leader_state.isr):
                    continue    # an out-of-sync replica over the throttle: no records this time
                try:
                    rr = part.log.read(ans.read_offset, min(fp.partition_max_bytes, budget - total),
                                       min_one_message=total == 0)
                except LogError as e:
                    pd.error_code = e.error_code
                    settled = True
                else:
                    if rr.size:
                        pd.records = rr
                        total += rr.size
                        if quota.is_throttled(part.topic, part.index):
                            throttled_bytes += rr.size
        out.append(_Topic(topic=t.topic if v < 13 else "", topic_id=t.topic_id or ZERO_UUID,
                          partitions=parts))
    if throttled_bytes:
        quota.record(throttled_bytes, now_ms)
    return out, total, settled
