"""Delegation tokens (KIP-48): created, renewed, expired and described through the metadata
log (DelegationTokenRecord / RemoveDelegationTokenRecord), authenticated over SCRAM.

As in Kafka:
* tokens are on when ``delegation.token.secret.key`` (or the older
  ``delegation.token.master.key``) is set; otherwise every token API answers
  DELEGATION_TOKEN_AUTH_DISABLED;
* a token's HMAC is HMAC-SHA512(secret key, token id); it is never stored: every node derives
  it, and the token's SCRAM password is the HMAC in base64. A client authenticates with the
  token id as user name, that password and the SCRAM extension ``tokenauth=true``, and acts as
  the token's owner;
* ``delegation.token.max.lifetime.ms`` (7 days) bounds a token's life, renewals extend its
  expiry by ``delegation.token.expiry.time.ms`` (1 day) or the requested period, up to that
  bound; an expired token cannot authenticate or be renewed, and is removed from the log the
  next time a token is created, renewed or expired;
* tokens are created and renewed only over authenticated channels (SASL, or TLS with a client
  certificate), never over a token-authenticated one (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).
"""

from __future__ import annotations

import base64
import hashlib
import hmac as _hmac
import uuid
from dataclasses import dataclass

from kbroker.kraft.controller import ControllerResult
from kbroker.wire.errors import Errors

DEFAULT_MAX_LIFETIME_MS = 7 * 24 * 3600 * 1000
DEFAULT_EXPIRY_MS = 24 * 3600 * 1000
TOKEN_SCRAM_ITERATIONS = 4096        # Kafka: the mechanism's minimum


@dataclass(frozen=True)
class TokenConfig:
    secret: bytes | None
    max_lifetime_ms: int = DEFAULT_MAX_LIFETIME_MS
    expiry_ms: int = DEFAULT_EXPIRY_MS

    @classmethod
    def from_props(cls, props: dict) -> "TokenConfig":
        key = props.get("delegation.token.secret.key") or props.get("delegation.token.master.key")
        return cls(key.encode() if key else None,
                   int(props.get("delegation.token.max.lifetime.ms", DEFAULT_MAX_LIFETIME_MS)),
                   int(props.get("delegation.token.expiry.time.ms", DEFAULT_EXPIRY_MS)))

    @property
    def enabled(self) -> bool:
        return self.secret is not None

    def hmac(self, token_id: str) -> bytes:
        return _hmac.new(self.secret, token_id.encode(), hashlib.sha512).digest()

    def password(self, token_id: str) -> str:
        return base64.b64encode(self.hmac(token_id)).decode()


def token_config(security) -> TokenConfig:
    return security.tokens if security is not None else TokenConfig(None)


def token_credential(security, image, token_id: str, mechanism: str):
    """(owner principal, SCRAM credential, expiry ms) of a live token, or None."""
    from kbroker.security.scram import make_credential
    cfg = token_config(security)
    t = image.security.tokens.get(token_id)
    if not cfg.enabled or t is None:
        return None
    cache = security.token_credentials
    key = (token_id, mechanism)
    cred = cache.get(key)
    if cred is None:
        # the salt only has to be unpredictable per token; SCRAM sends it to the client
        salt = hashlib.sha256(cfg.secret + b"/salt/" + token_id.encode()).digest()
        cred = cache[key] = make_credential(mechanism, cfg.password(token_id), TOKEN_SCRAM_ITERATIONS, salt)
    return t.owner, cred, t.expiry_ms


def find_by_hmac(cfg: TokenConfig, tokens: dict, mac: bytes):
    for t in tokens.values():
        if _hmac.compare_digest(cfg.hmac(t.token_id), bytes(mac)):
            return t
    return None


def _record(t, expiry_ms: int):
    from kbroker.wire.generated.delegation_token_record import DelegationTokenRecord
    return DelegationTokenRecord(owner=t.owner, requester=t.requester, renewers=list(t.renewers),
                                 issue_timestamp=t.issue_ms, max_timestamp=t.max_ms,
                                 expiration_timestamp=expiry_ms, token_id=t.token_id)


def _purge_expired(tokens: dict, now_ms: int, keep: str | None = None) -> list:
    from kbroker.wire.generated.remove_delegation_token_record import RemoveDelegationTokenRecord
    return [RemoveDelegationTokenRecord(token_id=tid) for tid, t in sorted(tokens.items())
            if tid != keep and t.expiry_ms <= now_ms]


@dataclass
class TokenOutcome:
    error: int = 0
    token: object = None      # image.DelegationToken (create)
    expiry_ms: int = 0


# -- controller operations: (controller, now_ms) -> ControllerResult ---------------------------

def create_token(cfg: TokenConfig, owner: str, requester: str, renewers: list[str], max_lifetime_ms: int):
    def op(c, now_ms):
        from kbroker.security.image import DelegationToken
        life = cfg.max_lifetime_ms if max_lifetime_ms <= 0 else min(max_lifetime_ms, cfg.max_lifetime_ms)
        max_ms = now_ms + life
        tid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        t = DelegationToken(tid, owner, requester, list(renewers), now_ms, max_ms, min(max_ms, now_ms + cfg.expiry_ms))
        records = _purge_expired(c.image.security.tokens, now_ms) + [_record(t, t.expiry_ms)]
        return ControllerResult(records, TokenOutcome(0, t, t.expiry_ms))
    return op


def _may_renew(t, principal: str) -> bool:
    return principal == t.owner or principal in t.renewers


def _renewable(cfg: TokenConfig, tokens: dict, mac: bytes, principal: str, now_ms: int):
    """(token, 0) when ``principal`` may renew or expire the token with HMAC ``mac``, else
    (None, error code)."""
    t = find_by_hmac(cfg, tokens, mac)
    if t is None:
        return None, Errors.DELEGATION_TOKEN_NOT_FOUND
    if not _may_renew(t, principal):
        return None, Errors.DELEGATION_TOKEN_OWNER_MISMATCH
    if t.expiry_ms < now_ms or t.max_ms < now_ms:
        return None, Errors.DELEGATION_TOKEN_EXPIRED
    return t, 0


def renew_token(cfg: TokenConfig, mac: bytes, principal: str, period_ms: int):
    def op(c, now_ms):
        t, err = _renewable(cfg, c.image.security.tokens, mac, principal, now_ms)
        if err:
            return ControllerResult([], TokenOutcome(err))
        expiry = min(t.max_ms, now_ms + (period_ms if period_ms >= 0 else cfg.expiry_ms))
        records = _purge_expired(c.image.security.tokens, now_ms, keep=t.token_id) + [_record(t, expiry)]
        return ControllerResult(records, TokenOutcome(0, t, expiry))
    return op


def expire_token(cfg: TokenConfig, mac: bytes, principal: str, period_ms: int):
    def op(c, now_ms):
        from kbroker.wire.generated.remove_delegation_token_record import RemoveDelegationTokenRecord
        t, err = _renewable(cfg, c.image.security.tokens, mac, principal, now_ms)
        if err:
            return ControllerResult([], TokenOutcome(err))
        others = _purge_expired(c.image.security.tokens, now_ms, keep=t.token_id)
        if period_ms < 0:    # expire now: the token is gone
            return ControllerResult(others + [RemoveDelegationTokenRecord(token_id=t.token_id)],
                                    TokenOutcome(0, t, now_ms))
        expiry = min(t.max_ms, now_ms + period_ms)
        return ControllerResult(others + [_record(t, expiry)], TokenOutcome(0, t, expiry))
    return op
