"""Kafka requests written byte by byte over a plain or TLS socket, for tests that must control
what goes on the wire (authentication exchanges by hand, requests a client would never send
in that state). Independent of kbroker's own codec on purpose."""

from __future__ import annotations

import socket
import struct


def uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def request(api_key: int, version: int, corr: int, body: bytes = b"", *,
            client_id: bytes = b"raw", flexible: bool = False) -> bytes:
    """A size-prefixed request: header v1, or v2 (an empty tagged-field section) when the
    API version is flexible."""
    hdr = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    if flexible:
        hdr += b"\0"
    return struct.pack(">i", len(hdr) + len(body)) + hdr + body


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def read_response(s: socket.socket) -> bytes:
    """One response, without its size prefix (it starts with the correlation id)."""
    return recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])


def call(s: socket.socket, api_key: int, version: int, corr: int, body: bytes = b"", *,
         flexible: bool = False) -> bytes:
    s.sendall(request(api_key, version, corr, body, flexible=flexible))
    return read_response(s)


def sasl_handshake(s: socket.socket, mechanism: str, corr: int = 1) -> int:
    """SaslHandshake v1: its error code."""
    mech = mechanism.encode()
    return struct.unpack(">h", call(s, 17, 1, corr, struct.pack(">h", len(mech)) + mech)[4:6])[0]


def sasl_authenticate(s: socket.socket, corr: int, token: bytes) -> tuple[int, bytes]:
    """SaslAuthenticate v2 (flexible): (error code, the server's auth bytes)."""
    resp = call(s, 36, 2, corr, uvarint(len(token) + 1) + token + b"\0", flexible=True)
    err = struct.unpack(">h", resp[5:7])[0]            # after corr id + header tagged fields
    msg_len, pos = _uvarint_at(resp, 7)                  # compact nullable error message
    pos += max(msg_len - 1, 0)
    if err:
        return err, b""
    auth_len, pos = _uvarint_at(resp, pos)
    return err, resp[pos:pos + auth_len - 1]


def _uvarint_at(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
