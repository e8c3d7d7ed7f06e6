"""ExpireDelegationToken (40): the owner or a renewer sets a token's expiry (by HMAC); a
negative period removes the token now."""

from __future__ import annotations

from kbroker.handlers.delegation_token_common import token_write
from kbroker.security.delegation_tokens import expire_token
from kbroker.wire.generated.expire_delegation_token_response import ExpireDelegationTokenResponse as R

API_KEY = 40
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx, req):
    return token_write(ctx, R, expire_token, req.hmac, req.expiry_time_period_ms)
