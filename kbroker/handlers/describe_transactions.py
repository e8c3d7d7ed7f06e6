"""DescribeTransactions (65), version 0: the coordinator's view of transactional ids."""

from __future__ import annotations

from kbroker.txn.handler_util import txn_runtime
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_transactions_response import DescribeTransactionsResponse

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


async def _handle(ctx, req):
    rt = txn_runtime(ctx)
    err = Errors.COORDINATOR_NOT_AVAILABLE if rt is None else await rt.ensure_ready()
    states = []
    for tid in req.transactional_ids:
        if err:
            states.append(_State(error_code=err, transactional_id=tid, topics=[]))
            continue
        await rt.ensure_ready(tid)
        d = rt.coordinator.describe(tid)
        by_topic: dict[str, list[int]] = {}
        for topic, p in d.partitions:
            by_topic.setdefault(topic, []).append(p)
        states.append(_State(
            error_code=d.error, transactional_id=tid, transaction_state=d.state,
            transaction_timeout_ms=d.transaction_timeout_ms,
            transaction_start_time_ms=d.transaction_start_time_ms,
            producer_id=d.producer_id, producer_epoch=d.producer_epoch,
            topics=[_Topic(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


def handle(ctx, req):
    return _handle(ctx, req)
