"""Partition (the one writer of a partition's state) over a real PartitionLog on disk:
follower appends keep offsets and epochs and feed producer state; truncation rebuilds
producer state and the aborted-transaction index; the high watermark only moves forward."""

import uuid

from kbroker.log.config import LogConfig
from kbroker.log.partition_log import PartitionLog
from kbroker.replication.partition import Partition
from kbroker.replication.roles import apply_partition_state
from kbroker.txn.partition_txns import PartitionTxns
from kbroker.txn.producer_state import ProducerStateManager
from kbroker.wire.errors import Errors
from kbroker.wire.records import BatchBuilder, iter_batches

from tests.log.helpers import make_batch

PID = 4242


def open_partition(path, topic="t"):
    d = path / f"{topic}-0"
    plog = PartitionLog.open(str(d), LogConfig(), 0)
    psm = ProducerStateManager(plog.dir, topic_partition=f"{topic}-0")
    part = Partition(topic, 0, uuid.UUID(int=1), plog, psm, 0, LogConfig())
    part.txns = PartitionTxns(plog.dir, psm)
    part.txns.recover(plog, 0)
    return part


def batch(seq, n=1, epoch=0):
    return make_batch(n, producer_id=PID, producer_epoch=epoch, base_sequence=seq)


def test_follower_log_matches_the_leader_and_producer_state_follows(tmp_path):
    leader = open_partition(tmp_path / "a")
    follower = open_partition(tmp_path / "b")
    apply_partition_state(leader, 1, 1, 3, 0, [1, 2], [1, 2], 0)
    apply_partition_state(follower, 2, 1, 3, 0, [1, 2], [1, 2], 0)
    for seq in (0, 2, 4):
        r = leader.append_as_leader(batch(seq, 2), 10)
        assert r.error == 0
    assert leader.high_watermark == 0          # the follower has not fetched
    data = leader.log.read(0, 1 << 20).to_bytes()
    follower.append_as_follower(bytearray(data), 20)
    assert follower.log_end_offset == 6 and follower.latest_epoch == 3
    assert [b.partition_leader_epoch for b in iter_batches(follower.log.read(0, 1 << 20).to_bytes())] == [3, 3, 3]
    assert follower.producer_state.last_entry(PID).last_seq == 5
    # the follower promoted: a retry of the last batch is a duplicate, the next one is new
    apply_partition_state(follower, 2, 2, 4, 1, [1, 2], [2], 30)
    dup = follower.append_as_leader(batch(4, 2), 40)
    assert dup.error == 0 and dup.base_offset == 4 and follower.log_end_offset == 6
    # acks=all waits for the whole original batch (4-5), and it counts as 2 records in
    assert dup.last_offset == 5 and dup.records_count == 2
    assert follower.append_as_leader(batch(6), 40).base_offset == 6


def test_truncation_rebuilds_producer_state(tmp_path):
    p = open_partition(tmp_path)
    apply_partition_state(p, 1, 1, 0, 0, [1], [1], 0)
    for seq in range(0, 10, 2):
        assert p.append_as_leader(batch(seq, 2), 10).error == 0
    hw = p.high_watermark
    assert hw == 10
    # become follower; the new leader diverges at 6: the records of seq 6..9 go
    apply_partition_state(p, 1, 2, 1, 1, [1, 2], [2], 20)
    p.log.high_watermark = 4      # (a follower's HW as it would be; set directly for the test)
    assert p.truncate_to(6, 30)
    assert p.log_end_offset == 6
    assert p.producer_state.last_entry(PID).last_seq == 5
    # as leader again, seq 6 is next in sequence (not a duplicate, not out of order)
    apply_partition_state(p, 1, 1, 2, 2, [1, 2], [1], 40)
    r = p.append_as_leader(batch(6, 2), 50)
    assert r.error == 0 and r.base_offset == 6
    assert p.append_as_leader(batch(20), 50).error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_truncation_drops_an_aborted_transaction_from_the_index(tmp_path):
    p = open_partition(tmp_path)
    apply_partition_state(p, 1, 1, 0, 0, [1], [1], 0)
    b = BatchBuilder(producer_id=PID, producer_epoch=0, base_sequence=0, is_transactional=True)
    b.append(key=b"k", value=b"v", timestamp=1)
    b.append(key=b"k", value=b"v", timestamp=1)
    assert p.append_as_leader(bytearray(b.build()), 10).error == 0
    assert p.append_marker(PID, 0, 0, commit=False, now_ms=20).error == 0
    assert [a.producer_id for a in p.txns.aborted_transactions(0, 10)] == [PID]
    assert p.truncate_to(2, 30)                 # the ABORT marker is gone again
    assert p.txns.aborted_transactions(0, 10) == []
    assert p.producer_state.first_undecided_offset() == 0   # the transaction is open again


