"""Log compaction of a partition with transactions (Kafka's rules): records of aborted
transactions go (and never shadow committed values in the offset map), COMMIT/ABORT markers
stay while any batch of their transaction remains and then until delete.retention.ms after
the pass that found them empty, the cleaner never passes the last stable offset, each
producer's last batch survives (empty if need be) so producer state can be rebuilt from the
log, and the cleaned segments' .txnindex lists the aborts whose markers were kept."""

from __future__ import annotations

import os

from kbroker.log.cleaner import LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.partition_log import PartitionLog
from kbroker.txn.compaction import ABORT, COMMIT, marker_type
from kbroker.txn.partition_txns import PartitionTxns
from kbroker.txn.producer_state import ProducerStateManager
from kbroker.wire.records import BatchBuilder, RecordBatch

NOW = 1_700_000_000_000
RETENTION = 1000


def cfg():
    return LogConfig.from_props({
        "cleanup.policy": "compact", "segment.bytes": "400", "file.delete.delay.ms": "0",
        "delete.retention.ms": str(RETENTION), "min.cleanable.dirty.ratio": "0.0",
        "index.interval.bytes": "100"})


class Part:
    def __init__(self, d):
        self.dir = str(d)
        self.seqs: dict[int, int] = {}
        self.open()

    def open(self):
        self.log = PartitionLog.open(self.dir, cfg(), NOW, topic="t", partition=0)
        self.psm = ProducerStateManager(self.log.dir, topic_partition="t-0")
        self.txns = PartitionTxns(self.log.dir, self.psm)
        self.txns.recover(self.log, NOW)

    def reopen_without_snapshots(self):
        """Crash, lose every producer snapshot: state comes from replaying the log."""
        self.txns.close()
        self.log.close()
        for name in os.listdir(self.log.dir):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(self.log.dir, name))
        self.open()

    def produce(self, kvs, pid=-1, epoch=0, txn=False):
        seq = self.seqs.get(pid, 0) if pid >= 0 else -1
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         is_transactional=txn)
        for k, v in kvs:
            b.append(key=k, value=v, timestamp=NOW)
        buf = bytearray(b.build())
        check = self.psm.check_batches([RecordBatch(buf)], NOW) if pid >= 0 else None
        assert check is None or check.ok, check
        info = self.log.append(buf, NOW)
        if info.rolled:
            self.psm.take_snapshot(info.first_offset)
        if check is not None:
            self.psm.commit(check.pending, info.first_offset)
            self.seqs[pid] = seq + len(kvs)
        self.log.high_watermark = self.log.log_end_offset
        return info.first_offset

    def marker(self, pid, commit, epoch=0):
        r = self.txns.append_marker(self.log, pid, epoch, 0, commit, NOW)
        assert r.error == 0
        self.log.high_watermark = self.log.log_end_offset
        return r.offset

    def filler(self, n, tag):
        for i in range(n):
            self.produce([(b"f%d" % i, f"{tag}-{i}".encode())])

    @property
    def lso(self):
        return self.txns.last_stable_offset(self.log.high_watermark)

    def batches(self):
        return list(self.log.batches(self.log.log_start_offset))

    def values(self):
        return {r.offset: (r.key, r.value) for b in self.batches() if not b.is_control
                for r in b.records()}

    def markers(self):
        return {b.base_offset: (b.producer_id, marker_type(b), b.delete_horizon_ms)
                for b in self.batches() if b.is_control}


def clean(p, now):
    return LogCleaner().clean(p.log, now)


