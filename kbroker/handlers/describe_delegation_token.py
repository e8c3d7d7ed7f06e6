"""DescribeDelegationToken (41): the live tokens of the requested owners (null = all) that
the requester owns or renews, or may DESCRIBE (the token) or DESCRIBE_TOKENS (its owner)."""

from __future__ import annotations

from kbroker.handlers.delegation_token_common import split_principal, tokens_or_error
from kbroker.security.acls import DESCRIBE, DESCRIBE_TOKENS, R_DELEGATION_TOKEN, R_USER
from kbroker.wire.generated.describe_delegation_token_response import DescribeDelegationTokenResponse as R

API_KEY = 41
MIN_VERSION = 0
MAX_VERSION = 3

T = R.DescribedDelegationToken


def handle(ctx, req):
    cfg, err = tokens_or_error(ctx)
    if err:
        return R(error_code=err, tokens=[])
    if req.owners is not None and not req.owners:
        return R(error_code=0, tokens=[])
    owners = None if req.owners is None else {f"{o.principal_type}:{o.principal_name}" for o in req.owners}
    me = ctx.principal
    out = []
    for tid, t in sorted(ctx.broker.image.security.tokens.items()):
        if t.expiry_ms <= ctx.now_ms or (owners is not None and t.owner not in owners):
            continue
        if not (me == t.owner or me in t.renewers or ctx.authorize(DESCRIBE, R_DELEGATION_TOKEN, tid)
                or ctx.authorize(DESCRIBE_TOKENS, R_USER, split_principal(t.owner)[1])):
            continue
        okind, oname = split_principal(t.owner)
        rkind, rname = split_principal(t.requester)
        out.append(T(principal_type=okind, principal_name=oname, token_requester_principal_type=rkind,
                     token_requester_principal_name=rname, issue_timestamp=t.issue_ms, expiry_timestamp=t.expiry_ms,
                     max_timestamp=t.max_ms, token_id=tid, hmac=cfg.hmac(tid),
                     renewers=[T.DescribedDelegationTokenRenewer(principal_type=k, principal_name=n)
                               for k, n in map(split_principal, t.renewers)]))
    return R(error_code=0, tokens=out)
