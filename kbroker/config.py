"""Broker and topic configuration, with Kafka's property names and defaults.

``BrokerConfig.load(path, overrides)`` reads a ``server.properties`` file (Java properties
syntax) plus ``key=value`` overrides, converts every known key to its type, validates it, and
keeps unknown keys (logged once, available in ``.unknown``). Values are read by property name
(``cfg["log.segment.bytes"]``) or through the typed helpers (``cfg.node_id``,
``cfg.listeners``...).

Topic-level configs (``retention.ms``, ``segment.bytes``...) belong to ``kbroker.log.LogConfig``;
``cfg.log_config()`` gives the topic defaults derived from the broker properties
(``log.retention.hours`` -> ``retention.ms`` ...).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

log = logging.getLogger("kbroker.config")

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range."""


# ---------------------------------------------------------------------------------------------
# Types and validators


def _parse_bool(v: str) -> bool:
    s = v.strip().lower()
    if s == "true":
        return True
    if s == "false":
        return False
    raise ValueError(f"expected true or false, got {v!r}")


def _parse_int(v: str) -> int:
    return int(v.strip())


def _parse_double(v: str) -> float:
    return float(v.strip())


def _parse_list(v: str) -> list[str]:
    s = v.strip()
    if not s:
        return []
    return [p.strip() for p in s.split(",") if p.strip()]


def _parse_string(v: str) -> str:
    return v.strip()


_PARSERS: dict[str, Callable[[str], Any]] = {
    "int": _parse_int,
    "long": _parse_int,
    "short": _parse_int,
    "double": _parse_double,
    "boolean": _parse_bool,
    "string": _parse_string,
    "password": _parse_string,
    "class": _parse_string,
    "list": _parse_list,
}

_TYPE_RANGE = {"int": (-(2**31), INT_MAX), "short": (-(2**15), 2**15 - 1), "long": (-(2**63), LONG_MAX)}


def at_least(lo):
    def check(name, v):
        if v is not None and v < lo:
            raise ConfigError(f"Invalid value {v} for configuration {name}: Value must be at least {lo}")
    check.describe = f"[{lo},...]"
    return check


def between(lo, hi):
    def check(name, v):
        if v is not None and not (lo <= v <= hi):
            raise ConfigError(f"Invalid value {v} for configuration {name}: Value must be in [{lo},{hi}]")
    check.describe = f"[{lo},...,{hi}]"
    return check


def one_of(*choices, case_insensitive=False):
    allowed = [c.lower() for c in choices] if case_insensitive else list(choices)

    def check(name, v):
        if v is None:
            return
        values = v if isinstance(v, list) else [v]
        for item in values:
            key = item.lower() if case_insensitive else item
            if key not in allowed:
                raise ConfigError(f"Invalid value {item} for configuration {name}: String must be one of: {', '.join(choices)}")
    check.describe = "[" + ", ".join(choices) + "]"
    return check


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str                        # int, long, short, double, boolean, string, list, password, class
    default: Any                     # typed default; None = no default (null)
    validator: Callable | None = None
    doc: str = ""
    read_only: bool = True           # broker configs: dynamically updatable or not

    def parse(self, raw: Any) -> Any:
        if raw is None:
            value = None
        elif isinstance(raw, str):
            try:
                value = _PARSERS[self.type](raw)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: {e}") from None
        else:
            value = raw
        if value is not None and self.type in _TYPE_RANGE:
            lo, hi = _TYPE_RANGE[self.type]
            if not lo <= value <= hi:
                raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: out of range for {self.type}")
        if self.validator is not None:
            self.validator(self.name, value)
        return value


