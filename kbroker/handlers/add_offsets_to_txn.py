"""AddOffsetsToTxn (25), versions 0-4: adds the group's __consumer_offsets partition to the
transaction, so the transaction's markers reach the offsets TxnOffsetCommit writes."""

from __future__ import annotations

from kbroker.groups.partitioning import OFFSETS_TOPIC, offsets_partition_for
from kbroker.txn.handler_util import abortable_for, fenced_for, txn_runtime
from kbroker.wire.errors import Errors
from kbroker.wire.generated.add_offsets_to_txn_response import AddOffsetsToTxnResponse

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4


async def _handle(ctx, req):
    rt = txn_runtime(ctx)
    if rt is None:
        return AddOffsetsToTxnResponse(error_code=Errors.COORDINATOR_NOT_AVAILABLE)
    err = await rt.ensure_ready(req.transactional_id)
    if err:
        return AddOffsetsToTxnResponse(error_code=err)
    n = ctx.broker.config["offsets.topic.num.partitions"]
    tp = (OFFSETS_TOPIC, offsets_partition_for(req.group_id, n))
    out = await rt.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, [tp])
    v = ctx.api_version
    return AddOffsetsToTxnResponse(throttle_time_ms=0,
                                   error_code=abortable_for(v, 4, fenced_for(v, 2, out.error)))


def handle(ctx, req):
    return _handle(ctx, req)
