"""DeleteRecords (21), versions 0-2: move each partition's log start offset forward (-1: to
the high watermark); segments below it go in the next retention run. Returns the new low
watermark. One node: the leader is the only replica, so nothing waits for followers."""

from __future__ import annotations

from kbroker.kraft.image import INTERNAL_TOPICS
from kbroker.log.errors import LogError
from kbroker.wire.errors import Errors
from kbroker.wire.generated.delete_records_response import DeleteRecordsResponse

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

HIGH_WATERMARK = -1
_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Part = _Topic.DeleteRecordsPartitionResult


def _delete(part, topic: str, index: int, offset: int) -> _Part:
    def fail(code):
        return _Part(partition_index=index, low_watermark=-1, error_code=code)
    if topic in INTERNAL_TOPICS:
        return fail(Errors.INVALID_TOPIC_EXCEPTION)      # "Cannot delete records of internal topic"
    if part is None:
        return fail(Errors.UNKNOWN_TOPIC_OR_PARTITION)
    plog = part.log
    if not plog.config.delete:
        return fail(Errors.POLICY_VIOLATION)             # compacted only: Kafka refuses too
    target = plog.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        return fail(Errors.OFFSET_OUT_OF_RANGE)
    try:
        low = plog.delete_records(target)                # OFFSET_OUT_OF_RANGE beyond the high watermark
    except LogError as e:
        return fail(e.error_code)
    return _Part(partition_index=index, low_watermark=low, error_code=0)


def handle(ctx, req):
    replicas = ctx.broker.replicas
    return DeleteRecordsResponse(throttle_time_ms=0, topics=[
        _Topic(name=t.name, partitions=[_delete(replicas.get(t.name, p.partition_index), t.name,
                                                p.partition_index, p.offset) for p in t.partitions])
        for t in req.topics])
