"""ProducerStateManager check/commit: idempotence semantics as in Apache Kafka."""

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from kbroker.txn.producer_state import (
    INT32_MAX,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    INVALID_TXN_STATE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    BatchMetadata,
    CheckOutcome,
    ProducerStateManager,
    StaleAppendError,
    decrement_sequence,
    increment_sequence,
)

PID = 1000
NOW = 1_700_000_000_000


class Log:
    """Stand-in for the partition log: hands out consecutive offsets."""

    def __init__(self):
        self.end = 0

    def append(self, n):
        first = self.end
        self.end += n
        return first


def produce(psm, log, pid=PID, epoch=0, seq=0, count=1, ts=NOW, *, txn=False, now=NOW):
    """check + append + commit like the Produce handler; returns the CheckResult and offsets."""
    res = psm.check(pid, epoch, seq, count - 1, ts, now_ms=now, is_transactional=txn)
    if res.ok:
        first = log.append(count)
        psm.commit(res.pending, first)
        return res, (first, first + count - 1)
    return res, None


def test_sequence_helpers_wrap():
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert decrement_sequence(0, 1) == INT32_MAX
    assert BatchMetadata(last_seq=1, last_offset=10, offset_delta=3, timestamp=0).first_seq == INT32_MAX - 1


def test_unknown_producer_accepts_any_sequence():
    psm, log = ProducerStateManager(), Log()
    res, offs = produce(psm, log, seq=4242, count=3)
    assert res.ok and res.outcome is CheckOutcome.OK and offs == (0, 2)
    e = psm.last_entry(PID)
    assert (e.producer_epoch, e.first_seq, e.last_seq) == (0, 4242, 4244)
    assert (e.first_data_offset, e.last_data_offset, e.last_timestamp) == (0, 2, NOW)
    # and then continuity is enforced
    assert produce(psm, log, seq=4245)[0].ok
    assert produce(psm, log, seq=4247)[0].error == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_check_does_not_change_state_until_commit():
    psm = ProducerStateManager()
    res = psm.check(PID, 0, 0, 4, NOW, now_ms=NOW)
    assert res.ok and psm.last_entry(PID) is None
    assert res.pending.record_offsets == 5


@pytest.mark.parametrize("which", range(5))
def test_duplicate_of_each_of_last_five_batches(which):
    psm, log = ProducerStateManager(), Log()
    log.append(7)  # someone else's records first
    batches = []
    seq = 0
    for i in range(7):
        count = i + 1
        res, offs = produce(psm, log, seq=seq, count=count, ts=NOW + i)
        assert res.ok
        batches.append((seq, count, offs, NOW + i))
        seq += count
    end = log.end
    seq0, count, offs, ts = batches[-5:][which]
    res = psm.check(PID, 0, seq0, count - 1, ts, now_ms=NOW)
    assert res.is_duplicate and res.outcome is CheckOutcome.DUPLICATE
    assert res.error == 0 and res.pending is None
    assert (res.duplicate.first_offset, res.duplicate.last_offset) == offs
    assert res.duplicate.timestamp == ts
    assert (res.duplicate.first_seq, res.duplicate.last_seq) == (seq0, seq0 + count - 1)
    assert log.end == end


def test_batch_older_than_last_five_is_out_of_order():
    psm, log = ProducerStateManager(), Log()
    for s in range(6):
        assert produce(psm, log, seq=s)[0].ok
    res = psm.check(PID, 0, 0, 0, NOW, now_ms=NOW)  # evicted from the cache
    assert res.outcome is CheckOutcome.ERROR and res.error == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert psm.check(PID, 0, 1, 0, NOW, now_ms=NOW).is_duplicate


def test_gap_and_partial_overlap_are_out_of_order():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, seq=0, count=5)[0].ok
    assert produce(psm, log, seq=6)[0].error == OUT_OF_ORDER_SEQUENCE_NUMBER  # gap
    assert produce(psm, log, seq=3, count=2)[0].error == OUT_OF_ORDER_SEQUENCE_NUMBER  # inside, not exact
    assert produce(psm, log, seq=0, count=6)[0].error == OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps
    assert produce(psm, log, seq=5)[0].ok
    assert log.end == 6


