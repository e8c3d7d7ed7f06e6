import asyncio
import os
import struct

import pytest

from kbroker.log import aio_fsync, errors, fill_ahead
from kbroker.log.config import LogConfig
from kbroker.log.index import OffsetIndex, TimeIndex
from kbroker.log.partition_log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    PartitionLog,
    parse_topic_partition,
)
from kbroker.wire.records import RecordBatch, iter_batches

from .helpers import concat, make_batch


def cfg(**kw):
    props = {k.replace("_", "."): str(v) for k, v in kw.items()}
    props.setdefault("file.delete.delay.ms", "0")
    return LogConfig.from_props(props)


def open_log(tmp_path, config=None, now=0, **kw):
    return PartitionLog.open(str(tmp_path / "topic-0"), config or cfg(), now, **kw)


def offsets_of(data):
    return [(b.base_offset, b.last_offset) for b in iter_batches(data)]


def read_all(log, start=None):
    start = log.log_start_offset if start is None else start
    return log.read(start, 1 << 30).to_bytes()


# ---------------------------------------------------------------------------- append


def test_append_assigns_offsets_in_place_and_reads_back(tmp_path):
    log = open_log(tmp_path)
    buf = concat(make_batch(3), make_batch(2))
    info = log.append(buf, 5000, leader_epoch=7)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert info.records_count == 5 and len(info.batches) == 2
    assert RecordBatch(buf).base_offset == 0 and RecordBatch(buf, info.batches[0].size).base_offset == 3
    assert RecordBatch(buf).partition_leader_epoch == 7
    info2 = log.append(make_batch(4), 5000)
    assert (info2.first_offset, info2.last_offset) == (5, 8)
    assert log.log_end_offset == 9
    data = read_all(log)
    assert offsets_of(data) == [(0, 2), (3, 4), (5, 8)]
    assert all(b.verify_crc() for b in iter_batches(data))
    assert log.latest_epoch == 7
    assert log.leader_epoch_cache.entries == [(7, 0)]


