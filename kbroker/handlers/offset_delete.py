"""OffsetDelete (47), version 0: refused for topics a non-empty group still consumes."""
from __future__ import annotations

from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.offset_delete_response import OffsetDeleteResponse

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Part = _Topic.OffsetDeleteResponsePartition


async def _delete(ctx, req):
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]
    try:
        code, rows = await coordinator(ctx).run(req.group_id, lambda shard, now: shard.delete_offsets(req.group_id, topics))
    except CoordinatorError as e:
        code, rows = e.code, []
    if code:
        return OffsetDeleteResponse(error_code=code, throttle_time_ms=0, topics=[])
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=[
        _Topic(name=name, partitions=[_Part(partition_index=p, error_code=c) for p, c in parts]) for name, parts in rows])


def handle(ctx, req):
    return _delete(ctx, req)
