"""RenewDelegationToken (39): the owner or a renewer extends a token's expiry (by HMAC)."""

from __future__ import annotations

from kbroker.handlers.delegation_token_common import token_write
from kbroker.security.delegation_tokens import renew_token
from kbroker.wire.generated.renew_delegation_token_response import RenewDelegationTokenResponse as R

API_KEY = 39
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx, req):
    return token_write(ctx, R, renew_token, req.hmac, req.renew_period_ms)
