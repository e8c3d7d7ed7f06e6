"""Producer-state snapshots (Kafka's file format) and restart via snapshot + log replay."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from kbroker.txn.producer_snapshot import (
    ENTRY_SIZE,
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    read_snapshot_file,
    snapshot_offset,
    snapshot_path,
    write_snapshot_file,
)
from kbroker.txn.producer_state import (
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProducerStateManager,
)
from kbroker.wire.records import BatchBuilder, ControlRecordType, control_batch, iter_batches

NOW = 1_700_000_000_000
PID = 4000


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected 0x82F63B78): independent of the C library."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


ENTRY_A = SnapshotEntry(producer_id=7, epoch=3, last_sequence=41, last_offset=1234,
                        offset_delta=4, timestamp=NOW, coordinator_epoch=-1,
                        current_txn_first_offset=-1)
ENTRY_B = SnapshotEntry(producer_id=2**40, epoch=0, last_sequence=2**31 - 1, last_offset=99,
                        offset_delta=0, timestamp=NOW + 5, coordinator_epoch=12,
                        current_txn_first_offset=95)


# ---- the file format ----------------------------------------------------------------------


def test_reference_crc_is_crc32c():
    assert crc32c_reference(b"123456789") == 0xE3069283


def test_encode_is_byte_exact():
    data = encode_snapshot([ENTRY_A])
    body = (struct.pack(">i", 1)  # one entry
            + struct.pack(">q", 7) + struct.pack(">h", 3) + struct.pack(">i", 41)
            + struct.pack(">q", 1234) + struct.pack(">i", 4) + struct.pack(">q", NOW)
            + struct.pack(">i", -1) + struct.pack(">q", -1))
    expected = b"\x00\x01" + struct.pack(">I", crc32c_reference(body)) + body
    assert data == expected
    assert len(data) == 2 + 4 + 4 + 46 and ENTRY_SIZE == 46


def test_empty_snapshot_bytes():
    data = encode_snapshot([])
    assert data == b"\x00\x01" + struct.pack(">I", crc32c_reference(b"\x00\x00\x00\x00")) + b"\x00" * 4
    assert decode_snapshot(data) == []


def test_round_trip_two_entries():
    data = encode_snapshot([ENTRY_A, ENTRY_B])
    assert decode_snapshot(data) == [ENTRY_A, ENTRY_B]
    assert struct.unpack_from(">hIi", data, 0) == (1, crc32c_reference(data[6:]), 2)


def test_every_single_byte_corruption_is_detected():
    data = encode_snapshot([ENTRY_A, ENTRY_B])
    for i in range(len(data)):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(data)
            bad[i] ^= flip
            with pytest.raises(CorruptSnapshotError):
                decode_snapshot(bytes(bad))


@pytest.mark.parametrize("cut", [0, 1, 5, 9, 10, 30, 55])
def test_truncated_file_is_corrupt(cut):
    data = encode_snapshot([ENTRY_A])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:cut])


def test_trailing_bytes_and_bad_version_are_corrupt():
    data = encode_snapshot([ENTRY_A])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data + b"\x00")
    with pytest.raises(CorruptSnapshotError, match="version"):
        decode_snapshot(b"\x00\x02" + data[2:])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(
    SnapshotEntry,
    st.integers(0, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1),
    st.integers(-1, 2**63 - 1), st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1),
    st.integers(-1, 2**31 - 1), st.integers(-1, 2**63 - 1)), max_size=20))
def test_round_trip_property(entries):
    data = encode_snapshot(entries)
    assert decode_snapshot(data) == entries
    assert struct.unpack_from(">I", data, 2)[0] == crc32c_reference(data[6:])


def test_file_names_and_listing(tmp_path):
    p = snapshot_path(tmp_path, 42)
    assert p.name == "00000000000000000042.snapshot"
    assert snapshot_offset(p) == 42 and snapshot_offset("0001.log") is None
    write_snapshot_file(p, [ENTRY_A])
    write_snapshot_file(snapshot_path(tmp_path, 7), [])
    (tmp_path / "00000000000000000042.log").write_bytes(b"")
    (tmp_path / "junk.snapshot").write_bytes(b"")
    assert list(list_snapshots(tmp_path)) == [7, 42]
    assert read_snapshot_file(p) == [ENTRY_A]
    assert not list(tmp_path.glob("*.tmp"))
    assert list_snapshots(tmp_path / "missing") == {}


# ---- a tiny partition log of real batches -----------------------------------------------


class Log:
    def __init__(self):
        self.buf = bytearray()
        self.end = 0

    def append(self, data: bytes) -> int:
        """Append client batches, assigning offsets as the log does; returns first offset."""
        first = self.end
        pos = len(self.buf)
        self.buf += data
        for b in iter_batches(self.buf, pos):
            b.base_offset = self.end
            self.end = b.next_offset
        return first

    def batches(self, from_offset=0):
        return [b for b in iter_batches(self.buf) if b.base_offset >= from_offset]


def batch(pid=PID, epoch=0, seq=0, count=1, ts=NOW, txn=False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     is_transactional=txn)
    for i in range(count):
        b.append(key=b"k", value=b"v%d" % i, timestamp=ts)
    return b.build()


def produce(psm, log, data: bytes, now=NOW):
    views = list(iter_batches(bytearray(data)))
    res = psm.check_batches(views, now)
    if res.ok:
        return res, log.append(data)
    return res, None


def produce_sequence(psm, log, counts, pid=PID, start_seq=0, ts=NOW):
    """Send batches in order; returns [(first_seq, count, first_offset, last_offset)]."""
    out, seq = [], start_seq
    for c in counts:
        res, first = produce(psm, log, batch(pid, seq=seq, count=c, ts=ts))
        assert res.ok, res
        psm.commit(res.pending, first)
        out.append((seq, c, first, first + c - 1))
        seq += c
    return out


def assert_duplicate(psm, sent_batch, pid=PID):
    seq, c, first, last = sent_batch
    res = psm.check_batches(iter_batches(bytearray(batch(pid, seq=seq, count=c))), NOW)
    assert res.is_duplicate, res
    assert (res.duplicate.first_offset, res.duplicate.last_offset) == (first, last)


def test_check_batches_with_real_record_batches():
    psm, log = ProducerStateManager(), Log()
    log.append(batch(pid=-1, epoch=-1, seq=-1, count=3))
    data = batch(seq=0, count=2) + batch(pid=-1, epoch=-1, seq=-1, count=4) + batch(seq=2, count=1)
    res, first = produce(psm, log, data)
    assert res.ok and len(res.pending) == 3 and first == 3
    psm.commit(res.pending, first)
    e = psm.last_entry(PID)
    assert [(b.first_offset, b.last_offset) for b in e.batch_metadata] == [(3, 4), (9, 9)]
    assert psm.map_end_offset == log.end == 10


# ---- snapshots held by the manager ------------------------------------------------------


def test_take_snapshot_writes_kafka_file(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    sent = produce_sequence(psm, log, [1, 2, 3])
    path = psm.take_snapshot(log.end)
    assert path == tmp_path / "00000000000000000006.snapshot"
    assert read_snapshot_file(path) == [SnapshotEntry(PID, 0, 5, 5, 2, NOW, -1, -1)]
    assert sent[-1] == (3, 3, 3, 5)
    assert psm.take_snapshot(log.end) is None  # nothing new
    assert psm.snapshot_offsets() == [6] and psm.latest_snapshot_offset() == 6


def test_snapshot_load_round_trip_keeps_last_batch(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    produce_sequence(psm, log, [1, 1], pid=1)
    produce_sequence(psm, log, [2], pid=2, start_seq=10)
    psm.take_snapshot(log.end)
    psm2 = ProducerStateManager(tmp_path)
    assert psm2.truncate_and_reload(0, log.end, NOW) == log.end
    assert sorted(psm2.active_producers) == [1, 2]
    for pid in (1, 2):
        a, b = psm.last_entry(pid), psm2.last_entry(pid)
        assert b.batch_metadata[-1] == a.batch_metadata[-1] and len(b.batch_metadata) == 1
        assert (b.producer_epoch, b.last_timestamp) == (a.producer_epoch, a.last_timestamp)
    assert psm2.snapshot_entries() == psm.snapshot_entries()


def test_transaction_fields_survive_snapshot(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    log.append(batch(pid=-1, epoch=-1, seq=-1, count=2))
    res, first = produce(psm, log, batch(seq=0, count=2, txn=True))
    psm.commit(res.pending, first)
    psm.apply_end_txn_marker(77, 3, 9, True, log.end, NOW)  # marker-only producer
    psm.take_snapshot(log.end + 1)
    entries = read_snapshot_file(snapshot_path(tmp_path, log.end + 1))
    assert entries == [SnapshotEntry(77, 3, -1, -1, 0, NOW, 9, -1),  # sorted by producer id
                       SnapshotEntry(PID, 0, 1, 3, 1, NOW, -1, 2)]
    psm2 = ProducerStateManager(tmp_path)
    psm2.truncate_and_reload(0, log.end + 1, NOW)
    assert psm2.last_entry(PID).current_txn_first_offset == 2 and psm2.ongoing_txns == {2: PID}
    assert psm2.last_entry(77).is_empty and psm2.last_entry(77).coordinator_epoch == 9


def test_expired_producers_dropped_on_load(tmp_path):
    psm, log = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000), Log()
    produce_sequence(psm, log, [1], pid=1, ts=NOW)
    produce_sequence(psm, log, [1], pid=2, ts=NOW + 600)
    psm.take_snapshot(log.end)
    psm2 = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    psm2.truncate_and_reload(0, log.end, NOW + 1000)
    assert sorted(psm2.active_producers) == [2]


def test_truncation_deletes_snapshots_above_and_reloads(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    for _ in range(3):
        produce_sequence(psm, log, [5], start_seq=psm.last_entry(PID).last_seq + 1
                         if psm.last_entry(PID) else 0)
        psm.take_snapshot(log.end)
    assert psm.snapshot_offsets() == [5, 10, 15]
    start = psm.truncate_and_reload(0, 12, NOW)  # log truncated to offset 12
    assert start == 10 and psm.snapshot_offsets() == [5, 10]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000005.snapshot", "00000000000000000010.snapshot"]
    assert psm.last_entry(PID).last_seq == 9 and psm.map_end_offset == 10
    # replay the surviving batch [10, 12): a real log would hold only those offsets
    psm.load_from_batches([b for b in log.batches(10) if b.base_offset < 12])
    assert psm.last_entry(PID).last_seq == 14
    psm.delete_snapshots_above(7)
    assert psm.snapshot_offsets() == [5]
    psm.delete_snapshots_before(6)
    assert psm.snapshot_offsets() == [] and not list(tmp_path.iterdir())


def test_corrupt_latest_snapshot_falls_back_to_older(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    produce_sequence(psm, log, [3])
    psm.take_snapshot(log.end)
    produce_sequence(psm, log, [3], start_seq=3)
    path = psm.take_snapshot(log.end)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x10
    path.write_bytes(bytes(raw))
    psm2 = ProducerStateManager(tmp_path)
    start = psm2.truncate_and_reload(0, log.end, NOW)
    assert start == 3 and not path.exists()
    psm2.load_from_batches(log.batches(start))
    assert psm2.last_entry(PID).last_seq == 5
    assert_duplicate(psm2, (3, 3, 3, 5))


def test_no_snapshot_replays_from_log_start(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    sent = produce_sequence(psm, log, [1, 2, 1, 1, 3, 2])
    psm2 = ProducerStateManager(tmp_path)
    assert psm2.truncate_and_reload(0, log.end, NOW) == 0
    psm2.load_from_batches(log.batches(0))
    for s in sent[-5:]:
        assert_duplicate(psm2, s)
    assert psm2.snapshot_entries() == psm.snapshot_entries()


# ---- restart keeps deduplicating -----------------------------------------------------------


def test_restart_after_crash_snapshot_plus_replay_dedups_last_five(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    log.append(batch(pid=-1, epoch=-1, seq=-1, count=2))
    sent = produce_sequence(psm, log, [1, 2, 3])
    produce_sequence(psm, log, [4], pid=99)
    psm.take_snapshot(log.end)  # e.g. at a segment roll
    snap_at = log.end
    sent += produce_sequence(psm, log, [2, 1, 1, 2], start_seq=6)
    log.append(batch(pid=-1, epoch=-1, seq=-1, count=1))
    # crash: no snapshot at the end. Restart:
    psm2 = ProducerStateManager(tmp_path)
    start = psm2.truncate_and_reload(0, log.end, NOW)
    assert start == snap_at
    psm2.load_from_batches(log.batches(start))
    assert psm2.map_end_offset == log.end
    for s in sent[-5:]:  # the snapshot's last batch + four replayed ones
        assert_duplicate(psm2, s)
    res, _ = produce(psm2, log, batch(seq=sent[-6][0], count=sent[-6][1]))
    assert res.error == OUT_OF_ORDER_SEQUENCE_NUMBER  # older than the five
    res, first = produce(psm2, log, batch(seq=12, count=1))
    assert res.ok
    res, _ = produce(psm2, log, batch(seq=14, count=1))
    assert res.error == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert psm2.last_entry(99).last_seq == 3


def test_restart_after_clean_shutdown_dedups_last_batch(tmp_path):
    """As in Kafka: a snapshot at the log end holds only each producer's last batch."""
    psm, log = ProducerStateManager(tmp_path), Log()
    sent = produce_sequence(psm, log, [1, 2, 3])
    psm.take_snapshot(log.end)
    psm2 = ProducerStateManager(tmp_path)
    assert psm2.truncate_and_reload(0, log.end, NOW) == log.end
    psm2.load_from_batches(log.batches(log.end))  # nothing to replay
    assert_duplicate(psm2, sent[-1])
    res, _ = produce(psm2, log, batch(seq=sent[0][0], count=sent[0][1]))
    assert res.error == OUT_OF_ORDER_SEQUENCE_NUMBER
    res, _ = produce(psm2, log, batch(seq=6, count=1))
    assert res.ok


