"""KIP-890 part 1: a transactional write must belong to a transaction that includes its
partition.

Kafka 3.8+ (``transaction.partition.verification.enable``, default true) has the partition
leader ask the transaction coordinator (AddPartitionsToTxn v4+ ``verify_only``) before it
appends the first transactional batch of a producer's transaction; a hanging transaction
(a late or retried produce after the transaction ended, or a client that never called
AddPartitionsToTxn) is refused instead of pinning the last stable offset forever. When this
broker coordinates the transactional id the check is a dictionary lookup; otherwise
``verify_remotely`` asks the coordinator (the leader of the id's __transaction_state
partition) before the produce is appended (``pending_remote`` says which partitions need it).

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
              E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}


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
                        producer_epoch: int, topic: str, partition: int,
                        remote: dict | None = None) -> int:
    """The coordinator's answer for one partition (AddPartitionsToTxn verify_only codes):
    the local coordinator's, or the remote one's from ``remote`` ((topic, partition) -> code,
    what ``verify_remotely`` gathered)."""
    if runtime is None:
        return E.NONE
    if not transactional_id:
        return E.INVALID_TXN_STATE  # transactional batches need the request's transactional id
    if remote is not None and (topic, partition) in remote:
        return remote[(topic, partition)]
    if runtime.coordinator_node(transactional_id) != runtime.broker.node_id:
        # A synchronous caller cannot ask another broker; callers that can await use
        # verify_remotely (Produce) / verify_partition
        return E.NONE if remote is None else E.NOT_COORDINATOR
    codes = runtime.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                                  [(topic, partition)])
    return codes[(topic, partition)]


def _needs_check(part, buf) -> tuple[int, int] | None:
    """(producer id, epoch) when ``buf`` starts this producer's transaction on ``part``."""
    pe = transactional_producer(buf)
    if pe is None or in_transaction_on(part.producer_state, *pe):
        return None
    return pe


def pending_remote(runtime, transactional_id: str | None, replicas, req
                   ) -> tuple[int, int, list[tuple[str, int]]] | None:
    """(producer id, epoch, partitions) of a Produce whose transaction's coordinator is on
    another broker and which starts the transaction on some partition led here; else None."""
    if runtime is None or not transactional_id:
        return None
    if runtime.coordinator_node(transactional_id) == runtime.broker.node_id:
        return None
    found = None
    tps = []
    for td in req.topic_data:
        for pd in td.partition_data:
            part = replicas.get(td.name, pd.index)
            if part is None or part.leader_state is None or not pd.records:
                continue
            pe = _needs_check(part, pd.records)
            if pe is not None:
                found = pe
                tps.append((td.name, pd.index))
    return None if found is None else (found[0], found[1], tps)


async def verify_remotely(runtime, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v4+ ``verify_only`` to the id's coordinator: (topic, partition) ->
    its code; NOT_COORDINATOR for each when it could not be asked (the produce is retried)."""
    from kbroker.wire.generated.add_partitions_to_txn_request import AddPartitionsToTxnRequest as R

    node = runtime.coordinator_node(transactional_id)
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    req = R(transactions=[R.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        verify_only=True, topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                  for t, ps in by_topic.items()])])
    out = {tp: E.NOT_COORDINATOR for tp in partitions}
    if node < 0:
        return out
    try:
        resp = await runtime.peers.send(node, req)
    except Exception:
        return out
    if resp.error_code:
        return {tp: resp.error_code for tp in partitions}
    for res in resp.results_by_transaction:
        for t in res.topic_results:
            for p in t.results_by_partition:
                out[(t.name, p.partition_index)] = p.partition_error_code
    return out


async def verify_partition(runtime, transactional_id: str | None, producer_id: int,
                           producer_epoch: int, topic: str, partition: int) -> int:
    """The coordinator's verify_only answer for one partition, asking the id's coordinator
    wherever it is (for TxnOffsetCommit's __consumer_offsets partition, say)."""
    remote = None
    if runtime is not None and transactional_id and \
            runtime.coordinator_node(transactional_id) != runtime.broker.node_id:
        remote = await verify_remotely(runtime, transactional_id, producer_id, producer_epoch,
                                       [(topic, partition)])
    return coordinator_verdict(runtime, transactional_id, producer_id, producer_epoch, topic,
                               partition, remote)


def verify_produce(runtime, transactional_id: str | None, part, buf,
                   remote: dict | None = None) -> int:
    """Error code for a Produce of ``buf`` to ``part`` (a ReplicaManager Partition); NONE to
    go ahead. Never awaits: a remote coordinator's answers come in ``remote``."""
    pe = _needs_check(part, buf)
    if pe is None:
        return E.NONE
    pid, epoch = pe
    code = coordinator_verdict(runtime, transactional_id, pid, epoch, part.topic, part.index,
                               remote)
    if code in (E.NONE, E.INVALID_TXN_STATE, E.INVALID_PRODUCER_ID_MAPPING):
        return code
    if code == E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if code in _RETRIABLE:
        return E.NOT_ENOUGH_REPLICAS
    return code
