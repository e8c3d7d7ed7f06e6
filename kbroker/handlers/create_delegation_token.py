"""CreateDelegationToken (38): a token for the requester, or (v3, KIP-373) for another owner
with CREATE_TOKENS on that user; renewers must be users."""

from __future__ import annotations

from kbroker.handlers.delegation_token_common import request_not_allowed, split_principal, tokens_or_error
from kbroker.security.acls import CREATE_TOKENS, R_USER
from kbroker.security.delegation_tokens import create_token
from kbroker.wire.errors import Errors
from kbroker.wire.generated.create_delegation_token_response import CreateDelegationTokenResponse as R

API_KEY = 38
MIN_VERSION = 0
MAX_VERSION = 3


def _error(ctx, code: int) -> R:
    kind, name = split_principal(ctx.principal)
    return R(error_code=code, principal_type=kind, principal_name=name, token_requester_principal_type=kind,
             token_requester_principal_name=name, token_id="", hmac=b"")


async def _create(ctx, cfg, owner, requester, renewers, max_lifetime_ms):
    out = await ctx.broker.controller.submit(create_token(cfg, owner, requester, renewers, max_lifetime_ms))
    t = out.token
    okind, oname = split_principal(t.owner)
    rkind, rname = split_principal(t.requester)
    return R(error_code=0, principal_type=okind, principal_name=oname, token_requester_principal_type=rkind,
             token_requester_principal_name=rname, issue_timestamp_ms=t.issue_ms, expiry_timestamp_ms=t.expiry_ms,
             max_timestamp_ms=t.max_ms, token_id=t.token_id, hmac=cfg.hmac(t.token_id))


def handle(ctx, req):
    cfg, err = tokens_or_error(ctx)
    if err:
        return _error(ctx, err)
    if request_not_allowed(ctx):
        return _error(ctx, Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    requester = ctx.principal
    owner = requester
    if ctx.api_version >= 3 and req.owner_principal_name:
        if req.owner_principal_type != "User":
            return _error(ctx, Errors.INVALID_PRINCIPAL_TYPE)
        owner = f"User:{req.owner_principal_name}"
        if owner != requester and not ctx.authorize(CREATE_TOKENS, R_USER, req.owner_principal_name):
            return _error(ctx, Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
    if any(r.principal_type != "User" for r in req.renewers):
        return _error(ctx, Errors.INVALID_PRINCIPAL_TYPE)
    renewers = [f"{r.principal_type}:{r.principal_name}" for r in req.renewers]
    return _create(ctx, cfg, owner, requester, renewers, req.max_lifetime_ms)
