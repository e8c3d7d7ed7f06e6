"""TransactionCoordinator state machine with a fake clock: commit, abort, fencing, timeouts,
expiration, admin views. Restart-in-every-state lives in test_coordinator_recovery.py."""

import pytest

from kbroker.txn.coordinator import (
    ProducerIdAllocationError,
    Reply,
    TxnConfig,
    WriteKind,
)
from kbroker.txn.errors import TxnErrors as E
from kbroker.txn.txn_state import IllegalTransitionError, TxnState

from test_coordinator_harness import Harness

T1 = ("orders", 0)
T2 = ("orders", 1)
OFFSETS = ("__consumer_offsets", 7)


@pytest.fixture
def h():
    return Harness()


def begin(h, txn_id="tx", timeout_ms=60_000):
    r = h.init(txn_id, timeout_ms)
    assert r.error == E.NONE
    return r.producer_id, r.producer_epoch


# ---- InitProducerId ----------------------------------------------------------------------


def test_init_new_id_gets_epoch_zero(h):
    pid, epoch = begin(h)
    assert (pid, epoch) == (1000, 0)
    md = h.state("tx")
    assert md.state == TxnState.EMPTY and md.pending_state is None
    assert len(h.txn_log[h.coord.partition_for("tx")]) == 1


def test_init_again_bumps_epoch_and_keeps_producer_id(h):
    pid, _ = begin(h)
    r = h.init("tx")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, 1)


def test_init_validates_arguments(h):
    assert h.coord.init_producer_id("", 1000, 0).error == E.INVALID_REQUEST
    assert h.coord.init_producer_id("tx", 0, 0).error == E.INVALID_TRANSACTION_TIMEOUT
    too_long = h.config.transaction_max_timeout_ms + 1
    assert h.coord.init_producer_id("tx", too_long, 0).error == E.INVALID_TRANSACTION_TIMEOUT
    assert h.coord.init_producer_id("tx", h.config.transaction_max_timeout_ms, 0).write


def test_not_coordinator_and_loading(h):
    p = h.coord.partition_for("tx")
    h.coord.unload_partition(p)
    assert h.coord.init_producer_id("tx", 1000, 0).error == E.NOT_COORDINATOR
    h.coord.begin_loading(p, 5)
    assert h.coord.init_producer_id("tx", 1000, 0).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.coord.end_txn("tx", 1, 0, True, 0).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.coord.list_transactions(0).error == E.COORDINATOR_LOAD_IN_PROGRESS
    h.coord.load_partition(p, 5, [], 0)
    assert h.coord.init_producer_id("tx", 1000, 0).write is not None


def test_allocation_failure_is_reported():
    def fail():
        raise ProducerIdAllocationError("no block", E.COORDINATOR_NOT_AVAILABLE)

    h = Harness()
    h.coord._allocate_producer_id = fail
    assert h.coord.init_producer_id("tx", 1000, 0).error == E.COORDINATOR_NOT_AVAILABLE


def test_concurrent_init_while_a_write_is_pending(h):
    begin(h)
    reply = h.coord.init_producer_id("tx", 1000, h.clock.now_ms)
    assert reply.write is not None
    assert h.coord.init_producer_id("tx", 1000, h.clock.now_ms).error == E.CONCURRENT_TRANSACTIONS
    h.finish(reply)
    assert h.coord.init_producer_id("tx", 1000, h.clock.now_ms).write is not None


def test_init_with_expected_epoch_kip360(h):
    pid, epoch = begin(h)
    # the producer resumes with its current epoch: bumped, last epoch remembered
    r = h.init("tx", pid=pid, epoch=epoch)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 1)
    # a retry of that call (the response was lost) gets the same epoch back
    r2 = h.init("tx", pid=pid, epoch=epoch)
    assert (r2.error, r2.producer_epoch) == (E.NONE, epoch + 1)
    # a stale epoch is fenced
    assert h.init("tx", pid=pid, epoch=epoch - 1 if epoch else 99).error == E.PRODUCER_FENCED
    # a different producer id is fenced
    assert h.init("tx", pid=pid + 55, epoch=0).error == E.PRODUCER_FENCED


def test_epoch_exhaustion_rotates_producer_id(h):
    pid, _ = begin(h)
    md = h.state("tx")
    md.producer_epoch = 32766  # Short.MaxValue - 1: exhausted
    r = h.init("tx")
    assert r.error == E.NONE
    assert r.producer_id != pid and r.producer_epoch == 0
    assert h.state("tx").prev_producer_id == pid


# ---- the happy paths ------------------------------------------------------------------------


