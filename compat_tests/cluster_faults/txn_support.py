"""Helpers of the transaction fault tests: who coordinates a transactional id, its state as
DescribeTransactions reports it, and read_committed / read_uncommitted read-backs."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, TopicPartition

from kbroker.net.client import ClientError, KafkaClient
from kbroker.wire.generated.describe_transactions_request import DescribeTransactionsRequest
from kbroker.wire.generated.find_coordinator_request import FindCoordinatorRequest

TRANSACTION = 1


async def _ask(port: int, request, timeout_s: float = 5.0):
    c = KafkaClient("127.0.0.1", port, request_timeout_ms=int(timeout_s * 1000))
    try:
        return await c.send(request)
    finally:
        await c.close()


def _live_ports(cluster):
    return [n.port for n in cluster.nodes.values() if n.pid is not None]


def coordinator_of(cluster, key: str, key_type: int = 1) -> int:
    """The node id FindCoordinator names for a transactional id (``key_type`` 1) or a group
    (0); -1 if no live broker names one."""
    for port in _live_ports(cluster):
        try:
            r = asyncio.run(_ask(port, FindCoordinatorRequest(key_type=key_type,
                                                              coordinator_keys=[key])))
        except (ClientError, OSError):
            continue
        c = r.coordinators[0]
        if c.error_code == 0:
            return c.node_id
    return -1


def txn_state(cluster, txn_id: str) -> str | None:
    """The id's state ("PrepareCommit", "CompleteCommit" ...) from its coordinator."""
    node = coordinator_of(cluster, txn_id)
    if node < 0 or cluster.nodes[node].pid is None:
        return None
    try:
        r = asyncio.run(_ask(cluster.nodes[node].port,
                             DescribeTransactionsRequest(transactional_ids=[txn_id])))
    except (ClientError, OSError):
        return None
    s = r.transaction_states[0]
    return s.transaction_state if s.error_code == 0 else None


def read_topic(bootstrap: str, topic: str, partitions: int, isolation: str,
               timeout_s: float = 60.0, headers: bool = False) -> dict[int, list[tuple]]:
    """partition -> [(key, value)] (``headers``: (key, value, [(name, value)])) of every
    record visible at ``isolation`` (read_committed: up to the last stable offset), read from
    the start until nothing more comes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": isolation, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list] = {p: [] for p in range(partitions)}
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_eof) < partitions and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                if m.error():
                    if m.error().code() == -191:          # _PARTITION_EOF
                        at_eof.add(m.partition())
                    continue
                at_eof.discard(m.partition())
                out[m.partition()].append((m.key(), m.value(), m.headers() or []) if headers
                                          else (m.key(), m.value()))
        assert len(at_eof) == partitions, f"read of {topic} did not reach the end in {timeout_s} s"
        return out
    finally:
        c.close()