def test_append_is_one_write(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    calls = []
    real = os.pwrite

    log_fd = log.segments[-1].handle.fd

    def spy(fd, data, pos):
        if fd == log_fd:   # index entries are pwritten to their own files
            calls.append(len(data))
        return real(fd, data, pos)

    monkeypatch.setattr(os, "pwrite", spy)
    buf = concat(*[make_batch(10) for _ in range(20)])
    log.append(buf, 0)
    assert calls == [len(buf)]


def test_read_only_buffer_is_accepted(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(2), 0)
    info = log.append(bytes(make_batch(3)), 0)
    assert (info.first_offset, info.last_offset) == (2, 4)
    assert offsets_of(read_all(log)) == [(0, 1), (2, 4)]


def test_log_append_time_sets_max_timestamp_and_crc(tmp_path):
    log = open_log(tmp_path, cfg(message_timestamp_type="LogAppendTime"))
    buf = make_batch(3, ts=1)
    info = log.append(buf, 123456)
    assert info.log_append_time == 123456 and info.max_timestamp == 123456
    b = next(iter_batches(read_all(log)))
    assert b.timestamp_type == 1 and b.max_timestamp == 123456 and b.verify_crc()
    assert [r.timestamp for r in b.records()] == [123456] * 3


def test_corrupt_batch_rejected_and_nothing_written(tmp_path):
    log = open_log(tmp_path)
    buf = concat(make_batch(2), make_batch(2))
    buf[-1] ^= 0xFF
    with pytest.raises(errors.CorruptRecordError) as ei:
        log.append(buf, 0)
    assert ei.value.error == "CORRUPT_MESSAGE"
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    torn = make_batch(2)[:-3]
    with pytest.raises(errors.CorruptRecordError):
        log.append(torn, 0)


def test_magic_and_client_rules(tmp_path):
    log = open_log(tmp_path)
    b = make_batch(2)
    b[16] = 1  # legacy magic
    with pytest.raises(errors.LogError) as ei:
        log.append(b, 0)
    assert ei.value.error in ("INVALID_RECORD", "CORRUPT_MESSAGE", "UNSUPPORTED_FOR_MESSAGE_FORMAT")
    with pytest.raises(errors.InvalidRecordError):
        log.append(bytearray(), 0)
    with pytest.raises(errors.InvalidRecordError):  # producer id without a sequence
        log.append(make_batch(1, producer_id=5, producer_epoch=0, base_sequence=-1), 0)


def test_too_large(tmp_path):
    log = open_log(tmp_path, cfg(max_message_bytes=300, segment_bytes=1000))
    with pytest.raises(errors.RecordTooLargeError) as ei:
        log.append(make_batch(1, value=b"x" * 400), 0)
    assert ei.value.error == "MESSAGE_TOO_LARGE"
    with pytest.raises(errors.RecordBatchTooLargeError) as ei:
        log.append(concat(*[make_batch(1, value=b"x" * 150) for _ in range(6)]), 0)
    assert ei.value.error == "RECORD_LIST_TOO_LARGE"
    assert log.log_end_offset == 0


def test_invalid_timestamp(tmp_path):
    log = open_log(tmp_path, cfg(message_timestamp_before_max_ms=1000,
                                 message_timestamp_after_max_ms=500))
    now = 1_000_000
    log.append(make_batch(1, ts=now - 1000), now)
    log.append(make_batch(1, ts=now + 500), now)
    with pytest.raises(errors.InvalidTimestampError) as ei:
        log.append(make_batch(1, ts=now - 1001), now)
    assert ei.value.error == "INVALID_TIMESTAMP"
    with pytest.raises(errors.InvalidTimestampError):
        log.append(make_batch(2, timestamps=[now, now + 501]), now)
    log.append(make_batch(1, ts=-1), now)  # NO_TIMESTAMP is fine
    assert log.log_end_offset == 3


def test_error_codes_resolve():
    assert errors.CorruptRecordError("x").error_code == 2
    assert errors.RecordTooLargeError("x").error_code == 10
    assert errors.RecordBatchTooLargeError("x").error_code == 18
    assert errors.InvalidTimestampError("x").error_code == 32
    assert errors.OffsetOutOfRangeError("x").error_code == 1


# ---------------------------------------------------------------------------- read


def append_batches(log, n: int, records: int = 5) -> list[int]:
    """Append ``n`` batches of ``records`` records; their sizes in bytes."""
    sizes = []
    for _ in range(n):
        b = make_batch(records)
        sizes.append(len(b))
        log.append(b, 0)
    return sizes


def test_read_semantics(tmp_path):
    log = open_log(tmp_path)
    sizes = append_batches(log, 10)
    # mid-batch offset: the whole batch containing it
    r = log.read(7, 10_000)
    assert offsets_of(r.to_bytes())[0] == (5, 9)
    assert r.first_batch_offset == 5
    # at least one batch even when max_bytes is tiny
    r = log.read(12, 1)
    assert offsets_of(r.to_bytes()) == [(10, 14)]
    # max_bytes cuts (possibly mid-batch, as Kafka does)
    r = log.read(0, sizes[0] + 10)
    assert r.size == sizes[0] + 10
    # never past max_offset
    r = log.read(0, 1 << 20, max_offset=20)
    assert offsets_of(r.to_bytes()) == [(0, 4), (5, 9), (10, 14), (15, 19)]
    r = log.read(20, 1 << 20, max_offset=20)
    assert r.size == 0 and r.regions == []
    # a high watermark inside a batch excludes that batch
    r = log.read(0, 1 << 20, max_offset=22)
    assert offsets_of(r.to_bytes())[-1] == (15, 19)
    # log end: empty; past it or below start: out of range
    assert log.read(50, 100).size == 0
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(51, 100)
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(-1, 100)


def test_read_across_segments_and_sendfile(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=600))
    for _ in range(20):
        log.append(make_batch(3), 0)
    assert log.num_segments > 3
    r = log.read(0, 1 << 20)
    assert len(r.regions) == log.num_segments
    assert offsets_of(r.to_bytes()) == [(i, i + 2) for i in range(0, 60, 3)]
    rfd, wfd = os.pipe()
    try:
        os.set_blocking(rfd, False)
        r2 = log.read(30, 400)
        sent = r2.sendfile(wfd)
        assert sent == r2.size
        assert os.read(rfd, 1 << 16) == r2.to_bytes()
    finally:
        os.close(rfd)
        os.close(wfd)


def test_index_files_layout(tmp_path):
    c = cfg(index_interval_bytes=100, segment_bytes=2000, segment_index_bytes=800)
    log = open_log(tmp_path, c)
    for i in range(30):
        log.append(make_batch(2, ts=1000 + i * 10), 0)
    seg0 = log.segments[0]
    assert log.num_segments >= 2
    base = seg0.base_offset
    idx_path = str(tmp_path / "topic-0" / f"{base:020d}.index")
    tidx_path = str(tmp_path / "topic-0" / f"{base:020d}.timeindex")
    # rolled segment: trimmed to its entries
    raw = open(idx_path, "rb").read()
    assert len(raw) % 8 == 0 and len(raw) > 0
    entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw), 8)]
    assert entries == sorted(entries)
    data = read_all(log)
    positions = {}
    pos = 0
    for b in iter_batches(data):
        positions[b.last_offset] = pos
        pos += b.size
    for rel, p in entries:
        assert positions[base + rel] == p
    traw = open(tidx_path, "rb").read()
    assert len(traw) % 12 == 0 and len(traw) > 0
    # active segment: preallocated to segment.index.bytes
    act = log.active_segment
    assert os.path.getsize(act.offset_index.path) == 800
    assert os.path.getsize(act.time_index.path) == 792
    log.close()
    assert os.path.getsize(act.offset_index.path) % 8 == 0
    assert os.path.getsize(act.offset_index.path) < 800


