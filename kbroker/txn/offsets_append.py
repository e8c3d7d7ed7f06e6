"""Transactional offset commits into a group's __consumer_offsets partition.

The group shard validates and builds the records; they are written as one transactional batch
of the producer (producer id and epoch, no sequence: Kafka's coordinator-origin write), and
the partition's producer state learns that the producer's transaction covers them, so its
COMMIT/ABORT marker completes them like any transactional data. The shard keeps them pending
(per producer) until ``complete_offsets_transaction`` runs for that marker.
"""

from __future__ import annotations

import logging

from kbroker.groups.partitioning import OFFSETS_TOPIC
from kbroker.groups.result import Result
from kbroker.txn.errors import TxnErrors as E

log = logging.getLogger("kbroker.txn")


def append_transactional_offsets(broker, shard, commit_req, producer_id: int,
                                 producer_epoch: int, now_ms: int):
    """(error, [(topic, [(partition, error)])]). ``commit_req``: a groups OffsetCommitRequest."""
    from kbroker.groups import record_codec
    from kbroker.groups.runtime import CoordinatorError
    from kbroker.wire.records import BatchBuilder, RecordBatch

    res = Result()
    try:
        shard._validate_commit(commit_req, now_ms, res)
    except Exception as e:  # GroupError carries the group-level code
        code = getattr(e, "code", None)
        if code is None:
            raise
        return code, []
    part = broker.replicas.get(OFFSETS_TOPIC, shard.partition)
    if part is None:
        raise CoordinatorError(E.NOT_COORDINATOR)
    entry = part.producer_state.last_entry(producer_id)
    if entry is not None and producer_epoch < entry.producer_epoch:
        return E.INVALID_PRODUCER_EPOCH, []
    records, answer = shard.offsets.commit(commit_req.group_id, commit_req.topics, now_ms)
    if records:
        b = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                         is_transactional=True)
        for rec in records:
            key, value = record_codec.encode(rec)
            b.append(key=key, value=value, timestamp=now_ms)
        buf = bytearray(b.build())
        from kbroker.log.errors import LogError
        try:
            info = part.log.append(buf, now_ms, leader_epoch=part.leader_epoch,
                                   origin="coordinator")
        except LogError as e:
            return e.error_code, []
        # coordinator origin: no sequence checks, but the transaction now spans these offsets
        part.producer_state.load_from_batches([RecordBatch(buf)])
        part.log.high_watermark = part.log.log_end_offset
        for rec in records:
            shard.replay(rec, producer_id=producer_id)
    return E.NONE, answer


def complete_offsets_transaction(broker, partition: int, producer_id: int, commit: bool) -> None:
    """A marker reached __consumer_offsets-<partition>: materialize or drop the producer's
    pending offsets in the group shard."""
    groups = getattr(broker, "groups", None)
    shard = groups.shards.get(partition) if groups is not None else None
    if shard is not None:
        shard.offsets.complete_transaction(producer_id, committed=commit)
