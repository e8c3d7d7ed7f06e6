"""The group coordinator's log records, as plain values.

One class per key type of Kafka's group-coordinator schemas (OffsetCommitKey,
GroupMetadataKey, ConsumerGroup*Key). ``value is None`` is a tombstone. The state machines
produce and replay these; ``record_codec`` turns them into __consumer_offsets key/value bytes.
Topic-keyed maps use topic ids (whatever the metadata image uses: ``uuid.UUID``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# --- offsets -------------------------------------------------------------------------------

@dataclass
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = -1      # only set by OffsetCommit v2-4 with an explicit retention


@dataclass
class OffsetCommitRecord:
    group: str
    topic: str
    partition: int
    value: OffsetValue | None


# --- classic groups ------------------------------------------------------------------------

@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberMetadata] = field(default_factory=list)


@dataclass
class GroupMetadataRecord:
    group: str
    value: GroupMetadataValue | None


# --- consumer groups (KIP-848) ------------------------------------------------------------

@dataclass
class ConsumerGroupMetadataRecord:
    group: str
    epoch: int | None


@dataclass
class ConsumerGroupPartitionMetadataRecord:
    group: str
    topics: dict[str, tuple[Any, int]] | None     # name -> (topic id, partition count)


@dataclass
class ConsumerMemberValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass
class ConsumerGroupMemberMetadataRecord:
    group: str
    member_id: str
    value: ConsumerMemberValue | None


@dataclass
class ConsumerGroupTargetAssignmentMetadataRecord:
    group: str
    epoch: int | None


@dataclass
class ConsumerGroupTargetAssignmentMemberRecord:
    group: str
    member_id: str
    partitions: dict[Any, list[int]] | None


@dataclass
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: dict[Any, list[int]]
    pending_revocation: dict[Any, list[int]]


@dataclass
class ConsumerGroupCurrentMemberAssignmentRecord:
    group: str
    member_id: str
    value: CurrentAssignmentValue | None
