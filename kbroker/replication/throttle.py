"""Replication throttles (KIP-73), as Kafka's ReplicationQuotaManager applies them.

Two quotas per broker, one for what it sends as a leader and one for what it fetches as a
follower, each bounded by a dynamic broker config (``leader.replication.throttled.rate``,
``follower.replication.throttled.rate``; per broker, else the cluster default, else
unbounded) and applied only to the partitions a topic config names for this broker
(``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``:
``partition:broker`` pairs, or ``*``). ``kafka-reassign-partitions --throttle`` sets all four.

A replica in the ISR is never throttled, so throttles slow catch-up (reassignment, a new
replica) and never an acks=all produce. When the quota is exceeded the leader answers a
throttled partition with no records and the follower leaves it out of its Fetch; the bytes
that did move are recorded afterwards, so a quota is enforced on average over the sample
windows (``replication.quota.window.num`` x ``replication.quota.window.size.seconds``).

Pure: the caller passes the time and a function that returns the metadata image.
"""

from __future__ import annotations

from typing import Any, Callable

from kbroker.kraft.image import BROKER_RESOURCE
from kbroker.security.quotas import SampledRate   # Kafka's rate: over at least one window, as SimpleRate

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
ALTER_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"   # accepted, not enforced
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
# Kafka's dynamic-only broker quotas (bytes/s, at least 0): per broker or the cluster default
RATE_CONFIGS = (LEADER_RATE, FOLLOWER_RATE, ALTER_DIRS_RATE)
REPLICAS_CONFIGS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
UNBOUNDED = 2**63 - 1
ALL = "*"


def valid_replicas_list(value: str) -> bool:
    """Kafka's ThrottledReplicaListValidator: the literal ``*``, or ``partition:broker`` pairs
    separated by commas (blank entries allowed)."""
    entries = [e.strip() for e in value.split(",")]
    if "".join(entries) == ALL:
        return True
    for e in entries:
        part, sep, broker = e.partition(":")
        if e and not (sep and part.isascii() and part.isdigit() and broker.isascii() and broker.isdigit()):
            return False
    return True


def throttled_partitions(value: str | None, node_id: int) -> frozenset[int] | str:
    """The partitions ``value`` (a ``*.replication.throttled.replicas`` config) throttles on
    broker ``node_id``: ``ALL``, or a set of partition ids."""
    value = (value or "").strip()
    if value == ALL:
        return ALL
    out = set()
    for entry in value.split(","):
        part, sep, broker = entry.strip().partition(":")
        if sep and broker.strip() == str(node_id):
            out.add(int(part))
    return frozenset(out)


class ReplicationQuota:
    """One direction's throttle on one broker."""

    def __init__(self, node_id: int, rate_config: str, replicas_config: str,
                 image: Callable[[], Any], samples: int = 11, window_ms: int = 1000) -> None:
        self.node_id = node_id
        self.rate_config = rate_config
        self.replicas_config = replicas_config
        self._image = image
        self.measured = SampledRate(samples, window_ms)
        self._parsed: dict[str, tuple[str, frozenset[int] | str]] = {}   # topic -> (raw, parsed)

    def bound(self) -> int:
        """Bytes/s this broker may move for throttled partitions (UNBOUNDED when not set)."""
        configs = self._image().configs
        for key in ((BROKER_RESOURCE, str(self.node_id)), (BROKER_RESOURCE, "")):
            v = configs.get(key, {}).get(self.rate_config)
            if v is not None:
                return int(v)
        return UNBOUNDED

    def is_throttled(self, topic: str, partition: int) -> bool:
        raw = self._image().topic_configs(topic).get(self.replicas_config)
        if not raw:
            return False
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != raw:
            cached = self._parsed[topic] = (raw, throttled_partitions(raw, self.node_id))
        parts = cached[1]
        return parts == ALL or partition in parts

    def exceeded(self, now_ms: int) -> bool:
        bound = self.bound()
        return bound < UNBOUNDED and self.measured.rate(now_ms) > bound

    def holds(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Whether a replica's data waits while the quota is exceeded: out of the ISR and
        throttled here (callers ask ``exceeded`` once per request first)."""
        return not in_sync and self.is_throttled(topic, partition)

    def record(self, nbytes: int, now_ms: int) -> None:
        self.measured.record(nbytes, now_ms)


class ReplicationThrottles:
    """A broker's two quotas."""

    def __init__(self, node_id: int, image: Callable[[], Any], samples: int = 11,
                 window_ms: int = 1000) -> None:
        self.leader = ReplicationQuota(node_id, LEADER_RATE, LEADER_REPLICAS, image, samples, window_ms)
        self.follower = ReplicationQuota(node_id, FOLLOWER_RATE, FOLLOWER_REPLICAS, image, samples, window_ms)
