"""Framing and headers: size-prefixed frames in, (header, request) out; responses back to bytes.

Sans-IO: the connection feeds whatever bytes arrived and gets whole frames back. Frames are
memoryviews; when a frame arrived inside one `feed()` call it is a view of the caller's bytes
(no copy), otherwise a view of a buffer sized for that frame, filled once.

Or, without any copy in user space, receive straight into the decoder's buffers
(asyncio.BufferedProtocol style): `get_buffer()` gives a writable memoryview to `recv_into`,
`buffer_updated(n)` returns the frames completed. Those frames are writable views of buffers
the decoder never reuses, so they stay valid after the next receive and a handler may rewrite
them in place (the log rewrites a produce's base offsets before its single write).
"""

from __future__ import annotations

import struct

from kbroker.wire.errors import CodecError, FrameTooLarge, UnsupportedVersionError
from kbroker.wire.generated.request_header import RequestHeader
from kbroker.wire.generated.response_header import ResponseHeader
from kbroker.wire.primitives import _DECODE_ERRORS, Reader, Writer, as_view, rd_nstring
from kbroker.wire.registry import (
    REQUEST_FLEXIBLE_FROM, REQUESTS, RESPONSES, request_header_version, response_header_version,
)

__all__ = [
    "FrameDecoder", "FrameTooLarge", "RequestHeader", "ResponseHeader",
    "request_header_version", "response_header_version",
    "decode_request_header", "decode_request", "encode_response", "encode_response_chunks",
    "encode_request", "decode_response",
    "DEFAULT_MAX_FRAME_SIZE",
]

DEFAULT_MAX_FRAME_SIZE = 104857600   # Kafka's socket.request.max.bytes default

_I32 = struct.Struct(">i")
_read_request_header = RequestHeader._read
_HDR = struct.Struct(">hhi")         # api key, api version, correlation id: every header version


