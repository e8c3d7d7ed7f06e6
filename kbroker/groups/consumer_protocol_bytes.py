"""The "consumer" embedded protocol: the subscription and assignment bytes that classic
consumers put in JoinGroup/SyncGroup (ConsumerProtocolSubscription/Assignment, v0-3).

Needed to see which topics a classic consumer group reads (OffsetDelete, offset expiry,
``kbroker groups describe``) and to show KIP-848 members in DescribeGroups.
"""
from __future__ import annotations

import struct


class _Reader:
    def __init__(self, data: bytes):
        self.b, self.i = bytes(data), 0

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.b, self.i)[0]
        self.i += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.b[self.i:self.i + n].decode()
        self.i += n
        return s

    def array(self, item):
        n = self.take(">i")
        return [item() for _ in range(max(n, 0))]


def subscription_topics(data: bytes) -> set[str]:
    """Topics named in a ConsumerProtocolSubscription; empty if it is not one."""
    try:
        r = _Reader(data)
        r.take(">h")
        return {t for t in r.array(r.string) if t}
    except (struct.error, UnicodeDecodeError):
        return set()


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """topic -> partitions of a ConsumerProtocolAssignment; empty if it is not one."""
    try:
        r = _Reader(data)
        if len(r.b) < 2:
            return {}
        r.take(">h")
        out: dict[str, list[int]] = {}
        for topic, parts in r.array(lambda: (r.string(), r.array(lambda: r.take(">i")))):
            out.setdefault(topic, []).extend(parts)
        return out
    except (struct.error, UnicodeDecodeError):
        return {}


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_subscription(topics: list[str]) -> bytes:
    body = struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics)
    return body + struct.pack(">i", -1)          # null user data


def encode_assignment(assignment: dict[str, list[int]]) -> bytes:
    out = [struct.pack(">hi", 0, len(assignment))]
    for topic, parts in sorted(assignment.items()):
        out.append(_string(topic) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)