def test_commit_flow(h):
    pid, epoch = begin(h)
    h.clock.advance(10)
    start = h.clock.now_ms
    assert h.add("tx", pid, epoch, T1).error == E.NONE
    md = h.state("tx")
    assert md.state == TxnState.ONGOING and md.txn_start_ms == start
    h.clock.advance(10)
    assert h.add("tx", pid, epoch, T2, OFFSETS).error == E.NONE
    assert md.partitions == {T1, T2, OFFSETS} and md.txn_start_ms == start
    n = len(h.txn_log[h.coord.partition_for("tx")])
    # partitions already in the transaction: answered without a write
    reply = h.coord.add_partitions("tx", pid, epoch, [T1], h.clock.now_ms)
    assert reply.write is None and reply.error == E.NONE
    out = h.end("tx", pid, epoch, commit=True)
    assert (out.error, out.producer_id, out.producer_epoch) == (E.NONE, pid, epoch)
    assert md.state == TxnState.COMPLETE_COMMIT and not md.partitions
    assert {tp for job, tp in h.markers} == {T1, T2, OFFSETS}
    assert all(job.commit and job.producer_epoch == epoch for job, _ in h.markers)
    # PrepareCommit + CompleteCommit appended
    states = [w for w in h.txn_log[h.coord.partition_for("tx")][n:]]
    assert len(states) == 2
    # a retry of EndTxn(commit) succeeds; abort now is an invalid transition
    assert h.end("tx", pid, epoch, True).error == E.NONE
    assert h.end("tx", pid, epoch, False).error == E.INVALID_TXN_STATE
    # the next transaction starts from CompleteCommit
    h.clock.advance(5)
    assert h.add("tx", pid, epoch, T2).error == E.NONE
    assert md.state == TxnState.ONGOING and md.txn_start_ms == h.clock.now_ms
    assert md.partitions == {T2}


def test_abort_flow(h):
    pid, epoch = begin(h)
    h.add("tx", pid, epoch, T1)
    assert h.end("tx", pid, epoch, commit=False).error == E.NONE
    md = h.state("tx")
    assert md.state == TxnState.COMPLETE_ABORT
    assert [(j.commit, tp) for j, tp in h.markers] == [(False, T1)]
    assert h.end("tx", pid, epoch, False).error == E.NONE  # retry
    assert h.end("tx", pid, epoch, True).error == E.INVALID_TXN_STATE


def test_end_txn_errors(h):
    pid, epoch = begin(h)
    assert h.end("tx", pid, epoch, True).error == E.INVALID_TXN_STATE  # Empty
    assert h.end("nope", pid, epoch, True).error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end("tx", pid + 1, epoch, True).error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end("tx", pid, epoch + 1, True).error == E.PRODUCER_FENCED
    assert h.end("", pid, epoch, True).error == E.INVALID_REQUEST


def test_end_txn_while_markers_are_in_flight(h):
    h.auto_markers = False
    pid, epoch = begin(h)
    h.add("tx", pid, epoch, T1)
    assert h.end("tx", pid, epoch, True).error == E.NONE
    md = h.state("tx")
    assert md.state == TxnState.PREPARE_COMMIT
    assert md.pending_state == TxnState.COMPLETE_COMMIT
    assert h.end("tx", pid, epoch, True).error == E.CONCURRENT_TRANSACTIONS
    assert h.add("tx", pid, epoch, T2).error == E.CONCURRENT_TRANSACTIONS
    assert h.init("tx").error == E.CONCURRENT_TRANSACTIONS
    h.flush_jobs()
    assert md.state == TxnState.COMPLETE_COMMIT
    assert h.init("tx").error == E.NONE


def test_add_partitions_errors(h):
    pid, epoch = begin(h)
    assert h.add("tx", pid + 1, epoch, T1).error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add("tx", pid, epoch + 1, T1).error == E.PRODUCER_FENCED
    assert h.add("unknown", pid, epoch, T1).error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add("", pid, epoch, T1).error == E.INVALID_REQUEST


def test_verify_partitions(h):
    pid, epoch = begin(h)
    h.add("tx", pid, epoch, T1)
    assert h.coord.verify_partitions("tx", pid, epoch, [T1, T2]) == {
        T1: E.NONE, T2: E.TRANSACTION_ABORTABLE}
    assert h.coord.verify_partitions("tx", pid, epoch + 1, [T1]) == {T1: E.PRODUCER_FENCED}
    assert h.coord.verify_partitions("", pid, epoch, [T1]) == {T1: E.INVALID_REQUEST}


# ---- fencing --------------------------------------------------------------------------------


