"""Security of the controller channels, as Kafka configures them: the controller listener
(``controller.listener.names``, its protocol from ``listener.security.protocol.map``) carries
the Raft traffic between controllers and every broker's link to the active controller
(registration, heartbeats, AlterPartition, forwarded admin writes).

* ``validate(config)``: Kafka's checks of an inconsistent controller listener set-up (its
  messages), plus the SASL mechanism. Kafka's ``sasl.mechanism.controller.protocol`` defaults
  to GSSAPI, which kbroker does not speak: a SASL controller listener with the mechanism unset
  (or set to anything but PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512) is refused at start-up rather
  than left to fail on every connection. On a controller, the mechanism must be one the
  controller listener enables (Kafka's rule for the inter-broker mechanism).
* ``client_security(config)``: the (ssl context, SASL credentials) a node uses on its outgoing
  controller connections (Kafka's RaftManager / NodeToControllerChannelManager take the first
  controller listener's protocol and ``sasl.mechanism.controller.protocol``).
* ``authorized(server, ctx, api_key)``: with an authorizer, every request on a configured
  controller listener needs CLUSTER_ACTION on the cluster (Kafka's ControllerApis), except
  DescribeQuorum (DESCRIBE), Add/RemoveRaftVoter and UnregisterBroker (ALTER), and the
  pre-authentication APIs. Forwarded admin writes carry no Envelope here (the forwarding
  broker authorized the client), so they too need the sender's CLUSTER_ACTION. The loopback
  listener a controller opens when none is configured is kbroker's own and stays unchecked.
"""

from __future__ import annotations

from kbroker.security import acls as A

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")   # kbroker's SASL client
MECHANISM_CONFIG = "sasl.mechanism.controller.protocol"

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
DESCRIBE_QUORUM, ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UNREGISTER_BROKER = 55, 80, 81, 64
_OPERATION = {DESCRIBE_QUORUM: A.DESCRIBE, ADD_RAFT_VOTER: A.ALTER, REMOVE_RAFT_VOTER: A.ALTER,
              UNREGISTER_BROKER: A.ALTER}
_UNCHECKED = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


def _ssl_or_sasl(name: str) -> bool:
    return name in ("SSL", "SASL_SSL", "SASL_PLAINTEXT")


def effective_protocol_map(config) -> dict[str, str]:
    """Kafka's effectiveListenerSecurityProtocolMap: with the map left at its default and no
    SSL/SASL listener in sight, every controller listener name maps to PLAINTEXT."""
    out = dict(config.protocol_map)
    if not config.is_default("listener.security.protocol.map"):
        return out
    names = config.controller_listener_names
    listener_names = [item.split("://", 1)[0].strip().upper() for item in config["listeners"]]
    if any(_ssl_or_sasl(n) for n in names + listener_names):
        return out
    for n in names:
        out.setdefault(n, "PLAINTEXT")
    return out


def controller_listener(config) -> str | None:
    """The listener a node dials the controllers on: the first controller listener name."""
    names = config.controller_listener_names
    return names[0] if names else None


def controller_protocol(config) -> str:
    name = controller_listener(config)
    if name is None:
        return "PLAINTEXT"
    proto = effective_protocol_map(config).get(name)
    if proto is None and name in PROTOCOLS:
        proto = name                       # Kafka: SecurityProtocol.forName(listener name)
    return proto or "PLAINTEXT"


def _jaas_options(config, listener: str, mech: str) -> dict[str, str]:
    from kbroker.security.jaas import parse_jaas
    props = config.originals
    prefix = f"listener.name.{listener.lower()}."
    text = (props.get(f"{prefix}{mech.lower()}.sasl.jaas.config") or props.get(f"{prefix}sasl.jaas.config")
            or props.get("sasl.jaas.config") or "")
    opts: dict[str, str] = {}
    for m in parse_jaas(text) if text else ():
        opts.update(m.options)
    return opts


def validate(config) -> None:
    """Raise ConfigError for a controller listener set-up Kafka (or kbroker's SASL client)
    would refuse."""
    from kbroker.config import ConfigError
    names = config.controller_listener_names
    listener_names = {e.listener_name for e in config.listeners}
    roles = set(config.process_roles)
    if roles == {"broker"}:
        if not names:
            raise ConfigError("controller.listener.names must contain at least one value when running "
                              "KRaft with just the broker role")
        if any(n in listener_names for n in names):
            raise ConfigError("controller.listener.names must not contain a value appearing in the 'listeners' "
                              "configuration when running KRaft with just the broker role")
        eff = effective_protocol_map(config)
        for n in names:
            if n not in eff:
                raise ConfigError(
                    f"Controller listener with name {n} defined in controller.listener.names not found in "
                    "listener.security.protocol.map  (an explicit security mapping for each controller listener is "
                    "required if listener.security.protocol.map is non-empty, or if there are security protocols "
                    "other than PLAINTEXT in use)")
    elif "controller" in roles and names and not all(n in listener_names for n in names):
        raise ConfigError("controller.listener.names must only contain values appearing in the 'listeners' "
                          "configuration when running the KRaft controller role")
    name = controller_listener(config)
    proto = controller_protocol(config)
    if name is None or not proto.startswith("SASL_"):
        return
    mech = (config[MECHANISM_CONFIG] or "").strip().upper()
    if mech not in CLIENT_MECHANISMS:
        why = "Kafka's default, GSSAPI" if config.is_default(MECHANISM_CONFIG) else mech
        raise ConfigError(f"{MECHANISM_CONFIG} is {why}: kbroker speaks {', '.join(CLIENT_MECHANISMS)} on the "
                          f"{proto} controller listener {name}; set {MECHANISM_CONFIG} to one of them")
    if "controller" in roles:
        prefix = f"listener.name.{name.lower()}."
        enabled = config.originals.get(prefix + "sasl.enabled.mechanisms") or config.originals.get(
            "sasl.enabled.mechanisms") or "GSSAPI"
        if mech not in {m.strip().upper() for m in enabled.split(",")}:
            raise ConfigError(f"{MECHANISM_CONFIG} must be included in sasl.enabled.mechanisms when SASL is used "
                              "for controller communication")
    try:
        opts = _jaas_options(config, name, mech)
    except ValueError as e:
        raise ConfigError(f"listener {name}, {mech}: {e}") from None
    if not opts.get("username") or "password" not in opts:
        raise ConfigError(f"the {proto} controller listener {name} needs this node's own username and password for "
                          f"{mech}: username=\"...\" password=\"...\" in "
                          f"listener.name.{name.lower()}.{mech.lower()}.sasl.jaas.config")


def client_security(config):
    """(ssl context, SASL credentials) for this node's connections to controller listeners."""
    from kbroker.security.client_auth import listener_client_security
    name = controller_listener(config)
    if name is None:
        return None, None
    return listener_client_security(config, name, mechanism_config=MECHANISM_CONFIG,
                                    protocol=controller_protocol(config))


def authorized(server, ctx, api_key: int) -> bool:
    """May the sender of this controller-listener request make it?"""
    sec = getattr(server, "security", None)
    if api_key in _UNCHECKED or sec is None or sec.authorizer is None:
        return True
    control = getattr(server, "control", None)
    if control is not None and ctx.listener_name == control.implicit_listener:
        return True
    from kbroker.security.manager import host_of, principal_of
    return sec.authorizer_now().authorize(principal_of(ctx.conn), host_of(ctx.conn),
                                          _OPERATION.get(api_key, A.CLUSTER_ACTION), A.R_CLUSTER, A.CLUSTER_NAME)
