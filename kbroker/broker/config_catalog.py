"""What DescribeConfigs reports and what the alter APIs accept: config types, broker
synonyms of topic configs, config sources, and value validation.

Topic configs resolve as Kafka resolves them: the topic's own value (DYNAMIC_TOPIC_CONFIG),
else its broker synonym (``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``)
taken from the per-broker dynamic config, the cluster-wide dynamic default, server.properties,
and the broker's built-in default, in that order. ``LogConfig`` (``kbroker.log.config``) holds
the values the logs use; this module only describes and validates them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kbroker.config import BROKER_CONFIGS, ConfigError, format_value
from kbroker.kraft.image import BROKER_RESOURCE
from kbroker.log.config import LogConfig
from kbroker.log.errors import InvalidConfigError
from kbroker.replication import throttle

# DescribeConfigs ConfigSource ids (Kafka's DescribeConfigsResponse.ConfigSource)
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6

# DescribeConfigs ConfigType ids
_TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
             "list": 7, "class": 8, "password": 9}

LONG_MAX = 2**63 - 1

# Topic config -> (Kafka type, built-in default as Kafka prints it). LogConfig's names plus
# those Kafka accepts and we keep without interpreting (tiered storage, codec levels,
# replication throttles).
_TOPIC_DEFAULTS = {name: value for name, value in LogConfig().to_props().items()}
TOPIC_CONFIGS: dict[str, tuple[str, str | None]] = {
    "cleanup.policy": ("list", "delete"),
    "compression.gzip.level": ("int", "-1"),
    "compression.lz4.level": ("int", "9"),
    "compression.type": ("string", "producer"),
    "compression.zstd.level": ("int", "3"),
    "delete.retention.ms": ("long", None),
    "file.delete.delay.ms": ("long", None),
    "flush.messages": ("long", None),
    "flush.ms": ("long", None),
    "follower.replication.throttled.replicas": ("list", ""),
    "index.interval.bytes": ("int", None),
    "leader.replication.throttled.replicas": ("list", ""),
    "local.retention.bytes": ("long", "-2"),
    "local.retention.ms": ("long", "-2"),
    "max.compaction.lag.ms": ("long", None),
    "max.message.bytes": ("int", None),
    "message.downconversion.enable": ("boolean", None),
    "message.timestamp.after.max.ms": ("long", None),
    "message.timestamp.before.max.ms": ("long", None),
    "message.timestamp.difference.max.ms": ("long", None),
    "message.timestamp.type": ("string", None),
    "min.cleanable.dirty.ratio": ("double", None),
    "min.compaction.lag.ms": ("long", None),
    "min.insync.replicas": ("int", None),
    "preallocate": ("boolean", None),
    "remote.log.copy.disable": ("boolean", "false"),
    "remote.log.delete.on.disable": ("boolean", "false"),
    "remote.storage.enable": ("boolean", "false"),
    "retention.bytes": ("long", None),
    "retention.ms": ("long", None),
    "segment.bytes": ("int", None),
    "segment.index.bytes": ("int", None),
    "segment.jitter.ms": ("long", None),
    "segment.ms": ("long", None),
    "unclean.leader.election.enable": ("boolean", None),
}
# None above: the default is LogConfig's
TOPIC_CONFIGS = {n: (t, d if d is not None else _TOPIC_DEFAULTS[n]) for n, (t, d) in TOPIC_CONFIGS.items()}

# Topic config -> its broker synonyms, highest priority first (Kafka's ServerTopicConfigSynonyms).
TOPIC_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.bytes": ("log.segment.bytes",),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "max.message.bytes": ("message.max.bytes",),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "cleanup.policy": ("log.cleanup.policy",),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "min.insync.replicas": ("min.insync.replicas",),
    "compression.type": ("compression.type",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "preallocate": ("log.preallocate",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
    "local.retention.ms": ("log.local.retention.ms",),
    "local.retention.bytes": ("log.local.retention.bytes",),
}

# Value checks LogConfig does not make (it keeps these as opaque strings).
_RANGES = {
    "compression.gzip.level": lambda v: v == -1 or 1 <= v <= 9,
    "compression.lz4.level": lambda v: 1 <= v <= 17,
    "compression.zstd.level": lambda v: -131072 <= v <= 22,
    "local.retention.ms": lambda v: v >= -2,
    "local.retention.bytes": lambda v: v >= -2,
}
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "short": (-(2**15), 2**15 - 1), "long": (-(2**63), LONG_MAX)}


def is_list_config(name: str) -> bool:
    return TOPIC_CONFIGS.get(name, ("",))[0] == "list"


def _check_type(name: str, kind: str, raw: str) -> Any:
    """Kafka's ConfigDef.parseType, with its messages."""
    s = raw.strip()
    if kind in _INT_RANGE:
        try:
            v = int(s)
        except ValueError:
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: Not a number of type {kind.upper()}") from None
        lo, hi = _INT_RANGE[kind]
        if not lo <= v <= hi:
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: Not a number of type {kind.upper()}")
        return v
    if kind == "double":
        try:
            return float(s)
        except ValueError:
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: Not a number of type DOUBLE") from None
    if kind == "boolean":
        if s.lower() not in ("true", "false"):
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: Expected value to be either true or false")
        return s.lower() == "true"
    return s


