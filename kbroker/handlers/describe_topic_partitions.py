"""DescribeTopicPartitions (75), version 0: topics and their partitions from the metadata
image, in name order, paged by a (topic, partition) cursor and a response partition limit
(Kafka's DescribeTopicPartitionsRequestHandler; admin clients 3.7+ describe topics with it)."""

from __future__ import annotations

from kbroker.handlers.metadata import TOPIC_OPS
from kbroker.kraft.controller import validate_topic_name
from kbroker.kraft.image import INTERNAL_TOPICS
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_topic_partitions_response import DescribeTopicPartitionsResponse
from kbroker.wire.primitives import ZERO_UUID

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

DEFAULT_PARTITION_LIMIT = 2000    # max.request.partition.size.limit
_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Part = _Topic.DescribeTopicPartitionsResponsePartition
_Cursor = DescribeTopicPartitionsResponse.Cursor


def _partition(image, p) -> _Part:
    alive = {b.broker_id for b in image.live_brokers()}
    return _Part(error_code=0, partition_index=p.partition_id,
                 leader_id=p.leader if p.leader in alive else -1, leader_epoch=p.leader_epoch,
                 replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                 eligible_leader_replicas=[], last_known_elr=[],   # the Java admin client needs lists, not null
                 offline_replicas=[r for r in p.replicas if r not in image.brokers])


def _error_all(req, code: int) -> DescribeTopicPartitionsResponse:
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=[
        _Topic(error_code=code, name=t.name, is_internal=False, partitions=[]) for t in req.topics])


def handle(ctx, req):
    broker = ctx.broker
    image = broker.image
    cursor = req.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    every_topic = not req.topics
    names = image.topics_by_name if every_topic else [t.name for t in req.topics]
    names = sorted({n for n in names if n >= start_topic})
    if cursor is not None and (not every_topic and cursor.topic_name not in names or cursor.partition_index < 0):
        return _error_all(req, Errors.INVALID_REQUEST)
    try:
        limit = int(broker.config.get("max.request.partition.size.limit", DEFAULT_PARTITION_LIMIT))
    except (TypeError, ValueError):
        limit = DEFAULT_PARTITION_LIMIT
    remaining = max(min(limit, req.response_partition_limit), 1)
    topics, next_cursor = [], None
    for name in names:
        if remaining == 0:       # the next page starts with this topic
            next_cursor = _Cursor(topic_name=name, partition_index=0)
            break
        t = image.topics_by_name.get(name)
        if t is None:
            if not every_topic:
                code = Errors.INVALID_TOPIC_EXCEPTION if validate_topic_name(name) else Errors.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(_Topic(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                                     partitions=[]))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        upper = min(len(t.partitions), first + remaining)
        parts = [_partition(image, t.partitions[i]) for i in range(first, upper) if i in t.partitions]
        topics.append(_Topic(error_code=0, name=name, topic_id=t.topic_id, is_internal=t.internal,
                             partitions=parts, topic_authorized_operations=TOPIC_OPS))
        if upper < len(t.partitions):
            next_cursor = _Cursor(topic_name=name, partition_index=upper)
            break
        remaining -= len(parts)
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