def format_value(value: Any) -> str | None:
    """A typed value as Kafka prints it (DescribeConfigs)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Broker configuration (Kafka 3.7/4.0 names and defaults; a subset of KafkaConfig).

_CLEANUP = one_of("compact", "delete")
_COMPRESSION = one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TS_TYPE = one_of("CreateTime", "LogAppendTime")

_BROKER_DEFS: list[ConfigDef] = [
    # Node and roles
    ConfigDef("node.id", "int", -1, doc="The node ID for the roles this process plays."),
    ConfigDef("broker.id", "int", -1, doc="Alias of node.id."),
    ConfigDef("process.roles", "list", [], one_of("broker", "controller")),
    ConfigDef("controller.quorum.voters", "list", []),
    ConfigDef("controller.quorum.bootstrap.servers", "list", []),
    ConfigDef("controller.quorum.election.timeout.ms", "int", 1000),
    ConfigDef("controller.quorum.fetch.timeout.ms", "int", 2000),
    ConfigDef("controller.quorum.election.backoff.max.ms", "int", 1000),
    ConfigDef("controller.quorum.request.timeout.ms", "int", 2000),
    ConfigDef("controller.quorum.retry.backoff.ms", "int", 20),
    ConfigDef("controller.listener.names", "list", []),
    ConfigDef("broker.rack", "string", None),
    ConfigDef("broker.heartbeat.interval.ms", "int", 2000, at_least(1)),
    ConfigDef("broker.session.timeout.ms", "int", 9000, at_least(1)),
    # Listeners
    ConfigDef("listeners", "list", ["PLAINTEXT://:9092"]),
    ConfigDef("advertised.listeners", "list", None),
    ConfigDef("listener.security.protocol.map", "list",
              ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"]),
    ConfigDef("inter.broker.listener.name", "string", None),
    ConfigDef("security.inter.broker.protocol", "string", "PLAINTEXT"),
    ConfigDef("socket.send.buffer.bytes", "int", 102400),
    ConfigDef("socket.receive.buffer.bytes", "int", 102400),
    ConfigDef("socket.request.max.bytes", "int", 104857600, at_least(1)),
    ConfigDef("socket.listen.backlog.size", "int", 50, at_least(1)),
    ConfigDef("connections.max.idle.ms", "long", 600000),
    ConfigDef("num.network.threads", "int", 3, at_least(1), read_only=False),
    ConfigDef("num.io.threads", "int", 8, at_least(1), read_only=False),
    ConfigDef("queued.max.requests", "int", 500, at_least(1)),
    ConfigDef("request.timeout.ms", "int", 30000),
    # Logs
    ConfigDef("log.dir", "string", "/tmp/kafka-logs"),
    ConfigDef("log.dirs", "list", None),
    ConfigDef("metadata.log.dir", "string", None),
    ConfigDef("metadata.log.segment.bytes", "int", 1073741824, at_least(12)),
    ConfigDef("metadata.log.segment.ms", "long", 604800000),
    ConfigDef("metadata.max.retention.bytes", "long", 104857600),
    ConfigDef("metadata.max.retention.ms", "long", 604800000),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", "long", 20971520),
    ConfigDef("metadata.log.max.snapshot.interval.ms", "long", 3600000, at_least(0)),
    ConfigDef("num.partitions", "int", 1, at_least(1)),
    ConfigDef("default.replication.factor", "int", 1),
    ConfigDef("auto.create.topics.enable", "boolean", True),
    ConfigDef("delete.topic.enable", "boolean", True),
    ConfigDef("log.segment.bytes", "int", 1073741824, at_least(14), read_only=False),
    ConfigDef("log.roll.hours", "int", 168, at_least(1)),
    ConfigDef("log.roll.ms", "long", None, read_only=False),
    ConfigDef("log.roll.jitter.hours", "int", 0, at_least(0)),
    ConfigDef("log.roll.jitter.ms", "long", None, read_only=False),
    ConfigDef("log.retention.hours", "int", 168),
    ConfigDef("log.retention.minutes", "int", None),
    ConfigDef("log.retention.ms", "long", None, read_only=False),
    ConfigDef("log.retention.bytes", "long", -1, read_only=False),
    ConfigDef("log.retention.check.interval.ms", "long", 300000, at_least(1)),
    ConfigDef("log.cleanup.policy", "list", ["delete"], _CLEANUP, read_only=False),
    ConfigDef("log.cleaner.enable", "boolean", True),
    ConfigDef("log.cleaner.threads", "int", 1, at_least(0), read_only=False),
    ConfigDef("log.cleaner.delete.retention.ms", "long", 86400000, at_least(0), read_only=False),
    ConfigDef("log.cleaner.min.compaction.lag.ms", "long", 0, at_least(0), read_only=False),
    ConfigDef("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, at_least(1), read_only=False),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5, between(0, 1), read_only=False),
    ConfigDef("log.cleaner.backoff.ms", "long", 15000),
    ConfigDef("log.index.size.max.bytes", "int", 10485760, at_least(4), read_only=False),
    ConfigDef("log.index.interval.bytes", "int", 4096, at_least(0), read_only=False),
    ConfigDef("log.flush.interval.messages", "long", LONG_MAX, at_least(1), read_only=False),
    ConfigDef("log.flush.interval.ms", "long", None, read_only=False),
    ConfigDef("log.flush.scheduler.interval.ms", "long", LONG_MAX),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    ConfigDef("log.segment.delete.delay.ms", "long", 60000, at_least(0), read_only=False),
    ConfigDef("log.preallocate", "boolean", False, read_only=False),
    ConfigDef("log.message.timestamp.type", "string", "CreateTime", _TS_TYPE, read_only=False),
    ConfigDef("log.message.timestamp.difference.max.ms", "long", LONG_MAX, at_least(0), read_only=False),
    ConfigDef("log.message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0), read_only=False),
    ConfigDef("log.message.timestamp.after.max.ms", "long", LONG_MAX, at_least(0), read_only=False),
    ConfigDef("log.message.downconversion.enable", "boolean", True, read_only=False),
    ConfigDef("num.recovery.threads.per.data.dir", "int", 1, at_least(1)),
    ConfigDef("message.max.bytes", "int", 1048588, at_least(0), read_only=False),
    ConfigDef("compression.type", "string", "producer", _COMPRESSION, read_only=False),
    ConfigDef("min.insync.replicas", "int", 1, at_least(1), read_only=False),
    ConfigDef("unclean.leader.election.enable", "boolean", False, read_only=False),
    # Replication
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, at_least(0)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500),
    ConfigDef("replica.lag.time.max.ms", "long", 30000),
    ConfigDef("replica.fetch.response.max.bytes", "int", 10485760, at_least(0)),
    ConfigDef("num.replica.fetchers", "int", 1),
    ConfigDef("auto.leader.rebalance.enable", "boolean", True),
    ConfigDef("replica.selector.class", "string", None),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", "long", 5000),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", 300),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", 10),
    # Fetch
    ConfigDef("fetch.max.bytes", "int", 57671680, at_least(1024)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000, at_least(0)),
    # Groups, offsets
    ConfigDef("offsets.topic.num.partitions", "int", 50, at_least(1)),
    ConfigDef("offsets.topic.replication.factor", "short", 3, at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", "int", 104857600, at_least(1)),
    ConfigDef("offsets.topic.compression.codec", "int", 0),
    ConfigDef("offsets.retention.minutes", "int", 10080, at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600000, at_least(1)),
    ConfigDef("offsets.commit.timeout.ms", "int", 5000, at_least(1)),
    ConfigDef("offsets.load.buffer.size", "int", 5242880, at_least(1)),
    ConfigDef("offset.metadata.max.bytes", "int", 4096),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000),
    ConfigDef("group.min.session.timeout.ms", "int", 6000),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000),
    ConfigDef("group.max.size", "int", INT_MAX, at_least(1)),
    ConfigDef("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"]),
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000),
    # Transactions and producers
    ConfigDef("transaction.state.log.num.partitions", "int", 50, at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", "short", 3, at_least(1)),
    ConfigDef("transaction.state.log.min.isr", "int", 2, at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int", 104857600, at_least(1)),
    ConfigDef("transaction.max.timeout.ms", "int", 900000, at_least(1)),
    ConfigDef("transactional.id.expiration.ms", "int", 604800000, at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, at_least(1)),
    ConfigDef("producer.id.expiration.ms", "int", 86400000, at_least(1)),
    ConfigDef("producer.id.expiration.check.interval.ms", "int", 600000, at_least(1)),
    ConfigDef("max.connections", "int", INT_MAX, at_least(0)),
    ConfigDef("max.connections.per.ip", "int", INT_MAX, at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", "string", ""),
    ConfigDef("max.connection.creation.rate", "int", INT_MAX, at_least(0)),
    ConfigDef("quota.window.num", "int", 11, at_least(1)),
    ConfigDef("quota.window.size.seconds", "int", 1, at_least(1)),
    ConfigDef("replication.quota.window.num", "int", 11, at_least(1)),
    ConfigDef("replication.quota.window.size.seconds", "int", 1, at_least(1)),
    # Security (accepted; enforced by kbroker.security later)
    ConfigDef("authorizer.class.name", "string", ""),
    ConfigDef("sasl.enabled.mechanisms", "list", ["GSSAPI"]),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
    ConfigDef("sasl.mechanism.controller.protocol", "string", "GSSAPI"),
    ConfigDef("super.users", "string", None),
    ConfigDef("allow.everyone.if.no.acl.found", "boolean", False),
    ConfigDef("delegation.token.secret.key", "password", None),
    ConfigDef("delegation.token.master.key", "password", None),
    ConfigDef("delegation.token.max.lifetime.ms", "long", 604800000, at_least(1)),
    ConfigDef("delegation.token.expiry.time.ms", "long", 86400000, at_least(1)),
    ConfigDef("delegation.token.expiry.check.interval.ms", "long", 3600000, at_least(1)),
    # Operations (kbroker.metrics): the Prometheus endpoint, off unless a port is given
    ConfigDef("metrics.port", "int", -1, doc="Port of the Prometheus /metrics endpoint; -1 (default) disables it"),
    ConfigDef("metrics.host", "string", "127.0.0.1", doc="Address the metrics endpoint binds"),
    ConfigDef("client.telemetry.metrics", "list", [],
              doc="KIP-714: client metric name prefixes to request (* = all); empty (default) disables telemetry"),
    ConfigDef("client.telemetry.push.interval.ms", "int", 30000, at_least(100)),
    # Storage (kbroker.log.fill_ahead): not in Kafka
    ConfigDef("log.zero.fill.ahead", "boolean", True,
              doc="Write zeros ahead of the appends (256 KiB to 8 MiB) of partitions that fsync every append "
                  "(flush.messages=1), so each fsync overwrites allocated blocks instead of growing "
                  "the file. Turn off on copy-on-write filesystems (btrfs, ZFS), where it only adds writes"),
    ConfigDef("log.allocate.ahead", "boolean", True,
              doc="Allocate disk blocks (fallocate, 64 KiB to 8 MiB, the file's length unchanged) past the "
                  "end of every other partition's active segment, from a worker thread, so an append on the "
                  "event loop does not allocate them (which can wait for the filesystem's metadata I/O). They are "
                  "released at the segment's roll and at shutdown. On tmpfs they are memory: turn it off there"),
]

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_DEFS}

# ---------------------------------------------------------------------------------------------
# Java .properties parsing

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2:i + 6]):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: comments (# !), ``=``/``:``/space separators, ``\\``
    line continuations and escapes."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1] + (lines[i].lstrip(" \t\f") if i < len(lines) else "")
            i += 1
        j = 0
        while j < len(line) and line[j] not in "=: \t\f":
            j += 2 if line[j] == "\\" else 1
        key = line[:j]
        rest = line[j:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


# ---------------------------------------------------------------------------------------------
# Listeners


@dataclass(frozen=True)
class Endpoint:
    listener_name: str
    host: str            # "" = all interfaces (as in Kafka's "PLAINTEXT://:9092")
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


_ENDPOINT_RE = re.compile(r"^([A-Za-z0-9_.-]+)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def parse_endpoints(items: Iterable[str], protocol_map: Mapping[str, str]) -> list[Endpoint]:
    out = []
    for item in items:
        m = _ENDPOINT_RE.match(item.strip())
        if not m:
            raise ConfigError(f"Unable to parse {item} to a broker endpoint")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid port in endpoint {item}")
        proto = protocol_map.get(name)
        if proto is None:
            if name in SECURITY_PROTOCOL_IDS:
                proto = name
            else:
                raise ConfigError(f"No security protocol defined for listener {name}")
        out.append(Endpoint(name, host, port, proto))
    names = [e.listener_name for e in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, listeners: {','.join(items)}")
    return out


@dataclass(frozen=True)
class Voter:
    node_id: int
    host: str
    port: int


def parse_voters(items: Iterable[str]) -> list[Voter]:
    out = []
    for item in items:
        m = re.match(r"^(\d+)@\[?([^\]]+?)\]?:(\d+)$", item.strip())
        if not m:
            raise ConfigError(f"Invalid controller.quorum.voters entry {item!r}: expected id@host:port")
        out.append(Voter(int(m.group(1)), m.group(2), int(m.group(3))))
    return out


# ---------------------------------------------------------------------------------------------
# The broker config object

# The embedded default: one node, broker and controller in one process, data under ./data.
EMBEDDED_DEFAULTS: dict[str, str] = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "controller.quorum.voters": "",
    "log.dirs": "./data",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}
# Only a node that is the whole cluster can make do with one replica of the internal topics; a
# node of a larger cluster started without a file keeps Kafka's defaults (3 replicas, min ISR 2).
SINGLE_NODE_ONLY = ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                    "transaction.state.log.min.isr")


def _part_of_larger_cluster(props: Mapping[str, str]) -> bool:
    voters = [v for v in props.get("controller.quorum.voters", "").split(",") if v.strip()]
    return (len(voters) > 1 or bool(props.get("controller.quorum.bootstrap.servers", "").strip())
            or "controller" not in props.get("process.roles", ""))


class BrokerConfig:
    """Typed, validated broker configuration keyed by Kafka property name."""

    def __init__(self, props: Mapping[str, str] | None = None, *, strict: bool = True) -> None:
        props = dict(props or {})
        self.originals: dict[str, str] = dict(props)
        self.values: dict[str, Any] = {}
        self.unknown: dict[str, str] = {}
        for key, raw in props.items():
            d = BROKER_CONFIGS.get(key)
            if d is None:
                self.unknown[key] = raw
                continue
            self.values[key] = d.parse(raw)
        for key, d in BROKER_CONFIGS.items():
            if key not in self.values:
                self.values[key] = d.default
        if strict:
            self._validate()

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | None = None, overrides: Iterable[str] = (), *, embedded_defaults: bool = True) -> "BrokerConfig":
        """Read a properties file (optional) and ``key=value`` overrides.

        With no file, the embedded single-node defaults apply (``EMBEDDED_DEFAULTS``; the
        one-replica internal topics only while the node is the whole cluster); a file is taken
        as it is, like kafka-server-start.sh.
        """
        props: dict[str, str] = {}
        if path is None:
            if embedded_defaults:
                props.update(EMBEDDED_DEFAULTS)
        else:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        overridden = set()
        for ov in overrides:
            if "=" not in ov:
                raise ConfigError(f"Invalid override {ov!r}: expected key=value")
            k, v = ov.split("=", 1)
            props[k.strip()] = v.strip()
            overridden.add(k.strip())
        if path is None and embedded_defaults and _part_of_larger_cluster(props):
            for k in SINGLE_NODE_ONLY:
                if k not in overridden:
                    props.pop(k, None)
        cfg = cls(props)
        for k in cfg.unknown:
            log.warning("unknown configuration %r = %r (kept, not used)", k, cfg.unknown[k])
        return cfg

    def _validate(self) -> None:
        v = self.values
        if v["node.id"] < 0 and v["broker.id"] >= 0:
            v["node.id"] = v["broker.id"]
        if v["node.id"] < 0:
            raise ConfigError("Missing required configuration node.id which has no default value")
        if v["broker.id"] >= 0 and v["broker.id"] != v["node.id"]:
            raise ConfigError(f"broker.id {v['broker.id']} must equal node.id {v['node.id']}")
        v["broker.id"] = v["node.id"]
        if not v["process.roles"]:
            raise ConfigError("process.roles must be set (broker, controller or both): ZooKeeper mode is not supported")
        eps = self.listeners  # parses and validates
        ctrl = set(self.controller_listener_names)
        if "controller" in v["process.roles"] and ctrl and not any(e.listener_name in ctrl for e in eps):
            raise ConfigError("controller.listener.names must name a listener of this controller")
        if self.is_broker and not self.broker_listeners:
            raise ConfigError("a broker needs at least one listener that is not a controller listener")
        self.advertised_listeners  # parse
        voters = self.voters
        if voters and "controller" in v["process.roles"] and self.node_id not in {x.node_id for x in voters}:
            raise ConfigError(f"node.id {self.node_id} is a controller but is not in controller.quorum.voters")
        from kbroker.security.controller_link import validate as validate_controller_link
        validate_controller_link(self)   # controller listener names, protocol, SASL mechanism
        if v["log.retention.bytes"] < -1:
            raise ConfigError("log.retention.bytes must be at least -1")
        if v["message.max.bytes"] > v["socket.request.max.bytes"]:
            log.warning("message.max.bytes %d exceeds socket.request.max.bytes %d", v["message.max.bytes"], v["socket.request.max.bytes"])

    # -- access ------------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        return self.unknown[key]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def is_default(self, key: str) -> bool:
        return key not in self.originals

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def process_roles(self) -> list[str]:
        return self.values["process.roles"]

    @property
    def is_broker(self) -> bool:
        return "broker" in self.values["process.roles"]

    @property
    def is_controller(self) -> bool:
        return "controller" in self.values["process.roles"]

    @property
    def protocol_map(self) -> dict[str, str]:
        out = {}
        for item in self.values["listener.security.protocol.map"]:
            if ":" not in item:
                raise ConfigError(f"Invalid listener.security.protocol.map entry {item!r}")
            name, proto = item.split(":", 1)
            out[name.strip().upper()] = proto.strip().upper()
        return out

    @property
    def listeners(self) -> list[Endpoint]:
        return parse_endpoints(self.values["listeners"], self.protocol_map)

    @property
    def controller_listener_names(self) -> list[str]:
        """controller.listener.names; when unset on a controller, a listener literally named
        CONTROLLER is taken as the controller listener (Kafka's sample configs' name)."""
        names = [n.upper() for n in self.values["controller.listener.names"]]
        if not names and self.is_controller:
            if any(item.strip().upper().startswith("CONTROLLER://") for item in self.values["listeners"]):
                names = ["CONTROLLER"]
        return names

    @property
    def broker_listeners(self) -> list[Endpoint]:
        ctrl = set(self.controller_listener_names)
        return [e for e in self.listeners if e.listener_name not in ctrl]

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """What Metadata returns: advertised.listeners, else the broker listeners (a wildcard
        or empty host advertises as the canonical host name, here "localhost")."""
        raw = self.values["advertised.listeners"]
        if raw is None:
            eps = self.broker_listeners
        else:
            eps = parse_endpoints(raw, self.protocol_map)
        out = []
        for e in eps:
            if e.host in ("", "0.0.0.0", "::"):
                e = Endpoint(e.listener_name, "localhost", e.port, e.security_protocol)
            out.append(e)
        return out

    @property
    def voters(self) -> list[Voter]:
        return parse_voters(self.values["controller.quorum.voters"])

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.values["log.dirs"]
        return list(dirs) if dirs else [self.values["log.dir"]]

    @property
    def metadata_log_dir(self) -> str:
        return self.values["metadata.log.dir"] or self.log_dirs[0]

    def log_config(self):
        """The topic-level defaults this broker config gives (``kbroker.log.LogConfig``)."""
        from kbroker.log.config import LogConfig

        return LogConfig.broker_defaults(self.originals)
