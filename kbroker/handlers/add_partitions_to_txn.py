"""AddPartitionsToTxn (24), versions 0-5.

v0-3: one transaction from a producer. v4+ (brokers): several transactions in one request,
each either added or, with ``verify_only``, checked (KIP-890 part 1). Partitions of topics this
cluster does not know fail with UNKNOWN_TOPIC_OR_PARTITION and the others of that transaction
with OPERATION_NOT_ATTEMPTED, without touching the transaction (as Kafka does).
"""

from __future__ import annotations

from kbroker.txn.handler_util import abortable_for, fenced_for, txn_runtime
from kbroker.wire.errors import Errors
from kbroker.wire.generated.add_partitions_to_txn_response import AddPartitionsToTxnResponse

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5

_Result = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


def _topic_results(codes: dict[tuple[str, int], int]) -> list:
    by_topic: dict[str, list] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append(_PartResult(partition_index=p,
                                                          partition_error_code=code))
    return [_TopicResult(name=t, results_by_partition=parts) for t, parts in by_topic.items()]


async def _one(ctx, rt, txn_id, pid, epoch, topics, verify_only) -> dict:
    v = ctx.api_version
    tps = [(t.name, p) for t in topics for p in t.partitions]
    if rt is None:
        return {tp: Errors.COORDINATOR_NOT_AVAILABLE for tp in tps}
    err = await rt.ensure_ready(txn_id)
    if err:
        return {tp: err for tp in tps}
    image = ctx.broker.image
    unknown = {tp for tp in tps if not _partition_exists(image, *tp)}
    if unknown:
        return {tp: (Errors.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                     else Errors.OPERATION_NOT_ATTEMPTED) for tp in tps}
    if verify_only:
        codes = rt.coordinator.verify_partitions(txn_id, pid, epoch, tps)
    else:
        out = await rt.add_partitions(txn_id, pid, epoch, tps)
        codes = {tp: out.error for tp in tps}
    return {tp: abortable_for(v, 5, fenced_for(v, 2, code)) for tp, code in codes.items()}


def _partition_exists(image, topic: str, partition: int) -> bool:
    t = image.topics_by_name.get(topic)
    return t is not None and partition in t.partitions


async def _handle(ctx, req):
    rt = txn_runtime(ctx)
    if ctx.api_version <= 3:
        codes = await _one(ctx, rt, req.v3_and_below_transactional_id,
                           req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                           req.v3_and_below_topics, False)
        return AddPartitionsToTxnResponse(throttle_time_ms=0,
                                          results_by_topic_v3_and_below=_topic_results(codes))
    results = []
    for t in req.transactions:
        codes = await _one(ctx, rt, t.transactional_id, t.producer_id, t.producer_epoch,
                           t.topics, t.verify_only)
        results.append(_Result(transactional_id=t.transactional_id,
                               topic_results=_topic_results(codes)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0,
                                      results_by_transaction=results)


def handle(ctx, req):
    return _handle(ctx, req)
