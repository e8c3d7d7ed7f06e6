"""The SASL exchange through the real dispatcher of an in-process broker: the pre-auth gate,
SaslHandshake v1 + SaslAuthenticate, the legacy v0 handshake with raw tokens, a failed login,
and KIP-368 session expiry (connections.max.reauth.ms) with re-authentication."""
from __future__ import annotations

import asyncio
import struct

import pytest

from kbroker.clock import FakeClock
from kbroker.handlers.dispatcher import Dispatcher
from kbroker.net.connection import CloseConnection
from kbroker.wire.errors import Errors
from kbroker.wire.frame import encode_request
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.metadata_response import MetadataResponse
from kbroker.wire.generated.sasl_authenticate_request import SaslAuthenticateRequest
from kbroker.wire.generated.sasl_authenticate_response import SaslAuthenticateResponse
from kbroker.wire.generated.sasl_handshake_request import SaslHandshakeRequest
from kbroker.wire.generated.sasl_handshake_response import SaslHandshakeResponse
from kbroker.wire.primitives import Reader
from tests.offline_server import start_offline, stop_offline

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";'


class Conn:
    def __init__(self, loop, dispatcher):
        self.state, self.loop, self.dispatcher = {}, loop, dispatcher
        self.listener_name, self.peer, self.conn_id, self.closed = "SASL_PLAINTEXT", "127.0.0.1:1", "c1", False
        self.shutdowns = 0

    async def shutdown(self, timeout):
        self.shutdowns += 1


@pytest.fixture
def env(tmp_path):
    clock = FakeClock()
    server = start_offline(tmp_path / "data",
                           "listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
                           "sasl.enabled.mechanisms=PLAIN", f"sasl.jaas.config={JAAS}",
                           "connections.max.reauth.ms=60000", "failed.authentication.delay.ms=0", clock=clock)
    d = Dispatcher(server, server.api_specs)
    yield server.loop, clock, d
    stop_offline(server)


def call(d, conn, api_key, version, req, resp_cls, corr=1):
    frame = encode_request(corr, "t", req, version)[4:]
    chunks = d.dispatch(conn, memoryview(frame))
    data = b"".join(bytes(c) for c in chunks)[4:]
    r = Reader(memoryview(data), 0)
    r.pos = 4 + (1 if resp_cls.FLEXIBLE_VERSIONS and version >= resp_cls.FLEXIBLE_VERSIONS[0] and api_key != 18 else 0)
    return resp_cls.read(r, version)


def metadata(d, conn):
    return call(d, conn, 3, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False), MetadataResponse)


def login(d, conn, password=b"pw"):
    h = call(d, conn, 17, 1, SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
    assert h.error_code == 0 and h.mechanisms == ["PLAIN"]
    return call(d, conn, 36, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0" + password), SaslAuthenticateResponse)


def test_gate_login_and_reauthentication(env):
    loop, clock, d = env
    conn = Conn(loop, d)
    with pytest.raises(CloseConnection):
        metadata(d, conn)                                  # nothing before authentication
    a = login(d, conn)
    assert a.error_code == 0 and a.session_lifetime_ms == 60000
    assert conn.state["principal"] == "User:alice"
    assert metadata(d, conn).cluster_id
    clock.advance(59_000)
    assert login(d, conn).error_code == 0                  # re-authenticated before expiry
    clock.advance(59_000)
    assert metadata(d, conn).cluster_id                    # the new session runs from the re-login
    clock.advance(2_000)
    with pytest.raises(CloseConnection):
        metadata(d, conn)                                  # expired: closed


def test_wrong_password_answers_58_then_closes(env):
    loop, _, d = env
    conn = Conn(loop, d)
    a = login(d, conn, b"bad")
    assert a.error_code == Errors.SASL_AUTHENTICATION_FAILED and "Invalid username or password" in a.error_message
    loop.run_until_complete(asyncio.sleep(0.01))
    assert conn.shutdowns == 1
    assert not conn.state.get("authenticated")


def test_unsupported_mechanism(env):
    loop, _, d = env
    conn = Conn(loop, d)
    h = call(d, conn, 17, 1, SaslHandshakeRequest(mechanism="GSSAPI"), SaslHandshakeResponse)
    assert h.error_code == Errors.UNSUPPORTED_SASL_MECHANISM and h.mechanisms == ["PLAIN"]


def test_legacy_v0_handshake_with_raw_tokens(env):
    loop, _, d = env
    conn = Conn(loop, d)
    h = call(d, conn, 17, 0, SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
    assert h.error_code == 0
    out = d.dispatch(conn, memoryview(b"\0alice\0pw"))        # a raw token, no request header
    assert b"".join(out) == struct.pack(">i", 0)
    assert conn.state["principal"] == "User:alice" and metadata(d, conn).cluster_id
    conn2 = Conn(loop, d)
    call(d, conn2, 17, 0, SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
    with pytest.raises(CloseConnection):
        d.dispatch(conn2, memoryview(b"\0alice\0nope"))


def test_sasl_requests_on_a_plaintext_listener(env):
    loop, _, d = env
    conn = Conn(loop, d)
    conn.listener_name = "PLAINTEXT"
    h = call(d, conn, 17, 1, SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
    assert h.error_code == Errors.ILLEGAL_SASL_STATE