def test_replay_of_transaction_markers(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    res, first = produce(psm, log, batch(seq=0, count=2, txn=True))
    psm.commit(res.pending, first)
    log.append(control_batch(ControlRecordType.COMMIT, PID, 0, coordinator_epoch=5, timestamp=NOW + 1))
    res, first = produce(psm, log, batch(seq=2, count=1, txn=True))
    psm.commit(res.pending, first)
    psm2 = ProducerStateManager(tmp_path)
    psm2.truncate_and_reload(0, log.end, NOW)
    completed = psm2.load_from_batches(log.batches(0))
    assert [(c.first_offset, c.last_offset, c.is_aborted) for c in completed] == [(0, 2, False)]
    e = psm2.last_entry(PID)
    assert e.coordinator_epoch == 5 and e.current_txn_first_offset == 3
    assert psm2.ongoing_txns == {3: PID}
    assert_duplicate(psm2, (2, 1, 3, 3))


def test_replaying_history_below_snapshot_restores_last_five(tmp_path):
    """Better than Kafka: batches below the snapshot offset, when replayed too, refill each
    producer's cache of recent batches without being applied twice."""
    psm, log = ProducerStateManager(tmp_path), Log()
    sent = produce_sequence(psm, log, [1, 2, 1, 3, 1, 2, 1])
    produce_sequence(psm, log, [2], pid=99)
    psm.take_snapshot(log.end)  # clean shutdown
    psm2 = ProducerStateManager(tmp_path)
    start = psm2.truncate_and_reload(0, log.end, NOW)
    assert start == log.end
    psm2.load_from_batches(log.batches(0))  # e.g. from the last segment's base offset
    e = psm2.last_entry(PID)
    assert list(e.batch_metadata) == list(psm.last_entry(PID).batch_metadata)
    for s in sent[-5:]:
        assert_duplicate(psm2, s)
    assert psm2.snapshot_entries() == psm.snapshot_entries()
    assert psm2.map_end_offset == log.end


def test_history_then_replay_after_crash(tmp_path):
    psm, log = ProducerStateManager(tmp_path), Log()
    sent = produce_sequence(psm, log, [1, 1, 1])
    psm.take_snapshot(log.end)
    sent += produce_sequence(psm, log, [1, 1], start_seq=3)
    psm2 = ProducerStateManager(tmp_path)
    assert psm2.truncate_and_reload(0, log.end, NOW) == 3
    psm2.load_from_batches(log.batches(0))
    for s in sent:
        assert_duplicate(psm2, s)
    assert [b.first_offset for b in psm2.last_entry(PID).batch_metadata] == [0, 1, 2, 3, 4]


def test_history_ignores_other_epochs_and_expired_producers(tmp_path):
    psm, log = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000), Log()
    produce_sequence(psm, log, [1, 1])  # epoch 0
    res, first = produce(psm, log, batch(epoch=1, seq=0, count=1, ts=NOW + 900))
    psm.commit(res.pending, first)
    produce_sequence(psm, log, [1], pid=5, ts=NOW)  # will be expired at load
    psm.take_snapshot(log.end)
    psm2 = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    psm2.truncate_and_reload(0, log.end, NOW + 1000)
    psm2.load_from_batches(log.batches(0))
    assert [b.last_offset for b in psm2.last_entry(PID).batch_metadata] == [2]
    assert psm2.last_entry(5) is None


def test_remove_stray_snapshots(tmp_path):
    for off in (0, 5, 7, 10, 12, 20):
        write_snapshot_file(snapshot_path(tmp_path, off), [])
    (tmp_path / "00000000000000000030.snapshot.tmp").write_bytes(b"partial")
    psm = ProducerStateManager(tmp_path)
    psm.remove_stray_snapshots([0, 10, 15])
    # 5, 7, 12 have no segment; 20 is the clean-shutdown snapshot above every segment
    assert psm.snapshot_offsets() == [0, 10, 20]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000000.snapshot", "00000000000000000010.snapshot",
        "00000000000000000020.snapshot"]
    psm.remove_stray_snapshots([0, 10, 25])
    assert psm.snapshot_offsets() == [0, 10]
