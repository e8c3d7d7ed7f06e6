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
        self._socks: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None

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
        for s in self._socks:
            self._loop.add_reader(s.fileno(), self._on_accept, s)
        log.info("listening on %s://%s:%d", self.name, self.host or "0.0.0.0", self.bound_port)

    def stop_accepting(self) -> None:
        for s in self._socks:
            if self._loop is not None:
                self._loop.remove_reader(s.fileno())
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

    def _on_accept(self, lsock: socket.socket) -> None:
        # a few per wake-up (the listening socket stays readable, so the loop comes back):
        # a burst of 1,000 connections is then set up between other clients' requests
        for _ in range(ACCEPTS_PER_WAKEUP):
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
            conn = self.connection_factory(
                self._loop, sock, peer, self.dispatcher, self.decoder_factory(),
                listener_name=self.name, on_closed=self.connections.discard,
                conn_id=f"{self.name}-{next(_ids)}",
            )
            self.connections.add(conn)
            log.debug("accepted connection %s from %s", conn.conn_id, peer)
            conn.start()
