"""OffsetForLeaderEpoch (23), versions 0-4: the end offset of a leader epoch from the
partition's leader-epoch cache (leader-epoch-checkpoint), as consumers use it to detect log
truncation: the requested epoch if it is the latest (end = log end offset), else the largest
epoch at or below it with the start offset of the next one."""

from __future__ import annotations

from kbroker.replication.leader_hints import not_served_here
from kbroker.wire.errors import Errors
from kbroker.wire.generated.offset_for_leader_epoch_response import OffsetForLeaderEpochResponse

API_KEY = 23
MIN_VERSION = 0
MAX_VERSION = 4

_Topic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_Part = _Topic.EpochEndOffset


def _one(replicas, topic: str, p, version: int) -> _Part:
    idx = p.partition
    part = replicas.get(topic, idx)
    if part is None:   # NOT_LEADER_OR_FOLLOWER if the metadata has it (its log still opening ...)
        return _Part(error_code=not_served_here(replicas.image, topic, idx), partition=idx)
    if part.leader_state is None:   # the leader's epoch cache is the one that counts
        return _Part(error_code=Errors.NOT_LEADER_OR_FOLLOWER, partition=idx)
    current = p.current_leader_epoch if version >= 2 else -1
    if current >= 0 and current != part.leader_epoch:
        code = Errors.FENCED_LEADER_EPOCH if current < part.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
        return _Part(error_code=code, partition=idx)
    plog = part.log
    epoch, end = plog.leader_epoch_cache.end_offset_for(p.leader_epoch, plog.log_end_offset)
    if end < 0:
        epoch, end = -1, -1
    return _Part(error_code=0, partition=idx, leader_epoch=epoch if version >= 1 else -1, end_offset=end)


def handle(ctx, req):
    replicas = ctx.broker.replicas
    v = ctx.api_version
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=[
        _Topic(topic=t.topic, partitions=[_one(replicas, t.topic, p, v) for p in t.partitions])
        for t in req.topics])
