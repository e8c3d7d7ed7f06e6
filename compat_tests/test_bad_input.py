"""Bad input gets a closed connection or an error response, and a concurrent well-behaved
client sees nothing of it. (issue 4)"""
from __future__ import annotations

import os
import socket
import struct
import threading

import pytest
from confluent_kafka import Producer

from compat_tests.clients.confluent import ConfluentDriver


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def header(api_key: int, version: int, corr: int = 7, client=b"fuzz") -> bytes:
    return struct.pack(">hhih", api_key, version, corr, len(client)) + client


def exchange(port: int, data: bytes, timeout=5.0) -> bytes:
    """Send data, then read until the broker closes or stays quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return out


BAD_FRAMES = {
    "garbage": frame(os.urandom(64)),
    "negative-length": struct.pack(">i", -5) + b"xxxxx",
    "oversized": struct.pack(">i", 2**31 - 1) + b"x" * 100,
    "truncated-header": frame(b"\x00\x03"),
    "unknown-api-key": frame(header(9999, 0)),
    "metadata-v99": frame(header(3, 99)),
    "produce-garbage-body": frame(header(0, 9) + os.urandom(200)),
    "zero-length": struct.pack(">i", 0),
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_bad_frame_closes_connection(shared_broker, name):
    # The broker must close the connection (no hang, no crash). Whatever it sent first must be
    # no more than an error response for the request.
    out = exchange(shared_broker.port, BAD_FRAMES[name])
    assert len(out) < 4096
    assert shared_broker.proc.poll() is None, "broker died"


def test_api_versions_unsupported_version_gets_v0_error(shared_broker):
    # A future ApiVersions version uses request header v2: the header ends with tagged fields.
    out = exchange(shared_broker.port, frame(header(18, 99, corr=42) + b"\x00"))
    size, corr, err = struct.unpack(">iih", out[:10])
    assert size == len(out) - 4 and corr == 42
    assert err == 35  # UNSUPPORTED_VERSION
    (n,) = struct.unpack(">i", out[10:14])
    keys = {struct.unpack(">hhh", out[14 + 6 * i:20 + 6 * i])[0] for i in range(n)}
    assert {0, 1, 3, 18} <= keys   # Produce, Fetch, Metadata, ApiVersions ranges still sent


def test_good_client_unaffected_by_bad_neighbours(shared_broker):
    driver = ConfluentDriver(shared_broker.bootstrap)
    driver.create_topic("neighbour", 1)
    stop = threading.Event()

    def abuse():
        while not stop.is_set():
            for data in BAD_FRAMES.values():
                exchange(shared_broker.port, data, timeout=2)

    t = threading.Thread(target=abuse)
    t.start()
    try:
        p = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
        errors = []
        for i in range(2000):
            p.produce("neighbour", value=b"%d" % i, on_delivery=lambda e, m: e and errors.append(e))
            p.poll(0)
        assert p.flush(30) == 0
        assert not errors
    finally:
        stop.set()
        t.join(30)
    got = driver.consume("neighbour", 2000)
    assert [c.value for c in got] == [b"%d" % i for i in range(2000)]


def test_debian_kcat_parses_api_versions(shared_broker):
    """Debian's kcat links librdkafka 2.0.2, older than our ApiVersions: it must still parse
    the response and list metadata."""
    from compat_tests.clients.kcat import KCAT, KcatDriver
    if KCAT is None:
        pytest.fail("kcat is not installed: run scripts/test.sh (apt-get install kcat)")
    import json
    md = json.loads(KcatDriver(shared_broker.bootstrap).metadata_json())
    assert md["brokers"] and md["brokers"][0]["name"].endswith(f":{shared_broker.port}")
