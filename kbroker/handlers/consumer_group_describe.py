"""ConsumerGroupDescribe (69), version 0: KIP-848 groups with epochs, members, current and
target assignments."""
from __future__ import annotations

from kbroker.groups import errors
from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.wire.generated.consumer_group_describe_response import ConsumerGroupDescribeResponse

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 0

R = ConsumerGroupDescribeResponse
_Group, _Member, _TP, _Assignment = R.DescribedGroup, R.DescribedGroup.Member, R.TopicPartitions, R.Assignment


def _assignment(ctx, a) -> "_Assignment":
    by_id = ctx.broker.image.topics_by_id
    tps = []
    for t, ps in sorted(a.items(), key=lambda kv: str(kv[0])):
        topic = by_id.get(t)
        tps.append(_TP(topic_id=t, topic_name=topic.name if topic else "", partitions=sorted(ps)))
    return _Assignment(topic_partitions=tps)


def _describe(ctx, group_id: str) -> "_Group":
    try:
        shard = coordinator(ctx).shard_for(group_id)
    except CoordinatorError as e:
        return _Group(error_code=e.code, group_id=group_id, members=[])
    g = shard.consumer_group(group_id)
    if g is None:
        msg = f"Group {group_id} " + ("is not a consumer group." if group_id in shard.groups else "not found.")
        return _Group(error_code=errors.GROUP_ID_NOT_FOUND, error_message=msg, group_id=group_id, members=[])
    members = [_Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                       member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                       subscribed_topic_names=list(m.subscribed_topic_names),
                       subscribed_topic_regex=m.subscribed_topic_regex,
                       assignment=_assignment(ctx, m.assigned),
                       target_assignment=_assignment(ctx, g.target.get(m.member_id, {})))
               for m in g.members.values()]
    return _Group(error_code=0, group_id=group_id, group_state=g.state.value, group_epoch=g.group_epoch,
                  assignment_epoch=g.assignment_epoch, assignor_name=shard.consumer._choose_assignor(g),
                  members=members)


def handle(ctx, req):
    return R(throttle_time_ms=0, groups=[_describe(ctx, gid) for gid in req.group_ids])
