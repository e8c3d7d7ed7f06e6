"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server exchange.

A stored credential is Kafka's ScramCredential: salt, StoredKey = H(ClientKey), ServerKey and
the iteration count; the password itself is never kept. The server side is a small state
machine fed the client's messages: ``first(msg) -> server-first``, ``final(msg) ->
server-final`` or :class:`ScramError`. An unknown user gets a made-up salt and fails at the
final step, so user names cannot be probed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
MECHANISM_BY_ID = {mid: name for name, (mid, _) in MECHANISMS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramError(Exception):
    pass


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(alg: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, alg).digest()


def salted_password(alg: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(alg, password.encode(), salt, iterations)


def credential_from_salted(alg: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = _hmac(alg, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(alg, client_key).digest(),
                           _hmac(alg, salted, b"Server Key"), iterations)


def make_credential(mechanism: str, password: str, iterations: int = 4096,
                    salt: bytes | None = None) -> ScramCredential:
    alg = MECHANISMS[mechanism][1]
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted(alg, salted_password(alg, password, salt, iterations), salt, iterations)


def _attrs(msg: str) -> dict[str, str]:
    out = {}
    for part in msg.split(","):   # one-letter attributes, and Kafka's extensions (tokenauth=true)
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ScramError(f"invalid SCRAM message attribute {part!r}")
        out[key] = value
    return out


def _sasl_name(s: str) -> str:
    return s.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange. ``lookup(user) -> ScramCredential | None``."""

    def __init__(self, mechanism: str, lookup, nonce: bytes | None = None) -> None:
        self.mechanism = mechanism
        self.alg = MECHANISMS[mechanism][1]
        self.lookup = lookup
        self._snonce = base64.b64encode(nonce or os.urandom(24)).decode().rstrip("=")
        self.user: str | None = None
        self.extensions: dict[str, str] = {}
        self._cred: ScramCredential | None = None
        self._client_first_bare = self._server_first = self._nonce = self._gs2 = ""

    def first(self, msg: bytes) -> bytes:
        text = msg.decode("utf-8")
        parts = text.split(",", 2)
        if len(parts) < 3 or parts[0] not in ("n", "y"):
            raise ScramError("invalid SCRAM client-first message (channel binding is not supported)")
        self._gs2 = parts[0] + "," + parts[1] + ","
        bare = parts[2]
        a = _attrs(bare)
        if "n" not in a or "r" not in a:
            raise ScramError("SCRAM client-first message without user name or nonce")
        self.user = _sasl_name(a["n"])
        authzid = parts[1][2:] if parts[1].startswith("a=") else ""
        if authzid and _sasl_name(authzid) != self.user:
            raise ScramError("Authentication failed: Client requested an authorization id that is different from username")
        # Kafka's SCRAM extensions (e.g. tokenauth=true) are the extra attributes
        self.extensions = {k: v for k, v in (p.split("=", 1) for p in bare.split(",") if "=" in p)
                           if len(k) > 1}
        self._client_first_bare = bare
        self._cred = self.lookup(self.user)
        cred = self._cred or ScramCredential(hashlib.sha256(b"kbroker" + self.user.encode()).digest(), b"", b"", 4096)
        self._nonce = a["r"] + self._snonce
        self._server_first = f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        return self._server_first.encode()

    def final(self, msg: bytes) -> bytes:
        text = msg.decode("utf-8")
        a = _attrs(text)
        if a.get("r") != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        if a.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise ScramError("Invalid channel binding in the final client message.")
        if "p" not in a or self._cred is None:
            raise ScramError("Authentication failed: Invalid user credentials")
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        proof = base64.b64decode(a["p"])
        sig = _hmac(self.alg, self._cred.stored_key, auth_message)
        if len(proof) != len(sig):
            raise ScramError("Authentication failed: Invalid client final message")
        client_key = bytes(x ^ y for x, y in zip(proof, sig))
        if not hmac.compare_digest(hashlib.new(self.alg, client_key).digest(), self._cred.stored_key):
            raise ScramError("Authentication failed: Invalid user credentials")
        server_sig = _hmac(self.alg, self._cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_sig)


class ScramClient:
    """The client side, for tests and kbroker's own tools."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: bytes | None = None,
                 extensions: dict[str, str] | None = None) -> None:
        self.alg = MECHANISMS[mechanism][1]
        self.user, self.password = user, password
        self._cnonce = base64.b64encode(nonce or os.urandom(24)).decode().rstrip("=")
        ext = "".join(f",{k}={v}" for k, v in (extensions or {}).items())
        self._bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self._cnonce}{ext}"
        self._server_sig = b""

    def first(self) -> bytes:
        return ("n,," + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        sf = server_first.decode()
        a = _attrs(sf)
        salted = salted_password(self.alg, self.password, base64.b64decode(a["s"]), int(a["i"]))
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={a['r']}"
        auth = f"{self._bare},{sf},{without_proof}".encode()
        client_key = _hmac(self.alg, salted, b"Client Key")
        sig = _hmac(self.alg, hashlib.new(self.alg, client_key).digest(), auth)
        proof = bytes(x ^ y for x, y in zip(client_key, sig))
        self._server_sig = _hmac(self.alg, _hmac(self.alg, salted, b"Server Key"), auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self._server_sig)
