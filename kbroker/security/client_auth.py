"""The client side of SASL for kbroker's own connections (``KafkaClient(sasl=...)``: the tools
today; node-to-node listeners later) and the client properties that configure it
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location``
(PEM), ``ssl.keystore.location`` (PEM), as Kafka clients read them)."""

from __future__ import annotations

import ssl as _ssl
from dataclasses import dataclass, field

from kbroker.security.jaas import parse_jaas
from kbroker.security.scram import MECHANISMS, ScramClient
from kbroker.wire.generated.sasl_authenticate_request import SaslAuthenticateRequest
from kbroker.wire.generated.sasl_handshake_request import SaslHandshakeRequest

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@dataclass
class SaslCredentials:
    mechanism: str
    username: str
    password: str
    extensions: dict[str, str] = field(default_factory=dict)   # SCRAM: tokenauth=true

    async def authenticate(self, call, versions: dict[int, int], failed) -> None:
        """SaslHandshake + SaslAuthenticate rounds (KIP-152) over ``call(request, version)``;
        raises ``failed(message)`` when refused."""
        hv = versions.get(SASL_HANDSHAKE)
        av = versions.get(SASL_AUTHENTICATE)
        if hv is None or av is None or hv < 1:
            raise failed("the peer does not offer SASL (SaslHandshake v1 / SaslAuthenticate)")
        resp = await call(SaslHandshakeRequest(mechanism=self.mechanism), hv)
        if resp.error_code:
            raise failed(f"SASL mechanism {self.mechanism} refused (error {resp.error_code}); "
                         f"the peer offers {resp.mechanisms}")

        async def step(token: bytes) -> bytes:
            r = await call(SaslAuthenticateRequest(auth_bytes=token), av)
            if r.error_code:
                raise failed(f"SASL authentication failed: {r.error_message or r.error_code}")
            return bytes(r.auth_bytes or b"")
        if self.mechanism == "PLAIN":
            await step(b"\0" + self.username.encode() + b"\0" + self.password.encode())
        elif self.mechanism in MECHANISMS:
            c = ScramClient(self.mechanism, self.username, self.password, extensions=self.extensions or None)
            server_first = await step(c.first())
            if not c.verify(await step(c.final(server_first))):
                raise failed("SCRAM: the server's signature does not match (wrong server or credential)")
        else:
            raise failed(f"kbroker's client does not speak SASL mechanism {self.mechanism}")


def from_client_properties(props: dict[str, str]) -> tuple[_ssl.SSLContext | None, SaslCredentials | None]:
    """(ssl context, SASL credentials) for a Kafka client properties file's security settings."""
    protocol = (props.get("security.protocol") or "PLAINTEXT").upper()
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = _ssl.create_default_context(cafile=props.get("ssl.truststore.location") or None)
        if (props.get("ssl.endpoint.identification.algorithm", "https") or "").strip() == "":
            ctx.check_hostname = False
        cert = props.get("ssl.keystore.location")   # PEM: key + certificate chain
        if cert:
            ctx.load_cert_chain(cert, password=props.get("ssl.key.password") or props.get("ssl.keystore.password"))
    sasl = None
    if protocol.startswith("SASL_"):
        mech = (props.get("sasl.mechanism") or "GSSAPI").upper()
        opts: dict[str, str] = {}
        for m in parse_jaas(props["sasl.jaas.config"]) if props.get("sasl.jaas.config") else ():
            opts.update(m.options)
        ext = {"tokenauth": "true"} if opts.get("tokenauth", "").lower() == "true" else {}
        sasl = SaslCredentials(mech, opts.get("username", ""), opts.get("password", ""), ext)
    return ctx, sasl


def listener_client_security(config, listener: str | None, *,
                             mechanism_config: str = "sasl.mechanism.inter.broker.protocol",
                             protocol: str | None = None):
    """(ssl context, SASL credentials) this node uses to reach a peer's ``listener`` (the
    inter-broker listener; the controller listener: kbroker.security.controller_link), as a
    Kafka broker does: the listener's protocol from ``listener.security.protocol.map`` (or
    ``protocol``), the mechanism named by ``mechanism_config``, the username/password of the
    listener's JAAS config for that mechanism, and the listener's ``ssl.truststore.location`` /
    ``ssl.keystore.location`` (PEM; the keystore is offered when the peer asks for a
    certificate: mutual TLS)."""
    if not listener:
        return None, None
    protocol = protocol or config.protocol_map.get(listener.upper(), listener.upper() if listener.upper() in (
        "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL") else "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return None, None
    props = config.originals
    prefix = f"listener.name.{listener.lower()}."

    def get(name):
        v = props.get(prefix + name)
        return v if v is not None else props.get(name)
    client = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        client["ssl.truststore.location"] = get("ssl.truststore.location") or ""
        client["ssl.endpoint.identification.algorithm"] = get("ssl.endpoint.identification.algorithm") or "https"
        client["ssl.keystore.location"] = get("ssl.keystore.location") or ""
        if get("ssl.key.password"):
            client["ssl.key.password"] = get("ssl.key.password")
    if protocol.startswith("SASL_"):
        mech = (props.get(mechanism_config) or "GSSAPI").upper()
        client["sasl.mechanism"] = mech
        client["sasl.jaas.config"] = (props.get(f"{prefix}{mech.lower()}.sasl.jaas.config")
                                      or get("sasl.jaas.config") or "")
    return from_client_properties(client)
