"""One partition's transactions over a real PartitionLog: LSO, markers, the aborted index,
read_committed lookups, and recovery by replay."""

import pytest

from kbroker.log.config import LogConfig
from kbroker.log.partition_log import PartitionLog
from kbroker.txn.errors import TxnErrors as E
from kbroker.txn.partition_txns import PartitionTxns
from kbroker.txn.producer_state import ProducerStateManager
from kbroker.txn.txn_index import AbortedTxn
from kbroker.wire.records import BatchBuilder, ControlRecordType

NOW = 1_700_000_000_000


class Part:
    """The produce path of the broker core, reduced to what these tests need."""

    def __init__(self, d, segment_bytes=1 << 20):
        self.dir = str(d)
        self.config = LogConfig(segment_bytes=segment_bytes)
        self.open()
        self.seqs = {}

    def open(self):
        self.log = PartitionLog.open(self.dir, self.config, NOW, topic="t", partition=0)
        self.psm = ProducerStateManager(self.log.dir, topic_partition="t-0")
        self.txns = PartitionTxns(self.log.dir, self.psm)
        self.txns.recover(self.log, NOW)

    def close(self):
        self.psm.take_snapshot(self.log.log_end_offset)
        self.txns.close()
        self.log.close()

    def crash_and_reopen(self):
        self.txns.close()
        self.log.close()
        self.open()

    def produce(self, pid=-1, epoch=0, n=3, txn=False):
        seq = self.seqs.get(pid, 0) if pid >= 0 else -1
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         is_transactional=txn)
        for i in range(n):
            b.append(key=None, value=b"v%d" % i, timestamp=NOW)
        buf = bytearray(b.build())
        check = self.psm.check_batches([_view(buf)], NOW) if pid >= 0 else None
        assert check is None or check.ok, check
        info = self.log.append(buf, NOW)
        if info.rolled:
            self.psm.take_snapshot(info.first_offset)
        if check is not None:
            self.psm.commit(check.pending, info.first_offset)
            self.seqs[pid] = seq + n
        self.log.high_watermark = self.log.log_end_offset
        return info.first_offset

    def marker(self, pid, commit, epoch=0, coordinator_epoch=0):
        r = self.txns.append_marker(self.log, pid, epoch, coordinator_epoch, commit, NOW)
        if r.error == E.NONE:
            self.log.high_watermark = self.log.log_end_offset
        return r

    @property
    def lso(self):
        return self.txns.last_stable_offset(self.log.high_watermark)


def _view(buf):
    from kbroker.wire.records import RecordBatch
    return RecordBatch(buf)


@pytest.fixture
def part(tmp_path):
    p = Part(tmp_path / "t-0")
    yield p
    p.txns.close()
    p.log.close()


def test_lso_follows_open_transactions(part):
    part.produce(n=2)
    assert part.lso == 2
    first = part.produce(pid=1, txn=True)
    part.produce(pid=2, txn=True)
    part.produce(n=1)
    assert part.lso == first  # pinned at the oldest open transaction
    part.marker(1, commit=True)
    assert part.lso == 5  # producer 2 still open
    r = part.marker(2, commit=False)
    assert r.error == E.NONE
    assert part.lso == part.log.log_end_offset == r.offset + 1


def test_marker_is_a_control_batch(part):
    part.produce(pid=1, txn=True)
    r = part.marker(1, commit=True)
    [batch] = list(part.log.batches(start_offset=r.offset))
    assert batch.is_control and batch.is_transactional and batch.producer_id == 1
    assert batch.control_type() == ControlRecordType.COMMIT


def test_lso_waits_for_the_marker_to_be_replicated(part):
    first = part.produce(pid=1, txn=True)
    r = part.txns.append_marker(part.log, 1, 0, 0, True, NOW)
    # the marker is appended but the high watermark has not passed it yet
    assert part.txns.last_stable_offset(r.offset) == first
    assert part.txns.last_stable_offset(r.offset + 1) == r.offset + 1


def test_aborted_index_and_fetch_lookup(part):
    a = part.produce(pid=1, txn=True)
    b = part.produce(pid=2, txn=True)
    part.produce(pid=1, txn=True)
    ra = part.marker(1, commit=False)
    rb = part.marker(2, commit=True)
    c = part.produce(pid=3, txn=True)
    rc = part.marker(3, commit=False)
    aborted = part.txns.indexes.all_aborted()
    # producer 1's abort: producer 2 still open at that moment, so the LSO was b
    assert aborted == [AbortedTxn(1, a, ra.offset, b), AbortedTxn(3, c, rc.offset, rc.offset + 1)]
    end = part.log.log_end_offset
    assert part.txns.aborted_transactions(0, end) == aborted
    assert part.txns.aborted_transactions(rb.offset, end) == [aborted[1]]
    assert part.txns.aborted_transactions(c, c + 1) == [aborted[1]]
    assert part.txns.aborted_transactions(5, 5) == []