def test_epoch_bump_requires_sequence_zero():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, epoch=3, seq=0, count=2)[0].ok
    assert produce(psm, log, epoch=4, seq=2)[0].error == OUT_OF_ORDER_SEQUENCE_NUMBER
    res, offs = produce(psm, log, epoch=4, seq=0)
    assert res.ok
    e = psm.last_entry(PID)
    assert e.producer_epoch == 4 and len(e.batch_metadata) == 1  # cache reset on bump
    # a retry of the old epoch's batch is now fenced, not a duplicate
    assert psm.check(PID, 3, 0, 1, NOW, now_ms=NOW).error == INVALID_PRODUCER_EPOCH
    # skipping epochs is fine with seq 0
    assert produce(psm, log, epoch=9, seq=0)[0].ok


def test_fenced_epoch():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, epoch=5, seq=0)[0].ok
    res, _ = produce(psm, log, epoch=4, seq=1)
    assert res.error == INVALID_PRODUCER_EPOCH and "smaller" in res.message
    res, _ = produce(psm, log, epoch=4, seq=0)
    assert res.error == INVALID_PRODUCER_EPOCH
    assert log.end == 1


def test_sequence_wraparound():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, seq=INT32_MAX - 2, count=3)[0].ok  # ... INT32_MAX
    assert psm.last_entry(PID).last_seq == INT32_MAX
    assert produce(psm, log, seq=0, count=2)[0].ok
    assert produce(psm, log, seq=2)[0].ok
    # a batch spanning the wrap
    psm2, log2 = ProducerStateManager(), Log()
    assert produce(psm2, log2, seq=INT32_MAX - 1, count=4)[0].ok
    e = psm2.last_entry(PID)
    assert (e.first_seq, e.last_seq) == (INT32_MAX - 1, 1)
    dup = psm2.check(PID, 0, INT32_MAX - 1, 3, NOW, now_ms=NOW)
    assert dup.is_duplicate and (dup.duplicate.first_offset, dup.duplicate.last_offset) == (0, 3)
    assert produce(psm2, log2, seq=2)[0].ok
    assert produce(psm2, log2, seq=INT32_MAX)[0].error == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_id_minus_one_not_tracked():
    psm, log = ProducerStateManager(), Log()
    for _ in range(3):
        res, _ = produce(psm, log, pid=-1, epoch=-1, seq=-1, count=2)
        assert res.ok
    assert psm.is_empty() and psm.producer_id_count == 0
    assert psm.map_end_offset == 6


def test_invalid_records():
    psm = ProducerStateManager()
    assert psm.check(PID, 0, -1, 0, NOW, now_ms=NOW).error == INVALID_RECORD
    assert psm.check(PID, 0, 0, 0, NOW, now_ms=NOW, is_control=True).error == INVALID_RECORD
    assert psm.check(-1, -1, -1, 0, NOW, now_ms=NOW, is_transactional=True).error == INVALID_RECORD
    assert psm.check(PID, 0, 0, -1, NOW, now_ms=NOW).error == INVALID_RECORD


# ---- several batches in one request ------------------------------------------------------


def test_multi_batch_request_continuity_and_offsets():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, seq=0, count=2)[0].ok  # offsets 0..1
    r = psm.check(PID, 0, 2, 2, NOW, now_ms=NOW)  # seq 2..4
    r = psm.check(-1, -1, -1, 9, NOW, now_ms=NOW, pending=r.pending)  # untracked, 10 records
    r = psm.check(PID, 0, 5, 0, NOW + 1, now_ms=NOW, pending=r.pending)  # seq 5
    r = psm.check(77, 0, 100, 1, NOW + 2, now_ms=NOW, pending=r.pending)  # other producer
    assert r.ok and len(r.pending) == 4 and r.pending.record_offsets == 16
    assert r.pending.producer_ids == {PID, 77}
    first = log.append(r.pending.record_offsets)
    psm.commit(r.pending, first)
    e = psm.last_entry(PID)
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batch_metadata] == [
        (0, 1, 0, 1), (2, 4, 2, 4), (5, 5, 15, 15)]
    o = psm.last_entry(77).batch_metadata[-1]
    assert (o.first_offset, o.last_offset, o.timestamp) == (16, 17, NOW + 2)
    assert psm.map_end_offset == 18 == log.end


