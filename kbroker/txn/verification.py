"""KIP-890 part 1: a transactional write must belong to a transaction that includes its
partition.

Kafka 3.8+ (``transaction.partition.verification.enable``, default true) has the partition
leader ask the transaction coordinator (AddPartitionsToTxn v4+ ``verify_only``) before it
appends the first transactional batch of a producer's transaction; a hanging transaction
(a late or retried produce after the transaction ended, or a client that never called
AddPartitionsToTxn) is refused instead of pinning the last stable offset forever. On a single
node the coordinator is in this process, so the check is a dictionary lookup.

Like Kafka, only the start of a transaction on a partition is verified: once the partition's
producer state shows the producer's transaction in progress at the same epoch, later batches
of it need no check.

Error mapping (Kafka's AddPartitionsToTxnManager, for clients before transaction version 2):
not in the transaction -> INVALID_TXN_STATE; fenced -> INVALID_PRODUCER_EPOCH; coordinator
busy or loading -> NOT_ENOUGH_REPLICAS (retriable: the producer retries the batch).
"""

from __future__ import annotations

from kbroker.txn.errors import TxnErrors as E

# RecordBatch v2 header: baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1) crc(4)
# attributes(2) lastOffsetDelta(4) baseTimestamp(8) maxTimestamp(8) producerId(8) epoch(2)
_MAGIC = 16
_ATTRIBUTES = 21
_PRODUCER_ID = 43
_PRODUCER_EPOCH = 51
_HEADER = 61
_TRANSACTIONAL = 0x10
_CONTROL = 0x20

_RETRIABLE = {E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS,
              E.COORDINATOR_NOT_AVAILABLE}


def transactional_producer(buf) -> tuple[int, int] | None:
    """(producer id, epoch) if the first batch of ``buf`` is a transactional v2 data batch."""
    if len(buf) < _HEADER or buf[_MAGIC] != 2:
        return None
    attrs = int.from_bytes(buf[_ATTRIBUTES:_ATTRIBUTES + 2], "big")
    if not attrs & _TRANSACTIONAL or attrs & _CONTROL:
        return None
    pid = int.from_bytes(buf[_PRODUCER_ID:_PRODUCER_ID + 8], "big", signed=True)
    epoch = int.from_bytes(buf[_PRODUCER_EPOCH:_PRODUCER_EPOCH + 2], "big", signed=True)
    return pid, epoch


def in_transaction_on(producer_state, producer_id: int, producer_epoch: int) -> bool:
    """The partition already has this producer's transaction in progress at this epoch."""
    entry = producer_state.last_entry(producer_id)
    return (entry is not None and entry.current_txn_first_offset is not None
            and entry.producer_epoch == producer_epoch)


def coordinator_verdict(runtime, transactional_id: str | None, producer_id: int,
                        producer_epoch: int, topic: str, partition: int) -> int:
    """The coordinator's answer for one partition (AddPartitionsToTxn verify_only codes);
    NONE when this node is not the id's coordinator (nothing to ask locally)."""
    if runtime is None:
        return E.NONE
    if not transactional_id:
        return E.INVALID_TXN_STATE  # transactional batches need the request's transactional id
    coordinator = runtime.coordinator
    codes = coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                          [(topic, partition)])
    code = codes[(topic, partition)]
    if code == E.NOT_COORDINATOR:
        return E.NONE
    return code


def verify_produce(runtime, transactional_id: str | None, part, buf) -> int:
    """Error code for a Produce of ``buf`` to ``part`` (a ReplicaManager Partition); NONE to
    go ahead. Never awaits."""
    pe = transactional_producer(buf)
    if pe is None:
        return E.NONE
    pid, epoch = pe
    if in_transaction_on(part.producer_state, pid, epoch):
        return E.NONE
    code = coordinator_verdict(runtime, transactional_id, pid, epoch, part.topic, part.index)
    if code in (E.NONE, E.INVALID_TXN_STATE, E.INVALID_PRODUCER_ID_MAPPING):
        return code
    if code == E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if code in _RETRIABLE:
        return E.NOT_ENOUGH_REPLICAS
    return code
