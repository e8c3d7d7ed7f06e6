"""RecordBatch v2 view, iter_batches, CRC, in-place rewrites, produce validation."""

import struct

import pytest
from crc32c import crc32c

from kbroker.wire.records import (
    BatchBuilder,
    CodecError,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordBatch,
    TruncatedRecordError,
    UnsupportedMagicError,
    iter_batches,
    validate_produce_records,
)


def make_batch(n=3, *, base_offset=0, codec=0, **kw):
    b = BatchBuilder(codec, base_offset=base_offset, **kw)
    for i in range(n):
        b.append(key=b"k%d" % i, value=b"value-%d" % i, timestamp=1_000 + i)
    return b.build()


def test_header_fields():
    raw = BatchBuilder(
        0, producer_id=77, producer_epoch=3, base_sequence=10, base_offset=40,
        partition_leader_epoch=5,
    )
    for i in range(4):
        raw.append(key=None, value=b"x", timestamp=500 + 10 * i)
    data = raw.build()
    b = RecordBatch(data)
    assert b.size == len(data) == 12 + b.batch_length
    assert b.magic == 2
    assert b.base_offset == 40
    assert b.partition_leader_epoch == 5
    assert b.last_offset_delta == 3
    assert b.last_offset == 43 and b.next_offset == 44
    assert b.base_timestamp == 500 and b.max_timestamp == 530
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 3, 10)
    assert b.records_count == 4
    assert b.compression == 0 and b.timestamp_type == 0
    assert not b.is_transactional and not b.is_control
    assert b.crc == crc32c(data[21:])
    assert b.verify_crc()
    assert bytes(b.buffer()) == data


def test_records_roundtrip_uncompressed():
    b = BatchBuilder()
    b.append(key=None, value=None, timestamp=5)
    b.append(key=b"", value=b"", headers=[("a", b"1"), ("b", None), ("", b"")], timestamp=7)
    b.append(key=b"k" * 300, value=b"v" * 70000, timestamp=6)
    recs = list(RecordBatch(b.build()).records())
    assert recs == [
        Record(0, 5, None, None, []),
        Record(1, 7, b"", b"", [("a", b"1"), ("b", None), ("", b"")]),
        Record(2, 6, b"k" * 300, b"v" * 70000, []),
    ]


def test_view_over_offset_and_memoryview():
    a, b = make_batch(2), make_batch(3, base_offset=2)
    buf = bytearray(b"junk" + a + b)
    mv = memoryview(buf)
    first = RecordBatch(mv, 4)
    second = RecordBatch(mv, 4 + first.size)
    assert first.position == 4 and second.position == 4 + len(a)
    assert bytes(second.buffer()) == b
    assert [r.offset for r in second.records()] == [2, 3, 4]
    # the view does not copy: a write through the buffer shows through
    buf[4 + len(a) : 4 + len(a) + 8] = struct.pack(">q", 99)
    assert second.base_offset == 99


def test_crc_detects_flipped_byte():
    data = bytearray(make_batch(5))
    for pos in (21, 30, 61, len(data) - 1):
        copy = bytearray(data)
        copy[pos] ^= 0x01
        b = RecordBatch(copy)
        assert not b.verify_crc(), pos
        with pytest.raises(CorruptRecordError) as ei:
            b.ensure_valid()
        assert ei.value.position == 0
        with pytest.raises(CorruptRecordError):
            validate_produce_records(copy)


def test_in_place_rewrite_keeps_crc():
    data = bytearray(make_batch(3, partition_leader_epoch=-1))
    b = RecordBatch(data)
    crc = b.crc
    b.base_offset = 1_000_000_000_000
    b.partition_leader_epoch = 17
    assert b.base_offset == 1_000_000_000_000 and b.partition_leader_epoch == 17
    assert b.verify_crc() and b.crc == crc
    fresh = RecordBatch(bytes(data))
    assert fresh.base_offset == 1_000_000_000_000 and fresh.partition_leader_epoch == 17
    assert fresh.verify_crc()
    assert [r.offset for r in fresh.records()] == [10**12, 10**12 + 1, 10**12 + 2]


