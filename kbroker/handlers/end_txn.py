"""EndTxn (26), versions 0-4: commit or abort. The answer comes once PrepareCommit /
PrepareAbort is durable in __transaction_state; the markers follow in the background.

Version 5 (KIP-890 part 2: an epoch bump per transaction) is not advertised: it needs
transaction protocol version 2, which this coordinator does not implement."""

from __future__ import annotations

from kbroker.txn.handler_util import abortable_for, fenced_for, txn_runtime
from kbroker.wire.errors import Errors
from kbroker.wire.generated.end_txn_response import EndTxnResponse

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4


async def _handle(ctx, req):
    rt = txn_runtime(ctx)
    if rt is None:
        return EndTxnResponse(error_code=Errors.COORDINATOR_NOT_AVAILABLE)
    err = await rt.ensure_ready(req.transactional_id)
    if err:
        return EndTxnResponse(error_code=err)
    out = await rt.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                           req.committed)
    v = ctx.api_version
    return EndTxnResponse(throttle_time_ms=0,
                          error_code=abortable_for(v, 4, fenced_for(v, 2, out.error)))


def handle(ctx, req):
    return _handle(ctx, req)
