"""Connection limits with real sockets against a broker process: max.connections.per.ip
(+ overrides), max.connections (new clients wait in the backlog until a slot frees),
max.connection.creation.rate, and connections.max.idle.ms closing idle connections.
Clients use loopback source addresses 127.0.0.1 and 127.0.0.2."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from compat_tests import raw_wire
from compat_tests.brokers import BrokerProcess


def _connect(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _api_versions(s: socket.socket, timeout: float = 5.0) -> bool:
    """One ApiVersions v0 exchange: True if answered, False if the broker closed the socket
    or said nothing within ``timeout``."""
    s.settimeout(timeout)
    try:
        s.sendall(raw_wire.request(18, 0, 7))
        head = s.recv(8)
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        return False
    if len(head) < 8:
        return False
    (size,) = struct.unpack(">i", head[:4])
    left = size - 4
    while left > 0:
        left -= len(s.recv(left))
    return struct.unpack(">i", head[4:8])[0] == 7


def _wait(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("connlimits") / "broker", overrides={
        "max.connections": "6", "max.connections.per.ip": "3",
        "max.connections.per.ip.overrides": "127.0.0.2:5", "connections.max.idle.ms": "1500"})
    b.start()
    yield b
    b.stop()


def _closed_by_peer(s: socket.socket) -> bool:
    s.settimeout(0.2)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_per_ip_limit_and_override(broker):
    time.sleep(0.5)   # the start-up probes' connections are gone
    ones = [_connect(broker.port, "127.0.0.1") for _ in range(3)]
    try:
        assert all(_api_versions(s) for s in ones)
        extra = _connect(broker.port, "127.0.0.1")
        assert not _api_versions(extra), "a 4th connection from 127.0.0.1 was served (max.connections.per.ip=3)"
        extra.close()
        twos = [_connect(broker.port, "127.0.0.2") for _ in range(3)]   # override 5, but max.connections 6
        assert all(_api_versions(s) for s in twos)
        # at max.connections: a new client waits in the backlog, served once a slot frees
        waiting = _connect(broker.port, "127.0.0.2")
        assert not _api_versions(waiting, timeout=1.0)
        ones.pop().close()
        waiting.settimeout(10)
        head = waiting.recv(8)                 # the request sent above is answered now
        assert len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 7
        for s in twos + [waiting]:
            s.close()
    finally:
        for s in ones:
            s.close()


def test_idle_connections_are_closed_and_busy_ones_kept(broker):
    time.sleep(0.5)
    idle = _connect(broker.port, "127.0.0.1")
    busy = _connect(broker.port, "127.0.0.1")
    try:
        assert _api_versions(idle) and _api_versions(busy)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.5:      # busy talks every 0.5 s, idle says nothing
            assert _api_versions(busy)
            time.sleep(0.5)
        assert _wait(lambda: _closed_by_peer(idle), 10), "idle connection still open"
        assert time.monotonic() - t0 >= 1.4
        assert _api_versions(busy)
    finally:
        idle.close()
        busy.close()


def test_connection_creation_rate(tmp_path):
    b = BrokerProcess(tmp_path / "broker", overrides={"max.connection.creation.rate": "5"})
    b.start()
    try:
        time.sleep(1.2)   # the start-up probes' connections fall out of the first window
        t0 = time.monotonic()
        socks = []
        for _ in range(15):
            s = _connect(b.port, "127.0.0.1")
            assert _api_versions(s, timeout=20)
            socks.append(s)
        took = time.monotonic() - t0
        for s in socks:
            s.close()
        # 15 connections at 5/s (one window's burst allowed): at least ~2 s, however fast the machine
        assert took >= 1.5, took
    finally:
        b.stop()
