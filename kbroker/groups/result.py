"""What a coordinator operation hands back to the runtime.

``records`` are to be appended to the group's __consumer_offsets partition; ``replies`` are
(token, response) pairs for requests that were parked earlier (JoinGroup, SyncGroup) or for the
current one; the runtime releases them only after the records are durable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    records: list = field(default_factory=list)
    replies: list[tuple[Any, Any]] = field(default_factory=list)
    response: Any = None   # the answer to the current request, when it is immediate
    producer: tuple[int, int] | None = None   # (id, epoch): records of that producer's transaction

    def add(self, other: "Result | None") -> "Result":
        if other is not None:
            self.records.extend(other.records)
            self.replies.extend(other.replies)
        return self

    def reply(self, token: Any, response: Any) -> None:
        if token is not None:
            self.replies.append((token, response))