def test_roll_on_segment_ms_and_index_full(tmp_path):
    log = open_log(tmp_path, cfg(segment_ms=1000))
    log.append(make_batch(1, ts=10_000), 10_000)
    log.append(make_batch(1, ts=10_500), 10_500)
    assert log.num_segments == 1
    info = log.append(make_batch(1, ts=11_001), 11_001)
    assert info.rolled and log.num_segments == 2 and log.active_segment.base_offset == 2
    log2 = PartitionLog.open(str(tmp_path / "other-0"),
                             cfg(index_interval_bytes=0, segment_index_bytes=32), 0)
    for _ in range(12):
        log2.append(make_batch(1), 0)
    assert log2.num_segments >= 2
    assert all(s.offset_index.entries <= 4 for s in log2.segments)
    assert offsets_of(read_all(log2)) == [(i, i) for i in range(12)]


def test_manual_roll_and_empty_active_segment(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(2), 0)
    seg = log.roll(0)
    assert seg.base_offset == 2 and log.roll(0) is seg
    log.append(make_batch(2), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert os.path.exists(tmp_path / "topic-0" / "00000000000000000002.log")


# ---------------------------------------------------------------------------- timestamps


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=800, index_interval_bytes=50))
    for i in range(40):
        log.append(make_batch(2, timestamps=[1000 + 10 * i, 1005 + 10 * i]), 0, leader_epoch=3)
    assert log.num_segments > 2
    for ts, want in [(0, 0), (1000, 0), (1001, 1), (1005, 1), (1006, 2), (1200, 40), (1395, 79)]:
        r = log.offset_for_timestamp(ts)
        assert r is not None and r.offset == want, (ts, r)
        assert r.leader_epoch == 3
    assert log.offset_for_timestamp(1396) is None
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert log.offset_for_timestamp(LATEST_TIMESTAMP).offset == 80
    m = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert (m.timestamp, m.offset) == (1395, 79)
    assert log.offset_for_timestamp(1200, max_offset=40) is None
    # after a restart the time indexes still answer
    log.close()
    log = open_log(tmp_path, cfg(segment_bytes=800, index_interval_bytes=50), had_clean_shutdown=True)
    assert log.offset_for_timestamp(1200).offset == 40
    assert log.offset_for_timestamp(MAX_TIMESTAMP).offset == 79


def test_max_timestamp_is_first_record_with_it(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(3, timestamps=[5, 9, 7]), 0)
    log.append(make_batch(2, timestamps=[9, 1]), 0)
    m = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert (m.timestamp, m.offset) == (9, 1)


# ---------------------------------------------------------------------------- truncate


def test_truncate_to(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=700))
    for _ in range(20):
        log.append(make_batch(3), 0)
    nseg = log.num_segments
    assert not log.truncate_to(60)
    assert log.truncate_to(31)  # mid-batch: the whole batch 30..32 goes
    assert log.log_end_offset == 30
    assert offsets_of(read_all(log))[-1] == (27, 29)
    assert log.num_segments < nseg
    info = log.append(make_batch(3), 0)
    assert info.first_offset == 30
    log.truncate_to(0)
    assert log.log_end_offset == 0 and read_all(log) == b""
    log.append(make_batch(1), 0)
    assert offsets_of(read_all(log)) == [(0, 0)]


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(3), 0)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append(make_batch(2), 0).first_offset == 100
    log.close()
    log = open_log(tmp_path, had_clean_shutdown=True)
    assert (log.log_start_offset, log.log_end_offset) == (100, 102)


def test_truncate_epoch_cache(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(2), 0, leader_epoch=1)
    log.append(make_batch(2), 0, leader_epoch=2)
    log.append(make_batch(2), 0, leader_epoch=3)
    assert log.leader_epoch_cache.end_offset_for(2, log.log_end_offset) == (2, 4)
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 6)
    log.truncate_to(3)  # the whole batch 2..3 goes: epoch 2 has no offsets left
    assert log.leader_epoch_cache.entries == [(1, 0)]
    log.append(make_batch(2), 0, leader_epoch=2)
    log.append(make_batch(2), 0, leader_epoch=3)
    log.truncate_to(4)
    text = open(tmp_path / "topic-0" / "leader-epoch-checkpoint").read()
    assert text == "0\n2\n1 0\n2 2\n"


