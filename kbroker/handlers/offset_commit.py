"""OffsetCommit (8), versions 0-9: generation checks for classic groups, member epochs for
consumer groups (v9), metadata kept, v2-4 retention."""
from __future__ import annotations

from kbroker.groups import errors
from kbroker.groups.handler_support import CommitAnswers, coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.groups.shard import OffsetCommitRequest
from kbroker.wire.generated.offset_commit_response import OffsetCommitResponse

API_KEY = 8
MIN_VERSION = 0
MAX_VERSION = 9

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Part = _Topic.OffsetCommitResponsePartition


async def _commit(ctx, req):
    v = ctx.api_version
    answers = CommitAnswers(ctx, req.topics, with_leader_epoch=v >= 6)
    if not req.group_id:
        answers.fail_valid(errors.INVALID_GROUP_ID)
    elif answers.valid:
        oc = OffsetCommitRequest(req.group_id, answers.valid,
                                 req.generation_id_or_member_epoch if v >= 1 else -1,
                                 req.member_id if v >= 1 else "", req.group_instance_id if v >= 7 else None,
                                 req.retention_time_ms if 2 <= v <= 4 else -1, v)
        try:
            answers.set_all(await coordinator(ctx).run(
                req.group_id, lambda shard, now: shard.commit_offsets(oc, now)))
        except CoordinatorError as e:
            answers.fail_valid(e.code)
    # Answer in request order.
    topics = []
    for t in req.topics:
        got = answers.codes.get(t.name, {})
        topics.append(_Topic(name=t.name, partitions=[_Part(partition_index=p.partition_index,
                                                            error_code=got.get(p.partition_index, 0))
                                                      for p in t.partitions]))
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def handle(ctx, req):
    return _commit(ctx, req)
