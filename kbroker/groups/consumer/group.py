"""A KIP-848 consumer group: members, epochs, target assignment and partition ownership."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any

from kbroker.groups.records import ConsumerMemberValue, CurrentAssignmentValue

Assignment = dict[Any, set[int]]        # topic id -> partitions


class ConsumerGroupState(str, Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1      # must give up partitions before getting anything new
    UNRELEASED_PARTITIONS = 2     # waits for partitions other members still own
    UNKNOWN = 127


LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


def copy_assignment(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items() if ps}


def to_lists(a: Assignment) -> dict[Any, list[int]]:
    return {t: sorted(ps) for t, ps in a.items() if ps}


def from_lists(a: dict[Any, list[int]] | None) -> Assignment:
    return {t: set(ps) for t, ps in (a or {}).items() if ps}


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # (topic id, partition) -> the member epoch at which the partition was assigned to this
    # member (KIP-1251), for OffsetCommit. Kept in memory only: the 4.0 record schema has no
    # field for it, so a replayed partition counts from the epoch of the record that added it.
    assignment_epochs: dict = field(default_factory=dict)

    def metadata_value(self) -> ConsumerMemberValue:
        return ConsumerMemberValue(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                   list(self.subscribed_topic_names), self.subscribed_topic_regex,
                                   self.rebalance_timeout_ms, self.server_assignor)

    def apply_metadata(self, v: ConsumerMemberValue) -> None:
        self.instance_id, self.rack_id = v.instance_id, v.rack_id
        self.client_id, self.client_host = v.client_id, v.client_host
        self.subscribed_topic_names = list(v.subscribed_topic_names)
        self.subscribed_topic_regex = v.subscribed_topic_regex
        self.rebalance_timeout_ms, self.server_assignor = v.rebalance_timeout_ms, v.server_assignor

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                      to_lists(self.assigned), to_lists(self.pending_revocation))

    def apply_assignment(self, v: CurrentAssignmentValue) -> None:
        self.member_epoch, self.previous_member_epoch = v.member_epoch, v.previous_member_epoch
        try:
            self.state = MemberState(v.state)
        except ValueError:
            self.state = MemberState.UNKNOWN
        self.set_assignment(from_lists(v.assigned), from_lists(v.pending_revocation))

    def set_assignment(self, assigned: Assignment, pending_revocation: Assignment) -> None:
        """Replace the current assignment; partitions new to the member are stamped with its
        (new) member epoch, partitions it keeps or must still revoke keep their stamp."""
        self.assigned, self.pending_revocation = assigned, pending_revocation
        stamp = max(self.member_epoch, 0)
        epochs = {}
        for a in (assigned, pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    epochs[(t, p)] = self.assignment_epochs.get((t, p), stamp)
        self.assignment_epochs = epochs

    def assignment_epoch(self, topic_id, partition: int) -> int | None:
        """When (t, p) was assigned to this member, or None if it does not own it."""
        return self.assignment_epochs.get((topic_id, partition))


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)       # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)        # member id -> target
    subscription_metadata: dict[str, tuple[Any, int]] = field(default_factory=dict)  # name -> (id, n)
    owners: dict[tuple[Any, int], str] = field(default_factory=dict)   # partition -> owning member
    dead: bool = False

    kind = "consumer"
    protocol_type = "consumer"

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_of(self, topic_id, partition: int) -> str | None:
        return self.owners.get((topic_id, partition))

    def set_member_partitions(self, member: ConsumerMember) -> None:
        """Re-point ownership after ``member``'s assigned/pending sets changed."""
        for key in [k for k, v in self.owners.items() if v == member.member_id]:
            del self.owners[key]
        for a in (member.assigned, member.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    self.owners[(t, p)] = member.member_id

    def release_member_partitions(self, member_id: str) -> None:
        for key in [k for k, v in self.owners.items() if v == member_id]:
            del self.owners[key]

    def add_member(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        m = self.members.pop(member_id, None)
        if m is not None and m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
            del self.static_members[m.instance_id]
        self.target.pop(member_id, None)
        self.release_member_partitions(member_id)
        return m

    def subscribed_topics(self) -> set[str]:
        return set(self.subscription_metadata)
