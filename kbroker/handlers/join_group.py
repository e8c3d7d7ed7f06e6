"""JoinGroup (11), versions 0-9: parked until the group's join phase ends (classic protocol)."""
from __future__ import annotations

from kbroker.groups.classic.messages import JoinRequest, JoinResponse
from kbroker.groups.handler_support import client_host, coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.join_group_response import JoinGroupResponse

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9

_Member = JoinGroupResponse.JoinGroupResponseMember


async def _join(ctx, req):
    v = ctx.api_version
    jr = JoinRequest(req.group_id, req.member_id, req.protocol_type,
                     [(p.name, bytes(p.metadata)) for p in req.protocols], req.session_timeout_ms,
                     req.rebalance_timeout_ms if v >= 1 else -1, req.group_instance_id if v >= 5 else None,
                     ctx.client_id or "", client_host(ctx), v, req.reason if v >= 8 else None)
    try:
        r = await coordinator(ctx).run_parked(req.group_id, lambda shard, token, now: shard.join_group(jr, token, now))
    except CoordinatorError as e:
        r = JoinResponse(e.code, member_id=req.member_id)
    name = r.protocol_name if (r.protocol_name is not None or v >= 7) else ""
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=r.error, generation_id=r.generation_id,
        protocol_type=r.protocol_type, protocol_name=name, leader=r.leader or "",
        skip_assignment=r.skip_assignment, member_id=r.member_id or "",
        members=[_Member(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
                 for m in r.members])


def handle(ctx, req):
    return _join(ctx, req)