def validate_topic_configs(configs: Mapping[str, str | None], base: LogConfig | None = None) -> LogConfig:
    """The whole set of a topic's own configs, as the controller checks it before any change:
    known names, typed values, LogConfig's range and cross-field checks. Raises
    InvalidConfigError (INVALID_CONFIG) with Kafka's wording."""
    for name, raw in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        if raw is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
        v = _check_type(name, spec[0], raw)
        check = _RANGES.get(name)
        if check is not None and not check(v):
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: value out of range")
        if name in throttle.REPLICAS_CONFIGS and not throttle.valid_replicas_list(raw):
            listed = "[" + ", ".join(p.strip() for p in raw.split(",")) + "]"
            raise InvalidConfigError(
                f"Invalid value {listed} for configuration {name}: {name} must be the literal '*' or a list of "
                "replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
        if name == "compression.type" and v.lower() not in _COMPRESSION_TYPES:
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: String must be one of: "
                                     + ", ".join(_COMPRESSION_TYPES))
    cfg = LogConfig.from_props(dict(configs), base=base)   # ranges (validate() in __post_init__)
    if cfg.min_compaction_lag_ms > cfg.max_compaction_lag_ms:
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({cfg.min_compaction_lag_ms}) > "
            f"max.compaction.lag.ms ({cfg.max_compaction_lag_ms})")
    return cfg


def validate_broker_change(name: str, raw: str | None) -> None:
    """A dynamic broker config change; ValueError (INVALID_REQUEST, as Kafka answers) when the
    config cannot change at runtime or the value does not parse. Names Kafka does not know
    are accepted and kept, as Kafka does (custom configs)."""
    if name in throttle.RATE_CONFIGS:
        if raw is not None:
            v = _check_type(name, "long", raw) if raw.strip() else None
            if v is None or v < 0:
                raise ValueError(f"Invalid value {raw} for configuration {name}: Value must be at least 0")
        return
    d = BROKER_CONFIGS.get(name)
    if d is None:
        return
    if d.read_only:
        raise ValueError(f"Cannot update these configs dynamically: Set({name})")
    if raw is not None:
        try:
            d.parse(raw)
        except ConfigError as e:
            raise ValueError(str(e)) from None


# -- the broker's config layers --------------------------------------------------------------

@dataclass
class BrokerLayers:
    """A broker's config values by source, each name -> the value as set (a string)."""
    node_id: int
    dynamic_broker: Mapping[str, str] = field(default_factory=dict)
    dynamic_default: Mapping[str, str] = field(default_factory=dict)
    static: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, config, image) -> "BrokerLayers":
        return cls(config.node_id,
                   image.configs.get((BROKER_RESOURCE, str(config.node_id)), {}),
                   image.configs.get((BROKER_RESOURCE, ""), {}),
                   {k: v for k, v in config.originals.items() if v is not None})

    def merged(self) -> dict[str, str]:
        """What the broker runs with: per-broker dynamic > cluster default > server.properties."""
        return {**self.static, **self.dynamic_default, **self.dynamic_broker}

    def topic_defaults(self) -> LogConfig:
        """Topic-level defaults (log.retention.hours -> retention.ms ...) from every layer."""
        return LogConfig.broker_defaults(self.merged())

    def synonyms(self, names, only_dynamic_default: bool = False) -> list[tuple[str, str | None, int]]:
        """(name, value, source) of each of ``names`` set in some layer, most important first."""
        layers = [(DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default)] if only_dynamic_default else [
            (DYNAMIC_BROKER_CONFIG, self.dynamic_broker), (DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default),
            (STATIC_BROKER_CONFIG, self.static), (DEFAULT_CONFIG, _BUILTIN_BROKER_DEFAULTS)]
        out = []
        for source, layer in layers:
            for n in names:
                if n in layer:
                    out.append((n, _shown(n, layer[n]), source))
        return out


