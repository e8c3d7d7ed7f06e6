"""Malformed input must raise CorruptRecordError (a CodecError), never anything else."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.wire import compression as C
from kbroker.wire.legacy_records import decode_legacy_message_set
from kbroker.wire.records import (
    BatchBuilder,
    CodecError,
    CorruptRecordError,
    RecordBatch,
    iter_batches,
    validate_produce_records,
)

FUZZ = settings(max_examples=150, deadline=None)


def _batch(codec=0):
    b = BatchBuilder(codec)
    for i in range(6):
        b.append(key=b"k%d" % i, value=b"v" * (i * 40), headers=[("h", b"x")] * (i % 3),
                 timestamp=10 + i)
    return b.build()


def _fix_crc(raw: bytearray) -> None:
    b = RecordBatch(raw)
    struct.pack_into(">I", raw, 17, b.compute_crc())


def _drain(batch):
    try:
        return list(batch.records())
    except CorruptRecordError:
        return None


@FUZZ
@given(st.sampled_from([0, 1, 2, 3, 4]), st.data())
def test_mutated_records_section(codec, data):
    raw = bytearray(_batch(codec))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(61, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    _fix_crc(raw)
    _drain(RecordBatch(raw))


@FUZZ
@given(st.data())
def test_truncated_records_section_with_consistent_length(data):
    raw = bytearray(_batch())
    cut = data.draw(st.integers(61, len(raw) - 1))
    raw = raw[:cut]
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    _fix_crc(raw)
    assert _drain(RecordBatch(raw)) is None


@FUZZ
@given(st.integers(-(1 << 31), (1 << 31) - 1), st.data())
def test_mutated_header_count(count, data):
    raw = bytearray(_batch(data.draw(st.sampled_from([0, 1, 4]))))
    struct.pack_into(">i", raw, 57, count)
    _fix_crc(raw)
    recs = _drain(RecordBatch(raw))
    assert recs is None or len(recs) == count == 6 or (recs == [] and count == 0)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_everywhere(blob):
    for call in (
        lambda: list(iter_batches(blob)),
        lambda: list(iter_batches(blob, legacy=True)),
        lambda: validate_produce_records(blob),
        lambda: list(decode_legacy_message_set(blob)),
    ):
        try:
            call()
        except CodecError:
            pass
    for codec in (1, 2, 3, 4):
        try:
            C.decompress(codec, blob)
        except CorruptRecordError:
            pass


@FUZZ
@given(st.binary(min_size=1, max_size=200), st.sampled_from([1, 2, 3, 4]))
def test_compressed_garbage_in_a_batch(blob, codec):
    b = BatchBuilder(codec)
    b.append(value=b"x")
    raw = bytearray(b.build()[:61] + blob)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    _fix_crc(raw)
    _drain(RecordBatch(raw))
