"""Hypothesis round trips through BatchBuilder / RecordBatch, cross-checked against an
independent implementation (kafka-python's record module), plus control batches."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.wire.records import (
    BatchBuilder,
    ControlRecordType,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordBatch,
    control_batch,
    control_key,
    control_record_type,
    end_txn_marker,
    iter_batches,
    validate_produce_records,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python imports

SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=12), maybe_bytes)
record = st.fixed_dictionaries(
    {
        "key": maybe_bytes,
        "value": maybe_bytes,
        "headers": st.lists(header, max_size=4),
        "timestamp": st.integers(min_value=0, max_value=1 << 45),
    }
)
codecs = st.sampled_from([0, 1, 2, 3, 4])


@st.composite
def batches(draw):
    codec = draw(codecs)
    recs = draw(st.lists(record, min_size=1, max_size=25))
    gaps = draw(st.lists(st.integers(0, 3), min_size=len(recs), max_size=len(recs)))
    producer_id = draw(st.sampled_from([-1, 0, 12345, (1 << 63) - 1]))
    idempotent = producer_id >= 0
    kw = dict(
        base_offset=draw(st.integers(0, 1 << 50)),
        partition_leader_epoch=draw(st.integers(-1, 1 << 20)),
        producer_id=producer_id,
        producer_epoch=draw(st.integers(0, 32767)) if idempotent else -1,
        base_sequence=draw(st.integers(0, (1 << 31) - 1)) if idempotent else -1,
        is_transactional=idempotent and draw(st.booleans()),
    )
    return codec, recs, gaps, kw


@SETTINGS
@given(batches())
def test_builder_iterator_roundtrip(spec):
    codec, recs, gaps, kw = spec
    b = BatchBuilder(codec, **kw)
    expected = []
    offset = kw["base_offset"]
    for r, gap in zip(recs, gaps):
        offset += gap
        got = b.append(offset=offset, **r)
        assert got == offset
        expected.append(Record(offset, r["timestamp"], r["key"], r["value"], r["headers"]))
        offset += 1
    data = b.build()

    batch = RecordBatch(bytearray(data))
    assert batch.verify_crc()
    assert batch.size == len(data)
    assert batch.compression == codec
    assert batch.base_offset == kw["base_offset"]
    assert batch.partition_leader_epoch == kw["partition_leader_epoch"]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        kw["producer_id"],
        kw["producer_epoch"],
        kw["base_sequence"],
    )
    assert batch.is_transactional == kw["is_transactional"] and not batch.is_control
    assert batch.records_count == len(recs)
    assert batch.last_offset == expected[-1].offset
    assert batch.base_timestamp == recs[0]["timestamp"]
    assert batch.max_timestamp == max(r["timestamp"] for r in recs)
    assert list(batch.records()) == expected
    [v] = validate_produce_records(data, from_client=False)
    assert v.records_count == len(recs)
    if any(gaps[1:]) or gaps[0]:  # clients must send dense offsets
        with pytest.raises(InvalidRecordError):
            validate_produce_records(data)
    else:
        validate_produce_records(data)

    # in-place rewrites stay CRC-valid and shift every record's offset
    batch.base_offset = 7
    batch.partition_leader_epoch = 3
    assert batch.verify_crc()
    delta = 7 - kw["base_offset"]
    assert [r.offset for r in batch.records()] == [e.offset + delta for e in expected]
    batch.set_log_append_time(42)
    assert batch.verify_crc()
    assert {r.timestamp for r in batch.records()} == {42}


@SETTINGS
@given(batches(), st.integers(0, 3))
def test_iter_batches_many(spec, copies):
    codec, recs, gaps, kw = spec
    b = BatchBuilder(codec, **kw)
    for r in recs:
        b.append(**r)
    one = b.build()
    buf = one * (copies + 1)
    views = list(iter_batches(buf))
    assert len(views) == copies + 1
    assert [v.position for v in views] == [i * len(one) for i in range(copies + 1)]
    # any strict prefix that cuts a batch raises with that batch's position
    if copies:
        cut = len(one) + len(one) // 2
        with pytest.raises(CorruptRecordError) as ei:
            list(iter_batches(buf[:cut]))
        assert ei.value.position == len(one)


@settings(max_examples=60, deadline=None)
@given(batches(), st.data())
def test_any_single_flipped_byte_in_crc_range_is_detected(spec, data):
    codec, recs, gaps, kw = spec
    b = BatchBuilder(codec, **kw)
    for r in recs:
        b.append(**r)
    raw = bytearray(b.build())
    pos = data.draw(st.integers(21, len(raw) - 1))
    bit = data.draw(st.integers(0, 7))
    raw[pos] ^= 1 << bit
    assert not RecordBatch(raw).verify_crc()


# ----------------------------------------------------------- independent implementation


@settings(max_examples=60, deadline=None)
@given(batches())
def test_kafka_python_decodes_our_batches(spec):
    from kafka.record.default_records import DefaultRecordBatch

    codec, recs, gaps, kw = spec
    b = BatchBuilder(codec, **kw)
    for r in recs:
        b.append(**r)
    theirs = DefaultRecordBatch(b.build())
    assert theirs.validate_crc()
    assert theirs.base_offset == kw["base_offset"]
    assert theirs.producer_id == kw["producer_id"]
    assert theirs.base_sequence == kw["base_sequence"]
    assert theirs.is_transactional == kw["is_transactional"]
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    want = [
        (kw["base_offset"] + i, r["timestamp"], r["key"], r["value"], r["headers"])
        for i, r in enumerate(recs)
    ]
    assert got == want


@settings(max_examples=60, deadline=None)
@given(
    codecs,
    st.lists(
        st.fixed_dictionaries(
            {
                "key": maybe_bytes,
                "value": maybe_bytes,
                "headers": st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=20)), max_size=3),
                "timestamp": st.integers(0, 1 << 42),
            }
        ),
        min_size=1,
        max_size=20,
    ),
    st.booleans(),
)
def test_we_decode_kafka_python_batches(codec, recs, transactional):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    theirs = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=99 if transactional else -1,
        producer_epoch=1 if transactional else -1,
        base_sequence=5 if transactional else -1,
        batch_size=1 << 30,
    )
    for i, r in enumerate(recs):
        theirs.append(i, r["timestamp"], r["key"], r["value"], r["headers"])
    data = bytes(theirs.build())
    [batch] = validate_produce_records(data)
    # kafka-python falls back to no compression when it would not shrink the data
    assert batch.compression in (0, codec) and batch.is_transactional == transactional
    assert list(batch.records()) == [
        Record(i, r["timestamp"], r["key"], r["value"], r["headers"]) for i, r in enumerate(recs)
    ]


# ----------------------------------------------------------------------- control


@pytest.mark.parametrize("marker", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_transaction_marker_batch(marker):
    data = control_batch(marker, producer_id=4000, producer_epoch=7, coordinator_epoch=21,
                         timestamp=1_700_000_000_000, base_offset=88)
    b = RecordBatch(data)
    assert b.verify_crc()
    assert b.is_control and b.is_transactional
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (4000, 7, -1)
    assert b.records_count == 1 and b.base_offset == 88 and b.last_offset == 88
    assert b.compression == 0
    assert b.control_type() == marker
    [r] = list(b.records())
    # key: version int16 0, type int16; value: version int16 0, coordinator epoch int32
    assert r.key == struct.pack(">hh", 0, int(marker))
    assert r.value == struct.pack(">hi", 0, 21)
    assert control_record_type(r.key) is marker
    assert end_txn_marker(r.value) == 21
    assert r.timestamp == 1_700_000_000_000 and r.offset == 88
    validate_produce_records(data, from_client=False)


def test_control_values():
    assert ControlRecordType.ABORT == 0 and ControlRecordType.COMMIT == 1
    assert control_key(ControlRecordType.LEADER_CHANGE) == b"\x00\x00\x00\x02"
    assert control_record_type(b"\x00\x00\x00\x63") == 99  # unknown types pass through
    with pytest.raises(CorruptRecordError):
        control_record_type(b"\x00\x00\x01")
    with pytest.raises(CorruptRecordError):
        end_txn_marker(b"\x00\x00")
    with pytest.raises(ValueError):
        control_batch(ControlRecordType.LEADER_CHANGE, 1, 1)


def test_other_control_batch_via_builder():
    bb = BatchBuilder(is_control=True)
    bb.append(key=control_key(ControlRecordType.LEADER_CHANGE), value=b"\x00\x00", timestamp=1)
    b = RecordBatch(bb.build())
    assert b.is_control and not b.is_transactional
    assert b.control_type() is ControlRecordType.LEADER_CHANGE
    plain = BatchBuilder()
    plain.append(value=b"x")
    assert RecordBatch(plain.build()).control_type() is None
