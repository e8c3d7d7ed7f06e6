"""One classic group: members, generation, chosen protocol, and its state.

Pure data plus small queries; the protocol logic that moves it between states lives in
``classic.protocol``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kbroker.groups.records import GroupMetadataValue, MemberMetadata


class GroupState(str, Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Which states a group may move to from each state (Kafka's ClassicGroupState).
VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                     GroupState.PREPARING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_token: Any = None          # a parked JoinGroup, answered when the join phase ends
    sync_token: Any = None          # a parked SyncGroup, answered when the leader assigns
    join_version: int = 0           # JoinGroup version of the parked request (skip_assignment needs v9)
    is_new: bool = False            # joined during this rebalance; may expire while waiting

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def has_satisfied_heartbeat(self) -> bool:
        # A parked join/sync is itself proof of life, except for brand-new members.
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    state_timestamp: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)   # instance id -> member id
    pending_members: set[str] = field(default_factory=set)          # MEMBER_ID_REQUIRED issued
    pending_sync: set[str] = field(default_factory=set)              # joined, not yet synced
    new_member_added: bool = False
    # protocol name -> members listing it, kept by add/remove/set_protocols: a join checks
    # support in O(protocols), not O(members) (500 members joining walked 500 x 500)
    protocol_counts: Counter = field(default_factory=Counter)

    kind = "classic"

    # -- state ------------------------------------------------------------------------------

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state] and state != self.state:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state} -> {state}")
        self.previous_state, self.state = self.state, state
        self.state_timestamp = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members ----------------------------------------------------------------------------

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.protocol_counts.update(set(member.protocol_names()))
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._uncount(member)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def set_protocols(self, member: ClassicMember, protocols: list[tuple[str, bytes]]) -> None:
        """A member's new protocol list (the only way to change one, for the counts)."""
        counted = self.members.get(member.member_id) is member
        if counted:
            self._uncount(member)
        member.protocols = protocols
        if counted:
            self.protocol_counts.update(set(member.protocol_names()))

    def _uncount(self, member: ClassicMember) -> None:
        counts = self.protocol_counts
        for name in set(member.protocol_names()):
            counts[name] -= 1
            if counts[name] <= 0:
                del counts[name]

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        member = self.members.pop(old_id)
        member.member_id = new_id
        # Keep insertion order stable except for the renamed member.
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id else None
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    # -- protocols --------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, c in self.protocol_counts.items() if c == n}

    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and any(p in self.candidate_protocols() for p in protocols)

    def select_protocol(self) -> str | None:
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        # Each member votes for its most preferred candidate; the most votes wins. Ties go to
        # the protocol the leader prefers, so the choice is deterministic.
        votes = Counter(next(p for p in m.protocol_names() if p in candidates) for m in self.members.values())
        best = max(votes.values())
        leader = self.members.get(self.leader_id) if self.leader_id else next(iter(self.members.values()))
        order = leader.protocol_names() if leader else sorted(candidates)
        for p in order:
            if votes.get(p) == best:
                return p
        return max(votes, key=votes.get)

    # -- persistence ------------------------------------------------------------------------

    def to_record_value(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataValue:
        assignments = assignments if assignments is not None else {}
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=[MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout_ms, m.session_timeout_ms,
                                    m.metadata(self.protocol_name),
                                    assignments.get(m.member_id, m.assignment))
                     for m in self.members.values()],
        )

    @classmethod
    def from_record_value(cls, group_id: str, v: GroupMetadataValue) -> "ClassicGroup":
        g = cls(group_id, generation=v.generation, protocol_type=v.protocol_type or None,
                protocol_name=v.protocol, leader_id=v.leader, state_timestamp=v.current_state_timestamp)
        for mm in v.members:
            m = ClassicMember(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                              mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout,
                              mm.session_timeout, v.protocol_type,
                              [(v.protocol or "", bytes(mm.subscription))], bytes(mm.assignment))
            g.members[m.member_id] = m
            g.protocol_counts.update(set(m.protocol_names()))
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members), None)
        return g
