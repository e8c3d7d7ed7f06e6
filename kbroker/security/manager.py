"""The broker's security: per-listener TLS/SASL settings, the authorizer, principals.

``SecurityManager(config, image)`` reads Kafka's configs:

* ``listener.security.protocol.map`` (via ``config.listeners``): PLAINTEXT, SSL,
  SASL_PLAINTEXT, SASL_SSL per listener;
* ``ssl.*`` and ``sasl.*`` with Kafka's listener prefixes: ``listener.name.<listener>.<config>``
  before ``<config>``; JAAS from ``listener.name.<listener>.<mechanism>.sasl.jaas.config``,
  then ``listener.name.<listener>.sasl.jaas.config``, then ``sasl.jaas.config``;
* ``authorizer.class.name`` (Kafka's StandardAuthorizer / AclAuthorizer names or kbroker's own
  mean the ACL authorizer; empty = no authorization), ``super.users`` (``;``-separated),
  ``allow.everyone.if.no.acl.found``; ``connections.max.reauth.ms`` (KIP-368).

Principals live in ``conn.state["principal"]``: ``User:ANONYMOUS`` on PLAINTEXT, the mapped
certificate DN on SSL (with a client certificate), the SASL user on SASL listeners.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kbroker.config import ConfigError
from kbroker.security import acls as A
from kbroker.security.jaas import parse_jaas, plain_users
from kbroker.security.principal import ANONYMOUS, NoMatchingRule, parse_mapping_rules
from kbroker.security.sasl import SUPPORTED

log = logging.getLogger("kbroker.security")

AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kbroker.security.acls.Authorizer",
})


@dataclass
class ListenerSecurity:
    name: str
    protocol: str                         # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    ssl_context: Any = None
    mapping_rules: list = field(default_factory=list)
    mechanisms: list[str] = field(default_factory=list)
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth_options: dict[str, str] = field(default_factory=dict)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


def _getter(props: dict[str, str], listener: str):
    prefix = f"listener.name.{listener.lower()}."

    def get(name: str) -> str | None:
        v = props.get(prefix + name)
        return v if v is not None else props.get(name)
    return get


class SecurityManager:
    def __init__(self, config, image) -> None:
        self.image = image
        props = dict(config.originals)
        self.props = props
        self.reauth_ms = int(props.get("connections.max.reauth.ms", "0"))
        self.failed_auth_delay_ms = int(props.get("failed.authentication.delay.ms", "100"))
        from kbroker.security.delegation_tokens import TokenConfig
        self.tokens = TokenConfig.from_props(props)            # delegation.token.* (KIP-48)
        self.token_credentials: dict = {}                      # (token id, mechanism) -> SCRAM credential
        self.listeners: dict[str, ListenerSecurity] = {}
        for ep in config.listeners:
            self.listeners[ep.listener_name] = self._listener(ep.listener_name, ep.security_protocol, props)
        # Controller listeners are not put through the broker's per-API checks: the controller
        # authorizes its senders itself (CLUSTER_ACTION on the cluster: controller_link).
        self.trusted_listeners = set(config.controller_listener_names)
        cls = (props.get("authorizer.class.name") or "").strip()
        self.authorizer: A.Authorizer | None = None
        if cls:
            if cls not in AUTHORIZER_CLASSES:
                raise ConfigError(f"authorizer.class.name {cls}: kbroker provides the ACL authorizer "
                                  f"(org.apache.kafka.metadata.authorizer.StandardAuthorizer)")
            supers = {s.strip() for s in (props.get("super.users") or "").split(";") if s.strip()}
            allow = (props.get("allow.everyone.if.no.acl.found", "false").strip().lower() == "true")
            self.authorizer = A.Authorizer(image.security.acls, supers, allow)

    @staticmethod
    def _listener(name: str, protocol: str, props: dict[str, str]) -> ListenerSecurity:
        get = _getter(props, name)
        ls = ListenerSecurity(name, protocol)
        if ls.tls:
            from kbroker.security.tls import build_server_context
            try:
                ls.ssl_context = build_server_context(get)
            except (OSError, ValueError) as e:
                raise ConfigError(f"listener {name}: {e}") from None
            ls.mapping_rules = parse_mapping_rules(get("ssl.principal.mapping.rules"))
        if ls.sasl:
            mechs = [m.strip().upper() for m in (get("sasl.enabled.mechanisms") or "GSSAPI").split(",") if m.strip()]
            unsupported = [m for m in mechs if m not in SUPPORTED]
            if unsupported:
                log.warning("listener %s: SASL mechanisms %s are not supported by kbroker (ignored)", name, unsupported)
            ls.mechanisms = [m for m in mechs if m in SUPPORTED]
            if not ls.mechanisms:
                raise ConfigError(f"listener {name}: sasl.enabled.mechanisms lists no mechanism kbroker supports "
                                  f"({', '.join(SUPPORTED)})")
            for mech in ls.mechanisms:
                text = (props.get(f"listener.name.{name.lower()}.{mech.lower()}.sasl.jaas.config")
                        or get("sasl.jaas.config"))
                if not text:
                    if mech == "PLAIN":
                        raise ConfigError(f"listener {name}: PLAIN needs a JAAS config with user_<name>=\"<password>\" "
                                          f"(listener.name.{name.lower()}.plain.sasl.jaas.config)")
                    continue
                try:
                    modules = parse_jaas(text)
                except ValueError as e:
                    raise ConfigError(f"listener {name}, {mech}: {e}") from None
                if mech == "PLAIN":
                    ls.plain_users = plain_users(modules)
                elif mech == "OAUTHBEARER":
                    for m in modules:
                        ls.oauth_options.update(m.options)
        return ls

    # -- connections -------------------------------------------------------------------------

    def connection_factory(self, listener_name: str):
        """What the Listener builds per accepted socket (None: a plain Connection)."""
        ls = self.listeners.get(listener_name)
        if ls is None or not ls.tls:
            return None
        from kbroker.security.tls import TlsConnection
        ctx = ls.ssl_context

        def on_handshake(conn, cert):
            if ls.sasl:
                return   # the SASL exchange names the principal
            from kbroker.security.tls import peer_principal_name
            try:
                name = peer_principal_name(cert, ls.mapping_rules)
            except NoMatchingRule as e:
                conn.close(str(e))
                return
            conn.state["principal"] = f"User:{name}" if name is not None else ANONYMOUS

        def make(*args, **kw):
            return TlsConnection(*args, ssl_context=ctx, on_handshake=on_handshake, **kw)
        return make

    def listener(self, name: str) -> ListenerSecurity | None:
        return self.listeners.get(name)

    # -- authorization -----------------------------------------------------------------------

    def enforces(self, listener_name: str) -> bool:
        """Does this listener's traffic go through the authorizer?"""
        return self.authorizer is not None and listener_name not in self.trusted_listeners

    def _unchecked(self, conn) -> bool:
        return self.authorizer is None or (conn is not None and conn.listener_name in self.trusted_listeners)

    def authorizer_now(self) -> A.Authorizer:
        """The authorizer over the image's current ACLs (a snapshot load replaces them)."""
        self.authorizer.acls = self.image.security.acls
        return self.authorizer

    def authorize(self, conn, op: int, resource_type: int, name: str) -> bool:
        if self._unchecked(conn):
            return True
        return self.authorizer_now().authorize(principal_of(conn), host_of(conn), op, resource_type, name)

    def authorize_any(self, conn, op: int, resource_type: int) -> bool:
        if self._unchecked(conn):
            return True
        return self.authorizer_now().authorize_any(principal_of(conn), host_of(conn), op, resource_type)


def principal_of(conn) -> str:
    if conn is None:
        return ANONYMOUS
    return conn.state.get("principal", ANONYMOUS)


def host_of(conn) -> str:
    peer = getattr(conn, "peer", None) or ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return host.strip("[]")