def test_open_trims_an_epoch_at_the_log_end_without_rewriting_the_file(tmp_path):
    """A leader epoch begun at the log end with nothing written under it is dropped on every
    open (Kafka's trim to the log end), in memory only: rewriting and fsyncing the file per
    partition made start-up with thousands of idle partitions slow."""
    log = open_log(tmp_path)
    log.append(make_batch(2), 0, leader_epoch=1)
    log.leader_epoch_cache.assign(4, log.log_end_offset)      # a new leader, no records yet
    log.close()
    path = tmp_path / "topic-0" / "leader-epoch-checkpoint"
    before = path.read_text()
    assert before == "0\n2\n1 0\n4 2\n"
    for _ in range(2):                                        # every open trims it again
        log = open_log(tmp_path, had_clean_shutdown=True, recovery_point=2)
        assert log.leader_epoch_cache.entries == [(1, 0)]
        assert path.read_text() == before
        log.close()
    log = open_log(tmp_path, had_clean_shutdown=True, recovery_point=2)
    log.append(make_batch(1), 0, leader_epoch=5)              # the next change rewrites it
    assert log.leader_epoch_cache.entries == [(1, 0), (5, 2)]
    assert path.read_text() == "0\n2\n1 0\n5 2\n"


# ---------------------------------------------------------------------------- retention


def test_retention_by_size_time_and_start_offset(tmp_path):
    c = cfg(segment_bytes=600, retention_bytes=1500, retention_ms=-1)
    log = open_log(tmp_path, c)
    for i in range(30):
        log.append(make_batch(3, ts=1000 + i), 0)
    log.high_watermark = log.log_end_offset
    size_before = log.size_in_bytes
    n = log.delete_old_segments(10_000)
    assert n > 0
    assert log.size_in_bytes <= 1500 + log.segments[0].size
    assert log.size_in_bytes < size_before
    assert log.log_start_offset == log.segments[0].base_offset
    data = read_all(log)
    assert offsets_of(data)[-1] == (87, 89)
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(0, 100)
    names = os.listdir(tmp_path / "topic-0")
    assert not any(n.endswith(".deleted") for n in names)  # delay 0

    log.update_config(cfg(segment_bytes=600, retention_ms=5000))
    first = log.segments[0]
    assert log.delete_old_segments(first.max_timestamp + 5000) == 0
    assert log.delete_old_segments(first.max_timestamp + 5001) == 1
    n = log.delete_old_segments(1000 + 31 + 5001)
    # everything expired: the active segment goes too, after a roll
    assert n > 0 and log.log_start_offset == 90 and log.log_end_offset == 90
    assert log.append(make_batch(1), 0).first_offset == 90


def test_retention_respects_high_watermark(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=600, retention_ms=1))
    for _ in range(20):
        log.append(make_batch(3, ts=0), 0)
    log.high_watermark = 0
    assert log.delete_old_segments(10_000) == 0
    log.high_watermark = log.log_end_offset
    assert log.delete_old_segments(10_000) > 0


def test_delete_records_and_delayed_file_removal(tmp_path):
    log = open_log(tmp_path, cfg(segment_bytes=600, file_delete_delay_ms=1000, retention_ms=-1))
    for _ in range(20):
        log.append(make_batch(3), 0)
    log.high_watermark = log.log_end_offset
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.delete_records(log.log_end_offset + 1)
    assert log.delete_records(31) == 31
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(30, 100)
    assert offsets_of(log.read(31, 10_000).to_bytes())[0] == (30, 32)
    region = log.read(31, 10).regions[0]
    n = log.delete_old_segments(5000)
    assert n >= 1 and log.segments[0].base_offset <= 31 < log.segments[0].next_offset
    d = tmp_path / "topic-0"
    deleted = [x for x in os.listdir(d) if x.endswith(".deleted")]
    assert deleted
    old_region = log.segments[0]
    assert old_region is not None
    assert log.delete_pending(5999) == 0
    assert log.delete_pending(6000) == n
    assert not [x for x in os.listdir(d) if x.endswith(".deleted")]
    # a region handed out before the deletion still reads (fd kept alive)
    assert len(region.read()) == region.size
    assert log.log_start_offset == 31


# ---------------------------------------------------------------------------- reopen / recovery