def test_rewrite_needs_writable_buffer():
    b = RecordBatch(make_batch(1))
    with pytest.raises(TypeError):
        b.base_offset = 5
    with pytest.raises(TypeError):
        b.set_log_append_time(5)


def test_set_log_append_time_recomputes_crc():
    data = bytearray(make_batch(3))
    b = RecordBatch(data)
    old_crc = b.crc
    b.set_log_append_time(123_456)
    assert b.timestamp_type == 1 and b.max_timestamp == 123_456
    assert b.crc != old_crc and b.verify_crc()
    fresh = RecordBatch(data)
    assert fresh.verify_crc() and fresh.timestamp_type == 1
    assert fresh.max_timestamp == 123_456
    assert fresh.base_timestamp == 1_000  # left alone, as Kafka does
    assert all(r.timestamp == 123_456 for r in fresh.records())
    assert fresh.compression == 0 and not fresh.is_transactional


def test_set_log_append_time_keeps_other_attributes():
    data = bytearray(make_batch(2, codec=1, producer_id=1, producer_epoch=0,
                                base_sequence=0, is_transactional=True))
    b = RecordBatch(data)
    b.set_log_append_time(9)
    fresh = RecordBatch(data)
    assert fresh.verify_crc()
    assert (fresh.compression, fresh.is_transactional, fresh.timestamp_type) == (1, True, 1)


def test_iter_batches_walks_to_exact_end():
    parts = [make_batch(2, base_offset=0), make_batch(1, base_offset=2), make_batch(4, base_offset=3)]
    buf = b"".join(parts)
    batches = list(iter_batches(buf))
    assert [b.base_offset for b in batches] == [0, 2, 3]
    assert [b.position for b in batches] == [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(buf, len(buf))) == []
    assert [b.base_offset for b in iter_batches(buf, len(parts[0]))] == [2, 3]


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 16, 17, 40, 60, 61, -1])
def test_torn_tail_raises_with_position(cut):
    a, b = make_batch(2), make_batch(3, base_offset=2)
    tail = b[:cut] if cut > 0 else b[:cut]
    buf = a + tail
    it = iter_batches(buf)
    assert next(it).base_offset == 0
    with pytest.raises(TruncatedRecordError) as ei:
        next(it)
    assert ei.value.position == len(a)
    assert isinstance(ei.value, CorruptRecordError)
    assert isinstance(ei.value, CodecError) and isinstance(ei.value, ValueError)


def test_bad_length_and_magic():
    a = make_batch(2)
    bad_len = bytearray(a + a)
    struct.pack_into(">i", bad_len, len(a) + 8, 10)  # below the 49-byte minimum
    with pytest.raises(CorruptRecordError) as ei:
        list(iter_batches(bad_len))
    assert ei.value.position == len(a)

    bad_magic = bytearray(a + a)
    bad_magic[len(a) + 16] = 7
    with pytest.raises(UnsupportedMagicError) as ei:
        list(iter_batches(bad_magic))
    assert ei.value.position == len(a) and ei.value.magic == 7

    legacy = bytearray(a)
    legacy[16] = 1
    with pytest.raises(UnsupportedMagicError) as ei:
        RecordBatch(legacy)
    assert ei.value.magic == 1 and ei.value.position == 0


def test_negative_length_is_corrupt():
    a = bytearray(make_batch(1))
    struct.pack_into(">i", a, 8, -5)
    with pytest.raises(CorruptRecordError) as ei:
        list(iter_batches(a))
    assert ei.value.position == 0


