"""ListGroups (16), versions 0-5: every group this node coordinates; state filter (v4+) and
type filter (v5+: classic, consumer)."""
from __future__ import annotations

from kbroker.groups import errors
from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.list_groups_response import ListGroupsResponse

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5

_Listed = ListGroupsResponse.ListedGroup


def handle(ctx, req):
    try:
        rt = coordinator(ctx)
    except CoordinatorError:
        return ListGroupsResponse(throttle_time_ms=0, error_code=errors.COORDINATOR_NOT_AVAILABLE, groups=[])
    v = ctx.api_version
    states = list(req.states_filter) if v >= 4 else None
    types = list(req.types_filter) if v >= 5 else None
    groups = []
    for shard in rt.shards.values():
        for g in shard.list_groups(states, types):
            groups.append(_Listed(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                                  group_type=g.group_type))
    groups.sort(key=lambda g: g.group_id)
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=groups)
