"""Kafka wire primitives shared by the generated message classes.

Decoding works on a `memoryview` plus an integer position: every `rd_*` function takes
`(buf, pos)` and returns `(value, new_pos)`. Keeping the position in a local variable of the
generated code (instead of a Reader object attribute) is what makes the hot path cheap.
Bounds come for free from the memoryview: `struct.unpack_from` and indexing raise past its end,
and every length-prefixed read checks its length against `len(buf)` explicitly, because slicing
silently truncates. Callers pass a view that ends at the frame (or tagged field) boundary, so no
read can escape it. Low-level exceptions (struct.error, IndexError, UnicodeDecodeError) are
turned into `CodecError` once, at the public entry points in `Message`.

Encoding appends to a `Writer`, a bytearray subclass (so generated code can do `w += ...`).
Records values that are not in memory (log file regions for sendfile) are not copied: the
Writer remembers where they go and `Writer.chunks()` returns the bytes around them.
"""

from __future__ import annotations

import struct
import uuid as _uuid

from kbroker.wire.errors import CodecError

__all__ = [
    "Reader", "Writer", "Message", "ZERO_UUID", "as_view",
]

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
U16 = struct.Struct(">H")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
F64 = struct.Struct(">d")

_i16_unpack = I16.unpack_from
_i32_unpack = I32.unpack_from
_i16_pack = I16.pack
_i32_pack = I32.pack
_unpack_from = struct.unpack_from
_pack = struct.pack

ZERO_UUID = _uuid.UUID(int=0)
_UUID = _uuid.UUID
_NULL32 = b"\xff\xff\xff\xff"
_NULL16 = b"\xff\xff"
MAX_STRING = 0x7FFF   # Kafka rejects longer strings in both encodings


def as_view(data) -> memoryview:
    """A flat unsigned-byte memoryview over `data` (bytes, bytearray, memoryview)."""
    try:
        mv = data if type(data) is memoryview else memoryview(data)
    except TypeError as e:
        raise CodecError(f"expected a bytes-like object, got {type(data).__name__}") from e
    if mv.format != "B" or mv.ndim != 1:
        try:
            mv = mv.cast("B")
        except TypeError as e:
            raise CodecError(str(e)) from e
    return mv


class Reader:
    """Cursor over a memoryview, for callers that decode several things in sequence."""

    __slots__ = ("buf", "pos")

    def __init__(self, data, pos: int = 0):
        self.buf = as_view(data)
        self.pos = pos

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos


class Writer(bytearray):
    """Output buffer. `regions` holds (offset, value) for records kept out of the buffer."""

    __slots__ = ("regions",)

    # bytes records at least this large are referenced, not copied, when encoding
    BYTES_CHUNK_MIN = 16 * 1024

    def __init__(self):
        super().__init__()
        self.regions = []

    def write_region(self, value) -> None:
        self.regions.append((len(self), value))

    @property
    def size(self) -> int:
        """Total encoded size, including regions kept out of the buffer."""
        n = len(self)
        for _, r in self.regions:
            n += len(r) if type(r) is bytes else r.size
        return n

    def chunks(self) -> list:
        """[bytes | region, ...] in wire order; regions are the caller's records objects."""
        if not self.regions:
            return [bytes(self)]
        out = []
        start = 0
        mv = memoryview(self)
        try:
            for off, r in self.regions:
                if off > start:
                    out.append(bytes(mv[start:off]))
                out.append(r)
                start = off
            if start < len(self):
                out.append(bytes(mv[start:]))
        finally:
            mv.release()
        return out

    def getvalue(self) -> bytes:
        """All bytes; fails if a region (an object without the buffer protocol) was written."""
        if not self.regions:
            return bytes(self)
        parts = self.chunks()
        for p in parts:
            if type(p) is not bytes:
                raise CodecError("message holds a records region; use encode_into() and Writer.chunks()")
        return b"".join(parts)


# ----------------------------------------------------------------------------- decoding

