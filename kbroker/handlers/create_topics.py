"""CreateTopics (19), versions 2-7: through the controller (metadata records), with
validate_only, configs, manual replica assignments and Kafka's per-topic errors."""

from __future__ import annotations

from kbroker.kraft.controller import NewTopic
from kbroker.wire.generated.create_topics_response import CreateTopicsResponse

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = _Result.CreatableTopicConfigs


def to_new_topic(t) -> NewTopic:
    assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} if t.assignments else None
    return NewTopic(t.name, t.num_partitions, t.replication_factor, assignments,
                    {c.name: c.value for c in t.configs})


async def _create(ctx, req):
    broker = ctx.broker
    results = await broker.create_topics([to_new_topic(t) for t in req.topics],
                                         validate_only=req.validate_only)
    out = []
    for r in results:
        if r.error:
            out.append(_Result(name=r.name, error_code=r.error, error_message=r.message,
                               num_partitions=-1, replication_factor=-1, configs=[]))
            continue
        configs = [
            _Config(name=n, value=val, read_only=False, config_source=src, is_sensitive=False)
            for n, val, src in broker.topic_config_entries(r.configs)
        ]
        out.append(_Result(name=r.name, topic_id=r.topic_id, error_code=0, error_message=None,
                           num_partitions=r.num_partitions, replication_factor=r.replication_factor,
                           configs=configs))
    return CreateTopicsResponse(throttle_time_ms=0, topics=out)


def handle(ctx, req):
    return _create(ctx, req)
