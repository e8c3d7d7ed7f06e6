"""CreatePartitions (37), versions 0-3: grow topics (never shrink), optionally with replica
assignments for the new partitions, validate_only; through the controller as PartitionRecords,
after which this broker opens the new partitions' logs (ReplicaManager)."""

from __future__ import annotations

from kbroker.wire.generated.create_partitions_response import CreatePartitionsResponse

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


async def _create(ctx, req):
    topics = [(t.name, t.count, [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None)
              for t in req.topics]
    results = await ctx.broker.controller.submit(
        lambda c, now: c.create_partitions(topics, req.validate_only, now))
    await ctx.broker.log_manager.wait_opening()   # new partitions' files are created off the loop
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        _Result(name=name, error_code=code, error_message=msg) for name, code, msg in results])


def handle(ctx, req):
    return _create(ctx, req)