def test_multi_batch_gap_within_request_rejected():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, seq=0)[0].ok
    r = psm.check(PID, 0, 1, 0, NOW, now_ms=NOW)
    r2 = psm.check(PID, 0, 3, 0, NOW, now_ms=NOW, pending=r.pending)
    assert r2.error == OUT_OF_ORDER_SEQUENCE_NUMBER and r2.pending is None


def test_multi_batch_unknown_producer_still_continuous_within_request():
    # Kafka would accept any second sequence here; we insist the request is contiguous.
    psm = ProducerStateManager()
    r = psm.check(PID, 0, 50, 1, NOW, now_ms=NOW)
    assert psm.check(PID, 0, 52, 0, NOW, now_ms=NOW, pending=r.pending).ok
    r = psm.check(PID, 0, 50, 1, NOW, now_ms=NOW)
    assert psm.check(PID, 0, 60, 0, NOW, now_ms=NOW, pending=r.pending).error == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_multi_batch_epoch_bump_then_continue():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, epoch=1, seq=0, count=3)[0].ok
    r = psm.check(PID, 2, 0, 0, NOW, now_ms=NOW)
    r = psm.check(PID, 2, 1, 0, NOW, now_ms=NOW, pending=r.pending)
    assert r.ok
    psm.commit(r.pending, log.append(2))
    e = psm.last_entry(PID)
    assert e.producer_epoch == 2 and [b.last_seq for b in e.batch_metadata] == [0, 1]


def test_duplicate_in_second_batch_aborts_whole_request():
    psm, log = ProducerStateManager(), Log()
    assert produce(psm, log, seq=0, count=2)[0].ok
    r = psm.check(-1, -1, -1, 0, NOW, now_ms=NOW)
    r = psm.check(PID, 0, 0, 1, NOW, now_ms=NOW, pending=r.pending)
    assert r.is_duplicate and r.duplicate.first_offset == 0


class FakeBatch:
    def __init__(self, producer_id, producer_epoch, base_sequence, last_offset_delta,
                 max_timestamp=NOW, is_transactional=False, is_control=False, base_offset=0):
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.base_sequence, self.last_offset_delta = base_sequence, last_offset_delta
        self.max_timestamp, self.is_transactional = max_timestamp, is_transactional
        self.is_control, self.base_offset = is_control, base_offset


def test_check_batches_adapter():
    psm = ProducerStateManager()
    res = psm.check_batches([FakeBatch(PID, 0, 0, 1), FakeBatch(PID, 0, 2, 0)], NOW)
    assert res.ok and len(res.pending) == 2
    psm.commit(res.pending, 10)
    assert psm.last_entry(PID).last_data_offset == 12
    res = psm.check_batches([FakeBatch(PID, 0, 3, 0), FakeBatch(PID, 0, 9, 0)], NOW)
    assert res.error == OUT_OF_ORDER_SEQUENCE_NUMBER
    res = psm.check_batches([FakeBatch(PID, 0, 2, 0)], NOW)
    assert res.is_duplicate and res.duplicate.last_offset == 12
    empty = psm.check_batches([], NOW)
    assert empty.ok and len(empty.pending) == 0


def test_commit_with_log_append_time():
    psm = ProducerStateManager()
    r = psm.check(PID, 0, 0, 0, 5, now_ms=NOW)
    psm.commit(r.pending, 0, log_append_time_ms=NOW + 7)
    assert psm.last_entry(PID).last_timestamp == NOW + 7
    assert psm.check(PID, 0, 0, 0, 5, now_ms=NOW).duplicate.timestamp == NOW + 7


def test_stale_or_repeated_commit_refused():
    psm = ProducerStateManager()
    a = psm.check(PID, 0, 0, 0, NOW, now_ms=NOW)
    b = psm.check(PID, 0, 0, 0, NOW, now_ms=NOW)  # checked against the same state
    psm.commit(a.pending, 0)
    with pytest.raises(StaleAppendError):
        psm.commit(b.pending, 1)
    with pytest.raises(ValueError):
        psm.commit(a.pending, 1)
    with pytest.raises(ValueError):
        ProducerStateManager().commit(psm.check(PID, 0, 1, 0, NOW, now_ms=NOW).pending, 1)


