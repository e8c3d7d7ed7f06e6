"""The SASL exchange on a connection (Kafka's SaslServerAuthenticator), and the gate.

Per connection (``conn.state``): ``sasl_mech`` (the mechanism of an exchange in progress),
``principal``, ``authenticated``, ``session_expiry_ms`` (KIP-368).

* Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served;
  anything else closes the connection (Kafka: "Unexpected Kafka request ... during SASL
  handshake"). After the session expires (``connections.max.reauth.ms``) the same holds until
  the client re-authenticates; re-authentication must keep the principal.
* SaslHandshake v1 is followed by SaslAuthenticate requests; v0 by raw length-prefixed SASL
  tokens (no request header), answered the same way.
* A failed authentication answers SASL_AUTHENTICATION_FAILED, then closes the connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from kbroker.net.connection import CloseConnection
from kbroker.security.sasl import (OAuthBearerMechanism, PlainMechanism, SaslFailed, ScramMechanism,
                                   is_scram)
from kbroker.wire.errors import Errors
from kbroker.wire.generated.sasl_authenticate_response import SaslAuthenticateResponse
from kbroker.wire.generated.sasl_handshake_response import SaslHandshakeResponse

log = logging.getLogger("kbroker.security")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
_PRE_AUTH = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


def close_after_response(conn, delay_ms: int = 100) -> None:
    """Stop reading and close once the error response has reached the socket, after Kafka's
    ``failed.authentication.delay.ms`` (so a client reads the error before the EOF, and a
    client retrying wrong credentials is slowed down)."""
    if conn is None or conn.closed:
        return
    sec = getattr(getattr(conn, "dispatcher", None), "broker", None)
    sec = getattr(sec, "security", None)
    if sec is not None:
        delay_ms = sec.failed_auth_delay_ms
    conn.loop.call_later(delay_ms / 1000, lambda: asyncio.ensure_future(conn.shutdown(5.0)))


def gate(security, conn, api_key: int, api_name: str, now_ms: int) -> None:
    ls = security.listener(conn.listener_name)
    if ls is None or not ls.sasl or api_key in _PRE_AUTH:
        return
    st = conn.state
    if not st.get("authenticated"):
        raise CloseConnection(f"Unexpected Kafka request of type {api_name} during SASL handshake")
    exp = st.get("session_expiry_ms")
    if exp is not None and now_ms >= exp:
        raise CloseConnection(f"SASL session of {st.get('principal')} expired; the client did not re-authenticate")


def _mechanism(security, ls, name: str, image):
    if name == "PLAIN":
        return PlainMechanism(ls.plain_users)
    if is_scram(name):
        sec = image.security
        from kbroker.security.delegation_tokens import token_credential
        return ScramMechanism(name, lambda user: sec.scram_credential(user, name),
                              lambda tid, mech: token_credential(security, image, tid, mech))
    if name == "OAUTHBEARER":
        return OAuthBearerMechanism(ls.oauth_options)
    raise ValueError(name)


def handshake(ctx, req) -> SaslHandshakeResponse:
    security = getattr(ctx.broker, "security", None)
    ls = security.listener(ctx.listener_name) if security is not None else None
    conn = ctx.conn
    if ls is None or not ls.sasl:
        return SaslHandshakeResponse(error_code=Errors.ILLEGAL_SASL_STATE, mechanisms=[])
    st = conn.state
    if st.get("sasl_mech") is not None or (st.get("authenticated") and ctx.api_version == 0):
        close_after_response(conn)
        return SaslHandshakeResponse(error_code=Errors.ILLEGAL_SASL_STATE, mechanisms=[])
    if req.mechanism not in ls.mechanisms:
        log.info("connection %s from %s: unsupported SASL mechanism %r", conn.conn_id, conn.peer, req.mechanism)
        close_after_response(conn)
        return SaslHandshakeResponse(error_code=Errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=list(ls.mechanisms))
    st["sasl_mech"] = _mechanism(security, ls, req.mechanism, ctx.broker.image)
    if ctx.api_version == 0:
        st["frame_hook"] = _raw_token   # Kafka's pre-KIP-152 flow: raw tokens follow
    return SaslHandshakeResponse(error_code=0, mechanisms=list(ls.mechanisms))


def _step(security, conn, token: bytes, now_ms: int) -> tuple[bytes, int]:
    """One token through the mechanism; (challenge, session lifetime ms). Raises SaslFailed."""
    st = conn.state
    mech = st["sasl_mech"]
    try:
        out = mech.step(token, now_ms)
    except SaslFailed:
        st.pop("sasl_mech", None)
        raise
    lifetime = 0
    if mech.done:
        st.pop("sasl_mech", None)
        old = st.get("principal") if st.get("authenticated") else None
        if old is not None and old != mech.principal:
            raise SaslFailed("Cannot change principals during re-authentication from "
                             f"{old} to {mech.principal}")
        st["principal"] = mech.principal
        st["authenticated"] = True
        st["token_authenticated"] = getattr(mech, "_token", None) is not None   # delegation token
        if security.reauth_ms > 0:
            lifetime = security.reauth_ms
            if mech.lifetime_ms is not None:
                lifetime = max(0, min(lifetime, mech.lifetime_ms))
            st["session_expiry_ms"] = now_ms + lifetime
        log.debug("connection %s from %s authenticated as %s", conn.conn_id, conn.peer, mech.principal)
    return out, lifetime


def authenticate(ctx, req) -> SaslAuthenticateResponse:
    security = getattr(ctx.broker, "security", None)
    conn = ctx.conn
    st = conn.state
    if security is None or st.get("sasl_mech") is None:
        close_after_response(conn)
        return SaslAuthenticateResponse(error_code=Errors.ILLEGAL_SASL_STATE,
                                        error_message="SaslAuthenticate request not expected", auth_bytes=b"")
    try:
        out, lifetime = _step(security, conn, bytes(req.auth_bytes), ctx.now_ms)
    except SaslFailed as e:
        log.info("connection %s from %s: SASL authentication failed: %s", conn.conn_id, conn.peer, e)
        close_after_response(conn)
        return SaslAuthenticateResponse(error_code=Errors.SASL_AUTHENTICATION_FAILED,
                                        error_message=str(e), auth_bytes=b"")
    return SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=out,
                                    session_lifetime_ms=lifetime)


def _raw_token(conn, frame) -> list:
    security = conn.dispatcher.broker.security
    try:
        out, _ = _step(security, conn, bytes(frame), conn.dispatcher.broker.clock.now_ms())
    except SaslFailed as e:
        conn.state.pop("frame_hook", None)
        raise CloseConnection(f"SASL authentication failed: {e}") from None
    if conn.state.get("sasl_mech") is None:
        conn.state.pop("frame_hook", None)
    return [struct.pack(">i", len(out)) + out]
