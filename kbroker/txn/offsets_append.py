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
                                 producer_epoch: int, now_ms: int,
                                 transactional_id: str | None = None):
    """(error, [(topic, [(partition, error)])]). ``commit_req``: a groups OffsetCommitRequest.

    With ``transactional_id`` the group's __consumer_offsets partition must be part of the
    producer's transaction (AddOffsetsToTxn, KIP-890 part 1), else INVALID_TXN_STATE."""
    from kbroker.groups import record_codec
    from kbroker.groups.runtime import CoordinatorError
    from kbroker.wire.records import BatchBuilder

    if transactional_id is not None:
        err = verify_offsets_partition(broker, shard.partition, transactional_id, producer_id,
                                       producer_epoch)
        if err:
            return err, []
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
        # coordinator origin: no sequence checks, but the transaction now spans these offsets
        res = part.append_as_leader(bytearray(b.build()), now_ms, origin="coordinator")
        if res.error:
            return res.error, []
        for rec in records:
            shard.replay(rec, producer_id=producer_id)
    return E.NONE, answer


def verify_offsets_partition(broker, partition: int, transactional_id: str, producer_id: int,
                             producer_epoch: int) -> int:
    """KIP-890 part 1 for TxnOffsetCommit: the first offsets of a transaction on this
    __consumer_offsets partition need the partition in the transaction."""
    from kbroker.txn.verification import coordinator_verdict, in_transaction_on

    part = broker.replicas.get(OFFSETS_TOPIC, partition)
    if part is not None and in_transaction_on(part.producer_state, producer_id, producer_epoch):
        return E.NONE
    code = coordinator_verdict(getattr(broker, "txn_coordinator", None), transactional_id,
                               producer_id, producer_epoch, OFFSETS_TOPIC, partition)
    if code == E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if code in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS):
        return E.COORDINATOR_LOAD_IN_PROGRESS
    return code


def complete_offsets_transaction(broker, partition: int, producer_id: int, commit: bool) -> None:
    """A marker reached __consumer_offsets-<partition>: materialize or drop the producer's
    pending offsets in the group shard."""
    groups = getattr(broker, "groups", None)
    shard = groups.shards.get(partition) if groups is not None else None
    if shard is not None:
        shard.offsets.complete_transaction(producer_id, committed=commit)