def test_second_producer_fences_an_ongoing_transaction(h):
    pid, epoch = begin(h)
    h.add("tx", pid, epoch, T1, T2)
    # the new instance: the open transaction is aborted under a bumped epoch first
    r = h.init("tx")
    assert r.error == E.CONCURRENT_TRANSACTIONS
    md = h.state("tx")
    assert md.state == TxnState.COMPLETE_ABORT
    assert {(j.commit, j.producer_epoch, tp) for j, tp in h.markers} == {
        (False, epoch + 1, T1), (False, epoch + 1, T2)}
    # the retry bumps once more
    r = h.init("tx")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 2)
    # the zombie is fenced everywhere
    assert h.add("tx", pid, epoch, T1).error == E.PRODUCER_FENCED
    assert h.end("tx", pid, epoch, True).error == E.PRODUCER_FENCED


def test_fence_is_immediate_even_before_the_abort_is_durable(h):
    pid, epoch = begin(h)
    h.add("tx", pid, epoch, T1)
    reply = h.coord.init_producer_id("tx", 1000, h.clock.now_ms)
    assert reply.write.kind is WriteKind.FENCE_ABORT
    # the old producer cannot commit while the fencing abort is being written
    assert h.end("tx", pid, epoch, True).error == E.PRODUCER_FENCED
    # the append fails: the epoch stays bumped; the next fence does not burn another epoch
    out = h.coord.write_failed(reply.write, E.NOT_ENOUGH_REPLICAS)
    assert out.error == E.COORDINATOR_NOT_AVAILABLE
    md = h.state("tx")
    assert md.state == TxnState.ONGOING and md.producer_epoch == epoch + 1
    assert md.has_failed_epoch_fence
    assert h.init("tx").error == E.CONCURRENT_TRANSACTIONS
    assert md.state == TxnState.COMPLETE_ABORT
    assert {j.producer_epoch for j, _ in h.markers} == {epoch + 1}
    assert h.init("tx").producer_epoch == epoch + 2


def test_write_failure_clears_pending_state(h):
    pid, epoch = begin(h)
    reply = h.coord.add_partitions("tx", pid, epoch, [T1], h.clock.now_ms)
    out = h.coord.write_failed(reply.write, E.NOT_LEADER_OR_FOLLOWER)
    assert out.error == E.NOT_COORDINATOR
    md = h.state("tx")
    assert md.pending_state is None and md.state == TxnState.EMPTY
    assert h.add("tx", pid, epoch, T1).error == E.NONE


def test_coordinator_epoch_change_during_append(h):
    pid, epoch = begin(h)
    reply = h.coord.add_partitions("tx", pid, epoch, [T1], h.clock.now_ms)
    h.append(reply.write)
    # the partition moved away and back (new leader epoch) before the append completed
    p = h.coord.partition_for("tx")
    h.coord.unload_partition(p)
    h.coord.begin_loading(p, 9)
    h.coord.load_partition(p, 9, h.txn_log[p], h.clock.now_ms)
    assert h.coord.write_succeeded(reply.write, h.clock.now_ms).error == E.NOT_COORDINATOR
    # the reloaded state has the appended record anyway
    assert h.state("tx").state == TxnState.ONGOING


# ---- timeouts ---------------------------------------------------------------------------------


def test_timeout_aborts_and_fences(h):
    pid, epoch = begin(h, timeout_ms=5_000)
    h.add("tx", pid, epoch, T1)
    assert h.tick(5_000) == []  # not yet: strictly more than the timeout
    outs = h.tick(1)
    assert len(outs) == 1 and outs[0].error == E.NONE
    md = h.state("tx")
    assert md.state == TxnState.COMPLETE_ABORT and md.producer_epoch == epoch + 1
    assert [(j.commit, j.producer_epoch, tp) for j, tp in h.markers] == [(False, epoch + 1, T1)]
    # the timed-out producer learns it was fenced
    assert h.end("tx", pid, epoch, True).error == E.PRODUCER_FENCED
    assert h.add("tx", pid, epoch, T2).error == E.PRODUCER_FENCED
    # a restart of the application gets a fresh epoch
    assert h.init("tx").producer_epoch == epoch + 2


def test_timeout_skips_idle_and_pending(h):
    pid, epoch = begin(h, timeout_ms=1_000)
    assert h.tick(10_000) == []  # Empty: nothing to abort
    h.add("tx", pid, epoch, T1)
    h.clock.advance(2_000)
    reply = h.coord.end_txn("tx", pid, epoch, True, h.clock.now_ms)  # pending PrepareCommit
    assert h.coord.abort_timed_out(h.clock.now_ms) == []
    h.finish(reply)
    assert h.state("tx").state == TxnState.COMPLETE_COMMIT


def test_timeout_uses_the_start_time_not_the_last_update(h):
    pid, epoch = begin(h, timeout_ms=5_000)
    h.add("tx", pid, epoch, T1)
    h.clock.advance(4_000)
    h.add("tx", pid, epoch, T2)  # adding partitions does not extend the transaction
    assert len(h.tick(1_001)) == 1


# ---- transactional.id.expiration.ms ---------------------------------------------------------