def test_clean_reopen_keeps_everything(tmp_path):
    c = cfg(segment_bytes=700)
    log = open_log(tmp_path, c)
    for _ in range(20):
        log.append(make_batch(3), 0, leader_epoch=1)
    data = read_all(log)
    log.close()
    log = open_log(tmp_path, c, had_clean_shutdown=True, recovery_point=60)
    assert log.recovery.recovered_segments == 0
    assert read_all(log) == data and log.log_end_offset == 60
    assert log.append(make_batch(1), 0).first_offset == 60


def test_unclean_reopen_recovers_from_recovery_point(tmp_path):
    c = cfg(segment_bytes=700)
    log = open_log(tmp_path, c)
    for _ in range(20):
        log.append(make_batch(3), 0)
    data = read_all(log)
    seg_bases = [s.base_offset for s in log.segments]
    log.close_without_trim()
    log = open_log(tmp_path, c, recovery_point=seg_bases[-2] + 1)
    assert log.recovery.recovered_segments == 2
    assert not log.recovery.damaged
    assert read_all(log) == data


def _crash_log(tmp_path, c, n=20):
    log = open_log(tmp_path, c)
    for _ in range(n):
        log.append(make_batch(3), 0)
    data = read_all(log)
    log.close_without_trim()
    return data


def test_recovery_torn_tail(tmp_path):
    c = cfg(segment_bytes=700)
    data = _crash_log(tmp_path, c)
    d = tmp_path / "topic-0"
    last = sorted(x for x in os.listdir(d) if x.endswith(".log"))[-1]
    size = os.path.getsize(d / last)
    with open(d / last, "r+b") as f:
        f.truncate(size - 7)
    log = open_log(tmp_path, c)
    rep = log.recovery
    assert rep.dropped_bytes > 0 and "torn" in rep.reason
    good = offsets_of(data)[:-1]
    assert offsets_of(read_all(log)) == good
    assert log.log_end_offset == good[-1][1] + 1
    assert rep.truncated_at_offset == log.log_end_offset


def test_recovery_zeroed_tail_preallocated(tmp_path):
    c = cfg(segment_bytes=4000, preallocate="true")
    log = open_log(tmp_path, c)
    for _ in range(5):
        log.append(make_batch(3), 0)
    data = read_all(log)
    assert os.path.getsize(log.active_segment.path) == 4000
    log.close_without_trim()
    log = open_log(tmp_path, c)
    rep = log.recovery
    assert "zero" in rep.reason and rep.dropped_bytes == 4000 - len(data)
    assert rep.zero_tail_bytes == rep.dropped_bytes and not rep.damaged
    assert read_all(log) == data
    assert log.append(make_batch(1), 0).first_offset == 15
    log.close()
    assert os.path.getsize(tmp_path / "topic-0" / "00000000000000000000.log") == len(read_all(
        open_log(tmp_path, c, had_clean_shutdown=True)))


def _flip(path, position, mask=0x40):
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ mask]))


