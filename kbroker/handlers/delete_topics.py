"""DeleteTopics (20), versions 1-6: by name, and from v6 by name or topic id."""

from __future__ import annotations

from kbroker.wire.generated.delete_topics_response import DeleteTopicsResponse
from kbroker.wire.primitives import ZERO_UUID

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

_Result = DeleteTopicsResponse.DeletableTopicResult


async def _delete(ctx, req):
    if ctx.api_version >= 6:
        targets = [(t.name, None if t.topic_id == ZERO_UUID else t.topic_id) for t in req.topics]
    else:
        targets = [(n, None) for n in req.topic_names]
    results = await ctx.broker.delete_topics(targets)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=[
        _Result(name=r.name, topic_id=r.topic_id or ZERO_UUID, error_code=r.error, error_message=r.message)
        for r in results
    ])


def handle(ctx, req):
    return _delete(ctx, req)
