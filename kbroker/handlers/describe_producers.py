"""DescribeProducers (61), version 0: the active producers of partitions this node leads,
from each partition's producer state (idempotent and transactional)."""

from __future__ import annotations

from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_producers_response import DescribeProducersResponse

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0

_Topic = DescribeProducersResponse.TopicResponse
_Part = _Topic.PartitionResponse
_Producer = _Part.ProducerState


def _partition(part, index: int) -> _Part:
    if part is None:
        return _Part(partition_index=index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                     active_producers=[])
    producers = []
    for pid, e in sorted(part.producer_state.active_producers.items()):
        producers.append(_Producer(
            producer_id=pid, producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
            last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
            current_txn_start_offset=(-1 if e.current_txn_first_offset is None
                                      else e.current_txn_first_offset)))
    return _Part(partition_index=index, error_code=0, active_producers=producers)


def handle(ctx, req):
    replicas = ctx.broker.replicas
    topics = []
    for t in req.topics:
        parts = [_partition(replicas.get(t.name, p), p) for p in t.partition_indexes]
        topics.append(_Topic(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
