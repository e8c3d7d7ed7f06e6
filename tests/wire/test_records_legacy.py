"""Legacy message sets (magic 0/1), built by hand from the format description."""

import struct
import zlib

import cramjam
import lz4.frame
import pytest

from kbroker.wire import compression as C
from kbroker.wire.legacy_records import (
    LegacyBatch,
    decode_legacy_message_set,
    iter_legacy_messages,
    xxh32_small,
)
from kbroker.wire.records import (
    BatchBuilder,
    CorruptRecordError,
    Record,
    RecordBatch,
    TruncatedRecordError,
    UnsupportedMagicError,
    iter_batches,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python imports


def _bytes(b):
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def message(offset, key, value, *, magic=0, attributes=0, timestamp=None):
    """One message-set entry: offset, size, then crc(magic..end), magic, attributes,
    [timestamp], key, value."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes(key) + _bytes(value)
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def gzip_(data):
    return C.gzip_compress(data)


def snappy_xerial(data):
    raw = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(raw)) + raw


def lz4_(data):
    return lz4.frame.compress(data, store_size=False)


def lz4_broken_checksum(data):
    """Kafka 0.8/0.9 (KAFKA-1493): the header checksum was taken over magic + descriptor."""
    frame = bytearray(lz4.frame.compress(data, store_size=False))
    assert frame[6] == (xxh32_small(bytes(frame[4:6])) >> 8) & 0xFF  # what it should be
    frame[6] = (xxh32_small(bytes(frame[0:6])) >> 8) & 0xFF
    return bytes(frame)


def test_xxh32_small_known_vectors():
    assert xxh32_small(b"") == 0x02CC5D05
    assert xxh32_small(b"a") == 0x550D7456
    assert xxh32_small(b"abc") == 0x32D153FF


def test_v0_uncompressed():
    buf = message(5, b"k", b"v") + message(6, None, b"") + message(7, b"", None)
    assert list(decode_legacy_message_set(buf)) == [
        Record(5, -1, b"k", b"v", []),
        Record(6, -1, None, b"", []),
        Record(7, -1, b"", None, []),
    ]
    msgs = list(iter_legacy_messages(buf))
    assert [m.magic for m in msgs] == [0, 0, 0]
    assert [(m.base_offset, m.last_offset, m.next_offset) for m in msgs] == [(5, 5, 6), (6, 6, 7), (7, 7, 8)]
    assert all(m.verify_crc() for m in msgs)
    assert bytes(msgs[1].buffer()) == message(6, None, b"")


def test_v1_uncompressed_timestamps():
    buf = message(0, b"a", b"1", magic=1, timestamp=1000) + message(
        1, b"b", b"2", magic=1, timestamp=999, attributes=0x08
    )
    recs = list(decode_legacy_message_set(buf))
    assert [(r.offset, r.timestamp) for r in recs] == [(0, 1000), (1, 999)]
    msgs = list(iter_legacy_messages(buf))
    assert [m.timestamp_type for m in msgs] == [0, 1]


@pytest.mark.parametrize("codec,enc", [(1, gzip_), (2, snappy_xerial), (3, lz4_)])
def test_v1_wrapper_relative_offsets(codec, enc):
    inner = b"".join(
        message(i, b"k%d" % i, b"v%d" % i, magic=1, timestamp=100 + i) for i in range(3)
    )
    wrapper = message(52, None, enc(inner), magic=1, attributes=codec, timestamp=102)
    recs = list(decode_legacy_message_set(wrapper))
    assert recs == [Record(50 + i, 100 + i, b"k%d" % i, b"v%d" % i, []) for i in range(3)]
    [m] = list(iter_legacy_messages(wrapper))
    assert (m.base_offset, m.last_offset, m.compression) == (50, 52, codec)
    assert m.records_count == 3


def test_v1_wrapper_log_append_time_overrides_inner():
    inner = b"".join(message(i, None, b"x", magic=1, timestamp=5) for i in range(2))
    wrapper = message(11, None, gzip_(inner), magic=1, attributes=0x08 | 1, timestamp=777)
    assert [(r.offset, r.timestamp) for r in decode_legacy_message_set(wrapper)] == [
        (10, 777),
        (11, 777),
    ]


@pytest.mark.parametrize("codec,enc", [(1, gzip_), (2, snappy_xerial), (3, lz4_broken_checksum)])
def test_v0_wrapper_absolute_offsets(codec, enc):
    inner = message(20, b"a", b"1") + message(21, b"b", b"2")
    wrapper = message(21, None, enc(inner), attributes=codec)
    assert list(decode_legacy_message_set(wrapper)) == [
        Record(20, -1, b"a", b"1", []),
        Record(21, -1, b"b", b"2", []),
    ]


def test_mixed_set_and_iter_batches_legacy_flag():
    inner = message(0, b"x", b"y", magic=1, timestamp=3)
    buf = message(0, None, b"plain") + message(1, None, gzip_(inner), magic=1, attributes=1, timestamp=3)
    with pytest.raises(UnsupportedMagicError) as ei:
        list(iter_batches(buf))
    assert ei.value.magic == 0 and ei.value.position == 0
    views = list(iter_batches(buf, legacy=True))
    assert [type(v) for v in views] == [LegacyBatch, LegacyBatch]
    assert [r.offset for v in views for r in v.records()] == [0, 1]
    # v2 batches and legacy messages may share a log
    v2 = BatchBuilder(base_offset=2)
    v2.append(value=b"new", timestamp=9)
    mixed = buf + v2.build()
    views = list(iter_batches(mixed, legacy=True))
    assert [type(v) for v in views] == [LegacyBatch, LegacyBatch, RecordBatch]
    assert [v.next_offset for v in views] == [1, 2, 3]


def test_crc_mismatch():
    buf = bytearray(message(0, b"k", b"value"))
    buf[-1] ^= 1
    with pytest.raises(CorruptRecordError) as ei:
        list(decode_legacy_message_set(bytes(message(0, b"a", b"b")) + bytes(buf)))
    assert ei.value.position == len(message(0, b"a", b"b"))
    assert list(decode_legacy_message_set(bytes(buf), verify_crc=False))[0].value == b"valud"


def test_inner_crc_mismatch():
    inner = bytearray(message(0, b"k", b"v", magic=1, timestamp=0))
    inner[-1] ^= 1
    wrapper = message(0, None, gzip_(bytes(inner)), magic=1, attributes=1, timestamp=0)
    with pytest.raises(CorruptRecordError):
        list(decode_legacy_message_set(wrapper))


def test_torn_and_malformed():
    a, b = message(0, b"k", b"v"), message(1, b"k", b"v")
    for cut in (1, 11, 12, 17, len(b) - 1):
        with pytest.raises(TruncatedRecordError) as ei:
            list(iter_legacy_messages(a + b[:cut]))
        assert ei.value.position == len(a)
    nested = message(0, None, gzip_(message(0, None, gzip_(a), attributes=1)), attributes=1)
    with pytest.raises(CorruptRecordError, match="nested"):
        list(decode_legacy_message_set(nested))
    bad_codec = message(0, None, b"xx", attributes=4)  # zstd never existed for magic < 2
    with pytest.raises(CorruptRecordError):
        list(decode_legacy_message_set(bad_codec))
    bad_len = bytearray(a)
    struct.pack_into(">i", bad_len, len(bad_len) - 5, 50)  # value length past the end
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(bytes(bad_len)))


def test_against_kafka_python_builder():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    for magic in (0, 1):
        for codec in (0, 1, 2) + ((3,) if magic else ()):
            b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
            for i in range(4):
                b.append(i, 1000 + i if magic else None, b"k%d" % i if i % 2 else None, b"v%d" % i)
            data = bytes(b.build())
            recs = list(decode_legacy_message_set(data))
            assert [(r.key, r.value) for r in recs] == [
                (b"k%d" % i if i % 2 else None, b"v%d" % i) for i in range(4)
            ]
            if magic == 1:
                assert [r.timestamp for r in recs] == [1000, 1001, 1002, 1003]
