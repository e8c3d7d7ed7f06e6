"""Record-batch compression codecs (Kafka compression ids 0..4) and the record error types.

The error classes live here, in the lowest layer, so that ``records`` and ``legacy_records``
can both import them without an import cycle; import them from ``kbroker.wire.records``.

Every decoder guards against decompression bombs: output is capped at ``max_size`` bytes
(default ``DEFAULT_MAX_DECOMPRESSED_SIZE``) and exceeding it raises ``CorruptRecordError``,
as does any malformed input. Decoders never raise anything else.
"""

from __future__ import annotations

import io
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from kbroker.wire.errors import CodecError


__all__ = [
    "CodecError",
    "CorruptRecordError",
    "TruncatedRecordError",
    "UnsupportedMagicError",
    "InvalidRecordError",
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "compress",
    "decompress",
]


class _RecordError(CodecError):
    """``position`` is the byte position (in the buffer the caller passed) of the batch or
    message at fault, or None when not known."""

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message if position is None else f"{message} (at position {position})")
        self.position = position


class CorruptRecordError(_RecordError):
    """Malformed record data: bad lengths, CRC mismatch, bad magic, undecodable payload.
    Maps to Kafka's CORRUPT_MESSAGE (2)."""

    error_code = 2  # CORRUPT_MESSAGE


class TruncatedRecordError(CorruptRecordError):
    """The buffer ends inside a batch (a torn write, or a partial trailing batch)."""


class UnsupportedMagicError(CorruptRecordError):
    """A batch/message with a magic this call does not accept (``.magic`` says which)."""

    def __init__(self, message: str, position: int | None = None, magic: int | None = None):
        super().__init__(message, position)
        self.magic = magic


class InvalidRecordError(_RecordError):
    """Well-formed data that breaks a produce rule (Kafka's INVALID_RECORD, 87)."""

    error_code = 87  # INVALID_RECORD


NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Upper bound on the decompressed size of one batch's records section. A producer's
# batch.size (default 16 KiB) bounds real batches; this only stops bombs.
DEFAULT_MAX_DECOMPRESSED_SIZE = 128 * 1024 * 1024

_CHUNK = 256 * 1024


def _too_big(max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"decompressed records exceed the {max_size}-byte limit")


# --------------------------------------------------------------------------- gzip

def gzip_compress(data, level: int = 6) -> bytes:
    # wbits=31: gzip container, mtime 0 (what Java's GZIPOutputStream writes)
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def gzip_decompress(data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    out = bytearray()
    data = memoryview(data)
    try:
        while True:
            d = zlib.decompressobj(47)  # 32+15: auto-detect gzip or zlib header
            buf = data
            while True:
                room = max_size - len(out)
                out += d.decompress(buf, room + 1)
                if len(out) > max_size:
                    raise _too_big(max_size)
                buf = d.unconsumed_tail
                if d.eof or not buf:
                    break
            if not d.eof:
                raise CorruptRecordError("truncated gzip stream")
            rest = d.unused_data
            if not rest.strip(b"\x00"):  # concatenated members; ignore zero padding
                return bytes(out)
            data = memoryview(rest)
    except zlib.error as e:
        raise CorruptRecordError(f"invalid gzip data: {e}") from None


# --------------------------------------------------------------------------- snappy

# xerial snappy-java framing (what the Java client's SnappyOutputStream writes):
# 8-byte magic, int32 version, int32 min-compatible version, then [int32 len][raw block]...
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_LEN = 16
XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)


def _snappy_raw_into(block, out: bytearray, max_size: int) -> None:
    try:
        n = cramjam.snappy.decompress_raw_len(block)
    except Exception as e:
        raise CorruptRecordError(f"invalid snappy data: {e}") from None
    if len(out) + n > max_size:
        raise _too_big(max_size)
    start = len(out)
    out.extend(bytes(n))
    try:
        got = cramjam.snappy.decompress_raw_into(block, memoryview(out)[start:])
    except Exception as e:
        raise CorruptRecordError(f"invalid snappy data: {e}") from None
    if got != n:
        raise CorruptRecordError("invalid snappy data: length mismatch")


