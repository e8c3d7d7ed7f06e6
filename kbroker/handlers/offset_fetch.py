"""OffsetFetch (9), versions 0-9: one group (v0-7) or several (v8+); all partitions when no
topics are named (v2+); require_stable (v7+); member epoch checks for consumer groups (v9).
An answer leaves once the group writes it reflects are committed (as every coordinator
answer), so no client reads an offset that a coordinator failover could still take back."""
from __future__ import annotations

from kbroker.groups.handler_support import coordinator
from kbroker.groups.result import Result
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.offset_fetch_response import OffsetFetchResponse

API_KEY = 9
MIN_VERSION = 0
MAX_VERSION = 9

_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_GTopic = _Group.OffsetFetchResponseTopics
_GPart = _GTopic.OffsetFetchResponsePartitions
_Topic = OffsetFetchResponse.OffsetFetchResponseTopic
_Part = _Topic.OffsetFetchResponsePartition


async def _fetch_one(ctx, group_id, topics, require_stable, member_id=None, member_epoch=-1):
    """(group error, [(topic, [FetchedOffset])])."""
    try:
        return await coordinator(ctx).run(group_id, lambda shard, now: Result(response=shard.fetch_offsets(
            group_id, topics, require_stable, member_id, member_epoch)))
    except CoordinatorError as e:
        return e.code, []


def handle(ctx, req):
    return _handle(ctx, req)


async def _handle(ctx, req):
    v = ctx.api_version
    stable = req.require_stable if v >= 7 else False
    if v >= 8:
        groups = []
        for g in req.groups:
            topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            member_id = g.member_id if v >= 9 else None
            code, rows = await _fetch_one(ctx, g.group_id, topics, stable, member_id, g.member_epoch if v >= 9 else -1)
            groups.append(_Group(group_id=g.group_id, error_code=code, topics=[
                _GTopic(name=name, partitions=[_GPart(partition_index=r.partition, committed_offset=r.offset,
                                                      committed_leader_epoch=r.leader_epoch, metadata=r.metadata,
                                                      error_code=r.error) for r in parts])
                for name, parts in rows]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    topics = None if (req.topics is None and v >= 2) else [(t.name, list(t.partition_indexes)) for t in req.topics or []]
    code, rows = await _fetch_one(ctx, req.group_id, topics, stable)
    if code and v < 2 and topics:
        # v0-1 have no group-level error: every partition carries it.
        rows = [(name, [_Fake(p, code) for p in parts]) for name, parts in topics]
    out = [_Topic(name=name, partitions=[_Part(partition_index=r.partition, committed_offset=r.offset,
                                               committed_leader_epoch=r.leader_epoch, metadata=r.metadata,
                                               error_code=r.error) for r in parts]) for name, parts in rows]
    return OffsetFetchResponse(throttle_time_ms=0, topics=out, error_code=code if v >= 2 else 0)


class _Fake:
    def __init__(self, partition: int, error: int):
        self.partition, self.error = partition, error
        self.offset, self.leader_epoch, self.metadata = -1, -1, ""