class FrameDecoder:
    """Splits a byte stream into frames (the 4-byte big-endian size prefix is removed).

    A negative size or one above `max_frame_size` raises FrameTooLarge before any of the
    frame is buffered; the stream is unusable afterwards (close the connection, as Kafka does).
    """

    __slots__ = ("max_frame_size", "arena_size", "min_free", "_head", "_frame", "_filled",
                 "_arena", "_start", "_end", "_grow")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *,
                 arena_size: int = 256 * 1024, min_free: int = 4096):
        """``arena_size``: the largest buffer ``get_buffer`` hands out (a larger frame gets
        one of its own size). Buffers start at 16 KiB and grow (x4) each time a receive
        fills one, so an idle or small-request connection holds 16 KiB, a bulk producer
        256 KiB. ``min_free``: below this much free space a buffer is retired (no tiny
        receives)."""
        self.max_frame_size = max_frame_size
        self.arena_size = arena_size
        self.min_free = max(1, min_free)
        self._head = bytearray()      # a size prefix split across feed() calls
        self._frame = None            # bytearray for a frame split across feed() calls
        self._filled = 0
        self._arena = None            # get_buffer(): bytearray being received into
        self._start = 0               # first byte of the arena not yet returned as a frame
        self._end = 0                 # end of the received bytes in the arena
        self._grow = min(arena_size, 16 * 1024)   # size of the next arena

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (prefix included)."""
        if self._arena is not None:
            return self._end - self._start
        if self._frame is not None:
            return 4 + self._filled
        return len(self._head)

    def get_buffer(self) -> memoryview:
        """A writable buffer to receive the next bytes into; then call ``buffer_updated``.

        Never a buffer that backs a frame already returned: each bytearray is filled once,
        front to back, and replaced when full. An incomplete frame that does not fit in the
        rest of the current buffer moves (its received part is copied once) to a new buffer
        sized for the whole frame, so a large frame is received straight into its own buffer.
        Do not mix with ``feed()`` on one decoder.
        """
        arena = self._arena
        start, end = self._start, self._end
        pending = end - start
        if pending >= 4:
            need = 4 + _I32.unpack_from(arena, start)[0]   # checked by buffer_updated
        else:
            need = self.min_free
        if arena is None or start + need > len(arena) or (pending < 4 and len(arena) - end < need):
            new = bytearray(max(self._grow, need))
            if pending:
                new[:pending] = memoryview(arena)[start:end]
            self._arena = arena = new
            self._start, self._end = 0, pending
            end = pending
        return memoryview(arena)[end:]

    def buffer_updated(self, nbytes: int) -> list:
        """``nbytes`` were written at the start of the last ``get_buffer()``; return the frames
        they completed (writable memoryviews, possibly none), in order."""
        arena = self._arena
        end = self._end + nbytes
        self._end = end
        if end == len(arena) and self._grow < self.arena_size:
            self._grow = min(self.arena_size, self._grow * 4)   # the receive filled it
        pos = self._start
        frames = []
        mv = None
        max_size = self.max_frame_size
        while end - pos >= 4:
            size, = _I32.unpack_from(arena, pos)
            if size < 0 or size > max_size:
                raise FrameTooLarge(size, max_size)
            if end - pos - 4 < size:
                break
            if mv is None:
                mv = memoryview(arena)
            frames.append(mv[pos + 4:pos + 4 + size])
            pos += 4 + size
        self._start = pos
        return frames

    def feed(self, data) -> list:
        """Add bytes; return the frames completed by them (possibly none), in order."""
        if type(data) is not bytes:
            # views of a caller-owned mutable buffer could change under us: take a copy once
            data = bytes(data)
        mv = memoryview(data)
        n = len(mv)
        pos = 0
        frames = []
        if self._frame is not None:
            frame = self._frame
            take = min(len(frame) - self._filled, n)
            frame[self._filled:self._filled + take] = mv[:take]
            self._filled += take
            pos = take
            if self._filled < len(frame):
                return frames
            frames.append(memoryview(frame))
            self._frame = None
        while pos < n:
            if self._head or n - pos < 4:
                take = min(4 - len(self._head), n - pos)
                self._head += mv[pos:pos + take]
                pos += take
                if len(self._head) < 4:
                    break
                size = int.from_bytes(self._head, "big", signed=True)
                self._head.clear()
            else:
                size, = _I32.unpack_from(mv, pos)
                pos += 4
            if size < 0 or size > self.max_frame_size:
                raise FrameTooLarge(size, self.max_frame_size)
            if n - pos >= size:
                frames.append(mv[pos:pos + size])
                pos += size
            else:
                frame = bytearray(size)
                take = n - pos
                frame[:take] = mv[pos:]
                self._frame = frame
                self._filled = take
                pos = n
        return frames


def _header_version_for(api_key: int, api_version: int) -> int:
    """Like request_header_version, but also guesses for versions newer than our schemas.

    Flexibility only ever starts at some version and stays on, so a version above the highest
    known one of a known API uses that API's flexible header. Unknown API keys get v1 (the
    client id is readable in every header version >= 1, tagged fields are not needed).
    """
    flex = REQUEST_FLEXIBLE_FROM.get(api_key, -1)
    if flex == -1:
        return 1
    if api_key == 7 and api_version == 0:
        return 0
    return 2 if flex is not None and api_version >= flex else 1


def decode_request_header(frame) -> tuple[RequestHeader, int]:
    """Parse the request header of a frame: (header, offset of the body in the frame).

    Works for API keys and versions we have no schema for, so the broker can still read
    api key, version, correlation id and client id and answer UNSUPPORTED_VERSION.
    """
    buf = as_view(frame)
    if len(buf) < 8:
        raise CodecError(f"request frame of {len(buf)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HDR.unpack_from(buf, 0)
    hv = _header_version_for(api_key, api_version)
    try:
        if api_key in REQUESTS:   # the generated decoder: header v2 tagged fields included
            return _read_request_header(buf, 0, hv)
        # unknown API: read up to the client id, which every header version >= 1 has
        h = RequestHeader(request_api_key=api_key, request_api_version=api_version,
                          correlation_id=correlation_id, client_id=None)
        h.client_id, pos = rd_nstring(buf, 8)
        return h, pos
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed request header: {e}") from e


def decode_request(frame):
    """(header, request object) for a whole request frame.

    Raises UnsupportedVersionError (a CodecError, with `.header`) for an API key or version
    without a schema, CodecError for anything malformed. Bytes after the request body are
    ignored, as Kafka's broker does.
    """
    buf = as_view(frame)
    header, pos = decode_request_header(buf)
    api_key, version = header.request_api_key, header.request_api_version
    cls = REQUESTS.get(api_key)
    if cls is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}", header)
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise UnsupportedVersionError(f"{cls.__name__} v{version} not in {lo}-{hi}", header)
    try:
        req, _ = cls._read(buf, pos, version)
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed {cls.__name__} v{version}: {e}") from e
    return header, req


def _response_header(w, correlation_id: int, header_version: int) -> None:
    w += _I32.pack(correlation_id)
    if header_version >= 1:
        w.append(0)   # no tagged fields in the response header


def encode_response(correlation_id: int, header_version: int, body) -> bytes:
    """Size prefix + response header + already-encoded body."""
    if header_version not in (0, 1):
        raise CodecError(f"no response header version {header_version}")
    hlen = 4 if header_version == 0 else 5
    w = Writer()
    w += _I32.pack(hlen + len(body))
    _response_header(w, correlation_id, header_version)
    w += body
    return bytes(w)


def encode_response_chunks(correlation_id: int, api_key: int, api_version: int, response) -> list:
    """Encode a response object for the wire: [bytes | records region, ...].

    Records given as file regions (objects with `.size`) stay out of the byte chunks so the
    connection can sendfile them; the size prefix accounts for them.
    """
    w = Writer()
    w += b"\0\0\0\0"
    _response_header(w, correlation_id, response_header_version(api_key, api_version))
    response.encode_into(w, api_version)
    w[0:4] = _I32.pack(w.size - 4)
    return w.chunks()


def encode_request(correlation_id: int, client_id, request, api_version: int) -> bytes:
    """Size prefix + request header + request (for the broker's own client roles and tests)."""
    api_key = request.API_KEY
    hv = request_header_version(api_key, api_version)
    h = RequestHeader(request_api_key=api_key, request_api_version=api_version,
                      correlation_id=correlation_id, client_id=client_id)
    w = Writer()
    w += b"\0\0\0\0"
    h.encode_into(w, hv)
    request.encode_into(w, api_version)
    w[0:4] = _I32.pack(w.size - 4)
    return w.getvalue()


def decode_response(frame, api_key: int, api_version: int):
    """(correlation id, response object) for a whole response frame."""
    cls = RESPONSES.get(api_key)
    if cls is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}")
    r = Reader(frame)
    header = ResponseHeader.read(r, response_header_version(api_key, api_version))
    return header.correlation_id, cls.read(r, api_version)
