"""RaftLog (memory and PartitionLog on disk), QuorumStore (memory and quorum-state file),
snapshot files: the same behaviour from both implementations."""

import json
import os

import pytest

from kbroker.kraft.quorum_store import ElectionState, FileQuorumStore, MemoryQuorumStore
from kbroker.kraft.raft_log import DiskRaftLog, MemoryRaftLog, build_batch, build_control_batch
from kbroker.kraft.snapshots import (BOOTSTRAP_ID, DirSnapshotStore, MemorySnapshotStore, SnapshotId,
                                     SnapshotPolicy, build_snapshot, latest, parse_file_name,
                                     parse_snapshot, write_bootstrap_checkpoint)
from kbroker.wire.generated.voters_record import VotersRecord
from kbroker.wire.records import ControlRecordType, iter_batches


@pytest.fixture(params=["memory", "disk"])
def rlog(request, tmp_path):
    if request.param == "memory":
        yield MemoryRaftLog()
    else:
        log = DiskRaftLog.open(str(tmp_path))
        yield log
        log.close()


def fill(log, epochs):
    """One batch of two records per epoch in ``epochs``."""
    for e in epochs:
        log.append(build_batch(log.end_offset, e, [b"a%d" % log.end_offset, b"b"], 0))


def test_append_read_epochs(rlog):
    fill(rlog, [1, 1, 2, 4])
    assert (rlog.start_offset, rlog.end_offset, rlog.last_epoch) == (0, 8, 4)
    got = [(b.base_offset, b.partition_leader_epoch) for b in iter_batches(rlog.read(3, 1 << 20))]
    assert got == [(2, 1), (4, 2), (6, 4)]            # from the batch holding offset 3
    assert len(list(iter_batches(rlog.read(0, 1)))) == 1  # always one whole batch
    assert rlog.end_offset_for_epoch(1) == (1, 4)
    assert rlog.end_offset_for_epoch(3) == (2, 6)         # largest epoch <= 3 ends where 4 starts
    assert rlog.end_offset_for_epoch(4) == (4, 8)
    assert rlog.end_offset_for_epoch(0) == (0, 0)
    assert [rlog.epoch_for_offset(o) for o in (0, 3, 4, 7)] == [1, 1, 2, 4]
    with pytest.raises(Exception):
        rlog.append(build_batch(3, 4, [b"x"], 0))          # not at the end


def test_truncate_flush_reset_and_clean(rlog):
    fill(rlog, [1, 2, 3])
    rlog.flush()
    assert rlog.flushed_offset == 6
    rlog.truncate_to(3)                                  # drops the whole batch holding 3
    assert (rlog.end_offset, rlog.last_epoch, rlog.flushed_offset) == (2, 1, 2)
    assert rlog.end_offset_for_epoch(2) == (1, 2)
    fill(rlog, [5, 5, 6])
    rlog.flush()
    rlog.advance_start(4)                                # a snapshot at 4 covers the start
    assert rlog.start_offset == 4 and rlog.start_epoch == 5
    assert [b.base_offset for b in rlog.batches(4)][0] == 4
    rlog.reset_to(100, 9)                                # a fetched snapshot replaces it all
    assert (rlog.start_offset, rlog.end_offset, rlog.last_epoch) == (100, 100, 9)
    assert rlog.end_offset_for_epoch(9) == (9, 100)
    fill(rlog, [10])
    assert rlog.end_offset == 102 and rlog.epoch_for_offset(100) == 10


def test_memory_log_crash_loses_only_unflushed():
    log = MemoryRaftLog()
    fill(log, [1, 1])
    log.flush()
    fill(log, [2])
    log.lose_unflushed()
    assert log.end_offset == 4 and log.last_epoch == 1


def test_memory_log_later_flushes_complete_when_told():
    log = MemoryRaftLog(later_flushes=True)
    woken = []
    log.on_flushed = lambda: woken.append(log.flushed_offset)
    fill(log, [1, 1])
    log.flush()
    assert log.flushed_offset == 0 and log.flush_wanted == 4
    log.truncate_to(2)                   # the flush asked for covers only what stays
    fill(log, [2])
    log.complete_flush()
    assert log.flushed_offset == 2 and woken == [2]
    log.flush()
    log.lose_unflushed()                 # a crash: the flush under way is gone too
    assert log.end_offset == 2 and log.flush_wanted == 2


