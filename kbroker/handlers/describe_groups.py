"""DescribeGroups (15), versions 0-5: state, protocol, members with their metadata and
assignment. A group that does not exist is reported Dead (GROUP_ID_NOT_FOUND is v6+)."""
from __future__ import annotations

from kbroker.groups import errors
from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.describe_groups_response import DescribeGroupsResponse

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5

_Group = DescribeGroupsResponse.DescribedGroup
_Member = _Group.DescribedGroupMember


def _describe(ctx, group_id: str) -> _Group:
    try:
        d = coordinator(ctx).shard_for(group_id).describe_classic_group(group_id)
    except CoordinatorError as e:
        return _Group(error_code=e.code, group_id=group_id, group_state="", protocol_type="", protocol_data="", members=[])
    code = d.error
    if code == errors.GROUP_ID_NOT_FOUND:
        code = errors.NONE
    return _Group(error_code=code, group_id=group_id, group_state=d.state, protocol_type=d.protocol_type,
                  protocol_data=d.protocol_data, members=[
                      _Member(member_id=m, group_instance_id=i, client_id=c, client_host=h,
                              member_metadata=meta, member_assignment=a) for m, i, c, h, meta, a in d.members])


def handle(ctx, req):
    return DescribeGroupsResponse(throttle_time_ms=0, groups=[_describe(ctx, g) for g in req.groups])
