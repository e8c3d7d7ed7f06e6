"""DeleteGroups (42), versions 0-2: only empty groups (NON_EMPTY_GROUP otherwise); their
offsets go with them."""
from __future__ import annotations

from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.delete_groups_response import DeleteGroupsResponse

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2

_Result = DeleteGroupsResponse.DeletableGroupResult


async def _delete(ctx, req):
    out = []
    for gid in req.groups_names:
        try:
            code = await coordinator(ctx).run(gid, lambda shard, now, g=gid: shard.delete_group(g, now))
        except CoordinatorError as e:
            code = e.code
        out.append(_Result(group_id=gid, error_code=code))
    return DeleteGroupsResponse(throttle_time_ms=0, results=out)


def handle(ctx, req):
    return _delete(ctx, req)
