"""ListPartitionReassignments (46), version 0: the reassignments in progress (all, or of the
named partitions), from the active controller's image (brokers forward it there).
DESCRIBE on the cluster (kbroker.security.authz_filters)."""

from __future__ import annotations

from kbroker.kraft.controller import ControllerResult
from kbroker.kraft.partition_admin import list_reassignments
from kbroker.wire.generated.list_partition_reassignments_response import \
    ListPartitionReassignmentsResponse as R

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def _list(ctx, req):
    targets = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
    found = await ctx.broker.controller.submit(
        lambda c, now: ControllerResult([], list_reassignments(c.image, targets)))
    T = R.OngoingTopicReassignment
    return R(throttle_time_ms=0, error_code=0, error_message=None, topics=[
        T(name=t, partitions=[T.OngoingPartitionReassignment(partition_index=p, replicas=r, adding_replicas=a,
                                                             removing_replicas=rm) for p, r, a, rm in parts])
        for t, parts in found])


def handle(ctx, req):
    return _list(ctx, req)
