"""Where a Raft node keeps its election state: epoch, leader and vote.

Raft's safety rests on this being durable before the node acts on it: a node must never vote
twice in one epoch, nor go back to an older epoch, across a crash. ``RaftNode`` calls
``write`` before it answers a vote or follows a new epoch.

``FileQuorumStore`` uses Kafka's ``quorum-state`` file and JSON shape (``QuorumStateData``):
``data_version`` 0 lists ``currentVoters`` (static ``controller.quorum.voters``), 1 (KIP-853,
voters in the log) has ``votedDirectoryId`` instead. Written to a temp file, fsynced, renamed.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.log.checkpoint import write_atomic

QUORUM_STATE_FILE = "quorum-state"
NO_DIRECTORY = uuid.UUID(int=0)


@dataclass(frozen=True)
class ElectionState:
    epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: uuid.UUID = NO_DIRECTORY
    voters: tuple[int, ...] = field(default=())   # data_version 0 only (static voters)


class QuorumStore(Protocol):
    def read(self) -> ElectionState | None:
        """The last state written, or None on a fresh node."""

    def write(self, state: ElectionState) -> None:
        """Durably replace the state (returns once it would survive a crash)."""


class MemoryQuorumStore:
    """Survives a simulated crash because the simulation keeps the object."""

    def __init__(self) -> None:
        self.state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1


class FileQuorumStore:
    def __init__(self, directory: str, cluster_id: str = "", kraft_version: int = 0) -> None:
        self.path = os.path.join(directory, QUORUM_STATE_FILE)
        self.cluster_id = cluster_id
        self.data_version = 1 if kraft_version > 0 else 0

    def read(self) -> ElectionState | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (ValueError, OSError) as e:
            raise ValueError(f"unreadable {self.path}: {e}") from None
        voted_dir = data.get("votedDirectoryId")
        return ElectionState(
            epoch=int(data.get("leaderEpoch", 0)),
            leader_id=int(data.get("leaderId", -1)),
            voted_id=int(data.get("votedId", -1)),
            voted_directory_id=uuid.UUID(voted_dir) if voted_dir else NO_DIRECTORY,
            voters=tuple(int(v["voterId"]) for v in data.get("currentVoters") or ()),
        )

    def write(self, state: ElectionState) -> None:
        data: dict = {"clusterId": self.cluster_id, "leaderId": state.leader_id,
                      "leaderEpoch": state.epoch, "votedId": state.voted_id, "appliedOffset": 0}
        if self.data_version >= 1:
            data["votedDirectoryId"] = str(state.voted_directory_id)
        else:
            data["currentVoters"] = [{"voterId": v} for v in state.voters]
        data["data_version"] = self.data_version
        write_atomic(self.path, json.dumps(data, separators=(",", ":")))
