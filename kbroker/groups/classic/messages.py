"""Requests and responses of the classic protocol, independent of the wire codec.

Handlers translate the generated Kafka messages to and from these.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1     # v0 has none: Kafka uses the session timeout
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 9                   # v4+ requires a known member id; v9 can skip assignment
    reason: str | None = None

    @property
    def requires_known_member_id(self) -> bool:
        return self.version >= 4


@dataclass
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass
class JoinResponse:
    error: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinMember] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: dict[str, bytes] = field(default_factory=dict)
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass
class SyncResponse:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass
class LeaveMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass
class LeaveResponse:
    error: int
    members: list[tuple[str, str | None, int]] = field(default_factory=list)  # (member id, instance id, error)