@pytest.mark.parametrize("where,expect", [
    (100, "CRC"),        # inside the records of the 1st batch
    (148 + 4, "offset"),  # baseOffset of the 2nd batch (outside the CRC)
    (148 * 2 + 9, "length"),  # batchLength of the 3rd batch
    (148 * 3 + 16, "magic"),  # magic of the 4th batch
])
def test_recovery_flipped_byte_in_closed_segment(tmp_path, where, expect):
    c = cfg(segment_bytes=700)
    data = _crash_log(tmp_path, c)
    all_batches = offsets_of(data)
    d = tmp_path / "topic-0"
    logs = sorted(x for x in os.listdir(d) if x.endswith(".log"))
    assert len(logs) >= 4
    victim_base = int(logs[1].split(".")[0])
    sizes = [b.size for b in iter_batches(data)]
    assert set(sizes) == {148}
    _flip(d / logs[1], where)
    log = open_log(tmp_path, c, recovery_point=0)
    rep = log.recovery
    assert rep.damaged, rep
    assert expect.lower() in rep.reason.lower() or expect == "length", rep.reason
    assert rep.deleted_segments == [int(x.split(".")[0]) for x in logs[2:]]
    damaged_batch = victim_base + 3 * (where // 148)
    kept = offsets_of(read_all(log))
    # every complete batch before the damage survives, nothing after it
    assert kept == [b for b in all_batches if b[0] < damaged_batch]
    assert log.log_end_offset == damaged_batch
    assert rep.truncated_at_offset == damaged_batch
    assert sorted(x for x in os.listdir(d) if x.endswith(".log")) == logs[:2]
    assert rep.dropped_bytes == len(data) - len(read_all(log))


def test_corrupt_index_is_rebuilt(tmp_path):
    c = cfg(segment_bytes=700, index_interval_bytes=10)
    data = _crash_log(tmp_path, c)
    d = tmp_path / "topic-0"
    idx = sorted(x for x in os.listdir(d) if x.endswith(".index"))[0]
    with open(d / idx, "r+b") as f:
        f.seek(0, 2)
        f.write(b"\0" * 16)  # as if preallocated zeros survived
    log = open_log(tmp_path, c, had_clean_shutdown=True)
    assert 0 in log.recovery.rebuilt_indexes
    assert read_all(log) == data
    for off in range(0, 60, 7):
        assert offsets_of(log.read(off, 1).to_bytes())[0][0] <= off


def test_interrupted_clean_swap_and_deleted_files(tmp_path):
    c = cfg(segment_bytes=700)
    data = _crash_log(tmp_path, c)
    d = tmp_path / "topic-0"
    open(d / "00000000000000000003.log.cleaned", "wb").write(b"junk")
    open(d / "00000000000000000099.log.deleted", "wb").write(b"junk")
    log = open_log(tmp_path, c)
    assert not [x for x in os.listdir(d) if x.endswith((".cleaned", ".deleted"))]
    assert read_all(log) == data


# ---------------------------------------------------------------------------- flush


def test_flush_and_group_commit(tmp_path, monkeypatch, fsync_path):
    monkeypatch.setattr(fill_ahead, "ZEROS", False)   # its fsyncs are not group commit's
    log = open_log(tmp_path, cfg(flush_messages=1))
    assert log.config.group_commit
    info = log.append(make_batch(2), 0)
    assert info.flush_required
    syncs = []
    real, real_aio = os.fdatasync, aio_fsync.AioFsync.fdatasync

    def spy(fd):
        syncs.append(fd)
        return real(fd)

    def spy_aio(aio, fd, callback):
        syncs.append(fd)
        return real_aio(aio, fd, callback)

    monkeypatch.setattr(os, "fdatasync", spy)
    monkeypatch.setattr(aio_fsync.AioFsync, "fdatasync", spy_aio)

    async def main():
        async def one(i):
            inf = log.append(make_batch(1), 0)
            await log.sync(inf.last_offset + 1)
            return inf.last_offset

        results = await asyncio.gather(*(one(i) for i in range(50)))
        return results

    res = asyncio.run(main())
    assert sorted(res) == list(range(2, 52))
    assert log.recovery_point == 0  # the active segment is always re-scanned by recovery
    log.flush()
    assert log.recovery_point == 52
    assert 1 <= log.sync_rounds <= 3 and len(syncs) == log.sync_rounds


def test_a_truncation_during_an_fsync_round_keeps_later_appends_waiting(tmp_path, monkeypatch, fsync_path,
                                                                        submit_held):
    """An fsync round covers what was written when it started. If the log is truncated and
    appended to again while it runs, the new records below its old end were not covered:
    their waiters wait for the next round (the old code called them durable)."""
    import threading

    from kbroker.log import partition_log as pl

    log = open_log(tmp_path, cfg(flush_messages=1))
    for _ in range(5):
        log.append(make_batch(2), 0)             # offsets 0..9, batches of two
    release, started, rounds = threading.Event(), threading.Event(), []
    real, real_aio = pl._fsync_jobs, aio_fsync.AioFsync.fdatasync

    def slow_first(jobs):                        # a thread's round: held before it syncs
        rounds.append(len(jobs))
        if len(rounds) == 1:
            started.set()
            release.wait(10)
        real(jobs)
    monkeypatch.setattr(pl, "_fsync_jobs", slow_first)

    def slow_first_aio(aio, fd, callback):       # an AIO round: its end held back
        rounds.append(1)
        if len(rounds) > 1:
            return real_aio(aio, fd, callback)
        started.set()
        submit_held(real_aio, aio, fd, callback, release)
    monkeypatch.setattr(aio_fsync.AioFsync, "fdatasync", slow_first_aio)

    async def main():
        first = asyncio.ensure_future(log.sync(10))
        while not started.is_set():
            await asyncio.sleep(0.001)
        log.truncate_to(4)                       # a follower's truncation, mid-fsync
        info = log.append(make_batch(4), 0)      # offsets 4..7, below the round's old end 10
        assert info.last_offset == 7
        second = asyncio.ensure_future(log.sync(8))
        release.set()
        with pytest.raises(errors.KafkaStorageError):
            await first                          # its records were truncated away
        await second
    asyncio.run(main())
    assert len(rounds) == 2 and log.sync_rounds == 2     # the old code answered it after one


def test_flush_policy(tmp_path):
    log = open_log(tmp_path, cfg(flush_ms=1000, segment_bytes=600))
    log.append(make_batch(2), 0)
    assert not log.maybe_flush(500)
    assert log.maybe_flush(1000) and log.recovery_point == 2
    for _ in range(10):
        log.append(make_batch(3), 2000)
    assert log.num_segments > 1
    assert log.flush_rolled() >= 1
    assert log.recovery_point == log.active_segment.base_offset


# ---------------------------------------------------------------------------- misc


def test_parse_topic_partition():
    assert parse_topic_partition("/a/b/my-topic-12") == ("my-topic", 12)
    assert parse_topic_partition("__consumer_offsets-0") == ("__consumer_offsets", 0)
    with pytest.raises(ValueError):
        parse_topic_partition("nopartition")


def test_index_classes(tmp_path):
    oi = OffsetIndex(str(tmp_path / "a.index"), 100, 80, writable=True)
    assert oi.lookup(150) == (100, 0)
    for i in range(10):
        assert oi.append(100 + i * 10, i * 1000)
    assert oi.is_full() and not oi.append(300, 1)
    assert oi.lookup(125) == (120, 2000) and oi.lookup(99) == (100, 0)
    oi.truncate_to(150)
    assert oi.entries == 5 and oi.last_entry() == (140, 4000)
    oi.trim_to_valid_size()
    oi.close()
    assert os.path.getsize(tmp_path / "a.index") == 40
    oi2 = OffsetIndex(str(tmp_path / "a.index"), 100)
    assert oi2.entries == 5 and oi2.lookup(1000) == (140, 4000)
    ti = TimeIndex(str(tmp_path / "a.timeindex"), 100, 120, writable=True)
    assert ti.maybe_append(50, 101) and not ti.maybe_append(50, 102) and ti.maybe_append(60, 105)
    assert ti.lookup_below(60) == (50, 101) and ti.lookup_below(50) == (-1, 100)
    assert ti.lookup_below(1000) == (60, 105)
    ti.truncate_to(105)
    assert ti.entries == 1


def test_index_appends_read_no_file(tmp_path, monkeypatch):
    """The append path checks each index's last entry from memory (a produce request used to
    cost two preads for it); after a truncation the last entry is read from the file again."""
    oi = OffsetIndex(str(tmp_path / "b.index"), 0, 800, writable=True)
    ti = TimeIndex(str(tmp_path / "b.timeindex"), 0, 1200, writable=True)
    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, pos: (reads.append(pos), real(fd, n, pos))[1])
    for i in range(50):
        assert oi.append(i * 10, i * 100) and ti.maybe_append(1000 + i, i * 10)
        assert not oi.append(i * 10, 1) and not ti.maybe_append(1000 + i, i * 10)   # not increasing
    assert reads == []
    assert oi.last_entry() == (490, 4900) and ti.last_entry() == (1049, 490) and reads == []
    oi.truncate_to(250)
    ti.truncate_to(250)
    assert oi.last_entry() == (240, 2400) and ti.last_entry() == (1024, 240) and reads
    assert oi.append(250, 2500) and not oi.append(245, 1) and oi.last_entry() == (250, 2500)
    oi.close_and_trim()
    assert OffsetIndex(str(tmp_path / "b.index"), 0, 800, writable=True).last_entry() == (250, 2500)