_BUILTIN_BROKER_DEFAULTS = {d.name: format_value(d.default) for d in BROKER_CONFIGS.values()
                            if d.default is not None}


def _broker_type(name: str) -> str | None:
    d = BROKER_CONFIGS.get(name)
    return d.type if d is not None else None


def _sensitive(kind: str | None) -> bool:
    # Kafka: a password, or a config of unknown type (it might hold a secret)
    return kind is None or kind == "password"


def _shown(name: str, value: str | None) -> str | None:
    return None if _sensitive(_broker_type(name)) else value


# -- DescribeConfigs entries -----------------------------------------------------------------

@dataclass
class Entry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)
    config_type: int = 0
    documentation: str | None = None


def topic_entries(overrides: Mapping[str, str], layers: BrokerLayers,
                  effective: LogConfig) -> list[Entry]:
    """Every topic config with its effective value (``effective``: the LogConfig the topic's
    logs use). Synonyms are the topic's own value, then every broker synonym that is set,
    so the source says where the value comes from."""
    props = effective.to_props()
    out = []
    for name, (kind, default) in TOPIC_CONFIGS.items():
        syns: list = []
        if name in overrides:
            syns.append((name, overrides[name], DYNAMIC_TOPIC_CONFIG))
        syns += layers.synonyms(TOPIC_SYNONYMS.get(name, ()))
        value = overrides.get(name, props.get(name))
        if value is None:        # configs LogConfig keeps opaque: the broker's, else Kafka's default
            broker_value = next((v for n, v, s in syns if s != DYNAMIC_TOPIC_CONFIG), None)
            value = broker_value if broker_value is not None else default
        source = syns[0][2] if syns else DEFAULT_CONFIG
        out.append(Entry(name, value, source, False, False, syns, _TYPE_IDS.get(kind, 0)))
    return out


def broker_entries(layers: BrokerLayers, per_broker: bool) -> list[Entry]:
    """The broker's configs: all of them for ``<node id>``, the cluster-wide dynamic defaults
    for the empty name (Kafka's two BROKER resources)."""
    if per_broker:
        names = list(BROKER_CONFIGS) + [n for n in layers.merged() if n not in BROKER_CONFIGS]
    else:
        names = list(layers.dynamic_default)
    out = []
    for name in names:
        kind = _broker_type(name)
        d = BROKER_CONFIGS.get(name)
        syns = layers.synonyms(_broker_synonyms(name), only_dynamic_default=not per_broker)
        # Kafka drops synonyms ranked above the described name (log.retention.ms when describing
        # log.retention.hours): they are other configs, not sources of this one.
        while syns and syns[0][0] != name:
            syns.pop(0)
        if per_broker:
            value = layers.merged().get(name)
            if value is None and d is not None:
                value = format_value(d.default)
        else:
            value = layers.dynamic_default.get(name)
        sensitive = _sensitive(kind)
        out.append(Entry(name, None if sensitive else value, syns[0][2] if syns else DEFAULT_CONFIG,
                         read_only=d.read_only if d is not None else True, sensitive=sensitive,
                         synonyms=syns, config_type=_TYPE_IDS.get(kind, 0),
                         documentation=(d.doc or None) if d is not None else None))
    return out


def _broker_synonyms(name: str) -> tuple[str, ...]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms."""
    for group in (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                  ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
                  ("log.retention.ms", "log.retention.minutes", "log.retention.hours")):
        if name in group:
            return group
    return (name,)
