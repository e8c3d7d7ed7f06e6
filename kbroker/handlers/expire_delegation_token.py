"""ExpireDelegationToken (40): the owner or a renewer sets a token's expiry (by HMAC); a
negative period removes the token now."""

from __future__ import annotations

from kbroker.handlers.delegation_token_common import request_not_allowed, tokens_or_error
from kbroker.security.delegation_tokens import expire_token
from kbroker.wire.errors import Errors
from kbroker.wire.generated.expire_delegation_token_response import ExpireDelegationTokenResponse as R

API_KEY = 40
MIN_VERSION = 0
MAX_VERSION = 2


async def _expire(ctx, op):
    out = await ctx.broker.controller.submit(op)
    return R(error_code=out.error, expiry_timestamp_ms=out.expiry_ms)


def handle(ctx, req):
    cfg, err = tokens_or_error(ctx)
    if err:
        return R(error_code=err)
    if request_not_allowed(ctx):
        return R(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    return _expire(ctx, expire_token(cfg, req.hmac, ctx.principal, req.expiry_time_period_ms))
