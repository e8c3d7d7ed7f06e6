"""What the four delegation token handlers share (the rules are kbroker.security.delegation_tokens)."""

from __future__ import annotations

from kbroker.security.delegation_tokens import token_config
from kbroker.wire.errors import Errors


def split_principal(p: str) -> tuple[str, str]:
    kind, _, name = p.partition(":")
    return kind, name


def tokens_or_error(ctx):
    """(TokenConfig, None) when tokens are on, else (None, DELEGATION_TOKEN_AUTH_DISABLED)."""
    cfg = token_config(getattr(ctx.broker, "security", None))
    return (cfg, None) if cfg.enabled else (None, Errors.DELEGATION_TOKEN_AUTH_DISABLED)


def request_not_allowed(ctx) -> bool:
    """Kafka's allowTokenRequests: only over SASL or TLS with a client certificate, and never
    over a connection that authenticated with a token."""
    conn = ctx.conn
    if conn is None:
        return True
    st = conn.state
    if st.get("token_authenticated"):
        return True
    sec = ctx.broker.security
    ls = sec.listener(ctx.listener_name) if sec is not None else None
    if ls is None or ls.protocol == "PLAINTEXT":
        return True
    if ls.protocol == "SSL":
        return st.get("principal", "User:ANONYMOUS") == "User:ANONYMOUS"
    return not st.get("authenticated")


def token_write(ctx, response_cls, make_op, hmac: bytes, period_ms: int):
    """Renew / Expire: the checks both share, then the controller operation
    ``make_op(cfg, hmac, principal, period_ms)``; the response carries the new expiry."""
    cfg, err = tokens_or_error(ctx)
    if err:
        return response_cls(error_code=err)
    if request_not_allowed(ctx):
        return response_cls(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    return _submit(ctx, response_cls, make_op(cfg, hmac, ctx.principal, period_ms))


async def _submit(ctx, response_cls, op):
    out = await ctx.broker.controller.submit(op)
    return response_cls(error_code=out.error, expiry_timestamp_ms=out.expiry_ms)
