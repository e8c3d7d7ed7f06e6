"""SyncGroup (14), versions 0-5: followers wait for the leader's assignment."""
from __future__ import annotations

from kbroker.groups.classic.messages import SyncRequest, SyncResponse
from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.sync_group_response import SyncGroupResponse

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def _sync(ctx, req):
    v = ctx.api_version
    sr = SyncRequest(req.group_id, req.generation_id, req.member_id,
                     {a.member_id: bytes(a.assignment) for a in req.assignments},
                     req.group_instance_id if v >= 3 else None,
                     req.protocol_type if v >= 5 else None, req.protocol_name if v >= 5 else None)
    try:
        r = await coordinator(ctx).run_parked(req.group_id, lambda shard, token, now: shard.sync_group(sr, token, now))
    except CoordinatorError as e:
        r = SyncResponse(e.code)
    return SyncGroupResponse(throttle_time_ms=0, error_code=r.error, protocol_type=r.protocol_type,
                             protocol_name=r.protocol_name, assignment=r.assignment)


def handle(ctx, req):
    return _sync(ctx, req)
