"""TCP listener: accepts connections and hands each to a :class:`Connection`.

The listening socket is driven with ``loop.add_reader`` like the connections (see
``connection.py`` for why the network layer does not use asyncio transports).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import Any, Callable

from kbroker.net.connection import Connection
from kbroker.net.iteration_budget import IterationBudget

log = logging.getLogger("kbroker.net")

_ids = itertools.count(1)


ACCEPTS_PER_WAKEUP = 16


class Listener:
    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        dispatcher: Any,
        decoder_factory: Callable[[], Any],
        *,
        backlog: int = 50,
        send_buffer: int = -1,
        recv_buffer: int = -1,
        connection_factory: Callable[..., Connection] | None = None,
        limits: Any = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.dispatcher = dispatcher
        self.decoder_factory = decoder_factory
        self.backlog = backlog
        self.send_buffer = send_buffer
        self.recv_buffer = recv_buffer
        self.connection_factory = connection_factory or Connection   # TLS: kbroker.security
        self.connections: set[Connection] = set()
        self.accepted_total = 0   # connections ever accepted here, and closed (socket-server-metrics)
        self.closed_total = 0
        self._socks: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.limits = limits     # kbroker.net.connection_limits.ConnectionLimits, shared by listeners
        self._accepting = False
        self._resume_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def bound_port(self) -> int:
        """The actual port (useful with port 0)."""
        return self._socks[0].getsockname()[1] if self._socks else self.port

    def start(self) -> None:
        self.bind()
        self.start_accepting()

    def bind(self) -> None:
        """Bind and listen (connections queue in the backlog until start_accepting)."""
        self._loop = asyncio.get_running_loop()
        host = self.host or None
        infos = socket.getaddrinfo(host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        seen = set()
        for family, type_, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            s = socket.socket(family, type_, proto)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                port = self.bound_port if self._socks and self.port == 0 else self.port
                s.bind((addr[0], port) + tuple(addr[2:]))
                s.listen(self.backlog)
                s.setblocking(False)
            except OSError:
                s.close()
                if self._socks:
                    continue
                raise
            self._socks.append(s)

    def start_accepting(self) -> None:
        self._accept_on()
        log.info("listening on %s://%s:%d", self.name, self.host or "0.0.0.0", self.bound_port)
        if self.limits is not None and self.limits.idle(0, 2**62):
            self._idle_timer = self._loop.call_later(self._idle_interval(), self._close_idle)

    def _accept_on(self) -> None:
        if not self._accepting and self._socks:
            self._accepting = True
            for s in self._socks:
                self._loop.add_reader(s.fileno(), self._on_accept, s)

    def _accept_off(self) -> None:
        if self._accepting:
            self._accepting = False
            for s in self._socks:
                self._loop.remove_reader(s.fileno())

    def stop_accepting(self) -> None:
        self._accept_off()
        for t in (self._resume_timer, self._idle_timer):
            if t is not None:
                t.cancel()
        if self.limits is not None:
            self.limits.blocked.discard(self)
        for s in self._socks:
            s.close()
        if self._socks:
            log.info("stopped accepting on %s", self.name)
        self._socks = []

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop accepting, let every connection finish its in-flight requests, close them."""
        self.stop_accepting()
        conns = list(self.connections)
        if conns:
            await asyncio.gather(*(c.shutdown(timeout) for c in conns), return_exceptions=True)

    # -- connection limits (kbroker.net.connection_limits) -------------------------------------

    def _now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def _pause_accepting(self, ms: int) -> None:
        self._accept_off()
        if self._resume_timer is not None:
            self._resume_timer.cancel()
        self._resume_timer = self._loop.call_later(ms / 1000, self._resume_after_throttle)

    def _resume_after_throttle(self) -> None:
        self._resume_timer = None
        if self._socks and not self.limits.at_capacity(self.name):
            self._accept_on()

    def _admit(self, sock: socket.socket, ip: str) -> bool:
        keep, close_after, pause = self.limits.accepted(self.name, ip, self._now_ms())
        if pause:
            self._pause_accepting(pause)
        if keep:
            return True
        log.info("closing connection from %s on %s: %s", ip, self.name,
                 "connection creation rate quota exceeded" if close_after else "too many connections from this address")

        def drop():
            sock.close()
            self._released(ip)
        if close_after:
            self._loop.call_later(close_after / 1000, drop)
        else:
            drop()
        return False

    def _released(self, ip: str) -> None:
        self.limits.closed(ip)
        blocked = self.limits.blocked
        for lst in list(blocked):
            if not self.limits.at_capacity(lst.name):
                blocked.discard(lst)
                if lst._resume_timer is None:
                    lst._accept_on()

    def _close_idle(self) -> None:
        now = self._loop.time()
        for conn in list(self.connections):
            if self.limits.idle(int(conn.last_active * 1000), int(now * 1000)) and not conn._pending_output():
                conn.close(f"idle for more than connections.max.idle.ms ({self.limits.idle_ms} ms)")
        self._idle_timer = self._loop.call_later(self._idle_interval(), self._close_idle)

    def _idle_interval(self) -> float:
        return max(0.05, min(self.limits.idle_ms / 4000, 10.0))

    def _on_accept(self, lsock: socket.socket) -> None:
        # a few per wake-up (the listening socket stays readable, so the loop comes back):
        # a burst of 1,000 connections is then set up between other clients' requests
        budget = IterationBudget.of(self._loop)
        for i in range(ACCEPTS_PER_WAKEUP):
            if i and budget.spent():
                return      # the connections' share of this iteration is used: next one
            if self.limits is not None and self.limits.at_capacity(self.name):
                self._accept_off()              # max.connections: wait in the backlog for a slot
                self.limits.blocked.add(self)
                return
            try:
                sock, addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("accept failed on %s: %s", self.name, e)
                return
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
                if self.recv_buffer > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer)
            except OSError:
                pass
            peer = f"{addr[0]}:{addr[1]}"
            if self.limits is not None and not self._admit(sock, addr[0]):
                continue
            conn = self.connection_factory(
                self._loop, sock, peer, self.dispatcher, self.decoder_factory(),
                listener_name=self.name, on_closed=self._on_closed,
                conn_id=f"{self.name}-{next(_ids)}",
            )
            self.connections.add(conn)
            self.accepted_total += 1
            log.debug("accepted connection %s from %s", conn.conn_id, peer)
            conn.start()
            if not self._accepting:
                return            # paused by the connection creation rate

    def _on_closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.closed_total += 1
        self.connections.discard(conn)
        if self.limits is not None:
            self._released(conn.peer.rsplit(":", 1)[0])