def test_aborted_records_go_markers_follow_kafkas_rules(tmp_path):
    p = Part(tmp_path)
    A, B = 1000, 2000
    p.produce([(b"k1", b"a1"), (b"k2", b"a2")], pid=A, txn=True)
    commit1 = p.marker(A, True)
    p.produce([(b"k1", b"ABORTED"), (b"k3", b"ABORTED")], pid=A, txn=True)
    abort2 = p.marker(A, False)
    p.produce([(b"k5", b"x"), (b"k6", b"y")], pid=A, txn=True)  # only superseded records
    commit3 = p.marker(A, True)
    p.produce([(b"k5", b"x2"), (b"k6", b"y2")])
    p.produce([(b"k4", b"a4")], pid=A, txn=True)  # A's last data batch
    commit4 = p.marker(A, True)
    p.filler(12, "one")
    open_at = p.produce([(b"k7", b"open")], pid=B, txn=True)  # B's transaction stays open
    p.filler(12, "two")
    assert p.log.num_segments > 3
    assert p.lso == open_at
    assert [t.first_offset for t in p.txns.aborted_transactions(0, p.lso)] == [commit1 + 1]
    producer_a = p.psm.last_entry(A)
    a_state = (producer_a.producer_epoch, producer_a.last_seq, producer_a.last_data_offset)

    # pass 1: aborted records gone; k1 keeps its committed value (the aborted one was not
    # in the offset map); every marker whose transaction still has a batch is kept
    clean(p, NOW)
    assert p.log.first_dirty_offset <= open_at
    vals = p.values()
    assert b"ABORTED" not in {v for _, v in vals.values()}
    by_key = {k: v for _, (k, v) in sorted(vals.items())}
    assert by_key[b"k1"] == b"a1" and by_key[b"k2"] == b"a2" and b"k3" not in by_key
    assert by_key[b"k5"] == b"x2" and by_key[b"k7"] == b"open"
    assert open_at in vals  # nothing at or past the LSO was touched
    m = p.markers()
    assert m[commit1] == (A, COMMIT, None) and m[commit4] == (A, COMMIT, None)
    # the aborted transaction's batch was seen (and dropped) in this pass: marker kept
    assert m[abort2] == (A, ABORT, None)
    # txn 3's batch is still there (now empty), so its marker stays too
    assert m[commit3][:2] == (A, COMMIT)
    # the abort is still indexed (its marker is still in the log)
    assert [t.last_offset for t in p.txns.aborted_transactions(0, p.lso)] == [abort2]

    # pass 2: txn 2 has no batch left: its marker gets a delete horizon and leaves the index
    clean(p, NOW + 10)
    m = p.markers()
    assert m[abort2] == (A, ABORT, NOW + 10 + RETENTION)
    assert m[commit1][2] is None  # k1/k2 of txn 1 remain
    assert p.txns.aborted_transactions(0, p.lso) == []
    assert p.log.tombstone_horizon_ms is not None

    # pass 3, before the horizon: still there; after it: gone
    clean(p, NOW + 10 + RETENTION - 1)
    assert abort2 in p.markers()
    clean(p, NOW + 10 + RETENTION + 1)
    m = p.markers()
    # gone (or, as the last batch of a cleaned group, kept without its record)
    assert abort2 not in m or m[abort2][1] is None
    assert commit1 in m and commit4 in m and m[commit4][2] is None
    assert p.lso == open_at

    # producer state survives a restart that must replay the compacted log from the start
    p.reopen_without_snapshots()
    a = p.psm.last_entry(A)
    assert (a.producer_epoch, a.last_seq, a.last_data_offset) == a_state
    assert a.current_txn_first_offset is None
    assert p.psm.last_entry(B).current_txn_first_offset == open_at
    assert p.lso == open_at
    assert p.txns.aborted_transactions(0, p.lso) == []
    # A continues its sequence, B commits: everything readable again
    p.produce([(b"k8", b"a8")], pid=A, txn=True)
    p.marker(A, True)
    p.marker(B, True)
    assert p.lso == p.log.log_end_offset


def test_producer_whose_last_batch_is_aborted_keeps_an_empty_batch(tmp_path):
    p = Part(tmp_path)
    A = 7
    p.produce([(b"a", b"1")], pid=A, txn=True)
    p.marker(A, True)
    last = p.produce([(b"b", b"gone"), (b"c", b"gone")], pid=A, txn=True)
    abort = p.marker(A, False)
    p.filler(25, "f")
    before = p.psm.last_entry(A)
    state = (before.producer_epoch, before.last_seq, before.last_data_offset)
    for now in (NOW, NOW + 10, NOW + 10 + RETENTION + 1):
        clean(p, now)
    kept = {b.base_offset: b for b in p.batches()}
    # A's last data batch stays, without records, so its sequence survives; hence the
    # transaction still has a batch and its ABORT marker (and index entry) stay as well
    assert last in kept and kept[last].records_count == 0 and kept[last].is_transactional
    assert kept[last].last_offset == last + 1
    assert abort in kept
    assert [t.last_offset for t in p.txns.aborted_transactions(0, p.lso)] == [abort]
    assert b"gone" not in {v for _, v in p.values().values()}
    p.reopen_without_snapshots()
    a = p.psm.last_entry(A)
    assert (a.producer_epoch, a.last_seq, a.last_data_offset) == state
    assert a.current_txn_first_offset is None and p.lso == p.log.log_end_offset


def test_cleaned_txnindex_replaces_the_old_segments_indexes(tmp_path):
    p = Part(tmp_path)
    aborts = []
    for i in range(6):
        pid = 100 + i
        p.produce([(b"keep", b"%d" % i)], pid=pid, txn=True)
        p.marker(pid, True)
        p.produce([(b"x%d" % i, b"bad")], pid=pid, txn=True)
        aborts.append(p.marker(pid, False))
        p.produce([(b"y%d" % i, b"ok")], pid=pid, txn=True)  # each producer's last batch
        p.marker(pid, True)
        p.filler(3, "f%d" % i)
    p.filler(10, "tail")
    old_files = sorted(n for n in os.listdir(p.log.dir) if n.endswith(".txnindex"))
    assert len(old_files) > 1
    clean(p, NOW)
    assert [t.last_offset for t in p.txns.aborted_transactions(0, p.lso)] == aborts
    clean(p, NOW + 10)
    clean(p, NOW + 20 + RETENTION)
    assert p.txns.aborted_transactions(0, p.lso) == []
    assert not any(marker_type(b) == ABORT for b in p.batches() if b.is_control)
    assert b"bad" not in {v for _, v in p.values().values()}
    bases = {s.base_offset for s in p.log.segments}
    for n in os.listdir(p.log.dir):
        if n.endswith(".txnindex"):
            assert int(n.split(".")[0]) in bases
    p.reopen_without_snapshots()
    assert p.txns.aborted_transactions(0, p.lso) == []
    assert p.lso == p.log.log_end_offset