def test_disk_log_flushes_off_the_event_loop(tmp_path, monkeypatch):
    """On a loop, flush() returns at once and the fsync runs elsewhere: flush() syncs nothing
    on the calling thread (an fsync of the metadata log held the loop for 25 ms while the disk
    was busy); flushed_offset rises when it is done, and on_flushed says so."""
    import asyncio

    log = DiskRaftLog.open(str(tmp_path))
    in_flush, synced_in_flush = [], []

    def watch(real):
        def synced(fd):
            if in_flush:
                synced_in_flush.append(fd)
            return real(fd)
        return synced
    monkeypatch.setattr(os, "fsync", watch(os.fsync))
    monkeypatch.setattr(os, "fdatasync", watch(os.fdatasync))

    def flush():
        in_flush.append(1)
        try:
            log.flush()
        finally:
            in_flush.pop()

    async def run():
        flushed = asyncio.Event()
        log.on_flushed = flushed.set
        fill(log, [1, 1])
        flush()
        assert log.flushed_offset == 0        # not yet: under way
        flush()                               # (asked once: the flush under way covers it)
        await asyncio.wait_for(flushed.wait(), 10)
        assert log.flushed_offset == 4
        fill(log, [2])
        flushed.clear()
        flush()
        log.truncate_to(5)                    # truncated below what the flush was asked for
        assert log.flushed_offset == 4
        fill(log, [3])
        flush()
        await asyncio.wait_for(flushed.wait(), 10)
        assert log.flushed_offset == log.end_offset == 6 and log.last_epoch == 3
    asyncio.run(run())
    assert synced_in_flush == []
    fill(log, [3])
    flush()                                   # without a loop: at once, here
    assert synced_in_flush and log.flushed_offset == 8
    log.close()
    again = DiskRaftLog.open(str(tmp_path))
    assert again.end_offset == 8
    again.close()


def test_disk_log_keeps_the_metadata_framing_and_reopens(tmp_path):
    log = DiskRaftLog.open(str(tmp_path))
    lc = build_control_batch(0, 1, [(ControlRecordType.LEADER_CHANGE, b"\x00\x00")], 0)
    log.append(lc)
    fill(log, [1, 2])
    log.flush()
    log.close()
    assert os.path.isdir(tmp_path / "__cluster_metadata-0")
    again = DiskRaftLog.open(str(tmp_path))
    batches = list(again.batches(0))
    assert batches[0].is_control and [b.partition_leader_epoch for b in batches] == [1, 1, 2]
    assert next(iter(batches[1].records())).key is None     # null keys, values = framed records
    assert again.end_offset_for_epoch(1) == (1, 3) and again.end_offset == 5
    again.close()


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_quorum_store_round_trip(kind, tmp_path):
    store = MemoryQuorumStore() if kind == "memory" else FileQuorumStore(str(tmp_path), "cid")
    assert store.read() is None
    st = ElectionState(epoch=7, leader_id=2, voted_id=3, voters=(1, 2, 3))
    store.write(st)
    assert store.read() == st


def test_quorum_state_file_is_kafkas_json(tmp_path):
    FileQuorumStore(str(tmp_path), "abc").write(ElectionState(5, 1, 1, voters=(1, 2)))
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data == {"clusterId": "abc", "leaderId": 1, "leaderEpoch": 5, "votedId": 1,
                    "appliedOffset": 0, "currentVoters": [{"voterId": 1}, {"voterId": 2}],
                    "data_version": 0}
    FileQuorumStore(str(tmp_path), "abc", kraft_version=1).write(ElectionState(6, -1, 2))
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data["data_version"] == 1 and "votedDirectoryId" in data and "currentVoters" not in data
    assert not (tmp_path / "quorum-state.tmp").exists()


@pytest.mark.parametrize("kind", ["memory", "dir"])
def test_snapshot_store_and_format(kind, tmp_path):
    store = MemorySnapshotStore() if kind == "memory" else DirSnapshotStore(str(tmp_path))
    voters = VotersRecord(version=0, voters=[VotersRecord.Voter(voter_id=1, endpoints=[
        VotersRecord.Voter.Endpoint(name="CONTROLLER", host="localhost", port=9093)])])
    assert write_bootstrap_checkpoint(store, voters) == BOOTSTRAP_ID
    recs = [b"r%d" % i for i in range(2500)]
    store.write(SnapshotId(40, 3), build_snapshot(recs, 99, voters=voters, kraft_version=1,
                                                  last_contained_log_time=98))
    assert latest(store) == SnapshotId(40, 3) and store.ids()[0] == BOOTSTRAP_ID
    content = parse_snapshot(store.read(SnapshotId(40, 3)))
    assert content.records == recs and content.voters == voters and content.kraft_version == 1
    assert content.last_contained_log_time == 98
    batches = list(iter_batches(store.read(SnapshotId(40, 3))))
    assert batches[0].is_control and batches[-1].is_control and len(batches) == 5
    if kind == "dir":
        assert sorted(os.listdir(tmp_path)) == ["00000000000000000000-0000000000.checkpoint",
                                                "00000000000000000040-0000000003.checkpoint"]
    assert parse_file_name("00000000000000000040-0000000003.checkpoint") == (40, 3)
    with pytest.raises(ValueError):
        parse_snapshot(b"".join(bytes(b.buffer()) for b in batches[:-1]))   # no footer


def test_snapshot_policy_by_size_and_time():
    p = SnapshotPolicy(max_bytes=100, interval_ms=1000)
    assert not p.due(0, 0, 10_000)              # nothing new: never
    assert p.due(100, 0, 1)                     # size
    assert not p.due(10, 0, 999) and p.due(10, 0, 1000)   # time
