"""ListTransactions (66), versions 0-1: filters by state names, producer ids and (v1) how
long a transaction has been running."""

from __future__ import annotations

from kbroker.txn.handler_util import txn_runtime
from kbroker.wire.errors import Errors
from kbroker.wire.generated.list_transactions_response import ListTransactionsResponse

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

_State = ListTransactionsResponse.TransactionState


async def _handle(ctx, req):
    rt = txn_runtime(ctx)
    if rt is None:
        return ListTransactionsResponse(error_code=Errors.COORDINATOR_NOT_AVAILABLE,
                                        unknown_state_filters=[], transaction_states=[])
    if not rt.coordinator.owned_partitions():
        # nothing loaded yet: nothing transactional has happened on this node
        return ListTransactionsResponse(error_code=0, unknown_state_filters=[],
                                        transaction_states=[])
    duration = req.duration_filter if ctx.api_version >= 1 else -1
    res = rt.coordinator.list_transactions(ctx.now_ms, req.producer_id_filters,
                                           req.state_filters, duration)
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=res.error, unknown_state_filters=res.unknown_state_filters,
        transaction_states=[_State(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                   transaction_state=t.state) for t in res.transactions])


def handle(ctx, req):
    return _handle(ctx, req)