# ---------------------------------------------------------------------------- compacted keys


@pytest.mark.parametrize("compression", [0, 1, 3])
def test_compacted_topic_rejects_records_without_key(tmp_path, compression):
    log = open_log(tmp_path, cfg(cleanup_policy="compact"))
    keys = [b"a", None, b"c", None]
    with pytest.raises(errors.InvalidRecordError) as ei:
        log.append(make_batch(4, keys=keys, compression=compression), 0)
    assert ei.value.error == "INVALID_RECORD"
    assert [i for i, _m in ei.value.record_errors] == [1, 3]
    assert all("Compacted topic cannot accept message without key" in m
               for _i, m in ei.value.record_errors)
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    # every record keyed: accepted
    assert log.append(make_batch(4, compression=compression), 0).last_offset == 3


def test_compacted_key_check_indexes_records_across_batches(tmp_path):
    log = open_log(tmp_path, cfg(cleanup_policy="compact,delete"))
    buf = concat(make_batch(2), make_batch(2, keys=[b"x", None]))
    with pytest.raises(errors.InvalidRecordError) as ei:
        log.append(buf, 0)
    assert [i for i, _m in ei.value.record_errors] == [3]


def test_non_compacted_topic_accepts_records_without_key(tmp_path, monkeypatch):
    log = open_log(tmp_path, cfg(cleanup_policy="delete"))
    # the delete-policy hot path never decodes records
    monkeypatch.setattr(PartitionLog, "_check_keys", lambda *a: pytest.fail("per-record check"))
    assert log.append(make_batch(3, key_prefix=None), 0).last_offset == 2


