"""InitProducerId (22), versions 0-5, for idempotent producers. A transactional id is
answered with COORDINATOR_NOT_AVAILABLE until the transaction coordinator lands.

Producer ids come in blocks from the controller (ProducerIdsRecord in the metadata log), so
ids are never reused across restarts."""

from __future__ import annotations

from kbroker.wire.errors import Errors
from kbroker.wire.generated.init_producer_id_response import InitProducerIdResponse

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def _init_transactional(ctx, req):
    # The transaction coordinator (kbroker.txn): epoch bump, fencing, aborting an open txn.
    rt = getattr(ctx.broker, "txn_coordinator", None)
    err = Errors.COORDINATOR_NOT_AVAILABLE if rt is None else await rt.ensure_ready(req.transactional_id)
    if err:
        return InitProducerIdResponse(error_code=err, producer_id=-1, producer_epoch=-1)
    out = await rt.init_producer_id(req.transactional_id, req.transaction_timeout_ms,
                                    req.producer_id, req.producer_epoch)
    code = out.error
    if code == Errors.PRODUCER_FENCED and ctx.api_version < 4:
        code = Errors.INVALID_PRODUCER_EPOCH
    if code:
        return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(error_code=0, producer_id=out.producer_id,
                                  producer_epoch=out.producer_epoch)


async def _init(ctx, req):
    if req.transactional_id is not None:
        return await _init_transactional(ctx, req)
    pid = await ctx.broker.producer_ids.next_id()
    return InitProducerIdResponse(error_code=0, producer_id=pid, producer_epoch=0)


def handle(ctx, req):
    broker = ctx.broker
    if req.transactional_id is None:
        pid = broker.producer_ids.next_id_nowait()
        if pid is not None:
            return InitProducerIdResponse(error_code=0, producer_id=pid, producer_epoch=0)
    return _init(ctx, req)
