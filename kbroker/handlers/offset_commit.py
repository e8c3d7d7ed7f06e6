"""OffsetCommit (8), versions 0-9: generation checks for classic groups, member epochs for
consumer groups (v9), metadata kept, v2-4 retention."""
from __future__ import annotations

from kbroker.groups import errors
from kbroker.groups.handler_support import coordinator, known_partitions
from kbroker.groups.offsets import CommitPartition
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
    answers: dict[str, dict[int, int]] = {}
    valid = []
    for t in req.topics:
        known = known_partitions(ctx, t.name)
        rows = []
        for p in t.partitions:
            if known is None or p.partition_index not in known:
                answers.setdefault(t.name, {})[p.partition_index] = errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                rows.append(CommitPartition(p.partition_index, p.committed_offset,
                                            p.committed_leader_epoch if v >= 6 else -1, p.committed_metadata))
        if rows:
            valid.append((t.name, rows))
    if not req.group_id:
        code = errors.INVALID_GROUP_ID
        for name, rows in valid:
            for cp in rows:
                answers.setdefault(name, {})[cp.partition] = code
    elif valid:
        oc = OffsetCommitRequest(req.group_id, valid, req.generation_id_or_member_epoch if v >= 1 else -1,
                                 req.member_id if v >= 1 else "", req.group_instance_id if v >= 7 else None,
                                 req.retention_time_ms if 2 <= v <= 4 else -1, v)
        try:
            result = await coordinator(ctx).run(req.group_id, lambda shard, now: shard.commit_offsets(oc, now))
        except CoordinatorError as e:
            result = [(name, [(cp.partition, e.code) for cp in rows]) for name, rows in valid]
        for name, parts in result:
            for p, code in parts:
                answers.setdefault(name, {})[p] = code
    # Answer in request order.
    topics = []
    for t in req.topics:
        got = answers.get(t.name, {})
        topics.append(_Topic(name=t.name, partitions=[_Part(partition_index=p.partition_index,
                                                            error_code=got.get(p.partition_index, 0))
                                                      for p in t.partitions]))
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def handle(ctx, req):
    return _commit(ctx, req)
