"""Heartbeat (12), versions 0-4 (classic protocol)."""
from __future__ import annotations

from kbroker.groups.classic.messages import HeartbeatRequest
from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.heartbeat_response import HeartbeatResponse

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def _heartbeat(ctx, req):
    hr = HeartbeatRequest(req.group_id, req.generation_id, req.member_id,
                          req.group_instance_id if ctx.api_version >= 3 else None)
    try:
        code = await coordinator(ctx).run(req.group_id, lambda shard, now: shard.heartbeat(hr, now))
    except CoordinatorError as e:
        code = e.code
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


def handle(ctx, req):
    return _heartbeat(ctx, req)
