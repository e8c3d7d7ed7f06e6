"""The transaction side of offsets committed inside a transaction.

The group coordinator runtime writes them (GroupCoordinatorRuntime.commit_transactional_offsets:
one transactional batch of the producer, answered once committed); here are the two checks
and hooks that belong to transactions: KIP-890 verification of the __consumer_offsets
partition, and completing the pending offsets when the transaction's marker is written.
"""

from __future__ import annotations

import logging

from kbroker.groups.partitioning import OFFSETS_TOPIC
from kbroker.txn.errors import TxnErrors as E

log = logging.getLogger("kbroker.txn")


async def verify_offsets_partition(broker, partition: int, transactional_id: str, producer_id: int,
                                   producer_epoch: int) -> int:
    """KIP-890 part 1 for TxnOffsetCommit: the first offsets of a transaction on this
    __consumer_offsets partition need the partition in the transaction, as the transaction's
    coordinator says (asked over the network when it is another broker; no await otherwise)."""
    from kbroker.txn.verification import in_transaction_on, verify_partition

    part = broker.replicas.get(OFFSETS_TOPIC, partition)
    if part is not None and in_transaction_on(part.producer_state, producer_id, producer_epoch):
        return E.NONE
    code = await verify_partition(getattr(broker, "txn_coordinator", None), transactional_id,
                                  producer_id, producer_epoch, OFFSETS_TOPIC, partition)
    if code == E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if code in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS):
        return E.COORDINATOR_LOAD_IN_PROGRESS
    return code


def complete_offsets_transaction(broker, partition: int, producer_id: int, commit: bool,
                                 marker_offset: int = -1) -> None:
    """A marker reached __consumer_offsets-<partition> at ``marker_offset``: materialize or
    drop the producer's pending offsets in the group shard. The shard's answers (OffsetFetch)
    then wait until the marker is committed, as for its own writes."""
    groups = getattr(broker, "groups", None)
    shard = groups.shards.get(partition) if groups is not None else None
    if shard is not None:
        shard.offsets.complete_transaction(producer_id, committed=commit)
        shard.last_written = max(shard.last_written, marker_offset)
