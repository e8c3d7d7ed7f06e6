"""The transaction handlers driven directly with decoded request objects over a started
KafkaServer (no listeners): AddPartitionsToTxn v0-v3 and batched v4+ (verify_only),
AddOffsetsToTxn, TxnOffsetCommit (+ OffsetFetch require_stable), EndTxn errors, and the
KIP-890 part 1 checks on Produce and TxnOffsetCommit."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from kbroker.handlers.context import RequestContext
from kbroker.txn.txn_state import TxnState
from kbroker.wire.errors import Errors
from kbroker.wire.generated.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from kbroker.wire.generated.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
)
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.end_txn_request import EndTxnRequest
from kbroker.wire.generated.find_coordinator_request import FindCoordinatorRequest
from kbroker.wire.generated.init_producer_id_request import InitProducerIdRequest
from kbroker.wire.generated.offset_fetch_request import OffsetFetchRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.generated.txn_offset_commit_request import TxnOffsetCommitRequest
from kbroker.wire.primitives import Writer
from kbroker.wire.records import BatchBuilder
from tests.offline_server import start_offline

OFFSETS = "__consumer_offsets"


class Harness:
    def __init__(self, server, loop):
        self.server = server
        self.loop = loop

    def call(self, api_key, version, request):
        spec = self.server.api_specs[api_key]
        ctx = RequestContext(self.server, None, api_key, version, 1, "test",
                             self.server.clock.now_ms(), "PLAINTEXT")
        out = spec.handle(ctx, request)
        if inspect.isawaitable(out):
            out = self.loop.run_until_complete(out)
        if out is not None:
            out.encode_into(Writer(), version)  # must encode at the request's version
        return out

    def settle(self, seconds=0.05):
        """Let background tasks (marker writes, completion records) run."""
        self.loop.run_until_complete(asyncio.sleep(seconds))

    @property
    def rt(self):
        return self.server.txn_coordinator


@pytest.fixture
def h(tmp_path):
    server = start_offline(tmp_path / "data", "offsets.topic.num.partitions=3",
                           "transaction.state.log.num.partitions=3")
    loop = server.loop
    h = Harness(server, loop)
    T = CreateTopicsRequest.CreatableTopic
    r = h.call(19, 7, CreateTopicsRequest(topics=[
        T(name=n, num_partitions=2, replication_factor=-1, assignments=[], configs=[])
        for n in ("t", "u")]))
    assert [t.error_code for t in r.topics] == [0, 0]
    for key_type, key in ((1, "tx"), (0, "g")):
        fc = h.call(10, 4, FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]))
        assert fc.coordinators[0].error_code == 0, fc
    yield h
    loop.run_until_complete(server.shutdown())
    loop.close()


def init_pid(h, txn_id="tx", version=4, pid=-1, epoch=-1):
    r = h.call(22, version, InitProducerIdRequest(transactional_id=txn_id,
                                                  transaction_timeout_ms=60_000,
                                                  producer_id=pid, producer_epoch=epoch))
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def add_v3(h, version, pid, epoch, parts, txn_id="tx"):
    """AddPartitionsToTxn v0-3 -> {(topic, partition): error}."""
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    r = h.call(24, version, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()]))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def add_batched(h, version, txns):
    """AddPartitionsToTxn v4+: txns = [(txn_id, pid, epoch, verify_only, parts)] ->
    {txn_id: {(topic, partition): error}}."""
    Tx = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    req = AddPartitionsToTxnRequest(transactions=[
        Tx(transactional_id=tid, producer_id=pid, producer_epoch=ep, verify_only=vo,
           topics=[T(name=t, partitions=[p for tt, p in parts if tt == t])
                   for t in dict.fromkeys(t for t, _ in parts)])
        for tid, pid, ep, vo, parts in txns])
    r = h.call(24, version, req)
    assert r.error_code == 0
    return {x.transactional_id: {(t.name, p.partition_index): p.partition_error_code
                                 for t in x.topic_results for p in t.results_by_partition}
            for x in r.results_by_transaction}


def end_txn(h, pid, epoch, commit, version=3, txn_id="tx"):
    return h.call(26, version, EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                              producer_epoch=epoch, committed=commit)).error_code


def add_offsets(h, pid, epoch, group="g", version=3, txn_id="tx"):
    return h.call(25, version, AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                      producer_epoch=epoch,
                                                      group_id=group)).error_code


def txn_commit_offsets(h, pid, epoch, offsets, group="g", version=3, txn_id="tx"):
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    P = T.TxnOffsetCommitRequestPartition
    r = h.call(28, version, TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
        topics=[T(name=t, partitions=[P(partition_index=p, committed_offset=o)
                                      for (tt, p), o in offsets.items() if tt == t])
                for t in dict.fromkeys(t for t, _ in offsets)]))
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def fetch_offsets(h, parts, group="g", require_stable=True, version=8):
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    T = G.OffsetFetchRequestTopics
    r = h.call(9, version, OffsetFetchRequest(require_stable=require_stable, groups=[
        G(group_id=group, topics=[T(name=t, partition_indexes=[p for tt, p in parts if tt == t])
                                  for t in dict.fromkeys(t for t, _ in parts)])]))
    g = r.groups[0]
    assert g.error_code == 0
    return {(t.name, p.partition_index): (p.error_code, p.committed_offset)
            for t in g.topics for p in t.partitions}


def txn_batch(pid, epoch, seq, n=2, transactional=True):
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     is_transactional=transactional)
    for i in range(n):
        b.append(key=b"k%d" % i, value=b"v%d" % i, timestamp=1_700_000_000_000 + i)
    return b.build()


def produce(h, topic, partition, records, txn_id="tx", version=9):
    T = ProduceRequest.TopicProduceData
    r = h.call(0, version, ProduceRequest(transactional_id=txn_id, acks=-1, timeout_ms=1000,
                                          topic_data=[T(name=topic, partition_data=[
                                              T.PartitionProduceData(index=partition,
                                                                     records=records)])]))
    return r.responses[0].partition_responses[0].error_code


def state(h, txn_id="tx"):
    return h.rt.coordinator.get(txn_id)


# ---- AddPartitionsToTxn v0-3 -----------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_v0_to_v3(h, version):
    pid, epoch = init_pid(h)
    assert add_v3(h, version, pid, epoch, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): 0}
    md = state(h)
    assert md.state == TxnState.ONGOING and md.partitions == {("t", 0), ("t", 1)}
    # again (a retry): answered at once, no change
    assert add_v3(h, version, pid, epoch, [("t", 0)]) == {("t", 0): 0}
    # one unknown partition fails the request without touching the transaction
    codes = add_v3(h, version, pid, epoch, [("u", 0), ("nope", 0), ("t", 7)])
    assert codes == {("u", 0): Errors.OPERATION_NOT_ATTEMPTED,
                     ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION,
                     ("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert ("u", 0) not in state(h).partitions
    # wrong producer id, stale epoch (PRODUCER_FENCED exists from v2 on)
    assert add_v3(h, version, pid + 1, epoch, [("u", 0)]) == {
        ("u", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
    fenced = Errors.PRODUCER_FENCED if version >= 2 else Errors.INVALID_PRODUCER_EPOCH
    assert add_v3(h, version, pid, epoch - 1, [("u", 0)]) == {("u", 0): fenced}
    assert add_v3(h, version, pid, epoch, [("u", 0)], txn_id="unknown-id") == {
        ("u", 0): Errors.INVALID_PRODUCER_ID_MAPPING}


def test_add_partitions_while_committing_is_concurrent(h, monkeypatch):
    pid, epoch = init_pid(h)
    assert add_v3(h, 3, pid, epoch, [("t", 0)]) == {("t", 0): 0}
    hold_markers(h, monkeypatch)
    assert end_txn(h, pid, epoch, True) == 0
    assert state(h).state == TxnState.PREPARE_COMMIT
    assert add_v3(h, 3, pid, epoch, [("t", 1)]) == {("t", 1): Errors.CONCURRENT_TRANSACTIONS}
    release_markers(h, monkeypatch)
    assert state(h).state == TxnState.COMPLETE_COMMIT
    assert add_v3(h, 3, pid, epoch, [("t", 1)]) == {("t", 1): 0}


# ---- AddPartitionsToTxn v4+ (batched, verify_only) ---------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_batched_v4_plus(h, version):
    a = init_pid(h, "tx")
    b = init_pid(h, "tx-b")
    out = add_batched(h, version, [("tx", *a, False, [("t", 0), ("u", 1)]),
                                   ("tx-b", *b, False, [("t", 1)])])
    assert out == {"tx": {("t", 0): 0, ("u", 1): 0}, "tx-b": {("t", 1): 0}}
    assert state(h, "tx").partitions == {("t", 0), ("u", 1)}
    assert state(h, "tx-b").partitions == {("t", 1)}
    # verify_only: added -> NONE; not added -> TRANSACTION_ABORTABLE (v5) / INVALID_TXN_STATE
    missing = Errors.TRANSACTION_ABORTABLE if version >= 5 else Errors.INVALID_TXN_STATE
    out = add_batched(h, version, [("tx", *a, True, [("t", 0), ("t", 1)]),
                                   ("tx-b", b[0], b[1] - 1, True, [("t", 1)])])
    assert out["tx"] == {("t", 0): 0, ("t", 1): missing}
    assert out["tx-b"] == {("t", 1): Errors.PRODUCER_FENCED}
    assert state(h, "tx").partitions == {("t", 0), ("u", 1)}  # verify_only changes nothing
    # per-transaction errors stay with their transaction
    out = add_batched(h, version, [("tx", a[0] + 99, a[1], False, [("t", 1)]),
                                   ("tx-b", *b, False, [("nope", 0), ("u", 0)])])
    assert out["tx"] == {("t", 1): Errors.INVALID_PRODUCER_ID_MAPPING}
    assert out["tx-b"] == {("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION,
                           ("u", 0): Errors.OPERATION_NOT_ATTEMPTED}


# ---- AddOffsetsToTxn / TxnOffsetCommit / OffsetFetch(require_stable) -----------------------------


def offsets_partition(h, group="g"):
    from kbroker.groups.partitioning import offsets_partition_for
    return offsets_partition_for(group, h.server.config["offsets.topic.num.partitions"])


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_add_offsets_to_txn(h, version):
    pid, epoch = init_pid(h)
    assert add_offsets(h, pid, epoch, version=version) == 0
    assert state(h).partitions == {(OFFSETS, offsets_partition(h))}
    assert add_offsets(h, pid + 5, epoch, version=version) == Errors.INVALID_PRODUCER_ID_MAPPING
    fenced = Errors.PRODUCER_FENCED if version >= 2 else Errors.INVALID_PRODUCER_EPOCH
    assert add_offsets(h, pid, epoch - 1, version=version) == fenced


def test_txn_offset_commit_pending_until_marker(h):
    pid, epoch = init_pid(h)
    # KIP-890 part 1: the group's offsets partition must be in the transaction first
    assert txn_commit_offsets(h, pid, epoch, {("t", 0): 5}) == {("t", 0): Errors.INVALID_TXN_STATE}
    assert add_offsets(h, pid, epoch) == 0
    assert txn_commit_offsets(h, pid, epoch, {("t", 0): 5, ("t", 1): 7}) == {
        ("t", 0): 0, ("t", 1): 0}
    # a later commit in the same transaction needs no new check
    assert txn_commit_offsets(h, pid, epoch, {("t", 1): 8}) == {("t", 1): 0}
    # pending: require_stable -> UNSTABLE_OFFSET_COMMIT; otherwise the last committed (none)
    assert fetch_offsets(h, [("t", 0), ("t", 1)]) == {
        ("t", 0): (Errors.UNSTABLE_OFFSET_COMMIT, -1), ("t", 1): (Errors.UNSTABLE_OFFSET_COMMIT, -1)}
    assert fetch_offsets(h, [("t", 0)], require_stable=False) == {("t", 0): (0, -1)}
    assert end_txn(h, pid, epoch, True) == 0
    h.settle()
    assert state(h).state == TxnState.COMPLETE_COMMIT
    assert fetch_offsets(h, [("t", 0), ("t", 1)]) == {("t", 0): (0, 5), ("t", 1): (0, 8)}
    # next transaction, aborted: the committed offsets stay
    assert add_offsets(h, pid, epoch) == 0
    assert txn_commit_offsets(h, pid, epoch, {("t", 0): 50}) == {("t", 0): 0}
    assert fetch_offsets(h, [("t", 0)])[("t", 0)][0] == Errors.UNSTABLE_OFFSET_COMMIT
    assert end_txn(h, pid, epoch, False) == 0
    h.settle()
    assert fetch_offsets(h, [("t", 0)]) == {("t", 0): (0, 5)}


def test_txn_offset_commit_errors(h):
    pid, epoch = init_pid(h)
    assert add_offsets(h, pid, epoch) == 0
    assert txn_commit_offsets(h, pid, epoch, {("nope", 0): 1}) == {
        ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert txn_commit_offsets(h, pid, epoch, {("t", 0): 1}, group="") == {
        ("t", 0): Errors.INVALID_GROUP_ID}
    assert txn_commit_offsets(h, pid, epoch + 1, {("t", 0): 1}) == {
        ("t", 0): Errors.INVALID_PRODUCER_EPOCH}
    # the offsets partition of another group was never added
    other = next(g for g in (f"g{i}" for i in range(50))
                 if offsets_partition(h, g) != offsets_partition(h))
    fc = h.call(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[other]))
    assert fc.coordinators[0].error_code == 0
    assert txn_commit_offsets(h, pid, epoch, {("t", 0): 1}, group=other) == {
        ("t", 0): Errors.INVALID_TXN_STATE}


# ---- EndTxn ---------------------------------------------------------------------------------------


def hold_markers(h, monkeypatch):
    """Markers cannot be written (a retriable error) until release_markers."""
    monkeypatch.setattr(h.rt, "write_marker_locally",
                        lambda *a, **k: (Errors.NOT_LEADER_OR_FOLLOWER, None, -1))


def release_markers(h, monkeypatch):
    monkeypatch.undo()
    h.settle(0.3)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_end_txn_errors(h, monkeypatch, version):
    pid, epoch = init_pid(h)
    # nothing open: INVALID_TXN_STATE for commit and abort
    assert end_txn(h, pid, epoch, True, version) == Errors.INVALID_TXN_STATE
    assert end_txn(h, pid, epoch, False, version) == Errors.INVALID_TXN_STATE
    assert add_v3(h, 3, pid, epoch, [("t", 0)]) == {("t", 0): 0}
    assert end_txn(h, pid + 1, epoch, True, version) == Errors.INVALID_PRODUCER_ID_MAPPING
    assert end_txn(h, pid, epoch, True, version, txn_id="other") == \
        Errors.INVALID_PRODUCER_ID_MAPPING
    fenced = Errors.PRODUCER_FENCED if version >= 2 else Errors.INVALID_PRODUCER_EPOCH
    assert end_txn(h, pid, epoch - 1, True, version) == fenced
    hold_markers(h, monkeypatch)
    assert end_txn(h, pid, epoch, True, version) == 0
    # markers not written yet (CompleteCommit pending, as in Kafka): both outcomes wait
    assert end_txn(h, pid, epoch, True, version) == Errors.CONCURRENT_TRANSACTIONS
    assert end_txn(h, pid, epoch, False, version) == Errors.CONCURRENT_TRANSACTIONS
    release_markers(h, monkeypatch)
    assert state(h).state == TxnState.COMPLETE_COMMIT
    assert end_txn(h, pid, epoch, True, version) == 0  # a retry after completion
    assert end_txn(h, pid, epoch, False, version) == Errors.INVALID_TXN_STATE
    # a new producer instance fences this one
    new_pid, new_epoch = init_pid(h)
    assert (new_pid, new_epoch) == (pid, epoch + 1)
    assert end_txn(h, pid, epoch, True, version) == fenced


def test_init_producer_id_fences_an_open_transaction(h):
    pid, epoch = init_pid(h)
    assert add_v3(h, 3, pid, epoch, [("t", 0)]) == {("t", 0): 0}
    assert produce(h, "t", 0, txn_batch(pid, epoch, 0)) == 0
    r = h.call(22, 4, InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60_000,
                                            producer_id=-1, producer_epoch=-1))
    assert r.error_code == Errors.CONCURRENT_TRANSACTIONS  # aborting the open one first
    h.settle(0.3)
    new_pid, new_epoch = init_pid(h)
    assert new_pid == pid and new_epoch == epoch + 2
    assert state(h).state == TxnState.EMPTY
    assert end_txn(h, pid, epoch, False) == Errors.PRODUCER_FENCED
    assert produce(h, "t", 0, txn_batch(pid, epoch, 2)) == Errors.INVALID_PRODUCER_EPOCH


# ---- KIP-890 part 1 on Produce -------------------------------------------------------------------


def test_produce_to_a_partition_not_in_the_transaction_fails(h):
    pid, epoch = init_pid(h)
    # no transaction at all
    assert produce(h, "t", 0, txn_batch(pid, epoch, 0)) == Errors.INVALID_TXN_STATE
    assert add_v3(h, 3, pid, epoch, [("t", 0)]) == {("t", 0): 0}
    # partition 1 was not added
    assert produce(h, "t", 1, txn_batch(pid, epoch, 0)) == Errors.INVALID_TXN_STATE
    assert produce(h, "t", 0, txn_batch(pid, epoch, 0)) == 0
    assert produce(h, "t", 0, txn_batch(pid, epoch, 2)) == 0  # in progress: no new check
    # wrong transactional id / none at all
    assert produce(h, "t", 0, txn_batch(pid, epoch, 4), txn_id=None) == 0  # in progress
    assert produce(h, "u", 0, txn_batch(pid, epoch, 0), txn_id=None) == Errors.INVALID_TXN_STATE
    assert produce(h, "u", 0, txn_batch(pid, epoch, 0), txn_id="other") == \
        Errors.INVALID_PRODUCER_ID_MAPPING
    assert end_txn(h, pid, epoch, True) == 0
    h.settle()
    assert state(h).state == TxnState.COMPLETE_COMMIT
    part = h.server.replicas.get("t", 0)
    assert part.last_stable_offset == part.log.log_end_offset
    # a late batch after the commit would hang a new transaction: refused
    assert produce(h, "t", 0, txn_batch(pid, epoch, 6)) == Errors.INVALID_TXN_STATE
    assert part.last_stable_offset == part.log.log_end_offset
    # non-transactional and idempotent produce are not affected
    assert produce(h, "u", 1, txn_batch(-1, -1, -1, transactional=False), txn_id=None) == 0
    assert add_v3(h, 3, pid, epoch, [("t", 0)]) == {("t", 0): 0}
    assert produce(h, "t", 0, txn_batch(pid, epoch, 6)) == 0
