"""The one asyncio Kafka-protocol client every node-to-node call uses (Raft, forwarding,
broker heartbeats, replica fetchers).

``KafkaClient(host, port)`` keeps one TCP connection to one peer:

* ``await client.send(request)`` encodes the request at the version negotiated with the peer
  (ApiVersions on every new connection: the highest version both sides know, as Kafka's
  NetworkClient picks), assigns a correlation id, and returns the decoded response. Any number
  of requests may be in flight at once on the connection (pipelining); responses are matched
  by correlation id, so a peer that answers out of order is fine too.
* A request that is not answered within its timeout fails with ``RequestTimeout`` and the
  connection is closed (Kafka's NetworkClient does the same: after a timeout the stream's
  state is unknown), failing the other requests in flight with ``ConnectionLost``.
* A connection that breaks (peer died, reset, garbage that does not decode, a correlation id
  nobody asked for) fails every request in flight with ``ConnectionLost``. The next ``send``
  reconnects, waiting an exponential backoff (``reconnect.backoff.ms`` doubling up to
  ``reconnect.backoff.max.ms``, with +-20% jitter, Kafka's defaults 50 / 1000 ms) after
  consecutive failures; a successful connection resets the backoff.
* ``await client.close()`` fails what is in flight and closes the socket.

Requests are never retried here: whether a retry is safe is the caller's decision.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from typing import Any

from kbroker.wire.errors import CodecError
from kbroker.wire.frame import DEFAULT_MAX_FRAME_SIZE, decode_response, encode_request
from kbroker.wire.generated.api_versions_request import ApiVersionsRequest
from kbroker.wire.registry import REQUESTS

log = logging.getLogger("kbroker.net.client")

_I32 = struct.Struct(">i")
API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35


class ClientError(Exception):
    """Base of everything ``KafkaClient.send`` raises besides cancellation."""


class ConnectionLost(ClientError):
    """The connection failed (or could not be made) before the response arrived."""


class RequestTimeout(ClientError):
    """No response within the request timeout; the connection was closed."""


class UnsupportedApi(ClientError):
    """The peer (or this codec) does not support the API or the version asked for."""


class ClientClosed(ClientError):
    """``close()`` was called."""


class AuthenticationFailed(ConnectionLost):
    """The peer refused our SASL credentials (the connection is closed)."""


class _Conn:
    """One live connection: the stream, the requests awaiting a response, the reader task."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, tuple[asyncio.Future, int, int]] = {}  # corr -> (fut, key, version)
        self.versions: dict[int, int] = {}       # api key -> negotiated version
        self.task: asyncio.Task | None = None
        self.closed = False


