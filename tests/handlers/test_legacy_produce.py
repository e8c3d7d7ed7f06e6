"""Produce v0-v2: legacy message sets (magic 0/1), hand-built, up-converted to v2 batches
(kbroker.broker.legacy_produce) and through the Produce handler."""

import struct
import zlib

import cramjam
import lz4.frame
import pytest

from kbroker.broker.legacy_produce import is_legacy, up_convert
from kbroker.log.config import LogConfig
from kbroker.log.errors import LogError
from kbroker.net.connection import CloseConnection
from kbroker.wire import compression as C
from kbroker.wire.errors import Errors
from kbroker.wire.legacy_records import xxh32_small
from kbroker.wire.records import BatchBuilder, Record, RecordBatch, iter_batches

from tests.handlers.test_handlers import create, fetch, produce

NOW = 1_700_000_000_000  # FakeClock's default


# ------------------------------------------------------------------ building message sets


def _bytes(b):
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def message(offset, key, value, *, magic=0, attributes=0, timestamp=None):
    """offset, size, crc32(magic..end), magic, attributes, [timestamp], key, value."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes(key) + _bytes(value)
    return struct.pack(">qi", offset, 4 + len(body)) + struct.pack(">I", zlib.crc32(body)) + body


def snappy_xerial(data):
    raw = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(raw)) + raw


def lz4_v1(data):
    return lz4.frame.compress(data, store_size=False)


def lz4_v0(data):
    """Magic 0 LZ4 as Kafka 0.8/0.9 wrote it: the header checksum over magic + descriptor
    (KAFKA-1493)."""
    frame = bytearray(lz4_v1(data))
    frame[6] = (xxh32_small(bytes(frame[0:6])) >> 8) & 0xFF
    return bytes(frame)


# every codec Kafka allowed for magic 0/1, as the producers of the time framed them
ENCODERS = {
    0: {1: C.gzip_compress, 2: snappy_xerial, 3: lz4_v0},
    1: {1: C.gzip_compress, 2: snappy_xerial, 3: lz4_v1},
}
CODECS = [(magic, codec) for magic in (0, 1) for codec in (1, 2, 3)]

KV = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None), (b"", b"")]


def plain_set(magic, *, ts=NOW - 5):
    return b"".join(message(i, k, v, magic=magic, timestamp=ts + i if magic else None)
                    for i, (k, v) in enumerate(KV))


def wrapper(magic, codec, *, ts=NOW - 5, wrapper_offset=None, inner=None, attributes=0):
    if inner is None:
        if magic == 1:  # relative inner offsets 0..n-1
            inner = b"".join(message(i, k, v, magic=1, timestamp=ts + i) for i, (k, v) in enumerate(KV))
        else:  # absolute inner offsets
            inner = b"".join(message(100 + i, k, v) for i, (k, v) in enumerate(KV))
    if wrapper_offset is None:
        wrapper_offset = len(KV) - 1 if magic == 1 else 100 + len(KV) - 1
    return message(wrapper_offset, None, ENCODERS[magic][codec](inner), magic=magic,
                   attributes=codec | attributes, timestamp=ts + len(KV) - 1 if magic else None)


def convert(buf, now=NOW, **props):
    return up_convert(buf, LogConfig.from_props(props), now)


def decode(v2):
    [b] = list(iter_batches(v2))
    assert isinstance(b, RecordBatch) and b.verify_crc()
    return b, list(b.records())


def error_of(buf, **props):
    with pytest.raises(LogError) as ei:
        convert(buf, **props)
    return ei.value.error_code


# ------------------------------------------------------------------ up-conversion


def test_is_legacy():
    assert is_legacy(message(0, b"k", b"v")) and is_legacy(message(0, b"k", b"v", magic=1, timestamp=1))
    b = BatchBuilder()
    b.append(value=b"x")
    assert not is_legacy(b.build()) and not is_legacy(b"\0" * 16)


def test_v0_uncompressed_has_no_timestamps():
    b, recs = decode(convert(plain_set(0)))
    assert (b.magic, b.compression, b.base_offset, b.records_count, b.last_offset_delta) == (2, 0, 0, 4, 3)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
    assert (b.timestamp_type, b.max_timestamp) == (0, -1)
    assert recs == [Record(i, -1, k, v, []) for i, (k, v) in enumerate(KV)]


def test_v1_uncompressed_keeps_timestamps():
    b, recs = decode(convert(plain_set(1)))
    assert b.compression == 0 and b.max_timestamp == NOW - 5 + 3
    assert recs == [Record(i, NOW - 5 + i, k, v, []) for i, (k, v) in enumerate(KV)]


@pytest.mark.parametrize("magic,codec", CODECS)
def test_wrappers_keep_the_producer_codec(magic, codec):
    b, recs = decode(convert(wrapper(magic, codec)))
    assert b.compression == codec and b.records_count == 4 and b.last_offset_delta == 3
    ts = [NOW - 5 + i for i in range(4)] if magic else [-1] * 4
    assert recs == [Record(i, t, k, v, []) for i, (t, (k, v)) in enumerate(zip(ts, KV))]


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_v1_wrapper_offset_zero_as_some_clients_send_it(codec):
    b, recs = decode(convert(wrapper(1, codec, wrapper_offset=0)))
    assert [r.offset for r in recs] == [0, 1, 2, 3] and b.compression == codec


def test_v1_wrapper_inner_offsets_need_not_start_at_zero():
    inner = b"".join(message(7 + i, k, v, magic=1, timestamp=NOW) for i, (k, v) in enumerate(KV))
    _, recs = decode(convert(wrapper(1, 1, inner=inner, wrapper_offset=10)))
    assert [r.offset for r in recs] == [0, 1, 2, 3]  # re-assigned consecutively


def test_v1_log_append_time_wrapper_stamps_inner_records_on_create_time_topic():
    # a producer may set the LogAppendTime bit; with a timestamp in range Kafka keeps it
    _, recs = decode(convert(wrapper(1, 1, attributes=0x08)))
    assert {r.timestamp for r in recs} == {NOW - 5 + 3}


def test_log_append_time_topic_rejects_a_producer_claiming_log_append_time():
    lat = {"message.timestamp.type": "LogAppendTime"}
    assert error_of(wrapper(1, 1, attributes=0x08), **lat) == Errors.INVALID_TIMESTAMP
    assert error_of(message(0, None, b"x", magic=1, attributes=0x08, timestamp=NOW), **lat) \
        == Errors.INVALID_TIMESTAMP
    # timestamps out of range are fine there: the log overwrites them
    b, _ = decode(convert(plain_set(1, ts=5), **lat, **{"message.timestamp.before.max.ms": "10"}))
    assert b.records_count == 4


@pytest.mark.parametrize("buf", [plain_set(1, ts=NOW - 1000), wrapper(1, 2, ts=NOW - 1000)])
def test_timestamp_out_of_range(buf):
    assert error_of(buf, **{"message.timestamp.before.max.ms": "100"}) == Errors.INVALID_TIMESTAMP
    decode(convert(buf, **{"message.timestamp.before.max.ms": "100000"}))


def test_magic0_has_no_timestamp_to_check():
    decode(convert(plain_set(0), **{"message.timestamp.before.max.ms": "0",
                                    "message.timestamp.after.max.ms": "0"}))


def test_outer_crc_mismatch_is_corrupt_message():
    for buf in (plain_set(0), plain_set(1), wrapper(0, 1), wrapper(1, 3)):
        bad = bytearray(buf)
        bad[-1] ^= 1
        assert error_of(bytes(bad)) == Errors.CORRUPT_MESSAGE


@pytest.mark.parametrize("magic,codec", CODECS)
def test_inner_crc_mismatch_is_corrupt_message(magic, codec):
    inner = bytearray(message(0, b"k", b"value", magic=magic, timestamp=NOW if magic else None))
    inner[-1] ^= 1
    assert error_of(wrapper(magic, codec, inner=bytes(inner), wrapper_offset=0)) == Errors.CORRUPT_MESSAGE


def test_invalid_record_cases():
    v0 = message(0, b"k", b"v")
    v1 = message(0, b"k", b"v", magic=1, timestamp=NOW)
    cases = {
        "two wrappers": wrapper(1, 1) + wrapper(1, 1),
        "plain then wrapper": v1 + wrapper(1, 1),
        "mixed magic": v0 + v1,
        "magic 0 then a v2 batch": v0 + _v2_batch(),
        "inner magic differs": wrapper(1, 1, inner=v0, wrapper_offset=0),
        "nested compression": wrapper(1, 1, inner=wrapper(1, 1), wrapper_offset=0),
        "zstd wrapper": message(0, None, C.compress(4, v1), magic=1, attributes=4, timestamp=NOW),
        "null wrapper value": message(0, None, None, magic=1, attributes=1, timestamp=NOW),
        "empty inner set": message(0, None, C.gzip_compress(b""), magic=1, attributes=1, timestamp=NOW),
        "wrapper offset below last inner": wrapper(1, 1, wrapper_offset=2),
    }
    for name, buf in cases.items():
        assert error_of(buf) == Errors.INVALID_RECORD, name


def test_compacted_topic_needs_keys():
    assert error_of(plain_set(0), **{"cleanup.policy": "compact"}) == Errors.INVALID_RECORD
    assert error_of(wrapper(1, 1), **{"cleanup.policy": "compact"}) == Errors.INVALID_RECORD
    keyed = message(0, b"k", b"v") + message(1, b"k2", None)
    decode(convert(keyed, **{"cleanup.policy": "compact"}))


def test_message_too_large_and_truncated():
    big = message(0, None, b"x" * 500)
    assert error_of(big, **{"max.message.bytes": "200"}) == Errors.MESSAGE_TOO_LARGE
    buf = plain_set(0)
    assert error_of(buf[:-3]) == Errors.CORRUPT_MESSAGE


def _v2_batch():
    b = BatchBuilder()
    b.append(value=b"v2", timestamp=NOW)
    return b.build()


# ------------------------------------------------------------------ through the handler


def _resp(r):
    return r.responses[0].partition_responses[0]


def _stored(h, topic):
    part = fetch(h, topic, 0, 0).responses[0].partitions[0]
    assert part.error_code == 0
    return list(iter_batches(part.records.to_bytes()))


@pytest.mark.parametrize("version,magic", [(0, 0), (1, 0), (2, 1)])
def test_produce_v0_to_v2_every_codec(broker, version, magic):
    create(broker, "legacy")
    expected = []
    for codec in (0, 1, 2, 3):
        buf = plain_set(magic) if codec == 0 else wrapper(magic, codec)
        r = _resp(produce(broker, "legacy", 0, buf, version=version))
        assert (r.error_code, r.base_offset) == (0, len(expected))
        ts = [NOW - 5 + i for i in range(4)] if magic else [-1] * 4
        expected += [(t, k, v) for t, (k, v) in zip(ts, KV)]
    batches = _stored(broker, "legacy")
    assert [b.compression for b in batches] == [0, 1, 2, 3]
    assert [b.base_offset for b in batches] == [0, 4, 8, 12]
    recs = [r for b in batches for r in b.records()]
    assert [r.offset for r in recs] == list(range(16))
    assert [(r.timestamp, r.key, r.value) for r in recs] == expected
    assert produce(broker, "legacy", 0, plain_set(magic), version=version, acks=0) is None


def test_produce_v0_log_append_time_topic(broker):
    create(broker, "lat", configs={"message.timestamp.type": "LogAppendTime"})
    for version, buf in [(0, plain_set(0)), (1, wrapper(0, 1)), (2, wrapper(1, 2)), (2, plain_set(1))]:
        r = _resp(produce(broker, "lat", 0, buf, version=version))
        assert r.error_code == 0
        if version == 2:
            assert r.log_append_time_ms == NOW
    batches = _stored(broker, "lat")
    assert all(b.timestamp_type == 1 and b.max_timestamp == NOW for b in batches)
    assert {r.timestamp for b in batches for r in b.records()} == {NOW}


def test_produce_legacy_errors(broker):
    create(broker, "bad")
    bad = bytearray(plain_set(0))
    bad[-1] ^= 1
    r = _resp(produce(broker, "bad", 0, bytes(bad), version=0))
    assert r.error_code == Errors.CORRUPT_MESSAGE and r.base_offset == -1
    r = _resp(produce(broker, "bad", 0, wrapper(1, 1) + wrapper(1, 1), version=2))
    assert r.error_code == Errors.INVALID_RECORD
    # v3+ must carry magic 2 (Kafka's ProduceRequest.validateRecords)
    assert _resp(produce(broker, "bad", 0, plain_set(1), version=3)).error_code == Errors.INVALID_RECORD
    # older versions may carry v2 batches: Kafka never checked, and neither do we
    r = _resp(produce(broker, "bad", 0, _v2_batch(), version=2))
    assert (r.error_code, r.base_offset) == (0, 0)
    with pytest.raises(CloseConnection):  # acks=0: a failed produce closes the connection
        produce(broker, "bad", 0, bytes(bad), version=1, acks=0)