def test_idle_ids_expire_with_a_tombstone():
    h = Harness(config=TxnConfig(num_partitions=4, transactional_id_expiration_ms=10_000))
    pid, epoch = begin(h, "idle")
    begin(h, "busy")
    r = h.init("busy")
    h.add("busy", r.producer_id, r.producer_epoch, T1)
    h.clock.advance(10_000)
    writes = h.coord.expire_transactional_ids(h.clock.now_ms)
    assert [w.transactional_id for w in writes] == ["idle"]
    assert writes[0].is_tombstone and writes[0].kind is WriteKind.EXPIRE
    assert h.state("idle").pending_state == TxnState.DEAD
    assert h.coord.describe("idle").error == E.NONE
    h.finish(Reply(write=writes[0]))
    assert h.state("idle") is None
    assert h.coord.describe("idle").error == E.TRANSACTIONAL_ID_NOT_FOUND
    # the tombstone is replayed as a deletion
    h.restart()
    assert h.state("idle") is None and h.state("busy").state == TxnState.ONGOING
    # a new producer with the expired id starts from scratch with a new producer id
    r2 = h.init("idle")
    assert r2.error == E.NONE and r2.producer_id != pid and r2.producer_epoch == 0


def test_failed_expiration_keeps_the_id():
    h = Harness(config=TxnConfig(num_partitions=4, transactional_id_expiration_ms=10))
    begin(h, "idle")
    h.clock.advance(10)
    [w] = h.coord.expire_transactional_ids(h.clock.now_ms)
    h.coord.write_failed(w, E.NOT_ENOUGH_REPLICAS)
    assert h.state("idle").pending_state is None
    assert h.init("idle").error == E.NONE


# ---- admin ------------------------------------------------------------------------------------


def test_describe_and_list(h):
    pid, epoch = begin(h, "a", timeout_ms=30_000)
    begin(h, "b")
    h.clock.advance(100)
    h.add("a", pid, epoch, T1, T2)
    d = h.coord.describe("a")
    assert (d.error, d.state, d.producer_id, d.producer_epoch) == (E.NONE, "Ongoing", pid, epoch)
    assert d.transaction_timeout_ms == 30_000 and d.partitions == (T1, T2)
    assert d.transaction_start_time_ms == h.clock.now_ms
    assert h.coord.describe("zzz").error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert h.coord.describe("").error == E.INVALID_REQUEST

    everything = h.coord.list_transactions(h.clock.now_ms)
    assert {(t.transactional_id, t.state) for t in everything.transactions} == {
        ("a", "Ongoing"), ("b", "Empty")}
    ongoing = h.coord.list_transactions(h.clock.now_ms, states=["Ongoing", "Bogus"])
    assert [t.transactional_id for t in ongoing.transactions] == ["a"]
    assert ongoing.unknown_state_filters == ["Bogus"]
    assert [t.transactional_id for t in
            h.coord.list_transactions(h.clock.now_ms, producer_ids=[pid]).transactions] == ["a"]
    # duration filter: only transactions running longer than the duration
    h.clock.advance(1_000)
    older = h.coord.list_transactions(h.clock.now_ms, states=["Ongoing"], duration_ms=500)
    assert [t.transactional_id for t in older.transactions] == ["a"]
    assert h.coord.list_transactions(h.clock.now_ms, states=["Ongoing"],
                                     duration_ms=5_000).transactions == []


def test_illegal_transition_is_a_bug_not_an_error(h):
    begin(h)
    md = h.state("tx")
    with pytest.raises(IllegalTransitionError):
        md.prepare_abort_or_commit(TxnState.PREPARE_COMMIT, 0)  # Empty -> PrepareCommit


def test_a_sliced_load_that_was_unloaded_or_superseded_meanwhile_installs_nothing(h):
    """load_partition_steps pauses between records; if the partition is unloaded, or a newer
    election begins loading it, while it pauses, it must not install its (stale) state."""
    pid, epoch = begin(h)
    p = h.coord.partition_for("tx")
    records = list(h.txn_log[p]) * 40                  # enough records to pause in between
    for interrupt in ("unload", "newer"):
        h.coord.unload_partition(p)
        h.coord.begin_loading(p, 10)
        steps = h.coord.load_partition_steps(p, 10, iter(records), h.clock.now_ms)
        next(steps)                                      # paused mid-replay
        h.coord.unload_partition(p)
        if interrupt == "newer":
            h.coord.begin_loading(p, 11)
        with pytest.raises(StopIteration) as done:
            while True:
                next(steps)
        assert done.value.value == []
        assert p not in h.coord.owned_partitions()
    h.coord.load_partition(p, 11, h.txn_log[p], h.clock.now_ms)    # the newer load completes
    assert h.coord.owned_partitions()[p] == 11 and h.state("tx").producer_id == pid
