"""LogConfig: Kafka's per-topic log configuration, by Kafka's names and defaults.

``LogConfig.from_props({"segment.bytes": "1048576", ...})`` parses string properties
(as they arrive in CreateTopics / AlterConfigs / topic records). ``broker_defaults(props)``
turns ``server.properties`` keys (``log.segment.bytes``, ``log.retention.hours`` ...) into
the topic-level defaults, and ``config.with_overrides(topic_props)`` layers a topic's own
configs over them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import InvalidConfigError

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647

# Kafka name -> (attribute, type, default). Order follows Kafka's TopicConfig docs.
_SPEC: dict[str, tuple[str, str, Any]] = {
    "segment.bytes": ("segment_bytes", "int", 1073741824),
    "segment.ms": ("segment_ms", "long", 604800000),
    "segment.jitter.ms": ("segment_jitter_ms", "long", 0),
    "segment.index.bytes": ("segment_index_bytes", "int", 10485760),
    "index.interval.bytes": ("index_interval_bytes", "int", 4096),
    "retention.ms": ("retention_ms", "long", 604800000),
    "retention.bytes": ("retention_bytes", "long", -1),
    "cleanup.policy": ("cleanup_policy", "list", ("delete",)),
    "delete.retention.ms": ("delete_retention_ms", "long", 86400000),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "double", 0.5),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "long", 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "long", LONG_MAX),
    "max.message.bytes": ("max_message_bytes", "int", 1048588),
    "message.timestamp.type": ("message_timestamp_type", "str", "CreateTime"),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", "long", LONG_MAX),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", "long", LONG_MAX),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", "long", LONG_MAX),
    "flush.messages": ("flush_messages", "long", LONG_MAX),
    "flush.ms": ("flush_ms", "long", LONG_MAX),
    "file.delete.delay.ms": ("file_delete_delay_ms", "long", 60000),
    "preallocate": ("preallocate", "bool", False),
    "compression.type": ("compression_type", "str", "producer"),
    "min.insync.replicas": ("min_insync_replicas", "int", 1),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", "bool", False),
    "message.downconversion.enable": ("message_downconversion_enable", "bool", True),
}


# server.properties key -> topic key. Where Kafka has several units the most precise wins.
_BROKER_KEYS: list[tuple[str, str, int]] = [
    # (broker key, topic key, multiplier), listed least to most precise
    ("log.segment.bytes", "segment.bytes", 1),
    ("log.roll.hours", "segment.ms", 3600000),
    ("log.roll.ms", "segment.ms", 1),
    ("log.roll.jitter.hours", "segment.jitter.ms", 3600000),
    ("log.roll.jitter.ms", "segment.jitter.ms", 1),
    ("log.index.size.max.bytes", "segment.index.bytes", 1),
    ("log.index.interval.bytes", "index.interval.bytes", 1),
    ("log.retention.hours", "retention.ms", 3600000),
    ("log.retention.minutes", "retention.ms", 60000),
    ("log.retention.ms", "retention.ms", 1),
    ("log.retention.bytes", "retention.bytes", 1),
    ("log.cleanup.policy", "cleanup.policy", 0),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms", 1),
    ("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio", 0),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms", 1),
    ("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms", 1),
    ("message.max.bytes", "max.message.bytes", 1),
    ("log.message.timestamp.type", "message.timestamp.type", 0),
    ("log.message.timestamp.before.max.ms", "message.timestamp.before.max.ms", 1),
    ("log.message.timestamp.after.max.ms", "message.timestamp.after.max.ms", 1),
    ("log.message.timestamp.difference.max.ms", "message.timestamp.difference.max.ms", 1),
    ("log.flush.interval.messages", "flush.messages", 1),
    ("log.flush.interval.ms", "flush.ms", 1),
    ("log.segment.delete.delay.ms", "file.delete.delay.ms", 1),
    ("log.preallocate", "preallocate", 0),
    ("compression.type", "compression.type", 0),
    ("min.insync.replicas", "min.insync.replicas", 0),
    ("unclean.leader.election.enable", "unclean.leader.election.enable", 0),
]


def _parse(name: str, kind: str, raw: Any) -> Any:
    if not isinstance(raw, str):
        if kind == "list" and isinstance(raw, (list, tuple)):
            return tuple(str(x).strip().lower() for x in raw)
        raw = str(raw).lower() if isinstance(raw, bool) else str(raw)
    s = raw.strip()
    try:
        if kind in ("int", "long"):
            v = int(s)
            lim = INT_MAX if kind == "int" else LONG_MAX
            if not -lim - 1 <= v <= lim:
                raise ValueError("out of range")
            return v
        if kind == "double":
            return float(s)
        if kind == "bool":
            if s.lower() not in ("true", "false"):
                raise ValueError("not a boolean")
            return s.lower() == "true"
        if kind == "list":
            return tuple(p.strip().lower() for p in s.split(",") if p.strip())
        return s
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: {e}") from None


@dataclass(frozen=True)
class LogConfig:
    """Per-topic log settings. Attribute names are Kafka's names with '.' -> '_'."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_downconversion_enable: bool = True
    # properties we do not interpret, kept so DescribeConfigs can echo them
    extra: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None,
                   base: "LogConfig | None" = None) -> "LogConfig":
        """Parse Kafka topic properties (string values), over ``base`` or the defaults."""
        base = base or cls()
        kwargs: dict[str, Any] = {}
        extra = dict(base.extra)
        for name, raw in (props or {}).items():
            spec = _SPEC.get(name)
            if spec is None:
                extra[name] = raw if isinstance(raw, str) else str(raw)
                continue
            attr, kind, _default = spec
            kwargs[attr] = _parse(name, kind, raw)
        return dataclasses.replace(base, extra=extra, **kwargs)

    def with_overrides(self, props: Mapping[str, Any] | None) -> "LogConfig":
        return LogConfig.from_props(props, base=self)

    @classmethod
    def broker_defaults(cls, server_props: Mapping[str, Any] | None) -> "LogConfig":
        """Topic defaults from server.properties keys (log.retention.hours, ...)."""
        topic: dict[str, Any] = {}
        for bkey, tkey, mult in _BROKER_KEYS:
            if server_props and bkey in server_props:
                raw = server_props[bkey]
                if mult > 1:
                    kind = _SPEC[tkey][1]
                    v = _parse(bkey, kind, raw)
                    topic[tkey] = str(v * mult if v >= 0 else v)
                else:
                    topic[tkey] = raw
        return cls.from_props(topic)

    def to_props(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, (attr, kind, _d) in _SPEC.items():
            v = getattr(self, attr)
            if kind == "list":
                out[name] = ",".join(v)
            elif kind == "bool":
                out[name] = "true" if v else "false"
            else:
                out[name] = str(v)
        out.update(self.extra)
        return out

    @staticmethod
    def names() -> list[str]:
        return list(_SPEC)

    @staticmethod
    def default_props() -> dict[str, str]:
        return LogConfig().to_props()

    # -- validation -----------------------------------------------------------------
    def validate(self) -> None:
        def bad(name: str, why: str) -> None:
            raise InvalidConfigError(
                f"Invalid value {getattr(self, _SPEC[name][0])!r} for configuration {name}: {why}")

        if self.segment_bytes < 14:
            bad("segment.bytes", "value must be at least 14")
        if self.segment_ms < 1:
            bad("segment.ms", "value must be at least 1")
        if self.segment_index_bytes < 4:
            bad("segment.index.bytes", "value must be at least 4")
        if self.index_interval_bytes < 0:
            bad("index.interval.bytes", "value must be at least 0")
        if self.retention_ms < -1:
            bad("retention.ms", "value must be at least -1")
        for p in self.cleanup_policy:
            if p not in ("delete", "compact"):
                bad("cleanup.policy", "allowed values are delete, compact")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            bad("min.cleanable.dirty.ratio", "value must be between 0 and 1")
        if self.max_message_bytes < 0:
            bad("max.message.bytes", "value must be at least 0")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            bad("message.timestamp.type", "allowed values are CreateTime, LogAppendTime")
        if self.flush_messages < 1:
            bad("flush.messages", "value must be at least 1")
        if self.flush_ms < 0:
            bad("flush.ms", "value must be at least 0")
        if self.file_delete_delay_ms < 0:
            bad("file.delete.delay.ms", "value must be at least 0")
        if self.min_compaction_lag_ms < 0:
            bad("min.compaction.lag.ms", "value must be at least 0")
        if self.max_compaction_lag_ms < 1:
            bad("max.compaction.lag.ms", "value must be at least 1")
        if self.min_insync_replicas < 1:
            bad("min.insync.replicas", "value must be at least 1")

    # -- derived --------------------------------------------------------------------
    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """Effective bound (Kafka: the deprecated difference.max.ms applies when lower)."""
        return min(self.message_timestamp_before_max_ms, self.message_timestamp_difference_max_ms)

    @property
    def timestamp_after_max_ms(self) -> int:
        return min(self.message_timestamp_after_max_ms, self.message_timestamp_difference_max_ms)

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, capped by max.compaction.lag.ms for compacted topics (KIP-354)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def group_commit(self) -> bool:
        """flush.messages=1: every append must be fsynced before it is acknowledged.
        The log then groups the fsyncs of concurrent appends (see PartitionLog.sync)."""
        return self.flush_messages == 1
