"""Compression codecs: round trips, foreign framings (xerial snappy, zstd without content
size, lz4 frame variants), malformed input and decompression-bomb limits."""

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python imports

from kbroker.wire import compression as C
from kbroker.wire.records import BatchBuilder, CorruptRecordError, RecordBatch

CODECS = [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
PAYLOADS = [b"", b"x", b"hello world " * 1000, bytes(range(256)) * 300]


@pytest.mark.parametrize("codec", [C.NONE] + CODECS)
@pytest.mark.parametrize("data", PAYLOADS, ids=lambda d: f"len{len(d)}")
def test_roundtrip(codec, data):
    assert C.decompress(codec, C.compress(codec, data)) == data
    assert C.decompress(codec, memoryview(C.compress(codec, data))) == data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "garbage", [b"\x00", b"\xff" * 40, b"not compressed at all, clearly", b"\x82SNAPPY\x00\x00"]
)
def test_garbage_raises_corrupt_record_error(codec, garbage):
    try:
        out = C.decompress(codec, garbage)
    except CorruptRecordError:
        return
    # a few inputs happen to be valid raw snappy; they must then decode to something
    assert codec == C.SNAPPY and isinstance(out, bytes)


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_stream_raises(codec):
    data = C.compress(codec, bytes(range(256)) * 400)
    with pytest.raises(CorruptRecordError):
        C.decompress(codec, data[: len(data) // 2])


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_is_capped(codec):
    bomb = C.compress(codec, bytes(1_000_000))
    assert len(bomb) < 60_000
    assert len(C.decompress(codec, bomb, max_size=1_000_000)) == 1_000_000
    with pytest.raises(CorruptRecordError, match="limit"):
        C.decompress(codec, bomb, max_size=999_999)
    with pytest.raises(CorruptRecordError, match="limit"):
        C.decompress(codec, bomb, max_size=10_000)


def test_bomb_in_a_batch_raises_from_records():
    b = BatchBuilder(C.ZSTD)
    b.append(value=bytes(2_000_000), timestamp=0)
    batch = RecordBatch(b.build())
    assert batch.size < 10_000
    with pytest.raises(CorruptRecordError) as ei:
        batch.records(max_size=1_000_000)
    assert ei.value.position == 0
    assert next(batch.records()).value == bytes(2_000_000)


# ---------------------------------------------------------------------------- snappy


def xerial_frame(data: bytes, block: int) -> bytes:
    """snappy-java's SnappyOutputStream format, built by hand from the spec:
    magic 0x82 'SNAPPY' 0x00, int32 version 1, int32 compatible version 1, then
    [int32 big-endian compressed length][raw snappy block] per chunk of input."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


@pytest.mark.parametrize("block", [1, 7, 1024, 32 * 1024])
def test_xerial_snappy_by_hand(block):
    data = b"The quick brown fox jumps over the lazy dog. " * 2000
    frame = xerial_frame(data, block)
    assert frame.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert C.decompress(C.SNAPPY, frame) == data


def test_xerial_header_only_is_empty():
    assert C.decompress(C.SNAPPY, b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)) == b""


def test_snappy_raw_is_autodetected():
    data = b"abc" * 5000
    assert C.decompress(C.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    assert C.snappy_decompress(C.snappy_compress(data, xerial=False)) == data


def test_snappy_compress_default_is_xerial_and_java_compatible_blocks():
    data = bytes(range(256)) * 1000  # > 32 KiB: several blocks
    out = C.snappy_compress(data)
    assert out.startswith(C.XERIAL_MAGIC)
    pos, blocks = 16, 0
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        pos += 4 + n
        blocks += 1
    assert pos == len(out) and blocks == 8


def test_xerial_from_kafka_python():
    from kafka.codec import snappy_encode

    data = b"0123456789" * 10_000
    assert C.decompress(C.SNAPPY, snappy_encode(data, xerial_compatible=True)) == data
    assert C.decompress(C.SNAPPY, snappy_encode(data, xerial_compatible=False)) == data


def test_xerial_torn_block():
    frame = xerial_frame(b"a" * 100_000, 32 * 1024)
    with pytest.raises(CorruptRecordError):
        C.decompress(C.SNAPPY, frame[:-3])
    with pytest.raises(CorruptRecordError):
        C.decompress(C.SNAPPY, frame[:18])


# ---------------------------------------------------------------------------- zstd


def test_zstd_frame_without_content_size():
    data = b"zstd streaming " * 5000
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(no_size) == -1
    assert C.decompress(C.ZSTD, no_size) == data
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(data[:1000]) + cobj.compress(data[1000:]) + cobj.flush()
    assert C.decompress(C.ZSTD, streamed) == data


def test_zstd_concatenated_frames():
    a, b = b"first" * 100, b"second" * 100
    c = zstandard.ZstdCompressor()
    assert C.decompress(C.ZSTD, c.compress(a) + c.compress(b)) == a + b


def test_zstd_limit_applies_without_content_size():
    data = b"q" * 1000
    frame = bytearray(zstandard.ZstdCompressor(write_content_size=False).compress(data))
    # content size absent: the limit must still apply while streaming
    with pytest.raises(CorruptRecordError):
        C.decompress(C.ZSTD, bytes(frame), max_size=100)


# ---------------------------------------------------------------------------- lz4


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"store_size": True},
        {"content_checksum": True},
        {"block_checksum": True},
        {"block_linked": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
)
def test_lz4_frame_variants(kw):
    data = bytes(range(256)) * 2000
    assert C.decompress(C.LZ4, lz4.frame.compress(data, **kw)) == data


def test_lz4_compress_matches_kafka_java_frame():
    out = C.lz4_compress(b"x" * 100_000)
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks (Java's KafkaLZ4BlockInputStream requires it)
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 0x7 == 4  # 64 KiB blocks


def test_lz4_concatenated_frames():
    a, b = b"one" * 100, b"two" * 100
    assert C.decompress(C.LZ4, lz4.frame.compress(a) + lz4.frame.compress(b)) == a + b


def test_lz4_bad_header_checksum_rejected_for_v2():
    frame = bytearray(lz4.frame.compress(b"data" * 100))
    frame[6] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        C.decompress(C.LZ4, bytes(frame))


# ---------------------------------------------------------------------------- gzip


def test_gzip_from_stdlib_and_concatenated_members():
    data = b"gzip " * 1000
    assert C.decompress(C.GZIP, gzip.compress(data)) == data
    assert C.decompress(C.GZIP, gzip.compress(data) + gzip.compress(b"tail")) == data + b"tail"
    assert C.gzip_compress(data)[:2] == b"\x1f\x8b"
    assert C.decompress(C.GZIP, zlib.compress(data)) == data  # zlib container tolerated


def test_unknown_codec():
    with pytest.raises(CorruptRecordError):
        C.decompress(5, b"abc")
    with pytest.raises(ValueError):
        C.compress(7, b"abc")
