"""ConsumerGroupHeartbeat (68), versions 0-1: the KIP-848 consumer protocol."""
from __future__ import annotations

from kbroker.groups.consumer.messages import HeartbeatRequest, HeartbeatResponse
from kbroker.groups.handler_support import client_host, coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1

_TP = ConsumerGroupHeartbeatResponse.TopicPartitions
_Assignment = ConsumerGroupHeartbeatResponse.Assignment


async def _heartbeat(ctx, req):
    owned = None
    if req.topic_partitions is not None:
        owned = {}
        for tp in req.topic_partitions:
            owned.setdefault(tp.topic_id, []).extend(tp.partitions)
    hr = HeartbeatRequest(req.group_id, req.member_id, req.member_epoch, req.instance_id, req.rack_id,
                          req.rebalance_timeout_ms,
                          None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
                          req.subscribed_topic_regex if ctx.api_version >= 1 else None,
                          req.server_assignor, owned, ctx.client_id or "", client_host(ctx), ctx.api_version)
    try:
        r = await coordinator(ctx).run(req.group_id, lambda shard, now: shard.consumer_group_heartbeat(hr, now))
    except CoordinatorError as e:
        r = HeartbeatResponse(e.code)
    assignment = None
    if r.assignment is not None:
        assignment = _Assignment(topic_partitions=[_TP(topic_id=t, partitions=list(ps)) for t, ps in r.assignment.items()])
    return ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=r.error, error_message=r.error_message,
                                          member_id=r.member_id, member_epoch=r.member_epoch,
                                          heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment)


def handle(ctx, req):
    return _heartbeat(ctx, req)