def test_marker_fencing(part):
    part.produce(pid=1, epoch=3, txn=True)
    assert part.marker(1, True, epoch=2).error == E.INVALID_PRODUCER_EPOCH
    assert part.marker(1, True, epoch=3, coordinator_epoch=5).error == E.NONE
    part.seqs[1] = 0
    part.produce(pid=1, epoch=4, txn=True)
    assert part.marker(1, False, epoch=4, coordinator_epoch=4).error == \
        E.TRANSACTION_COORDINATOR_FENCED
    # a marker for a producer this partition never saw is still written (empty transaction)
    assert part.marker(99, True).error == E.NONE


def test_transactional_write_after_marker_starts_a_new_transaction(part):
    part.produce(pid=1, txn=True)
    part.marker(1, commit=False)
    second = part.produce(pid=1, txn=True)
    assert part.lso == second
    part.marker(1, commit=True)
    assert part.lso == part.log.log_end_offset


def test_recovery_rebuilds_state_and_index(tmp_path):
    p = Part(tmp_path / "t-0", segment_bytes=400)
    offsets = []
    for i in range(12):
        offsets.append(p.produce(pid=1, txn=True, n=2))
        p.marker(1, commit=(i % 3 != 0))
    p.produce(pid=1, txn=True)
    p.marker(1, commit=False)  # an abort in the active segment, after the last snapshot
    open_first = p.produce(pid=2, txn=True)
    assert len(p.log.segments) > 2
    expected = p.txns.indexes.all_aborted()
    assert len(expected) == 5
    lso = p.lso
    assert lso == open_first
    # crash: no final snapshot, and the index entries after the last snapshot are lost
    # (they are rebuilt from the log, as Kafka rebuilds them from the recovery point)
    snap = p.psm.latest_snapshot_offset()
    assert snap is not None and snap > 0
    p.txns.indexes.truncate_to(snap)
    assert len(p.txns.indexes.all_aborted()) < len(expected)
    p.crash_and_reopen()
    assert p.txns.indexes.all_aborted() == expected
    assert p.lso == lso
    end = p.log.log_end_offset
    assert p.txns.aborted_transactions(0, end) == expected
    # the still-open transaction can be committed after the restart
    p.marker(2, commit=True)
    assert p.lso == p.log.log_end_offset
    p.close()
    # clean restart from the final snapshot: nothing to replay, same answers
    p.open()
    assert p.txns.indexes.all_aborted() == expected
    assert p.lso == p.log.log_end_offset
    p.txns.close()
    p.log.close()


@pytest.mark.parametrize("seed", range(20))
def test_lso_matches_its_definition_over_random_histories(tmp_path, seed):
    # LSO = min(high watermark, first offset of every transaction still open or whose marker
    # the high watermark has not passed). The no-transaction fast path must agree at every step.
    import random
    rnd = random.Random(seed)
    p = Part(tmp_path / "t-0")
    try:
        open_first: dict[int, int] = {}      # pid -> first offset of its open transaction
        decided: list[tuple[int, int]] = []  # (first offset, marker offset)
        hw = 0
        for _ in range(60):
            op = rnd.random()
            if op < 0.3:
                p.produce(n=rnd.randint(1, 3))
            elif op < 0.6:
                pid = rnd.randint(1, 3)
                first = p.produce(pid=pid, txn=True, n=rnd.randint(1, 2))
                open_first.setdefault(pid, first)
            elif open_first:
                pid = rnd.choice(sorted(open_first))
                r = p.txns.append_marker(p.log, pid, 0, 0, rnd.random() < 0.5, NOW)
                assert r.error == E.NONE
                decided.append((open_first.pop(pid), r.offset))
            # the high watermark trails the log end by a random amount, never moving back
            hw = rnd.randint(hw, p.log.log_end_offset) if rnd.random() < 0.5 else hw
            p.log.high_watermark = hw
            pinned = list(open_first.values()) + [f for f, m in decided if m >= hw]
            assert p.txns.last_stable_offset(hw) == min([hw] + pinned), (seed, open_first, decided, hw)
    finally:
        p.txns.close()
        p.log.close()
