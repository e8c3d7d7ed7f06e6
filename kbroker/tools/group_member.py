"""A consumer-group member for the tools (``console-consumer --group``), on the KIP-848
consumer protocol: the coordinator computes the assignment, so the member only heartbeats,
takes what it is given, gives back what is taken and commits what it read.

Blocking code on ``ToolClient``: ``poll()`` between fetches sends a heartbeat when one is due
and returns the partitions gained (to be read from their committed offsets) and lost (whose
positions were committed before they were released). ``close()`` commits and leaves.
"""

from __future__ import annotations

import base64
import time
import uuid

from kbroker.groups import errors
from kbroker.groups.admin_client import KafkaError
from kbroker.wire.generated.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest

HEARTBEAT_VERSION = 1
LEAVE_EPOCH = -1
# A member that was fenced or forgotten joins again from epoch 0 (its partitions are gone).
REJOIN = (errors.UNKNOWN_MEMBER_ID, errors.FENCED_MEMBER_EPOCH)
# Worth retrying after the coordinator moved or is loading.
RETRY = (errors.NOT_COORDINATOR, errors.COORDINATOR_NOT_AVAILABLE, errors.COORDINATOR_LOAD_IN_PROGRESS)


def new_member_id() -> str:
    """Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class GroupMember:
    def __init__(self, client, group_id: str, topics: list[str], rebalance_timeout_ms: int = 300_000):
        self.c = client
        self.group_id = group_id
        self.topics = list(topics)
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = new_member_id()
        self.epoch = 0
        self.owned: set[tuple[str, int]] = set()
        self.interval_s = 0.0
        self._next_heartbeat = 0.0
        self._coordinator = None
        self._names: dict = {}          # topic id -> name, refreshed when an assignment names a new id

    # -- heartbeats ----------------------------------------------------------------------------

    def poll(self, positions: dict[tuple[str, int], int]):
        """Heartbeat if due; returns (gained, lost) partitions. ``positions`` are this
        member's next offsets, committed for partitions it must give back."""
        if time.monotonic() < self._next_heartbeat:
            return set(), set()
        resp = self._heartbeat(self.epoch)
        self._next_heartbeat = time.monotonic() + self.interval_s
        if resp is None:
            return set(), set()
        if resp.error_code in REJOIN:
            lost, self.owned, self.epoch = set(self.owned), set(), 0
            self._next_heartbeat = 0.0
            return set(), lost
        if resp.error_code:
            raise KafkaError(resp.error_code, f"ConsumerGroupHeartbeat({self.group_id}): {resp.error_message or ''}")
        self.member_id, self.epoch = resp.member_id or self.member_id, resp.member_epoch
        self.interval_s = resp.heartbeat_interval_ms / 1000
        if resp.assignment is None:
            return set(), set()
        if any(tp.topic_id not in self._names for tp in resp.assignment.topic_partitions):
            self._names = {t.topic_id: t.name for t in self.c.metadata(self.topics).topics}
        target = {(self._names[tp.topic_id], p) for tp in resp.assignment.topic_partitions
                  if tp.topic_id in self._names for p in tp.partitions}
        gained, lost = target - self.owned, self.owned - target
        if lost:
            self.commit({tp: off for tp, off in positions.items() if tp in lost})
        self.owned = target
        self._next_heartbeat = 0.0      # acknowledge the new assignment at once
        return gained, lost

    def _heartbeat(self, epoch: int):
        owned: dict = {}
        if epoch > 0:
            ids = {name: tid for tid, name in self._names.items()}
            for t, p in sorted(self.owned):
                owned.setdefault(ids[t], []).append(p)
        TP = ConsumerGroupHeartbeatRequest.TopicPartitions
        req = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch, instance_id=None,
            rack_id=None, rebalance_timeout_ms=self.rebalance_timeout_ms, subscribed_topic_names=self.topics,
            subscribed_topic_regex=None, server_assignor=None,
            topic_partitions=[TP(topic_id=t, partitions=ps) for t, ps in owned.items()])
        resp = self.c.call(req, HEARTBEAT_VERSION, self._coordinator_addr())
        if resp.error_code in RETRY:
            self._coordinator = None
            return None
        return resp

    def _coordinator_addr(self):
        if self._coordinator is None:
            self._coordinator = self.c.coordinator(self.group_id)
        return self._coordinator

    # -- offsets -------------------------------------------------------------------------------

    def committed(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: off for tp, (off, _) in self.c.committed(self.group_id).items() if tp in partitions}

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        """OffsetCommit v9 as this member (the coordinator checks its epoch)."""
        if not offsets:
            return
        codes = self.c.commit(self.group_id, offsets, member=(self.member_id, self.epoch),
                              coordinator=self._coordinator_addr())
        bad = {tp: code for tp, code in codes.items() if code}
        if bad:
            (t, p), code = next(iter(bad.items()))
            raise KafkaError(code, f"OffsetCommit({self.group_id}) of {t}-{p}")

    def close(self, positions: dict[tuple[str, int], int]) -> None:
        """Commit what was read, then leave the group (member epoch -1)."""
        if self.epoch > 0:
            self.commit({tp: off for tp, off in positions.items() if tp in self.owned})
        self._heartbeat(LEAVE_EPOCH)
        self.owned = set()