def rd_uvarint(buf, pos):
    """Unsigned varint of at most 5 bytes (Kafka's readUnsignedVarint)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise CodecError("unsigned varint longer than 5 bytes")


def _str(buf, pos, n):
    if n > MAX_STRING:
        raise CodecError(f"string length {n} exceeds {MAX_STRING}")
    end = pos + n
    if end > len(buf):
        raise CodecError(f"string of {n} bytes runs past the end of the buffer")
    return str(buf[pos:end], "utf-8"), end


def rd_string(buf, pos):
    n, = _i16_unpack(buf, pos)
    if n < 0:
        raise CodecError("non-nullable string was serialized as null")
    return _str(buf, pos + 2, n)


def rd_nstring(buf, pos):
    n, = _i16_unpack(buf, pos)
    if n < 0:
        return None, pos + 2
    return _str(buf, pos + 2, n)


def rd_cstring(buf, pos):
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = rd_uvarint(buf, pos)
    if n == 0:
        raise CodecError("non-nullable compact string was serialized as null")
    return _str(buf, pos, n - 1)


def rd_cnstring(buf, pos):
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = rd_uvarint(buf, pos)
    if n == 0:
        return None, pos
    return _str(buf, pos, n - 1)


def _slice(buf, pos, n):
    end = pos + n
    if end > len(buf):
        raise CodecError(f"field of {n} bytes runs past the end of the buffer")
    return buf[pos:end], end


def rd_bytes(buf, pos):
    n, = _i32_unpack(buf, pos)
    if n < 0:
        raise CodecError("non-nullable bytes field was serialized as null")
    v, pos = _slice(buf, pos + 4, n)
    return bytes(v), pos


def rd_nbytes(buf, pos):
    n, = _i32_unpack(buf, pos)
    if n < 0:
        return None, pos + 4
    v, pos = _slice(buf, pos + 4, n)
    return bytes(v), pos


def rd_cbytes(buf, pos):
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        raise CodecError("non-nullable compact bytes field was serialized as null")
    v, pos = _slice(buf, pos, n - 1)
    return bytes(v), pos


def rd_cnbytes(buf, pos):
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        return None, pos
    v, pos = _slice(buf, pos, n - 1)
    return bytes(v), pos


def rd_records(buf, pos):
    """Records: a zero-copy memoryview slice of the input, or None."""
    n, = _i32_unpack(buf, pos)
    if n < 0:
        return None, pos + 4
    pos += 4
    end = pos + n
    if end > len(buf):
        raise CodecError(f"records of {n} bytes run past the end of the buffer")
    return buf[pos:end], end


def rd_crecords(buf, pos):
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = rd_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise CodecError(f"records of {n - 1} bytes run past the end of the buffer")
    return buf[pos:end], end


# Topic ids repeat across requests; UUID() construction costs ~1 µs, so keep a small cache.
_uuid_cache: dict = {}


def rd_uuid(buf, pos):
    end = pos + 16
    if end > len(buf):
        raise CodecError("uuid runs past the end of the buffer")
    raw = bytes(buf[pos:end])
    u = _uuid_cache.get(raw)
    if u is None:
        if len(_uuid_cache) > 4096:
            _uuid_cache.clear()
        u = _uuid_cache[raw] = _UUID(bytes=raw)
    return u, end


def rd_alen(buf, pos):
    """Legacy array length (int32, -1 = null), checked against the bytes left."""
    n, = _i32_unpack(buf, pos)
    pos += 4
    if n > len(buf) - pos:
        raise CodecError(f"array of {n} elements but only {len(buf) - pos} bytes remain")
    return n, pos


def rd_calen(buf, pos):
    """Compact array length (uvarint N+1, 0 = null) -> N (or -1)."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = rd_uvarint(buf, pos)
    n -= 1
    if n > len(buf) - pos:
        raise CodecError(f"array of {n} elements but only {len(buf) - pos} bytes remain")
    return n, pos


# Precompiled Structs for arrays of n fixed-width numbers, per element code. Arrays are short
# (replica lists, partition ids), so a small cache of exact-length Structs beats formatting and
# parsing a format string per call.
_ARRAY_STRUCTS = {code: {} for code in "bhHiqd?"}


def _array_struct(code, n):
    cache = _ARRAY_STRUCTS[code]
    s = cache.get(n)
    if s is None:
        s = struct.Struct(">%d%s" % (n, code))
        if len(cache) < 256:
            cache[n] = s
    return s


def rd_fixed_array(buf, pos, code, size):
    """Legacy array of fixed-width numbers (int32 count, -1 = null) -> (list | None, pos)."""
    n, = _i32_unpack(buf, pos)
    pos += 4
    if n <= 0:
        return (None if n < 0 else []), pos
    if n * size > len(buf) - pos:
        raise CodecError(f"array of {n} elements but only {len(buf) - pos} bytes remain")
    s = _ARRAY_STRUCTS[code].get(n) or _array_struct(code, n)
    return list(s.unpack_from(buf, pos)), pos + n * size


