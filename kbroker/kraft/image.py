"""The metadata image: the cluster state that the metadata log's records describe.

``MetadataImage.apply(record)`` replays one metadata record (a generated class from
``metadata/*.json``). The controller keeps one image (its view, including records it has just
written) and the broker side another (what has been committed and published); both are
rebuilt at start-up by replaying the metadata log. Apply is the only mutator.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kbroker.security.image import SecurityImage

# ConfigRecord resource types (Kafka's ConfigResource.Type)
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@dataclass
class PartitionState:
    partition_id: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: list[int] = field(default_factory=list)
    adding_replicas: list[int] = field(default_factory=list)


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: dict[str, tuple[str, int, int]]  # listener name -> (host, port, security protocol)
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False


class MetadataImage:
    def __init__(self) -> None:
        self.offset = -1                                    # offset of the last applied record
        self.features: dict[str, int] = {}
        self.topics_by_name: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.next_producer_id = 0                          # first id of the next block to hand out
        self.security = SecurityImage()                    # SCRAM, ACLs, quotas, tokens

    # -- queries -----------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_configs(self, name: str) -> dict[str, str]:
        return self.configs.get((TOPIC_RESOURCE, name), {})

    def live_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if not b.fenced]

    # -- replay ------------------------------------------------------------------------------

    def apply(self, record: Any, offset: int = -1) -> Any:
        """Replay one record. Returns what it removed, when that is useful to a publisher
        (the TopicImage for RemoveTopicRecord), else None."""
        fn = getattr(self, "_apply_" + type(record).__name__, None)
        out = fn(record) if fn is not None else None
        if fn is None and type(record).__name__ in SecurityImage.HANDLES:
            self.security.apply(record)
        if offset >= 0:
            self.offset = offset
        return out

    def _apply_FeatureLevelRecord(self, r) -> None:
        if r.feature_level == 0:
            self.features.pop(r.name, None)
        else:
            self.features[r.name] = r.feature_level

    def _apply_TopicRecord(self, r) -> None:
        t = TopicImage(r.name, r.topic_id)
        self.topics_by_name[r.name] = t
        self.topics_by_id[r.topic_id] = t

    def _apply_PartitionRecord(self, r) -> None:
        t = self.topics_by_id.get(r.topic_id)
        if t is None:
            raise ValueError(f"PartitionRecord for unknown topic id {r.topic_id}")
        t.partitions[r.partition_id] = PartitionState(
            r.partition_id, list(r.replicas), list(r.isr), r.leader, r.leader_epoch,
            r.partition_epoch, list(r.removing_replicas), list(r.adding_replicas))

    def _apply_PartitionChangeRecord(self, r) -> None:
        t = self.topics_by_id.get(r.topic_id)
        if t is None or r.partition_id not in t.partitions:
            return
        p = t.partitions[r.partition_id]
        if r.isr is not None:
            p.isr = list(r.isr)
        if r.replicas is not None:
            p.replicas = list(r.replicas)
        if r.removing_replicas is not None:
            p.removing_replicas = list(r.removing_replicas)
        if r.adding_replicas is not None:
            p.adding_replicas = list(r.adding_replicas)
        if r.leader != -2:               # -2: no change (NO_LEADER_CHANGE)
            p.leader = r.leader
            p.leader_epoch += 1
        p.partition_epoch += 1

    def _apply_RemoveTopicRecord(self, r) -> TopicImage | None:
        t = self.topics_by_id.pop(r.topic_id, None)
        if t is not None:
            self.topics_by_name.pop(t.name, None)
            self.configs.pop((TOPIC_RESOURCE, t.name), None)
        return t

    def _apply_ConfigRecord(self, r) -> None:
        key = (r.resource_type, r.resource_name)
        if r.value is None:
            cfg = self.configs.get(key)
            if cfg is not None:
                cfg.pop(r.name, None)
                if not cfg:
                    del self.configs[key]
        else:
            self.configs.setdefault(key, {})[r.name] = r.value

    def _apply_RegisterBrokerRecord(self, r) -> None:
        eps = {e.name: (e.host, e.port, e.security_protocol) for e in r.end_points}
        self.brokers[r.broker_id] = BrokerRegistration(
            r.broker_id, r.broker_epoch, r.incarnation_id, eps, r.rack, r.fenced,
            getattr(r, "in_controlled_shutdown", False))

    def _apply_UnregisterBrokerRecord(self, r) -> None:
        self.brokers.pop(r.broker_id, None)

    def _apply_FenceBrokerRecord(self, r) -> None:
        b = self.brokers.get(r.id)
        if b is not None:
            b.fenced = True

    def _apply_UnfenceBrokerRecord(self, r) -> None:
        b = self.brokers.get(r.id)
        if b is not None:
            b.fenced = False

    def _apply_BrokerRegistrationChangeRecord(self, r) -> None:
        b = self.brokers.get(r.broker_id)
        if b is None:
            return
        if r.fenced == 1:
            b.fenced = True
        elif r.fenced == -1:
            b.fenced = False
        if getattr(r, "in_controlled_shutdown", 0) == 1:
            b.in_controlled_shutdown = True

    def _apply_ProducerIdsRecord(self, r) -> None:
        self.next_producer_id = r.next_producer_id
