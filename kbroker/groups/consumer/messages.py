"""ConsumerGroupHeartbeat request/response, independent of the wire codec."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None     # None: unchanged since last heartbeat
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: dict[Any, list[int]] | None = None  # owned partitions; None: unchanged
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass
class HeartbeatResponse:
    error: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[Any, list[int]] | None = None