def test_validate_produce_records():
    good = make_batch(3, producer_id=9, producer_epoch=0, base_sequence=0)
    [b] = validate_produce_records(good)
    assert b.records_count == 3
    assert len(validate_produce_records(good + good)) == 2

    with pytest.raises(InvalidRecordError):
        validate_produce_records(b"")
    with pytest.raises(InvalidRecordError):  # idempotent producer without a sequence
        validate_produce_records(make_batch(1, producer_id=9, producer_epoch=0))
    with pytest.raises(InvalidRecordError):  # clients may not write control batches
        validate_produce_records(make_batch(1, is_control=True))
    validate_produce_records(make_batch(1, is_control=True), from_client=False)
    with pytest.raises(InvalidRecordError):  # empty batch from a client
        validate_produce_records(BatchBuilder().build())

    inconsistent = bytearray(good)
    struct.pack_into(">i", inconsistent, 23, 7)  # lastOffsetDelta
    b = RecordBatch(inconsistent)
    struct.pack_into(">I", inconsistent, 17, b.compute_crc())
    with pytest.raises(InvalidRecordError):
        validate_produce_records(inconsistent)

    legacy = bytearray(good)
    legacy[16] = 1
    with pytest.raises(InvalidRecordError):
        validate_produce_records(legacy)

    with pytest.raises(TruncatedRecordError):
        validate_produce_records(good[:-1])

    bad_codec = bytearray(good)
    struct.pack_into(">h", bad_codec, 21, 5)  # attributes: codec 5 does not exist
    struct.pack_into(">I", bad_codec, 17, RecordBatch(bad_codec).compute_crc())
    for client in (True, False):
        with pytest.raises(InvalidRecordError):
            validate_produce_records(bad_codec, from_client=client)
    with pytest.raises(CorruptRecordError):
        RecordBatch(bad_codec).records()


def test_records_trailing_garbage_and_overrun_detected():
    # declare one more record than present: iteration must fail, not loop or hang
    data = bytearray(make_batch(2))
    struct.pack_into(">i", data, 57, 3)
    with pytest.raises(CorruptRecordError):
        list(RecordBatch(data).records())
    # declare one fewer: trailing bytes are an error
    data = bytearray(make_batch(2))
    struct.pack_into(">i", data, 57, 1)
    with pytest.raises(CorruptRecordError):
        list(RecordBatch(data).records())


def test_empty_batch():
    # compaction can leave a batch with no records; it still carries offsets
    data = BatchBuilder(producer_id=3, producer_epoch=1, base_sequence=5, base_offset=10).build(
        last_offset_delta=4
    )
    b = RecordBatch(data)
    assert b.records_count == 0 and list(b.records()) == []
    assert b.last_offset == 14 and b.verify_crc()


def test_builder_offsets_with_gaps():
    bb = BatchBuilder(base_offset=100)
    assert bb.append(value=b"a", timestamp=1) == 100
    assert bb.append(value=b"b", timestamp=2, offset=105) == 105
    assert bb.append(value=b"c", timestamp=3) == 106
    with pytest.raises(ValueError):
        bb.append(value=b"d", offset=106)
    b = RecordBatch(bb.build())
    assert [r.offset for r in b.records()] == [100, 105, 106]
    assert b.last_offset_delta == 6 and b.records_count == 3


def test_delete_horizon():
    bb = BatchBuilder(delete_horizon_ms=50_000)
    bb.append(key=b"k", value=None, timestamp=1_000)
    b = RecordBatch(bb.build())
    assert b.has_delete_horizon and b.delete_horizon_ms == 50_000
    assert [r.timestamp for r in b.records()] == [1_000]


def test_build_steps_builds_what_build_does_a_pause_per_group_of_records():
    import random

    from kbroker.slices import run_to_end
    from kbroker.wire import compression as C
    rng = random.Random(3)
    for n, codec, horizon in ((0, C.NONE, None), (1, C.NONE, None), (450, C.NONE, None),
                              (450, C.ZSTD, None), (201, C.NONE, 5000)):
        def builder():
            b = BatchBuilder(codec, base_offset=100, delete_horizon_ms=horizon)
            for i in range(n):
                b.append(key=b"k%d" % i, value=rng.randbytes(20), timestamp=1000 + i,
                         headers=[("h", b"v")] if i % 7 == 0 else (), offset=100 + 2 * i)
            return b
        state = rng.getstate()
        one_go = builder().build(last_offset_delta=2 * n + 5)
        rng.setstate(state)
        steps = builder().build_steps(last_offset_delta=2 * n + 5, records_per_step=200)
        pauses = 0
        try:
            while True:
                next(steps)
                pauses += 1
        except StopIteration as done:
            stepped = done.value
        assert stepped == one_go
        assert pauses == -(-n // 200)
        rng.setstate(state)
        assert run_to_end(builder().build_steps(2 * n + 5)) == one_go
