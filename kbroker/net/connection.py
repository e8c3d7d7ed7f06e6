"""One client connection: read frames, dispatch them, release responses in request order.

Why not an asyncio Transport: fetch responses are written with ``os.sendfile`` straight from
segment files, interleaved with ordinary buffers, on a non-blocking socket. asyncio's
transports own their socket's writer registration (``loop.add_writer`` refuses an fd that a
transport owns) and ``loop.sendfile`` pauses reading, waits for an empty buffer and moves the
file position for every region. So the connection drives its non-blocking socket itself with
``loop.add_reader`` / ``loop.add_writer`` (public API for sockets no transport owns): one
``recv`` per readable event, ``os.writev`` for runs of buffers (no joining of header and record
bytes), ``os.sendfile`` with an explicit offset for file regions (no seek, partial sends
resumed where they stopped).

Per connection:

* Frames are decoded by ``kbroker.wire.frame.FrameDecoder`` (``socket.request.max.bytes``);
  a frame that is too large or malformed closes this connection with one log line, and no other
  connection is affected.
* Each frame goes to ``dispatcher.dispatch(conn, frame)`` which returns
  - ``None``: no response (``acks=0`` produce),
  - a list of chunks: a complete response frame (``bytes``/``memoryview`` buffers and file
    regions: anything with ``size``, ``position`` and a ``fd``/``file``; or a holder of such
    regions in ``.regions``, like the log's ReadResult),
  - an awaitable that resolves to one of the above (long-poll fetch, controller writes...),
  or raises :class:`CloseConnection`.
* Handlers may overlap; the outbox releases responses strictly in request order.
* Backpressure: reading pauses while more than ``write_high_water`` bytes are queued for the
  socket or ``max_in_flight`` responses are outstanding, and resumes below the low marks.
* Fairness: connections share a per-iteration budget of work (``iteration_budget.py``); past
  it a connection keeps its decoded frames, stops reading and waits its turn in a later
  iteration, so hundreds of clients arriving together do not hold the event loop.

Data path (DESIGN.md: never touch the records twice):

* With a decoder that offers ``get_buffer``/``buffer_updated`` the socket is read with
  ``recv_into`` straight into the decoder's buffers: a produce frame is copied once, by the
  kernel, and arrives writable (the log rewrites base offsets in place, then one pwrite).
* Responses made while handling one read (pipelined requests), or released together by the
  outbox, leave in one ``writev``: fewer syscalls and fewer wake-ups of the client.
* A small file region (``INLINE_REGION_MAX``) is read with one ``pread`` and written with the
  buffers around it, so a small fetch response is a single ``writev`` instead of
  write + sendfile (+ write...), each of which would wake the client. Larger regions go by
  ``sendfile``; the buffers before a region are sent with ``MSG_MORE`` so the header and the
  records leave together rather than as a lone small segment.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import socket
from typing import Any, Callable

from kbroker.net.iteration_budget import IterationBudget

log = logging.getLogger("kbroker.net")

RECV_SIZE = 256 * 1024
IOV_MAX = 512
INLINE_REGION_MAX = 16 * 1024
_MSG_MORE = getattr(socket, "MSG_MORE", 0)
WRITE_HIGH_WATER = 16 * 1024 * 1024
WRITE_LOW_WATER = 4 * 1024 * 1024
MAX_IN_FLIGHT = 256


class CloseConnection(Exception):
    """Raised by a dispatcher to close the connection (with the message logged)."""


class _Region:
    """A file region being sent: mutable position/remaining for partial sendfile."""

    __slots__ = ("src", "pos", "left", "owner")

    def __init__(self, region: Any) -> None:
        f = getattr(region, "file", None)
        self.src = f if f is not None else region.fd  # an int, or an object with fileno()
        self.pos = region.position
        self.left = region.size
        self.owner = region  # keeps the file object open while queued

    @property
    def fd(self) -> int:
        # asked at each send: a segment file's descriptor may be closed by the log's
        # descriptor cache while queued (re-opened here), so no number is kept
        src = self.src
        if type(src) is int:
            return src
        try:
            return src.fileno()
        except Exception as e:  # the log was closed or deleted meanwhile: a write error
            raise OSError(errno.EBADF, str(e)) from None


class Connection:
    __slots__ = (
        "loop", "sock", "fd", "peer", "listener_name", "dispatcher", "_decoder", "_on_closed",
        "_outbox", "_wq", "_wq_bytes", "_writing", "_reading", "_closed", "_closing",
        "_drained", "conn_id", "state", "_hold", "_recv_into", "_muted", "_wait_for", "_deferred", "last_active",
        "_budget", "_queued",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        peer: Any,
        dispatcher: Any,
        decoder: Any,
        *,
        listener_name: str = "PLAINTEXT",
        on_closed: Callable[["Connection"], None] | None = None,
        conn_id: str = "",
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.listener_name = listener_name
        self.dispatcher = dispatcher
        self._decoder = decoder
        self._on_closed = on_closed
        self._outbox: collections.deque = collections.deque()   # futures / ready chunk lists
        self._wq: collections.deque = collections.deque()       # chunks queued for the socket
        self._wq_bytes = 0
        self._writing = False     # writer registered with the loop
        self._reading = False
        self._closed = False
        self._closing = False     # graceful: no more reads, close when outbox drains
        self._drained: asyncio.Future | None = None
        self.conn_id = conn_id
        self.state: dict = {}     # per-connection state for handlers (e.g. SASL, client info)
        self._hold = False        # batching responses: _send queues, the batch end flushes
        self._recv_into = hasattr(decoder, "get_buffer")
        self._muted = None        # KIP-219 quota throttling: the timer that unmutes
        self._wait_for = None     # hold_frames_until: the future this connection's next frames wait for
        self._deferred: list = []  # frames read before a mute, a hold or a turn, handled in order after it
        self._budget = IterationBudget.of(loop)
        self._queued = False      # waiting its turn in the budget's queue (reading paused)
        self.last_active = loop.time()   # connections.max.idle.ms

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._resume_reading()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, reason: str | None = None) -> None:
        """Close now: queued and pending responses are dropped."""
        if self._closed:
            return
        self._closed = True
        if reason:
            log.info("closing connection %s from %s: %s", self.conn_id, self.peer, reason)
        self._pause_reading()
        if self._muted is not None:
            self._muted.cancel()
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        for item in self._outbox:
            if isinstance(item, asyncio.Future) and not item.done():
                item.cancel()
        self._outbox.clear()
        self._wq.clear()
        self._wq_bytes = 0
        try:
            self.sock.close()
        except OSError:
            pass
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._on_closed is not None:
            self._on_closed(self)

    async def shutdown(self, timeout: float) -> None:
        """Graceful close: read no more requests, finish in-flight ones, write their
        responses, then close."""
        if self._closed:
            return
        self._closing = True
        self._pause_reading()
        if self._pending_output():
            self._drained = self.loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._drained), timeout)
            except asyncio.TimeoutError:
                log.warning("connection %s: in-flight requests did not finish within %.1fs", self.conn_id, timeout)
        self.close()

    # -- reading -----------------------------------------------------------------------------

    def mute_for(self, delay_s: float) -> None:
        """Read nothing for ``delay_s`` (a client over its quota, KIP-219)."""
        end = self.loop.time() + delay_s
        if self._muted is not None:
            if self._muted.when() >= end:
                return
            self._muted.cancel()
        self._muted = self.loop.call_at(end, self._unmute)
        self._pause_reading()

    def hold_frames_until(self, fut: asyncio.Future) -> None:
        """Handle none of this connection's later frames until ``fut`` is done: a request the
        dispatcher decodes in slices is handled later, and Kafka handles a connection's
        requests one at a time, in order (a producer's batches must append in order)."""
        self._wait_for = fut
        self._pause_reading()
        fut.add_done_callback(self._waited_for)

    def _waited_for(self, fut: asyncio.Future) -> None:
        if self._wait_for is fut:
            self._wait_for = None
            self._go_on()

    def _unmute(self) -> None:
        self._muted = None
        self._go_on()

    def _go_on(self) -> None:
        """A mute or hold ended: the frames it kept back, then reading again."""
        if self._closed or self._muted is not None or self._wait_for is not None:
            return
        frames, self._deferred = self._deferred, []
        if frames:
            self._handle_frames(frames)
        if not self._closed and self._muted is None and self._wait_for is None and not self._queued:
            self._after_progress()

    def _resume_reading(self) -> None:
        if (not self._reading and not self._closed and not self._closing and self._muted is None
                and self._wait_for is None and not self._queued):
            self._reading = True
            self.loop.add_reader(self.fd, self._on_readable)

    def _pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self.loop.remove_reader(self.fd)

    # -- the iteration budget (iteration_budget.py) --------------------------------------------

    def _wait_turn(self, reading: bool = False) -> None:
        """Stop reading until a later iteration gives this connection its turn.

        ``reading``: a read found the budget spent before it took anything. The socket then
        stays registered and reads return at once while queued (``_on_readable``): removing
        and re-adding the readers of a burst of a thousand connections cost ~7 us each on the
        loop, all in the iteration that found the budget spent."""
        if not reading:
            self._pause_reading()
        if not self._queued:
            self._queued = True
            self._budget.wait_turn(self)

    def _take_turn(self) -> None:
        self._queued = False
        if self._closed:
            return
        if self._outbox_ready():
            self._release_outbox()
            if self._closed or self._queued:
                return
        if self._muted is not None or self._wait_for is not None:   # their end takes over the frames
            return
        frames, self._deferred = self._deferred, []
        if frames:
            self._handle_frames(frames)
        if not self._closed and not self._queued:
            self._after_progress()
            if not frames and self._reading:
                # queued before it read: the read is its turn (else it would queue again
                # behind the others when the socket reports readable, and never get one)
                self._on_readable()

    def _on_readable(self) -> None:
        if self._queued:    # its turn comes (``_take_turn``): frames stay in order
            return
        if not self._budget.may_start():
            self._wait_turn(reading=True)
            return
        dec = self._decoder
        try:
            if self._recv_into:
                n = self.sock.recv_into(dec.get_buffer())
                data = None
            else:
                data = self.sock.recv(RECV_SIZE)
                n = len(data)
        except (BlockingIOError, InterruptedError):
            return
        except (ConnectionResetError, BrokenPipeError):
            self.close()
            return
        except OSError as e:
            self.close(f"read error: {e}")
            return
        if not n:
            # The client closed its side. Kafka drops the connection (and pending responses).
            self.close()
            return
        self._received(n, data)

    def _received(self, n: int, data: bytes | None) -> None:
        """``n`` bytes arrived: in the decoder's buffer (``data`` None) or in ``data``
        (also the entry point of a TLS connection's decrypted bytes)."""
        dec = self._decoder
        try:
            frames = dec.buffer_updated(n) if data is None else dec.feed(data)
        except Exception as e:  # FrameTooLarge, CodecError: this connection only
            log.warning("closing connection %s from %s: %s: %s", self.conn_id, self.peer, type(e).__name__, e)
            self.close()
            return
        if not frames:
            return
        self.last_active = self.loop.time()
        self._handle_frames(frames)

    def _handle_frames(self, frames) -> None:
        # Responses to the frames of this read leave together (one writev) at the end.
        self._hold = True
        try:
            for i, frame in enumerate(frames):
                if self._muted is not None or self._wait_for is not None:   # the rest waits for their end
                    self._deferred.extend(frames[i:])
                    break
                if i and self._budget.spent():   # the rest waits for this connection's turn
                    self._deferred.extend(frames[i:])
                    self._wait_turn()
                    break
                self._handle_frame(frame)
                if self._closed:
                    return
        finally:
            self._hold = False
        self._release()
        if len(self._outbox) >= MAX_IN_FLIGHT:
            self._pause_reading()

    def _handle_frame(self, frame: memoryview) -> None:
        try:
            result = self.dispatcher.dispatch(self, frame)
        except CloseConnection as e:
            log.warning("closing connection %s from %s: %s", self.conn_id, self.peer, e)
            self.close()
            return
        except Exception:
            log.exception("closing connection %s from %s: unexpected error handling a request", self.conn_id, self.peer)
            self.close()
            return
        if result is None:
            return
        if isinstance(result, list):
            if self._outbox:
                self._outbox.append(result)
            else:
                self._send(result)
            return
        if asyncio.iscoroutine(result):   # its work runs in the next iteration: reserve it
            result = self._budget.starting_task(result)
        fut = asyncio.ensure_future(result, loop=self.loop)
        self._outbox.append(fut)
        fut.add_done_callback(self._on_future_done)

    # -- the in-order outbox -----------------------------------------------------------------

    def _on_future_done(self, fut: asyncio.Future) -> None:
        if self._closed:
            if not fut.cancelled():
                fut.exception()  # retrieve, so asyncio does not log "never retrieved"
            return
        if self._queued:
            return          # its turn releases what is ready
        if self._outbox_ready() and self._budget.spent():
            self._wait_turn()   # hundreds of responses completing together: spread them
            return
        self._release_outbox()

    def _outbox_ready(self) -> bool:
        if not self._outbox:
            return False
        head = self._outbox[0]
        return not isinstance(head, asyncio.Future) or head.done()

    def _release_outbox(self) -> None:
        """Send the responses at the head of the outbox that are complete, in order."""
        outbox = self._outbox
        self._hold = True   # everything released here leaves in one writev
        try:
            while outbox:
                head = outbox[0]
                if isinstance(head, asyncio.Future):
                    if not head.done():
                        break
                    outbox.popleft()
                    if head.cancelled():
                        self.close("a request was cancelled")
                        return
                    exc = head.exception()
                    if exc is not None:
                        if isinstance(exc, CloseConnection):
                            log.warning("closing connection %s from %s: %s", self.conn_id, self.peer, exc)
                            self.close()
                        else:
                            log.error("closing connection %s from %s: request failed", self.conn_id, self.peer,
                                      exc_info=(type(exc), exc, exc.__traceback__))
                            self.close()
                        return
                    chunks = head.result()
                    if chunks is not None:
                        self._send(chunks)
                else:
                    outbox.popleft()
                    self._send(head)
                if self._closed:
                    return
        finally:
            self._hold = False
        self._release()
        if not self._closed:
            self._after_progress()

    def _after_progress(self) -> None:
        if self._closing:
            if not self._pending_output():
                if self._drained is not None and not self._drained.done():
                    self._drained.set_result(None)
            return
        if (not self._reading and len(self._outbox) < MAX_IN_FLIGHT // 2
                and self._wq_bytes <= WRITE_LOW_WATER):
            self._resume_reading()

    # -- writing -----------------------------------------------------------------------------

    def _send(self, chunks: list) -> None:
        self.last_active = self.loop.time()
        wq = self._wq
        for c in chunks:
            if isinstance(c, (bytes, bytearray, memoryview)):
                n = len(c) if not isinstance(c, memoryview) else c.nbytes
                if n:
                    wq.append(c)
                    self._wq_bytes += n
            else:
                for reg in getattr(c, "regions", None) or (c,):
                    r = _Region(reg)
                    if not r.left:
                        continue
                    if r.left <= INLINE_REGION_MAX:
                        # small: one pread now, and it joins the writev of the buffers around it
                        try:
                            data = os.pread(r.fd, r.left, r.pos)
                        except OSError as e:
                            self.close(f"reading a file region failed: {e}")
                            return
                        if len(data) != r.left:
                            self.close("file region shorter than expected")
                            return
                        wq.append(data)
                    else:
                        wq.append(r)
                    self._wq_bytes += r.left
        if not self._hold:
            self._release()

    def _release(self) -> None:
        """Write what is queued (unless the socket is already waiting to become writable)."""
        if self._wq and not self._writing and not self._closed:
            self._flush()
            if self._wq_bytes > WRITE_HIGH_WATER:
                self._pause_reading()

    def _flush(self) -> None:
        """Write as much as the socket takes; register for writability if it stops."""
        wq = self._wq
        fd = self.fd
        try:
            while wq:
                head = wq[0]
                if type(head) is _Region:
                    n = os.sendfile(fd, head.fd, head.pos, head.left)
                    if n == 0:
                        # The file is shorter than the region (truncated under us).
                        raise OSError(errno.EIO, "file region shorter than expected")
                    self._wq_bytes -= n
                    if n < head.left:
                        head.pos += n
                        head.left -= n
                        break  # socket buffer full
                    wq.popleft()
                    continue
                # A run of buffers: one writev (MSG_MORE when a file region follows, so the
                # header waits for the records instead of leaving as a small segment).
                bufs = []
                region_next = False
                for item in wq:
                    if type(item) is _Region:
                        region_next = True
                        break
                    if len(bufs) >= IOV_MAX:
                        break
                    bufs.append(item)
                if region_next and _MSG_MORE:
                    n = self.sock.sendmsg(bufs, (), _MSG_MORE)
                else:
                    n = os.writev(fd, bufs) if len(bufs) > 1 else os.write(fd, bufs[0])
                self._wq_bytes -= n
                full = True
                for b in bufs:
                    size = len(b) if not isinstance(b, memoryview) else b.nbytes
                    if n >= size:
                        n -= size
                        wq.popleft()
                    else:
                        if n:
                            wq[0] = memoryview(b)[n:]
                        break
                else:
                    full = False
                if full:
                    break
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            self.close(f"write error: {e}")
            return
        if wq:
            if not self._writing:
                self._writing = True
                self.loop.add_writer(fd, self._on_writable)
        elif self._writing:
            self._writing = False
            self.loop.remove_writer(fd)

    def _on_writable(self) -> None:
        self._flush()
        if not self._closed and not self._wq:
            self._after_progress()

    def _pending_output(self) -> bool:
        """Responses not yet fully handed to the socket (a TLS connection adds its ciphertext)."""
        return bool(self._outbox or self._wq)
