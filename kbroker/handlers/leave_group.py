"""LeaveGroup (13), versions 0-5; v3+ removes several members (static ones by instance id)."""
from __future__ import annotations

from kbroker.groups.classic.messages import LeaveMember, LeaveResponse
from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.leave_group_response import LeaveGroupResponse

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5

_Member = LeaveGroupResponse.MemberResponse


async def _leave(ctx, req):
    v = ctx.api_version
    if v >= 3:
        members = [LeaveMember(m.member_id, m.group_instance_id, m.reason if v >= 5 else None) for m in req.members]
    else:
        members = [LeaveMember(req.member_id)]
    try:
        r = await coordinator(ctx).run(req.group_id, lambda shard, now: shard.leave_group(req.group_id, members, now))
    except CoordinatorError as e:
        r = LeaveResponse(e.code)
    if v < 3:
        # One member: its own outcome is the answer.
        code = r.error or (r.members[0][2] if r.members else 0)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    return LeaveGroupResponse(throttle_time_ms=0, error_code=r.error,
                              members=[_Member(member_id=m, group_instance_id=i, error_code=c) for m, i, c in r.members])


def handle(ctx, req):
    return _leave(ctx, req)
