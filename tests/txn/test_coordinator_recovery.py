"""Coordinator restart in every state: state is rebuilt by replaying __transaction_state, and a
transaction caught between its Prepare record and its Complete record is finished."""

import pytest

from kbroker.txn.errors import TxnErrors as E
from kbroker.txn.txn_state import TxnState

from test_coordinator_harness import Harness

T1 = ("in", 0)
T2 = ("out", 3)


def started(h, txn_id="tx", timeout_ms=60_000):
    r = h.init(txn_id, timeout_ms)
    return r.producer_id, r.producer_epoch


def test_restart_empty():
    h = Harness()
    pid, epoch = started(h)
    assert h.restart() == []
    md = h.state("tx")
    assert (md.state, md.producer_id, md.producer_epoch) == (TxnState.EMPTY, pid, epoch)
    # the same producer keeps working; a new one bumps the epoch
    assert h.add("tx", pid, epoch, T1).error == E.NONE
    assert h.end("tx", pid, epoch, True).error == E.NONE


def test_restart_ongoing_keeps_the_transaction_and_its_deadline():
    h = Harness()
    pid, epoch = started(h, timeout_ms=10_000)
    h.add("tx", pid, epoch, T1, T2)
    start = h.state("tx").txn_start_ms
    h.clock.advance(3_000)
    assert h.restart() == []
    md = h.state("tx")
    assert md.state == TxnState.ONGOING and md.partitions == {T1, T2}
    assert md.txn_start_ms == start
    # the producer can still commit after the coordinator came back
    assert h.end("tx", pid, epoch, True).error == E.NONE
    assert {tp for _, tp in h.markers} == {T1, T2}


def test_restart_ongoing_then_timeout_aborts():
    h = Harness()
    pid, epoch = started(h, timeout_ms=10_000)
    h.add("tx", pid, epoch, T1)
    h.restart()
    assert h.tick(10_001)[0].error == E.NONE
    md = h.state("tx")
    assert md.state == TxnState.COMPLETE_ABORT and md.producer_epoch == epoch + 1
    assert h.end("tx", pid, epoch, True).error == E.PRODUCER_FENCED


@pytest.mark.parametrize("commit", [True, False])
def test_restart_in_prepare_state_finishes_the_transaction(commit):
    h = Harness(auto_markers=False)
    pid, epoch = started(h)
    h.add("tx", pid, epoch, T1, T2)
    assert h.end("tx", pid, epoch, commit).error == E.NONE
    assert h.state("tx").state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    assert h.markers == []  # crashed before any marker went out
    h.auto_markers = True
    jobs = h.restart()
    assert len(jobs) == 1
    job = jobs[0]
    assert (job.commit, job.producer_id, job.producer_epoch) == (commit, pid, epoch)
    assert job.partitions == {T1, T2}
    assert job.coordinator_epoch == h.coordinator_epoch
    md = h.state("tx")
    assert md.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    # the producer's EndTxn retry gets the decided answer
    assert h.end("tx", pid, epoch, commit).error == E.NONE
    assert h.end("tx", pid, epoch, not commit).error == E.INVALID_TXN_STATE


def test_restart_during_fencing_abort():
    """InitProducerId fenced an Ongoing transaction; the crash came before the markers."""
    h = Harness(auto_markers=False)
    pid, epoch = started(h)
    h.add("tx", pid, epoch, T1)
    assert h.init("tx").error == E.CONCURRENT_TRANSACTIONS
    h.auto_markers = True
    [job] = h.restart()
    assert not job.commit and job.producer_epoch == epoch + 1
    assert h.state("tx").state == TxnState.COMPLETE_ABORT
    # the new producer's retry now succeeds with a further bump
    r = h.init("tx")
    assert (r.error, r.producer_epoch) == (E.NONE, epoch + 2)


@pytest.mark.parametrize("commit", [True, False])
def test_restart_complete(commit):
    h = Harness()
    pid, epoch = started(h)
    h.add("tx", pid, epoch, T1)
    h.end("tx", pid, epoch, commit)
    n_markers = len(h.markers)
    assert h.restart() == []
    assert len(h.markers) == n_markers  # nothing re-sent
    md = h.state("tx")
    assert md.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert not md.partitions
    assert h.add("tx", pid, epoch, T2).error == E.NONE


def test_restart_while_markers_are_being_written_resends_all():
    """Markers are idempotent for the partitions: a restart re-sends them all."""
    h = Harness(auto_markers=False)
    pid, epoch = started(h)
    h.add("tx", pid, epoch, T1, T2)
    h.end("tx", pid, epoch, True)
    [job] = h.pending_jobs
    h.markers.append((job, T1))  # one marker made it before the crash
    h.auto_markers = True
    [job2] = h.restart()
    assert job2.partitions == {T1, T2}
    assert h.state("tx").state == TxnState.COMPLETE_COMMIT


def test_stale_marker_job_after_restart_is_ignored():
    h = Harness(auto_markers=False)
    pid, epoch = started(h)
    h.add("tx", pid, epoch, T1)
    h.end("tx", pid, epoch, True)
    [old_job] = h.pending_jobs
    h.restart()  # auto_markers off: the new job waits too
    assert h.coord.markers_written(old_job) is None  # old coordinator epoch
    h.flush_jobs()
    assert h.state("tx").state == TxnState.COMPLETE_COMMIT


def test_many_ids_across_partitions_survive_restart():
    h = Harness()
    expected = {}
    for i in range(40):
        tid = f"app-{i}"
        pid, epoch = started(h, tid)
        if i % 3 == 0:
            h.add(tid, pid, epoch, T1)
            expected[tid] = TxnState.ONGOING
        elif i % 3 == 1:
            h.add(tid, pid, epoch, T1)
            h.end(tid, pid, epoch, False)
            expected[tid] = TxnState.COMPLETE_ABORT
        else:
            expected[tid] = TxnState.EMPTY
    h.restart()
    assert {tid: h.state(tid).state for tid in expected} == expected
    assert len(h.coord.list_transactions(h.clock.now_ms).transactions) == 40


def test_restart_empty_log_knows_nothing():
    h = Harness()
    h.restart()
    assert h.coord.describe("tx").error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert h.add("tx", 1, 0, T1).error == E.INVALID_PRODUCER_ID_MAPPING
