"""SASL mechanisms on the broker side: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER (unsecured JWS).

Each mechanism is a small object fed the client's tokens: ``step(token, now_ms) -> challenge``
until ``done``; then ``principal`` (``User:<name>``) and ``lifetime_ms`` (a bound on the
session, e.g. a token's expiry; None = none) are set. A failure raises :class:`SaslFailed`,
whose message goes back in SaslAuthenticate's error_message.
"""

from __future__ import annotations

import base64
import json
from typing import Callable

from kbroker.security.principal import user
from kbroker.security.scram import MECHANISMS as SCRAM_MECHANISMS, ScramError, ScramServer

SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslFailed(Exception):
    pass


class PlainMechanism:
    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.done = False
        self.principal: str | None = None
        self.lifetime_ms: int | None = None

    def step(self, token: bytes, now_ms: int) -> bytes:
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise SaslFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, name, password = (p.decode("utf-8", "replace") for p in parts)
        if not name:
            raise SaslFailed("Authentication failed: username not specified")
        if authzid and authzid != name:
            raise SaslFailed("Authentication failed: Client requested an authorization id that is different from username")
        expected = self.users.get(name)
        if expected is None or not _same(expected, password):
            raise SaslFailed("Authentication failed: Invalid username or password")
        self.principal = user(name)
        self.done = True
        return b""


def _same(a: str, b: str) -> bool:
    import hmac
    return hmac.compare_digest(a.encode(), b.encode())


class ScramMechanism:
    """``lookup(name)``: the user's credential; ``token_lookup(token_id)``: (owner principal,
    credential, expiry_ms) of a delegation token (SCRAM with the ``tokenauth=true`` extension)."""

    def __init__(self, mechanism: str, lookup: Callable, token_lookup: Callable | None = None) -> None:
        self._token = None
        self._token_lookup = token_lookup

        def find(name):
            return lookup(name)
        self._server = ScramServer(mechanism, find)
        self._lookup = lookup
        self.mechanism = mechanism
        self.done = False
        self.principal: str | None = None
        self.lifetime_ms: int | None = None
        self._step = 0

    def step(self, token: bytes, now_ms: int) -> bytes:
        try:
            if self._step == 0:
                self._step = 1
                # a delegation token authenticates as its owner; its id is the SCRAM user name
                srv = self._server
                if self._token_lookup is not None and b"tokenauth=true" in bytes(token):
                    def by_token(token_id, now=now_ms):
                        found = self._token_lookup(token_id, self.mechanism)
                        if found is None or found[2] <= now:
                            return None
                        self._token = found
                        return found[1]
                    srv.lookup = by_token
                return srv.first(bytes(token))
            if self._step == 1:
                self._step = 2
                out = self._server.final(bytes(token))
                if self._token is not None:
                    self.principal = self._token[0]
                    self.lifetime_ms = self._token[2] - now_ms
                else:
                    self.principal = user(self._server.user)
                self.done = True
                return out
        except ScramError as e:
            raise SaslFailed(f"Authentication failed during authentication due to invalid credentials "
                             f"with SASL mechanism {self.mechanism}") from e
        except (UnicodeDecodeError, ValueError) as e:
            raise SaslFailed(f"Invalid SCRAM message: {e}") from None
        raise SaslFailed("Unexpected SCRAM message after the exchange finished")


def _b64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class OAuthBearerMechanism:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: an unsigned JWS (``alg: none``),
    the principal from the ``sub`` claim (``unsecuredValidatorPrincipalClaimName``), ``exp``
    required, ``unsecuredValidatorRequiredScope`` and ``unsecuredValidatorAllowableClockSkewMs``
    honoured. For development only, as in Kafka."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.done = False
        self.principal: str | None = None
        self.lifetime_ms: int | None = None
        self._failed: str | None = None

    def step(self, token: bytes, now_ms: int) -> bytes:
        if self._failed is not None:
            raise SaslFailed(self._failed)   # the client's \x01 after our error challenge
        text = bytes(token).decode("utf-8", "replace")
        if "," not in text or "\x01" not in text:
            raise SaslFailed("Invalid OAUTHBEARER client first message")
        kv = dict(p.split("=", 1) for p in text.split("\x01")[1:] if "=" in p)
        auth = kv.get("auth", "")
        if not auth.startswith("Bearer "):
            raise SaslFailed("Invalid OAUTHBEARER client first message: no bearer token")
        try:
            self._validate(auth[7:].strip(), now_ms)
        except SaslFailed as e:
            self._failed = str(e)
            return json.dumps({"status": "invalid_token"}).encode()
        self.done = True
        return b""

    def _validate(self, jws: str, now_ms: int) -> None:
        parts = jws.split(".")
        if len(parts) != 3:
            raise SaslFailed("Invalid unsecured JWS: expected 3 parts")
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except (ValueError, TypeError):
            raise SaslFailed("Invalid unsecured JWS: malformed base64url JSON") from None
        if header.get("alg") != "none" or parts[2]:
            raise SaslFailed("Unsecured JWS must use alg=none and no signature")
        skew = int(self.options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
        claim = self.options.get("unsecuredValidatorPrincipalClaimName", "sub")
        sub = claims.get(claim)
        if not isinstance(sub, str) or not sub:
            raise SaslFailed(f"Unsecured JWS has no string {claim!r} claim")
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)):
            raise SaslFailed("Unsecured JWS has no 'exp' claim")
        exp_ms = int(exp * 1000)
        if exp_ms + skew <= now_ms:
            raise SaslFailed("Unsecured JWS has expired")
        iat = claims.get("iat")
        if isinstance(iat, (int, float)) and int(iat * 1000) - skew > now_ms:
            raise SaslFailed("Unsecured JWS was issued in the future")
        required = [s for s in self.options.get("unsecuredValidatorRequiredScope", "").split() if s]
        scope = claims.get(self.options.get("unsecuredValidatorScopeClaimName", "scope")) or []
        scope = scope.split() if isinstance(scope, str) else scope
        missing = [s for s in required if s not in scope]
        if missing:
            raise SaslFailed(f"Unsecured JWS lacks the required scope {missing}")
        self.principal = user(sub)
        self.lifetime_ms = exp_ms - now_ms


def is_scram(mechanism: str) -> bool:
    return mechanism in SCRAM_MECHANISMS