def rd_cfixed_array(buf, pos, code, size):
    """Compact array of fixed-width numbers (uvarint count+1, 0 = null) -> (list | None, pos)."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = rd_uvarint(buf, pos)
    n -= 1
    if n <= 0:
        return (None if n < 0 else []), pos
    if n * size > len(buf) - pos:
        raise CodecError(f"array of {n} elements but only {len(buf) - pos} bytes remain")
    s = _ARRAY_STRUCTS[code].get(n) or _array_struct(code, n)
    return list(s.unpack_from(buf, pos)), pos + n * size


def rd_tag_header(buf, pos):
    """(tag, end_of_value, value_pos) for one tagged field, checked against the buffer."""
    tag, pos = rd_uvarint(buf, pos)
    size, pos = rd_uvarint(buf, pos)
    end = pos + size
    if end > len(buf):
        raise CodecError(f"tagged field {tag} of {size} bytes runs past the end of the buffer")
    return tag, end, pos


def rd_unknown_tags(buf, pos):
    """Tagged-field section of a struct with no known tags: keep them as (tag, bytes)."""
    n, pos = rd_uvarint(buf, pos)
    if n == 0:
        return None, pos
    if n > len(buf) - pos:
        raise CodecError(f"{n} tagged fields but only {len(buf) - pos} bytes remain")
    out = []
    for _ in range(n):
        tag, end, pos = rd_tag_header(buf, pos)
        out.append((tag, bytes(buf[pos:end])))
        pos = end
    return out, pos


# ----------------------------------------------------------------------------- encoding

def wr_uvarint(w, n):
    if n < 0x80:
        if n < 0:
            raise CodecError(f"negative unsigned varint {n}")
        w.append(n)
        return
    if n > 0xFFFFFFFF:
        raise CodecError(f"unsigned varint {n} out of range")
    while n >= 0x80:
        w.append((n & 0x7F) | 0x80)
        n >>= 7
    w.append(n)


def _utf8(s):
    b = s.encode("utf-8")
    if len(b) > MAX_STRING:
        raise CodecError(f"string of {len(b)} bytes is too long to serialize")
    return b


def wr_string(w, s):
    b = _utf8(s)
    w += _i16_pack(len(b))
    w += b


def wr_nstring(w, s):
    if s is None:
        w += _NULL16
    else:
        b = _utf8(s)
        w += _i16_pack(len(b))
        w += b


def wr_cstring(w, s):
    b = _utf8(s)
    n = len(b) + 1
    if n < 0x80:
        w.append(n)
    else:
        wr_uvarint(w, n)
    w += b


def wr_cnstring(w, s):
    if s is None:
        w.append(0)
    else:
        wr_cstring(w, s)


def wr_bytes(w, b):
    w += _i32_pack(len(b))
    w += b


def wr_nbytes(w, b):
    if b is None:
        w += _NULL32
    else:
        w += _i32_pack(len(b))
        w += b


def wr_cbytes(w, b):
    wr_uvarint(w, len(b) + 1)
    w += b


def wr_cnbytes(w, b):
    if b is None:
        w.append(0)
    else:
        wr_uvarint(w, len(b) + 1)
        w += b


def _records_payload(w, v):
    """Length of a records value; appends it (small, in-memory) or references it (region)."""
    t = type(v)
    if t is bytes:
        n = len(v)
        return n, (v if n >= Writer.BYTES_CHUNK_MIN else None)
    if t is bytearray or t is memoryview:
        return (v.nbytes if t is memoryview else len(v)), None
    size = getattr(v, "size", None)
    if isinstance(size, int):
        return size, v
    try:
        return memoryview(v).nbytes, None
    except TypeError:
        raise CodecError(f"records value of type {t.__name__} has neither a buffer nor .size") from None


def wr_records(w, v):
    if v is None:
        w += _NULL32
        return
    n, region = _records_payload(w, v)
    w += _i32_pack(n)
    if region is None:
        w += v
    else:
        w.write_region(region)


def wr_crecords(w, v):
    if v is None:
        w.append(0)
        return
    n, region = _records_payload(w, v)
    wr_uvarint(w, n + 1)
    if region is None:
        w += v
    else:
        w.write_region(region)


def wr_uuid(w, u):
    w += u.bytes


def wr_alen(w, n):
    w += _i32_pack(n)


def wr_calen(w, n):
    n += 1
    if n < 0x80:
        w.append(n)
    else:
        wr_uvarint(w, n)


def wr_fixed_array(w, values, code):
    """Legacy array of fixed-width numbers: int32 count, then the values."""
    n = len(values)
    w += _i32_pack(n)
    if n:
        s = _ARRAY_STRUCTS[code].get(n) or _array_struct(code, n)
        w += s.pack(*values)


def wr_cfixed_array(w, values, code):
    """Compact array of fixed-width numbers: uvarint count+1, then the values."""
    n = len(values)
    if n < 0x7F:
        w.append(n + 1)
    else:
        wr_uvarint(w, n + 1)
    if n:
        s = _ARRAY_STRUCTS[code].get(n) or _array_struct(code, n)
        w += s.pack(*values)


def wr_tags(w, known, unknown):
    """Tagged-field section: `known` is [(tag, bytes)] in tag order, `unknown` as decoded."""
    if unknown:
        fields = sorted((known or []) + [(t, bytes(v)) for t, v in unknown], key=lambda tv: tv[0])
    else:
        fields = known
    if not fields:
        w.append(0)
        return
    wr_uvarint(w, len(fields))
    for tag, data in fields:
        wr_uvarint(w, tag)
        wr_uvarint(w, len(data))
        w += data


# ----------------------------------------------------------------------------- base class

# What malformed input can make the straight-line decoders raise; all become CodecError.
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError)


def _malformed(cls, version: int, e: BaseException) -> CodecError:
    """A decode error of ``cls`` at ``version`` (one of _DECODE_ERRORS), as a CodecError."""
    return CodecError(f"malformed {cls.__qualname__} v{version}: {e}")
# What a bad field value can make the encoders raise (wrong type, out of range ...).
_ENCODE_ERRORS = (struct.error, TypeError, ValueError, OverflowError, AttributeError)


class Message:
    """Base of every generated struct: public entry points, equality and repr.

    Subclasses define `_FIELDS` (attribute names in schema order), `_read(buf, pos, version)
    -> (obj, pos)` and `_write(self, w, version)`; those are the generated straight-line code.
    """

    __slots__ = ()
    API_KEY = None
    VALID_VERSIONS = (0, 0)
    FLEXIBLE_VERSIONS = None
    _FIELDS: tuple = ()

    @classmethod
    def _check_version(cls, version):
        lo, hi = cls.VALID_VERSIONS
        if type(version) is not int or not lo <= version <= hi:
            raise CodecError(f"{cls.__qualname__} has no version {version!r} (valid {lo}-{hi})")

    @classmethod
    def decode(cls, data, version: int):
        """Decode exactly `data` (bytes-like); trailing bytes are an error."""
        cls._check_version(version)
        buf = as_view(data)
        try:
            obj, pos = cls._read(buf, 0, version)
        except CodecError:
            raise
        except _DECODE_ERRORS as e:
            raise _malformed(cls, version, e) from e
        except RecursionError as e:  # pragma: no cover - schemas are not recursive
            raise CodecError(f"malformed {cls.__qualname__} v{version}: too deep") from e
        if pos != len(buf):
            raise CodecError(f"{len(buf) - pos} trailing bytes after {cls.__qualname__} v{version}")
        return obj

    @classmethod
    def read(cls, r: Reader, version: int):
        """Decode from a Reader at its position, advancing it; trailing bytes are left."""
        cls._check_version(version)
        try:
            obj, r.pos = cls._read(r.buf, r.pos, version)
        except CodecError:
            raise
        except _DECODE_ERRORS as e:
            raise _malformed(cls, version, e) from e
        return obj

    # A request with arrays of structs also has a generated steps reader: it decodes as
    # ``_read`` does but pauses in its arrays (codegen's STEP_ELEMENTS). None: no such arrays.
    _steps = None

    @classmethod
    def read_steps(cls, r: Reader, version: int):
        """Generator (kbroker.slices) decoding like ``read``, pausing every few hundred array
        elements: a Fetch naming 10,000 partitions took ~5 ms to decode in one go."""
        cls._check_version(version)
        try:
            obj, r.pos = yield from cls._steps(r.buf, r.pos, version)
        except CodecError:
            raise
        except _DECODE_ERRORS as e:
            raise _malformed(cls, version, e) from e
        return obj

    def encode_into(self, w: Writer, version: int) -> None:
        self._check_version(version)
        try:
            self._write(w, version)
        except CodecError:
            raise
        except _ENCODE_ERRORS as e:
            raise CodecError(f"cannot encode {type(self).__qualname__} v{version}: {e!r}") from e

    def encode(self, version: int) -> bytes:
        w = Writer()
        self.encode_into(w, version)
        return w.getvalue()

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        for name in self._FIELDS:
            if getattr(self, name) != getattr(other, name):
                return False
        return (self.unknown_tagged_fields or None) == (other.unknown_tagged_fields or None)

    __hash__ = None  # mutable

    def __repr__(self):
        parts = []
        for name in self._FIELDS:
            v = getattr(self, name)
            if type(v) is memoryview:
                v = f"<{v.nbytes} bytes>"
            else:
                v = repr(v)
            parts.append(f"{name}={v}")
        if self.unknown_tagged_fields:
            parts.append(f"unknown_tagged_fields={self.unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def to_dict(self) -> dict:
        """Plain nested dict of the fields (structs and lists of structs recursively)."""
        out = {}
        for name in self._FIELDS:
            v = getattr(self, name)
            if isinstance(v, Message):
                v = v.to_dict()
            elif type(v) is list and v and isinstance(v[0], Message):
                v = [x.to_dict() for x in v]
            out[name] = v
        return out


class _Missing:
    """Sentinel for keyword arguments whose default is a fresh list or struct."""

    __slots__ = ()

    def __repr__(self):
        return "MISSING"


MISSING = _Missing()