def test_compacted_topic_follower_append_is_not_key_checked(tmp_path):
    leader = open_log(tmp_path)
    leader.append(make_batch(2, key_prefix=None), 0)
    data = bytearray(read_all(leader))
    follower = PartitionLog.open(str(tmp_path / "f-0"), cfg(cleanup_policy="compact"), 0)
    assert follower.append_as_follower(data, 0).last_offset == 1


def test_translate_offset_at_or_below_a_segment_base_needs_no_index(tmp_path, monkeypatch):
    # a read from a segment's first offset (a consumer from the beginning) skips the index:
    # the same answer as the scan from the index's position, without reading the index file
    log = open_log(tmp_path, cfg(segment_bytes=600, index_interval_bytes=100))
    for _ in range(20):
        log.append(make_batch(3), 0)
    segs = log.segments
    assert len(segs) > 3
    expected = {}
    for seg in segs:
        first = next(seg.iter_frames(0))
        for o in (seg.base_offset, seg.base_offset - 1, 0):
            expected[(seg.base_offset, o)] = seg.translate_offset(o)
            assert expected[(seg.base_offset, o)] == first
        second = next(f for f in seg.iter_frames(0) if f[0] > 0)
        assert seg.translate_offset(seg.base_offset, second[0]) == second   # from a later position
        assert seg.translate_offset(second[1]) == second                    # above the base: indexed

    def no_index(*_a):
        raise AssertionError("index read for an offset at or below the segment's base")
    for seg in segs:
        monkeypatch.setattr(seg.offset_index, "lookup", no_index)
        for o in (seg.base_offset, seg.base_offset - 1, 0):
            assert seg.translate_offset(o) == expected[(seg.base_offset, o)]
    assert offsets_of(log.read(0, 1 << 20).to_bytes()) == [(i, i + 2) for i in range(0, 60, 3)]


def test_read_never_answers_a_cut_first_batch_alone(tmp_path):
    # Kafka's fetch drops an incomplete first batch (ReplicaManager, firstEntryIncomplete):
    # bytes without one whole batch make the Java consumer fail ("Failed to make progress")
    log = open_log(tmp_path)
    sizes = append_batches(log, 3)
    r = log.read(0, sizes[0] - 1, min_one_message=False)
    assert r.size == 0 and r.regions == []
    r = log.read(5, 10, min_one_message=False)
    assert r.size == 0
    r = log.read(0, sizes[0] - 1, min_one_message=True)          # the first partition of a fetch
    assert offsets_of(r.to_bytes()) == [(0, 4)]
    r = log.read(0, sizes[0] + 10, min_one_message=False)        # a cut trailing batch stays
    assert r.size == sizes[0] + 10 and offsets_of(r.to_bytes()[:sizes[0]]) == [(0, 4)]
    r = log.read(0, sizes[0], min_one_message=False)
    assert offsets_of(r.to_bytes()) == [(0, 4)]


# ---------------------------------------------------------------------------- new partitions


def test_a_new_partitions_log_reads_nothing_from_the_directory_it_makes(tmp_path, monkeypatch):
    """open(new=True) makes the directory and so knows it is empty: neither the log nor its
    producer state and transaction indexes list it (each system call is a GIL hand-over in
    the thread creating thousands of partitions)."""
    from kbroker.txn.partition_txns import PartitionTxns
    from kbroker.txn.producer_state import ProducerStateManager

    def no_listing(*a, **k):
        raise AssertionError("a new partition's directory was listed")
    monkeypatch.setattr(os, "listdir", no_listing)
    monkeypatch.setattr(os, "scandir", no_listing)
    log = open_log(tmp_path, new=True, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    assert log.fresh and log.log_end_offset == 0 and log.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"
    psm = ProducerStateManager(log.dir, scan=False)
    PartitionTxns(log.dir, psm, scan=False).attach(log)
    monkeypatch.undo()
    log.append(make_batch(3), 1000)
    assert offsets_of(read_all(log)) == [(0, 2)]
    log.close()
    again = open_log(tmp_path)            # and it reopens as any log
    assert not again.fresh and again.log_end_offset == 3 and again.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"
    again.close()


def test_new_on_a_directory_that_exists_opens_it_as_any_other(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(5), 1000)
    log.close()
    reopened = open_log(tmp_path, new=True)
    assert not reopened.fresh
    assert reopened.log_end_offset == 5 and offsets_of(read_all(reopened)) == [(0, 4)]
    reopened.close()
