"""AlterPartitionReassignments (45), version 0: move partitions to new replica sets, or
cancel a move with null replicas; decided by the active controller
(kbroker.kraft.partition_admin; brokers forward it there) (ALTER on the cluster: kbroker.security.authz_filters)."""

from __future__ import annotations

from kbroker.kraft.controller import ControllerResult
from kbroker.kraft.partition_admin import alter_reassignments
from kbroker.wire.generated.alter_partition_reassignments_response import \
    AlterPartitionReassignmentsResponse as R

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0


async def _alter(ctx, req):
    targets = [(t.name, [(p.partition_index, None if p.replicas is None else list(p.replicas))
                         for p in t.partitions]) for t in req.topics]
    results = await ctx.broker.controller.submit(
        lambda c, now: ControllerResult(*alter_reassignments(c.image, targets)))
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=[
        R.ReassignableTopicResponse(name=t, partitions=[
            R.ReassignableTopicResponse.ReassignablePartitionResponse(
                partition_index=p, error_code=c, error_message=m) for p, c, m in parts])
        for t, parts in results])


def handle(ctx, req):
    return _alter(ctx, req)