def test_high_watermark_only_moves_forward(tmp_path):
    p = open_partition(tmp_path)
    apply_partition_state(p, 1, 1, 0, 0, [1], [1], 0)
    p.append_as_leader(make_batch(5), 1)
    assert p.high_watermark == 5
    assert not p.advance_high_watermark(3)
    assert not p.advance_high_watermark(99) or p.high_watermark == 5
    assert p.high_watermark == 5


def test_empty_epoch_begun_as_leader_is_dropped_by_a_no_op_truncation(tmp_path):
    p = open_partition(tmp_path)
    apply_partition_state(p, 1, 1, 0, 0, [1, 2], [1, 2], 0)
    p.append_as_leader(make_batch(3), 1)
    apply_partition_state(p, 1, 1, 1, 1, [1, 2], [1, 2], 2)   # epoch 1 begins at 3, no writes
    assert p.latest_epoch == 1
    apply_partition_state(p, 1, 2, 2, 2, [1, 2], [2], 3)
    assert not p.truncate_to(3, 4)
    assert p.latest_epoch == 0


def test_follower_fsync_runs_off_the_loop_and_durable_wait_covers_it(tmp_path, monkeypatch):
    """flush.messages reached by a follower append: the fsync is started, not run on the
    calling thread (it held the follower's loop, serving all its clients, for each fetch),
    and ``durable_wait`` is what the fetcher's next Fetch waits for."""
    import asyncio
    import os
    import threading

    from kbroker.log.log_manager import LogManager

    cfg = LogConfig(flush_messages=1)
    lm = LogManager([str(tmp_path / "b")])
    lm.start_background_io()          # as in the broker: checkpoints in the IO thread
    plog = lm.get_or_create("t", 0, cfg)
    follower = Partition("t", 0, uuid.UUID(int=1), plog,
                         ProducerStateManager(plog.dir, topic_partition="t-0"), 0, cfg)
    apply_partition_state(follower, 2, 1, 3, 0, [1, 2], [1, 2], 0)
    leader = open_partition(tmp_path / "a")
    apply_partition_state(leader, 1, 1, 3, 0, [1, 2], [1, 2], 0)
    for seq in (0, 2):
        assert leader.append_as_leader(batch(seq, 2), 10).error == 0
    data = leader.log.read(0, 1 << 20).to_bytes()

    main = threading.get_ident()
    on_loop = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counted(fd, real=real):
            if threading.get_ident() == main:
                on_loop.append(fd)
            return real(fd)
        monkeypatch.setattr(os, name, counted)

    async def run():
        assert follower.durable_wait() is None          # nothing appended yet
        follower.append_as_follower(bytearray(data), 20)
        assert follower.log_end_offset == 4
        wait = follower.durable_wait()
        assert wait is not None
        await asyncio.wait_for(wait, 10)
        assert not follower.log.awaits_sync(4)
        assert follower.durable_wait() is None
    try:
        asyncio.run(run())
        assert on_loop == []            # (before the shutdown, whose own fsyncs are its)
    finally:
        lm.shutdown()


def test_a_failed_follower_fsync_backs_off_that_partition_alone():
    """The fetcher's next Fetch waits for its partitions' fsyncs; one that fails (a
    truncation by a newer role, a disk error) keeps that partition out for a backoff, and
    its neighbours are fetched as before."""
    import asyncio
    import types

    from kbroker.log.partition_log import KafkaStorageError
    from kbroker.replication.driver import ReplicationDriver
    from kbroker.replication.fetcher import ReplicaFetcher

    class Replica:
        def __init__(self, error=None):
            self.error, self.waited = error, False

        def durable_wait(self):
            async def wait():
                self.waited = True
                if self.error:
                    raise self.error
            return wait()

    f = ReplicaFetcher(2, 1, backoff_ms=500)
    ok, failed = Replica(), Replica(KafkaStorageError("log truncated"))
    f.add("t", 0, uuid.UUID(int=1), 3, ok)
    f.add("t", 1, uuid.UUID(int=1), 3, failed)
    driver = types.SimpleNamespace(now_ms=1000)
    appended = [f.partitions[("t", 0)], f.partitions[("t", 1)]]
    asyncio.run(ReplicationDriver._durable(driver, f, 1, appended))
    assert ok.waited and failed.waited
    assert f.partitions[("t", 0)].backoff_until_ms == 0
    assert f.partitions[("t", 1)].backoff_until_ms == 1500