def snappy_compress(data, xerial: bool = True, block_size: int = XERIAL_BLOCK_SIZE) -> bytes:
    if not xerial:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    for i in range(0, len(mv), block_size):
        block = bytes(cramjam.snappy.compress_raw(bytes(mv[i : i + block_size])))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def snappy_decompress(data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Raw snappy or xerial-framed snappy, auto-detected by the xerial magic."""
    mv = memoryview(data)
    if bytes(mv[:8]) != XERIAL_MAGIC or len(mv) < XERIAL_HEADER_LEN:
        out = bytearray()
        _snappy_raw_into(bytes(mv), out, max_size)
        return bytes(out)
    out = bytearray()
    pos, end = XERIAL_HEADER_LEN, len(mv)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = _I32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError("truncated xerial snappy block")
        _snappy_raw_into(bytes(mv[pos : pos + n]), out, max_size)
        pos += n
    return bytes(out)


# --------------------------------------------------------------------------- lz4

def lz4_compress(data) -> bytes:
    # What Java's KafkaLZ4BlockOutputStream writes: 64 KiB independent blocks, no content
    # size (older Java readers reject it), correct header checksum.
    return lz4.frame.compress(
        bytes(data),
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def lz4_decompress(data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    out = bytearray()
    buf = bytes(data)
    try:
        while buf:
            d = lz4.frame.LZ4FrameDecompressor()
            chunk = d.decompress(buf, max_length=max_size - len(out) + 1)
            out += chunk
            while not d.eof and not d.needs_input:
                if len(out) > max_size:
                    raise _too_big(max_size)
                out += d.decompress(b"", max_length=max_size - len(out) + 1)
            if len(out) > max_size:
                raise _too_big(max_size)
            if not d.eof:
                raise CorruptRecordError("truncated lz4 frame")
            buf = d.unused_data
    except RuntimeError as e:  # lz4.frame reports format errors as RuntimeError
        raise CorruptRecordError(f"invalid lz4 data: {e}") from None
    return bytes(out)


# --------------------------------------------------------------------------- zstd

_ZSTD_C = zstandard.ZstdCompressor(level=3)
_ZSTD_D = zstandard.ZstdDecompressor()
_ZSTD_MAGIC = 0xFD2FB528
_U32LE = struct.Struct("<I")


def zstd_compress(data) -> bytes:
    return _ZSTD_C.compress(bytes(data))


def _zstd_check_frames(mv: memoryview) -> None:
    """Walk the frame and block headers (no decompression): raise unless ``mv`` is a
    sequence of complete zstd (or skippable) frames. The streaming decoder silently stops
    at a cut, so a torn payload would otherwise decode to a prefix."""
    pos, end = 0, len(mv)
    if end == 0:
        raise CorruptRecordError("empty zstd payload")
    while pos < end:
        if end - pos < 5:
            raise CorruptRecordError("truncated zstd frame header")
        magic = _U32LE.unpack_from(mv, pos)[0]
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if end - pos < 8:
                raise CorruptRecordError("truncated zstd skippable frame")
            pos += 8 + _U32LE.unpack_from(mv, pos + 4)[0]
            if pos > end:
                raise CorruptRecordError("truncated zstd skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError("bad zstd frame magic")
        fhd = mv[pos + 4]
        if fhd & 0x08:
            raise CorruptRecordError("reserved bit set in zstd frame header")
        single_segment = fhd & 0x20
        pos += (
            5
            + (0 if single_segment else 1)
            + (0, 1, 2, 4)[fhd & 0x03]
            + ((1 if single_segment else 0), 2, 4, 8)[fhd >> 6]
        )
        while True:
            if end - pos < 3:
                raise CorruptRecordError("truncated zstd block header")
            bh = mv[pos] | (mv[pos + 1] << 8) | (mv[pos + 2] << 16)
            btype = (bh >> 1) & 3
            if btype == 3:
                raise CorruptRecordError("reserved zstd block type")
            pos += 3 + (1 if btype == 1 else bh >> 3)
            if pos > end:
                raise CorruptRecordError("truncated zstd block")
            if bh & 1:
                break
        if fhd & 0x04:  # content checksum
            pos += 4
            if pos > end:
                raise CorruptRecordError("truncated zstd frame checksum")


def zstd_decompress(data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    # Streaming: works for frames without a content size (Java's ZstdOutputStream,
    # librdkafka) and never trusts a frame's declared size for an allocation.
    data = bytes(data)
    _zstd_check_frames(memoryview(data))
    out = bytearray()
    try:
        with _ZSTD_D.stream_reader(io.BytesIO(data), read_across_frames=True) as r:
            while True:
                chunk = r.read(min(_CHUNK, max_size - len(out) + 1))
                if not chunk:
                    break
                out += chunk
                if len(out) > max_size:
                    raise _too_big(max_size)
    except zstandard.ZstdError as e:
        raise CorruptRecordError(f"invalid zstd data: {e}") from None
    return bytes(out)


# --------------------------------------------------------------------------- dispatch

def compress(codec: int, data) -> bytes:
    if codec == GZIP:
        return gzip_compress(data)
    if codec == SNAPPY:
        return snappy_compress(data)
    if codec == LZ4:
        return lz4_compress(data)
    if codec == ZSTD:
        return zstd_compress(data)
    if codec == NONE:
        return bytes(data)
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    if codec == GZIP:
        return gzip_decompress(data, max_size)
    if codec == SNAPPY:
        return snappy_decompress(data, max_size)
    if codec == LZ4:
        return lz4_decompress(data, max_size)
    if codec == ZSTD:
        return zstd_decompress(data, max_size)
    if codec == NONE:
        return bytes(data)
    raise CorruptRecordError(f"unknown compression codec {codec}")
