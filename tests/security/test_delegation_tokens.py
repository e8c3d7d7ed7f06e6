"""Delegation tokens through the handlers and the metadata log (fake clock), and a SCRAM
exchange authenticating with a token (tokenauth=true) as its owner."""
from __future__ import annotations

import base64
import inspect

import pytest

from kbroker.handlers.context import RequestContext
from kbroker.security.delegation_tokens import token_credential
from kbroker.security.sasl import SaslFailed, ScramMechanism
from kbroker.security.scram import ScramClient
from kbroker.wire.errors import Errors
from kbroker.wire.generated.create_delegation_token_request import (
    CreateDelegationTokenRequest as Create,
)
from kbroker.wire.generated.describe_delegation_token_request import (
    DescribeDelegationTokenRequest as Describe,
)
from kbroker.wire.generated.expire_delegation_token_request import (
    ExpireDelegationTokenRequest as Expire,
)
from kbroker.wire.generated.renew_delegation_token_request import (
    RenewDelegationTokenRequest as Renew,
)
from tests.offline_server import start_offline, stop_offline

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="a" '
        'user_alice="x" user_bob="y";')


class Conn:
    def __init__(self, principal, listener="SASL_PLAINTEXT", **state):
        self.state = {"principal": principal, "authenticated": True, **state}
        self.peer = "127.0.0.1:5555"
        self.listener_name = listener


def _server(tmp_path, *extra):
    return start_offline(tmp_path / "data",
                         "listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
                         "sasl.enabled.mechanisms=PLAIN",
                         f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
                         "delegation.token.max.lifetime.ms=100000", "delegation.token.expiry.time.ms=10000",
                         *extra)


@pytest.fixture
def broker(tmp_path):
    s = _server(tmp_path, "delegation.token.secret.key=s3cr3t",
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    yield s
    stop_offline(s)


def call(server, conn, api_key, version, req):
    spec = server.api_specs[api_key]
    req = spec.request_cls.decode(req.encode(version), version)
    ctx = RequestContext(server, conn, api_key, version, 1, "t", server.clock.now_ms(), conn.listener_name)
    out = spec.handle(ctx, req)
    if inspect.isawaitable(out):
        out = server.loop.run_until_complete(out)
    out.encode(version)
    return out


def create(server, conn, renewers=(), life=-1, version=3, owner=""):
    return call(server, conn, 38, version, Create(
        owner_principal_type="User" if owner else "", owner_principal_name=owner, max_lifetime_ms=life,
        renewers=[Create.CreatableRenewers(principal_type="User", principal_name=r) for r in renewers]))


def test_create_describe_renew_expire(broker):
    alice, bob, carol = Conn("User:alice"), Conn("User:bob"), Conn("User:carol")
    t0 = broker.clock.now_ms()
    r = create(broker, alice, renewers=["bob"])
    assert r.error_code == 0 and r.principal_name == "alice" and r.token_id and len(r.hmac) == 64
    assert r.max_timestamp_ms == t0 + 100000 and r.expiry_timestamp_ms == t0 + 10000
    tid, mac = r.token_id, r.hmac

    def described(conn):
        return [t.token_id for t in call(broker, conn, 41, 3, Describe(owners=None)).tokens]
    assert described(alice) == [tid] and described(bob) == [tid] and described(carol) == []

    broker.clock.advance(5000)
    assert call(broker, carol, 39, 2, Renew(hmac=mac, renew_period_ms=-1)).error_code == Errors.DELEGATION_TOKEN_OWNER_MISMATCH
    rn = call(broker, bob, 39, 2, Renew(hmac=mac, renew_period_ms=-1))
    assert rn.error_code == 0 and rn.expiry_timestamp_ms == t0 + 15000
    assert call(broker, alice, 39, 2, Renew(hmac=b"x" * 64, renew_period_ms=1)).error_code == Errors.DELEGATION_TOKEN_NOT_FOUND
    rn = call(broker, alice, 39, 2, Renew(hmac=mac, renew_period_ms=10**9))     # capped at max lifetime
    assert rn.expiry_timestamp_ms == t0 + 100000

    ex = call(broker, alice, 40, 2, Expire(hmac=mac, expiry_time_period_ms=-1))
    assert ex.error_code == 0
    assert tid not in broker.image.security.tokens and described(alice) == []
    assert call(broker, alice, 39, 2, Renew(hmac=mac, renew_period_ms=1)).error_code == Errors.DELEGATION_TOKEN_NOT_FOUND


def test_expired_tokens_cannot_be_renewed_and_are_purged(broker):
    alice = Conn("User:alice")
    r = create(broker, alice)
    broker.clock.advance(10001)
    assert call(broker, alice, 39, 2, Renew(hmac=r.hmac, renew_period_ms=1)).error_code == Errors.DELEGATION_TOKEN_EXPIRED
    assert call(broker, alice, 41, 3, Describe(owners=None)).tokens == []
    create(broker, alice)                                  # the next write removes the expired one
    assert r.token_id not in broker.image.security.tokens


def test_request_rules(broker, tmp_path):
    assert create(broker, Conn("User:ANONYMOUS", listener="PLAINTEXT")).error_code == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    by_token = Conn("User:alice", token_authenticated=True)
    assert create(broker, by_token).error_code == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    # a token for another owner needs CREATE_TOKENS on that user
    assert create(broker, Conn("User:alice"), owner="bob").error_code == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert create(broker, Conn("User:alice"), owner="alice").error_code == 0
    off = _server(tmp_path / "off")
    try:
        assert create(off, Conn("User:alice")).error_code == Errors.DELEGATION_TOKEN_AUTH_DISABLED
        assert call(off, Conn("User:alice"), 41, 3, Describe(owners=None)).error_code == Errors.DELEGATION_TOKEN_AUTH_DISABLED
    finally:
        stop_offline(off)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_a_token_authenticates_as_its_owner(broker, mech):
    r = create(broker, Conn("User:alice"))
    sec, image = broker.security, broker.image
    lookup = lambda tid, m: token_credential(sec, image, tid, m)   # noqa: E731

    def exchange(password, tokenauth=True):
        m = ScramMechanism(mech, lambda u: None, lookup)
        c = ScramClient(mech, r.token_id, password, extensions={"tokenauth": "true"} if tokenauth else None)
        sf = m.step(c.first(), broker.clock.now_ms())
        final = m.step(c.final(sf), broker.clock.now_ms())
        assert c.verify(final)
        return m
    m = exchange(base64.b64encode(r.hmac).decode())
    assert m.principal == "User:alice" and 0 < m.lifetime_ms <= 10000
    with pytest.raises(SaslFailed):
        exchange("wrong")
    with pytest.raises(SaslFailed):
        exchange(base64.b64encode(r.hmac).decode(), tokenauth=False)   # not a SCRAM user
    broker.clock.advance(10001)
    with pytest.raises(SaslFailed):
        exchange(base64.b64encode(r.hmac).decode())                     # expired
