"""The group coordinator's settings, read from the broker's Kafka-named properties."""
from __future__ import annotations

from dataclasses import dataclass, field

INT_MAX = 2**31 - 1


@dataclass
class GroupConfig:
    num_partitions: int = 50                       # offsets.topic.num.partitions
    initial_rebalance_delay_ms: int = 3000         # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000             # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000          # group.max.session.timeout.ms
    max_size: int = INT_MAX                        # group.max.size
    offsets_retention_ms: int = 10080 * 60_000     # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096          # offset.metadata.max.bytes
    consumer_session_timeout_ms: int = 45000       # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5000     # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = INT_MAX               # group.consumer.max.size
    consumer_assignors: list[str] = field(default_factory=lambda: ["uniform", "range"])
    new_member_join_timeout_ms: int = 5 * 60_000   # Kafka's fixed timeout for a new member's first join
    rebalance_protocols: list[str] = field(default_factory=lambda: ["classic", "consumer"])
    commit_timeout_ms: int = 5000                  # offsets.commit.timeout.ms: a write's wait for the ISR

    @classmethod
    def from_broker(cls, cfg) -> "GroupConfig":
        """``cfg`` is a kbroker.config.BrokerConfig (anything with ``.get(name, default)``)."""
        def get(name, default):
            v = cfg.get(name, default)
            return default if v is None else v

        def as_int(name, default):
            return int(get(name, default))

        assignors = get("group.consumer.assignors", ["uniform", "range"])
        if isinstance(assignors, str):
            assignors = [a.strip() for a in assignors.split(",") if a.strip()]
        # Kafka accepts class names too; keep the short names our assignors answer to.
        assignors = [a.rsplit(".", 1)[-1].replace("Assignor", "").lower() for a in assignors]
        protocols = get("group.coordinator.rebalance.protocols", ["classic", "consumer"])
        if isinstance(protocols, str):
            protocols = [p.strip() for p in protocols.split(",") if p.strip()]
        return cls(
            num_partitions=as_int("offsets.topic.num.partitions", 50),
            initial_rebalance_delay_ms=as_int("group.initial.rebalance.delay.ms", 3000),
            min_session_timeout_ms=as_int("group.min.session.timeout.ms", 6000),
            max_session_timeout_ms=as_int("group.max.session.timeout.ms", 1800000),
            max_size=as_int("group.max.size", INT_MAX),
            offsets_retention_ms=as_int("offsets.retention.minutes", 10080) * 60_000,
            offsets_retention_check_interval_ms=as_int("offsets.retention.check.interval.ms", 600000),
            offset_metadata_max_bytes=as_int("offset.metadata.max.bytes", 4096),
            consumer_session_timeout_ms=as_int("group.consumer.session.timeout.ms", 45000),
            consumer_heartbeat_interval_ms=as_int("group.consumer.heartbeat.interval.ms", 5000),
            consumer_max_size=as_int("group.consumer.max.size", INT_MAX),
            consumer_assignors=assignors or ["uniform"],
            rebalance_protocols=[p.lower() for p in protocols],
            commit_timeout_ms=as_int("offsets.commit.timeout.ms", 5000),
        )