class KafkaClient:
    def __init__(self, host: str, port: int, *, client_id: str = "kbroker",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 reconnect_backoff_ms: int = 50, reconnect_backoff_max_ms: int = 1000,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, ssl=None, sasl=None,
                 rng: random.Random | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.backoff_ms = reconnect_backoff_ms
        self.backoff_max_ms = reconnect_backoff_max_ms
        self.max_frame_size = max_frame_size
        self.ssl = ssl
        self.sasl = sasl   # kbroker.security.client_auth.SaslCredentials: authenticate each connection
        self._rng = rng or random.Random()
        self._conn: _Conn | None = None
        self._connecting: asyncio.Future | None = None
        self._failures = 0            # consecutive failed connection attempts
        self._next_attempt = 0.0      # loop time before which no new attempt is made
        self._corr = 0
        self._closed = False
        self.connects = 0             # successful connections so far (tests, metrics)

    def __repr__(self) -> str:
        return f"KafkaClient({self.host}:{self.port})"

    # -- public ------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def connect(self) -> None:
        """Connect now (otherwise the first ``send`` does)."""
        await self._ensure_conn()

    def api_version(self, api_key: int) -> int | None:
        """The version negotiated for ``api_key`` on the current connection (None: unsupported
        or not connected)."""
        return self._conn.versions.get(api_key) if self._conn is not None else None

    async def send(self, request, version: int | None = None, *, timeout_ms: int | None = None,
                   expect_response: bool = True) -> Any:
        """Send one request and return the peer's response object.

        ``version``: force a version (must be one the peer supports), else the negotiated one.
        ``expect_response=False`` (acks=0 produce) returns None once the bytes are written.
        """
        if self._closed:
            raise ClientClosed(f"{self} is closed")
        conn = await self._ensure_conn()
        key = request.API_KEY
        if version is None:
            version = conn.versions.get(key)
            if version is None:
                raise UnsupportedApi(f"{self}: the peer does not support api key {key} at a version we know")
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        return await self._request(conn, request, version, timeout, expect_response)

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        conn = self._conn
        if conn is not None:
            self._fail(conn, ClientClosed(f"{self} closed"))
            if conn.task is not None:
                await asyncio.gather(conn.task, return_exceptions=True)
            try:
                await conn.writer.wait_closed()
            except (OSError, asyncio.CancelledError):
                pass

    # -- connection --------------------------------------------------------------------------

    async def _ensure_conn(self) -> _Conn:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        # One connection attempt at a time; concurrent senders share its outcome.
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._connecting)

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        wait = self._next_attempt - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=1 << 20),
                self.connect_timeout_ms / 1000)
        except (OSError, asyncio.TimeoutError) as e:
            self._backoff(loop)
            raise ConnectionLost(f"{self}: connect failed: {e or type(e).__name__}") from None
        conn = _Conn(reader, writer)
        conn.task = asyncio.ensure_future(self._read_loop(conn))
        try:
            conn.versions = await self._negotiate(conn)
            if self.sasl is not None:
                await self.sasl.authenticate(lambda req, v: self._request(conn, req, v, self.request_timeout_ms / 1000, True),
                                             conn.versions, AuthenticationFailed)
        except BaseException as e:
            self._fail(conn, ConnectionLost(f"{self}: ApiVersions failed: {e}"))
            self._backoff(loop)
            if isinstance(e, ClientError):
                raise
            if isinstance(e, asyncio.CancelledError):
                raise
            raise ConnectionLost(f"{self}: ApiVersions failed: {e}") from None
        if self._closed:
            self._fail(conn, ClientClosed(f"{self} closed"))
            raise ClientClosed(f"{self} is closed")
        self._failures = 0
        self._next_attempt = 0.0
        self.connects += 1
        self._conn = conn
        return conn

    def _backoff(self, loop) -> None:
        delay = min(self.backoff_max_ms, self.backoff_ms * (2 ** self._failures))
        delay *= self._rng.uniform(0.8, 1.2)
        self._failures += 1
        self._next_attempt = loop.time() + delay / 1000

    async def _negotiate(self, conn: _Conn) -> dict[int, int]:
        """ApiVersions at our highest version; a peer that does not know it answers v0 with
        UNSUPPORTED_VERSION and its own range, then we ask again at the highest it supports."""
        timeout = self.request_timeout_ms / 1000
        hi = ApiVersionsRequest.VALID_VERSIONS[1]
        req = ApiVersionsRequest(client_software_name="kbroker", client_software_version="1")
        resp = await self._request(conn, req, hi, timeout, True)
        if resp.error_code == UNSUPPORTED_VERSION:
            theirs = {k.api_key: k.max_version for k in resp.api_keys}.get(API_VERSIONS_KEY, 0)
            resp = await self._request(conn, req, min(hi, theirs), timeout, True)
        if resp.error_code != 0:
            raise ConnectionLost(f"{self}: ApiVersions error {resp.error_code}")
        versions = {}
        for k in resp.api_keys:
            cls = REQUESTS.get(k.api_key)
            if cls is None:
                continue
            lo, hi = cls.VALID_VERSIONS
            top = min(hi, k.max_version)
            if top >= max(lo, k.min_version):
                versions[k.api_key] = top
        return versions

    # -- requests ----------------------------------------------------------------------------

    async def _request(self, conn: _Conn, request, version: int, timeout: float, expect_response: bool):
        if conn.closed:
            raise ConnectionLost(f"{self}: connection closed")
        key = request.API_KEY
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        corr = self._corr
        try:
            data = encode_request(corr, self.client_id, request, version)
        except CodecError as e:
            raise UnsupportedApi(f"{self}: cannot encode {type(request).__name__} v{version}: {e}") from None
        fut = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            conn.pending[corr] = (fut, key, version)
        try:
            conn.writer.write(data)
            await conn.writer.drain()
        except (OSError, RuntimeError) as e:
            self._fail(conn, ConnectionLost(f"{self}: write failed: {e}"))
        if fut is None:
            if conn.closed:
                raise ConnectionLost(f"{self}: connection closed")
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            conn.pending.pop(corr, None)
            fut.cancel()
            self._fail(conn, ConnectionLost(f"{self}: connection closed after a request timeout"))
            raise RequestTimeout(f"{self}: no response to {type(request).__name__} v{version} "
                                 f"(correlation id {corr}) within {timeout * 1000:.0f} ms") from None
        except asyncio.CancelledError:
            # The caller gave up: the response, if it comes, is read and dropped.
            if not fut.done():
                fut.cancel()
            raise

    async def _read_loop(self, conn: _Conn) -> None:
        reader = conn.reader
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _I32.unpack(head)
                if size < 4 or size > self.max_frame_size:
                    raise CodecError(f"response frame size {size}")
                frame = await reader.readexactly(size)
                (corr,) = _I32.unpack_from(frame, 0)
                entry = conn.pending.pop(corr, None)
                if entry is None:
                    raise CodecError(f"response with unknown correlation id {corr}")
                fut, key, version = entry
                try:
                    resp = self._decode(frame, key, version)
                except CodecError:
                    conn.pending[corr] = entry     # failed with the others by _fail below
                    raise
                if not fut.done():
                    fut.set_result(resp)
        except asyncio.CancelledError:
            self._fail(conn, ConnectionLost(f"{self}: connection closed"))
        except (asyncio.IncompleteReadError, OSError) as e:
            self._fail(conn, ConnectionLost(f"{self}: connection lost: {e}"))
        except CodecError as e:
            log.warning("%s: closing the connection: %s", self, e)
            self._fail(conn, ConnectionLost(f"{self}: protocol error: {e}"))

    @staticmethod
    def _decode(frame: bytes, key: int, version: int):
        try:
            return decode_response(memoryview(frame), key, version)[1]
        except CodecError as e:
            if key == API_VERSIONS_KEY and version != 0:
                # A peer that does not know our ApiVersions version answers at v0.
                try:
                    return decode_response(memoryview(frame), key, 0)[1]
                except CodecError:
                    pass
            raise CodecError(f"undecodable response to api key {key} v{version}: {e}") from None

    def _fail(self, conn: _Conn, exc: ClientError) -> None:
        """Close ``conn`` and fail everything waiting on it (idempotent)."""
        if not conn.closed:
            conn.closed = True
            try:
                conn.writer.close()
            except RuntimeError:       # loop already closed
                pass
            if conn.task is not None and conn.task is not asyncio.current_task():
                conn.task.cancel()
        pending, conn.pending = conn.pending, {}
        for fut, _, _ in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._conn is conn:
            self._conn = None
