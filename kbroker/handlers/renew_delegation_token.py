"""RenewDelegationToken (39): the owner or a renewer extends a token's expiry (by HMAC)."""

from __future__ import annotations

from kbroker.handlers.delegation_token_common import request_not_allowed, tokens_or_error
from kbroker.security.delegation_tokens import renew_token
from kbroker.wire.errors import Errors
from kbroker.wire.generated.renew_delegation_token_response import RenewDelegationTokenResponse as R

API_KEY = 39
MIN_VERSION = 0
MAX_VERSION = 2


async def _renew(ctx, op):
    out = await ctx.broker.controller.submit(op)
    return R(error_code=out.error, expiry_timestamp_ms=out.expiry_ms)


def handle(ctx, req):
    cfg, err = tokens_or_error(ctx)
    if err:
        return R(error_code=err)
    if request_not_allowed(ctx):
        return R(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    return _renew(ctx, renew_token(cfg, req.hmac, ctx.principal, req.renew_period_ms))