# ---- transactions (groundwork) ----------------------------------------------------------


def test_transactional_batches_track_first_offset():
    psm, log = ProducerStateManager(), Log()
    log.append(3)
    assert produce(psm, log, seq=0, count=2, txn=True)[0].ok
    assert produce(psm, log, seq=2, txn=True)[0].ok
    e = psm.last_entry(PID)
    assert e.current_txn_first_offset == 3 and psm.ongoing_txns == {3: PID}
    assert psm.first_undecided_offset() == 3
    res, _ = produce(psm, log, seq=3, txn=False)
    assert res.error == INVALID_TXN_STATE
    done = psm.apply_end_txn_marker(PID, 0, 7, False, log.append(1), NOW + 1)
    assert (done.first_offset, done.last_offset, done.is_aborted) == (3, 6, False)
    e = psm.last_entry(PID)
    assert e.current_txn_first_offset is None and e.coordinator_epoch == 7
    assert psm.first_undecided_offset() is None
    assert produce(psm, log, seq=3)[0].ok  # sequences continue after the marker


# ---- expiration -------------------------------------------------------------------------


def test_remove_expired():
    psm, log = ProducerStateManager(producer_id_expiration_ms=1000), Log()
    produce(psm, log, pid=1, seq=0, ts=NOW)
    produce(psm, log, pid=2, seq=0, ts=NOW + 500)
    produce(psm, log, pid=3, seq=0, ts=NOW, txn=True)  # in a transaction: kept
    assert psm.remove_expired(NOW + 999) == []
    assert psm.remove_expired(NOW + 1000) == [1]  # idle >= expiration
    assert sorted(psm.active_producers) == [2, 3]
    assert psm.remove_expired(NOW + 10_000) == [2]
    assert sorted(psm.active_producers) == [3]
    # an expired producer is unknown again: any sequence accepted
    assert produce(psm, log, pid=1, seq=99)[0].ok


def test_default_expiration_is_one_day():
    psm, log = ProducerStateManager(), Log()
    produce(psm, log, seq=0, ts=NOW)
    assert psm.remove_expired(NOW + 86_400_000 - 1) == []
    assert psm.remove_expired(NOW + 86_400_000) == [PID]


def test_error_codes_match_errors_tsv():
    tsv = Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol" / "errors.tsv"
    if not tsv.exists():
        pytest.skip("errors.tsv not available")
    codes = {}
    for line in tsv.read_text().splitlines()[1:]:
        code, name, *_ = line.split("\t")
        codes[name] = int(code)
    assert codes["OUT_OF_ORDER_SEQUENCE_NUMBER"] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert codes["INVALID_PRODUCER_EPOCH"] == INVALID_PRODUCER_EPOCH
    assert codes["INVALID_TXN_STATE"] == INVALID_TXN_STATE
    assert codes["INVALID_RECORD"] == INVALID_RECORD


# ---- property: a producer with retries --------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6), st.integers(1, 5)), max_size=60),
       st.integers(0, INT32_MAX))
def test_retries_of_recent_batches_are_duplicates(ops, start_seq):
    """New batches always append; a retry of one of the last five batches is a duplicate
    with its original offsets; an older retry is out of order; nothing else is appended."""
    psm, log = ProducerStateManager(), Log()
    sent = []  # (seq, count, offsets)
    seq = start_seq
    for retry, back, count in ops:
        if retry and sent:
            back = min(back, len(sent) - 1)
            s, c, offs = sent[-1 - back]
            end = log.end
            res, _ = produce(psm, log, seq=s, count=c)
            assert log.end == end
            if back < 5:
                assert res.is_duplicate
                assert (res.duplicate.first_offset, res.duplicate.last_offset) == offs
            else:
                assert res.error == OUT_OF_ORDER_SEQUENCE_NUMBER
        else:
            res, offs = produce(psm, log, seq=seq, count=count)
            assert res.ok
            sent.append((seq, count, offs))
            seq = increment_sequence(seq, count)
