"""Legacy message sets (magic 0 and 1), read-only, for old data.

Each entry::

    offset int64, message_size int32, crc uint32 (CRC32 of magic..end), magic int8,
    attributes int8 (bits 0-2 codec: 1 gzip, 2 snappy, 3 lz4; bit 3 LogAppendTime, v1 only),
    [timestamp int64, v1 only], key (int32 length, -1 = null), value (int32 length, -1 = null)

A compressed entry (a "wrapper") holds a whole inner message set in its value. Under magic 1
the inner offsets are relative and the wrapper carries the absolute offset of the last inner
message; under magic 0 the inner offsets are absolute. Magic-0 LZ4 wrappers were written
with a wrong frame-header checksum (KAFKA-1493); it is ignored here, as Kafka does.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator

from .compression import (
    CODEC_NAMES,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    GZIP,
    LZ4,
    SNAPPY,
    CorruptRecordError,
    TruncatedRecordError,
    UnsupportedMagicError,
    decompress,
)
from .records import LOG_OVERHEAD, NO_TIMESTAMP, Record

__all__ = ["LegacyBatch", "decode_legacy_message_set", "iter_legacy_messages"]

_ENTRY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
# message_size minimums: crc4 + magic1 + attributes1 (+ timestamp8) + keylen4 + valuelen4
_MIN_SIZE = {0: 14, 1: 22}
_LEGACY_CODECS = (GZIP, SNAPPY, LZ4)


class LegacyBatch:
    """A view over one magic 0/1 message (a wrapper when compressed) at ``position``.

    Offers the RecordBatch attributes that make sense for old data, so code walking a log
    with ``iter_batches(..., legacy=True)`` can treat both alike.
    """

    __slots__ = (
        "_buf",
        "position",
        "size",
        "magic",
        "crc",
        "attributes",
        "timestamp",
        "_key",
        "_value",
        "_base_offset",
    )

    is_transactional = False
    is_control = False
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    partition_leader_epoch = -1

    def __init__(self, buf, position: int = 0):
        if type(buf) is memoryview and (buf.itemsize != 1 or buf.ndim != 1):
            buf = buf.cast("B")
        avail = len(buf) - position
        if avail < LOG_OVERHEAD + 6:
            raise TruncatedRecordError("legacy message header cut short", position)
        _off, size, crc, magic, attrs = _ENTRY_HEAD.unpack_from(buf, position)
        if magic not in (0, 1):
            raise UnsupportedMagicError(f"not a legacy message (magic {magic})", position, magic)
        if size < _MIN_SIZE[magic]:
            raise CorruptRecordError(f"legacy message size {size} below the minimum", position)
        if size > avail - LOG_OVERHEAD:
            raise TruncatedRecordError(
                f"legacy message of {LOG_OVERHEAD + size} bytes but only {avail} left", position
            )
        self._buf = buf
        self.position = position
        self.size = LOG_OVERHEAD + size
        self.magic = magic
        self.crc = crc
        self.attributes = attrs
        end = position + self.size
        pos = position + LOG_OVERHEAD + 6
        if magic == 1:
            (self.timestamp,) = _Q.unpack_from(buf, pos)
            pos += 8
        else:
            self.timestamp = NO_TIMESTAMP
        mv = memoryview(buf)
        self._key, pos = _read_bytes(mv, pos, end, position)
        self._value, pos = _read_bytes(mv, pos, end, position)
        if pos != end:
            raise CorruptRecordError("legacy message has trailing bytes", position)
        self._base_offset = None

    # -- fields ----------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """The entry's offset field: for a wrapper, the offset of its last inner message."""
        return _Q.unpack_from(self._buf, self.position)[0]

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_offset(self) -> int:
        if self.compression == 0:
            return self.last_offset
        if self._base_offset is None:
            first = next(iter(self.records()), None)
            self._base_offset = first.offset if first is not None else self.last_offset
        return self._base_offset

    @property
    def records_count(self) -> int:
        codec = self.compression
        if codec == 0:
            return 1
        return len(self._inner_records(codec, DEFAULT_MAX_DECOMPRESSED_SIZE))

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> int:
        return 1 if self.magic == 1 and self.attributes & 0x08 else 0

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    @property
    def key(self) -> memoryview | None:
        return self._key

    @property
    def value(self) -> memoryview | None:
        return self._value

    def buffer(self) -> memoryview:
        return memoryview(self._buf)[self.position : self.position + self.size]

    def compute_crc(self) -> int:
        start = self.position + LOG_OVERHEAD + 4
        return zlib.crc32(memoryview(self._buf)[start : self.position + self.size])

    def verify_crc(self) -> bool:
        return self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        if not self.verify_crc():
            raise CorruptRecordError("legacy message CRC mismatch", self.position)

    # -- records ---------------------------------------------------------------------

    def records(self, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> Iterator[Record]:
        codec = self.compression
        if codec == 0:
            return iter([_to_record(self.last_offset, self.timestamp, self._key, self._value)])
        return iter(self._inner_records(codec, max_size))

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def inner_messages(self, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> list:
        """A wrapper's inner messages as ``LegacyBatch`` views over the decompressed set,
        framing checked only (not their CRCs, magic or attributes); [] when uncompressed."""
        codec = self.compression
        if codec == 0:
            return []
        if codec not in _LEGACY_CODECS:
            raise CorruptRecordError(f"invalid legacy compression codec {codec}", self.position)
        if self._value is None:
            raise CorruptRecordError("compressed legacy message with a null value", self.position)
        payload = self._value
        if codec == LZ4 and self.magic == 0:
            payload = _fix_lz4_header_checksum(payload)
        try:
            inner = decompress(codec, payload, max_size)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{CODEC_NAMES[codec]}: {e}", self.position) from None
        msgs = []
        pos = 0
        while pos < len(inner):
            try:
                m = LegacyBatch(inner, pos)
            except CorruptRecordError as e:
                raise CorruptRecordError(
                    f"bad inner message at {pos} of the wrapper: {e}", self.position
                ) from None
            msgs.append(m)
            pos += m.size
        return msgs

    def _inner_records(self, codec: int, max_size: int) -> list:
        msgs = self.inner_messages(max_size)
        for m in msgs:
            if m.compression != 0:
                raise CorruptRecordError("nested compression in a legacy wrapper", self.position)
            if not m.verify_crc():
                raise CorruptRecordError("inner legacy message CRC mismatch", self.position)
        if not msgs:
            return []
        wrapper_offset = self.last_offset
        if self.magic >= 1:
            base = wrapper_offset - msgs[-1].last_offset  # inner offsets are relative
        else:
            base = 0  # inner offsets are absolute
        lat = self.timestamp if self.timestamp_type == 1 else None
        out = []
        for m in msgs:
            if self.magic == 0 or m.magic == 0:
                ts = NO_TIMESTAMP if lat is None else lat
            else:
                ts = m.timestamp if lat is None else lat
            out.append(_to_record(base + m.last_offset, ts, m._key, m._value))
        return out

    def __repr__(self) -> str:
        return (
            f"LegacyBatch(magic={self.magic}, offset={self.last_offset}, size={self.size}, "
            f"codec={CODEC_NAMES.get(self.compression, self.compression)})"
        )


def _to_record(offset, timestamp, key, value) -> Record:
    return Record(
        offset,
        timestamp,
        None if key is None else bytes(key),
        None if value is None else bytes(value),
        [],
    )


def _read_bytes(mv: memoryview, pos: int, end: int, position: int):
    if pos + 4 > end:
        raise CorruptRecordError("legacy message cut inside a length field", position)
    (n,) = _I.unpack_from(mv, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"invalid legacy field length {n}", position)
        return None, pos
    if pos + n > end:
        raise CorruptRecordError(f"legacy field of {n} bytes overruns the message", position)
    return mv[pos : pos + n], pos + n


def iter_legacy_messages(buf, offset: int = 0) -> Iterator[LegacyBatch]:
    """Walk a magic 0/1 message set; stops at the exact end, raises like iter_batches."""
    end = len(buf)
    pos = offset
    while pos < end:
        m = LegacyBatch(buf, pos)
        yield m
        pos += m.size


def decode_legacy_message_set(
    buf, offset: int = 0, *, verify_crc: bool = True, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> Iterator[Record]:
    """Yield every record of a magic 0/1 message set, unwrapping compressed messages."""
    for m in iter_legacy_messages(buf, offset):
        if verify_crc:
            m.ensure_valid()
        yield from m.records(max_size)


# -------------------------------------------------------------------- LZ4 (KAFKA-1493)

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32_small(data: bytes, seed: int = 0) -> int:
    """XXH32 of fewer than 16 bytes (enough for an LZ4 frame descriptor)."""
    assert len(data) < 16
    h = (seed + _P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < len(data):
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _fix_lz4_header_checksum(payload) -> bytes:
    data = bytearray(payload)
    if len(data) < 7 or bytes(data[:4]) != _LZ4_MAGIC:
        return bytes(data)  # let the decoder report it
    flg = data[4]
    desc_end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= desc_end:
        return bytes(data)
    data[desc_end] = (xxh32_small(bytes(data[4:desc_end])) >> 8) & 0xFF
    return bytes(data)
